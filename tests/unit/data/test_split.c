/* tests/unit/data/test_split.c - numpy-compatible MT19937 shuffle and scDINO's train/validation split
 * against permutations computed by numpy (tests/data/dino_tiny.h5 /split). */
#include "build_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/npshuffle.h"
#include "data/split.h"
#include "tests/fixtures/testutil.h"

static void check_reference(const char *name, int64_t n, uint32_t seed) {
  char dset[64];
  snprintf(dset, sizeof dset, "/split/%s", name);
  size_t nref = 0;
  double *ref = t_h5_read_f64(t_datafile("dino_tiny.h5"), dset, &nref);
  T_CHECK((int64_t)nref == n, "%s: %zu entries, want %lld", name, nref, (long long)n);
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  npshuffle_perm(seed, n, perm);
  int bad = 0;
  for (int64_t i = 0; i < n && i < (int64_t)nref; i++) bad += perm[i] != (int64_t)ref[i];
  T_CHECK(bad == 0, "%s: %d of %lld positions differ from numpy", name, bad, (long long)n);
  /* The split is the permutation cut at floor((1 - 0.8) n): val first, then train. */
  struct split s;
  split_compute(n, 0.8, seed, &s);
  int64_t nval = split_val_count(n, 0.8);
  T_CHECK(s.n_val == nval && s.n_train == n - nval, "%s: split sizes %lld/%lld", name, (long long)s.n_val,
          (long long)s.n_train);
  T_CHECK(memcmp(s.val, perm, (size_t)nval * sizeof *perm) == 0, "%s: val = perm[:split]", name);
  T_CHECK(memcmp(s.train, perm + nval, (size_t)(n - nval) * sizeof *perm) == 0, "%s: train = perm[split:]", name);
  split_free(&s);
  free(perm);
  free(ref);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  /* MT19937's published first output for init_genrand(5489). */
  struct np_mt19937 mt;
  npshuffle_seed(&mt, 5489);
  T_CHECK(npshuffle_next_u32(&mt) == 3499211612u, "MT19937(5489) first output");

  check_reference("n1000_seed40", 1000, 40);
  check_reference("n37_seed42", 37, 42);
  check_reference("n5_seed0", 5, 0);

  /* numpy.random.seed(s); shuffle(list(range(10))), values printed by numpy 1.24. */
  static const struct { uint32_t seed; int64_t p[10]; } ten[] = {
      {0, {2, 8, 4, 9, 1, 6, 7, 3, 0, 5}},
      {40, {4, 3, 8, 1, 2, 9, 0, 5, 7, 6}},
      {42, {8, 1, 5, 0, 7, 2, 9, 4, 3, 6}},
      {4294967295u, {6, 9, 5, 1, 8, 0, 7, 4, 2, 3}},
  };
  for (size_t k = 0; k < sizeof ten / sizeof *ten; k++) {
    int64_t p[10];
    npshuffle_perm(ten[k].seed, 10, p);
    T_CHECK(memcmp(p, ten[k].p, sizeof p) == 0, "shuffle of range(10) with seed %u", ten[k].seed);
  }

  /* Python's math.floor((1 - f) * n): (1 - 0.8) is 0.19999999999999996, so 5 -> 0, 1000 -> 199. */
  static const struct { int64_t n; int64_t v08, v02, v09; } fl[] = {
      {0, 0, 0, 0},     {1, 0, 0, 0},     {5, 0, 4, 0},         {10, 1, 8, 0},
      {15, 2, 12, 1},   {37, 7, 29, 3},   {100, 19, 80, 9},     {1000, 199, 800, 99},
      {90852, 18170, 72681, 9085},        {22712, 4542, 18169, 2271},
  };
  for (size_t k = 0; k < sizeof fl / sizeof *fl; k++) {
    T_CHECK(split_val_count(fl[k].n, 0.8) == fl[k].v08, "floor((1-0.8)*%lld)", (long long)fl[k].n);
    T_CHECK(split_val_count(fl[k].n, 0.2) == fl[k].v02, "floor((1-0.2)*%lld)", (long long)fl[k].n);
    T_CHECK(split_val_count(fl[k].n, 0.9) == fl[k].v09, "floor((1-0.9)*%lld)", (long long)fl[k].n);
  }
  T_CHECK(split_val_count(7, 1.0) == 0 && split_val_count(7, 0.0) == 7, "fractions 1 and 0");

  /* Large n: every index exactly once. */
  int64_t n = 100003;
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  char *seen = calloc((size_t)n, 1);
  npshuffle_perm(40, n, perm);
  int ok = 1;
  for (int64_t i = 0; i < n; i++) {
    if (perm[i] < 0 || perm[i] >= n || seen[perm[i]]) ok = 0;
    else seen[perm[i]] = 1;
  }
  T_CHECK(ok, "permutation of %lld is a permutation", (long long)n);
  /* The 64-bit branch of random_interval: values within range. */
  npshuffle_seed(&mt, 1);
  uint64_t big = 0x1234567890ull, mx = 0;
  for (int i = 0; i < 1000; i++) {
    uint64_t v = npshuffle_interval(&mt, big);
    if (v > mx) mx = v;
  }
  T_CHECK(mx <= big && mx > big / 2, "random_interval above 2^32 stays in [0, max]");
  free(perm);
  free(seen);
  return t_finish();
}
