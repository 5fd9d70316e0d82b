/* attention_gemm.cu - multi-head attention with tensor-core batched GEMMs (cuBLAS) and row kernels.
 *
 * The other implementation of the attention ops (attention.cu is the flash-style one; backend_cuda
 * picks, &gpu attention = 'gemm'|'flash'|'cudnn'): per (sample, head) S = scale Q K^T in fp32, P =
 * softmax(S) kept as the state in the activation type, O = P V; backward dV = P^T dO,
 * dP = dO V^T, dS = scale P (dP - rowsum(P dP)), dQ = dS K, dK = dS^T Q.  Every product is one
 * cublasGemmBatchedEx over all B x H heads, reading q, k, v in place in the qkv layout through
 * pointer arrays built on the GPU; fp32 accumulation (tensor cores in bf16 and f16, no TF32 in fp32).
 * The N x N matrices are small at DINO's sizes (N = 197: 60 MB of bf16 P per block at batch 64
 * x 2 crops, ViT-S), which is what makes this simple form attractive against the flash kernels.
 *
 * The same functions also run with the flash kernel's state instead of P (the row log-sum-exp
 * [B, H, N]): the forward writes it, the backward recomputes S with one more product and
 * P = exp(S - lse).  That is how cuDNN's attention falls back (attention_cudnn.cu shares that
 * state) without leaving the tensor cores. */
#include "build_config.h"

#include <cublasLt.h> /* CHECK_CUBLAS reports through cublasLtGetStatusString */
#include <cublas_v2.h>
#include <math.h>

#include "cuda/ops/cuda_internal.h"

static cublasHandle_t blas;

static cublasHandle_t blas_handle(void) {
  if (!blas) {
    CHECK_CUBLAS(cublasCreate(&blas));
    CHECK_CUBLAS(cublasSetStream(blas, cu.stream));
    /* No TF32 for fp32; partial sums of split-k products added in fp32, never in bf16 or f16 (as the
     * cuBLASLt GEMMs' REDUCTION_SCHEME_MASK). */
    CHECK_CUBLAS(cublasSetMathMode(
        blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  }
  return blas;
}

/* The per-head pointer arrays of one call's batched products, built by one launch (a call needs
 * up to 10 arrays; a launch each would be hundreds of tiny kernels per step). */
#define PTR_ARRAYS_MAX 10
struct ptr_arrays {
  const char *base[PTR_ARRAYS_MAX];
  size_t bstride[PTR_ARRAYS_MAX], hstride[PTR_ARRAYS_MAX]; /* bytes between samples, heads */
  int n;
};

/* Adds array j: entry i = base + (i / H) * bstride + (i % H) * hstride. */
static void ptr_arrays_add(struct ptr_arrays *a, const void *base, size_t bstride, size_t hstride) {
  SCD_ASSERT(a->n < PTR_ARRAYS_MAX);
  a->base[a->n] = (const char *)base;
  a->bstride[a->n] = bstride;
  a->hstride[a->n] = hstride;
  a->n++;
}

/* p[j * BH + i] for every array j and i < BH. */
__global__ void head_ptrs_kernel(const char **p, struct ptr_arrays a, int H, int BH) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= BH) return;
  for (int j = 0; j < a.n; j++)
    p[(size_t)j * BH + i] = a.base[j] + (size_t)(i / H) * a.bstride[j] + (size_t)(i % H) * a.hstride[j];
}

/* The arrays in scratch, one launch; array j starts at the result + j * BH. */
static const void **head_ptrs(const struct ptr_arrays *a, int H, int BH) {
  const void **p = (const void **)cu_scratch(SLOT_PTRS, (size_t)a->n * BH * sizeof(void *));
  head_ptrs_kernel<<<(BH + 127) / 128, 128, 0, cu.stream>>>((const char **)p, *a, H, BH);
  CHECK_LAUNCH();
  return p;
}

