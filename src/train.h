/* train.h - calculation='train': the DINO training loop over MPI ranks (train_run is in calc.h).
 *
 * Per step (SCDINO_ALGORITHM sections 4-7): schedules at the global iteration, teacher on the two
 * global crops, student on all crops, DINO loss and centre update, backward with the gradient
 * all-reduce started per block (grad_comm.h), clipping, last-layer freezing, AdamW, teacher EMA.
 * A checkpoint (checkpoint.h) is written after every epoch and whenever the run stops early
 * (max_steps, train_request_stop).
 *
 * restart = .true. continues from run_dir/checkpoint.h5 when it exists (a fresh start otherwise),
 * bit-identically to an uninterrupted run on the same number of ranks with the same batch size.
 * On another rank count or batch size the run continues correctly but not bit-identically: the
 * schedules are recomputed for the new iterations per epoch and indexed by epoch * niter +
 * iteration, and a position inside an epoch keeps its share of the epoch (iteration scaled by the
 * ratio of iterations per epoch).  init_from takes only the weights and starts at epoch 0. */
#ifndef SCDINO_TRAIN_H
#define SCDINO_TRAIN_H

#include "config.h"

int train_run(const struct config *cfg);

/* Ask the loop to stop after the step in progress, write a checkpoint of that position and return
 * 0 (the run continues with restart = .true.).  Async-signal-safe: it only sets a flag, which the
 * ranks combine after every step, so all of them stop at the same step. */
void train_request_stop(void);
/* Whether the last train_run stopped early on such a request (the same answer on every rank):
 * calculation='pipeline' then ends too, with status 0, instead of going on to the features. */
int train_stopped(void);

#endif
