/* cuda_internal.h - state, element-type helpers and launchers shared by the CUDA backend's .cu files.
 *
 * C++ (nvcc) only.  The backend is one process-wide context (one GPU per rank, one compute stream);
 * every kernel is a template over the activation element type T (float, bf16 or f16) and keeps its
 * arithmetic in fp32, so the three ops tables run the very same kernels. */
#ifndef SCDINO_CUDA_INTERNAL_H
#define SCDINO_CUDA_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <library_types.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <type_traits>

extern "C" {
#include "model/ops.h"
}
#include "cuda/cuda_check.h"

typedef __nv_bfloat16 bf16;
typedef __half f16;

/* The element types of the three tables, as run-time codes (gelu_gemm.cu's probe, the weight
 * copies): ACT_F32, ACT_BF16, ACT_F16. */
enum { ACT_F32 = 0, ACT_BF16 = 1, ACT_F16 = 2 };
template <typename T> struct act_code;
template <> struct act_code<float> {
  static const int value = ACT_F32;
};
template <> struct act_code<bf16> {
  static const int value = ACT_BF16;
};
template <> struct act_code<f16> {
  static const int value = ACT_F16;
};

/* ---- context ---------------------------------------------------------------------------------- */

struct cu_ctx {
  int ready;    /* 1 after a successful cu_init */
  int device;
  cudaDeviceProp prop;
  cudaStream_t stream; /* every op is queued here */
  /* The compute capability the kernel choices follow (major * 10 + minor): the GPU's, or a lower
   * one set for tests (backend_cuda_set_arch: the sm_70/75 kernel set on a newer GPU). */
  int arch;
};
extern struct cu_ctx cu;

/* op_timers.cu: per-kind op timing.  PROF(kind, statements...) times the statements as one op of
 * that kind, under the name of the enclosing function, when profiling is on (prof_set), and counts
 * the call either way; prof_read fills an ops_profile (waiting for the recorded events) and
 * optionally zeroes the sums; prof_report prints the names that took the most time. */
enum { P_GEMM, P_ATTN, P_OTHER };
int prof_begin(int kind, const char *name);
void prof_end(int i);
void prof_read(struct ops_profile *p, int reset);
void prof_set(int on);
void prof_report(FILE *f, int top);
#define PROF(kind, ...)                         \
  do {                                          \
    const int pi_ = prof_begin(kind, __func__); \
    __VA_ARGS__;                                \
    prof_end(pi_);                              \
  } while (0)

/* device_memory.cu: device memory counted in the backend's in-use and peak figures; allocation
 * failure ends the job with the sizes involved. */
void *cu_dev_alloc(size_t bytes, const char *what);
void cu_dev_free(void *p);
/* The size of the allocation that starts at p (0: none of cu_dev_alloc's). */
size_t cu_dev_size(const void *p);

/* Device scratch that persists between calls, one buffer per slot, grown on demand (growing waits
 * for the stream, so no queued kernel still uses the old buffer).  Ops are stream-ordered, so
 * consecutive ops may reuse a slot; one op uses distinct slots for buffers it needs at once. */
enum cu_slot {
  SLOT_WCONV_A = 0, /* weights converted for a GEMM (not shadowed) */
  SLOT_WCONV_B,     /* biases converted for a GEMM */
  SLOT_PARTIAL,     /* partial sums of the deterministic reductions */
  SLOT_LN_PARTIAL,  /* LayerNorm backward: dg and db per chunk of rows */
  SLOT_TABLE,       /* per-call tables uploaded from the host (segments, chunks) */
  SLOT_ATTN,        /* attention: row statistics when no state buffer is given */
  SLOT_ATTN2,       /* attention: D = rowsum(P * dP) (flash); P or dS (GEMM form) */
  SLOT_PTRS,        /* attention (GEMM form): pointer arrays of the batched products */
  SLOT_LOSS_Q,      /* DINO loss: teacher probabilities */
  SLOT_LOSS_ROWS,   /* DINO loss: per-row sums */
  SLOT_CUDNN,       /* attention (cuDNN): the plan's workspace */
  SLOT_BGRAD,       /* Linear backward: the bias gradient the weight-gradient GEMM summed */
  SLOT_COUNT
};
void *cu_scratch(int slot, size_t bytes);
/* Copy n bytes of host memory into a scratch slot (stream-ordered; the host buffer may be reused
 * on return) and return the device copy. */
