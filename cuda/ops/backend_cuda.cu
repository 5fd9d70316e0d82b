/* backend_cuda.cu - the CUDA backend's context, memory, timers and its three op tables. */
#include "build_config.h"

#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "cuda/backend_cuda.h"
#include "cuda/ops/cuda_internal.h"

extern "C" {
#include "core/comm.h"
#include "core/log.h"
}

struct cu_ctx cu;

static char why_not[512] = "the CUDA backend has not been initialised";
static int init_failed;
static int arch_set; /* backend_cuda_set_arch's value: 0 = the GPU's */

/* Weights of element type T for a GEMM: fp32 as they are, bf16 and f16 through the shadows. */
template <typename T> static const T *gemm_weights(const float *w, size_t n, int slot) {
  if constexpr (sizeof(T) == sizeof(float)) {
    (void)n;
    (void)slot;
    return (const T *)w;
  } else {
    return w ? cu_weights<T>(w, n, slot) : NULL;
  }
}

/* ---- initialisation ----------------------------------------------------------------------------- */

__global__ void probe_kernel(int *x) {
  if (x) *x = 1;
}

/* Pick and set up the GPU; returns 0 with why_not set when there is none usable. */
static int cu_init(void) {
  if (cu.ready) return 1;
  if (init_failed) return 0;
  init_failed = 1;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) {
    /* On a host without a driver: "CUDA driver version is insufficient for CUDA runtime". */
    snprintf(why_not, sizeof why_not, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
  }
  if (ndev == 0) {
    snprintf(why_not, sizeof why_not, "no CUDA device is visible");
    return 0;
  }
  /* One rank per GPU: local rank i takes GPU i, or the only GPU the launcher left visible. */
  const struct comm_info *ci = comm_get();
  int dev;
  if (ndev >= ci->node_size) { /* every rank of the node, whatever its study group */
    dev = ci->node_rank;
  } else if (ndev == 1) {
    dev = 0;
  } else {
    snprintf(why_not, sizeof why_not,
             "%d ranks run on this node but it has %d GPUs: launch one rank per GPU",
             ci->node_size, ndev);
    return 0;
  }
  e = cudaSetDevice(dev);
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&cu.prop, dev);
  if (e != cudaSuccess) {
    snprintf(why_not, sizeof why_not, "GPU %d: %s", dev, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
  }
  /* The kernels must have machine code (or PTX) this GPU runs. */
  struct cudaFuncAttributes fa;
  e = cudaFuncGetAttributes(&fa, probe_kernel);
  if (e != cudaSuccess) {
    snprintf(why_not, sizeof why_not,
             "GPU %d (%s, compute capability %d.%d) cannot run this build's kernels (%s); "
             "reconfigure with --with-cuda-arch=%d%d",
             dev, cu.prop.name, cu.prop.major, cu.prop.minor, cudaGetErrorString(e),
             cu.prop.major, cu.prop.minor);
    (void)cudaGetLastError();
    return 0;
  }
  /* Every kernel has a form for compute capability 7.0 and later (bf16 GEMMs need 8.0: 'auto'
   * takes f16 below it); older GPUs lack the tensor cores the GEMMs are planned for. */
  if (cu.prop.major < 7) {
    snprintf(why_not, sizeof why_not,
             "GPU %d (%s) has compute capability %d.%d; the CUDA backend needs 7.0 (V100) or later",
             dev, cu.prop.name, cu.prop.major, cu.prop.minor);
    return 0;
  }
  cu.device = dev;
  const int gpu_arch = cu.prop.major * 10 + cu.prop.minor;
  cu.arch = arch_set > 0 && arch_set < gpu_arch ? arch_set : gpu_arch;
  CHECK_CUDA(cudaStreamCreateWithFlags(&cu.stream, cudaStreamNonBlocking));
  lt_init();
  cu.ready = 1;
  init_failed = 0;
  why_not[0] = 0;
  return 1;
}

/* ---- ops: memory -------------------------------------------------------------------------------- */

