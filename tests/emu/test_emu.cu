/* test_emu.cu - the CPU emulator's own checks (tests/emu/): block barriers and static shared
 * memory, dynamic shared memory, warp shuffles, warp matrix products (wmma), grid and thread
 * coordinates, atomics, launch configuration errors, streams as queues (the ordering CUDA promises
 * and no more: legacy and non-blocking streams, events, pinned and pageable copies, polling), and
 * the reports of a barrier that not every
 * thread reaches and of a misaligned wmma load (arguments "divergent" and "misaligned": the
 * program must end with status 99 and a message).  Written as CUDA, compiled through
 * tests/emu/rewrite.py like the backend. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
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

/* Warp w: D = A B + C for 16 x 16 tiles (A row-major, B column-major in warp 0 and row-major in
 * warp 1, C and D row-major fp32), through a fragment round trip via shared memory for C. */
__global__ void wmma_tile(float *D, const __nv_bfloat16 *A, const __nv_bfloat16 *B, const float *C,
                          int shift) {
  using namespace nvcuda;
  extern __shared__ __align__(128) float stage[];
  const int w = threadIdx.x / 32;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::load_matrix_sync(a, A + shift, 16);
  wmma::load_matrix_sync(c, C, 16, wmma::mem_row_major);
  if (w == 0) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
    wmma::load_matrix_sync(b, B, 16);
    wmma::mma_sync(c, a, b, c);
  } else {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::load_matrix_sync(b, B, 16);
    wmma::mma_sync(c, a, b, c);
  }
  wmma::store_matrix_sync(stage + w * 16 * 20, c, 20, wmma::mem_row_major);
  __syncwarp();
  for (int e = threadIdx.x % 32; e < 256; e += 32)
    D[w * 256 + e] = stage[w * 16 * 20 + (e / 16) * 20 + e % 16];
}

/* Threads 0-31 stop at a barrier the others never reach. */
__global__ void divergent(int *x) {
  if (threadIdx.x < 32) __syncthreads();
  x[threadIdx.x] = 1;
}

__global__ void fill(int *x, int v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}
__global__ void copy_ints(int *dst, const int *src, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}

/* Each block's shared memory starts undefined (0xff bytes here), not as the previous block left
 * it: out[b] is what block b finds before writing. */
__global__ void shared_fresh(int *out) {
  __shared__ int st[2];
  extern __shared__ int dyn[];
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = st[1];
    out[2 * blockIdx.x + 1] = dyn[3];
  }
  __syncthreads();
  if (threadIdx.x == 0) st[1] = dyn[3] = (int)blockIdx.x + 1;
}

/* Streams as queues (runtime.cc, SCDINO_EMU_STREAMS=deferred): work runs when something waits for
 * it, so a program that does not wait sees what it could see on a GPU. */
