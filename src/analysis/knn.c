/* knn.c - weighted kNN classification of feature rows: blocked similarity GEMM, partial top-k
 * selection, exponential class votes, and the accuracy / per-class metrics (rules in knn.h). */
#include "build_config.h"

#include <cblas.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/progress.h"

/* Similarity scratch per block of test rows: enough rows for an efficient GEMM, while 100k test
 * rows against 20k reference rows never need more than this much memory. */
static size_t knn_block_bytes = (size_t)64 << 20;

void knn_set_block_bytes(size_t bytes) { knn_block_bytes = bytes; }

static struct {
  char label[128];
  double seconds;
  int64_t total; /* test rows on all ranks (knn_evaluate_rows), 0: this rank's only */
} prog = {"", -1.0, 0};

void knn_set_progress(const char *label, double seconds) {
  snprintf(prog.label, sizeof prog.label, "%s", label ? label : "");
  prog.seconds = seconds;
}

void knn_result_init(struct knn_result *r, int nclasses, const int64_t *k, int nk, double temperature,
                     const int32_t *train_labels, int64_t n_train) {
  SCD_ASSERT(nclasses > 0 && nk > 0 && n_train > 0 && temperature > 0);
  memset(r, 0, sizeof *r);
  r->nk = nk;
  r->nclasses = nclasses;
  r->n_train = n_train;
  r->temperature = temperature;
  size_t C = (size_t)nclasses, K = (size_t)nk;
  r->k = xmalloc(K * sizeof *r->k);
  r->k_used = xmalloc(K * sizeof *r->k_used);
  for (int j = 0; j < nk; j++) {
    SCD_ASSERT(k[j] >= 1);
    r->k[j] = k[j];
    r->k_used[j] = k[j] < n_train ? k[j] : n_train;
  }
  r->train_support = xcalloc(C, sizeof *r->train_support);
  for (int64_t i = 0; i < n_train; i++) {
    SCD_ASSERT(train_labels[i] >= 0 && train_labels[i] < nclasses);
    r->train_support[train_labels[i]]++;
  }
  size_t ncounts = 1 + 2 * K + MUL_SIZE(K, MUL_SIZE(C, C));
  r->counts = xcalloc(ncounts, sizeof *r->counts);
  r->n_test = r->counts;
  r->top1_correct = r->counts + 1;
  r->top2_correct = r->counts + 1 + K;
  r->confusion = r->counts + 1 + 2 * K;
  r->test_support = xcalloc(C, sizeof *r->test_support);
  r->top1 = xcalloc(K, sizeof(double));
  r->top2 = xcalloc(K, sizeof(double));
  r->balanced_accuracy = xcalloc(K, sizeof(double));
  r->macro_f1 = xcalloc(K, sizeof(double));
  r->precision = xcalloc(K * C, sizeof(double));
  r->recall = xcalloc(K * C, sizeof(double));
  r->f1 = xcalloc(K * C, sizeof(double));
}

void knn_result_free(struct knn_result *r) {
  free(r->k);
  free(r->k_used);
  free(r->train_support);
  free(r->counts);
  free(r->test_support);
  free(r->top1);
  free(r->top2);
  free(r->balanced_accuracy);
  free(r->macro_f1);
  free(r->precision);
  free(r->recall);
  free(r->f1);
  memset(r, 0, sizeof *r);
}

/* ---- Neighbour selection -------------------------------------------------------------------- */

struct nb {
  float s;     /* similarity */
  int64_t pos; /* reference row */
};

/* a is farther than b: lower similarity, or equal similarity and later in the reference order. */
static inline int nb_farther(const struct nb *a, const struct nb *b) {
  return a->s < b->s || (a->s == b->s && a->pos > b->pos);
}

static inline void nb_swap(struct nb *a, struct nb *b) {
  struct nb t = *a;
  *a = *b;
  *b = t;
}

/* Put the nearer-first median of a[lo], a[mid], a[hi] at a[mid] (the pivot). */
static inline void nb_median3(struct nb *a, int64_t lo, int64_t mid, int64_t hi) {
  if (nb_farther(&a[lo], &a[mid])) nb_swap(&a[lo], &a[mid]);
  if (nb_farther(&a[mid], &a[hi])) nb_swap(&a[mid], &a[hi]);
  if (nb_farther(&a[lo], &a[mid])) nb_swap(&a[lo], &a[mid]);
}

