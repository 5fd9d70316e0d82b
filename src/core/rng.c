/* rng.c - sequential draws from a Philox4x32-10 stream: integers, uniforms, normals. */
#include "build_config.h"

#include "core/rng.h"

#include <math.h>

void rng_init(struct rng *r, uint64_t seed, uint32_t domain, uint64_t id0, uint64_t id1) {
  rng_stream_key(seed, domain, id0, r->key);
  r->ctr_hi[0] = (uint32_t)id1;
  r->ctr_hi[1] = (uint32_t)(id1 >> 32);
  r->block = 0;
  r->pos = 4;
  r->have_normal = 0;
  r->spare = 0.0;
}

static void rng_refill(struct rng *r) {
  const uint32_t c[4] = {(uint32_t)r->block, (uint32_t)(r->block >> 32), r->ctr_hi[0], r->ctr_hi[1]};
  philox4x32_10(c, r->key, r->buf);
  r->block++;
  r->pos = 0;
}

void rng_seek(struct rng *r, uint64_t k) {
  r->block = k >> 2;
  r->have_normal = 0;
  rng_refill(r);
  r->pos = (int)(k & 3);
}

uint32_t rng_u32(struct rng *r) {
  if (r->pos >= 4) rng_refill(r);
  return r->buf[r->pos++];
}

uint64_t rng_u64(struct rng *r) {
  const uint64_t hi = rng_u32(r);
  return (hi << 32) | rng_u32(r);
}

double rng_uniform(struct rng *r) {
  const uint32_t a = rng_u32(r) >> 5, b = rng_u32(r) >> 6; /* 27 + 26 bits */
  return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

float rng_uniform_f32(struct rng *r) {
  return (float)(rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

double rng_uniform_range(struct rng *r, double lo, double hi) {
  return lo + (hi - lo) * rng_uniform(r);
}

double rng_normal(struct rng *r) {
  if (r->have_normal) {
    r->have_normal = 0;
    return r->spare;
  }
  /* 1 - U lies in (0, 1], so the logarithm is finite. */
  const double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
  const double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586476925 * u2;
  r->spare = rad * sin(th);
  r->have_normal = 1;
  return rad * cos(th);
}

uint64_t rng_below(struct rng *r, uint64_t n) {
  if (n <= 1) return 0;
  if (n <= UINT32_MAX) {
    /* Reject the low end so that every residue is equally likely. */
    const uint32_t m = (uint32_t)n, lim = (uint32_t)(-m) % m;
    uint32_t x;
    do x = rng_u32(r);
    while (x < lim);
    return x % m;
  }
  const uint64_t lim = (uint64_t)(-n) % n;
  uint64_t x;
  do x = rng_u64(r);
  while (x < lim);
  return x % n;
}
