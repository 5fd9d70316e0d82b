/* grad_comm_nccl_shard.c - the sharded optimizer's communicator with NCCL (grad_comm.h): gradients
 * reduced per bucket onto the slices' owners on a side stream, overlapped with backward as the
 * all-reduce communicator's buckets are, weights broadcast from their owners after the step.
 *
 * The slices (plan, model/shard_plan.h) end on norm blocks, so they are unequal and
 * ncclReduceScatter (equal counts) does not fit.  A bucket [off, off + n) is one NCCL group of an
 * ncclReduce (sum, in place) per rank whose slice it touches, with that rank as the root: the
 * owner gets the sum of its part, the other ranks' copies of it stay as they were.  finish divides
 * the slice by the world size, as the all-reduce communicator divides the whole buffer.  The
 * weights' all-gather is a group of ncclBroadcast calls (in place, root = each slice's owner).
 * Everything runs on the NCCL communicator, streams and watchdog of an all-reduce communicator
 * made for it (grad_comm_nccl.c), which also sums the DINO centre.
 *
 * Whether a slice's sum equals the all-reduce's bit for bit depends on NCCL adding the ranks'
 * values in the same order in ncclReduce as in ncclAllReduce: true on 1 and 2 ranks, and under the
 * emulator (tests/emu/nccl_mpi.c adds in rank order for both); real NCCL's ring and tree orders may
 * differ between the two on 3 or more ranks, the difference then being fp32 rounding.
 *
 * The host-side parts (the norm partials, the moments for a checkpoint) go over MPI. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/log.h"
#include "cuda/cuda_check.h"
#include "cuda/grad_comm_nccl.h"
#include "model/grad_comm.h"
#include "model/shard_plan.h"

struct shard_nccl {
  const struct ops *ops;
  const struct shard_plan *plan;
  struct grad_comm *ar;         /* the all-reduce communicator whose comm, streams and wait we use */
  struct grad_comm_nccl_parts x;
  cudaEvent_t ready, done, computed;
  struct grad_comm_merge merge; /* the bucketing rule (grad_comm_plan.c) and its pending range */
  float *grads;
  size_t n;
  struct grad_comm_sent sent;   /* ranges launched this step; finish's gaps */
  int logged;
  float *host;                  /* gather_slice's staging, max_slice floats */
  int *counts, *displs;         /* world entries: the slices (shard_plan_counts), for gather_slice */
};

/* The side stream waits for what the backend's stream has queued so far. */
static void side_after_compute(struct shard_nccl *g) {
  CHECK_CUDA(cudaEventRecord(g->ready, g->x.compute));
  CHECK_CUDA(cudaStreamWaitEvent(g->x.side, g->ready, 0));
}

/* One bucket: each owner's part reduced onto it, in one group. */
static void launch(struct shard_nccl *g, size_t off, size_t n) {
  const struct shard_plan *p = g->plan;
  if (n == 0) return;
  side_after_compute(g);
  CHECK_NCCL_COMM(ncclGroupStart(), g->x.comm);
  for (int r = 0; r < p->world; r++) {
    size_t c;
    const size_t at = shard_plan_overlap(p, r, off, n, &c);
    if (c)
      CHECK_NCCL_COMM(ncclReduce(g->grads + at, g->grads + at, c, ncclFloat32, ncclSum, r, g->x.comm, g->x.side),
                      g->x.comm);
  }
  CHECK_NCCL_COMM(ncclGroupEnd(), g->x.comm);
}

static void send(struct shard_nccl *g, const struct grad_comm_range *r, int k) {
  for (int i = 0; i < k; i++) {
    grad_comm_sent_push(&g->sent, r[i]);
    launch(g, r[i].off, r[i].count);
  }
}

static void s_begin(struct grad_comm *gc, float *grads, size_t n) {
  struct shard_nccl *g = gc->impl;
  SCD_ASSERT(n == g->plan->size);
  g->grads = grads;
  g->n = n;
  g->merge.lo = g->merge.hi = 0; /* nothing pending from an abandoned step */
  g->sent.n = 0;
}

static void s_bucket(struct grad_comm *gc, size_t off, size_t count) {
  struct shard_nccl *g = gc->impl;
  SCD_ASSERT(off + count <= g->n);
  struct grad_comm_range r[2];
  send(g, r, grad_comm_merge_add(&g->merge, off, count, r));
}

