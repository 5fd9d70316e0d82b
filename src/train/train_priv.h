/* train_priv.h - the training loop's state, shared by train.c (set-up and epochs), train_step.c (one
 * iteration) and train_log.c (progress lines, log.txt). */
#ifndef SCDINO_TRAIN_PRIV_H
#define SCDINO_TRAIN_PRIV_H

#include <limits.h>
#include <signal.h>
#include <stdint.h>

#include "backend/device.h"
#include "core/check.h"
#include "data/loader.h"
#include "data/split.h"
#include "input/config.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/grad_comm.h"
#include "model/loss_scale.h"
#include "model/optim.h"
#include "model/shard_plan.h"
#include "train/checkpoint.h"

struct dataset;
struct augment_gpu;

/* What one iteration reports (the sums are over all ranks). */
struct step_result {
  double loss_local;  /* this rank's batch loss (NaN when its batch was empty) */
  double loss_sum;    /* sum of the ranks' finite losses */
  int64_t loss_ranks; /* ranks that had images */
  int64_t images;     /* images in the step, all ranks */
  int nonfinite;      /* ranks whose loss was not finite */
  int stop;           /* some rank was asked to stop (a signal: signals_received) */
  int bad_grad;       /* first tensor (table order) whose averaged gradient is not finite; -1 none */
  int skipped;        /* fp16: the step was skipped (non-finite gradients at its loss scale) */
  double lr, wd, momentum;
  double comm_s;      /* seconds blocked in communication */
  double data_s;      /* seconds the GPU augmentation kept the GPU idle (exposed, not hidden) */
  struct dino_stats diag; /* the teacher targets' entropies (NaN when the step had no images) */
};

/* Accumulated timings for the progress line. */
struct train_window {
  double t0;          /* wall time at the start of the window */
  double data_s, comm_s;
  int64_t steps, images;
};

struct trainer {
  const struct config *cfg;
  const struct device *dev;  /* the backend (backend/device.h) */
  const struct ops *ops;     /* dev->ops */
  struct grad_comm *gc;
  int rank, world;
  /* data */
  struct dataset *ds;
  struct split split;
  struct loader *loader;
  int nchannels;
  int channels[CKPT_MAX_CHANNELS];
  float *dev_global, *dev_local; /* device copies of a batch's crops */
  struct augment_gpu *ag;        /* the device's crops from raw batches (dev->crops), else NULL */
  const struct loader_batch *next_b; /* the next batch, fetched by the step before (GPU augmentation) */
  int prefetched;                /* its crops are being made on the device (dev->crops->start) */
  /* model and optimisation */
  struct dino_model *model;
  struct dino_loss loss;
  struct optim opt;
  struct loss_scale ls;          /* fp16's dynamic loss scale (inert otherwise): loss and optimizer share it */
  struct shard_plan plan;        /* &training shard_optimizer: the ranks' slices (world 0: unsharded) */
  int64_t B, niter, epochs, total_steps;
  double *lr_sched, *wd_sched, *mom_sched;
  double lr_peak;
  /* position, metrics and checkpoints */
  struct ckpt_state ck;
  char ckpt_path[PATH_MAX];
  char last_good[PATH_MAX]; /* newest checkpoint written or restored ("" = none) */
  char restart_changes[CKPT_CHANGES_MAX]; /* what restarts changed on the way (checkpoint record) */
  double last_ckpt_time;    /* wtime() of the newest checkpoint written or restored (0: none) */
  char metrics_failing[PATH_MAX + 256]; /* why the metrics file is not written ("" while it is) */
  int64_t metrics_missed;    /* its updates not written since it last was */
  long long bytes_at_epoch; /* dataset_bytes_delivered at the start of the epoch's count */
  int64_t launch_steps;      /* steps done by this launch (max_steps) */
  double *gnorms;            /* per-tensor gradient norms of the last step (non-finite detection) */
  int nan_pending;           /* &debug: tensor whose gradient still gets a NaN this step; -1 none */
  /* timing */
  struct train_window win;
  double t_launch, epoch_t0;
  int64_t first_step;        /* global step this launch started at (for the ETA) */
  int diag_warned;           /* failure modes warned of by this launch (train_diag.c) */
};