static void *o_alloc(size_t bytes) {
  void *p = cu_dev_alloc(bytes, "allocation");
  CHECK_CUDA(cudaMemsetAsync(p, 0, bytes ? bytes : 256, cu.stream));
  return p;
}
static void o_free(void *p) {
  if (!p) return;
  /* First the queued work, which may still read p or its bf16 copy. */
  CHECK_CUDA(cudaStreamSynchronize(cu.stream));
  const size_t bytes = cu_dev_size(p);
  cu_shadow_forget(p, bytes ? bytes : 1);
  cu_dev_free(p);
}
/* Whether host memory is page-locked (a copy from it runs truly asynchronously). */
static int host_pinned(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeHost;
}
static void o_upload(void *dst, const void *src_host, size_t bytes) {
  if (!bytes) return;
  cu_shadow_touch(dst, bytes);
  PROF(P_OTHER, CHECK_CUDA(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, cu.stream)));
  /* From pageable memory the data is staged before the call returns; from pinned memory the
   * copy is still in flight, and the caller may reuse its buffer as soon as upload returns. */
  if (host_pinned(src_host)) CHECK_CUDA(cudaStreamSynchronize(cu.stream));
}
static void o_download(void *dst_host, const void *src, size_t bytes) {
  if (bytes) CHECK_CUDA(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, cu.stream));
  CHECK_CUDA(cudaStreamSynchronize(cu.stream));
}
static void o_copy(void *dst, const void *src, size_t bytes) {
  if (!bytes) return;
  cu_shadow_touch(dst, bytes);
  PROF(P_OTHER, CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu.stream)));
}
static void o_zero(void *p, size_t bytes) {
  if (!bytes) return;
  cu_shadow_touch(p, bytes);
  PROF(P_OTHER, CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, cu.stream)));
}
template <typename T> static void o_act_from_f32(void *dst, const float *src, size_t n) {
  if (n) PROF(P_OTHER, k_convert_from_f32<T>((T *)dst, src, n));
}
template <typename T> static void o_act_to_f32(float *dst, const void *src, size_t n) {
  if (!n) return;
  cu_shadow_touch(dst, n * sizeof(float));
  PROF(P_OTHER, k_convert_to_f32<T>(dst, (const T *)src, n));
}
static void o_sync(void) { CHECK_CUDA(cudaStreamSynchronize(cu.stream)); }
template <typename T> static void o_params_changed_half(const float *params, size_t n) {
  if (params && n) cu_shadow_register<T>(params, n);
}
static void o_set_threads(int n) { (void)n; /* host work of this backend is one thread */ }
static void o_profile(struct ops_profile *p, int reset) { prof_read(p, reset); }

/* ---- ops: dense layers -------------------------------------------------------------------------- */

template <typename T>
static void o_linear_fwd(void *y, const void *x, const float *w, const float *b, int M, int N,
                         int K) {
  if (M <= 0 || N <= 0) return;
  PROF(P_GEMM, {
    const T *wq = gemm_weights<T>(w, (size_t)N * K, SLOT_WCONV_A);
    const T *bq = b ? gemm_weights<T>(b, (size_t)N, SLOT_WCONV_B) : NULL;
    /* column-major: y^T [N x M] = (w [K x N])^T x^T [K x M] */
    lt_matmul(1, 0, N, M, K, wq, cu_dtype<T>::value, K, x, cu_dtype<T>::value, K, y,
              cu_dtype<T>::value, N, 0.0f, bq);
  });
}

/* Bias gradients of Linear layers: by the weight gradient's GEMM (BGRADB epilogue) or by k_colsum
 * (backend_cuda_set_bias_grad), and how many the epilogue has summed. */
static int bgrad_epilogue = 1;
static long bgrad_fused;

/* The epilogue's first sums for a shape against the column-sum kernel's (ref, scratch), once: how
 * BGRADB treats alpha and which type it writes are not fully documented, and a library that got
 * them otherwise would train with wrong bias gradients unseen.  Sums in another order agree to
 * about 1e-6; a disagreement turns the epilogue off for the run, with a warning.  Returns whether
 * the sums in g can be used.  Costs one wait for the GPU per shape, in the first step. */
template <typename T>
static int bgrad_verify(const float *g, float *ref, const T *dy, int M, int N, int K) {
  k_colsum<T>(ref, dy, M, N, (size_t)N, 0);
  std::vector<float> h(2 * (size_t)N);
  CHECK_CUDA(cudaMemcpyAsync(h.data(), g, 2 * (size_t)N * sizeof(float), cudaMemcpyDeviceToHost,
                             cu.stream));
  CHECK_CUDA(cudaStreamSynchronize(cu.stream));
  double diff = 0, norm = 0;
  for (int i = 0; i < N; i++) {
    const double r = h[(size_t)N + i], d = (double)h[i] - r;
    if (!std::isfinite(r)) return 1; /* a diverged step: nothing to judge by */
    diff += d * d;
    norm += r * r;
  }
  if (!(diff <= 1e-6 * norm)) { /* relative error above 1e-3, or NaN from the epilogue */
    log_warn("cuBLASLt's bias-gradient epilogue (BGRADB) disagrees with the column sums for the "
             "weight gradient m=%d n=%d k=%d (relative error %.3g); bias gradients by the "
             "column-sum kernel from now on", K, N, M, norm > 0 ? sqrt(diff / norm) : sqrt(diff));
    bgrad_epilogue = 0;
    return 0;
  }
  return 1;
}

template <typename T>
static void o_linear_residual_fwd(void *y, const void *r, const void *x, const float *w,
                                  const float *b, int M, int N, int K) {
  if (M <= 0 || N <= 0) return;
  PROF(P_GEMM, {
    const T *wq = gemm_weights<T>(w, (size_t)N * K, SLOT_WCONV_A);
    const T *bq = b ? gemm_weights<T>(b, (size_t)N, SLOT_WCONV_B) : NULL;
    /* column-major: y^T [N x M] = (w [K x N])^T x^T [K x M] + r^T */
    lt_matmul_add(1, 0, N, M, K, wq, cu_dtype<T>::value, K, x, cu_dtype<T>::value, K, r, y,
                  cu_dtype<T>::value, N, bq);
  });
}

