/* test_cublas_emu_gelu.cc - part of tests/emu/test_cublas_emu: the GELU epilogues of
 * tests/emu/cublas_emu.cc (GELU, GELU_AUX, GELU_BIAS, GELU_AUX_BIAS, DGELU) against the three
 * GELUs in double.
 *
 * test_lt (test_cublas_emu.cc) runs them over the main loop's shapes and types with compare_gelu,
 * aux leading dimensions above m; here, under each SCDINO_EMU_LT_GELU (tanh, erf, wrong: each
 * told apart from the other two; decline), GELU of the float sum rather than of the bf16 aux, and
 * the aux rules (INVALID_VALUE for a leading dimension not a multiple of 8 or below m, or a
 * misaligned pointer), and the settings the emulator does not support, which must abort. */
#include <fcntl.h>
#include <unistd.h>

#include "tests/emu/test_cublas_emu.h"

const char *gelu_env[3] = {"tanh", "erf", "wrong"};

/* The three GELUs and their derivatives, in double. */
/* The epilogue e on d, with the aux matrix at aux (leading dimension ld). */
static void set_epilogue(cublasLtMatmulDesc_t d, cublasLtEpilogue_t e, const void *aux, int64_t ld) {
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
}

static double gelu_ref(int v, double x) {
  if (v == GELU_ERF) return 0.5 * x * erfc(-x / sqrt(2.0));
  if (v == GELU_SIGMOID) return x / (1 + exp(-1.702 * x));
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_ref(int v, double x) {
  if (v == GELU_ERF) return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
  if (v == GELU_SIGMOID) {
    const double s = 1 / (1 + exp(-1.702 * x));
    return s + 1.702 * x * s * (1 - s);
  }
  const double t = tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

/* D against gelu(sum) (aux NULL: the GELU epilogues) or sum * gelu'(aux) (DGELU, aux of D's type
 * with leading dimension auxld), sum as in compare (test_cublas_emu.cc).  Tolerance: the sum's
 * bound times the largest slope of the three GELUs (< 1.2) or times |gelu'(aux)|, plus the float
 * evaluation of the function: 8 2^-24 (1 + |x|) for gelu(x), |sum| 16 2^-24 (1 + |x| (1 + 0.134
 * x^2)) for gelu'(x) (the tanh form's 1 - t^2 is only absolutely accurate), plus 2^-8 |ref| when
 * D is bf16. */
int compare_gelu(const Ref &r, const char *what, int v, const Buf *aux, int auxld) {
  int bad = 0;
  for (int j = 0; j < r.n; j++)
    for (int i = 0; i < r.m; i++) {
      double tol, ref;
      const double sum = reference(r, i, j, &tol);
      const double x = aux ? aux->get((size_t)j * auxld + i) : sum; /* the GELU input */
      if (!aux) {
        ref = gelu_ref(v, x);
        tol = 1.2 * tol + 8 * ldexp(1 + fabs(x), -24);
      } else {
        const double d = gelu_grad_ref(v, x);
        ref = sum * d;
        tol = fabs(d) * tol + 16 * ldexp(fabs(sum) * (1 + fabs(x) * (1 + 0.134 * x * x)), -24);
      }
      tol += round_tol(r.D->t, ref);
      const double got = r.D->get(r.doff + (size_t)j * r.ldd + i);
      if (!(fabs(got - ref) <= tol) && bad++ < 3)
        fprintf(stderr, "  %s: D(%d,%d) = %.9g, reference %.9g (%s %.9g), tolerance %.3g\n", what,
                i, j, got, ref, aux ? "gelu' of aux" : "gelu of", x, tol);
    }
  return bad;
}

/* ---- loud failures ----------------------------------------------------------------------------- */

static void abort_dgelu_bgrad_epilogue(void) {
  const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_DGELU_BGRAD;
  cublasLtMatmulDescSetAttribute(new_desc(), CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
}
static void abort_aux_batch_stride(void) {
  const int64_t s = 64;
  cublasLtMatmulDescSetAttribute(new_desc(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &s,
                                 sizeof s);
}
static void abort_aux_type_f64(void) {
  const int32_t t = CUDA_R_64F;
  cublasLtMatmulDescSetAttribute(new_desc(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t,
                                 sizeof t);
}
/* an aux of another type than D's (fp32 aux, bf16 D): a conversion the emulator does not do */
static void heuristic_bf16(cublasLtMatmulDesc_t d) {
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cublasLtMatrixLayout_t l;
  CK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 8, 8, 8));
  cublasLtMatmulPreference_t p;
  CK(cublasLtMatmulPreferenceCreate(&p));
  cublasLtMatmulHeuristicResult_t res;
  int found;
  cublasLtMatmulAlgoGetHeuristic(lt, d, l, l, l, l, p, 1, &res, &found);
}
static void abort_aux_type_mismatch(void) {
  cublasLtMatmulDesc_t d = new_desc();
  const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_GELU_AUX;
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
  const int32_t t = CUDA_R_32F;
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t, sizeof t));
  heuristic_bf16(d);
}
static void abort_gelu_knob(void) {
  setenv("SCDINO_EMU_LT_GELU", "sigmoid", 1); /* in the child only */
  heuristic_bf16(new_desc());
}

void test_gelu_aborts(void) {
  expect_abort("cublasLtMatmulDescSetAttribute", abort_dgelu_bgrad_epilogue);
  expect_abort("cublasLtMatmulDescSetAttribute", abort_aux_batch_stride);
  expect_abort("cublasLtMatmulDescSetAttribute", abort_aux_type_f64);
  expect_abort("cublasLtMatmulAlgoGetHeuristic", abort_aux_type_mismatch);
  expect_abort("cublasLtMatmulAlgoGetHeuristic", abort_gelu_knob, "SCDINO_EMU_LT_GELU=sigmoid");
}

/* ---- the knob's GELUs, the float sum, decline, the aux rules --------------------------------- */

/* One fp32 or bf16 (A = B = D) product whose sums are the 8 values below, exactly: GELU of them
 * (grad false), or 1 times GELU' of them in the aux matrix (grad true, DGELU). */
static const double probe_x[8] = {-3, -2, -1, -0.5, 0.5, 1, 2, 3};

static void gelu_probe(cublasLtHandle_t lt, cudaDataType_t t, bool grad, Buf *D) {
  Buf A(t, 8), B(t, 1), aux(t, 8);
  for (int i = 0; i < 8; i++) {
    A.set(i, grad ? 1.0 : probe_x[i]);
    aux.set(i, grad ? probe_x[i] : NAN);
  }
  B.set(0, 1.0);
  D->fill_nan();
  cublasLtMatmulDesc_t d = new_desc();
  set_epilogue(d, grad ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_GELU, aux.p(), 8);
  cublasLtMatrixLayout_t la, lb, ld;
  CK(cublasLtMatrixLayoutCreate(&la, t, 8, 1, 8));
  CK(cublasLtMatrixLayoutCreate(&lb, t, 1, 1, 1));
  CK(cublasLtMatrixLayoutCreate(&ld, t, 8, 1, 8));
  float alpha = 1, beta = 0;
  CK(cublasLtMatmul(lt, d, &alpha, A.p(), la, B.p(), lb, &beta, D->p(), ld, D->p(), ld, NULL, NULL,
                    0, 0));
  CK(cublasLtMatrixLayoutDestroy(la));
  CK(cublasLtMatrixLayoutDestroy(lb));
  CK(cublasLtMatrixLayoutDestroy(ld));
  CK(cublasLtMatmulDescDestroy(d));
}

/* SCDINO_EMU_LT_GELU, set per call: each value gives its own GELU and GELU' (within the tolerance
 * of compare_gelu), and each is told apart from the other two at one of the probe's points at
 * least, in fp32 and in bf16, as a caller's probe of the library must tell them apart. */
static void test_gelu_variants(cublasLtHandle_t lt) {
  const char *envs[] = {NULL, "tanh", "erf", "wrong"};
  const cudaDataType_t types[] = {CUDA_R_32F, CUDA_R_16BF};
  for (const char *env : envs)
    for (cudaDataType_t t : types)
      for (int grad = 0; grad < 2; grad++) {
        if (env)
          setenv("SCDINO_EMU_LT_GELU", env, 1);
        else
          unsetenv("SCDINO_EMU_LT_GELU");
        Buf D(t, 8);
        gelu_probe(lt, t, grad, &D);
        int v = GELU_TANH;
        for (int w = 0; w < 3; w++)
          if (env && !strcmp(env, gelu_env[w])) v = w;
        const char *name = env ? env : "(unset)";
        for (int w = 0; w < 3; w++) {
          int off = 0;
          for (int i = 0; i < 8; i++) {
            const double x = probe_x[i], ref = grad ? gelu_grad_ref(w, x) : gelu_ref(w, x);
            double tol = 16 * ldexp(1 + fabs(x) * (1 + 0.134 * x * x), -24);
            if (t == CUDA_R_16BF) tol += ldexp(fabs(ref), -8);
            const bool near = fabs(D.get(i) - ref) <= tol;
            off += !near;
            if (w == v)
              check(near, "SCDINO_EMU_LT_GELU=%s %s %s(%g) = %.9g, reference %.9g", name, tname(t),
                    grad ? "gelu'" : "gelu", x, D.get(i), ref);
          }
          if (w != v)
            check(off > 0, "SCDINO_EMU_LT_GELU=%s %s %s: not told apart from %s", name, tname(t),
                  grad ? "gelu'" : "gelu", gelu_env[w]);
        }
      }
  unsetenv("SCDINO_EMU_LT_GELU");
}

/* GELU_AUX in bf16: the aux holds the sum rounded to bf16, but D is GELU of the float sum, which
 * here rounds to another bf16 than GELU of the rounded sum does (both away from a tie). */
static void test_gelu_float_sum(cublasLtHandle_t lt) {
  /* row i of A times (1, 1): x0 + dx, exact in fp32, nearest bf16 x0 */
  const double x0[2] = {0.375, -3.046875}, dx[2] = {15.0 / 16384, 195.0 / 131072};
  Buf A(CUDA_R_16BF, 4), B(CUDA_R_16BF, 2), D(CUDA_R_16BF, 2), aux(CUDA_R_16BF, 8);
  for (int i = 0; i < 2; i++) {
    A.set(i, x0[i]);
    A.set(2 + i, dx[i]);
    B.set(i, 1.0);
  }
  aux.fill_nan();
  D.fill_nan();
  cublasLtMatmulDesc_t d = new_desc();
  set_epilogue(d, CUBLASLT_EPILOGUE_GELU_AUX, aux.p(), 8);
  cublasLtMatrixLayout_t la, lb, ld;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 2, 2, 2));
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 2, 1, 2));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, 2, 1, 2));
  float alpha = 1, beta = 0;
  unsetenv("SCDINO_EMU_LT_GELU");
  CK(cublasLtMatmul(lt, d, &alpha, A.p(), la, B.p(), lb, &beta, D.p(), ld, D.p(), ld, NULL, NULL, 0,
                    0));
  for (int i = 0; i < 2; i++) {
    const double x = x0[i] + dx[i];
    Buf want(CUDA_R_16BF, 2);
    want.set(0, gelu_ref(GELU_TANH, x));
    want.set(1, gelu_ref(GELU_TANH, x0[i]));
    check(A.get(i) == x0[i] && A.get(2 + i) == dx[i] && want.get(0) != want.get(1),
          "test premise: gelu(%.9g) and gelu(%g) round to one bf16", x, x0[i]);
    check(aux.get(i) == x0[i], "GELU_AUX bf16: aux %d = %.9g, want the rounded sum %g", i,
          aux.get(i), x0[i]);
    check(D.get(i) == want.get(0), "GELU_AUX bf16: D %d = %.9g, want gelu(%.9g) = %.9g, not %.9g",
          i, D.get(i), x, want.get(0), want.get(1));
  }
  CK(cublasLtMatrixLayoutDestroy(la));
  CK(cublasLtMatrixLayoutDestroy(lb));
  CK(cublasLtMatrixLayoutDestroy(ld));
  CK(cublasLtMatmulDescDestroy(d));
}

