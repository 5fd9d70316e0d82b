/* features.h - CLS features of a backbone for images of the shard set (calculation='features').
 *
 * Preprocessing (doc/algorithm.md §8.1, upstream compute_CLS_features.py), in float64 as upstream
 * (it converts to float64 before its transforms and to float32 only for the forward):
 *   raw image -> selected channels -> per-image, per-channel min-max to [0, 1]
 *   -> bilinear resize of the smaller edge to `resize` (align_corners=False, no antialias; the
 *      longer edge int(resize * long / short), as torchvision Resize(int); 0 = no resize)
 *   -> (x - mean_c) / std_c (features.normalize) with the statistics features.normalization
 *      chooses: the training set's (recorded in the checkpoint), the shard set's, or given values
 *      (features_input.c)
 *   -> float32 -> backbone -> CLS after the final norm (with &features n_last_blocks /
 *      avgpool_patchtokens: the CLS of the last n blocks and the mean patch token, concatenated)
 *   -> L2-normalised.
 * The centre crop (data.center_crop) was applied by prepare when the shards were written.
 * Resizing in float64 also sidesteps PyTorch's separate float32 bilinear kernel for one-channel
 * tensors: in float64 every channel count goes through the same arithmetic.
 *
 * Deviations from upstream, on purpose:
 *  - A constant non-zero channel (min-max gives 0/0) becomes 0, as an all-zero channel already
 *    does, and the image keeps its own features (upstream substitutes dataset sample 0, so the
 *    features file gets duplicate rows under another image's label).  Such images are counted.
 *  - An image with non-finite pixels (float32 shards) is left out of the features file and
 *    named in a warning (training drops it too).
 *  - Rows are in ascending global-index order, with labels and paths in the same file. */
#ifndef SCDINO_FEATURES_H
#define SCDINO_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "backend/device.h"
#include "input/config.h"
#include "model/ops.h"
#include "model/tensor.h"
#include "model/vit.h"

struct dataset;
struct features;
struct features_stream;

#define FEATURES_MAX_CHANNELS 64

/* ---- what feeds the network (features_input.c) ----------------------------------------------- */

/* The shard set's channels that feed a network, in the order of its input channels, and the
 * per-channel mean/std that normalise them (doc/algorithm.md §8.1). */
struct features_input {
  int nsel, sel[FEATURES_MAX_CHANNELS]; /* source channels of the shard set */
  double mean[FEATURES_MAX_CHANNELS], std[FEATURES_MAX_CHANNELS];
  int normalize;                        /* features.normalize: whether mean/std are applied */
  char how[16];                         /* "checkpoint", "data", "values"; "none" without normalize */
};

/* data.channels (empty: all) with the shard set's own statistics: the input of a network that no
 * checkpoint describes.  Bad channel numbers, or a zero standard deviation where normalize is
 * set, end the job naming the key or the manifest. */
void features_input_data(struct features_input *in, const struct config *cfg, const struct dataset *ds,
                         int normalize);
/* Collective: the input of the network of `checkpoint` on the shard set ds.  Channels: those of
 * features.channel_map when given, else data.channels, whose names must be the ones the checkpoint
 * records (a checkpoint without names: its channel indices must be data.channels); a mismatch ends
 * the job (exit 2) naming both lists, unless &model use_mean_patch_embedding / custom_embedding_map
 * feed the network other channels on purpose.  Statistics: features.normalization ('auto':
 * 'data' when ds is the shard set the checkpoint was trained on or it records none, else
 * 'checkpoint'); 'checkpoint' without recorded statistics ends the job naming what to give
 * instead.  Logs "<what>: normalisation '<how>' (...)" with the values. */
void features_input_choose(struct features_input *in, const struct config *cfg, const struct dataset *ds,
                           const char *checkpoint, const char *what);

/* ---- preprocessing (features_prep.c) --------------------------------------------------------- */

