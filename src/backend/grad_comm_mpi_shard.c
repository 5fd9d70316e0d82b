/* grad_comm_mpi_shard.c - the sharded optimizer's communicator (grad_comm.h): gradients
 * reduce-scattered per bucket with MPI_Ireduce_scatter, overlapped with backward as the all-reduce
 * communicator's buckets are, weights all-gathered after the step.  CPU backend (host memory).
 *
 * Each bucket call gives every rank the sum of the bucket's part inside its slice (plan,
 * model/shard_plan.h), received into a slice-sized buffer that finish copies to the slice's place in
 * the gradient buffer and divides by the world size, as the all-reduce communicator does: the mean
 * of the slice is the all-reduce's bit for bit as long as MPI sums a reduce-scatter's elements over
 * the ranks in the same order as an all-reduce's, which holds on 1 and 2 ranks for any order
 * (a + b == b + a) and was measured to hold on 3 (Open MPI 4.1, both in rank order; the test
 * tests/cli/train_shard.sh compares whole runs). */
#include "build_config.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/log.h"
#include "model/grad_comm.h"
#include "model/shard_plan.h"

/* One MPI_Ireduce_scatter in flight; counts (world entries) must live until it completes. */
struct req {
  MPI_Request r;
  int *counts;
};

struct shard_gc {
  const struct ops *ops;
  const struct shard_plan *plan;
  struct grad_comm_merge merge; /* the bucketing rule (grad_comm_plan.c) and its pending range */
  float *grads;                 /* this step's buffer */
  size_t n;
  float *slice;                 /* the reduced slice, plan->lo[rank] .. lo[rank + 1] */
  struct req *reqs;
  int nreq, capreq;
  struct grad_comm_sent sent;   /* this step's bucket calls; finish's gaps */
  int logged;
  int *counts, *displs;         /* world entries: allgather's */
};

/* Start the reduce-scatter of [off, off + n) (at most 2^30 elements per MPI call). */
static void launch(struct shard_gc *g, size_t off, size_t n) {
  const struct shard_plan *p = g->plan;
  const size_t chunk = (size_t)1 << 30;
  for (size_t o = off; o < off + n; o += chunk) {
    const size_t m = off + n - o < chunk ? off + n - o : chunk;
    if (g->nreq == g->capreq) {
      g->capreq = g->capreq ? 2 * g->capreq : 64;
      g->reqs = xrealloc(g->reqs, (size_t)g->capreq * sizeof *g->reqs);
    }
    struct req *r = &g->reqs[g->nreq++];
    r->counts = xcalloc((size_t)p->world, sizeof *r->counts);
    size_t mine = 0, c;
    for (int k = 0; k < p->world; k++) {
      const size_t at = shard_plan_overlap(p, k, o, m, &c);
      r->counts[k] = (int)c;
      if (k == p->rank) mine = c ? at - p->lo[k] : 0;
    }
    CHECK_MPI(MPI_Ireduce_scatter(g->grads + o, g->slice + mine, r->counts, MPI_FLOAT, MPI_SUM, comm_mpi(),
                                  &r->r));
  }
}

static void send(struct shard_gc *g, const struct grad_comm_range *r, int k) {
  for (int i = 0; i < k; i++) {
    grad_comm_sent_push(&g->sent, r[i]);
    launch(g, r[i].off, r[i].count);
  }
}

/* Let MPI progress the requests in flight (as grad_comm_mpi.c does). */
static void progress(struct shard_gc *g) {
  int flag = 0;
  for (int i = 0; i < g->nreq; i++)
    if (g->reqs[i].r != MPI_REQUEST_NULL) CHECK_MPI(MPI_Test(&g->reqs[i].r, &flag, MPI_STATUS_IGNORE));
}

static void s_begin(struct grad_comm *gc, float *grads, size_t n) {
  struct shard_gc *g = gc->impl;
  SCD_ASSERT(g->nreq == 0 && n == g->plan->size);
  g->grads = grads;
  g->n = n;
  g->merge.lo = g->merge.hi = 0;
  g->sent.n = 0;
}

