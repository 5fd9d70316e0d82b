/* bench/bench_step.c - the DINO training step the step benchmarks time and tests/gpu/test_gpu_train checks. */
#include "build_config.h"

#include "bench/bench_step.h"

#include <string.h>

void bench_step_init(struct bench_step *t, const struct ops *ops, const struct dino_spec *s, int B, int nl,
                     int G, int L) {
  t->ops = ops;
  t->m = dino_model_create(ops, s);
  dino_model_init_weights(t->m, 40);
  dino_model_plan(t->m, B, nl, G, L);
  dino_loss_init(&t->loss, ops, s->head.out_dim, 2 + nl, 0.04, 0.04, 0, 1, 0.1, 0.9);
  optim_init(&t->opt, ops, &t->m->tt);
  loss_scale_init(&t->ls, !strcmp(ops->precision, "fp16"));
  t->loss.ls = &t->ls;
  t->opt.ls = &t->ls;
}

void bench_step_free(struct bench_step *t) {
  optim_free(&t->opt);
  dino_loss_free(&t->loss);
  dino_model_destroy(t->m);
}

void bench_step_augment(struct augment *a, int C, int H, int W, int G, int L, int nl, float std) {
  memset(a, 0, sizeof *a);
  a->C_all = C;
  a->H = H;
  a->W = W;
  a->dtype = IMGOPS_U16;
  a->nsel = C;
  for (int c = 0; c < C; c++) {
    a->sel[c] = c;
    a->mean[c] = 0.2f;
    a->std[c] = std;
  }
  a->global_size = G;
  a->local_size = L;
  a->n_local = nl;
  a->global_scale[0] = 0.14;
  a->global_scale[1] = 1.0;
  a->local_scale[0] = 0.05;
  a->local_scale[1] = 0.14;
  a->random = 1;
  a->seed = 40;
}

/* 2 x multiply-adds of one backbone pass over B crops of N tokens (Np patches): the four Linear
 * layers of each block, QK^T and PV, and the patch embedding. */
static double vit_flops(const struct vit_dims *d, double B, double N, double Np) {
  const double D = d->dim, Hm = d->mlp_hidden, T = B * N;
  const double block = 2 * T * (3 * D * D + D * D + 2 * D * Hm) + 2 * 2 * B * N * N * D;
  return d->depth * block + 2 * B * Np * D * d->in_chans * d->patch * d->patch;
}

static double head_flops(const struct head_dims *h, double R) {
  double f = 2 * R * h->in_dim * h->hidden + 2 * R * h->hidden * h->bottleneck;
  f += 2 * R * (double)h->hidden * h->hidden * (h->nlayers - 2);
  return f + 2 * R * h->bottleneck * (double)h->out_dim;
}

void bench_step_count_flops(const struct dino_spec *s, int B, int nl, int G, int L, struct bench_step_flops *f) {
  const int Ng = 1 + (G / s->vit.patch) * (G / s->vit.patch), Nl = 1 + (L / s->vit.patch) * (L / s->vit.patch);
  struct head_dims hd = s->head;
  hd.in_dim = s->vit.dim;
  f->Ng = Ng;
  f->Nl = Nl;
  f->fwd_student = vit_flops(&s->vit, 2.0 * B, Ng, Ng - 1) + vit_flops(&s->vit, (double)nl * B, Nl, Nl - 1) +
                   head_flops(&hd, (2.0 + nl) * B);
  f->fwd_teacher = vit_flops(&s->vit, 2.0 * B, Ng, Ng - 1) + head_flops(&hd, 2.0 * B);
  f->total = 3 * f->fwd_student + f->fwd_teacher;
}
