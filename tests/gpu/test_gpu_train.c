/* test_gpu_train.c - whole DINO training steps on the GPU: fp32 and fp16 against the CPU backend,
 * 20 bf16 and 20 fp16 steps on demo-like data (GPU augmentation) tracking the fp32 loss, and fp16's
 * loss scale in whole steps (overflow: skip and halve; growth).
 *
 * Part 1: a small ViT (drop path on, interpolated position embedding for the local crops), the
 * same initial weights and crops on both backends, 3 steps of forward, loss, centre, backward and
 * optim_update (clip + AdamW + EMA; the GPU's fused kernel, the CPU's three ops), the head's last
 * layer frozen in the first.  fp32 GPU vs CPU (relative L2): loss 1e-5, logits 1e-4, gradients
 * 2e-4, centre 1e-4, student and teacher 3e-4 over the whole buffer (AdamW turns rounding noise in
 * gradients that are exactly zero upstream into steps of lr * noise / eps).
 * fp16 GPU (the gradients compared unscaled) vs the fp32 CPU: loss 2e-3, logits 1e-2, gradients
 * 3e-2, centre 2e-3, student and teacher 2e-2 (fp16 activations and weight copies: 2^-12 relative
 * per element, through every layer; the largest errors seen under the emulator are about a third
 * of these).  The comparisons in fp16 start from a loss scale of 2^12 (FP16_SCALE), where this
 * small model's scaled gradients stay finite: with 4 or 8 images per step each one's share of the
 * loss gradient is large, and from GradScaler's 2^16 its first steps overflow (Part 3 shows it), as
 * upstream's do, and are skipped; a skipped step is no measure of fp16's arithmetic.
 * Part 2: 20 steps (--steps N: N) in fp32, bf16 and fp16 from the same weights on the same
 * GPU-augmented crops of synthetic 3-class images: the bf16 and the fp16 loss stay within 5%
 * (+0.02) of the fp32 loss at every step (llm.c's CI allows 5% too) and all stay finite.
 * --arch A runs everything with the kernel set of compute capability A (&gpu arch: 75 a T4's, 70
 * a V100's); bf16 is left out below 80.
 * Part 3: fp16 steps from a loss scale of 2^40, at which the scaled loss gradient overflows fp16:
 * each step is skipped (the student, its moments and step counts unchanged, the teacher moved by
 * the EMA alone, the scale halved) until the scale fits, then the steps update; with the growth
 * counter one short of the interval, the next finite step doubles the scale. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_step.h"
#include "core/rng.h"
#include "cuda/backend_cuda.h"
#include "cuda/data/augment_gpu.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/loss_scale.h"
#include "model/ops.h"
#include "model/optim.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_util.h"

#define FP16_SCALE 4096.0f /* the loss scale the fp16 comparisons start from (see above) */

static struct dino_spec small_spec(void) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){8, 3, 64, 2, 2, 256, 4, 0.1, 0};
  s.head = (struct head_dims){.hidden = 128, .bottleneck = 32, .out_dim = 512, .nlayers = 3,
                              .norm_last_layer = 1};
  return s;
}

/* The benchmarks' step set-up (bench/bench_step.c) on the small model. */
static void tr_init(struct bench_step *t, const struct ops *ops, int B, int nl, int G, int L) {
  const struct dino_spec s = small_spec();
  bench_step_init(t, ops, &s, B, nl, G, L);
}

/* forward + loss + centre; returns the loss */
static double tr_forward(struct bench_step *t, const float *gl, const float *lc, int B, uint64_t step,
                         const int64_t *ids) {
  struct dino_droppath dp = {40, step, ids};
  dino_model_forward(t->m, gl, lc, B, &dp);
  const double l = dino_loss_forward(&t->loss, t->m->sh.logits, t->m->th.logits, t->m->sh.dlogits, B, 0);
  dino_loss_update_center(&t->loss, B, 1, NULL, NULL);
  return l;
}

static void tr_update(struct bench_step *t, int frozen) {
  optim_update(&t->opt, t->m->student, t->m->grads, 3.0, NULL, 1e-3, 0.04, frozen, t->m->teacher, 0.996);
}

static void cmp_buf(const char *what, const struct ops *a, const void *da, const struct ops *b,
                    const void *db, size_t n, int act, double tol) {
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  if (act) {
    gpu_act_down(a, x, da, n);
    gpu_act_down(b, y, db, n);
  } else {
    gpu_f32_down(a, x, da, n);
    gpu_f32_down(b, y, db, n);
  }
  gpu_cmp(what, x, y, n, tol);
  free(x);
  free(y);
}

