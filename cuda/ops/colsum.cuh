/* colsum.cuh - deterministic column reductions over rows: out[c] (+)= sum_r f(r, c).
 *
 * One launch: blocks of 32 threads x 8 row lanes sum fixed chunks of COLSUM_CHUNK rows into
 * partial sums (each chunk's 8 lanes combined in a fixed order); the last block of a column strip
 * to finish (a counter per strip) adds that strip's chunks in chunk order and resets the counter.
 * The result depends only on rows and cols, never on the GPU or the order blocks finish in (the
 * counter only elects who adds; the sum order is fixed), so gradients are reproducible run to run.
 * f is a functor with `__device__ float operator()(int r, int c) const` (colsum_run), or one setting
 * several values at once (colsum_multi_run: one pass over the rows for several sums).  A thread
 * sums one column, or, for plain activation arrays (k_colsum), the 8 bf16 or 4 fp32 columns of a
 * 16-byte load. */
#ifndef SCDINO_COLSUM_CUH
#define SCDINO_COLSUM_CUH

#include "cuda/ops/cuda_internal.h"

#define COLSUM_CHUNK 128 /* rows per partial sum */

/* The end of every column-sum block: thread (x, y) holds acc[o][j], its row lane's sum over this
 * chunk for column c0 + j (j < V; c0 = (blockIdx.x * 32 + x) * V), for output o < NO.  The 8 lanes
 * are combined in order into the chunk's partial sums; the strip's last block adds the chunks in
 * order. */
template <int NO, int V>
__device__ void colsum_finish(float *out0, float *out1, float *partial, unsigned *count,
                              float (&acc)[NO][V], int c0, int cols, int accumulate) {
  __shared__ float red[NO][8][32 * V + 1];
  __shared__ int last;
  const int chunk = blockIdx.y, nchunk = gridDim.y, t = threadIdx.x * V;
  for (int o = 0; o < NO; o++)
    for (int j = 0; j < V; j++) red[o][threadIdx.y][t + j] = acc[o][j];
  __syncthreads();
  if (threadIdx.y == 0)
    for (int o = 0; o < NO; o++)
      for (int j = 0; j < V && c0 + j < cols; j++) {
        float s = red[o][0][t + j];
        for (int i = 1; i < 8; i++) s += red[o][i][t + j];
        partial[((size_t)o * nchunk + chunk) * cols + c0 + j] = s;
      }
  __threadfence(); /* this block's partials are visible to the block that adds them */
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0)
    last = atomicAdd(&count[blockIdx.x], 1u) == (unsigned)nchunk - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  /* The strip's columns spread over all 256 threads, each column's chunks added in chunk order
   * with 8 loads in flight at a time: this tail runs while the rest of the GPU may be idle (one
   * load at a time, as before 2026-11-27, made it about a third of GELU's backward). */
  const int strip_c0 = blockIdx.x * 32 * V, tid = threadIdx.y * 32 + threadIdx.x;
  for (int q = tid; q < NO * 32 * V; q += 32 * 8) {
    const int o = q / (32 * V), c = strip_c0 + q % (32 * V);
    if (c >= cols) continue;
    const volatile float *pv = partial + (size_t)o * nchunk * cols + c; /* other blocks' writes */
    float s = 0.0f;
    int k = 0;
    for (; k + 8 <= nchunk; k += 8) {
      float t[8];
#pragma unroll
      for (int u = 0; u < 8; u++) t[u] = pv[(size_t)(k + u) * cols];
#pragma unroll
      for (int u = 0; u < 8; u++) s += t[u];
    }
    for (; k < nchunk; k++) s += pv[(size_t)k * cols];
    float *out = o ? out1 : out0;
    out[c] = accumulate ? out[c] + s : s;
  }
  if (threadIdx.x == 0 && threadIdx.y == 0) count[blockIdx.x] = 0; /* ready for the next call */
}

