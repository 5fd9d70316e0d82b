/* rng.h - counter-based random numbers (Philox4x32-10) keyed by (seed, domain, id0, id1).
 *
 * A value depends only on its key and its position in the stream, never on which rank or thread
 * draws it, so data augmentation, drop-path and initialisation are reproducible for any rank or
 * thread count and a resumed run continues bit-identically.
 *
 * Stream definition (the CUDA backend reproduces it with the same inline block function):
 *   key  = philox4x32_10({domain, lo(id0), hi(id0), RNG_KEY_TAG}, {lo(seed), hi(seed)})[0..1]
 *   word k of the stream = philox4x32_10({lo(k/4), hi(k/4), lo(id1), hi(id1)}, key)[k % 4]
 * The stream key is itself a Philox output (a keyed bijection of (domain, id0)), so distinct
 * (domain, id0) pairs get unrelated keys; id1 and the block number are plain counter words. */
#ifndef SCDINO_RNG_H
#define SCDINO_RNG_H

#include <stdint.h>

#ifdef __CUDACC__
#define RNG_INLINE __host__ __device__ static inline
#else
#define RNG_INLINE static inline
#endif

/* Independent users of randomness; each gets its own family of streams. */
enum rng_domain {
  RNG_DOMAIN_AUGMENT = 1,  /* id0 = epoch, id1 = sample index * AUGMENT_CROP_SLOTS + crop number */
  RNG_DOMAIN_SAMPLER = 2,  /* id0 = epoch, id1 = 0: the per-epoch permutation; 1: the balanced draws */
  RNG_DOMAIN_DROPPATH = 3, /* id0 = global step, id1 = caller-defined (block, branch) */
  RNG_DOMAIN_INIT = 4,     /* id0 = tensor number, id1 = 0 */
  RNG_DOMAIN_KNN = 5,      /* evaluation-time sampling */
  RNG_DOMAIN_ATTENTION = 6, /* choice of images for attention maps */
  RNG_DOMAIN_LINEAR = 7,   /* the linear probe: id0 = 0 initial weights; id0 = 1 + epoch, id1 = sample: crops */
  RNG_DOMAIN_TEST = 100    /* unit tests */
};

/* Fourth counter word of the key derivation; fixed so that derived keys are specific to scdino. */
#define RNG_KEY_TAG 0x5CD1D0u

struct rng {
  uint32_t key[2];  /* derived stream key */
  uint32_t ctr_hi[2]; /* id1 */
  uint64_t block;   /* next block to generate */
  uint32_t buf[4];  /* current block */
  int pos;          /* next unused word of buf (4 = empty) */
  int have_normal;  /* Box-Muller spare */
  double spare;
};

/* One Philox4x32-10 block: 10 rounds of the published round function (Salmon et al., SC'11). */
RNG_INLINE void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u; /* Weyl key schedule */
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* Derive the stream key of (seed, domain, id0); what rng_init stores in r->key. */
RNG_INLINE void rng_stream_key(uint64_t seed, uint32_t domain, uint64_t id0, uint32_t key[2]) {
  const uint32_t c[4] = {domain, (uint32_t)id0, (uint32_t)(id0 >> 32), RNG_KEY_TAG};
  const uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t o[4];
  philox4x32_10(c, k, o);
  key[0] = o[0];
  key[1] = o[1];
}

/* Word k of a stream, directly (for element-parallel code such as initialisers on a GPU). */
RNG_INLINE uint32_t rng_word_at(const uint32_t key[2], uint64_t id1, uint64_t k) {
  const uint64_t b = k >> 2;
  const uint32_t c[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)id1, (uint32_t)(id1 >> 32)};
  uint32_t o[4];
  philox4x32_10(c, key, o);
  return o[k & 3];
}

void rng_init(struct rng *r, uint64_t seed, uint32_t domain, uint64_t id0, uint64_t id1);
/* Position the stream at word k (rng_u32 then returns word k). */
void rng_seek(struct rng *r, uint64_t k);
uint32_t rng_u32(struct rng *r);
uint64_t rng_u64(struct rng *r);         /* two words, first one high */
double rng_uniform(struct rng *r);       /* [0,1), 53 random bits (two words) */
float rng_uniform_f32(struct rng *r);    /* [0,1), 24 random bits (one word) */
double rng_uniform_range(struct rng *r, double lo, double hi); /* lo + (hi-lo)*U */
double rng_normal(struct rng *r);        /* N(0,1), Box-Muller; pairs are cached */
uint64_t rng_below(struct rng *r, uint64_t n); /* uniform on [0, n), unbiased; n >= 1 */

#endif
