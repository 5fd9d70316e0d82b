/* test_gpu_train.c - whole DINO training steps on the GPU: fp32 against the CPU backend, and 20 bf16
 * steps on demo-like data (GPU augmentation) tracking the fp32 loss.
 *
 * Part 1: a small ViT (drop path on, interpolated position embedding for the local crops), the
 * same initial weights and crops on both backends, 3 steps of forward, loss, centre, backward and
 * optim_update (clip + AdamW + EMA; the GPU's fused kernel, the CPU's three ops), the head's last
 * layer frozen in the first.  fp32 GPU vs CPU (relative L2): loss 1e-5, logits 1e-4, gradients
 * 2e-4, centre 1e-4, student and teacher 3e-4 over the whole buffer (AdamW turns rounding noise in
 * gradients that are exactly zero upstream into steps of lr * noise / eps).
 * Part 2: 20 steps in fp32 and in bf16 from the same weights on the same GPU-augmented crops of
 * synthetic 3-class images: the bf16 loss stays within 5% (+0.02) of the fp32 loss at every step
 * (llm.c's CI allows 5% too) and both stay finite. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_step.h"
#include "core/rng.h"
#include "cuda/data/augment_gpu.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/ops.h"
#include "model/optim.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_util.h"

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

static void part1(const struct ops *gpu) {
  const struct ops *cpu = backend_cpu();
  const int B = 4, nl = 4, G = 32, L = 16, C = 3;
  struct bench_step tg, tc;
  tr_init(&tg, gpu, B, nl, G, L);
  tr_init(&tc, cpu, B, nl, G, L);
  const size_t tsz = tg.m->tt.size, K = (size_t)tg.loss.K;
  struct rng r;
  rng_init(&r, 3, RNG_DOMAIN_TEST, 2, 0);
  const size_t ng = (size_t)2 * B * C * G * G, nlc = (size_t)nl * B * C * L * L;
  const int64_t ids[4] = {11, 3, 7, 100};
  for (int step = 0; step < 3; step++) {
    char w[128];
    float *hg = gpu_randn(&r, ng, 1.0f), *hl = gpu_randn(&r, nlc, 1.0f);
    float *gg = gpu_f32_up(gpu, hg, ng), *gl = gpu_f32_up(gpu, hl, nlc);
    const double lg = tr_forward(&tg, gg, gl, B, (uint64_t)step, ids);
    const double lc = tr_forward(&tc, hg, hl, B, (uint64_t)step, ids);
    printf("fp32 step %d: loss GPU %.8f CPU %.8f\n", step, lg, lc);
    T_CHECK(fabs(lg - lc) <= 1e-5 * fabs(lc), "step %d: loss %.9g vs CPU %.9g", step, lg, lc);
    snprintf(w, sizeof w, "fp32 step %d student logits", step);
    cmp_buf(w, gpu, tg.m->sh.logits, cpu, tc.m->sh.logits, (size_t)(2 + nl) * B * K, 1, 1e-4);
    snprintf(w, sizeof w, "fp32 step %d teacher logits", step);
    cmp_buf(w, gpu, tg.m->th.logits, cpu, tc.m->th.logits, (size_t)2 * B * K, 1, 1e-4);
    dino_model_backward(tg.m, B, NULL, NULL);
    dino_model_backward(tc.m, B, NULL, NULL);
    snprintf(w, sizeof w, "fp32 step %d gradients", step);
    cmp_buf(w, gpu, tg.m->grads, cpu, tc.m->grads, tsz, 0, 2e-4);
    tr_update(&tg, step == 0);
    tr_update(&tc, step == 0);
    snprintf(w, sizeof w, "fp32 step %d student", step);
    cmp_buf(w, gpu, tg.m->student, cpu, tc.m->student, tsz, 0, 3e-4);
    snprintf(w, sizeof w, "fp32 step %d teacher", step);
    cmp_buf(w, gpu, tg.m->teacher, cpu, tc.m->teacher, tsz, 0, 3e-4);
    snprintf(w, sizeof w, "fp32 step %d centre", step);
    cmp_buf(w, gpu, tg.loss.center, cpu, tc.loss.center, K, 0, 1e-4);
    gpu->free(gg);
    gpu->free(gl);
    free(hg);
    free(hl);
  }
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

static void part2(void) {
  const struct ops *g32 = gpu_or_skip("fp32"), *g16 = gpu_or_skip("bf16");
  const int B = 8, nl = 4, G = 32, L = 16, C = 3, H = 48, W = 56, nimg = 24, steps = 20;
  struct augment a;
  bench_step_augment(&a, C, H, W, G, L, nl, 0.25f);
  int64_t labels[24];
  uint16_t *img = make_images(nimg, C, H, W, labels);
  struct augment_gpu *ag = augment_gpu_create(&a, B);
  struct bench_step t32, t16;
  tr_init(&t32, g32, B, nl, G, L);
  tr_init(&t16, g16, B, nl, G, L);
  const size_t imgsz = (size_t)C * H * W;
  double worst = 0;
  for (int s = 0; s < steps; s++) {
    int64_t ids[8];
    const int first = (s * B) % nimg;
    for (int i = 0; i < B; i++) ids[i] = (first + i) % nimg;
    uint16_t *raw = malloc((size_t)B * imgsz * sizeof *raw);
    for (int i = 0; i < B; i++) memcpy(raw + i * imgsz, img + ids[i] * imgsz, imgsz * sizeof *raw);
    float *gl, *lc;
    augment_gpu_batch(ag, raw, ids, B, s / 3, &gl, &lc);
    const double l32 = tr_forward(&t32, gl, lc, B, (uint64_t)s, ids);
    const double l16 = tr_forward(&t16, gl, lc, B, (uint64_t)s, ids);
    dino_model_backward(t32.m, B, NULL, NULL);
    dino_model_backward(t16.m, B, NULL, NULL);
    tr_update(&t32, s < 2);
    tr_update(&t16, s < 2);
    const double d = fabs(l16 - l32);
    printf("step %2d: loss fp32 %.6f bf16 %.6f (difference %.2f%%)\n", s, l32, l16, 100 * d / fabs(l32));
    T_CHECK(isfinite(l32) && isfinite(l16), "step %d: loss not finite (%g, %g)", s, l32, l16);
    T_CHECK(d <= 0.05 * fabs(l32) + 0.02, "step %d: bf16 loss %.6f strays from fp32 %.6f", s, l16, l32);
    if (d / fabs(l32) > worst) worst = d / fabs(l32);
    free(raw);
  }
  printf("20 bf16 steps: largest relative loss difference to fp32 %.3f%%\n", 100 * worst);
  bench_step_free(&t32);
  bench_step_free(&t16);
  augment_gpu_destroy(ag);
  free(img);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  const struct ops *gpu = gpu_or_skip("fp32");
  part1(gpu);
  part2();
  return t_finish();
}
