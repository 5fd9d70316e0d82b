/* layernorm.cu - row normalisations on the GPU: LayerNorm, L2 normalisation, weight normalisation.
 *
 * One warp per row, statistics in fp32 from two passes over the row (mean, then the centred sum of
 * squares, as the CPU backend does in double), warp sums in a fixed butterfly order.  Parameter
 * gradients of LayerNorm are column sums over rows (colsum.cuh, deterministic). */
#include "build_config.h"

#include "colsum.cuh"

#define ROWS_PER_BLOCK 8 /* warps per block */

static unsigned row_blocks(int rows) { return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

/* ---- LayerNorm ---------------------------------------------------------------------------------- */

template <typename T>
__global__ void ln_fwd_kernel(T *y, float *mean, float *rstd, const T *x, int ldx, const float *g,
                              const float *b, int rows, int D, float eps) {
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *xr = x + (size_t)row * ldx;
  T *yr = y + (size_t)row * D;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += ldf(&xr[d]);
  const float mu = warp_sum(s) / D;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float t = ldf(&xr[d]) - mu;
    ss += t * t;
  }
  const float rs = 1.0f / sqrtf(warp_sum(ss) / D + eps);
  for (int d = lane; d < D; d += 32) stf(&yr[d], (ldf(&xr[d]) - mu) * rs * g[d] + b[d]);
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

template <typename T>
void k_layernorm_fwd(T *y, float *mean, float *rstd, const T *x, int ldx, const float *g,
                     const float *b, int rows, int D, float eps) {
  if (rows <= 0) return;
  ln_fwd_kernel<T><<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(y, mean, rstd, x, ldx,
                                                                            g, b, rows, D, eps);
  CHECK_LAUNCH();
}

/* dx += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy g. */
template <typename T>
__global__ void ln_bwd_kernel(T *dx, const T *dy, const T *x, int ldx, const float *mean,
                              const float *rstd, const float *g, int rows, int D) {
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *xr = x + (size_t)row * ldx, *dyr = dy + (size_t)row * D;
  T *dxr = dx + (size_t)row * ldx;
  const float mu = mean[row], rs = rstd[row];
  float a = 0.0f, c = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float dxh = ldf(&dyr[d]) * g[d];
    a += dxh;
    c += dxh * ((ldf(&xr[d]) - mu) * rs);
  }
  a = warp_sum(a) / D;
  c = warp_sum(c) / D;
  for (int d = lane; d < D; d += 32) {
    const float xh = (ldf(&xr[d]) - mu) * rs;
    stf(&dxr[d], ldf(&dxr[d]) + rs * (ldf(&dyr[d]) * g[d] - a - xh * c));
  }
}

/* dy * xhat and dy at (row r, column c): the terms of dg and db. */
template <typename T> struct ln_dgdb_elem {
  const T *dy, *x;
  int ldx, D;
  const float *mean, *rstd;
  __device__ void operator()(int r, int c, float *v) const {
    const float xh = (ldf(&x[(size_t)r * ldx + c]) - mean[r]) * rstd[r];
    v[1] = ldf(&dy[(size_t)r * D + c]);
    v[0] = v[1] * xh;
  }
};

template <typename T>
void k_layernorm_bwd(T *dx, float *dg, float *db, const T *dy, const T *x, int ldx,
                     const float *mean, const float *rstd, const float *g, int rows, int D) {
  if (rows <= 0) return;
  ln_bwd_kernel<T><<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(dx, dy, x, ldx, mean,
                                                                            rstd, g, rows, D);
  CHECK_LAUNCH();
  SCD_ASSERT(dg && db); /* ops.h: both accumulate */
  /* one pass over dy for both */
  colsum_multi_run<2>(dg, db, ln_dgdb_elem<T>{dy, x, ldx, D, mean, rstd}, rows, D, 1);
}

/* ---- L2 normalisation (F.normalize, eps 1e-12) -------------------------------------------------- */

#define L2_EPS 1e-12f

template <typename T>
__global__ void l2_fwd_kernel(T *y, float *norm, const T *x, int rows, int D) {
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *xr = x + (size_t)row * D;
  T *yr = y + (size_t)row * D;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float v = ldf(&xr[d]);
    ss += v * v;
  }
  const float n = sqrtf(warp_sum(ss));
  const float den = n > L2_EPS ? n : L2_EPS;
  for (int d = lane; d < D; d += 32) stf(&yr[d], ldf(&xr[d]) / den);
  if (lane == 0) norm[row] = n;
}

