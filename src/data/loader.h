/* loader.h - the streaming data loader: background threads read whole images from the shards and
 * fill a ring of batches ahead of the training loop, in the sampler's order.
 *
 * Modes:
 *   LOADER_AUGMENT  CPU multi-crop (augment.h); a batch holds the crops crop-major, exactly as the
 *                   model consumes them: global [2][n][C][G][G] (crop 1 of every image, then crop 2)
 *                   and local [n_local][n][C][L][L], C = selected channels.
 *   LOADER_RAW      the raw images [n][C_all][H][W] in the stored dtype, for a backend that augments
 *                   by itself with the same RNG keys (augment_draw).
 * Images that upstream drops (min-max gives NaN: a constant non-zero channel) are left out of
 * their batch in both modes, as upstream's collate_fn does, so n can be below the batch size.
 *
 * Threads: system%loader_threads workers each produce whole batches (one dataset_read_images call,
 * then the crops); the ring holds system%prefetch_batches batches ahead of the one the consumer
 * holds.  Batches are handed out strictly in order.  A batch returned by loader_next stays valid
 * until the next loader_next, loader_start_epoch or loader_destroy. */
#ifndef SCDINO_LOADER_H
#define SCDINO_LOADER_H

#include <stdint.h>

#include "data/augment.h"

struct config;
struct dataset;

enum loader_mode { LOADER_AUGMENT = 0, LOADER_RAW = 1 };

struct loader_batch {
  int64_t epoch, batch; /* which batch of which epoch */
  int n;                /* images in the batch */
  int n_dropped;        /* images left out (NaN after min-max) */
  int64_t *index;       /* [n] global sample indices */
  /* LOADER_AUGMENT */
  int channels, global_size, local_size, n_local;
  float *global; /* [2][n][channels][global_size][global_size] */
  float *local;  /* [n_local][n][channels][local_size][local_size] */
  /* LOADER_RAW */
  void *raw;     /* [n][C_all][H][W], dtype as dataset_dtype() */
  /* Accounting */
  double fill_seconds; /* worker time spent reading and augmenting this batch */
  double read_seconds; /* of which reading */
  double flops;        /* augmentation operations */
  double wait_seconds; /* how long loader_next waited for it */
};

struct loader;

/* This rank's loader (rank and world size from comm.h).  train_idx (copied) are the global indices
 * of the training split; batch_size: images per batch (the trainer's batch per rank); the seed is
 * control%seed. */
struct loader *loader_create(const struct config *cfg, struct dataset *ds, const int64_t *train_idx,
                             int64_t n_train, int batch_size, enum loader_mode mode);
/* Same for an explicit rank and world size (tests simulate ranks in one process). */
struct loader *loader_create_ranked(const struct config *cfg, struct dataset *ds,
                                    const int64_t *train_idx, int64_t n_train, int batch_size,
                                    enum loader_mode mode, int rank, int world);
void loader_destroy(struct loader *l); /* also mid-epoch: waits for batches in progress, frees all */

int64_t loader_batches_per_epoch(const struct loader *l);
/* Begin epoch `epoch` at batch first_batch (> 0 to resume inside an epoch).  Batches still being
 * prepared for a previous epoch are finished and discarded. */
void loader_start_epoch(struct loader *l, int64_t epoch, int64_t first_batch);
/* The next batch of the epoch, waiting if it is not ready; NULL after the last one. */
const struct loader_batch *loader_next(struct loader *l);

/* Total seconds loader_next spent waiting (the training log's "data" time). */
double loader_wait_seconds(const struct loader *l);
/* The channel selection, normalisation and crop settings in use (also in RAW mode). */
const struct augment *loader_augment(const struct loader *l);

#endif
