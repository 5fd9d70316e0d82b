/* dino_loss.cu - the DINO loss on the GPU: centred, sharpened teacher softmax against the student's
 * log-softmax over K (65,536) classes, its gradient, and the teacher's column sums.
 *
 * fp32 math.  A row of K columns is spread over ceil(K / LCHUNK) blocks ("splits"): 128 teacher
 * and 640 student rows (ViT-S/16, batch 64) make one block per row too few to keep an H100's
 * memory busy (one block per row took 0.74 ms of the step, about 5x its bytes).  Each split loads
 * 16 bytes per thread and access where the rows allow it.
 *   (1) row_stats: each split's running maximum and sum of exp(z - max) of z = (x - c) / T, in one
 *       pass (the sum rescaled when the maximum grows);
 *   (2) teacher_probs: the row's splits combined in split order, Q = exp(z - max) / sum into an fp32
 *       scratch, and each split's sum of Q;
 *   (3) row_stats of the student rows, then student_grad: the row's log-sum-exp, its cross-entropy
 *       terms against every teacher crop but its own, and the gradient
 *         ds = (1 / (n B T_s)) (softmax(s / T_s) sum_{i != v} sum_k Q_ik - sum_{i != v} Q_i);
 *   (4) loss_total: the splits' terms added in double in a fixed tree.
 * Every combination has a fixed order, so the result is the same at every run.
 * The diagnostics (k_dino_stats) form the same Q with each split's sum of -Q log Q, then add the
 * splits' entropies with loss_total and the columns of Q with k_colsum. */
#include "build_config.h"

#include <math.h>

#include "cuda/ops/colsum.cuh"

#define LTHREADS 256
#define LCHUNK 8192 /* columns per block; a multiple of LTHREADS x 8 */

/* A running log-sum-exp: maximum m and sum s of exp(z - m).  Adding (m2, s2) is commutative, so
 * both lanes of a butterfly get the same bits. */
static __device__ __forceinline__ void lse_add(float &m, float &s, float m2, float s2) {
  if (m2 == -INFINITY) return; /* an empty part (s2 = 0) */
  if (m2 > m) {
    s = s * expf(m - m2) + s2; /* m = -inf: s is 0 */
    m = m2;
  } else {
    s += s2 * expf(m2 - m);
  }
}

/* Block-wide (m, s); every thread gets the result. */
static __device__ void block_lse(float &m, float &s, float2 *red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lse_add(m, s, m2, s2);
  }
  if (lane == 0) red[warp] = make_float2(m, s);
  __syncthreads();
  m = red[0].x, s = red[0].y;
  for (int w = 1; w < nw; w++) lse_add(m, s, red[w].x, red[w].y);
}

/* Block-wide sum; every thread gets it. */
static __device__ float block_sum(float v, float *red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < nw; w++) r += red[w];
  return r;
}

/* V elements from p as floats: one 16-byte access (V = vec16<T>::N) or one element (V = 1). */
template <typename T, int V> __device__ __forceinline__ void ld_row(float *v, const T *p) {
  if (V == 1) v[0] = ldf(p);
  else ld_vec<T>(v, p);
}
template <typename T, int V> __device__ __forceinline__ void st_row(T *p, const float *v) {
  if (V == 1) stf(p, v[0]);
  else st_vec<T>(p, v);
}
/* V fp32 values (V = 1, 4 or 8) with 16-byte accesses where V allows. */
template <int V> __device__ __forceinline__ void ld_f32(float *v, const float *p) {
  if (V == 1) v[0] = p[0];
  else
    for (int j = 0; j < V; j += 4) ld_vec<float>(v + j, p + j);
}
template <int V> __device__ __forceinline__ void st_f32(float *p, const float *v) {
  if (V == 1) p[0] = v[0];
  else
    for (int j = 0; j < V; j += 4) st_vec<float>(p + j, v + j);
}

/* Split blockIdx.x of row blockIdx.y: part = (max, sum of exp(z - max)) of z = (x - c) / temp over
 * the split's columns (c = 0 without a centre). */