/* NO sums at once: f(r, c, v) sets v[0..NO) (one pass over the rows for several outputs). */
template <int NO, typename F>
__global__ void colsum_kernel(float *out0, float *out1, float *partial, unsigned *count, F f,
                              int rows, int cols, int accumulate) {
  const int c = blockIdx.x * 32 + threadIdx.x;
  const int r0 = blockIdx.y * COLSUM_CHUNK, r1 = min(rows, r0 + COLSUM_CHUNK);
  float acc[NO][1];
  for (int o = 0; o < NO; o++) acc[o][0] = 0.0f;
  if (c < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      float v[NO];
      f(r, c, v);
      for (int o = 0; o < NO; o++) acc[o][0] += v[o];
    }
  colsum_finish<NO, 1>(out0, out1, partial, count, acc, c, cols, accumulate);
}

/* V columns per thread: f(r, c0, v) sets v[0..V) for columns c0 .. c0+V-1 of row r (one 16-byte
 * load of activations, say). */
template <int V, typename F>
__global__ void colsum_vec_kernel(float *out, float *partial, unsigned *count, F f, int rows,
                                  int cols, int accumulate) {
  const int c0 = (blockIdx.x * 32 + threadIdx.x) * V;
  const int r0 = blockIdx.y * COLSUM_CHUNK, r1 = min(rows, r0 + COLSUM_CHUNK);
  float acc[1][V];
  for (int j = 0; j < V; j++) acc[0][j] = 0.0f;
  if (c0 < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      float v[V];
      f(r, c0, v);
      for (int j = 0; j < V; j++) acc[0][j] += v[j];
    }
  colsum_finish<1, V>(out, (float *)NULL, partial, count, acc, c0, cols, accumulate);
}

/* As colsum_vec_kernel for a functor in two phases: f.load(r, c0, raw) issues row r's loads and
 * f.apply(r, c0, raw, v) does the rest (stores included) and sets v.  U rows are loaded before any
 * is applied, so their loads fly together: the compiler cannot move a load above a store to an
 * array that may alias it (GELU's backward runs in place).  The sums are added in the same order
 * as colsum_vec_kernel's. */
template <int V, int U, typename F>
__global__ void colsum_vec2_kernel(float *out, float *partial, unsigned *count, F f, int rows, int cols,
                                   int accumulate) {
  const int c0 = (blockIdx.x * 32 + threadIdx.x) * V;
  const int r0 = blockIdx.y * COLSUM_CHUNK, r1 = min(rows, r0 + COLSUM_CHUNK);
  float acc[1][V];
  for (int j = 0; j < V; j++) acc[0][j] = 0.0f;
  if (c0 < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += 8 * U) {
      typename F::raw raw[U];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (r + 8 * u < r1) f.load(r + 8 * u, c0, raw[u]);
#pragma unroll
      for (int u = 0; u < U; u++)
        if (r + 8 * u < r1) {
          float v[V];
          f.apply(r + 8 * u, c0, raw[u], v);
          for (int j = 0; j < V; j++) acc[0][j] += v[j];
        }
    }
  colsum_finish<1, V>(out, (float *)NULL, partial, count, acc, c0, cols, accumulate);
}

/* out[c] = accumulate ? out[c] : 0 for c < cols (no rows). */
__global__ void colsum_empty_kernel(float *out, int cols, int accumulate);

/* Zeroed counters, one per strip of columns (a block's), for n strips (grown on demand). */
unsigned *colsum_counters(int n);

/* outo[c] = (accumulate ? outo[c] : 0) + sum over r < rows of v[o] from f(r, c, v), for c < cols
 * and o < NO (NO = 1 or 2; out1 unused for 1). */
