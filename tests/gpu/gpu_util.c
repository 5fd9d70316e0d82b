/* tests/gpu/gpu_util.c - helpers of the GPU tests (see gpu_util.h). */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/backend_cuda.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_util.h"

const struct ops *gpu_or_skip(const char *precision) {
  const struct ops *o = backend_cuda_for(precision);
  if (!o) {
    printf("SKIP: no usable GPU: %s\n", backend_cuda_why_not());
    exit(77);
  }
  return o;
}

int gpu_is_bf16(const struct ops *o) { return !strcmp(o->precision, "bf16"); }

int gpu_is_f16(const struct ops *o) { return !strcmp(o->precision, "fp16"); }

int gpu_is_half(const struct ops *o) { return o->act_size == 2; }

static float bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x; /* inf, NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

float gpu_f16_round(float x) {
  if (!isfinite(x)) return x;
  const float a = fabsf(x);
  if (a >= 65520.0f) return copysignf(INFINITY, x); /* past the largest, 65504, and half its spacing */
  int e;
  frexpf(a, &e); /* a = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1) */
  const int q = e - 11 < -24 ? -24 : e - 11; /* 10 bits after it; subnormals in steps of 2^-24 */
  /* exact scalings by powers of two around one rounding to an integer (nearest even) */
  return copysignf(ldexpf(nearbyintf(ldexpf(a, -q)), q), x);
}

void gpu_round(const struct ops *o, float *x, size_t n) {
  if (gpu_is_bf16(o))
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
  else if (gpu_is_f16(o))
    for (size_t i = 0; i < n; i++) x[i] = gpu_f16_round(x[i]);
}

float *gpu_f32_up(const struct ops *o, const float *h, size_t n) {
  float *d = o->alloc((n ? n : 1) * sizeof(float));
  if (n) o->upload(d, h, n * sizeof(float));
  return d;
}

void gpu_f32_down(const struct ops *o, float *h, const float *d, size_t n) {
  o->download(h, d, n * sizeof(float));
}

void *gpu_act_up(const struct ops *o, float *h, size_t n) {
  gpu_round(o, h, n);
  float *t = gpu_f32_up(o, h, n);
  void *d = o->alloc((n ? n : 1) * o->act_size);
  o->act_from_f32(d, t, n);
  o->free(t);
  return d;
}

void gpu_act_down(const struct ops *o, float *h, const void *d, size_t n) {
  float *t = o->alloc((n ? n : 1) * sizeof(float));
  o->act_to_f32(t, d, n);
  o->download(h, t, n * sizeof(float));
  o->free(t);
}

void gpu_act_poison(const struct ops *o, void *d, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) h[i] = NAN;
  float *t = gpu_f32_up(o, h, n);
  o->act_from_f32(d, t, n);
  o->free(t);
  free(h);
}

float *gpu_randn(struct rng *r, size_t n, float scale) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = scale * (float)rng_normal(r);
  return x;
}

float *gpu_randu(struct rng *r, size_t n, float lo, float hi) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)rng_uniform(r);
  return x;
}

float *gpu_zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

float *gpu_dup(const float *x, size_t n) {
  float *y = malloc((n ? n : 1) * sizeof(float));
  memcpy(y, x, n * sizeof(float));
  return y;
}

double gpu_cmp(const char *what, const float *ours, const float *ref, size_t n, double tol) {
  const double e = t_rel_err_f32(ours, ref, n);
  if (t_verbose) printf("  %-56s rel err %.3e (tol %.0e)\n", what, e, tol);
  T_CHECK(e <= tol, "%s: relative error %.3e > %.1e", what, e, tol);
  return e;
}

void gpu_cmp_exact(const char *what, const float *ours, const float *ref, size_t n) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&ours[i], &ref[i], sizeof(float)) != 0) {
      if (!bad) first = i;
      bad++;
    }
  if (t_verbose) printf("  %-56s %zu of %zu differ (exact)\n", what, bad, n);
  T_CHECK(bad == 0, "%s: %zu of %zu values differ from the reference bit pattern (first at %zu: %.9g vs %.9g)",
          what, bad, n, first, bad ? ours[first] : 0.0, bad ? ref[first] : 0.0);
}
