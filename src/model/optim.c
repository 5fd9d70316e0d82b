/* optim.c - parameter groups, per-parameter gradient clipping, last-layer freezing, AdamW. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/optim.h"

static int ends_with(const char *s, const char *suffix) {
  const size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

int optim_is_regularized(const struct tensor *t) {
  return !(ends_with(t->name, ".bias") || t->ndim == 1);
}

int optim_is_last_layer(const struct tensor *t) { return strstr(t->name, "last_layer") != NULL; }

void optim_group_counts(const struct tensor_table *tt, int ntensors[2], size_t nelems[2]) {
  ntensors[0] = ntensors[1] = 0;
  nelems[0] = nelems[1] = 0;
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    if (!(t->flags & TENSOR_GRAD)) continue;
    const int g = optim_is_regularized(t) ? 0 : 1;
    ntensors[g]++;
    nelems[g] += t->n;
  }
}

/* Everything but the moments, which cover elements lo..hi. */
static void init_common(struct optim *o, const struct ops *ops, const struct tensor_table *tt, size_t lo,
                        size_t hi) {
  memset(o, 0, sizeof *o);
  o->ops = ops;
  o->tt = tt;
  o->lo = lo;
  o->hi = hi;
  const size_t n = hi > lo ? hi - lo : 1; /* an empty slice still has buffers */
  o->m = ops->alloc(MUL_SIZE(n, sizeof(float))); /* zeroed, as torch's fresh moments */
  o->v = ops->alloc(MUL_SIZE(n, sizeof(float)));
  o->steps = xcalloc((size_t)tt->n, sizeof *o->steps);
  o->decay = xcalloc((size_t)tt->n, 1);
  for (int i = 0; i < tt->n; i++) o->decay[i] = (unsigned char)optim_is_regularized(&tt->t[i]);
  o->segs = xcalloc((size_t)tt->n, sizeof *o->segs);
  o->asegs = xcalloc((size_t)tt->n, sizeof *o->asegs);
  o->norms = xcalloc((size_t)tt->n, sizeof *o->norms);
  o->scales = xcalloc((size_t)tt->n, sizeof *o->scales);
  o->idx = xcalloc((size_t)tt->n, sizeof *o->idx);
  o->ref = xcalloc((size_t)tt->n, sizeof *o->ref);
  o->ascales = xcalloc((size_t)tt->n, sizeof *o->ascales);
}

void optim_init(struct optim *o, const struct ops *ops, const struct tensor_table *tt) {
  init_common(o, ops, tt, 0, tt->size);
}

void optim_init_sharded(struct optim *o, const struct ops *ops, const struct tensor_table *tt,
                        const struct shard_plan *plan, struct grad_comm *gc) {
  SCD_ASSERT(ops->seg_sumsq && plan->size == tt->size && gc->plan == plan);
  init_common(o, ops, tt, plan->lo[plan->rank], plan->lo[plan->rank + 1]);
  o->plan = plan;
  o->gc = gc;
  const int first = plan->blk_lo[plan->rank], mine = plan->blk_lo[plan->rank + 1] - first;
  o->part = xcalloc((size_t)mine + 1, sizeof *o->part);
  o->allpart = xcalloc((size_t)plan->nblk + 1, sizeof *o->allpart);
  o->npart = xcalloc((size_t)plan->world, sizeof *o->npart);
  for (int r = 0; r < plan->world; r++) o->npart[r] = plan->blk_lo[r + 1] - plan->blk_lo[r];
  o->psegs = xcalloc((size_t)mine + 1, sizeof *o->psegs);
  for (int k = 0; k < mine; k++) {
    o->psegs[k].off = plan->blk[first + k].off;
    o->psegs[k].n = plan->blk[first + k].n;
  }
  o->lsegs = xcalloc((size_t)tt->n, sizeof *o->lsegs);
  o->lasegs = xcalloc((size_t)tt->n, sizeof *o->lasegs);
  o->lscales = xcalloc((size_t)tt->n, sizeof *o->lscales);
}

void optim_free(struct optim *o) {
  if (!o->ops) return;
  o->ops->free(o->m);
  o->ops->free(o->v);
  free(o->steps);
  free(o->decay);
  free(o->segs);
  free(o->asegs);
  free(o->norms);
  free(o->scales);
  free(o->idx);
  free(o->ref);
  free(o->ascales);
  free(o->part);
  free(o->allpart);
  free(o->npart);
  free(o->psegs);
  free(o->lsegs);
  free(o->lasegs);
  free(o->lscales);
  memset(o, 0, sizeof *o);
}

void optim_moments_download(const struct optim *o, float *m_host, float *v_host) {
  const size_t n = o->hi - o->lo;
  if (!o->plan) {
    o->ops->download(m_host, o->m, n * sizeof(float));
    o->ops->download(v_host, o->v, n * sizeof(float));
    return;
  }
  o->gc->gather_slice(o->gc, o->m, m_host);
  o->gc->gather_slice(o->gc, o->v, v_host);
}

