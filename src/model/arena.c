/* arena.c - one device allocation carved into named activation buffers. */
#include "build_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/arena.h"

void arena_init(struct arena *a, const struct ops *ops) {
  memset(a, 0, sizeof *a);
  a->ops = ops;
}

void *arena_take(struct arena *a, size_t bytes, const char *fmt, ...) {
  if (bytes == 0) return NULL;
  const size_t rounded = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  SCD_ASSERT(rounded >= bytes);
  if (!a->base) { /* counting */
    if (a->n == a->cap) {
      a->cap = a->cap ? 2 * a->cap : 64;
      a->e = xrealloc(a->e, MUL_SIZE((size_t)a->cap, sizeof *a->e));
    }
    struct arena_entry *e = &a->e[a->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->off = a->size;
    e->bytes = bytes;
    a->size += rounded;
    SCD_ASSERT(a->size >= e->off);
    return NULL;
  }
  /* placing: the same calls in the same order */
  if (a->placed >= a->n || a->e[a->placed].bytes != bytes)
    SCD_FAIL("activation plan changed between counting and placing (entry %d)", a->placed);
  struct arena_entry *e = &a->e[a->placed++];
  a->cur = e->off + rounded;
  return a->base + e->off;
}

void arena_alloc(struct arena *a) {
  SCD_ASSERT(!a->base);
  a->base = a->ops->alloc(a->size ? a->size : ARENA_ALIGN);
  a->placed = 0;
  a->cur = 0;
}

void arena_check(const struct arena *a) {
  if (!a->base || a->placed != a->n || a->cur != a->size)
    SCD_FAIL("activation plan incomplete: %d of %d buffers placed", a->placed, a->n);
}

void arena_free(struct arena *a) {
  if (a->base) a->ops->free(a->base);
  free(a->e);
  const struct ops *ops = a->ops;
  arena_init(a, ops);
}