/* Hoare partition of a[lo..hi] around the pivot value p, nearer first; on return a[lo..*j] are
 * not farther than p and a[*i..hi] not nearer. */
static inline void nb_partition(struct nb *a, int64_t lo, int64_t hi, struct nb p, int64_t *pi, int64_t *pj) {
  int64_t i = lo, j = hi;
  while (i <= j) {
    while (nb_farther(&p, &a[i])) i++;
    while (nb_farther(&a[j], &p)) j--;
    if (i <= j) {
      nb_swap(&a[i], &a[j]);
      i++;
      j--;
    }
  }
  *pi = i;
  *pj = j;
}

/* Reorder a[0..n) so that a[0..k) are its k nearest, in no particular order (quickselect; keys
 * are unique because positions are). */
static void nb_select(struct nb *a, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  const int64_t t = k - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2, i, j;
    nb_median3(a, lo, mid, hi);
    nb_partition(a, lo, hi, a[mid], &i, &j);
    if (t <= j)
      hi = j;
    else if (t >= i)
      lo = i;
    else
      return;
  }
}

/* Sort a[0..n) nearest first (quicksort, insertion sort for short runs). */
static void nb_sort(struct nb *a, int64_t n) {
  while (n > 16) {
    int64_t i, j;
    nb_median3(a, 0, n / 2, n - 1);
    nb_partition(a, 0, n - 1, a[n / 2], &i, &j);
    /* recurse into the shorter side, loop on the longer */
    if (j + 1 < n - i) {
      nb_sort(a, j + 1);
      a += i;
      n -= i;
    } else {
      nb_sort(a + i, n - i);
      n = j + 1;
    }
  }
  for (int64_t i = 1; i < n; i++) {
    struct nb v = a[i];
    int64_t j = i;
    for (; j > 0 && nb_farther(&a[j - 1], &v); j--) a[j] = a[j - 1];
    a[j] = v;
  }
}

/* The kmax nearest of the n similarities s, nearest first, into buf (capacity cap > kmax).
 * Rows are scanned in reference order and kept while they beat the farthest of the best kmax
 * found so far; when buf fills up it is cut back to its kmax nearest.  A later row with a
 * similarity equal to that threshold is farther (later in the order), so "s > threshold" is the
 * exact test. */
static void select_nearest(const float *s, int64_t n, int64_t kmax, struct nb *buf, int64_t cap) {
  int64_t m = 0;
  float thr = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    if (!(s[j] > thr)) continue;
    buf[m].s = s[j];
    buf[m].pos = j;
    if (++m < cap) continue;
    nb_select(buf, m, kmax);
    m = kmax;
    thr = buf[0].s;
    for (int64_t i = 1; i < kmax; i++)
      if (buf[i].s < thr) thr = buf[i].s;
  }
  if (m > kmax) nb_select(buf, m, kmax);
  nb_sort(buf, kmax);
}

/* Best and second-best voted classes (higher score first, lower class number on a tie). */
static void rank_two(const double *score, const unsigned char *voted, int C, int *best, int *second) {
  int b = -1, s2 = -1;
  for (int c = 0; c < C; c++) {
    if (!voted[c]) continue;
    if (b < 0 || score[c] > score[b]) {
      s2 = b;
      b = c;
    } else if (s2 < 0 || score[c] > score[s2]) {
      s2 = c;
    }
  }
  *best = b;
  *second = s2;
}

/* Order of the k in increasing k_used (simple insertion sort: nk is small). */
static void order_by_k(const struct knn_result *r, int *ord) {
  for (int j = 0; j < r->nk; j++) ord[j] = j;
  for (int j = 1; j < r->nk; j++)
    for (int i = j; i > 0 && r->k_used[ord[i - 1]] > r->k_used[ord[i]]; i--) {
      int t = ord[i];
      ord[i] = ord[i - 1];
      ord[i - 1] = t;
    }
}

