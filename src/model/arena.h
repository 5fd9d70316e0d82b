/* arena.h - one device allocation carved into named activation buffers (planned, then placed).
 *
 * The model sizes every activation of a training step from the batch and crop sizes, and gets
 * them from a single allocation, with a table of names, offsets and sizes for inspection.  The
 * planning code is run twice with the same calls: once to count (arena_take returns NULL), then,
 * after arena_alloc, to place (arena_take returns the real pointers, in the same order):
 *
 *     arena_init(&a, ops);  plan(&a);  arena_alloc(&a);  plan(&a);  arena_check(&a);
 */
#ifndef SCDINO_ARENA_H
#define SCDINO_ARENA_H

#include <stddef.h>

#include "core/check.h"
#include "model/ops.h"

#define ARENA_ALIGN 256 /* bytes */

struct arena_entry {
  char name[64];
  size_t off, bytes;
};

struct arena {
  const struct ops *ops;
  char *base;   /* device allocation; NULL while counting */
  size_t size;  /* bytes counted (counting) / allocated (placing) */
  size_t cur;   /* placing: bytes handed out so far */
  struct arena_entry *e;
  int n, cap;   /* entries (counting builds the table, placing walks it) */
  int placed;   /* entries placed so far */
};

void arena_init(struct arena *a, const struct ops *ops);
/* Reserve (counting) or hand out (placing) `bytes`; the name is printf-formatted.  bytes == 0
 * gives NULL in both phases. */
void *arena_take(struct arena *a, size_t bytes, const char *fmt, ...) SCD_PRINTF(3, 4);
/* Allocate the counted size (zero-filled) and switch to placing. */
void arena_alloc(struct arena *a);
/* After the placing run: the calls matched the counting run. */
void arena_check(const struct arena *a);
void arena_free(struct arena *a);

#endif
