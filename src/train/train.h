/* train.h - calculation='train': the DINO training loop over MPI ranks (train_run).
 *
 * Per step (doc/algorithm.md §4-7): schedules at the global iteration, teacher on the two
 * global crops, student on all crops, DINO loss and centre update, backward with the gradient
 * all-reduce started per block (grad_comm.h), clipping, last-layer freezing, AdamW, teacher EMA.
 * A checkpoint (checkpoint.h) is written after every epoch and whenever the run stops early
 * (max_steps, or SIGTERM / SIGUSR1 / SIGINT: core/signals.h).
 *
 * restart = .true. continues from run_dir/checkpoint.h5 when it exists (a fresh start otherwise),
 * bit-identically to an uninterrupted run on the same number of ranks with the same batch size.
 * On another rank count or batch size the run continues correctly but not bit-identically: the
 * schedules are recomputed for the new iterations per epoch and indexed by epoch * niter +
 * iteration, and a position inside an epoch keeps its share of the epoch (iteration scaled by the
 * ratio of iterations per epoch).  init_from takes only the weights and starts at epoch 0. */
#ifndef SCDINO_TRAIN_H
#define SCDINO_TRAIN_H

#include "input/config.h"

int train_run(const struct config *cfg);

/* Whether the last train_run stopped early on a signal (the same answer on every rank):
 * calculation='pipeline' then ends too, with status 0, instead of going on to the features. */
int train_stopped(void);

/* DINO's two failure modes as an epoch's mean loss and teacher-target entropies show them (nats;
 * doc/algorithm.md §4.5): uniform targets (the teacher does not sharpen) and a collapse to one
 * prototype (every image gets the same target).  A mask of TRAIN_DIAG_*; 0 when neither. */
enum { TRAIN_DIAG_UNIFORM = 1, TRAIN_DIAG_ONE_PROTOTYPE = 2 };
int train_diag_failure(double loss, double entropy, double batch_entropy, long long out_dim);
/* The batch-mean entropy below which the targets count as collapsed to one prototype. */
double train_diag_collapse_threshold(long long out_dim);
/* One line naming the deck keys that usually cure the failure modes of mask (a TRAIN_DIAG_* mask). */
const char *train_diag_cure(int mask);

#endif