/* Part 1's tolerances (relative L2) for one GPU precision. */
struct tol1 {
  double loss, logits, grads, params, centre;
};

static void part1(const struct ops *gpu, const struct tol1 *tol) {
  const struct ops *cpu = backend_cpu();
  const char *prec = gpu->precision;
  const int B = 4, nl = 4, G = 32, L = 16, C = 3;
  struct bench_step tg, tc;
  tr_init(&tg, gpu, B, nl, G, L);
  tr_init(&tc, cpu, B, nl, G, L);
  if (tg.ls.on) tg.ls.scale = FP16_SCALE;
  const size_t tsz = tg.m->tt.size, K = (size_t)tg.loss.K;
  struct rng r;
  rng_init(&r, 3, RNG_DOMAIN_TEST, 2, 0);
  const size_t ng = (size_t)2 * B * C * G * G, nlc = (size_t)nl * B * C * L * L;
  const int64_t ids[4] = {11, 3, 7, 100};
  float *ga = malloc(tsz * sizeof(float)), *gb = malloc(tsz * sizeof(float));
  for (int step = 0; step < 3; step++) {
    char w[128];
    float *hg = gpu_randn(&r, ng, 1.0f), *hl = gpu_randn(&r, nlc, 1.0f);
    float *gg = gpu_f32_up(gpu, hg, ng), *gl = gpu_f32_up(gpu, hl, nlc);
    const double lg = tr_forward(&tg, gg, gl, B, (uint64_t)step, ids);
    const double lc = tr_forward(&tc, hg, hl, B, (uint64_t)step, ids);
    printf("%s step %d: loss GPU %.8f CPU %.8f\n", prec, step, lg, lc);
    T_CHECK(fabs(lg - lc) <= tol->loss * fabs(lc), "%s step %d: loss %.9g vs CPU %.9g", prec, step, lg, lc);
    snprintf(w, sizeof w, "%s step %d student logits", prec, step);
    cmp_buf(w, gpu, tg.m->sh.logits, cpu, tc.m->sh.logits, (size_t)(2 + nl) * B * K, 1, tol->logits);
    snprintf(w, sizeof w, "%s step %d teacher logits", prec, step);
    cmp_buf(w, gpu, tg.m->th.logits, cpu, tc.m->th.logits, (size_t)2 * B * K, 1, tol->logits);
    dino_model_backward(tg.m, B, NULL, NULL);
    dino_model_backward(tc.m, B, NULL, NULL);
    /* the GPU's gradients carry the loss scale (fp16): compared unscaled (an exact division) */
    gpu_f32_down(gpu, ga, tg.m->grads, tsz);
    gpu_f32_down(cpu, gb, tc.m->grads, tsz);
    for (size_t i = 0; i < tsz; i++) ga[i] /= tg.ls.scale;
    snprintf(w, sizeof w, "%s step %d gradients (unscaled, scale %g)", prec, step, (double)tg.ls.scale);
    gpu_cmp(w, ga, gb, tsz, tol->grads);
    tr_update(&tg, step == 0);
    tr_update(&tc, step == 0);
    T_CHECK(!tg.ls.last_skipped, "%s step %d skipped", prec, step);
    snprintf(w, sizeof w, "%s step %d student", prec, step);
    cmp_buf(w, gpu, tg.m->student, cpu, tc.m->student, tsz, 0, tol->params);
    snprintf(w, sizeof w, "%s step %d teacher", prec, step);
    cmp_buf(w, gpu, tg.m->teacher, cpu, tc.m->teacher, tsz, 0, tol->params);
    snprintf(w, sizeof w, "%s step %d centre", prec, step);
    cmp_buf(w, gpu, tg.loss.center, cpu, tc.loss.center, K, 0, tol->centre);
    gpu->free(gg);
    gpu->free(gl);
    free(hg);
    free(hl);
  }
  free(ga);
  free(gb);
  bench_step_free(&tg);
  bench_step_free(&tc);
}

/* Synthetic 3-class images: a bright blob whose place depends on the class and channel, on noise. */
static uint16_t *make_images(int n, int C, int H, int W, int64_t *labels) {
  uint16_t *img = malloc((size_t)n * C * H * W * sizeof *img);
  struct rng r;
  rng_init(&r, 5, RNG_DOMAIN_TEST, 9, 0);
  for (int i = 0; i < n; i++) {
    const int k = i % 3;
    labels[i] = k;
    for (int c = 0; c < C; c++) {
      const double cy = H * (0.25 + 0.25 * k), cx = W * (0.3 + 0.2 * c);
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
          const double d2 = ((y - cy) * (y - cy) + (x - cx) * (x - cx)) / (0.02 * H * W);
          const double v = 300 + 2000 * exp(-d2) + 80 * rng_uniform(&r);
          img[(((size_t)i * C + c) * H + y) * W + x] = (uint16_t)v;
        }
    }
  }
  return img;
}

