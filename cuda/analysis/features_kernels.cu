/* features_kernels.cu - calculation='features' preprocessing on the GPU: per-image min-max of the
 * selected channels, bilinear resize and normalisation, in float64 with every operation rounded on
 * its own in the order of features_prep_image (src/analysis/features_prep.c), so the network's input is the
 * CPU's bit for bit.  The host side (staging, taps, statuses) is cuda/analysis/features_gpu.c. */
#include "build_config.h"

#include "cuda/analysis/features_kernels.h"
#include "cuda/ops/cuda_internal.h"

#define FK_THREADS 256

static __device__ __forceinline__ double fk_raw(const void *raw, int u16, size_t i) {
  return u16 ? (double)((const uint16_t *)raw)[i] : (double)((const float *)raw)[i];
}

/* mnmx[3 (i nsel + s)] = min, max, and 1 where a pixel is not finite, of selected channel s of
 * image i (the order of the scan does not change a min or max of doubles: signed zeros subtract
 * alike below). */
__global__ void __launch_bounds__(FK_THREADS)
    fk_minmax_kernel(double *mnmx, const void *raw, int u16, int C_all, size_t HW, const int *sel, int nsel) {
  __shared__ double smin[FK_THREADS / 32], smax[FK_THREADS / 32];
  __shared__ int sbad[FK_THREADS / 32];
  const int s = blockIdx.x, i = blockIdx.y;
  const size_t off = ((size_t)i * C_all + sel[s]) * HW;
  double lo = fk_raw(raw, u16, off), hi = lo;
  int bad = 0;
  for (size_t p = threadIdx.x; p < HW; p += FK_THREADS) {
    const double v = fk_raw(raw, u16, off + p);
    bad |= !isfinite(v);
    lo = fmin(lo, v);
    hi = fmax(hi, v);
  }
  for (int o = 16; o > 0; o >>= 1) {
    lo = fmin(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmax(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    bad |= __shfl_xor_sync(0xffffffffu, bad, o);
  }
  if (threadIdx.x % 32 == 0) {
    smin[threadIdx.x / 32] = lo;
    smax[threadIdx.x / 32] = hi;
    sbad[threadIdx.x / 32] = bad;
  }
  __syncthreads();
  if (threadIdx.x) return;
  for (int w = 1; w < FK_THREADS / 32; w++) {
    lo = fmin(lo, smin[w]);
    hi = fmax(hi, smax[w]);
    bad |= sbad[w];
  }
  double *m = mnmx + 3 * ((size_t)i * nsel + s);
  m[0] = lo;
  m[1] = hi;
  m[2] = bad;
}

/* One output row y of channel s of image i: min-max scaling, bilinear taps (the width within each
 * of the two source rows, then the rows by the height taps), normalisation, as features_prep_image. */
__global__ void __launch_bounds__(FK_THREADS)
    fk_resize_kernel(float *dst, int8_t *status, const double *mnmx, const void *raw, int u16, int C_all, int H,
                     int W, const int *sel, int nsel, int oh, int ow, const int *ih, const double *wh,
                     const int *iw, const double *ww, const double *mean, const double *std, int normalize) {
  const int y = blockIdx.x, s = blockIdx.y, i = blockIdx.z;
  const double *mi = mnmx + 3 * (size_t)i * nsel;
  /* the image's verdict: not finite anywhere, or flat somewhere (upstream's rule: then channels
   * whose max is 0 get max 1) */
  int bad = 0, flat = 0;
  for (int k = 0; k < nsel; k++) {
    bad |= mi[3 * k + 2] != 0.0;
    flat |= mi[3 * k + 1] - mi[3 * k] == 0.0;
  }
  const double lo = mi[3 * s];
  const double hi = flat && mi[3 * s + 1] == 0.0 ? 1.0 : mi[3 * s + 1];
  const double range = hi - lo;
  if (y == 0 && s == 0 && threadIdx.x == 0) {
    int st = bad ? -1 : 0; /* FEATURES_PREP_NONFINITE, _OK, _FLAT */
    for (int k = 0; k < nsel && !bad; k++) {
      const double h = flat && mi[3 * k + 1] == 0.0 ? 1.0 : mi[3 * k + 1];
      if (h - mi[3 * k] == 0.0) st = 1;
    }
    status[i] = (int8_t)st;
  }
  const size_t HW = (size_t)H * W, off = ((size_t)i * C_all + sel[s]) * HW;
  const int resize = oh != H || ow != W;
  float *d = dst + (((size_t)i * nsel + s) * oh + y) * ow;
  for (int x = threadIdx.x; x < ow; x += FK_THREADS) {
    if (bad) {
      d[x] = 0.0f;
      continue;
    }
    double o;
    if (range == 0.0) {
      o = 0.0; /* the CPU's zeroed channel, resized: sums of products of zeros */
    } else if (!resize) {
      o = (fk_raw(raw, u16, off + (size_t)y * W + x) - lo) / range;
    } else {
      const size_t r0 = off + (size_t)ih[2 * y] * W, r1 = off + (size_t)ih[2 * y + 1] * W;
      const int a = iw[2 * x], b = iw[2 * x + 1];
      const double w0 = ww[2 * x], w1 = ww[2 * x + 1];
      const double s0a = (fk_raw(raw, u16, r0 + a) - lo) / range, s0b = (fk_raw(raw, u16, r0 + b) - lo) / range;
      const double s1a = (fk_raw(raw, u16, r1 + a) - lo) / range, s1b = (fk_raw(raw, u16, r1 + b) - lo) / range;
      const double t0 = __dadd_rn(__dmul_rn(s0a, w0), __dmul_rn(s0b, w1));
      const double t1 = __dadd_rn(__dmul_rn(s1a, w0), __dmul_rn(s1b, w1));
      o = __dadd_rn(__dmul_rn(t0, wh[2 * y]), __dmul_rn(t1, wh[2 * y + 1]));
    }
    d[x] = normalize ? (float)((o - mean[s]) / std[s]) : (float)o;
  }
}

extern "C" void fk_prep(float *dst, int8_t *status, double *mnmx, const void *raw, int u16, int n, int C_all,
                        int H, int W, const int *sel, int nsel, int oh, int ow, const int *ih, const double *wh,
                        const int *iw, const double *ww, const double *mean, const double *std, int normalize,
                        void *stream) {
  if (n <= 0) return;
  SCD_ASSERT(n <= 65535 && nsel <= 65535);
  cudaStream_t st = (cudaStream_t)stream;
  fk_minmax_kernel<<<dim3((unsigned)nsel, (unsigned)n), FK_THREADS, 0, st>>>(mnmx, raw, u16, C_all, (size_t)H * W,
                                                                           sel, nsel);
  CHECK_LAUNCH();
  fk_resize_kernel<<<dim3((unsigned)oh, (unsigned)nsel, (unsigned)n), FK_THREADS, 0, st>>>(
      dst, status, mnmx, raw, u16, C_all, H, W, sel, nsel, oh, ow, ih, wh, iw, ww, mean, std, normalize);
  CHECK_LAUNCH();
}
