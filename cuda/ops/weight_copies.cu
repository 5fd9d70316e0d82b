/* weight_copies.cu - the 16-bit copies (bf16 or f16) of fp32 weight buffers that the GEMMs read.
 *
 * A registered fp32 buffer (params_changed: the student, the teacher) has one copy per 16-bit
 * type asked for (a run uses one; the tests compare tables in one process), marked stale by any
 * write to the buffer (cu_shadow_touch) and refreshed lazily by the first GEMM that needs it, so a
 * write only has to mark it.  A kernel that writes the buffer may write the copy too (the fused
 * optimizer): cu_shadow_current and cu_shadow_rewritten hand it the copy. */
#include "build_config.h"

#include <string.h>

#include "cuda/ops/cuda_internal.h"

struct shadow {
  const float *base;
  size_t n;
  int act; /* ACT_BF16 or ACT_F16 */
  void *copy;
  int dirty;
};
#define MAX_SHADOWS 8
static struct shadow shadows[MAX_SHADOWS];

static void shadow_drop(int i) {
  cu_dev_free(shadows[i].copy);
  memset(&shadows[i], 0, sizeof shadows[i]);
}

static void shadow_register(const float *base, size_t n, int act) {
  const char *b0 = (const char *)base, *b1 = b0 + n * sizeof(float);
  int same = 0; /* the range is registered already, for some type */
  for (int i = 0; i < MAX_SHADOWS; i++) {
    struct shadow *s = &shadows[i];
    if (!s->base) continue;
    if (s->base == base && s->n == n) {
      s->dirty = 1;
      if (s->act == act) same = 2;
      else if (!same) same = 1;
      continue;
    }
    const char *s0 = (const char *)s->base, *s1 = s0 + s->n * sizeof(float);
    if (s0 < b1 && b0 < s1) shadow_drop(i); /* a different range over the same memory */
  }
  if (same == 2) return;
  for (int i = 0; i < MAX_SHADOWS; i++)
    if (!shadows[i].base) {
      shadows[i].base = base;
      shadows[i].n = n;
      shadows[i].act = act;
      shadows[i].copy = cu_dev_alloc(n * 2, act == ACT_F16 ? "f16 weight copy" : "bf16 weight copy");
      shadows[i].dirty = 1;
      return;
    }
  /* more buffers than slots: the oldest loses its copy (GEMMs then convert on the fly) */
  shadow_drop(0);
  memmove(&shadows[0], &shadows[1], (MAX_SHADOWS - 1) * sizeof shadows[0]);
  memset(&shadows[MAX_SHADOWS - 1], 0, sizeof shadows[0]);
  shadow_register(base, n, act);
}

template <typename T> void cu_shadow_register(const float *base, size_t n) {
  shadow_register(base, n, act_code<T>::value);
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

/* The shadow of type act of the buffer that starts at base and holds at least n floats, if
 * registered. */
static struct shadow *shadow_at(const float *base, size_t n, int act) {
  for (int i = 0; i < MAX_SHADOWS; i++)
    if (base && shadows[i].base == base && shadows[i].n >= n && shadows[i].act == act) return &shadows[i];
  return NULL;
}

/* The copies of other types than act over [base, base+n): stale (their buffer is being written
 * with the copy of type act alone). */
static void stale_others(const float *base, size_t n, int act) {
  const char *b0 = (const char *)base, *b1 = b0 + n * sizeof(float);
  for (int i = 0; i < MAX_SHADOWS; i++) {
    struct shadow *s = &shadows[i];
    if (!s->base || s->act == act) continue;
    const char *s0 = (const char *)s->base, *s1 = s0 + s->n * sizeof(float);
    if (s0 < b1 && b0 < s1) s->dirty = 1;
  }
}

template <typename T> T *cu_shadow_current(const float *base, size_t n) {
  struct shadow *s = shadow_at(base, n, act_code<T>::value);
  if (!s || s->dirty) return NULL;
  stale_others(base, s->n, act_code<T>::value);
  return (T *)s->copy;
}

template <typename T> T *cu_shadow_rewritten(const float *base, size_t n) {
  struct shadow *s = shadow_at(base, n, act_code<T>::value);
  if (!s || s->n != n) return NULL;
  stale_others(base, n, act_code<T>::value);
  s->dirty = 0; /* the caller's kernel, queued next, writes all of it */
  return (T *)s->copy;
}

template <typename T> const T *cu_weights(const float *w, size_t n, int slot) {
  const int act = act_code<T>::value;
  for (int i = 0; i < MAX_SHADOWS; i++) {
    struct shadow *s = &shadows[i];
    if (!s->base || s->act != act || w < s->base || w + n > s->base + s->n) continue;
    if (s->dirty) {
      k_convert_from_f32<T>((T *)s->copy, s->base, s->n);
      s->dirty = 0;
    }
    return (const T *)s->copy + (w - s->base);
  }
  T *d = (T *)cu_scratch(slot, n * sizeof(T));
  k_convert_from_f32<T>(d, w, n);
  return d;
}

#define INSTANTIATE(T)                                                   \
  template void cu_shadow_register<T>(const float *, size_t);            \
  template T *cu_shadow_current<T>(const float *, size_t);               \
  template T *cu_shadow_rewritten<T>(const float *, size_t);             \
  template const T *cu_weights<T>(const float *, size_t, int);
INSTANTIATE(bf16)
INSTANTIATE(f16)
