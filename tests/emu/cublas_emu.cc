/* cublas_emu.cc - host stand-ins for the cuBLAS and cuBLASLt calls of the CUDA backend
 * (cuda/ops/gemm_lt.cu, cuda/ops/attention_gemm.cu, cuda/ops/backend_cuda.cu), so that the GPU unit tests can run
 * under the CPU emulator in tests/emu/ without libcublas/libcublasLt: "device" pointers are host
 * pointers and every call runs on the calling thread, after the work queued on its stream
 * (runtime.cc's queues), as a GPU runs a stream's work in order.
 *
 * Supported subset: column-major D = alpha op(A) op(B) + beta C with op N or T, compute type
 * CUBLAS_COMPUTE_32F, fp32 alpha/beta read from host memory, operand types (A = B, C = D) fp32/fp32,
 * bf16/bf16, bf16/fp32, fp16/fp16 and fp16/fp32.  cuBLASLt: epilogue DEFAULT, BIAS (bias of D's type, one value per row
 * of D), BGRADB (alpha 1: the column sums of op(B) over k, one per column of D, stored in D's type
 * at the bias pointer), GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS (GELU of the sum after the bias;
 * the _AUX ones also store that sum, the GELU input, in D's type at the aux pointer) and DGELU (the
 * sum times GELU' of the aux matrix, read in D's type); the aux matrix is column-major in D's type
 * with AUX_LD a multiple of 8 and >= m and its pointer 16-byte aligned (else
 * CUBLAS_STATUS_INVALID_VALUE).  Single column-major matrices (no batched layouts), preferences
 * accepted and ignored.  SCDINO_EMU_LT_BGRADB=decline makes the heuristic find no algorithm for
 * BGRADB (CUBLAS_STATUS_NOT_SUPPORTED), as cuBLASLt may for a shape, to test the fallback; =wrong
 * stores twice the sums (a library that reads the epilogue otherwise), to test the backend's check
 * of them.  SCDINO_EMU_LT_GELU picks the GELU: tanh (unset: the tanh approximation), erf (the exact
 * one), wrong (x sigmoid(1.702 x), neither) or decline (no algorithm for the GELU epilogues, and
 * CUBLAS_STATUS_NOT_SUPPORTED from a matmul asked anyway): NVIDIA's header does not say which GELU
 * cuBLASLt computes, so the default is an assumption and the other values test a caller's probe of
 * it.  Both knobs are read at every call.
 * cublasGemmBatchedEx: host arrays of host pointers, math mode DEFAULT or PEDANTIC.  Anything else
 * prints "cublas_emu: <function>: unsupported <what> <value>" and aborts.
 *
 * Numerics: operands widened to float, their product by OpenBLAS's sgemm (fp32 sums), then alpha,
 * beta C, the bias and the GELU (or GELU') applied in float and the result rounded to the output
 * type (bf16 and fp16: nearest even; fp16 overflows to infinity as the GPU's conversion). */
#include <cblas.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "tests/emu/emu_internal.h"

/* The backend's handles are pointers to these (cuBLAS leaves the structs incomplete). */
struct cublasContext {
  uint32_t magic;
  cublasMath_t math;
  cudaStream_t stream;
};
struct cublasLtContext {
  uint32_t magic;
};