/* SCDINO_EMU_LT_GELU=decline: no algorithm for the GELU epilogues (a matmul asked anyway fails
 * too), BIAS still has one; unset, GELU_AUX_BIAS has one again. */
static void test_gelu_decline(cublasLtHandle_t lt) {
  setenv("SCDINO_EMU_LT_GELU", "decline", 1);
  cublasLtMatmulDesc_t d = new_desc();
  float x[64] = {0}, one = 1, zero = 0;
  const void *px = x;
  CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &px, sizeof px));
  int found;
  CK(heuristic_4x4(lt, d, CUBLASLT_EPILOGUE_BIAS, &found));
  check(found == 1, "BIAS with SCDINO_EMU_LT_GELU=decline: found %d", found);
  const cublasLtEpilogue_t declined[] = {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_GELU,
                                         CUBLASLT_EPILOGUE_DGELU};
  for (cublasLtEpilogue_t ed : declined) {
    const cublasStatus_t st = heuristic_4x4(lt, d, ed, &found);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED && found == 0,
          "epilogue %d with SCDINO_EMU_LT_GELU=decline: status %d, found %d", (int)ed, (int)st,
          found);
  }
  cublasLtMatrixLayout_t l;
  CK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4));
  set_epilogue(d, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, x + 32, 8);
  fflush(stderr);
  const int saved = dup(2), null = open("/dev/null", O_WRONLY);
  dup2(null, 2);
  const cublasStatus_t sm =
      cublasLtMatmul(lt, d, &one, x, l, x, l, &zero, x + 16, l, x + 16, l, NULL, NULL, 0, 0);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(null);
  check(sm == CUBLAS_STATUS_NOT_SUPPORTED, "GELU_AUX_BIAS matmul with SCDINO_EMU_LT_GELU=decline: "
        "status %d", (int)sm);
  unsetenv("SCDINO_EMU_LT_GELU");
  CK(heuristic_4x4(lt, d, CUBLASLT_EPILOGUE_DEFAULT, &found)); /* the epilogue stays GELU_AUX_BIAS */
  check(found == 1, "GELU_AUX_BIAS without SCDINO_EMU_LT_GELU: found %d", found);
  CK(cublasLtMatrixLayoutDestroy(l));
  CK(cublasLtMatmulDescDestroy(d));
}

