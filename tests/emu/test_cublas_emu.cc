/* test_cublas_emu.cc - self-test of tests/emu/cublas_emu.cc against a double-precision reference:
 * the shared helpers, cuBLASLt and cublasGemmBatchedEx over every combination, the loud failures,
 * and main(); the GELU epilogues' own tests are in test_cublas_emu_gelu.cc.
 *
 * Exercises every combination the CUDA backend uses: cuBLASLt as cuda/ops/gemm_lt.cu drives it (all
 * four transposes, fp32 / bf16 / bf16->fp32 / fp16 / fp16->fp32, BIAS and BGRADB epilogues, beta 0
 * over NaN-filled D, beta 1 in place, plus C distinct from D, and the heuristic declining BGRADB on
 * request) and cublasGemmBatchedEx as cuda/ops/attention_gemm.cu drives it (pointer arrays into
 * interleaved head layouts, the same types, scaled alpha), with odd sizes; then checks that
 * unsupported settings abort with a "cublas_emu:" message.
 * The GELU epilogues (GELU, GELU_AUX, GELU_BIAS, GELU_AUX_BIAS, DGELU) the same way, aux leading
 * dimensions above m, under the default GELU and SCDINO_EMU_LT_GELU=erf and wrong; the rest of
 * their tests are in test_cublas_emu_gelu.cc.
 *
 * Tolerance per element: (k + 4) 2^-24 S, S = |alpha| sum_p |a_ip b_pj| + |beta c_ij| + |bias_i|
 * (float accumulation), plus one rounding to D's type (round_tol: 2^-8 |ref| for bf16, 2^-11 |ref|
 * + 2^-25 for fp16); the
 * same for BGRADB's column sums, with S = sum_p |op(B)_pj|, and for the aux matrix; for the GELU
 * epilogues' D, see compare_gelu (test_cublas_emu_gelu.cc).
 * Padding around every output matrix must be left bit-for-bit unchanged, and so must C when C != D
 * and the aux matrix where it is not an output.
 *
 * g++ -std=c++17 -O2 -Wall -Wextra -I/usr/local/cuda/include tests/emu/cublas_emu.cc \
 *     tests/emu/test_cublas_emu.cc tests/emu/test_cublas_emu_gelu.cc -o /tmp/test_cublas_emu && \
 *     /tmp/test_cublas_emu */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "tests/emu/test_cublas_emu.h"

int checks, failures;