static void s_finish(struct grad_comm *gc) {
  struct shard_nccl *g = gc->impl;
  struct grad_comm_range last;
  send(g, &last, grad_comm_merge_flush(&g->merge, &last));
  if (!g->logged) grad_comm_log_calls("nccl reduce-scatter", g->sent.v, g->sent.n); /* before gaps sorts them */
  g->logged = 1;
  const int ng = grad_comm_gaps(g->sent.v, g->sent.n, g->n, g->sent.gaps);
  CHECK_NCCL_COMM(ncclGroupStart(), g->x.comm);
  for (int i = 0; i < ng; i++) launch(g, g->sent.gaps[i].off, g->sent.gaps[i].count);
  CHECK_NCCL_COMM(ncclGroupEnd(), g->x.comm);
  CHECK_CUDA(cudaEventRecord(g->done, g->x.side));
  CHECK_CUDA(cudaEventRecord(g->computed, g->x.compute));
  grad_comm_nccl_wait(g->ar, g->computed, "gradient reduce-scatter (waiting for backward)");
  const double t0 = wtime();
  grad_comm_nccl_wait(g->ar, g->done, "gradient reduce-scatter");
  gc->wait_seconds += wtime() - t0;
  CHECK_CUDA(cudaStreamWaitEvent(g->x.compute, g->done, 0));
  const struct shard_plan *p = g->plan;
  const struct ops_seg seg = {p->lo[p->rank], p->lo[p->rank + 1] - p->lo[p->rank]};
  if (gc->world > 1 && seg.n) { /* the mean over ranks, as the all-reduce communicator */
    const float scale = 1.0f / (float)gc->world;
    g->ops->seg_scale(g->grads, &seg, &scale, 1);
  }
  g->sent.n = 0;
}

static void s_allreduce(struct grad_comm *gc, float *buf, size_t n) {
  struct shard_nccl *g = gc->impl;
  const double w0 = g->ar->wait_seconds;
  g->ar->allreduce_sum(g->ar, buf, n);
  gc->wait_seconds += g->ar->wait_seconds - w0;
}

/* Every slice broadcast from its owner, in one group, after the optimizer's kernels; the backend's
 * stream waits for it (a stall shows at the next host wait, finish's, under the watchdog). */
static void s_allgather(struct grad_comm *gc, float *buf) {
  struct shard_nccl *g = gc->impl;
  const struct shard_plan *p = g->plan;
  if (gc->world == 1) return;
  side_after_compute(g);
  CHECK_NCCL_COMM(ncclGroupStart(), g->x.comm);
  for (int r = 0; r < p->world; r++) {
    const size_t c = p->lo[r + 1] - p->lo[r];
    if (c)
      CHECK_NCCL_COMM(ncclBroadcast(buf + p->lo[r], buf + p->lo[r], c, ncclFloat32, r, g->x.comm, g->x.side),
                      g->x.comm);
  }
  CHECK_NCCL_COMM(ncclGroupEnd(), g->x.comm);
  CHECK_CUDA(cudaEventRecord(g->done, g->x.side));
  CHECK_CUDA(cudaStreamWaitEvent(g->x.compute, g->done, 0));
}

static void s_allgather_f64(struct grad_comm *gc, const double *mine, int n, const int *counts, double *all) {
  const double t0 = wtime();
  comm_allgatherv_f64(mine, n, counts, all);
  gc->wait_seconds += wtime() - t0;
}

/* The slice downloaded, then gathered on rank 0 over MPI (checkpoints only). */
static void s_gather_slice(struct grad_comm *gc, const float *slice, float *full) {
  struct shard_nccl *g = gc->impl;
  const int me = g->plan->rank;
  if (gc->world == 1) {
    g->ops->download(full, slice, (size_t)g->counts[0] * sizeof(float));
    return;
  }
  g->ops->download(g->host, slice, (size_t)g->counts[me] * sizeof(float));
  comm_gatherv_f32(g->host, g->counts, full);
}

static void s_destroy(struct grad_comm *gc) {
  if (!gc) return;
  struct shard_nccl *g = gc->impl;
  /* The all-reduce communicator's destroy waits for the side stream under the watchdog. */
  g->ar->destroy(g->ar);
  CHECK_CUDA(cudaEventDestroy(g->ready));
  CHECK_CUDA(cudaEventDestroy(g->done));
  CHECK_CUDA(cudaEventDestroy(g->computed));
  grad_comm_sent_free(&g->sent);
  free(g->host);
  free(g->counts);
  free(g->displs);
  free(g);
  free(gc);
}

struct grad_comm *grad_comm_nccl_shard_create(const struct ops *ops, size_t bucket_bytes,
                                              const struct shard_plan *plan) {
  SCD_ASSERT(plan->world == comm_size() && plan->rank == comm_rank() && plan->size <= INT_MAX);
  struct grad_comm *gc = xcalloc(1, sizeof *gc);
  struct shard_nccl *g = xcalloc(1, sizeof *g);
  g->ar = grad_comm_nccl_create(ops, bucket_bytes); /* checks that ops is the CUDA backend */
  grad_comm_nccl_get_parts(g->ar, &g->x);
  g->ops = ops;
  g->plan = plan;
  grad_comm_merge_init(&g->merge, bucket_bytes);
  grad_comm_sent_init(&g->sent);
  CHECK_CUDA(cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&g->computed, cudaEventDisableTiming));
  g->host = xmalloc(MUL_SIZE(plan->max_slice + 1, sizeof(float)));
  shard_plan_counts(plan, &g->counts, &g->displs);
  gc->name = "nccl-shard";
  gc->world = plan->world;
  gc->begin_step = s_begin;
  gc->bucket_ready = s_bucket;
  gc->finish = s_finish;
  gc->allreduce_sum = s_allreduce;
  gc->destroy = s_destroy;
  gc->impl = g;
  gc->plan = plan;
  gc->allgather = s_allgather;
  gc->allgather_f64 = s_allgather_f64;
  gc->gather_slice = s_gather_slice;
  return gc;
}
