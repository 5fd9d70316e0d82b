/* tests/unit/data/test_sampler.c - per-epoch permutation and DistributedSampler striding, ranks simulated in
 * one process. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "data/sampler.h"
#include "tests/fixtures/testutil.h"

/* A training split like split.h gives: distinct global indices in no particular order. */
static int64_t *make_split(int64_t n) {
  int64_t *idx = malloc(sizeof(int64_t) * n);
  for (int64_t i = 0; i < n; i++) idx[i] = (i * 7919 + 13) % (n * 3); /* distinct, scattered */
  return idx;
}

static int cmp(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Every rank's batches of one epoch: each train index is visited exactly once, apart from the
 * ceil(n/world)*world - n padding positions, which repeat the head of the permuted list. */
static void check_epoch(const int64_t *idx, int64_t n, int world, int B, uint64_t seed, int64_t epoch) {
  const int64_t per_rank = (n + world - 1) / world, total = per_rank * world;
  const int64_t nb = (per_rank + B - 1) / B;
  int64_t *perm = malloc(sizeof(int64_t) * n);
  sampler_permutation(idx, n, seed, epoch, perm);
  int64_t *seen_pos = malloc(sizeof(int64_t) * total); /* what each padded position received */
  for (int r = 0; r < world; r++) {
    struct sampler *s = sampler_create(idx, n, seed, r, world, B);
    sampler_set_epoch(s, epoch);
    T_CHECK(sampler_num_samples(s) == per_rank, "num_samples %lld", (long long)sampler_num_samples(s));
    T_CHECK(sampler_batches_per_epoch(s) == nb, "batches %lld, want %lld", (long long)sampler_batches_per_epoch(s),
            (long long)nb);
    int64_t k = 0;
    for (int64_t b = 0; b < nb; b++) {
      int count;
      const int64_t *bi = sampler_batch(s, b, &count);
      const int want = b < nb - 1 ? B : (int)(per_rank - (nb - 1) * B);
      T_CHECK(count == want, "world %d rank %d batch %lld: %d images, want %d", world, r, (long long)b, count, want);
      for (int i = 0; i < count; i++, k++) seen_pos[r + k * world] = bi[i];
    }
    sampler_destroy(s);
  }
  /* Positions r, r+world, ... of the padded permutation, as torch's DistributedSampler. */
  int ok = 1;
  for (int64_t p = 0; p < total; p++) ok &= seen_pos[p] == perm[p % n];
  T_CHECK(ok, "world %d: ranks do not stride the padded permutation", world);
  /* Coverage: count visits per train index. */
  int64_t maxv = n * 3;
  int *visits = calloc(maxv, sizeof(int));
  for (int64_t p = 0; p < total; p++) visits[seen_pos[p]]++;
  /* perm[j] is visited once, plus once per padded position p >= n with p mod n == j. */
  int64_t wrong = 0, extra = 0;
  for (int64_t j = 0; j < n; j++) {
    const int want = (int)((total - 1 - j) / n) + 1;
    wrong += visits[perm[j]] != want;
    extra += visits[perm[j]] - 1;
  }
  T_CHECK(wrong == 0 && extra == total - n, "world %d n %lld: %lld indices visited the wrong number of times",
          world, (long long)n, (long long)wrong);
  /* A permutation: all indices present. */
  int64_t *sorted = malloc(sizeof(int64_t) * n), *ref = malloc(sizeof(int64_t) * n);
  memcpy(sorted, perm, sizeof(int64_t) * n);
  memcpy(ref, idx, sizeof(int64_t) * n);
  qsort(sorted, n, sizeof(int64_t), cmp);
  qsort(ref, n, sizeof(int64_t), cmp);
  T_CHECK(memcmp(sorted, ref, sizeof(int64_t) * n) == 0, "permutation loses indices");
  free(sorted);
  free(ref);
  free(visits);
  free(seen_pos);
  free(perm);
}

/* Class-balanced epochs: 3 classes of 80, 15 and 5 images.  Each draw is an image of the split;
 * over many epochs the classes come up a third of the time each and every image of a class about
 * equally often; the list follows from (seed, epoch) alone; ranks take the same global list as in
 * uniform mode (so the rank count does not change which images an epoch trains on). */
static void test_balanced(void) {
  const int64_t n = 100;
  int64_t *idx = make_split(n);
  int32_t lab[100];
  for (int64_t i = 0; i < n; i++) lab[i] = i < 80 ? 0 : i < 95 ? 1 : 2;
  int64_t *out = malloc(sizeof(int64_t) * n), *again = malloc(sizeof(int64_t) * n);
  double per_class[3] = {0, 0, 0}, small[5] = {0};
  const int epochs = 600;
  for (int e = 0; e < epochs; e++) {
    sampler_balanced(idx, lab, n, 3, 40, e, out);
    for (int64_t i = 0; i < n; i++) {
      int64_t pos = -1;
      for (int64_t j = 0; j < n; j++)
        if (idx[j] == out[i]) pos = j;
      T_CHECK(pos >= 0, "epoch %d draw %lld: %lld is not in the split", e, (long long)i, (long long)out[i]);
      if (pos < 0) break;
      per_class[lab[pos]] += 1;
      if (pos >= 95) small[pos - 95] += 1;
    }
  }
  /* 60,000 draws: a third each is 20,000 (binomial sd about 115); class 2's 5 images 4,000 each (sd 60). */
  T_NEAR(per_class[0], 20000, 600, "draws of class 0");
  T_NEAR(per_class[1], 20000, 600, "draws of class 1");
  T_NEAR(per_class[2], 20000, 600, "draws of class 2");
  for (int k = 0; k < 5; k++) T_NEAR(small[k], 4000, 350, "draws of an image of the smallest class");
  sampler_balanced(idx, lab, n, 3, 40, 7, out);
  sampler_balanced(idx, lab, n, 3, 40, 7, again);
  T_CHECK(!memcmp(out, again, sizeof(int64_t) * n), "balanced epoch 7 not reproduced");
  sampler_balanced(idx, lab, n, 3, 41, 7, again);
  T_CHECK(memcmp(out, again, sizeof(int64_t) * n) != 0, "another seed gave the same balanced epoch");
  /* Ranks: rank r takes positions r, r + world, ... of the epoch's list, as in uniform mode. */
  for (int world = 1; world <= 3; world++)
    for (int r = 0; r < world; r++) {
      struct sampler *s = sampler_create(idx, n, 40, r, world, 4);
      sampler_set_balanced(s, lab, 3);
      sampler_set_epoch(s, 7);
      const int64_t per_rank = (n + world - 1) / world;
      for (int64_t k = 0; k < per_rank; k++) {
        int count;
        const int64_t *b = sampler_batch(s, k / 4, &count);
        T_CHECK(b[k % 4] == out[(r + k * world) % n], "world %d rank %d position %lld", world, r, (long long)k);
      }
      sampler_destroy(s);
    }
  /* A class with no training image is never drawn (labels 0 and 2 only). */
  for (int64_t i = 0; i < n; i++) lab[i] = i < 50 ? 0 : 2;
  sampler_balanced(idx, lab, n, 3, 40, 3, out);
  int from0 = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < 50; j++) from0 += out[i] == idx[j];
  T_NEAR(from0, 50, 20, "draws of class 0 with class 1 empty");
  free(out);
  free(again);
  free(idx);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  static const int64_t sizes[] = {1, 2, 7, 10, 31, 100, 1001};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int64_t *idx = make_split(sizes[i]);
    for (int world = 1; world <= 3; world++)
      for (int B = 1; B <= 4; B += 3)
        for (int64_t epoch = 0; epoch < 3; epoch++) check_epoch(idx, sizes[i], world, B, 40, epoch);
    free(idx);
  }
  /* Orders: reproducible for (seed, epoch), different across epochs and seeds. */
  const int64_t n = 1000;
  int64_t *idx = make_split(n), *p0 = malloc(sizeof(int64_t) * n), *p1 = malloc(sizeof(int64_t) * n),
          *p2 = malloc(sizeof(int64_t) * n), *p3 = malloc(sizeof(int64_t) * n);
  sampler_permutation(idx, n, 40, 0, p0);
  sampler_permutation(idx, n, 40, 0, p1);
  sampler_permutation(idx, n, 40, 1, p2);
  sampler_permutation(idx, n, 41, 0, p3);
  T_CHECK(memcmp(p0, p1, sizeof(int64_t) * n) == 0, "same (seed, epoch) gives another order");
  int same02 = 0, same03 = 0, fixed = 0;
  for (int64_t i = 0; i < n; i++) {
    same02 += p0[i] == p2[i];
    same03 += p0[i] == p3[i];
    fixed += p0[i] == idx[i];
  }
  T_CHECK(same02 < 20 && same03 < 20 && fixed < 20, "orders too similar: %d %d %d", same02, same03, fixed);
  /* Position statistics: over many epochs, where does train index idx[0] land?  Uniform on 0..9. */
  int64_t small[10];
  for (int i = 0; i < 10; i++) small[i] = i;
  long where[10] = {0};
  for (int64_t e = 0; e < 20000; e++) {
    int64_t q[10];
    sampler_permutation(small, 10, 3, e, q);
    for (int i = 0; i < 10; i++)
      if (q[i] == 0) where[i]++;
  }
  for (int i = 0; i < 10; i++) T_NEAR(where[i], 2000, 250, "position of index 0");
  /* Changing the epoch of a sampler recomputes its list; the same epoch is a no-op. */
  struct sampler *s = sampler_create(idx, n, 40, 1, 2, 8);
  sampler_set_epoch(s, 5);
  int c0;
  const int64_t b5 = sampler_batch(s, 0, &c0)[0];
  sampler_set_epoch(s, 6);
  sampler_set_epoch(s, 5);
  T_CHECK(sampler_batch(s, 0, &c0)[0] == b5, "epoch 5 list not reproduced");
  sampler_destroy(s);
  free(idx);
  free(p0);
  free(p1);
  free(p2);
  free(p3);
  test_balanced();
  return t_finish();
}
