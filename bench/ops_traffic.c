/* bench/ops_traffic.c - an op table that counts bytes and FLOPs, then calls the real op (ops_traffic.h). */
#include "build_config.h"

#include "bench/ops_traffic.h"

#include <stdlib.h>
#include <string.h>

#define OPS_TRAFFIC_LIST(X)                                                                      \
  X(UPLOAD, upload) X(DOWNLOAD, download) X(COPY, copy) X(ZERO, zero) X(ACT_FROM, act_from_f32) \
  X(ACT_TO, act_to_f32) X(LINEAR_FWD, linear_fwd) X(LINEAR_BWD, linear_bwd) X(MATMUL, matmul_f32) \
  X(LINEAR_RES_FWD, linear_residual_fwd) X(LINEAR_GELU_FWD, linear_gelu_fwd)                      \
  X(GELU_LINEAR_BWD, gelu_linear_bwd)                                                              \
  X(PATCHIFY, patchify) X(TOKENS_FWD, tokens_fwd) X(TOKENS_BWD, tokens_bwd)                      \
  X(LN_FWD, layernorm_fwd) X(LN_BWD, layernorm_bwd) X(RES_LN_FWD, residual_layernorm_fwd)         \
  X(LN_RES_BWD, layernorm_residual_bwd) X(L2_FWD, l2norm_fwd) X(L2_BWD, l2norm_bwd)               \
  X(WN_FWD, weightnorm_fwd) X(WN_BWD, weightnorm_bwd) X(ATTN_FWD, attn_fwd) X(ATTN_BWD, attn_bwd) \
  X(GELU_FWD, gelu_fwd) X(GELU_BWD, gelu_bwd) X(GELU_BWD_BIAS, gelu_bwd_bias)                      \
  X(RES_FWD, residual_fwd) X(RES_BWD, residual_bwd)                                                \
  X(LOSS, dino_loss) X(CENTER, center_update) X(SEG_NORMS, seg_norms) X(SEG_SCALE, seg_scale)    \
  X(ADAMW, adamw) X(EMA, ema) X(ADAMW_EMA, adamw_ema)

#define X_ENUM(id, name) OP_##id,
enum { OPS_TRAFFIC_LIST(X_ENUM) NOPS };
#define X_NAME(id, name) #name,
static const char *const op_names[NOPS] = {OPS_TRAFFIC_LIST(X_NAME)};

static const struct ops *in;
static double A; /* bytes of an activation element */
static const double F = 4; /* fp32: parameters, gradients, moments, statistics */
static double peak_flops, peak_bytes;
static struct ops_traffic tot;
static struct {
  double bytes, flops;
  long calls;
} per[NOPS];

static void charge(int op, int cls, double bytes, double flops) {
  tot.bytes[cls] += bytes;
  tot.flops[cls] += flops;
  tot.calls[cls]++;
  if (peak_flops > 0 && peak_bytes > 0) {
    const double tf = flops / peak_flops, tb = bytes / peak_bytes;
    tot.floor_s[cls] += tf > tb ? tf : tb;
  }
  per[op].bytes += bytes;
  per[op].flops += flops;
  per[op].calls++;
}
static double seg_total(const struct ops_seg *s, int n) {
  double t = 0;
  for (int i = 0; i < n; i++) t += (double)s[i].n;
  return t;
}

/* ---- memory ---- */
static void t_upload(void *dst, const void *src, size_t bytes) {
  tot.host_bytes += (double)bytes;
  per[OP_UPLOAD].calls++;
  in->upload(dst, src, bytes);
}
static void t_download(void *dst, const void *src, size_t bytes) {
  tot.host_bytes += (double)bytes;
  per[OP_DOWNLOAD].calls++;
  in->download(dst, src, bytes);
}
static void t_copy(void *dst, const void *src, size_t bytes) {
  charge(OP_COPY, TRAFFIC_OTHER, 2.0 * (double)bytes, 0);
  in->copy(dst, src, bytes);
}
static void t_zero(void *p, size_t bytes) {
  charge(OP_ZERO, TRAFFIC_OTHER, (double)bytes, 0);
  in->zero(p, bytes);
}
static void t_act_from(void *dst, const float *src, size_t n) {
  charge(OP_ACT_FROM, TRAFFIC_OTHER, (double)n * (F + A), 0);
  in->act_from_f32(dst, src, n);
}
static void t_act_to(float *dst, const void *src, size_t n) {
  charge(OP_ACT_TO, TRAFFIC_OTHER, (double)n * (F + A), 0);
  in->act_to_f32(dst, src, n);
}

