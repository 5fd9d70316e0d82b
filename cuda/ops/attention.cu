/* attention.cu - multi-head attention in the flash-attention style: tiles in shared memory, online
 * softmax, only the row log-sum-exp kept for backward (no N x N matrix in memory).
 *
 * Layouts are those of ops.h: qkv [B, N, 3, H, hd] (read in place, no permutation), out and dout
 * [B, N, H, hd], the state lse [B, H, N] fp32.  Non-causal, any N, hd <= 128 (padded inside to
 * 16, 32, 64 or 128).  Every block owns a tile of 32 rows and walks the other side in tiles of 32;
 * 128 threads, each computing 2 x 4 scores and 2 x hd/8 outputs; fp32 in shared memory and
 * registers whatever the storage type.
 *
 * Backward without atomics (deterministic): one kernel per query tile computes
 * D_i = sum_j P_ij dP_ij = dO_i . O_i from the forward output, and dQ; a second one per key tile
 * walks all queries for dK and dV.  P is recomputed from the scores and the saved lse (7 hd-long
 * products per score pair in backward against 2 in forward; see the README of the benchmarks for
 * timings).
 *
 * In bf16 on compute capability 8.0 or later, other kernels run the same algorithm on tensor
 * cores: head dimensions 32 and 64 (ViT-S, ViT-B) on mma.sync with the scores in registers
 * (attention_mma.cu, the default path), other multiples of 16 on wmma where the GPU gives a block
 * the backward's shared memory (attention_tc.cu).  These kernels take the rest: fp32, and the
 * head dimensions the tensor-core kernels do not. */
#include "build_config.h"

#include <math.h>

#include "cuda/ops/cuda_internal.h"

#define TQ 32      /* rows of a tile */
#define TK 32      /* columns (the other side) of a tile */
#define ATHREADS 128

/* Rows r0.. r0+31 of one head's q, k or v (or of dout) into s[32][HDP+1] as fp32; rows >= N and
 * columns >= hd are zero.  src points at row 0 of the head, rows `ld` elements apart. */
template <typename T, int HDP>
__device__ __forceinline__ void load_tile(float *s, const T *src, size_t ld, int r0, int N, int hd) {
  for (int e = threadIdx.x; e < 32 * HDP; e += ATHREADS) {
    const int r = e / HDP, d = e % HDP, n = r0 + r;
    s[r * (HDP + 1) + d] = (n < N && d < hd) ? ldf(&src[(size_t)n * ld + d]) : 0.0f;
  }
}

/* acc[i][j] = dot(A row ty+16i, B row tx+8j) over HDP, both [32][HDP+1] in shared memory. */
template <int HDP>
__device__ __forceinline__ void tile_dots(float acc[2][4], const float *A, const float *Bm, int tx,
                                          int ty) {
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
#pragma unroll 8
  for (int d = 0; d < HDP; d++) {
    const float a0 = A[ty * (HDP + 1) + d], a1 = A[(ty + 16) * (HDP + 1) + d];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float bv = Bm[(tx + 8 * j) * (HDP + 1) + d];
      acc[0][j] += a0 * bv;
      acc[1][j] += a1 * bv;
    }
  }
}

/* acc[i][c] += sum_j W[ty+16i][j] X[j][tx+8c], W [32][33], X [32][HDP+1]. */
template <int HDP>
__device__ __forceinline__ void tile_accum(float acc[2][HDP / 8], const float *W, const float *X,
                                           int tx, int ty) {
#pragma unroll 4
  for (int j = 0; j < 32; j++) {
    const float w0 = W[ty * (TK + 1) + j], w1 = W[(ty + 16) * (TK + 1) + j];
#pragma unroll
    for (int c = 0; c < HDP / 8; c++) {
      const float x = X[j * (HDP + 1) + tx + 8 * c];
      acc[0][c] += w0 * x;
      acc[1][c] += w1 * x;
    }
  }
}

/* ---- forward ------------------------------------------------------------------------------------ */

