/* test_ops.c - every CPU op's backward against central finite differences, in double precision.
 *
 * The kernels are templates instantiated in double (src/cpu/kern_f64.c) and in float (the
 * backend): for each op the double instance's analytic gradient must match central differences
 * of the double forward, and the float instance must match the double one to fp32 rounding.
 * Forward semantics are checked against naive formulas written here (convolution, DINO loss,
 * bicubic interpolation through imgops). */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cpu/kern.h"
#include "data/imgops.h"
#include "model/vit.h"
#include "tests/fixtures/testutil.h"

#define TOL_FD 1e-6   /* double analytic vs central differences */
#define TOL_F32 2e-5  /* float instance vs double instance */

static struct rng g_rng;

static double *rnd(size_t n, double scale) {
  double *x = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(&g_rng);
  return x;
}
static double *zeros(size_t n) { return calloc(n, sizeof(double)); }
static float *tof(const double *x, size_t n) {
  float *f = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) f[i] = (float)x[i];
  return f;
}
static float *fzeros(size_t n) { return calloc(n, sizeof(float)); }
static double rel(const double *a, const double *b, size_t n) { return t_rel_err_f64(a, b, n); }
static double relf(const float *a, const double *b, size_t n) {
  double *t = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) t[i] = a[i];
  const double e = rel(t, b, n);
  free(t);
  return e;
}

/* The scalar whose gradient is checked: L = sum_i w_i y_i over an op's output y. */
struct fdcase {
  void (*fwd)(struct fdcase *c); /* recompute c->y from the inputs */
  double *y, *w;
  size_t ny;
  void *ctx;
};
static double fd_loss(struct fdcase *c) {
  c->fwd(c);
  double s = 0;
  for (size_t i = 0; i < c->ny; i++) s += c->w[i] * c->y[i];
  return s;
}
/* Central differences of L w.r.t. x[0..n-1] against the analytic gradient g. */
static void fd_check(struct fdcase *c, double *x, size_t n, const double *g, const char *what) {
  double *fd = zeros(n);
  for (size_t i = 0; i < n; i++) {
    const double save = x[i], h = 1e-6 * (fabs(save) > 0 ? fabs(save) : 1.0);
    x[i] = save + h;
    const double lp = fd_loss(c);
    x[i] = save - h;
    const double lm = fd_loss(c);
    x[i] = save;
    fd[i] = (lp - lm) / (2 * h);
  }
  fd_loss(c); /* leave y at the unperturbed point */
  const double e = rel(g, fd, n);
  if (t_verbose) printf("  %-44s FD rel err %.3e\n", what, e);
  T_CHECK(e <= TOL_FD, "%s: analytic vs finite differences %.3e > %.0e", what, e, TOL_FD);
  free(fd);
}
static void f32_check(const float *f, const double *d, size_t n, const char *what) {
  const double e = relf(f, d, n);
  if (t_verbose) printf("  %-44s f32 vs f64 rel err %.3e\n", what, e);
  T_CHECK(e <= TOL_F32, "%s: float vs double %.3e > %.0e", what, e, TOL_F32);
}

/* ---- Linear ------------------------------------------------------------------------------- */
enum { LM = 5, LN = 4, LK = 6 };
static double *lx, *lw, *lb;
static void lin_fwd(struct fdcase *c) { kern_linear_fwd_f64(c->y, lx, lw, lb, LM, LN, LK); }
static void test_linear(void) {
  lx = rnd(LM * LK, 1), lw = rnd(LN * LK, 1), lb = rnd(LN, 1);
  struct fdcase c = {lin_fwd, zeros(LM * LN), rnd(LM * LN, 1), LM * LN, NULL};
  fd_loss(&c);
  /* forward against the definition */
  double e = 0;
  for (int m = 0; m < LM; m++)
    for (int n = 0; n < LN; n++) {
      double s = lb[n];
      for (int k = 0; k < LK; k++) s += lx[m * LK + k] * lw[n * LK + k];
      e = fmax(e, fabs(s - c.y[m * LN + n]));
    }
  T_CHECK(e < 1e-12, "linear forward differs from x W^T + b by %.3e", e);
  double *dx = zeros(LM * LK), *dw = rnd(LN * LK, 1), *db = rnd(LN, 1);
  double *dw0 = malloc(LN * LK * sizeof(double)), *db0 = malloc(LN * sizeof(double));
  memcpy(dw0, dw, LN * LK * sizeof(double));
  memcpy(db0, db, LN * sizeof(double));
  kern_linear_bwd_f64(dx, dw, db, c.w, lx, lw, LM, LN, LK);
  for (int i = 0; i < LN * LK; i++) dw[i] -= dw0[i]; /* the op accumulates */
  for (int i = 0; i < LN; i++) db[i] -= db0[i];
  fd_check(&c, lx, LM * LK, dx, "linear dx");
  fd_check(&c, lw, LN * LK, dw, "linear dW");
  fd_check(&c, lb, LN, db, "linear db");
  /* float instance */
  float *fx = tof(lx, LM * LK), *fw = tof(lw, LN * LK), *fb = tof(lb, LN), *fy = fzeros(LM * LN);
  float *fdy = tof(c.w, LM * LN), *fdx = fzeros(LM * LK), *fdw = fzeros(LN * LK), *fdb = fzeros(LN);
  kern_linear_fwd_f32(fy, fx, fw, fb, LM, LN, LK);
  kern_linear_bwd_f32(fdx, fdw, fdb, fdy, fx, fw, LM, LN, LK);
  f32_check(fy, c.y, LM * LN, "linear y");
  f32_check(fdx, dx, LM * LK, "linear dx");
  f32_check(fdw, dw, LN * LK, "linear dW");
  f32_check(fdb, db, LN, "linear db");
  /* matmul with transposes against the definition, accumulating (beta = 1) */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      const int M = 3, N = 4, K = 5;
      double *a = rnd(M * K, 1), *b = rnd(K * N, 1), *cc = rnd(M * N, 1), *c0 = malloc(M * N * 8);
      memcpy(c0, cc, M * N * 8);
      kern_matmul_f64(cc, a, b, M, N, K, ta, tb, 1.0);
      double err = 0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double s = c0[i * N + j];
          for (int k = 0; k < K; k++)
            s += (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
          err = fmax(err, fabs(s - cc[i * N + j]));
        }
      T_CHECK(err < 1e-12, "matmul ta=%d tb=%d differs by %.3e", ta, tb, err);
      free(a), free(b), free(cc), free(c0);
    }
  free(lx), free(lw), free(lb), free(c.y), free(c.w), free(dx), free(dw), free(db), free(dw0);
  free(db0), free(fx), free(fw), free(fb), free(fy), free(fdy), free(fdx), free(fdw), free(fdb);
}