static void s_bucket(struct grad_comm *gc, size_t off, size_t count) {
  struct shard_gc *g = gc->impl;
  SCD_ASSERT(off + count <= g->n);
  if (gc->world == 1 || count == 0) return;
  struct grad_comm_range r[2];
  send(g, r, grad_comm_merge_add(&g->merge, off, count, r));
  progress(g);
}

static void s_finish(struct grad_comm *gc) {
  struct shard_gc *g = gc->impl;
  if (gc->world == 1) return; /* the slice is the whole buffer, already the mean */
  struct grad_comm_range last;
  send(g, &last, grad_comm_merge_flush(&g->merge, &last));
  if (!g->logged) grad_comm_log_calls("mpi reduce-scatter", g->sent.v, g->sent.n);
  g->logged = 1;
  const double t0 = wtime();
  const int ng = grad_comm_gaps(g->sent.v, g->sent.n, g->n, g->sent.gaps);
  for (int i = 0; i < ng; i++) launch(g, g->sent.gaps[i].off, g->sent.gaps[i].count);
  for (int i = 0; i < g->nreq; i++) {
    if (g->reqs[i].r != MPI_REQUEST_NULL) CHECK_MPI(MPI_Wait(&g->reqs[i].r, MPI_STATUS_IGNORE));
    free(g->reqs[i].counts);
  }
  gc->wait_seconds += wtime() - t0;
  g->nreq = 0;
  g->sent.n = 0;
  const size_t lo = g->plan->lo[g->plan->rank], cnt = g->plan->lo[g->plan->rank + 1] - lo;
  g->ops->copy(g->grads + lo, g->slice, cnt * sizeof(float));
  /* The mean over ranks, as the all-reduce communicator: sum / world. */
  const float scale = 1.0f / (float)gc->world;
  struct ops_seg seg = {lo, cnt};
  g->ops->seg_scale(g->grads, &seg, &scale, 1);
}

static void s_allreduce(struct grad_comm *gc, float *buf, size_t n) {
  if (gc->world == 1) return;
  const double t0 = wtime();
  comm_allreduce_sum_f32(buf, n);
  gc->wait_seconds += wtime() - t0;
}

static void s_allgather(struct grad_comm *gc, float *buf) {
  struct shard_gc *g = gc->impl;
  if (gc->world == 1) return;
  const double t0 = wtime();
  CHECK_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, g->counts, g->displs, MPI_FLOAT,
                           comm_mpi()));
  gc->wait_seconds += wtime() - t0;
}

static void s_allgather_f64(struct grad_comm *gc, const double *mine, int n, const int *counts, double *all) {
  const double t0 = wtime();
  comm_allgatherv_f64(mine, n, counts, all);
  gc->wait_seconds += wtime() - t0;
}

static void s_gather_slice(struct grad_comm *gc, const float *slice, float *full) {
  struct shard_gc *g = gc->impl;
  comm_gatherv_f32(slice, g->counts, full);
}

static void s_destroy(struct grad_comm *gc) {
  if (!gc) return;
  struct shard_gc *g = gc->impl;
  free(g->slice);
  free(g->reqs);
  free(g->counts);
  free(g->displs);
  grad_comm_sent_free(&g->sent);
  free(g);
  free(gc);
}

struct grad_comm *grad_comm_mpi_shard_create(const struct ops *ops, size_t bucket_bytes,
                                             const struct shard_plan *plan) {
  SCD_ASSERT(!strcmp(ops->name, "cpu") && plan->world == comm_size() && plan->rank == comm_rank() &&
             plan->size <= INT_MAX);
  struct grad_comm *gc = xcalloc(1, sizeof *gc);
  struct shard_gc *g = xcalloc(1, sizeof *g);
  g->ops = ops;
  g->plan = plan;
  grad_comm_merge_init(&g->merge, bucket_bytes);
  grad_comm_sent_init(&g->sent);
  g->slice = xmalloc(MUL_SIZE(plan->max_slice + 1, sizeof(float)));
  shard_plan_counts(plan, &g->counts, &g->displs);
  gc->name = "mpi-shard";
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
