/* tests/unit/data/test_loader.c - the streaming loader on a synthetic shard set: order and indices of every
 * batch, crops identical for 1 and 2 threads and for 1 and 2 (simulated) ranks, RAW mode,
 * dropped images, resume inside an epoch, restart and destroy mid-epoch, deterministic crops. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "data/augment.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/shards.h"
#include "data/split.h"
#include "input/config.h"
#include "tests/fixtures/shardfix.h"
#include "tests/fixtures/testutil.h"

enum { N = 37, C = 5, HW = 20, NLOCAL = 3, G = 32, L = 16, B = 4 };
static const int64_t bad[2] = {5, 22};

static struct dataset *ds;
static struct split sp;
static size_t crop_floats; /* all crops of one image */
static float *ref_crops;   /* [N] crops of every sample (epoch 0, 1 rank, 1 thread), NULL if unseen */
static int *have_ref;

static void setup_cfg(struct config *cfg, int threads, int prefetch) {
  config_defaults(cfg);
  cfg->crops.global_size = G;
  cfg->crops.local_size = L;
  cfg->crops.local_crops_number = NLOCAL;
  cfg->training.batch_size_per_rank = B;
  cfg->system.loader_threads = threads;
  cfg->system.prefetch_batches = prefetch;
  cfg->data.n_channels = 3;
  cfg->data.channels[0] = 4;
  cfg->data.channels[1] = 1;
  cfg->data.channels[2] = 2;
}

static int is_bad(int64_t i) { return i == bad[0] || i == bad[1]; }

/* Gather the crops of image i of a batch into one contiguous buffer (crop-major layout). */
static void image_crops(const struct loader_batch *b, int i, float *out) {
  const size_t gs = (size_t)b->channels * G * G, ls = (size_t)b->channels * L * L;
  for (int k = 0; k < 2; k++) memcpy(out + k * gs, b->global + ((size_t)k * b->n + i) * gs, gs * sizeof(float));
  for (int k = 0; k < NLOCAL; k++)
    memcpy(out + 2 * gs + k * ls, b->local + ((size_t)k * b->n + i) * ls, ls * sizeof(float));
}

/* Run one epoch; check batch order, indices against the sampler (bad images left out), and crops
 * against the reference (recording them if record).  Returns the number of images seen. */
static int64_t run_epoch(const struct config *cfg, int rank, int world, int64_t epoch, int64_t first,
                         int record, const char *what) {
  struct loader *l = loader_create_ranked(cfg, ds, sp.train, sp.n_train, B, LOADER_AUGMENT, rank, world);
  struct sampler *s = sampler_create(sp.train, sp.n_train, (uint64_t)cfg->control.seed, rank, world, B);
  sampler_set_epoch(s, epoch);
  T_CHECK(loader_batches_per_epoch(l) == sampler_batches_per_epoch(s), "%s: batches per epoch", what);
  loader_start_epoch(l, epoch, first);
  float *buf = malloc(sizeof(float) * crop_floats);
  int64_t want = first, seen = 0;
  const struct loader_batch *b;
  while ((b = loader_next(l)) != NULL) {
    T_CHECK(b->batch == want && b->epoch == epoch, "%s: got batch %lld of epoch %lld, expected %lld", what,
            (long long)b->batch, (long long)b->epoch, (long long)want);
    int count;
    const int64_t *idx = sampler_batch(s, want, &count);
    int j = 0, dropped = 0;
    for (int i = 0; i < count; i++) {
      if (is_bad(idx[i])) {
        dropped++;
        continue;
      }
      T_CHECK(j < b->n && b->index[j] == idx[i], "%s: batch %lld image %d index", what, (long long)want, j);
      j++;
    }
    T_CHECK(b->n == j && b->n_dropped == dropped, "%s: batch %lld has %d images (%d dropped), expected %d (%d)", what,
            (long long)want, b->n, b->n_dropped, j, dropped);
    T_CHECK(b->channels == 3 && b->global_size == G && b->local_size == L && b->n_local == NLOCAL, "%s: shape", what);
    for (int i = 0; i < b->n; i++) {
      const int64_t g = b->index[i];
      image_crops(b, i, buf);
      if (record && !have_ref[g]) {
        memcpy(ref_crops + (size_t)g * crop_floats, buf, sizeof(float) * crop_floats);
        have_ref[g] = 1;
      } else if (have_ref[g]) {
        T_CHECK(memcmp(ref_crops + (size_t)g * crop_floats, buf, sizeof(float) * crop_floats) == 0,
                "%s: crops of sample %lld differ", what, (long long)g);
      }
    }
    T_CHECK(b->wait_seconds >= 0 && (b->flops > 0) == (b->n > 0), "%s: accounting", what);
    seen += b->n;
    want++;
  }
  T_CHECK(want == loader_batches_per_epoch(l), "%s: epoch ended after %lld batches", what, (long long)want);
  T_CHECK(loader_next(l) == NULL, "%s: NULL again after the end", what);
  T_CHECK(loader_wait_seconds(l) >= 0, "%s: wait time", what);
  free(buf);
  sampler_destroy(s);
  loader_destroy(l);
  return seen;
}

