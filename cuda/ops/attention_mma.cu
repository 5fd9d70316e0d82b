/* attention_mma.cu - flash attention on tensor cores with the scores kept in registers (bf16 or
 * f16, head dimension 32 or 64; bf16 on compute capability 8.0 or later, f16 from 7.5).
 * attention_tc.cu does the same with nvcuda::wmma, whose opaque fragments force every per-row step
 * through shared memory; here the PTX matrix product mma.sync m16n8k16 (bf16 or f16 in, fp32
 * accumulate) has a documented fragment layout, so the softmax runs on the accumulators where they
 * are and the probabilities become the next product's operand without leaving registers (the
 * FlashAttention-2 scheme).  Compute capability 7.5 (a T4) has neither m16n8k16 nor cp.async: its
 * f16 form (h75 below) runs each product as two m16n8k8 and copies the tiles through registers.
 * 7.0 (a V100) has no mma.sync of these shapes and no ldmatrix: f16 attention there runs as
 * batched GEMMs (backend_cuda.cu), and these kernels are compiled for it only as empty shells.
 *
 * Fragments of m16n8k16 (g = lane / 4, t = lane % 4): A (16 x 16, row-major) a0 = A[g][2t, 2t+1],
 * a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]; B (16 x 8) b0 = B[2t, 2t+1][g],
 * b1 = B[2t+8, 2t+9][g]; C (16 x 8, fp32) c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1].
 * Two neighbouring C tiles of 8 columns are, rounded to bf16 or f16, exactly the A fragment of a 16-wide
 * k step.  Tiles are staged in shared memory as rows of HD + 8 elements: the 16-byte shift per row
 * keeps ldmatrix free of bank conflicts.
 *
 * A block is 4 warps and 64 rows of one (batch, head), 16 rows per warp; the other side streams
 * through in tiles of 64, double-buffered: the next tile's asynchronous copies (cp.async) fly
 * while this one's products run.  The state is the backend's: the row log-sum-exp [B, H, N] of the scaled
 * scores (natural log), layouts of ops.h (qkv [B, N, 3, H, hd] read in place, out, dout
 * [B, N, H, hd]).
 * - forward: online softmax (running row maximum and sum, the output rescaled when the maximum
 *   grows); P is rounded to bf16 for P V, as the GEMM form stores it.
 * - backward, deterministic without atomics: one kernel per query tile computes D = rowsum(dO * O)
 *   and dQ = scale dS K; one per key tile dV = P^T dO and dK = scale dS^T Q, with P = exp(S - lse)
 *   and dS = P (dP - D) recomputed from the scores (rounded to bf16 before their products).
 *   Sequences of at most 64 tokens (DINO's local crops: 37) fit one tile: one kernel computes the
 *   scores once and all three gradients, dQ = dS K from dS staged in shared memory.
 * The streamed tiles are compile-time in width: the ragged last tile of a sequence (197 tokens:
 * 5 keys past three full tiles; 37: one tile) runs only its 16-key column blocks that hold keys
 * (2, 4 or 6 of the 8 column tiles of 8), so no product is spent on padding past them. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "cuda/ops/cuda_internal.h"
#include "cuda/ops/mma_ptx.cuh"

#define MM_ROWS 64 /* rows of a block, and of a streamed tile */
#define MM_THREADS 128
#define MM_LOG2E 1.4426950408889634f

template <int HD> struct mm_dims {
  static const int LD = HD + 8;                                  /* shared row, elements */
  static const int TILE = MM_ROWS * LD;                          /* one staged tile, elements */
  static const int CHUNKS = MM_ROWS * HD / 8 / MM_THREADS;       /* 16-byte loads per thread */
};

/* Queue the copy of rows r0 .. r0+63 of one head (row i at src + i ld) into s[64][HD+8], rows >= N
 * as zeros (asynchronous: the caller commits, waits and synchronises the block). */
template <typename T, int HD>
__device__ __forceinline__ void mm_load(T *s, const T *src, size_t ld, int r0, int N) {
  typedef mm_dims<HD> D;
  for (int c = 0; c < D::CHUNKS; c++) {
    const int e = (c * MM_THREADS + threadIdx.x) * 8, r = e / HD, col = e % HD;
    const int valid = r0 + r < N;
    mm_cp16<T>(s + r * D::LD + col, valid ? src + (size_t)(r0 + r) * ld + col : src, valid);
  }
}

/* A fragments of rows m0 .. m0+15 of a staged tile, every k step of HD. */
template <typename T, int HD>
__device__ __forceinline__ void mm_afrag(uint32_t a[HD / 16][4], const T *s, int m0) {
  const int l = threadIdx.x & 31;
  for (int kk = 0; kk < HD / 16; kk++)
    mm_ldsm4(a[kk], s + (m0 + (l & 15)) * mm_dims<HD>::LD + kk * 16 + (l >> 4) * 8);
}

/* acc[j] (j < NJ: tiles of 8 columns = rows 8j .. 8j+7 of tile s) += A x s^T: B[k][n] = s[n][k].
 * NJ even: a ragged last tile computes only the column tiles that hold rows of the sequence. */
template <typename T, int HD, int NJ>
__device__ __forceinline__ void mm_abt(float acc[8][4], const uint32_t a[HD / 16][4], const T *s) {
  const int l = threadIdx.x & 31;
  for (int kk = 0; kk < HD / 16; kk++)
    for (int np = 0; np < NJ / 2; np++) {
      uint32_t b[4];
      mm_ldsm4(b, s + (np * 16 + (l & 7) + ((l >> 4) << 3)) * mm_dims<HD>::LD + kk * 16 +
                      ((l >> 3) & 1) * 8);
      mm_mma<T>(acc[2 * np], a[kk], b[0], b[1]);
      mm_mma<T>(acc[2 * np + 1], a[kk], b[2], b[3]);
    }
}