/* The GPU-augmented crops of step s (B images of the synthetic set) into *gl, *lc. */
static void crops_of(struct augment_gpu *ag, const uint16_t *img, size_t imgsz, int nimg, int B, int s, int64_t *ids,
                     float **gl, float **lc) {
  const int first = (s * B) % nimg;
  for (int i = 0; i < B; i++) ids[i] = (first + i) % nimg;
  uint16_t *raw = malloc((size_t)B * imgsz * sizeof *raw);
  for (int i = 0; i < B; i++) memcpy(raw + i * imgsz, img + ids[i] * imgsz, imgsz * sizeof *raw);
  augment_gpu_batch(ag, raw, ids, B, s / 3, gl, lc);
  free(raw);
}

static void part2(int steps) {
  const struct ops *g32 = gpu_or_skip("fp32"), *gh = gpu_or_skip("fp16");
  const struct ops *gb = backend_cuda_arch() >= 80 ? gpu_or_skip("bf16") : gh; /* no bf16 below 8.0 */
  const int B = 8, nl = 4, G = 32, L = 16, C = 3, H = 48, W = 56, nimg = 24;
  struct augment a;
  bench_step_augment(&a, C, H, W, G, L, nl, 0.25f);
  int64_t labels[24];
  uint16_t *img = make_images(nimg, C, H, W, labels);
  struct augment_gpu *ag = augment_gpu_create(&a, B);
  struct bench_step t32, tb, th;
  tr_init(&t32, g32, B, nl, G, L);
  tr_init(&tb, gb, B, nl, G, L);
  tr_init(&th, gh, B, nl, G, L);
  th.ls.scale = FP16_SCALE;
  const size_t imgsz = (size_t)C * H * W;
  double worst[2] = {0, 0};
  for (int s = 0; s < steps; s++) {
    int64_t ids[8];
    float *gl, *lc;
    crops_of(ag, img, imgsz, nimg, B, s, ids, &gl, &lc);
    const double l32 = tr_forward(&t32, gl, lc, B, (uint64_t)s, ids);
    const double l16[2] = {tr_forward(&tb, gl, lc, B, (uint64_t)s, ids), tr_forward(&th, gl, lc, B, (uint64_t)s, ids)};
    dino_model_backward(t32.m, B, NULL, NULL);
    dino_model_backward(tb.m, B, NULL, NULL);
    dino_model_backward(th.m, B, NULL, NULL);
    tr_update(&t32, s < 2);
    tr_update(&tb, s < 2);
    tr_update(&th, s < 2);
    printf("step %2d: loss fp32 %.6f %s %.6f fp16 %.6f (differences %.2f%%, %.2f%%)%s\n", s, l32, gb->precision, l16[0], l16[1],
           100 * fabs(l16[0] - l32) / fabs(l32), 100 * fabs(l16[1] - l32) / fabs(l32),
           th.ls.last_skipped ? " fp16 skipped" : "");
    for (int p = 0; p < 2; p++) {
      const char *pn = p ? "fp16" : gb->precision;
      const double d = fabs(l16[p] - l32);
      T_CHECK(isfinite(l32) && isfinite(l16[p]), "step %d: loss not finite (fp32 %g, %s %g)", s, l32, pn, l16[p]);
      T_CHECK(d <= 0.05 * fabs(l32) + 0.02, "step %d: %s loss %.6f strays from fp32 %.6f", s, pn, l16[p], l32);
      if (d / fabs(l32) > worst[p]) worst[p] = d / fabs(l32);
    }
  }
  printf("%d steps: largest relative loss difference to fp32: %s %.3f%%, fp16 %.3f%% (loss scale %g, %lld "
         "skipped)\n", steps, gb->precision, 100 * worst[0], 100 * worst[1], (double)th.ls.scale,
         (long long)th.ls.skipped);
  bench_step_free(&t32);
  bench_step_free(&tb);
  bench_step_free(&th);
  augment_gpu_destroy(ag);
  free(img);
}

static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

