/* tests/unit/analysis/test_knn_pixels.c - the raw-pixel kNN baseline on a tiny shard set written with the
 * shard_writer API: the pixel vectors against a direct computation (channel selection, centre
 * crop with and without padding, min-max, 2x2 bilinear downsampling, normalisation, L2), the
 * constant-channel case, knn_run with baselines, and a features file of another shard set. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features_io.h"
#include "analysis/knn.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "input/config.h"
#include "tests/fixtures/knn_fixture.h"
#include "tests/fixtures/testutil.h"

enum { C = FX_C, H = FX_H, W = FX_W, NCLS = FX_NCLS, NIMG = FX_NIMG };
static char base[512], shard_dir[600], run_dir[600];

static void parse_deck(const char *text, struct config *cfg) {
  char err[8192];
  if (config_parse_text("test.nml", text, cfg, err, sizeof err) != 0) {
    fprintf(stderr, "deck errors:\n%s\n", err);
    exit(99);
  }
}

/* The expected vector of image idx, computed directly: channels sel, crop (top, left, size cs;
 * cs 0 = none), min-max in double, optional 2x2 mean (bilinear at exactly half size), normalise,
 * L2.  Returns 0, or -1 if a channel is constant (then the row must be zero). */
static int expected_row(int64_t idx, const int *sel, int nsel, int top, int left, int cs, int half, float *out) {
  int h = cs ? cs : H, w = cs ? cs : W;
  static double img[C][32][32];
  for (int s = 0; s < nsel; s++) {
    double lo = INFINITY, hi = -INFINITY;
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        int sy = y + top, sx = x + left;
        double v = sy >= 0 && sy < H && sx >= 0 && sx < W ? fx_images[idx][sel[s]][sy][sx] : 0.0;
        img[s][y][x] = v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
    if (hi == lo) return -1;
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) img[s][y][x] = (double)(float)((img[s][y][x] - lo) / (hi - lo));
  }
  int oh = half ? h / 2 : h, ow = half ? w / 2 : w;
  double ss = 0;
  for (int s = 0; s < nsel; s++)
    for (int y = 0; y < oh; y++)
      for (int x = 0; x < ow; x++) {
        double v = half ? 0.25 * (img[s][2 * y][2 * x] + img[s][2 * y][2 * x + 1] + img[s][2 * y + 1][2 * x] +
                                  img[s][2 * y + 1][2 * x + 1])
                        : img[s][y][x];
        v = (v - (double)(float)fx_mean[sel[s]]) / (double)(float)fx_std[sel[s]];
        out[(s * oh + y) * ow + x] = (float)v;
        ss += v * v;
      }
  for (int i = 0; i < nsel * oh * ow; i++) out[i] = (float)(out[i] / sqrt(ss));
  return 0;
}

/* Every row's vector through the kNN's fill, asked for in a scrambled order (as a rank's share
 * is), put back in row order; the zero rows counted by the collective close. */
static float *pixel_vectors(const struct config *cfg, const struct features *f, const char *file, int side, int *dim,
                            int64_t *invalid) {
  struct knn_pixels *p = knn_pixels_open(cfg, f, file, side);
  *dim = knn_pixels_dim(p);
  int64_t *rows = malloc((size_t)f->n * sizeof *rows);
  for (int64_t i = 0; i < f->n; i++) rows[i] = (i * 37 + 11) % f->n; /* 37 is prime to the row counts used */
  float *m = malloc((size_t)f->n * (size_t)*dim * sizeof *m), *out = malloc((size_t)f->n * (size_t)*dim * sizeof *out);
  knn_pixels_rows(p, rows, f->n, m);
  for (int64_t i = 0; i < f->n; i++) memcpy(out + (size_t)rows[i] * *dim, m + (size_t)i * *dim, (size_t)*dim * sizeof *m);
  *invalid = knn_pixels_close(p);
  free(rows);
  free(m);
  return out;
}

static void check_vectors(const char *deck_extra, int side, const int *sel, int nsel, int top, int left, int cs,
                          int half, const char *what) {
  char deck[8192];
  snprintf(deck, sizeof deck, "&control calculation = 'knn', run_dir = '%s' /\n&data shard_dir = '%s' %s /\n",
           run_dir, shard_dir, deck_extra);
  static struct config cfg;
  parse_deck(deck, &cfg);
  struct features f;
  fx_make_features(&f, 80);
  int dim = 0;
  int64_t invalid = -1;
  float *px = pixel_vectors(&cfg, &f, "feats.h5", side, &dim, &invalid);
  int h = cs ? cs : H, w = cs ? cs : W;
  int want_dim = nsel * (half ? h / 2 : h) * (half ? w / 2 : w);
  T_CHECK(dim == want_dim, "%s: dim %d, wanted %d", what, dim, want_dim);
  float *want = malloc((size_t)want_dim * sizeof *want);
  int64_t want_invalid = 0;
  double worst = 0;
  for (int i = 0; i < f.n && dim == want_dim; i++) {
    const float *row = px + (size_t)i * dim;
    if (expected_row(f.index[i], sel, nsel, top, left, cs, half, want) != 0) {
      want_invalid++;
      int zero = 1;
      for (int j = 0; j < dim; j++) zero &= row[j] == 0.0f;
      T_CHECK(zero, "%s: row %d (image %lld, constant channel) is zero", what, i, (long long)f.index[i]);
      continue;
    }
    double e = t_rel_err_f32(row, want, (size_t)dim);
    worst = e > worst ? e : worst;
  }
  if (t_verbose) printf("  %s: worst relative error %.2e, %lld invalid\n", what, worst, (long long)invalid);
  T_CHECK(worst <= 2e-6, "%s: pixel vectors differ from the direct computation (rel err %.2e)", what, worst);
  T_CHECK(invalid == want_invalid, "%s: %lld invalid images, wanted %lld", what, (long long)invalid,
          (long long)want_invalid);
  free(want);
  free(px);
  features_free(&f);
}

