/* imgops.c - PyTorch-exact float32 image operations: resize, crop, flip, blur, point ops, min-max. */
#include "build_config.h"

#include "data/imgops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

/* ---- taps ------------------------------------------------------------------------------- */

float imgops_scale_for_size(int in, int out) { return (float)in / (float)out; }

float imgops_scale_for_factor(double scale_factor) { return (float)(1.0 / scale_factor); }

/* Keys' cubic convolution for |d| <= 1 and 1 < |d| < 2, in PyTorch's float operation order. */
static float cubic_near(float x, float A) { return ((A + 2.0f) * x - (A + 3.0f)) * x * x + 1.0f; }
static float cubic_far(float x, float A) { return ((A * x - 5.0f * A) * x + 8.0f * A) * x - 4.0f * A; }

void imgops_bicubic_taps(int in, int out, float scale, int *idx, float *w) {
  const float A = IMGOPS_CUBIC_A;
  for (int o = 0; o < out; o++) {
    /* PyTorch 1.13 (upsample_bicubic2d, CPU): the source index in double from the float scale,
     * its floor taken in float (floorf of the rounded index), the fraction rounded to float. */
    const double real = (double)scale * ((double)o + 0.5) - 0.5;
    const int i0 = (int)floorf((float)real);
    const float t = (float)(real - (double)i0);
    /* The +1 and 1- are evaluated in double before the float call, as there. */
    const float x1p = (float)((double)t + 1.0), x2 = (float)(1.0 - (double)t),
                x2p = (float)((double)x2 + 1.0);
    w[4 * o + 0] = cubic_far(x1p, A);
    w[4 * o + 1] = cubic_near(t, A);
    w[4 * o + 2] = cubic_near(x2, A);
    w[4 * o + 3] = cubic_far(x2p, A);
    for (int j = 0; j < 4; j++) {
      int s = i0 - 1 + j;
      idx[4 * o + j] = s < 0 ? 0 : (s > in - 1 ? in - 1 : s);
    }
  }
}

void imgops_bilinear_taps(int in, int out, float scale, int *idx, float *w) {
  for (int o = 0; o < out; o++) {
    if (in == out) { /* PyTorch copies when the size is unchanged */
      idx[2 * o] = idx[2 * o + 1] = o;
      w[2 * o] = 1.0f;
      w[2 * o + 1] = 0.0f;
      continue;
    }
    /* Source index in double (PyTorch's accumulate type), clamped at 0; fraction in float. */
    double real = (double)scale * ((double)o + 0.5) - 0.5;
    if (real < 0.0) real = 0.0;
    int i0 = (int)real;
    if (i0 > in - 1) i0 = in - 1;
    const int i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const float l1 = (float)(real - (double)i0);
    idx[2 * o] = i0;
    idx[2 * o + 1] = i1;
    w[2 * o] = 1.0f - l1;
    w[2 * o + 1] = l1;
  }
}

/* ---- separable resampling ------------------------------------------------------------------ */

void imgops_taps_rows(float *restrict dst, const float *const *rows, const float *wt, int ntap, int n) {
  if (ntap == 4) {
    const float *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
    const float w0 = wt[0], w1 = wt[1], w2 = wt[2], w3 = wt[3];
    for (int x = 0; x < n; x++) {
      float acc = r0[x] * w0;
      acc += r1[x] * w1;
      acc += r2[x] * w2;
      acc += r3[x] * w3;
      dst[x] = acc;
    }
    return;
  }
  for (int x = 0; x < n; x++) {
    float acc = rows[0][x] * wt[0];
    for (int i = 1; i < ntap; i++) acc += rows[i][x] * wt[i];
    dst[x] = acc;
  }
}

void imgops_taps_cols(float *restrict dst, const float *restrict src, const int *iw, const float *ww,
                      int ntap, int n) {
  if (ntap == 4) {
    for (int x = 0; x < n; x++) {
      const int *ix = iw + 4 * x;
      const float *wx = ww + 4 * x;
      float acc = src[ix[0]] * wx[0];
      acc += src[ix[1]] * wx[1];
      acc += src[ix[2]] * wx[2];
      acc += src[ix[3]] * wx[3];
      dst[x] = acc;
    }
    return;
  }
  for (int x = 0; x < n; x++) {
    float acc = src[iw[ntap * x]] * ww[ntap * x];
    for (int j = 1; j < ntap; j++) acc += src[iw[ntap * x + j]] * ww[ntap * x + j];
    dst[x] = acc;
  }
}