void check(bool ok, const char *fmt, ...) {
  checks++;
  if (ok) return;
  failures++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
double uniform(void) { /* in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

const char *tname(cudaDataType_t t) { return t == CUDA_R_32F ? "f32" : t == CUDA_R_16F ? "f16" : "bf16"; }

/* Element (i, j) of alpha op(A) op(B) + beta C (+ bias) in double; *tol: the float sum's error
 * bound, before any rounding to D's type. */
double reference(const Ref &r, int i, int j, double *tol) {
  double sum = 0, mag = 0;
  for (int p = 0; p < r.k; p++) {
    const double a = r.A->get(r.aoff + (r.ta ? (size_t)i * r.lda + p : (size_t)p * r.lda + i));
    const double b = r.B->get(r.boff + (r.tb ? (size_t)p * r.ldb + j : (size_t)j * r.ldb + p));
    sum += a * b;
    mag += fabs(a * b);
  }
  double ref = r.alpha * sum, S = fabs(r.alpha) * mag;
  if (r.beta != 0) {
    const double c = r.C->get(r.coff + (size_t)j * r.ldc + i);
    ref += r.beta * c;
    S += fabs(r.beta * c);
  }
  if (r.bias) {
    ref += r.bias->get(i);
    S += fabs(r.bias->get(i));
  }
  *tol = (r.k + 4) * ldexp(S, -24);
  return ref;
}

/* D of r against the reference; returns the number of bad elements. */
static int compare(const Ref &r, const char *what) {
  int bad = 0;
  for (int j = 0; j < r.n; j++)
    for (int i = 0; i < r.m; i++) {
      double tol;
      const double ref = reference(r, i, j, &tol);
      tol += round_tol(r.D->t, ref);
      const double got = r.D->get(r.doff + (size_t)j * r.ldd + i);
      if (!(fabs(got - ref) <= tol)) {
        if (bad++ < 3)
          fprintf(stderr, "  %s: D(%d,%d) = %.9g, reference %.9g, tolerance %.3g\n", what, i, j, got,
                  ref, tol);
      }
    }
  return bad;
}

/* Elements of D's buffer outside the matrix must keep their bytes. */
static bool padding_kept(const Buf &before, const Buf &after, size_t off, int m, int n, int ld) {
  const size_t e = after.esize(), count = after.bytes.size() / e;
  for (size_t x = 0; x < count; x++) {
    const bool inside = x >= off && (x - off) / ld < (size_t)n && (x - off) % ld < (size_t)m;
    if (!inside && memcmp(&before.bytes[x * e], &after.bytes[x * e], e)) return false;
  }
  return true;
}

/* ---- cuBLASLt, driven the way cuda/ops/gemm_lt.cu does ------------------------------------------- */

enum { EPI_NONE, EPI_BIAS, EPI_BGRADB, EPI_GELU, EPI_GELU_AUX, EPI_GELU_BIAS, EPI_GELU_AUX_BIAS,
       EPI_DGELU };
static const cublasLtEpilogue_t epilogues[] = {
    CUBLASLT_EPILOGUE_DEFAULT,   CUBLASLT_EPILOGUE_BIAS,          CUBLASLT_EPILOGUE_BGRADB,
    CUBLASLT_EPILOGUE_GELU,      CUBLASLT_EPILOGUE_GELU_AUX,      CUBLASLT_EPILOGUE_GELU_BIAS,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU};
static const char *epi_names[] = {"", " bias", " bgradb", " gelu", " gelu_aux", " gelu_bias",
                                  " gelu_aux_bias", " dgelu"};

/* BGRADB's output against the column sums of op(B) in double; returns the number of bad sums. */
static int compare_bgrad(const Buf &B, bool tb, int n, int k, int ldb, const Buf &bg,
                         const char *what) {
  int bad = 0;
  for (int j = 0; j < n; j++) {
    double ref = 0, S = 0;
    for (int p = 0; p < k; p++) {
      const double b = B.get(tb ? (size_t)p * ldb + j : (size_t)j * ldb + p);
      ref += b;
      S += fabs(b);
    }
    double tol = (k + 4) * ldexp(S, -24);
    tol += round_tol(bg.t, ref);
    if (!(fabs(bg.get(j) - ref) <= tol) && bad++ < 3)
      fprintf(stderr, "  %s: bias gradient %d = %.9g, reference %.9g, tolerance %.3g\n", what, j,
              bg.get(j), ref, tol);
  }
  return bad;
}

/* The GELU epilogues' aux matrix has a leading dimension of m rounded up to 8, plus aux_pad (a
 * multiple of 8); gelu: SCDINO_EMU_LT_GELU for the call (NULL: unset). */
static void test_lt(cublasLtHandle_t lt, bool ta, bool tb, int m, int n, int k, cudaDataType_t abt,
                    cudaDataType_t dt, float alpha, float beta, int epi, bool separate_c,
                    bool null_algo, int aux_pad = 0, const char *gelu = NULL) {
  char what[200];
  const bool with_bias = epi == EPI_BIAS || epi == EPI_GELU_BIAS || epi == EPI_GELU_AUX_BIAS;
  const bool is_gelu = epi >= EPI_GELU && epi <= EPI_GELU_AUX_BIAS;
  const bool aux_out = epi == EPI_GELU_AUX || epi == EPI_GELU_AUX_BIAS, aux_in = epi == EPI_DGELU;
  const int auxld = (m + 7) / 8 * 8 + aux_pad;
  int v = GELU_TANH;
  for (int x = 0; x < 3; x++)
    if (gelu && !strcmp(gelu, gelu_env[x])) v = x;
  snprintf(what, sizeof what, "Lt %s%s m%d n%d k%d %s->%s alpha %g beta %g%s%s%s", ta ? "T" : "N",
           tb ? "T" : "N", m, n, k, tname(abt), tname(dt), alpha, beta, epi_names[epi],
           separate_c ? " C!=D" : "", null_algo ? " algo NULL" : "");
  if (is_gelu || aux_in)
    snprintf(what + strlen(what), sizeof what - strlen(what), " aux_ld %d SCDINO_EMU_LT_GELU=%s",
             auxld, gelu ? gelu : "(unset)");
  const int arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
  const int lda = arows + 3, ldb = brows + 1, ldd = m + 2, ldc = separate_c ? m + 5 : ldd;
  Buf A(abt, (size_t)lda * acols), B(abt, (size_t)ldb * bcols), D(dt, (size_t)ldd * n);
  Buf C(dt, separate_c ? (size_t)ldc * n : 1), bias(dt, m), decoy(dt, m), bgrad(dt, n + 1);
  Buf aux(dt, (size_t)auxld * n), aux_decoy(dt, 8);
  if (aux_in) /* GELU inputs over the range where the GELUs differ and beyond */
    for (size_t x = 0; x < (size_t)auxld * n; x++) aux.set(x, 4 * uniform());
  else
    aux.fill_nan(); /* only written, and only by the _AUX epilogues */
  A.fill_random();
  B.fill_random();
  bias.fill_random();
  decoy.fill_random();
  bgrad.fill_nan(); /* only written, and only its first n elements */
  if (separate_c) {
    C.fill_random();
    D.fill_nan(); /* D is only written */
  } else if (beta == 0.0f) {
    D.fill_nan(); /* C == D is not read: NaN must not leak through */
  } else {
    D.fill_random();
  }
  const Buf D0 = D, C0 = C, aux0 = aux;
  if (gelu)
    setenv("SCDINO_EMU_LT_GELU", gelu, 1);
  else
    unsetenv("SCDINO_EMU_LT_GELU");

  cublasLtMatmulDesc_t op;
  CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (epi != EPI_NONE) {
    const cublasLtEpilogue_t e = epilogues[epi];
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    /* gemm_lt sets one bias for the heuristic and the call's own before each matmul */
    const void *p = decoy.p();
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p));
  }
  if (is_gelu || aux_in) { /* an aux pointer too, which GELU and GELU_BIAS must leave alone */
    void *p = aux_decoy.p();
    const int64_t l = auxld;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &l, sizeof l));
    const int32_t t = aux_pad ? (int32_t)dt : -1; /* D's type, said or left to the default */
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t,
                                      sizeof t));
  }
  cublasLtMatrixLayout_t la, lb, lc, ld;
  CK(cublasLtMatrixLayoutCreate(&la, abt, arows, acols, lda));
  CK(cublasLtMatrixLayoutCreate(&lb, abt, brows, bcols, ldb));
  CK(cublasLtMatrixLayoutCreate(&lc, dt, m, n, ldc));
  CK(cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = 32u << 20;
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                          sizeof ws));
  const uint32_t al = 4, red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, 4));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, 4));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, 4));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, 4));
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, 4));
  cublasLtMatmulHeuristicResult_t res;
  memset(&res, 0, sizeof res);
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, ld, pref, 1, &res, &found));
  check(found == 1 && res.state == CUBLAS_STATUS_SUCCESS, "%s: heuristic found %d state %d", what,
        found, (int)res.state);
  CK(cublasLtMatmulPreferenceDestroy(pref));
  if (epi != EPI_NONE) {
    const void *p = epi == EPI_BGRADB ? bgrad.p() : bias.p();
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p));
  }
  if (is_gelu || aux_in) {
    void *p = aux.p();
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p));
  }
  const cublasLtMatmulAlgo_t algo = res.algo; /* copied, as the plan cache does */
  std::vector<unsigned char> workspace(64);
  CK(cublasLtMatmul(lt, op, &alpha, A.p(), la, B.p(), lb, &beta, separate_c ? C.p() : D.p(), lc,
                    D.p(), ld, null_algo ? NULL : &algo, workspace.data(), workspace.size(),
                    (cudaStream_t)0));
  Ref r = {ta, tb, m, n, k, alpha, beta, &A, 0, lda, &B, 0, ldb,
           separate_c ? &C0 : &D0, 0, ldc, &D, 0, ldd, with_bias ? &bias : NULL};
  const int bad = is_gelu || aux_in ? compare_gelu(r, what, v, aux_in ? &aux : NULL, auxld)
                                    : compare(r, what);
  check(bad == 0, "%s: %d elements out of tolerance", what, bad);
  check(padding_kept(D0, D, 0, m, n, ldd), "%s: D padding changed", what);
  if (aux_out) { /* the GELU input: the sum of compare, rounded to D's type */
    Ref ra = r;
    ra.D = &aux;
    ra.ldd = auxld;
    const int bada = compare(ra, what);
    check(bada == 0, "%s: %d aux elements out of tolerance", what, bada);
    check(padding_kept(aux0, aux, 0, m, n, auxld), "%s: aux padding changed", what);
  } else if (is_gelu || aux_in) {
    check(aux.bytes == aux0.bytes, "%s: aux changed", what);
  }
  unsetenv("SCDINO_EMU_LT_GELU");
  if (epi == EPI_BGRADB) {
    const int badg = compare_bgrad(B, tb, n, k, ldb, bgrad, what);
    check(badg == 0, "%s: %d bias-gradient sums out of tolerance", what, badg);
    check(bgrad.get(n) != bgrad.get(n), "%s: bias gradient written past its n elements", what);
  }
  if (separate_c) check(C.bytes == C0.bytes, "%s: C changed", what);
  CK(cublasLtMatrixLayoutDestroy(la));
  CK(cublasLtMatrixLayoutDestroy(lb));
  CK(cublasLtMatrixLayoutDestroy(lc));
  CK(cublasLtMatrixLayoutDestroy(ld));
  CK(cublasLtMatmulDescDestroy(op));
}

