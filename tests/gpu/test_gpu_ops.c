/* test_gpu_ops.c - every op of the CUDA backend against the CPU backend on random inputs, in fp32,
 * bf16 and fp16 (fp16 also with the kernel sets of compute capability 7.5 and 7.0: &gpu arch).
 *
 * Inputs are drawn on the host and rounded to the activation type first, so both backends see the
 * same numbers; outputs that an op overwrites are poisoned with NaN on the GPU (an element left
 * unwritten fails the check), outputs that accumulate start from the same random values.
 * Attention runs in every implementation (batched GEMMs, the flash-style kernels, on tensor cores
 * in bf16 for head dimensions 16, 48, 64 and 128 and on CUDA cores otherwise, cuDNN's fused
 * attention in bf16); under the emulator cuDNN must have run every call it is eligible for, and
 * runs again declining every call, then every backward call (the GEMM form on cuDNN's state takes
 * them); on a GPU the counts are printed.  Where the state is the row log-sum-exp it is checked
 * against its definition in double.
 * Tolerances (relative L2 error): fp32 2e-5 (fp32 GEMMs without TF32, sums in another order);
 * bf16 1.5e-2 (bf16 storage of outputs and weights: 2^-9 relative per element); fp16 2e-3 (2^-12
 * per element, 8 times finer than bf16; the errors seen are below 6e-4).  The optimizer,
 * EMA and centre kernels are specified to the rounding and must match the CPU bit for bit. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cuda/backend_cuda.h"
#include "model/ops.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_ops_ctx.h"
#include "tests/gpu/gpu_util.h"

const struct ops *cpu, *g;
struct rng R;
double TOL;
char tag[32];

/* ---- dense layers ------------------------------------------------------------------------------- */

void check_linear(int M, int N, int K, int bias) {
  char nm[128];
  const size_t np = (size_t)N * K + N;
  float *x = gpu_randn(&R, (size_t)M * K, 1.0f), *par = gpu_randn(&R, np, 0.2f);
  void *dx_ = gpu_act_up(g, x, (size_t)M * K);
  float *dpar = gpu_f32_up(g, par, np);
  /* the bias right after the weight: odd N*K gives a bias with 4-byte alignment */
  if (g->params_changed) g->params_changed(dpar, np);
  const float *w = par, *b = bias ? par + (size_t)N * K : NULL;
  float *y = gpu_zeros((size_t)M * N), *yr = gpu_zeros((size_t)M * N);
  void *dy = g->alloc((size_t)M * N * g->act_size);
  gpu_act_poison(g, dy, (size_t)M * N);
  g->linear_fwd(dy, dx_, dpar, bias ? dpar + (size_t)N * K : NULL, M, N, K);
  gpu_act_down(g, y, dy, (size_t)M * N);
  cpu->linear_fwd(yr, x, w, b, M, N, K);
  gpu_cmp(NAME(nm, "%s linear_fwd M=%d N=%d K=%d bias=%d", tag, M, N, K, bias), y, yr, (size_t)M * N, TOL);

  /* new weights without params_changed: the bf16 copy must notice the upload */
  for (size_t i = 0; i < np; i++) par[i] = -0.5f * par[i] + 0.01f;
  g->upload(dpar, par, np * sizeof(float));
  gpu_act_poison(g, dy, (size_t)M * N);
  g->linear_fwd(dy, dx_, dpar, bias ? dpar + (size_t)N * K : NULL, M, N, K);
  gpu_act_down(g, y, dy, (size_t)M * N);
  cpu->linear_fwd(yr, x, w, b, M, N, K);
  gpu_cmp(NAME(nm, "%s linear_fwd after upload (stale bf16 copy?)", tag), y, yr, (size_t)M * N, TOL);
  /* added to a residual stream r by the GEMM, into another buffer and in place: against the CPU's
   * linear_fwd then residual_fwd */
  float *r = gpu_randn(&R, (size_t)M * N, 2.0f);
  void *dr = gpu_act_up(g, r, (size_t)M * N);
  gpu_act_down(g, r, dr, (size_t)M * N); /* as stored */
  for (int inplace = 0; inplace < 2; inplace++) {
    void *out = inplace ? dr : dy;
    if (!inplace) gpu_act_poison(g, dy, (size_t)M * N);
    g->linear_residual_fwd(out, dr, dx_, dpar, bias ? dpar + (size_t)N * K : NULL, M, N, K);
    gpu_act_down(g, y, out, (size_t)M * N);
    cpu->linear_fwd(yr, x, w, b, M, N, K);
    cpu->residual_fwd(yr, r, yr, NULL, 1, M, N);
    gpu_cmp(NAME(nm, "%s linear_residual_fwd%s", tag, inplace ? " in place" : ""), y, yr,
            (size_t)M * N, TOL);
  }
  g->free(dr);
  free(r);

  /* backward: dx overwritten, dw and db accumulate */
  float *gy = gpu_randn(&R, (size_t)M * N, 1.0f);
  void *dgy = gpu_act_up(g, gy, (size_t)M * N);
  float *dw0 = gpu_randn(&R, (size_t)N * K, 1.0f), *db0 = gpu_randn(&R, (size_t)N, 1.0f);
  float *dwr = gpu_dup(dw0, (size_t)N * K), *dbr = gpu_dup(db0, N), *gxr = gpu_zeros((size_t)M * K);
  float *ddw = gpu_f32_up(g, dw0, (size_t)N * K), *ddb = gpu_f32_up(g, db0, N);
  void *dgx = g->alloc((size_t)M * K * g->act_size);
  gpu_act_poison(g, dgx, (size_t)M * K);
  g->linear_bwd(dgx, ddw, bias ? ddb : NULL, dgy, dx_, dpar, M, N, K);
  cpu->linear_bwd(gxr, dwr, bias ? dbr : NULL, gy, x, w, M, N, K);
  float *gx = gpu_zeros((size_t)M * K), *dw = gpu_zeros((size_t)N * K), *db = gpu_zeros(N);
  gpu_act_down(g, gx, dgx, (size_t)M * K);
  gpu_f32_down(g, dw, ddw, (size_t)N * K);
  gpu_f32_down(g, db, ddb, N);
  gpu_cmp(NAME(nm, "%s linear_bwd dx", tag), gx, gxr, (size_t)M * K, TOL);
  gpu_cmp(NAME(nm, "%s linear_bwd dw (+=)", tag), dw, dwr, (size_t)N * K, TOL);
  gpu_cmp(NAME(nm, "%s linear_bwd db (+=)", tag), db, dbr, N, bias ? TOL : 0.0);
  /* dx NULL: only the parameter gradients */
  g->linear_bwd(NULL, ddw, NULL, dgy, dx_, dpar, M, N, K);
  cpu->linear_bwd(NULL, dwr, NULL, gy, x, w, M, N, K);
  gpu_f32_down(g, dw, ddw, (size_t)N * K);
  gpu_cmp(NAME(nm, "%s linear_bwd dw only", tag), dw, dwr, (size_t)N * K, TOL);

  g->free(dx_);
  g->free(dpar);
  g->free(dy);
  g->free(dgy);
  g->free(ddw);
  g->free(ddb);
  g->free(dgx);
  free(x), free(par), free(y), free(yr), free(gy), free(dw0), free(db0), free(dwr), free(dbr);
  free(gxr), free(gx), free(dw), free(db);
}

