/* tensor.c - tensor tables: appending, lookup by name, element counts. */
#include "build_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/tensor.h"

void tensors_init(struct tensor_table *tt) { memset(tt, 0, sizeof *tt); }

void tensors_free(struct tensor_table *tt) {
  free(tt->t);
  memset(tt, 0, sizeof *tt);
}

int tensors_add(struct tensor_table *tt, int ndim, const int64_t *shape, const char *fmt, ...) {
  SCD_ASSERT(ndim >= 1 && ndim <= TENSOR_MAX_DIMS);
  if (tt->n == tt->cap) {
    tt->cap = tt->cap ? 2 * tt->cap : 64;
    tt->t = xrealloc(tt->t, MUL_SIZE((size_t)tt->cap, sizeof *tt->t));
  }
  struct tensor *t = &tt->t[tt->n];
  memset(t, 0, sizeof *t);
  va_list ap;
  va_start(ap, fmt);
  const int len = vsnprintf(t->name, sizeof t->name, fmt, ap);
  va_end(ap);
  if (len < 0 || len >= (int)sizeof t->name) SCD_FAIL("tensor name too long: %s...", t->name);
  SCD_ASSERT(tensors_find(tt, t->name) < 0);
  t->ndim = ndim;
  size_t n = 1;
  for (int i = 0; i < ndim; i++) {
    SCD_ASSERT(shape[i] > 0);
    t->shape[i] = shape[i];
    n = MUL_SIZE(n, (size_t)shape[i]);
  }
  t->n = n;
  t->off = tt->size;
  t->flags = TENSOR_GRAD;
  tt->size += (n + TENSOR_ALIGN - 1) / TENSOR_ALIGN * TENSOR_ALIGN;
  return tt->n++;
}

int tensors_find(const struct tensor_table *tt, const char *name) {
  for (int i = 0; i < tt->n; i++)
    if (!strcmp(tt->t[i].name, name)) return i;
  return -1;
}

size_t tensors_numel(const struct tensor_table *tt) {
  size_t s = 0;
  for (int i = 0; i < tt->n; i++) s += tt->t[i].n;
  return s;
}

const char *tensors_shape_str(const struct tensor *t, char *buf, size_t n) {
  size_t used = 0;
  used += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < t->ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}
