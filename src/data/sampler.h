/* sampler.h - per-epoch distributed sampling of the training split (DistributedSampler semantics).
 *
 * Each epoch the training indices are permuted by a Fisher-Yates shuffle drawn from the counter
 * RNG keyed by (seed, RNG_DOMAIN_SAMPLER, epoch), so every rank computes the same permutation
 * without communication.  Upstream draws it from torch's global RNG (SubsetRandomSampler inside
 * catalyst's DistributedSamplerWrapper), which cannot be reproduced outside PyTorch; what is kept
 * is the structure (doc/algorithm.md §6.7): the permuted list is padded to
 * ceil(n/world)*world by repeating its head, rank r takes positions r, r+world, ..., and its
 * samples are cut into batches of B, the last one partial (drop_last=False). */
#ifndef SCDINO_SAMPLER_H
#define SCDINO_SAMPLER_H

#include <stdint.h>

struct sampler {
  int64_t n_train;    /* size of the training split */
  int32_t *labels;    /* balanced mode: the class of each training position (NULL: uniform) */
  int nclasses;
  int64_t *train_idx; /* copy of the split's global indices */
  uint64_t seed;
  int rank, world;
  int64_t batch_size;
  int64_t epoch;       /* -1 until sampler_set_epoch */
  int64_t num_samples; /* ceil(n_train/world): this rank's samples per epoch */
  int64_t *mine;       /* [num_samples] this rank's global indices for the epoch */
};

/* train_idx is copied.  n_train >= 1, 0 <= rank < world, batch_size >= 1. */
struct sampler *sampler_create(const int64_t *train_idx, int64_t n_train, uint64_t seed, int rank,
                               int world, int64_t batch_size);
void sampler_destroy(struct sampler *s);

/* Class-balanced epochs (&training sampler = 'balanced'): labels[i] is the class (0 .. nclasses-1)
 * of train_idx[i]; copied.  Call before the first sampler_set_epoch. */
void sampler_set_balanced(struct sampler *s, const int32_t *labels, int nclasses);
/* The balanced list of an epoch: n_train draws, each a class uniformly among those present, then
 * one of its images uniformly (with replacement), from the seed and the epoch alone. */
void sampler_balanced(const int64_t *train_idx, const int32_t *labels, int64_t n_train, int nclasses, uint64_t seed,
                      int64_t epoch, int64_t *out);
/* Compute this rank's list for an epoch (cheap to call again for the same epoch). */
void sampler_set_epoch(struct sampler *s, int64_t epoch);
/* The whole permuted training list of an epoch (n_train entries, before padding). */
void sampler_permutation(const int64_t *train_idx, int64_t n_train, uint64_t seed, int64_t epoch,
                         int64_t *out);

int64_t sampler_num_samples(const struct sampler *s);
/* ceil(ceil(n_train/world)/B): batches per epoch, the same on every rank. */
int64_t sampler_batches_per_epoch(const struct sampler *s);
/* Global indices of batch b of the current epoch; *count gets its size (B, or less for the last). */
const int64_t *sampler_batch(const struct sampler *s, int64_t b, int *count);

#endif
