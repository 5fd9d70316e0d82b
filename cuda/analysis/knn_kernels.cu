/* knn_kernels.cu - the kNN neighbour selection on the GPU: one block per test row keeps the row's
 * kmax nearest reference rows, scanning a tile of similarities with the current k-th nearest as
 * threshold; rows that beat it gather in shared memory and a bitonic sort cuts them back to kmax.
 * Keys are (similarity, position) pairs, all distinct, ordered by knn.h's tie rule, so the result
 * does not depend on the order in which threads find the candidates: it is the CPU's selection
 * (src/analysis/knn_select.c) on the same similarities, entry for entry. */
#include "build_config.h"

#include <stdint.h>

#include "cuda/analysis/knn_kernels.h"
#include "cuda/ops/cuda_internal.h"

#define KK_THREADS 256
#define KK_CAP 4096 /* candidates held in shared memory: kmax kept + at least one pass */
#define KK_PASS 1024 /* columns scanned between two checks of the room left */

static __device__ __forceinline__ bool kk_nearer(float sa, int32_t pa, float sb, int32_t pb) {
  return sa > sb || (sa == sb && pa < pb);
}

/* Sort bs/bp[0 .. *n) nearest first and keep kmax (<= *n); the threshold becomes the kmax-th. */
static __device__ void kk_sort_keep(float *bs, int32_t *bp, int *n_sh, int kmax, float *ts, int32_t *tp) {
  const int n = *n_sh;
  int p2 = 2;
  while (p2 < n) p2 <<= 1;
  for (int i = n + (int)threadIdx.x; i < p2; i += KK_THREADS) {
    bs[i] = -INFINITY;
    bp[i] = INT32_MAX;
  }
  __syncthreads();
  for (int k = 2; k <= p2; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < p2; i += KK_THREADS) {
        const int o = i ^ j;
        if (o <= i) continue;
        /* ascending runs (nearest first) where bit k of i is clear, descending where set */
        const bool first = (i & k) == 0;
        const bool swap = first ? kk_nearer(bs[o], bp[o], bs[i], bp[i]) : kk_nearer(bs[i], bp[i], bs[o], bp[o]);
        if (swap) {
          const float s = bs[i];
          const int32_t p = bp[i];
          bs[i] = bs[o];
          bp[i] = bp[o];
          bs[o] = s;
          bp[o] = p;
        }
      }
      __syncthreads();
    }
  if (threadIdx.x == 0) {
    *n_sh = kmax;
    *ts = bs[kmax - 1];
    *tp = bp[kmax - 1];
  }
  __syncthreads();
}

__global__ void __launch_bounds__(KK_THREADS)
    kk_topk_kernel(const float *sim, int ncols, int64_t ld, int col0, int kmax, float *ls, int32_t *lp) {
  __shared__ float bs[KK_CAP];
  __shared__ int32_t bp[KK_CAP];
  __shared__ int n;
  __shared__ float ts;
  __shared__ int32_t tp;
  const int64_t row = blockIdx.x;
  const float *srow = sim + row * ld;
  float *rs = ls + row * kmax;
  int32_t *rp = lp + row * kmax;
  for (int i = threadIdx.x; i < kmax; i += KK_THREADS) {
    bs[i] = rs[i];
    bp[i] = rp[i];
  }
  if (threadIdx.x == 0) {
    n = kmax;
    ts = rs[kmax - 1];
    tp = rp[kmax - 1];
  }
  __syncthreads();
  bool changed = false; /* uniform: every thread reads n between the same two barriers */
  for (int c0 = 0; c0 < ncols; c0 += KK_PASS) {
    const int nn = n;
    __syncthreads(); /* everyone has read n before this pass adds to it */
    if (nn + KK_PASS > KK_CAP) {
      kk_sort_keep(bs, bp, &n, kmax, &ts, &tp);
      changed = true;
    }
    const float t_s = ts;
    const int32_t t_p = tp;
    const int c1 = c0 + KK_PASS < ncols ? c0 + KK_PASS : ncols;
    for (int c = c0 + (int)threadIdx.x; c < c1; c += KK_THREADS) {
      const float s = srow[c];
      const int32_t p = col0 + c;
      if (kk_nearer(s, p, t_s, t_p)) {
        const int i = atomicAdd(&n, 1);
        bs[i] = s;
        bp[i] = p;
      }
    }
    __syncthreads();
  }
  if (!changed && n == kmax) return; /* nothing joined: the list is unchanged (n is stable now) */
  kk_sort_keep(bs, bp, &n, kmax, &ts, &tp);
  for (int i = threadIdx.x; i < kmax; i += KK_THREADS) {
    rs[i] = bs[i];
    rp[i] = bp[i];
  }
}

__global__ void kk_clear_kernel(float *s, int32_t *pos, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    s[i] = -INFINITY;
    pos[i] = INT32_MAX;
  }
}

extern "C" void kk_lists_clear(float *s, int32_t *pos, int64_t n, void *stream) {
  if (n <= 0) return;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  kk_clear_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(s, pos, n);
  CHECK_LAUNCH();
}

extern "C" void kk_topk(const float *sim, int64_t rows, int ncols, int64_t ld, int col0, int kmax, float *s,
                        int32_t *pos, void *stream) {
  SCD_ASSERT(kmax >= 1 && kmax <= KK_MAX_K && KK_MAX_K + KK_PASS <= KK_CAP);
  if (rows <= 0 || ncols <= 0) return;
  /* grid.x may hold 2^31 - 1 blocks: far more rows than one tile's scratch */
  SCD_ASSERT(rows <= INT32_MAX);
  kk_topk_kernel<<<(unsigned)rows, KK_THREADS, 0, (cudaStream_t)stream>>>(sim, ncols, ld, col0, kmax, s, pos);
  CHECK_LAUNCH();
}
