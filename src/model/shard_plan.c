/* shard_plan.c - the slices of the sharded optimizer and their norm blocks (shard_plan.h). */
#include "build_config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/shard_plan.h"

static const struct tensor_table *sort_tt; /* qsort has no context argument */

static int by_offset(const void *a, const void *b) {
  const size_t x = sort_tt->t[*(const int *)a].off, y = sort_tt->t[*(const int *)b].off;
  return x < y ? -1 : x > y;
}

/* The first block boundary at or above target: inside a tensor the next multiple of block from its
 * start (its end at most), elsewhere (padding, past the last tensor) target itself. */
static size_t align_up(const struct tensor_table *tt, size_t target, size_t block) {
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    if (target <= t->off || target >= t->off + t->n) continue;
    const size_t k = (target - t->off + block - 1) / block * block;
    return t->off + (k < t->n ? k : t->n);
  }
  return target;
}

void shard_plan_init(struct shard_plan *p, const struct tensor_table *tt, int world, int rank, size_t block) {
  SCD_ASSERT(world >= 1 && rank >= 0 && rank < world && block >= 1);
  memset(p, 0, sizeof *p);
  p->world = world;
  p->rank = rank;
  p->size = tt->size;
  p->lo = xcalloc((size_t)world + 1, sizeof *p->lo);
  p->blk_lo = xcalloc((size_t)world + 1, sizeof *p->blk_lo);
  const size_t n = tt->size, w = (size_t)world;
  for (int r = 1; r < world; r++) {
    const size_t target = n / w * (size_t)r + n % w * (size_t)r / w; /* r n / world, no overflow */
    size_t b = align_up(tt, target, block);
    if (b < p->lo[r - 1]) b = p->lo[r - 1];
    p->lo[r] = b;
  }
  p->lo[world] = n;
  for (int r = 0; r < world; r++)
    if (p->lo[r + 1] - p->lo[r] > p->max_slice) p->max_slice = p->lo[r + 1] - p->lo[r];

  /* The norm blocks of the trainable tensors in buffer order, and their owners. */
  int *order = xcalloc((size_t)tt->n + 1, sizeof *order);
  for (int i = 0; i < tt->n; i++) order[i] = i;
  sort_tt = tt;
  qsort(order, (size_t)tt->n, sizeof *order, by_offset);
  size_t nblk = 0;
  for (int i = 0; i < tt->n; i++)
    if (tt->t[i].flags & TENSOR_GRAD) nblk += (tt->t[i].n + block - 1) / block;
  p->blk = xcalloc(nblk + 1, sizeof *p->blk);
  int owner = 0;
  for (int k = 0; k < tt->n; k++) {
    const struct tensor *t = &tt->t[order[k]];
    if (!(t->flags & TENSOR_GRAD)) continue;
    for (size_t o = 0; o < t->n; o += block) {
      struct shard_block *b = &p->blk[p->nblk];
      b->tensor = order[k];
      b->off = t->off + o;
      b->n = t->n - o < block ? t->n - o : block;
      while (b->off >= p->lo[owner + 1]) p->blk_lo[++owner] = p->nblk; /* ranks before are done */
      SCD_ASSERT(b->off + b->n <= p->lo[owner + 1]);                   /* a block is never split */
      p->nblk++;
    }
  }
  while (owner < world) p->blk_lo[++owner] = p->nblk;
  free(order);
}

void shard_plan_free(struct shard_plan *p) {
  free(p->lo);
  free(p->blk);
  free(p->blk_lo);
  memset(p, 0, sizeof *p);
}

void shard_plan_sumsq(const struct shard_plan *p, const double *part, double *sumsq, int ntensors) {
  memset(sumsq, 0, (size_t)ntensors * sizeof *sumsq);
  for (int k = 0; k < p->nblk; k++) sumsq[p->blk[k].tensor] += part[k];
}

size_t shard_plan_overlap(const struct shard_plan *p, int r, size_t off, size_t n, size_t *count) {
  const size_t a = off > p->lo[r] ? off : p->lo[r];
  const size_t b = off + n < p->lo[r + 1] ? off + n : p->lo[r + 1];
  *count = b > a ? b - a : 0;
  return a;
}

void shard_plan_counts(const struct shard_plan *p, int **counts, int **displs) {
  SCD_ASSERT(p->size <= INT_MAX);
  *counts = xcalloc((size_t)p->world, sizeof **counts);
  *displs = xcalloc((size_t)p->world, sizeof **displs);
  for (int r = 0; r < p->world; r++) {
    (*counts)[r] = (int)(p->lo[r + 1] - p->lo[r]);
    (*displs)[r] = (int)p->lo[r];
  }
}