void imgops_resample(const float *src, int C, int H, int W, int top, int left, float *dst, int Ho,
                     int Wo, int ntap, const int *ih, const float *wh, const int *iw,
                     const float *ww, float *tmp) {
  SCD_ASSERT(ntap >= 1 && ntap <= 8);
  /* Rows of the region that some output row reads: only those get a width pass. */
  int rmin = H, rmax = -1;
  for (int k = 0; k < Ho * ntap; k++) {
    if (ih[k] < rmin) rmin = ih[k];
    if (ih[k] > rmax) rmax = ih[k];
  }
  SCD_ASSERT(top + rmin >= 0 && top + rmax < H);
  for (int c = 0; c < C; c++) {
    const float *s = src + (size_t)c * H * W + left;
    float *t = tmp + (size_t)c * H * Wo;
    for (int y = rmin; y <= rmax; y++)
      imgops_taps_cols(t + (size_t)y * Wo, s + (size_t)(top + y) * W, iw, ww, ntap, Wo);
    float *d = dst + (size_t)c * Ho * Wo;
    for (int y = 0; y < Ho; y++) {
      const float *rows[8];
      for (int i = 0; i < ntap; i++) rows[i] = t + (size_t)ih[ntap * y + i] * Wo;
      imgops_taps_rows(d + (size_t)y * Wo, rows, wh + ntap * y, ntap, Wo);
    }
  }
}

static void resize_with(const float *src, int C, int H, int W, float *dst, int Ho, int Wo,
                        float sh, float sw, int cubic) {
  const int nt = cubic ? 4 : 2;
  int *ih = xmalloc(sizeof(int) * (size_t)nt * Ho), *iw = xmalloc(sizeof(int) * (size_t)nt * Wo);
  float *wh = xmalloc(sizeof(float) * (size_t)nt * Ho), *ww = xmalloc(sizeof(float) * (size_t)nt * Wo);
  float *tmp = xmalloc(MUL_SIZE(sizeof(float), MUL_SIZE((size_t)C * H, (size_t)Wo)));
  if (cubic) {
    imgops_bicubic_taps(H, Ho, sh, ih, wh);
    imgops_bicubic_taps(W, Wo, sw, iw, ww);
  } else {
    imgops_bilinear_taps(H, Ho, sh, ih, wh);
    imgops_bilinear_taps(W, Wo, sw, iw, ww);
  }
  imgops_resample(src, C, H, W, 0, 0, dst, Ho, Wo, nt, ih, wh, iw, ww, tmp);
  free(ih);
  free(iw);
  free(wh);
  free(ww);
  free(tmp);
}

void imgops_resize_bicubic(const float *src, int C, int H, int W, float *dst, int Ho, int Wo) {
  resize_with(src, C, H, W, dst, Ho, Wo, imgops_scale_for_size(H, Ho), imgops_scale_for_size(W, Wo), 1);
}

void imgops_resize_bicubic_scaled(const float *src, int C, int H, int W, float *dst, int Ho, int Wo,
                                  float scale_h, float scale_w) {
  resize_with(src, C, H, W, dst, Ho, Wo, scale_h, scale_w, 1);
}

void imgops_resize_bilinear(const float *src, int C, int H, int W, float *dst, int Ho, int Wo) {
  resize_with(src, C, H, W, dst, Ho, Wo, imgops_scale_for_size(H, Ho), imgops_scale_for_size(W, Wo), 0);
}

/* ---- crops and flips ----------------------------------------------------------------------- */

void imgops_crop(const float *src, int C, int H, int W, int top, int left, int h, int w, float *dst) {
  for (int c = 0; c < C; c++)
    for (int y = 0; y < h; y++) {
      float *d = dst + ((size_t)c * h + y) * w;
      const int sy = top + y;
      if (sy < 0 || sy >= H) {
        memset(d, 0, sizeof(float) * (size_t)w);
        continue;
      }
      const float *s = src + ((size_t)c * H + sy) * W;
      for (int x = 0; x < w; x++) {
        const int sx = left + x;
        d[x] = (sx < 0 || sx >= W) ? 0.0f : s[sx];
      }
    }
}

void imgops_resized_crop(const float *src, int C, int H, int W, int top, int left, int h, int w,
                         float *dst, int Ho, int Wo) {
  float *crop = xmalloc(MUL_SIZE(sizeof(float), MUL_SIZE((size_t)C * h, (size_t)w)));
  imgops_crop(src, C, H, W, top, left, h, w, crop);
  imgops_resize_bicubic(crop, C, h, w, dst, Ho, Wo);
  free(crop);
}