/* ---- cublasGemmBatchedEx, driven the way cuda/ops/attention_gemm.cu does ------------------------- */

/* Every operand is `batch` matrices side by side in one buffer (the qkv / head layout): matrix b
 * starts at column offset b * rows of a row of length ld = batch * rows + pad. */
static void test_batched(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, cudaDataType_t abt,
                         cudaDataType_t ct, float alpha, float beta, int batch) {
  char what[200];
  snprintf(what, sizeof what, "GemmBatchedEx %s%s m%d n%d k%d %s->%s alpha %g beta %g batch %d",
           ta ? "T" : "N", tb ? "T" : "N", m, n, k, tname(abt), tname(ct), alpha, beta, batch);
  const int arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
  const int lda = batch * arows + 1, ldb = batch * brows + 2, ldc = batch * m + 3;
  Buf A(abt, (size_t)lda * acols), B(abt, (size_t)ldb * bcols), C(ct, (size_t)ldc * n);
  A.fill_random();
  B.fill_random();
  if (beta == 0.0f)
    C.fill_nan();
  else
    C.fill_random();
  const Buf C0 = C;
  std::vector<const void *> pa(batch), pb(batch);
  std::vector<void *> pc(batch);
  for (int b = 0; b < batch; b++) {
    pa[b] = A.at((size_t)b * arows);
    pb[b] = B.at((size_t)b * brows);
    pc[b] = C.at((size_t)b * m);
  }
  CK(cublasGemmBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                         &alpha, pa.data(), abt, lda, pb.data(), abt, ldb, &beta, pc.data(), ct,
                         ldc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  int bad = 0;
  for (int b = 0; b < batch; b++) {
    Ref r = {ta, tb, m, n, k, alpha, beta, &A, (size_t)b * arows, lda, &B, (size_t)b * brows, ldb,
             &C0, (size_t)b * m, ldc, &C, (size_t)b * m, ldc, NULL};
    bad += compare(r, what);
  }
  check(bad == 0, "%s: %d elements out of tolerance", what, bad);
  /* the columns' tails (rows batch*m .. ldc-1) belong to no matrix */
  check(padding_kept(C0, C, 0, batch * m, n, ldc), "%s: padding changed", what);
}

/* ---- loud failures ----------------------------------------------------------------------------- */

/* Runs f in a child; it must abort with stderr starting "cublas_emu: <fn>: unsupported" (and
 * containing `also`, if given). */
void expect_abort(const char *fn, void (*f)(void), const char *also) {
  int pfd[2];
  if (pipe(pfd)) {
    perror("pipe");
    exit(2);
  }
  fflush(NULL);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 2);
    close(pfd[0]);
    f();
    _exit(0);
  }
  close(pfd[1]);
  std::string err;
  char buf[512];
  ssize_t got;
  while ((got = read(pfd[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)got);
  close(pfd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string want = std::string("cublas_emu: ") + fn + ": unsupported";
  const bool said = err.compare(0, want.size(), want) == 0 && (!also || err.find(also) != err.npos);
  check(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && said,
        "%s: expected an abort with \"%s...%s\", got status %d, stderr \"%s\"", fn, want.c_str(),
        also ? also : "", status, err.c_str());
}

cublasLtMatmulDesc_t new_desc(void) {
  cublasLtMatmulDesc_t d;
  CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  return d;
}

static void abort_relu_epilogue(void) {
  const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_RELU_BIAS;
  cublasLtMatmulDescSetAttribute(new_desc(), CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
}
static void abort_bgrada_epilogue(void) {
  const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BGRADA;
  cublasLtMatmulDescSetAttribute(new_desc(), CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
}
static void abort_pointer_mode(void) {
  const int32_t pm = CUBLASLT_POINTER_MODE_HOST;
  cublasLtMatmulDescSetAttribute(new_desc(), CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm);
}
static void abort_bias_type(void) {
  const int32_t bt = CUDA_R_32F;
  cublasLtMatmulDescSetAttribute(new_desc(), CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
}
static void abort_conj(void) {
  const cublasOperation_t c = CUBLAS_OP_C;
  cublasLtMatmulDescSetAttribute(new_desc(), CUBLASLT_MATMUL_DESC_TRANSA, &c, sizeof c);
}
static void abort_tf32(void) {
  cublasLtMatmulDesc_t d;
  cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F);
}
static void abort_f64_layout(void) {
  cublasLtMatrixLayout_t l;
  cublasLtMatrixLayoutCreate(&l, CUDA_R_64F, 4, 4, 4);
}
static void abort_pref_waves(void) {
  cublasLtMatmulPreference_t p;
  CK(cublasLtMatmulPreferenceCreate(&p));
  const float w = 1.0f;
  cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, &w, sizeof w);
}
static void abort_lt_f32_to_bf16(void) {
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cublasLtMatrixLayout_t la, ld;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 4, 4, 4));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, 4, 4, 4));
  cublasLtMatmulPreference_t p;
  CK(cublasLtMatmulPreferenceCreate(&p));
  cublasLtMatmulHeuristicResult_t res;
  int found;
  cublasLtMatmulAlgoGetHeuristic(lt, new_desc(), la, la, ld, ld, p, 1, &res, &found);
}
static void abort_tf32_math(void) {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
}
static void abort_batched_f32_to_bf16(void) {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  float a[4] = {0}, one = 1, zero = 0;
  __nv_bfloat16 c[4];
  const void *pa[1] = {a};
  void *pc[1] = {c};
  cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, pa, CUDA_R_32F, 2, pa, CUDA_R_32F,
                      2, &zero, pc, CUDA_R_16BF, 2, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
static void abort_batched_tf32_compute(void) {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  float a[4] = {0}, one = 1, zero = 0;
  const void *pa[1] = {a};
  void *pc[1] = {a};
  cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, pa, CUDA_R_32F, 2, pa, CUDA_R_32F,
                      2, &zero, pc, CUDA_R_32F, 2, 1, CUBLAS_COMPUTE_32F_FAST_TF32,
                      CUBLAS_GEMM_DEFAULT);
}
/* BGRADB with alpha != 1: the emulator cannot know whether alpha scales the sums. */
static void abort_bgradb_alpha(void) {
  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  cublasLtMatmulDesc_t d = new_desc();
  const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BGRADB;
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
  float x[4] = {1, 2, 3, 4}, g[2], two = 2, zero = 0;
  const void *pg = g;
  cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pg, sizeof pg);
  cublasLtMatrixLayout_t l;
  cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 2, 2, 2);
  cublasLtMatmul(lt, d, &two, x, l, x, l, &zero, x, l, x, l, NULL, NULL, 0, 0);
}

