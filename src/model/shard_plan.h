/* shard_plan.h - which slice of the flat parameter buffer each rank owns with the sharded optimizer
 * (&training shard_optimizer, ZeRO stage 1), and the norm blocks each slice holds.
 *
 * Rank r owns elements [lo[r], lo[r+1]) of the buffer (weights, gradients, and the AdamW moments,
 * which it alone keeps).  The slices are contiguous, in rank order, about size / world elements
 * each, and every boundary is a boundary of a norm block (OPS_NORM_BLOCK elements counted from a
 * tensor's start, or a tensor's end, or a place between tensors): each block of a per-tensor
 * gradient norm lies whole in one slice, its owner computes the block's sum of squares, and every
 * rank adds the gathered partials in block order, the sum seg_norms makes on one rank.
 *
 * blk lists the norm blocks of the trainable tensors (TENSOR_GRAD) in buffer order; rank r's are
 * blk[blk_lo[r] .. blk_lo[r+1]).  The plan depends on the tensor table, world and the block size
 * only, so every rank computes the same one. */
#ifndef SCDINO_SHARD_PLAN_H
#define SCDINO_SHARD_PLAN_H

#include <stddef.h>

#include "model/tensor.h"

struct shard_block {
  int tensor;    /* index in the tensor table */
  size_t off, n; /* elements [off, off + n) of the buffer */
};

struct shard_plan {
  int world, rank;
  size_t size;             /* elements of the buffer */
  size_t *lo;              /* world + 1 slice boundaries: lo[0] = 0, lo[world] = size */
  struct shard_block *blk; /* nblk norm blocks of the trainable tensors, in buffer order */
  int nblk;
  int *blk_lo;             /* world + 1: rank r's blocks are blk[blk_lo[r] .. blk_lo[r+1]) */
  size_t max_slice;        /* the largest slice, elements */
};

/* The plan of tt's buffer over world ranks, seen from rank, with norm blocks of block elements
 * (OPS_NORM_BLOCK in training; tests use small ones). */
void shard_plan_init(struct shard_plan *p, const struct tensor_table *tt, int world, int rank, size_t block);
void shard_plan_free(struct shard_plan *p);
/* sumsq[i] (tt->n entries, zeroed here) = tensor i's sum of squares from the sums of squares of all
 * norm blocks part[0 .. nblk) (every rank's, in plan order), added in block order: the sum
 * seg_norms takes the square root of. */
void shard_plan_sumsq(const struct shard_plan *p, const double *part, double *sumsq, int ntensors);
/* The part of [off, off + n) that rank r owns: its start (returned) and *count elements (0: none). */
size_t shard_plan_overlap(const struct shard_plan *p, int r, size_t off, size_t n, size_t *count);

/* The slices as MPI counts and displacements (world entries each, malloc'd; size <= INT_MAX). */
void shard_plan_counts(const struct shard_plan *p, int **counts, int **displs);

#endif
