/* elementwise.cu - CUDA kernels that touch each element once: conversions, GELU, residuals, patches,
 * tokens, the DINO centre and the teacher EMA.
 *
 * Math in fp32 whatever the storage type.  The centre and EMA updates round every operation on its
 * own (__fmul_rn/__fadd_rn: no fused multiply-add), as the CPU backend's C does, so on the same
 * inputs they give bit-identical results. */
#include "build_config.h"

#include "cuda/ops/colsum.cuh"

#define EW_THREADS 256

#define GRID_STRIDE(i, n)                                                             \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
       i += (size_t)gridDim.x * blockDim.x)

/* ---- conversions -------------------------------------------------------------------------------- */

template <typename T> __global__ void from_f32_kernel(T *dst, const float *src, size_t n) {
  GRID_STRIDE(i, n) stf(&dst[i], src[i]);
}
template <typename T> __global__ void to_f32_kernel(float *dst, const T *src, size_t n) {
  GRID_STRIDE(i, n) dst[i] = ldf(&src[i]);
}

template <typename T> void k_convert_from_f32(T *dst, const float *src, size_t n) {
  if (!n) return;
  from_f32_kernel<T><<<cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu.stream>>>(dst, src, n);
  CHECK_LAUNCH();
}
template <typename T> void k_convert_to_f32(float *dst, const T *src, size_t n) {
  if (!n) return;
  to_f32_kernel<T><<<cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu.stream>>>(dst, src, n);
  CHECK_LAUNCH();
}

/* ---- GELU: exact (erf form, A = 0) or the tanh approximation (A = 1) ----------------------------- */

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define SQRT_2_OVER_PI 0.79788456080286535588f
#define GELU_TANH_A 0.044715f

/* Phi(v) (the normal CDF) and phi(v) (its density) for the exact GELU in bf16 steps: erf by
 * Abramowitz and Stegun 7.1.26, erf(z) = 1 - t P(t) exp(-z^2) with t = 1 / (1 + p z) for z >= 0
 * (absolute error at most 1.5e-7, four orders below bf16's rounding), and exp(-v^2 / 2) shared
 * with phi: one approximate reciprocal and one exponential per element instead of erff's
 * polynomials and branches and expf, which made GELU's backward cost more than its bytes on an
 * H100.  fp32 steps keep erff and expf, to compare closely with the CPU backend. */
__device__ __forceinline__ float gelu_cdf_fast(float v, float *pdf) {
  const float z = fabsf(v) * INV_SQRT2;
  const float t = __fdividef(1.0f, 1.0f + 0.3275911f * z);
  const float e = exp2f(-0.72134752044448170368f * v * v); /* exp(-v^2 / 2) */
  const float poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float q = 0.5f * poly * e; /* Phi(-|v|) */
  *pdf = INV_SQRT_2PI * e;
  return v >= 0.0f ? 1.0f - q : q;
}

/* Phi(v) for f16 steps: erfc keeps Phi's left tail to a few fp32 ulps relative, where 1 + erf(v)
 * cancels (Phi(-5) = 2.9e-7 is then known to 2^-24 absolute: half of it), and f16 keeps GELU's
 * tail down to its subnormals. */
__device__ __forceinline__ float gelu_cdf_tail(float v) { return 0.5f * erfcf(-v * INV_SQRT2); }

/* GELU (A = 1: the tanh form) of v for activations of type T: the fast exact form for bf16 only.
 * Its error is 1.5e-7 absolute, but relative to Phi's tail (GELU of x near -4 is about 7e-5) it
 * reaches 1e-3: below bf16's rounding (2^-8), above f16's (2^-11), so f16 takes erfcf and expf;
 * fp32 erff, as the CPU backend. */
template <int A, typename T> __device__ __forceinline__ float gelu_of(float v) {
  if (A) return 0.5f * v * (1.0f + tanhf(SQRT_2_OVER_PI * (v + GELU_TANH_A * v * v * v)));
  if (std::is_same<T, bf16>::value) {
    float pdf;
    return v * gelu_cdf_fast(v, &pdf);
  }
  if (std::is_same<T, f16>::value) return v * gelu_cdf_tail(v);
  return v * 0.5f * (1.0f + erff(v * INV_SQRT2));
}
/* exact: gelu'(x) = Phi(x) + x phi(x); tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x),
 * t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3) */
