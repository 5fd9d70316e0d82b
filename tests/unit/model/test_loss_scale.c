/* test_loss_scale.c - fp16's dynamic loss scale (model/loss_scale.h): PyTorch GradScaler's state
 * machine exactly, and optim_update under it.
 *
 * State machine: the start (2^16), growth after exactly LOSS_SCALE_INTERVAL finite steps in a row
 * (not one step earlier), the counter reset by an overflow, halving and the skip count, a growth
 * to infinity refused (the scale kept, the counter reset, as torch._amp_update_scale_), the
 * inert scale when off.
 *
 * optim_update with a loss scale, on the CPU backend (seg_scale, adamw, ema) and, in CUDA builds,
 * on the CUDA backend's fused kernel (under the emulator in make check): gradients scaled by S =
 * 2^16 with the scale on give the parameters, moments, teacher, step counts and clip decisions of
 * the unscaled gradients without it, bit for bit, and the same norms (clipping sees unscaled
 * gradients, as after upstream's scaler.unscale_); a gradient with an inf or a NaN skips the step
 * (parameters, moments and step counts unchanged, the teacher EMA still run) and halves the scale. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif
#include "core/rng.h"
#include "model/dino_model.h"
#include "model/loss_scale.h"
#include "model/ops.h"
#include "model/optim.h"
#include "tests/fixtures/testutil.h"

/* ---- the state machine -------------------------------------------------------------------------- */

static void check_state_machine(void) {
  struct loss_scale ls;
  loss_scale_init(&ls, 1);
  T_CHECK(ls.on && ls.scale == 65536.0f && ls.growth == 0 && ls.skipped == 0, "start: scale %g growth %lld",
          (double)ls.scale, (long long)ls.growth);
  for (int i = 1; i < LOSS_SCALE_INTERVAL; i++) loss_scale_update(&ls, 0);
  T_CHECK(ls.scale == 65536.0f && ls.growth == LOSS_SCALE_INTERVAL - 1 && !ls.last_skipped,
          "after %d finite steps: scale %g growth %lld (no growth yet)", LOSS_SCALE_INTERVAL - 1, (double)ls.scale,
          (long long)ls.growth);
  loss_scale_update(&ls, 0);
  T_CHECK(ls.scale == 131072.0f && ls.growth == 0 && ls.last_scale == 65536.0f,
          "step %d: scale %g growth %lld (doubled, counter reset)", LOSS_SCALE_INTERVAL, (double)ls.scale,
          (long long)ls.growth);
  /* an overflow halves, resets the counter, counts a skip */
  for (int i = 0; i < 1500; i++) loss_scale_update(&ls, 0);
  loss_scale_update(&ls, 1);
  T_CHECK(ls.scale == 65536.0f && ls.growth == 0 && ls.skipped == 1 && ls.last_skipped &&
              ls.last_scale == 131072.0f,
          "overflow after 1500 finite steps: scale %g growth %lld skipped %lld", (double)ls.scale,
          (long long)ls.growth, (long long)ls.skipped);
  /* the counter starts again: growth only after another full interval */
  for (int i = 0; i < 1999; i++) loss_scale_update(&ls, 0);
  T_CHECK(ls.scale == 65536.0f, "1999 finite steps after an overflow: scale %g", (double)ls.scale);
  loss_scale_update(&ls, 0);
  T_CHECK(ls.scale == 131072.0f && !ls.last_skipped, "2000 finite steps after an overflow: scale %g",
          (double)ls.scale);
  /* overflows in a row: halved each time */
  for (int i = 0; i < 20; i++) loss_scale_update(&ls, 1);
  T_CHECK(ls.scale == 0.125f && ls.skipped == 21, "20 overflows from 2^17: scale %g (2^-3), skipped %lld",
          (double)ls.scale, (long long)ls.skipped);
  /* growth past fp32's range is refused, the counter still reset */
  ls.scale = 0x1p127f;
  ls.growth = LOSS_SCALE_INTERVAL - 1;
  loss_scale_update(&ls, 0);
  T_CHECK(ls.scale == 0x1p127f && ls.growth == 0, "growth to infinity: scale %g growth %lld", (double)ls.scale,
          (long long)ls.growth);
  /* off: the inert scale */
  loss_scale_init(&ls, 0);
  loss_scale_update(&ls, 1);
  for (int i = 0; i < 2 * LOSS_SCALE_INTERVAL; i++) loss_scale_update(&ls, 0);
  T_CHECK(!ls.on && ls.scale == 1.0f && ls.skipped == 0 && !ls.last_skipped, "off: scale %g skipped %lld",
          (double)ls.scale, (long long)ls.skipped);
}