template <typename T, int HDP>
__global__ void __launch_bounds__(ATHREADS)
    attn_fwd_kernel(T *out, float *lse, const T *qkv, int N, int H, int hd, float scale) {
  extern __shared__ float sm[];
  float *Qs = sm, *Ks = Qs + TQ * (HDP + 1), *Vs = Ks + TK * (HDP + 1);
  float *Ps = Vs + TK * (HDP + 1), *m_s = Ps + TQ * (TK + 1), *l_s = m_s + TQ, *a_s = l_s + TQ;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, q0 = blockIdx.y * TQ;
  const int t = threadIdx.x, tx = t & 7, ty = t >> 3;
  const size_t ld = 3 * (size_t)H * hd;
  const T *base = qkv + (size_t)b * N * ld + (size_t)h * hd;
  load_tile<T, HDP>(Qs, base, ld, q0, N, hd);
  if (t < TQ) {
    m_s[t] = -INFINITY;
    l_s[t] = 0.0f;
  }
  float o[2][HDP / 8];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int c = 0; c < HDP / 8; c++) o[i][c] = 0.0f;

  for (int k0 = 0; k0 < N; k0 += TK) {
    __syncthreads(); /* the previous tile is consumed */
    load_tile<T, HDP>(Ks, base + (size_t)H * hd, ld, k0, N, hd);
    load_tile<T, HDP>(Vs, base + 2 * (size_t)H * hd, ld, k0, N, hd);
    __syncthreads();
    float s[2][4];
    tile_dots<HDP>(s, Qs, Ks, tx, ty);
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int c = tx + 8 * j;
        Ps[(ty + 16 * i) * (TK + 1) + c] = k0 + c < N ? s[i][j] * scale : -INFINITY;
      }
    __syncthreads();
    { /* online softmax: 4 threads per row, 8 columns each */
      const int r = t >> 2, part = t & 3;
      float *pr = Ps + r * (TK + 1) + part * 8;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; j++) mx = fmaxf(mx, pr[j]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_old = m_s[r], m_new = fmaxf(m_old, mx); /* finite: key k0 exists */
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; j++) {
        const float p = pr[j] == -INFINITY ? 0.0f : expf(pr[j] - m_new);
        pr[j] = p;
        sum += p;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (part == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        a_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const float alpha = a_s[ty + 16 * i];
#pragma unroll
      for (int c = 0; c < HDP / 8; c++) o[i][c] *= alpha;
    }
    tile_accum<HDP>(o, Ps, Vs, tx, ty);
  }
  const size_t ldo = (size_t)H * hd;
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = ty + 16 * i, n = q0 + r;
    if (n >= N) continue;
    const float inv = 1.0f / l_s[r];
    T *orow = out + ((size_t)b * N + n) * ldo + (size_t)h * hd;
#pragma unroll
    for (int c = 0; c < HDP / 8; c++) {
      const int d = tx + 8 * c;
      if (d < hd) stf(&orow[d], o[i][c] * inv);
    }
  }
  if (lse && t < TQ && q0 + t < N) lse[(size_t)bh * N + q0 + t] = m_s[t] + logf(l_s[t]);
}

/* The softmax matrices themselves, P = exp(s - lse), for attention maps. */
template <typename T, int HDP>
__global__ void __launch_bounds__(ATHREADS)
    attn_probs_kernel(float *probs, const float *lse, const T *qkv, int N, int H, int hd,
                      float scale) {
  extern __shared__ float sm[];
  float *Qs = sm, *Ks = Qs + TQ * (HDP + 1);
  const int bh = blockIdx.x, b = bh / H, h = bh % H, q0 = blockIdx.y * TQ;
  const int t = threadIdx.x, tx = t & 7, ty = t >> 3;
  const size_t ld = 3 * (size_t)H * hd;
  const T *base = qkv + (size_t)b * N * ld + (size_t)h * hd;
  load_tile<T, HDP>(Qs, base, ld, q0, N, hd);
  for (int k0 = 0; k0 < N; k0 += TK) {
    __syncthreads();
    load_tile<T, HDP>(Ks, base + (size_t)H * hd, ld, k0, N, hd);
    __syncthreads();
    float s[2][4];
    tile_dots<HDP>(s, Qs, Ks, tx, ty);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int n = q0 + ty + 16 * i;
      if (n >= N) continue;
      const float l = lse[(size_t)bh * N + n];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int c = k0 + tx + 8 * j;
        if (c < N) probs[((size_t)bh * N + n) * N + c] = expf(s[i][j] * scale - l);
      }
    }
  }
}

