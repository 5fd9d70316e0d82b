/* linear_aug.c - the probe's augmented training images: eval_linear's training transform
 * (RandomResizedCrop, RandomHorizontalFlip) on scDINO's min-max scaled, per-channel normalised
 * microscopy images, in float64 as the features' preparation. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "data/augment.h"
#include "linear/linear.h"

static int aug_image(const struct features_prep *p, const void *raw, int64_t sample, float *dst, double *work) {
  const struct linear_aug *a = p->image_ctx;
  const int S = p->oh;
  const size_t hw = (size_t)p->H * p->W, ohw = (size_t)S * S;
  /* the draws first, so they do not depend on the image's content */
  struct rng r;
  rng_init(&r, a->seed, RNG_DOMAIN_LINEAR, 1 + (uint64_t)a->epoch, (uint64_t)sample);
  static const double scale[2] = {0.08, 1.0}; /* torchvision's default */
  int top, left, h, w;
  augment_rrc_params(&r, p->H, p->W, scale, &top, &left, &h, &w);
  const int flip = rng_uniform(&r) < 0.5;

  double lo[FEATURES_MAX_CHANNELS], range[FEATURES_MAX_CHANNELS];
  const int result = features_prep_minmax(p, raw, lo, range);
  if (result == FEATURES_PREP_NONFINITE) {
    memset(dst, 0, (size_t)p->nsel * ohw * sizeof *dst);
    return result;
  }
  int *ih = xmalloc(MUL_SIZE((size_t)S, 4 * sizeof(int))), *iw = ih + 2 * (size_t)S;
  double *wh = xmalloc(MUL_SIZE((size_t)S, 4 * sizeof(double))), *ww = wh + 2 * (size_t)S;
  features_bilinear_taps(h, S, ih, wh);
  features_bilinear_taps(w, S, iw, ww);
  double *scaled = work, *out = work + hw;
  for (int s = 0; s < p->nsel; s++) {
    features_prep_scaled(p, raw, s, lo[s], range[s], scaled);
    features_bilinear(scaled, p->W, top, left, ih, wh, S, iw, ww, S, out);
    float *d = dst + (size_t)s * ohw;
    const double m = p->normalize ? p->mean[s] : 0.0, sd = p->normalize ? p->std[s] : 1.0;
    for (int y = 0; y < S; y++)
      for (int x = 0; x < S; x++) {
        const double v = out[(size_t)y * S + (flip ? S - 1 - x : x)];
        d[(size_t)y * S + x] = (float)(p->normalize ? (v - m) / sd : v);
      }
  }
  free(ih);
  free(wh);
  return result;
}

void linear_aug_prep(struct features_prep *aug, const struct features_prep *prep, int size,
                     const struct linear_aug *ctx) {
  SCD_ASSERT(size >= 1);
  *aug = *prep;
  aug->oh = aug->ow = size; /* features_prep_work_size: the scaled image and one resized channel */
  aug->image = aug_image;
  aug->image_ctx = ctx;
}
