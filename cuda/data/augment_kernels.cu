/* augment_kernels.cu - GPU kernels of the multi-crop augmentation: min-max, bicubic resized crop with
 * flips, brightness, 5x5 Gaussian blur, solarisation, normalisation.
 *
 * Each output pixel is computed with the float operations of the CPU pipeline (augment.c, imgops.c)
 * in the same order, each rounded on its own (__fmul_rn/__fadd_rn/__fdiv_rn keep nvcc from fusing
 * multiply-adds), and the min-max in double: the crops are bit-identical to the CPU's. */
#include "build_config.h"

#include <float.h>

#include "cuda/data/augment_kernels.h"
#include "cuda/ops/cuda_internal.h"

#define AG_THREADS 256

/* ---- min-max ------------------------------------------------------------------------------------ */

static __device__ __forceinline__ float raw_f(const void *raw, int dtype, size_t i) {
  return dtype == GAUG_U16 ? (float)((const uint16_t *)raw)[i] : ((const float *)raw)[i];
}

/* mnmx[2 (i nsel + k)] = min, [+1] = max of selected channel k of image i. */
__global__ void __launch_bounds__(AG_THREADS)
    minmax_kernel(double *mnmx, const void *raw, int dtype, int C_all, size_t HW, const int *sel,
                  int nsel) {
  __shared__ float smin[AG_THREADS / 32], smax[AG_THREADS / 32];
  const int k = blockIdx.x, i = blockIdx.y;
  const size_t off = ((size_t)i * C_all + sel[k]) * HW;
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (size_t p = threadIdx.x; p < HW; p += AG_THREADS) {
    const float v = raw_f(raw, dtype, off + p);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if (threadIdx.x % 32 == 0) {
    smin[threadIdx.x / 32] = lo;
    smax[threadIdx.x / 32] = hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    lo = smin[0];
    hi = smax[0];
    for (int w = 1; w < AG_THREADS / 32; w++) {
      lo = fminf(lo, smin[w]);
      hi = fmaxf(hi, smax[w]);
    }
    /* + 0.0: either signed zero becomes +0, as on the CPU (imgops.c minmax_ranges) */
    mnmx[2 * ((size_t)i * nsel + k)] = (double)lo + 0.0;
    mnmx[2 * ((size_t)i * nsel + k) + 1] = (double)hi + 0.0;
  }
}

/* Upstream's rule: when any channel of an image is flat, channels whose max is 0 get max 1; then
 * mnmx[+1] becomes the range max - min. */
__global__ void minmax_rule_kernel(double *mnmx, int n, int nsel) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double *m = mnmx + 2 * (size_t)i * nsel;
  int flat = 0;
  for (int k = 0; k < nsel; k++) flat |= (m[2 * k + 1] - m[2 * k] == 0.0);
  for (int k = 0; k < nsel; k++) {
    if (flat && m[2 * k + 1] == 0.0) m[2 * k + 1] = 1.0;
    m[2 * k + 1] -= m[2 * k];
  }
}

__global__ void scale_kernel(float *img, const void *raw, int dtype, int C_all, size_t HW,
                             const int *sel, int nsel, const double *mnmx, size_t total) {
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (size_t)gridDim.x * blockDim.x) {
    const size_t p = e % HW, ik = e / HW, i = ik / nsel, k = ik % nsel;
    const double v = raw_f(raw, dtype, (i * C_all + sel[k]) * HW + p);
    img[e] = (float)((v - mnmx[2 * ik]) / mnmx[2 * ik + 1]);
  }
}

extern "C" void gaug_scale(const void *raw, int dtype, int n, int C_all, int H, int W,
                           const int *sel_dev, int nsel, double *mnmx, float *img, void *stream) {
  if (n <= 0) return;
  cudaStream_t st = (cudaStream_t)stream;
  const size_t HW = (size_t)H * W;
  SCD_ASSERT(n <= 65535);
  minmax_kernel<<<dim3((unsigned)nsel, (unsigned)n), AG_THREADS, 0, st>>>(mnmx, raw, dtype, C_all, HW,
                                                                         sel_dev, nsel);
  CHECK_LAUNCH();
  minmax_rule_kernel<<<(n + 127) / 128, 128, 0, st>>>(mnmx, n, nsel);
  CHECK_LAUNCH();
  const size_t total = (size_t)n * nsel * HW;
  scale_kernel<<<cu_blocks(total, AG_THREADS), AG_THREADS, 0, st>>>(img, raw, dtype, C_all, HW,
                                                                     sel_dev, nsel, mnmx, total);
  CHECK_LAUNCH();
}

/* ---- crops -------------------------------------------------------------------------------------- */