/* ---- backward ----------------------------------------------------------------------------------- */

/* Per query tile: D_i = sum_j P_ij dP_ij = dO_i . O_i (saved for the key-side kernel) and
 * dQ_i = scale sum_j P_ij (dP_ij - D_i) k_j. */
template <typename T, int HDP>
__global__ void __launch_bounds__(ATHREADS)
    attn_bwd_dq_kernel(T *dqkv, float *Dg, const T *dout, const T *out, const T *qkv,
                       const float *lse, int N, int H, int hd, float scale) {
  extern __shared__ float sm[];
  float *Qs = sm, *dOs = Qs + TQ * (HDP + 1), *Ks = dOs + TQ * (HDP + 1), *Vs = Ks + TK * (HDP + 1);
  float *Ss = Vs + TK * (HDP + 1), *lse_s = Ss + TQ * (TK + 1), *D_s = lse_s + TQ;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, q0 = blockIdx.y * TQ;
  const int t = threadIdx.x, tx = t & 7, ty = t >> 3;
  const size_t ld = 3 * (size_t)H * hd, ldo = (size_t)H * hd;
  const T *base = qkv + (size_t)b * N * ld + (size_t)h * hd;
  load_tile<T, HDP>(Qs, base, ld, q0, N, hd);
  load_tile<T, HDP>(dOs, dout + (size_t)b * N * ldo + (size_t)h * hd, ldo, q0, N, hd);
  if (t < TQ) lse_s[t] = q0 + t < N ? lse[(size_t)bh * N + q0 + t] : 0.0f;

  /* D from the output rows (in the K tile's space until the loop below): 4 threads per row, lanes
   * 4r..4r+3 of one warp; rows >= N and columns >= hd are zero */
  load_tile<T, HDP>(Ks, out + (size_t)b * N * ldo + (size_t)h * hd, ldo, q0, N, hd);
  __syncthreads();
  {
    const int r = t >> 2, part = t & 3;
    float Dp = 0.0f;
    for (int d = part; d < HDP; d += 4) Dp += dOs[r * (HDP + 1) + d] * Ks[r * (HDP + 1) + d];
    Dp += __shfl_xor_sync(0xffffffffu, Dp, 1);
    Dp += __shfl_xor_sync(0xffffffffu, Dp, 2);
    if (part == 0) D_s[r] = Dp;
  }

  /* dQ */
  float dq[2][HDP / 8];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int c = 0; c < HDP / 8; c++) dq[i][c] = 0.0f;
  for (int k0 = 0; k0 < N; k0 += TK) {
    __syncthreads();
    load_tile<T, HDP>(Ks, base + (size_t)H * hd, ld, k0, N, hd);
    load_tile<T, HDP>(Vs, base + 2 * (size_t)H * hd, ld, k0, N, hd);
    __syncthreads();
    float s[2][4], dp[2][4];
    tile_dots<HDP>(s, Qs, Ks, tx, ty);
    tile_dots<HDP>(dp, dOs, Vs, tx, ty);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int r = ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int c = tx + 8 * j;
        const float p = k0 + c < N ? expf(s[i][j] * scale - lse_s[r]) : 0.0f;
        Ss[r * (TK + 1) + c] = p * (dp[i][j] - D_s[r]) * scale;
      }
    }
    __syncthreads();
    tile_accum<HDP>(dq, Ss, Ks, tx, ty);
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = ty + 16 * i, n = q0 + r;
    if (n >= N) continue;
    T *row = dqkv + ((size_t)b * N + n) * ld + (size_t)h * hd;