void *cu_upload_table(int slot, const void *host, size_t bytes);

/* Grid size for n items at `threads` per block, capped (kernels use grid-stride loops). */
static inline unsigned cu_blocks(size_t n, int threads) {
  size_t b = (n + (size_t)threads - 1) / (size_t)threads;
  const size_t cap = 65535u * 8u;
  if (b < 1) b = 1;
  return (unsigned)(b < cap ? b : cap);
}

/* ---- element access --------------------------------------------------------------------------- */

__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float ldf(const f16 *p) { return __half2float(*p); }
__device__ __forceinline__ void stf(f16 *p, float v) { *p = __float2half_rn(v); }

/* Whether three pointers are all 16-byte aligned (the vector accesses below need it). */
static inline bool aligned16(const void *a, const void *b, const void *c) {
  return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15u) == 0;
}

/* 16 bytes of elements at once (8 bf16 or f16, or 4 fp32; p 16-byte aligned): memory-bound kernels need
 * many bytes in flight per thread to approach the bandwidth. */
template <typename T> struct vec16 {
  static const int N = 16 / (int)sizeof(T);
};
template <typename T> __device__ __forceinline__ void ld_vec(float *v, const T *p) {
  const uint4 u = *(const uint4 *)p;
  const T *e = (const T *)&u;
#pragma unroll
  for (int k = 0; k < vec16<T>::N; k++) v[k] = ldf(&e[k]);
}
template <typename T> __device__ __forceinline__ void st_vec(T *p, const float *v) {
  uint4 u;
  T *e = (T *)&u;
#pragma unroll
  for (int k = 0; k < vec16<T>::N; k++) stf(&e[k], v[k]);
  *(uint4 *)p = u;
}

/* v as the element type stores it. */
template <typename T> __device__ __forceinline__ float rounded(float v) {
  T t;
  stf(&t, v);
  return ldf(&t);
}

template <typename T> struct cu_dtype;
template <> struct cu_dtype<float> {
  static constexpr cudaDataType_t value = CUDA_R_32F;
};
template <> struct cu_dtype<bf16> {
  static constexpr cudaDataType_t value = CUDA_R_16BF;
};
template <> struct cu_dtype<f16> {
  static constexpr cudaDataType_t value = CUDA_R_16F;
};

/* Warp-level sum and max (all lanes get the result; fixed butterfly order: deterministic). */
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* ---- weights for GEMMs ------------------------------------------------------------------------ */

/* weight_copies.cu: the 16-bit copies (bf16 or f16, T) of fp32 weights for the GEMMs.  Each
 * registered buffer has one copy per type asked for; writes mark every copy stale. */
/* The copy of fp32 weights w[0..n) of type T for a GEMM: the shadow of a registered parameter
 * buffer (params_changed), refreshed if it was written since, or a conversion into scratch
 * `slot`. */
template <typename T> const T *cu_weights(const float *w, size_t n, int slot);
/* Register [base, base+n) for a copy of type T (stale until refreshed); a different range over the
 * same memory loses its copies. */
template <typename T> void cu_shadow_register(const float *base, size_t n);
/* Device memory [p, p+bytes) was written by an op or a copy: shadows that overlap are stale. */
void cu_shadow_touch(const void *p, size_t bytes);
/* The allocation [p, p+bytes) is being freed: copies of buffers inside it are dropped, so that a
 * later allocation at the same address cannot pick up a stale copy. */
