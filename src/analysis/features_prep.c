/* features_prep.c - inference preprocessing in float64: channels, min-max, bilinear resize, normalise. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "core/check.h"
#include "data/shards.h"

void features_resize_shape(int H, int W, int size, int *oh, int *ow) {
  if (size <= 0) {
    *oh = H;
    *ow = W;
    return;
  }
  /* torchvision _compute_resized_output_size: new_long = int(size * long / short) in Python
   * floats (double), truncated. */
  if (H <= W) {
    *oh = size;
    *ow = (int)((double)size * W / H);
  } else {
    *ow = size;
    *oh = (int)((double)size * H / W);
  }
}

/* PyTorch's linear taps for double tensors (align_corners=False, output size given): scale =
 * in/out, src = max(0, scale (o + 0.5) - 0.5), i0 = (int)src, i1 = i0 + (i0 < in - 1),
 * weights (1 - l, l) with l = src - i0. */
void features_bilinear_taps(int in, int out, int *idx, double *w) {
  const double scale = (double)in / out;
  for (int o = 0; o < out; o++) {
    double src = scale * (o + 0.5) - 0.5;
    if (src < 0) src = 0;
    int i0 = (int)src;
    if (i0 > in - 1) i0 = in - 1;
    const int i1 = i0 + (i0 < in - 1 ? 1 : 0);
    double l = src - i0;
    if (l < 0) l = 0;
    if (l > 1) l = 1;
    idx[2 * o] = i0;
    idx[2 * o + 1] = i1;
    w[2 * o] = 1.0 - l;
    w[2 * o + 1] = l;
  }
}

void features_prep_setup(struct features_prep *p, int C_all, int H, int W, int dtype, const int *sel, int nsel,
                         const double *mean, const double *std, int resize, int normalize) {
  SCD_ASSERT(nsel >= 1 && nsel <= FEATURES_MAX_CHANNELS && H >= 1 && W >= 1);
  memset(p, 0, sizeof *p);
  p->C_all = C_all;
  p->H = H;
  p->W = W;
  p->dtype = dtype;
  p->nsel = nsel;
  p->normalize = normalize;
  p->progress_seconds = 10.0; /* features_prep_init takes control.progress_seconds */
  for (int s = 0; s < nsel; s++) {
    SCD_ASSERT(sel[s] >= 0 && sel[s] < C_all);
    p->sel[s] = sel[s];
    p->mean[s] = mean ? mean[s] : 0.0;
    p->std[s] = std ? std[s] : 1.0;
  }
  features_resize_shape(H, W, resize, &p->oh, &p->ow);
  p->ih = xmalloc(MUL_SIZE((size_t)p->oh, 2 * sizeof(int)));
  p->iw = xmalloc(MUL_SIZE((size_t)p->ow, 2 * sizeof(int)));
  p->wh = xmalloc(MUL_SIZE((size_t)p->oh, 2 * sizeof(double)));
  p->ww = xmalloc(MUL_SIZE((size_t)p->ow, 2 * sizeof(double)));
  features_bilinear_taps(H, p->oh, p->ih, p->wh);
  features_bilinear_taps(W, p->ow, p->iw, p->ww);
}

void features_prep_init(struct features_prep *p, const struct config *cfg, const struct dataset *ds,
                        const struct features_input *in, int resize) {
  features_prep_setup(p, dataset_channels(ds), dataset_height(ds), dataset_width(ds), dataset_dtype(ds), in->sel,
                      in->nsel, in->mean, in->std, resize, in->normalize);
  p->progress_seconds = cfg->control.progress_seconds;
  p->memory_per_rank = cfg->system.memory_per_rank;
}

void features_prep_free(struct features_prep *p) {
  free(p->ih);
  free(p->iw);
  free(p->wh);
  free(p->ww);
  p->ih = p->iw = NULL;
  p->wh = p->ww = NULL;
}

size_t features_prep_work_size(const struct features_prep *p) {
  return (size_t)p->H * p->W + (size_t)p->oh * p->ow;
}

static double raw_at(const struct features_prep *p, const void *raw, size_t i) {
  return p->dtype == DATASET_U16 ? (double)((const uint16_t *)raw)[i] : (double)((const float *)raw)[i];
}