void knn_accumulate(struct knn_result *r, const float *train, const int32_t *train_labels,
                    const float *test, const int32_t *test_labels, int64_t n_test, int d) {
  if (n_test <= 0) return;
  const int64_t n_train = r->n_train;
  const int nk = r->nk, C = r->nclasses;
  SCD_ASSERT(d > 0 && n_train <= INT_MAX && d <= INT_MAX);
  int64_t kmax = 0;
  for (int j = 0; j < nk; j++)
    if (r->k_used[j] > kmax) kmax = r->k_used[j];
  int *ord = xmalloc((size_t)nk * sizeof *ord);
  order_by_k(r, ord);
  /* Selection buffer: room for kmax kept rows and as many candidates again (at least 256). */
  const int64_t cap = kmax + (kmax > 256 ? kmax : 256);

  int64_t block = (int64_t)(knn_block_bytes / ((size_t)n_train * sizeof(float)));
  if (block < 1) block = 1;
  if (block > n_test) block = n_test;
  float *sim = xmalloc(MUL_SIZE(MUL_SIZE((size_t)block, (size_t)n_train), sizeof(float)));
  int32_t *pred = xmalloc(MUL_SIZE((size_t)block, (size_t)nk) * sizeof *pred);
  unsigned char *hit2 = xmalloc(MUL_SIZE((size_t)block, (size_t)nk));
  const double temperature = r->temperature;
  /* Rank 0's progress stands for every rank's (the shares differ by one row at most). */
  struct progress pg;
  char label[160];
  snprintf(label, sizeof label, "kNN on %s", prog.label);
  progress_start(&pg, label, "test rows", prog.total > 0 ? prog.total : n_test, n_test, prog.seconds);

  for (int64_t b0 = 0; b0 < n_test; b0 += block) {
    const int64_t nb_rows = n_test - b0 < block ? n_test - b0 : block;
    /* sim = test_block . train^T */
    double t0 = wtime();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb_rows, (int)n_train, d, 1.0f,
                test + (size_t)b0 * (size_t)d, d, train, d, 0.0f, sim, (int)n_train);
    double t1 = wtime();
    r->seconds_gemm += t1 - t0;
#pragma omp parallel
    {
      struct nb *h = xmalloc((size_t)cap * sizeof *h);
      double *score = xmalloc((size_t)C * sizeof *score);
      unsigned char *voted = xmalloc((size_t)C);
#pragma omp for schedule(dynamic, 8)
      for (int64_t i = 0; i < nb_rows; i++) {
        select_nearest(sim + (size_t)i * (size_t)n_train, n_train, kmax, h, cap);
        memset(score, 0, (size_t)C * sizeof *score);
        memset(voted, 0, (size_t)C);
        const int truth = test_labels[b0 + i];
        const double s1 = (double)h[0].s;
        int jk = 0;
        for (int64_t m = 0; m < kmax && jk < nk; m++) {
          const int c = train_labels[h[m].pos];
          score[c] += exp(((double)h[m].s - s1) / temperature);
          voted[c] = 1;
          for (; jk < nk && r->k_used[ord[jk]] == m + 1; jk++) {
            int best, second;
            rank_two(score, voted, C, &best, &second);
            const int j = ord[jk];
            pred[i * nk + j] = best;
            hit2[i * nk + j] = truth == best || (r->k[j] >= 2 && second >= 0 && truth == second);
          }
        }
      }
      free(h);
      free(score);
      free(voted);
    }
    for (int64_t i = 0; i < nb_rows; i++) {
      const int truth = test_labels[b0 + i];
      SCD_ASSERT(truth >= 0 && truth < C);
      for (int j = 0; j < nk; j++) {
        const int p = pred[i * nk + j];
        r->top1_correct[j] += p == truth;
        r->top2_correct[j] += hit2[i * nk + j];
        r->confusion[((size_t)j * (size_t)C + (size_t)truth) * (size_t)C + (size_t)p]++;
      }
    }
    *r->n_test += nb_rows;
    r->seconds_select += wtime() - t1;
    progress_update(&pg, b0 + nb_rows, 0);
  }
  progress_end(&pg);
  free(sim);
  free(pred);
  free(hit2);
  free(ord);
}

void knn_result_allreduce(struct knn_result *r) {
  size_t C = (size_t)r->nclasses, K = (size_t)r->nk;
  comm_allreduce_sum_i64(r->counts, 1 + 2 * K + K * C * C);
}

