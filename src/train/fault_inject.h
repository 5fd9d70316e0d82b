/* fault_inject.h - the &debug deck group: faults injected on purpose, so the tests can check that
 * preemption, numerical faults and rank failures end the way the documentation says.  Nothing here
 * does anything unless the deck sets a &debug key. */
#ifndef SCDINO_FAULT_INJECT_H
#define SCDINO_FAULT_INJECT_H

#include <stdint.h>

#include "input/config.h"
#include "model/tensor.h"

/* Check the &debug keys against the run (nan_tensor names a trainable tensor of tt); collective-free,
 * every rank sees the same deck. */
void fault_inject_setup(const struct config *cfg, const struct tensor_table *tt);
/* At the start of global step `step` on this rank: raise the signal, fail, sleep as asked. */
void fault_inject_step(const struct config *cfg, int64_t step);
/* Index of the tensor whose gradient gets a NaN at this step on this rank, or -1. */
int fault_inject_nan_tensor(const struct config *cfg, int64_t step);
/* In a checkpoint write, half of the file written: pause as asked (first write of the launch only). */
/* Whether this step's input batch gets a NaN in its first pixel on this rank (nan_tensor = 'input'). */
int fault_inject_nan_input(const struct config *cfg, int64_t step);
void fault_inject_checkpoint_pause(const struct config *cfg, const char *tmp_path);

#endif
