/* sampler.c - per-epoch permutation, padding and rank striding of the training indices. */
#include "build_config.h"

#include "data/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"

struct sampler *sampler_create(const int64_t *train_idx, int64_t n_train, uint64_t seed, int rank,
                               int world, int64_t batch_size) {
  SCD_ASSERT(n_train >= 1 && world >= 1 && rank >= 0 && rank < world && batch_size >= 1);
  struct sampler *s = xcalloc(1, sizeof *s);
  s->n_train = n_train;
  s->train_idx = xmalloc(MUL_SIZE(sizeof(int64_t), (size_t)n_train));
  memcpy(s->train_idx, train_idx, sizeof(int64_t) * (size_t)n_train);
  s->seed = seed;
  s->rank = rank;
  s->world = world;
  s->batch_size = batch_size;
  s->epoch = -1;
  s->num_samples = (n_train + world - 1) / world;
  s->mine = xmalloc(MUL_SIZE(sizeof(int64_t), (size_t)s->num_samples));
  return s;
}

void sampler_destroy(struct sampler *s) {
  if (!s) return;
  free(s->labels);
  free(s->train_idx);
  free(s->mine);
  free(s);
}

void sampler_permutation(const int64_t *train_idx, int64_t n_train, uint64_t seed, int64_t epoch,
                         int64_t *out) {
  struct rng r;
  rng_init(&r, seed, RNG_DOMAIN_SAMPLER, (uint64_t)epoch, 0);
  memcpy(out, train_idx, sizeof(int64_t) * (size_t)n_train);
  for (int64_t i = n_train - 1; i > 0; i--) {
    const int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
    const int64_t t = out[i];
    out[i] = out[j];
    out[j] = t;
  }
}

void sampler_set_balanced(struct sampler *s, const int32_t *labels, int nclasses) {
  SCD_ASSERT(nclasses >= 1 && s->epoch < 0);
  s->labels = xmalloc(MUL_SIZE(sizeof(int32_t), (size_t)s->n_train));
  memcpy(s->labels, labels, sizeof(int32_t) * (size_t)s->n_train);
  for (int64_t i = 0; i < s->n_train; i++) SCD_ASSERT(labels[i] >= 0 && labels[i] < nclasses);
  s->nclasses = nclasses;
}

void sampler_balanced(const int64_t *train_idx, const int32_t *labels, int64_t n_train, int nclasses, uint64_t seed,
                      int64_t epoch, int64_t *out) {
  /* The members of each class, in training-split order: start[c] .. start[c+1] of by_class. */
  int64_t *start = xcalloc((size_t)nclasses + 1, sizeof *start), *fill = xcalloc((size_t)nclasses, sizeof *fill);
  int64_t *by_class = xmalloc(MUL_SIZE(sizeof(int64_t), (size_t)n_train));
  int *present = xmalloc(sizeof(int) * (size_t)nclasses);
  for (int64_t i = 0; i < n_train; i++) start[labels[i] + 1]++;
  int np = 0;
  for (int c = 0; c < nclasses; c++) {
    if (start[c + 1] > 0) present[np++] = c;
    start[c + 1] += start[c];
  }
  for (int64_t i = 0; i < n_train; i++) by_class[start[labels[i]] + fill[labels[i]]++] = train_idx[i];
  /* id1 = 1: a stream of its own beside the permutation's (id1 = 0). */
  struct rng r;
  rng_init(&r, seed, RNG_DOMAIN_SAMPLER, (uint64_t)epoch, 1);
  for (int64_t i = 0; i < n_train; i++) {
    const int c = present[rng_below(&r, (uint64_t)np)];
    out[i] = by_class[start[c] + (int64_t)rng_below(&r, (uint64_t)(start[c + 1] - start[c]))];
  }
  free(start);
  free(fill);
  free(by_class);
  free(present);
}

void sampler_set_epoch(struct sampler *s, int64_t epoch) {
  if (s->epoch == epoch) return;
  int64_t *perm = xmalloc(MUL_SIZE(sizeof(int64_t), (size_t)s->n_train));
  if (s->labels)
    sampler_balanced(s->train_idx, s->labels, s->n_train, s->nclasses, s->seed, epoch, perm);
  else
    sampler_permutation(s->train_idx, s->n_train, s->seed, epoch, perm);
  /* Position p of the padded list is perm[p mod n] (the head repeats, as often as needed). */
  for (int64_t k = 0; k < s->num_samples; k++) {
    const int64_t p = s->rank + k * (int64_t)s->world;
    s->mine[k] = perm[p % s->n_train];
  }
  free(perm);
  s->epoch = epoch;
}

int64_t sampler_num_samples(const struct sampler *s) { return s->num_samples; }

int64_t sampler_batches_per_epoch(const struct sampler *s) {
  return (s->num_samples + s->batch_size - 1) / s->batch_size;
}

const int64_t *sampler_batch(const struct sampler *s, int64_t b, int *count) {
  SCD_ASSERT(s->epoch >= 0 && b >= 0 && b < sampler_batches_per_epoch(s));
  const int64_t start = b * s->batch_size;
  int64_t n = s->num_samples - start;
  if (n > s->batch_size) n = s->batch_size;
  *count = (int)n;
  return s->mine + start;
}