/* ---- dense layers: a weight is read as the GEMM's operand (A wide) ---- */
static void t_linear_fwd(void *y, const void *x, const float *w, const float *b, int M, int N, int K) {
  const double m = M, n = N, k = K;
  charge(OP_LINEAR_FWD, TRAFFIC_GEMM, A * (m * k + n * k + m * n + (b ? n : 0)), 2 * m * n * k);
  in->linear_fwd(y, x, w, b, M, N, K);
}
static void t_linear_res_fwd(void *y, const void *r, const void *x, const float *w, const float *b,
                             int M, int N, int K) {
  const double m = M, n = N, k = K;
  charge(OP_LINEAR_RES_FWD, TRAFFIC_GEMM, A * (m * k + n * k + 2 * m * n + (b ? n : 0)), 2 * m * n * k);
  in->linear_residual_fwd(y, r, x, w, b, M, N, K);
}
/* linear_fwd's bytes and the GELU's input written alongside (inference: not at all) */
static void t_linear_gelu_fwd(void *h, void *pre, const void *x, const float *w, const float *b, int M,
                              int N, int K, int approx) {
  const double m = M, n = N, k = K;
  charge(OP_LINEAR_GELU_FWD, TRAFFIC_GEMM,
         A * (m * k + n * k + m * n * (pre ? 2 : 1) + (b ? n : 0)), 2 * m * n * k);
  in->linear_gelu_fwd(h, pre, x, w, b, M, N, K, approx);
}
/* linear_bwd's bytes and the GELU's input read: its derivative is applied in the GEMM */
static void t_gelu_linear_bwd(void *dpre, float *dw, float *db, const void *dy, const void *h,
                              const void *pre, const float *w, int M, int N, int K, int approx) {
  const double m = M, n = N, k = K;
  double bytes = A * m * n + A * (n * k + 2 * m * k), flops = 2 * m * n * k;
  if (dw) bytes += A * m * k + 2 * F * n * k, flops += 2 * m * n * k;
  if (db) bytes += 2 * F * n;
  charge(OP_GELU_LINEAR_BWD, TRAFFIC_GEMM, bytes, flops);
  in->gelu_linear_bwd(dpre, dw, db, dy, h, pre, w, M, N, K, approx);
}
static int t_gelu_in_gemm(int approx) { return in->gelu_in_gemm(approx); }
static void t_linear_bwd(void *dx, float *dw, float *db, const void *dy, const void *x, const float *w,
                         int M, int N, int K) {
  const double m = M, n = N, k = K;
  double bytes = (dx || dw || db) ? A * m * n : 0, flops = 0;
  if (dx) bytes += A * (n * k + m * k), flops += 2 * m * n * k;
  if (dw) bytes += A * m * k + 2 * F * n * k, flops += 2 * m * n * k;
  if (db) bytes += 2 * F * n;
  charge(OP_LINEAR_BWD, TRAFFIC_GEMM, bytes, flops);
  in->linear_bwd(dx, dw, db, dy, x, w, M, N, K);
}
static void t_matmul(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb,
                     float beta) {
  const double m = M, n = N, k = K;
  charge(OP_MATMUL, TRAFFIC_GEMM, F * (m * k + k * n + m * n * (beta != 0.0f ? 2 : 1)), 2 * m * n * k);
  in->matmul_f32(c, a, b, M, N, K, ta, tb, beta);
}

/* ---- tokens ---- */
static void t_patchify(void *cols, const float *img, int B, int C, int H, int W, int p) {
  const double used = (double)B * C * (H / p) * p * (W / p) * p; /* remainders are not read */
  charge(OP_PATCHIFY, TRAFFIC_OTHER, used * (F + A), 0);
  in->patchify(cols, img, B, C, H, W, p);
}
static void t_tokens_fwd(void *x, const void *patches, const float *cls, const float *pos, int B, int Np,
                         int D) {
  const double b = B, np = Np, d = D;
  charge(OP_TOKENS_FWD, TRAFFIC_OTHER, A * b * np * d + F * (2 + np) * d + A * b * (1 + np) * d, 0);
  in->tokens_fwd(x, patches, cls, pos, B, Np, D);
}
static void t_tokens_bwd(void *dpatches, float *dcls, float *dpos, const void *dx, int B, int Np, int D) {
  const double b = B, np = Np, d = D;
  double bytes = A * b * (1 + np) * d;
  if (dpatches) bytes += A * b * np * d;
  if (dcls) bytes += 2 * F * d;
  if (dpos) bytes += 2 * F * (1 + np) * d;
  charge(OP_TOKENS_BWD, TRAFFIC_OTHER, bytes, 0);
  in->tokens_bwd(dpatches, dcls, dpos, dx, B, Np, D);
}

