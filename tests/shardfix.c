/* tests/shardfix.c - small synthetic shard sets for the loader tests. */
#include "build_config.h"

#include "shardfix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "shards.h"
#include "shardset.h"

double shardfix_pixel(int64_t index, int c, int y, int x) {
  /* Smooth structure plus a hash-like term, in 0..~4000. */
  const uint64_t h = ((uint64_t)index * 2654435761u) ^ ((uint64_t)(c * 131 + y * 17 + x) * 40503u);
  return 1500.0 + 900.0 * sin(0.31 * x + 0.17 * y + 0.9 * c + 0.05 * (double)index) + (double)(h % 997) +
         100.0 * c;
}

/* The bad-image list and dtype the pixel callback needs. */
struct shardfix_ctx {
  int C, H, W, dtype;
  const int64_t *bad;
  int nbad, bad_channel;
};

static int32_t shardfix_image(void *ctx, int64_t i, void *img, char *rel, size_t reln) {
  const struct shardfix_ctx *f = ctx;
  int is_bad = 0;
  for (int b = 0; b < f->nbad; b++) is_bad |= f->bad[b] == i;
  for (int c = 0; c < f->C; c++)
    for (int y = 0; y < f->H; y++)
      for (int x = 0; x < f->W; x++) {
        double v = is_bad && c == f->bad_channel ? 1234.0 : shardfix_pixel(i, c, y, x);
        const size_t at = ((size_t)c * f->H + y) * f->W + x;
        if (f->dtype == DATASET_U16) ((uint16_t *)img)[at] = (uint16_t)v;
        else ((float *)img)[at] = (float)v;
      }
  const int32_t label = (int32_t)(i % 3);
  snprintf(rel, reln, "c%d/img%05lld.tif", label, (long long)i);
  return label;
}

void shardfix_make(const char *dir, int64_t n, int C, int H, int W, int dtype, int64_t per_shard,
                   const int64_t *bad, int nbad, int bad_channel) {
  static const char *const classes[3] = {"c0", "c1", "c2"};
  double *mean = xcalloc((size_t)C, sizeof *mean), *std = xcalloc((size_t)C, sizeof *std);
  for (int c = 0; c < C; c++) {
    mean[c] = 0.3 + 0.05 * c;
    std[c] = 0.2 + 0.01 * c;
  }
  struct shardfix_ctx f = {C, H, W, dtype, bad, nbad, bad_channel};
  const struct shardset s = {.channels = C, .height = H, .width = W, .dtype = dtype, .count = n,
                             .per_shard = per_shard, .nclasses = 3, .class_names = classes,
                             .mean = mean, .std = std, .tiff_dir = "/nonexistent/tiffs",
                             .image = shardfix_image, .ctx = &f};
  shardset_write(dir, &s);
  free(mean);
  free(std);
}
