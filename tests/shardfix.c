/* tests/shardfix.c - small synthetic shard sets for the loader tests. */
#include "build_config.h"

#include "shardfix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fsutil.h"
#include "shards.h"

double shardfix_pixel(int64_t index, int c, int y, int x) {
  /* Smooth structure plus a hash-like term, in 0..~4000. */
  const uint64_t h = ((uint64_t)index * 2654435761u) ^ ((uint64_t)(c * 131 + y * 17 + x) * 40503u);
  return 1500.0 + 900.0 * sin(0.31 * x + 0.17 * y + 0.9 * c + 0.05 * (double)index) + (double)(h % 997) +
         100.0 * c;
}

void shardfix_make(const char *dir, int64_t n, int C, int H, int W, int dtype, int64_t per_shard,
                   const int64_t *bad, int nbad, int bad_channel) {
  const int64_t nshards = (n + per_shard - 1) / per_shard;
  const size_t npix = (size_t)C * H * W;
  void *img = xmalloc(npix * dataset_dtype_size(dtype));
  char **files = xcalloc((size_t)nshards, sizeof *files);
  int64_t *counts = xcalloc((size_t)nshards, sizeof *counts);
  int32_t *labels = xcalloc((size_t)n, sizeof *labels);
  for (int64_t k = 0; k < nshards; k++) {
    char name[64], path[4096];
    snprintf(name, sizeof name, "shard-%05lld.h5", (long long)k);
    files[k] = xstrdup(name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const int64_t first = k * per_shard, last = first + per_shard < n ? first + per_shard : n;
    struct shard_writer *w = shard_writer_create(path, C, H, W, dtype, last - first);
    for (int64_t i = first; i < last; i++) {
      int is_bad = 0;
      for (int b = 0; b < nbad; b++) is_bad |= bad[b] == i;
      for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
          for (int x = 0; x < W; x++) {
            double v = is_bad && c == bad_channel ? 1234.0 : shardfix_pixel(i, c, y, x);
            const size_t at = ((size_t)c * H + y) * W + x;
            if (dtype == DATASET_U16) ((uint16_t *)img)[at] = (uint16_t)v;
            else ((float *)img)[at] = (float)v;
          }
      labels[i] = (int32_t)(i % 3);
      char rel[64];
      snprintf(rel, sizeof rel, "c%d/img%05lld.tif", labels[i], (long long)i);
      shard_writer_add(w, img, labels[i], i, rel);
    }
    counts[k] = last - first;
    shard_writer_close(w);
  }
  static const char *const classes[3] = {"c0", "c1", "c2"};
  char **chn = xcalloc((size_t)C, sizeof *chn);
  double *mean = xcalloc((size_t)C, sizeof *mean), *std = xcalloc((size_t)C, sizeof *std);
  for (int c = 0; c < C; c++) {
    char nm[16];
    snprintf(nm, sizeof nm, "ch%d", c);
    chn[c] = xstrdup(nm);
    mean[c] = 0.3 + 0.05 * c;
    std[c] = 0.2 + 0.01 * c;
  }
  struct manifest_info m;
  memset(&m, 0, sizeof m);
  m.channels = C;
  m.height = H;
  m.width = W;
  m.dtype = dtype;
  m.count = n;
  m.source_count = n;
  m.nclasses = 3;
  m.class_names = classes;
  m.channel_names = (const char *const *)chn;
  m.nshards = (int)nshards;
  m.shard_files = (const char *const *)files;
  m.shard_counts = counts;
  m.labels = labels;
  m.mean = mean;
  m.std = std;
  m.stats_images = n;
  m.tiff_dir = "/nonexistent/tiffs";
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
  free(std);
  free(img);
}