#pragma unroll
    for (int c = 0; c < HDP / 8; c++) {
      const int d = tx + 8 * c;
      if (d < hd) stf(&row[d], dq[i][c]);
    }
    if (tx == 0) Dg[(size_t)bh * N + n] = D_s[r];
  }
}

/* Per key tile: dV_j = sum_i P_ij dO_i, dK_j = scale sum_i P_ij (dP_ij - D_i) q_i. */
template <typename T, int HDP>
__global__ void __launch_bounds__(ATHREADS)
    attn_bwd_dkv_kernel(T *dqkv, const float *Dg, const T *dout, const T *qkv, const float *lse,
                        int N, int H, int hd, float scale) {
  extern __shared__ float sm[];
  float *Ks = sm, *Vs = Ks + TK * (HDP + 1), *Qs = Vs + TK * (HDP + 1), *dOs = Qs + TQ * (HDP + 1);
  float *Ps = dOs + TQ * (HDP + 1), *dSs = Ps + TK * (TQ + 1), *lse_s = dSs + TK * (TQ + 1);
  float *D_s = lse_s + TQ;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, k0 = blockIdx.y * TK;
  const int t = threadIdx.x, tx = t & 7, ty = t >> 3;
  const size_t ld = 3 * (size_t)H * hd, ldo = (size_t)H * hd;
  const T *base = qkv + (size_t)b * N * ld + (size_t)h * hd;
  const T *obase = dout + (size_t)b * N * ldo + (size_t)h * hd;
  load_tile<T, HDP>(Ks, base + (size_t)H * hd, ld, k0, N, hd);
  load_tile<T, HDP>(Vs, base + 2 * (size_t)H * hd, ld, k0, N, hd);
  float dk[2][HDP / 8], dv[2][HDP / 8];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int c = 0; c < HDP / 8; c++) dk[i][c] = dv[i][c] = 0.0f;
  for (int q0 = 0; q0 < N; q0 += TQ) {
    __syncthreads();
    load_tile<T, HDP>(Qs, base, ld, q0, N, hd);
    load_tile<T, HDP>(dOs, obase, ldo, q0, N, hd);
    if (t < TQ) {
      const int n = q0 + t;
      lse_s[t] = n < N ? lse[(size_t)bh * N + n] : 0.0f;
      D_s[t] = n < N ? Dg[(size_t)bh * N + n] : 0.0f;
    }
    __syncthreads();
    float s[2][4], dp[2][4]; /* rows: keys ty, ty+16; columns: queries tx+8j */
    tile_dots<HDP>(s, Ks, Qs, tx, ty);
    tile_dots<HDP>(dp, Vs, dOs, tx, ty);
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int r = ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int c = tx + 8 * j;
        const float p = q0 + c < N ? expf(s[i][j] * scale - lse_s[c]) : 0.0f;
        Ps[r * (TQ + 1) + c] = p;
        dSs[r * (TQ + 1) + c] = p * (dp[i][j] - D_s[c]) * scale;
      }
    }
    __syncthreads();
    tile_accum<HDP>(dv, Ps, dOs, tx, ty);
    tile_accum<HDP>(dk, dSs, Qs, tx, ty);
  }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = ty + 16 * i, n = k0 + r;
    if (n >= N) continue;
    T *krow = dqkv + ((size_t)b * N + n) * ld + (size_t)H * hd + (size_t)h * hd;
    T *vrow = krow + (size_t)H * hd;
#pragma unroll
    for (int c = 0; c < HDP / 8; c++) {
      const int d = tx + 8 * c;
      if (d < hd) {
        stf(&krow[d], dk[i][c]);
        stf(&vrow[d], dv[i][c]);
      }
    }
  }
}

/* ---- launchers ---------------------------------------------------------------------------------- */