struct features_prep {
  int C_all, H, W, dtype; /* stored images (dtype: DATASET_U16 / DATASET_F32) */
  int nsel, sel[FEATURES_MAX_CHANNELS];
  double mean[FEATURES_MAX_CHANNELS], std[FEATURES_MAX_CHANNELS];
  int normalize;
  double progress_seconds; /* between progress lines (control.progress_seconds) */
  double memory_per_rank;  /* GiB, &system memory_per_rank (0: the node's share) */
  int oh, ow; /* after the resize */
  int *ih, *iw;      /* bilinear taps: 2 per output row / column */
  double *wh, *ww;
  /* Optional (NULL: features_prep_image): prepares each image instead, on the host, into oh x ow
   * (the linear probe's augmented crops, linear/linear_aug.c); sample is the image's global index,
   * work holds features_prep_work_size(p) doubles; returns a FEATURES_PREP_* result. */
  int (*image)(const struct features_prep *p, const void *raw, int64_t sample, float *dst, double *work);
  const void *image_ctx; /* the caller's, for image */
};

/* Result of preparing one image. */
enum { FEATURES_PREP_OK = 0, FEATURES_PREP_FLAT = 1, FEATURES_PREP_NONFINITE = -1 };

/* torchvision Resize(size) with an int: the smaller edge becomes size, the longer one
 * int(size * long / short); size 0 keeps H x W. */
void features_resize_shape(int H, int W, int size, int *oh, int *ow);
/* The images of ds prepared as in says (channels, statistics, normalisation), resized to resize. */
void features_prep_init(struct features_prep *p, const struct config *cfg, const struct dataset *ds,
                        const struct features_input *in, int resize);
/* The same from explicit values (mean, std NULL: 0 and 1). */
void features_prep_setup(struct features_prep *p, int C_all, int H, int W, int dtype, const int *sel, int nsel,
                         const double *mean, const double *std, int resize, int normalize);
void features_prep_free(struct features_prep *p);
/* Doubles of scratch features_prep_image needs. */
size_t features_prep_work_size(const struct features_prep *p);
/* raw [C_all][H][W] -> dst [nsel][oh][ow] float32.  Returns FEATURES_PREP_OK, FEATURES_PREP_FLAT
 * (a constant channel was set to 0) or FEATURES_PREP_NONFINITE (dst zeroed). */
int features_prep_image(const struct features_prep *p, const void *raw, float *dst, double *work);
/* The steps of features_prep_image, for preparations of other geometry (linear/linear_aug.c):
 * the min-max of each selected channel (lo[s], range[s] after upstream's rule for flat channels;
 * FEATURES_PREP_NONFINITE when a pixel is not finite, else FLAT or OK as features_prep_image);
 * channel s of raw scaled to [0, 1] into dst [H][W] (zeros for a flat channel); PyTorch's bilinear
 * taps of a double tensor (2 per output, align_corners=False) for in -> out; and the bilinear
 * resample of the region (top, left) of src [..][W] with such taps into out [oh][ow]. */
int features_prep_minmax(const struct features_prep *p, const void *raw, double *lo, double *range);
void features_prep_scaled(const struct features_prep *p, const void *raw, int s, double lo, double range,
                          double *dst);
void features_bilinear_taps(int in, int out, int *idx, double *w);
void features_bilinear(const double *src, int W, int top, int left, const int *ih, const double *wh, int oh,
                       const int *iw, const double *ww, int ow, double *out);

/* ---- networks (features.c) ------------------------------------------------------------------- */

/* A backbone ready for inference: its tensor table, the ViT and the weights on the device. */
struct features_net {
  const struct device *dev; /* the backend (backend/device.h) */
  const struct ops *ops;    /* dev->ops */
  struct tensor_table tt;
  struct vit vit;
  float *params;          /* device, tt.size floats */
  char source[1024];      /* checkpoint path, or "random init" */
  char key[16];           /* "teacher", "student" or "random" */
  int64_t epoch;          /* the checkpoint's epoch (-1: none) */
  /* What a row of features_compute holds (features_net_layout; defaults 1, 0, 1): the CLS tokens of
   * the last n_last_blocks blocks through the final norm, earliest first, then with avgpool the
   * mean of the last block's normed patch tokens, each part D wide (DINO eval_linear's features;
   * doc/algorithm.md §8.1); l2: the whole row L2-normalised (the features file), else as computed
   * (the linear probe). */
  int n_last_blocks, avgpool, l2;
};

