/* model_buckets.c - gradient bucket sizes of the ViT + DINO head described by a deck's &model.
 * Shapes from SCDINO_ALGORITHM.md sections 1-2 (DINO's vision_transformer.py and DINOHead). */
#include "build_config.h"

#include <stdio.h>

#include "check.h"
#include "config.h"
#include "model_buckets.h"

/* The position embedding is sized for 224-pixel images whatever the crop size (img_size=[224]). */
#define POS_IMG 224

static void put(size_t sizes[], int max, int *k, size_t v) {
  if (*k < max) sizes[*k] = v;
  (*k)++;
}

int bench_model_buckets(const struct config *cfg, size_t sizes[], int max) {
  size_t d = (size_t)config_embed_dim(cfg), hid = (size_t)config_mlp_hidden(cfg);
  size_t p = (size_t)cfg->model.patch_size, c = (size_t)cfg->data.n_channels;
  int depth = config_depth(cfg), k = 0;
  if (c == 0) return -1;

  /* Head last layer: weight_v (K x bottleneck), plus weight_g (K) when it is trained. */
  size_t kout = (size_t)cfg->model.out_dim, bn = (size_t)cfg->model.head_bottleneck_dim;
  put(sizes, max, &k, MUL_SIZE(kout, bn) + (cfg->model.norm_last_layer ? 0 : kout));
  /* Head MLP: Linear(D, hidden), (nlayers-2) x Linear(hidden, hidden), Linear(hidden, bottleneck),
   * all with biases; a single layer is Linear(D, bottleneck). */
  size_t hh = (size_t)cfg->model.head_hidden_dim, nl = (size_t)cfg->model.head_nlayers;
  if (nl == 1)
    put(sizes, max, &k, MUL_SIZE(d, bn) + bn);
  else
    put(sizes, max, &k,
        MUL_SIZE(d, hh) + hh + MUL_SIZE(nl - 2, MUL_SIZE(hh, hh) + hh) + MUL_SIZE(hh, bn) + bn);
  put(sizes, max, &k, 2 * d); /* final LayerNorm */
  /* A block: norm1 (2D), qkv (3D x D + 3D), proj (D x D + D), norm2 (2D), fc1 (H x D + H),
   * fc2 (D x H + D): 12 tensors, 4D^2 + 2HD + H + 9D elements (12D^2 + 13D for H = 4D). */
  size_t block = 4 * MUL_SIZE(d, d) + 2 * MUL_SIZE(hid, d) + hid + 9 * d;
  for (int b = 0; b < depth; b++) put(sizes, max, &k, block);
  /* Patch embedding Conv2d(C, D, p, p) with bias, cls token (D), position embedding (1+N0) x D. */
  size_t side = POS_IMG / p;
  put(sizes, max, &k, MUL_SIZE(MUL_SIZE(c, p * p), d) + d + d + (1 + side * side) * d);
  return k;
}

const char *bench_model_bucket_name(const struct config *cfg, int i, char *buf, size_t n) {
  int depth = config_depth(cfg);
  if (i == 0)
    snprintf(buf, n, "head.last_layer");
  else if (i == 1)
    snprintf(buf, n, "head.mlp");
  else if (i == 2)
    snprintf(buf, n, "norm");
  else if (i < 3 + depth)
    snprintf(buf, n, "blocks.%d", depth - 1 - (i - 3));
  else
    snprintf(buf, n, "patch_embed+cls_token+pos_embed");
  return buf;
}