namespace {

/* Magic numbers catch a handle or descriptor of the wrong kind (or a freed one) being passed. */
constexpr uint32_t MAGIC_BLAS = 0x424c4153u, MAGIC_LT = 0x4c542020u, MAGIC_DESC = 0x44455343u,
                   MAGIC_LAYOUT = 0x4c415954u, MAGIC_PREF = 0x50524546u, MAGIC_DEAD = 0xdeadu;
constexpr uint64_t ALGO_TAG = 0x63626c61732d656dull; /* data[0] of the algo the heuristic returns */

/* The descriptor handle types point to cuBLASLt's semi-opaque structs; the backend never looks
 * inside them, so they carry these host structs instead (reinterpret_cast there and back). */
struct MatmulDesc {
  uint32_t magic;
  cublasOperation_t transa, transb;
  cublasLtEpilogue_t epilogue;
  const void *bias;
  void *aux;        /* EPILOGUE_AUX_POINTER: GELU input, written by GELU_AUX*, read by DGELU */
  int64_t aux_ld;   /* EPILOGUE_AUX_LD */
  int32_t aux_type; /* EPILOGUE_AUX_DATA_TYPE: -1 (D's type) or a cudaDataType_t */
};
struct Layout {
  uint32_t magic;
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct Preference {
  uint32_t magic;
};

[[noreturn]] __attribute__((format(printf, 2, 3))) void unsupported(const char *fn, const char *fmt,
                                                                     ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cublas_emu: %s: unsupported ", fn);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

/* A caller error the real library reports as a status: said on stderr too, for the test logs. */
__attribute__((format(printf, 3, 4))) cublasStatus_t fail(cublasStatus_t st, const char *fn,
                                                          const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cublas_emu: %s: ", fn);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return st;
}

MatmulDesc *desc_of(cublasLtMatmulDesc_t d) {
  MatmulDesc *p = reinterpret_cast<MatmulDesc *>(d);
  return p && p->magic == MAGIC_DESC ? p : nullptr;
}
Layout *layout_of(cublasLtMatrixLayout_t l) {
  Layout *p = reinterpret_cast<Layout *>(l);
  return p && p->magic == MAGIC_LAYOUT ? p : nullptr;
}
Preference *pref_of(cublasLtMatmulPreference_t pr) {
  Preference *p = reinterpret_cast<Preference *>(pr);
  return p && p->magic == MAGIC_PREF ? p : nullptr;
}

bool known_type(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

bool gelu_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool aux_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU;
}
bool bias_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

const char *epilogue_name(uint32_t e) {
  switch (e) {
  case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
  case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
  case CUBLASLT_EPILOGUE_GELU: return "GELU";
  case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
  case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
  case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
  case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
  }
  return "DEFAULT";
}

/* Which GELU the emulated library computes (SCDINO_EMU_LT_GELU).  Read at every call, so that a
 * test can change it between calls; a value it does not know stops the program rather than
 * testing something else than was asked. */
enum GeluKind { GELU_TANH, GELU_ERF, GELU_WRONG, GELU_DECLINE };

GeluKind gelu_kind(const char *fn) {
  const char *v = getenv("SCDINO_EMU_LT_GELU");
  if (!v || !strcmp(v, "tanh")) return GELU_TANH;
  if (!strcmp(v, "erf")) return GELU_ERF;
  if (!strcmp(v, "wrong")) return GELU_WRONG;
  if (!strcmp(v, "decline")) return GELU_DECLINE;
  unsupported(fn, "SCDINO_EMU_LT_GELU=%s (tanh, erf, wrong or decline)", v);
}

/* GELU and its derivative in float.  tanh: the approximation of Hendrycks and Gimpel that llm.c
 * and Transformer Engine assume; erf: the exact one, via erfc so that the negative tail keeps its
 * relative accuracy; wrong: the sigmoid approximation, which a caller's probe must reject. */
constexpr float SQRT_2_OVER_PI = 0.7978845608f, GELU_A = 0.044715f, SQRT_HALF = 0.7071067812f,
                INV_SQRT_2PI = 0.3989422804f, SIGMOID_A = 1.702f;

float gelu(GeluKind kind, float x) {
  if (kind == GELU_ERF) return 0.5f * x * erfcf(-x * SQRT_HALF);
  if (kind == GELU_WRONG) return x / (1.0f + expf(-SIGMOID_A * x));
  const float t = tanhf(SQRT_2_OVER_PI * (x + GELU_A * x * x * x));
  return 0.5f * x * (1.0f + t);
}

float gelu_grad(GeluKind kind, float x) {
  if (kind == GELU_ERF)
    return 0.5f * erfcf(-x * SQRT_HALF) + x * INV_SQRT_2PI * expf(-0.5f * x * x);
  if (kind == GELU_WRONG) {
    const float s = 1.0f / (1.0f + expf(-SIGMOID_A * x));
    return s + SIGMOID_A * x * s * (1.0f - s);
  }
  const float t = tanhf(SQRT_2_OVER_PI * (x + GELU_A * x * x * x));
  return 0.5f * (1.0f + t) +
         0.5f * x * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_A * x * x);
}

/* The (A = B, D) combinations with CUBLAS_COMPUTE_32F and fp32 scale that the backend uses. */
bool supported_combination(cudaDataType_t ab, cudaDataType_t d) {
  return (ab == CUDA_R_32F && d == CUDA_R_32F) || (ab == CUDA_R_16BF && d == CUDA_R_16BF) ||
         (ab == CUDA_R_16BF && d == CUDA_R_32F) || (ab == CUDA_R_16F && d == CUDA_R_16F) ||
         (ab == CUDA_R_16F && d == CUDA_R_32F);
}

inline float load(const void *p, cudaDataType_t t, size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float *>(p)[i];
  if (t == CUDA_R_16F) return __half2float(static_cast<const __half *>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
}

inline void store(void *p, cudaDataType_t t, size_t i, float v) {
  if (t == CUDA_R_32F)
    static_cast<float *>(p)[i] = v;
  else if (t == CUDA_R_16F)
    static_cast<__half *>(p)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
}

/* One column-major product; types and dimensions already checked. */
struct Gemm {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  const void *A;
  cudaDataType_t at;
  int64_t lda;
  const void *B;
  cudaDataType_t bt;
  int64_t ldb;
  const void *C; /* not read when beta == 0 */
  cudaDataType_t ct;
  int64_t ldc;
  void *D;
  cudaDataType_t dt;
  int64_t ldd;
  const void *bias; /* NULL: none; else m values of type dt, added to every column */
  void *bgrad;      /* NULL: none; else n values of type dt: the column sums of op(B) over k */
  enum { ACT_NONE, ACT_GELU, ACT_DGELU } act;
  GeluKind gelu;
  void *aux;        /* m x n of type dt, leading dimension auxld: ACT_GELU's input is stored
                       there (NULL: not stored), ACT_DGELU's GELU input read from there */
  int64_t auxld;
};

void run_gemm(const Gemm &g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  if (m <= 0 || n <= 0) return;
  /* op(A) widened to an m x k column-major float matrix and op(B) to k x n: the inner loop below
   * then streams contiguous floats whatever the transposes and types.  Copying first also makes
   * the result independent of D overlapping A or B. */
  thread_local std::vector<float> af, bf;
  af.resize((size_t)m * k);
  bf.resize((size_t)k * n);
  for (int64_t p = 0; p < k; p++)
    for (int64_t i = 0; i < m; i++)
      af[(size_t)p * m + i] =
          load(g.A, g.at, g.ta ? (size_t)i * g.lda + p : (size_t)p * g.lda + i);
  for (int64_t j = 0; j < n; j++)
    for (int64_t p = 0; p < k; p++)
      bf[(size_t)j * k + p] =
          load(g.B, g.bt, g.tb ? (size_t)p * g.ldb + j : (size_t)j * g.ldb + p);

  /* The float product by OpenBLAS (fp32 accumulation, as the tensor cores'), then alpha, beta C
   * and the bias in float, rounded once to D's type. */
  thread_local std::vector<float> prod;
  prod.resize((size_t)m * n);
  cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f, af.data(),
              (blasint)m, bf.data(), (blasint)k, 0.0f, prod.data(), (blasint)m);
  for (int64_t jj = 0; jj < n; jj++) {
    const size_t j = (size_t)jj;
    for (int64_t ii = 0; ii < m; ii++) {
      const size_t i = (size_t)ii;
      float r = g.alpha * prod[j * (size_t)m + i];
      if (g.beta != 0.0f) r += g.beta * load(g.C, g.ct, j * g.ldc + i);
      if (g.bias) r += load(g.bias, g.dt, i);
      if (g.act == Gemm::ACT_GELU) {
        if (g.aux) store(g.aux, g.dt, j * (size_t)g.auxld + i, r);
        r = gelu(g.gelu, r); /* of the float sum, not of the rounded aux */
      } else if (g.act == Gemm::ACT_DGELU) {
        r *= gelu_grad(g.gelu, load(g.aux, g.dt, j * (size_t)g.auxld + i));
      }
      store(g.D, g.dt, j * g.ldd + i, r);
    }
  }
  /* BGRADB: op(B)'s columns summed in float in order of k, from the widened copy (B may be D). */
  if (g.bgrad) {
    const char *bg = getenv("SCDINO_EMU_LT_BGRADB");
    const float f = bg && !strcmp(bg, "wrong") ? 2.0f : 1.0f;
    for (int64_t j = 0; j < n; j++) {
      float sum = 0.0f;
      for (int64_t p = 0; p < k; p++) sum += bf[(size_t)j * k + p];
      store(g.bgrad, g.dt, (size_t)j, f * sum);
    }
  }
}

const char *op_name(cublasOperation_t op) { return op == CUBLAS_OP_N ? "N" : "T"; }

/* Checks a cuBLASLt problem (shared by the heuristic and the matmul); fills g but its pointers. */
cublasStatus_t lt_problem(const char *fn, const MatmulDesc *d, const Layout *la, const Layout *lb,
                          const Layout *lc, const Layout *ld, Gemm *g) {
  if (!d || !la || !lb || !lc || !ld) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "bad descriptor");
  if (la->type != lb->type)
    unsupported(fn, "A/B type combination %d/%d", (int)la->type, (int)lb->type);
  if (lc->type != ld->type)
    unsupported(fn, "C/D type combination %d/%d", (int)lc->type, (int)ld->type);
  if (!supported_combination(la->type, ld->type))
    unsupported(fn, "A/D type combination %d/%d", (int)la->type, (int)ld->type);
  if (d->aux_type != -1 && d->aux_type != (int32_t)ld->type)
    unsupported(fn, "aux data type %d with D type %d", (int)d->aux_type, (int)ld->type);
  g->ta = d->transa == CUBLAS_OP_T;
  g->tb = d->transb == CUBLAS_OP_T;
  const uint64_t m = ld->rows, n = ld->cols, k = g->ta ? la->rows : la->cols;
  if ((g->ta ? la->cols : la->rows) != m || (g->tb ? lb->rows : lb->cols) != n ||
      (g->tb ? lb->cols : lb->rows) != k || lc->rows != m || lc->cols != n)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                "inconsistent shapes: op%s(A) from %llux%llu, op%s(B) from %llux%llu, C %llux%llu, "
                "D %llux%llu",
                op_name(d->transa), (unsigned long long)la->rows, (unsigned long long)la->cols,
                op_name(d->transb), (unsigned long long)lb->rows, (unsigned long long)lb->cols,
                (unsigned long long)lc->rows, (unsigned long long)lc->cols,
                (unsigned long long)m, (unsigned long long)n);
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    unsupported(fn, "matrix size %llux%llux%llu", (unsigned long long)m, (unsigned long long)n,
                (unsigned long long)k);
  const Layout *l[4] = {la, lb, lc, ld};
  for (const Layout *x : l)
    if (x->ld < (int64_t)std::max<uint64_t>(x->rows, 1))
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "leading dimension %lld < rows %llu",
                  (long long)x->ld, (unsigned long long)x->rows);
  g->m = (int64_t)m;
  g->n = (int64_t)n;
  g->k = (int64_t)k;
  g->at = la->type;
  g->bt = lb->type;
  g->ct = lc->type;
  g->dt = ld->type;
  g->lda = la->ld;
  g->ldb = lb->ld;
  g->ldc = lc->ld;
  g->ldd = ld->ld;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T> cublasStatus_t read_attr(const char *fn, const void *buf, size_t size, T *v) {
  if (!buf || size != sizeof(T))
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "attribute buffer of %zu bytes, expected %zu",
                size, sizeof(T));
  memcpy(v, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

} // namespace

