/* busbw_kernels.cu - device-side fill and exact check of the busbw benchmark's buffers, with the
 * same value formulas as the host (bench/busbw/busbw_data.h), so gigabytes are checked without copies. */
#include "build_config.h"

#include <cuda_runtime.h>

#include "bench/busbw/busbw_data.h"
#include "bench/busbw/busbw_kernels.h"

#define THREADS 256
#define MAX_BLOCKS 4096 /* grid-stride beyond this */

static unsigned grid_for(unsigned long long count) {
  unsigned long long b = (count + THREADS - 1) / THREADS;
  return (unsigned)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

__global__ void busbw_fill_kernel(struct busbw_gen g, void *buf, unsigned long long count) {
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += stride)
    busbw_store(g.type, buf, k, busbw_input_value(&g, k));
}

__global__ void busbw_verify_kernel(struct busbw_gen g, const void *buf, unsigned long long count,
                                    unsigned long long *wrong) {
  __shared__ unsigned long long block_wrong;
  if (threadIdx.x == 0) block_wrong = 0;
  __syncthreads();
  unsigned long long mine = 0, stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long m = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; m < count; m += stride)
    if (!busbw_matches(&g, busbw_load(g.type, buf, m), busbw_expected_value(&g, m))) mine++;
  if (mine) atomicAdd(&block_wrong, mine);
  __syncthreads();
  if (threadIdx.x == 0 && block_wrong) atomicAdd(wrong, block_wrong);
}

extern "C" int busbw_dev_fill(const struct busbw_gen *g, void *buf, unsigned long long count, void *stream) {
  if (count == 0) return 0;
  busbw_fill_kernel<<<grid_for(count), THREADS, 0, (cudaStream_t)stream>>>(*g, buf, count);
  return (int)cudaGetLastError();
}

extern "C" int busbw_dev_verify(const struct busbw_gen *g, const void *buf, unsigned long long count,
                                unsigned long long *d_wrong, void *stream) {
  if (count == 0) return 0;
  busbw_verify_kernel<<<grid_for(count), THREADS, 0, (cudaStream_t)stream>>>(*g, buf, count, d_wrong);
  return (int)cudaGetLastError();
}
