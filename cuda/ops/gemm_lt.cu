/* gemm_lt.cu - every GEMM of the CUDA backend through cuBLASLt, with a cache of plans per shape.
 *
 * bf16, f16 (or fp32) operands, fp32 accumulation (CUBLAS_COMPUTE_32F: tensor cores for bf16 and
 * f16, plain fp32 without TF32 for fp32), output of the operands' type or fp32, the Linear bias fused as the BIAS epilogue, and the
 * bias gradient summed by the weight gradient's GEMM as the BGRADB epilogue, and GELU (forward with
 * its input kept as the aux matrix, and its derivative) where the library's GELU is the model's
 * (gelu_gemm.cu decides that once, by a probe).  A plan (descriptors
 * and the algorithm cuBLASLt's heuristic picked) is built once per shape, types, epilogue and
 * operand alignment, then reused: the heuristic query costs more than a small GEMM.  When no
 * algorithm supports the epilogue for a shape, the plan runs the GEMM without it: the bias is then
 * added by a separate kernel, and a bias gradient is left to the caller (lt_matmul_bgradb).
 * &gpu gemm_tune = .true. times up to LT_CANDIDATES of the heuristic's algorithms at a plan's first
 * run (lt_tune) and keeps the fastest: the heuristic's first is not always that. */
#include "build_config.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda/ops/cuda_internal.h"

extern "C" {
#include "core/log.h"
}

#define LT_WORKSPACE (32u << 20) /* cuBLASLt's recommendation for Hopper */
#define LT_CANDIDATES 8            /* algorithms asked of the heuristic when tuning */

static cublasLtHandle_t lt;
static void *lt_ws;

struct lt_key {
  int transa, transb, m, n, k, lda, ldb, ldd;
  int at, bt, dt;
  int epi, accumulate; /* epi: the epilogue asked for, LT_* */
  int auxld;           /* GELU epilogues: the aux matrix's leading dimension */
  unsigned align[5]; /* A, B, D, bias, aux: largest power of two <= 256 dividing the address */
};

/* LT_GELU: GELU (after the bias when there is one), LT_GELU_AUX: the same, the GELU's input also
 * stored in aux; LT_DGELU: the product times GELU's derivative at aux. */
enum { LT_NONE, LT_BIAS, LT_BGRADB, LT_GELU, LT_GELU_AUX, LT_DGELU };

