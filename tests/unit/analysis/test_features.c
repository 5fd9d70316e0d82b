/* tests/unit/analysis/test_features.c - inference preprocessing against an independent float64 computation and
 * PyTorch's float32 bilinear kernel (imgops); calculation='features' on a fixture checkpoint
 * against the training model's teacher (and student) forward on independently prepared images;
 * the features file's schema and rows; the random-init baseline against the training's initial
 * weights; images left out of the file written while computed (the other rows in place, bit for
 * bit). */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "analysis/features_io.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/imgops.h"
#include "data/shards.h"
#include "data/split.h"
#include "input/config.h"
#include "model/dino_model.h"
#include "model/model_config.h"
#include "tests/fixtures/feat_fixture.h"
#include "tests/fixtures/shardfix.h"
#include "tests/fixtures/shardset.h"
#include "tests/fixtures/testutil.h"
#include "train/checkpoint.h"

static void test_resize_shape(void) {
  static const int cases[][5] = {{50, 50, 224, 224, 224}, {40, 60, 224, 224, 336}, {60, 40, 224, 336, 224},
                                 {50, 70, 0, 50, 70},     {7, 10, 16, 16, 22},     {13, 11, 16, 18, 16}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int oh, ow;
    features_resize_shape(cases[i][0], cases[i][1], cases[i][2], &oh, &ow);
    T_CHECK(oh == cases[i][3] && ow == cases[i][4], "Resize(%d) of %dx%d gave %dx%d, expected %dx%d", cases[i][2],
            cases[i][0], cases[i][1], oh, ow, cases[i][3], cases[i][4]);
  }
}

static void test_prep(void) {
  enum { C = 3, H = 13, W = 11 };
  uint16_t raw[C * H * W];
  struct rng r;
  rng_init(&r, 5, RNG_DOMAIN_TEST, 1, 0);
  for (int i = 0; i < C * H * W; i++) raw[i] = (uint16_t)rng_below(&r, 60000);
  const int sel[2] = {2, 0};
  const double mean[2] = {0.4, 0.55}, std[2] = {0.21, 0.3};
  struct features_prep p;
  features_prep_setup(&p, C, H, W, DATASET_U16, sel, 2, mean, std, 16, 1);
  T_CHECK(p.oh == 18 && p.ow == 16, "output %dx%d", p.oh, p.ow);
  const size_t n = (size_t)2 * p.oh * p.ow;
  float *ours = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
  double *work = malloc(features_prep_work_size(&p) * sizeof(double));
  T_CHECK(features_prep_image(&p, raw, ours, work) == FEATURES_PREP_OK, "valid image refused");
  ff_prepare(raw, H, W, sel, 2, p.oh, p.ow, mean, std, ref);
  T_CHECK(t_max_abs_diff_f32(ours, ref, n) <= 1e-6, "prepared image differs from the direct formula by %g",
          t_max_abs_diff_f32(ours, ref, n));
  features_prep_free(&p);

  /* Without normalisation, against imgops' float32 bilinear (bit-identical to PyTorch's portable
   * kernel): the float64 path differs only by float32 rounding. */
  features_prep_setup(&p, C, H, W, DATASET_U16, sel, 2, NULL, NULL, 16, 0);
  T_CHECK(features_prep_image(&p, raw, ours, work) == FEATURES_PREP_OK, "valid image refused");
  float *scaled = malloc(sizeof(float) * 2 * H * W);
  T_CHECK(imgops_minmax_scale(raw, IMGOPS_U16, C, H, W, sel, 2, scaled) == 0, "imgops min-max failed");
  imgops_resize_bilinear(scaled, 2, H, W, ref, p.oh, p.ow);
  T_CHECK(t_max_abs_diff_f32(ours, ref, n) <= 2e-7, "float64 resize vs PyTorch's float32 kernel: %g",
          t_max_abs_diff_f32(ours, ref, n));
  features_prep_free(&p);

  /* A constant non-zero channel becomes 0 (upstream: NaN and a substitute image); the others
   * still span [0, 1]. */
  for (int i = 0; i < H * W; i++) raw[2 * H * W + i] = 777;
  features_prep_setup(&p, C, H, W, DATASET_U16, sel, 2, NULL, NULL, 0, 0);
  T_CHECK(features_prep_image(&p, raw, ours, work) == FEATURES_PREP_FLAT, "flat channel not reported");
  float lo = 1, hi = 0, flat = 0;
  for (int i = 0; i < H * W; i++) {
    flat = fmaxf(flat, fabsf(ours[i]));
    lo = fminf(lo, ours[H * W + i]);
    hi = fmaxf(hi, ours[H * W + i]);
  }
  T_CHECK(flat == 0.0f, "flat channel not zero (max |x| %g)", flat);
  T_CHECK(lo == 0.0f && hi == 1.0f, "other channel spans [%g, %g]", lo, hi);
  features_prep_free(&p);

  /* A non-finite pixel in a float32 image: the image is refused and zeroed. */
  float fraw[C * H * W];
  for (int i = 0; i < C * H * W; i++) fraw[i] = (float)(i % 17);
  fraw[5] = NAN;
  features_prep_setup(&p, C, H, W, DATASET_F32, sel, 2, NULL, NULL, 8, 0);
  ours[0] = 1;
  T_CHECK(features_prep_image(&p, fraw, ours, work) == FEATURES_PREP_NONFINITE, "NaN pixel not reported");
  T_CHECK(ours[0] == 0.0f, "refused image not zeroed");
  features_prep_free(&p);
  free(ours);
  free(ref);
  free(work);
  free(scaled);
}

