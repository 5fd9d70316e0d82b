/* backend_cpu.c - the CPU reference backend: host memory as "device" memory, the fp32 kernels, timers. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "cpu/cpu_backend.h"
#include "cpu/kern.h"
#include "model/ops.h"

/* Per-kind time spent in the ops (single-threaded callers only: the model calls ops in sequence). */
static struct ops_profile prof;

#define TIMED(field, stmt)            \
  do {                                \
    const double t0_ = wtime();       \
    stmt;                             \
    prof.field += wtime() - t0_;      \
    prof.calls++;                     \
  } while (0)

static void *c_alloc(size_t bytes) { return xaligned_alloc(bytes); }
static void c_free(void *p) { free(p); }
static void c_copy(void *dst, const void *src, size_t bytes) {
  if (bytes) TIMED(other_s, memcpy(dst, src, bytes));
}
static void c_zero(void *p, size_t bytes) {
  if (bytes) TIMED(other_s, memset(p, 0, bytes));
}
static void c_act_f32(void *dst, const float *src, size_t n) { c_copy(dst, src, n * sizeof(float)); }
static void c_f32_act(float *dst, const void *src, size_t n) { c_copy(dst, src, n * sizeof(float)); }
static void c_sync(void) {}

static void c_profile(struct ops_profile *p, int reset) {
  if (p) *p = prof;
  if (reset) memset(&prof, 0, sizeof prof);
}

static void c_linear_fwd(void *y, const void *x, const float *w, const float *b, int M, int N,
                         int K) {
  TIMED(gemm_s, kern_linear_fwd_f32(y, x, w, b, M, N, K));
}
static void c_linear_bwd(void *dx, float *dw, float *db, const void *dy, const void *x,
                         const float *w, int M, int N, int K) {
  TIMED(gemm_s, kern_linear_bwd_f32(dx, dw, db, dy, x, w, M, N, K));
}
static void c_matmul(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb,
                     float beta) {
  TIMED(gemm_s, kern_matmul_f32(c, a, b, M, N, K, ta, tb, beta));
}
static void c_patchify(void *cols, const float *img, int B, int C, int H, int W, int p) {
  TIMED(other_s, kern_patchify_f32(cols, img, B, C, H, W, p));
}
static void c_tokens_fwd(void *x, const void *patches, const float *cls, const float *pos, int B,
                         int Np, int D) {
  TIMED(other_s, kern_tokens_fwd_f32(x, patches, cls, pos, B, Np, D));
}
static void c_tokens_bwd(void *dpatches, float *dcls, float *dpos, const void *dx, int B, int Np,
                         int D) {
  TIMED(other_s, kern_tokens_bwd_f32(dpatches, dcls, dpos, dx, B, Np, D));
}
static void c_ln_fwd(void *y, float *mean, float *rstd, const void *x, int ldx, const float *g,
                     const float *b, int rows, int D, float eps) {
  TIMED(other_s, kern_layernorm_fwd_f32(y, mean, rstd, x, ldx, g, b, rows, D, eps));
}
static void c_ln_bwd(void *dx, float *dg, float *db, const void *dy, const void *x, int ldx,
                     const float *mean, const float *rstd, const float *g, int rows, int D) {
  TIMED(other_s, kern_layernorm_bwd_f32(dx, dg, db, dy, x, ldx, mean, rstd, g, rows, D));
}
static void c_res_ln_fwd(void *y, void *ln, float *mean, float *rstd, const void *x, const void *f,
                         const float *s, const float *g, const float *b, int B, int rps, int D,
                         float eps) {
  TIMED(other_s, kern_residual_layernorm_fwd_f32(y, ln, mean, rstd, x, f, s, g, b, B, rps, D, eps));
}
static void c_ln_res_bwd(void *dx, float *dg, float *db, void *df, const float *s, const void *dy,
                         const void *x, const float *mean, const float *rstd, const float *g,
                         int B, int rps, int D) {
  TIMED(other_s, kern_layernorm_residual_bwd_f32(dx, dg, db, df, s, dy, x, mean, rstd, g, B, rps, D));
}
static void c_l2_fwd(void *y, float *norm, const void *x, int rows, int D) {
  TIMED(other_s, kern_l2norm_fwd_f32(y, norm, x, rows, D));
}
static void c_l2_bwd(void *dx, const void *dy, const void *y, const float *norm, int rows, int D) {
  TIMED(other_s, kern_l2norm_bwd_f32(dx, dy, y, norm, rows, D));
}
static void c_wn_fwd(float *w, float *vnorm, const float *g, const float *v, int K, int D) {
  TIMED(other_s, kern_weightnorm_fwd_f32(w, vnorm, g, v, K, D));
}
static void c_wn_bwd(float *dg, float *dv, const float *dw, const float *g, const float *v,
                     const float *vnorm, int K, int D) {
  TIMED(other_s, kern_weightnorm_bwd_f32(dg, dv, dw, g, v, vnorm, K, D));
}