cublasStatus_t heuristic_4x4(cublasLtHandle_t lt, cublasLtMatmulDesc_t d, cublasLtEpilogue_t e,
                             int *found) {
  if (e != CUBLASLT_EPILOGUE_DEFAULT)
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
  cublasLtMatrixLayout_t l;
  CK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4));
  cublasLtMatmulPreference_t p;
  CK(cublasLtMatmulPreferenceCreate(&p));
  cublasLtMatmulHeuristicResult_t res;
  *found = -1;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, d, l, l, l, l, p, 1, &res, found);
  CK(cublasLtMatmulPreferenceDestroy(p));
  CK(cublasLtMatrixLayoutDestroy(l));
  return st;
}

/* SCDINO_EMU_LT_BGRADB=decline: no algorithm for BGRADB (NOT_SUPPORTED, none found), the same
 * problem without the epilogue still has one. */
static void test_bgrad_decline(cublasLtHandle_t lt) {
  setenv("SCDINO_EMU_LT_BGRADB", "decline", 1);
  cublasLtMatmulDesc_t d = new_desc();
  int found;
  CK(heuristic_4x4(lt, d, CUBLASLT_EPILOGUE_DEFAULT, &found));
  check(found == 1, "plain problem with SCDINO_EMU_LT_BGRADB=decline: found %d", found);
  const cublasStatus_t st = heuristic_4x4(lt, d, CUBLASLT_EPILOGUE_BGRADB, &found);
  check(st == CUBLAS_STATUS_NOT_SUPPORTED && found == 0,
        "BGRADB with SCDINO_EMU_LT_BGRADB=decline: status %d, found %d", (int)st, found);
  unsetenv("SCDINO_EMU_LT_BGRADB");
  CK(heuristic_4x4(lt, d, CUBLASLT_EPILOGUE_BGRADB, &found));
  check(found == 1, "BGRADB without SCDINO_EMU_LT_BGRADB: found %d", found);
  CK(cublasLtMatmulDescDestroy(d));
}