template <int A, typename T> __device__ __forceinline__ float gelu_grad(float v) {
  if (A) {
    const float t = tanhf(SQRT_2_OVER_PI * (v + GELU_TANH_A * v * v * v));
    const float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_A * v * v);
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
  }
  if (std::is_same<T, bf16>::value) {
    float pdf;
    const float cdf = gelu_cdf_fast(v, &pdf);
    return cdf + v * pdf;
  }
  const float cdf = std::is_same<T, f16>::value ? gelu_cdf_tail(v) : 0.5f * (1.0f + erff(v * INV_SQRT2));
  const float pdf = INV_SQRT_2PI * expf(-0.5f * v * v);
  return cdf + v * pdf;
}

/* GELU is the largest elementwise op of a step (bench/README.md), so where the arrays are 16-byte
 * aligned each thread moves 16 bytes per access (ld_vec, st_vec): more bytes in flight than
 * element-wide loads, for the same arithmetic per element.  The elements past the last full
 * vector, and unaligned arrays (aligned16), go one at a time.
 *
 * nv vectors from element 0, then elements nv*V .. n-1 one at a time (nv = 0: all of them). */
template <typename T, int A>
__global__ void gelu_fwd_kernel(T *y, const T *x, size_t n, size_t nv) {
  const int V = vec16<T>::N;
  GRID_STRIDE(i, nv) {
    float v[V];
    ld_vec(v, x + i * V);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = gelu_of<A, T>(v[k]);
    st_vec(y + i * V, v);
  }
  GRID_STRIDE(i, n - nv * V) {
    const size_t j = nv * V + i;
    stf(&y[j], gelu_of<A, T>(ldf(&x[j])));
  }
}
template <typename T, int A>
__global__ void gelu_bwd_kernel(T *dx, const T *dy, const T *x, size_t n, size_t nv) {
  const int V = vec16<T>::N;
  GRID_STRIDE(i, nv) {
    float v[V], d[V];
    ld_vec(v, x + i * V);
    ld_vec(d, dy + i * V);
#pragma unroll
    for (int k = 0; k < V; k++) d[k] *= gelu_grad<A, T>(v[k]);
    st_vec(dx + i * V, d);
  }
  GRID_STRIDE(i, n - nv * V) {
    const size_t j = nv * V + i;
    stf(&dx[j], ldf(&dy[j]) * gelu_grad<A, T>(ldf(&x[j])));
  }
}
template <typename T> void k_gelu_fwd(T *y, const T *x, size_t n, int approx) {
  const size_t nv = aligned16(y, x, x) ? n / vec16<T>::N : 0;
  const unsigned nb = cu_blocks(nv ? nv : n, EW_THREADS);
  if (approx)
    gelu_fwd_kernel<T, 1><<<nb, EW_THREADS, 0, cu.stream>>>(y, x, n, nv);
  else
    gelu_fwd_kernel<T, 0><<<nb, EW_THREADS, 0, cu.stream>>>(y, x, n, nv);
  CHECK_LAUNCH();
}
template <typename T> void k_gelu_bwd(T *dx, const T *dy, const T *x, size_t n, int approx) {
  const size_t nv = aligned16(dx, dy, x) ? n / vec16<T>::N : 0;
  const unsigned nb = cu_blocks(nv ? nv : n, EW_THREADS);
  if (approx)
    gelu_bwd_kernel<T, 1><<<nb, EW_THREADS, 0, cu.stream>>>(dx, dy, x, n, nv);
  else
    gelu_bwd_kernel<T, 0><<<nb, EW_THREADS, 0, cu.stream>>>(dx, dy, x, n, nv);
  CHECK_LAUNCH();
}

/* GELU's backward for 16-byte vectors of a row, and the stored values for the column sums: k_colsum
 * reading dx after k_gelu_bwd, in the same order, without reading dx back.  Two phases
 * (colsum_vec2_kernel): the loads of several rows fly together, dx possibly being dy. */
template <typename T, int A> struct gelu_bwd_vec {
  T *dx;
  const T *dy, *x;
  int cols;
  struct raw { /* the 16 bytes as loaded (fewer registers than the floats) */
    uint4 dy, x;
  };
  __device__ void load(int r, int c0, raw &w) const {
    const size_t o = (size_t)r * cols + c0;
    w.dy = *(const uint4 *)(dy + o);
    w.x = *(const uint4 *)(x + o);
  }
  __device__ void apply(int r, int c0, const raw &w, float *v) const {
    const int V = vec16<T>::N;
    float d[V], xv[V];
    ld_vec(d, (const T *)&w.dy);
    ld_vec(xv, (const T *)&w.x);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = d[k] * gelu_grad<A, T>(xv[k]);
    st_vec(dx + (size_t)r * cols + c0, v);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = rounded<T>(v[k]);
  }
};

