/* test_ops_traffic.c - the byte and FLOP counting op table of the benchmarks (bench/ops_traffic.h).
 *
 *  1. It changes nothing: two training steps of a small DINO model through the wrapped CPU backend
 *     give the same student, teacher and centre, bit for bit, as through the CPU backend itself.
 *  2. Its FLOPs of a step agree with the benchmarks' formula (bench_step_count_flops), counted
 *     independently from the model's dimensions: attention exactly; the GEMMs once the formula's
 *     backward = 2 x forward is corrected for the patch embedding, whose input needs no gradient,
 *     and the position-embedding interpolation of the local crops is added.
 *  3. Single ops charge the bytes of their definition (each input read once, each output written
 *     once, an accumulated output both), at the activation width asked for, and the floor is the
 *     larger of the FLOP time and the byte time per call. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_step.h"
#include "bench/ops_traffic.h"
#include "core/rng.h"
#include "tests/fixtures/testutil.h"

static struct dino_spec small_spec(void) {
  struct dino_spec s = {0};
  /* patch 8, 3 channels, D 32, depth 2, 2 heads, MLP 64, position grid 4 (global crops of 32 px) */
  s.vit = (struct vit_dims){8, 3, 32, 2, 2, 64, 4, 0.1, 0};
  s.head = (struct head_dims){.hidden = 48, .bottleneck = 16, .out_dim = 200, .nlayers = 3, .norm_last_layer = 1};
  return s;
}

enum { B = 4, NL = 2, G = 32, L = 16, C = 3 };

static void step(struct bench_step *t, const float *gl, const float *lc, uint64_t it) {
  const int64_t ids[B] = {5, 1, 9, 2};
  struct dino_droppath dp = {40, it, ids};
  dino_model_forward(t->m, gl, lc, B, &dp);
  dino_loss_forward(&t->loss, t->m->sh.logits, t->m->th.logits, t->m->sh.dlogits, B, 0);
  dino_loss_update_center(&t->loss, B, 1, NULL, NULL);
  dino_model_backward(t->m, B, NULL, NULL);
  optim_update(&t->opt, t->m->student, t->m->grads, 3.0, NULL, 1e-3, 0.04, 0, t->m->teacher, 0.996);
}

static void whole_steps(void) {
  const struct ops *cpu = backend_cpu(), *w = ops_traffic_wrap(cpu, 0);
  const struct dino_spec s = small_spec();
  struct bench_step a, b;
  bench_step_init(&a, cpu, &s, B, NL, G, L);
  bench_step_init(&b, w, &s, B, NL, G, L);
  const size_t ng = (size_t)2 * B * C * G * G, nlc = (size_t)NL * B * C * L * L;
  float *gl = malloc(ng * sizeof *gl), *lc = malloc(nlc * sizeof *lc);
  struct rng r;
  rng_init(&r, 7, RNG_DOMAIN_TEST, 0, 0);
  for (size_t i = 0; i < ng; i++) gl[i] = (float)rng_normal(&r);
  for (size_t i = 0; i < nlc; i++) lc[i] = (float)rng_normal(&r);
  struct ops_traffic tr;
  for (int it = 0; it < 2; it++) {
    step(&a, gl, lc, (uint64_t)it);
    ops_traffic_read(NULL, 1);
    step(&b, gl, lc, (uint64_t)it);
    ops_traffic_read(&tr, 0);
  }
  const size_t n = a.m->tt.size;
  T_CHECK(!memcmp(a.m->student, b.m->student, n * sizeof(float)), "student differs through the wrapper");
  T_CHECK(!memcmp(a.m->teacher, b.m->teacher, n * sizeof(float)), "teacher differs through the wrapper");
  T_CHECK(!memcmp(a.loss.center, b.loss.center, (size_t)a.loss.K * sizeof(float)), "centre differs");

  /* FLOPs of the second step against the formula */
  struct bench_step_flops f;
  bench_step_count_flops(&s, B, NL, G, L, &f);
  const double D = s.vit.dim, depth = s.vit.depth, Ng = f.Ng, Nl = f.Nl;
  const double attn_fwd_s = depth * 4 * D * (2.0 * B * Ng * Ng + (double)NL * B * Nl * Nl);
  const double attn_fwd_t = depth * 4 * D * (2.0 * B * Ng * Ng);
  const double attn = 3 * attn_fwd_s + attn_fwd_t;
  const double patch_dx = 2 * D * C * 64.0 * (2.0 * B * (Ng - 1) + (double)NL * B * (Nl - 1));
  double mm_bytes, mm_flops;
  long mm_calls;
  T_CHECK(ops_traffic_op("matmul_f32", &mm_bytes, &mm_flops, &mm_calls), "no matmul_f32 entry");
  /* the local crops' 2 x 2 grid from the 4 x 4 one, forward and backward: [5 x 17] x [17 x D] */
  T_CHECK(mm_calls == 2, "%ld position interpolations, expected 2", mm_calls);
  T_NEAR(mm_flops, 2 * 2.0 * 5 * 17 * D, 0, "interpolation FLOPs");
  T_NEAR(mm_bytes, 4 * (5 * 17 + 17 * D + 5 * D) + 4 * (17 * 5 + 5 * D + 2 * 17 * D), 0, "interpolation bytes");
  T_NEAR(tr.flops[TRAFFIC_ATTN], attn, 1e-9 * attn, "attention FLOPs of a step");
  const double gemm = f.total - attn - patch_dx + mm_flops;
  T_NEAR(tr.flops[TRAFFIC_GEMM], gemm, 1e-9 * gemm, "GEMM FLOPs of a step");
  T_NEAR(tr.flops[TRAFFIC_OTHER], 0, 0, "FLOPs of the other ops");
  T_CHECK(tr.bytes[TRAFFIC_GEMM] > 0 && tr.bytes[TRAFFIC_ATTN] > 0 && tr.bytes[TRAFFIC_OTHER] > 0,
          "a class moved nothing: %g %g %g", tr.bytes[0], tr.bytes[1], tr.bytes[2]);
  T_CHECK(tr.host_bytes >= sizeof(float), "the loss download was not counted (%g bytes)", tr.host_bytes);
  /* the student's two passes (global, local crops) through every block */
  long c_attn;
  double b_attn, f_attn;
  ops_traffic_op("attn_bwd", &b_attn, &f_attn, &c_attn);
  T_CHECK(c_attn == 2 * s.vit.depth, "%ld attention backward calls, expected %d", c_attn, 2 * s.vit.depth);

  FILE *out = tmpfile();
  ops_traffic_print_ops(out, "");
  rewind(out);
  char line[256];
  int seen = 0;
  while (fgets(line, sizeof line, out)) seen += !strncmp(line, "linear_bwd ", 11) || !strncmp(line, "attn_fwd ", 9);
  fclose(out);
  T_CHECK(seen == 2, "the per-op list lacks linear_bwd or attn_fwd (%d of 2)", seen);
  free(gl);
  free(lc);
  bench_step_free(&a);
  bench_step_free(&b);
}

