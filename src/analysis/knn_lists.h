/* knn_lists.h - the neighbour lists of the kNN evaluation (analysis/knn.h): for each test row its
 * kmax nearest reference rows, nearest first, found on the CPU (knn_select.c) or the GPU
 * (knn_gpu.c), merged over the ranks that hold the reference rows in shares (knn.c).
 *
 * Order: a is nearer than b when a.s > b.s, or a.s == b.s and a.pos < b.pos (the reference row
 * that comes first in the reference order).  Positions are unique, so the kmax nearest of any set
 * of rows are one set, whoever finds them in whatever order: the CPU and the GPU lists, and lists
 * merged over any number of shares, are the same entry for entry for the same similarities.  A
 * list of fewer than kmax rows (a share smaller than kmax) is filled with KNN_NB_NONE entries. */
#ifndef SCDINO_KNN_LISTS_H
#define SCDINO_KNN_LISTS_H

#include <math.h>
#include <stdint.h>

struct knn_nb {
  float s;     /* similarity */
  int32_t pos; /* reference row (position in the reference order) */
};

/* The empty entry: farther than any row. */
#define KNN_NB_NONE_S (-INFINITY)
#define KNN_NB_NONE_POS INT32_MAX

static inline int knn_nb_nearer(const struct knn_nb *a, const struct knn_nb *b) {
  return a->s > b->s || (a->s == b->s && a->pos < b->pos);
}

/* For each of the n_test rows of test [n_test][d]: lists[i][0 .. kmax) = its kmax nearest of the
 * n_ref rows of ref [n_ref][d] (similarity = dot product), positions pos0 + row, nearest first.
 * Scratch for the similarities: at most sim_bytes (at least one row at a time).  Adds the seconds
 * of the GEMM and of the selection to *t_gemm and *t_select. */
void knn_select_cpu(const float *ref, int64_t n_ref, int64_t pos0, const float *test, int64_t n_test, int d,
                    int kmax, struct knn_nb *lists, size_t sim_bytes, double *t_gemm, double *t_select);

/* The selection alone: out[0 .. kmax) = the kmax nearest of the n similarities s (positions
 * pos0 + j), nearest first, KNN_NB_NONE where n < kmax.  buf: scratch of knn_select_buf_len(kmax). */
void knn_select_row(const float *s, int64_t n, int64_t pos0, int kmax, struct knn_nb *out, struct knn_nb *buf);
int64_t knn_select_buf_len(int kmax);

/* inout[0 .. kmax) = the kmax nearest of the two lists in[] and inout[] (each nearest first). */
void knn_lists_merge(const struct knn_nb *in, struct knn_nb *inout, int kmax);

#endif
