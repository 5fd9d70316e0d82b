/* test_gpu_fused.c - part of tests/gpu/test_gpu_ops: the CUDA backend's fused ops (residual +
 * LayerNorm, LayerNorm + drop-path backward, GELU backward + bias gradient) against the plain ops
 * they replace, bit for bit, and against the CPU backend's fused ops to the tolerance; the bf16
 * weight copies the fused optimizer writes. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>

#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_ops_ctx.h"
#include "tests/gpu/gpu_util.h"

/* Two device arrays of n activations (act != 0) or fp32 values, bit for bit. */
static void dev_same(const char *what, const void *da, const void *db, size_t n, int act) {
  float *h[2] = {gpu_zeros(n), gpu_zeros(n)};
  const void *d[2] = {da, db};
  for (int i = 0; i < 2; i++) {
    if (act) gpu_act_down(g, h[i], d[i], n);
    else gpu_f32_down(g, h[i], d[i], n);
  }
  gpu_cmp_exact(what, h[0], h[1], n);
  free(h[0]), free(h[1]);
}
#define act_same(what, da, db, n) dev_same(what, da, db, n, 1)
#define f32_same(what, da, db, n) dev_same(what, da, db, n, 0)

/* The fused residual + LayerNorm forward and LayerNorm + drop-path backward: the GPU's two ops in
 * turn bit for bit (they share the row code), the CPU's fused ops to the tolerance. */
