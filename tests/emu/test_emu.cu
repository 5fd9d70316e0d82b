/* test_emu.cu - the CPU emulator's own checks (tests/emu/): block barriers and static shared
 * memory, dynamic shared memory, warp shuffles, grid and thread coordinates, atomics, launch
 * configuration errors, and the report of a barrier that not every thread reaches (argument
 * "divergent": the program must end with status 99 and a message).  Written as CUDA, compiled
 * through tests/emu/rewrite.py like the backend. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks, failures;
#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    checks++;                                                               \
    if (!(cond)) {                                                          \
      failures++;                                                           \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
    }                                                                       \
  } while (0)

/* Tree sum in shared memory: wrong without the barriers (a thread would read a partner's slot
 * before the partner wrote it, since fibers run in thread order only between barriers). */
__global__ void block_sum(const int *x, int *out) {
  __shared__ int s[256];
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  for (int h = 128; h > 0; h /= 2) {
    if (t < h) s[t] += s[t + h];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

/* Reversal through dynamic shared memory. */
__global__ void reverse(const float *x, float *y, int n) {
  extern __shared__ float buf[];
  const int t = threadIdx.x;
  if (t < n) buf[t] = x[t];
  __syncthreads();
  if (t < n) y[t] = buf[n - 1 - t];
}

/* Butterfly warp sum: every lane gets the total of its warp. */
__global__ void warp_sum(const float *x, float *y) {
  float v = x[threadIdx.x];
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  y[threadIdx.x] = v;
}

/* Rows of a 2D grid and 2D blocks write their global coordinates. */
__global__ void coords(int *out, int W) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  out[y * W + x] = 1000 * y + x;
}

__global__ void count(unsigned long long *c) { atomicAdd(c, 1ull); }

/* Threads 0-31 stop at a barrier the others never reach. */
__global__ void divergent(int *x) {
  if (threadIdx.x < 32) __syncthreads();
  x[threadIdx.x] = 1;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "divergent")) {
    int *d;
    cudaMalloc((void **)&d, 64 * sizeof(int));
    divergent<<<1, 64>>>(d);
    return 0; /* not reached: the emulator ends the program */
  }
  const int nb = 3;
  int *x, *out;
  cudaMalloc((void **)&x, nb * 256 * sizeof(int));
  cudaMalloc((void **)&out, nb * sizeof(int));
  int hx[nb * 256], want[nb] = {0, 0, 0};
  for (int i = 0; i < nb * 256; i++) {
    hx[i] = (i * 37) % 101 - 50;
    want[i / 256] += hx[i];
  }
  cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
  block_sum<<<nb, 256>>>(x, out);
  CHECK(cudaGetLastError() == cudaSuccess, "block_sum launch");
  int got[nb];
  cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost);
  for (int b = 0; b < nb; b++) CHECK(got[b] == want[b], "block %d: %d, expected %d", b, got[b], want[b]);

  float *f, *g;
  cudaMalloc((void **)&f, 64 * sizeof(float));
  cudaMalloc((void **)&g, 64 * sizeof(float));
  float hf[64], hg[64];
  for (int i = 0; i < 64; i++) hf[i] = (float)i;
  cudaMemcpy(f, hf, sizeof hf, cudaMemcpyHostToDevice);
  reverse<<<1, 64, 50 * sizeof(float)>>>(f, g, 50);
  cudaMemcpy(hg, g, sizeof hg, cudaMemcpyDeviceToHost);
  int ok = 1;
  for (int i = 0; i < 50; i++) ok &= hg[i] == (float)(49 - i);
  CHECK(ok, "reverse through dynamic shared memory");

  warp_sum<<<1, 64>>>(f, g);
  cudaMemcpy(hg, g, sizeof hg, cudaMemcpyDeviceToHost);
  ok = 1;
  for (int i = 0; i < 64; i++) ok &= hg[i] == (i < 32 ? 496.0f : 1520.0f);
  CHECK(ok, "warp sums: lane 0 %g, lane 32 %g", hg[0], hg[32]);

  int *c2;
  const int W = 12, Hh = 6;
  cudaMalloc((void **)&c2, W * Hh * sizeof(int));
  coords<<<dim3(3, 2), dim3(4, 3)>>>(c2, W);
  int hc[W * Hh];
  cudaMemcpy(hc, c2, sizeof hc, cudaMemcpyDeviceToHost);
  ok = 1;
  for (int y = 0; y < Hh; y++)
    for (int xx = 0; xx < W; xx++) ok &= hc[y * W + xx] == 1000 * y + xx;
  CHECK(ok, "2D grid and block coordinates");

  unsigned long long *cnt, hcnt = 0;
  cudaMalloc((void **)&cnt, sizeof *cnt);
  cudaMemset(cnt, 0, sizeof *cnt);
  count<<<7, 96>>>(cnt);
  cudaMemcpy(&hcnt, cnt, sizeof hcnt, cudaMemcpyDeviceToHost);
  CHECK(hcnt == 7 * 96, "atomicAdd count %llu", hcnt);

  /* Configuration errors are launch errors, and the kernel does not run. */
  count<<<1, 2048>>>(cnt);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block");
  reverse<<<1, 64, 64 * 1024>>>(f, g, 50);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue, "64 KiB of dynamic shared memory without the attribute");
  CHECK(cudaFuncSetAttribute(reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess,
        "attribute");
  reverse<<<1, 64, 64 * 1024>>>(f, g, 50);
  CHECK(cudaGetLastError() == cudaSuccess, "64 KiB of dynamic shared memory with the attribute");
  CHECK(cudaGetLastError() == cudaSuccess, "the error was cleared");
  /* Copies check their direction against what is device memory. */
  CHECK(cudaMemcpy(hg, hf, 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "host-to-host called D2H");

  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
