/* colsum.cu - the column sums' counters and empty case, and column sums of activations. */
#include "build_config.h"

#include "cuda/ops/colsum.cuh"

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

/* Columns c0 .. c0+V-1 of row r in one 16-byte load. */
template <typename T> struct act_vec {
  const T *a;
  size_t lda;
  __device__ void operator()(int r, int c0, float *v) const { ld_vec(v, a + (size_t)r * lda + c0); }
};

/* The bias gradients' column sums read a whole activation gradient: with whole 16-byte vectors
 * per row (cols and lda multiples of V, a aligned) each thread loads 16 bytes at a time. */
template <typename T>
void k_colsum(float *out, const T *a, int rows, int cols, size_t lda, int accumulate) {
  const int V = vec16<T>::N;
  if (cols % V || lda % V || ((uintptr_t)a & 15u))
    colsum_run(out, act_elem<T>{a, lda}, rows, cols, accumulate);
  else
    colsum_vec_run<V>(out, act_vec<T>{a, lda}, rows, cols, accumulate);
}

template void k_colsum<float>(float *, const float *, int, int, size_t, int);
template void k_colsum<bf16>(float *, const bf16 *, int, int, size_t, int);
template void k_colsum<f16>(float *, const f16 *, int, int, size_t, int);
