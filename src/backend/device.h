/* device.h - what backend selection hands the layers above it: a compute backend's op table, its
 * gradient communicators, and the services only some backends offer.
 *
 * train/ and analysis/ see a backend only through struct device: they ask whether a service is
 * there (dev->crops != NULL), never a backend's name, and include no header of cuda/.  A NULL
 * service means the backend has none, and the caller does that work its own way (on the host):
 *
 *   crops          the multi-crop augmentation from raw batches, on the device (the CPU backend:
 *                  NULL, the loader threads make the crops)
 *   features_prep  calculation='features': the raw images prepared (channels, min-max, bilinear
 *                  resize, normalisation) on the device, the CPU's input bit for bit
 *   knn            the kNN neighbour selection of similarity tiles on the device
 *   memory         the device's own memory (NULL: the backend computes in host memory)
 *   report         an end-of-run report (the CUDA backend: what &gpu gemm_tune chose)
 *
 * The CPU backend's device has none of them; the CUDA backend's (device_cuda.c, CUDA builds) has
 * all.  backend.h makes them. */
#ifndef SCDINO_DEVICE_H
#define SCDINO_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "data/augment.h"
#include "model/grad_comm.h"
#include "model/ops.h"

struct shard_plan;
struct augment_gpu;  /* the device's crop maker (opaque) */
struct features_gpu; /* the device's image preparation (opaque) */

/* The multi-crop augmentation on the device, from raw batches: the loader runs in LOADER_RAW mode
 * and the crops are CPU's augment_image crops bit for bit.  The calls are those of
 * cuda/data/augment_gpu.h, which says what each one does. */
struct device_crops {
  /* For batches of up to max_batch raw images of the shape and dtype a describes. */
  struct augment_gpu *(*create)(const struct augment *a, int max_batch);
  void (*destroy)(struct augment_gpu *g);
  /* Start making the crops of n raw images (host, [n][C_all][H][W]) of epoch; index: the images'
   * global sample indices.  raw and index may be reused on return. */
  void (*start)(struct augment_gpu *g, const void *raw, const int64_t *index, int n, int64_t epoch);
  /* The crops of the batch started last, for the ops queued from here on: [2][n][C][G][G] and
   * [n_local][n][C][L][L] (device, owned by g). */
  void (*take)(struct augment_gpu *g, float **global, float **local);
  /* Before a start that should hide behind the work queued so far. */
  void (*mark)(struct augment_gpu *g);
  /* Seconds the crops kept the ops waiting since the last call (exposed data time). */
  double (*exposed_seconds)(struct augment_gpu *g);
};

/* An image preparation for features_prep: raw images [C_all][H][W] of dtype (DATASET_U16 or
 * DATASET_F32, data/shards.h) -> [nsel][oh][ow] float32; the channels sel, their mean and std
 * (normalize), the bilinear taps (2 per output row: ih, wh; per column: iw, ww).  The arrays are
 * copied by create. */
struct device_image_prep {
  int C_all, H, W, dtype;
  const int *sel;
  int nsel;
  const double *mean, *std;
  int normalize;
  int oh, ow;
  const int *ih, *iw;
  const double *wh, *ww;
};

/* calculation='features' on the device: min-max, the bilinear resize and the normalisation of raw
 * batches in float64, rounded as features_prep_image rounds them. */
struct device_features_prep {
  /* For batches of up to max_batch images. */
  struct features_gpu *(*create)(const struct device_image_prep *p, int max_batch);
  void (*destroy)(struct features_gpu *g);
  /* Queue the preparation of n raw images (host, reusable on return) into dst (device float32
   * [n][nsel][oh][ow]), in the ops' order. */
  void (*prep)(struct features_gpu *g, const void *raw, int n, float *dst);
  /* The FEATURES_PREP_* results of the last prep's n images (waits for them). */
  void (*status)(struct features_gpu *g, int8_t *status, int n);
};

/* The kNN neighbour selection on the device, in the ops' order (analysis/knn_lists.h's rules). */
struct device_knn {
  int max_k; /* the largest list it keeps per row (larger k: the CPU's selection) */
  /* Empty lists: s[i] = -infinity, pos[i] = INT32_MAX for the n entries (device). */
  void (*lists_clear)(float *s, int32_t *pos, int64_t n);
  /* For each of the rows of sim [rows][ld] (device: the similarities of reference rows col0 ..
   * col0 + ncols - 1), keep in s/pos [rows][kmax] (device, nearest first) the kmax nearest of the
   * list and the row's columns. */
  void (*topk)(const float *sim, int64_t rows, int ncols, int64_t ld, int col0, int kmax, float *s,
               int32_t *pos);
};

struct device {
  const char *name;      /* "cpu", "cuda": for the log, messages and metric labels only */
  const struct ops *ops; /* the op table (model/ops.h) */
  /* The gradient all-reduce communicator for ops. */
  struct grad_comm *(*grad_comm)(const struct device *dev);
  /* The sharded optimizer's reduce-scatter communicator over plan's slices (&training
   * shard_optimizer); NULL: the backend has none in this build (CUDA without NCCL). */
  struct grad_comm *(*grad_comm_shard)(const struct device *dev, const struct shard_plan *plan);
  int shard_in_place; /* grad_comm_shard sums in the gradient buffer itself: no slice received apart */
  /* Optional services (NULL: none; see above). */
  const struct device_crops *crops;
  const struct device_features_prep *features_prep;
  const struct device_knn *knn;
  /* Bytes the backend's allocations hold now and at most so far, and the device's free and total
   * bytes (any pointer may be NULL). */
  void (*memory)(size_t *in_use, size_t *peak, size_t *dev_free, size_t *dev_total);
  void (*report)(void);
};

#endif