static void test_vectors(void) {
  const int all[C] = {0, 1, 2}, sel20[2] = {2, 0}, sel0[1] = {0};
  /* all channels, native size: image 17's constant channel makes it invalid */
  check_vectors("", 0, all, 3, 0, 0, 0, 0, "all channels, native size");
  /* channels 2, 0 (reordered), 12 -> 6 bilinear = 2x2 mean; image 17 is valid without channel 1 */
  check_vectors(", channels = 2, 0", 6, sel20, 2, 0, 0, 0, 1, "channels 2,0, 6x6");
  /* centre crop 8 of 12: offset round(2.0) = 2 */
  check_vectors(", channels = 0, center_crop = 8", 0, sel0, 1, 2, 2, 8, 0, "crop 8");
  /* crop 9: offset round(1.5) = 2 (halves to even, as Python's round) */
  check_vectors(", channels = 0, center_crop = 9", 0, sel0, 1, 2, 2, 9, 0, "crop 9");
  /* crop 15 > 12: zero padding (3 // 2 = 1 before), so the image sits at offset 1 */
  check_vectors(", channels = 0, center_crop = 15", 0, sel0, 1, -1, -1, 15, 0, "crop 15 (padded)");
}

static void test_run_with_baseline(void) {
  struct features f;
  fx_make_features(&f, 80);
  char path[4400], deck[8192];
  snprintf(path, sizeof path, "%s/features_0002.h5", run_dir);
  features_write(path, &f);
  features_free(&f);
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n&data shard_dir = '%s', channels = 0, 2 /\n"
           "&knn k = 1, 5, pixel_size = 6, train_fraction = 0.5 /\n",
           run_dir, shard_dir);
  static struct config cfg;
  parse_deck(deck, &cfg);
  T_CHECK(knn_run(&cfg) == 0, "knn_run with the raw-pixel baseline");
  char h5[4400];
  snprintf(h5, sizeof h5, "%s/knn.h5", run_dir);
  size_t n;
  double *top1 = t_h5_read_f64(h5, "/raw_pixels/top1", &n);
  T_CHECK(n == 2, "raw_pixels/top1 has one value per k");
  /* the bright square gives the class away */
  T_NEAR(top1[0], 100.0, 0, "raw-pixel 1-NN Top-1");
  T_NEAR(t_h5_attr(h5, "n_test"), 40, 0, "40 test rows");
  free(top1);
  char txt[4400];
  snprintf(txt, sizeof txt, "%s/knn.txt", run_dir);
  FILE *fp = fopen(txt, "r");
  static char buf[1 << 16];
  size_t len = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
  buf[len] = '\0';
  if (fp) fclose(fp);
  T_CHECK(strstr(buf, "raw pixels 6x6 (72-d)") != NULL, "knn.txt has the raw-pixel column");
  T_CHECK(strstr(buf, "Per-class F1 at k =") != NULL, "knn.txt has the side-by-side per-class F1");

  /* Without a shard set the baseline is left out with a note, and the run still succeeds. */
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n&data shard_dir = '%s/none' /\n&knn k = 3 /\n", run_dir,
           base);
  parse_deck(deck, &cfg);
  T_CHECK(knn_run(&cfg) == 0, "knn_run without a shard set");
  fp = fopen(txt, "r");
  len = fp ? fread(buf, 1, sizeof buf - 1, fp) : 0;
  buf[len] = '\0';
  if (fp) fclose(fp);
  T_CHECK(strstr(buf, "raw-pixel baseline left out") != NULL, "note about the missing shard set");
}

struct pixels_call {
  struct config cfg;
  struct features *f;
};

static int pixel_features(void *arg) {
  struct pixels_call *c = arg;
  knn_pixels_close(knn_pixels_open(&c->cfg, c->f, "other.h5", 4));
  return 0;
}

/* A features file whose labels disagree with the shard set is refused. */
static void test_wrong_dataset(void) {
  struct features f;
  fx_make_features(&f, 30);
  f.labels[4] = (f.labels[4] + 1) % NCLS;
  char deck[8192];
  snprintf(deck, sizeof deck, "&control calculation = 'knn' /\n&data shard_dir = '%s' /\n", shard_dir);
  static struct pixels_call call;
  call.f = &f;
  parse_deck(deck, &call.cfg);
  char buf[4096];
  T_CHECK(t_run_child(pixel_features, &call, 0, buf, sizeof buf) == 3, "exit 3 for a foreign features file: %s", buf);
  T_CHECK(strstr(buf, "other.h5 row 4") && strstr(buf, "do not belong together"), "message: %s", buf);
  features_free(&f);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  log_init(0, t_verbose ? 1 : 0);
  snprintf(base, sizeof base, "%s", t_scratch_dir("test_knn_pixels"));
  snprintf(shard_dir, sizeof shard_dir, "%s/shards", base);
  snprintf(run_dir, sizeof run_dir, "%s/run", base);
  fs_mkdir_p(run_dir);
  fx_make_shards(shard_dir);
  test_vectors();
  test_run_with_baseline();
  test_wrong_dataset();
  return t_finish();
}