static void check_streams(void) {
  const int n = 64;
  int *x, *y, h[n], *pin;
  cudaMalloc((void **)&x, n * sizeof(int));
  cudaMalloc((void **)&y, n * sizeof(int));
  cudaMallocHost((void **)&pin, n * sizeof(int));
  cudaStream_t s1, s2, sb;
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  cudaStreamCreate(&sb); /* blocking: ordered with the legacy stream */
  cudaEvent_t e, e2;
  cudaEventCreate(&e);
  cudaEventCreate(&e2);
  fill<<<1, n>>>(x, 1, n);
  fill<<<1, n>>>(y, 1, n);
  cudaDeviceSynchronize();

  /* The legacy stream does not wait for a non-blocking one. */
  fill<<<1, n, 0, s1>>>(x, 2, n);
  cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
  CHECK(h[0] == 1 && h[n - 1] == 1, "a legacy copy after a non-blocking stream's kernel: %d (its earlier value 1)", h[0]);
  cudaStreamSynchronize(s1);
  cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
  CHECK(h[0] == 2, "after cudaStreamSynchronize: %d", h[0]);

  /* It waits for a blocking stream's earlier work. */
  fill<<<1, n, 0, sb>>>(x, 3, n);
  cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
  CHECK(h[0] == 3, "a legacy copy after a blocking stream's kernel: %d", h[0]);

  /* Another stream sees a stream's work only through an event. */
  fill<<<1, n, 0, s1>>>(x, 4, n);
  copy_ints<<<1, n, 0, s2>>>(y, x, n);
  cudaStreamSynchronize(s2);
  cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
  CHECK(h[0] == 3, "a copy on s2 without waiting for s1's fill: %d (the old 3)", h[0]);
  fill<<<1, n, 0, s1>>>(x, 5, n);
  cudaEventRecord(e, s1);
  cudaStreamWaitEvent(s2, e, 0);
  copy_ints<<<1, n, 0, s2>>>(y, x, n);
  cudaStreamSynchronize(s2);
  cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
  CHECK(h[0] == 5, "a copy on s2 after waiting for s1's event: %d", h[0]);
  cudaDeviceSynchronize();

  /* A pinned source is read when the copy runs, a pageable one at the call. */
  for (int i = 0; i < n; i++) pin[i] = 6, h[i] = 7;
  cudaMemcpyAsync(x, pin, n * sizeof(int), cudaMemcpyHostToDevice, s1);
  cudaMemcpyAsync(y, h, n * sizeof(int), cudaMemcpyHostToDevice, s1);
  for (int i = 0; i < n; i++) pin[i] = 8, h[i] = 9;
  cudaStreamSynchronize(s1);
  cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
  CHECK(h[0] == 8, "a pinned buffer rewritten before its copy ran: %d (the new 8)", h[0]);
  cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
  CHECK(h[0] == 7, "a pageable buffer rewritten after cudaMemcpyAsync: %d (the staged 7)", h[0]);
  /* A copy to pinned memory has landed only once its stream was waited for. */
  pin[0] = -1;
  cudaMemcpyAsync(pin, x, n * sizeof(int), cudaMemcpyDeviceToHost, s1);
  CHECK(pin[0] == -1, "a pinned destination before the wait: %d", pin[0]);
  cudaEventRecord(e, s1);
  cudaEventRecord(e2, s1);
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, e, e2) == cudaErrorNotReady, "elapsed time of events not yet complete");
  /* Polling makes progress, one item per query. */
  int polls = 0;
  while (cudaEventQuery(e2) == cudaErrorNotReady && polls < 100) polls++;
  CHECK(polls >= 1 && polls < 100 && pin[0] == 8, "cudaEventQuery: %d polls, pinned %d", polls, pin[0]);
  CHECK(cudaEventElapsedTime(&ms, e, e2) == cudaSuccess && ms >= 0.0f, "elapsed time once complete: %g", ms);
  cudaEventDestroy(e);
  cudaEventDestroy(e2);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaStreamDestroy(sb);
  cudaFreeHost(pin);
  cudaFree(x);
  cudaFree(y);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "divergent")) {
    int *d;
    cudaMalloc((void **)&d, 64 * sizeof(int));
    divergent<<<1, 64>>>(d);
    cudaDeviceSynchronize(); /* the kernel runs (and the emulator ends the program) */
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "misaligned")) {
    __nv_bfloat16 *a;
    float *d, *c;
    cudaMalloc((void **)&a, 512 * sizeof *a);
    cudaMalloc((void **)&c, 256 * sizeof *c);
    cudaMalloc((void **)&d, 512 * sizeof *d);
    wmma_tile<<<1, 32, 2 * 16 * 20 * sizeof(float)>>>(d, a, a, c, 8); /* A 16 bytes off */
    cudaDeviceSynchronize();
    return 0; /* not reached */
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

  { /* wmma: bf16 inputs with exact products, so the fp32 result equals the double reference */
    __nv_bfloat16 ha[256], hb[256], *da, *db;
    float hcc[256], hd[512], *dc, *dd;
    double want0[256], want1[256];
    for (int i = 0; i < 256; i++) {
      ha[i] = __float2bfloat16_rn((float)((i * 7) % 13 - 6) / 8.0f);
      hb[i] = __float2bfloat16_rn((float)((i * 5) % 11 - 5) / 4.0f);
      hcc[i] = (float)(i % 9) - 4.0f;
    }
    for (int r = 0; r < 16; r++)
      for (int cc = 0; cc < 16; cc++) {
        double s0 = hcc[r * 16 + cc], s1 = hcc[r * 16 + cc];
        for (int k = 0; k < 16; k++) {
          const double av = __bfloat162float(ha[r * 16 + k]);
          s0 += av * __bfloat162float(hb[cc * 16 + k]); /* column-major B */
          s1 += av * __bfloat162float(hb[k * 16 + cc]); /* row-major B */
        }
        want0[r * 16 + cc] = s0;
        want1[r * 16 + cc] = s1;
      }
    cudaMalloc((void **)&da, sizeof ha);
    cudaMalloc((void **)&db, sizeof hb);
    cudaMalloc((void **)&dc, sizeof hcc);
    cudaMalloc((void **)&dd, sizeof hd);
    cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
    cudaMemcpy(dc, hcc, sizeof hcc, cudaMemcpyHostToDevice);
    wmma_tile<<<1, 64, 2 * 16 * 20 * sizeof(float)>>>(dd, da, db, dc, 0);
    CHECK(cudaGetLastError() == cudaSuccess, "wmma_tile launch");
    cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < 256; i++) bad += hd[i] != (float)want0[i] || hd[256 + i] != (float)want1[i];
    CHECK(bad == 0, "wmma products: %d of 512 differ (first: %g, expected %g)", bad, hd[0], want0[0]);
  }

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

  {
    int *o, ho[6];
    cudaMalloc((void **)&o, sizeof ho);
    shared_fresh<<<3, 32, 16>>>(o);
    cudaMemcpy(ho, o, sizeof ho, cudaMemcpyDeviceToHost);
    int fresh = 0;
    for (int i = 0; i < 6; i++) fresh += ho[i] == -1;
    CHECK(fresh == 6, "shared memory at the start of a block: %d of 6 were 0xff bytes (%d %d %d %d %d %d)", fresh,
          ho[0], ho[1], ho[2], ho[3], ho[4], ho[5]);
    cudaFree(o);
  }

  const char *mode = getenv("SCDINO_EMU_STREAMS");
  if (!mode || strcmp(mode, "sync")) check_streams();

  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
