/* attention_tc.cu - the flash-style attention on tensor cores (bf16, head dimension a multiple of
 * 16 up to 128, compute capability 8.0 or later): what attention.cu does with fp32 FMAs, done with
 * warp matrix products (nvcuda::wmma, 16 x 16 x 16 bf16 in, fp32 accumulate).  attention.cu calls
 * it for the shapes it covers that attention_mma.cu (head dimensions 32 and 64) does not; the state is the same (the row log-sum-exp [B, H, N] fp32) and the
 * layouts are those of ops.h (qkv [B, N, 3, H, hd] read in place, out and dout [B, N, H, hd]).
 *
 * A block of 4 warps owns 64 rows (16 per warp) and walks the other side in tiles of 64, staged in
 * shared memory as bf16 rows of HDP + 8 elements (zero beyond hd or N).  In a ragged last tile
 * (DINO's 37 and 197 tokens), warps whose rows all lie past N and 16-column blocks past N skip
 * their products.  wmma fragments are opaque
 * (no lane knows which elements it holds), so everything done per row goes through shared memory:
 * a warp stores its 16 x 64 scores as fp32, its lanes (two per row) work on them, and write the
 * bf16 matrix the next product reads.  The accumulators therefore never need scaling by row:
 * - forward: two passes over the keys, the first for each row's log-sum-exp, the second for
 *   O = sum_j exp(s_ij - lse_i) v_j with the exact probabilities (one more Q K^T product instead of
 *   rescaling an online softmax);
 * - backward as attention.cu, deterministic without atomics: one kernel per query tile for
 *   D_i = dO_i . O_i and dQ = dS K, one per key tile for dV = P^T dO and dK = dS^T Q, with
 *   P = exp(S - lse) and dS = scale P (dP - D) recomputed from the scores; P and dS are rounded to
 *   bf16 before their products, as the GEMM form stores them. */
#include "build_config.h"

#include <math.h>
#include <mma.h>

#include "cuda/ops/cuda_internal.h"

using namespace nvcuda;

#define TC_ROWS 64   /* rows of a block: 4 warps x 16 */
#define TC_COLS 64   /* columns (the other side) of a tile */
#define TC_THREADS 128
#define TC_SLD (TC_COLS + 4) /* fp32 score rows in shared memory */
#define TC_PLD (TC_COLS + 8) /* bf16 probability rows */

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TC_ARCH_OK 1
#else
#define TC_ARCH_OK 0
#endif

/* bf16 rows of a tile in shared memory: HDP + 8 elements, so every 16 x 16 block of a row-major or
 * column-major load starts 32-byte aligned and ldm is a multiple of 16 bytes. */
template <int HDP> struct tc_dims {
  static const int LD = HDP + 8;
  static const size_t TILE = (size_t)TC_ROWS * LD * sizeof(bf16); /* one [64][LD] tile */
  static const size_t SCORES = 4 * 16 * TC_SLD * sizeof(float);   /* per warp [16][SLD] */
  static const size_t PROBS = 4 * 16 * TC_PLD * sizeof(bf16);     /* per warp [16][PLD] */
};

/* bf16 fragments exist from compute capability 8.0 on: below it the helpers and the kernels'
 * bodies are left out (a compiler that checks templates at definition, as clang does, would
 * refuse them for sm_70/75). */
#if TC_ARCH_OK
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Rows r0 .. r0+63 of one head (src at row 0, rows ld elements apart) into s[64][HDP+8]; rows >= N
 * and columns >= hd are zero.  16 bytes at a time: hd and ld are multiples of 8 and the caller
 * checked that the tensor is 16-byte aligned. */
template <int HDP>
__device__ __forceinline__ void tc_load(bf16 *s, const bf16 *src, size_t ld, int r0, int N, int hd) {
  const int CH = HDP / 8; /* 16-byte chunks of a row */
  for (int e = threadIdx.x; e < TC_ROWS * CH; e += TC_THREADS) {
    const int r = e / CH, c = e % CH, n = r0 + r;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (n < N && c * 8 < hd) v = *(const uint4 *)(src + (size_t)n * ld + c * 8);
    *(uint4 *)(s + r * tc_dims<HDP>::LD + c * 8) = v;
  }
}