/* Caller errors come back as CUBLAS_STATUS_INVALID_VALUE (their stderr note silenced here). */
static void test_invalid(cublasLtHandle_t lt, cublasHandle_t h) {
  fflush(stderr);
  const int saved = dup(2), null = open("/dev/null", O_WRONLY);
  dup2(null, 2);
  cublasLtMatmulDesc_t d = new_desc();
  cublasLtMatrixLayout_t la, lb, ld;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 5, 7, 5));  /* A 5 x 7: k = 7 */
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 6, 3, 6));  /* B 6 x 3: k = 6, mismatch */
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 5, 3, 4));  /* ld 4 < rows 5 */
  cublasLtMatmulPreference_t p;
  CK(cublasLtMatmulPreferenceCreate(&p));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  const cublasStatus_t s1 = cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, ld, ld, p, 1, &res, &found);
  float x[64] = {0}, one = 1, zero = 0;
  const void *px[1] = {x};
  void *py[1] = {x};
  const cublasStatus_t s2 =
      cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, px, CUDA_R_32F, 3, px,
                          CUDA_R_32F, 4, &zero, py, CUDA_R_32F, 4, 1, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT); /* lda 3 < m 4 */
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(null);
  check(s1 == CUBLAS_STATUS_INVALID_VALUE, "heuristic on mismatched shapes: status %d", (int)s1);
  check(s2 == CUBLAS_STATUS_INVALID_VALUE, "GemmBatchedEx with lda < m: status %d", (int)s2);
  CK(cublasLtMatrixLayoutDestroy(la));
  CK(cublasLtMatrixLayoutDestroy(lb));
  CK(cublasLtMatrixLayoutDestroy(ld));
  CK(cublasLtMatmulPreferenceDestroy(p));
  CK(cublasLtMatmulDescDestroy(d));
}