static void part3(void) {
  const struct ops *gh = gpu_or_skip("fp16"), *cpu = backend_cpu();
  const int B = 8, nl = 4, G = 32, L = 16, C = 3, H = 48, W = 56, nimg = 24;
  struct augment a;
  bench_step_augment(&a, C, H, W, G, L, nl, 0.25f);
  int64_t labels[24];
  uint16_t *img = make_images(nimg, C, H, W, labels);
  struct augment_gpu *ag = augment_gpu_create(&a, B);
  struct bench_step t;
  tr_init(&t, gh, B, nl, G, L);
  const size_t imgsz = (size_t)C * H * W, n = t.m->tt.size;
  const int nt = t.m->tt.n;
  float *s0 = malloc(n * sizeof(float)), *t0 = malloc(n * sizeof(float)), *m0 = malloc(n * sizeof(float));
  float *s1 = malloc(n * sizeof(float)), *t1 = malloc(n * sizeof(float)), *m1 = malloc(n * sizeof(float));
  int64_t *steps0 = malloc((size_t)nt * sizeof *steps0);
  t.ls.scale = 0x1p40f;
  int skipped = 0, s = 0;
  for (; s < 40; s++) {
    int64_t ids[8];
    float *gl, *lc;
    crops_of(ag, img, imgsz, nimg, B, s, ids, &gl, &lc);
    gpu_f32_down(gh, s0, t.m->student, n);
    gpu_f32_down(gh, t0, t.m->teacher, n);
    gpu_f32_down(gh, m0, t.opt.m, n);
    memcpy(steps0, t.opt.steps, (size_t)nt * sizeof *steps0);
    const float scale = t.ls.scale;
    const double l = tr_forward(&t, gl, lc, B, (uint64_t)s, ids);
    dino_model_backward(t.m, B, NULL, NULL);
    tr_update(&t, 0);
    T_CHECK(isfinite(l), "step %d at loss scale %g: loss %g not finite", s, (double)scale, l);
    gpu_f32_down(gh, s1, t.m->student, n);
    gpu_f32_down(gh, t1, t.m->teacher, n);
    gpu_f32_down(gh, m1, t.opt.m, n);
    if (!t.ls.last_skipped) break;
    skipped++;
    cpu->ema(t0, s0, n, 0.996); /* the teacher a skipped step leaves: the EMA of the unchanged student */
    T_CHECK(same_bits(s1, s0, n) && same_bits(m1, m0, n) && !memcmp(steps0, t.opt.steps, (size_t)nt * sizeof *steps0),
            "step %d skipped at scale %g: the student, its moments or step counts changed", s, (double)scale);
    T_CHECK(same_bits(t1, t0, n), "step %d skipped: the teacher is not the EMA of the unchanged student", s);
    T_CHECK(t.ls.scale == scale / 2 && t.ls.skipped == skipped && t.ls.growth == 0,
            "step %d skipped at scale %g: scale now %g, %lld skipped", s, (double)scale, (double)t.ls.scale,
            (long long)t.ls.skipped);
  }
  printf("fp16 from loss scale 2^40: %d steps skipped, the first update at scale %g (step %d)\n", skipped,
         (double)t.ls.scale, s);
  T_CHECK(skipped >= 1 && s < 40 && t.ls.scale == ldexpf(1.0f, 40 - skipped) && !same_bits(s1, s0, n) &&
              t.ls.growth == 1,
          "overflows: %d skipped, scale %g, growth %lld: no update before step %d", skipped, (double)t.ls.scale,
          (long long)t.ls.growth, s);
  /* growth: the counter one short of the interval, the next finite step doubles the scale */
  t.ls.growth = LOSS_SCALE_INTERVAL - 1;
  const float before = t.ls.scale;
  int64_t ids[8];
  float *gl, *lc;
  crops_of(ag, img, imgsz, nimg, B, s + 1, ids, &gl, &lc);
  tr_forward(&t, gl, lc, B, (uint64_t)(s + 1), ids);
  dino_model_backward(t.m, B, NULL, NULL);
  tr_update(&t, 0);
  T_CHECK(!t.ls.last_skipped && t.ls.scale == 2 * before && t.ls.growth == 0,
          "growth: skipped %d, scale %g -> %g, growth %lld", t.ls.last_skipped, (double)before, (double)t.ls.scale,
          (long long)t.ls.growth);
  free(s0), free(t0), free(m0), free(s1), free(t1), free(m1), free(steps0);
  bench_step_free(&t);
  augment_gpu_destroy(ag);
  free(img);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  int steps = 20;
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--arch")) backend_cuda_set_arch(atoi(argv[i + 1]));
  }
  static const struct tol1 t32 = {1e-5, 1e-4, 2e-4, 3e-4, 1e-4}, t16 = {2e-3, 1e-2, 3e-2, 2e-2, 2e-3};
  part1(gpu_or_skip("fp32"), &t32);
  part1(gpu_or_skip("fp16"), &t16);
  part2(steps > 0 ? steps : 20);
  part3();
  return t_finish();
}