static void test_augment_mode(void) {
  struct config cfg;
  int64_t ngood = 0;
  for (int64_t i = 0; i < sp.n_train; i++) ngood += !is_bad(sp.train[i]);
  /* 1 thread records the reference; 2 threads and a deep ring must give identical crops. */
  setup_cfg(&cfg, 1, 1);
  T_CHECK(run_epoch(&cfg, 0, 1, 0, 0, 1, "1 thread") == ngood, "1 thread: image count");
  /* The reference equals augment_image on the raw image read directly. */
  struct augment a;
  augment_init(&a, &cfg, C, HW, HW, IMGOPS_U16, dataset_mean(ds), dataset_std(ds));
  struct augment_work *w = augment_work_create(&a);
  uint16_t raw[C * HW * HW];
  float *direct = malloc(sizeof(float) * crop_floats);
  float *out[2 + NLOCAL];
  for (int k = 0; k < 2 + NLOCAL; k++)
    out[k] = direct + (k < 2 ? (size_t)k * 3 * G * G : 2 * 3 * G * G + (size_t)(k - 2) * 3 * L * L);
  int checked = 0;
  for (int64_t g = 0; g < N; g++) {
    if (!have_ref[g]) continue;
    dataset_read_images(ds, &g, 1, raw);
    augment_image(&a, w, raw, 0, g, out);
    T_CHECK(memcmp(direct, ref_crops + (size_t)g * crop_floats, sizeof(float) * crop_floats) == 0,
            "loader crops of %lld differ from augment_image", (long long)g);
    checked++;
  }
  T_CHECK(checked == ngood, "reference covers %d of %lld", checked, (long long)ngood);
  augment_work_destroy(w);
  free(direct);

  setup_cfg(&cfg, 2, 3);
  run_epoch(&cfg, 0, 1, 0, 0, 0, "2 threads");
  setup_cfg(&cfg, 3, 1);
  run_epoch(&cfg, 0, 1, 0, 0, 0, "3 threads, shallow ring");
  /* Two ranks: a sample's crops do not depend on the rank that loads it; together the ranks
   * cover the split (padding repeats some samples). */
  setup_cfg(&cfg, 2, 2);
  const int64_t r0 = run_epoch(&cfg, 0, 2, 0, 0, 0, "rank 0 of 2");
  const int64_t r1 = run_epoch(&cfg, 1, 2, 0, 0, 0, "rank 1 of 2");
  T_CHECK(r0 + r1 >= ngood, "2 ranks saw %lld images", (long long)(r0 + r1));
  /* Resume inside the epoch. */
  run_epoch(&cfg, 0, 1, 0, 3, 0, "resume at batch 3");
  /* Another epoch gives other crops: compare one sample. */
  struct loader *l = loader_create_ranked(&cfg, ds, sp.train, sp.n_train, B, LOADER_AUGMENT, 0, 1);
  loader_start_epoch(l, 1, 0);
  const struct loader_batch *b = loader_next(l);
  float *buf = malloc(sizeof(float) * crop_floats);
  image_crops(b, 0, buf);
  T_CHECK(memcmp(buf, ref_crops + (size_t)b->index[0] * crop_floats, sizeof(float) * crop_floats) != 0,
          "epoch 1 repeats the crops of epoch 0");
  /* Restart epoch 0 in the middle of epoch 1, then leave mid-epoch (destroy must not hang). */
  loader_start_epoch(l, 0, 0);
  b = loader_next(l);
  T_CHECK(b && b->batch == 0 && b->epoch == 0, "restart");
  image_crops(b, 0, buf);
  T_CHECK(memcmp(buf, ref_crops + (size_t)b->index[0] * crop_floats, sizeof(float) * crop_floats) == 0,
          "restarted epoch 0 differs");
  b = loader_next(l);
  T_CHECK(b && b->batch == 1, "second batch after restart");
  loader_destroy(l);
  /* Destroy right after starting (workers busy) and before starting at all. */
  l = loader_create_ranked(&cfg, ds, sp.train, sp.n_train, B, LOADER_AUGMENT, 0, 1);
  loader_start_epoch(l, 2, 0);
  loader_destroy(l);
  l = loader_create_ranked(&cfg, ds, sp.train, sp.n_train, B, LOADER_AUGMENT, 0, 1);
  loader_destroy(l);
  free(buf);
}

