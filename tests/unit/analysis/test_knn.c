/* tests/unit/analysis/test_knn.c - the kNN evaluation against a brute-force double-precision implementation,
 * the tie rules, hand-computed metrics, and the upstream bugs that scdino fixes (a class absent
 * from the reference rows, fewer than 100 test rows, k larger than the reference set). */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn.h"
#include "analysis/knn_lists.h"
#include "core/rng.h"
#include "tests/fixtures/testutil.h"

/* ---- Brute force: every similarity in double, a full sort, votes exp(s / T) ---------------- */

struct bf_nb {
  double s;
  int64_t pos;
};

static int bf_cmp_nb(const void *pa, const void *pb) {
  const struct bf_nb *a = pa, *b = pb;
  if (a->s != b->s) return a->s > b->s ? -1 : 1;
  return (a->pos > b->pos) - (a->pos < b->pos);
}

static const double *bf_score;
static int bf_cmp_class(const void *pa, const void *pb) {
  int a = *(const int *)pa, b = *(const int *)pb;
  if (bf_score[a] != bf_score[b]) return bf_score[a] > bf_score[b] ? -1 : 1;
  return a - b;
}

struct bf_out {
  int64_t top1[16], top2[16];
  int64_t *conf; /* [nk][C][C] */
  double *f1;    /* [nk][C] */
  double bal[16], macro[16];
};

static void brute(const float *train, const int32_t *tl, int64_t ntr, const float *test, const int32_t *tel,
                  int64_t nte, int d, int C, const int64_t *ks, int nk, double T, struct bf_out *o) {
  memset(o->top1, 0, sizeof o->top1);
  memset(o->top2, 0, sizeof o->top2);
  o->conf = calloc((size_t)nk * C * C, sizeof *o->conf);
  o->f1 = calloc((size_t)nk * C, sizeof *o->f1);
  struct bf_nb *nb = malloc((size_t)ntr * sizeof *nb);
  double *score = malloc((size_t)C * sizeof *score);
  int *cls = malloc((size_t)C * sizeof *cls);
  for (int64_t q = 0; q < nte; q++) {
    for (int64_t j = 0; j < ntr; j++) {
      double s = 0;
      for (int e = 0; e < d; e++) s += (double)test[q * d + e] * (double)train[j * d + e];
      nb[j].s = s;
      nb[j].pos = j;
    }
    qsort(nb, (size_t)ntr, sizeof *nb, bf_cmp_nb);
    for (int jk = 0; jk < nk; jk++) {
      int64_t kk = ks[jk] < ntr ? ks[jk] : ntr;
      int nvoted = 0;
      for (int c = 0; c < C; c++) score[c] = -1; /* -1: no vote */
      for (int64_t m = 0; m < kk; m++) {
        int c = tl[nb[m].pos];
        if (score[c] < 0) score[c] = 0;
        score[c] += exp(nb[m].s / T);
      }
      for (int c = 0; c < C; c++)
        if (score[c] >= 0) cls[nvoted++] = c;
      bf_score = score;
      qsort(cls, (size_t)nvoted, sizeof *cls, bf_cmp_class);
      int truth = tel[q];
      o->top1[jk] += cls[0] == truth;
      int lim = ks[jk] < 2 ? 1 : 2;
      for (int i = 0; i < lim && i < nvoted; i++)
        if (cls[i] == truth) o->top2[jk]++;
      o->conf[((size_t)jk * C + truth) * C + cls[0]]++;
    }
  }
  for (int jk = 0; jk < nk; jk++) {
    const int64_t *cm = o->conf + (size_t)jk * C * C;
    double rs = 0, fs = 0;
    int nr = 0, nf = 0;
    for (int c = 0; c < C; c++) {
      int64_t tp = cm[c * C + c], sup = 0, pr = 0;
      for (int x = 0; x < C; x++) {
        sup += cm[c * C + x];
        pr += cm[x * C + c];
      }
      double P = pr ? (double)tp / pr : 0, R = sup ? (double)tp / sup : 0;
      double F = P + R > 0 ? 2 * P * R / (P + R) : 0;
      o->f1[jk * C + c] = F;
      if (sup) rs += R, nr++;
      if (sup || pr) fs += F, nf++;
    }
    o->bal[jk] = nr ? 100 * rs / nr : 0;
    o->macro[jk] = nf ? 100 * fs / nf : 0;
  }
  free(nb);
  free(score);
  free(cls);
}

