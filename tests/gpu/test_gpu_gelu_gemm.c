/* test_gpu_gelu_gemm.c - GELU inside the GEMMs (cuda/ops/gelu_gemm.cu): linear_gelu_fwd and
 * gelu_linear_bwd against the CPU's op pairs in both GELU forms, and the probe's verdicts.
 *
 * Under the emulator the stand-in's GELU is chosen (SCDINO_EMU_LT_GELU): tanh (the default), erf,
 * a third function, or no algorithm; the backend must fuse exactly the form the library computes and
 * give the pair's results in every case.  On a GPU the real library answers, and the checks of
 * the results hold whichever way it went. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "cuda/backend_cuda.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_ops_ctx.h"
#include "tests/gpu/gpu_util.h"

/* h = gelu(x w^T + b), pre, and the backward of a Linear on h: y = h w2^T + b2 (M rows, K = N). */
static void check_pair(int M, int N, int K, int ap) {
  char nm[160];
  const size_t mk = (size_t)M * K, mn = (size_t)M * N, nk = (size_t)N * K;
  float *x = gpu_randn(&R, mk, 1.0f), *w = gpu_randn(&R, nk, 0.3f), *b = gpu_randn(&R, N, 0.5f);
  float *pr = gpu_zeros(mn), *hr = gpu_zeros(mn), *ga = gpu_zeros(mn), *gb = gpu_zeros(mn);
  void *dx = gpu_act_up(g, x, mk), *dh = g->alloc(mn * g->act_size), *dp = g->alloc(mn * g->act_size);
  float *dw = gpu_f32_up(g, w, nk), *db = gpu_f32_up(g, b, N);
  cpu->linear_fwd(pr, x, w, b, M, N, K);
  cpu->gelu_fwd(hr, pr, mn, ap);
  gpu_act_poison(g, dh, mn);
  gpu_act_poison(g, dp, mn);
  g->linear_gelu_fwd(dh, dp, dx, dw, db, M, N, K, ap);
  gpu_act_down(g, ga, dh, mn);
  gpu_act_down(g, gb, dp, mn);
  gpu_cmp(NAME(nm, "%s linear_gelu_fwd h %dx%dx%d approx %d", tag, M, N, K, ap), ga, hr, mn, TOL);
  gpu_cmp(NAME(nm, "%s linear_gelu_fwd pre", tag), gb, pr, mn, TOL);
  gpu_act_poison(g, dh, mn); /* inference: no pre */
  g->linear_gelu_fwd(dh, NULL, dx, dw, db, M, N, K, ap);
  gpu_act_down(g, ga, dh, mn);
  gpu_cmp(NAME(nm, "%s linear_gelu_fwd h without pre", tag), ga, hr, mn, TOL);

  /* backward through y = gelu(pre) w2^T + b2, w2 [N2, N]: the GELU's input from the CPU, rounded */
  const int N2 = K;
  const size_t mn2 = (size_t)M * N2, n2n = (size_t)N2 * N;
  float *w2 = gpu_randn(&R, n2n, 0.3f), *dy = gpu_randn(&R, mn2, 1.0f);
  float *dw0 = gpu_randn(&R, n2n, 0.1f), *db0 = gpu_randn(&R, N2, 0.1f);
  gpu_round(g, pr, mn);
  cpu->gelu_fwd(hr, pr, mn, ap);
  gpu_round(g, hr, mn);
  float *dpr = gpu_zeros(mn), *dwr = gpu_dup(dw0, n2n), *dbr = gpu_dup(db0, N2);
  cpu->linear_bwd(dpr, dwr, dbr, dy, hr, w2, M, N2, N);
  cpu->gelu_bwd(dpr, dpr, pr, mn, ap);
  void *gp = gpu_act_up(g, pr, mn), *gh = gpu_act_up(g, hr, mn), *gdy = gpu_act_up(g, dy, mn2);
  float *gw2 = gpu_f32_up(g, w2, n2n), *gdw = gpu_f32_up(g, dw0, n2n), *gdb = gpu_f32_up(g, db0, N2);
  float *o1 = gpu_zeros(mn), *o2 = gpu_zeros(n2n), *o3 = gpu_zeros(N2);
  gpu_act_poison(g, dp, mn);
  g->gelu_linear_bwd(dp, gdw, gdb, gdy, gh, gp, gw2, M, N2, N, ap);
  gpu_act_down(g, o1, dp, mn);
  gpu_f32_down(g, o2, gdw, n2n);
  gpu_f32_down(g, o3, gdb, N2);
  gpu_cmp(NAME(nm, "%s gelu_linear_bwd dpre %dx%dx%d approx %d", tag, M, N2, N, ap), o1, dpr, mn, TOL);
  gpu_cmp(NAME(nm, "%s gelu_linear_bwd dw (+=)", tag), o2, dwr, n2n, TOL);
  gpu_cmp(NAME(nm, "%s gelu_linear_bwd db (+=)", tag), o3, dbr, N2, TOL);
  g->free(dx), g->free(dh), g->free(dp), g->free(dw), g->free(db), g->free(gp), g->free(gh);
  g->free(gdy), g->free(gw2), g->free(gdw), g->free(gdb);
  free(x), free(w), free(b), free(pr), free(hr), free(ga), free(gb), free(w2), free(dy), free(dw0);
  free(db0), free(dpr), free(dwr), free(dbr), free(o1), free(o2), free(o3);
}