template <typename T>
static void o_linear_bwd(void *dx, float *dw, float *db, const void *dy, const void *x,
                         const float *w, int M, int N, int K) {
  if (M <= 0 || N <= 0) return;
  PROF(P_GEMM, {
    if (dx) { /* dx^T [K x M] = w^T [K x N] dy^T [N x M] */
      const T *wq = gemm_weights<T>(w, (size_t)N * K, SLOT_WCONV_A);
      lt_matmul(0, 0, K, M, N, wq, cu_dtype<T>::value, K, dy, cu_dtype<T>::value, N, dx,
                cu_dtype<T>::value, K, 0.0f, NULL);
    }
    /* dw^T [K x N] += x^T [K x M] dy [M x N], fp32 output; db's column sums of dy (op(B) over
     * k = M) by the same GEMM's epilogue where cuBLASLt has one, which saves reading dy again */
    int summed = 0, first = 0;
    if (dw && db && bgrad_epilogue) {
      float *g = (float *)cu_scratch(SLOT_BGRAD, 2 * (size_t)N * sizeof(float));
      summed = lt_matmul_bgradb(0, 1, K, N, M, x, cu_dtype<T>::value, K, dy, cu_dtype<T>::value, N,
                                dw, CUDA_R_32F, K, 1.0f, g, &first);
      if (summed && first) summed = bgrad_verify<T>(g, g + N, (const T *)dy, M, N, K);
      if (summed) {
        k_add_f32(db, g, (size_t)N); /* the epilogue stores; db accumulates */
        bgrad_fused++;
      }
    } else if (dw)
      lt_matmul(0, 1, K, N, M, x, cu_dtype<T>::value, K, dy, cu_dtype<T>::value, N, dw,
                CUDA_R_32F, K, 1.0f, NULL);
    if (db && !summed) k_colsum<T>(db, (const T *)dy, M, N, (size_t)N, 1);
  });
}

static void o_matmul_f32(float *c, const float *a, const float *b, int M, int N, int K, int ta,
                         int tb, float beta) {
  if (M <= 0 || N <= 0) return;
  cu_shadow_touch(c, (size_t)M * N * sizeof(float));
  /* column-major: c^T [N x M] = op(b)^T op(a)^T */
  PROF(P_GEMM, lt_matmul(tb, ta, N, M, K, b, CUDA_R_32F, tb ? K : N, a, CUDA_R_32F, ta ? M : K, c,
                         CUDA_R_32F, N, beta, NULL));
}

/* ---- ops: patches, tokens, norms ---------------------------------------------------------------- */

template <typename T>
static void o_patchify(void *cols, const float *img, int B, int C, int H, int W, int p) {
  PROF(P_OTHER, k_patchify<T>((T *)cols, img, B, C, H, W, p));
}
template <typename T>
static void o_tokens_fwd(void *x, const void *patches, const float *cls, const float *pos, int B,
                         int Np, int D) {
  PROF(P_OTHER, k_tokens_fwd<T>((T *)x, (const T *)patches, cls, pos, B, Np, D));
}
template <typename T>
static void o_tokens_bwd(void *dpatches, float *dcls, float *dpos, const void *dx, int B, int Np,
                         int D) {
  PROF(P_OTHER, k_tokens_bwd<T>((T *)dpatches, dcls, dpos, (const T *)dx, B, Np, D));
}
template <typename T>
static void o_ln_fwd(void *y, float *mean, float *rstd, const void *x, int ldx, const float *g,
                     const float *b, int rows, int D, float eps) {
  PROF(P_OTHER, k_layernorm_fwd<T>((T *)y, mean, rstd, (const T *)x, ldx, g, b, rows, D, eps));
}
template <typename T>
static void o_ln_bwd(void *dx, float *dg, float *db, const void *dy, const void *x, int ldx,
                     const float *mean, const float *rstd, const float *g, int rows, int D) {
  PROF(P_OTHER, k_layernorm_bwd<T>((T *)dx, dg, db, (const T *)dy, (const T *)x, ldx, mean, rstd,
                                   g, rows, D));
}
template <typename T>
static void o_res_ln_fwd(void *y, void *ln, float *mean, float *rstd, const void *x, const void *f,
                         const float *s, const float *g, const float *b, int B, int rps, int D,
                         float eps) {
  PROF(P_OTHER, k_residual_layernorm_fwd<T>((T *)y, (T *)ln, mean, rstd, (const T *)x,
                                            (const T *)f, s, g, b, B, rps, D, eps));
}
template <typename T>
static void o_ln_res_bwd(void *dx, float *dg, float *db, void *df, const float *s, const void *dy,
                         const void *x, const float *mean, const float *rstd, const float *g,
                         int B, int rps, int D) {
  PROF(P_OTHER, k_layernorm_residual_bwd<T>((T *)dx, dg, db, (T *)df, s, (const T *)dy,
                                            (const T *)x, mean, rstd, g, B, rps, D));
}
template <typename T>
static void o_l2_fwd(void *y, float *norm, const void *x, int rows, int D) {
  PROF(P_OTHER, k_l2norm_fwd<T>((T *)y, norm, (const T *)x, rows, D));
}
template <typename T>
static void o_l2_bwd(void *dx, const void *dy, const void *y, const float *norm, int rows, int D) {
  PROF(P_OTHER, k_l2norm_bwd<T>((T *)dx, (const T *)dy, (const T *)y, norm, rows, D));
}
static void o_wn_fwd(float *w, float *vnorm, const float *g, const float *v, int K, int D) {
  cu_shadow_touch(w, (size_t)K * D * sizeof(float));
  PROF(P_OTHER, k_weightnorm_fwd<bf16>(w, NULL, vnorm, g, v, K, D));
}
/* In bf16 and f16 the normalised weight (DINO head's last layer: 65536 x 256) is only read by
 * GEMMs, as T: the kernel writes that copy too, so neither the forward nor the backward GEMM
 * converts it. */