static void bf_out_free(struct bf_out *o) {
  free(o->conf);
  free(o->f1);
}

/* ---- Data ------------------------------------------------------------------------------------ */

/* Reference rows tr [ntr, d] with labels tl, and test rows te [nte, d] with labels tel. */
struct rows {
  float *tr, *te;
  int32_t *tl, *tel;
};

static void rows_alloc(struct rows *s, int64_t ntr, int64_t nte, int d) {
  s->tr = malloc((size_t)(ntr * d) * sizeof *s->tr);
  s->te = malloc((size_t)(nte * d) * sizeof *s->te);
  s->tl = malloc((size_t)ntr * sizeof *s->tl);
  s->tel = malloc((size_t)nte * sizeof *s->tel);
}

static void rows_free(struct rows *s) {
  free(s->tr);
  free(s->te);
  free(s->tl);
  free(s->tel);
}

/* Features on a grid (multiples of 1/32, |x| <= 1/8, d <= 64): every dot product is exact in
 * float32 whatever the summation order, so sgemm and the double brute force see the same
 * similarities - including the many exact ties, which exercise the tie rules.  Rows are pulled
 * towards a class centre so the vote is not random. */
static void grid_data(uint64_t seed, int64_t n, int d, int C, float *x, int32_t *lab, int skip_class) {
  struct rng r;
  rng_init(&r, seed, RNG_DOMAIN_TEST, 1, 0);
  for (int64_t i = 0; i < n; i++) {
    int c;
    do c = (int)rng_below(&r, (uint64_t)C);
    while (c == skip_class && C > 1);
    lab[i] = c;
    for (int e = 0; e < d; e++) {
      int v = (int)rng_below(&r, 7) - 3;               /* -3..3 */
      if (e % C == c && rng_below(&r, 3) != 0) v = 4;  /* class signal */
      x[i * d + e] = (float)v / 32.0f;
    }
  }
}

/* L2-normalised Gaussian clusters (the realistic case; similarities differ in the last bits). */
static void cluster_data(uint64_t seed, int64_t n, int d, int C, float *x, int32_t *lab, const float *centres) {
  struct rng r;
  rng_init(&r, seed, RNG_DOMAIN_TEST, 2, 0);
  for (int64_t i = 0; i < n; i++) {
    int c = (int)rng_below(&r, (uint64_t)C);
    lab[i] = c;
    double ss = 0;
    for (int e = 0; e < d; e++) {
      double v = centres[c * d + e] + 0.9 * rng_normal(&r);
      x[i * d + e] = (float)v;
      ss += v * v;
    }
    for (int e = 0; e < d; e++) x[i * d + e] = (float)(x[i * d + e] / sqrt(ss));
  }
}

/* ---- Comparisons ----------------------------------------------------------------------------- */

static void compare(const char *what, const struct knn_result *r, const struct bf_out *o, int C, int nk) {
  for (int j = 0; j < nk; j++) {
    T_CHECK(r->top1_correct[j] == o->top1[j], "%s k=%lld: top1 %lld vs brute force %lld", what,
            (long long)r->k[j], (long long)r->top1_correct[j], (long long)o->top1[j]);
    T_CHECK(r->top2_correct[j] == o->top2[j], "%s k=%lld: top2 %lld vs brute force %lld", what,
            (long long)r->k[j], (long long)r->top2_correct[j], (long long)o->top2[j]);
    int same = 1;
    for (int i = 0; i < C * C; i++) same &= r->confusion[(size_t)j * C * C + i] == o->conf[(size_t)j * C * C + i];
    T_CHECK(same, "%s k=%lld: confusion matrix differs from brute force", what, (long long)r->k[j]);
    for (int c = 0; c < C; c++) T_NEAR(r->f1[j * C + c], o->f1[j * C + c], 1e-12, what);
    T_NEAR(r->balanced_accuracy[j], o->bal[j], 1e-9, what);
    T_NEAR(r->macro_f1[j], o->macro[j], 1e-9, what);
  }
}