void check_fused_residual_ln(int B, int rps, int D, int with_s) {
  char nm[160];
  const int rows = B * rps;
  const size_t n = (size_t)rows * D;
  float *x = gpu_randn(&R, n, 1.5f), *f = gpu_randn(&R, n, 1.0f), *s = gpu_randu(&R, B, 0.0f, 2.0f);
  float *gm = gpu_randn(&R, D, 1.0f), *bt = gpu_randn(&R, D, 1.0f);
  s[B - 1] = 0.0f; /* a dropped sample */
  const float *sp = with_s ? s : NULL;
  void *dxa = gpu_act_up(g, x, n), *dfa = gpu_act_up(g, f, n);
  float *ds = gpu_f32_up(g, s, B), *dsp = with_s ? ds : NULL;
  float *dgm = gpu_f32_up(g, gm, D), *dbt = gpu_f32_up(g, bt, D);
  void *y1 = g->alloc(n * g->act_size), *ln1 = g->alloc(n * g->act_size);
  void *y2 = g->alloc(n * g->act_size), *ln2 = g->alloc(n * g->act_size);
  float *m1 = g->alloc(rows * sizeof(float)), *r1 = g->alloc(rows * sizeof(float));
  float *m2 = g->alloc(rows * sizeof(float)), *r2 = g->alloc(rows * sizeof(float));
  gpu_act_poison(g, y2, n);
  gpu_act_poison(g, ln2, n);
  g->residual_fwd(y1, dxa, dfa, dsp, B, rps, D);
  g->layernorm_fwd(ln1, m1, r1, y1, D, dgm, dbt, rows, D, 1e-6f);
  g->residual_layernorm_fwd(y2, ln2, m2, r2, dxa, dfa, dsp, dgm, dbt, B, rps, D, 1e-6f);
  float *a = gpu_zeros(n), *yr = gpu_zeros(n), *lnr = gpu_zeros(n);
  float *mr = gpu_zeros(rows), *rr = gpu_zeros(rows);
  const char *sn = with_s ? "given" : "NULL";
  act_same(NAME(nm, "%s residual_layernorm_fwd %dx%dx%d s=%s: sum = residual_fwd", tag, B, rps, D, sn), y2, y1, n);
  act_same(NAME(nm, "%s residual_layernorm_fwd: LayerNorm = layernorm_fwd of the sum", tag), ln2, ln1, n);
  f32_same(NAME(nm, "%s residual_layernorm_fwd: mean", tag), m2, m1, rows);
  f32_same(NAME(nm, "%s residual_layernorm_fwd: rstd", tag), r2, r1, rows);
  cpu->residual_layernorm_fwd(yr, lnr, mr, rr, x, f, sp, gm, bt, B, rps, D, 1e-6f);
  gpu_act_down(g, a, y2, n);
  gpu_cmp(NAME(nm, "%s residual_layernorm_fwd sum vs CPU", tag), a, yr, n, TOL);
  gpu_act_down(g, a, ln2, n);
  gpu_cmp(NAME(nm, "%s residual_layernorm_fwd LayerNorm vs CPU", tag), a, lnr, n, TOL);
  /* in place (y = x), statistics not kept */
  g->residual_layernorm_fwd(dxa, ln2, NULL, NULL, dxa, dfa, dsp, dgm, dbt, B, rps, D, 1e-6f);
  act_same(NAME(nm, "%s residual_layernorm_fwd in place: sum", tag), dxa, y1, n);
  act_same(NAME(nm, "%s residual_layernorm_fwd in place: LayerNorm", tag), ln2, ln1, n);

  /* backward on the sum: layernorm_bwd then residual_bwd, against the fused op */
  float *gy = gpu_randn(&R, n, 1.0f), *gx0 = gpu_randn(&R, n, 1.0f);
  float *gg0 = gpu_randn(&R, D, 1.0f), *gb0 = gpu_randn(&R, D, 1.0f);
  void *dgy = gpu_act_up(g, gy, n), *dx1 = gpu_act_up(g, gx0, n), *dx2 = gpu_act_up(g, gx0, n);
  float *dg1 = gpu_f32_up(g, gg0, D), *db1 = gpu_f32_up(g, gb0, D);
  float *dg2 = gpu_f32_up(g, gg0, D), *db2 = gpu_f32_up(g, gb0, D);
  void *df1 = g->alloc(n * g->act_size), *df2 = g->alloc(n * g->act_size);
  gpu_act_poison(g, df2, n);
  g->layernorm_bwd(dx1, dg1, db1, dgy, y1, D, m1, r1, dgm, rows, D);
  g->residual_bwd(df1, dx1, dsp, B, rps, D);
  g->layernorm_residual_bwd(dx2, dg2, db2, df2, dsp, dgy, y1, m1, r1, dgm, B, rps, D);
  act_same(NAME(nm, "%s layernorm_residual_bwd %dx%dx%d s=%s: dx = layernorm_bwd's", tag, B, rps, D, sn), dx2, dx1, n);
  act_same(NAME(nm, "%s layernorm_residual_bwd: df = residual_bwd's", tag), df2, df1, n);
  float *pa = gpu_zeros(D);
  f32_same(NAME(nm, "%s layernorm_residual_bwd: dg", tag), dg2, dg1, D);
  f32_same(NAME(nm, "%s layernorm_residual_bwd: db", tag), db2, db1, D);
  /* against the CPU's fused op, from the same (rounded) sum and the CPU's statistics */
  float *ysum = gpu_zeros(n), *gxr = gpu_dup(gx0, n), *ggr = gpu_dup(gg0, D), *gbr = gpu_dup(gb0, D);
  float *gfr = gpu_zeros(n);
  gpu_act_down(g, ysum, y1, n);
  cpu->layernorm_fwd(lnr, mr, rr, ysum, D, gm, bt, rows, D, 1e-6f);
  float *dmr = gpu_f32_up(g, mr, rows), *drr = gpu_f32_up(g, rr, rows);
  void *dx3 = gpu_act_up(g, gx0, n);
  float *dg3 = gpu_f32_up(g, gg0, D), *db3 = gpu_f32_up(g, gb0, D);
  gpu_act_poison(g, df2, n);
  g->layernorm_residual_bwd(dx3, dg3, db3, df2, dsp, dgy, y1, dmr, drr, dgm, B, rps, D);
  cpu->layernorm_residual_bwd(gxr, ggr, gbr, gfr, sp, gy, ysum, mr, rr, gm, B, rps, D);
  gpu_act_down(g, a, dx3, n);
  gpu_cmp(NAME(nm, "%s layernorm_residual_bwd dx (+=) vs CPU", tag), a, gxr, n, TOL);
  gpu_act_down(g, a, df2, n);
  gpu_cmp(NAME(nm, "%s layernorm_residual_bwd df vs CPU", tag), a, gfr, n, TOL);
  gpu_f32_down(g, pa, dg3, D);
  gpu_cmp(NAME(nm, "%s layernorm_residual_bwd dg (+=) vs CPU", tag), pa, ggr, D, TOL);
  gpu_f32_down(g, pa, db3, D);
  gpu_cmp(NAME(nm, "%s layernorm_residual_bwd db (+=) vs CPU", tag), pa, gbr, D, TOL);

  g->free(dxa), g->free(dfa), g->free(ds), g->free(dgm), g->free(dbt), g->free(y1), g->free(ln1);
  g->free(y2), g->free(ln2), g->free(m1), g->free(r1), g->free(m2), g->free(r2), g->free(dgy);
  g->free(dx1), g->free(dx2), g->free(dg1), g->free(db1), g->free(dg2), g->free(db2), g->free(df1);
  g->free(df2), g->free(dmr), g->free(drr), g->free(dx3), g->free(dg3), g->free(db3);
  free(x), free(f), free(s), free(gm), free(bt), free(a), free(yr), free(lnr), free(mr), free(rr);
  free(gy), free(gx0), free(gg0), free(gb0), free(pa);
  free(ysum), free(gxr), free(ggr), free(gbr), free(gfr);
}

/* GELU's backward with fc1's bias gradient: the GPU's gelu_bwd and linear_bwd's db in turn bit
 * for bit (the same column-sum order), the CPU's fused op to the tolerance.  In place, as vit.c
 * runs it. */