/* ---- patch embedding = strided convolution ------------------------------------------------ */
static void test_patch_embed(void) {
  const int B = 2, C = 3, H = 11, W = 9, p = 4, D = 5, gh = H / p, gw = W / p, Np = gh * gw;
  double *img = rnd((size_t)B * C * H * W, 1), *w = rnd((size_t)D * C * p * p, 1), *b = rnd(D, 1);
  double *cols = zeros((size_t)B * Np * C * p * p), *y = zeros((size_t)B * Np * D);
  kern_patchify_f64(cols, img, B, C, H, W, p);
  kern_linear_fwd_f64(y, cols, w, b, B * Np, D, C * p * p);
  double err = 0;
  for (int bb = 0; bb < B; bb++)
    for (int d = 0; d < D; d++)
      for (int gy = 0; gy < gh; gy++)
        for (int gx = 0; gx < gw; gx++) {
          double s = b[d];
          for (int c = 0; c < C; c++)
            for (int ky = 0; ky < p; ky++)
              for (int kx = 0; kx < p; kx++)
                s += w[((d * C + c) * p + ky) * p + kx] *
                     img[((size_t)(bb * C + c) * H + gy * p + ky) * W + gx * p + kx];
          /* token order: row-major over the grid (flatten(2).transpose(1,2)) */
          err = fmax(err, fabs(s - y[((size_t)bb * Np + gy * gw + gx) * D + d]));
        }
  T_CHECK(err < 1e-12, "patchify + linear differs from Conv2d(stride=kernel) by %.3e", err);
  free(img), free(w), free(b), free(cols), free(y);
}

/* ---- tokens -------------------------------------------------------------------------------- */
enum { TB = 3, TNP = 4, TD = 5 };
static double *tp, *tcls, *tpos;
static void tok_fwd(struct fdcase *c) { kern_tokens_fwd_f64(c->y, tp, tcls, tpos, TB, TNP, TD); }
static void test_tokens(void) {
  const size_t ny = (size_t)TB * (TNP + 1) * TD;
  tp = rnd(TB * TNP * TD, 1), tcls = rnd(TD, 1), tpos = rnd((TNP + 1) * TD, 1);
  struct fdcase c = {tok_fwd, zeros(ny), rnd(ny, 1), ny, NULL};
  fd_loss(&c);
  double *dp = zeros(TB * TNP * TD), *dcls = zeros(TD), *dpos = zeros((TNP + 1) * TD);
  kern_tokens_bwd_f64(dp, dcls, dpos, c.w, TB, TNP, TD);
  fd_check(&c, tp, TB * TNP * TD, dp, "tokens d_patches");
  fd_check(&c, tcls, TD, dcls, "tokens d_cls");
  fd_check(&c, tpos, (TNP + 1) * TD, dpos, "tokens d_pos");
  free(tp), free(tcls), free(tpos), free(c.y), free(c.w), free(dp), free(dcls), free(dpos);
}