template <typename T, int V>
__global__ void __launch_bounds__(LTHREADS)
    row_stats_kernel(float2 *part, const T *x, const float *center, int K, float temp) {
  __shared__ float2 red[LTHREADS / 32];
  const int S = gridDim.x, j = blockIdx.x;
  const size_t r = blockIdx.y;
  const int k0 = j * LCHUNK, k1 = min(K, k0 + LCHUNK);
  const T *xr = x + r * K;
  float m = -INFINITY, s = 0.0f;
  for (int k = k0 + (int)threadIdx.x * V; k < k1; k += LTHREADS * V) {
    float z[V], c[V];
    ld_row<T, V>(z, xr + k);
    if (center) ld_f32<V>(c, center + k);
    float vm = -INFINITY;
#pragma unroll
    for (int i = 0; i < V; i++) {
      z[i] = center ? (z[i] - c[i]) / temp : z[i] / temp;
      vm = fmaxf(vm, z[i]);
    }
    if (vm > m) {
      s = s * expf(m - vm);
      m = vm;
    }
#pragma unroll
    for (int i = 0; i < V; i++) s += expf(z[i] - m);
  }
  block_lse(m, s, red);
  if (threadIdx.x == 0) part[r * S + j] = make_float2(m, s);
}

/* The row's splits combined in order. */
static __device__ void row_lse(float &m, float &s, const float2 *part, size_t r, int S) {
  m = -INFINITY, s = 0.0f;
  for (int i = 0; i < S; i++) lse_add(m, s, part[r * S + i].x, part[r * S + i].y);
}

template <typename T, int V>
__global__ void __launch_bounds__(LTHREADS)
    teacher_probs_kernel(float *q, float *qpart, const float2 *part, const T *t,
                         const float *center, int K, float tt) {
  __shared__ float red[LTHREADS / 32];
  const int S = gridDim.x, j = blockIdx.x;
  const size_t r = blockIdx.y;
  const int k0 = j * LCHUNK, k1 = min(K, k0 + LCHUNK);
  float mx, sum;
  row_lse(mx, sum, part, r, S);
  const float inv = 1.0f / sum;
  const T *tr = t + r * K;
  float *qr = q + r * K;
  float qs = 0.0f;
  for (int k = k0 + (int)threadIdx.x * V; k < k1; k += LTHREADS * V) {
    float z[V], c[V];
    ld_row<T, V>(z, tr + k);
    ld_f32<V>(c, center + k);
#pragma unroll
    for (int i = 0; i < V; i++) {
      z[i] = expf((z[i] - c[i]) / tt - mx) * inv;
      qs += z[i];
    }
    st_f32<V>(qr + k, z);
  }
  qs = block_sum(qs, red);
  if (threadIdx.x == 0) qpart[r * S + j] = qs;
}

template <typename T, int V>
__global__ void __launch_bounds__(LTHREADS)
    student_grad_kernel(float *lpart, T *ds, const T *s, const float2 *spart, const float *q,
                        const float *qpart, int B, int nt, int K, float st, float coef) {
  __shared__ float red[LTHREADS / 32];
  const int S = gridDim.x, j = blockIdx.x;
  const size_t r = blockIdx.y;
  const int v = (int)(r / B), b = (int)(r % B);
  const int k0 = j * LCHUNK, k1 = min(K, k0 + LCHUNK);
  float mx, se;
  row_lse(mx, se, spart, r, S);
  const float lse = mx + logf(se);
  float wsum = 0.0f; /* sum over the other teacher crops of sum_k Q_ik (1 up to rounding) */
  for (int i = 0; i < nt; i++) {
    if (i == v) continue;
    float qs = 0.0f;
    for (int p = 0; p < S; p++) qs += qpart[((size_t)i * B + b) * S + p];
    wsum += qs;
  }
  const float pscale = wsum / se;
  const T *sr = s + r * K;
  float l = 0.0f;
  for (int k = k0 + (int)threadIdx.x * V; k < k1; k += LTHREADS * V) {
    float z[V], qk[V];
    ld_row<T, V>(z, sr + k);
#pragma unroll
    for (int u = 0; u < V; u++) qk[u] = 0.0f;
    for (int i = 0; i < nt; i++) {
      if (i == v) continue;
      float qi[V];
      ld_f32<V>(qi, q + ((size_t)i * B + b) * K + k);
#pragma unroll
      for (int u = 0; u < V; u++) qk[u] += qi[u];
    }
#pragma unroll
    for (int u = 0; u < V; u++) {
      z[u] /= st;
      l -= qk[u] * (z[u] - lse);
      z[u] = coef * (pscale * expf(z[u] - mx) - qk[u]); /* the gradient, in place */
    }
    if (ds) st_row<T, V>(ds + r * K + k, z);
  }
  l = block_sum(l, red);
  if (threadIdx.x == 0) lpart[r * S + j] = l;
}

