/* train_priv.h - the training loop's state, shared by train.c (set-up and epochs), train_step.c (one
 * iteration) and train_log.c (progress lines, log.txt). */
#ifndef SCDINO_TRAIN_PRIV_H
#define SCDINO_TRAIN_PRIV_H

#include <limits.h>
#include <signal.h>
#include <stdint.h>

#include "checkpoint.h"
#include "config.h"
#include "dino_loss.h"
#include "dino_model.h"
#include "grad_comm.h"
#include "loader.h"
#include "optim.h"
#include "split.h"

struct dataset;
struct augment_gpu;

/* Set by train_request_stop (train.c). */
extern volatile sig_atomic_t train_stop_requested;

/* What one iteration reports (the sums are over all ranks). */
struct step_result {
  double loss_local;  /* this rank's batch loss (NaN when its batch was empty) */
  double loss_sum;    /* sum of the ranks' finite losses */
  int64_t loss_ranks; /* ranks that had images */
  int64_t images;     /* images in the step, all ranks */
  int nonfinite;      /* ranks whose loss was not finite */
  int stop;           /* some rank was asked to stop (train_request_stop) */
  double lr, wd, momentum;
  double comm_s;      /* seconds blocked in communication */
};

/* Accumulated timings for the progress line. */
struct train_window {
  double t0;          /* wall time at the start of the window */
  double data_s, comm_s;
  int64_t steps, images;
};

struct trainer {
  const struct config *cfg;
  const struct ops *ops;
  struct grad_comm *gc;
  int rank, world;
  /* data */
  struct dataset *ds;
  struct split split;
  struct loader *loader;
  int nchannels;
  int channels[CKPT_MAX_CHANNELS];
  float *dev_global, *dev_local; /* device copies of a batch's crops */
  struct augment_gpu *ag;        /* GPU augmentation from raw batches (CUDA backend), else NULL */
  /* model and optimisation */
  struct dino_model *model;
  struct dino_loss loss;
  struct optim opt;
  int64_t B, niter, epochs, total_steps;
  double *lr_sched, *wd_sched, *mom_sched;
  double lr_peak;
  /* position, metrics and checkpoints */
  struct ckpt_state ck;
  char ckpt_path[PATH_MAX];
  char last_good[PATH_MAX]; /* newest checkpoint written or restored ("" = none) */
  int64_t launch_steps;      /* steps done by this launch (max_steps) */
  /* timing */
  struct train_window win;
  double t_launch, epoch_t0;
  int64_t first_step;        /* global step this launch started at (for the ETA) */
};

/* One iteration on batch b at (epoch, it): schedules, forward, loss, centre, backward with the
 * bucketed all-reduce, clipping, freezing, AdamW, EMA.  Every rank calls it once per iteration. */
void train_step(struct trainer *t, const struct loader_batch *b, int64_t epoch, int64_t it,
                struct step_result *r);

/* Start-up summary (model, data, batch, schedules). */
void train_log_setup(const struct trainer *t);
/* Progress line every log_every steps (and at the last step of an epoch). */
void train_log_progress(struct trainer *t, int64_t epoch, int64_t it, const struct step_result *r);
/* End of an epoch: "Averaged stats" line and a JSON line in run_dir/log.txt (rewritten atomically,
 * lines of later epochs from an abandoned run dropped). */
void train_log_epoch(const struct trainer *t, int64_t epoch);

#endif
