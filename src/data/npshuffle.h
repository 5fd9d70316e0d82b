/* npshuffle.h - numpy's legacy RandomState (MT19937) seeding and shuffle, reproduced exactly.
 *
 * `numpy.random.seed(s); numpy.random.shuffle(x)` is what scDINO uses to split its data; the same
 * seed here gives the same permutation, element for element. */
#ifndef SCDINO_NPSHUFFLE_H
#define SCDINO_NPSHUFFLE_H

#include <stdint.h>

struct np_mt19937 {
  uint32_t mt[624];
  int pos;
};

/* numpy.random.seed(seed) for an integer seed (MT19937 init_genrand). */
void npshuffle_seed(struct np_mt19937 *s, uint32_t seed);
uint32_t npshuffle_next_u32(struct np_mt19937 *s);
/* numpy's random_interval(max): uniform integer in [0, max] by masked rejection sampling. */
uint64_t npshuffle_interval(struct np_mt19937 *s, uint64_t max);
/* numpy.random.shuffle(x) on n int64 values, in place (Fisher-Yates from the end). */
void npshuffle_shuffle_i64(struct np_mt19937 *s, int64_t *x, int64_t n);
/* perm = list(range(n)); numpy.random.seed(seed); numpy.random.shuffle(perm). */
void npshuffle_perm(uint32_t seed, int64_t n, int64_t *perm);

#endif