int features_prep_minmax(const struct features_prep *p, const void *raw, double *lo, double *range) {
  const size_t hw = (size_t)p->H * p->W;
  double mx[FEATURES_MAX_CHANNELS];
  for (int s = 0; s < p->nsel; s++) {
    const size_t off = (size_t)p->sel[s] * hw;
    double a = raw_at(p, raw, off), b = a;
    for (size_t i = 0; i < hw; i++) {
      const double v = raw_at(p, raw, off + i);
      if (!isfinite(v)) return FEATURES_PREP_NONFINITE;
      a = v < a ? v : a;
      b = v > b ? v : b;
    }
    lo[s] = a;
    mx[s] = b;
  }
  /* normalize_numpy_0_to_1: when a channel is flat, channels with max 0 get max 1 (an all-zero
   * channel stays 0).  A flat non-zero channel would be 0/0: it becomes 0 as well. */
  int flat = 0;
  for (int s = 0; s < p->nsel; s++) flat |= (mx[s] - lo[s] == 0.0);
  if (flat)
    for (int s = 0; s < p->nsel; s++)
      if (mx[s] == 0.0) mx[s] = 1.0;
  int result = FEATURES_PREP_OK;
  for (int s = 0; s < p->nsel; s++) {
    range[s] = mx[s] - lo[s];
    if (range[s] == 0.0) result = FEATURES_PREP_FLAT;
  }
  return result;
}

void features_prep_scaled(const struct features_prep *p, const void *raw, int s, double lo, double range,
                          double *dst) {
  const size_t hw = (size_t)p->H * p->W, off = (size_t)p->sel[s] * hw;
  if (range == 0.0)
    memset(dst, 0, hw * sizeof *dst);
  else
    for (size_t i = 0; i < hw; i++) dst[i] = (raw_at(p, raw, off + i) - lo) / range;
}

/* Bilinear, as PyTorch's CPU kernel sums it: along the width within each of the two source rows,
 * then the two rows weighted by the height taps. */
void features_bilinear(const double *src, int W, int top, int left, const int *ih, const double *wh, int oh,
                       const int *iw, const double *ww, int ow, double *out) {
  const double *base = src + (size_t)top * W + left;
  for (int y = 0; y < oh; y++) {
    const double *r0 = base + (size_t)ih[2 * y] * W, *r1 = base + (size_t)ih[2 * y + 1] * W;
    const double h0 = wh[2 * y], h1 = wh[2 * y + 1];
    double *o = out + (size_t)y * ow;
    for (int x = 0; x < ow; x++) {
      const int a = iw[2 * x], b = iw[2 * x + 1];
      const double w0 = ww[2 * x], w1 = ww[2 * x + 1];
      const double t0 = r0[a] * w0 + r0[b] * w1;
      const double t1 = r1[a] * w0 + r1[b] * w1;
      o[x] = t0 * h0 + t1 * h1;
    }
  }
}

int features_prep_image(const struct features_prep *p, const void *raw, float *dst, double *work) {
  const size_t hw = (size_t)p->H * p->W, ohw = (size_t)p->oh * p->ow;
  double lo[FEATURES_MAX_CHANNELS] = {0}, range[FEATURES_MAX_CHANNELS] = {0};
  const int result = features_prep_minmax(p, raw, lo, range);
  if (result == FEATURES_PREP_NONFINITE) {
    memset(dst, 0, (size_t)p->nsel * ohw * sizeof *dst);
    return result;
  }
  double *scaled = work, *out = work + hw;
  for (int s = 0; s < p->nsel; s++) {
    features_prep_scaled(p, raw, s, lo[s], range[s], scaled);
    const double *src = scaled;
    if (p->oh != p->H || p->ow != p->W) {
      features_bilinear(scaled, p->W, 0, 0, p->ih, p->wh, p->oh, p->iw, p->ww, p->ow, out);
      src = out;
    }
    float *d = dst + (size_t)s * ohw;
    if (p->normalize) {
      const double m = p->mean[s], sd = p->std[s];
      for (size_t i = 0; i < ohw; i++) d[i] = (float)((src[i] - m) / sd);
    } else {
      for (size_t i = 0; i < ohw; i++) d[i] = (float)src[i];
    }
  }
  return result;
}