void knn_result_finish(struct knn_result *r) {
  const int C = r->nclasses;
  const int64_t nt = *r->n_test;
  for (int j = 0; j < r->nk; j++) {
    const int64_t *cm = r->confusion + (size_t)j * (size_t)C * (size_t)C;
    r->top1[j] = nt ? 100.0 * (double)r->top1_correct[j] / (double)nt : 0.0;
    r->top2[j] = nt ? 100.0 * (double)r->top2_correct[j] / (double)nt : 0.0;
    double rec_sum = 0, f1_sum = 0;
    int n_rec = 0, n_f1 = 0;
    for (int c = 0; c < C; c++) {
      int64_t tp = cm[(size_t)c * C + c], support = 0, predicted = 0;
      for (int o = 0; o < C; o++) {
        support += cm[(size_t)c * C + o];
        predicted += cm[(size_t)o * C + c];
      }
      if (j == 0) r->test_support[c] = support;
      const int64_t fp = predicted - tp, fn = support - tp;
      double *P = &r->precision[(size_t)j * C + c], *R = &r->recall[(size_t)j * C + c],
             *F = &r->f1[(size_t)j * C + c];
      *P = predicted ? (double)tp / (double)predicted : 0.0;
      *R = support ? (double)tp / (double)support : 0.0;
      *F = 2 * tp + fp + fn ? 2.0 * (double)tp / (double)(2 * tp + fp + fn) : 0.0;
      if (support) {
        rec_sum += *R;
        n_rec++;
      }
      if (support || predicted) {
        f1_sum += *F;
        n_f1++;
      }
    }
    r->balanced_accuracy[j] = n_rec ? 100.0 * rec_sum / n_rec : 0.0;
    r->macro_f1[j] = n_f1 ? 100.0 * f1_sum / n_f1 : 0.0;
  }
}

void knn_evaluate(const float *train, const int32_t *train_labels, int64_t n_train, const float *test,
                  const int32_t *test_labels, int64_t n_test, int d, int nclasses, const int64_t *k,
                  int nk, double temperature, struct knn_result *r) {
  knn_result_init(r, nclasses, k, nk, temperature, train_labels, n_train);
  knn_accumulate(r, train, train_labels, test, test_labels, n_test, d);
  knn_result_finish(r);
}

/* Copy rows rows[0..n-1] of x [.][d] into a contiguous [n][d] matrix, labels alongside. */
static float *gather_rows(const float *x, int d, const int32_t *labels, const int64_t *rows, int64_t n,
                          int32_t **lab_out) {
  float *m = xmalloc(MUL_SIZE(MUL_SIZE((size_t)(n ? n : 1), (size_t)d), sizeof(float)));
  int32_t *l = xmalloc((size_t)(n ? n : 1) * sizeof *l);
  for (int64_t i = 0; i < n; i++) {
    memcpy(m + (size_t)i * (size_t)d, x + (size_t)rows[i] * (size_t)d, (size_t)d * sizeof(float));
    l[i] = labels[rows[i]];
  }
  *lab_out = l;
  return m;
}

void knn_evaluate_rows(const float *x, int d, const int32_t *labels, int nclasses,
                       const int64_t *train_rows, int64_t n_train, const int64_t *test_rows,
                       int64_t n_test, const int64_t *k, int nk, double temperature,
                       struct knn_result *r) {
  int32_t *train_lab, *test_lab;
  float *train = gather_rows(x, d, labels, train_rows, n_train, &train_lab);
  /* This rank's contiguous share of the test rows. */
  const int rank = comm_rank(), size = comm_size();
  const int64_t lo = n_test * rank / size, hi = n_test * (rank + 1) / size;
  float *test = gather_rows(x, d, labels, test_rows + lo, hi - lo, &test_lab);
  knn_result_init(r, nclasses, k, nk, temperature, train_lab, n_train);
  prog.total = n_test;
  knn_accumulate(r, train, train_lab, test, test_lab, hi - lo, d);
  prog.total = 0;
  knn_result_allreduce(r);
  knn_result_finish(r);
  free(train);
  free(train_lab);
  free(test);
  free(test_lab);
}