/* ---- optim_update under a loss scale ------------------------------------------------------------ */

struct state {
  const struct ops *ops;
  struct dino_model *m;
  struct optim o;
  struct loss_scale ls;
};

static void st_init(struct state *s, const struct ops *ops, int scaled) {
  struct dino_spec spec = {0};
  spec.vit = (struct vit_dims){8, 3, 32, 2, 2, 64, 4, 0.0, 0};
  spec.head = (struct head_dims){.hidden = 48, .bottleneck = 16, .out_dim = 200, .nlayers = 3,
                                 .norm_last_layer = 1};
  s->ops = ops;
  s->m = dino_model_create(ops, &spec);
  dino_model_init_weights(s->m, 40);
  optim_init(&s->o, ops, &s->m->tt);
  loss_scale_init(&s->ls, scaled);
  s->o.ls = &s->ls;
}

static void st_free(struct state *s) {
  optim_free(&s->o);
  dino_model_destroy(s->m);
}

static float *host_copy(const struct ops *ops, const float *d, size_t n) {
  float *h = malloc(n * sizeof(float));
  ops->download(h, d, n * sizeof(float));
  return h;
}

/* Whether device buffers a and b (n floats each, on their own backends) hold the same bits. */
static void same(const char *what, const struct ops *oa, const float *a, const struct ops *ob, const float *b,
                 size_t n) {
  float *x = host_copy(oa, a, n), *y = host_copy(ob, b, n);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(&x[i], &y[i], sizeof(float)) != 0;
  T_CHECK(bad == 0, "%s: %zu of %zu values differ", what, bad, n);
  free(x);
  free(y);
}

static void compare(const char *tag, const struct state *a, const struct state *b) {
  const size_t n = a->m->tt.size;
  char w[128];
  snprintf(w, sizeof w, "%s: student", tag);
  same(w, a->ops, a->m->student, b->ops, b->m->student, n);
  snprintf(w, sizeof w, "%s: teacher", tag);
  same(w, a->ops, a->m->teacher, b->ops, b->m->teacher, n);
  snprintf(w, sizeof w, "%s: exp_avg", tag);
  same(w, a->ops, a->o.m, b->ops, b->o.m, n);
  snprintf(w, sizeof w, "%s: exp_avg_sq", tag);
  same(w, a->ops, a->o.v, b->ops, b->o.v, n);
  int steps_same = 1;
  for (int i = 0; i < a->m->tt.n; i++) steps_same &= a->o.steps[i] == b->o.steps[i];
  T_CHECK(steps_same, "%s: per-tensor step counts differ", tag);
}

/* Random gradients of step k (tensor i scaled so that some exceed the clip and some do not), times
 * mul (exact: a power of two). */
static float *grads_for(const struct tensor_table *tt, int k, float mul) {
  float *g = calloc(tt->size, sizeof(float));
  struct rng r;
  rng_init(&r, 4, RNG_DOMAIN_TEST, (uint64_t)k, 0);
  for (int i = 0; i < tt->n; i++) {
    const float sc = (i % 3 == 0) ? 1.0f : 1e-3f;
    for (size_t j = 0; j < tt->t[i].n; j++) g[tt->t[i].off + j] = mul * sc * (float)rng_normal(&r);
  }
  return g;
}