/* The aux matrix's rules (leading dimension a multiple of 8 and >= m, pointer set and 16-byte
 * aligned): a breach is CUBLAS_STATUS_INVALID_VALUE and writes nothing; GELU and GELU_BIAS
 * do not use the aux, so its leading dimension does not matter to them. */
static void test_gelu_invalid(cublasLtHandle_t lt) {
  const int m = 20, n = 3, k = 4;
  Buf A(CUDA_R_32F, m * k), B(CUDA_R_32F, k * n), bias(CUDA_R_32F, m), D(CUDA_R_32F, m * n);
  Buf aux(CUDA_R_32F, 32 * n + 4);
  A.fill_random();
  B.fill_random();
  bias.fill_random();
  cublasLtMatrixLayout_t la, lb, ld;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m));
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
  struct {
    cublasLtEpilogue_t e;
    int64_t auxld;
    size_t auxoff; /* elements into aux; SIZE_MAX: a NULL aux pointer */
    cublasStatus_t want;
  } cases[] = {
      /* aux_ld not a multiple of 8, then < m */
      {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 28, 0, CUBLAS_STATUS_INVALID_VALUE},
      {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 16, 0, CUBLAS_STATUS_INVALID_VALUE},
      {CUBLASLT_EPILOGUE_GELU_AUX, 28, 0, CUBLAS_STATUS_INVALID_VALUE},
      {CUBLASLT_EPILOGUE_DGELU, 28, 0, CUBLAS_STATUS_INVALID_VALUE},
      {CUBLASLT_EPILOGUE_DGELU, 16, 0, CUBLAS_STATUS_INVALID_VALUE},
      {CUBLASLT_EPILOGUE_GELU_AUX, 24, SIZE_MAX, CUBLAS_STATUS_INVALID_VALUE},
      {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 24, 1, CUBLAS_STATUS_INVALID_VALUE}, /* 4-byte aligned */
      {CUBLASLT_EPILOGUE_DGELU, 24, 2, CUBLAS_STATUS_INVALID_VALUE},         /* 8-byte aligned */
      {CUBLASLT_EPILOGUE_GELU_BIAS, 28, 1, CUBLAS_STATUS_SUCCESS},           /* aux unused */
      {CUBLASLT_EPILOGUE_GELU, 16, SIZE_MAX, CUBLAS_STATUS_SUCCESS},
      {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 24, 4, CUBLAS_STATUS_SUCCESS},       /* 16-byte aligned */
  };
  for (auto &c : cases) {
    cublasLtMatmulDesc_t d = new_desc();
    const void *pb = bias.p();
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pb, sizeof pb));
    aux.fill_random(); /* DGELU reads it */
    set_epilogue(d, c.e, c.auxoff == SIZE_MAX ? NULL : aux.at(c.auxoff), c.auxld);
    D.fill_nan();
    const Buf aux0 = aux;
    float one = 1, zero = 0;
    fflush(stderr);
    const int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    const cublasStatus_t st = cublasLtMatmul(lt, d, &one, A.p(), la, B.p(), lb, &zero, D.p(), ld,
                                             D.p(), ld, NULL, NULL, 0, 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(null);
    const bool aux_aligned = ((uintptr_t)aux.p() % 16) == 0;
    check(st == c.want && aux_aligned,
          "epilogue %d aux_ld %lld aux offset %lld bytes (m %d): status %d, want %d", (int)c.e,
          (long long)c.auxld, c.auxoff == SIZE_MAX ? -1LL : (long long)(c.auxoff * 4), m, (int)st,
          (int)c.want);
    bool untouched = true;
    for (int x = 0; x < m * n; x++) untouched &= D.get(x) != D.get(x);
    if (c.want != CUBLAS_STATUS_SUCCESS)
      check(untouched && aux.bytes == aux0.bytes,
            "epilogue %d aux_ld %lld: wrote D or aux after %d", (int)c.e, (long long)c.auxld,
            (int)st);
    else
      check(!untouched, "epilogue %d aux_ld %lld: D not written", (int)c.e, (long long)c.auxld);
    CK(cublasLtMatmulDescDestroy(d));
  }
  CK(cublasLtMatrixLayoutDestroy(la));
  CK(cublasLtMatrixLayoutDestroy(lb));
  CK(cublasLtMatrixLayoutDestroy(ld));
}

void test_gelu(cublasLtHandle_t lt) {
  test_gelu_variants(lt);
  test_gelu_float_sum(lt);
  test_gelu_decline(lt);
  test_gelu_invalid(lt);
}
