/* tests/feat_mkdata.c - the features/attention fixture on disk for the shell tests:
 *
 *   feat_mkdata DIR
 * writes DIR/shards (feat_fixture.h: 40 images, 3 channels, 20x20) and DIR/ckpt.h5, a checkpoint of
 * the fixture deck's tiny ViT (channels 0, 2; student seed 1, teacher seed 2; epoch 3). */
#include "build_config.h"

#include <stdio.h>

#include "config.h"
#include "feat_fixture.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: feat_mkdata DIR\n");
    return 2;
  }
  char shards[4096], ckpt[4096];
  snprintf(shards, sizeof shards, "%s/shards", argv[1]);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt.h5", argv[1]);
  static struct config cfg;
  ff_config(&cfg, argv[1], shards, "");
  ff_make_shards(shards);
  ff_make_checkpoint(&cfg, ckpt, 1, 2, 3);
  return 0;
}
