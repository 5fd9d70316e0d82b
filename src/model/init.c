/* init.c - upstream's weight initialisation by tensor name, from keyed random streams. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "model/init.h"

static int ends_with(const char *s, const char *suffix) {
  const size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* N(0, std^2) restricted to [-cut, cut] by rejection (exact truncation; with std 0.02 and cut 2
 * a rejection never happens in practice). */
static void fill_trunc_normal(struct rng *r, float *x, size_t n, double std, double cut) {
  for (size_t i = 0; i < n; i++) {
    double v;
    do v = rng_normal(r) * std;
    while (v < -cut || v > cut);
    x[i] = (float)v;
  }
}

static void fill_uniform(struct rng *r, float *x, size_t n, double bound) {
  for (size_t i = 0; i < n; i++) x[i] = (float)rng_uniform_range(r, -bound, bound);
}

static void fill_const(float *x, size_t n, float c) {
  for (size_t i = 0; i < n; i++) x[i] = c;
}

void init_params(const struct tensor_table *tt, float *host, uint64_t seed) {
  memset(host, 0, tt->size * sizeof(float));
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    float *x = host + t->off;
    struct rng r;
    rng_init(&r, seed, RNG_DOMAIN_INIT, (uint64_t)i, 0);
    if (strstr(t->name, "patch_embed.proj.")) {
      /* Conv2d default (kaiming_uniform with a = sqrt 5): bound 1/sqrt(fan_in) for both. */
      char wname[TENSOR_NAME_MAX];
      snprintf(wname, sizeof wname, "%s", t->name);
      char *dot = strrchr(wname, '.');
      snprintf(dot, sizeof wname - (size_t)(dot - wname), ".weight");
      const int iw = tensors_find(tt, wname);
      SCD_ASSERT(iw >= 0 && tt->t[iw].ndim == 4);
      const double fan_in = (double)(tt->t[iw].shape[1] * tt->t[iw].shape[2] * tt->t[iw].shape[3]);
      fill_uniform(&r, x, t->n, 1.0 / sqrt(fan_in));
    } else if (ends_with(t->name, "weight_g")) {
      fill_const(x, t->n, 1.0f);
    } else if (ends_with(t->name, "weight_v")) {
      fill_uniform(&r, x, t->n, 1.0 / sqrt((double)t->shape[1]));
    } else if (ends_with(t->name, "cls_token") || ends_with(t->name, "pos_embed")) {
      fill_trunc_normal(&r, x, t->n, INIT_STD, INIT_TRUNC);
    } else if (ends_with(t->name, ".bias")) {
      fill_const(x, t->n, 0.0f);
    } else if (ends_with(t->name, ".weight") && t->ndim == 1) { /* LayerNorm */
      fill_const(x, t->n, 1.0f);
    } else if (ends_with(t->name, ".weight") && t->ndim == 2) { /* Linear */
      fill_trunc_normal(&r, x, t->n, INIT_STD, INIT_TRUNC);
    } else {
      SCD_FAIL("no initialisation rule for tensor %s", t->name);
    }
  }
}