void cu_shadow_forget(const void *p, size_t bytes);
/* For a kernel that rewrites weights and can write their copy of type T as it goes.  _current:
 * the copy of the buffer starting at base (at least n floats) if it is up to date, so that
 * rewriting some of its elements in both keeps it so; else NULL (the caller marks the writes).
 * _rewritten: the copy of exactly [base, base+n), all of which the caller's next kernel writes
 * (marked up to date, the copies of other types stale); NULL when there is none. */
template <typename T> T *cu_shadow_current(const float *base, size_t n);
template <typename T> T *cu_shadow_rewritten(const float *base, size_t n);

/* ---- launchers (one file per concept; T = float, bf16 or f16) -------------------------------------- */

/* gemm_lt.cu: column-major cuBLASLt product D[m,n] = op(A) op(B) + beta D, fp32 accumulation;
 * bias (type of D, length m) added by the epilogue when not NULL. */
void lt_init(void);
void lt_matmul(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
               int lda, const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt,
               int ldd, float beta, const void *bias);
/* D = op(A) op(B) + C (+ bias): the product added to C, of D's type and layout (C may be D). */
void lt_matmul_add(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                   int lda, const void *B, cudaDataType_t bt, int ldb, const void *C, void *D,
                   cudaDataType_t dt, int ldd, const void *bias);
/* The same product without bias, and bgrad[n] (D's type, overwritten) = the column sums of op(B)
 * over k by the BGRADB epilogue, when cuBLASLt has an algorithm with it for this shape (the first
 * refusal is said in the log); returns whether bgrad was written, and *first whether this was the
 * first run of that algorithm for the shape (for the caller to check its sums once). */
int lt_matmul_bgradb(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                     int lda, const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt,
                     int ldd, float beta, void *bgrad, int *first);
/* D = gelu(op(A) op(B) + bias) by the GELU epilogue (bias may be NULL), pre (NULL: not kept) =
 * the GELU's input, with D's type and leading dimension; the library's GELU, whichever it is
 * (gelu_gemm.cu probes it).  Returns 0 without running anything where cuBLASLt has no algorithm
 * with the epilogue for the shape (or bias, pre or ldd lack the alignment it needs). */
int lt_matmul_gelu(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                   int lda, const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt,
                   int ldd, const void *bias, void *pre);
/* D = (op(A) op(B)) * gelu'(pre) by the DGELU epilogue, pre with D's type and leading dimension;
 * returns 0 without running anything as lt_matmul_gelu. */
int lt_matmul_dgelu(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                    int lda, const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt,
                    int ldd, const void *pre);
/* Drops the cached plans (after the stream's queued work): the next GEMMs plan afresh. */
void lt_forget(void);
/* GEMM tuning (&gpu gemm_tune): when on, each plan's first run times the heuristic's candidate
 * algorithms and keeps the fastest.  Setting it drops the cached plans. */
void lt_set_tuning(int on);
int lt_tuning(void);
/* Logs (log_info) the tuned shapes, how many changed algorithm, and the time of one pass of each
 * tuned shape against the heuristic's first choice; nothing when tuning is off. */
void lt_tuning_report(void);

/* gelu_gemm.cu: whether GELU with this approx (ops.h) runs in the GEMMs' epilogues for the
 * activation type (act: ACT_F32, ACT_BF16, ACT_F16): &gpu gelu allows it and the probe found that
 * cuBLASLt computes this GELU (probed at the first call, which waits for the GPU).  cu_gelu_count:
 * one GEMM ran its GELU epilogue. */
int cu_gelu_in_gemm(int approx, int act);
void cu_gelu_count(void);