/* ---- LayerNorm (contiguous rows, and the CLS rows of [B, N, D] through ldx) ---------------- */
static int ln_rows, ln_D, ln_ld;
static double *lnx, *lng, *lnb;
static void ln_fwd(struct fdcase *c) {
  kern_layernorm_fwd_f64(c->y, NULL, NULL, lnx, ln_ld, lng, lnb, ln_rows, ln_D, 1e-6);
}
static void test_layernorm_case(int rows, int D, int ld, const char *tag) {
  ln_rows = rows, ln_D = D, ln_ld = ld;
  const size_t nx = (size_t)(rows - 1) * ld + D, ny = (size_t)rows * D;
  lnx = rnd(nx, 2), lng = rnd(D, 1), lnb = rnd(D, 1);
  for (size_t i = 0; i < nx; i++) lnx[i] += 0.5; /* non-zero mean */
  struct fdcase c = {ln_fwd, zeros(ny), rnd(ny, 1), ny, NULL};
  double *mean = zeros(rows), *rstd = zeros(rows);
  kern_layernorm_fwd_f64(c.y, mean, rstd, lnx, ld, lng, lnb, rows, D, 1e-6);
  /* forward against the definition (biased variance, eps 1e-6) */
  double err = 0;
  for (int r = 0; r < rows; r++) {
    double mu = 0, var = 0;
    for (int d = 0; d < D; d++) mu += lnx[(size_t)r * ld + d] / D;
    for (int d = 0; d < D; d++) var += pow(lnx[(size_t)r * ld + d] - mu, 2) / D;
    for (int d = 0; d < D; d++)
      err = fmax(err, fabs((lnx[(size_t)r * ld + d] - mu) / sqrt(var + 1e-6) * lng[d] + lnb[d] -
                           c.y[(size_t)r * D + d]));
  }
  T_CHECK(err < 1e-12, "layernorm forward (%s) differs by %.3e", tag, err);
  double *dx = zeros(nx), *dg = zeros(D), *db = zeros(D);
  kern_layernorm_bwd_f64(dx, dg, db, c.w, lnx, ld, mean, rstd, lng, rows, D);
  char what[64];
  snprintf(what, sizeof what, "layernorm dx (%s)", tag);
  fd_check(&c, lnx, nx, dx, what);
  snprintf(what, sizeof what, "layernorm dgamma (%s)", tag);
  fd_check(&c, lng, D, dg, what);
  snprintf(what, sizeof what, "layernorm dbeta (%s)", tag);
  fd_check(&c, lnb, D, db, what);
  float *fx = tof(lnx, nx), *fg = tof(lng, D), *fb = tof(lnb, D), *fy = fzeros(ny);
  float *fm = fzeros(rows), *fr = fzeros(rows), *fdy = tof(c.w, ny), *fdx = fzeros(nx);
  float *fdg = fzeros(D), *fdb = fzeros(D);
  kern_layernorm_fwd_f32(fy, fm, fr, fx, ld, fg, fb, rows, D, 1e-6);
  kern_layernorm_bwd_f32(fdx, fdg, fdb, fdy, fx, ld, fm, fr, fg, rows, D);
  f32_check(fy, c.y, ny, "layernorm y");
  f32_check(fdx, dx, nx, "layernorm dx");
  f32_check(fdg, dg, D, "layernorm dgamma");
  f32_check(fdb, db, D, "layernorm dbeta");
  free(lnx), free(lng), free(lnb), free(c.y), free(c.w), free(mean), free(rstd), free(dx);
  free(dg), free(db), free(fx), free(fg), free(fb), free(fy), free(fm), free(fr), free(fdy);
  free(fdx), free(fdg), free(fdb);
}

/* ---- attention ----------------------------------------------------------------------------- */
enum { AB = 2, AN = 5, AH = 2, AHD = 3 };
#define AD (AH * AHD)
static double *aqkv;
static void attn_fwd(struct fdcase *c) {
  kern_attn_fwd_f64(c->y, NULL, aqkv, AB, AN, AH, AHD, 1 / sqrt(AHD));
}
static void test_attention(void) {
  const size_t nq = (size_t)AB * AN * 3 * AD, ny = (size_t)AB * AN * AD;
  const size_t np = (size_t)AB * AH * AN * AN;
  aqkv = rnd(nq, 1);
  struct fdcase c = {attn_fwd, zeros(ny), rnd(ny, 1), ny, NULL};
  double *P = zeros(np), *y2 = zeros(ny);
  kern_attn_fwd_f64(y2, P, aqkv, AB, AN, AH, AHD, 1 / sqrt(AHD));
  fd_loss(&c);
  T_CHECK(rel(y2, c.y, ny) == 0, "attention with and without a state buffer differ");
  /* softmax(q k^T * scale) v with the [3][H][hd] layout, by the definition */
  double err = 0;
  for (int b = 0; b < AB; b++)
    for (int h = 0; h < AH; h++)
      for (int i = 0; i < AN; i++) {
        double s[AN], mx = -1e300, z = 0;
        for (int j = 0; j < AN; j++) {
          s[j] = 0;
          for (int d = 0; d < AHD; d++)
            s[j] += aqkv[(b * AN + i) * 3 * AD + h * AHD + d] *
                    aqkv[(b * AN + j) * 3 * AD + AD + h * AHD + d] / sqrt(AHD);
          mx = fmax(mx, s[j]);
        }
        for (int j = 0; j < AN; j++) z += exp(s[j] - mx);
        for (int d = 0; d < AHD; d++) {
          double o = 0;
          for (int j = 0; j < AN; j++)
            o += exp(s[j] - mx) / z * aqkv[(b * AN + j) * 3 * AD + 2 * AD + h * AHD + d];
          err = fmax(err, fabs(o - c.y[(b * AN + i) * AD + h * AHD + d]));
        }
      }
  T_CHECK(err < 1e-12, "attention forward differs from its definition by %.3e", err);
  double *dq = zeros(nq);
  kern_attn_bwd_f64(dq, c.w, aqkv, P, AB, AN, AH, AHD, 1 / sqrt(AHD));
  fd_check(&c, aqkv, nq, dq, "attention d_qkv");
  float *fq = tof(aqkv, nq), *fy = fzeros(ny), *fP = fzeros(np), *fdy = tof(c.w, ny);
  float *fdq = fzeros(nq);
  kern_attn_fwd_f32(fy, fP, fq, AB, AN, AH, AHD, (float)(1 / sqrt(AHD)));
  kern_attn_bwd_f32(fdq, fdy, fq, fP, AB, AN, AH, AHD, (float)(1 / sqrt(AHD)));
  f32_check(fy, c.y, ny, "attention out");
  f32_check(fP, P, np, "attention probabilities");
  f32_check(fdq, dq, nq, "attention d_qkv");
  free(aqkv), free(c.y), free(c.w), free(P), free(y2), free(dq), free(fq), free(fy), free(fP);
  free(fdy), free(fdq);
}