static void run_grid_case(int64_t ntr, int64_t nte, int d, int C, const int64_t *ks, int nk, double T,
                          size_t block_bytes, uint64_t seed) {
  struct rows s;
  rows_alloc(&s, ntr, nte, d);
  grid_data(seed, ntr, d, C, s.tr, s.tl, -1);
  grid_data(seed + 1000, nte, d, C, s.te, s.tel, -1);
  struct bf_out o;
  brute(s.tr, s.tl, ntr, s.te, s.tel, nte, d, C, ks, nk, T, &o);
  knn_set_block_bytes(block_bytes);
  struct knn_result r;
  knn_evaluate(s.tr, s.tl, ntr, s.te, s.tel, nte, d, C, ks, nk, T, &r);
  knn_set_block_bytes((size_t)64 << 20);
  char what[128];
  snprintf(what, sizeof what, "grid n_train=%lld n_test=%lld d=%d C=%d T=%g block=%zu", (long long)ntr,
           (long long)nte, d, C, T, block_bytes);
  if (t_verbose) printf("  %s: top1(k=%lld) = %.2f %%\n", what, (long long)ks[0], r.top1[0]);
  T_CHECK(*r.n_test == nte, "%s: n_test", what);
  compare(what, &r, &o, C, nk);
  knn_result_free(&r);
  bf_out_free(&o);
  rows_free(&s);
}

/* ---- Hand-made cases ------------------------------------------------------------------------- */

static void test_hand_metrics(void) {
  /* Reference: class 0 at (1,0), class 1 at (0,1).  Tests: (1,0) truth 0, (1,0) truth 1,
   * (0,1) truth 1 twice.  k = 1 predicts 0, 0, 1, 1: confusion [[1,0],[1,2]]. */
  const float tr[] = {1, 0, 0, 1}, te[] = {1, 0, 1, 0, 0, 1, 0, 1};
  const int32_t tl[] = {0, 1}, tel[] = {0, 1, 1, 1};
  const int64_t k[] = {1};
  struct knn_result r;
  knn_evaluate(tr, tl, 2, te, tel, 4, 2, 2, k, 1, 0.1, &r);
  T_CHECK(r.confusion[0] == 1 && r.confusion[1] == 0 && r.confusion[2] == 1 && r.confusion[3] == 2,
          "confusion %lld %lld %lld %lld", (long long)r.confusion[0], (long long)r.confusion[1],
          (long long)r.confusion[2], (long long)r.confusion[3]);
  T_NEAR(r.top1[0], 75.0, 1e-12, "top1");
  T_NEAR(r.precision[0], 0.5, 1e-15, "precision 0");
  T_NEAR(r.recall[0], 1.0, 1e-15, "recall 0");
  T_NEAR(r.f1[0], 2.0 / 3.0, 1e-15, "f1 0");
  T_NEAR(r.precision[1], 1.0, 1e-15, "precision 1");
  T_NEAR(r.recall[1], 2.0 / 3.0, 1e-15, "recall 1");
  T_NEAR(r.f1[1], 0.8, 1e-15, "f1 1");
  T_NEAR(r.balanced_accuracy[0], 100.0 * (1.0 + 2.0 / 3.0) / 2.0, 1e-12, "balanced accuracy");
  T_NEAR(r.macro_f1[0], 100.0 * (2.0 / 3.0 + 0.8) / 2.0, 1e-12, "macro F1");
  T_CHECK(r.test_support[0] == 1 && r.test_support[1] == 3, "test support");
  T_CHECK(r.train_support[0] == 1 && r.train_support[1] == 1, "train support");
  knn_result_free(&r);
}