template <typename T>
void k_gelu_bwd_bias(T *dx, float *db, const T *dy, const T *x, int rows, int cols, int approx) {
  const int V = vec16<T>::N;
  if (cols % V || !aligned16(dx, dy, x)) {
    if (rows > 0 && cols > 0) k_gelu_bwd<T>(dx, dy, x, (size_t)rows * cols, approx);
    k_colsum<T>(db, dx, rows, cols, (size_t)cols, 1);
    return;
  }
  if (approx)
    colsum_vec2_run<V, 4>(db, gelu_bwd_vec<T, 1>{dx, dy, x, cols}, rows, cols, 1);
  else
    colsum_vec2_run<V, 4>(db, gelu_bwd_vec<T, 0>{dx, dy, x, cols}, rows, cols, 1);
}

/* ---- residual with stochastic depth ------------------------------------------------------------- */

template <typename T>
__global__ void residual_fwd_kernel(T *y, const T *x, const T *f, const float *s, size_t rowsD,
                                    size_t rpsD) {
  GRID_STRIDE(i, rowsD) {
    const float sb = s ? s[i / rpsD] : 1.0f;
    stf(&y[i], ldf(&x[i]) + sb * ldf(&f[i]));
  }
}
template <typename T>
__global__ void residual_bwd_kernel(T *df, const T *dy, const float *s, size_t rowsD, size_t rpsD) {
  GRID_STRIDE(i, rowsD) {
    const float sb = s ? s[i / rpsD] : 1.0f;
    stf(&df[i], sb * ldf(&dy[i]));
  }
}
template <typename T>
void k_residual_fwd(T *y, const T *x, const T *f, const float *s, int B, int rps, int D) {
  const size_t n = (size_t)B * rps * D;
  if (!n) return;
  residual_fwd_kernel<T><<<cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu.stream>>>(
      y, x, f, s, n, (size_t)rps * D);
  CHECK_LAUNCH();
}
template <typename T> void k_residual_bwd(T *df, const T *dy, const float *s, int B, int rps, int D) {
  const size_t n = (size_t)B * rps * D;
  if (!n) return;
  residual_bwd_kernel<T><<<cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu.stream>>>(
      df, dy, s, n, (size_t)rps * D);
  CHECK_LAUNCH();
}

/* ---- patches and tokens ------------------------------------------------------------------------- */

/* One block per patch row (image b, patch i): 32-bit index arithmetic per element (the 64-bit
 * divisions of a flat index cost more than the copy). */
template <typename T>
__global__ void patchify_kernel(T *cols, const float *img, int C, int H, int W, int p, int gw, int np,
                                int rowlen) {
  const int r = blockIdx.x, b = r / np, i = r % np, gy = i / gw, gx = i % gw, pp = p * p;
  const float *src = img + ((size_t)b * C * H + (size_t)gy * p) * W + (size_t)gx * p;
  T *dst = cols + (size_t)r * rowlen;
  for (int q = threadIdx.x; q < rowlen; q += blockDim.x) {
    const int c = q / pp, rem = q - c * pp, ky = rem / p, kx = rem - ky * p;
    stf(&dst[q], src[((size_t)c * H + ky) * W + kx]);
  }
}
template <typename T> void k_patchify(T *cols, const float *img, int B, int C, int H, int W, int p) {
  const int gh = H / p, gw = W / p;
  const long rows = (long)B * gh * gw, rowlen = (long)C * p * p;
  if (!rows || !rowlen) return;
  if (rows > 2147483647L || rowlen > 2147483647L)
    SCD_FAIL("patchify: %ld patches of %ld values exceed the kernel's 32-bit indices", rows, rowlen);
  patchify_kernel<T><<<(unsigned)rows, EW_THREADS, 0, cu.stream>>>(cols, img, C, H, W, p, gw, gh * gw,
                                                                   (int)rowlen);
  CHECK_LAUNCH();
}

template <typename T>
__global__ void tokens_fwd_kernel(T *x, const T *patches, const float *cls, const float *pos,
                                  int Np, int D, size_t total) {
  const size_t N = (size_t)Np + 1;
  GRID_STRIDE(e, total) {
    const size_t d = e % D, r = e / D, b = r / N, j = r % N;
    const float src = j == 0 ? cls[d] : ldf(&patches[(b * Np + j - 1) * D + d]);
    stf(&x[e], src + pos[j * D + d]);
  }
}
template <typename T>
void k_tokens_fwd(T *x, const T *patches, const float *cls, const float *pos, int B, int Np, int D) {
  const size_t total = (size_t)B * (Np + 1) * D;
  if (!total) return;
  tokens_fwd_kernel<T><<<cu_blocks(total, EW_THREADS), EW_THREADS, 0, cu.stream>>>(
      x, patches, cls, pos, Np, D, total);
  CHECK_LAUNCH();
}