/* elementwise.cu */
template <typename T> void k_convert_from_f32(T *dst, const float *src, size_t n);
template <typename T> void k_convert_to_f32(float *dst, const T *src, size_t n);
/* GELU: approx 0 exact (erf), 1 tanh approximation (ops.h) */
template <typename T> void k_gelu_fwd(T *y, const T *x, size_t n, int approx);
template <typename T> void k_gelu_bwd(T *dx, const T *dy, const T *x, size_t n, int approx);
template <typename T>
void k_gelu_bwd_bias(T *dx, float *db, const T *dy, const T *x, int rows, int cols, int approx);
template <typename T>
void k_residual_fwd(T *y, const T *x, const T *f, const float *s, int B, int rps, int D);
template <typename T> void k_residual_bwd(T *df, const T *dy, const float *s, int B, int rps, int D);
template <typename T> void k_patchify(T *cols, const float *img, int B, int C, int H, int W, int p);
template <typename T>
void k_tokens_fwd(T *x, const T *patches, const float *cls, const float *pos, int B, int Np, int D);
template <typename T>
void k_tokens_bwd(T *dpatches, float *dcls, float *dpos, const T *dx, int B, int Np, int D);
void k_center_update(float *center, const float *tsum, int K, float count, double m);
void k_ema(float *dst, const float *src, size_t n, double m);
/* dst[i] += src[i], fp32. */
void k_add_f32(float *dst, const float *src, size_t n);

/* colsum.cu: out[c] (+)= sum_r a[r*lda + c], deterministic (colsum.cuh). */
template <typename T>
void k_colsum(float *out, const T *a, int rows, int cols, size_t lda, int accumulate);

/* layernorm.cu */
template <typename T>
void k_layernorm_fwd(T *y, float *mean, float *rstd, const T *x, int ldx, const float *g,
                     const float *b, int rows, int D, float eps);
template <typename T>
void k_layernorm_bwd(T *dx, float *dg, float *db, const T *dy, const T *x, int ldx,
                     const float *mean, const float *rstd, const float *g, int rows, int D);
template <typename T>
void k_residual_layernorm_fwd(T *y, T *ln, float *mean, float *rstd, const T *x, const T *f,
                              const float *s, const float *g, const float *b, int B, int rps,
                              int D, float eps);
template <typename T>
void k_layernorm_residual_bwd(T *dx, float *dg, float *db, T *df, const float *s, const T *dy,
                              const T *x, const float *mean, const float *rstd, const float *g,
                              int B, int rps, int D);
template <typename T> void k_l2norm_fwd(T *y, float *norm, const T *x, int rows, int D);
template <typename T>
void k_l2norm_bwd(T *dx, const T *dy, const T *y, const float *norm, int rows, int D);
/* wc (NULL: none): w's copy of type C (bf16 or f16), written with it. */
template <typename C>
void k_weightnorm_fwd(float *w, C *wc, float *vnorm, const float *g, const float *v, int K, int D);
void k_weightnorm_bwd(float *dg, float *dv, const float *dw, const float *g, const float *v,
                      const float *vnorm, int K, int D);

/* attention.cu: flash-attention style (online softmax, row log-sum-exp saved). */
size_t k_attn_state_bytes(int B, int N, int H);
template <typename T>
void k_attn_fwd(T *out, float *lse, float *probs, const T *qkv, int B, int N, int H, int hd,
                float scale);
template <typename T>
void k_attn_bwd(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse, int B, int N,
                int H, int hd, float scale);

/* attention_tc.cu: the flash-style kernels on tensor cores, bf16, for what k_attn_tc_covers
 * (compute capability 8.0 or later, hd a multiple of 16 up to 128, qkv and dout (NULL in the
 * forward) 16-byte aligned); same state as attention.cu.  Dg: [B, H, N] fp32 scratch for
 * D = rowsum(dO * O). */
int k_attn_tc_covers(int hd, const void *qkv, const void *dout);
/* attention_mma.cu: the same with mma.sync and register-resident scores, for head dimensions 32
 * and 64 and up to 65535 (batch x heads): k_attn_mma_covers says whether it takes a call. */
int k_attn_mma_covers(int BH, int hd, const void *qkv, const void *dout);
/* The same for the element type T (bf16: k_attn_mma_covers; f16: the f16 kernels, compute
 * capability 7.5 or later: below 8.0, and with &gpu arch = 75, their sm_75 form), and the f16
 * kernels. */