/* extern "C" again, so a definition whose signature drifted from the header is a compile error
 * rather than a C++ overload the linker never uses. */
extern "C" {

/* ---- cuBLAS (attention_gemm.cu) ------------------------------------------------------------- */

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate", "NULL handle pointer");
  *handle = new cublasContext{MAGIC_BLAS, CUBLAS_DEFAULT_MATH, 0};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (!handle || handle->magic != MAGIC_BLAS) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle || handle->magic != MAGIC_BLAS) return CUBLAS_STATUS_NOT_INITIALIZED;
  /* DEFAULT and PEDANTIC compute fp32 in fp32 with CUBLAS_COMPUTE_32F, as this emulation does; the
   * DISALLOW_REDUCED_PRECISION_REDUCTION flag only forbids what it never does.  TF32 or the
   * emulated-fp32 modes would change results. */
  const unsigned base = (unsigned)mode & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_PEDANTIC_MATH)
    unsupported("cublasSetMathMode", "math mode %d", (int)mode);
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                cublasOperation_t transb, int m, int n, int k,
                                                const void *alpha, const void *const Aarray[],
                                                cudaDataType Atype, int lda,
                                                const void *const Barray[], cudaDataType Btype,
                                                int ldb, const void *beta, void *const Carray[],
                                                cudaDataType Ctype, int ldc, int batchCount,
                                                cublasComputeType_t computeType,
                                                cublasGemmAlgo_t algo) {
  static const char fn[] = "cublasGemmBatchedEx";
  if (!handle || handle->magic != MAGIC_BLAS) return CUBLAS_STATUS_NOT_INITIALIZED;
  emu_stream_force(handle->stream); /* its stream's earlier work first; this product runs now */
  if (transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) unsupported(fn, "transa %d", (int)transa);
  if (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T) unsupported(fn, "transb %d", (int)transb);
  if (computeType != CUBLAS_COMPUTE_32F) unsupported(fn, "compute type %d", (int)computeType);
  if (algo != CUBLAS_GEMM_DEFAULT) unsupported(fn, "algo %d", (int)algo);
  if (!known_type(Atype)) unsupported(fn, "A type %d", (int)Atype);
  if (Btype != Atype) unsupported(fn, "A/B type combination %d/%d", (int)Atype, (int)Btype);
  if (!supported_combination(Atype, Ctype))
    unsupported(fn, "A/C type combination %d/%d", (int)Atype, (int)Ctype);
  const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || lda < std::max(1, ta ? k : m) ||
      ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m))
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                "m %d n %d k %d lda %d ldb %d ldc %d batch %d (trans %s%s)", m, n, k, lda, ldb,
                ldc, batchCount, op_name(transa), op_name(transb));
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  /* the handle's pointer mode is always host: cublasSetPointerMode is not provided */
  if (!alpha || !beta || !Aarray || !Barray || !Carray)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "NULL scalar or pointer array");
  Gemm g;
  g.ta = ta;
  g.tb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = *static_cast<const float *>(alpha);
  g.beta = *static_cast<const float *>(beta);
  g.at = Atype;
  g.lda = lda;
  g.bt = Btype;
  g.ldb = ldb;
  g.ct = g.dt = Ctype;
  g.ldc = g.ldd = ldc;
  g.bias = nullptr;
  g.bgrad = nullptr;
  g.act = Gemm::ACT_NONE;
  g.gelu = GELU_TANH;
  g.aux = nullptr;
  g.auxld = 0;
  for (int b = 0; b < batchCount; b++) {
    g.A = Aarray[b];
    g.B = Barray[b];
    g.C = g.D = Carray[b];
    run_gemm(g);
  }
  emu_count_launch("cublasGemmBatchedEx", 0, 0);
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLASLt: handle and status (gemm_lt.cu, backend_cuda.cu, cuda_check.h) ---------------- */

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *lightHandle) {
  if (!lightHandle) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate", "NULL handle pointer");
  *lightHandle = new cublasLtContext{MAGIC_LT};
  return CUBLAS_STATUS_SUCCESS;
}