/* One bf16 product whose exact value sits halfway between two bf16 numbers: must round to even. */
static void test_rounding(cublasLtHandle_t lt) {
  Buf A(CUDA_R_16BF, 2), B(CUDA_R_16BF, 2), D(CUDA_R_16BF, 1);
  A.set(0, 1.0);
  A.set(1, 1.0);
  B.set(0, 1.0);
  B.set(1, 1.0 / 128); /* 1 + 2^-7: bf16 has 7 fraction bits, so this is exact... */
  const double halfway = 1.0 + 1.0 / 256;
  cublasLtMatmulDesc_t d = new_desc();
  cublasLtMatrixLayout_t la, lb, ld;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 1, 2, 1));
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 2, 1, 2));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, 1, 1, 1));
  float alpha = 1, beta = 0;
  CK(cublasLtMatmul(lt, d, &alpha, A.p(), la, B.p(), lb, &beta, D.p(), ld, D.p(), ld, NULL, NULL, 0,
                    0));
  check(D.get(0) == 1.0 + 1.0 / 128, "bf16 exact 1+2^-7: got %.9g", D.get(0));
  B.set(1, 1.0 / 256); /* ...and 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even is 1 */
  CK(cublasLtMatmul(lt, d, &alpha, A.p(), la, B.p(), lb, &beta, D.p(), ld, D.p(), ld, NULL, NULL, 0,
                    0));
  check(D.get(0) == 1.0, "bf16 halfway %.9g rounds to even 1: got %.9g", halfway, D.get(0));
  CK(cublasLtMatrixLayoutDestroy(la));
  CK(cublasLtMatrixLayoutDestroy(lb));
  CK(cublasLtMatrixLayoutDestroy(ld));
  CK(cublasLtMatmulDescDestroy(d));
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* static, as the backend keeps them: there is no destroy call to pair with the creates */
static cublasLtHandle_t lt;
static cublasHandle_t h;