template <typename T>
static void o_wn_fwd_half(float *w, float *vnorm, const float *g, const float *v, int K, int D) {
  const size_t n = (size_t)K * D;
  T *wc = cu_shadow_rewritten<T>(w, n);
  if (!wc && n) {
    cu_shadow_register<T>(w, n);
    wc = cu_shadow_rewritten<T>(w, n);
  }
  PROF(P_OTHER, k_weightnorm_fwd<T>(w, wc, vnorm, g, v, K, D));
}
static void o_wn_bwd(float *dg, float *dv, const float *dw, const float *g, const float *v,
                     const float *vnorm, int K, int D) {
  PROF(P_OTHER, k_weightnorm_bwd(dg, dv, dw, g, v, vnorm, K, D));
}

/* ---- ops: attention, elementwise, loss ---------------------------------------------------------- */

/* Attention implementation, chosen before any state buffer is planned (the states differ):
 * batched tensor-core GEMMs (attention_gemm.cu), the flash-style kernels (attention.cu; on tensor
 * cores in bf16, attention_mma.cu and attention_tc.cu) or cuDNN's fused attention
 * (attention_cudnn.cu, whose state is the flash kernel's: what cuDNN declines runs the GEMM form
 * on that state, still on tensor cores).  The flash kernels are the default: on an H100 they took
 * the ViT-S/16 step's attention from 18.9 ms (GEMM form) and 14.6 ms (cuDNN 9.19, whose backward
 * declined) to 7.6 ms. */
enum attn_impl { ATTN_GEMM, ATTN_FLASH, ATTN_CUDNN };
static enum attn_impl attn_choice = ATTN_FLASH;
static const char *const attn_names[] = {"gemm", "flash", "cudnn"};

/* What this call takes.  Batched bf16 and f16 GEMMs need every head's pointer 16-byte aligned once
 * a product's k is a multiple of 8 (cuBLAS cannot check pointers it reads from device arrays): a
 * head at h * hd elements is not when hd % 8 != 0, so such models take the flash kernel.  cuDNN's
 * fused attention is bf16 only (f16 falls back as a declined call does, to the GEMM form on the
 * flash state): the fp32 table keeps the GEMM form, which compares with the CPU. */
template <typename T> static enum attn_impl attn_kind(int hd) {
  const int bf = sizeof(T) == 2;
  if (attn_choice == ATTN_CUDNN) return bf ? (hd % 8 ? ATTN_FLASH : ATTN_CUDNN) : ATTN_GEMM;
  return attn_choice == ATTN_FLASH || (bf && hd % 8 != 0) ? ATTN_FLASH : ATTN_GEMM;
}

template <typename T> static size_t o_attn_state_bytes(int B, int N, int H, int hd) {
  return attn_kind<T>(hd) == ATTN_GEMM ? k_attn_gemm_state_bytes<T>(B, N, H) : k_attn_state_bytes(B, N, H);
}

/* cuDNN's attention on bf16 data; 0 when it declines (its reason said once). */
template <typename T>
static int cudnn_fwd(T *, float *, const T *, int, int, int, int, float) { return 0; }
template <>
int cudnn_fwd<bf16>(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd, float scale) {
  return k_attn_cudnn_fwd(out, lse, qkv, B, N, H, hd, scale);
}
template <typename T>
static int cudnn_bwd(T *, const T *, const T *, const T *, const float *, int, int, int, int, float) {
  return 0;
}
template <>
int cudnn_bwd<bf16>(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv, const float *lse,
                    int B, int N, int H, int hd, float scale) {
  return k_attn_cudnn_bwd(dqkv, dout, out, qkv, lse, B, N, H, hd, scale);
}

/* cuDNN's fallback: the GEMM form on the same state, unless a tensor is not 16-byte aligned (its
 * batched products would fault, see attn_kind; the arena's tensors always are), then the flash
 * kernel. */