/* The CPU backend's attention state is the fp32 probability matrix. */
static size_t c_attn_state_bytes(int B, int N, int H, int hd) {
  (void)hd;
  return MUL_SIZE(MUL_SIZE((size_t)B * H, (size_t)N * N), sizeof(float));
}
static void c_attn_fwd(void *out, void *state, float *probs, const void *qkv, int B, int N, int H,
                       int hd, float scale) {
  float *P = state ? (float *)state : probs;
  TIMED(attn_s, kern_attn_fwd_f32(out, P, qkv, B, N, H, hd, scale));
  if (state && probs) c_copy(probs, state, c_attn_state_bytes(B, N, H, hd));
}
static void c_attn_bwd(void *dqkv, const void *dout, const void *out, const void *qkv,
                       const void *state, int B, int N, int H, int hd, float scale) {
  (void)out; /* the saved probabilities give D directly */
  TIMED(attn_s, kern_attn_bwd_f32(dqkv, dout, qkv, state, B, N, H, hd, scale));
}
static void c_gelu_fwd(void *y, const void *x, size_t n, int approx) {
  TIMED(other_s, kern_gelu_fwd_f32(y, x, n, approx));
}
static void c_gelu_bwd(void *dx, const void *dy, const void *x, size_t n, int approx) {
  TIMED(other_s, kern_gelu_bwd_f32(dx, dy, x, n, approx));
}
static void c_gelu_bwd_bias(void *dx, float *db, const void *dy, const void *x, int rows, int cols,
                            int approx) {
  TIMED(other_s, kern_gelu_bwd_bias_f32(dx, db, dy, x, rows, cols, approx));
}
static void c_res_fwd(void *y, const void *x, const void *f, const float *s, int B, int rps, int D) {
  TIMED(other_s, kern_residual_fwd_f32(y, x, f, s, B, rps, D));
}
static void c_res_bwd(void *df, const void *dy, const float *s, int B, int rps, int D) {
  TIMED(other_s, kern_residual_bwd_f32(df, dy, s, B, rps, D));
}
static void c_dino_loss(float *loss, void *ds, float *tsum, const void *student,
                        const void *teacher, const float *center, int B, int ns, int nt, int K,
                        float student_temp, float teacher_temp, float grad_scale) {
  TIMED(other_s, kern_dino_loss_f32(loss, ds, tsum, student, teacher, center, B, ns, nt, K,
                                    student_temp, teacher_temp));
  /* a power of two: the product is exact, the scaled gradient as if computed scaled */
  if (ds && grad_scale != 1.0f) {
    float *d = ds;
    const size_t n = MUL_SIZE((size_t)ns * B, (size_t)K);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) d[i] *= grad_scale;
  }
}
static void c_dino_stats(float *stats, const void *teacher, const float *center, int rows, int K,
                         float teacher_temp) {
  TIMED(other_s, kern_dino_stats_f32(stats, teacher, center, rows, K, teacher_temp));
}
static void c_center_update(float *center, const float *tsum, int K, float count, double m) {
  TIMED(other_s, cpu_center_update(center, tsum, K, count, m));
}
static void c_seg_norms(double *norms_host, const float *buf, const struct ops_seg *segs, int nseg) {
  TIMED(other_s, cpu_seg_norms(norms_host, buf, segs, nseg));
}
static void c_seg_sumsq(double *sumsq_host, const float *buf, const struct ops_seg *segs, int nseg) {
  TIMED(other_s, cpu_seg_sumsq(sumsq_host, buf, segs, nseg));
}
static void c_seg_scale(float *buf, const struct ops_seg *segs, const float *scale_host, int nseg) {
  TIMED(other_s, cpu_seg_scale(buf, segs, scale_host, nseg));
}
static void c_adamw(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs,
                    int nseg, double beta1, double beta2, double eps) {
  TIMED(other_s, cpu_adamw(p, g, m, v, segs, nseg, beta1, beta2, eps));
}
static void c_ema(float *dst, const float *src, size_t n, double m) {
  TIMED(other_s, cpu_ema(dst, src, n, m));
}

static const struct ops cpu_ops = {
    .name = "cpu",
    .precision = "fp32",
    .act_size = sizeof(float),
    .arithmetic = cpu_arithmetic,
    .alloc = c_alloc,
    .free = c_free,
    .upload = c_copy,
    .download = c_copy,
    .copy = c_copy,
    .zero = c_zero,
    .act_from_f32 = c_act_f32,
    .act_to_f32 = c_f32_act,
    .sync = c_sync,
    .params_changed = NULL,
    .set_threads = cpu_set_threads,
    .profile = c_profile,
    .linear_fwd = c_linear_fwd,
    .linear_bwd = c_linear_bwd,
    .matmul_f32 = c_matmul,
    .patchify = c_patchify,
    .tokens_fwd = c_tokens_fwd,
    .tokens_bwd = c_tokens_bwd,
    .layernorm_fwd = c_ln_fwd,
    .layernorm_bwd = c_ln_bwd,
    .residual_layernorm_fwd = c_res_ln_fwd,
    .layernorm_residual_bwd = c_ln_res_bwd,
    .l2norm_fwd = c_l2_fwd,
    .l2norm_bwd = c_l2_bwd,
    .weightnorm_fwd = c_wn_fwd,
    .weightnorm_bwd = c_wn_bwd,
    .attn_state_bytes = c_attn_state_bytes,
    .attn_fwd = c_attn_fwd,
    .attn_bwd = c_attn_bwd,
    .gelu_fwd = c_gelu_fwd,
    .gelu_bwd = c_gelu_bwd,
    .gelu_bwd_bias = c_gelu_bwd_bias,
    .residual_fwd = c_res_fwd,
    .residual_bwd = c_res_bwd,
    .dino_loss = c_dino_loss,
    .center_update = c_center_update,
    .dino_stats = c_dino_stats,
    .seg_norms = c_seg_norms,
    .seg_sumsq = c_seg_sumsq,
    .seg_scale = c_seg_scale,
    .adamw = c_adamw,
    .ema = c_ema,
};

const struct ops *backend_cpu(void) { return &cpu_ops; }