static cublasLtEpilogue_t lt_epilogue(int epi, int bias) {
  switch (epi) {
  case LT_BIAS: return CUBLASLT_EPILOGUE_BIAS;
  case LT_BGRADB: return CUBLASLT_EPILOGUE_BGRADB;
  case LT_GELU: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  case LT_GELU_AUX: return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  case LT_DGELU: return CUBLASLT_EPILOGUE_DGELU;
  default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

struct lt_plan {
  struct lt_key key;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo; /* the heuristic's first until tuned, then the fastest */
  cublasLtMatmulAlgo_t cand[LT_CANDIDATES]; /* the heuristic's usable answers, its order */
  int ncand, tuned;
  int epi; /* the epilogue it runs: key.epi, or LT_NONE when no algorithm had that one */
  long runs;
};

static std::vector<lt_plan> *plans;

/* Tuning: per-candidate timing events, the scratch output for accumulating GEMMs, and the totals
 * over the plans tuned since the last lt_forget (times of one GEMM, in microseconds). */
static cudaEvent_t tune_ev[2];
static void *tune_buf;
static size_t tune_bytes;
static int tune_shapes, tune_changed;
static double tune_us, tune_first_us;

/* &gpu gemm_tune (backend_cuda_set_gemm_tune): off unless asked. */
static int tuning;

void lt_set_tuning(int on) {
  if (tuning != !!on && cu.ready) lt_forget(); /* plans chosen the other way are dropped */
  tuning = !!on;
}

int lt_tuning(void) { return tuning; }

void lt_tuning_report(void) {
  if (!lt_tuning()) return;
  log_info("cuBLASLt tuning: %d GEMM shapes, %d changed; %.1f us per pass of each shape once "
           "against %.1f us with the heuristic's first choice",
           tune_shapes, tune_changed, tune_us, tune_first_us);
}

static unsigned align_of(const void *p) {
  const uintptr_t a = (uintptr_t)p;
  unsigned al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

void lt_init(void) {
  CHECK_CUBLAS(cublasLtCreate(&lt));
  lt_ws = cu_dev_alloc(LT_WORKSPACE, "cuBLASLt workspace");
  plans = new std::vector<lt_plan>();
}

/* y[j*ld + i] += b[i] for the m x n column-major result (bias of the same type as y). */
template <typename T> __global__ void bias_kernel(T *y, const T *b, int m, int n, int ld) {
  const size_t total = (size_t)m * n;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (size_t)gridDim.x * blockDim.x) {
    const int i = (int)(e % m);
    const size_t j = e / m;
    stf(&y[j * ld + i], ldf(&y[j * ld + i]) + ldf(&b[i]));
  }
}

static int build(struct lt_plan *p, const void *bias, const void *aux, int epi) {
  const struct lt_key *k = &p->key;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = k->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = k->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (epi != LT_NONE) {
    const cublasLtEpilogue_t e = lt_epilogue(epi, bias != NULL);
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    /* set now so the heuristic sees real pointers; lt_run sets each call's before running */
    if (bias)
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias));
    if (aux) {
      const int64_t ld = k->auxld;
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                  &aux, sizeof aux));
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                                  sizeof ld));
    }
  }
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->la, (cudaDataType_t)k->at, k->transa ? k->k : k->m,
                                          k->transa ? k->m : k->k, k->lda));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->lb, (cudaDataType_t)k->bt, k->transb ? k->n : k->k,
                                          k->transb ? k->k : k->n, k->ldb));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&p->ld, (cudaDataType_t)k->dt, k->m, k->n, k->ldd));
  cublasLtMatmulPreference_t pref;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = LT_WORKSPACE;
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof ws));
  const uint32_t aa = k->align[0], ab = k->align[1], ad = k->align[2];
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &aa, sizeof aa));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &ab, sizeof ab));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                    &ad, sizeof ad));
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                    &ad, sizeof ad));
  if (k->dt == CUDA_R_16BF || k->dt == CUDA_R_16F) {
    /* A split-K product may add its partial sums in the output type; in bf16 that rounds each
     * partial sum to 8 bits (f16: 11, and a range of 65504).  Only the fp32 workspace (or no
     * split) is allowed. */
    const uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                      &red, sizeof red));
  }
  /* untuned, the heuristic's first answer only (asking for more costs more) */
  cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
  int found = 0;
  memset(res, 0, sizeof res);
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->ld, p->ld, pref,
                                                     lt_tuning() ? LT_CANDIDATES : 1, res, &found);
  CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
  p->ncand = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < found && i < LT_CANDIDATES; i++)
      if (res[i].state == CUBLAS_STATUS_SUCCESS) p->cand[p->ncand++] = res[i].algo;
  if (p->ncand > 0) {
    p->algo = p->cand[0];
    p->epi = epi;
    return 1;
  }
  /* NOT_SUPPORTED (no algorithm) is an answer here, any other failure is an error */
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) CHECK_CUBLAS(st);
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->la));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->lb));
  CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p->ld));
  CHECK_CUBLAS(cublasLtMatmulDescDestroy(p->op));
  return 0;
}

static struct lt_plan *plan_for(const struct lt_key *key, const void *bias, const void *aux) {
  for (auto &p : *plans)
    if (!memcmp(&p.key, key, sizeof *key)) return &p;
  struct lt_plan p;
  memset(&p, 0, sizeof p);
  p.key = *key;
  if (!(key->epi != LT_NONE && build(&p, bias, aux, key->epi)) && !build(&p, NULL, NULL, LT_NONE))
    SCD_FAIL("cuBLASLt has no algorithm for the GEMM m=%d n=%d k=%d (trans %d%d, lda %d ldb %d "
             "ldd %d, types %d %d %d, alignment %u %u %u)",
             key->m, key->n, key->k, key->transa, key->transb, key->lda, key->ldb, key->ldd,
             key->at, key->bt, key->dt, key->align[0], key->align[1], key->align[2]);
  if (key->epi == LT_BGRADB && p.epi != LT_BGRADB) {
    static int said;
    (said++ ? log_detail : log_info)("cuBLASLt has no bias-gradient epilogue (BGRADB) for the weight "
                                     "gradient m=%d n=%d k=%d; a column-sum kernel sums that bias "
                                     "gradient", key->m, key->n, key->k);
  }
  if ((key->epi == LT_GELU || key->epi == LT_GELU_AUX || key->epi == LT_DGELU) && p.epi != key->epi) {
    static int said;
    (said++ ? log_detail : log_info)("cuBLASLt has no %s epilogue for the GEMM m=%d n=%d k=%d; GELU "
                                     "runs as a kernel of its own there",
                                     key->epi == LT_DGELU ? "GELU-derivative" : "GELU", key->m,
                                     key->n, key->k);
  }
  plans->push_back(p);
  return &plans->back();
}

