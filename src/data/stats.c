/* stats.c - per-image min-max scaling and the per-channel pixel statistics of the dataset. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/shards.h"
#include "data/stats.h"

void stats_acc_init(struct stats_acc *a, int channels) {
  a->channels = channels;
  a->sum = xcalloc((size_t)channels, sizeof *a->sum);
  a->sumsq = xcalloc((size_t)channels, sizeof *a->sumsq);
  a->images = a->pixels = 0;
}

void stats_acc_free(struct stats_acc *a) {
  free(a->sum);
  free(a->sumsq);
  a->sum = a->sumsq = NULL;
}

void stats_acc_reset(struct stats_acc *a) {
  memset(a->sum, 0, (size_t)a->channels * sizeof *a->sum);
  memset(a->sumsq, 0, (size_t)a->channels * sizeof *a->sumsq);
  a->images = a->pixels = 0;
}

void stats_acc_merge(struct stats_acc *dst, const struct stats_acc *src) {
  SCD_ASSERT(dst->channels == src->channels);
  for (int c = 0; c < dst->channels; c++) {
    dst->sum[c] += src->sum[c];
    dst->sumsq[c] += src->sumsq[c];
  }
  dst->images += src->images;
  dst->pixels += src->pixels;
}

static double pixel(const void *img, int dtype, size_t i) {
  return dtype == DATASET_F32 ? (double)((const float *)img)[i] : (double)((const uint16_t *)img)[i];
}

/* Range of one channel; -1 if it holds NaN or Inf.  Typed loops, so the compiler vectorises. */
static int channel_range(const void *img, int dtype, size_t off, size_t hw, double *lo, double *hi) {
  if (dtype == DATASET_U16) {
    const uint16_t *p = (const uint16_t *)img + off;
    uint16_t a = 65535, b = 0;
    for (size_t i = 0; i < hw; i++) {
      a = p[i] < a ? p[i] : a;
      b = p[i] > b ? p[i] : b;
    }
    *lo = a;
    *hi = b;
    return 0;
  }
  const float *p = (const float *)img + off;
  float a = INFINITY, b = -INFINITY;
  int finite = 1;
  for (size_t i = 0; i < hw; i++) {
    finite &= isfinite(p[i]) != 0;
    a = p[i] < a ? p[i] : a;
    b = p[i] > b ? p[i] : b;
  }
  *lo = a;
  *hi = b;
  return finite ? 0 : -1;
}

/* Per-channel minimum and the maximum after upstream's all-zero rule.  Returns -1, or the first
 * channel whose scaled values are NaN. */
static int minmax_bounds(const void *img, int dtype, int channels, size_t hw, double *mn, double *mx) {
  int any_flat = 0;
  for (int c = 0; c < channels; c++) {
    if (channel_range(img, dtype, (size_t)c * hw, hw, &mn[c], &mx[c]) != 0)
      return c; /* NaN or Inf anywhere makes the scaled channel NaN */
    if (mx[c] - mn[c] == 0) any_flat = 1;
  }
  /* upstream: if 0 in (max - min): max[max == 0] = 1 */
  if (any_flat)
    for (int c = 0; c < channels; c++)
      if (mx[c] == 0) mx[c] = 1;
  for (int c = 0; c < channels; c++)
    if (mx[c] - mn[c] == 0) return c; /* constant non-zero channel: 0/0 */
  return -1;
}

/* The loop of channel_sums over a channel stored as T: a macro rather than pixel(), so that each
 * stored type keeps its own typed loop. */
#define CHANNEL_SUMS_LOOP(T)                      \
  do {                                            \
    const T *p = (const T *)img + off;            \
    for (; i + 4 <= hw; i += 4)                   \
      for (int k = 0; k < 4; k++) {               \
        double x = ((double)p[i + k] - lo) / d;   \
        a[k] += x;                                \
        b[k] += x * x;                            \
      }                                           \
    for (; i < hw; i++) {                         \
      double x = ((double)p[i] - lo) / d;         \
      a[0] += x;                                  \
      b[0] += x * x;                              \
    }                                             \
  } while (0)

/* Sum and sum of squares of (x - lo) / d over one channel, in float64 as upstream scales; four
 * interleaved partial sums (a fixed order, so every rank gets the same bits). */
static void channel_sums(const void *img, int dtype, size_t off, size_t hw, double lo, double d, double *s,
                         double *s2) {
  double a[4] = {0, 0, 0, 0}, b[4] = {0, 0, 0, 0};
  size_t i = 0;
  if (dtype == DATASET_U16)
    CHANNEL_SUMS_LOOP(uint16_t);
  else
    CHANNEL_SUMS_LOOP(float);
  *s = (a[0] + a[1]) + (a[2] + a[3]);
  *s2 = (b[0] + b[1]) + (b[2] + b[3]);
}

#undef CHANNEL_SUMS_LOOP

int stats_minmax(const void *img, int dtype, int channels, size_t hw, double *out) {
  double *mn = xmalloc(MUL_SIZE((size_t)channels, 2 * sizeof(double))), *mx = mn + channels;
  int bad = minmax_bounds(img, dtype, channels, hw, mn, mx);
  if (bad < 0 && out)
    for (int c = 0; c < channels; c++) {
      double d = mx[c] - mn[c];
      for (size_t i = 0; i < hw; i++) out[(size_t)c * hw + i] = (pixel(img, dtype, (size_t)c * hw + i) - mn[c]) / d;
    }
  free(mn);
  return bad;
}

int stats_acc_add(struct stats_acc *a, const void *img, int dtype, size_t hw) {
  double *mn = xmalloc(MUL_SIZE((size_t)a->channels, 2 * sizeof(double))), *mx = mn + a->channels;
  int bad = minmax_bounds(img, dtype, a->channels, hw, mn, mx);
  if (bad < 0) {
    for (int c = 0; c < a->channels; c++) {
      double s, s2;
      channel_sums(img, dtype, (size_t)c * hw, hw, mn[c], mx[c] - mn[c], &s, &s2);
      a->sum[c] += s;
      a->sumsq[c] += s2;
    }
    a->images++;
    a->pixels += (int64_t)hw;
  }
  free(mn);
  return bad;
}

void stats_finish(const struct stats_acc *a, double *mean, double *std) {
  for (int c = 0; c < a->channels; c++) {
    if (a->pixels == 0) {
      mean[c] = NAN;
      std[c] = NAN;
      continue;
    }
    double m = a->sum[c] / (double)a->pixels;
    double v = a->sumsq[c] / (double)a->pixels - m * m;
    mean[c] = m;
    std[c] = sqrt(v > 0 ? v : 0);
  }
}