/* The next pair of tiles (K and V, or Q and dO), once every warp is done with the last pair. */
template <int HDP>
__device__ __forceinline__ void tc_next_pair(bf16 *A, const bf16 *a, size_t lda, bf16 *B, const bf16 *b,
                                             size_t ldb, int r0, int N, int hd) {
  __syncthreads();
  tc_load<HDP>(A, a, lda, r0, N, hd);
  tc_load<HDP>(B, b, ldb, r0, N, hd);
  __syncthreads();
}

template <int HDP> __device__ __forceinline__ void tc_zero(frag_c *acc) {
#pragma unroll
  for (int dj = 0; dj < HDP / 16; dj++) wmma::fill_fragment(acc[dj], 0.0f);
}

/* 16-column blocks of a tile starting at c0 that hold any of the N columns: DINO's sequences
 * (37 and 197 tokens) end in a ragged tile, whose empty blocks are skipped. */
__device__ __forceinline__ int tc_blocks(int c0, int N) { return min(TC_COLS / 16, (N - c0 + 15) / 16); }

/* S[16][16 nb] (fp32, ldm TC_SLD) = A[16 rows][HDP] . Bt[16 nb rows][HDP]^T: the warp's rows of one
 * tile against the first nb blocks of 16 rows of the other (the columns beyond are not written). */
template <int HDP>
__device__ __forceinline__ void tc_scores(float *S, const bf16 *A, const bf16 *Bt, int nb) {
  const int LD = tc_dims<HDP>::LD;
  frag_a a[HDP / 16];
#pragma unroll
  for (int kk = 0; kk < HDP / 16; kk++) wmma::load_matrix_sync(a[kk], A + kk * 16, LD);
  for (int j = 0; j < nb; j++) {
    frag_c c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int kk = 0; kk < HDP / 16; kk++) {
      frag_bt b;
      wmma::load_matrix_sync(b, Bt + (size_t)j * 16 * LD + kk * 16, LD);
      wmma::mma_sync(c, a[kk], b, c);
    }
    wmma::store_matrix_sync(S + j * 16, c, TC_SLD, wmma::mem_row_major);
  }
}

/* acc[HDP/16] += P[16][16 nb] (bf16, ldm TC_PLD) . X[16 nb][HDP] (bf16 tile rows). */
template <int HDP>
__device__ __forceinline__ void tc_accum(frag_c *acc, const bf16 *P, const bf16 *X, int nb) {
  const int LD = tc_dims<HDP>::LD;
  for (int kk = 0; kk < nb; kk++) {
    frag_a a;
    wmma::load_matrix_sync(a, P + kk * 16, TC_PLD);
#pragma unroll
    for (int dj = 0; dj < HDP / 16; dj++) {
      frag_b b;
      wmma::load_matrix_sync(b, X + (size_t)kk * 16 * LD + dj * 16, LD);
      wmma::mma_sync(acc[dj], a, b, acc[dj]);
    }
  }
}

/* The warp's 16 x HDP accumulator through its fp32 staging area [16][HDP+4] into rows r0 + w*16 ..
 * of dst (row n at dst + n * ld, first hd columns), rows < N. */
template <int HDP>
__device__ __forceinline__ void tc_write(bf16 *dst, size_t ld, const frag_c *acc, float *stage, int r0,
                                         int N, int hd) {
  const int lane = threadIdx.x % 32, SLD = HDP + 4;
#pragma unroll
  for (int dj = 0; dj < HDP / 16; dj++)
    wmma::store_matrix_sync(stage + dj * 16, acc[dj], SLD, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 16 * HDP; e += 32) {
    const int r = e / HDP, d = e % HDP, n = r0 + r;
    if (n < N && d < hd) dst[(size_t)n * ld + d] = __float2bfloat16_rn(stage[r * SLD + d]);
  }
  __syncwarp(); /* the staging area may be reused */
}

#endif /* TC_ARCH_OK */

/* ---- forward ------------------------------------------------------------------------------------ */

