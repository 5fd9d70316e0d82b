/* split.c - the numpy-compatible train/validation split over images or source files. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/npshuffle.h"
#include "data/shards.h"
#include "data/split.h"

int64_t split_val_count(int64_t n, double train_fraction) {
  /* Python: math.floor((1 - f) * n) in IEEE double; n is exact below 2^53.  (1 - 0.8) is
   * 0.19999999999999996, so 0.2*n products that "should" be whole can fall just below. */
  volatile double val_frac = 1.0 - train_fraction; /* no fused or reassociated arithmetic */
  volatile double prod = val_frac * (double)n;
  double f = floor(prod);
  if (f < 0) f = 0;
  if (f > (double)n) f = (double)n;
  return (int64_t)f;
}

static void split_from_perm(const int64_t *perm, int64_t n, int64_t nval, struct split *s) {
  s->n_val = nval;
  s->n_train = n - nval;
  s->val = xmalloc(MUL_SIZE((size_t)(nval > 0 ? nval : 1), sizeof(int64_t)));
  s->train = xmalloc(MUL_SIZE((size_t)(n - nval > 0 ? n - nval : 1), sizeof(int64_t)));
  memcpy(s->val, perm, (size_t)nval * sizeof(int64_t));
  memcpy(s->train, perm + nval, (size_t)(n - nval) * sizeof(int64_t));
}

void split_compute(int64_t n, double train_fraction, uint32_t seed, struct split *s) {
  SCD_ASSERT(n >= 0);
  int64_t *perm = xmalloc(MUL_SIZE((size_t)(n > 0 ? n : 1), sizeof(int64_t)));
  npshuffle_perm(seed, n, perm);
  split_from_perm(perm, n, split_val_count(n, train_fraction), s);
  free(perm);
}

void split_dataset(const struct dataset *ds, double train_fraction, uint32_t seed, struct split *s) {
  int64_t n = dataset_count(ds), ns = dataset_source_count(ds);
  if (ns == n) {
    split_compute(n, train_fraction, seed, s);
    return;
  }
  /* Source position -> dense index (-1 for skipped files). */
  int64_t *dense = xmalloc(MUL_SIZE((size_t)ns, sizeof(int64_t)));
  for (int64_t p = 0; p < ns; p++) dense[p] = -1;
  for (int64_t i = 0; i < n; i++) dense[dataset_source_index(ds, i)] = i;
  struct split src;
  split_compute(ns, train_fraction, seed, &src);
  s->train = xmalloc(MUL_SIZE((size_t)(src.n_train > 0 ? src.n_train : 1), sizeof(int64_t)));
  s->val = xmalloc(MUL_SIZE((size_t)(src.n_val > 0 ? src.n_val : 1), sizeof(int64_t)));
  s->n_train = s->n_val = 0;
  for (int64_t k = 0; k < src.n_train; k++)
    if (dense[src.train[k]] >= 0) s->train[s->n_train++] = dense[src.train[k]];
  for (int64_t k = 0; k < src.n_val; k++)
    if (dense[src.val[k]] >= 0) s->val[s->n_val++] = dense[src.val[k]];
  split_free(&src);
  free(dense);
}

void split_free(struct split *s) {
  free(s->train);
  free(s->val);
  s->train = s->val = NULL;
  s->n_train = s->n_val = 0;
}