static void check_matmul(int M, int N, int K, int ta, int tb, float beta) {
  char nm[128];
  float *a = gpu_randn(&R, (size_t)M * K, 1.0f), *b = gpu_randn(&R, (size_t)K * N, 1.0f);
  float *c0 = gpu_randn(&R, (size_t)M * N, 1.0f), *cr = gpu_dup(c0, (size_t)M * N);
  float *da = gpu_f32_up(g, a, (size_t)M * K), *db = gpu_f32_up(g, b, (size_t)K * N);
  float *dc = gpu_f32_up(g, c0, (size_t)M * N);
  g->matmul_f32(dc, da, db, M, N, K, ta, tb, beta);
  cpu->matmul_f32(cr, a, b, M, N, K, ta, tb, beta);
  gpu_f32_down(g, c0, dc, (size_t)M * N);
  /* fp32 in both tables */
  gpu_cmp(NAME(nm, "%s matmul_f32 %dx%dx%d ta=%d tb=%d beta=%g", tag, M, N, K, ta, tb, beta), c0, cr,
          (size_t)M * N, 2e-5);
  g->free(da), g->free(db), g->free(dc);
  free(a), free(b), free(c0), free(cr);
}

/* ---- patches, tokens ---------------------------------------------------------------------------- */

static void check_patch_tokens(int B, int C, int H, int W, int p, int D) {
  char nm[128];
  const int gh = H / p, gw = W / p, Np = gh * gw, N = Np + 1;
  const size_t nimg = (size_t)B * C * H * W, ncols = (size_t)B * Np * C * p * p;
  float *img = gpu_randn(&R, nimg, 1.0f), *cols = gpu_zeros(ncols), *colr = gpu_zeros(ncols);
  float *dimg = gpu_f32_up(g, img, nimg);
  void *dcols = g->alloc(ncols * g->act_size);
  gpu_act_poison(g, dcols, ncols);
  g->patchify(dcols, dimg, B, C, H, W, p);
  cpu->patchify(colr, img, B, C, H, W, p);
  gpu_round(g, colr, ncols);
  gpu_act_down(g, cols, dcols, ncols);
  gpu_cmp(NAME(nm, "%s patchify %dx%dx%dx%d p=%d", tag, B, C, H, W, p), cols, colr, ncols, 0.0);

  const size_t nx = (size_t)B * N * D;
  float *pat = gpu_randn(&R, (size_t)B * Np * D, 1.0f), *cls = gpu_randn(&R, D, 1.0f);
  float *pos = gpu_randn(&R, (size_t)N * D, 1.0f);
  void *dpat = gpu_act_up(g, pat, (size_t)B * Np * D);
  float *dcls = gpu_f32_up(g, cls, D), *dpos = gpu_f32_up(g, pos, (size_t)N * D);
  void *dx = g->alloc(nx * g->act_size);
  gpu_act_poison(g, dx, nx);
  float *x = gpu_zeros(nx), *xr = gpu_zeros(nx);
  g->tokens_fwd(dx, dpat, dcls, dpos, B, Np, D);
  cpu->tokens_fwd(xr, pat, cls, pos, B, Np, D);
  gpu_act_down(g, x, dx, nx);
  gpu_cmp(NAME(nm, "%s tokens_fwd", tag), x, xr, nx, TOL);

  float *gx = gpu_randn(&R, nx, 1.0f);
  void *dgx = gpu_act_up(g, gx, nx);
  float *gc0 = gpu_randn(&R, D, 1.0f), *gp0 = gpu_randn(&R, (size_t)N * D, 1.0f);
  float *gcr = gpu_dup(gc0, D), *gpr = gpu_dup(gp0, (size_t)N * D);
  float *dgc = gpu_f32_up(g, gc0, D), *dgp = gpu_f32_up(g, gp0, (size_t)N * D);
  float *gpat = gpu_zeros((size_t)B * Np * D), *gpatr = gpu_zeros((size_t)B * Np * D);
  void *dgpat = g->alloc((size_t)B * Np * D * g->act_size);
  gpu_act_poison(g, dgpat, (size_t)B * Np * D);
  g->tokens_bwd(dgpat, dgc, dgp, dgx, B, Np, D);
  cpu->tokens_bwd(gpatr, gcr, gpr, gx, B, Np, D);
  gpu_act_down(g, gpat, dgpat, (size_t)B * Np * D);
  gpu_f32_down(g, gc0, dgc, D);
  gpu_f32_down(g, gp0, dgp, (size_t)N * D);
  gpu_cmp(NAME(nm, "%s tokens_bwd dpatches", tag), gpat, gpatr, (size_t)B * Np * D, 0.0);
  gpu_cmp(NAME(nm, "%s tokens_bwd dcls (+=)", tag), gc0, gcr, D, 2e-6);
  gpu_cmp(NAME(nm, "%s tokens_bwd dpos (+=)", tag), gp0, gpr, (size_t)N * D, 2e-6);
  g->free(dimg), g->free(dcols), g->free(dpat), g->free(dcls), g->free(dpos), g->free(dx);
  g->free(dgx), g->free(dgc), g->free(dgp), g->free(dgpat);
  free(img), free(cols), free(colr), free(pat), free(cls), free(pos), free(x), free(xr), free(gx);
  free(gc0), free(gp0), free(gcr), free(gpr), free(gpat), free(gpatr);
}

/* ---- norms -------------------------------------------------------------------------------------- */

