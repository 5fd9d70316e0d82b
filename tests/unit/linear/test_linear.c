/* tests/unit/linear/test_linear.c - the linear probe's pieces against direct computations in double:
 * the initial weights (N(0, 0.01^2) from the seed, bias 0), the cross entropy and its gradient
 * (finite differences), one SGD step without and with momentum and weight decay, the cosine
 * schedule against its closed form, the top-k tie rule, the evaluation's loss and accuracies, and
 * the augmented crops against imgops' float32 RandomResizedCrop and flip on the same draws. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "core/rng.h"
#include "data/augment.h"
#include "data/imgops.h"
#include "data/shards.h"
#include "linear/linear.h"
#include "tests/fixtures/testutil.h"

enum { F = 7, C = 4, N = 5 };

static void fill(float *x, size_t n, uint64_t id, double sd) {
  struct rng r;
  rng_init(&r, 1, RNG_DOMAIN_TEST, id, 0);
  for (size_t i = 0; i < n; i++) x[i] = (float)(sd * rng_normal(&r));
}

/* Mean cross entropy of rows x under (w, b), in double. */
static double loss_d(const double *w, const double *b, const float *x, const int32_t *y, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) {
    double l[C], mx = -1e300, s = 0;
    for (int c = 0; c < C; c++) {
      l[c] = b[c];
      for (int j = 0; j < F; j++) l[c] += w[c * F + j] * x[i * F + j];
      mx = l[c] > mx ? l[c] : mx;
    }
    for (int c = 0; c < C; c++) s += exp(l[c] - mx);
    sum += -(l[y[i]] - mx - log(s));
  }
  return sum / n;
}

static void test_init(void) {
  struct linear_model m;
  linear_model_init(&m, backend_cpu(), 300, 10, 4, 21);
  double s = 0, ss = 0;
  for (int i = 0; i < 3000; i++) s += m.w[i], ss += (double)m.w[i] * m.w[i];
  T_NEAR(s / 3000, 0, 0.001, "mean of the initial weights");
  T_NEAR(sqrt(ss / 3000), 0.01, 0.0005, "std of the initial weights");
  float first = m.w[0];
  T_CHECK(m.b[0] == 0 && m.b[9] == 0, "bias not zero");
  linear_model_free(&m);
  linear_model_init(&m, backend_cpu(), 300, 10, 4, 21);
  T_CHECK(m.w[0] == first, "the same seed gave other weights");
  linear_model_free(&m);
  linear_model_init(&m, backend_cpu(), 300, 10, 4, 22);
  T_CHECK(m.w[0] != first, "another seed gave the same weights");
  linear_model_free(&m);
}

static void test_ce(void) {
  float l[C] = {0.3f, -1.2f, 2.5f, 0.1f}, dl[C];
  const float loss = linear_ce_row(l, C, 1, 0.5f, dl);
  double s = 0;
  for (int c = 0; c < C; c++) s += exp((double)l[c]);
  T_NEAR(loss, -(l[1] - log(s)), 1e-6, "cross entropy");
  for (int c = 0; c < C; c++) T_NEAR(dl[c], 0.5 * (exp((double)l[c]) / s - (c == 1)), 1e-7, "its gradient");
  /* the gradient may overwrite the logits */
  const float again = linear_ce_row(l, C, 1, 0.5f, l);
  T_CHECK(again == loss && l[1] == dl[1], "in place: loss %g vs %g", again, loss);
  /* large logits do not overflow */
  float big[C] = {1000.0f, 999.0f, -5.0f, 0};
  T_NEAR(linear_ce_row(big, C, 0, 1.0f, NULL), log(1 + exp(-1.0)), 1e-5, "cross entropy of large logits");
}

/* Steps against SGD written out in double from gradients by central differences. */
static void test_step(void) {
  float x[N * F], w0[C * F];
  int32_t y[N] = {0, 3, 1, 1, 2};
  fill(x, N * F, 1, 1.0);
  struct linear_model m;
  linear_model_init(&m, backend_cpu(), F, C, N, 3);
  fill(m.w, C * F, 2, 0.5);
  for (int c = 0; c < C; c++) m.b[c] = 0.1f * (float)c;
  memcpy(w0, m.w, sizeof w0);
  backend_cpu()->upload(m.w_dev, m.w, sizeof w0);
  double w[C * F + C], *b = w + C * F, g[C * F + C], buf[C * F + C];
  for (int i = 0; i < C * F; i++) w[i] = m.w[i];
  for (int c = 0; c < C; c++) b[c] = m.b[c];
  const double lr = 0.3, mom = 0.9, wd = 0.01;
  for (int step = 0; step < 3; step++) {
    const double want_loss = loss_d(w, b, x, y, N);
    for (int i = 0; i < C * F + C; i++) {
      const double h = 1e-6, keep = w[i];
      w[i] = keep + h;
      const double up = loss_d(w, b, x, y, N);
      w[i] = keep - h;
      g[i] = (up - loss_d(w, b, x, y, N)) / (2 * h);
      w[i] = keep;
    }
    const double got = linear_step(&m, x, y, N, lr, step ? mom : 0.0, step ? wd : 0.0);
    T_NEAR(got, want_loss, 1e-6, "the batch's mean loss");
    for (int i = 0; i < C * F + C; i++) {
      const double d = g[i] + (step ? wd * w[i] : 0.0);
      buf[i] = step > 1 ? mom * buf[i] + d : d; /* momentum from step 1 on: its first buffer is d */
      w[i] -= lr * buf[i];
    }
    double worst = 0;
    for (int i = 0; i < C * F; i++) worst = fmax(worst, fabs(m.w[i] - w[i]));
    for (int c = 0; c < C; c++) worst = fmax(worst, fabs(m.b[c] - b[c]));
    T_CHECK(worst <= 2e-6, "step %d: weights differ from SGD in double by %g", step, worst);
  }
  linear_model_free(&m);
}

