/* colsum.cu - the column sums' counters and empty case, and column sums of activations. */
#include "build_config.h"

#include "colsum.cuh"

__global__ void colsum_empty_kernel(float *out, int cols, int accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < cols && !accumulate) out[c] = 0.0f;
}

unsigned *colsum_counters(int n) {
  static unsigned *count;
  static int have;
  if (n > have) {
    if (count) {
      CHECK_CUDA(cudaStreamSynchronize(cu.stream)); /* a queued sum may still use them */
      cu_dev_free(count);
    }
    const int want = n > 2 * have ? n : 2 * have;
    count = (unsigned *)cu_dev_alloc((size_t)want * sizeof(unsigned), "column-sum counters");
    CHECK_CUDA(cudaMemsetAsync(count, 0, (size_t)want * sizeof(unsigned), cu.stream));
    have = want;
  }
  return count;
}

template <typename T> struct act_elem {
  const T *a;
  size_t lda;
  __device__ float operator()(int r, int c) const { return ldf(&a[(size_t)r * lda + c]); }
};

/* 16-byte loads: thread x of a block sums columns c0 .. c0+V-1 over its row lane. */
template <typename T>
__global__ void colsum_vec_kernel(float *out, float *partial, unsigned *count, const T *a,
                                  size_t lda, int rows, int cols, int accumulate) {
  const int V = vec16<T>::N;
  const int c0 = (blockIdx.x * 32 + threadIdx.x) * V;
  const int r0 = blockIdx.y * COLSUM_CHUNK, r1 = min(rows, r0 + COLSUM_CHUNK);
  float acc[1][V];
  for (int j = 0; j < V; j++) acc[0][j] = 0.0f;
  if (c0 < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      float v[V];
      ld_vec(v, a + (size_t)r * lda + c0);
      for (int j = 0; j < V; j++) acc[0][j] += v[j];
    }
  colsum_finish<1, V>(out, (float *)NULL, partial, count, acc, c0, cols, accumulate);
}

/* The bias gradients' column sums read a whole activation gradient: with whole 16-byte vectors
 * per row (cols and lda multiples of V, a aligned) each thread loads 16 bytes at a time. */
template <typename T>
void k_colsum(float *out, const T *a, int rows, int cols, size_t lda, int accumulate) {
  const int V = vec16<T>::N;
  if (rows <= 0 || cols % V || lda % V || ((uintptr_t)a & 15u)) {
    colsum_run(out, act_elem<T>{a, lda}, rows, cols, accumulate);
    return;
  }
  const int nchunk = (rows + COLSUM_CHUNK - 1) / COLSUM_CHUNK, strips = (cols + 32 * V - 1) / (32 * V);
  SCD_ASSERT(nchunk <= 65535);
  unsigned *count = colsum_counters(strips);
  float *partial = (float *)cu_scratch(SLOT_PARTIAL, (size_t)nchunk * cols * sizeof(float));
  colsum_vec_kernel<T><<<dim3((unsigned)strips, (unsigned)nchunk), dim3(32, 8), 0, cu.stream>>>(
      out, partial, count, a, lda, rows, cols, accumulate);
  CHECK_LAUNCH();
}

template void k_colsum<float>(float *, const float *, int, int, size_t, int);
template void k_colsum<bf16>(float *, const bf16 *, int, int, size_t, int);
