/* augment.h - scDINO's multi-crop augmentation of one image (doc/algorithm.md §6.4).
 *
 * raw C_all x H x W image (uint16 or float32)
 *   -> channel selection and per-image per-channel min-max (float64, upstream's rules)
 *   -> 2 global crops (global_size, global_scale) + n_local local crops (local_size, local_scale):
 *      RandomResizedCrop (torchvision get_params: 10 tries, log-uniform ratio in (3/4, 4/3), round
 *      half to even, central fallback) then bicubic resize (no clamp), horizontal and vertical flip
 *      (p 0.5 each), brightness (p 0.8, factor U(0.5, 1.25) per channel, clamp to [0,1]), Gaussian
 *      blur 5x5 (p 1.0 / 0.1 / 0.5 for global 1 / global 2 / locals, one sigma U(0.1, 1.5) for all
 *      channels), solarisation (global 2 only, p 0.2: x > 0.5 -> 1 - x), then (x - mean) / std.
 *
 * Every draw of crop k of sample s in epoch e comes from the counter RNG stream
 *   rng_init(seed, RNG_DOMAIN_AUGMENT, e, s * AUGMENT_CROP_SLOTS + k)
 * in the order listed in augment_draw(), so a sample's crops are the same whatever rank, thread or
 * batch position produces them, and a GPU backend can draw the same parameters (augment_draw) and
 * apply them itself.  Upstream's torch/Python RNG streams cannot be reproduced; the distributions
 * and the order of operations are upstream's.
 *
 * With augment = .false. the crops are deterministic (doc/algorithm.md §6.4): each global crop is the
 * whole image resized bicubically to global_size, each local crop the whole image resized to
 * local_size, then normalised; nothing random. */
#ifndef SCDINO_AUGMENT_H
#define SCDINO_AUGMENT_H

#include <stdint.h>

#include "core/rng.h"
#include "data/imgops.h"

struct config;

#define AUGMENT_MAX_CHANNELS 64 /* selected channels (the &data channels capacity) */
#define AUGMENT_CROP_SLOTS 128  /* RNG id1 stride per sample: crop numbers 0..127 */

struct augment {
  int C_all, H, W;            /* raw image shape */
  enum imgops_dtype dtype;    /* raw element type */
  int nsel;                   /* selected channels */
  int sel[AUGMENT_MAX_CHANNELS];
  float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS]; /* of the selected channels */
  int global_size, local_size, n_local;
  double global_scale[2], local_scale[2];
  int random; /* 0: deterministic crops */
  uint64_t seed;
};

/* The parameters of one crop: everything random that was drawn for it. */
struct augment_crop {
  int top, left, height, width; /* region of the min-max scaled image */
  int size;                     /* output side */
  int hflip, vflip;
  int bright;                   /* brightness applied; factor[c] per selected channel */
  float factor[AUGMENT_MAX_CHANNELS];
  int blur;                     /* blur applied with sigma */
  float sigma;
  int solarize;
};

/* Per-thread scratch (scaled image, resize and blur buffers, taps) and an operation counter. */
struct augment_work;

/* mean_all/std_all: the manifest's per-channel statistics (all C_all source channels).  Bad
 * channel lists end the job naming the &data channels key. */
void augment_init(struct augment *a, const struct config *cfg, int C_all, int H, int W,
                  enum imgops_dtype dtype, const double *mean_all, const double *std_all);
int augment_ncrops(const struct augment *a); /* 2 + n_local */
int augment_crop_size(const struct augment *a, int crop); /* global_size or local_size */

/* Draw crop `crop` (0, 1 global; 2.. local) of `sample` in `epoch`.  Order of draws from the
 * stream: RandomResizedCrop tries (per try: scale U, log-ratio U; when it fits: top, left),
 * hflip U, vflip U, brightness U (then one factor U per selected channel if applied), blur U (then
 * sigma U if applied), solarisation U (crop 1 only). */
void augment_draw(const struct augment *a, int64_t epoch, int64_t sample, int crop,
                  struct augment_crop *p);
/* torchvision's RandomResizedCrop.get_params on an H x W image, from an rng stream. */
void augment_rrc_params(struct rng *r, int H, int W, const double scale[2], int *top, int *left,
                        int *height, int *width);

struct augment_work *augment_work_create(const struct augment *a);
void augment_work_destroy(struct augment_work *w);
/* Floating-point operations done so far by this work area (see augment.c for what is counted). */
double augment_work_flops(const struct augment_work *w);

/* All crops of one image.  out[k] receives crop k as nsel x S_k x S_k floats (S_0 = S_1 =
 * global_size, S_k = local_size for k >= 2).  Returns 0, or -1 when upstream would drop the image
 * (min-max gives NaN: a constant non-zero channel or a non-finite pixel); out is then untouched. */
int augment_image(const struct augment *a, struct augment_work *w, const void *raw, int64_t epoch,
                  int64_t sample, float *const *out);

#endif