/* ---- features of a checkpoint against the training model's forward ---------------------------- */

/* CLS rows of the training model's teacher (which = 1) or student (0) for the images idx, prepared
 * by ff_prepare; [n][D], L2-normalised. */
static float *model_features(const struct config *cfg, const char *ckpt, int which, const int64_t *idx, int n) {
  const struct ops *ops = backend_cpu();
  const int nsel = cfg->data.n_channels, S = (int)cfg->features.resize;
  int sel[8];
  for (int s = 0; s < nsel; s++) sel[s] = (int)cfg->data.channels[s];
  struct dino_spec spec;
  model_config_spec(&spec, cfg, nsel);
  spec.vit.drop_path_rate = 0;
  struct dino_model *m = dino_model_create(ops, &spec);
  checkpoint_load_weights(ckpt, CKPT_STUDENT, NULL, &m->tt, ops, m->student);
  checkpoint_load_weights(ckpt, CKPT_TEACHER, NULL, &m->tt, ops, m->teacher);
  SCD_ASSERT(n % 2 == 0);
  const int B = n / 2, D = spec.vit.dim;
  dino_model_plan(m, B, 0, S, S);
  struct dataset *ds = dataset_open(cfg->data.shard_dir);
  const size_t img = (size_t)nsel * S * S;
  float *crops = malloc(sizeof(float) * img * n);
  uint16_t *raw = malloc(dataset_image_bytes(ds));
  double mean[8], std[8];
  for (int s = 0; s < nsel; s++) {
    mean[s] = dataset_mean(ds)[sel[s]];
    std[s] = dataset_std(ds)[sel[s]];
  }
  for (int i = 0; i < n; i++) {
    dataset_read_images(ds, idx + i, 1, raw);
    ff_prepare(raw, dataset_height(ds), dataset_width(ds), sel, nsel, S, S, mean, std, crops + img * i);
  }
  float *dev = ops->alloc(sizeof(float) * img * n);
  ops->upload(dev, crops, sizeof(float) * img * n);
  /* The two "global crops" of B images are the n images, crop-major: rows come out in idx order. */
  dino_model_forward(m, dev, NULL, B, NULL);
  float *cls = malloc(sizeof(float) * (size_t)n * D);
  float *f32 = ops->alloc(sizeof(float) * (size_t)n * D);
  ops->act_to_f32(f32, which ? m->th.in : m->sh.in, (size_t)n * D);
  ops->download(cls, f32, sizeof(float) * (size_t)n * D);
  features_l2_normalize(cls, n, D);
  ops->free(f32);
  ops->free(dev);
  free(raw);
  free(crops);
  dataset_close(ds);
  dino_model_destroy(m);
  return cls;
}