template <typename T>
__global__ void tokens_copy_kernel(T *dpatches, const T *dx, int Np, int D, size_t total) {
  GRID_STRIDE(e, total) {
    const size_t d = e % D, r = e / D, b = r / Np, i = r % Np;
    dpatches[e] = dx[(b * (Np + 1) + 1 + i) * D + d];
  }
}
/* dpos[j, c] += sum_b dx[b, j, c] (and dcls for j = 0), the samples summed in order. */
template <typename T>
__global__ void tokens_sum_kernel(float *dcls, float *dpos, const T *dx, int B, int Np, int D) {
  const size_t N = (size_t)Np + 1, total = N * D;
  GRID_STRIDE(e, total) {
    const size_t j = e / D, c = e % D;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += ldf(&dx[((size_t)b * N + j) * D + c]);
    dpos[e] += acc;
    if (j == 0) dcls[c] += acc;
  }
}
template <typename T>
void k_tokens_bwd(T *dpatches, float *dcls, float *dpos, const T *dx, int B, int Np, int D) {
  const size_t np = (size_t)B * Np * D;
  if (dpatches && np) {
    tokens_copy_kernel<T><<<cu_blocks(np, EW_THREADS), EW_THREADS, 0, cu.stream>>>(dpatches, dx,
                                                                                    Np, D, np);
    CHECK_LAUNCH();
  }
  const size_t ns = (size_t)(Np + 1) * D;
  tokens_sum_kernel<T><<<cu_blocks(ns, EW_THREADS), EW_THREADS, 0, cu.stream>>>(dcls, dpos, dx, B,
                                                                                 Np, D);
  CHECK_LAUNCH();
}

/* ---- centre and EMA ----------------------------------------------------------------------------- */

__global__ void center_kernel(float *center, const float *tsum, int K, float count, float a,
                              float b) {
  GRID_STRIDE(k, (size_t)K) {
    center[k] = __fadd_rn(__fmul_rn(center[k], a), __fmul_rn(__fdiv_rn(tsum[k], count), b));
  }
}
void k_center_update(float *center, const float *tsum, int K, float count, double m) {
  if (K <= 0) return;
  center_kernel<<<cu_blocks((size_t)K, EW_THREADS), EW_THREADS, 0, cu.stream>>>(
      center, tsum, K, count, (float)m, (float)(1.0 - m));
  CHECK_LAUNCH();
}

__global__ void ema_kernel(float *dst, const float *src, size_t n, float a, float b) {
  GRID_STRIDE(i, n) dst[i] = __fadd_rn(__fmul_rn(dst[i], a), __fmul_rn(b, src[i]));
}
void k_ema(float *dst, const float *src, size_t n, double m) {
  if (!n) return;
  ema_kernel<<<cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu.stream>>>(dst, src, n, (float)m,
                                                                     (float)(1.0 - m));
  CHECK_LAUNCH();
}

__global__ void add_f32_kernel(float *dst, const float *src, size_t n) {
  GRID_STRIDE(i, n) dst[i] = __fadd_rn(dst[i], src[i]);
}
void k_add_f32(float *dst, const float *src, size_t n) {
  if (!n) return;
  add_f32_kernel<<<cu_blocks(n, EW_THREADS), EW_THREADS, 0, cu.stream>>>(dst, src, n);
  CHECK_LAUNCH();
}

/* ---- instantiations ----------------------------------------------------------------------------- */

#define INSTANTIATE(T)                                                                            \
  template void k_convert_from_f32<T>(T *, const float *, size_t);                                \
  template void k_convert_to_f32<T>(float *, const T *, size_t);                                  \
  template void k_gelu_fwd<T>(T *, const T *, size_t, int);                                       \
  template void k_gelu_bwd<T>(T *, const T *, const T *, size_t, int);                            \
  template void k_residual_fwd<T>(T *, const T *, const T *, const float *, int, int, int);       \
  template void k_gelu_bwd_bias<T>(T *, float *, const T *, const T *, int, int, int);           \
  template void k_residual_bwd<T>(T *, const T *, const float *, int, int, int);                  \
  template void k_patchify<T>(T *, const float *, int, int, int, int, int);                       \
  template void k_tokens_fwd<T>(T *, const T *, const float *, const float *, int, int, int);      \
  template void k_tokens_bwd<T>(T *, float *, float *, const T *, int, int, int);
INSTANTIATE(float)
INSTANTIATE(bf16)
INSTANTIATE(f16)
