/* dino_model.c - student/teacher ViT + head: tables, weights, step plan, multi-crop forward/backward, EMA. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "model/dino_model.h"
#include "model/init.h"

void dino_build_tables(const struct dino_spec *spec, struct tensor_table *tt, struct vit *v,
                       struct head *h) {
  struct head_dims hd = spec->head;
  hd.in_dim = spec->vit.dim;
  tensors_init(tt);
  vit_init(v, &spec->vit, tt, "backbone.");
  head_init(h, &hd, tt, "head.");
}

struct dino_model *dino_model_create(const struct ops *ops, const struct dino_spec *spec) {
  struct dino_model *m = xcalloc(1, sizeof *m);
  m->ops = ops;
  m->spec = *spec;
  m->spec.head.in_dim = spec->vit.dim;
  dino_build_tables(spec, &m->tt, &m->vit, &m->head);
  const size_t bytes = MUL_SIZE(m->tt.size, sizeof(float));
  m->student = ops->alloc(bytes);
  m->teacher = ops->alloc(bytes);
  m->grads = ops->alloc(bytes);
  arena_init(&m->acts, ops);
  return m;
}

void dino_model_destroy(struct dino_model *m) {
  if (!m) return;
  const struct ops *ops = m->ops;
  arena_free(&m->acts);
  vit_pass_free(&m->sg);
  vit_pass_free(&m->sl);
  vit_pass_free(&m->tg);
  ops->free(m->student);
  ops->free(m->teacher);
  ops->free(m->grads);
  vit_free(&m->vit);
  tensors_free(&m->tt);
  free(m->dp_host);
  free(m);
}

void dino_model_copy_student_to_teacher(struct dino_model *m) {
  m->ops->copy(m->teacher, m->student, m->tt.size * sizeof(float));
  if (m->ops->params_changed) m->ops->params_changed(m->teacher, m->tt.size);
}

void dino_model_init_weights(struct dino_model *m, uint64_t seed) {
  float *host = xmalloc(MUL_SIZE(m->tt.size, sizeof(float)));
  init_params(&m->tt, host, seed);
  m->ops->upload(m->student, host, m->tt.size * sizeof(float));
  free(host);
  if (m->ops->params_changed) m->ops->params_changed(m->student, m->tt.size);
  dino_model_copy_student_to_teacher(m);
}

static void plan(struct dino_model *m) {
  struct arena *a = &m->acts;
  const int B = m->Bmax, nl = m->n_local;
  vit_pass_plan(&m->sg, &m->vit, a, "student.global", 2 * B, m->global_size, m->global_size, 1);
  if (nl) vit_pass_plan(&m->sl, &m->vit, a, "student.local", nl * B, m->local_size, m->local_size, 1);
  vit_pass_plan(&m->tg, &m->vit, a, "teacher.global", 2 * B, m->global_size, m->global_size, 0);
  size_t T = (size_t)m->sg.Bmax * m->sg.N;
  int Np = m->sg.Np;
  if (nl) {
    if ((size_t)m->sl.Bmax * m->sl.N > T) T = (size_t)m->sl.Bmax * m->sl.N;
    if (m->sl.Np > Np) Np = m->sl.Np;
  }
  vit_scratch_plan(&m->vs, &m->vit, a, T, Np, 1);
  head_plan(&m->sh, &m->head, a, "student.head", (2 + nl) * B, 1);
  head_plan(&m->th, &m->head, a, "teacher.head", 2 * B, 0);
}

void dino_model_plan(struct dino_model *m, int Bmax, int n_local, int global_size, int local_size) {
  SCD_ASSERT(Bmax >= 1 && n_local >= 0);
  arena_free(&m->acts);
  m->Bmax = Bmax;
  m->n_local = n_local;
  m->global_size = global_size;
  m->local_size = local_size;
  plan(m);
  arena_alloc(&m->acts);
  plan(m);
  arena_check(&m->acts);
  free(m->dp_host);
  const int nmax = (2 > n_local ? 2 : n_local) * Bmax;
  m->dp_host = xcalloc((size_t)m->vit.d.depth * 2 * nmax, sizeof(float));
}

size_t dino_model_plan_bytes(const struct ops *ops, const struct dino_spec *spec, int Bmax, int n_local,
                             int global_size, int local_size, size_t *nparams) {
  struct dino_model m;
  memset(&m, 0, sizeof m);
  m.ops = ops;
  m.spec = *spec;
  m.spec.head.in_dim = spec->vit.dim;
  dino_build_tables(&m.spec, &m.tt, &m.vit, &m.head);
  arena_init(&m.acts, ops);
  m.Bmax = Bmax, m.n_local = n_local, m.global_size = global_size, m.local_size = local_size;
  plan(&m); /* counting only */
  const size_t bytes = m.acts.size;
  *nparams = m.tt.size;
  arena_free(&m.acts);
  vit_pass_free(&m.sg);
  vit_pass_free(&m.sl);
  vit_pass_free(&m.tg);
  vit_free(&m.vit);
  tensors_free(&m.tt);
  return bytes;
}