/* ---- normalisation ---- */
static void t_ln_fwd(void *y, float *mean, float *rstd, const void *x, int ldx, const float *g,
                     const float *b, int rows, int D, float eps) {
  const double r = rows, d = D;
  charge(OP_LN_FWD, TRAFFIC_OTHER, 2 * A * r * d + 2 * F * d + F * r * ((mean != NULL) + (rstd != NULL)), 0);
  in->layernorm_fwd(y, mean, rstd, x, ldx, g, b, rows, D, eps);
}
static void t_ln_bwd(void *dx, float *dg, float *db, const void *dy, const void *x, int ldx, const float *mean,
                     const float *rstd, const float *g, int rows, int D) {
  const double r = rows, d = D;
  /* dy, x and the statistics read; dx accumulated (read and written) */
  double bytes = 4 * A * r * d + 2 * F * r + F * d;
  if (dg) bytes += 2 * F * d;
  if (db) bytes += 2 * F * d;
  charge(OP_LN_BWD, TRAFFIC_OTHER, bytes, 0);
  in->layernorm_bwd(dx, dg, db, dy, x, ldx, mean, rstd, g, rows, D);
}
/* x and f read, y and ln written: the sum is not read back from memory */
static void t_res_ln_fwd(void *y, void *ln, float *mean, float *rstd, const void *x, const void *f,
                         const float *s, const float *g, const float *b, int B, int rps, int D, float eps) {
  const double r = (double)B * rps, d = D;
  charge(OP_RES_LN_FWD, TRAFFIC_OTHER,
         4 * A * r * d + 2 * F * d + F * r * ((mean != NULL) + (rstd != NULL)) + (s ? F * B : 0), 0);
  in->residual_layernorm_fwd(y, ln, mean, rstd, x, f, s, g, b, B, rps, D, eps);
}
/* layernorm_bwd's bytes and df written: dx is not read again for the branch gradient */
static void t_ln_res_bwd(void *dx, float *dg, float *db, void *df, const float *s, const void *dy, const void *x,
                         const float *mean, const float *rstd, const float *g, int B, int rps, int D) {
  const double r = (double)B * rps, d = D;
  double bytes = 5 * A * r * d + 2 * F * r + F * d + (s ? F * B : 0);
  if (dg) bytes += 2 * F * d;
  if (db) bytes += 2 * F * d;
  charge(OP_LN_RES_BWD, TRAFFIC_OTHER, bytes, 0);
  in->layernorm_residual_bwd(dx, dg, db, df, s, dy, x, mean, rstd, g, B, rps, D);
}
static void t_l2_fwd(void *y, float *norm, const void *x, int rows, int D) {
  charge(OP_L2_FWD, TRAFFIC_OTHER, 2 * A * rows * (double)D + F * rows, 0);
  in->l2norm_fwd(y, norm, x, rows, D);
}
static void t_l2_bwd(void *dx, const void *dy, const void *y, const float *norm, int rows, int D) {
  charge(OP_L2_BWD, TRAFFIC_OTHER, 3 * A * rows * (double)D + F * rows, 0);
  in->l2norm_bwd(dx, dy, y, norm, rows, D);
}
static void t_wn_fwd(float *w, float *vnorm, const float *g, const float *v, int K, int D) {
  charge(OP_WN_FWD, TRAFFIC_OTHER, F * (2.0 * K * D + 2.0 * K), 0);
  in->weightnorm_fwd(w, vnorm, g, v, K, D);
}
static void t_wn_bwd(float *dg, float *dv, const float *dw, const float *g, const float *v, const float *vnorm,
                     int K, int D) {
  const double kd = (double)K * D;
  charge(OP_WN_BWD, TRAFFIC_OTHER, F * (4 * kd + 2.0 * K + (dg ? 2.0 * K : 0)), 0);
  in->weightnorm_bwd(dg, dv, dw, g, v, vnorm, K, D);
}