static void test_ties(void) {
  /* Reference rows 0 and 1 are identical (classes 1 and 0), row 2 is elsewhere (class 2). */
  const float tr[] = {1, 0, 1, 0, 0, 1}, te[] = {1, 0};
  const int32_t tl[] = {1, 0, 2};
  int32_t truth[] = {1};
  const int64_t k[] = {1, 2, 3};
  struct knn_result r;
  /* k=1: equal similarity, the earlier reference row (class 1) is the neighbour. */
  knn_evaluate(tr, tl, 3, te, truth, 1, 2, 3, k, 3, 0.1, &r);
  T_CHECK(r.top1_correct[0] == 1, "k=1: the earlier of two equally similar rows wins");
  /* k=2: classes 0 and 1 tie on score: the lower class number (0) ranks first, 1 second. */
  T_CHECK(r.top1_correct[1] == 0 && r.top2_correct[1] == 1, "k=2: score tie goes to class 0, class 1 is second");
  T_CHECK(r.confusion[(size_t)1 * 9 + 1 * 3 + 0] == 1, "k=2: predicted class 0");
  knn_result_free(&r);
  /* A lone voting class: Top-2 is Top-1 (no zero-score class is counted). */
  const float tr2[] = {1, 0, 0.9f, 0.1f}, te2[] = {1, 0};
  const int32_t tl2[] = {0, 0};
  int32_t truth2[] = {1};
  const int64_t k2[] = {2};
  knn_evaluate(tr2, tl2, 2, te2, truth2, 1, 2, 2, k2, 1, 0.1, &r);
  T_CHECK(r.top1_correct[0] == 0 && r.top2_correct[0] == 0, "a class without votes is never a Top-2 prediction");
  knn_result_free(&r);
  /* Small T: weights exp((s - s1)/T) stay finite where exp(s/T) overflows. */
  const float tr3[] = {1, 0, 0.6f, 0.8f, 0.6f, 0.8f}, te3[] = {1, 0};
  const int32_t tl3[] = {0, 1, 1};
  int32_t truth3[] = {0};
  const int64_t k3[] = {3};
  knn_evaluate(tr3, tl3, 3, te3, truth3, 1, 2, 2, k3, 1, 1e-4, &r);
  T_CHECK(r.top1_correct[0] == 1, "T=1e-4: the nearest row dominates (no overflow)");
  knn_result_free(&r);
}

/* Upstream fitted one LabelEncoder on the train labels and another on the test labels: with class
 * 2 missing from the reference rows, test class 3 was encoded as 2 and never matched.  Here the
 * labels are the file's: class 3 rows are still recognised, class 2 rows are simply wrong. */
static void test_absent_class(void) {
  const int C = 4, d = 16;
  const int64_t ntr = 200, nte = 120;
  struct rows s;
  rows_alloc(&s, ntr, nte, d);
  /* Well separated classes: one-hot-like rows (class c has weight on coordinates 4c..4c+3). */
  struct rng rg;
  rng_init(&rg, 7, RNG_DOMAIN_TEST, 3, 0);
  for (int pass = 0; pass < 2; pass++) {
    int64_t n = pass ? nte : ntr;
    float *x = pass ? s.te : s.tr;
    int32_t *l = pass ? s.tel : s.tl;
    for (int64_t i = 0; i < n; i++) {
      int c = (int)rng_below(&rg, 4);
      if (!pass && c == 2) c = 3; /* no class 2 among the reference rows */
      if (pass && i < 4) c = 2;   /* but some in the test rows */
      l[i] = c;
      for (int e = 0; e < d; e++) x[i * d + e] = e / 4 == c ? (float)(4 + rng_below(&rg, 3)) / 32.0f : 0.0f;
    }
  }
  const int64_t k[] = {5, 20};
  struct knn_result r;
  knn_evaluate(s.tr, s.tl, ntr, s.te, s.tel, nte, d, C, k, 2, 0.1, &r);
  struct bf_out o;
  brute(s.tr, s.tl, ntr, s.te, s.tel, nte, d, C, k, 2, 0.1, &o);
  compare("absent class", &r, &o, C, 2);
  T_CHECK(r.train_support[2] == 0, "no class 2 in the reference rows");
  for (int c = 0; c < C; c++) {
    int64_t diag = r.confusion[(size_t)c * C + c];
    if (c == 2)
      T_CHECK(diag == 0 && r.recall[2] == 0.0, "class 2 cannot be predicted");
    else
      T_CHECK(diag == r.test_support[c] && r.test_support[c] > 0, "class %d: %lld of %lld right", c,
              (long long)diag, (long long)r.test_support[c]);
  }
  T_NEAR(r.top1[0], 100.0 * (double)(nte - r.test_support[2]) / (double)nte, 1e-12, "top1 with an absent class");
  /* balanced accuracy averages the classes with test rows: three at recall 1, class 2 at 0 */
  T_NEAR(r.balanced_accuracy[0], 75.0, 1e-12, "balanced accuracy with an absent class");
  knn_result_free(&r);
  bf_out_free(&o);
  rows_free(&s);
}

