/* colsum.cuh - deterministic column reductions over rows: out[c] (+)= sum_r f(r, c).
 *
 * Two launches: blocks of 32 columns x 8 row lanes sum fixed chunks of COLSUM_CHUNK rows into
 * partial sums (each chunk's 8 lanes combined in a fixed order), then one thread per column adds
 * the chunks in order.  The result depends only on rows and cols, never on the GPU or timing (no
 * atomics), so gradients are reproducible run to run.  f is a functor with
 * `__device__ float operator()(int r, int c) const`. */
#ifndef SCDINO_COLSUM_CUH
#define SCDINO_COLSUM_CUH

#include "cuda_internal.h"

#define COLSUM_CHUNK 128 /* rows per partial sum */

template <typename F>
__global__ void colsum_partial_kernel(float *partial, F f, int rows, int cols) {
  __shared__ float red[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
  const int r0 = chunk * COLSUM_CHUNK, r1 = min(rows, r0 + COLSUM_CHUNK);
  float acc = 0.0f;
  if (c < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += 8) acc += f(r, c);
  red[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = red[0][threadIdx.x];
    for (int i = 1; i < 8; i++) s += red[i][threadIdx.x];
    partial[(size_t)chunk * cols + c] = s;
  }
}

__global__ void colsum_final_kernel(float *out, const float *partial, int nchunk, int cols,
                                    int accumulate);

/* out[c] = (accumulate ? out[c] : 0) + sum over r < rows of f(r, c), for c < cols. */
template <typename F> void colsum_run(float *out, F f, int rows, int cols, int accumulate) {
  if (cols <= 0) return;
  const int nchunk = rows > 0 ? (rows + COLSUM_CHUNK - 1) / COLSUM_CHUNK : 0;
  float *partial = (float *)cu_scratch(SLOT_PARTIAL, (size_t)(nchunk ? nchunk : 1) * cols * sizeof(float));
  if (nchunk) {
    const dim3 grid((unsigned)((cols + 31) / 32), (unsigned)nchunk), block(32, 8);
    SCD_ASSERT(nchunk <= 65535);
    colsum_partial_kernel<F><<<grid, block, 0, cu.stream>>>(partial, f, rows, cols);
    CHECK_LAUNCH();
  }
  colsum_final_kernel<<<(cols + 255) / 256, 256, 0, cu.stream>>>(out, partial, nchunk, cols,
                                                                 accumulate);
  CHECK_LAUNCH();
}

#endif
