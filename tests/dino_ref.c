/* tests/dino_ref.c - the settings of the PyTorch DINO reference file (tests/data/dino_tiny.h5). */
#include "build_config.h"

#include "dino_ref.h"

#include <string.h>

#include "testutil.h"

void dino_ref_read(const char *file, struct dino_ref *r) {
  memset(r, 0, sizeof *r);
  r->B = (int)t_h5_attr(file, "batch");
  r->ncrops = (int)t_h5_attr(file, "ncrops");
  r->nl = (int)t_h5_attr(file, "n_local");
  r->G = (int)t_h5_attr(file, "global_size");
  r->L = (int)t_h5_attr(file, "local_size");
  r->K = (int)t_h5_attr(file, "out_dim");
  struct dino_spec *s = &r->spec;
  s->vit.patch = (int)t_h5_attr(file, "patch");
  s->vit.in_chans = (int)t_h5_attr(file, "chans");
  s->vit.dim = (int)t_h5_attr(file, "embed");
  s->vit.depth = (int)t_h5_attr(file, "depth");
  s->vit.heads = (int)t_h5_attr(file, "heads");
  s->vit.mlp_hidden = s->vit.dim * (int)t_h5_attr(file, "mlp_ratio");
  s->vit.pos_grid = r->G / s->vit.patch; /* pos_embed was built for the global size */
  s->vit.drop_path_rate = 0;
  s->head.hidden = (int)t_h5_attr(file, "hidden");
  s->head.bottleneck = (int)t_h5_attr(file, "bottleneck");
  s->head.out_dim = r->K;
  s->head.nlayers = (int)t_h5_attr(file, "nlayers");
  s->head.norm_last_layer = 1; /* README: norm_last_layer=True */
  r->lr = t_h5_attr(file, "lr");
  r->wd = t_h5_attr(file, "wd");
  r->clip = t_h5_attr(file, "clip");
  r->momentum = t_h5_attr(file, "momentum");
  r->epoch = (int)t_h5_attr(file, "epoch");
  r->freeze_last_layer = (int)t_h5_attr(file, "freeze_last_layer");
}

void dino_ref_loss_init(const char *file, const struct dino_ref *r, struct dino_loss *loss, const struct ops *ops) {
  const double teacher_temp = t_h5_attr(file, "teacher_temp");
  dino_loss_init(loss, ops, r->K, r->ncrops, teacher_temp, teacher_temp, 0, 1, t_h5_attr(file, "student_temp"),
                 t_h5_attr(file, "center_momentum"));
}