/* rows rows of D at stride ldx (ldx = D: contiguous; ldx = N*D: the CLS token of B samples). */
static void check_layernorm(int rows, int D, int ldx) {
  char nm[128];
  const size_t nx = (size_t)(rows - 1) * ldx + D, ny = (size_t)rows * D;
  float *x = gpu_randn(&R, nx, 2.0f), *gm = gpu_randn(&R, D, 1.0f), *bt = gpu_randn(&R, D, 1.0f);
  for (size_t i = 0; i < nx; i++) x[i] += 0.5f; /* a mean away from 0 */
  void *dxa = gpu_act_up(g, x, nx);
  float *dgm = gpu_f32_up(g, gm, D), *dbt = gpu_f32_up(g, bt, D);
  float *dmean = g->alloc(rows * sizeof(float)), *drstd = g->alloc(rows * sizeof(float));
  void *dy = g->alloc(ny * g->act_size);
  gpu_act_poison(g, dy, ny);
  float *y = gpu_zeros(ny), *yr = gpu_zeros(ny), *mean = gpu_zeros(rows), *meanr = gpu_zeros(rows);
  float *rstd = gpu_zeros(rows), *rstdr = gpu_zeros(rows);
  g->layernorm_fwd(dy, dmean, drstd, dxa, ldx, dgm, dbt, rows, D, 1e-6f);
  cpu->layernorm_fwd(yr, meanr, rstdr, x, ldx, gm, bt, rows, D, 1e-6f);
  gpu_act_down(g, y, dy, ny);
  gpu_f32_down(g, mean, dmean, rows);
  gpu_f32_down(g, rstd, drstd, rows);
  gpu_cmp(NAME(nm, "%s layernorm_fwd %dx%d ldx=%d", tag, rows, D, ldx), y, yr, ny, TOL);
  gpu_cmp(NAME(nm, "%s layernorm_fwd mean", tag), mean, meanr, rows, 1e-5);
  gpu_cmp(NAME(nm, "%s layernorm_fwd rstd", tag), rstd, rstdr, rows, 1e-5);

  float *gy = gpu_randn(&R, ny, 1.0f), *gx0 = gpu_randn(&R, nx, 1.0f);
  void *dgy = gpu_act_up(g, gy, ny), *dgx = gpu_act_up(g, gx0, nx);
  float *gxr = gpu_dup(gx0, nx);
  float *gg0 = gpu_randn(&R, D, 1.0f), *gb0 = gpu_randn(&R, D, 1.0f);
  float *ggr = gpu_dup(gg0, D), *gbr = gpu_dup(gb0, D);
  float *dgg = gpu_f32_up(g, gg0, D), *dgb = gpu_f32_up(g, gb0, D);
  /* the saved statistics of the CPU, so both backwards start from the same numbers */
  float *dmr = gpu_f32_up(g, meanr, rows), *drr = gpu_f32_up(g, rstdr, rows);
  g->layernorm_bwd(dgx, dgg, dgb, dgy, dxa, ldx, dmr, drr, dgm, rows, D);
  cpu->layernorm_bwd(gxr, ggr, gbr, gy, x, ldx, meanr, rstdr, gm, rows, D);
  gpu_act_down(g, gx0, dgx, nx);
  gpu_f32_down(g, gg0, dgg, D);
  gpu_f32_down(g, gb0, dgb, D);
  gpu_cmp(NAME(nm, "%s layernorm_bwd dx (+=)", tag), gx0, gxr, nx, TOL);
  gpu_cmp(NAME(nm, "%s layernorm_bwd dg (+=)", tag), gg0, ggr, D, TOL);
  gpu_cmp(NAME(nm, "%s layernorm_bwd db (+=)", tag), gb0, gbr, D, TOL);
  g->free(dxa), g->free(dgm), g->free(dbt), g->free(dmean), g->free(drstd), g->free(dy);
  g->free(dgy), g->free(dgx), g->free(dgg), g->free(dgb), g->free(dmr), g->free(drr);
  free(x), free(gm), free(bt), free(y), free(yr), free(mean), free(meanr), free(rstd), free(rstdr);
  free(gy), free(gx0), free(gxr), free(gg0), free(gb0), free(ggr), free(gbr);
}

static void check_l2norm(int rows, int D) {
  char nm[128];
  const size_t n = (size_t)rows * D;
  float *x = gpu_randn(&R, n, 1.0f);
  for (int d = 0; d < D; d++) x[(size_t)(rows / 2) * D + d] = 0.0f; /* the clamp at 1e-12 */
  void *dx = gpu_act_up(g, x, n);
  void *dy = g->alloc(n * g->act_size);
  float *dn = g->alloc(rows * sizeof(float));
  gpu_act_poison(g, dy, n);
  float *y = gpu_zeros(n), *yr = gpu_zeros(n), *nrm = gpu_zeros(rows), *nrmr = gpu_zeros(rows);
  g->l2norm_fwd(dy, dn, dx, rows, D);
  cpu->l2norm_fwd(yr, nrmr, x, rows, D);
  gpu_act_down(g, y, dy, n);
  gpu_f32_down(g, nrm, dn, rows);
  gpu_cmp(NAME(nm, "%s l2norm_fwd %dx%d", tag, rows, D), y, yr, n, TOL);
  gpu_cmp(NAME(nm, "%s l2norm_fwd norms", tag), nrm, nrmr, rows, 1e-5);
  float *gy = gpu_randn(&R, n, 1.0f);
  for (int d = 0; d < D; d++) gy[(size_t)(rows / 2) * D + d] *= 1e-12f; /* its gradient is gy / 1e-12 */
  void *dgy = gpu_act_up(g, gy, n);
  gpu_round(g, yr, n); /* backward from the CPU's y as the GPU stores it */
  void *dyr = gpu_act_up(g, yr, n);
  float *dnr = gpu_f32_up(g, nrmr, rows);
  void *dgx = g->alloc(n * g->act_size);
  gpu_act_poison(g, dgx, n);
  float *gx = gpu_zeros(n), *gxr = gpu_zeros(n);
  g->l2norm_bwd(dgx, dgy, dyr, dnr, rows, D);
  cpu->l2norm_bwd(gxr, gy, yr, nrmr, rows, D);
  gpu_act_down(g, gx, dgx, n);
  gpu_cmp(NAME(nm, "%s l2norm_bwd", tag), gx, gxr, n, TOL);
  g->free(dx), g->free(dy), g->free(dn), g->free(dgy), g->free(dyr), g->free(dnr), g->free(dgx);
  free(x), free(y), free(yr), free(nrm), free(nrmr), free(gy), free(gx), free(gxr);
}

