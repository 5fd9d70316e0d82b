/* linear_sgd.c - the linear layer of the probe: initial weights, logits, cross entropy, SGD with
 * momentum, the cosine schedule, top-k. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "linear/linear.h"

void linear_model_init(struct linear_model *m, const struct ops *ops, int F, int C, int rows_max, uint64_t seed) {
  SCD_ASSERT(F >= 1 && C >= 1 && rows_max >= 1);
  memset(m, 0, sizeof *m);
  m->ops = ops;
  m->F = F;
  m->C = C;
  m->rows_max = rows_max;
  const size_t wn = MUL_SIZE((size_t)C, (size_t)F);
  m->w = xmalloc(MUL_SIZE(wn, sizeof(float)));
  m->mw = xcalloc(wn, sizeof(float));
  m->gw = xmalloc(MUL_SIZE(wn, sizeof(float)));
  m->b = xcalloc((size_t)C, sizeof(float));
  m->mb = xcalloc((size_t)C, sizeof(float));
  m->gb = xmalloc(MUL_SIZE((size_t)C, sizeof(float)));
  m->logits = xmalloc(MUL_SIZE(MUL_SIZE((size_t)rows_max, (size_t)C), sizeof(float)));
  /* LinearClassifier: weight.normal_(0, 0.01), bias.zero_() */
  struct rng r;
  rng_init(&r, seed, RNG_DOMAIN_LINEAR, 0, 0);
  for (size_t i = 0; i < wn; i++) m->w[i] = (float)(0.01 * rng_normal(&r));
  m->w_dev = ops->alloc(MUL_SIZE(wn, sizeof(float)));
  m->g_dev = ops->alloc(MUL_SIZE(wn, sizeof(float)));
  m->x_dev = ops->alloc(MUL_SIZE(MUL_SIZE((size_t)rows_max, (size_t)F), sizeof(float)));
  m->y_dev = ops->alloc(MUL_SIZE(MUL_SIZE((size_t)rows_max, (size_t)C), sizeof(float)));
  ops->upload(m->w_dev, m->w, wn * sizeof(float));
}

void linear_model_free(struct linear_model *m) {
  if (!m->ops) return;
  void *dev[] = {m->w_dev, m->g_dev, m->x_dev, m->y_dev};
  for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) m->ops->free(dev[i]);
  free(m->w);
  free(m->mw);
  free(m->gw);
  free(m->b);
  free(m->mb);
  free(m->gb);
  free(m->logits);
  memset(m, 0, sizeof *m);
}

/* logits of the rows now in x_dev. */
static void logits_of_uploaded(struct linear_model *m, int n, float *logits) {
  const size_t C = (size_t)m->C;
  m->ops->matmul_f32(m->y_dev, m->x_dev, m->w_dev, n, m->C, m->F, 0, 1, 0.0f);
  m->ops->download(logits, m->y_dev, (size_t)n * C * sizeof(float));
  for (int i = 0; i < n; i++)
    for (size_t c = 0; c < C; c++) logits[(size_t)i * C + c] += m->b[c];
}

void linear_logits(struct linear_model *m, const float *x, int n, float *logits) {
  SCD_ASSERT(n >= 1 && n <= m->rows_max);
  m->ops->upload(m->x_dev, x, (size_t)n * m->F * sizeof(float));
  logits_of_uploaded(m, n, logits);
}

float linear_ce_row(const float *logits, int C, int label, float scale, float *dl) {
  float mx = logits[0];
  for (int c = 1; c < C; c++) mx = logits[c] > mx ? logits[c] : mx;
  float sum = 0.0f;
  for (int c = 0; c < C; c++) sum += expf(logits[c] - mx);
  const float lse = logf(sum);
  /* log_softmax's backward: dl = g - exp(logp) sum(g), with g = the loss's gradient of the
   * log-probabilities (scale at the label, negated: nll's -1/n) */
  const float g = -scale, loss = -(logits[label] - mx - lse);
  if (dl) /* may be logits itself: each value is read before it is replaced */
    for (int c = 0; c < C; c++) dl[c] = (c == label ? g : 0.0f) - expf(logits[c] - mx - lse) * g;
  return loss;
}