static void test_schedule_topk(void) {
  double lr[7];
  linear_cosine_lrs(0.5, 7, lr);
  for (int e = 0; e < 7; e++) T_NEAR(lr[e], 0.25 * (1 + cos(acos(-1.0) * e / 7)), 1e-15, "cosine lr");
  const float l[6] = {1, 3, 3, -1, 3, 0};
  int32_t best[4];
  linear_topk(l, 6, 4, best);
  T_CHECK(best[0] == 1 && best[1] == 2 && best[2] == 4 && best[3] == 0, "top-4 %d %d %d %d", best[0], best[1],
          best[2], best[3]);
}

static void test_eval(void) {
  struct linear_model m;
  linear_model_init(&m, backend_cpu(), F, C, 2, 3);
  float x[N * F];
  fill(x, N * F, 4, 1.0);
  /* labels: 4 is a class the layer lacks (wrong, no loss) */
  const int32_t y[N] = {0, 1, 2, 3, 4};
  double loss, top1, top5;
  linear_eval(&m, x, y, N, &loss, &top1, &top5);
  float lg[N * C];
  int hits = 0;
  double sum = 0;
  for (int i = 0; i < N; i++) {
    linear_logits(&m, x + i * F, 1, lg + i * C);
    int32_t best[1];
    linear_topk(lg + i * C, C, 1, best);
    hits += best[0] == y[i];
    if (i < 4) sum += linear_ce_row(lg + i * C, C, y[i], 1.0f, NULL);
  }
  T_NEAR(top1, 100.0 * hits / N, 1e-12, "Top-1");
  T_NEAR(top5, 80.0, 1e-12, "Top-5 with 4 classes: all but the unknown class");
  T_NEAR(loss, sum / 4, 1e-6, "the loss of the rows with a known class");
  linear_model_free(&m);
}

/* The augmented crop of a sample: its draws replayed here, then imgops in float32 (PyTorch's
 * kernels): the min-max image, the crop, the bilinear resize, the flip, the normalisation. */
static void test_aug(void) {
  enum { CA = 3, H = 13, W = 11, S = 9 };
  uint16_t raw[CA * H * W];
  struct rng r;
  rng_init(&r, 8, RNG_DOMAIN_TEST, 2, 0);
  for (int i = 0; i < CA * H * W; i++) raw[i] = (uint16_t)rng_below(&r, 60000);
  const int sel[2] = {2, 0};
  const double mean[2] = {0.4, 0.55}, std[2] = {0.21, 0.3};
  struct features_prep p, a;
  features_prep_setup(&p, CA, H, W, DATASET_U16, sel, 2, mean, std, 0, 1);
  struct linear_aug ctx = {17, 3};
  linear_aug_prep(&a, &p, S, &ctx);
  double *work = malloc(sizeof(double) * features_prep_work_size(&a));
  float got[2 * S * S], want[2 * S * S], scaled[2 * H * W], crop[2 * H * W];
  int flips = 0;
  for (int64_t sample = 0; sample < 6; sample++) {
    T_CHECK(a.image(&a, raw, sample, got, work) == FEATURES_PREP_OK, "valid image refused");
    rng_init(&r, 17, RNG_DOMAIN_LINEAR, 4, (uint64_t)sample);
    static const double scale[2] = {0.08, 1.0};
    int top, left, h, w;
    augment_rrc_params(&r, H, W, scale, &top, &left, &h, &w);
    const int flip = rng_uniform(&r) < 0.5;
    flips += flip;
    imgops_minmax_scale(raw, IMGOPS_U16, CA, H, W, sel, 2, scaled);
    imgops_crop(scaled, 2, H, W, top, left, h, w, crop);
    imgops_resize_bilinear(crop, 2, h, w, want, S, S);
    if (flip) imgops_hflip(want, 2, S, S);
    const float fm[2] = {0.4f, 0.55f}, fs[2] = {0.21f, 0.3f};
    imgops_normalize(want, 2, (size_t)S * S, fm, fs);
    T_CHECK(t_max_abs_diff_f32(got, want, 2 * S * S) <= 2e-5, "sample %d: the crop differs by %g", (int)sample,
            t_max_abs_diff_f32(got, want, 2 * S * S));
  }
  T_CHECK(flips > 0 && flips < 6, "%d of 6 crops flipped", flips);
  /* another epoch, other crops */
  float other[2 * S * S];
  ctx.epoch = 4;
  a.image(&a, raw, 5, other, work);
  T_CHECK(memcmp(other, got, sizeof got) != 0, "epochs 3 and 4 gave sample 5 the same crop");
  free(work);
  features_prep_free(&p);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_init();
  test_ce();
  test_step();
  test_schedule_topk();
  test_eval();
  test_aug();
  return t_finish();
}