static void check_weightnorm(int K, int D, int with_dg) {
  char nm[128];
  const size_t n = (size_t)K * D;
  float *v = gpu_randn(&R, n, 1.0f), *gg = gpu_randu(&R, K, 0.5f, 1.5f);
  float *dv_ = gpu_f32_up(g, v, n), *dgg = gpu_f32_up(g, gg, K);
  float *dw = g->alloc(n * sizeof(float)), *dvn = g->alloc(K * sizeof(float));
  float *w = gpu_zeros(n), *wr = gpu_zeros(n), *vn = gpu_zeros(K), *vnr = gpu_zeros(K);
  g->weightnorm_fwd(dw, dvn, dgg, dv_, K, D);
  cpu->weightnorm_fwd(wr, vnr, gg, v, K, D);
  gpu_f32_down(g, w, dw, n);
  gpu_f32_down(g, vn, dvn, K);
  gpu_cmp(NAME(nm, "%s weightnorm_fwd %dx%d", tag, K, D), w, wr, n, 1e-5);
  gpu_cmp(NAME(nm, "%s weightnorm_fwd |v|", tag), vn, vnr, K, 1e-5);
  /* A GEMM with the normalised weights (bf16: the copy the kernel writes), twice: new v must reach
   * it (a stale copy gives the old weights' outputs). */
  const int M = 9;
  float *x = gpu_randn(&R, (size_t)M * D, 1.0f), *y = gpu_zeros((size_t)M * K);
  float *yr = gpu_zeros((size_t)M * K), *v2 = gpu_randn(&R, n, 1.0f);
  void *dx = gpu_act_up(g, x, (size_t)M * D), *dy = g->alloc((size_t)M * K * g->act_size);
  for (int round = 0; round < 2; round++) {
    if (round) {
      g->upload(dv_, v2, n * sizeof(float));
      g->weightnorm_fwd(dw, dvn, dgg, dv_, K, D);
      gpu_f32_down(g, w, dw, n);
    }
    g->linear_fwd(dy, dx, dw, NULL, M, K, D);
    gpu_act_down(g, y, dy, (size_t)M * K);
    cpu->linear_fwd(yr, x, w, NULL, M, K, D);
    gpu_cmp(NAME(nm, "%s linear_fwd with weightnorm_fwd's weights, round %d", tag, round), y, yr,
            (size_t)M * K, TOL);
  }
  g->upload(dv_, v, n * sizeof(float));
  g->free(dx), g->free(dy);
  free(x), free(y), free(yr), free(v2);
  float *gw = gpu_randn(&R, n, 1.0f), *gv0 = gpu_randn(&R, n, 1.0f), *gg0 = gpu_randn(&R, K, 1.0f);
  float *gvr = gpu_dup(gv0, n), *ggr = gpu_dup(gg0, K);
  float *dgw = gpu_f32_up(g, gw, n), *dgv = gpu_f32_up(g, gv0, n), *dggr = gpu_f32_up(g, gg0, K);
  float *dvnr = gpu_f32_up(g, vnr, K);
  g->weightnorm_bwd(with_dg ? dggr : NULL, dgv, dgw, dgg, dv_, dvnr, K, D);
  cpu->weightnorm_bwd(with_dg ? ggr : NULL, gvr, gw, gg, v, vnr, K, D);
  gpu_f32_down(g, gv0, dgv, n);
  gpu_f32_down(g, gg0, dggr, K);
  gpu_cmp(NAME(nm, "%s weightnorm_bwd dv (+=)", tag), gv0, gvr, n, 1e-5);
  gpu_cmp(NAME(nm, "%s weightnorm_bwd dg (+=, dg %s)", tag, with_dg ? "given" : "NULL"), gg0, ggr, K,
          1e-5);
  g->free(dv_), g->free(dgg), g->free(dw), g->free(dvn), g->free(dgw), g->free(dgv), g->free(dggr);
  g->free(dvnr);
  free(v), free(gg), free(w), free(wr), free(vn), free(vnr), free(gw), free(gv0), free(gg0);
  free(gvr), free(ggr);
}

/* ---- attention ---------------------------------------------------------------------------------- */

/* Whether this call keeps the row log-sum-exp as its state (the flash kernel's and cuDNN's), not
 * the softmax matrices: backend_cuda.cu's attn_kind. */
static int attention_keeps_lse(int hd) {
  const char *impl = backend_cuda_attention();
  if (!gpu_is_half(g)) return !strcmp(impl, "flash");
  return strcmp(impl, "gemm") || hd % 8;
}

/* lse[b, h, i] = log sum_j exp(scale q_i . k_j), in double from the rounded inputs. */
static void attention_lse(float *lse, const float *qkv, int B, int N, int H, int hd, float scale) {
  const size_t D = (size_t)H * hd;
  double *s = malloc((size_t)N * sizeof *s);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < N; i++) {
        const float *q = qkv + ((size_t)b * N + i) * 3 * D + (size_t)h * hd;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < N; j++) {
          const float *k = qkv + ((size_t)b * N + j) * 3 * D + D + (size_t)h * hd;
          double d = 0.0;
          for (int c = 0; c < hd; c++) d += (double)q[c] * k[c];
          s[j] = d * scale;
          if (s[j] > mx) mx = s[j];
        }
        for (int j = 0; j < N; j++) sum += exp(s[j] - mx);
        lse[((size_t)b * H + h) * N + i] = (float)(mx + log(sum));
      }
  free(s);
}

void check_attention(int B, int N, int H, int hd) {
  char nm[128];
  const size_t D = (size_t)H * hd, nqkv = (size_t)B * N * 3 * D, no = (size_t)B * N * D;
  const size_t np = (size_t)B * H * N * N;
  const float scale = 1.0f / sqrtf((float)hd);
  float *qkv = gpu_randn(&R, nqkv, 1.5f);
  void *dqkv_in = gpu_act_up(g, qkv, nqkv);
  void *dout = g->alloc(no * g->act_size);
  void *state = g->alloc(g->attn_state_bytes(B, N, H, hd));
  float *dprobs = g->alloc(np * sizeof(float));
  gpu_act_poison(g, dout, no);
  float *out = gpu_zeros(no), *outr = gpu_zeros(no), *pr = gpu_zeros(np), *prr = gpu_zeros(np);
  float *P = malloc(cpu->attn_state_bytes(B, N, H, hd));
  g->attn_fwd(dout, state, dprobs, dqkv_in, B, N, H, hd, scale);
  cpu->attn_fwd(outr, P, prr, qkv, B, N, H, hd, scale);
  gpu_act_down(g, out, dout, no);
  gpu_f32_down(g, pr, dprobs, np);
  gpu_cmp(NAME(nm, "%s attn_fwd B=%d N=%d H=%d hd=%d", tag, B, N, H, hd), out, outr, no, TOL);
  gpu_cmp(NAME(nm, "%s attn_fwd probabilities", tag), pr, prr, np, gpu_is_half(g) ? 1e-5 : 2e-5);
  /* inference: no state, no probabilities */
  gpu_act_poison(g, dout, no);
  g->attn_fwd(dout, NULL, NULL, dqkv_in, B, N, H, hd, scale);
  gpu_act_down(g, out, dout, no);
  gpu_cmp(NAME(nm, "%s attn_fwd without state", tag), out, outr, no, TOL);
  /* training: state, no probabilities (the state the backward below reads) */
  gpu_act_poison(g, dout, no);
  g->attn_fwd(dout, state, NULL, dqkv_in, B, N, H, hd, scale);
  gpu_act_down(g, out, dout, no);
  gpu_cmp(NAME(nm, "%s attn_fwd with state", tag), out, outr, no, TOL);
  if (attention_keeps_lse(hd)) {
    const size_t nl = (size_t)B * H * N;
    float *lse = malloc(nl * sizeof *lse), *lser = malloc(nl * sizeof *lser);
    gpu_f32_down(g, lse, state, nl);
    attention_lse(lser, qkv, B, N, H, hd, scale);
    gpu_cmp(NAME(nm, "%s attn_fwd state (row log-sum-exp)", tag), lse, lser, nl, 1e-5);
    free(lse), free(lser);
  }

  float *gout = gpu_randn(&R, no, 1.0f);
  void *dgout = gpu_act_up(g, gout, no);
  void *dgqkv = g->alloc(nqkv * g->act_size);
  gpu_act_poison(g, dgqkv, nqkv);
  float *gq = gpu_zeros(nqkv), *gqr = gpu_zeros(nqkv);
  g->attn_bwd(dgqkv, dgout, dout, dqkv_in, state, B, N, H, hd, scale);
  cpu->attn_bwd(gqr, gout, outr, qkv, P, B, N, H, hd, scale);
  gpu_act_down(g, gq, dgqkv, nqkv);
  /* by parts: q, k, v of every token */
  float *part = malloc(no * sizeof(float)), *partr = malloc(no * sizeof(float));
  const char *pn[3] = {"dq", "dk", "dv"};
  for (int w = 0; w < 3; w++) {
    for (size_t t = 0; t < (size_t)B * N; t++) {
      memcpy(part + t * D, gq + (t * 3 + w) * D, D * sizeof(float));
      memcpy(partr + t * D, gqr + (t * 3 + w) * D, D * sizeof(float));
    }
    /* dk sums to ~0 per row (softmax shift invariance): compare it against the scale of dq */
    gpu_cmp(NAME(nm, "%s attn_bwd %s", tag, pn[w]), part, partr, no, w == 1 ? 3 * TOL : TOL);
  }
  g->free(dqkv_in), g->free(dout), g->free(state), g->free(dprobs), g->free(dgout), g->free(dgqkv);
  free(qkv), free(out), free(outr), free(pr), free(prr), free(P), free(gout), free(gq), free(gqr);
  free(part), free(partr);
}

