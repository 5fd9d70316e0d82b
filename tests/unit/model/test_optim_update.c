/* test_optim_update.c - optim_update (clip + AdamW + teacher EMA in one call) gives exactly what
 * optim_clip, optim_step and the EMA give one after the other: on the CPU backend (which runs the
 * three ops), and with a GPU the CUDA backend's fused kernel against the CPU, bit for bit.
 *
 * A small DINO model with random gradients, clipped on some tensors and not on others, two steps
 * (the head's last layer frozen in the first, so the AdamW segments skip tensors the clip covers).
 * The arithmetic of both backends rounds every operation in PyTorch's order, so parameters,
 * moments, teacher and step counts must be identical, and the norms equal to double rounding
 * (a clip factor is the float of a norm: a last-bit difference in double does not reach it). */
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
#include "model/ops.h"
#include "model/optim.h"
#include "tests/fixtures/testutil.h"

struct state {
  const struct ops *ops;
  struct dino_model *m;
  struct optim o;
};

static void st_init(struct state *s, const struct ops *ops) {
  struct dino_spec spec = {0};
  spec.vit = (struct vit_dims){8, 3, 32, 2, 2, 64, 4, 0.0, 0};
  spec.head = (struct head_dims){.hidden = 48, .bottleneck = 16, .out_dim = 200, .nlayers = 3,
                                 .norm_last_layer = 1};
  s->ops = ops;
  s->m = dino_model_create(ops, &spec);
  dino_model_init_weights(s->m, 40);
  optim_init(&s->o, ops, &s->m->tt);
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

static void same(const char *what, const float *a, const float *b, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
  T_CHECK(bad == 0, "%s: %zu of %zu values differ", what, bad, n);
}

/* Random gradients of step k (tensor i scaled so that some exceed the clip and some do not). */
static float *grads_for(const struct tensor_table *tt, int k) {
  float *g = calloc(tt->size, sizeof(float));
  struct rng r;
  rng_init(&r, 4, RNG_DOMAIN_TEST, (uint64_t)k, 0);
  for (int i = 0; i < tt->n; i++) {
    const float sc = (i % 3 == 0) ? 1.0f : 1e-3f;
    for (size_t j = 0; j < tt->t[i].n; j++) g[tt->t[i].off + j] = sc * (float)rng_normal(&r);
  }
  return g;
}

static void compare(const char *tag, const struct state *a, const struct state *b) {
  const size_t n = a->m->tt.size;
  float *x, *y;
  char w[96];
#define CMP(field, name)                                     \
  x = host_copy(a->ops, field(a), n);                        \
  y = host_copy(b->ops, field(b), n);                        \
  snprintf(w, sizeof w, "%s: %s", tag, name);                \
  same(w, x, y, n);                                          \
  free(x);                                                   \
  free(y);
#define F_STUDENT(s) (s)->m->student
#define F_TEACHER(s) (s)->m->teacher
#define F_M(s) (s)->o.m
#define F_V(s) (s)->o.v
  CMP(F_STUDENT, "student")
  CMP(F_TEACHER, "teacher")
  CMP(F_M, "exp_avg")
  CMP(F_V, "exp_avg_sq")
  for (int i = 0; i < a->m->tt.n; i++)
    T_CHECK(a->o.steps[i] == b->o.steps[i], "%s: %s step count %lld vs %lld", tag,
            a->m->tt.t[i].name, (long long)a->o.steps[i], (long long)b->o.steps[i]);
}

/* One step on s from gradients g (host): returns the number of clipped tensors. */
static int step_update(struct state *s, const float *g, int k, double *norms) {
  s->ops->upload(s->m->grads, g, s->m->tt.size * sizeof(float));
  return optim_update(&s->o, s->m->student, s->m->grads, 0.05, norms, 1e-3, 0.04, k == 0,
                      s->m->teacher, 0.996);
}

static int step_separate(struct state *s, const float *g, int k, double *norms) {
  s->ops->upload(s->m->grads, g, s->m->tt.size * sizeof(float));
  const int c = optim_clip(&s->o, s->m->grads, 0.05, norms);
  optim_step(&s->o, s->m->student, s->m->grads, 1e-3, 0.04, k == 0);
  s->ops->ema(s->m->teacher, s->m->student, s->m->tt.size, 0.996);
  return c;
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  struct state a, b;
  st_init(&a, backend_cpu());
  st_init(&b, backend_cpu());
  const int nt = a.m->tt.n;
  double *na = calloc(nt, sizeof(double)), *nb = calloc(nt, sizeof(double));
  for (int k = 0; k < 2; k++) {
    float *g = grads_for(&a.m->tt, k);
    const int ca = step_update(&a, g, k, na), cb = step_separate(&b, g, k, nb);
    T_CHECK(ca == cb && ca > 0 && ca < nt, "step %d: %d vs %d tensors clipped (of %d)", k, ca, cb, nt);
    /* (the CPU's OpenMP reduction may add the partial sums in another order from call to call) */
    const double e = t_rel_err_f64(na, nb, nt);
    T_CHECK(e <= 1e-12, "step %d: norms differ, relative error %.3e", k, e);
    char tag[32];
    snprintf(tag, sizeof tag, "CPU step %d", k);
    compare(tag, &a, &b);
    free(g);
  }
#ifdef HAVE_CUDA
  const struct ops *gpu = backend_cuda_for("fp32");
  if (!gpu) {
    printf("no GPU (%s): the fused CUDA kernel is not checked here\n", backend_cuda_why_not());
  } else {
    T_CHECK(gpu->adamw_ema != NULL, "the CUDA backend has the fused update");
    struct state c, d;
    st_init(&c, gpu);
    st_init(&d, backend_cpu());
    double *nc = calloc(nt, sizeof(double));
    for (int k = 0; k < 2; k++) {
      float *g = grads_for(&c.m->tt, k);
      const int cc = step_update(&c, g, k, nc), cd = step_separate(&d, g, k, nb);
      T_CHECK(cc == cd, "GPU step %d: %d vs %d tensors clipped", k, cc, cd);
      const double e = t_rel_err_f64(nc, nb, nt);
      T_CHECK(e <= 1e-12, "GPU step %d: norms relative error %.3e", k, e);
      char tag[32];
      snprintf(tag, sizeof tag, "GPU fused step %d", k);
      compare(tag, &c, &d);
      free(g);
    }
    printf("CUDA fused clip + AdamW + EMA matches the CPU bit for bit\n");
    free(nc);
    st_free(&c);
    st_free(&d);
  }
#endif
  free(na);
  free(nb);
  st_free(&a);
  st_free(&b);
  return t_finish();
}
