/* model_config.c - the model's dimensions from the input deck (&model), for the training loop and tools. */
#include "build_config.h"

#include <string.h>

#include "input/config.h"
#include "model/dino_model.h"
#include "model/model_config.h"

void model_config_spec(struct dino_spec *s, const struct config *cfg, int in_chans) {
  memset(s, 0, sizeof *s);
  const int p = (int)cfg->model.patch_size;
  s->vit.patch = p;
  s->vit.in_chans = in_chans;
  s->vit.dim = config_embed_dim(cfg);
  s->vit.depth = config_depth(cfg);
  s->vit.heads = config_num_heads(cfg);
  s->vit.mlp_hidden = config_mlp_hidden(cfg);
  /* Upstream builds every ViT for img_size 224 and interpolates for other crop sizes, so the
   * position embedding has (224 / p)^2 patch positions whatever the crops are (and a checkpoint
   * of the released model loads unchanged). */
  s->vit.pos_grid = MODEL_POS_IMG_SIZE / p;
  if (s->vit.pos_grid < 1)
    scd_fatal(SCD_EXIT_INPUT, "&model: patch_size = %d is larger than %d", p, MODEL_POS_IMG_SIZE);
  s->vit.drop_path_rate = cfg->model.drop_path_rate;
  s->vit.gelu_approx = !strcmp(cfg->model.gelu_approximate, "tanh");
  vit_check_dims(&s->vit);
  s->head.in_dim = s->vit.dim;
  s->head.hidden = (int)cfg->model.head_hidden_dim;
  s->head.bottleneck = (int)cfg->model.head_bottleneck_dim;
  s->head.out_dim = (int)cfg->model.out_dim;
  s->head.nlayers = (int)cfg->model.head_nlayers;
  s->head.norm_last_layer = cfg->model.norm_last_layer;
  s->head.gelu_approx = s->vit.gelu_approx;
}