/* ---- elementwise -------------------------------------------------------------------------------- */

/* GELU in form ap (0 exact, 1 tanh) */
static void check_gelu(size_t n, int ap) {
  char nm[128];
  float *x = gpu_randu(&R, n, -6.0f, 6.0f), *gy = gpu_randn(&R, n, 1.0f);
  void *dx = gpu_act_up(g, x, n), *dgy = gpu_act_up(g, gy, n);
  void *dy = g->alloc(n * g->act_size);
  gpu_act_poison(g, dy, n);
  float *y = gpu_zeros(n), *yr = gpu_zeros(n);
  g->gelu_fwd(dy, dx, n, ap);
  cpu->gelu_fwd(yr, x, n, ap);
  gpu_act_down(g, y, dy, n);
  gpu_cmp(NAME(nm, "%s gelu_fwd (approx %d) n=%zu", tag, ap, n), y, yr, n, TOL);
  if (gpu_is_half(g) && ap == 0) check_gelu_ulp(x, gy, y, dx, dgy, n);
  g->gelu_fwd(dx, dx, n, ap); /* in place */
  gpu_act_down(g, y, dx, n);
  gpu_cmp(NAME(nm, "%s gelu_fwd in place", tag), y, yr, n, TOL);
  g->free(dx);
  dx = gpu_act_up(g, x, n);
  g->gelu_bwd(dgy, dgy, dx, n, ap); /* dx may alias dy */
  cpu->gelu_bwd(yr, gy, x, n, ap);
  gpu_act_down(g, y, dgy, n);
  gpu_cmp(NAME(nm, "%s gelu_bwd in place", tag), y, yr, n, TOL);
  /* arrays one element off 16-byte alignment go element by element: the same numbers as the
   * 16-byte accesses of aligned ones */
  const size_t e = g->act_size;
  void *ux = g->alloc((n + 1) * e), *ud = g->alloc((n + 1) * e), *uy = g->alloc((n + 1) * e);
  void *ux1 = (char *)ux + e, *ud1 = (char *)ud + e, *uy1 = (char *)uy + e;
  float *fx = gpu_f32_up(g, x, n), *fgy = gpu_f32_up(g, gy, n), *ya = gpu_zeros(n);
  void *dgy2 = gpu_act_up(g, gy, n);
  g->act_from_f32(ux1, fx, n);
  g->act_from_f32(ud1, fgy, n);
  gpu_act_poison(g, uy1, n);
  gpu_act_poison(g, dy, n);
  g->gelu_fwd(uy1, ux1, n, ap);
  g->gelu_fwd(dy, dx, n, ap);
  gpu_act_down(g, y, uy1, n);
  gpu_act_down(g, ya, dy, n);
  gpu_cmp_exact(NAME(nm, "%s gelu_fwd unaligned = aligned", tag), y, ya, n);
  gpu_act_poison(g, uy1, n);
  gpu_act_poison(g, dy, n);
  g->gelu_bwd(uy1, ud1, ux1, n, ap);
  g->gelu_bwd(dy, dgy2, dx, n, ap);
  gpu_act_down(g, y, uy1, n);
  gpu_act_down(g, ya, dy, n);
  gpu_cmp_exact(NAME(nm, "%s gelu_bwd unaligned = aligned", tag), y, ya, n);
  gpu_cmp(NAME(nm, "%s gelu_bwd (aligned, out of place)", tag), ya, yr, n, TOL);
  g->free(ux), g->free(ud), g->free(uy), g->free(fx), g->free(fgy), g->free(dgy2);
  free(ya);
  g->free(dx), g->free(dgy), g->free(dy);
  free(x), free(gy), free(y), free(yr);
}

static void check_residual(int B, int rps, int D, int with_s) {
  char nm[128];
  const size_t n = (size_t)B * rps * D;
  float *x = gpu_randn(&R, n, 1.0f), *f = gpu_randn(&R, n, 1.0f), *s = gpu_randu(&R, B, 0.0f, 2.0f);
  s[0] = 0.0f; /* a dropped sample */
  void *dx = gpu_act_up(g, x, n), *df = gpu_act_up(g, f, n);
  float *ds = gpu_f32_up(g, s, B);
  float *y = gpu_zeros(n), *yr = gpu_zeros(n);
  g->residual_fwd(dx, dx, df, with_s ? ds : NULL, B, rps, D); /* y aliases x */
  cpu->residual_fwd(yr, x, f, with_s ? s : NULL, B, rps, D);
  gpu_act_down(g, y, dx, n);
  gpu_cmp(NAME(nm, "%s residual_fwd s=%s", tag, with_s ? "given" : "NULL"), y, yr, n, TOL);
  void *dgf = g->alloc(n * g->act_size);
  gpu_act_poison(g, dgf, n);
  g->residual_bwd(dgf, df, with_s ? ds : NULL, B, rps, D);
  cpu->residual_bwd(yr, f, with_s ? s : NULL, B, rps, D);
  gpu_act_down(g, y, dgf, n);
  gpu_cmp(NAME(nm, "%s residual_bwd", tag), y, yr, n, TOL);
  g->free(dx), g->free(df), g->free(ds), g->free(dgf);
  free(x), free(f), free(s), free(y), free(yr);
}