/* ---- attention: the state is what the inner backend saves (its size is its own choice) ---- */
static void t_attn_fwd(void *out, void *state, float *probs, const void *qkv, int B, int N, int H, int hd,
                       float scale) {
  const double e = (double)B * N * H * hd, nn = (double)B * H * N * N;
  double bytes = 4 * A * e;
  if (state) bytes += (double)in->attn_state_bytes(B, N, H, hd);
  if (probs) bytes += F * nn;
  charge(OP_ATTN_FWD, TRAFFIC_ATTN, bytes, 4 * nn * hd);
  in->attn_fwd(out, state, probs, qkv, B, N, H, hd, scale);
}
static void t_attn_bwd(void *dqkv, const void *dout, const void *out, const void *qkv, const void *state,
                       int B, int N, int H, int hd, float scale) {
  const double e = (double)B * N * H * hd, nn = (double)B * H * N * N;
  /* dout, out, qkv, the state read; dqkv written */
  charge(OP_ATTN_BWD, TRAFFIC_ATTN, 8 * A * e + (double)in->attn_state_bytes(B, N, H, hd), 8 * nn * hd);
  in->attn_bwd(dqkv, dout, out, qkv, state, B, N, H, hd, scale);
}

/* ---- elementwise ---- */
static void t_gelu_fwd(void *y, const void *x, size_t n, int approx) {
  charge(OP_GELU_FWD, TRAFFIC_OTHER, 2 * A * (double)n, 0);
  in->gelu_fwd(y, x, n, approx);
}
static void t_gelu_bwd(void *dx, const void *dy, const void *x, size_t n, int approx) {
  charge(OP_GELU_BWD, TRAFFIC_OTHER, 3 * A * (double)n, 0);
  in->gelu_bwd(dx, dy, x, n, approx);
}
/* gelu_bwd's bytes and the bias gradient accumulated */
static void t_gelu_bwd_bias(void *dx, float *db, const void *dy, const void *x, int rows, int cols,
                            int approx) {
  charge(OP_GELU_BWD_BIAS, TRAFFIC_OTHER, 3 * A * (double)rows * cols + 2 * F * cols, 0);
  in->gelu_bwd_bias(dx, db, dy, x, rows, cols, approx);
}
static void t_res_fwd(void *y, const void *x, const void *f, const float *s, int B, int rps, int D) {
  charge(OP_RES_FWD, TRAFFIC_OTHER, 3 * A * B * (double)rps * D + (s ? F * B : 0), 0);
  in->residual_fwd(y, x, f, s, B, rps, D);
}
static void t_res_bwd(void *df, const void *dy, const float *s, int B, int rps, int D) {
  charge(OP_RES_BWD, TRAFFIC_OTHER, 2 * A * B * (double)rps * D + (s ? F * B : 0), 0);
  in->residual_bwd(df, dy, s, B, rps, D);
}

/* ---- loss and optimizer (parameter space: fp32) ---- */
static void t_loss(float *loss, void *ds, float *tsum, const void *student, const void *teacher,
                   const float *center, int B, int ns, int nt, int K, float student_temp, float teacher_temp,
                   float grad_scale) {
  const double b = B, k = K;
  double bytes = A * (ns + nt) * b * k + F * k + F;
  if (ds) bytes += A * ns * b * k;
  if (tsum) bytes += F * k;
  charge(OP_LOSS, TRAFFIC_OTHER, bytes, 0);
  in->dino_loss(loss, ds, tsum, student, teacher, center, B, ns, nt, K, student_temp, teacher_temp, grad_scale);
}
static void t_center(float *center, const float *tsum, int K, float count, double m) {
  charge(OP_CENTER, TRAFFIC_OTHER, 3 * F * K, 0);
  in->center_update(center, tsum, K, count, m);
}
static void t_seg_norms(double *norms_host, const float *buf, const struct ops_seg *segs, int nseg) {
  charge(OP_SEG_NORMS, TRAFFIC_OTHER, F * seg_total(segs, nseg), 0);
  in->seg_norms(norms_host, buf, segs, nseg);
}
static void t_seg_scale(float *buf, const struct ops_seg *segs, const float *scale_host, int nseg) {
  charge(OP_SEG_SCALE, TRAFFIC_OTHER, 2 * F * seg_total(segs, nseg), 0);
  in->seg_scale(buf, segs, scale_host, nseg);
}
static double adamw_total(const struct ops_adamw_seg *s, int n) {
  double t = 0;
  for (int i = 0; i < n; i++) t += (double)s[i].n;
  return t;
}
static void t_adamw(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs, int nseg,
                    double beta1, double beta2, double eps) {
  charge(OP_ADAMW, TRAFFIC_OTHER, 7 * F * adamw_total(segs, nseg), 0); /* p, m, v read and written; g read */
  in->adamw(p, g, m, v, segs, nseg, beta1, beta2, eps);
}
static void t_ema(float *dst, const float *src, size_t n, double m) {
  charge(OP_EMA, TRAFFIC_OTHER, 3 * F * (double)n, 0);
  in->ema(dst, src, n, m);
}
static void t_adamw_ema(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs, int nseg,
                        const float *gscale_host, double beta1, double beta2, double eps, float *teacher,
                        size_t n, double momentum) {
  /* AdamW's seven passes; the teacher read and written (the new p is at hand) */
  charge(OP_ADAMW_EMA, TRAFFIC_OTHER, 7 * F * adamw_total(segs, nseg) + 2 * F * (double)n, 0);
  in->adamw_ema(p, g, m, v, segs, nseg, gscale_host, beta1, beta2, eps, teacher, n, momentum);
}