template <typename T> int k_attn_mma_covers_t(int BH, int hd, const void *qkv, const void *dout);
template <typename T>
void k_attn_mma_fwd_t(T *out, float *lse, const T *qkv, int B, int N, int H, int hd, float scale);
template <typename T>
void k_attn_mma_bwd_t(T *dqkv, const T *dout, const T *out, const T *qkv, const float *lse, float *Dg,
                      int B, int N, int H, int hd, float scale);
void k_attn_mma_fwd(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd, float scale);
void k_attn_mma_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                    float *Dg, int B, int N, int H, int hd, float scale);
/* Which of attention_mma.cu's refinements run (all by default; the benchmark compares):
 * K_ATTN_MMA_SHORT the ragged last tile computes only its column tiles that hold tokens,
 * K_ATTN_MMA_ONE sequences of at most 64 tokens take the one-kernel backward. */
#define K_ATTN_MMA_SHORT 1
#define K_ATTN_MMA_ONE 2
#define K_ATTN_MMA_OCC 4 /* registers capped: forward 4, backward 3 blocks per multiprocessor */
void k_attn_mma_set_options(int opts);
void k_attn_tc_fwd(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd, float scale);
void k_attn_tc_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                   float *Dg, int B, int N, int H, int hd, float scale);

/* attention_cudnn.cu: cuDNN's fused attention, bf16.  The state is the flash kernel's (lse [B,H,N]
 * fp32; NULL in inference).  Each returns 0, having said why once, when cuDNN cannot run the
 * shape; the caller then runs the GEMM form on that state instead. */
int k_attn_cudnn_fwd(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd,
                     float scale);
int k_attn_cudnn_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv,
                     const float *lse, int B, int N, int H, int hd, float scale);
/* Why cuDNN's fused attention is unusable on this build and GPU ("" when usable). */
const char *k_attn_cudnn_why_not(void);
int k_attn_cudnn_probe(FILE *f);
/* Forward and backward calls cuDNN has run. */
void k_attn_cudnn_runs(long *fwd, long *bwd);
/* Releases the cached plans and refusals (every shape is planned again on its next use). */
void k_attn_cudnn_forget(void);

/* attention_gemm.cu: batched tensor-core GEMMs with the softmax matrix P as the state, or, given
 * lse, the flash kernel's state: the forward writes the row log-sum-exp (P may then be NULL, kept
 * in scratch), the backward takes P = NULL and recomputes it from lse. */
template <typename T> size_t k_attn_gemm_state_bytes(int B, int N, int H);
template <typename T>
void k_attn_gemm_fwd(T *out, T *P, float *lse, float *probs, const T *qkv, int B, int N, int H,
                     int hd, float scale);
template <typename T>
void k_attn_gemm_bwd(T *dqkv, const T *dout, const T *qkv, const T *P, const float *lse, int B, int N,
                     int H, int hd, float scale);

/* dino_loss.cu */
template <typename T>
void k_dino_loss(float *loss, T *ds, float *tsum, const T *student, const T *teacher,
                 const float *center, int B, int ns, int nt, int K, float student_temp,
                 float teacher_temp, float grad_scale);
template <typename T>
void k_dino_stats(float *stats, const T *teacher, const float *center, int rows, int K,
                  float teacher_temp);

/* optim.cu */
void k_seg_norms(double *norms_host, const float *buf, const struct ops_seg *segs, int nseg);
void k_seg_sumsq(double *sumsq_host, const float *buf, const struct ops_seg *segs, int nseg);
void k_seg_scale(float *buf, const struct ops_seg *segs, const float *scale_host, int nseg);
/* pc, tc (NULL: none): the copies of type C (bf16 or f16) of p and teacher, written with them. */
template <typename C>
void k_adamw(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs,
             int nseg, const float *gscale_host, double beta1, double beta2, double eps,
             float *teacher, size_t n_ema, double momentum, C *pc, C *tc);

#endif