template <int HDP>
__global__ void __launch_bounds__(TC_THREADS)
    tc_fwd_kernel(bf16 *out, float *lse, const bf16 *qkv, int N, int H, int hd, float scale) {
#if TC_ARCH_OK
  typedef tc_dims<HDP> dims;
  extern __shared__ __align__(128) float tc_smf[];
  unsigned char *tc_sm = (unsigned char *)tc_smf;
  bf16 *Qs = (bf16 *)tc_sm, *Ks = (bf16 *)(tc_sm + dims::TILE), *Vs = (bf16 *)(tc_sm + 2 * dims::TILE);
  float *Sall = (float *)(tc_sm + 3 * dims::TILE);
  bf16 *Pall = (bf16 *)(tc_sm + 3 * dims::TILE + dims::SCORES);
  float *lse_s = (float *)(tc_sm + 3 * dims::TILE + dims::SCORES + dims::PROBS);
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, q0 = blockIdx.y * TC_ROWS;
  const size_t ld = 3 * (size_t)H * hd;
  const bf16 *base = qkv + (size_t)b * N * ld + (size_t)h * hd;
  float *S = Sall + w * 16 * TC_SLD;
  bf16 *P = Pall + w * 16 * TC_PLD;
  const bf16 *Qw = Qs + w * 16 * dims::LD;
  /* this lane's row of the warp and its 32 columns, every other one (the two lanes of a row then
   * read different shared-memory banks) */
  const int r = lane / 2, c0 = lane % 2;
  /* A warp whose 16 rows are all past N (a ragged last tile) only keeps the block's barriers. */
  const bool live = q0 + w * 16 < N;
  tc_load<HDP>(Qs, base, ld, q0, N, hd);

  /* pass 1: the log-sum-exp of each row, each lane over its half, online */
  float m = -INFINITY, l = 0.0f;
  for (int k0 = 0; k0 < N; k0 += TC_COLS) {
    __syncthreads(); /* the previous tile is consumed (and Q is in) */
    tc_load<HDP>(Ks, base + (size_t)H * hd, ld, k0, N, hd);
    __syncthreads();
    if (!live) continue;
    tc_scores<HDP>(S, Qw, Ks, tc_blocks(k0, N));
    __syncwarp();
    float mx = -INFINITY;
    for (int c = 0; c < 32; c++)
      if (k0 + 2 * c + c0 < N) mx = fmaxf(mx, S[r * TC_SLD + 2 * c + c0] * scale);
    if (mx > -INFINITY) {
      const float mn = fmaxf(m, mx);
      float sum = 0.0f;
      for (int c = 0; c < 32; c++)
        if (k0 + 2 * c + c0 < N) sum += expf(S[r * TC_SLD + 2 * c + c0] * scale - mn);
      l = (m == -INFINITY ? 0.0f : l * expf(m - mn)) + sum;
      m = mn;
    }
    __syncwarp(); /* S is rewritten by the next tile */
  }
  if (live) { /* the row's two lanes */
    const float m2 = __shfl_xor_sync(0xffffffffu, m, 1), l2 = __shfl_xor_sync(0xffffffffu, l, 1);
    const float mm = fmaxf(m, m2); /* finite: key 0 is the even lane's */
    const float ll =
        (m == -INFINITY ? 0.0f : l * expf(m - mm)) + (m2 == -INFINITY ? 0.0f : l2 * expf(m2 - mm));
    if (lane % 2 == 0) {
      lse_s[w * 16 + r] = mm + logf(ll);
      const int n = q0 + w * 16 + r;
      if (lse && n < N) lse[(size_t)bh * N + n] = mm + logf(ll);
    }
  }
  __syncwarp();

  /* pass 2: O = P V with P = exp(s - lse) */
  const float lr = lse_s[w * 16 + r];
  frag_c o[HDP / 16];
  tc_zero<HDP>(o);
  for (int k0 = 0; k0 < N; k0 += TC_COLS) {
    tc_next_pair<HDP>(Ks, base + (size_t)H * hd, ld, Vs, base + 2 * (size_t)H * hd, ld, k0, N, hd);
    if (!live) continue;
    const int nb = tc_blocks(k0, N);
    tc_scores<HDP>(S, Qw, Ks, nb);
    __syncwarp();
    for (int c = 0; c < 32; c++) {
      const int j = 2 * c + c0;
      P[r * TC_PLD + j] = __float2bfloat16_rn(k0 + j < N ? expf(S[r * TC_SLD + j] * scale - lr) : 0.0f);
    }
    __syncwarp();
    tc_accum<HDP>(o, P, Vs, nb);
  }
  __syncthreads(); /* every warp is done with K and V: their space stages the output */
  if (live)
    tc_write<HDP>(out + (size_t)b * N * H * hd + (size_t)h * hd, (size_t)H * hd, o,
                  (float *)(tc_sm + dims::TILE) + w * 16 * (HDP + 4), q0 + w * 16, N, hd);
#endif
}

/* ---- backward ----------------------------------------------------------------------------------- */