static void test_features_run(const char *dir) {
  char shards[512], run[512], ckpt[800], path[1000];
  snprintf(shards, sizeof shards, "%s/shards", dir);
  snprintf(run, sizeof run, "%s/run", dir);
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.h5", run);
  ff_make_shards(shards);
  static struct config cfg;
  ff_config(&cfg, run, shards, "");
  fs_mkdir_p(run);
  ff_make_checkpoint(&cfg, ckpt, 1, 2, 3);

  T_CHECK(features_run(&cfg) == 0, "features_run failed");
  snprintf(path, sizeof path, "%s/features_0002.h5", run); /* epoch 3 = after epoch 2 */
  T_CHECK(fs_exists(path), "%s not written", path);
  struct features f;
  features_read(path, &f);

  /* Rows: the validation split in ascending index order, labels and paths of the shards. */
  struct dataset *ds = dataset_open(shards);
  struct split sp;
  split_dataset(ds, cfg.data.train_fraction, (uint32_t)cfg.data.split_seed, &sp);
  T_CHECK(f.n == sp.n_val && f.n == FF_N / 2, "%lld rows, expected %lld", (long long)f.n, (long long)sp.n_val);
  T_CHECK(f.d == 48 && f.nclasses == 3, "d %d, classes %d", f.d, f.nclasses);
  int in_val_flat = 0;
  for (int64_t i = 0; i < f.n && i < sp.n_val; i++) {
    int found = 0;
    for (int64_t j = 0; j < sp.n_val; j++) found |= sp.val[j] == f.index[i];
    T_CHECK(found, "row %lld: index %lld is not in the validation split", (long long)i, (long long)f.index[i]);
    if (i) T_CHECK(f.index[i] > f.index[i - 1], "rows not in ascending index order at %lld", (long long)i);
    T_CHECK(f.labels[i] == dataset_label(ds, f.index[i]), "row %lld label", (long long)i);
    char rel[256];
    dataset_relpath(ds, f.index[i], rel, sizeof rel);
    T_CHECK(!strcmp(rel, f.paths[i]), "row %lld path %s vs %s", (long long)i, f.paths[i], rel);
    double norm = 0;
    for (int k = 0; k < f.d; k++) norm += (double)f.x[i * f.d + k] * f.x[i * f.d + k];
    T_NEAR(sqrt(norm), 1.0, 1e-5, "row norm");
    in_val_flat |= f.index[i] == FF_FLAT;
  }
  T_CHECK(in_val_flat, "fixture: the image with a flat channel should be in the validation split");
  T_CHECK(!strcmp(f.checkpoint_key, "teacher") && f.epoch == 2, "key %s epoch %lld", f.checkpoint_key,
          (long long)f.epoch);
  T_CHECK(!strcmp(f.checkpoint, ckpt), "checkpoint attribute %s", f.checkpoint);
  T_CHECK(!strcmp(f.class_names[1], "c1"), "class name %s", f.class_names[1]);

  /* Values: the training model's teacher forward on the same images, prepared independently. */
  float *teacher = model_features(&cfg, ckpt, 1, f.index, (int)f.n);
  float *student = model_features(&cfg, ckpt, 0, f.index, (int)f.n);
  const size_t nd = (size_t)f.n * f.d;
  printf("features vs teacher forward: max |diff| %.3g; vs student %.3g\n", t_max_abs_diff_f32(f.x, teacher, nd),
         t_max_abs_diff_f32(f.x, student, nd));
  T_REL(f.x, teacher, nd, 1e-5, "features vs the training model's teacher forward");
  T_CHECK(t_rel_err_f32(f.x, student, nd) > 1e-2, "features look like the student's");

  /* The student on request, a named checkpoint, another subset. */
  static struct config c2;
  c2 = cfg;
  snprintf(c2.features.checkpoint, sizeof c2.features.checkpoint, "%s", ckpt);
  snprintf(c2.features.checkpoint_key, sizeof c2.features.checkpoint_key, "student");
  snprintf(c2.features.subset, sizeof c2.features.subset, "all");
  T_CHECK(features_run(&c2) == 0, "features_run (student, all) failed");
  struct features g;
  features_read(path, &g);
  T_CHECK(g.n == FF_N && !strcmp(g.checkpoint_key, "student"), "%lld rows, key %s", (long long)g.n, g.checkpoint_key);
  for (int64_t i = 0; i < g.n; i++) T_CHECK(g.index[i] == i, "all: row %lld index %lld", (long long)i, (long long)g.index[i]);
  /* Rows of f are a subset of g: the same features for the same image. */
  float *gs = malloc(sizeof(float) * nd);
  for (int64_t i = 0; i < f.n; i++) memcpy(gs + i * f.d, g.x + f.index[i] * g.d, sizeof(float) * f.d);
  T_REL(gs, student, nd, 1e-5, "student features vs the training model's student forward");
  free(gs);
  features_free(&g);

  /* Random-init baseline: the training's initial weights for control.seed, on f's rows. */
  int dim = 0;
  char why[512] = "";
  float *rnd = features_random_init(&cfg, &f, path, &dim, why, sizeof why);
  T_CHECK(rnd && dim == 48, "random-init baseline not computed: %s", why);
  if (rnd) {
    const char *rckpt = "random_init_ref.h5";
    char rpath[1400];
    snprintf(rpath, sizeof rpath, "%s/%s", dir, rckpt);
    ff_make_checkpoint(&cfg, rpath, (uint64_t)cfg.control.seed, (uint64_t)cfg.control.seed, 1);
    float *ref = model_features(&cfg, rpath, 1, f.index, (int)f.n);
    T_REL(rnd, ref, nd, 1e-5, "random-init features vs the model initialised with control.seed");
    T_CHECK(t_rel_err_f32(rnd, teacher, nd) > 1e-2, "random-init features equal the trained ones");
    free(ref);
    free(rnd);
  }
  /* Without the checkpoint the baseline is left out, with the reason. */
  snprintf(f.checkpoint, sizeof f.checkpoint, "%s/no_such_checkpoint.h5", dir);
  rnd = features_random_init(&cfg, &f, path, &dim, why, sizeof why);
  T_CHECK(!rnd && strstr(why, "no_such_checkpoint.h5"), "missing checkpoint: %s", why);

  free(teacher);
  free(student);
  split_free(&sp);
  dataset_close(ds);
  features_free(&f);
}

