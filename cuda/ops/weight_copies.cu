/* weight_copies.cu - the bf16 copies of fp32 weight buffers that the GEMMs read in bf16.
 *
 * A registered fp32 buffer (params_changed: the student, the teacher) has one bf16 copy, marked
 * stale by any write to the buffer (cu_shadow_touch) and refreshed lazily by the first GEMM that
 * needs it, so a write only has to mark it.  A kernel that writes the buffer may write the copy
 * too (the fused optimizer): cu_shadow_current and cu_shadow_rewritten hand it the copy. */
#include "build_config.h"

#include <string.h>

#include "cuda/ops/cuda_internal.h"

struct shadow {
  const float *base;
  size_t n;
  bf16 *copy;
  int dirty;
};
#define MAX_SHADOWS 8
static struct shadow shadows[MAX_SHADOWS];

static void shadow_drop(int i) {
  cu_dev_free(shadows[i].copy);
  memset(&shadows[i], 0, sizeof shadows[i]);
}

void cu_shadow_register(const float *base, size_t n) {
  const char *b0 = (const char *)base, *b1 = b0 + n * sizeof(float);
  for (int i = 0; i < MAX_SHADOWS; i++) {
    struct shadow *s = &shadows[i];
    if (!s->base) continue;
    if (s->base == base && s->n == n) {
      s->dirty = 1;
      return;
    }
    const char *s0 = (const char *)s->base, *s1 = s0 + s->n * sizeof(float);
    if (s0 < b1 && b0 < s1) shadow_drop(i); /* a different range over the same memory */
  }
  for (int i = 0; i < MAX_SHADOWS; i++)
    if (!shadows[i].base) {
      shadows[i].base = base;
      shadows[i].n = n;
      shadows[i].copy = (bf16 *)cu_dev_alloc(n * sizeof(bf16), "bf16 weight copy");
      shadows[i].dirty = 1;
      return;
    }
  /* more buffers than slots: the oldest loses its copy (GEMMs then convert on the fly) */
  shadow_drop(0);
  memmove(&shadows[0], &shadows[1], (MAX_SHADOWS - 1) * sizeof shadows[0]);
  memset(&shadows[MAX_SHADOWS - 1], 0, sizeof shadows[0]);
  cu_shadow_register(base, n);
}

void cu_shadow_touch(const void *p, size_t bytes) {
  const char *p0 = (const char *)p, *p1 = p0 + bytes;
  for (int i = 0; i < MAX_SHADOWS; i++) {
    struct shadow *s = &shadows[i];
    if (!s->base) continue;
    const char *s0 = (const char *)s->base, *s1 = s0 + s->n * sizeof(float);
    if (s0 < p1 && p0 < s1) s->dirty = 1;
  }
}

void cu_shadow_forget(const void *p, size_t bytes) {
  const char *p0 = (const char *)p, *p1 = p0 + bytes;
  for (int i = 0; i < MAX_SHADOWS; i++) {
    const struct shadow *s = &shadows[i];
    if (!s->base) continue;
    const char *s0 = (const char *)s->base, *s1 = s0 + s->n * sizeof(float);
    if (s0 < p1 && p0 < s1) shadow_drop(i);
  }
}

/* The shadow of the buffer that starts at base and holds at least n floats, if registered. */
static struct shadow *shadow_at(const float *base, size_t n) {
  for (int i = 0; i < MAX_SHADOWS; i++)
    if (base && shadows[i].base == base && shadows[i].n >= n) return &shadows[i];
  return NULL;
}

bf16 *cu_shadow_current(const float *base, size_t n) {
  struct shadow *s = shadow_at(base, n);
  return s && !s->dirty ? s->copy : NULL;
}

bf16 *cu_shadow_rewritten(const float *base, size_t n) {
  struct shadow *s = shadow_at(base, n);
  if (!s || s->n != n) return NULL;
  s->dirty = 0; /* the caller's kernel, queued next, writes all of it */
  return s->copy;
}

const bf16 *cu_weights_bf16(const float *w, size_t n, int slot) {
  for (int i = 0; i < MAX_SHADOWS; i++) {
    struct shadow *s = &shadows[i];
    if (!s->base || w < s->base || w + n > s->base + s->n) continue;
    if (s->dirty) {
      k_f32_to_bf16(s->copy, s->base, s->n);
      s->dirty = 0;
    }
    return s->copy + (w - s->base);
  }
  bf16 *d = (bf16 *)cu_scratch(slot, n * sizeof(bf16));
  k_f32_to_bf16(d, w, n);
  return d;
}