/* Per query tile: D_i = dO_i . O_i (also to Dg for the key-side kernel) and dQ = dS K. */
template <int HDP>
__global__ void __launch_bounds__(TC_THREADS)
    tc_bwd_dq_kernel(bf16 *dqkv, float *Dg, const bf16 *dout, const bf16 *out, const bf16 *qkv,
                     const float *lse, int N, int H, int hd, float scale) {
#if TC_ARCH_OK
  typedef tc_dims<HDP> dims;
  extern __shared__ __align__(128) float tc_smf[];
  unsigned char *tc_sm = (unsigned char *)tc_smf;
  bf16 *Qs = (bf16 *)tc_sm, *dOs = (bf16 *)(tc_sm + dims::TILE);
  bf16 *Ks = (bf16 *)(tc_sm + 2 * dims::TILE), *Vs = (bf16 *)(tc_sm + 3 * dims::TILE);
  float *Sall = (float *)(tc_sm + 4 * dims::TILE), *dPall = Sall + 4 * 16 * TC_SLD;
  bf16 *dSall = (bf16 *)(tc_sm + 4 * dims::TILE + 2 * dims::SCORES);
  float *lse_s = (float *)(tc_sm + 4 * dims::TILE + 2 * dims::SCORES + dims::PROBS);
  float *D_s = lse_s + TC_ROWS;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, t = threadIdx.x;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, q0 = blockIdx.y * TC_ROWS;
  const size_t ld = 3 * (size_t)H * hd, ldo = (size_t)H * hd;
  const bf16 *base = qkv + (size_t)b * N * ld + (size_t)h * hd;
  const bf16 *obase = out + (size_t)b * N * ldo + (size_t)h * hd;
  const bf16 *dobase = dout + (size_t)b * N * ldo + (size_t)h * hd;
  float *S = Sall + w * 16 * TC_SLD, *dP = dPall + w * 16 * TC_SLD;
  bf16 *dS = dSall + w * 16 * TC_PLD;
  const int r = lane / 2, c0 = lane % 2; /* row, and columns c0, c0 + 2, ... (as the forward) */
  const bool live = q0 + w * 16 < N;     /* any of the warp's rows (queries) before N */
  tc_load<HDP>(Qs, base, ld, q0, N, hd);
  tc_load<HDP>(dOs, dobase, ldo, q0, N, hd);
  if (t < TC_ROWS) {
    const int n = q0 + t;
    float d = 0.0f;
    if (n < N)
      for (int c = 0; c < hd; c++)
        d += __bfloat162float(dobase[(size_t)n * ldo + c]) * __bfloat162float(obase[(size_t)n * ldo + c]);
    D_s[t] = d;
    lse_s[t] = n < N ? lse[(size_t)bh * N + n] : 0.0f;
    if (n < N) Dg[(size_t)bh * N + n] = d;
  }
  frag_c dq[HDP / 16];
  tc_zero<HDP>(dq);
  for (int k0 = 0; k0 < N; k0 += TC_COLS) {
    tc_next_pair<HDP>(Ks, base + (size_t)H * hd, ld, Vs, base + 2 * (size_t)H * hd, ld, k0, N, hd);
    if (!live) continue;
    const int nb = tc_blocks(k0, N);
    tc_scores<HDP>(S, Qs + w * 16 * dims::LD, Ks, nb);
    tc_scores<HDP>(dP, dOs + w * 16 * dims::LD, Vs, nb);
    __syncwarp();
    const float lr = lse_s[w * 16 + r], Dr = D_s[w * 16 + r];
    for (int c = 0; c < 32; c++) {
      const int j = 2 * c + c0;
      /* past N: p = 0 against a finite dP in the computed blocks; blocks past them are not read */
      const float p = k0 + j < N ? expf(S[r * TC_SLD + j] * scale - lr) : 0.0f;
      dS[r * TC_PLD + j] = __float2bfloat16_rn(p * (dP[r * TC_SLD + j] - Dr) * scale);
    }
    __syncwarp();
    tc_accum<HDP>(dq, dS, Ks, nb);
  }
  __syncthreads();
  if (live)
    tc_write<HDP>(dqkv + (size_t)b * N * ld + (size_t)h * hd, ld, dq,
                  (float *)(tc_sm + 2 * dims::TILE) + w * 16 * (HDP + 4), q0 + w * 16, N, hd);
#endif
}

