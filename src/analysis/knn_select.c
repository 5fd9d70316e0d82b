/* knn_select.c - the kNN neighbour lists on the CPU: the similarity GEMM by blocks of test rows,
 * then each row's kmax nearest by partial selection (candidates above a running threshold, cut
 * back by quickselect; only the kmax kept are sorted), and the merge of two lists (knn_lists.h). */
#include "build_config.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn_lists.h"
#include "core/check.h"
#include "core/log.h"

static inline void nb_swap(struct knn_nb *a, struct knn_nb *b) {
  struct knn_nb t = *a;
  *a = *b;
  *b = t;
}

/* Put the nearer-first median of a[lo], a[mid], a[hi] at a[mid] (the pivot). */
static inline void nb_median3(struct knn_nb *a, int64_t lo, int64_t mid, int64_t hi) {
  if (knn_nb_nearer(&a[mid], &a[lo])) nb_swap(&a[lo], &a[mid]);
  if (knn_nb_nearer(&a[hi], &a[mid])) nb_swap(&a[mid], &a[hi]);
  if (knn_nb_nearer(&a[mid], &a[lo])) nb_swap(&a[lo], &a[mid]);
}

/* Hoare partition of a[lo..hi] around the pivot value p, nearer first; on return a[lo..*j] are
 * not farther than p and a[*i..hi] not nearer. */
static inline void nb_partition(struct knn_nb *a, int64_t lo, int64_t hi, struct knn_nb p, int64_t *pi,
                                int64_t *pj) {
  int64_t i = lo, j = hi;
  while (i <= j) {
    while (knn_nb_nearer(&a[i], &p)) i++;
    while (knn_nb_nearer(&p, &a[j])) j--;
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
static void nb_select(struct knn_nb *a, int64_t n, int64_t k) {
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
static void nb_sort(struct knn_nb *a, int64_t n) {
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
    struct knn_nb v = a[i];
    int64_t j = i;
    for (; j > 0 && knn_nb_nearer(&v, &a[j - 1]); j--) a[j] = a[j - 1];
    a[j] = v;
  }
}

/* Room for kmax kept rows and as many candidates again (at least 256). */
int64_t knn_select_buf_len(int kmax) { return (int64_t)kmax + (kmax > 256 ? kmax : 256); }

/* Rows are scanned in reference order and kept while they beat the farthest of the best kmax found
 * so far; when buf fills up it is cut back to its kmax nearest.  A later row with a similarity
 * equal to that threshold is farther (later in the order), so "s > threshold" is the exact test. */
void knn_select_row(const float *s, int64_t n, int64_t pos0, int kmax, struct knn_nb *out, struct knn_nb *buf) {
  const int64_t cap = knn_select_buf_len(kmax);
  const int64_t keep = n < kmax ? n : kmax;
  int64_t m = 0;
  float thr = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    if (!(s[j] > thr)) continue;
    buf[m].s = s[j];
    buf[m].pos = (int32_t)(pos0 + j);
    if (++m < cap) continue;
    nb_select(buf, m, keep);
    m = keep;
    thr = buf[0].s;
    for (int64_t i = 1; i < keep; i++)
      if (buf[i].s < thr) thr = buf[i].s;
  }
  /* fewer than keep candidates only where some similarities are not numbers: those are never kept */
  const int64_t got = m < keep ? m : keep;
  if (m > got) nb_select(buf, m, got);
  nb_sort(buf, got);
  memcpy(out, buf, (size_t)got * sizeof *out);
  for (int64_t i = got; i < kmax; i++) {
    out[i].s = KNN_NB_NONE_S;
    out[i].pos = KNN_NB_NONE_POS;
  }
}

void knn_select_cpu(const float *ref, int64_t n_ref, int64_t pos0, const float *test, int64_t n_test, int d,
                    int kmax, struct knn_nb *lists, size_t sim_bytes, double *t_gemm, double *t_select) {
  if (n_test <= 0) return;
  if (n_ref <= 0) {
    for (int64_t i = 0; i < n_test * kmax; i++) {
      lists[i].s = KNN_NB_NONE_S;
      lists[i].pos = KNN_NB_NONE_POS;
    }
    return;
  }
  SCD_ASSERT(d > 0 && kmax >= 1 && n_ref <= INT_MAX && pos0 + n_ref <= INT32_MAX);
  int64_t block = (int64_t)(sim_bytes / ((size_t)n_ref * sizeof(float)));
  if (block < 1) block = 1;
  if (block > n_test) block = n_test;
  float *sim = xmalloc(MUL_SIZE(MUL_SIZE((size_t)block, (size_t)n_ref), sizeof(float)));
  const int64_t cap = knn_select_buf_len(kmax);
  for (int64_t b0 = 0; b0 < n_test; b0 += block) {
    const int64_t nb_rows = n_test - b0 < block ? n_test - b0 : block;
    double t0 = wtime();
    /* sim = test_block . ref^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb_rows, (int)n_ref, d, 1.0f,
                test + (size_t)b0 * (size_t)d, d, ref, d, 0.0f, sim, (int)n_ref);
    double t1 = wtime();
    *t_gemm += t1 - t0;
#pragma omp parallel
    {
      struct knn_nb *buf = xmalloc((size_t)cap * sizeof *buf);
#pragma omp for schedule(dynamic, 8)
      for (int64_t i = 0; i < nb_rows; i++)
        knn_select_row(sim + (size_t)i * (size_t)n_ref, n_ref, pos0, kmax, lists + (size_t)(b0 + i) * (size_t)kmax,
                       buf);
      free(buf);
    }
    *t_select += wtime() - t1;
  }
  free(sim);
}

void knn_lists_merge(const struct knn_nb *in, struct knn_nb *inout, int kmax) {
  struct knn_nb tmp[256], *out = kmax <= 256 ? tmp : xmalloc((size_t)kmax * sizeof *out);
  int a = 0, b = 0;
  for (int i = 0; i < kmax; i++) out[i] = knn_nb_nearer(&in[a], &inout[b]) ? in[a++] : inout[b++];
  memcpy(inout, out, (size_t)kmax * sizeof *out);
  if (out != tmp) free(out);
}
