/* dino_loss.cu - the DINO loss on the GPU: centred, sharpened teacher softmax against the student's
 * log-softmax over K (65,536) classes, its gradient, and the teacher's column sums.
 *
 * One kernel family, one block per row, fp32 math: (1) teacher rows: Q = softmax((t - c) / T_t)
 * into an fp32 scratch and the row sums of Q; (2) student rows: log-sum-exp of s / T_s, the row's
 * cross-entropy terms against every teacher crop but its own, and the gradient
 *     ds = (1 / (n B T_s)) (softmax(s / T_s) sum_{i != v} sum_k Q_ik - sum_{i != v} Q_i);
 * (3) one thread adds the row losses in order (double).  Block reductions combine the threads in a
 * fixed tree: the result is the same at every run. */
#include "build_config.h"

#include <math.h>

#include "cuda/colsum.cuh"

#define LTHREADS 512

/* Block-wide sum or max of one value per thread; every thread gets the result. */
static __device__ float block_reduce(float v, int is_max, float *red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = is_max ? warp_max(v) : warp_sum(v);
  __syncthreads(); /* red may still be read from the previous reduction */
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < nw; w++) r = is_max ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

template <typename T>
__global__ void __launch_bounds__(LTHREADS)
    teacher_softmax_kernel(float *q, float *qsum, const T *t, const float *center, int K,
                           float tt) {
  __shared__ float red[32];
  const size_t r = blockIdx.x;
  const T *tr = t + r * K;
  float *qr = q + r * K;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < K; k += blockDim.x) mx = fmaxf(mx, (ldf(&tr[k]) - center[k]) / tt);
  mx = block_reduce(mx, 1, red);
  float sum = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const float e = expf((ldf(&tr[k]) - center[k]) / tt - mx);
    qr[k] = e;
    sum += e;
  }
  sum = block_reduce(sum, 0, red);
  const float inv = 1.0f / sum;
  float qs = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const float v = qr[k] * inv;
    qr[k] = v;
    qs += v;
  }
  qs = block_reduce(qs, 0, red);
  if (threadIdx.x == 0) qsum[r] = qs;
}

template <typename T>
__global__ void __launch_bounds__(LTHREADS)
    student_kernel(float *rowloss, T *ds, const T *s, const float *q, const float *qsum, int B,
                   int nt, int K, float st, float coef) {
  __shared__ float red[32];
  const int r = blockIdx.x, v = r / B, b = r % B;
  const T *sr = s + (size_t)r * K;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < K; k += blockDim.x) mx = fmaxf(mx, ldf(&sr[k]) / st);
  mx = block_reduce(mx, 1, red);
  float se = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) se += expf(ldf(&sr[k]) / st - mx);
  se = block_reduce(se, 0, red);
  const float lse = mx + logf(se);
  float wsum = 0.0f; /* sum over the other teacher crops of sum_k Q_ik (1 up to rounding) */
  for (int i = 0; i < nt; i++)
    if (i != v) wsum += qsum[(size_t)i * B + b];
  const float pscale = wsum / se;
  float l = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    const float z = ldf(&sr[k]) / st;
    float qk = 0.0f;
    for (int i = 0; i < nt; i++)
      if (i != v) qk += q[((size_t)i * B + b) * K + k];
    l -= qk * (z - lse);
    if (ds) stf(&ds[(size_t)r * K + k], coef * (pscale * expf(z - mx) - qk));
  }
  l = block_reduce(l, 0, red);
  if (threadIdx.x == 0) rowloss[r] = l;
}

__global__ void loss_total_kernel(float *loss, const float *rowloss, int rows, double denom) {
  double total = 0.0;
  for (int r = 0; r < rows; r++) total += rowloss[r];
  loss[0] = (float)(total / denom);
}

template <typename T> struct teacher_elem {
  const T *t;
  int K;
  __device__ float operator()(int r, int c) const { return ldf(&t[(size_t)r * K + c]); }
};

template <typename T>
void k_dino_loss(float *loss, T *ds, float *tsum, const T *student, const T *teacher,
                 const float *center, int B, int ns, int nt, int K, float student_temp,
                 float teacher_temp) {
  const int trows = nt * B, srows = ns * B;
  const int npairs = nt * ns - (nt < ns ? nt : ns);
  SCD_ASSERT(B >= 1 && npairs >= 1 && K >= 1);
  float *q = (float *)cu_scratch(SLOT_LOSS_Q, (size_t)trows * K * sizeof(float));
  float *rows = (float *)cu_scratch(SLOT_LOSS_ROWS, (size_t)(trows + srows) * sizeof(float));
  float *qsum = rows, *rowloss = rows + trows;
  teacher_softmax_kernel<T><<<trows, LTHREADS, 0, cu.stream>>>(q, qsum, teacher, center, K,
                                                               teacher_temp);
  CHECK_LAUNCH();
  const float coef = (float)(1.0 / ((double)npairs * B * (double)student_temp));
  student_kernel<T><<<srows, LTHREADS, 0, cu.stream>>>(rowloss, ds, student, q, qsum, B, nt, K,
                                                       student_temp, coef);
  CHECK_LAUNCH();
  loss_total_kernel<<<1, 1, 0, cu.stream>>>(loss, rowloss, srows, (double)npairs * B);
  CHECK_LAUNCH();
  colsum_run(tsum, teacher_elem<T>{teacher, K}, trows, K, 0);
}

template void k_dino_loss<float>(float *, float *, float *, const float *, const float *,
                                 const float *, int, int, int, int, float, float);
template void k_dino_loss<bf16>(float *, bf16 *, float *, const bf16 *, const bf16 *, const float *,
                                int, int, int, int, float, float);