/* torch 'reflect' padding index (the edge pixel is not repeated), as imgops.c. */
static __device__ __forceinline__ int reflect_index(int i, int n) {
  if (n == 1) return 0;
  const int period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

/* Resampled (and brightened) pixel of every crop into bufA [ncrop][nsel][S][S]. */
__global__ void __launch_bounds__(AG_THREADS)
    resize_kernel(float *bufA, const float *img, int nsel, int H, int W, const gaug_crop *crops,
                  int S, const int *ih, const float *wh, const int *iw, const float *ww,
                  const float *fac) {
  const gaug_crop cr = crops[blockIdx.y];
  const int SS = S * S;
  const int e = blockIdx.x * AG_THREADS + threadIdx.x;
  if (e >= nsel * SS) return;
  const int c = e / SS, y = e / S % S, x = e % S;
  const float *src = img + ((size_t)cr.img * nsel + c) * H * W + (size_t)cr.top * W + cr.left;
  const int *ty = ih + cr.taps + 4 * y, *tx = iw + cr.taps + 4 * x;
  const float *wy = wh + cr.taps + 4 * y, *wx = ww + cr.taps + 4 * x;
  float rw[4];
#pragma unroll
  for (int i = 0; i < 4; i++) { /* width pass of source row ty[i] (imgops_taps_cols) */
    const float *r = src + (size_t)ty[i] * W;
    float a = __fmul_rn(r[tx[0]], wx[0]);
    a = __fadd_rn(a, __fmul_rn(r[tx[1]], wx[1]));
    a = __fadd_rn(a, __fmul_rn(r[tx[2]], wx[2]));
    a = __fadd_rn(a, __fmul_rn(r[tx[3]], wx[3]));
    rw[i] = a;
  }
  float v = __fmul_rn(rw[0], wy[0]); /* height pass (imgops_taps_rows) */
  v = __fadd_rn(v, __fmul_rn(rw[1], wy[1]));
  v = __fadd_rn(v, __fmul_rn(rw[2], wy[2]));
  v = __fadd_rn(v, __fmul_rn(rw[3], wy[3]));
  if (cr.bright) { /* clamp(f x, 0, 1) */
    v = __fmul_rn(fac[cr.fac + c], v);
    v = v < 0.0f ? 0.0f : v;
    v = v > 1.0f ? 1.0f : v;
  }
  bufA[((size_t)blockIdx.y * nsel + c) * SS + (size_t)y * S + x] = v;
}

/* Width pass of the blur (imgops_blur5_row) for the crops that are blurred. */
__global__ void __launch_bounds__(AG_THREADS)
    blur_rows_kernel(float *bufB, const float *bufA, int nsel, const gaug_crop *crops, int S) {
  const gaug_crop cr = crops[blockIdx.y];
  if (!cr.blur) return;
  const int SS = S * S;
  const int e = blockIdx.x * AG_THREADS + threadIdx.x;
  if (e >= nsel * SS) return;
  const int c = e / SS, y = e / S % S, x = e % S;
  const float *row = bufA + ((size_t)blockIdx.y * nsel + c) * SS + (size_t)y * S;
  float a = __fmul_rn(row[reflect_index(x - 2, S)], cr.k5[0]);
  a = __fadd_rn(a, __fmul_rn(row[reflect_index(x - 1, S)], cr.k5[1]));
  a = __fadd_rn(a, __fmul_rn(row[reflect_index(x, S)], cr.k5[2]));
  a = __fadd_rn(a, __fmul_rn(row[reflect_index(x + 1, S)], cr.k5[3]));
  a = __fadd_rn(a, __fmul_rn(row[reflect_index(x + 2, S)], cr.k5[4]));
  bufB[((size_t)blockIdx.y * nsel + c) * SS + (size_t)y * S + x] = a;
}

/* Height pass of the blur (imgops_blur5_col) when blurred, then solarisation and normalisation
 * (augment.c finish_row). */
__global__ void __launch_bounds__(AG_THREADS)
    finish_kernel(float *out, const float *bufA, const float *bufB, int nsel,
                  const gaug_crop *crops, int S, const float *mean, const float *std) {
  const gaug_crop cr = crops[blockIdx.y];
  const int SS = S * S;
  const int e = blockIdx.x * AG_THREADS + threadIdx.x;
  if (e >= nsel * SS) return;
  const int c = e / SS, y = e / S % S, x = e % S;
  const size_t plane = ((size_t)blockIdx.y * nsel + c) * SS;
  float v;
  if (cr.blur) {
    const float *t = bufB + plane;
    v = __fmul_rn(t[(size_t)reflect_index(y - 2, S) * S + x], cr.k5[0]);
    v = __fadd_rn(v, __fmul_rn(t[(size_t)reflect_index(y - 1, S) * S + x], cr.k5[1]));
    v = __fadd_rn(v, __fmul_rn(t[(size_t)reflect_index(y, S) * S + x], cr.k5[2]));
    v = __fadd_rn(v, __fmul_rn(t[(size_t)reflect_index(y + 1, S) * S + x], cr.k5[3]));
    v = __fadd_rn(v, __fmul_rn(t[(size_t)reflect_index(y + 2, S) * S + x], cr.k5[4]));
  } else {
    v = bufA[plane + (size_t)y * S + x];
  }
  if (cr.solarize && v > 0.5f) v = __fsub_rn(1.0f, v);
  out[plane + (size_t)y * S + x] = __fdiv_rn(__fsub_rn(v, mean[c]), std[c]);
}

extern "C" void gaug_crops(const float *img, int nsel, int H, int W, const struct gaug_crop *crops,
                           int ncrop, int S, const int *ih, const float *wh, const int *iw,
                           const float *ww, const float *fac, const float *mean, const float *std,
                           float *bufA, float *bufB, float *out, void *stream) {
  if (ncrop <= 0) return;
  SCD_ASSERT(ncrop <= 65535 && (size_t)nsel * S * S < (size_t)1 << 31);
  cudaStream_t st = (cudaStream_t)stream;
  const dim3 grid((unsigned)(((size_t)nsel * S * S + AG_THREADS - 1) / AG_THREADS), (unsigned)ncrop);
  resize_kernel<<<grid, AG_THREADS, 0, st>>>(bufA, img, nsel, H, W, crops, S, ih, wh, iw, ww, fac);
  CHECK_LAUNCH();
  blur_rows_kernel<<<grid, AG_THREADS, 0, st>>>(bufB, bufA, nsel, crops, S);
  CHECK_LAUNCH();
  finish_kernel<<<grid, AG_THREADS, 0, st>>>(out, bufA, bufB, nsel, crops, S, mean, std);
  CHECK_LAUNCH();
}