/* ---- loss and optimizer ------------------------------------------------------------------------- */

static void check_dino_loss(int B, int ns, int nt, int K) {
  char nm[128];
  const size_t nsr = (size_t)ns * B * K, ntr = (size_t)nt * B * K;
  float *s = gpu_randn(&R, nsr, 3.0f), *t = gpu_randn(&R, ntr, 3.0f), *c = gpu_randn(&R, K, 0.5f);
  void *dsd = gpu_act_up(g, s, nsr), *dtd = gpu_act_up(g, t, ntr);
  float *dc = gpu_f32_up(g, c, K), *dl = g->alloc(sizeof(float)), *dts = g->alloc(K * sizeof(float));
  void *dgs = g->alloc(nsr * g->act_size);
  gpu_act_poison(g, dgs, nsr);
  float loss = 0, lossr = 0, *gs = gpu_zeros(nsr), *gsr = gpu_zeros(nsr), *ts = gpu_zeros(K);
  float *tsr = gpu_zeros(K);
  g->dino_loss(dl, dgs, dts, dsd, dtd, dc, B, ns, nt, K, 0.1f, 0.04f, 1.0f);
  cpu->dino_loss(&lossr, gsr, tsr, s, t, c, B, ns, nt, K, 0.1f, 0.04f, 1.0f);
  gpu_f32_down(g, &loss, dl, 1);
  gpu_act_down(g, gs, dgs, nsr);
  gpu_f32_down(g, ts, dts, K);
  gpu_cmp(NAME(nm, "%s dino_loss B=%d ns=%d nt=%d K=%d: loss", tag, B, ns, nt, K), &loss, &lossr, 1,
          gpu_is_half(g) ? 1e-4 : 1e-5);
  gpu_cmp(NAME(nm, "%s dino_loss d student", tag), gs, gsr, nsr, TOL);
  gpu_cmp(NAME(nm, "%s dino_loss teacher column sums", tag), ts, tsr, K, 1e-5);
  /* no gradient wanted */
  g->dino_loss(dl, NULL, dts, dsd, dtd, dc, B, ns, nt, K, 0.1f, 0.04f, 1.0f);
  gpu_f32_down(g, &loss, dl, 1);
  gpu_cmp(NAME(nm, "%s dino_loss without gradient", tag), &loss, &lossr, 1, gpu_is_half(g) ? 1e-4 : 1e-5);
  /* centre update: exact */
  float *c2 = gpu_dup(c, K);
  g->center_update(dc, dts, K, (float)(nt * B), 0.9);
  cpu->center_update(c2, ts, K, (float)(nt * B), 0.9);
  gpu_f32_down(g, c, dc, K);
  gpu_cmp_exact(NAME(nm, "%s center_update", tag), c, c2, K);
  g->free(dsd), g->free(dtd), g->free(dc), g->free(dl), g->free(dts), g->free(dgs);
  free(s), free(t), free(c), free(gs), free(gsr), free(ts), free(tsr), free(c2);
}

/* The teacher targets' diagnostics: the column sums of Q and the sum of the rows' entropies (fp32
 * sums in another order than the CPU's); logits scaled so that many targets underflow to 0.  The
 * entropy is compared on the scale of its range, rows x ln K (near 0, as with sharp targets, its
 * rounding is that of log(sum of exp) in fp32: relative to 0 it means nothing). */
static void check_dino_stats(int rows, int K, float scale) {
  char nm[128];
  const size_t n = (size_t)rows * K;
  float *t = gpu_randn(&R, n, scale), *c = gpu_randn(&R, K, 0.5f);
  void *dtd = gpu_act_up(g, t, n);
  float *st = gpu_zeros(K + 1), *str = gpu_zeros(K + 1);
  for (int k = 0; k <= K; k++) st[k] = NAN; /* an element left unwritten fails */
  float *dc = gpu_f32_up(g, c, K), *dst = gpu_f32_up(g, st, K + 1);
  g->dino_stats(dst, dtd, dc, rows, K, 0.04f);
  cpu->dino_stats(str, t, c, rows, K, 0.04f);
  gpu_f32_down(g, st, dst, K + 1);
  gpu_cmp(NAME(nm, "%s dino_stats rows=%d K=%d x%g: column sums of Q", tag, rows, K, scale), st, str, K, 1e-5);
  const double herr = fabs((double)st[K] - str[K]) / (rows * log((double)K));
  if (t_verbose) printf("  %s dino_stats rows=%d K=%d x%g: entropy %.9g vs %.9g\n", tag, rows, K, scale, st[K], str[K]);
  T_CHECK(herr <= 1e-6, "%s dino_stats rows=%d K=%d x%g: entropy %.9g, CPU %.9g: error %.3e of rows x ln K", tag,
          rows, K, (double)scale, st[K], str[K], herr);
  g->free(dtd), g->free(dc), g->free(dst);
  free(t), free(c), free(st), free(str);
}