/* Column-major batched product C = alpha op(A) op(B) + beta C over the pointer arrays. */
static void batched(int ta, int tb, int m, int n, int k, float alpha, const void **A,
                    cudaDataType_t at, int lda, const void **B, cudaDataType_t bt, int ldb, void **C,
                    cudaDataType_t ct, int ldc, int batch) {
  const float beta = 0.0f;
  CHECK_CUBLAS(cublasGemmBatchedEx(blas_handle(), ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, at, lda, B,
                                   bt, ldb, &beta, C, ct, ldc, batch, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

/* The N x N matrices (S, P, dP, dS) are stored with rows of ld = N rounded up to 8 elements, so
 * every head's matrix starts 16-byte aligned: cublasGemmBatchedEx requires that of each pointer
 * for 16-bit types when k % 8 == 0 (k = hd here), and an unaligned one faults at run time (it only
 * sees the pointers through the device-side arrays).  The padding columns are never read. */
static inline int attn_ld(int N) { return (N + 7) & ~7; }

/* P = softmax of each row of S (one warp per row); probs (fp32, unpadded [rows][N]) and the row
 * log-sum-exp lse [rows] too when not NULL. */
template <typename T>
__global__ void softmax_rows_kernel(T *P, float *probs, float *lse, const float *S, int N, int ld,
                                    size_t rows) {
  const size_t row = (size_t)blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float *s = S + row * ld;
  float mx = -INFINITY;
  for (int j = lane; j < N; j += 32) mx = fmaxf(mx, s[j]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int j = lane; j < N; j += 32) sum += expf(s[j] - mx);
  sum = warp_sum(sum);
  if (lse && lane == 0) lse[row] = mx + logf(sum);
  const float inv = 1.0f / sum;
  for (int j = lane; j < N; j += 32) {
    const float p = expf(s[j] - mx) * inv;
    stf(&P[row * ld + j], p);
    if (probs) probs[row * N + j] = p;
  }
}

/* P = exp(S - lse) of each row (one warp per row): the softmax matrices again from the scores and
 * the row statistics the forward saved. */
template <typename T>
__global__ void softmax_lse_rows_kernel(T *P, const float *S, const float *lse, int N, int ld,
                                        size_t rows) {
  const size_t row = (size_t)blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float *s = S + row * ld, m = lse[row];
  for (int j = lane; j < N; j += 32) stf(&P[row * ld + j], expf(s[j] - m));
}

/* dS = scale P (dP - rowsum(P dP)), one warp per row.  dS may be P: each element is read by the
 * lane that then overwrites it, after the row's sum is complete. */
template <typename T>
__global__ void dsoftmax_rows_kernel(T *dS, const T *P, const float *dP, int N, int ld, float scale,
                                     size_t rows) {
  const size_t row = (size_t)blockIdx.x * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T *p = P + row * ld;
  const float *dp = dP + row * ld;
  float dot = 0.0f;
  for (int j = lane; j < N; j += 32) dot += ldf(&p[j]) * dp[j];
  dot = warp_sum(dot);
  for (int j = lane; j < N; j += 32) stf(&dS[row * ld + j], scale * ldf(&p[j]) * (dp[j] - dot));
}

template <typename T> size_t k_attn_gemm_state_bytes(int B, int N, int H) {
  return (size_t)B * H * N * attn_ld(N) * sizeof(T) + 256;
}

template <typename T>
void k_attn_gemm_fwd(T *out, T *P, float *lse, float *probs, const T *qkv, int B, int N, int H,
                     int hd, float scale) {
  const int BH = B * H;
  const int ld = attn_ld(N);
  const size_t D = (size_t)H * hd, e = sizeof(T), NN = (size_t)N * ld, rows = (size_t)BH * N;
  const cudaDataType_t dt = cu_dtype<T>::value;
  float *S = (float *)cu_scratch(SLOT_ATTN, (size_t)BH * NN * sizeof(float));
  if (!P) P = (T *)cu_scratch(SLOT_ATTN2, (size_t)BH * NN * sizeof(T));
  const size_t bq = (size_t)N * 3 * D * e; /* bytes between samples in qkv */
  struct ptr_arrays a = {};
  ptr_arrays_add(&a, qkv, bq, hd * e);
  ptr_arrays_add(&a, (const char *)qkv + D * e, bq, hd * e);
  ptr_arrays_add(&a, (const char *)qkv + 2 * D * e, bq, hd * e);
  ptr_arrays_add(&a, S, NN * sizeof(float) * H, NN * sizeof(float));
  ptr_arrays_add(&a, P, NN * e * H, NN * e);
  ptr_arrays_add(&a, out, (size_t)N * D * e, hd * e);
  const void **pt = head_ptrs(&a, H, BH);
  const void **q = pt, **k = pt + BH, **v = pt + 2 * BH, **s = pt + 3 * BH, **p = pt + 4 * BH;
  const void **o = pt + 5 * BH;
  /* S^T (column-major) = K Q^T: S row-major [N][N] = scale q_i . k_j */
  batched(1, 0, N, N, hd, scale, k, dt, (int)(3 * D), q, dt, (int)(3 * D), (void **)s, CUDA_R_32F, ld,
          BH);
  softmax_rows_kernel<T><<<(unsigned)((rows + 7) / 8), 256, 0, cu.stream>>>(P, probs, lse, S, N, ld,
                                                                            rows);
  CHECK_LAUNCH();
  /* O^T = V^T P^T */
  batched(0, 0, hd, N, N, 1.0f, v, dt, (int)(3 * D), p, dt, ld, (void **)o, dt, (int)D, BH);
}

template <typename T>
void k_attn_gemm_bwd(T *dqkv, const T *dout, const T *qkv, const T *P, const float *lse, int B, int N,
                     int H, int hd, float scale) {
  const int BH = B * H;
  const int ld = attn_ld(N);
  const size_t D = (size_t)H * hd, e = sizeof(T), NN = (size_t)N * ld, rows = (size_t)BH * N;
  const cudaDataType_t dt = cu_dtype<T>::value;
  float *dP = (float *)cu_scratch(SLOT_ATTN, (size_t)BH * NN * sizeof(float));
  T *dS = (T *)cu_scratch(SLOT_ATTN2, (size_t)BH * NN * sizeof(T));
  if (lse) P = dS; /* recomputed into dS's buffer, which dsoftmax then overwrites in place */
  const size_t bq = (size_t)N * 3 * D * e, bo = (size_t)N * D * e;
  struct ptr_arrays a = {};
  ptr_arrays_add(&a, qkv, bq, hd * e);
  ptr_arrays_add(&a, (const char *)qkv + D * e, bq, hd * e);
  ptr_arrays_add(&a, (const char *)qkv + 2 * D * e, bq, hd * e);
  ptr_arrays_add(&a, dout, bo, hd * e);
  ptr_arrays_add(&a, P, NN * e * H, NN * e);
  ptr_arrays_add(&a, dP, NN * sizeof(float) * H, NN * sizeof(float));
  ptr_arrays_add(&a, dS, NN * e * H, NN * e);
  ptr_arrays_add(&a, dqkv, bq, hd * e);
  ptr_arrays_add(&a, (const char *)dqkv + D * e, bq, hd * e);
  ptr_arrays_add(&a, (const char *)dqkv + 2 * D * e, bq, hd * e);
  const void **pt = head_ptrs(&a, H, BH);
  const void **q = pt, **k = pt + BH, **v = pt + 2 * BH, **dO = pt + 3 * BH, **p = pt + 4 * BH;
  const void **dp = pt + 5 * BH, **ds = pt + 6 * BH, **dq = pt + 7 * BH, **dk = pt + 8 * BH;
  const void **dv = pt + 9 * BH;
  const int l3 = (int)(3 * D), lo = (int)D;
  const unsigned grid = (unsigned)((rows + 7) / 8);
  if (lse) { /* S (in dP's buffer) as in the forward, then P = exp(S - lse) */
    batched(1, 0, N, N, hd, scale, k, dt, l3, q, dt, l3, (void **)dp, CUDA_R_32F, ld, BH);
    softmax_lse_rows_kernel<T><<<grid, 256, 0, cu.stream>>>(dS, dP, lse, N, ld, rows);
    CHECK_LAUNCH();
  }
  /* dV^T = dO^T P  (dV = P^T dO) */
  batched(0, 1, hd, N, N, 1.0f, dO, dt, lo, p, dt, ld, (void **)dv, dt, l3, BH);
  /* dP^T = V dO^T  (dP = dO V^T, row-major [N][N]) */
  batched(1, 0, N, N, hd, 1.0f, v, dt, l3, dO, dt, lo, (void **)dp, CUDA_R_32F, ld, BH);
  dsoftmax_rows_kernel<T><<<grid, 256, 0, cu.stream>>>(dS, P, dP, N, ld, scale, rows);
  CHECK_LAUNCH();
  /* dQ^T = K^T dS^T  (dQ = dS K) */
  batched(0, 0, hd, N, N, 1.0f, k, dt, l3, ds, dt, ld, (void **)dq, dt, l3, BH);
  /* dK^T = Q^T dS  (dK = dS^T Q) */
  batched(0, 1, hd, N, N, 1.0f, q, dt, l3, ds, dt, ld, (void **)dk, dt, l3, BH);
}

template size_t k_attn_gemm_state_bytes<float>(int, int, int);
template size_t k_attn_gemm_state_bytes<bf16>(int, int, int);
template void k_attn_gemm_fwd<float>(float *, float *, float *, float *, const float *, int, int, int,
                                     int, float);
template void k_attn_gemm_fwd<bf16>(bf16 *, bf16 *, float *, float *, const bf16 *, int, int, int, int,
                                    float);
template void k_attn_gemm_bwd<float>(float *, const float *, const float *, const float *, const float *,
                                     int, int, int, int, float);
template void k_attn_gemm_bwd<bf16>(bf16 *, const bf16 *, const bf16 *, const bf16 *, const float *, int,
                                    int, int, int, float);
template size_t k_attn_gemm_state_bytes<f16>(int, int, int);
template void k_attn_gemm_fwd<f16>(f16 *, f16 *, float *, float *, const f16 *, int, int, int, int, float);
template void k_attn_gemm_bwd<f16>(f16 *, const f16 *, const f16 *, const f16 *, const float *, int, int,
                                   int, int, float);