double linear_step(struct linear_model *m, const float *x, const int32_t *labels, int n, double lr, double momentum,
                   double weight_decay) {
  SCD_ASSERT(n >= 1 && n <= m->rows_max);
  const struct ops *ops = m->ops;
  const size_t C = (size_t)m->C, F = (size_t)m->F, wn = C * F;
  ops->upload(m->x_dev, x, (size_t)n * F * sizeof(float));
  logits_of_uploaded(m, n, m->logits);
  /* CrossEntropyLoss(reduction='mean'): nll's gradient is -1/n at each label */
  const float scale = 1.0f / (float)n;
  double loss = 0;
  for (int i = 0; i < n; i++) {
    float *row = m->logits + (size_t)i * C;
    SCD_ASSERT(labels[i] >= 0 && labels[i] < m->C);
    loss += linear_ce_row(row, m->C, labels[i], scale, row); /* the row becomes its gradient */
  }
  /* dW = dlogits^T x, db = the column sums of dlogits */
  ops->upload(m->y_dev, m->logits, (size_t)n * C * sizeof(float));
  ops->matmul_f32(m->g_dev, m->y_dev, m->x_dev, m->C, m->F, n, 1, 0, 0.0f);
  ops->download(m->gw, m->g_dev, wn * sizeof(float));
  for (size_t c = 0; c < C; c++) m->gb[c] = 0.0f;
  for (int i = 0; i < n; i++)
    for (size_t c = 0; c < C; c++) m->gb[c] += m->logits[(size_t)i * C + c];
  /* torch.optim.SGD's step, element by element in fp32 (the scalars rounded to fp32 as PyTorch
   * rounds a Python float for a float tensor; add with alpha is a fused multiply-add there) */
  const float wd = (float)weight_decay, mom = (float)momentum, nlr = (float)-lr;
  float *p[2] = {m->w, m->b}, *g[2] = {m->gw, m->gb}, *buf[2] = {m->mw, m->mb};
  const size_t len[2] = {wn, C};
  for (int t = 0; t < 2; t++)
    for (size_t i = 0; i < len[t]; i++) {
      float d = g[t][i];
      if (weight_decay != 0) d = fmaf(wd, p[t][i], d);
      if (momentum != 0) {
        buf[t][i] = m->have_mom ? buf[t][i] * mom + d : d;
        d = buf[t][i];
      }
      p[t][i] = fmaf(nlr, d, p[t][i]);
    }
  m->have_mom = momentum != 0;
  ops->upload(m->w_dev, m->w, wn * sizeof(float));
  return loss / n;
}

void linear_eval(struct linear_model *m, const float *x, const int32_t *labels, int64_t n, double *loss,
                 double *top1, double *top5) {
  const int C = m->C, k = C < LINEAR_TOPK ? C : LINEAR_TOPK;
  double sum = 0;
  int64_t with_loss = 0, hit1 = 0, hit5 = 0;
  int32_t best[LINEAR_TOPK];
  for (int64_t i0 = 0; i0 < n; i0 += m->rows_max) {
    const int cnt = (int)(n - i0 < m->rows_max ? n - i0 : m->rows_max);
    linear_logits(m, x + (size_t)i0 * m->F, cnt, m->logits);
    for (int i = 0; i < cnt; i++) {
      const float *row = m->logits + (size_t)i * C;
      const int32_t t = labels[i0 + i];
      if (t < C) {
        sum += linear_ce_row(row, C, t, 1.0f, NULL);
        with_loss++;
      }
      linear_topk(row, C, k, best);
      hit1 += best[0] == t;
      for (int j = 0; j < k; j++) hit5 += best[j] == t;
    }
  }
  *loss = with_loss ? sum / (double)with_loss : 0.0;
  *top1 = n ? 100.0 * (double)hit1 / (double)n : 0.0;
  *top5 = n ? 100.0 * (double)hit5 / (double)n : 0.0;
}

void linear_cosine_lrs(double base, int64_t epochs, double *lr) {
  const double T = (double)epochs, pi = acos(-1.0);
  lr[0] = base;
  for (int64_t e = 1; e < epochs; e++)
    lr[e] = (1 + cos(pi * (double)e / T)) / (1 + cos(pi * (double)(e - 1) / T)) * lr[e - 1];
}

void linear_topk(const float *logits, int C, int k, int32_t *best) {
  SCD_ASSERT(k >= 1 && k <= C);
  for (int j = 0; j < k; j++) {
    int pick = -1;
    for (int c = 0; c < C; c++) {
      int taken = 0;
      for (int q = 0; q < j && !taken; q++) taken = best[q] == c;
      if (!taken && (pick < 0 || logits[c] > logits[pick])) pick = c;
    }
    best[j] = pick;
  }
}