/* An epoch's collapse diagnostics (doc/algorithm.md §4.5), in nats. */
struct train_diag {
  double entropy;       /* mean over the steps of the teacher targets' mean entropy */
  double batch_entropy; /* mean over the steps of the entropy of the step's mean target */
  double kl;            /* the epoch's loss minus entropy: the KL part of the loss */
  double center_norm;   /* ||centre||_2 at the epoch's end */
  double ln_k;          /* ln out_dim: the entropy of uniform targets */
};

/* One iteration on batch b at (epoch, it): schedules, forward, loss, centre, backward with the
 * bucketed all-reduce, clipping, freezing, AdamW, EMA.  Every rank calls it once per iteration. */
void train_step(struct trainer *t, const struct loader_batch *b, int64_t epoch, int64_t it,
                struct step_result *r);

/* Numerical faults (train_guard.c).  After the update: r->bad_grad from t->gnorms, agreed by all
 * ranks; under fp16's loss scale a step skipped for them (r->skipped) is not a fault unless its
 * scale was LOSS_SCALE_FLOOR or less. */
void train_guard_check_grads(struct trainer *t, struct step_result *r);
/* A non-finite loss (r->nonfinite) or gradient (r->bad_grad >= 0): rank 0 names the step, the
 * first bad tensor (for a loss: the first non-finite weight, if any) and the last good checkpoint;
 * every rank exits with status 1. */
SCD_NORETURN void train_guard_fail(const struct trainer *t, int64_t epoch, int64_t it, const struct step_result *r);
/* The first tensor of buf (device memory laid out by tt) holding a NaN or infinity, or -1. */
int train_guard_first_nonfinite(const struct ops *ops, const struct tensor_table *tt, const float *buf);

/* Start-up summary (model, data, batch, schedules). */
void train_log_setup(const struct trainer *t);
/* Progress line every log_every steps (and at the last step of an epoch). */
void train_log_progress(struct trainer *t, int64_t epoch, int64_t it, const struct step_result *r);
/* End of an epoch: "Averaged stats" line and a JSON line in run_dir/log.txt (rewritten atomically,
 * lines of later epochs from an abandoned run dropped). */
void train_log_epoch(struct trainer *t, int64_t epoch);

/* train_diag.c: the epoch's diagnostics into d (loss: the epoch's mean loss), their log line, and a
 * warning when the epoch shows uniform targets or a collapse to one prototype.  Every rank. */
void train_diag_epoch(struct trainer *t, int64_t epoch, double loss, struct train_diag *d);

/* train_metrics.c: with &system metrics_file set, every rank gives its memory and rank 0 rewrites
 * the file (Prometheus text format): epoch, step, loss, lr, wd, the teacher-target diagnostics,
 * images/s, data / compute / exposed comm seconds per step, memory per rank (and GPU), checkpoint
 * age.  Collective; called with each progress line, before the window is reset.  Best effort: a
 * write that fails is warned of and tried again at the next progress line; training goes on. */
void train_metrics_write(struct trainer *t, int64_t epoch, int64_t step, double loss, const struct step_result *r);

/* train_memory.c: the memory the run needs per rank (loader, schedules, model, activations; the
 * device's apart on a GPU) against &system memory_per_rank and the GPU's memory; over it, the job
 * ends at once naming the keys (core/membudget.h).  Needs t->ds, t->split, t->B, t->epochs. */
void train_memory_check(const struct trainer *t);

/* restart_check.c: compare this deck with the echoed deck of the checkpoint a restart continues
 * from (old_echo), and this run's arithmetic (ops->arithmetic) with the checkpoint's (old_arith,
 * "" when unrecorded); refuse (exit 2) changed keys that define what is trained, warn about the
 * others that change the results and list them in changes ("lr 0.05 -> 0.04; epochs 2 -> 3", ""
 * when none; size nchanges) for the checkpoints' record. */
void restart_check_deck(const char *ckpt, const char *old_echo, const struct config *cfg, const char *old_arith,
                        const struct ops *ops, char *changes, size_t nchanges);

#endif
