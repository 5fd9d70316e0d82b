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
 * One communicator (grad_comm.c) owns the buckets, their merging (the rule below), the ranges
 * finish still has to reduce, the one-rank shortcut, the division by the world size, the timing and
 * this table; a transport (struct grad_comm_transport, below) supplies the collectives: MPI
 * (backend/grad_comm_mpi.c, for any backend: device memory is staged through the host when the
 * backend is not the CPU one) and NCCL (cuda/comm/grad_comm_nccl.c, when built with NCCL).  The
 * device (backend/device.h) picks.
 *
 * The sharded optimizer (&training shard_optimizer) uses a reduce-scatter communicator instead
 * (MPI: CPU backend; NCCL): the same bucket calls, but finish leaves the mean only on this rank's
 * slice of the buffer (plan, model/shard_plan.h; the rest of grads is left as it is), and the
 * table's shard functions move the slices back: allgather after the optimizer step (the weights),
 * allgather_f64 (the norm partials), gather_slice (the moments, for checkpoints). */
#ifndef SCDINO_GRAD_COMM_H
#define SCDINO_GRAD_COMM_H

#include <stddef.h>

#include "model/ops.h"

struct tensor_table;
struct shard_plan;

#define GRAD_COMM_BUCKET_BYTES ((size_t)4 << 20) /* ranges are merged up to this size before sending */

struct grad_comm {
  const char *name; /* "mpi", "nccl" */
  int world;        /* ranks taking part */
  void (*begin_step)(struct grad_comm *gc, float *grads, size_t n);
  void (*bucket_ready)(struct grad_comm *gc, size_t off, size_t count);
  void (*finish)(struct grad_comm *gc);
  void (*allreduce_sum)(struct grad_comm *gc, float *buf, size_t n);
  void (*destroy)(struct grad_comm *gc);
  double wait_seconds; /* time the caller spent blocked in communication: finish (less the wait
                        * for backward's kernels), allreduce_sum and the shard functions */
  void *impl;
  /* Sharded optimizer only (NULL in the all-reduce communicators). */
  const struct shard_plan *plan;
  /* buf (device, plan->size elements): every rank's slice to every rank, in place. */
  void (*allgather)(struct grad_comm *gc, float *buf);
  /* all = the concatenation, in rank order, of every rank's mine (host, n doubles here; counts[r]
   * on rank r). */
  void (*allgather_f64)(struct grad_comm *gc, const double *mine, int n, const int *counts, double *all);
  /* On rank 0 full (host, plan->size elements) receives every rank's slice (device, its own
   * elements lo..hi) at the slice's offset; full is not used on the other ranks. */
  void (*gather_slice)(struct grad_comm *gc, const float *slice, float *full);
};

/* The communicators: MPI over the current group (core/comm_mpi.h); bucket_bytes 0 =
 * GRAD_COMM_BUCKET_BYTES. */
struct grad_comm *grad_comm_mpi_create(const struct ops *ops, size_t bucket_bytes);
/* The reduce-scatter communicator of the sharded optimizer over the current group (core/comm_mpi.h),
 * for the CPU backend; plan (world = the group's size, at most INT_MAX elements) outlives it. */
struct grad_comm *grad_comm_mpi_shard_create(const struct ops *ops, size_t bucket_bytes,
                                             const struct shard_plan *plan);
/* NCCL (provided by cuda/ when HAVE_CUDA and HAVE_NCCL). */
struct grad_comm *grad_comm_nccl_create(const struct ops *ops, size_t bucket_bytes);
/* The sharded optimizer's communicator with NCCL (CUDA backend), as grad_comm_mpi_shard_create. */
struct grad_comm *grad_comm_nccl_shard_create(const struct ops *ops, size_t bucket_bytes,
                                              const struct shard_plan *plan);
/* Seconds a host wait on NCCL may last before the job ends (&gpu nccl_timeout, default 600; the
 * NCCL busbw benchmark's --timeout). */
void grad_comm_nccl_set_timeout(double seconds);
double grad_comm_nccl_timeout(void);

/* Adapter for dino_loss_update_center's dino_allreduce_fn: ctx is a struct grad_comm. */
void grad_comm_allreduce_cb(float *buf, size_t n, void *ctx);

/* ---- transports (grad_comm.c) -------------------------------------------------------------------
 *
 * What an MPI or NCCL communicator supplies to grad_comm_create: its collectives on its own state t.
 * The communicator calls them only when they have work (never on one rank unless single_rank, and
 * allgather never there; never with an empty range or buffer), times the blocking ones, and divides
 * by the world size itself. */