void lt_forget(void) {
  CHECK_CUDA(cudaStreamSynchronize(cu.stream)); /* no queued GEMM still uses a descriptor */
  for (auto &p : *plans) {
    CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p.la));
    CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p.lb));
    CHECK_CUBLAS(cublasLtMatrixLayoutDestroy(p.ld));
    CHECK_CUBLAS(cublasLtMatmulDescDestroy(p.op));
  }
  plans->clear();
  cu_dev_free(tune_buf); /* the stream is idle (above) */
  tune_buf = NULL, tune_bytes = 0;
  tune_shapes = tune_changed = 0, tune_us = tune_first_us = 0; /* totals of the plans held */
}

/* Times each candidate of p (the mean of 3 runs, after all the warm-ups back to back: the GPU idled
 * at the last plan's wait, which the first timed would pay for) on this call's operands and keeps
 * the fastest in p->algo; the caller's run that follows writes the real result.  Run more than
 * once, an accumulating GEMM (beta != 0) or one whose D is the epilogue's aux input would corrupt
 * its operands: its candidates write a scratch copy of C instead.  Side outputs (BGRADB, GELU_AUX)
 * are rewritten by the real run.  A failing candidate is skipped (all fail: the first stays). */
static void lt_tune(struct lt_plan *p, const float *alpha, const void *A, const void *B,
                    const void *C, void *D, float beta, const void *aux) {
  const struct lt_key *k = &p->key;
  p->tuned = 1;
  for (int i = 0; i < 2; i++)
    if (!tune_ev[i]) CHECK_CUDA(cudaEventCreate(&tune_ev[i]));
  if (beta != 0.0f || aux == D) {
    const size_t es = k->dt == CUDA_R_32F ? 4 : 2;
    const size_t bytes = (size_t)k->ldd * k->n * es;
    if (bytes > tune_bytes) {
      CHECK_CUDA(cudaStreamSynchronize(cu.stream)); /* no queued candidate still uses it */
      cu_dev_free(tune_buf);
      tune_buf = cu_dev_alloc(bytes, "cuBLASLt tuning scratch");
      tune_bytes = bytes;
    }
    /* C's extent only: a column past the last one's m rows may lie outside its allocation */
    if (beta != 0.0f)
      CHECK_CUDA(cudaMemcpyAsync(tune_buf, C, ((size_t)(k->n - 1) * k->ldd + k->m) * es,
                                 cudaMemcpyDeviceToDevice, cu.stream));
    C = D = tune_buf;
  }
  float us[LT_CANDIDATES], ms = 0.0f; /* us: -1 where the candidate failed */
  int best = -1, failed = 0;
  for (int c = 0; c < p->ncand; c++)
    us[c] = cublasLtMatmul(lt, p->op, alpha, A, p->la, B, p->lb, &beta, C, p->ld, D, p->ld,
                           &p->cand[c], lt_ws, LT_WORKSPACE, cu.stream) == CUBLAS_STATUS_SUCCESS
                ? 0.0f
                : -1.0f;
  for (int c = 0; c < p->ncand; c++) {
    int ok = us[c] == 0.0f;
    us[c] = -1.0f;
    if (ok) CHECK_CUDA(cudaEventRecord(tune_ev[0], cu.stream));
    for (int r = 0; r < 3 && ok; r++)
      ok = cublasLtMatmul(lt, p->op, alpha, A, p->la, B, p->lb, &beta, C, p->ld, D, p->ld,
                          &p->cand[c], lt_ws, LT_WORKSPACE, cu.stream) == CUBLAS_STATUS_SUCCESS;
    failed |= !ok;
    if (!ok) continue;
    CHECK_CUDA(cudaEventRecord(tune_ev[1], cu.stream));
    CHECK_CUDA(cudaEventSynchronize(tune_ev[1]));
    CHECK_CUDA(cudaEventElapsedTime(&ms, tune_ev[0], tune_ev[1]));
    us[c] = ms * 1000.0f / 3.0f;
    if (best < 0 || us[c] < us[best]) best = c;
  }
  if (failed) (void)cudaGetLastError(); /* a launch error a failed candidate may have left */
  if (best < 0) return;
  const double first = us[0] >= 0.0f ? us[0] : us[best]; /* no time of the first: no gain */
  tune_shapes++;
  tune_us += us[best];
  tune_first_us += first;
  if (best == 0) return;
  p->algo = p->cand[best];
  tune_changed++;
  log_detail("cuBLASLt tuning: GEMM m=%d n=%d k=%d (trans %d%d): candidate %d of %d, %.1f us "
             "against the heuristic's %.1f us",
             k->m, k->n, k->k, k->transa, k->transb, best + 1, p->ncand, us[best], first);
}