void optim_moments_upload(struct optim *o, const float *m_host, const float *v_host) {
  const size_t n = o->hi - o->lo;
  o->ops->upload(o->m, m_host + o->lo, n * sizeof(float));
  o->ops->upload(o->v, v_host + o->lo, n * sizeof(float));
}

/* Sharded: o->norms of the clip segments (o->idx), from the norm blocks' sums of squares, this
 * rank's computed here and every rank's gathered, added per tensor in block order (seg_norms' sum). */
static void sharded_norms(struct optim *o, const float *grads, int nseg) {
  const struct shard_plan *p = o->plan;
  const int mine = o->npart[p->rank];
  if (mine > 0) o->ops->seg_sumsq(o->part, grads, o->psegs, mine);
  o->gc->allgather_f64(o->gc, o->part, mine, o->npart, o->allpart);
  double *ss = xcalloc((size_t)o->tt->n, sizeof *ss);
  shard_plan_sumsq(p, o->allpart, ss, o->tt->n);
  for (int s = 0; s < nseg; s++) o->norms[s] = sqrt(ss[o->idx[s]]);
  free(ss);
}

/* Norms of the trainable gradients (o->norms) and their factors (o->scales: the clip factor,
 * times 1/scale under a loss scale; 1 = left alone), by clip segment; o->segs and o->idx (tensor
 * index of each segment) are filled.  Returns the number of segments; *nclipped counts the clip
 * factors below 1, *apply whether any factor differs from 1, *found_inf whether a norm is not
 * finite under a loss scale (the step is then skipped; the factors mean nothing). */
static int clip_factors(struct optim *o, const float *grads, double clip, double *norms_host,
                        int *nclipped, int *apply, int *found_inf) {
  const struct tensor_table *tt = o->tt;
  const int scaled = o->ls && o->ls->on;
  int n = 0;
  int *idx = o->idx;
  *nclipped = *found_inf = 0;
  for (int i = 0; i < tt->n; i++) {
    if (norms_host) norms_host[i] = 0;
    if (!(tt->t[i].flags & TENSOR_GRAD)) continue;
    o->segs[n].off = tt->t[i].off;
    o->segs[n].n = tt->t[i].n;
    idx[n++] = i;
  }
  /* 1/scale: a power of two, exact; g (1/scale) c in one product equals upstream's unscale_ then
   * clipping (the first product is exact) */
  const float inv = scaled ? 1.0f / o->ls->scale : 1.0f;
  *apply = inv != 1.0f;
  for (int s = 0; s < n; s++) o->scales[s] = inv;
  if (!norms_host && clip <= 0 && !scaled) return n;
  if (o->plan) sharded_norms(o, grads, n);
  else o->ops->seg_norms(o->norms, grads, o->segs, n);
  for (int s = 0; s < n && scaled; s++)
    if (!isfinite(o->norms[s])) *found_inf = 1; /* GradScaler's found_inf: the same on every rank */
  for (int s = 0; s < n; s++) {
    const double norm = o->norms[s] * (double)inv; /* exact: the unscaled gradient's norm */
    if (norms_host) norms_host[idx[s]] = norm;
    /* utils.clip_gradients: clip_coef = clip / (norm + 1e-6) in fp32; scale when below 1. */
    const float coef = (float)clip / ((float)norm + (float)OPTIM_CLIP_EPS);
    if (clip > 0 && coef < 1.0f) {
      o->scales[s] = coef * inv;
      (*nclipped)++;
      *apply = 1;
    }
  }
  return n;
}

int optim_clip(struct optim *o, float *grads, double clip, double *norms_host) {
  SCD_ASSERT(!o->plan); /* sharded: optim_update */
  int nclipped, apply, found_inf;
  const int n = clip_factors(o, grads, clip, norms_host, &nclipped, &apply, &found_inf);
  if (apply) o->ops->seg_scale(grads, o->segs, o->scales, n);
  return nclipped;
}

/* The AdamW segments of a step (o->asegs; per-tensor step counts advance); tidx (NULL: not
 * wanted) gets the tensor index of each.  Returns their number. */
static int adamw_segments(struct optim *o, double lr, double wd, int frozen_last_layer, int *tidx) {
  const struct tensor_table *tt = o->tt;
  int n = 0;
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    if (!(t->flags & TENSOR_GRAD)) continue;
    if (frozen_last_layer && optim_is_last_layer(t)) continue;
    const int64_t step = ++o->steps[i];
    const double w = o->decay[i] ? wd : 0.0;
    const double bc1 = 1.0 - pow(OPTIM_BETA1, (double)step);
    const double bc2 = 1.0 - pow(OPTIM_BETA2, (double)step);
    struct ops_adamw_seg *s = &o->asegs[n];
    if (tidx) tidx[n] = i;
    n++;
    s->off = t->off;
    s->n = t->n;
    s->decay = (float)(1.0 - lr * w);
    s->step_size = (float)(lr / bc1);
    s->bc2_sqrt = (float)sqrt(bc2);
  }
  return n;
}

