/* grad_comm.h - gradient averaging over the ranks, bucketed as backward produces the gradients.
 *
 * The training loop drives one implementation through this table, never MPI or NCCL directly:
 *
 *     gc->begin_step(gc, grads, n);          // before backward; grads is the device gradient buffer
 *     ... backward calls gc->bucket_ready(gc, off, count) from the model's grads_ready callback,
 *         once per finished range [off, off+count) (the head first, then the blocks from the last
 *         to the first, then the embeddings: descending, adjacent ranges); the implementation may
 *         start an asynchronous all-reduce (MPI_Iallreduce, an NCCL call on a side stream) ...
 *     gc->finish(gc);                        // wait; grads = SUM over ranks / world (the mean)
 *
 * which is DDP's semantics: each rank's loss is its own batch mean and the gradients are averaged
 * over ranks, also when the last batch of an epoch is partial on some ranks.  Ranges never passed
 * to bucket_ready are reduced by finish.  allreduce_sum is a blocking in-place sum of device
 * memory (the DINO centre's column sums, as upstream's dist.all_reduce in update_center).
 *
 * Implementations: MPI (grad_comm_mpi.c, for any backend: device memory is staged through the host
 * when the backend is not the CPU one) and NCCL (cuda/, when built with NCCL).  backend.h picks. */
#ifndef SCDINO_GRAD_COMM_H
#define SCDINO_GRAD_COMM_H

#include <stddef.h>

#include "ops.h"

#define GRAD_COMM_BUCKET_BYTES ((size_t)4 << 20) /* ranges are merged up to this size before sending */

struct grad_comm {
  const char *name; /* "mpi", "nccl" */
  int world;        /* ranks taking part */
  void (*begin_step)(struct grad_comm *gc, float *grads, size_t n);
  void (*bucket_ready)(struct grad_comm *gc, size_t off, size_t count);
  void (*finish)(struct grad_comm *gc);
  void (*allreduce_sum)(struct grad_comm *gc, float *buf, size_t n);
  void (*destroy)(struct grad_comm *gc);
  double wait_seconds; /* time the caller spent blocked in finish and allreduce_sum */
  void *impl;
};

/* MPI over MPI_COMM_WORLD; bucket_bytes 0 = GRAD_COMM_BUCKET_BYTES. */
struct grad_comm *grad_comm_mpi_create(const struct ops *ops, size_t bucket_bytes);
/* NCCL (provided by cuda/ when HAVE_CUDA and HAVE_NCCL). */
struct grad_comm *grad_comm_nccl_create(const struct ops *ops, size_t bucket_bytes);

/* Adapter for dino_loss_update_center's dino_allreduce_fn: ctx is a struct grad_comm. */
void grad_comm_allreduce_cb(float *buf, size_t n, void *ctx);

#endif