const struct ops *ops_traffic_wrap(const struct ops *inner, size_t act_bytes) {
  static struct ops w;
  in = inner;
  A = (double)(act_bytes ? act_bytes : inner->act_size);
  w = *inner; /* alloc, free, sync, params_changed, set_threads, profile, attn_state_bytes: as they are */
  w.upload = t_upload;
  w.download = t_download;
  w.copy = t_copy;
  w.zero = t_zero;
  w.act_from_f32 = t_act_from;
  w.act_to_f32 = t_act_to;
  w.linear_fwd = t_linear_fwd;
  w.linear_bwd = t_linear_bwd;
  w.linear_residual_fwd = inner->linear_residual_fwd ? t_linear_res_fwd : NULL;
  w.gelu_in_gemm = inner->gelu_in_gemm ? t_gelu_in_gemm : NULL;
  w.linear_gelu_fwd = inner->linear_gelu_fwd ? t_linear_gelu_fwd : NULL;
  w.gelu_linear_bwd = inner->gelu_linear_bwd ? t_gelu_linear_bwd : NULL;
  w.matmul_f32 = t_matmul;
  w.patchify = t_patchify;
  w.tokens_fwd = t_tokens_fwd;
  w.tokens_bwd = t_tokens_bwd;
  w.layernorm_fwd = t_ln_fwd;
  w.layernorm_bwd = t_ln_bwd;
  w.residual_layernorm_fwd = t_res_ln_fwd;
  w.layernorm_residual_bwd = t_ln_res_bwd;
  w.l2norm_fwd = t_l2_fwd;
  w.l2norm_bwd = t_l2_bwd;
  w.weightnorm_fwd = t_wn_fwd;
  w.weightnorm_bwd = t_wn_bwd;
  w.attn_fwd = t_attn_fwd;
  w.attn_bwd = t_attn_bwd;
  w.gelu_fwd = t_gelu_fwd;
  w.gelu_bwd = t_gelu_bwd;
  w.gelu_bwd_bias = t_gelu_bwd_bias;
  w.residual_fwd = t_res_fwd;
  w.residual_bwd = t_res_bwd;
  w.dino_loss = t_loss;
  w.center_update = t_center;
  w.seg_norms = t_seg_norms;
  w.seg_scale = t_seg_scale;
  w.adamw = t_adamw;
  w.ema = t_ema;
  w.adamw_ema = inner->adamw_ema ? t_adamw_ema : NULL;
  ops_traffic_read(NULL, 1);
  return &w;
}

void ops_traffic_set_peaks(double flops_per_s, double bytes_per_s) {
  peak_flops = flops_per_s;
  peak_bytes = bytes_per_s;
}

void ops_traffic_read(struct ops_traffic *t, int reset) {
  if (t) *t = tot;
  if (reset) {
    memset(&tot, 0, sizeof tot);
    memset(per, 0, sizeof per);
  }
}

int ops_traffic_op(const char *name, double *bytes, double *flops, long *calls) {
  for (int i = 0; i < NOPS; i++)
    if (!strcmp(op_names[i], name)) {
      *bytes = per[i].bytes;
      *flops = per[i].flops;
      *calls = per[i].calls;
      return 1;
    }
  return 0;
}

static int by_bytes(const void *a, const void *b) {
  const double x = per[*(const int *)a].bytes, y = per[*(const int *)b].bytes;
  return x < y ? 1 : x > y ? -1 : 0;
}

void ops_traffic_print_ops(FILE *f, const char *indent) {
  int idx[NOPS];
  double all = 0;
  for (int i = 0; i < NOPS; i++) {
    idx[i] = i;
    all += per[i].bytes;
  }
  qsort(idx, NOPS, sizeof idx[0], by_bytes);
  for (int j = 0; j < NOPS; j++) {
    const int i = idx[j];
    if (per[i].bytes <= 0) continue;
    fprintf(f, "%s%-22s %6ld calls %10.3f GB %5.1f%%\n", indent, op_names[i], per[i].calls, per[i].bytes / 1e9,
            100 * per[i].bytes / all);
  }
}