/* Above the clamp: dx = (dy - y (y.dy)) / |x|; at the clamp the map is x / eps. */
template <typename T>
__global__ void l2_bwd_kernel(T *dx, const T *dy, const T *y, const float *norm, int rows, int D) {
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *yr = y + (size_t)row * D, *dyr = dy + (size_t)row * D;
  T *dxr = dx + (size_t)row * D;
  const float n = norm[row];
  if (n > L2_EPS) {
    float dot = 0.0f;
    for (int d = lane; d < D; d += 32) dot += ldf(&yr[d]) * ldf(&dyr[d]);
    dot = warp_sum(dot);
    for (int d = lane; d < D; d += 32) stf(&dxr[d], (ldf(&dyr[d]) - ldf(&yr[d]) * dot) / n);
  } else {
    for (int d = lane; d < D; d += 32) stf(&dxr[d], ldf(&dyr[d]) / L2_EPS);
  }
}

template <typename T> void k_l2norm_fwd(T *y, float *norm, const T *x, int rows, int D) {
  if (rows <= 0) return;
  l2_fwd_kernel<T><<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(y, norm, x, rows, D);
  CHECK_LAUNCH();
}
template <typename T>
void k_l2norm_bwd(T *dx, const T *dy, const T *y, const float *norm, int rows, int D) {
  if (rows <= 0) return;
  l2_bwd_kernel<T><<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(dx, dy, y, norm, rows,
                                                                            D);
  CHECK_LAUNCH();
}

/* ---- weight normalisation (torch weight_norm, dim 0, no epsilon) -------------------------------- */

__global__ void wn_fwd_kernel(float *w, float *vnorm, const float *g, const float *v, int K, int D) {
  const int k = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (k >= K) return;
  const float *vr = v + (size_t)k * D;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) ss += vr[d] * vr[d];
  const float n = sqrtf(warp_sum(ss));
  const float f = g[k] / n; /* torch: v * (g / ||v||) */
  float *wr = w + (size_t)k * D;
  for (int d = lane; d < D; d += 32) wr[d] = vr[d] * f;
  if (lane == 0) vnorm[k] = n;
}

/* dv += (g/|v|) (dw - v (v.dw)/|v|^2); dg += (v.dw)/|v|. */
__global__ void wn_bwd_kernel(float *dg, float *dv, const float *dw, const float *g, const float *v,
                              const float *vnorm, int K, int D) {
  const int k = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (k >= K) return;
  const float *vr = v + (size_t)k * D, *dwr = dw + (size_t)k * D;
  float *dvr = dv + (size_t)k * D;
  const float n = vnorm[k];
  float dot = 0.0f;
  for (int d = lane; d < D; d += 32) dot += vr[d] * dwr[d];
  dot = warp_sum(dot);
  if (dg && lane == 0) dg[k] += dot / n;
  const float f = g[k] / n, c = dot / (n * n);
  for (int d = lane; d < D; d += 32) dvr[d] += f * (dwr[d] - vr[d] * c);
}

void k_weightnorm_fwd(float *w, float *vnorm, const float *g, const float *v, int K, int D) {
  if (K <= 0) return;
  wn_fwd_kernel<<<row_blocks(K), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(w, vnorm, g, v, K, D);
  CHECK_LAUNCH();
}
void k_weightnorm_bwd(float *dg, float *dv, const float *dw, const float *g, const float *v,
                      const float *vnorm, int K, int D) {
  if (K <= 0) return;
  wn_bwd_kernel<<<row_blocks(K), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(dg, dv, dw, g, v, vnorm, K, D);
  CHECK_LAUNCH();
}

#define INSTANTIATE(T)                                                                            \
  template void k_layernorm_fwd<T>(T *, float *, float *, const T *, int, const float *,           \
                                   const float *, int, int, float);                               \
  template void k_layernorm_bwd<T>(T *, float *, float *, const T *, const T *, int, const float *, \
                                   const float *, const float *, int, int);                       \
  template void k_l2norm_fwd<T>(T *, float *, const T *, int, int);                               \
  template void k_l2norm_bwd<T>(T *, const T *, const T *, const float *, int, int);
INSTANTIATE(float)
INSTANTIATE(bf16)