/* D = op(A) op(B) + beta C with the epilogue epi on ptr (the bias, or the bias-gradient output) and
 * aux (GELU epilogues: leading dimension auxld), C (NULL: D) of D's type and layout; returns the
 * epilogue the plan ran; *first (when not NULL) says whether the plan ran for the first time.
 * strict: where the plan has no algorithm with epi, nothing runs (returns LT_NONE). */
static int lt_run(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                  int lda, const void *B, cudaDataType_t bt, int ldb, const void *C, void *D,
                  cudaDataType_t dt, int ldd, float beta, int epi, const void *ptr, int *first,
                  const void *aux = NULL, int auxld = 0, int strict = 0) {
  if (!C) C = D;
  struct lt_key key;
  memset(&key, 0, sizeof key);
  key.transa = transa;
  key.transb = transb;
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = lda;
  key.ldb = ldb;
  key.ldd = ldd;
  key.at = (int)at;
  key.bt = (int)bt;
  key.dt = (int)dt;
  key.epi = epi;
  key.accumulate = beta != 0.0f;
  key.align[0] = align_of(A);
  key.align[1] = align_of(B);
  key.align[2] = align_of(D) < align_of(C) ? align_of(D) : align_of(C); /* one preference for both */
  key.align[3] = ptr ? align_of(ptr) : 0;
  key.align[4] = aux ? align_of(aux) : 0;
  key.auxld = auxld;
  struct lt_plan *p = plan_for(&key, ptr, aux);
  if (strict && p->epi != epi) return LT_NONE;
  if (p->epi != LT_NONE && ptr)
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr,
                                                sizeof ptr));
  if (p->epi != LT_NONE && aux)
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &aux, sizeof aux));
  const float alpha = 1.0f; /* 1 with BGRADB too: whether alpha would scale its sums is not said */
  if (!p->tuned && p->ncand > 1) lt_tune(p, &alpha, A, B, C, D, beta, aux);
  CHECK_CUBLAS(cublasLtMatmul(lt, p->op, &alpha, A, p->la, B, p->lb, &beta, C, p->ld, D, p->ld,
                              &p->algo, lt_ws, LT_WORKSPACE, cu.stream));
  if (first) *first = p->runs == 0;
  p->runs++;
  return p->epi;
}

/* D = beta D when the sum over k is empty. */
static void lt_empty(int m, int n, void *D, cudaDataType_t dt, int ldd, float beta) {
  SCD_ASSERT(beta == 0.0f || beta == 1.0f);
  if (beta == 0.0f)
    for (int j = 0; j < n; j++)
      CHECK_CUDA(cudaMemsetAsync((char *)D + (size_t)j * ldd * (dt == CUDA_R_32F ? 4 : 2), 0,
                                 (size_t)m * (dt == CUDA_R_32F ? 4 : 2), cu.stream));
}