/* The pairs in one form; returns how many GEMMs ran a GELU epilogue: where the form is fused, 3
 * per shape (two forwards, one backward) for the first two shapes; the third has rows of 21
 * elements, which the epilogues cannot take (leading dimension not a multiple of 8). */
static long run_pairs(int ap) {
  const long f0 = backend_cuda_gelu_fused();
  check_pair(37, 64, 48, ap);
  check_pair(394, 1536, 384, ap); /* a ViT-S/16 global crop's MLP, batch 2 */
  check_pair(5, 21, 7, ap);       /* odd sizes: the pair */
  return backend_cuda_gelu_fused() - f0;
}

void check_gelu_gemm(int emulated) {
  char nm[160];
  if (!g->gelu_in_gemm) { /* fp32: the reference kernels only */
    T_CHECK(!g->linear_gelu_fwd && !g->gelu_linear_bwd, "%s: fused GELU ops without gelu_in_gemm", tag);
    return;
  }
  /* The stand-in's GELU (unset: tanh), and which forms the backend must then fuse. */
  static const struct {
    const char *lib;
    int fuse[2];        /* [approx]: whether that form may run in the epilogue */
    const char *verdict; /* backend_cuda_gelu_library(1) */
  } cases[] = {{NULL, {0, 1}, "tanh"},
               {"erf", {1, 0}, "none"},
               {"wrong", {0, 0}, "neither"},
               {"decline", {0, 0}, "declined"}};
  const char *base = tag[0] ? strdup(tag) : "";
  for (int c = 0; c < (emulated ? 4 : 1); c++) {
    if (cases[c].lib) setenv("SCDINO_EMU_LT_GELU", cases[c].lib, 1);
    backend_cuda_set_gelu("epilogue"); /* probe afresh */
    const char *lib = backend_cuda_gelu_library(1);
    printf("%s: cuBLASLt's GELU epilogue computes approximate='%s' (SCDINO_EMU_LT_GELU=%s)\n", base,
           lib, cases[c].lib ? cases[c].lib : "unset");
    for (int ap = 0; ap < 2; ap++) {
      snprintf(tag, sizeof tag, "%s gelu=%s", base, cases[c].lib ? cases[c].lib : "library");
      const int fused = g->gelu_in_gemm(ap);
      const long n = run_pairs(ap);
      if (fused) T_CHECK(n > 0, "%s: approx %d said fused but no GEMM ran the epilogue", tag, ap);
      else T_CHECK(n == 0, "%s: approx %d not fused but %ld GEMMs ran the epilogue", tag, ap, n);
      if (emulated) {
        T_CHECK(!strcmp(lib, cases[c].verdict), "%s: probe says '%s', expected '%s'", tag, lib,
                cases[c].verdict);
        T_CHECK(fused == cases[c].fuse[ap], "%s: approx %d fused %d, expected %d", tag, ap, fused,
                cases[c].fuse[ap]);
        if (fused) T_CHECK(n == 2 * 3, "%s: %ld of 6 GELU epilogue GEMMs ran", tag, n);
      }
    }
  }
  /* &gpu gelu = 'kernel': never fused */
  unsetenv("SCDINO_EMU_LT_GELU");
  backend_cuda_set_gelu("kernel");
  snprintf(tag, sizeof tag, "%s gelu=kernel", base);
  for (int ap = 0; ap < 2; ap++) {
    T_CHECK(!g->gelu_in_gemm(ap), "%s: gelu 'kernel' fuses approx %d", tag, ap);
    const long n = run_pairs(ap);
    T_CHECK(n == 0, "%s: %ld GEMMs ran the GELU epilogue", NAME(nm, "%s approx %d", tag, ap), n);
  }
  backend_cuda_set_gelu("epilogue");
  snprintf(tag, sizeof tag, "%s", base);
  if (base[0]) free((void *)base);
}