/* float32 images of the fixture's shape; with nan, images 3 and 17 have a NaN pixel in channel 0. */
struct nan_ctx {
  int nan;
};
static int32_t nan_image(void *ctx, int64_t i, void *img, char *rel, size_t reln) {
  const struct nan_ctx *c = ctx;
  float *x = img;
  for (int ch = 0; ch < FF_C; ch++)
    for (int y = 0; y < FF_H; y++)
      for (int xx = 0; xx < FF_W; xx++) x[(ch * FF_H + y) * FF_W + xx] = (float)shardfix_pixel(i, ch, y, xx);
  if (c->nan && (i == 3 || i == 17)) x[FF_W + 1] = NAN;
  snprintf(rel, reln, "c%d/img%03d.tif", (int)(i % 3), (int)i);
  return (int32_t)(i % 3);
}

/* The file written while computed, with images left out (non-finite pixels) in two batches: the
 * other rows are where they belong, bit for bit the rows of the same set without the NaNs. */
static void test_features_dropped(const char *dir) {
  const char *names[3] = {"c0", "c1", "c2"};
  const double mean[FF_C] = {0.5, 0.5, 0.5}, std[FF_C] = {0.25, 0.25, 0.25};
  struct features out[2];
  for (int nan = 0; nan < 2; nan++) {
    char shards[512], run[512], ckpt[800], path[1000];
    snprintf(shards, sizeof shards, "%s/shards%d", dir, nan);
    snprintf(run, sizeof run, "%s/run%d", dir, nan);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.h5", run);
    fs_mkdir_p(shards);
    fs_mkdir_p(run);
    struct nan_ctx ctx = {nan};
    struct shardset ss = {FF_C, FF_H, FF_W, DATASET_F32, FF_N, 16, 3, names, NULL, mean, std, 0, "tiffs",
                          nan_image, &ctx};
    shardset_write(shards, &ss);
    static struct config cfg;
    ff_config(&cfg, run, shards, "");
    ff_make_checkpoint(&cfg, ckpt, 1, 2, 3);
    snprintf(cfg.features.subset, sizeof cfg.features.subset, "all");
    cfg.features.batch_size = 3;
    T_CHECK(features_run(&cfg) == 0, "features_run failed");
    snprintf(path, sizeof path, "%s/features_0002.h5", run);
    features_read(path, &out[nan]);
  }
  const struct features *a = &out[0], *b = &out[1];
  T_CHECK(a->n == FF_N && b->n == FF_N - 2, "%lld and %lld rows, want %d and %d", (long long)a->n, (long long)b->n,
          FF_N, FF_N - 2);
  int64_t j = 0;
  for (int64_t i = 0; i < a->n && j < b->n; i++) {
    if (i == 3 || i == 17) continue;
    T_CHECK(b->index[j] == i && b->labels[j] == a->labels[i] && !strcmp(b->paths[j], a->paths[i]),
            "row %lld: index %lld, want %lld", (long long)j, (long long)b->index[j], (long long)i);
    T_CHECK(memcmp(b->x + j * b->d, a->x + i * a->d, sizeof(float) * (size_t)a->d) == 0,
            "row %lld (image %lld) differs from the set without NaNs", (long long)j, (long long)i);
    j++;
  }
  features_free(&out[0]);
  features_free(&out[1]);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_features_dropped(t_scratch_dir("test_features_dropped"));
  log_init(0, t_verbose ? 1 : 0);
  test_resize_shape();
  test_prep();
  test_features_run(t_scratch_dir("test_features"));
  return t_finish();
}
