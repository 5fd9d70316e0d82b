/* tests/knn_fixture.c - a tiny shard set and matching features files for the kNN tests. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "knn_fixture.h"
#include "rng.h"
#include "shards.h"
#include "shardset.h"

uint16_t fx_images[FX_NIMG][FX_C][FX_H][FX_W];
int32_t fx_labels[FX_NIMG];
const double fx_mean[FX_C] = {0.3, 0.5, 0.2}, fx_std[FX_C] = {0.2, 0.25, 0.1};
static const char *const class_names[FX_NCLS] = {"alpha", "beta", "gamma"};

/* Image i of fx_images, with its class's directory as the relative path. */
static int32_t fx_image(void *ctx, int64_t i, void *img, char *rel, size_t reln) {
  (void)ctx;
  memcpy(img, fx_images[i], sizeof fx_images[i]);
  snprintf(rel, reln, "%s/img%03d.tif", class_names[fx_labels[i]], (int)i);
  return fx_labels[i];
}

void fx_make_shards(const char *shard_dir) {
  struct rng r;
  rng_init(&r, 3, RNG_DOMAIN_TEST, 20, 0);
  for (int i = 0; i < FX_NIMG; i++) {
    int c = i * FX_NCLS / FX_NIMG;
    fx_labels[i] = c;
    for (int ch = 0; ch < FX_C; ch++)
      for (int y = 0; y < FX_H; y++)
        for (int x = 0; x < FX_W; x++) {
          double v = 100 + (double)rng_below(&r, 200);
          if (ch == 0 && y >= 2 + 3 * c && y < 6 + 3 * c && x >= 1 + 3 * c && x < 5 + 3 * c) v += 3000;
          if (ch == 1) v += 40.0 * x + 5.0 * y;
          fx_images[i][ch][y][x] = (uint16_t)v;
        }
  }
  for (int y = 0; y < FX_H; y++)
    for (int x = 0; x < FX_W; x++) fx_images[17][1][y][x] = 777;
  fs_mkdir_p(shard_dir);
  static const char *const chn[FX_C] = {"DAPI", "BF", "PE"};
  const struct shardset s = {.channels = FX_C, .height = FX_H, .width = FX_W, .dtype = DATASET_U16,
                             .count = FX_NIMG, .per_shard = FX_NIMG, .nclasses = FX_NCLS,
                             .class_names = class_names, .channel_names = chn, .mean = fx_mean,
                             .std = fx_std, .stats_images = 18, .tiff_dir = "/nonexistent/tiffs",
                             .image = fx_image, .ctx = NULL};
  shardset_write(shard_dir, &s);
}

void fx_make_features(struct features *f, int n) {
  memset(f, 0, sizeof *f);
  f->n = n;
  f->d = 4;
  f->nclasses = FX_NCLS;
  f->x = malloc((size_t)n * 4 * sizeof(float));
  f->labels = malloc((size_t)n * sizeof(int32_t));
  f->index = malloc((size_t)n * sizeof(int64_t));
  f->paths = malloc((size_t)n * sizeof(char *));
  f->class_names = malloc(FX_NCLS * sizeof(char *));
  for (int i = 0; i < n; i++) {
    int64_t idx = (int64_t)((i * 37) % FX_NIMG); /* 37 is coprime to 90 */
    f->index[i] = idx;
    f->labels[i] = fx_labels[idx];
    for (int j = 0; j < 4; j++) f->x[i * 4 + j] = (float)cos(1.3 * i + j) + (j == fx_labels[idx] ? 1.5f : 0.0f);
    char p[64];
    snprintf(p, sizeof p, "%s/img%03d.tif", class_names[fx_labels[idx]], (int)idx);
    f->paths[i] = strdup(p);
  }
  features_l2_normalize(f->x, n, 4);
  for (int c = 0; c < FX_NCLS; c++) f->class_names[c] = strdup(class_names[c]);
  snprintf(f->checkpoint, sizeof f->checkpoint, "ckpt.h5");
  snprintf(f->checkpoint_key, sizeof f->checkpoint_key, "student");
  f->epoch = 2;
}