static int attn_aligned(const void *a, const void *b, const void *c) {
  return !(((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15);
}

/* 'flash' in f16 where no tensor-core flash kernel takes the call (attention_mma.cu's f16 form
 * needs compute capability 7.5, mma.sync m16n8k8, and head dimension 32 or 64; a V100 has no such
 * instruction): the GEMM form on the flash state (the row log-sum-exp, as cuDNN's fallback), so
 * that attention stays on the tensor cores, batched through cuBLAS, with the flash kernel's
 * memory.  Unaligned tensors and head dimensions that are not multiples of 8 keep the CUDA-core
 * flash kernel. */
template <typename T>
static int flash_by_gemm(int BH, int hd, const void *a, const void *b, const void *c, const void *qkv,
                         const void *dout) {
  if (act_code<T>::value != ACT_F16 || hd % 8 || !attn_aligned(a, b, c)) return 0;
  return !k_attn_mma_covers_t<T>(BH, hd, qkv, dout);
}

template <typename T>
static void o_attn_fwd(void *out, void *state, float *probs, const void *qkv, int B, int N, int H,
                       int hd, float scale) {
  if (B <= 0 || N <= 0) return;
  const enum attn_impl kind = attn_kind<T>(hd);
  if (kind == ATTN_GEMM) {
    PROF(P_ATTN, k_attn_gemm_fwd<T>((T *)out, (T *)state, NULL, probs, (const T *)qkv, B, N, H, hd,
                                    scale));
    return;
  }
  float *lse = (float *)state;
  if (kind == ATTN_CUDNN) {
    int done = 0;
    /* the softmax matrices (attention maps, inference) come from the GEMM form */
    if (!probs) PROF(P_ATTN, done = cudnn_fwd<T>((T *)out, lse, (const T *)qkv, B, N, H, hd, scale));
    if (done) return;
    if (attn_aligned(out, qkv, NULL)) {
      PROF(P_ATTN, k_attn_gemm_fwd<T>((T *)out, NULL, lse, probs, (const T *)qkv, B, N, H, hd, scale));
      return;
    }
  }
  if (kind == ATTN_FLASH && flash_by_gemm<T>(B * H, hd, out, qkv, NULL, qkv, NULL)) {
    PROF(P_ATTN, k_attn_gemm_fwd<T>((T *)out, NULL, lse, probs, (const T *)qkv, B, N, H, hd, scale));
    return;
  }
  if (!lse && probs) lse = (float *)cu_scratch(SLOT_ATTN, k_attn_state_bytes(B, N, H));
  PROF(P_ATTN, k_attn_fwd<T>((T *)out, lse, probs, (const T *)qkv, B, N, H, hd, scale));
}
template <typename T>
static void o_attn_bwd(void *dqkv, const void *dout, const void *out, const void *qkv,
                       const void *state, int B, int N, int H, int hd, float scale) {
  if (B <= 0 || N <= 0) return;
  const enum attn_impl kind = attn_kind<T>(hd);
  if (kind == ATTN_GEMM) {
    PROF(P_ATTN, k_attn_gemm_bwd<T>((T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)state, NULL,
                                    B, N, H, hd, scale));
    return;
  }
  if (kind == ATTN_CUDNN) {
    int done = 0;
    PROF(P_ATTN, done = cudnn_bwd<T>((T *)dqkv, (const T *)dout, (const T *)out, (const T *)qkv,
                                     (const float *)state, B, N, H, hd, scale));
    if (done) return;
    if (attn_aligned(dqkv, dout, qkv)) {
      PROF(P_ATTN, k_attn_gemm_bwd<T>((T *)dqkv, (const T *)dout, (const T *)qkv, NULL,
                                      (const float *)state, B, N, H, hd, scale));
      return;
    }
  }
  if (kind == ATTN_FLASH && flash_by_gemm<T>(B * H, hd, dqkv, dout, qkv, qkv, dout)) {
    PROF(P_ATTN, k_attn_gemm_bwd<T>((T *)dqkv, (const T *)dout, (const T *)qkv, NULL,
                                    (const float *)state, B, N, H, hd, scale));
    return;
  }
  PROF(P_ATTN, k_attn_bwd<T>((T *)dqkv, (const T *)dout, (const T *)out, (const T *)qkv,
                             (const float *)state, B, N, H, hd, scale));
}
template <typename T> static void o_gelu_fwd(void *y, const void *x, size_t n, int approx) {
  if (n) PROF(P_OTHER, k_gelu_fwd<T>((T *)y, (const T *)x, n, approx));
}
template <typename T>
static void o_gelu_bwd(void *dx, const void *dy, const void *x, size_t n, int approx) {
  if (n) PROF(P_OTHER, k_gelu_bwd<T>((T *)dx, (const T *)dy, (const T *)x, n, approx));
}
template <typename T>
static void o_gelu_bwd_bias(void *dx, float *db, const void *dy, const void *x, int rows, int cols,
                            int approx) {
  PROF(P_OTHER, k_gelu_bwd_bias<T>((T *)dx, db, (const T *)dy, (const T *)x, rows, cols, approx));
}

/* GELU in the GEMM (cuda/ops/gelu_gemm.cu), bf16 and f16 only: where the library computes this GELU and has an
 * algorithm for the shape; otherwise the GEMM and the GELU kernel. */
template <typename T> static int o_gelu_in_gemm(int approx) {
  return cu_gelu_in_gemm(approx, act_code<T>::value);
}
template <typename T>
static void o_linear_gelu_fwd(void *h, void *pre, const void *x, const float *w, const float *b,
                              int M, int N, int K, int approx) {
  if (M <= 0 || N <= 0) return;
  int done = 0;
  if (K > 0 && o_gelu_in_gemm<T>(approx))
    PROF(P_GEMM, {
      const T *wq = gemm_weights<T>(w, (size_t)N * K, SLOT_WCONV_A);
      const T *bq = b ? gemm_weights<T>(b, (size_t)N, SLOT_WCONV_B) : NULL;
      /* column-major: h^T [N x M] = gelu((w [K x N])^T x^T [K x M] + b), pre^T alongside */
      done = lt_matmul_gelu(1, 0, N, M, K, wq, cu_dtype<T>::value, K, x, cu_dtype<T>::value, K, h,
                            cu_dtype<T>::value, N, bq, pre);
    });
  if (done) {
    cu_gelu_count();
    return;
  }
  void *y = pre ? pre : h;
  o_linear_fwd<T>(y, x, w, b, M, N, K);
  o_gelu_fwd<T>(h, y, (size_t)M * N, approx);
}
template <typename T>
static void o_gelu_linear_bwd(void *dpre, float *dw, float *db, const void *dy, const void *h,
                              const void *pre, const float *w, int M, int N, int K, int approx) {
  if (M <= 0 || K <= 0) return;
  int done = 0;
  if (N > 0 && o_gelu_in_gemm<T>(approx))
    PROF(P_GEMM, {
      const T *wq = gemm_weights<T>(w, (size_t)N * K, SLOT_WCONV_A);
      /* dpre^T [K x M] = (w^T [K x N] dy^T [N x M]) * gelu'(pre^T) */
      done = lt_matmul_dgelu(0, 0, K, M, N, wq, cu_dtype<T>::value, K, dy, cu_dtype<T>::value, N,
                             dpre, cu_dtype<T>::value, K, pre);
    });
  o_linear_bwd<T>(done ? NULL : dpre, dw, db, dy, h, w, M, N, K);
  if (done)
    cu_gelu_count();
  else
    o_gelu_bwd<T>(dpre, dpre, pre, (size_t)M * K, approx);
}
template <typename T>
static void o_res_fwd(void *y, const void *x, const void *f, const float *s, int B, int rps, int D) {
  PROF(P_OTHER, k_residual_fwd<T>((T *)y, (const T *)x, (const T *)f, s, B, rps, D));
}
template <typename T>
static void o_res_bwd(void *df, const void *dy, const float *s, int B, int rps, int D) {
  PROF(P_OTHER, k_residual_bwd<T>((T *)df, (const T *)dy, s, B, rps, D));
}
template <typename T>
static void o_dino_loss(float *loss, void *ds, float *tsum, const void *student,
                        const void *teacher, const float *center, int B, int ns, int nt, int K,
                        float student_temp, float teacher_temp, float grad_scale) {
  PROF(P_OTHER, k_dino_loss<T>(loss, (T *)ds, tsum, (const T *)student, (const T *)teacher, center,
                               B, ns, nt, K, student_temp, teacher_temp, grad_scale));
}
template <typename T>
static void o_dino_stats(float *stats, const void *teacher, const float *center, int rows, int K,
                         float teacher_temp) {
  PROF(P_OTHER, k_dino_stats<T>(stats, (const T *)teacher, center, rows, K, teacher_temp));
}
static void o_center_update(float *center, const float *tsum, int K, float count, double m) {
  PROF(P_OTHER, k_center_update(center, tsum, K, count, m));
}

/* ---- ops: optimizer ----------------------------------------------------------------------------- */

static void o_seg_norms(double *norms_host, const float *buf, const struct ops_seg *segs, int nseg) {
  PROF(P_OTHER, k_seg_norms(norms_host, buf, segs, nseg));
}
static void o_seg_sumsq(double *sumsq_host, const float *buf, const struct ops_seg *segs, int nseg) {
  PROF(P_OTHER, k_seg_sumsq(sumsq_host, buf, segs, nseg));
}
static void o_seg_scale(float *buf, const struct ops_seg *segs, const float *scale_host, int nseg) {
  for (int s = 0; s < nseg; s++) cu_shadow_touch(buf + segs[s].off, segs[s].n * sizeof(float));
  PROF(P_OTHER, k_seg_scale(buf, segs, scale_host, nseg));
}
static void o_adamw(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs,
                    int nseg, double beta1, double beta2, double eps) {
  for (int s = 0; s < nseg; s++) cu_shadow_touch(p + segs[s].off, segs[s].n * sizeof(float));
  PROF(P_OTHER, k_adamw<bf16>(p, g, m, v, segs, nseg, NULL, beta1, beta2, eps, NULL, 0, 0.0, NULL, NULL));
}
static void o_ema(float *dst, const float *src, size_t n, double m) {
  cu_shadow_touch(dst, n * sizeof(float));
  if (n) PROF(P_OTHER, k_ema(dst, src, n, m));
}
template <typename T>
static void o_adamw_ema(float *p, const float *g, float *m, float *v,
                        const struct ops_adamw_seg *segs, int nseg, const float *gscale_host,
                        double beta1, double beta2, double eps, float *teacher, size_t n,
                        double momentum) {
  /* The 16-bit copies (bf16 or f16) of student and teacher written by the same kernel, which
   * saves converting both buffers again before the next step's GEMMs: the student's where it is
   * up to date (the elements AdamW leaves alone keep their copies), the teacher's wherever it
   * covers the EMA's range exactly (all of it rewritten).  fp32 has none. */
  typedef typename std::conditional<sizeof(T) == 2, T, bf16>::type C;
  size_t end = 0;
  for (int s = 0; s < nseg; s++)
    if (segs[s].off + segs[s].n > end) end = segs[s].off + segs[s].n;
  C *pc = sizeof(T) == 2 ? cu_shadow_current<C>(p, end) : NULL;
  C *tc = sizeof(T) == 2 ? cu_shadow_rewritten<C>(teacher, n) : NULL;
  if (!pc)
    for (int s = 0; s < nseg; s++) cu_shadow_touch(p + segs[s].off, segs[s].n * sizeof(float));
  if (!tc) cu_shadow_touch(teacher, n * sizeof(float));
  PROF(P_OTHER, k_adamw<C>(p, g, m, v, segs, nseg, gscale_host, beta1, beta2, eps, teacher, n,
                           momentum, pc, tc));
}

/* The GPU model and the libraries whose kernels compute the results (ops->arithmetic). */
static void o_arithmetic(char *buf, size_t n) {
  int rt = 0;
  CHECK_CUDA(cudaRuntimeGetVersion(&rt));
  snprintf(buf, n, "cuda: %s (sm_%d%d), CUDA runtime %d, cuBLASLt %zu", cu.prop.name, cu.prop.major,
           cu.prop.minor, rt, (size_t)cublasLtGetVersion());
}

/* ---- the tables --------------------------------------------------------------------------------- */

template <typename T> static void fill_ops(struct ops *o, const char *name, const char *precision) {
  memset(o, 0, sizeof *o);
  o->name = name;
  o->precision = precision;
  o->act_size = sizeof(T);
  o->arithmetic = o_arithmetic;
  o->alloc = o_alloc;
  o->free = o_free;
  o->upload = o_upload;
  o->download = o_download;
  o->copy = o_copy;
  o->zero = o_zero;
  o->act_from_f32 = o_act_from_f32<T>;
  o->act_to_f32 = o_act_to_f32<T>;
  o->sync = o_sync;
  if constexpr (sizeof(T) == 2) o->params_changed = o_params_changed_half<T>;
  o->set_threads = o_set_threads;
  o->profile = o_profile;
  o->linear_fwd = o_linear_fwd<T>;
  o->linear_bwd = o_linear_bwd<T>;
  o->linear_residual_fwd = o_linear_residual_fwd<T>;
  o->matmul_f32 = o_matmul_f32;
  o->patchify = o_patchify<T>;
  o->tokens_fwd = o_tokens_fwd<T>;
  o->tokens_bwd = o_tokens_bwd<T>;
  o->layernorm_fwd = o_ln_fwd<T>;
  o->layernorm_bwd = o_ln_bwd<T>;
  o->residual_layernorm_fwd = o_res_ln_fwd<T>;
  o->layernorm_residual_bwd = o_ln_res_bwd<T>;
  o->l2norm_fwd = o_l2_fwd<T>;
  o->l2norm_bwd = o_l2_bwd<T>;
  if constexpr (sizeof(T) == 2) o->weightnorm_fwd = o_wn_fwd_half<T>;
  else o->weightnorm_fwd = o_wn_fwd;
  o->weightnorm_bwd = o_wn_bwd;
  o->attn_state_bytes = o_attn_state_bytes<T>;
  o->attn_fwd = o_attn_fwd<T>;
  o->attn_bwd = o_attn_bwd<T>;
  o->gelu_fwd = o_gelu_fwd<T>;
  o->gelu_bwd = o_gelu_bwd<T>;
  o->gelu_bwd_bias = o_gelu_bwd_bias<T>;
  if (sizeof(T) == 2) { /* fp32 runs the reference kernels, to compare with the CPU closely */
    o->gelu_in_gemm = o_gelu_in_gemm<T>;
    o->linear_gelu_fwd = o_linear_gelu_fwd<T>;
    o->gelu_linear_bwd = o_gelu_linear_bwd<T>;
  }
  o->residual_fwd = o_res_fwd<T>;
  o->residual_bwd = o_res_bwd<T>;
  o->dino_loss = o_dino_loss<T>;
  o->center_update = o_center_update;
  o->dino_stats = o_dino_stats<T>;
  o->seg_norms = o_seg_norms;
  o->seg_sumsq = o_seg_sumsq;
  o->seg_scale = o_seg_scale;
  o->adamw = o_adamw;
  o->ema = o_ema;
  o->adamw_ema = o_adamw_ema<T>;
}

static struct ops ops_bf16, ops_f16, ops_fp32;

extern "C" const struct ops *backend_cuda_for(const char *precision) {
  if (!precision) precision = "auto";
  if (strcmp(precision, "fp32") && strcmp(precision, "bf16") && strcmp(precision, "fp16") &&
      strcmp(precision, "auto"))
    scd_fatal(SCD_EXIT_INPUT, "&training precision = '%s': expected 'auto', 'bf16', 'fp16' or 'fp32'",
              precision);
  if (!cu_init()) return NULL;
  if (!ops_bf16.name) {
    fill_ops<bf16>(&ops_bf16, "cuda", "bf16");
    fill_ops<f16>(&ops_f16, "cuda", "fp16");
    fill_ops<float>(&ops_fp32, "cuda", "fp32");
  }
  if (!strcmp(precision, "fp32")) return &ops_fp32;
  if (!strcmp(precision, "fp16")) return &ops_f16;
  /* bf16 GEMMs (cuBLASLt) and the bf16 tensor-core kernels need compute capability 8.0; 'auto'
   * takes f16 with loss scaling below it, as upstream's use_fp16 on a V100 or T4 */
  if (!strcmp(precision, "auto")) return cu.arch >= 80 ? &ops_bf16 : &ops_f16;
  if (cu.arch < 80)
    scd_fatal(SCD_EXIT_INPUT, "&training: precision = 'bf16' needs compute capability 8.0 or later; "
              "GPU %d (%s) %s %d.%d: use precision = 'fp16' or 'auto' (fp16 with loss scaling)",
              cu.device, cu.prop.name,
              cu.arch == cu.prop.major * 10 + cu.prop.minor ? "has" : "runs the kernels (&gpu arch) of",
              cu.arch / 10, cu.arch % 10);
  return &ops_bf16;
}

extern "C" void backend_cuda_set_arch(int arch) {
  arch_set = arch;
  if (cu.ready) {
    const int gpu_arch = cu.prop.major * 10 + cu.prop.minor;
    cu.arch = arch > 0 && arch < gpu_arch ? arch : gpu_arch;
  }
}

extern "C" int backend_cuda_arch(void) { return cu.ready ? cu.arch : 0; }

extern "C" const struct ops *backend_cuda(void) { return backend_cuda_for("auto"); }

extern "C" const char *backend_cuda_why_not(void) { return why_not; }

extern "C" int backend_cuda_info(struct backend_cuda_info *info) {
  memset(info, 0, sizeof *info);
  if (!cu.ready) return 0;
  snprintf(info->name, sizeof info->name, "%s", cu.prop.name);
  info->device = cu.device;
  info->cc_major = cu.prop.major;
  info->cc_minor = cu.prop.minor;
  info->sms = cu.prop.multiProcessorCount;
  info->mem_total = cu.prop.totalGlobalMem;
  CHECK_CUDA(cudaRuntimeGetVersion(&info->runtime_version));
  CHECK_CUDA(cudaDriverGetVersion(&info->driver_version));
  info->cublaslt_version = cublasLtGetVersion();
  memcpy(info->uuid, cu.prop.uuid.bytes, sizeof info->uuid);
  return 1;
}

extern "C" void *backend_cuda_stream(void) { return cu.ready ? (void *)cu.stream : NULL; }

extern "C" void backend_cuda_set_attention(const char *impl) {
  for (int i = 0; i < 3; i++)
    if (!strcmp(impl, attn_names[i])) {
      attn_choice = (enum attn_impl)i;
      /* cuDNN's plans and refusals start afresh (tests change what the stand-in offers) */
      if (cu.ready) k_attn_cudnn_forget();
      return;
    }
  scd_fatal(SCD_EXIT_INPUT, "attention implementation '%s': expected 'flash', 'gemm' or 'cudnn'", impl);
}

extern "C" const char *backend_cuda_attention(void) { return attn_names[attn_choice]; }

extern "C" void backend_cuda_set_flash_options(int opts) { k_attn_mma_set_options(opts); }

extern "C" void backend_cuda_set_bias_grad(const char *how) {
  if (strcmp(how, "epilogue") && strcmp(how, "kernel"))
    scd_fatal(SCD_EXIT_INPUT, "bias-gradient path '%s': expected 'epilogue' or 'kernel'", how);
  bgrad_epilogue = !strcmp(how, "epilogue");
  if (cu.ready) lt_forget(); /* plans and refusals afresh (tests change what the stand-in offers) */
}

extern "C" const char *backend_cuda_bias_grad(void) { return bgrad_epilogue ? "epilogue" : "kernel"; }

extern "C" long backend_cuda_bias_grad_fused(void) { return bgrad_fused; }

extern "C" const char *backend_cuda_cudnn_attention_why_not(void) {
  return cu.ready ? k_attn_cudnn_why_not() : "no GPU context";
}

extern "C" void backend_cuda_cudnn_attention_runs(long *fwd, long *bwd) { k_attn_cudnn_runs(fwd, bwd); }

extern "C" int backend_cuda_cudnn_attention_probe(void *f) { return k_attn_cudnn_probe((FILE *)f); }

extern "C" void backend_cuda_set_profiling(int on) {
  prof_set(on);
}

extern "C" void backend_cuda_profile_report(void *f, int top) { prof_report((FILE *)f, top); }

extern "C" void backend_cuda_gemm_tuning_report(void) { lt_tuning_report(); }

extern "C" void backend_cuda_set_gemm_tune(int on) { lt_set_tuning(on); }
