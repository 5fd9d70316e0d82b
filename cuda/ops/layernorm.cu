/* layernorm.cu - row normalisations on the GPU: LayerNorm, L2 normalisation, weight normalisation.
 *
 * One warp per row, statistics in fp32 from two passes over the row (mean, then the centred sum of
 * squares, as the CPU backend does in double), warp sums in a fixed butterfly order.  Parameter
 * gradients of LayerNorm are column sums (colsum.cuh, deterministic).  The fused residual +
 * LayerNorm forward and LayerNorm + drop-path backward run the plain ops' kernels. */
#include "build_config.h"

#include "cuda/ops/colsum.cuh"

#define ROWS_PER_BLOCK 8 /* warps per block */

static unsigned row_blocks(int rows) { return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

/* ---- LayerNorm ---------------------------------------------------------------------------------- */

/* V consecutive elements at p as floats, and back (V = 4: one 8-byte bf16 or f16, or 16-byte fp32 access). */
template <int V> __device__ __forceinline__ void ln_ldv(float *v, const float *p) {
  if (V == 4) {
    const float4 q = *(const float4 *)p;
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    for (int j = 0; j < V; j++) v[j] = p[j];
  }
}
template <int V> __device__ __forceinline__ void ln_ldv(float *v, const bf16 *p) {
  if (V == 4) {
    const uint2 q = *(const uint2 *)p;
    const float2 lo = __bfloat1622float2(*(const __nv_bfloat162 *)&q.x);
    const float2 hi = __bfloat1622float2(*(const __nv_bfloat162 *)&q.y);
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
  } else {
    for (int j = 0; j < V; j++) v[j] = ldf(&p[j]);
  }
}
template <int V> __device__ __forceinline__ void ln_ldv(float *v, const f16 *p) {
  if (V == 4) {
    const uint2 q = *(const uint2 *)p;
    const float2 lo = __half22float2(*(const __half2 *)&q.x);
    const float2 hi = __half22float2(*(const __half2 *)&q.y);
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
  } else {
    for (int j = 0; j < V; j++) v[j] = ldf(&p[j]);
  }
}
template <int V> __device__ __forceinline__ void ln_stv(float *p, const float *v) {
  if (V == 4) *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
  else
    for (int j = 0; j < V; j++) p[j] = v[j];
}
template <int V> __device__ __forceinline__ void ln_stv(bf16 *p, const float *v) {
  if (V == 4) {
    uint2 q;
    *(__nv_bfloat162 *)&q.x = __floats2bfloat162_rn(v[0], v[1]);
    *(__nv_bfloat162 *)&q.y = __floats2bfloat162_rn(v[2], v[3]);
    *(uint2 *)p = q;
  } else {
    for (int j = 0; j < V; j++) stf(&p[j], v[j]);
  }
}
template <int V> __device__ __forceinline__ void ln_stv(f16 *p, const float *v) {
  if (V == 4) {
    uint2 q;
    *(__half2 *)&q.x = __floats2half2_rn(v[0], v[1]);
    *(__half2 *)&q.y = __floats2half2_rn(v[2], v[3]);
    *(uint2 *)p = q;
  } else {
    for (int j = 0; j < V; j++) stf(&p[j], v[j]);
  }
}


/* The forward, one warp per row, in two forms with the same arithmetic in the same order (so the
 * same bits), both for the plain op (f NULL: the LayerNorm of x, rows ldx apart) and for the fused
 * one (y = x + s[b] f as k_residual_fwd computes it, stored, then the LayerNorm of y as stored).
 * Up to 1024 columns a lane holds its C elements in registers (d = (32 k + lane) V + j: V = 4
 * consecutive elements per access where the rows allow it, else 1): each load is issued once, all
 * at a time; wider rows loop and read the row again from cache.  The sums' order follows the
 * mapping, so the plain and the fused op agree bit for bit whenever both take the same V. */
template <typename T, int C, int V>
__global__ void ln_fwd_regs_kernel(T *y, T *ln, float *mean, float *rstd, const T *x, int ldx,
                                   const T *f, const float *s, int rps, const float *g,
                                   const float *b, int rows, int D, float eps) {
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *xr = x + (size_t)row * ldx;
  const size_t o = (size_t)row * D;
  float v[C];
  float sum = 0.0f;
  const float sb = f && s ? s[row / rps] : 1.0f;
#pragma unroll
  for (int k = 0; k < C / V; k++) {
    const int d0 = (32 * k + lane) * V;
    if (d0 < D) {
      ln_ldv<V>(v + k * V, xr + d0);
      if (f) {
        float fv[V];
        ln_ldv<V>(fv, f + o + d0);
#pragma unroll
        for (int j = 0; j < V; j++) v[k * V + j] = rounded<T>(v[k * V + j] + sb * fv[j]);
        ln_stv<V>(y + o + d0, v + k * V);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < C / V; k++)
    if ((32 * k + lane) * V < D)
#pragma unroll
      for (int j = 0; j < V; j++) sum += v[k * V + j];
  const float mu = warp_sum(sum) / D;
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < C / V; k++)
    if ((32 * k + lane) * V < D)
#pragma unroll
      for (int j = 0; j < V; j++) {
        const float t = v[k * V + j] - mu;
        ss += t * t;
      }
  const float rs = 1.0f / sqrtf(warp_sum(ss) / D + eps);
#pragma unroll
  for (int k = 0; k < C / V; k++) {
    const int d0 = (32 * k + lane) * V;
    if (d0 < D) {
      float r[V];
#pragma unroll
      for (int j = 0; j < V; j++) r[j] = (v[k * V + j] - mu) * rs * g[d0 + j] + b[d0 + j];
      ln_stv<V>(ln + o + d0, r);
    }
  }
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

template <typename T>
__global__ void ln_fwd_kernel(T *y, T *ln, float *mean, float *rstd, const T *x, int ldx,
                              const T *f, const float *s, int rps, const float *g, const float *b,
                              int rows, int D, float eps) {
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const size_t o = (size_t)row * D;
  const T *xr = x + (size_t)row * ldx;
  if (f) {
    const float sb = s ? s[row / rps] : 1.0f;
    for (int d = lane; d < D; d += 32) stf(&y[o + d], ldf(&xr[d]) + sb * ldf(&f[o + d]));
    xr = y + o; /* read back by the lanes that wrote it */
  }
  float sum = 0.0f;
  for (int d = lane; d < D; d += 32) sum += ldf(&xr[d]);
  const float mu = warp_sum(sum) / D;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float t = ldf(&xr[d]) - mu;
    ss += t * t;
  }
  const float rs = 1.0f / sqrtf(warp_sum(ss) / D + eps);
  for (int d = lane; d < D; d += 32) stf(&ln[o + d], (ldf(&xr[d]) - mu) * rs * g[d] + b[d]);
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

/* Columns per lane of the register forms: one of 4, 8, 12, 16, 24, 32, or 0 (wider than 1024). */
static int ln_lane_cols(int D) {
  static const int cs[] = {4, 8, 12, 16, 24, 32};
  const int need = (D + 31) / 32;
  for (int i = 0; i < 6; i++)
    if (need <= cs[i]) return cs[i];
  return 0;
}

template <typename T>
static void ln_fwd_run(T *y, T *ln, float *mean, float *rstd, const T *x, int ldx, const T *f,
                       const float *s, int rps, const float *g, const float *b, int rows, int D,
                       float eps) {
  if (rows <= 0) return;
  const unsigned nb = row_blocks(rows), nt = 32 * ROWS_PER_BLOCK;
  /* 4 elements per access where every row allows it (ViT widths are multiples of 4) */
  const uintptr_t al = (uintptr_t)y | (uintptr_t)ln | (uintptr_t)x | (uintptr_t)f;
  const int vec = D % 4 == 0 && ldx % 4 == 0 && al % (4 * sizeof(T)) == 0;
  switch (ln_lane_cols(D)) {
#define LNF_CASE(C)                                                                              \
  case C:                                                                                        \
    if (vec)                                                                                     \
      ln_fwd_regs_kernel<T, C, 4><<<nb, nt, 0, cu.stream>>>(y, ln, mean, rstd, x, ldx, f, s, rps, \
                                                            g, b, rows, D, eps);                 \
    else                                                                                         \
      ln_fwd_regs_kernel<T, C, 1><<<nb, nt, 0, cu.stream>>>(y, ln, mean, rstd, x, ldx, f, s, rps, \
                                                            g, b, rows, D, eps);                 \
    break;
    LNF_CASE(4)
    LNF_CASE(8)
    LNF_CASE(12)
    LNF_CASE(16)
    LNF_CASE(24)
    LNF_CASE(32)
#undef LNF_CASE
  default:
    ln_fwd_kernel<T><<<nb, nt, 0, cu.stream>>>(y, ln, mean, rstd, x, ldx, f, s, rps, g, b, rows, D,
                                               eps);
  }
  CHECK_LAUNCH();
}

template <typename T>
void k_layernorm_fwd(T *y, float *mean, float *rstd, const T *x, int ldx, const float *g,
                     const float *b, int rows, int D, float eps) {
  ln_fwd_run<T>((T *)NULL, y, mean, rstd, x, ldx, (const T *)NULL, (const float *)NULL, 1, g, b,
                rows, D, eps);
}

template <typename T>
void k_residual_layernorm_fwd(T *y, T *ln, float *mean, float *rstd, const T *x, const T *f,
                              const float *s, const float *g, const float *b, int B, int rps,
                              int D, float eps) {
  SCD_ASSERT(f);
  ln_fwd_run<T>(y, ln, mean, rstd, x, D, f, s, rps, g, b, B * rps, D, eps);
}

/* The backward: dx += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy g; with df,
 * also df = s[b] dx as stored (the branch gradient of the residual below).
 *
 * Up to 1024 columns, one pass: a warp takes LNB_ROWS rows in turn, each lane holding the dg and db
 * sums of its C columns (ln_bwd_chunk_kernel) in registers, and writes them as the chunk's partial sums;
 * the partials are then summed over chunks by the column-sum kernel.  dy and x are read once, not
 * again for the parameter gradients.  Wider rows take a row kernel and a column sum over the rows.
 * Both orders are fixed: the results do not depend on the GPU or the launch. */
#define LNB_ROWS 4 /* rows per warp: more warps hide the latency of the per-row sums */

/* One element's terms of the row sums: a += dxhat, c += dxhat xhat. */
__device__ __forceinline__ void ln_bwd_terms(float &a, float &c, float dyv, float xv, float gv,
                                             float mu, float rs) {
  const float dxh = dyv * gv;
  a += dxh;
  c += dxh * ((xv - mu) * rs);
}
/* One element's input gradient, added to *dxp, and the branch gradient sb dx (df not NULL). */
template <typename T>
__device__ __forceinline__ void ln_bwd_store(T *dxp, T *dfp, float sb, float dyv, float xh, float gv,
                                             float a, float c, float rs) {
  stf(dxp, ldf(dxp) + rs * (dyv * gv - a - xh * c));
  if (dfp) stf(dfp, sb * ldf(dxp));
}

/* V elements of T, loaded as one access and kept packed until used (fewer registers). */
template <typename T, int V> struct alignas(sizeof(T) * V) ln_pack {
  T e[V];
};
template <typename T, int V> __device__ __forceinline__ void ln_unpack(float *v, const ln_pack<T, V> &p) {
  ln_ldv<V>(v, p.e);
}

/* A warp takes LNB_ROWS rows in turn; lane l holds the elements d = (32 k + l) V + j (k < C / V,
 * j < V) of a row in registers, dy and x read once, with V-wide accesses (V = 4 where the rows
 * allow it, else 1).  The loads of a group of G rows (dy, x and dx, which is accumulated in place)
 * are all issued before the first row is worked on and stored, so a warp waits for memory once
 * per group instead of twice per row (the rows' latency, not their bytes, set this kernel's time on
 * an H100: 2.3x its bytes at 3.35 TB/s).  The arithmetic, its order and the bits are those of one
 * row at a time; the branch gradient is sb times dx as stored (rounded), as before. */
template <typename T, int C, int V>
__global__ void ln_bwd_chunk_kernel(T *dx, float *pg, float *pb, T *df, const float *s, int rps,
                                    const T *dy, const T *x, int ldx, const float *mean,
                                    const float *rstd, const float *g, int rows, int D) {
  /* rows per group: the packed loads of a row take 3 C sizeof(T) / 4 registers (36 at most in all;
   * element-wide rows keep one: their unrolled loads would spill) */
  const int G = V == 1 ? 1 : 3 * C * (int)sizeof(T) / 4 <= 12 ? 4 : 3 * C * (int)sizeof(T) / 4 <= 18 ? 2 : 1;
  static_assert(LNB_ROWS % G == 0, "whole groups");
  const int chunk = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = chunk * LNB_ROWS;
  if (r0 >= rows) return;
  const int r1 = min(rows, r0 + LNB_ROWS);
  float ag[C], ab[C];
#pragma unroll
  for (int k = 0; k < C; k++) ag[k] = ab[k] = 0.0f;
  for (int q0 = r0; q0 < r1; q0 += G) {
    ln_pack<T, V> pdy[G][C / V], px[G][C / V], pdx[G][C / V];
#pragma unroll
    for (int i = 0; i < G; i++)
#pragma unroll
      for (int k = 0; k < C / V; k++) {
        const int row = q0 + i, d0 = (32 * k + lane) * V;
        if (row < r1 && d0 < D) {
          pdy[i][k] = *(const ln_pack<T, V> *)(dy + (size_t)row * D + d0);
          px[i][k] = *(const ln_pack<T, V> *)(x + (size_t)row * ldx + d0);
          pdx[i][k] = *(const ln_pack<T, V> *)(dx + (size_t)row * ldx + d0);
        }
      }
#pragma unroll
    for (int i = 0; i < G; i++) {
      const int row = q0 + i;
      if (row >= r1) break;
      const float mu = mean[row], rs = rstd[row];
      float dyv[C], xv[C];
      float a = 0.0f, c = 0.0f;
#pragma unroll
      for (int k = 0; k < C / V; k++) {
        const int d0 = (32 * k + lane) * V;
        if (d0 < D) {
          ln_unpack<T, V>(dyv + k * V, pdy[i][k]);
          ln_unpack<T, V>(xv + k * V, px[i][k]);
#pragma unroll
          for (int j = 0; j < V; j++) ln_bwd_terms(a, c, dyv[k * V + j], xv[k * V + j], g[d0 + j], mu, rs);
        }
      }
      a = warp_sum(a) / D;
      c = warp_sum(c) / D;
      const float sb = s ? s[row / rps] : 1.0f;
#pragma unroll
      for (int k = 0; k < C / V; k++) {
        const int d0 = (32 * k + lane) * V;
        if (d0 < D) {
          float o[V];
          ln_unpack<T, V>(o, pdx[i][k]);
#pragma unroll
          for (int j = 0; j < V; j++) {
            const float dyj = dyv[k * V + j], xh = (xv[k * V + j] - mu) * rs;
            o[j] += rs * (dyj * g[d0 + j] - a - xh * c);
            ag[k * V + j] += dyj * xh;
            ab[k * V + j] += dyj;
          }
          ln_stv<V>(dx + (size_t)row * ldx + d0, o);
          if (df) { /* the branch gradient of dx as stored */
            float f[V];
#pragma unroll
            for (int j = 0; j < V; j++) f[j] = sb * rounded<T>(o[j]);
            ln_stv<V>(df + (size_t)row * D + d0, f);
          }
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < C / V; k++) {
    const int d0 = (32 * k + lane) * V;
    if (d0 < D)
#pragma unroll
      for (int j = 0; j < V; j++) {
        pg[(size_t)chunk * D + d0 + j] = ag[k * V + j];
        pb[(size_t)chunk * D + d0 + j] = ab[k * V + j];
      }
  }
}

/* The chunks' partial sums of dg and db, as column-sum terms. */
struct ln_partial_elem {
  const float *pg, *pb;
  int D;
  __device__ void operator()(int r, int c, float *v) const {
    v[0] = pg[(size_t)r * D + c];
    v[1] = pb[(size_t)r * D + c];
  }
};

/* Rows wider than 1024 columns: the row kernel, then the parameter gradients as column sums. */
template <typename T>
__global__ void ln_bwd_kernel(T *dx, T *df, const float *s, int rps, const T *dy, const T *x,
                              int ldx, const float *mean, const float *rstd, const float *g,
                              int rows, int D) {
  const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *xr = x + (size_t)row * ldx, *dyr = dy + (size_t)row * D;
  T *dxr = dx + (size_t)row * ldx;
  const float mu = mean[row], rs = rstd[row];
  float a = 0.0f, c = 0.0f;
  for (int d = lane; d < D; d += 32) ln_bwd_terms(a, c, ldf(&dyr[d]), ldf(&xr[d]), g[d], mu, rs);
  a = warp_sum(a) / D;
  c = warp_sum(c) / D;
  const float sb = s ? s[row / rps] : 1.0f;
  for (int d = lane; d < D; d += 32)
    ln_bwd_store(&dxr[d], df ? &df[(size_t)row * D + d] : (T *)NULL, sb, ldf(&dyr[d]),
                 (ldf(&xr[d]) - mu) * rs, g[d], a, c, rs);
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

template <typename T, int C>
static void ln_bwd_chunks(T *dx, float *dg, float *db, T *df, const float *s, int rps, const T *dy,
                          const T *x, int ldx, const float *mean, const float *rstd,
                          const float *g, int rows, int D) {
  const int nchunk = (rows + LNB_ROWS - 1) / LNB_ROWS;
  float *pg = (float *)cu_scratch(SLOT_LN_PARTIAL, (size_t)2 * nchunk * D * sizeof(float));
  float *pb = pg + (size_t)nchunk * D;
  const uintptr_t al = (uintptr_t)dx | (uintptr_t)dy | (uintptr_t)x | (uintptr_t)df;
  if (D % 4 == 0 && ldx % 4 == 0 && al % (4 * sizeof(T)) == 0)
    ln_bwd_chunk_kernel<T, C, 4><<<row_blocks(nchunk), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(
        dx, pg, pb, df, s, rps, dy, x, ldx, mean, rstd, g, rows, D);
  else
    ln_bwd_chunk_kernel<T, C, 1><<<row_blocks(nchunk), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(
        dx, pg, pb, df, s, rps, dy, x, ldx, mean, rstd, g, rows, D);
  CHECK_LAUNCH();
  colsum_multi_run<2>(dg, db, ln_partial_elem{pg, pb, D}, nchunk, D, 1);
}

/* rps is only read with s (the fused op's rows per sample). */
template <typename T>
static void ln_bwd_run(T *dx, float *dg, float *db, T *df, const float *s, int rps, const T *dy,
                       const T *x, int ldx, const float *mean, const float *rstd, const float *g,
                       int rows, int D) {
  if (rows <= 0) return;
  SCD_ASSERT(dg && db); /* ops.h: both accumulate */
  switch (ln_lane_cols(D)) {
#define LNB_CASE(C)                                                                              \
  case C:                                                                                        \
    ln_bwd_chunks<T, C>(dx, dg, db, df, s, rps, dy, x, ldx, mean, rstd, g, rows, D);             \
    return;
    LNB_CASE(4)
    LNB_CASE(8)
    LNB_CASE(12)
    LNB_CASE(16)
    LNB_CASE(24)
    LNB_CASE(32)
#undef LNB_CASE
  }
  ln_bwd_kernel<T><<<row_blocks(rows), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(
      dx, df, s, rps, dy, x, ldx, mean, rstd, g, rows, D);
  CHECK_LAUNCH();
  /* one pass over dy for both */
  colsum_multi_run<2>(dg, db, ln_dgdb_elem<T>{dy, x, ldx, D, mean, rstd}, rows, D, 1);
}

template <typename T>
void k_layernorm_bwd(T *dx, float *dg, float *db, const T *dy, const T *x, int ldx,
                     const float *mean, const float *rstd, const float *g, int rows, int D) {
  ln_bwd_run<T>(dx, dg, db, (T *)NULL, (const float *)NULL, 1, dy, x, ldx, mean, rstd, g, rows, D);
}

template <typename T>
void k_layernorm_residual_bwd(T *dx, float *dg, float *db, T *df, const float *s, const T *dy,
                              const T *x, const float *mean, const float *rstd, const float *g,
                              int B, int rps, int D) {
  SCD_ASSERT(df);
  ln_bwd_run<T>(dx, dg, db, df, s, rps, dy, x, D, mean, rstd, g, B * rps, D);
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

template <typename C>
__global__ void wn_fwd_kernel(float *w, C *wc, float *vnorm, const float *g, const float *v, int K,
                              int D) {
  const int k = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (k >= K) return;
  const float *vr = v + (size_t)k * D;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) ss += vr[d] * vr[d];
  const float n = sqrtf(warp_sum(ss));
  const float f = g[k] / n; /* torch: v * (g / ||v||) */
  float *wr = w + (size_t)k * D;
  C *wcr = wc ? wc + (size_t)k * D : NULL;
  for (int d = lane; d < D; d += 32) {
    const float x = vr[d] * f;
    wr[d] = x;
    if (wcr) stf(&wcr[d], x);
  }
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

template <typename C>
void k_weightnorm_fwd(float *w, C *wc, float *vnorm, const float *g, const float *v, int K, int D) {
  if (K <= 0) return;
  wn_fwd_kernel<C><<<row_blocks(K), 32 * ROWS_PER_BLOCK, 0, cu.stream>>>(w, wc, vnorm, g, v, K, D);
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
  template void k_residual_layernorm_fwd<T>(T *, T *, float *, float *, const T *, const T *,      \
                                            const float *, const float *, const float *, int, int, \
                                            int, float);                                          \
  template void k_layernorm_residual_bwd<T>(T *, float *, float *, T *, const float *, const T *,  \
                                            const T *, const float *, const float *,              \
                                            const float *, int, int, int);                        \
  template void k_l2norm_fwd<T>(T *, float *, const T *, int, int);                               \
  template void k_l2norm_bwd<T>(T *, const T *, const T *, const float *, int, int);
INSTANTIATE(float)
INSTANTIATE(bf16)
INSTANTIATE(f16)
template void k_weightnorm_fwd<bf16>(float *, bf16 *, float *, const float *, const float *, int, int);
template void k_weightnorm_fwd<f16>(float *, f16 *, float *, const float *, const float *, int, int);