/* Set what a row holds; n_last_blocks above the network's depth ends the job (exit 2) naming
 * `key` (the deck key that asked for it). */
void features_net_layout(struct features_net *n, int n_last_blocks, int avgpool, int l2, const char *key);
/* Values in a row: (n_last_blocks + avgpool) * embed_dim. */
int features_net_width(const struct features_net *n);

/* The backbone of network `key` ("teacher" | "student") of a checkpoint, of dimensions d
 * (features_checkpoint_dims); emb (NULL: none) adapts a patch embedding of another channel count
 * (&model use_mean_patch_embedding, custom_embedding_map). */
struct ckpt_embed;
void features_net_load(struct features_net *n, const struct device *dev, const struct vit_dims *d,
                       const struct ckpt_embed *emb, const char *checkpoint, const char *key);
/* A freshly initialised backbone of the given dimensions: the training's initial weights for
 * that seed (init.h: the backbone tensors come first in the table, so their streams are those of
 * the full model). */
void features_net_random(struct features_net *n, const struct device *dev, const struct vit_dims *d,
                         uint64_t seed);
void features_net_free(struct features_net *n);

/* Rank r's rows of n are features_share_lo(n, unit, r, size) .. features_share_lo(n, unit, r + 1,
 * size) - 1: contiguous runs of whole units (batches) of the global row order. */
int64_t features_share_lo(int64_t n, int64_t unit, int rank, int size);
/* Collective: collect every rank's share of n rows (rowbytes each; shares as features_share_lo)
 * into full, in row order, on rank 0 (all_ranks = 0) or on every rank.  A receiving rank has its
 * own rows in place in full; a rank that only sends passes them in `mine`. */
void features_gather_rows(void *full, const void *mine, int64_t n, int64_t unit, size_t rowbytes, int all_ranks);

/* ---- the features file written while it is computed (features_stream.c) -------------------- */

/* Collective.  Rank 0 creates path's temporary file with a 'features' dataset of n rows of D, and
 * writes every row handed to features_stream_rows on any rank: other ranks send theirs to rank 0
 * batch by batch (at most two batches in flight each), and rank 0 writes what has arrived whenever
 * it hands over rows of its own.  `batch` is the features_share_lo unit of the rows. */
struct features_stream *features_stream_open(const char *path, int64_t n, int D, int batch);
/* Rows [row0, row0 + cnt) of the global row order (at most one batch, this rank's own). */
void features_stream_rows(struct features_stream *s, int64_t row0, int64_t cnt, const float *rows);
/* Rank 0 writes the rows that have arrived (others: nothing). */
void features_stream_poll(struct features_stream *s);
/* Collective: every row handed over is written (rank 0) or sent (others). */
void features_stream_drain(struct features_stream *s);
/* Collective: rank 0 keeps the rows with keep[i] != 0 (in order; meta->n of them), writes meta
 * (features_write_meta) and renames the file to path; the others pass NULLs.  Frees s. */
void features_stream_close(struct features_stream *s, const struct features *meta, const unsigned char *keep);

/* Collective: the features of net (rows as features_net_layout says) for the images idx[0..n-1]
 * of ds, computed in batches of `batch` rows of idx, whole batches per rank (so the values do not
 * depend on the number of ranks).  With a stream (features_stream_open with the same n and batch) each batch
 * goes to the stream as it is done and nothing is kept (returns NULL; the stream is drained on
 * return); else the rows are gathered in idx order on rank 0 (all_ranks = 0) or on every rank.
 * status (NULL: not wanted; else [n], filled where the features are) gets the FEATURES_PREP_*
 * result of each image; a non-finite image has a zero row.  Progress with an ETA is logged under
 * `what`.  Returns [n][features_net_width] malloc'd, NULL where not gathered. */