/* ---- GELU, residual with drop-path scales -------------------------------------------------- */
enum { GN = 64 };
static double *gx;
static int gap; /* GELU form: 0 exact, 1 tanh */
static void gelu_fwd(struct fdcase *c) { kern_gelu_fwd_f64(c->y, gx, GN, gap); }
enum { RB = 3, RPS = 2, RD = 4 };
static double *rx, *rf, rs[RB] = {0.0, 1.0 / 0.8, 1.0};
static void res_fwd(struct fdcase *c) { kern_residual_fwd_f64(c->y, rx, rf, rs, RB, RPS, RD); }
/* GELU in form ap: the formula in double, finite differences, the fp32 kernels against double */
static void test_gelu(int ap) {
  gap = ap;
  gx = rnd(GN, 2.5);
  struct fdcase c = {gelu_fwd, zeros(GN), rnd(GN, 1), GN, NULL};
  fd_loss(&c);
  double err = 0, diff = 0;
  for (int i = 0; i < GN; i++) {
    const double x = gx[i], exact = 0.5 * x * (1 + erf(x / sqrt(2)));
    const double tanh_form = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    err = fmax(err, fabs((ap ? tanh_form : exact) - c.y[i]));
    diff = fmax(diff, fabs(tanh_form - exact));
  }
  T_CHECK(err < 1e-15, "GELU (approx %d) is not its formula (%.3e)", ap, err);
  /* the forms differ (up to 4.7e-4 at |x| = 2.7): the test would see a swapped form */
  T_CHECK(diff > 1e-4, "GELU test points do not separate the forms (%.3e)", diff);
  double *dx = zeros(GN);
  kern_gelu_bwd_f64(dx, c.w, gx, GN, ap);
  fd_check(&c, gx, GN, dx, ap ? "gelu (tanh) dx" : "gelu dx");
  float *fx = tof(gx, GN), *fy = fzeros(GN), *fdy = tof(c.w, GN), *fdx = fzeros(GN);
  kern_gelu_fwd_f32(fy, fx, GN, ap);
  kern_gelu_bwd_f32(fdx, fdy, fx, GN, ap);
  f32_check(fy, c.y, GN, ap ? "gelu (tanh) y" : "gelu y");
  f32_check(fdx, dx, GN, ap ? "gelu (tanh) dx" : "gelu dx");
  free(gx), free(c.y), free(c.w), free(dx), free(fx), free(fy), free(fdy), free(fdx);
}

static void test_elementwise(void) {
  test_gelu(0);
  test_gelu(1);

  /* residual y = x + s_b f: dropped sample (s = 0), kept with 1/keep, no drop */
  const size_t n = (size_t)RB * RPS * RD;
  rx = rnd(n, 1), rf = rnd(n, 1);
  struct fdcase r = {res_fwd, zeros(n), rnd(n, 1), n, NULL};
  fd_loss(&r);
  double *df = zeros(n);
  kern_residual_bwd_f64(df, r.w, rs, RB, RPS, RD);
  fd_check(&r, rf, n, df, "drop-path residual d_branch");
  fd_check(&r, rx, n, r.w, "drop-path residual d_x (identity)");
  for (size_t i = 0; i < (size_t)RPS * RD; i++)
    T_CHECK(r.y[i] == rx[i], "a dropped sample must keep only its identity path");
  free(rx), free(rf), free(r.y), free(r.w), free(df);
}

/* ---- the fused residual + LayerNorm ops: the two ops in turn, bit for bit ----------------- */
static float *frnd(size_t n, double scale, double shift) {
  float *x = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = (float)(shift + scale * rng_normal(&g_rng));
  return x;
}
static float *fdup(const float *x, size_t n) {
  float *y = malloc(n * sizeof(float));
  memcpy(y, x, n * sizeof(float));
  return y;
}
#define SAME(a, b, n, what) \
  T_CHECK(memcmp(a, b, (n) * sizeof(float)) == 0, "%s differs from the two ops in turn (%s)", what, tag)