static void check_optimizer(void) {
  char nm[128];
  /* a flat buffer with tensors of assorted sizes (one larger than a chunk), gaps between them */
  const struct ops_seg segs[5] = {{0, 5}, {16, 1000}, {1024, 20000}, {21024, 1}, {21040, 7}};
  const size_t n = 21056;
  const int ns = 5;
  float *p = gpu_randn(&R, n, 1.0f), *gr = gpu_randn(&R, n, 0.1f), *m = gpu_randn(&R, n, 0.01f);
  float *v = gpu_randu(&R, n, 0.0f, 1e-3f), *tch = gpu_randn(&R, n, 1.0f);
  float *dp = gpu_f32_up(g, p, n), *dg = gpu_f32_up(g, gr, n), *dm = gpu_f32_up(g, m, n);
  float *dvv = gpu_f32_up(g, v, n), *dt = gpu_f32_up(g, tch, n);
  double norms[5], normsr[5];
  g->seg_norms(norms, dg, segs, ns);
  cpu->seg_norms(normsr, gr, segs, ns);
  {
    const double e = t_rel_err_f64(norms, normsr, ns);
    T_CHECK(e <= 1e-12, "%s seg_norms: relative error %.3e", tag, e);
  }
  const float scales[5] = {0.5f, 1.0f, 0.123f, 3.0f, 0.999f};
  /* CPU sequence: seg_scale, adamw, ema; GPU: the fused op on copies, then the same sequence */
  struct ops_adamw_seg as[4];
  const int pick[4] = {0, 1, 2, 4}; /* segment 3 frozen: no AdamW, EMA only */
  float ascale[4];
  for (int i = 0; i < 4; i++) {
    as[i].off = segs[pick[i]].off;
    as[i].n = segs[pick[i]].n;
    as[i].decay = 1.0f - 1e-4f * (float)i;
    as[i].step_size = 1e-3f * (float)(i + 1);
    as[i].bc2_sqrt = 0.03f + 0.01f * (float)i;
    ascale[i] = scales[pick[i]];
  }
  float *pr = gpu_dup(p, n), *grr = gpu_dup(gr, n), *mr = gpu_dup(m, n), *vr = gpu_dup(v, n);
  float *tr = gpu_dup(tch, n);
  cpu->seg_scale(grr, segs, scales, ns);
  cpu->adamw(pr, grr, mr, vr, as, 4, 0.9, 0.999, 1e-8);
  cpu->ema(tr, pr, n, 0.996);
  g->adamw_ema(dp, dg, dm, dvv, as, 4, ascale, 0.9, 0.999, 1e-8, dt, n, 0.996);
  float *h = gpu_zeros(n);
  gpu_f32_down(g, h, dp, n);
  gpu_cmp_exact(NAME(nm, "%s adamw_ema params", tag), h, pr, n);
  gpu_f32_down(g, h, dm, n);
  gpu_cmp_exact(NAME(nm, "%s adamw_ema exp_avg", tag), h, mr, n);
  gpu_f32_down(g, h, dvv, n);
  gpu_cmp_exact(NAME(nm, "%s adamw_ema exp_avg_sq", tag), h, vr, n);
  gpu_f32_down(g, h, dt, n);
  gpu_cmp_exact(NAME(nm, "%s adamw_ema teacher", tag), h, tr, n);
  gpu_f32_down(g, h, dg, n);
  gpu_cmp_exact(NAME(nm, "%s adamw_ema leaves the gradients unclipped", tag), h, gr, n);
  /* the separate ops, from the same start */
  g->upload(dp, p, n * sizeof(float));
  g->upload(dm, m, n * sizeof(float));
  g->upload(dvv, v, n * sizeof(float));
  g->upload(dt, tch, n * sizeof(float));
  g->seg_scale(dg, segs, scales, ns);
  gpu_f32_down(g, h, dg, n);
  gpu_cmp_exact(NAME(nm, "%s seg_scale", tag), h, grr, n);
  g->adamw(dp, dg, dm, dvv, as, 4, 0.9, 0.999, 1e-8);
  gpu_f32_down(g, h, dp, n);
  gpu_cmp_exact(NAME(nm, "%s adamw params", tag), h, pr, n);
  gpu_f32_down(g, h, dvv, n);
  gpu_cmp_exact(NAME(nm, "%s adamw exp_avg_sq", tag), h, vr, n);
  g->ema(dt, dp, n, 0.996);
  gpu_f32_down(g, h, dt, n);
  gpu_cmp_exact(NAME(nm, "%s ema", tag), h, tr, n);
  /* without clipping factors */
  memcpy(pr, p, n * sizeof(float));
  memcpy(mr, m, n * sizeof(float));
  memcpy(vr, v, n * sizeof(float));
  memcpy(tr, tch, n * sizeof(float));
  g->upload(dp, p, n * sizeof(float));
  g->upload(dm, m, n * sizeof(float));
  g->upload(dvv, v, n * sizeof(float));
  g->upload(dt, tch, n * sizeof(float));
  g->upload(dg, gr, n * sizeof(float));
  cpu->adamw(pr, gr, mr, vr, as, 4, 0.9, 0.999, 1e-8);
  cpu->ema(tr, pr, n, 0.999);
  g->adamw_ema(dp, dg, dm, dvv, as, 4, NULL, 0.9, 0.999, 1e-8, dt, n, 0.999);
  gpu_f32_down(g, h, dt, n);
  gpu_cmp_exact(NAME(nm, "%s adamw_ema without clipping: teacher", tag), h, tr, n);
  g->free(dp), g->free(dg), g->free(dm), g->free(dvv), g->free(dt);
  free(p), free(gr), free(m), free(v), free(tch), free(pr), free(grr), free(mr), free(vr), free(tr);
  free(h);
}

static void check_conversions(size_t n) {
  char nm[128];
  float *x = gpu_randn(&R, n, 100.0f), *xr = gpu_dup(x, n), *y = gpu_zeros(n);
  void *d = gpu_act_up(g, x, n); /* rounds x */
  gpu_round(g, xr, n);
  gpu_act_down(g, y, d, n);
  gpu_cmp_exact(NAME(nm, "%s act_from_f32 / act_to_f32 (round to nearest even)", tag), y, xr, n);
  g->free(d);
  free(x), free(xr), free(y);
}

