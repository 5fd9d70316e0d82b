/* split.h - scDINO's train/validation split (numpy-compatible, so the same images as upstream).
 *
 *   indices = list(range(N)); split = floor((1 - train_fraction) * N)
 *   numpy.random.seed(seed); numpy.random.shuffle(indices)
 *   val = indices[:split]; train = indices[split:]
 * The same rule with stats_fraction and stats_seed picks the subset for the channel statistics. */
#ifndef SCDINO_SPLIT_H
#define SCDINO_SPLIT_H

#include <stdint.h>

struct dataset;

struct split {
  int64_t *train, *val; /* global indices, in permutation order (not sorted) */
  int64_t n_train, n_val;
};

/* floor((1 - train_fraction) * n) evaluated in double exactly as Python does. */
int64_t split_val_count(int64_t n, double train_fraction);
/* Split 0..n-1. */
void split_compute(int64_t n, double train_fraction, uint32_t seed, struct split *s);
/* Split the images of a shard set.  The permutation is drawn over the files the ImageFolder walk
 * found (dataset_source_count), as upstream does, and files that prepare skipped are then left
 * out; the result holds dense global indices.  Without skipped files this is split_compute. */
void split_dataset(const struct dataset *ds, double train_fraction, uint32_t seed, struct split *s);
void split_free(struct split *s);

#endif
