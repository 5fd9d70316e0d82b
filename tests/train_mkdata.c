/* tests/train_mkdata.c - a tiny, easy shard set for the training tests (tests/shardset.c).
 *
 *   train_mkdata DIR N C H W [STD [INVALID]]
 * writes DIR/manifest.h5 and shards of N uint16 images [C][H][W] in 3 classes: class k has a bright
 * blob whose position depends on k and the channel, on a noisy background (the noise depends only
 * on the image index).  STD (default: measured-like 0.2) is written as every channel's std in the
 * manifest; a tiny value blows the normalised inputs up to overflow (the non-finite-loss test).
 * INVALID (default 0): the first INVALID images get a constant non-zero channel 0, which min-max
 * scaling turns into NaN, so the loader leaves them out (the dropped-batch test). */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fsutil.h"
#include "rng.h"
#include "shards.h"
#include "shardset.h"

/* Class i % 3: a blob whose place depends on the class and channel; noise keyed by the index. */
struct train_mkdata_shape {
  int C, H, W;
  int64_t invalid;
};

static int32_t train_mkdata_image(void *ctx, int64_t i, void *img, char *rel, size_t reln) {
  const struct train_mkdata_shape *shape = ctx;
  const int C = shape->C, H = shape->H, W = shape->W;
  uint16_t *px = img;
  const int cls = (int)(i % 3);
  struct rng r;
  rng_init(&r, 7, RNG_DOMAIN_TEST, (uint64_t)i, 0);
  for (int c = 0; c < C; c++) {
    const double cy = H * (0.25 + 0.25 * ((cls + c) % 3)), cx = W * (0.3 + 0.2 * cls);
    const double rad = 0.12 * (H < W ? H : W) * (1 + 0.3 * c);
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        const double d2 = ((y - cy) * (y - cy) + (x - cx) * (x - cx)) / (rad * rad);
        const double v = 300 + 2500 * exp(-0.5 * d2) + 150 * rng_uniform(&r);
        px[((size_t)c * H + y) * W + x] = (uint16_t)v;
      }
  }
  if (i < shape->invalid)
    for (size_t p = 0; p < (size_t)H * W; p++) px[p] = 1000;
  snprintf(rel, reln, "class%d/img%05lld.tif", cls, (long long)i);
  return cls;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: train_mkdata DIR N C H W [STD [INVALID]]\n");
    return 2;
  }
  const char *dir = argv[1];
  const int64_t n = atoll(argv[2]);
  const int C = atoi(argv[3]), H = atoi(argv[4]), W = atoi(argv[5]);
  const double std_all = argc > 6 ? atof(argv[6]) : 0.2;
  const int64_t invalid = argc > 7 ? atoll(argv[7]) : 0;
  if (n < 1 || C < 1 || C > 16 || H < 4 || W < 4) {
    fprintf(stderr, "train_mkdata: bad sizes\n");
    return 2;
  }
  fs_mkdir_p(dir);
  static const char *const classes[3] = {"class0", "class1", "class2"};
  double mean[16], sd[16];
  for (int c = 0; c < C; c++) {
    mean[c] = 0.25;
    sd[c] = std_all;
  }
  struct train_mkdata_shape shape = {C, H, W, invalid};
  const struct shardset s = {.channels = C, .height = H, .width = W, .dtype = DATASET_U16, .count = n,
                             .per_shard = 16, .nclasses = 3, .class_names = classes, .mean = mean,
                             .std = sd, .tiff_dir = "/nonexistent/train_mkdata",
                             .image = train_mkdata_image, .ctx = &shape};
  shardset_write(dir, &s);
  return 0;
}
