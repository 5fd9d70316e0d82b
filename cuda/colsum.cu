/* colsum.cu - the second stage of the deterministic column sums, and column sums of activations. */
#include "build_config.h"

#include "colsum.cuh"

__global__ void colsum_final_kernel(float *out, const float *partial, int nchunk, int cols,
                                    int accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int k = 0; k < nchunk; k++) s += partial[(size_t)k * cols + c];
  out[c] = accumulate ? out[c] + s : s;
}

template <typename T> struct act_elem {
  const T *a;
  size_t lda;
  __device__ float operator()(int r, int c) const { return ldf(&a[(size_t)r * lda + c]); }
};

template <typename T>
void k_colsum(float *out, const T *a, int rows, int cols, size_t lda, int accumulate) {
  colsum_run(out, act_elem<T>{a, lda}, rows, cols, accumulate);
}

template void k_colsum<float>(float *, const float *, int, int, size_t, int);
template void k_colsum<bf16>(float *, const bf16 *, int, int, size_t, int);