/* Per key tile: dV = P^T dO and dK = dS^T Q over all queries (rows of the warp: keys). */
template <int HDP>
__global__ void __launch_bounds__(TC_THREADS)
    tc_bwd_dkv_kernel(bf16 *dqkv, const float *Dg, const bf16 *dout, const bf16 *qkv,
                      const float *lse, int N, int H, int hd, float scale) {
#if TC_ARCH_OK
  typedef tc_dims<HDP> dims;
  extern __shared__ __align__(128) float tc_smf[];
  unsigned char *tc_sm = (unsigned char *)tc_smf;
  bf16 *Ks = (bf16 *)tc_sm, *Vs = (bf16 *)(tc_sm + dims::TILE);
  bf16 *Qs = (bf16 *)(tc_sm + 2 * dims::TILE), *dOs = (bf16 *)(tc_sm + 3 * dims::TILE);
  float *Sall = (float *)(tc_sm + 4 * dims::TILE), *dPall = Sall + 4 * 16 * TC_SLD;
  bf16 *Pall = (bf16 *)(tc_sm + 4 * dims::TILE + 2 * dims::SCORES), *dSall = Pall + 4 * 16 * TC_PLD;
  float *lse_s = (float *)(tc_sm + 4 * dims::TILE + 2 * dims::SCORES + 2 * dims::PROBS);
  float *D_s = lse_s + TC_COLS;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, t = threadIdx.x;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, k0 = blockIdx.y * TC_ROWS;
  const size_t ld = 3 * (size_t)H * hd, ldo = (size_t)H * hd;
  const bf16 *base = qkv + (size_t)b * N * ld + (size_t)h * hd;
  const bf16 *dobase = dout + (size_t)b * N * ldo + (size_t)h * hd;
  float *St = Sall + w * 16 * TC_SLD, *dPt = dPall + w * 16 * TC_SLD;
  bf16 *Pt = Pall + w * 16 * TC_PLD, *dSt = dSall + w * 16 * TC_PLD;
  const int r = lane / 2, c0 = lane % 2; /* row, and columns c0, c0 + 2, ... (as the forward) */
  const bool live = k0 + w * 16 < N;     /* any of the warp's rows (keys) before N */
  tc_load<HDP>(Ks, base + (size_t)H * hd, ld, k0, N, hd);
  tc_load<HDP>(Vs, base + 2 * (size_t)H * hd, ld, k0, N, hd);
  frag_c dk[HDP / 16], dv[HDP / 16];
  tc_zero<HDP>(dk);
  tc_zero<HDP>(dv);
  for (int q0 = 0; q0 < N; q0 += TC_COLS) {
    __syncthreads(); /* every warp is done with the last tile and its lse_s, D_s */
    tc_load<HDP>(Qs, base, ld, q0, N, hd);
    tc_load<HDP>(dOs, dobase, ldo, q0, N, hd);
    if (t < TC_COLS) {
      const int n = q0 + t;
      lse_s[t] = n < N ? lse[(size_t)bh * N + n] : 0.0f;
      D_s[t] = n < N ? Dg[(size_t)bh * N + n] : 0.0f;
    }
    __syncthreads();
    if (!live) continue;
    const int nb = tc_blocks(q0, N);
    tc_scores<HDP>(St, Ks + w * 16 * dims::LD, Qs, nb); /* rows: keys, columns: queries */
    tc_scores<HDP>(dPt, Vs + w * 16 * dims::LD, dOs, nb);
    __syncwarp();
    for (int c = 0; c < 32; c++) {
      const int j = 2 * c + c0;
      /* keys >= N are zero rows whose dK and dV are never written; queries past N as in dQ */
      const float p = q0 + j < N ? expf(St[r * TC_SLD + j] * scale - lse_s[j]) : 0.0f;
      Pt[r * TC_PLD + j] = __float2bfloat16_rn(p);
      dSt[r * TC_PLD + j] = __float2bfloat16_rn(p * (dPt[r * TC_SLD + j] - D_s[j]) * scale);
    }
    __syncwarp();
    tc_accum<HDP>(dv, Pt, dOs, nb);
    tc_accum<HDP>(dk, dSt, Qs, nb);
  }
  __syncthreads(); /* Q and dO stage the results */
  if (!live) return;
  float *stage = (float *)(tc_sm + 2 * dims::TILE) + w * 16 * (HDP + 4);
  bf16 *dbase = dqkv + (size_t)b * N * ld + (size_t)h * hd;
  tc_write<HDP>(dbase + (size_t)H * hd, ld, dk, stage, k0 + w * 16, N, hd);
  tc_write<HDP>(dbase + 2 * (size_t)H * hd, ld, dv, stage, k0 + w * 16, N, hd);
#endif
}