static void test_raw_mode(void) {
  struct config cfg;
  setup_cfg(&cfg, 2, 2);
  struct loader *l = loader_create_ranked(&cfg, ds, sp.train, sp.n_train, B, LOADER_RAW, 1, 2);
  struct sampler *s = sampler_create(sp.train, sp.n_train, (uint64_t)cfg.control.seed, 1, 2, B);
  sampler_set_epoch(s, 4);
  loader_start_epoch(l, 4, 0);
  const size_t ib = dataset_image_bytes(ds);
  char *want = malloc(ib);
  const struct loader_batch *b;
  int64_t k = 0;
  while ((b = loader_next(l)) != NULL) {
    int count;
    const int64_t *idx = sampler_batch(s, k, &count);
    T_CHECK(b->batch == k && b->global == NULL, "raw batch %lld", (long long)k);
    int j = 0;
    for (int i = 0; i < count; i++) {
      if (is_bad(idx[i])) continue;
      dataset_read_images(ds, &idx[i], 1, want);
      T_CHECK(j < b->n && b->index[j] == idx[i] && memcmp((char *)b->raw + (size_t)j * ib, want, ib) == 0,
              "raw image %d of batch %lld", j, (long long)k);
      j++;
    }
    T_CHECK(b->n == j, "raw batch size");
    k++;
  }
  T_CHECK(k == loader_batches_per_epoch(l), "raw batches");
  const struct augment *a = loader_augment(l);
  T_CHECK(a->nsel == 3 && a->sel[0] == 4 && a->C_all == C, "loader_augment");
  free(want);
  sampler_destroy(s);
  loader_destroy(l);
}

static void test_deterministic(void) {
  struct config cfg;
  setup_cfg(&cfg, 2, 2);
  cfg.crops.augment = 0;
  struct loader *l = loader_create_ranked(&cfg, ds, sp.train, sp.n_train, B, LOADER_AUGMENT, 0, 1);
  loader_start_epoch(l, 0, 0);
  const struct loader_batch *b = loader_next(l);
  const struct augment *a = loader_augment(l);
  uint16_t raw[C * HW * HW];
  float scaled[3 * HW * HW], g[3 * G * G], loc[3 * L * L];
  for (int i = 0; i < b->n; i++) {
    dataset_read_images(ds, &b->index[i], 1, raw);
    imgops_minmax_scale(raw, IMGOPS_U16, C, HW, HW, a->sel, 3, scaled);
    imgops_resize_bicubic(scaled, 3, HW, HW, g, G, G);
    imgops_normalize(g, 3, G * G, a->mean, a->std);
    imgops_resize_bicubic(scaled, 3, HW, HW, loc, L, L);
    imgops_normalize(loc, 3, L * L, a->mean, a->std);
    for (int k = 0; k < 2; k++)
      T_CHECK(memcmp(g, b->global + ((size_t)k * b->n + i) * 3 * G * G, sizeof g) == 0, "global crop %d", k);
    for (int k = 0; k < NLOCAL; k++)
      T_CHECK(memcmp(loc, b->local + ((size_t)k * b->n + i) * 3 * L * L, sizeof loc) == 0, "local crop %d", k);
  }
  loader_destroy(l);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  const char *dir = t_scratch_dir("test_loader");
  shardfix_make(dir, N, C, HW, HW, DATASET_U16, 16, bad, 2, 1);
  ds = dataset_open(dir);
  split_compute(N, 0.8, 40, &sp);
  crop_floats = (size_t)3 * (2 * G * G + NLOCAL * L * L);
  ref_crops = calloc((size_t)N * crop_floats, sizeof(float));
  have_ref = calloc(N, sizeof(int));
  test_augment_mode();
  test_raw_mode();
  test_deterministic();
  free(ref_crops);
  free(have_ref);
  split_free(&sp);
  dataset_close(ds);
  return t_finish();
}