/* The n terms in double: thread i adds terms i, i + LTHREADS, ..., then a fixed tree. */
__global__ void __launch_bounds__(LTHREADS) loss_total_kernel(float *loss, const float *lpart, int n,
                                                              double denom) {
  __shared__ double red[LTHREADS / 32];
  double v = 0.0;
  for (int i = threadIdx.x; i < n; i += LTHREADS) v += lpart[i];
  v = warp_sum_d(v);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < LTHREADS / 32; w++) total += red[w];
    loss[0] = (float)(total / denom);
  }
}

template <typename T, int V>
static void dino_loss_run(float *loss, T *ds, const T *student, const T *teacher,
                          const float *center, int B, int ns, int nt, int K, float student_temp,
                          float teacher_temp, float grad_scale) {
  const int trows = nt * B, srows = ns * B, S = (K + LCHUNK - 1) / LCHUNK;
  const int npairs = nt * ns - (nt < ns ? nt : ns);
  SCD_ASSERT(srows <= 65535 && trows <= 65535);
  float *q = (float *)cu_scratch(SLOT_LOSS_Q, (size_t)trows * K * sizeof(float));
  float *rows = (float *)cu_scratch(SLOT_LOSS_ROWS, (size_t)3 * (trows + srows) * S * sizeof(float));
  float2 *tpart = (float2 *)rows, *spart = tpart + (size_t)trows * S;
  float *qpart = (float *)(spart + (size_t)srows * S), *lpart = qpart + (size_t)trows * S;
  row_stats_kernel<T, V><<<dim3(S, trows), LTHREADS, 0, cu.stream>>>(tpart, teacher, center, K,
                                                                      teacher_temp);
  CHECK_LAUNCH();
  teacher_probs_kernel<T, V><<<dim3(S, trows), LTHREADS, 0, cu.stream>>>(q, qpart, tpart, teacher,
                                                                          center, K, teacher_temp);
  CHECK_LAUNCH();
  row_stats_kernel<T, V><<<dim3(S, srows), LTHREADS, 0, cu.stream>>>(spart, student, (const float *)NULL, K,
                                                                      student_temp);
  CHECK_LAUNCH();
  /* grad_scale (the loss scale, a power of two) scales the coefficient exactly, so ds is the
   * unscaled gradient times it, rounded once to T */
  const float coef = (float)((double)grad_scale / ((double)npairs * B * (double)student_temp));
  student_grad_kernel<T, V><<<dim3(S, srows), LTHREADS, 0, cu.stream>>>(
      lpart, ds, student, spart, q, qpart, B, nt, K, student_temp, coef);
  CHECK_LAUNCH();
  loss_total_kernel<<<1, LTHREADS, 0, cu.stream>>>(loss, lpart, srows * S, (double)npairs * B);
  CHECK_LAUNCH();
}

template <typename T>
void k_dino_loss(float *loss, T *ds, float *tsum, const T *student, const T *teacher,
                 const float *center, int B, int ns, int nt, int K, float student_temp,
                 float teacher_temp, float grad_scale) {
  const int npairs = nt * ns - (nt < ns ? nt : ns);
  SCD_ASSERT(B >= 1 && npairs >= 1 && K >= 1);
  /* 16-byte accesses need every row to start 16-byte aligned (the fp32 scratch Q as well) */
  const int V = vec16<T>::N;
  const int vec = K % 8 == 0 && aligned16(student, teacher, center) && (!ds || aligned16(ds, ds, ds));
  if (vec)
    dino_loss_run<T, V>(loss, ds, student, teacher, center, B, ns, nt, K, student_temp, teacher_temp,
                        grad_scale);
  else
    dino_loss_run<T, 1>(loss, ds, student, teacher, center, B, ns, nt, K, student_temp, teacher_temp,
                        grad_scale);
  k_colsum<T>(tsum, teacher, nt * B, K, (size_t)K, 0);
}