/* Stochastic-depth scales of one student pass (crops crop0 .. crop0 + ncrop - 1): per block with a
 * non-zero rate, per branch, per row: floor(keep + U) / keep, the draw keyed by the step and
 * (sample, crop, block, branch). */
static void fill_droppath(struct dino_model *m, struct vit_pass *p, int crop0, int ncrop, int B,
                          const struct dino_droppath *dp) {
  if (!p->dp) return;
  const int depth = m->vit.d.depth, rows = ncrop * B;
  memset(m->dp_host, 0, (size_t)depth * 2 * p->Bmax * sizeof(float));
  for (int i = 0; i < depth; i++) {
    const double rate = dp ? vit_drop_rate(&m->vit.d, i) : 0.0, keep = 1.0 - rate;
    for (int j = 0; j < 2; j++) {
      float *s = m->dp_host + ((size_t)i * 2 + j) * p->Bmax;
      for (int r = 0; r < rows; r++) {
        if (rate <= 0 || !dp) {
          s[r] = 1.0f;
          continue;
        }
        const int c = crop0 + r / B, b = r % B;
        const uint64_t sample = dp->sample_ids ? (uint64_t)dp->sample_ids[b] : (uint64_t)b;
        SCD_ASSERT(c < 256 && i < 32768 && sample < ((uint64_t)1 << 40));
        struct rng g;
        rng_init(&g, dp->seed, RNG_DOMAIN_DROPPATH, dp->step,
                 (sample << 24) | ((uint64_t)c << 16) | ((uint64_t)i << 1) | (uint64_t)j);
        const double mask = floor(keep + rng_uniform(&g));
        s[r] = (float)(mask / keep);
      }
    }
  }
  m->ops->upload(p->dp, m->dp_host, (size_t)depth * 2 * p->Bmax * sizeof(float));
}

void dino_model_forward(struct dino_model *m, const float *global_crops, const float *local_crops,
                        int B, const struct dino_droppath *dp) {
  const struct ops *ops = m->ops;
  const int nl = m->n_local;
  SCD_ASSERT(m->acts.base && B >= 1 && B <= m->Bmax);
  /* Teacher: no stochastic depth, no saved activations. */
  vit_forward(&m->vit, ops, m->teacher, &m->tg, &m->vs, 2 * B, global_crops, m->th.in, NULL);
  head_forward(&m->head, ops, m->teacher, &m->th, 2 * B);
  /* Student: the backbone on the global crops, then on the local crops, writing the CLS rows
   * straight into the head's input in crop-major order. */
  fill_droppath(m, &m->sg, 0, 2, B, dp);
  vit_forward(&m->vit, ops, m->student, &m->sg, &m->vs, 2 * B, global_crops, m->sh.in, NULL);
  if (nl) {
    fill_droppath(m, &m->sl, 2, nl, B, dp);
    char *in_local = (char *)m->sh.in + (size_t)2 * B * m->vit.d.dim * ops->act_size;
    vit_forward(&m->vit, ops, m->student, &m->sl, &m->vs, nl * B, local_crops, in_local, NULL);
  }
  head_forward(&m->head, ops, m->student, &m->sh, (2 + nl) * B);
}