void imgops_hflip(float *x, int C, int H, int W) {
  for (size_t r = 0; r < (size_t)C * H; r++) {
    float *row = x + r * W;
    for (int a = 0, b = W - 1; a < b; a++, b--) {
      const float t = row[a];
      row[a] = row[b];
      row[b] = t;
    }
  }
}

void imgops_vflip(float *x, int C, int H, int W) {
  for (int c = 0; c < C; c++) {
    float *p = x + (size_t)c * H * W;
    for (int a = 0, b = H - 1; a < b; a++, b--)
      for (int i = 0; i < W; i++) {
        const float t = p[(size_t)a * W + i];
        p[(size_t)a * W + i] = p[(size_t)b * W + i];
        p[(size_t)b * W + i] = t;
      }
  }
}

/* ---- blur and point operations -------------------------------------------------------------- */

void imgops_gaussian_kernel5(float sigma, float k[5]) {
  for (int i = 0; i < 5; i++) {
    const float x = (float)(i - 2) / sigma;
    k[i] = expf(-0.5f * (x * x));
  }
  /* torch.sum's order for 5 floats (4 partial sums, the fifth element into the first). */
  const float sum = (((k[0] + k[4]) + k[1]) + k[2]) + k[3];
  for (int i = 0; i < 5; i++) k[i] /= sum;
}