static void test_fused_case(int B, int rps, int D, int with_s) {
  char tag[64];
  snprintf(tag, sizeof tag, "B=%d rps=%d D=%d, s %s", B, rps, D, with_s ? "given" : "NULL");
  const int rows = B * rps;
  const size_t n = (size_t)rows * D;
  float s[4] = {1.0f / 0.9f, 0.0f, 1.0f, 1.0f / 0.8f};
  const float *sp = with_s ? s : NULL;
  float *x = frnd(n, 1.5, 0.3), *f = frnd(n, 1, 0), *g = frnd(D, 1, 1), *b = frnd(D, 0.5, 0);

  /* forward: residual_fwd then layernorm_fwd, against the fused op (and in place, y = x) */
  float *y1 = fzeros(n), *ln1 = fzeros(n), *m1 = fzeros(rows), *r1 = fzeros(rows);
  float *y2 = fzeros(n), *ln2 = fzeros(n), *m2 = fzeros(rows), *r2 = fzeros(rows);
  kern_residual_fwd_f32(y1, x, f, sp, B, rps, D);
  kern_layernorm_fwd_f32(ln1, m1, r1, y1, D, g, b, rows, D, 1e-6);
  kern_residual_layernorm_fwd_f32(y2, ln2, m2, r2, x, f, sp, g, b, B, rps, D, 1e-6);
  SAME(y2, y1, n, "fused forward: the sum");
  SAME(ln2, ln1, n, "fused forward: the LayerNorm");
  SAME(m2, m1, (size_t)rows, "fused forward: the means");
  SAME(r2, r1, (size_t)rows, "fused forward: the inverse deviations");
  float *xi = fdup(x, n), *ln3 = fzeros(n);
  kern_residual_layernorm_fwd_f32(xi, ln3, NULL, NULL, xi, f, sp, g, b, B, rps, D, 1e-6);
  SAME(xi, y1, n, "fused forward in place: the sum");
  SAME(ln3, ln1, n, "fused forward in place: the LayerNorm");
  /* the sum really is the residual: x where a sample is dropped */
  if (with_s)
    T_CHECK(memcmp(y1 + (size_t)rps * D, x + (size_t)rps * D, (size_t)rps * D * sizeof(float)) == 0,
            "a dropped sample keeps only its identity path (%s)", tag);

  /* backward: layernorm_bwd then residual_bwd of the accumulated dx, against the fused op */
  float *dy = frnd(n, 1, 0), *dx1 = frnd(n, 0.5, 0), *dg1 = frnd(D, 0.5, 0), *db1 = frnd(D, 0.5, 0);
  float *dx2 = fdup(dx1, n), *dg2 = fdup(dg1, D), *db2 = fdup(db1, D);
  float *df1 = fzeros(n), *df2 = frnd(n, 1, 0);
  kern_layernorm_bwd_f32(dx1, dg1, db1, dy, y1, D, m1, r1, g, rows, D);
  kern_residual_bwd_f32(df1, dx1, sp, B, rps, D);
  kern_layernorm_residual_bwd_f32(dx2, dg2, db2, df2, sp, dy, y1, m1, r1, g, B, rps, D);
  SAME(dx2, dx1, n, "fused backward: dx (accumulated)");
  SAME(dg2, dg1, (size_t)D, "fused backward: dgamma (accumulated)");
  SAME(db2, db1, (size_t)D, "fused backward: dbeta (accumulated)");
  SAME(df2, df1, n, "fused backward: the branch gradient");
  if (with_s) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(df2[i] - s[i / ((size_t)rps * D)] * dx2[i]));
    T_CHECK(e == 0, "fused backward: the branch gradient is not s[b] dx (%.3e, %s)", e, tag);
  }
  free(x), free(f), free(g), free(b), free(y1), free(ln1), free(m1), free(r1), free(y2), free(ln2);
  free(m2), free(r2), free(xi), free(ln3), free(dy), free(dx1), free(dg1), free(db1), free(dx2);
  free(dg2), free(db2), free(df1), free(df2);
}
#undef SAME

/* GELU's backward with the bias gradient of the Linear before it: gelu_bwd, then linear_bwd's db. */
static void test_gelu_bias(int rows, int cols, int ap) {
  const size_t n = (size_t)rows * cols;
  float *x = frnd(n, 2, 0), *dy = frnd(n, 1, 0), *db1 = frnd(cols, 1, 0), *db2 = fdup(db1, cols);
  float *dx1 = fzeros(n), *dx2 = fdup(dy, n);
  kern_gelu_bwd_f32(dx1, dy, x, n, ap);
  kern_linear_bwd_f32(NULL, NULL, db1, dx1, NULL, NULL, rows, cols, 1);
  kern_gelu_bwd_bias_f32(dx2, db2, dx2, x, rows, cols, ap); /* in place, as vit.c runs it */
  T_CHECK(memcmp(dx2, dx1, n * sizeof(float)) == 0, "gelu_bwd_bias: dx differs from gelu_bwd's (%dx%d)", rows, cols);
  T_CHECK(memcmp(db2, db1, (size_t)cols * sizeof(float)) == 0,
          "gelu_bwd_bias: db differs from linear_bwd's (%dx%d)", rows, cols);
  /* from zero, db is the column sums of dx */
  double e = 0;
  float *z = fzeros(cols);
  kern_gelu_bwd_bias_f32(dx2, z, dy, x, rows, cols, ap);
  for (int c = 0; c < cols; c++) {
    double sum = 0;
    for (int r = 0; r < rows; r++) sum += dx1[(size_t)r * cols + c];
    e = fmax(e, fabs(z[c] - sum));
  }
  T_CHECK(e < 1e-4, "gelu_bwd_bias: db is not the column sums of dx (%.3e)", e);
  free(x), free(dy), free(db1), free(db2), free(dx1), free(dx2), free(z);
}