/* acc[j] (j: HD/8 tiles of 8 columns) += P x s over KK k steps of 16, P the 16 x 16 KK fp32
 * accumulators p (rounded to T) and s a staged tile of 16 KK rows: B[k][n] = s[k][n]. */
template <typename T, int HD, int KK>
__device__ __forceinline__ void mm_pv(float acc[HD / 8][4], const float p[8][4], const T *s) {
  const int l = threadIdx.x & 31;
  for (int kk = 0; kk < KK; kk++) {
    uint32_t a[4];
    a[0] = mm_pack<T>(p[2 * kk][0], p[2 * kk][1]);
    a[1] = mm_pack<T>(p[2 * kk][2], p[2 * kk][3]);
    a[2] = mm_pack<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = mm_pack<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    for (int dp = 0; dp < HD / 16; dp++) {
      uint32_t b[4];
      mm_ldsm4_t(b, s + (kk * 16 + (l & 7) + ((l >> 3) & 1) * 8) * mm_dims<HD>::LD + dp * 16 +
                        (l >> 4) * 8);
      mm_mma<T>(acc[2 * dp], a, b[0], b[1]);
      mm_mma<T>(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

/* Column tiles of 8 a tile of `rem` rows needs, rounded up to whole 16-row k steps: 2, 4, 6 or 8
 * (with short tiles off, always 8). */
__device__ __forceinline__ int mm_nj(int rem, int shorten) {
  return !shorten || rem > 48 ? 8 : rem > 32 ? 6 : rem > 16 ? 4 : 2;
}

/* Store a warp's 16 x HD accumulators, times f, as T rows r0 + g and r0 + g + 8 (those < N) of
 * dst (row i at dst + i ld). */
template <typename T, int HD>
__device__ __forceinline__ void mm_store(T *dst, size_t ld, int r0, int N, const float acc[HD / 8][4],
                                         float f0, float f1) {
  const int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
  for (int j = 0; j < HD / 8; j++) {
    const int col = j * 8 + 2 * t;
    if (r0 + g < N)
      *(uint32_t *)(dst + (size_t)(r0 + g) * ld + col) = mm_pack<T>(acc[j][0] * f0, acc[j][1] * f0);
    if (r0 + g + 8 < N)
      *(uint32_t *)(dst + (size_t)(r0 + g + 8) * ld + col) = mm_pack<T>(acc[j][2] * f1, acc[j][3] * f1);
  }
}

/* One step of the double-buffered stream: queue the copies of tile it + 1's rows of a and b into
 * the other half of buf ([2][a, b] tiles), then wait for tile it's (the caller synchronises the
 * block before reading them; the half it fills was last read before the previous barrier).
 * Returns tile it's a; its b follows. */
template <typename T, int HD>
__device__ __forceinline__ const T *mm_pipe(T *buf, const T *a, size_t lda, const T *b,
                                               size_t ldb, int it, int nt, int N) {
  typedef mm_dims<HD> D;
  if (it + 1 < nt) {
    T *nb = buf + ((it + 1) & 1) * 2 * D::TILE;
    mm_load<T, HD>(nb, a, lda, (it + 1) * MM_ROWS, N);
    mm_load<T, HD>(nb + D::TILE, b, ldb, (it + 1) * MM_ROWS, N);
    mm_cp_commit<T>();
    mm_cp_wait<T, 1>();
  } else {
    mm_cp_wait<T, 0>();
  }
  return buf + (it & 1) * 2 * D::TILE;
}

/* ---- forward -------------------------------------------------------------------------------------- */

/* One streamed key tile for a warp's 16 query rows: scores over NJ column tiles of 8 keys (keys
 * past N masked where MASK), online softmax, O += P V over the NJ / 2 k steps that hold keys. */
template <typename T, int HD, int NJ, bool MASK>
__device__ __forceinline__ void mm_fwd_tile(float o[HD / 8][4], float st[4], const uint32_t qa[HD / 16][4],
                                            const T *Ks, const T *Vs, int k0, int N, float c) {
  const int t = threadIdx.x & 3;
  float s[8][4];
  for (int j = 0; j < NJ; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0;
  mm_abt<T, HD, NJ>(s, qa, Ks);
  float x0 = -INFINITY, x1 = -INFINITY;
  for (int j = 0; j < NJ; j++)
    for (int e = 0; e < 4; e++) {
      const int key = k0 + j * 8 + 2 * t + (e & 1);
      s[j][e] = !MASK || key < N ? s[j][e] * c : -INFINITY;
      if (e < 2) x0 = fmaxf(x0, s[j][e]);
      else x1 = fmaxf(x1, s[j][e]);
    }
  for (int sh = 1; sh < 4; sh <<= 1) {
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, sh));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, sh));
  }
  /* every tile holds at least one key < N, so the new maxima are finite */
  const float n0 = fmaxf(st[0], x0), n1 = fmaxf(st[1], x1);
  const float a0 = exp2f(st[0] - n0), a1 = exp2f(st[1] - n1);
  st[0] = n0, st[1] = n1;
  float r0 = 0, r1 = 0;
  for (int j = 0; j < NJ; j++) {
    s[j][0] = exp2f(s[j][0] - n0), s[j][1] = exp2f(s[j][1] - n0);
    s[j][2] = exp2f(s[j][2] - n1), s[j][3] = exp2f(s[j][3] - n1);
    r0 += s[j][0] + s[j][1];
    r1 += s[j][2] + s[j][3];
  }
  st[2] = st[2] * a0 + r0, st[3] = st[3] * a1 + r1;
  for (int j = 0; j < HD / 8; j++) o[j][0] *= a0, o[j][1] *= a0, o[j][2] *= a1, o[j][3] *= a1;
  mm_pv<T, HD, NJ / 2>(o, s, Vs);
}

template <typename T, int HD, int MINB>
__device__ __forceinline__ void mm_fwd_kernel_body(T *out, float *lse, const T *qkv, int N, int H, float scale,
                                                   int shorten) {
  typedef mm_dims<HD> D;
  extern __shared__ uint4 mm_sh[]; /* uint4: 16-byte aligned */
  /* Q, then K and V twice: the next tile's copies fly while this one's products run */
  T *Qs = (T *)mm_sh, *KV = Qs + D::TILE;
  const int bh = blockIdx.y, b = bh / H, h = bh % H, q0 = blockIdx.x * MM_ROWS;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, t = l & 3;
  const size_t ld = (size_t)3 * H * HD;
  const T *q = qkv + (size_t)b * N * ld + (size_t)h * HD, *k = q + (size_t)H * HD, *v = k + (size_t)H * HD;
  mm_load<T, HD>(Qs, q, ld, q0, N);
  mm_load<T, HD>(KV, k, ld, 0, N);
  mm_load<T, HD>(KV + D::TILE, v, ld, 0, N);
  mm_cp_commit<T>();
  const int live = q0 + 16 * w < N; /* a warp whose rows all lie past N only helps load */
  uint32_t qa[HD / 16][4];
  const float c = scale * MM_LOG2E; /* scores in log2 units */
  float st[4] = {-INFINITY, -INFINITY, 0, 0}; /* row maxima and sums of rows g, g + 8 */
  float o[HD / 8][4];
  for (int j = 0; j < HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0;
  const int nt = (N + MM_ROWS - 1) / MM_ROWS;
  for (int it = 0; it < nt; it++) {
    const int k0 = it * MM_ROWS;
    const T *Ks = mm_pipe<T, HD>(KV, k, ld, v, ld, it, nt, N), *Vs = Ks + D::TILE;
    __syncthreads();
    if (live) {
      if (it == 0) mm_afrag<T, HD>(qa, Qs, 16 * w);
      if (it + 1 < nt) {
        mm_fwd_tile<T, HD, 8, false>(o, st, qa, Ks, Vs, k0, N, c);
      } else {
        switch (mm_nj(N - k0, shorten)) {
        case 2: mm_fwd_tile<T, HD, 2, true>(o, st, qa, Ks, Vs, k0, N, c); break;
        case 4: mm_fwd_tile<T, HD, 4, true>(o, st, qa, Ks, Vs, k0, N, c); break;
        case 6: mm_fwd_tile<T, HD, 6, true>(o, st, qa, Ks, Vs, k0, N, c); break;
        default: mm_fwd_tile<T, HD, 8, true>(o, st, qa, Ks, Vs, k0, N, c); break;
        }
      }
    }
    __syncthreads(); /* this buffer's readers are done before the next iteration refills it */
  }
  if (!live) return;
  float l0 = st[2], l1 = st[3];
  for (int sh = 1; sh < 4; sh <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, sh);
    l1 += __shfl_xor_sync(0xffffffffu, l1, sh);
  }
  const int r = q0 + 16 * w;
  mm_store<T, HD>(out + (size_t)b * N * H * HD + (size_t)h * HD, (size_t)H * HD, r, N, o, 1.0f / l0, 1.0f / l1);
  if (lse && t == 0) {
    float *L = lse + (size_t)bh * N;
    if (r + g < N) L[r + g] = (st[0] + log2f(l0)) / MM_LOG2E;
    if (r + g + 8 < N) L[r + g + 8] = (st[1] + log2f(l1)) / MM_LOG2E;
  }
}
template <typename T, int HD, int MINB>
__global__ void __launch_bounds__(MM_THREADS, MINB)
    mm_fwd_kernel(T *out, float *lse, const T *qkv, int N, int H, float scale, int shorten) {
  if constexpr (mm_built<T>()) mm_fwd_kernel_body<T, HD, MINB>(out, lse, qkv, N, H, scale, shorten);
}

/* ---- backward ------------------------------------------------------------------------------------- */

/* D = rowsum(dO * O) of rows q0 .. q0+63 into Ds (0 past N) and, where not NULL, into Dg (the rows
 * < N), two threads per row. */
template <typename T, int HD>
__device__ __forceinline__ void mm_rowdot(float *Ds, float *Dg, const T *dO, const T *O, size_t ldo,
                                          int q0, int N) {
  const int r = threadIdx.x >> 1, half = threadIdx.x & 1;
  float d = 0;
  if (q0 + r < N) {
    const T *a = dO + (size_t)(q0 + r) * ldo + half * (HD / 2), *o = O + (size_t)(q0 + r) * ldo + half * (HD / 2);
    for (int e = 0; e < HD / 2; e++) d += ldf(&a[e]) * ldf(&o[e]);
  }
  d += __shfl_xor_sync(0xffffffffu, d, 1);
  if (half) return;
  Ds[r] = d;
  if (Dg && q0 + r < N) Dg[q0 + r] = d;
}

/* One streamed key tile of dQ for a warp's 16 query rows (row statistics L, D in log2 units). */
template <typename T, int HD, int NJ, bool MASK>
__device__ __forceinline__ void mm_dq_tile(float dq[HD / 8][4], const uint32_t qa[HD / 16][4],
                                           const uint32_t da[HD / 16][4], const T *Ks, const T *Vs,
                                           int k0, int N, float c, const float st[4]) {
  const int t = threadIdx.x & 3;
  float s[8][4], dp[8][4];
  for (int j = 0; j < NJ; j++)
    for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0;
  mm_abt<T, HD, NJ>(s, qa, Ks);
  mm_abt<T, HD, NJ>(dp, da, Vs);
  for (int j = 0; j < NJ; j++)
    for (int e = 0; e < 4; e++) {
      const int key = k0 + j * 8 + 2 * t + (e & 1);
      const float p = !MASK || key < N ? exp2f(s[j][e] * c - st[e >> 1]) : 0.0f;
      /* dS rounded to T by mm_pv, as the GEMM form stores it */
      s[j][e] = p * (dp[j][e] - st[2 + (e >> 1)]);
    }
  mm_pv<T, HD, NJ / 2>(dq, s, Ks);
}

/* dQ for one query tile, and D = rowsum(dO * O) for it into Dg (the key-tile kernel reads it).  K
 * and V tiles are double-buffered as in the forward. */
template <typename T, int HD, int MINB>
__device__ __forceinline__ void mm_bwd_dq_kernel_body(T *dqkv, float *Dg, const T *dout, const T *out, const T *qkv,
                     const float *lse, int N, int H, float scale, int shorten) {
  typedef mm_dims<HD> D;
  extern __shared__ uint4 mm_sh[]; /* uint4: 16-byte aligned */
  T *Qs = (T *)mm_sh, *dOs = Qs + D::TILE, *KV = dOs + D::TILE; /* KV: [2][K, V] */
  float *Ds = (float *)(KV + 4 * D::TILE);
  const int bh = blockIdx.y, b = bh / H, h = bh % H, q0 = blockIdx.x * MM_ROWS;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2;
  const size_t ld = (size_t)3 * H * HD, ldo = (size_t)H * HD;
  const T *q = qkv + (size_t)b * N * ld + (size_t)h * HD, *k = q + (size_t)H * HD, *v = k + (size_t)H * HD;
  const T *dO = dout + (size_t)b * N * ldo + (size_t)h * HD, *O = out + (size_t)b * N * ldo + (size_t)h * HD;
  mm_load<T, HD>(Qs, q, ld, q0, N);
  mm_load<T, HD>(dOs, dO, ldo, q0, N);
  mm_load<T, HD>(KV, k, ld, 0, N);
  mm_load<T, HD>(KV + D::TILE, v, ld, 0, N);
  mm_cp_commit<T>();
  mm_rowdot<T, HD>(Ds, Dg + (size_t)bh * N, dO, O, ldo, q0, N); /* while the copies fly */
  const int live = q0 + 16 * w < N;
  uint32_t qa[HD / 16][4], da[HD / 16][4];
  const int r = q0 + 16 * w;
  const float c = scale * MM_LOG2E;
  float st[4]; /* log-sum-exp (log2 units) and D of rows g, g + 8 */
  st[0] = r + g < N ? lse[(size_t)bh * N + r + g] * MM_LOG2E : 0.0f;
  st[1] = r + g + 8 < N ? lse[(size_t)bh * N + r + g + 8] * MM_LOG2E : 0.0f;
  st[2] = st[3] = 0;
  float dq[HD / 8][4];
  for (int j = 0; j < HD / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0;
  const int nt = (N + MM_ROWS - 1) / MM_ROWS;
  for (int it = 0; it < nt; it++) {
    const int k0 = it * MM_ROWS;
    const T *Ks = mm_pipe<T, HD>(KV, k, ld, v, ld, it, nt, N), *Vs = Ks + D::TILE;
    __syncthreads();
    if (live) {
      if (it == 0) {
        mm_afrag<T, HD>(qa, Qs, 16 * w);
        mm_afrag<T, HD>(da, dOs, 16 * w);
        st[2] = Ds[16 * w + g], st[3] = Ds[16 * w + g + 8];
      }
      if (it + 1 < nt) {
        mm_dq_tile<T, HD, 8, false>(dq, qa, da, Ks, Vs, k0, N, c, st);
      } else {
        switch (mm_nj(N - k0, shorten)) {
        case 2: mm_dq_tile<T, HD, 2, true>(dq, qa, da, Ks, Vs, k0, N, c, st); break;
        case 4: mm_dq_tile<T, HD, 4, true>(dq, qa, da, Ks, Vs, k0, N, c, st); break;
        case 6: mm_dq_tile<T, HD, 6, true>(dq, qa, da, Ks, Vs, k0, N, c, st); break;
        default: mm_dq_tile<T, HD, 8, true>(dq, qa, da, Ks, Vs, k0, N, c, st); break;
        }
      }
    }
    __syncthreads();
  }
  if (!live) return;
  mm_store<T, HD>(dqkv + (size_t)b * N * ld + (size_t)h * HD, ld, r, N, dq, scale, scale);
}
template <typename T, int HD, int MINB>
__global__ void __launch_bounds__(MM_THREADS, MINB)
    mm_bwd_dq_kernel(T *dqkv, float *Dg, const T *dout, const T *out, const T *qkv,
                     const float *lse, int N, int H, float scale, int shorten) {
  if constexpr (mm_built<T>())
    mm_bwd_dq_kernel_body<T, HD, MINB>(dqkv, Dg, dout, out, qkv, lse, N, H, scale, shorten);
}

/* One streamed query tile of dK and dV for a warp's 16 keys: transposed scores (rows the keys,
 * columns the tile's queries, NJ column tiles of 8), the queries' statistics Ls, Ds in shared
 * memory; the keys' A fragments are read again from the staged K and V tiles (fewer registers). */
template <typename T, int HD, int NJ, bool MASK>
__device__ __forceinline__ void mm_dkv_tile(float dk[HD / 8][4], float dv[HD / 8][4], const T *Kw,
                                            const T *Vw, const T *Qs, const T *dOs, const float *Ls,
                                            const float *Ds, int q0, int N, float c) {
  const int t = threadIdx.x & 3;
  float s[8][4], dp[8][4];
  for (int j = 0; j < NJ; j++)
    for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0;
  {
    uint32_t a[HD / 16][4];
    mm_afrag<T, HD>(a, Kw, 0);
    mm_abt<T, HD, NJ>(s, a, Qs);
    mm_afrag<T, HD>(a, Vw, 0);
    mm_abt<T, HD, NJ>(dp, a, dOs);
  }
  for (int j = 0; j < NJ; j++)
    for (int e = 0; e < 4; e++) {
      const int col = j * 8 + 2 * t + (e & 1);
      const float p = !MASK || q0 + col < N ? exp2f(s[j][e] * c - Ls[col]) : 0.0f;
      s[j][e] = p;
      dp[j][e] = p * (dp[j][e] - Ds[col]);
    }
  mm_pv<T, HD, NJ / 2>(dv, s, dOs);
  mm_pv<T, HD, NJ / 2>(dk, dp, Qs);
}

/* dK and dV for one key tile: warp w owns keys k0 + 16 w .. + 15 and walks every query tile, Q,
 * dO and their row statistics double-buffered. */
template <typename T, int HD, int MINB>
__device__ __forceinline__ void mm_bwd_dkv_kernel_body(T *dqkv, const float *Dg, const T *dout, const T *qkv,
                      const float *lse, int N, int H, float scale, int shorten) {
  typedef mm_dims<HD> D;
  extern __shared__ uint4 mm_sh[]; /* uint4: 16-byte aligned */
  T *Ks = (T *)mm_sh, *Vs = Ks + D::TILE, *QD = Vs + D::TILE; /* QD: [2][Q, dO] */
  float *LD2 = (float *)(QD + 4 * D::TILE);                        /* [2][lse, D] */
  const int bh = blockIdx.y, b = bh / H, h = bh % H, k0 = blockIdx.x * MM_ROWS;
  const int w = threadIdx.x >> 5;
  const size_t ld = (size_t)3 * H * HD, ldo = (size_t)H * HD;
  const T *q = qkv + (size_t)b * N * ld + (size_t)h * HD, *k = q + (size_t)H * HD, *v = k + (size_t)H * HD;
  const T *dO = dout + (size_t)b * N * ldo + (size_t)h * HD;
  const float *lse_bh = lse + (size_t)bh * N, *D_bh = Dg + (size_t)bh * N;
  mm_load<T, HD>(Ks, k, ld, k0, N);
  mm_load<T, HD>(Vs, v, ld, k0, N);
  mm_load<T, HD>(QD, q, ld, 0, N);
  mm_load<T, HD>(QD + D::TILE, dO, ldo, 0, N);
  mm_cp_commit<T>();
  if (threadIdx.x < MM_ROWS) {
    const int qi = threadIdx.x;
    LD2[qi] = qi < N ? lse_bh[qi] * MM_LOG2E : 0.0f;
    LD2[MM_ROWS + qi] = qi < N ? D_bh[qi] : 0.0f;
  }
  const int live = k0 + 16 * w < N;
  const float c = scale * MM_LOG2E;
  float dk[HD / 8][4], dv[HD / 8][4];
  for (int j = 0; j < HD / 8; j++)
    for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0;
  const T *Kw = Ks + 16 * w * D::LD, *Vw = Vs + 16 * w * D::LD;
  const int nt = (N + MM_ROWS - 1) / MM_ROWS;
  for (int it = 0; it < nt; it++) {
    const int q0 = it * MM_ROWS;
    const T *Qs = mm_pipe<T, HD>(QD, q, ld, dO, ldo, it, nt, N), *dOs = Qs + D::TILE;
    if (it + 1 < nt && threadIdx.x < MM_ROWS) { /* the next tile's row statistics, likewise */
      const int nb = (it + 1) & 1, qi = q0 + MM_ROWS + threadIdx.x;
      LD2[nb * 2 * MM_ROWS + threadIdx.x] = qi < N ? lse_bh[qi] * MM_LOG2E : 0.0f;
      LD2[nb * 2 * MM_ROWS + MM_ROWS + threadIdx.x] = qi < N ? D_bh[qi] : 0.0f;
    }
    __syncthreads();
    const float *Ls = LD2 + (it & 1) * 2 * MM_ROWS, *Ds = Ls + MM_ROWS;
    if (live) {
      if (it + 1 < nt) {
        mm_dkv_tile<T, HD, 8, false>(dk, dv, Kw, Vw, Qs, dOs, Ls, Ds, q0, N, c);
      } else {
        switch (mm_nj(N - q0, shorten)) {
        case 2: mm_dkv_tile<T, HD, 2, true>(dk, dv, Kw, Vw, Qs, dOs, Ls, Ds, q0, N, c); break;
        case 4: mm_dkv_tile<T, HD, 4, true>(dk, dv, Kw, Vw, Qs, dOs, Ls, Ds, q0, N, c); break;
        case 6: mm_dkv_tile<T, HD, 6, true>(dk, dv, Kw, Vw, Qs, dOs, Ls, Ds, q0, N, c); break;
        default: mm_dkv_tile<T, HD, 8, true>(dk, dv, Kw, Vw, Qs, dOs, Ls, Ds, q0, N, c); break;
        }
      }
    }
    __syncthreads();
  }
  if (!live) return;
  T *dk_out = dqkv + (size_t)b * N * ld + (size_t)H * HD + (size_t)h * HD;
  mm_store<T, HD>(dk_out, ld, k0 + 16 * w, N, dk, scale, scale);
  mm_store<T, HD>(dk_out + (size_t)H * HD, ld, k0 + 16 * w, N, dv, 1.0f, 1.0f);
}
template <typename T, int HD, int MINB>
__global__ void __launch_bounds__(MM_THREADS, MINB)
    mm_bwd_dkv_kernel(T *dqkv, const float *Dg, const T *dout, const T *qkv,
                      const float *lse, int N, int H, float scale, int shorten) {
  if constexpr (mm_built<T>())
    mm_bwd_dkv_kernel_body<T, HD, MINB>(dqkv, Dg, dout, qkv, lse, N, H, scale, shorten);
}

/* A fragments of dS = (dS^T)^T for query rows m0 .. m0+15 and k step kk, dS^T staged as rows of
 * keys (ldmatrix with transposition: the four 8 x 8 blocks are keys 0-7 / 8-15 by queries 0-7 /
 * 8-15 of the step). */
template <typename T>
__device__ __forceinline__ void mm_afrag_t(uint32_t a[4], const T *sT, int ld, int kk, int m0) {
  const int l = threadIdx.x & 31;
  mm_ldsm4_t(a, sT + (kk * 16 + ((l >> 4) << 3) + (l & 7)) * ld + m0 + ((l >> 3) & 1) * 8);
}

/* The whole backward of a sequence of at most 64 tokens (NJ column tiles of 8 hold them): one
 * block per (batch, head), warp w owning keys 16 w .. 16 w + 15 for dK and dV and queries
 * 16 w .. 16 w + 15 for dQ.  The scores and dS are computed once; dS^T goes through shared memory
 * (in T, as the products round it) to the warps that own its queries. */
template <typename T, int HD, int NJ>
__device__ __forceinline__ void mm_bwd_one_kernel_body(T *dqkv, const T *dout, const T *out, const T *qkv,
                                                       const float *lse,
                      int N, int H, float scale) {
  typedef mm_dims<HD> D;
  const int LDS = MM_ROWS + 8; /* dS^T rows: keys; columns: queries */
  extern __shared__ uint4 mm_sh[]; /* uint4: 16-byte aligned */
  T *Qs = (T *)mm_sh, *Ks = Qs + D::TILE, *Vs = Ks + D::TILE, *dOs = Vs + D::TILE;
  T *dSs = dOs + D::TILE;
  float *Ls = (float *)(dSs + MM_ROWS * LDS), *Ds = Ls + MM_ROWS;
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, t = l & 3;
  const size_t ld = (size_t)3 * H * HD, ldo = (size_t)H * HD;
  const T *q = qkv + (size_t)b * N * ld + (size_t)h * HD, *k = q + (size_t)H * HD, *v = k + (size_t)H * HD;
  const T *dO = dout + (size_t)b * N * ldo + (size_t)h * HD, *O = out + (size_t)b * N * ldo + (size_t)h * HD;
  mm_load<T, HD>(Qs, q, ld, 0, N);
  mm_load<T, HD>(Ks, k, ld, 0, N);
  mm_load<T, HD>(Vs, v, ld, 0, N);
  mm_load<T, HD>(dOs, dO, ldo, 0, N);
  mm_cp_commit<T>();
  mm_rowdot<T, HD>(Ds, NULL, dO, O, ldo, 0, N);
  if (threadIdx.x < MM_ROWS) Ls[threadIdx.x] = (int)threadIdx.x < N ? lse[(size_t)bh * N + threadIdx.x] * MM_LOG2E : 0.0f;
  mm_cp_wait<T, 0>();
  __syncthreads();
  const int live = 16 * w < 8 * NJ; /* warps past the column tiles only help load */
  const float c = scale * MM_LOG2E;
  T *dq_out = dqkv + (size_t)b * N * ld + (size_t)h * HD, *dk_out = dq_out + (size_t)H * HD;
  if (live) {
    float s[8][4], dp[8][4];
    for (int j = 0; j < NJ; j++)
      for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0;
    {
      uint32_t a[HD / 16][4];
      mm_afrag<T, HD>(a, Ks, 16 * w);
      mm_abt<T, HD, NJ>(s, a, Qs);
      mm_afrag<T, HD>(a, Vs, 16 * w);
      mm_abt<T, HD, NJ>(dp, a, dOs);
    }
    for (int j = 0; j < NJ; j++)
      for (int e = 0; e < 4; e++) {
        const int col = j * 8 + 2 * t + (e & 1), key = 16 * w + g + 8 * (e >> 1);
        /* 0 for padding keys too: their dS^T rows are dQ's operand (times zero K rows, but an
         * infinite p would make NaN) */
        const float p = col < N && key < N ? exp2f(s[j][e] * c - Ls[col]) : 0.0f;
        s[j][e] = p;
        dp[j][e] = p * (dp[j][e] - Ds[col]);
      }
    /* dS^T rows 16 w + g and + 8, as pairs of T */
    for (int j = 0; j < NJ; j++) {
      *(uint32_t *)(dSs + (16 * w + g) * LDS + j * 8 + 2 * t) = mm_pack<T>(dp[j][0], dp[j][1]);
      *(uint32_t *)(dSs + (16 * w + g + 8) * LDS + j * 8 + 2 * t) = mm_pack<T>(dp[j][2], dp[j][3]);
    }
    float acc[HD / 8][4];
    for (int j = 0; j < HD / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
    mm_pv<T, HD, NJ / 2>(acc, s, dOs);
    mm_store<T, HD>(dk_out + (size_t)H * HD, ld, 16 * w, N, acc, 1.0f, 1.0f); /* dV */
    for (int j = 0; j < HD / 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0;
    mm_pv<T, HD, NJ / 2>(acc, dp, Qs);
    mm_store<T, HD>(dk_out, ld, 16 * w, N, acc, scale, scale); /* dK */
  }
  __syncthreads(); /* every warp's dS^T rows are staged */
  if (!live) return;
  float dq[HD / 8][4];
  for (int j = 0; j < HD / 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0;
  for (int kk = 0; kk < NJ / 2; kk++) {
    uint32_t a[4];
    mm_afrag_t(a, dSs, LDS, kk, 16 * w);
    for (int dp = 0; dp < HD / 16; dp++) {
      uint32_t bb[4];
      mm_ldsm4_t(bb, Ks + (kk * 16 + (l & 7) + ((l >> 3) & 1) * 8) * D::LD + dp * 16 + (l >> 4) * 8);
      mm_mma<T>(dq[2 * dp], a, bb[0], bb[1]);
      mm_mma<T>(dq[2 * dp + 1], a, bb[2], bb[3]);
    }
  }
  mm_store<T, HD>(dq_out, ld, 16 * w, N, dq, scale, scale);
}
template <typename T, int HD, int NJ>
__global__ void __launch_bounds__(MM_THREADS)
    mm_bwd_one_kernel(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse,
                      int N, int H, float scale) {
  if constexpr (mm_built<T>()) mm_bwd_one_kernel_body<T, HD, NJ>(dqkv, dout, out, qkv, lse, N, H, scale);
}

/* ---- launchers ------------------------------------------------------------------------------------ */

/* MM_SHORT: the ragged last tile computes only the column tiles that hold tokens; MM_ONE: sequences
 * of at most 64 tokens take the one-kernel backward; MM_OCC: registers capped for more blocks per
 * multiprocessor (forward 4, backward 3; a few bytes spilled).  All three by default: on an H100
 * (2026-11-27, ViT-S/16 at batch 64) the step's attention took 6.96 ms without them, 5.92 with the
 * first two and 5.66 with all three (gpu_train_bench -a).  k_attn_mma_set_options, for the
 * benchmark's comparisons. */
static int mm_opts = K_ATTN_MMA_SHORT | K_ATTN_MMA_ONE | K_ATTN_MMA_OCC;

void k_attn_mma_set_options(int opts) { mm_opts = opts; }

template <int HD> static size_t mm_smem_fwd(void) { return 5 * sizeof(bf16) * mm_dims<HD>::TILE; }
template <int HD> static size_t mm_smem_bwd(void) {
  return 6 * sizeof(bf16) * mm_dims<HD>::TILE + 4 * MM_ROWS * sizeof(float);
}
template <int HD> static size_t mm_smem_one(void) {
  return 4 * sizeof(bf16) * mm_dims<HD>::TILE + sizeof(bf16) * MM_ROWS * (MM_ROWS + 8) + 2 * MM_ROWS * sizeof(float);
}

/* Kernels with more than 48 KiB of dynamic shared memory must say so (55 KiB at HD 64: within
 * what compute capability 8.0 and later allow a block). */
template <typename K> static void mm_allow(K kernel, size_t bytes, int *done) {
  if (*done || bytes <= 48 * 1024) return;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  *done = 1;
}

/* (tiles of 64 rows) in x, (batch x heads) in y: y stops at 65535. */
static dim3 mm_grid(int B, int N, int H) {
  const long bh = (long)B * H;
  if (bh > 65535) SCD_FAIL("attention: %ld (batch x heads) exceeds the tensor-core kernels' grid", bh);
  return dim3((unsigned)((N + MM_ROWS - 1) / MM_ROWS), (unsigned)bh);
}

int k_attn_mma_covers(int BH, int hd, const void *qkv, const void *dout) {
  return k_attn_mma_covers_t<bf16>(BH, hd, qkv, dout);
}

/* bf16 needs m16n8k16 (compute capability 8.0); f16 runs there too, and as h75 (m16n8k8 pairs,
 * plain copies) from 7.5: a T4 lets a block have 64 KiB of shared memory, more than the 55 KiB of
 * the backward at head dimension 64. */
template <typename T> int k_attn_mma_covers_t(int BH, int hd, const void *qkv, const void *dout) {
  const size_t smem = hd == 32 ? mm_smem_bwd<32>() : mm_smem_bwd<64>();
  return cu.arch >= (std::is_same<T, bf16>::value ? 80 : 75) && (hd == 32 || hd == 64) && BH >= 1 &&
         BH <= 65535 && smem <= cu.prop.sharedMemPerBlockOptin && !(((uintptr_t)qkv | (uintptr_t)dout) & 15);
}
template int k_attn_mma_covers_t<bf16>(int, int, const void *, const void *);
template int k_attn_mma_covers_t<f16>(int, int, const void *, const void *);

template <typename T, int HD, int MINB>
static void mm_fwd(T *out, float *lse, const T *qkv, int B, int N, int H, float scale) {
  static int big;
  mm_allow(mm_fwd_kernel<T, HD, MINB>, mm_smem_fwd<HD>(), &big);
  mm_fwd_kernel<T, HD, MINB><<<mm_grid(B, N, H), MM_THREADS, mm_smem_fwd<HD>(), cu.stream>>>(
      out, lse, qkv, N, H, scale, mm_opts & K_ATTN_MMA_SHORT);
  CHECK_LAUNCH();
}

template <typename T, int HD, int NJ>
static void mm_bwd_one(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse, int B,
                       int N, int H, float scale) {
  static int big;
  mm_allow(mm_bwd_one_kernel<T, HD, NJ>, mm_smem_one<HD>(), &big);
  mm_bwd_one_kernel<T, HD, NJ><<<mm_grid(B, N, H), MM_THREADS, mm_smem_one<HD>(), cu.stream>>>(
      dqkv, dout, out, qkv, lse, N, H, scale);
  CHECK_LAUNCH();
}

/* The query-tile and key-tile kernels, at least MINB blocks per multiprocessor (registers capped). */
template <typename T, int HD, int MINB>
static void mm_bwd_two(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse,
                       float *Dg, int B, int N, int H, float scale) {
  static int big_q, big_k;
  const int sh = mm_opts & K_ATTN_MMA_SHORT;
  mm_allow(mm_bwd_dq_kernel<T, HD, MINB>, mm_smem_bwd<HD>(), &big_q);
  mm_allow(mm_bwd_dkv_kernel<T, HD, MINB>, mm_smem_bwd<HD>(), &big_k);
  const dim3 grid = mm_grid(B, N, H);
  mm_bwd_dq_kernel<T, HD, MINB><<<grid, MM_THREADS, mm_smem_bwd<HD>(), cu.stream>>>(dqkv, Dg, dout, out, qkv,
                                                                                    lse, N, H, scale, sh);
  CHECK_LAUNCH();
  mm_bwd_dkv_kernel<T, HD, MINB><<<grid, MM_THREADS, mm_smem_bwd<HD>(), cu.stream>>>(dqkv, Dg, dout, qkv, lse,
                                                                                     N, H, scale, sh);
  CHECK_LAUNCH();
}

template <typename T, int HD>
static void mm_bwd(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse, float *Dg,
                   int B, int N, int H, float scale) {
  if (N <= MM_ROWS && (mm_opts & K_ATTN_MMA_ONE)) {
    const int nj = (mm_opts & K_ATTN_MMA_SHORT) ? 2 * ((N + 15) / 16) : 8;
    if (nj == 2) mm_bwd_one<T, HD, 2>(dqkv, dout, out, qkv, lse, B, N, H, scale);
    else if (nj == 4) mm_bwd_one<T, HD, 4>(dqkv, dout, out, qkv, lse, B, N, H, scale);
    else if (nj == 6) mm_bwd_one<T, HD, 6>(dqkv, dout, out, qkv, lse, B, N, H, scale);
    else mm_bwd_one<T, HD, 8>(dqkv, dout, out, qkv, lse, B, N, H, scale);
    return;
  }
  if (mm_opts & K_ATTN_MMA_OCC) mm_bwd_two<T, HD, 3>(dqkv, dout, out, qkv, lse, Dg, B, N, H, scale);
  else mm_bwd_two<T, HD, 2>(dqkv, dout, out, qkv, lse, Dg, B, N, H, scale);
}

template <typename T>
static void mm_fwd_any(T *out, float *lse, const T *qkv, int B, int N, int H, int hd, float scale) {
  const int occ = mm_opts & K_ATTN_MMA_OCC;
  if (hd == 32) occ ? mm_fwd<T, 32, 4>(out, lse, qkv, B, N, H, scale) : mm_fwd<T, 32, 3>(out, lse, qkv, B, N, H, scale);
  else occ ? mm_fwd<T, 64, 4>(out, lse, qkv, B, N, H, scale) : mm_fwd<T, 64, 3>(out, lse, qkv, B, N, H, scale);
}

template <typename T>
static void mm_bwd_any(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse, float *Dg,
                       int B, int N, int H, int hd, float scale) {
  if (hd == 32) mm_bwd<T, 32>(dqkv, dout, out, qkv, lse, Dg, B, N, H, scale);
  else mm_bwd<T, 64>(dqkv, dout, out, qkv, lse, Dg, B, N, H, scale);
}

void k_attn_mma_fwd(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd, float scale) {
  mm_fwd_any<bf16>(out, lse, qkv, B, N, H, hd, scale);
}

void k_attn_mma_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                    float *Dg, int B, int N, int H, int hd, float scale) {
  mm_bwd_any<bf16>(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
}

/* f16: the sm_80 kernels from compute capability 8.0, the sm_75 form (h75, same storage) below. */
template <typename T>
void k_attn_mma_fwd_t(T *out, float *lse, const T *qkv, int B, int N, int H, int hd, float scale) {
  if (std::is_same<T, f16>::value && cu.arch < 80)
    mm_fwd_any<h75>((h75 *)out, lse, (const h75 *)qkv, B, N, H, hd, scale);
  else
    mm_fwd_any<T>(out, lse, qkv, B, N, H, hd, scale);
}
template <typename T>
void k_attn_mma_bwd_t(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse, float *Dg,
                      int B, int N, int H, int hd, float scale) {
  if (std::is_same<T, f16>::value && cu.arch < 80)
    mm_bwd_any<h75>((h75 *)dqkv, (const h75 *)dout, (const h75 *)out, (const h75 *)qkv, lse, Dg, B, N, H,
                    hd, scale);
  else
    mm_bwd_any<T>(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
}
template void k_attn_mma_fwd_t<f16>(f16 *, float *, const f16 *, int, int, int, int, float);
template void k_attn_mma_bwd_t<f16>(f16 *, const f16 *, const f16 *, const f16 *, const float *, float *,
                                    int, int, int, int, float);