template void k_dino_loss<float>(float *, float *, float *, const float *, const float *,
                                 const float *, int, int, int, int, float, float, float);
template void k_dino_loss<bf16>(float *, bf16 *, float *, const bf16 *, const bf16 *, const float *,
                                int, int, int, int, float, float, float);
template void k_dino_loss<f16>(float *, f16 *, float *, const f16 *, const f16 *, const float *, int,
                               int, int, int, float, float, float);

/* Q as teacher_probs_kernel forms it, and each split's sum of -Q log Q with log Q = y - log(sum),
 * y = z - max (finite where Q underflows to 0). */
template <typename T, int V>
__global__ void __launch_bounds__(LTHREADS)
    teacher_entropy_kernel(float *q, float *hpart, const float2 *part, const T *t,
                           const float *center, int K, float tt) {
  __shared__ float red[LTHREADS / 32];
  const int S = gridDim.x, j = blockIdx.x;
  const size_t r = blockIdx.y;
  const int k0 = j * LCHUNK, k1 = min(K, k0 + LCHUNK);
  float mx, sum;
  row_lse(mx, sum, part, r, S);
  const float inv = 1.0f / sum, lsum = logf(sum);
  const T *tr = t + r * K;
  float *qr = q + r * K;
  float h = 0.0f;
  for (int k = k0 + (int)threadIdx.x * V; k < k1; k += LTHREADS * V) {
    float z[V], c[V];
    ld_row<T, V>(z, tr + k);
    ld_f32<V>(c, center + k);
#pragma unroll
    for (int i = 0; i < V; i++) {
      const float y = (z[i] - c[i]) / tt - mx;
      z[i] = expf(y) * inv;
      h -= z[i] * (y - lsum);
    }
    st_f32<V>(qr + k, z);
  }
  h = block_sum(h, red);
  if (threadIdx.x == 0) hpart[r * S + j] = h;
}

template <typename T, int V>
static void dino_stats_run(float *stats, const T *teacher, const float *center, int rows, int K,
                           float teacher_temp) {
  const int S = (K + LCHUNK - 1) / LCHUNK;
  SCD_ASSERT(rows <= 65535);
  float *q = (float *)cu_scratch(SLOT_LOSS_Q, (size_t)rows * K * sizeof(float));
  float2 *part = (float2 *)cu_scratch(SLOT_LOSS_ROWS, (size_t)3 * rows * S * sizeof(float));
  float *hpart = (float *)(part + (size_t)rows * S);
  row_stats_kernel<T, V><<<dim3(S, rows), LTHREADS, 0, cu.stream>>>(part, teacher, center, K,
                                                                     teacher_temp);
  CHECK_LAUNCH();
  teacher_entropy_kernel<T, V><<<dim3(S, rows), LTHREADS, 0, cu.stream>>>(q, hpart, part, teacher,
                                                                           center, K, teacher_temp);
  CHECK_LAUNCH();
  loss_total_kernel<<<1, LTHREADS, 0, cu.stream>>>(stats + K, hpart, rows * S, 1.0);
  CHECK_LAUNCH();
  k_colsum<float>(stats, q, rows, K, (size_t)K, 0);
}

template <typename T>
void k_dino_stats(float *stats, const T *teacher, const float *center, int rows, int K,
                  float teacher_temp) {
  SCD_ASSERT(rows >= 1 && K >= 1);
  if (K % 8 == 0 && aligned16(teacher, center, teacher))
    dino_stats_run<T, vec16<T>::N>(stats, teacher, center, rows, K, teacher_temp);
  else
    dino_stats_run<T, 1>(stats, teacher, center, rows, K, teacher_temp);
}

template void k_dino_stats<float>(float *, const float *, const float *, int, int, float);
template void k_dino_stats<bf16>(float *, const bf16 *, const float *, int, int, float);
template void k_dino_stats<f16>(float *, const f16 *, const float *, int, int, float);