/* ---- L2 normalisation, weight normalisation ------------------------------------------------ */
enum { NR = 4, ND = 6 };
static double *nx_, *wg, *wv;
static void l2_fwd(struct fdcase *c) {
  double nrm[NR];
  kern_l2norm_fwd_f64(c->y, nrm, nx_, NR, ND);
}
static void wn_fwd(struct fdcase *c) {
  double vn[NR];
  kern_weightnorm_fwd_f64(c->y, vn, wg, wv, NR, ND);
}
static void test_norms(void) {
  const size_t n = (size_t)NR * ND;
  nx_ = rnd(n, 1);
  for (int d = 0; d < ND; d++) nx_[3 * ND + d] *= 1e-14; /* a row below the 1e-12 clamp */
  struct fdcase c = {l2_fwd, zeros(n), rnd(n, 1), n, NULL};
  double nrm[NR], *dx = zeros(n);
  kern_l2norm_fwd_f64(c.y, nrm, nx_, NR, ND);
  T_CHECK(nrm[3] < 1e-12 && fabs(c.y[3 * ND] - nx_[3 * ND] / 1e-12) < 1e-15,
          "F.normalize clamps the norm at 1e-12");
  kern_l2norm_bwd_f64(dx, c.w, c.y, nrm, NR, ND);
  fd_check(&c, nx_, n, dx, "l2norm dx");
  float *fx = tof(nx_, n), *fy = fzeros(n), fn[NR], *fdy = tof(c.w, n), *fdx = fzeros(n);
  kern_l2norm_fwd_f32(fy, fn, fx, NR, ND);
  kern_l2norm_bwd_f32(fdx, fdy, fy, fn, NR, ND);
  f32_check(fy, c.y, n, "l2norm y");
  f32_check(fdx, dx, n, "l2norm dx");
  free(nx_), free(c.y), free(c.w), free(dx), free(fx), free(fy), free(fdy), free(fdx);

  wg = rnd(NR, 1), wv = rnd(n, 1);
  struct fdcase w = {wn_fwd, zeros(n), rnd(n, 1), n, NULL};
  double vn[NR], *dg = zeros(NR), *dv = zeros(n);
  kern_weightnorm_fwd_f64(w.y, vn, wg, wv, NR, ND);
  double err = 0;
  for (int k = 0; k < NR; k++) {
    double s = 0;
    for (int d = 0; d < ND; d++) s += wv[k * ND + d] * wv[k * ND + d];
    for (int d = 0; d < ND; d++) err = fmax(err, fabs(wg[k] * wv[k * ND + d] / sqrt(s) - w.y[k * ND + d]));
  }
  T_CHECK(err < 1e-14, "weight norm forward differs by %.3e", err);
  kern_weightnorm_bwd_f64(dg, dv, w.w, wg, wv, vn, NR, ND);
  fd_check(&w, wg, NR, dg, "weightnorm dg");
  fd_check(&w, wv, n, dv, "weightnorm dv");
  float *fg = tof(wg, NR), *fv = tof(wv, n), *fw = fzeros(n), fvn[NR], *fdw = tof(w.w, n);
  float *fdg = fzeros(NR), *fdv = fzeros(n);
  kern_weightnorm_fwd_f32(fw, fvn, fg, fv, NR, ND);
  kern_weightnorm_bwd_f32(fdg, fdv, fdw, fg, fv, fvn, NR, ND);
  f32_check(fw, w.y, n, "weightnorm w");
  f32_check(fdg, dg, NR, "weightnorm dg");
  f32_check(fdv, dv, n, "weightnorm dv");
  free(wg), free(wv), free(w.y), free(w.w), free(dg), free(dv), free(fg), free(fv), free(fw);
  free(fdw), free(fdg), free(fdv);
}