static int update(struct state *s, const float *g, int k, double *norms) {
  s->ops->upload(s->m->grads, g, s->m->tt.size * sizeof(float));
  return optim_update(&s->o, s->m->student, s->m->grads, 0.05, norms, 1e-3, 0.04, k == 0, s->m->teacher, 0.996);
}

/* Scaled (a, loss scale on) against unscaled (b, off): two finite steps, then an overflow in a's
 * gradients, which b skips by not updating at all (its teacher EMA run alone). */
static void check_update(const char *name, const struct ops *ops_a) {
  struct state a, b;
  st_init(&a, ops_a, 1);
  st_init(&b, backend_cpu(), 0);
  const int nt = a.m->tt.n;
  double *na = calloc(nt, sizeof(double)), *nb = calloc(nt, sizeof(double));
  char tag[96];
  for (int k = 0; k < 2; k++) {
    float *gs = grads_for(&a.m->tt, k, LOSS_SCALE_INIT), *g = grads_for(&b.m->tt, k, 1.0f);
    const int ca = update(&a, gs, k, na), cb = update(&b, g, k, nb);
    T_CHECK(ca == cb && ca > 0 && ca < nt, "%s step %d: %d vs %d tensors clipped (of %d)", name, k, ca, cb, nt);
    const double e = t_rel_err_f64(na, nb, nt);
    T_CHECK(e <= 1e-12, "%s step %d: the norms are not the unscaled gradients' (relative error %.3e)", name, k, e);
    T_CHECK(!a.ls.last_skipped && a.ls.scale == LOSS_SCALE_INIT && a.ls.growth == k + 1,
            "%s step %d: skipped %d, scale %g, growth %lld", name, k, a.ls.last_skipped, (double)a.ls.scale,
            (long long)a.ls.growth);
    snprintf(tag, sizeof tag, "%s step %d, scaled vs unscaled", name, k);
    compare(tag, &a, &b);
    free(gs);
    free(g);
  }
  /* an overflow: an inf in one tensor, a NaN in another */
  float *gs = grads_for(&a.m->tt, 2, LOSS_SCALE_INIT);
  gs[a.m->tt.t[nt / 2].off] = INFINITY;
  gs[a.m->tt.t[1].off + 1] = NAN;
  const int ca = update(&a, gs, 2, na);
  b.ops->ema(b.m->teacher, b.m->student, b.m->tt.size, 0.996); /* what a skipped step leaves */
  T_CHECK(ca == 0 && a.ls.last_skipped && a.ls.skipped == 1 && a.ls.scale == LOSS_SCALE_INIT / 2 &&
              a.ls.growth == 0 && !isfinite(na[nt / 2]),
          "%s overflow: %d clipped, skipped %d (%lld), scale %g, growth %lld, norm %g", name, ca, a.ls.last_skipped,
          (long long)a.ls.skipped, (double)a.ls.scale, (long long)a.ls.growth, na[nt / 2]);
  snprintf(tag, sizeof tag, "%s skipped step", name);
  compare(tag, &a, &b);
  /* the next step at the halved scale */
  free(gs);
  gs = grads_for(&a.m->tt, 3, LOSS_SCALE_INIT / 2);
  float *g = grads_for(&b.m->tt, 3, 1.0f);
  update(&a, gs, 3, na);
  update(&b, g, 2, nb); /* b's third update: k = 2 as a's third real step */
  snprintf(tag, sizeof tag, "%s step after the skip, at scale 2^15", name);
  compare(tag, &a, &b);
  free(gs);
  free(g);
  free(na);
  free(nb);
  st_free(&a);
  st_free(&b);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  check_state_machine();
  check_update("CPU", backend_cpu());
#ifdef HAVE_CUDA
  const struct ops *gpu = backend_cuda_for("fp32");
  if (!gpu)
    printf("no GPU (%s): the fused CUDA kernel under a loss scale is not checked here\n", backend_cuda_why_not());
  else
    check_update("CUDA fused", gpu);
#endif
  return t_finish();
}