/* k above the reference count is evaluated as k = n_train (upstream's topk raised an error). */
static void test_clamp(void) {
  const int d = 8, C = 3;
  const int64_t ntr = 40, nte = 30;
  float tr[40 * 8], te[30 * 8];
  int32_t tl[40], tel[30];
  grid_data(11, ntr, d, C, tr, tl, -1);
  grid_data(12, nte, d, C, te, tel, -1);
  const int64_t k[] = {500, 40, 39};
  struct knn_result r;
  knn_evaluate(tr, tl, ntr, te, tel, nte, d, C, k, 3, 0.07, &r);
  T_CHECK(r.k[0] == 500 && r.k_used[0] == 40 && r.k_used[1] == 40 && r.k_used[2] == 39, "k clamped to n_train");
  T_CHECK(r.top1_correct[0] == r.top1_correct[1] && r.top2_correct[0] == r.top2_correct[1],
          "k=500 gives the k=40 result");
  T_CHECK(memcmp(r.confusion, r.confusion + C * C, C * C * sizeof *r.confusion) == 0, "same confusion");
  knn_result_free(&r);
}

/* Upstream queried in chunks of n_test // 100 rows: fewer than 100 test rows made the step 0. */
static void test_few_test_rows(void) {
  const int d = 16, C = 4;
  const int64_t ntr = 300;
  float *tr = malloc(ntr * d * sizeof *tr), te[7 * 16];
  int32_t *tl = malloc(ntr * sizeof *tl), tel[7];
  grid_data(21, ntr, d, C, tr, tl, -1);
  grid_data(22, 7, d, C, te, tel, -1);
  const int64_t k[] = {5, 10, 50, 100, 200, 500};
  for (int64_t nte = 1; nte <= 7; nte += 6) {
    struct knn_result r;
    knn_evaluate(tr, tl, ntr, te, tel, nte, d, C, k, 6, 0.1, &r);
    struct bf_out o;
    brute(tr, tl, ntr, te, tel, nte, d, C, k, 6, 0.1, &o);
    T_CHECK(*r.n_test == nte, "n_test %lld", (long long)nte);
    compare(nte == 1 ? "1 test row" : "7 test rows", &r, &o, C, 6);
    knn_result_free(&r);
    bf_out_free(&o);
  }
  free(tr);
  free(tl);
}

/* Normalised float features: sgemm and the double brute force may round a near-tie differently,
 * so the counts agree up to a handful of rows, and the accuracy is what the clusters allow. */
static void test_clusters(void) {
  const int d = 48, C = 6;
  const int64_t ntr = 1500, nte = 600;
  float *centres = malloc(C * d * sizeof *centres);
  struct rng rg;
  rng_init(&rg, 5, RNG_DOMAIN_TEST, 4, 0);
  for (int i = 0; i < C * d; i++) centres[i] = (float)(0.35 * rng_normal(&rg));
  struct rows s;
  rows_alloc(&s, ntr, nte, d);
  cluster_data(31, ntr, d, C, s.tr, s.tl, centres);
  cluster_data(32, nte, d, C, s.te, s.tel, centres);
  const int64_t k[] = {5, 20, 100};
  const double T[] = {0.07, 0.5};
  for (int it = 0; it < 2; it++) {
    struct knn_result r;
    knn_set_block_bytes(ntr * sizeof(float) * 37); /* 37 test rows per block */
    knn_evaluate(s.tr, s.tl, ntr, s.te, s.tel, nte, d, C, k, 3, T[it], &r);
    knn_set_block_bytes((size_t)64 << 20);
    struct bf_out o;
    brute(s.tr, s.tl, ntr, s.te, s.tel, nte, d, C, k, 3, T[it], &o);
    for (int j = 0; j < 3; j++) {
      T_CHECK(llabs(r.top1_correct[j] - o.top1[j]) <= 2, "clusters T=%g k=%lld: top1 %lld vs %lld", T[it],
              (long long)k[j], (long long)r.top1_correct[j], (long long)o.top1[j]);
      T_CHECK(llabs(r.top2_correct[j] - o.top2[j]) <= 2, "clusters T=%g k=%lld: top2 %lld vs %lld", T[it],
              (long long)k[j], (long long)r.top2_correct[j], (long long)o.top2[j]);
      T_CHECK(r.top1[j] > 60.0 && r.top1[j] < 100.0, "clusters: top1 %.2f %% is plausible", r.top1[j]);
    }
    if (t_verbose)
      printf("  clusters T=%g: top1 %.2f %.2f %.2f (brute %lld %lld %lld of %lld)\n", T[it], r.top1[0], r.top1[1],
             r.top1[2], (long long)o.top1[0], (long long)o.top1[1], (long long)o.top1[2], (long long)nte);
    knn_result_free(&r);
    bf_out_free(&o);
  }
  free(centres);
  rows_free(&s);
}

