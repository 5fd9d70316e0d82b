/* grad_comm.c - the gradient communicator (grad_comm.h) that every transport shares: it merges the
 * ranges backward hands over into buckets (grad_comm_plan.c's rule) and starts each bucket's call
 * through the transport, reduces at finish what no bucket covered, divides by the world size,
 * counts the time spent waiting, and fills the public table.  The shard functions that run on the
 * host (the norm partials, the moments for a checkpoint) go over MPI (core/comm.h) whatever the
 * transport. */
#include "build_config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "model/grad_comm.h"
#include "model/shard_plan.h"

struct core {
  struct grad_comm pub;
  const struct ops *ops;
  const struct grad_comm_transport *tr;
  void *t;                      /* the transport's state */
  struct grad_comm_merge merge; /* the bucketing rule and its pending range */
  struct grad_comm_sent sent;   /* this step's bucket calls; finish's gaps */
  float *grads;                 /* this step's buffer (device) */
  size_t n;
  int logged;                   /* the first step's calls have been logged */
  char name[24], who[40];       /* the table's name; the log's ("nccl reduce-scatter") */
  int *counts;                  /* sharded: the slices as MPI counts (gather_slice) */
  float *host;                  /* sharded, device memory: gather_slice's staging */
};

/* One rank and a transport that makes no calls there: the gradients are already the mean. */
static int skipped(const struct core *c) { return c->pub.world == 1 && !c->tr->single_rank; }

static void start(struct core *c, struct grad_comm_range r) {
  if (c->pub.plan)
    c->tr->start_reduce_scatter(c->t, c->grads, r.off, r.count);
  else
    c->tr->start_allreduce(c->t, c->grads, r.off, r.count);
}

/* Start the calls the merge rule gave (remembered so that finish knows what is left). */
static void send(struct core *c, const struct grad_comm_range *r, int k) {
  for (int i = 0; i < k; i++) {
    grad_comm_sent_push(&c->sent, r[i]);
    start(c, r[i]);
  }
}

static void c_begin(struct grad_comm *gc, float *grads, size_t n) {
  struct core *c = gc->impl;
  SCD_ASSERT(!gc->plan || n == gc->plan->size);
  c->grads = grads;
  c->n = n;
  c->merge.lo = c->merge.hi = 0; /* nothing pending from an abandoned step */
  c->sent.n = 0;
  if (c->tr->begin_step) c->tr->begin_step(c->t, n);
}

static void c_bucket(struct grad_comm *gc, size_t off, size_t count) {
  struct core *c = gc->impl;
  SCD_ASSERT(off + count <= c->n);
  if (skipped(c) || count == 0) return;
  struct grad_comm_range r[2];
  send(c, r, grad_comm_merge_add(&c->merge, off, count, r));
  if (c->tr->poll) c->tr->poll(c->t);
}

static void c_finish(struct grad_comm *gc) {
  struct core *c = gc->impl;
  if (skipped(c)) return;
  struct grad_comm_range last;
  send(c, &last, grad_comm_merge_flush(&c->merge, &last));
  if (!c->logged) grad_comm_log_calls(c->who, c->sent.v, c->sent.n); /* before gaps sorts them */
  c->logged = 1;
  /* Whatever no bucket covered (padding between ranges, or no callback at all) is reduced now. */
  const int ng = grad_comm_gaps(c->sent.v, c->sent.n, c->n, c->sent.gaps);
  if (c->tr->group) c->tr->group(c->t, 1);
  for (int i = 0; i < ng; i++) start(c, c->sent.gaps[i]);
  if (c->tr->group) c->tr->group(c->t, 0);
  gc->wait_seconds += c->tr->wait_all(c->t, c->grads, c->n);
  c->sent.n = 0;
  if (gc->world == 1) return;
  /* The mean over ranks, as DDP: sum / world (exact for a power-of-two world), on what this rank
   * holds the sums of. */
  const struct shard_plan *p = gc->plan;
  const struct ops_seg seg = p ? (struct ops_seg){p->lo[p->rank], p->lo[p->rank + 1] - p->lo[p->rank]}
                               : (struct ops_seg){0, c->n};
  const float scale = 1.0f / (float)gc->world;
  if (seg.n) c->ops->seg_scale(c->grads, &seg, &scale, 1);
}

static void c_allreduce(struct grad_comm *gc, float *buf, size_t n) {
  struct core *c = gc->impl;
  if (skipped(c) || n == 0) return;
  const double t0 = wtime();
  c->tr->allreduce_sum(c->t, buf, n);
  gc->wait_seconds += wtime() - t0;
}

static void c_allgather(struct grad_comm *gc, float *buf) {
  struct core *c = gc->impl;
  if (gc->world == 1) return; /* the slice is the whole buffer */
  const double t0 = wtime();
  c->tr->allgather(c->t, buf);
  gc->wait_seconds += wtime() - t0;
}

static void c_allgather_f64(struct grad_comm *gc, const double *mine, int n, const int *counts, double *all) {
  const double t0 = wtime();
  comm_allgatherv_f64(mine, n, counts, all);
  gc->wait_seconds += wtime() - t0;
}

/* The slice (downloaded first when the backend's memory is not the host's) gathered on rank 0. */
static void c_gather_slice(struct grad_comm *gc, const float *slice, float *full) {
  struct core *c = gc->impl;
  if (c->host) {
    c->ops->download(c->host, slice, (size_t)c->counts[gc->plan->rank] * sizeof(float));
    slice = c->host;
  }
  comm_gatherv_f32(slice, c->counts, full);
}

static void c_destroy(struct grad_comm *gc) {
  if (!gc) return;
  struct core *c = gc->impl;
  c->tr->destroy(c->t);
  grad_comm_sent_free(&c->sent);
  free(c->counts);
  free(c->host);
  free(c);
}

struct grad_comm *grad_comm_create(const struct ops *ops, size_t bucket_bytes, const struct shard_plan *plan,
                                   const struct grad_comm_transport *tr, void *t) {
  struct core *c = xcalloc(1, sizeof *c);
  struct grad_comm *gc = &c->pub;
  c->ops = ops;
  c->tr = tr;
  c->t = t;
  grad_comm_merge_init(&c->merge, bucket_bytes);
  grad_comm_sent_init(&c->sent);
  snprintf(c->name, sizeof c->name, "%s%s", tr->name, plan ? "-shard" : "");
  snprintf(c->who, sizeof c->who, "%s%s", tr->name, plan ? " reduce-scatter" : "");
  gc->name = c->name;
  gc->world = comm_size();
  gc->begin_step = c_begin;
  gc->bucket_ready = c_bucket;
  gc->finish = c_finish;
  gc->allreduce_sum = c_allreduce;
  gc->destroy = c_destroy;
  gc->impl = c;
  if (plan) {
    SCD_ASSERT(plan->world == gc->world && plan->rank == comm_rank() && plan->size <= INT_MAX);
    int *displs;
    shard_plan_counts(plan, &c->counts, &displs);
    free(displs);
    if (strcmp(ops->name, "cpu") != 0) c->host = xmalloc(MUL_SIZE(plan->max_slice + 1, sizeof(float)));
    gc->plan = plan;
    gc->allgather = c_allgather;
    gc->allgather_f64 = c_allgather_f64;
    gc->gather_slice = c_gather_slice;
  }
  return gc;
}

void grad_comm_allreduce_cb(float *buf, size_t n, void *ctx) {
  struct grad_comm *gc = ctx;
  gc->allreduce_sum(gc, buf, n);
}