template <int HDP> static size_t smem_fwd(void) {
  return sizeof(float) * (3 * 32 * (HDP + 1) + TQ * (TK + 1) + 3 * TQ);
}
template <int HDP> static size_t smem_bwd(void) {
  return sizeof(float) * (4 * 32 * (HDP + 1) + 2 * 32 * (TK + 1) + 2 * TQ);
}

/* Kernels with more than 48 KiB of dynamic shared memory must say so once. */
template <typename K> static void allow_smem(K kernel, size_t bytes, int *done) {
  if (*done || bytes <= 48 * 1024) return;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  *done = 1;
}

/* (batch x heads) in x, whose limit is 2^31 - 1 (y and z stop at 65535: 1366 ViT-S crops of one
 * batch); the tiles of 32 tokens in y. */
static dim3 attn_grid(int B, int N, int H) {
  const long bh = (long)B * H, tiles = (N + 31) / 32;
  if (bh > 2147483647L || tiles > 65535)
    SCD_FAIL("attention: grid of %ld (batch x heads) x %ld tiles exceeds the CUDA limits", bh, tiles);
  return dim3((unsigned)bh, (unsigned)tiles);
}

/* bf16 shapes the tensor-core kernels cover go there (attention_mma.cu for head dimensions 32 and
 * 64, attention_tc.cu for the other multiples of 16); 0 for the rest. */