static void run_all(const char *precision) {
  g = gpu_or_skip(precision);
  snprintf(tag, sizeof tag, "%s", precision);
  TOL = gpu_is_bf16(g) ? 1.5e-2 : gpu_is_f16(g) ? 2e-3 : 2e-5;
  printf("%s: activations of %zu bytes\n", precision, g->act_size);
  check_conversions(10007);
  struct backend_cuda_info info;
  backend_cuda_info(&info);
  const int emulated = strstr(info.name, "emulator") != NULL;
  long n0 = backend_cuda_bias_grad_fused();
  check_linear(37, 48, 16, 1);
  check_linear(394, 1152, 384, 1);
  check_linear(5, 3, 7, 1); /* odd sizes: a misaligned bias, tiny GEMMs */
  check_linear(130, 65, 33, 0);
  check_linear(640, 256, 2048, 1);
  long n1 = backend_cuda_bias_grad_fused();
  printf("%s: %ld of 4 bias gradients summed by the weight gradient's GEMM epilogue\n", tag, n1 - n0);
  if (emulated) T_CHECK(n1 - n0 == 4, "emulated cuBLASLt summed %ld of 4 bias gradients", n1 - n0);
  /* The column-sum kernel, chosen and as the fallback where cuBLASLt declines the epilogue (the
   * stand-in declines on request; a real cuBLASLt ignores the variable and may run either). */
  static const char *const bg_how[] = {"kernel", "epilogue"};
  for (int i = 0; i < 2; i++) {
    if (i == 1) setenv("SCDINO_EMU_LT_BGRADB", "decline", 1);
    backend_cuda_set_bias_grad(bg_how[i]);
    snprintf(tag, sizeof tag, "%s bgrad=%s%s", precision, bg_how[i], i ? " declined" : "");
    n0 = backend_cuda_bias_grad_fused();
    check_linear(394, 1152, 384, 1);
    check_linear(5, 3, 7, 1);
    n1 = backend_cuda_bias_grad_fused();
    if (emulated || i == 0) T_CHECK(n1 == n0, "%s: the epilogue summed %ld bias gradients", tag, n1 - n0);
  }
  /* An epilogue whose sums are wrong (the stand-in doubles them on request): the backend's check
   * of each shape's first sums must catch it and turn to the kernel, with right results. */
  if (emulated) {
    setenv("SCDINO_EMU_LT_BGRADB", "wrong", 1);
    backend_cuda_set_bias_grad("epilogue");
    snprintf(tag, sizeof tag, "%s bgrad=epilogue wrong", precision);
    n0 = backend_cuda_bias_grad_fused();
    check_linear(394, 1152, 384, 1);
    check_linear(37, 48, 16, 1);
    n1 = backend_cuda_bias_grad_fused();
    T_CHECK(n1 == n0 && !strcmp(backend_cuda_bias_grad(), "kernel"),
            "wrong epilogue sums: %ld used, bias gradients by %s", n1 - n0, backend_cuda_bias_grad());
  }
  unsetenv("SCDINO_EMU_LT_BGRADB");
  backend_cuda_set_bias_grad("epilogue");
  snprintf(tag, sizeof tag, "%s", precision);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) check_matmul(17, 48, 5, ta, tb, ta ? 1.0f : 0.0f);
  check_matmul(37, 384, 197, 0, 0, 0.0f);
  check_patch_tokens(2, 3, 32, 32, 8, 48);
  check_patch_tokens(3, 5, 20, 28, 8, 40); /* remainders dropped */
  check_layernorm(37, 48, 48);
  check_layernorm(4, 48, 17 * 48); /* CLS rows */
  check_layernorm(300, 384, 384);
  check_layernorm(70, 1100, 1100); /* wider than the one-pass backward */
  check_fused_residual_ln(3, 37, 384, 1);
  check_fused_residual_ln(2, 50, 48, 0);
  check_fused_residual_ln(4, 20, 768, 1);
  check_fused_residual_ln(2, 9, 1100, 1);
  check_l2norm(10, 32);
  check_l2norm(64, 256);
  check_weightnorm(64, 32, 1);
  check_weightnorm(1000, 256, 0);
  static const char *const impls[] = {"gemm", "flash", "cudnn"};
  long f0, b0, f1, b1;
  backend_cuda_cudnn_attention_runs(&f0, &b0);
  for (int impl = 0; impl < 3; impl++) {
    if (impl == 2 && !gpu_is_half(g)) continue; /* fp32 keeps the GEMM form (fp16: cuDNN's fallback) */
    backend_cuda_set_attention(impls[impl]);
    snprintf(tag, sizeof tag, "%s %s", precision, backend_cuda_attention());
    check_attention_cases();
  }
  backend_cuda_cudnn_attention_runs(&f1, &b1);
  if (gpu_is_bf16(g)) { /* 7 cases with hd % 8 == 0: two forward calls without probabilities each */
    const char *why = backend_cuda_cudnn_attention_why_not();
    printf("cuDNN attention: %ld of 14 forward and %ld of 7 backward calls ran in cuDNN%s%s\n",
           f1 - f0, b1 - b0, *why ? "; " : "", why);
    if (emulated)
      T_CHECK(f1 - f0 == 14 && b1 - b0 == 7, "emulated cuDNN ran %ld forward, %ld backward calls",
              f1 - f0, b1 - b0);
  }
  if (gpu_is_bf16(g) && emulated) {
    /* The stand-in declines every call, then every backward call: the GEMM form on cuDNN's state
     * (its lse, or the one it wrote itself) must give the same results. */
    static const char *const modes[] = {"none", "nobwd"};
    static const long want_fwd[] = {0, 14};
    for (int m = 0; m < 2; m++) {
      setenv("SCDINO_EMU_CUDNN", modes[m], 1);
      backend_cuda_set_attention("cudnn"); /* plans and refusals made afresh */
      snprintf(tag, sizeof tag, "%s cudnn/%s", precision, modes[m]);
      backend_cuda_cudnn_attention_runs(&f0, &b0);
      check_attention_cases();
      backend_cuda_cudnn_attention_runs(&f1, &b1);
      T_CHECK(f1 - f0 == want_fwd[m] && b1 - b0 == 0,
              "SCDINO_EMU_CUDNN=%s: emulated cuDNN ran %ld forward, %ld backward calls", modes[m],
              f1 - f0, b1 - b0);
    }
    unsetenv("SCDINO_EMU_CUDNN");
  }
  if (gpu_is_half(g)) check_flash_tiles(precision);
  backend_cuda_set_attention("gemm");
  snprintf(tag, sizeof tag, "%s", precision);
  for (int ap = 0; ap < 2; ap++) {
    check_gelu(10007, ap);
    check_gelu_bias(300, 1152, ap); /* 16-byte vectors, 3 chunks of rows, a part strip */
    check_gelu_bias(37, 13, ap);    /* one element at a time */
    check_gelu_bias(1300, 72, ap);  /* 11 chunks: the chunk sums 8 at a time, then 3 */
  }
  check_gelu_gemm(emulated);
  check_residual(3, 5, 48, 0);
  check_residual(3, 5, 48, 1);
  check_dino_loss(3, 4, 2, 1000);   /* one split of a row, 16-byte accesses */
  check_dino_loss(2, 10, 2, 65536); /* 8 splits */
  check_dino_loss(2, 3, 2, 16392);  /* 3 splits, the last one 8 columns wide */
  check_dino_loss(1, 3, 3, 20001);  /* one element at a time (K odd), a ragged last split */
  check_dino_stats(6, 1000, 3.0f);   /* one split, 16-byte accesses */
  check_dino_stats(4, 65536, 3.0f);  /* 8 splits */
  check_dino_stats(9, 20001, 0.3f);  /* one element at a time, a ragged last split; near-uniform */
  check_dino_stats(4, 16392, 40.0f); /* most targets 0 */
  check_optimizer();
  check_adamw_copies();
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  /* --gemm-tune: the same checks with cuBLASLt's candidates timed first (&gpu gemm_tune) */
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--gemm-tune")) backend_cuda_set_gemm_tune(1);
  cpu = backend_cpu();
  rng_init(&R, 7, RNG_DOMAIN_TEST, 1, 0);
  run_all("fp32");
  run_all("bf16");
  run_all("fp16");
  check_older_archs();
  /* memory and timing figures are reported */
  size_t in_use = 0, peak = 0, fr = 0, tot = 0;
  backend_cuda_memory(&in_use, &peak, &fr, &tot);
  T_CHECK(peak >= in_use && peak > 0 && tot > 0, "memory: in use %zu, peak %zu, device %zu", in_use,
          peak, tot);
  backend_cuda_set_profiling(1);
  struct ops_profile pf;
  g->profile(NULL, 1);
  check_linear(64, 64, 64, 1);
  g->profile(&pf, 0);
  backend_cuda_set_profiling(0);
  T_CHECK(pf.calls > 0 && pf.gemm_s > 0 && pf.other_s >= 0, "profile: %ld calls, GEMM %.3g s",
          pf.calls, pf.gemm_s);
  printf("peak device memory of the backend: %.1f MiB\n", peak / 1048576.0);
  return t_finish();
}