struct grad_comm_transport {
  const char *name; /* "mpi", "nccl": the table's name ("-shard" added with a plan) and the log's */
  int single_rank;  /* 1: the calls run on a single rank too (one code path everywhere); 0: a single
                     * rank makes none (its gradients are already the mean) */
  /* Optional: a step of n elements begins. */
  void (*begin_step)(void *t, size_t n);
  /* Start summing elements [off, off + n) of grads over the ranks: in place on every rank
   * (all-reduce), or into the plan's slices, each rank getting the sum of its own part
   * (reduce-scatter; the sharded communicator only). */
  void (*start_allreduce)(void *t, float *grads, size_t off, size_t n);
  void (*start_reduce_scatter)(void *t, float *grads, size_t off, size_t n);
  /* Optional: after bucket_ready's calls (let the library progress the calls in flight). */
  void (*poll)(void *t);
  /* Optional: open (1) and close (0) a group around finish's calls for the gaps. */
  void (*group)(void *t, int open);
  /* Wait for the step's calls: grads (n elements) then holds the sums (all of it, or this rank's
   * slice).  Returns the seconds blocked on communication. */
  double (*wait_all)(void *t, float *grads, size_t n);
  /* Blocking in-place sum of buf (device, n elements) over the ranks. */
  void (*allreduce_sum)(void *t, float *buf, size_t n);
  /* Sharded only: every slice of buf (device, plan->size elements) from its owner to every rank. */
  void (*allgather)(void *t, float *buf);
  void (*destroy)(void *t); /* frees t */
};

/* The communicator over the current group (comm_size ranks) doing its collectives with tr on t,
 * which it then owns: plan NULL, the all-reduce one; else the sharded optimizer's reduce-scatter
 * one on plan's slices (plan outlives it). */
struct grad_comm *grad_comm_create(const struct ops *ops, size_t bucket_bytes, const struct shard_plan *plan,
                                   const struct grad_comm_transport *tr, void *t);

/* ---- the bucketing rule (grad_comm_plan.c) ------------------------------------------------------
 *
 * One definition of which all-reduce calls a sequence of ready ranges becomes, shared by the
 * communicator (grad_comm.c, fed one range at a time, as backward hands them over) and by
 * scdino_allreduce_perf --sizes-from-model (fed a whole step at once through grad_comm_plan), so
 * that the benchmark sweeps exactly the calls the trainer makes.  The rule: a range adjacent to the
 * pending one (just below it, as backward goes down the buffer, or just above) joins it; any other
 * range sends the pending one first; the pending range is sent as soon as it reaches the bucket
 * size, and at the end of the step.  A range larger than the bucket is one call, never split. */

struct grad_comm_range {
  size_t off, count; /* elements [off, off + count) of the gradient buffer */
};

struct grad_comm_merge {
  size_t bucket; /* elements */
  size_t lo, hi; /* pending (not yet sent) range; empty when lo == hi */
};

/* The calls a communicator started this step (finish reduces what they left out: grad_comm_gaps),
 * with room for the gaps: gaps always holds n + 1 entries. */
struct grad_comm_sent {
  struct grad_comm_range *v, *gaps;
  int n, cap;
};
void grad_comm_sent_init(struct grad_comm_sent *s);
void grad_comm_sent_push(struct grad_comm_sent *s, struct grad_comm_range r);
void grad_comm_sent_free(struct grad_comm_sent *s);

/* Elements of a bucket of bucket_bytes (0 = GRAD_COMM_BUCKET_BYTES) fp32 gradients; at least 1. */
size_t grad_comm_bucket_elems(size_t bucket_bytes);
void grad_comm_merge_init(struct grad_comm_merge *m, size_t bucket_bytes);
/* Range [off, off + count) is ready: writes the calls to start now (0, 1 or 2, in that order) to
 * out and returns how many.  An empty range changes nothing. */
int grad_comm_merge_add(struct grad_comm_merge *m, size_t off, size_t count, struct grad_comm_range out[2]);
/* End of backward: the pending range, if any (returns 0 or 1), and the state is empty again. */
int grad_comm_merge_flush(struct grad_comm_merge *m, struct grad_comm_range *out);
/* The parts of [0, total) that no range of sent covers, ascending (finish reduces them: padding, or
 * a step without callbacks).  Sorts sent by offset; sent ranges must not overlap.  gaps has room
 * for nsent + 1 entries; returns how many. */
int grad_comm_gaps(struct grad_comm_range *sent, int nsent, size_t total, struct grad_comm_range *gaps);
/* A whole step: the all-reduce calls, in issue order, that the ready ranges ready[0..nready) (in
 * the order backward hands them over) become in a buffer of total elements, gaps last.  Writes at
 * most max calls and returns how many there are. */
int grad_comm_plan(const struct grad_comm_range *ready, int nready, size_t total, size_t bucket_bytes,
                   struct grad_comm_range *calls, int max);
/* The buffer range that goes to bucket_ready when tensors first..last of tt are final: from the
 * first one's offset up to the next tensor's (alignment padding included, so the ranges of a step
 * tile the buffer), or to the end of the buffer. */
struct grad_comm_range grad_comm_tensor_range(const struct tensor_table *tt, int first, int last);
/* Log (rank 0, verbosity 2) a step's bucket calls in issue order, as "gradient all-reduce WHO: N
 * bucket calls per step, elements in issue order: a b ...": the communicators do it for their first
 * step, so a run can be checked against scdino_allreduce_perf --sizes-from-model. */
void grad_comm_log_calls(const char *who, const struct grad_comm_range *calls, int n);

#endif