void optim_step(struct optim *o, float *params, const float *grads, double lr, double wd,
                int frozen_last_layer) {
  SCD_ASSERT(!o->plan); /* sharded: optim_update */
  const int n = adamw_segments(o, lr, wd, frozen_last_layer, NULL);
  o->ops->adamw(params, grads, o->m, o->v, o->asegs, n, OPTIM_BETA1, OPTIM_BETA2, OPTIM_EPS);
  if (o->ops->params_changed) o->ops->params_changed(params, o->tt->size);
}

/* The part of [off, off + n) inside lo..hi, as an offset from lo (returns 0 when empty). */
static int cut(const struct optim *o, size_t off, size_t n, size_t *loff, size_t *ln) {
  const size_t a = off > o->lo ? off : o->lo, b = off + n < o->hi ? off + n : o->hi;
  if (b <= a) return 0;
  *loff = a - o->lo;
  *ln = b - a;
  return 1;
}

/* A step whose scaled gradients overflowed (found_inf): no AdamW step, the teacher EMA all the same
 * (upstream's scaler.step skips optimizer.step() only), the loss scale told.  Clips nothing. */
static int skip_step(struct optim *o, const float *params, float *teacher, double momentum) {
  const struct ops *ops = o->ops;
  ops->ema(teacher, params, o->tt->size, momentum);
  if (ops->params_changed) ops->params_changed(teacher, o->tt->size);
  loss_scale_update(o->ls, 1);
  return 0;
}

/* optim_update on this rank's slice: the same clip factors (from whole-tensor norms), the same
 * AdamW step counts and scalars, the elementwise kernels on the slice's parts of the tensors, then
 * the weights of every slice to every rank and the teacher EMA on the whole buffer, as unsharded. */
static int update_sharded(struct optim *o, float *params, float *grads, double clip, double *norms_host,
                          double lr, double wd, int frozen_last_layer, float *teacher, double momentum) {
  const struct ops *ops = o->ops;
  const size_t size = o->tt->size;
  int nclipped, apply, found_inf;
  const int nclip = clip_factors(o, grads, clip, norms_host, &nclipped, &apply, &found_inf);
  if (found_inf) return skip_step(o, params, teacher, momentum);
  if (apply) {
    int k = 0;
    for (int s = 0; s < nclip; s++)
      if (cut(o, o->segs[s].off, o->segs[s].n, &o->lsegs[k].off, &o->lsegs[k].n)) o->lscales[k++] = o->scales[s];
    if (k) ops->seg_scale(grads + o->lo, o->lsegs, o->lscales, k);
  }
  const int na = adamw_segments(o, lr, wd, frozen_last_layer, NULL); /* every tensor's step advances */
  int k = 0;
  for (int a = 0; a < na; a++) {
    struct ops_adamw_seg *l = &o->lasegs[k];
    *l = o->asegs[a];
    if (cut(o, o->asegs[a].off, o->asegs[a].n, &l->off, &l->n)) k++;
  }
  if (k) ops->adamw(params + o->lo, grads + o->lo, o->m, o->v, o->lasegs, k, OPTIM_BETA1, OPTIM_BETA2, OPTIM_EPS);
  o->gc->allgather(o->gc, params);
  if (ops->params_changed) ops->params_changed(params, size);
  ops->ema(teacher, params, size, momentum);
  if (ops->params_changed) ops->params_changed(teacher, size);
  if (o->ls) loss_scale_update(o->ls, 0);
  return nclipped;
}

int optim_update(struct optim *o, float *params, float *grads, double clip, double *norms_host,
                 double lr, double wd, int frozen_last_layer, float *teacher, double momentum) {
  const struct ops *ops = o->ops;
  const size_t size = o->tt->size;
  if (o->plan)
    return update_sharded(o, params, grads, clip, norms_host, lr, wd, frozen_last_layer, teacher, momentum);
  int nclipped, apply, found_inf;
  const int nclip = clip_factors(o, grads, clip, norms_host, &nclipped, &apply, &found_inf);
  if (found_inf) return skip_step(o, params, teacher, momentum);
  if (!ops->adamw_ema) {
    if (apply) ops->seg_scale(grads, o->segs, o->scales, nclip);
    optim_step(o, params, grads, lr, wd, frozen_last_layer);
    ops->ema(teacher, params, size, momentum);
    if (ops->params_changed) ops->params_changed(teacher, size);
  } else {
    /* factor of each AdamW segment, through the tensor index (frozen tensors are skipped) */
    const int na = adamw_segments(o, lr, wd, frozen_last_layer, o->ref);
    for (int a = 0, c = 0; a < na; a++) {
      while (c < nclip && o->idx[c] != o->ref[a]) c++;
      SCD_ASSERT(c < nclip);
      o->ascales[a] = o->scales[c];
    }
    ops->adamw_ema(params, grads, o->m, o->v, o->asegs, na, apply ? o->ascales : NULL, OPTIM_BETA1,
                   OPTIM_BETA2, OPTIM_EPS, teacher, size, momentum);
    if (ops->params_changed) {
      ops->params_changed(params, size);
      ops->params_changed(teacher, size);
    }
  }
  if (o->ls) loss_scale_update(o->ls, 0);
  return nclipped;
}