void check_gelu_bias(int rows, int cols, int ap) {
  char nm[128];
  const size_t n = (size_t)rows * cols;
  float *x = gpu_randu(&R, n, -6.0f, 6.0f), *gy = gpu_randn(&R, n, 1.0f), *b0 = gpu_randn(&R, cols, 1.0f);
  void *dxa = gpu_act_up(g, x, n), *d1 = gpu_act_up(g, gy, n), *d2 = gpu_act_up(g, gy, n);
  float *db1 = gpu_f32_up(g, b0, cols), *db2 = gpu_f32_up(g, b0, cols);
  g->gelu_bwd(d1, d1, dxa, n, ap);
  g->linear_bwd(NULL, NULL, db1, d1, NULL, NULL, rows, cols, 1);
  g->gelu_bwd_bias(d2, db2, d2, dxa, rows, cols, ap);
  act_same(NAME(nm, "%s gelu_bwd_bias %dx%d (approx %d): dx = gelu_bwd's", tag, rows, cols, ap), d2, d1, n);
  f32_same(NAME(nm, "%s gelu_bwd_bias: db = linear_bwd's", tag), db2, db1, cols);
  float *dxr = gpu_zeros(n), *dbr = gpu_dup(b0, cols), *h = gpu_zeros(n), *hb = gpu_zeros(cols);
  cpu->gelu_bwd_bias(dxr, dbr, gy, x, rows, cols, ap);
  gpu_act_down(g, h, d2, n);
  gpu_f32_down(g, hb, db2, cols);
  gpu_cmp(NAME(nm, "%s gelu_bwd_bias dx vs CPU", tag), h, dxr, n, TOL);
  gpu_cmp(NAME(nm, "%s gelu_bwd_bias db (+=) vs CPU", tag), hb, dbr, cols, TOL);
  g->free(dxa), g->free(d1), g->free(d2), g->free(db1), g->free(db2);
  free(x), free(gy), free(b0), free(dxr), free(dbr), free(h), free(hb);
}

/* The fused optimizer writes the bf16 copies of student and teacher that the GEMMs use: after
 * adamw_ema, a Linear with either's weights must see the updated values (a stale or misplaced copy
 * gives the old weights' outputs).  Half the student's weights are frozen (no AdamW: their copies
 * must stay right), and a second round starts from a student changed by an upload (its copy
 * stale: the optimizer must leave the conversion to the GEMM). */
void check_adamw_copies(void) {
  char nm[160];
  const int M = 33, N = 48, K = 40, nw = N * K;
  const size_t n = (size_t)nw + 24;
  float *p = gpu_randn(&R, n, 1.0f), *gr = gpu_randn(&R, n, 1.0f), *t = gpu_randn(&R, n, 1.0f);
  float *x = gpu_randn(&R, (size_t)M * K, 1.0f), *zero = gpu_zeros(n);
  float *dp = gpu_f32_up(g, p, n), *dg = gpu_f32_up(g, gr, n), *dt = gpu_f32_up(g, t, n);
  float *dm = gpu_f32_up(g, zero, n), *dv = gpu_f32_up(g, zero, n);
  void *dx = gpu_act_up(g, x, (size_t)M * K), *dy = g->alloc((size_t)M * N * g->act_size);
  float *y = gpu_zeros((size_t)M * N), *yr = gpu_zeros((size_t)M * N), *h = gpu_zeros(n);
  if (g->params_changed) g->params_changed(dp, n), g->params_changed(dt, n);
  /* AdamW on the first half of the weights and the tail, in steps large against bf16's spacing */
  const struct ops_adamw_seg as[2] = {{0, (size_t)nw / 2, 1.0f, 0.25f, 1.0f}, {(size_t)nw, 24, 1.0f, 0.25f, 1.0f}};
  for (int round = 0; round < 2; round++) {
    for (int who = 0; who < 2; who++) /* the copies in use (clean) before the update */
      g->linear_fwd(dy, dx, who ? dt : dp, NULL, M, N, K);
    if (round == 1) { /* a new student by upload: its copy is stale from here */
      for (size_t i = 0; i < n; i++) p[i] = -p[i];
      g->upload(dp, p, n * sizeof(float));
    }
    g->adamw_ema(dp, dg, dm, dv, as, 2, NULL, 0.9, 0.999, 1e-8, dt, n, 0.5);
    for (int who = 0; who < 2; who++) {
      float *dw = who ? dt : dp;
      gpu_f32_down(g, h, dw, n);
      gpu_act_poison(g, dy, (size_t)M * N);
      g->linear_fwd(dy, dx, dw, NULL, M, N, K);
      gpu_act_down(g, y, dy, (size_t)M * N);
      cpu->linear_fwd(yr, x, h, NULL, M, N, K);
      gpu_cmp(NAME(nm, "%s linear_fwd after adamw_ema, %s weights, round %d", tag,
                   who ? "teacher" : "student", round), y, yr, (size_t)M * N, TOL);
    }
  }
  g->free(dp), g->free(dg), g->free(dt), g->free(dm), g->free(dv), g->free(dx), g->free(dy);
  free(p), free(gr), free(t), free(x), free(zero), free(y), free(yr), free(h);
}