/* ---- host side ---------------------------------------------------------------------------------- */

template <int HDP> static size_t tc_smem_fwd(void) {
  return 3 * tc_dims<HDP>::TILE + tc_dims<HDP>::SCORES + tc_dims<HDP>::PROBS + TC_ROWS * sizeof(float);
}
template <int HDP> static size_t tc_smem_bwd(void) {
  return 4 * tc_dims<HDP>::TILE + 2 * tc_dims<HDP>::SCORES + 2 * tc_dims<HDP>::PROBS +
         2 * TC_ROWS * sizeof(float);
}

/* Kernels above 48 KiB of dynamic shared memory must say so once. */
template <typename K> static void tc_allow(K kernel, size_t bytes, int *done) {
  if (*done || bytes <= 48 * 1024) return;
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  *done = 1;
}

static dim3 tc_grid(int B, int N, int H) {
  const long bh = (long)B * H, tiles = (N + TC_ROWS - 1) / TC_ROWS;
  if (bh > 2147483647L || tiles > 65535)
    SCD_FAIL("attention: grid of %ld (batch x heads) x %ld tiles exceeds the CUDA limits", bh, tiles);
  return dim3((unsigned)bh, (unsigned)tiles);
}

/* The backward needs the most shared memory (123 KB at hd 128): more than compute capability 8.6
 * and 8.9 allow a block (99 KB), so such shapes stay on the CUDA-core kernels there. */
static size_t tc_smem_most(int hd) {
  return hd <= 16 ? tc_smem_bwd<16>() : hd <= 32 ? tc_smem_bwd<32>() : hd <= 64 ? tc_smem_bwd<64>()
                                                                                 : tc_smem_bwd<128>();
}

int k_attn_tc_covers(int hd, const void *qkv, const void *dout) {
  return cu.arch >= 80 && hd % 16 == 0 && hd >= 16 && hd <= 128 &&
         tc_smem_most(hd) <= cu.prop.sharedMemPerBlockOptin && !(((uintptr_t)qkv | (uintptr_t)dout) & 15);
}

template <int HDP>
static void tc_fwd(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd, float scale) {
  static int big;
  tc_allow(tc_fwd_kernel<HDP>, tc_smem_fwd<HDP>(), &big);
  tc_fwd_kernel<HDP><<<tc_grid(B, N, H), TC_THREADS, tc_smem_fwd<HDP>(), cu.stream>>>(out, lse, qkv, N, H,
                                                                                      hd, scale);
  CHECK_LAUNCH();
}

template <int HDP>
static void tc_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                   float *Dg, int B, int N, int H, int hd, float scale) {
  static int big_q, big_k;
  const dim3 grid = tc_grid(B, N, H);
  tc_allow(tc_bwd_dq_kernel<HDP>, tc_smem_bwd<HDP>(), &big_q);
  tc_allow(tc_bwd_dkv_kernel<HDP>, tc_smem_bwd<HDP>(), &big_k);
  tc_bwd_dq_kernel<HDP><<<grid, TC_THREADS, tc_smem_bwd<HDP>(), cu.stream>>>(dqkv, Dg, dout, out, qkv, lse,
                                                                             N, H, hd, scale);
  CHECK_LAUNCH();
  tc_bwd_dkv_kernel<HDP><<<grid, TC_THREADS, tc_smem_bwd<HDP>(), cu.stream>>>(dqkv, Dg, dout, qkv, lse, N,
                                                                              H, hd, scale);
  CHECK_LAUNCH();
}

void k_attn_tc_fwd(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd, float scale) {
  if (hd <= 16) tc_fwd<16>(out, lse, qkv, B, N, H, hd, scale);
  else if (hd <= 32) tc_fwd<32>(out, lse, qkv, B, N, H, hd, scale);
  else if (hd <= 64) tc_fwd<64>(out, lse, qkv, B, N, H, hd, scale);
  else tc_fwd<128>(out, lse, qkv, B, N, H, hd, scale);
}

void k_attn_tc_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                   float *Dg, int B, int N, int H, int hd, float scale) {
  if (hd <= 16) tc_bwd<16>(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
  else if (hd <= 32) tc_bwd<32>(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
  else if (hd <= 64) tc_bwd<64>(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
  else tc_bwd<128>(dqkv, dout, out, qkv, lse, Dg, B, N, H, hd, scale);
}