/* lt_matmul with C (NULL: D). */
static void lt_gemm(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                    int lda, const void *B, cudaDataType_t bt, int ldb, const void *C, void *D,
                    cudaDataType_t dt, int ldd, float beta, const void *bias) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    SCD_ASSERT(!bias && (!C || C == D));
    lt_empty(m, n, D, dt, ldd, beta);
    return;
  }
  /* The BIAS epilogue only for a 16-byte aligned bias: the heuristic takes no alignment for it
   * (there is no MIN_ALIGNMENT preference for the bias) and a kernel that vector-loads an unaligned
   * one faults; such a bias (only in tests: model tensors are 16-element aligned) gets
   * bias_kernel after the GEMM instead. */
  const int epi = bias != NULL && align_of(bias) >= 16 ? LT_BIAS : LT_NONE;
  const int ran = lt_run(transa, transb, m, n, k, A, at, lda, B, bt, ldb, C, D, dt, ldd, beta, epi,
                         epi == LT_BIAS ? bias : NULL, NULL);
  if (bias && ran != LT_BIAS) {
    if (dt == CUDA_R_32F)
      bias_kernel<float><<<cu_blocks((size_t)m * n, 256), 256, 0, cu.stream>>>(
          (float *)D, (const float *)bias, m, n, ldd);
    else if (dt == CUDA_R_16F)
      bias_kernel<f16><<<cu_blocks((size_t)m * n, 256), 256, 0, cu.stream>>>(
          (f16 *)D, (const f16 *)bias, m, n, ldd);
    else
      bias_kernel<bf16><<<cu_blocks((size_t)m * n, 256), 256, 0, cu.stream>>>(
          (bf16 *)D, (const bf16 *)bias, m, n, ldd);
    CHECK_LAUNCH();
  }
}

void lt_matmul(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
               int lda, const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt,
               int ldd, float beta, const void *bias) {
  lt_gemm(transa, transb, m, n, k, A, at, lda, B, bt, ldb, NULL, D, dt, ldd, beta, bias);
}

void lt_matmul_add(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                   int lda, const void *B, cudaDataType_t bt, int ldb, const void *C, void *D,
                   cudaDataType_t dt, int ldd, const void *bias) {
  SCD_ASSERT(k > 0 || m <= 0 || n <= 0);
  lt_gemm(transa, transb, m, n, k, A, at, lda, B, bt, ldb, C, D, dt, ldd, 1.0f, bias);
}

int lt_matmul_bgradb(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                     int lda, const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt,
                     int ldd, float beta, void *bgrad, int *first) {
  *first = 0;
  if (m <= 0 || n <= 0 || k <= 0) {
    if (m > 0 && n > 0) lt_empty(m, n, D, dt, ldd, beta);
    return 0; /* the caller's column sum handles the empty cases */
  }
  return lt_run(transa, transb, m, n, k, A, at, lda, B, bt, ldb, NULL, D, dt, ldd, beta, LT_BGRADB,
                bgrad, first) == LT_BGRADB;
}

int lt_matmul_gelu(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                   int lda, const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt,
                   int ldd, const void *bias, void *pre) {
  SCD_ASSERT(m > 0 && n > 0 && k > 0);
  /* the bias epilogues take a 16-byte aligned bias only (lt_gemm); aux as the header requires */
  if ((bias && align_of(bias) < 16) || (pre && align_of(pre) < 16) || ldd % 8) return 0;
  return lt_run(transa, transb, m, n, k, A, at, lda, B, bt, ldb, NULL, D, dt, ldd, 0.0f,
                pre ? LT_GELU_AUX : LT_GELU, bias, NULL, pre, ldd, 1) != LT_NONE;
}

int lt_matmul_dgelu(int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at,
                    int lda, const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt,
                    int ldd, const void *pre) {
  SCD_ASSERT(m > 0 && n > 0 && k > 0);
  if (align_of(pre) < 16 || ldd % 8) return 0;
  return lt_run(transa, transb, m, n, k, A, at, lda, B, bt, ldb, NULL, D, dt, ldd, 0.0f, LT_DGELU,
                NULL, NULL, pre, ldd, 1) != LT_NONE;
}