static int tc_fwd(float *, float *, const float *, int, int, int, int, float) { return 0; }
static int tc_fwd(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd, float scale) {
  if (k_attn_mma_covers(B * H, hd, qkv, NULL)) {
    k_attn_mma_fwd(out, lse, qkv, B, N, H, hd, scale);
    return 1;
  }
  if (!k_attn_tc_covers(hd, qkv, NULL)) return 0;
  k_attn_tc_fwd(out, lse, qkv, B, N, H, hd, scale);
  return 1;
}
static int tc_bwd(float *, const float *, const float *, const float *, const float *, float *, int,
                  int, int, int, float) {
  return 0;
}
static int tc_fwd(f16 *out, float *lse, const f16 *qkv, int B, int N, int H, int hd, float scale) {
  if (!k_attn_mma_covers_t<f16>(B * H, hd, qkv, NULL)) return 0;
  k_attn_mma_fwd_t<f16>(out, lse, qkv, B, N, H, hd, scale);
  return 1;
}
static int tc_bwd(f16 *dqkv, const f16 *dout, const f16 *out, const f16 *qkv, const float *lse,
                  float *Dg, int B, int N, int H, int hd, float scale) {
  if (!k_attn_mma_covers_t<f16>(B * H, hd, qkv, dout)) return 0;
  k_attn_mma_bwd_t<f16>(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
  return 1;
}
static int tc_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                  float *Dg, int B, int N, int H, int hd, float scale) {
  if (k_attn_mma_covers(B * H, hd, qkv, dout)) {
    k_attn_mma_bwd(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
    return 1;
  }
  if (!k_attn_tc_covers(hd, qkv, dout)) return 0;
  k_attn_tc_bwd(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
  return 1;
}

template <typename T, int HDP>
static void fwd_hd(T *out, float *lse, float *probs, const T *qkv, int B, int N, int H, int hd,
                   float scale) {
  static int big_f, big_p;
  const dim3 grid = attn_grid(B, N, H);
  if (!tc_fwd(out, lse, qkv, B, N, H, hd, scale)) {
    allow_smem(attn_fwd_kernel<T, HDP>, smem_fwd<HDP>(), &big_f);
    attn_fwd_kernel<T, HDP><<<grid, ATHREADS, smem_fwd<HDP>(), cu.stream>>>(out, lse, qkv, N, H, hd,
                                                                            scale);
    CHECK_LAUNCH();
  }
  if (probs) {
    allow_smem(attn_probs_kernel<T, HDP>, smem_fwd<HDP>(), &big_p);
    attn_probs_kernel<T, HDP><<<grid, ATHREADS, smem_fwd<HDP>(), cu.stream>>>(probs, lse, qkv, N,
                                                                              H, hd, scale);
    CHECK_LAUNCH();
  }
}

template <typename T, int HDP>
static void bwd_hd(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse, int B,
                   int N, int H, int hd, float scale) {
  static int big_q, big_k;
  const dim3 grid = attn_grid(B, N, H);
  float *Dg = (float *)cu_scratch(SLOT_ATTN2, k_attn_state_bytes(B, N, H));
  if (tc_bwd(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale)) return;
  allow_smem(attn_bwd_dq_kernel<T, HDP>, smem_bwd<HDP>(), &big_q);
  allow_smem(attn_bwd_dkv_kernel<T, HDP>, smem_bwd<HDP>(), &big_k);
  attn_bwd_dq_kernel<T, HDP><<<grid, ATHREADS, smem_bwd<HDP>(), cu.stream>>>(dqkv, Dg, dout, out,
                                                                             qkv, lse, N, H, hd, scale);
  CHECK_LAUNCH();
  attn_bwd_dkv_kernel<T, HDP><<<grid, ATHREADS, smem_bwd<HDP>(), cu.stream>>>(dqkv, Dg, dout, qkv,
                                                                              lse, N, H, hd, scale);
  CHECK_LAUNCH();
}

size_t k_attn_state_bytes(int B, int N, int H) {
  return (size_t)B * H * N * sizeof(float) + 256;
}

static void check_hd(int hd) {
  if (hd < 1 || hd > 128)
    scd_fatal(SCD_EXIT_INPUT, "the CUDA attention supports head dimensions up to 128; this model "
              "has embed_dim / num_heads = %d", hd);
}

template <typename T>
void k_attn_fwd(T *out, float *lse, float *probs, const T *qkv, int B, int N, int H, int hd,
                float scale) {
  if (B <= 0 || N <= 0) return;
  check_hd(hd);
  SCD_ASSERT(lse || !probs);
  if (hd <= 16) fwd_hd<T, 16>(out, lse, probs, qkv, B, N, H, hd, scale);
  else if (hd <= 32) fwd_hd<T, 32>(out, lse, probs, qkv, B, N, H, hd, scale);
  else if (hd <= 64) fwd_hd<T, 64>(out, lse, probs, qkv, B, N, H, hd, scale);
  else fwd_hd<T, 128>(out, lse, probs, qkv, B, N, H, hd, scale);
}

template <typename T>
void k_attn_bwd(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse, int B, int N,
                int H, int hd, float scale) {
  if (B <= 0 || N <= 0) return;
  check_hd(hd);
  SCD_ASSERT(lse);
  if (hd <= 16) bwd_hd<T, 16>(dqkv, dout, out, qkv, lse, B, N, H, hd, scale);
  else if (hd <= 32) bwd_hd<T, 32>(dqkv, dout, out, qkv, lse, B, N, H, hd, scale);
  else if (hd <= 64) bwd_hd<T, 64>(dqkv, dout, out, qkv, lse, B, N, H, hd, scale);
  else bwd_hd<T, 128>(dqkv, dout, out, qkv, lse, B, N, H, hd, scale);
}

template void k_attn_fwd<float>(float *, float *, float *, const float *, int, int, int, int, float);
template void k_attn_fwd<bf16>(bf16 *, float *, float *, const bf16 *, int, int, int, int, float);
template void k_attn_bwd<float>(float *, const float *, const float *, const float *, const float *,
                                int, int, int, int, float);
template void k_attn_bwd<bf16>(bf16 *, const bf16 *, const bf16 *, const bf16 *, const float *, int,
                               int, int, int, float);
template void k_attn_fwd<f16>(f16 *, float *, float *, const f16 *, int, int, int, int, float);
template void k_attn_bwd<f16>(f16 *, const f16 *, const f16 *, const f16 *, const float *, int, int,
                              int, int, float);