/* Reflect an index into [0, n) (torch 'reflect' mode: the edge pixel is not repeated). */
static int reflect_index(int i, int n) {
  if (n == 1) return 0;
  const int period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

void imgops_blur5_row(float *restrict dst, const float *restrict src, int n, const float k[5]) {
  const float k0 = k[0], k1 = k[1], k2 = k[2], k3 = k[3], k4 = k[4];
  const int lo = n < 2 ? n : 2, hi = n - 2 > lo ? n - 2 : lo;
  for (int i = 0; i < lo; i++) {
    float acc = src[reflect_index(i - 2, n)] * k0;
    acc += src[reflect_index(i - 1, n)] * k1;
    acc += src[reflect_index(i, n)] * k2;
    acc += src[reflect_index(i + 1, n)] * k3;
    acc += src[reflect_index(i + 2, n)] * k4;
    dst[i] = acc;
  }
  /* Interior: no index arithmetic, so the loop vectorises. */
  for (int i = lo; i < hi; i++) {
    float acc = src[i - 2] * k0;
    acc += src[i - 1] * k1;
    acc += src[i] * k2;
    acc += src[i + 1] * k3;
    acc += src[i + 2] * k4;
    dst[i] = acc;
  }
  for (int i = hi; i < n; i++) {
    float acc = src[reflect_index(i - 2, n)] * k0;
    acc += src[reflect_index(i - 1, n)] * k1;
    acc += src[reflect_index(i, n)] * k2;
    acc += src[reflect_index(i + 1, n)] * k3;
    acc += src[reflect_index(i + 2, n)] * k4;
    dst[i] = acc;
  }
}

void imgops_blur5_col(float *restrict dst, const float *tmp, int H, int W, int y, const float k[5]) {
  const float *r0 = tmp + (size_t)reflect_index(y - 2, H) * W;
  const float *r1 = tmp + (size_t)reflect_index(y - 1, H) * W;
  const float *r2 = tmp + (size_t)reflect_index(y, H) * W;
  const float *r3 = tmp + (size_t)reflect_index(y + 1, H) * W;
  const float *r4 = tmp + (size_t)reflect_index(y + 2, H) * W;
  const float k0 = k[0], k1 = k[1], k2 = k[2], k3 = k[3], k4 = k[4];
  for (int i = 0; i < W; i++) {
    float acc = r0[i] * k0;
    acc += r1[i] * k1;
    acc += r2[i] * k2;
    acc += r3[i] * k3;
    acc += r4[i] * k4;
    dst[i] = acc;
  }
}

void imgops_gaussian_blur5(float *x, int C, int H, int W, float sigma, float *tmp) {
  float k[5];
  imgops_gaussian_kernel5(sigma, k);
  for (int c = 0; c < C; c++) {
    float *p = x + (size_t)c * H * W;
    for (int y = 0; y < H; y++) imgops_blur5_row(tmp + (size_t)y * W, p + (size_t)y * W, W, k);
    for (int y = 0; y < H; y++) imgops_blur5_col(p + (size_t)y * W, tmp, H, W, y, k);
  }
}

void imgops_brightness(float *x, size_t n, float f) {
  for (size_t i = 0; i < n; i++) {
    const float v = f * x[i];
    x[i] = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
  }
}

void imgops_solarize(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (x[i] > 0.5f) x[i] = 1.0f - x[i];
}

void imgops_normalize(float *x, int C, size_t hw, const float *mean, const float *std) {
  for (int c = 0; c < C; c++) {
    float *p = x + (size_t)c * hw;
    const float m = mean[c], s = std[c];
    for (size_t i = 0; i < hw; i++) p[i] = (p[i] - m) / s;
  }
}

/* ---- min-max --------------------------------------------------------------------------------- */

static double raw_at(const void *src, enum imgops_dtype dtype, size_t i) {
  return dtype == IMGOPS_U16 ? (double)((const uint16_t *)src)[i] : (double)((const float *)src)[i];
}

/* Per selected channel min and max; returns -1 on a non-finite pixel. */
static int minmax_ranges(const void *src, enum imgops_dtype dtype, int C_all, size_t hw,
                         const int *sel, int nsel, double *mn, double *mx) {
  for (int k = 0; k < nsel; k++) {
    SCD_ASSERT(sel[k] >= 0 && sel[k] < C_all);
    const size_t off = (size_t)sel[k] * hw;
    double lo, hi;
    if (dtype == IMGOPS_U16) {
      const uint16_t *p = (const uint16_t *)src + off;
      uint16_t a = p[0], b = p[0];
      for (size_t i = 1; i < hw; i++) {
        a = p[i] < a ? p[i] : a;
        b = p[i] > b ? p[i] : b;
      }
      lo = a;
      hi = b;
    } else {
      const float *p = (const float *)src + off;
      float a = p[0], b = p[0];
      int bad = 0;
      for (size_t i = 0; i < hw; i++) {
        bad |= !isfinite(p[i]);
        a = p[i] < a ? p[i] : a;
        b = p[i] > b ? p[i] : b;
      }
      if (bad) return -1;
      /* -0 and +0 compare equal, so which one the scan keeps depends on the pixel order (and on
       * the GPU's reduction order); adding +0.0 makes either +0, and every scaled pixel the same. */
      lo = (double)a + 0.0;
      hi = (double)b + 0.0;
    }
    mn[k] = lo;
    mx[k] = hi;
  }
  /* Upstream's rule: when any channel is flat, channels with max 0 get max 1 (so an all-zero
   * channel stays 0); a flat non-zero channel is still 0/0. */
  int flat = 0;
  for (int k = 0; k < nsel; k++) flat |= (mx[k] - mn[k] == 0.0);
  if (flat)
    for (int k = 0; k < nsel; k++)
      if (mx[k] == 0.0) mx[k] = 1.0;
  for (int k = 0; k < nsel; k++)
    if (mx[k] - mn[k] == 0.0) return -1;
  return 0;
}

int imgops_minmax_valid(const void *src, enum imgops_dtype dtype, int C_all, int H, int W,
                        const int *sel, int nsel) {
  double mn[IMGOPS_MAX_CHANNELS], mx[IMGOPS_MAX_CHANNELS];
  SCD_ASSERT(nsel >= 1 && nsel <= IMGOPS_MAX_CHANNELS);
  return minmax_ranges(src, dtype, C_all, (size_t)H * W, sel, nsel, mn, mx);
}

int imgops_minmax_scale(const void *src, enum imgops_dtype dtype, int C_all, int H, int W,
                        const int *sel, int nsel, float *dst) {
  const size_t hw = (size_t)H * W;
  double mn[IMGOPS_MAX_CHANNELS], mx[IMGOPS_MAX_CHANNELS];
  SCD_ASSERT(nsel >= 1 && nsel <= IMGOPS_MAX_CHANNELS);
  if (minmax_ranges(src, dtype, C_all, hw, sel, nsel, mn, mx) != 0) return -1;
  for (int k = 0; k < nsel; k++) {
    const double lo = mn[k], range = mx[k] - mn[k];
    const size_t off = (size_t)sel[k] * hw;
    float *d = dst + (size_t)k * hw;
    if (dtype == IMGOPS_U16) {
      const uint16_t *p = (const uint16_t *)src + off;
      for (size_t i = 0; i < hw; i++) d[i] = (float)(((double)p[i] - lo) / range);
    } else {
      for (size_t i = 0; i < hw; i++) d[i] = (float)((raw_at(src, dtype, off + i) - lo) / range);
    }
  }
  return 0;
}