template <int NO, typename F>
void colsum_multi_run(float *out0, float *out1, F f, int rows, int cols, int accumulate) {
  if (cols <= 0) return;
  const int nchunk = rows > 0 ? (rows + COLSUM_CHUNK - 1) / COLSUM_CHUNK : 0;
  if (!nchunk) {
    for (int o = 0; o < NO; o++) {
      colsum_empty_kernel<<<(cols + 255) / 256, 256, 0, cu.stream>>>(o ? out1 : out0, cols, accumulate);
      CHECK_LAUNCH();
    }
    return;
  }
  SCD_ASSERT(nchunk <= 65535);
  const int strips = (cols + 31) / 32;
  unsigned *count = colsum_counters(strips);
  float *partial = (float *)cu_scratch(SLOT_PARTIAL, (size_t)NO * nchunk * cols * sizeof(float));
  const dim3 grid((unsigned)strips, (unsigned)nchunk), block(32, 8);
  colsum_kernel<NO, F><<<grid, block, 0, cu.stream>>>(out0, out1, partial, count, f, rows, cols,
                                                      accumulate);
  CHECK_LAUNCH();
}

/* What the launchers below share: the checks, the empty case (out set or left, no launch), and the
 * grid's chunks, per-strip counters and scratch for the partial sums.  Returns 0 when done. */
struct colsum_grid {
  int nchunk, strips;
  unsigned *count;
  float *partial;
};
template <int V> int colsum_vec_setup(float *out, int rows, int cols, int accumulate, colsum_grid *g) {
  if (cols <= 0) return 0;
  SCD_ASSERT(cols % V == 0);
  if (rows <= 0) {
    colsum_empty_kernel<<<(cols + 255) / 256, 256, 0, cu.stream>>>(out, cols, accumulate);
    CHECK_LAUNCH();
    return 0;
  }
  g->nchunk = (rows + COLSUM_CHUNK - 1) / COLSUM_CHUNK;
  g->strips = (cols + 32 * V - 1) / (32 * V);
  SCD_ASSERT(g->nchunk <= 65535);
  g->count = colsum_counters(g->strips);
  g->partial = (float *)cu_scratch(SLOT_PARTIAL, (size_t)g->nchunk * cols * sizeof(float));
  return 1;
}

/* out[c] = (accumulate ? out[c] : 0) + sum over r < rows of f's values, V columns per thread
 * (cols a multiple of V). */
template <int V, typename F> void colsum_vec_run(float *out, F f, int rows, int cols, int accumulate) {
  colsum_grid g;
  if (!colsum_vec_setup<V>(out, rows, cols, accumulate, &g)) return;
  colsum_vec_kernel<V, F><<<dim3((unsigned)g.strips, (unsigned)g.nchunk), dim3(32, 8), 0, cu.stream>>>(
      out, g.partial, g.count, f, rows, cols, accumulate);
  CHECK_LAUNCH();
}

/* colsum_vec_run for a two-phase functor (colsum_vec2_kernel), U rows' loads in flight. */
template <int V, int U, typename F> void colsum_vec2_run(float *out, F f, int rows, int cols, int accumulate) {
  colsum_grid g;
  if (!colsum_vec_setup<V>(out, rows, cols, accumulate, &g)) return;
  colsum_vec2_kernel<V, U, F><<<dim3((unsigned)g.strips, (unsigned)g.nchunk), dim3(32, 8), 0, cu.stream>>>(
      out, g.partial, g.count, f, rows, cols, accumulate);
  CHECK_LAUNCH();
}

/* A one-value functor `float f(r, c)` as a colsum_multi_run one. */
template <typename F> struct colsum_one {
  F f;
  __device__ void operator()(int r, int c, float *v) const { v[0] = f(r, c); }
};

/* out[c] = (accumulate ? out[c] : 0) + sum over r < rows of f(r, c), for c < cols. */
template <typename F> void colsum_run(float *out, F f, int rows, int cols, int accumulate) {
  colsum_multi_run<1>(out, (float *)NULL, colsum_one<F>{f}, rows, cols, accumulate);
}

#endif
