/* tests/dino_ref.c - the settings of the PyTorch DINO reference file (tests/data/dino_tiny.h5). */
#include "build_config.h"

#include "dino_ref.h"

#include <stdio.h>
#include <stdlib.h>
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

void dino_ref_run_init(const char *file, const struct dino_ref *r, const struct ops *ops, struct dino_ref_run *s) {
  memset(s, 0, sizeof *s);
  s->m = dino_model_create(ops, &r->spec);
  dino_ref_load_params(file, ops, &s->m->tt, "/init/student", s->m->student);
  dino_model_copy_student_to_teacher(s->m);
  dino_model_plan(s->m, r->B, r->nl, r->G, r->L);
  dino_ref_loss_init(file, r, &s->loss, ops);
  optim_init(&s->opt, ops, &s->m->tt);
  vit_infer_plan(&s->ip, &s->is, &s->m->vit, &s->aa, ops, "attn", 2 * r->B, r->G, r->G);
  s->N = vit_tokens(&s->m->vit, r->G, r->G);
  s->attn = ops->alloc((size_t)2 * r->B * r->spec.vit.heads * s->N * s->N * sizeof(float));
  s->cls_inf = ops->alloc((size_t)2 * r->B * r->spec.vit.dim * ops->act_size);
}

void dino_ref_run_free(struct dino_ref_run *s) {
  const struct ops *ops = s->m->ops;
  ops->free(s->attn);
  ops->free(s->cls_inf);
  vit_pass_free(&s->ip);
  arena_free(&s->aa);
  optim_free(&s->opt);
  dino_loss_free(&s->loss);
  dino_model_destroy(s->m);
  memset(s, 0, sizeof *s);
}

void dino_ref_load_params(const char *file, const struct ops *ops, const struct tensor_table *tt, const char *group,
                          float *dev) {
  float *host = calloc(tt->size, sizeof(float));
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    char path[256];
    snprintf(path, sizeof path, "%s/%s", group, t->name);
    size_t n = 0;
    long long dims[8];
    int nd = 0;
    float *x = t_h5_read_f32(file, path, &n, dims, &nd);
    T_CHECK(n == t->n && nd == t->ndim, "%s: shape mismatch (%zu elements, rank %d)", path, n, nd);
    for (int d = 0; d < nd && d < t->ndim; d++)
      T_CHECK(dims[d] == t->shape[d], "%s: dim %d is %lld, table says %lld", path, d, dims[d],
              (long long)t->shape[d]);
    if (n == t->n) memcpy(host + t->off, x, n * sizeof(float));
    free(x);
  }
  ops->upload(dev, host, tt->size * sizeof(float));
  /* so that a backend with a copy of the weights in another precision (CUDA, bf16) refreshes it */
  if (ops->params_changed) ops->params_changed(dev, tt->size);
  free(host);
}

int dino_ref_is_qkv_bias(const struct tensor *t) {
  const size_t n = strlen(t->name);
  return n >= 13 && !strcmp(t->name + n - 13, "attn.qkv.bias");
}

double dino_ref_qv_rel_err(const float *ours, const float *ref, size_t n) {
  const size_t D3 = n / 3;
  float *o2 = malloc(2 * D3 * sizeof(float)), *r2 = malloc(2 * D3 * sizeof(float));
  memcpy(o2, ours, D3 * sizeof(float));
  memcpy(o2 + D3, ours + 2 * D3, D3 * sizeof(float));
  memcpy(r2, ref, D3 * sizeof(float));
  memcpy(r2 + D3, ref + 2 * D3, D3 * sizeof(float));
  const double e = t_rel_err_f32(o2, r2, 2 * D3);
  free(o2);
  free(r2);
  return e;
}