int dino_ready_count(const struct vit *v) { return v->d.depth + 3; }

void dino_ready_group(const struct vit *v, const struct head *h, int k, int *first, int *last) {
  const int depth = v->d.depth;
  SCD_ASSERT(k >= 0 && k < dino_ready_count(v));
  if (k == 0) {
    *first = h->first;
    *last = h->last;
  } else if (k == 1) {
    *first = v->norm_first;
    *last = v->norm_last;
  } else if (k < depth + 2) {
    *first = v->blk[depth + 1 - k].first;
    *last = v->blk[depth + 1 - k].last;
  } else {
    *first = v->embed_first;
    *last = v->embed_last;
  }
}

const char *dino_ready_name(const struct vit *v, int k, char *buf, size_t n) {
  const int depth = v->d.depth;
  SCD_ASSERT(k >= 0 && k < dino_ready_count(v));
  if (k == 0)
    snprintf(buf, n, "head");
  else if (k == 1)
    snprintf(buf, n, "norm");
  else if (k < depth + 2)
    snprintf(buf, n, "blocks.%d", depth + 1 - k);
  else
    snprintf(buf, n, "embed");
  return buf;
}

/* Hand group *k (dino_ready_group) to the callback and move on to the next one. */
static void ready(const struct dino_model *m, int *k, dino_grads_ready_fn cb, void *ctx) {
  int first, last;
  dino_ready_group(&m->vit, &m->head, (*k)++, &first, &last);
  if (cb) cb(first, last, ctx);
}

void dino_model_backward(struct dino_model *m, int B, dino_grads_ready_fn cb, void *ctx) {
  const struct ops *ops = m->ops;
  const int nl = m->n_local;
  const struct vit *v = &m->vit;
  float *P = m->student, *G = m->grads;
  int k = 0; /* next grads_ready group */
  ops->zero(G, m->tt.size * sizeof(float));
  head_backward(&m->head, ops, P, G, &m->sh, (2 + nl) * B);
  ready(m, &k, cb, ctx);
  /* Both backbone calls go backward block by block, so each block's gradient is complete (global
   * + local contributions) as early as possible. */
  vit_backward_begin(v, ops, P, G, &m->sg, 2 * B, m->sh.din);
  if (nl) {
    const char *din_local = (const char *)m->sh.din + (size_t)2 * B * v->d.dim * ops->act_size;
    vit_backward_begin(v, ops, P, G, &m->sl, nl * B, din_local);
  }
  ready(m, &k, cb, ctx); /* final norm */
  for (int i = v->d.depth - 1; i >= 0; i--) {
    vit_backward_block(v, ops, P, G, &m->sg, &m->vs, 2 * B, i);
    if (nl) vit_backward_block(v, ops, P, G, &m->sl, &m->vs, nl * B, i);
    ready(m, &k, cb, ctx); /* block i */
  }
  vit_backward_end(v, ops, P, G, &m->sg, &m->vs, 2 * B);
  if (nl) vit_backward_end(v, ops, P, G, &m->sl, &m->vs, nl * B);
  ready(m, &k, cb, ctx); /* embeddings */
  SCD_ASSERT(k == dino_ready_count(v));
}

void dino_model_ema(struct dino_model *m, double momentum) {
  m->ops->ema(m->teacher, m->student, m->tt.size, momentum);
  if (m->ops->params_changed) m->ops->params_changed(m->teacher, m->tt.size);
}
