/* npshuffle.c - numpy's legacy MT19937 seeding, random_interval and shuffle. */
#include "build_config.h"

#include "data/npshuffle.h"

#define MT_N 624
#define MT_M 397

void npshuffle_seed(struct np_mt19937 *s, uint32_t seed) {
  /* init_genrand: Knuth's multiplier fills the state from the seed. */
  s->mt[0] = seed;
  for (int i = 1; i < MT_N; i++)
    s->mt[i] = 1812433253u * (s->mt[i - 1] ^ (s->mt[i - 1] >> 30)) + (uint32_t)i;
  s->pos = MT_N; /* the first draw regenerates the whole state */
}

static void mt_generate(struct np_mt19937 *s) {
  const uint32_t upper = 0x80000000u, lower = 0x7fffffffu, matrix_a = 0x9908b0dfu;
  for (int i = 0; i < MT_N; i++) {
    uint32_t y = (s->mt[i] & upper) | (s->mt[(i + 1) % MT_N] & lower);
    s->mt[i] = s->mt[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? matrix_a : 0u);
  }
  s->pos = 0;
}

uint32_t npshuffle_next_u32(struct np_mt19937 *s) {
  if (s->pos >= MT_N) mt_generate(s);
  uint32_t y = s->mt[s->pos++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t npshuffle_interval(struct np_mt19937 *s, uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t v;
  if (max <= 0xffffffffu) {
    do v = npshuffle_next_u32(s) & mask;
    while (v > max);
  } else {
    /* numpy draws 64 bits as two 32-bit outputs, high word first. */
    do {
      uint64_t hi = npshuffle_next_u32(s);
      v = ((hi << 32) | npshuffle_next_u32(s)) & mask;
    } while (v > max);
  }
  return v;
}

void npshuffle_shuffle_i64(struct np_mt19937 *s, int64_t *x, int64_t n) {
  for (int64_t i = n - 1; i >= 1; i--) {
    int64_t j = (int64_t)npshuffle_interval(s, (uint64_t)i);
    int64_t t = x[i];
    x[i] = x[j];
    x[j] = t;
  }
}

void npshuffle_perm(uint32_t seed, int64_t n, int64_t *perm) {
  struct np_mt19937 s;
  npshuffle_seed(&s, seed);
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  npshuffle_shuffle_i64(&s, perm, n);
}
