/* tests/unit/core/test_rng.c - Philox4x32-10 known answers, stream keying, and the distributions. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "tests/fixtures/testutil.h"

/* Known-answer vectors of Random123 (kat_vectors, "philox4x32 10"): counter, key, result. */
static void test_kat(void) {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
       0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
       0x5001e420, 0x24126ea1}};
  for (int v = 0; v < 3; v++) {
    uint32_t out[4];
    philox4x32_10(kat[v], kat[v] + 4, out);
    for (int i = 0; i < 4; i++)
      T_CHECK(out[i] == kat[v][6 + i], "KAT %d word %d: %08x, expected %08x", v, i, out[i], kat[v][6 + i]);
  }
}

static void test_streams(void) {
  /* The stream definition of rng.h: word k = philox({k/4, id1}, key(seed, domain, id0))[k%4]. */
  struct rng r;
  rng_init(&r, 42, RNG_DOMAIN_TEST, 7, 0x123456789ull);
  uint32_t key[2];
  rng_stream_key(42, RNG_DOMAIN_TEST, 7, key);
  uint32_t first[64];
  for (int k = 0; k < 64; k++) {
    first[k] = rng_u32(&r);
    T_CHECK(first[k] == rng_word_at(key, 0x123456789ull, (uint64_t)k), "word %d differs from rng_word_at", k);
  }
  rng_seek(&r, 37);
  T_CHECK(rng_u32(&r) == first[37] && rng_u32(&r) == first[38], "seek");
  /* Large block numbers use the high counter word. */
  rng_seek(&r, (1ull << 34) + 5);
  T_CHECK(rng_u32(&r) == rng_word_at(key, 0x123456789ull, (1ull << 34) + 5), "seek beyond 2^32 blocks");
  /* Each key component changes the stream. */
  struct rng o[4];
  rng_init(&o[0], 43, RNG_DOMAIN_TEST, 7, 0x123456789ull);
  rng_init(&o[1], 42, RNG_DOMAIN_AUGMENT, 7, 0x123456789ull);
  rng_init(&o[2], 42, RNG_DOMAIN_TEST, 8, 0x123456789ull);
  rng_init(&o[3], 42, RNG_DOMAIN_TEST, 7, 0x12345678aull);
  for (int j = 0; j < 4; j++) {
    int same = 0;
    for (int k = 0; k < 64; k++) same += rng_u32(&o[j]) == first[k];
    T_CHECK(same <= 1, "stream %d shares %d of 64 words with the base stream", j, same);
  }
  /* Re-initialising gives the same stream (no hidden state). */
  rng_init(&r, 42, RNG_DOMAIN_TEST, 7, 0x123456789ull);
  for (int k = 0; k < 64; k++) T_CHECK(rng_u32(&r) == first[k], "replay word %d", k);
}

static void test_distributions(void) {
  struct rng r;
  rng_init(&r, 1, RNG_DOMAIN_TEST, 0, 0);
  enum { N = 1 << 20, BINS = 256 };
  /* Byte histogram of rng_u32: chi-square with 255 degrees of freedom (mean 255, sd 22.6). */
  static long hist[BINS];
  memset(hist, 0, sizeof hist);
  for (int i = 0; i < N; i++) hist[rng_u32(&r) >> 24]++;
  double chi = 0;
  for (int b = 0; b < BINS; b++) chi += (hist[b] - N / (double)BINS) * (hist[b] - N / (double)BINS) / (N / (double)BINS);
  printf("  u32 top-byte chi-square %.1f (255 dof)\n", chi);
  T_CHECK(chi > 150 && chi < 380, "chi-square %.1f", chi);
  /* Uniforms: range, mean 1/2, variance 1/12. */
  double s = 0, s2 = 0, mn = 1, mx = 0;
  for (int i = 0; i < N; i++) {
    const double u = rng_uniform(&r);
    s += u;
    s2 += u * u;
    mn = u < mn ? u : mn;
    mx = u > mx ? u : mx;
  }
  const double mean = s / N, var = s2 / N - mean * mean;
  T_CHECK(mn >= 0 && mx < 1, "uniform range [%g, %g]", mn, mx);
  T_NEAR(mean, 0.5, 5 * sqrt(1.0 / 12 / N), "uniform mean");
  T_NEAR(var, 1.0 / 12, 0.002, "uniform variance");
  float fmn = 1, fmx = 0;
  for (int i = 0; i < 100000; i++) {
    const float u = rng_uniform_f32(&r);
    fmn = u < fmn ? u : fmn;
    fmx = u > fmx ? u : fmx;
  }
  T_CHECK(fmn >= 0 && fmx < 1, "float uniform range");
  /* Normals: mean 0, variance 1, and the tail mass beyond 3 sigma (0.27 %). */
  s = s2 = 0;
  long tail = 0;
  for (int i = 0; i < N; i++) {
    const double z = rng_normal(&r);
    s += z;
    s2 += z * z;
    tail += fabs(z) > 3;
  }
  T_NEAR(s / N, 0.0, 5.0 / sqrt(N), "normal mean");
  T_NEAR(s2 / N, 1.0, 0.01, "normal variance");
  T_NEAR((double)tail / N, 0.0026998, 0.0006, "normal 3-sigma tail");
  /* rng_below: bounds and unbiased counts for a range that is not a power of two. */
  long cnt[7] = {0};
  for (int i = 0; i < 700000; i++) {
    const uint64_t v = rng_below(&r, 7);
    T_CHECK(v < 7, "below(7) gave %llu", (unsigned long long)v);
    if (v < 7) cnt[v]++;
  }
  for (int b = 0; b < 7; b++) T_NEAR(cnt[b], 100000, 1500, "below(7) bin");
  T_CHECK(rng_below(&r, 1) == 0, "below(1)");
  const uint64_t big = (1ull << 40) + 3;
  int high = 0;
  for (int i = 0; i < 1000; i++) {
    const uint64_t v = rng_below(&r, big);
    T_CHECK(v < big, "below(2^40+3)");
    high += v >= (big >> 1);
  }
  T_NEAR(high, 500, 80, "below(2^40+3) upper half");
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_kat();
  test_streams();
  test_distributions();
  return t_finish();
}