size_t CUBLASWINAPI cublasLtGetVersion(void) { return CUBLAS_VERSION; }

const char *CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char *CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED: return "resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
  case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  case CUBLAS_STATUS_LICENSE_ERROR: return "license error";
  }
  return "unknown error";
}

/* ---- cuBLASLt: descriptors -------------------------------------------------------------------- */

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                                     cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  static const char fn[] = "cublasLtMatmulDescCreate";
  if (!matmulDesc) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "NULL descriptor pointer");
  if (computeType != CUBLAS_COMPUTE_32F) unsupported(fn, "compute type %d", (int)computeType);
  if (scaleType != CUDA_R_32F) unsupported(fn, "scale type %d", (int)scaleType);
  MatmulDesc *d = new MatmulDesc{MAGIC_DESC, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT,
                                 nullptr, nullptr, 0, -1};
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  MatmulDesc *d = desc_of(matmulDesc);
  if (!d) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy", "bad descriptor");
  d->magic = MAGIC_DEAD;
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void *buf, size_t sizeInBytes) {
  static const char fn[] = "cublasLtMatmulDescSetAttribute";
  MatmulDesc *d = desc_of(matmulDesc);
  if (!d) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "bad descriptor");
  cublasStatus_t st;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
  case CUBLASLT_MATMUL_DESC_TRANSB: {
    int32_t op = 0;
    if ((st = read_attr(fn, buf, sizeInBytes, &op)) != CUBLAS_STATUS_SUCCESS) return st;
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T)
      unsupported(fn, "%s %d", attr == CUBLASLT_MATMUL_DESC_TRANSA ? "TRANSA" : "TRANSB", (int)op);
    (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = (cublasOperation_t)op;
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATMUL_DESC_EPILOGUE: {
    uint32_t epi = 0;
    if ((st = read_attr(fn, buf, sizeInBytes, &epi)) != CUBLAS_STATUS_SUCCESS) return st;
    /* not DGELU_BGRAD (its bias gradient would be a second reduction to emulate), nor ReLU */
    if (epi != CUBLASLT_EPILOGUE_DEFAULT && epi != CUBLASLT_EPILOGUE_BIAS &&
        epi != CUBLASLT_EPILOGUE_BGRADB && !gelu_epilogue(epi) && epi != CUBLASLT_EPILOGUE_DGELU)
      unsupported(fn, "epilogue %u", (unsigned)epi);
    d->epilogue = (cublasLtEpilogue_t)epi;
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return read_attr(fn, buf, sizeInBytes, &d->bias);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    return read_attr(fn, buf, sizeInBytes, &d->aux); /* checked by the matmul that uses it */
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
    return read_attr(fn, buf, sizeInBytes, &d->aux_ld);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: {
    int32_t t = 0;
    if ((st = read_attr(fn, buf, sizeInBytes, &t)) != CUBLAS_STATUS_SUCCESS) return st;
    /* only D's type is emulated; that it is D's is checked once D's layout is known */
    if (t != -1 && !known_type((cudaDataType_t)t)) unsupported(fn, "aux data type %d", (int)t);
    d->aux_type = t;
    return CUBLAS_STATUS_SUCCESS;
  }
  default:
    /* pointer mode, scale/compute type changes, bias type, batch strides, scaling pointers, ...:
     * all change the result and none is used by the backend */
    unsupported(fn, "attribute %d", (int)attr);
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  static const char fn[] = "cublasLtMatrixLayoutCreate";
  if (!matLayout) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "NULL layout pointer");
  if (!known_type(type)) unsupported(fn, "data type %d", (int)type);
  Layout *l = new Layout{MAGIC_LAYOUT, type, rows, cols, ld};
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  Layout *l = layout_of(matLayout);
  if (!l) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy", "bad layout");
  l->magic = MAGIC_DEAD;
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  if (!pref)
    return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate", "NULL pointer");
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference{MAGIC_PREF});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  Preference *p = pref_of(pref);
  if (!p) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy", "bad preference");
  p->magic = MAGIC_DEAD;
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
    size_t sizeInBytes) {
  static const char fn[] = "cublasLtMatmulPreferenceSetAttribute";
  if (!pref_of(pref)) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "bad preference");
  /* These only narrow the choice of algorithm; the one emulated algorithm needs no workspace, any
   * alignment, and never splits k (so every reduction scheme mask admits it). */
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: {
    uint64_t v = 0;
    return read_attr(fn, buf, sizeInBytes, &v);
  }
  case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
    uint32_t v = 0;
    return read_attr(fn, buf, sizeInBytes, &v);
  }
  default:
    unsupported(fn, "attribute %d", (int)attr);
  }
}