int main(void) {
  CK(cublasLtCreate(&lt));
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, (cudaStream_t)0));
  CK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));

  check(cublasLtGetVersion() == CUBLAS_VERSION, "version %zu", cublasLtGetVersion());
  check(!strcmp(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED"),
        "status name");
  check(strlen(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE)) > 0, "status string");

  const cudaDataType_t combos[5][2] = {{CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF},
                                       {CUDA_R_16BF, CUDA_R_32F}, {CUDA_R_16F, CUDA_R_16F},
                                       {CUDA_R_16F, CUDA_R_32F}};
  const int sizes[][3] = {{7, 13, 33}, {13, 33, 7}, {33, 7, 13}, {1, 1, 1}, {130, 9, 257}};
  for (auto &c : combos)
    for (int t = 0; t < 4; t++)
      for (auto &s : sizes) {
        const bool ta = t & 1, tb = t & 2;
        /* gemm_lt: beta 0 (forward, dx) or 1 (dw, matmul_f32 accumulate), C == D, alpha 1 */
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_NONE, false, false);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 1.0f, EPI_NONE, false, false);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_BIAS, false, false);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 1.0f, EPI_BIAS, false, true);
        /* the weight gradient with its bias gradient: beta 1 in place (and 0) */
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 1.0f, EPI_BGRADB, false, false);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_BGRADB, true, true);
        /* beyond gemm_lt's use: C != D, other alpha and beta */
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], -0.75f, 1.0f, EPI_NONE, true, false);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 0.5f, -2.0f, EPI_BIAS, true, true);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_BIAS, true, false);
        /* attention_gemm: scale or 1 as alpha, beta 0; beta 1 too */
        test_batched(h, ta, tb, s[0], s[1], s[2], c[0], c[1], 0.125f, 0.0f, 3);
        test_batched(h, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, 1);
        test_batched(h, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 1.0f, 2);
        /* the GELU epilogues with the default GELU (tanh): the forward's with its aux (beta 0,
         * and 1 in place), the backward's DGELU, aux_ld above m (8 or 16 more) in some */
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_GELU, false, false, 0,
                NULL);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 1.0f, EPI_GELU_BIAS, true, true, 0,
                "tanh");
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_GELU_AUX, false, false, 8,
                NULL);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_GELU_AUX_BIAS, false,
                false, 0, NULL);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 1.0f, EPI_GELU_AUX_BIAS, false,
                true, 16, NULL);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], -0.75f, 1.0f, EPI_GELU_AUX_BIAS, true,
                false, 8, "tanh");
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_DGELU, false, false, 0,
                NULL);
        test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 1.0f, EPI_DGELU, true, true, 8,
                NULL);
        /* the other two GELUs the knob selects */
        for (const char *g : {"erf", "wrong"}) {
          test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 0.0f, EPI_GELU_AUX_BIAS, false,
                  false, 8, g);
          test_lt(lt, ta, tb, s[0], s[1], s[2], c[0], c[1], 1.0f, 1.0f, EPI_DGELU, true, false, 0,
                  g);
        }
      }
  test_rounding(lt);
  test_invalid(lt, h);
  test_bgrad_decline(lt);
  test_gelu(lt);

  expect_abort("cublasLtMatmulDescSetAttribute", abort_relu_epilogue);
  expect_abort("cublasLtMatmulDescSetAttribute", abort_bgrada_epilogue);
  test_gelu_aborts(); /* test_cublas_emu_gelu.cc */
  expect_abort("cublasLtMatmul", abort_bgradb_alpha);
  expect_abort("cublasLtMatmulDescSetAttribute", abort_pointer_mode);
  expect_abort("cublasLtMatmulDescSetAttribute", abort_bias_type);
  expect_abort("cublasLtMatmulDescSetAttribute", abort_conj);
  expect_abort("cublasLtMatmulDescCreate", abort_tf32);
  expect_abort("cublasLtMatrixLayoutCreate", abort_f64_layout);
  expect_abort("cublasLtMatmulPreferenceSetAttribute", abort_pref_waves);
  expect_abort("cublasLtMatmulAlgoGetHeuristic", abort_lt_f32_to_bf16);
  expect_abort("cublasSetMathMode", abort_tf32_math);
  expect_abort("cublasGemmBatchedEx", abort_batched_f32_to_bf16);
  expect_abort("cublasGemmBatchedEx", abort_batched_tf32_compute);

  { /* speed, for information: one 512^3 fp32 product */
    const int s = 512;
    std::vector<float> a((size_t)s * s, 0.5f), b((size_t)s * s, 0.25f), c((size_t)s * s);
    const void *pa[1] = {a.data()}, *pb[1] = {b.data()};
    void *pc[1] = {c.data()};
    float one = 1, zero = 0;
    const double t0 = now();
    CK(cublasGemmBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s, s, s, &one, pa, CUDA_R_32F, s, pb,
                           CUDA_R_32F, s, &zero, pc, CUDA_R_32F, s, 1, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
    const double dt = now() - t0;
    check(c[12345] == 0.125f * s, "512^3 product value %g", c[12345]);
    printf("512^3 fp32 GEMM: %.3f s (%.2f GFLOP/s)\n", dt, 2.0 * s * s * s / dt * 1e-9);
  }

  printf("%d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
