/* tests/train_mkdata.c - a tiny, easy shard set for the training tests (shard_writer API).
 *
 *   train_mkdata DIR N C H W [STD]
 * writes DIR/manifest.h5 and shards of N uint16 images [C][H][W] in 3 classes: class k has a bright
 * blob whose position depends on k and the channel, on a noisy background (the noise depends only
 * on the image index).  STD (default: measured-like 0.2) is written as every channel's std in the
 * manifest; a tiny value blows the normalised inputs up to overflow (the non-finite-loss test). */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "rng.h"
#include "shards.h"

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: train_mkdata DIR N C H W [STD]\n");
    return 2;
  }
  const char *dir = argv[1];
  const int64_t n = atoll(argv[2]);
  const int C = atoi(argv[3]), H = atoi(argv[4]), W = atoi(argv[5]);
  const double std_all = argc > 6 ? atof(argv[6]) : 0.2;
  if (n < 1 || C < 1 || C > 16 || H < 4 || W < 4) {
    fprintf(stderr, "train_mkdata: bad sizes\n");
    return 2;
  }
  fs_mkdir_p(dir);
  const int per_shard = 16, nclasses = 3;
  const int64_t nshards = (n + per_shard - 1) / per_shard;
  uint16_t *img = calloc((size_t)C * H * W, sizeof *img);
  char **files = calloc((size_t)nshards, sizeof *files);
  int64_t *counts = calloc((size_t)nshards, sizeof *counts);
  int32_t *labels = calloc((size_t)n, sizeof *labels);
  for (int64_t k = 0; k < nshards; k++) {
    char name[64], path[4096];
    snprintf(name, sizeof name, "shard-%05lld.h5", (long long)k);
    files[k] = strdup(name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const int64_t first = k * per_shard, last = first + per_shard < n ? first + per_shard : n;
    struct shard_writer *w = shard_writer_create(path, C, H, W, DATASET_U16, last - first);
    for (int64_t i = first; i < last; i++) {
      const int cls = (int)(i % nclasses);
      struct rng r;
      rng_init(&r, 7, RNG_DOMAIN_TEST, (uint64_t)i, 0);
      for (int c = 0; c < C; c++) {
        const double cy = H * (0.25 + 0.25 * ((cls + c) % 3)), cx = W * (0.3 + 0.2 * cls);
        const double rad = 0.12 * (H < W ? H : W) * (1 + 0.3 * c);
        for (int y = 0; y < H; y++)
          for (int x = 0; x < W; x++) {
            const double d2 = ((y - cy) * (y - cy) + (x - cx) * (x - cx)) / (rad * rad);
            const double v = 300 + 2500 * exp(-0.5 * d2) + 150 * rng_uniform(&r);
            img[((size_t)c * H + y) * W + x] = (uint16_t)v;
          }
      }
      labels[i] = cls;
      char rel[64];
      snprintf(rel, sizeof rel, "class%d/img%05lld.tif", cls, (long long)i);
      shard_writer_add(w, img, cls, i, rel);
    }
    counts[k] = last - first;
    shard_writer_close(w);
  }
  const char *classes[3] = {"class0", "class1", "class2"};
  char **chn = calloc((size_t)C, sizeof *chn);
  double *mean = calloc((size_t)C, sizeof *mean), *sd = calloc((size_t)C, sizeof *sd);
  for (int c = 0; c < C; c++) {
    char nm[16];
    snprintf(nm, sizeof nm, "ch%d", c);
    chn[c] = strdup(nm);
    mean[c] = 0.25;
    sd[c] = std_all;
  }
  struct manifest_info m;
  memset(&m, 0, sizeof m);
  m.channels = C;
  m.height = H;
  m.width = W;
  m.dtype = DATASET_U16;
  m.count = n;
  m.source_count = n;
  m.nclasses = nclasses;
  m.class_names = classes;
  m.channel_names = (const char *const *)chn;
  m.nshards = (int)nshards;
  m.shard_files = (const char *const *)files;
  m.shard_counts = counts;
  m.labels = labels;
  m.mean = mean;
  m.std = sd;
  m.stats_images = n;
  m.tiff_dir = "/nonexistent/train_mkdata";
  m.stats_fraction = 0.2;
  m.stats_seed = 42;
  m.source_dtype = "uint16";
  manifest_write(dir, &m);
  for (int64_t k = 0; k < nshards; k++) free(files[k]);
  for (int c = 0; c < C; c++) free(chn[c]);
  free(files);
  free(chn);
  free(counts);
  free(labels);
  free(mean);
  free(sd);
  free(img);
  return 0;
}
