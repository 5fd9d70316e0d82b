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

uint16_t fx_images[FX_NIMG][FX_C][FX_H][FX_W];
int32_t fx_labels[FX_NIMG];
const double fx_mean[FX_C] = {0.3, 0.5, 0.2}, fx_std[FX_C] = {0.2, 0.25, 0.1};
static const char *const class_names[FX_NCLS] = {"alpha", "beta", "gamma"};

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
  char path[4400];
  snprintf(path, sizeof path, "%s/shard-00000.h5", shard_dir);
  struct shard_writer *w = shard_writer_create(path, FX_C, FX_H, FX_W, DATASET_U16, FX_NIMG);
  for (int i = 0; i < FX_NIMG; i++) {
    char rel[64];
    snprintf(rel, sizeof rel, "%s/img%03d.tif", class_names[fx_labels[i]], i);
    shard_writer_add(w, fx_images[i], fx_labels[i], i, rel);
  }
  shard_writer_close(w);
  const char *chn[FX_C] = {"DAPI", "BF", "PE"}, *files[1] = {"shard-00000.h5"};
  const int64_t counts[1] = {FX_NIMG};
  struct manifest_info m;
  memset(&m, 0, sizeof m);
  m.channels = FX_C;
  m.height = FX_H;
  m.width = FX_W;
  m.dtype = DATASET_U16;
  m.count = m.source_count = FX_NIMG;
  m.nclasses = FX_NCLS;
  m.class_names = (const char *const *)class_names;
  m.channel_names = chn;
  m.nshards = 1;
  m.shard_files = files;
  m.shard_counts = counts;
  m.labels = fx_labels;
  m.mean = fx_mean;
  m.std = fx_std;
  m.stats_images = 18;
  m.tiff_dir = "/nonexistent/tiffs";
  m.stats_fraction = 0.2;
  m.stats_seed = 42;
  m.source_dtype = "uint16";
  manifest_write(shard_dir, &m);
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