/* Neighbour lists of reference shares, merged, are the lists of the whole reference set (what the
 * ranks of knn_evaluate_rows do): shares of every size, down to fewer rows than k and none, ties. */
static void test_shares(void) {
  const int d = 4, kmax = 9;
  const int64_t n_ref = 25, n_test = 6;
  float ref[25 * 4], test[6 * 4];
  struct rng rg;
  rng_init(&rg, 3, RNG_DOMAIN_TEST, 77, 0);
  /* coarse values: many equal similarities, decided by position */
  for (int i = 0; i < 25 * 4; i++) ref[i] = (float)rng_below(&rg, 3);
  for (int i = 0; i < 6 * 4; i++) test[i] = (float)rng_below(&rg, 2);
  struct knn_nb whole[6 * 9], part[6 * 9], acc[6 * 9];
  double tg = 0, ts = 0;
  knn_select_cpu(ref, n_ref, 0, test, n_test, d, kmax, whole, 64, &tg, &ts);
  for (int i = 0; i < n_test; i++) { /* against a full sort of the similarities */
    struct bf_nb all[25];
    for (int j = 0; j < n_ref; j++) {
      double sum = 0;
      for (int e = 0; e < d; e++) sum += (double)test[i * d + e] * ref[j * d + e];
      all[j].s = sum;
      all[j].pos = j;
    }
    qsort(all, (size_t)n_ref, sizeof *all, bf_cmp_nb);
    for (int m = 0; m < kmax; m++)
      T_CHECK(whole[i * kmax + m].pos == all[m].pos && whole[i * kmax + m].s == (float)all[m].s,
              "row %d neighbour %d: position %d, want %lld", i, m, whole[i * kmax + m].pos, (long long)all[m].pos);
  }
  const int nshares[] = {2, 3, 4, 7, 30};
  for (int t = 0; t < 5; t++) {
    const int R = nshares[t];
    for (int r = 0; r < R; r++) {
      const int64_t lo = n_ref * r / R, hi = n_ref * (r + 1) / R;
      knn_select_cpu(ref + lo * d, hi - lo, lo, test, n_test, d, kmax, part, 1 << 20, &tg, &ts);
      if (hi == lo) /* an empty share: empty lists */
        T_CHECK(part[0].pos == KNN_NB_NONE_POS && part[kmax - 1].s == KNN_NB_NONE_S, "empty share's lists");
      if (r == 0)
        memcpy(acc, part, sizeof acc);
      else
        for (int i = 0; i < n_test; i++) knn_lists_merge(part + i * kmax, acc + i * kmax, kmax);
    }
    T_CHECK(memcmp(acc, whole, sizeof acc) == 0, "lists merged over %d shares differ from the whole set's", R);
  }
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_shares();
  test_hand_metrics();
  test_ties();
  const int64_t k_default[] = {5, 10, 50, 100, 200, 500};
  const int64_t k_small[] = {1, 2, 3, 7, 60};
  const int64_t k_mid[] = {20, 1, 5, 100};
  /* several N, D, class counts, k (some above n_train), T and block sizes (1 row, 13 rows, all) */
  run_grid_case(50, 37, 8, 3, k_small, 5, 0.1, (size_t)64 << 20, 1);
  run_grid_case(50, 37, 8, 3, k_small, 5, 0.1, 1, 1);
  run_grid_case(300, 250, 16, 5, k_default, 6, 0.07, 300 * 4 * 13, 2);
  run_grid_case(300, 250, 16, 5, k_default, 6, 1.0, (size_t)64 << 20, 3);
  run_grid_case(800, 333, 64, 8, k_mid, 4, 0.02, 800 * 4 * 100, 4);
  run_grid_case(120, 90, 4, 1, k_small, 5, 0.1, (size_t)64 << 20, 5);
  run_grid_case(1000, 150, 32, 12, k_default, 6, 0.5, (size_t)64 << 20, 6);
  test_absent_class();
  test_clamp();
  test_few_test_rows();
  test_clusters();
  return t_finish();
}