/* ---- DINO loss ----------------------------------------------------------------------------- */
enum { LB = 3, LNS = 4, LNT = 2, LKK = 7 };
static double *ls_, *lt_, *lc_;
static void loss_fwd(struct fdcase *c) {
  double tsum[LKK];
  kern_dino_loss_f64(c->y, NULL, tsum, ls_, lt_, lc_, LB, LNS, LNT, LKK, 0.1, 0.04);
}
/* Upstream's forward, term by term (§4). */
static double loss_naive(void) {
  double total = 0;
  int nterms = 0;
  for (int iq = 0; iq < LNT; iq++)
    for (int v = 0; v < LNS; v++) {
      if (v == iq) continue;
      double term = 0;
      for (int b = 0; b < LB; b++) {
        const double *t = lt_ + (iq * LB + b) * LKK, *s = ls_ + (v * LB + b) * LKK;
        double q[LKK], mt = -1e300, zt = 0, ms = -1e300, zs = 0;
        for (int k = 0; k < LKK; k++) mt = fmax(mt, (t[k] - lc_[k]) / 0.04);
        for (int k = 0; k < LKK; k++) zt += q[k] = exp((t[k] - lc_[k]) / 0.04 - mt);
        for (int k = 0; k < LKK; k++) ms = fmax(ms, s[k] / 0.1);
        for (int k = 0; k < LKK; k++) zs += exp(s[k] / 0.1 - ms);
        for (int k = 0; k < LKK; k++) term -= q[k] / zt * (s[k] / 0.1 - ms - log(zs));
      }
      total += term / LB;
      nterms++;
    }
  return total / nterms; /* nterms = 2 * ncrops - 2 */
}
static void test_loss(void) {
  const size_t ns = (size_t)LNS * LB * LKK, nt = (size_t)LNT * LB * LKK;
  ls_ = rnd(ns, 0.3), lt_ = rnd(nt, 0.3), lc_ = rnd(LKK, 0.1);
  double one = 1, loss = 0, tsum[LKK];
  struct fdcase c = {loss_fwd, &loss, &one, 1, NULL};
  double *ds = zeros(ns);
  kern_dino_loss_f64(&loss, ds, tsum, ls_, lt_, lc_, LB, LNS, LNT, LKK, 0.1, 0.04);
  const double ln = loss_naive();
  T_CHECK(fabs(loss - ln) < 1e-12 * fabs(ln), "DINO loss %.15g vs upstream's formula %.15g", loss, ln);
  double err = 0;
  for (int k = 0; k < LKK; k++) {
    double s = 0;
    for (int r = 0; r < LNT * LB; r++) s += lt_[r * LKK + k];
    err = fmax(err, fabs(s - tsum[k]));
  }
  T_CHECK(err < 1e-12, "teacher column sums differ by %.3e", err);
  fd_check(&c, ls_, ns, ds, "dino loss d_student");
  float *fs = tof(ls_, ns), *ft = tof(lt_, nt), *fc = tof(lc_, LKK), fl, fts[LKK];
  float *fds = fzeros(ns);
  kern_dino_loss_f32(&fl, fds, fts, fs, ft, fc, LB, LNS, LNT, LKK, 0.1f, 0.04f);
  f32_check(&fl, &loss, 1, "dino loss");
  f32_check(fds, ds, ns, "dino loss d_student");
  free(ls_), free(lt_), free(lc_), free(ds), free(fs), free(ft), free(fc), free(fds);
}

/* The teacher targets' diagnostics (ops->dino_stats) against their definition in double: Q's
 * column sums and the sum of the rows' entropies; the loss minus the mean entropy is the mean KL
 * divergence of the loss's pairs (each teacher row in the same number of pairs).  Logits scaled
 * up so that some Q underflow to 0 (their log must not turn the entropy into NaN), and logits
 * equal to the centre (uniform targets: ln K each). */
static void test_stats_case(double scale, int uniform) {
  enum { R = LNT * LB };
  const size_t nt = (size_t)R * LKK, ns = (size_t)LNS * LB * LKK;
  double *t = rnd(nt, scale), *c = rnd(LKK, 0.1), *s = rnd(ns, 0.3), st[LKK + 1];
  if (uniform)
    for (size_t i = 0; i < nt; i++) t[i] = c[i % LKK];
  kern_dino_stats_f64(st, t, c, R, LKK, 0.04);
  double q[R][LKK], hsum = 0, err = 0;
  for (int r = 0; r < R; r++) {
    double mx = -1e300, z = 0;
    for (int k = 0; k < LKK; k++) mx = fmax(mx, (t[r * LKK + k] - c[k]) / 0.04);
    for (int k = 0; k < LKK; k++) z += q[r][k] = exp((t[r * LKK + k] - c[k]) / 0.04 - mx);
    for (int k = 0; k < LKK; k++) {
      q[r][k] /= z;
      if (q[r][k] > 0) hsum -= q[r][k] * log(q[r][k]);
    }
  }
  for (int k = 0; k < LKK; k++) {
    double cs = 0;
    for (int r = 0; r < R; r++) cs += q[r][k];
    err = fmax(err, fabs(cs - st[k]));
  }
  T_CHECK(err < 1e-12, "dino_stats column sums differ by %.3e (scale %g)", err, scale);
  T_CHECK(isfinite(st[LKK]) && fabs(st[LKK] - hsum) < 1e-10, "dino_stats entropy sum %.15g vs %.15g (scale %g)",
          st[LKK], hsum, scale);
  if (uniform)
    T_CHECK(fabs(st[LKK] / R - log(LKK)) < 1e-12, "uniform targets: entropy %.15g, not ln K", st[LKK] / R);
  /* loss - mean H = the mean over the pairs (i, v != i) and samples of KL(Q_i || P_v) */
  double loss, tsum[LKK], kl = 0;
  kern_dino_loss_f64(&loss, NULL, tsum, s, t, c, LB, LNS, LNT, LKK, 0.1, 0.04);
  for (int i = 0; i < LNT; i++)
    for (int v = 0; v < LNS; v++) {
      if (v == i) continue;
      for (int b = 0; b < LB; b++) {
        const double *sv = s + (v * LB + b) * LKK, *qi = q[i * LB + b];
        double ms = -1e300, zs = 0;
        for (int k = 0; k < LKK; k++) ms = fmax(ms, sv[k] / 0.1);
        for (int k = 0; k < LKK; k++) zs += exp(sv[k] / 0.1 - ms);
        for (int k = 0; k < LKK; k++)
          if (qi[k] > 0) kl += qi[k] * (log(qi[k]) - (sv[k] / 0.1 - ms - log(zs)));
      }
    }
  kl /= (double)(LNT * LNS - LNT) * LB;
  T_CHECK(kl >= 0 && fabs(loss - st[LKK] / R - kl) < 1e-10, "loss %.15g - mean entropy %.15g != mean KL %.15g",
          loss, st[LKK] / R, kl);
  float *ft = tof(t, nt), *fc = tof(c, LKK), fst[LKK + 1];
  kern_dino_stats_f32(fst, ft, fc, R, LKK, 0.04f);
  f32_check(fst, st, LKK + 1, "dino_stats");
  free(t), free(c), free(s), free(ft), free(fc);
}