static double charged(const char *op, double *flops) {
  double b, f;
  long c;
  T_CHECK(ops_traffic_op(op, &b, &f, &c) && c == 1, "%s: %ld calls", op, c);
  if (flops) *flops = f;
  return b;
}

/* linear_residual_fwd as its definition, for a table that has it (the CPU backend's has not). */
static void ref_linear_residual_fwd(void *y, const void *r, const void *x, const float *w, const float *b,
                                    int M, int N, int K) {
  const struct ops *cpu = backend_cpu();
  float *f = malloc((size_t)M * N * sizeof *f);
  cpu->linear_fwd(f, x, w, b, M, N, K);
  cpu->residual_fwd(y, r, f, NULL, 1, M, N);
  free(f);
}

static void single_ops(void) {
  const struct ops *cpu = backend_cpu(), *w = ops_traffic_wrap(cpu, 2);
  T_CHECK((w->adamw_ema == NULL) == (cpu->adamw_ema == NULL), "adamw_ema presence changed");
  T_CHECK((w->linear_residual_fwd == NULL) == (cpu->linear_residual_fwd == NULL),
          "linear_residual_fwd presence changed");
  float *buf = calloc(4096, sizeof(float)), *y = calloc(4096, sizeof(float)), *z = calloc(4096, sizeof(float));
  float *mean = calloc(64, sizeof(float)), *rstd = calloc(64, sizeof(float));
  for (int i = 0; i < 4096; i++) buf[i] = 0.01f * (float)(i % 97) - 0.3f;
  double fl;
  /* y[3,5] = x[3,7] w[5,7]^T + b: 2 bytes for x, w, y and the bias */
  w->linear_fwd(y, buf, buf + 100, buf + 200, 3, 5, 7);
  T_NEAR(charged("linear_fwd", &fl), 2.0 * (21 + 35 + 15 + 5), 0, "linear_fwd bytes");
  T_NEAR(fl, 2.0 * 105, 0, "linear_fwd FLOPs");
  { /* the same Linear added to a residual stream: r read and y written instead of y written */
    static struct ops with;
    with = *cpu;
    with.linear_residual_fwd = ref_linear_residual_fwd;
    const struct ops *wr = ops_traffic_wrap(&with, 2);
    float *r = calloc(15, sizeof *r);
    for (int i = 0; i < 15; i++) r[i] = 0.5f * (float)i;
    wr->linear_fwd(z, buf, buf + 100, buf + 200, 3, 5, 7);
    wr->linear_residual_fwd(y, r, buf, buf + 100, buf + 200, 3, 5, 7);
    T_NEAR(charged("linear_residual_fwd", &fl), 2.0 * (21 + 35 + 2 * 15 + 5), 0, "linear_residual_fwd bytes");
    T_NEAR(fl, 2.0 * 105, 0, "linear_residual_fwd FLOPs");
    for (int i = 0; i < 15; i++) T_NEAR(y[i], r[i] + z[i], 0, "linear_residual_fwd through the wrapper");
    free(r);
    w = ops_traffic_wrap(cpu, 2);
  }
  /* dy read once; dx from w; dw (fp32) accumulated from x; db (fp32) accumulated */
  w->linear_bwd(z, y + 300, y + 600, buf, buf + 100, buf + 200, 3, 5, 7);
  T_NEAR(charged("linear_bwd", &fl), 2.0 * 15 + 2.0 * (35 + 21) + (2.0 * 21 + 8.0 * 35) + 8.0 * 5, 0,
         "linear_bwd bytes");
  T_NEAR(fl, 4.0 * 105, 0, "linear_bwd FLOPs");
  /* x and y, fp32 gain and bias, fp32 mean and rstd */
  w->layernorm_fwd(y, mean, rstd, buf, 7, buf + 500, buf + 600, 3, 7, 1e-6f);
  T_NEAR(charged("layernorm_fwd", NULL), 2.0 * 2 * 21 + 8.0 * 7 + 8.0 * 3, 0, "layernorm_fwd bytes");
  /* fused residual + LayerNorm over B = 2 samples of 3 rows of 7: x and f read, the sum and the
   * LayerNorm written (the sum is not read back), gain, bias, statistics and the scales in fp32 */
  const float sc[2] = {0.0f, 1.25f};
  w->residual_layernorm_fwd(y, z, mean, rstd, buf, buf + 1000, sc, buf + 500, buf + 600, 2, 3, 7, 1e-6f);
  T_NEAR(charged("residual_layernorm_fwd", NULL), 2.0 * 4 * 42 + 8.0 * 7 + 8.0 * 6 + 4.0 * 2, 0,
         "residual_layernorm_fwd bytes");
  /* its backward: dy and x read, dx accumulated, df written; statistics, gain, dg, db, scales */
  w->layernorm_residual_bwd(z, y + 2000, y + 2100, y + 1000, sc, buf, buf + 100, mean, rstd, buf + 500, 2, 3, 7);
  T_NEAR(charged("layernorm_residual_bwd", NULL), 2.0 * 5 * 42 + 8.0 * 6 + 4.0 * 7 + 16.0 * 7 + 4.0 * 2, 0,
         "layernorm_residual_bwd bytes");
  /* qkv read, out written, the backend's state written */
  const size_t st = cpu->attn_state_bytes(1, 4, 2, 3);
  w->attn_fwd(y, z, NULL, buf, 1, 4, 2, 3, 0.5f);
  T_NEAR(charged("attn_fwd", &fl), 2.0 * 4 * 24 + (double)st, 0, "attn_fwd bytes");
  T_NEAR(fl, 4.0 * 2 * 16 * 3, 0, "attn_fwd FLOPs");
  /* p, m, v read and written, g read, over both segments */
  const struct ops_adamw_seg segs[2] = {{0, 10, 1.0f, 1e-3f, 1.0f}, {20, 5, 1.0f, 1e-3f, 1.0f}};
  w->adamw(y, buf, z, z + 1000, segs, 2, 0.9, 0.999, 1e-8);
  T_NEAR(charged("adamw", NULL), 7.0 * 4 * 15, 0, "adamw bytes");
  w->gelu_bwd(z, y, buf, 11, 0);
  T_NEAR(charged("gelu_bwd", NULL), 3.0 * 2 * 11, 0, "gelu_bwd bytes");
  /* and with the bias gradient of 11 columns accumulated in fp32 */
  w->gelu_bwd_bias(z, y + 3000, y, buf, 3, 11, 1);
  T_NEAR(charged("gelu_bwd_bias", NULL), 3.0 * 2 * 33 + 8.0 * 11, 0, "gelu_bwd_bias bytes");

  /* the floor: per call, the larger of FLOPs / peak and bytes / bandwidth */
  struct ops_traffic tr;
  ops_traffic_set_peaks(1e3, 1e3);
  ops_traffic_read(NULL, 1);
  w->linear_fwd(y, buf, buf + 100, buf + 200, 3, 5, 7); /* 210 FLOP, 152 bytes */
  w->gelu_fwd(y, y, 50, 0);                              /* 0 FLOP, 200 bytes */
  ops_traffic_read(&tr, 1);
  T_NEAR(tr.floor_s[TRAFFIC_GEMM], 0.210, 1e-12, "compute-bound floor");
  T_NEAR(tr.floor_s[TRAFFIC_OTHER], 0.200, 1e-12, "memory-bound floor");
  ops_traffic_set_peaks(1e3, 1e2);
  w->linear_fwd(y, buf, buf + 100, buf + 200, 3, 5, 7);
  ops_traffic_read(&tr, 1);
  T_NEAR(tr.floor_s[TRAFFIC_GEMM], 1.52, 1e-12, "memory-bound GEMM floor");
  ops_traffic_set_peaks(0, 0);
  free(buf), free(y), free(z), free(mean), free(rstd);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  whole_steps();
  single_ops();
  return t_finish();
}