float *features_compute(const struct features_net *net, const struct features_prep *prep,
                        struct dataset *ds, const int64_t *idx, int64_t n, int batch, int all_ranks,
                        struct features_stream *stream, int8_t *status, const char *what);

/* ---- calculation='features' and the random-init baseline (features_run.c) -------------------- */

/* calculation = 'features' (every rank); returns the exit status. */
int features_run(const struct config *cfg);
/* What features_run does: every rank gets the path of the file written. */
void features_extract(const struct config *cfg, char *path, size_t n);
/* Checkpoint the deck names: features.checkpoint, else run_dir/checkpoint.h5. */
void features_checkpoint_path(const struct config *cfg, char *buf, size_t n);
/* Collective: the backbone dimensions of a checkpoint (its recorded hyperparameters, else the
 * deck's &model for the selected channels), checked against the channel count of prep (whose
 * channels features_input_choose matched to the checkpoint's) and against every &model key the
 * deck sets itself (a contradiction ends the job with exit 3 naming
 * the key and both values; keys left at their defaults take the checkpoint's values).  The
 * checkpoint and the manifest become inputs of the run (fs_input_add: no output replaces them).
 * *epoch gets the number of its last finished epoch (0-based, the EEEE of checkpoint_EEEE.h5;
 * 0 when it records none). */
void features_checkpoint_dims(const struct config *cfg, const char *checkpoint,
                              const struct features_prep *prep, struct vit_dims *d, int64_t *epoch);

/* The EEEE of features_EEEE.h5 for a checkpoint (its last finished epoch, 0-based; 0 when it
 * records none). */
struct ckpt_info;
int64_t features_checkpoint_epoch(const struct ckpt_info *info);

/* ---- &features epochs and checkpoints: several checkpoints (features_epochs.c) --------------- */

/* run_dir/<prefix>_EEEE.h5 (prefix "checkpoint" or "features"). */
void features_epoch_path(char *buf, size_t n, const char *run_dir, const char *prefix, int64_t epoch);
/* Collective: the epochs features.epochs chooses among run_dir's <prefix>_EEEE.h5, ascending, *n of
 * them (malloc'd); NULL for 'last' (one file, as features.checkpoint / knn.features say).  'all'
 * with none there, or a listed epoch whose file is not there, ends the run (exit 2) naming the
 * file, the epochs there and hint (what makes the files). */
int64_t *features_epochs_select(const struct config *cfg, const char *prefix, const char *hint, int *n);
/* Collective: run_dir/features_EEEE.h5 (and its .h5ad with features.anndata) of every epoch may
 * be written (fs_output_claim; hint says how to choose other names). */
void features_epochs_claim(const struct config *cfg, const int64_t *epochs, int n, const char *hint);
/* Collective: features_extract for run_dir/checkpoint_EEEE.h5 of each epoch, in order, once every
 * output was claimed; last gets the path of the last file written. */
void features_extract_epochs(const struct config *cfg, const int64_t *epochs, int n, char *last, size_t last_n);
/* run_dir/<name> of model i of features.checkpoints (config_model_name). */
void features_model_dir(const struct config *cfg, int i, char *buf, size_t n);
/* Collective: features_extract for every model of features.checkpoints into its run_dir/<name>/,
 * once every checkpoint was found (exit 2 naming a missing one) and every output claimed; only:
 * NULL, or which models (knn computes the features of those without). */
void features_extract_models(const struct config *cfg, const int *only);

/* The random-init kNN baseline: features of a fresh network of the architecture of f's
 * checkpoint (seed control.seed) for the rows of f, preprocessed as the &features keys say.
 * Collective; every rank gets [f->n][*dim].  Returns NULL with the reason in why when it cannot
 * be computed (checkpoint or shard set not at hand). */
float *features_random_init(const struct config *cfg, const struct features *f, const char *features_file,
                            int *dim, char *why, size_t whyn);

#endif