/* ---- position-embedding interpolation ------------------------------------------------------ */
static double *pm, *ppos;
static int pm_rows, pm_cols, pm_D;
static void pos_fwd(struct fdcase *c) {
  kern_matmul_f64(c->y, pm, ppos, pm_rows, pm_D, pm_cols, 0, 0, 0.0);
}
/* m * pos_embed equals imgops' bicubic resize (scale S/(g+0.1)) of the patch grid, channel by
 * channel; its gradient m^T dy matches finite differences. */
static void test_pos_interp(int S, int gh, int gw, int H, int W) {
  const int D = 3, nin = 1 + S * S, nout = 1 + gh * gw;
  float *m = malloc((size_t)nin * nout * sizeof(float));
  const int interp = vit_pos_interp_matrix(S, gh, gw, H, W, m);
  T_CHECK(interp == !(gh * gw == S * S && H == W), "interpolation flag for %dx%d", gh, gw);
  double *pos = rnd((size_t)nin * D, 1);
  float *grid = malloc((size_t)D * S * S * sizeof(float)), *out = malloc((size_t)D * gh * gw * 4);
  for (int d = 0; d < D; d++)
    for (int i = 0; i < S * S; i++) grid[d * S * S + i] = (float)pos[(1 + i) * D + d];
  if (interp)
    imgops_resize_bicubic_scaled(grid, D, S, S, out, gh, gw,
                                 imgops_scale_for_factor((gh + 0.1) / S),
                                 imgops_scale_for_factor((gw + 0.1) / S));
  else
    memcpy(out, grid, (size_t)D * S * S * sizeof(float));
  double err = 0, rowsum = 0;
  for (int o = 0; o < nout; o++) {
    double s1 = 0;
    for (int i = 0; i < nin; i++) s1 += m[(size_t)o * nin + i];
    rowsum = fmax(rowsum, fabs(s1 - 1));
    for (int d = 0; d < D; d++) {
      double v = 0;
      for (int i = 0; i < nin; i++) v += (double)m[(size_t)o * nin + i] * (float)pos[i * D + d];
      const double want = o == 0 ? (float)pos[d] : out[d * gh * gw + o - 1];
      err = fmax(err, fabs(v - want));
    }
  }
  T_CHECK(err < 2e-6 && rowsum < 4e-6, "pos interpolation %dx%d -> %dx%d: differs from imgops "
          "bicubic by %.3e (row sums off by %.3e)", S, S, gh, gw, err, rowsum);
  if (t_verbose) printf("  pos interp %2dx%-2d -> %2dx%-2d vs imgops bicubic max diff %.3e\n", S, S, gh, gw, err);
  /* gradient of the linear map (what vit_backward_end applies) */
  pm_rows = nout, pm_cols = nin, pm_D = D;
  pm = malloc((size_t)nin * nout * sizeof(double));
  for (size_t i = 0; i < (size_t)nin * nout; i++) pm[i] = m[i];
  ppos = pos;
  struct fdcase c = {pos_fwd, zeros((size_t)nout * D), rnd((size_t)nout * D, 1), (size_t)nout * D, NULL};
  double *dpos = zeros((size_t)nin * D);
  kern_matmul_f64(dpos, pm, c.w, nin, D, nout, 1, 0, 0.0);
  fd_check(&c, ppos, (size_t)nin * D, dpos, "pos-embed interpolation d_pos_embed");
  free(m), free(pos), free(grid), free(out), free(pm), free(c.y), free(c.w), free(dpos);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  rng_init(&g_rng, 1234, RNG_DOMAIN_TEST, 0, 0);
  test_linear();
  test_patch_embed();
  test_tokens();
  test_layernorm_case(4, 7, 7, "contiguous");
  test_layernorm_case(3, 6, 5 * 6, "CLS rows");
  test_attention();
  test_elementwise();
  test_fused_case(4, 5, 70, 1); /* two column blocks of the parameter sums */
  test_fused_case(3, 197, 12, 0);
  test_gelu_bias(37, 70, 0);
  test_gelu_bias(37, 70, 1);
  test_norms();
  test_loss();
  test_pos_interp(14, 6, 6, 96, 96);    /* local 96-px crop, p16 */
  test_pos_interp(14, 30, 30, 480, 480); /* attention maps at 480 */
  test_pos_interp(14, 6, 4, 96, 64);    /* non-square */
  test_pos_interp(4, 2, 2, 16, 16);     /* the reference model's local crops */
  test_pos_interp(4, 4, 4, 32, 32);     /* no interpolation */
  /* last: the draws of the cases above stay as they were */
  test_stats_case(0.3, 0);
  test_stats_case(40, 0); /* targets of 0: exp underflows in float and double */
  test_stats_case(0.3, 1);
  return t_finish();
}