/* ---- cuBLASLt: heuristic and matmul ----------------------------------------------------------- */

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount) {
  static const char fn[] = "cublasLtMatmulAlgoGetHeuristic";
  if (!lightHandle || lightHandle->magic != MAGIC_LT) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount || !pref_of(preference))
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "bad arguments");
  Gemm g;
  const cublasStatus_t st = lt_problem(fn, desc_of(operationDesc), layout_of(Adesc),
                                       layout_of(Bdesc), layout_of(Cdesc), layout_of(Ddesc), &g);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const char *bg = getenv("SCDINO_EMU_LT_BGRADB");
  const uint32_t epi = desc_of(operationDesc)->epilogue;
  const GeluKind gk = gelu_kind(fn); /* checked whatever the epilogue: a typo is said at once */
  if ((epi == CUBLASLT_EPILOGUE_BGRADB && bg && !strcmp(bg, "decline")) ||
      ((gelu_epilogue(epi) || epi == CUBLASLT_EPILOGUE_DGELU) && gk == GELU_DECLINE)) {
    *returnAlgoCount = 0; /* what cuBLASLt answers when no algorithm has the epilogue */
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  /* Asked for several, three candidates that compute the same (data[1] tells them apart): enough
   * for &gpu gemm_tune's timing to run each, and to show an accumulating GEMM that it ran
   * into the caller's output more than once. */
  const int n = requestedAlgoCount < 3 ? requestedAlgoCount : 3;
  for (int i = 0; i < n; i++) {
    cublasLtMatmulHeuristicResult_t &r = heuristicResultsArray[i];
    memset(&r, 0, sizeof r);
    r.algo.data[0] = ALGO_TAG;
    r.algo.data[1] = (uint64_t)i;
    r.workspaceSize = 0;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
  }
  *returnAlgoCount = n;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle,
                                           cublasLtMatmulDesc_t computeDesc, const void *alpha,
                                           const void *A, cublasLtMatrixLayout_t Adesc,
                                           const void *B, cublasLtMatrixLayout_t Bdesc,
                                           const void *beta, const void *C,
                                           cublasLtMatrixLayout_t Cdesc, void *D,
                                           cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t *algo, void *workspace,
                                           size_t workspaceSizeInBytes, cudaStream_t stream) {
  static const char fn[] = "cublasLtMatmul";
  (void)workspace; /* no workspace needed: k is never split */
  (void)workspaceSizeInBytes;
  if (!lightHandle || lightHandle->magic != MAGIC_LT) return CUBLAS_STATUS_NOT_INITIALIZED;
  emu_stream_force(stream); /* its stream's earlier work first; this product runs now */
  if (algo && algo->data[0] != ALGO_TAG)
    unsupported(fn, "algo (not from cublasLtMatmulAlgoGetHeuristic) %llu",
                (unsigned long long)algo->data[0]);
  const MatmulDesc *d = desc_of(computeDesc);
  Gemm g;
  const cublasStatus_t st = lt_problem(fn, d, layout_of(Adesc), layout_of(Bdesc), layout_of(Cdesc),
                                       layout_of(Ddesc), &g);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!alpha || !beta) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "NULL alpha or beta");
  /* scale type fp32, pointer mode host: both checked when the descriptor was built */
  g.alpha = *static_cast<const float *>(alpha);
  g.beta = *static_cast<const float *>(beta);
  if (g.m > 0 && g.n > 0 && (!D || (g.k > 0 && (!A || !B)) || (g.beta != 0.0f && !C)))
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "NULL matrix pointer");
  /* in place only with the same layout (cuBLASLt's rule): else C would be read after being written */
  if (C == D && g.beta != 0.0f && g.ldc != g.ldd)
    return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "C == D with ldc %lld != ldd %lld",
                (long long)g.ldc, (long long)g.ldd);
  g.A = A;
  g.B = B;
  g.C = C;
  g.D = D;
  g.bias = nullptr;
  g.bgrad = nullptr;
  g.act = Gemm::ACT_NONE;
  g.gelu = gelu_kind(fn);
  g.aux = nullptr;
  g.auxld = 0;
  const uint32_t epi = d->epilogue;
  if (bias_epilogue(epi)) {
    if (!d->bias)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "%s epilogue without a bias pointer",
                  epilogue_name(epi));
    g.bias = d->bias; /* BIAS_DATA_TYPE unset: the bias has D's type */
  }
  if (gelu_epilogue(epi) || epi == CUBLASLT_EPILOGUE_DGELU) {
    /* the heuristic found no algorithm; one passed anyway (or NULL) finds none either */
    if (g.gelu == GELU_DECLINE)
      return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                  "%s epilogue declined (SCDINO_EMU_LT_GELU=decline)", epilogue_name(epi));
    g.act = gelu_epilogue(epi) ? Gemm::ACT_GELU : Gemm::ACT_DGELU;
  }
  if (aux_epilogue(epi)) {
    /* AUX_LD: the header's rule for a GELU input matrix.  The 16-byte alignment is not in the
     * header (algorithms are chosen by the pointer's alignment): asked here so that a caller's
     * aux suits whichever algorithm a GPU's heuristic picks. */
    if (!d->aux)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "%s epilogue without an aux pointer",
                  epilogue_name(epi));
    if ((uintptr_t)d->aux % 16)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                  "%s epilogue: aux pointer %p not 16-byte aligned", epilogue_name(epi), d->aux);
    if (d->aux_ld % 8 || d->aux_ld < g.m)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                  "%s epilogue: aux leading dimension %lld not a multiple of 8 >= m %lld",
                  epilogue_name(epi), (long long)d->aux_ld, (long long)g.m);
    g.aux = d->aux;
    g.auxld = d->aux_ld;
  }
  if (d->epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    if (!d->bias)
      return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "BGRADB epilogue without a bias pointer");
    /* whether alpha scales the sums is not documented; the backend always passes 1 */
    if (g.alpha != 1.0f) unsupported(fn, "alpha %g with the BGRADB epilogue", (double)g.alpha);
    g.bgrad = const_cast<void *>(d->bias); /* the bias-gradient output, of D's type */
  }
  run_gemm(g);
  emu_count_launch("cublasLtMatmul", 0, 0);
  return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
