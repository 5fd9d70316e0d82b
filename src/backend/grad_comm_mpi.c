/* grad_comm_mpi.c - the MPI transport of the gradient communicator (grad_comm.h, grad_comm.c): a
 * bucket is one MPI_Iallreduce (any backend: device memory is staged through the host when the
 * backend is not the CPU one), or with the sharded optimizer one MPI_Ireduce_scatter into a
 * slice-sized buffer that wait_all copies to the slice's place in the gradient buffer, the weights
 * then all-gathered with MPI_Allgatherv (CPU backend, host memory).
 *
 * The mean of the slice is the all-reduce's bit for bit as long as MPI sums a reduce-scatter's
 * elements over the ranks in the same order as an all-reduce's, which holds on 1 and 2 ranks for
 * any order (a + b == b + a) and was measured to hold on 3 (Open MPI 4.1, both in rank order; the
 * test tests/cli/train_shard.sh compares whole runs). */
#include "build_config.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/log.h"
#include "model/grad_comm.h"
#include "model/shard_plan.h"

#define CHUNK ((size_t)1 << 30) /* elements per MPI call at most (MPI counts are ints) */

/* One call in flight; a reduce-scatter's counts (world entries) must live until it completes. */
struct req {
  MPI_Request r;
  int *counts;
};

struct mpi_tr {
  const struct ops *ops;
  int host_mem;                  /* the backend's device memory is host memory (CPU backend) */
  const struct shard_plan *plan; /* the sharded communicator's, else NULL */
  float *stage;                  /* host copy of the gradients when !host_mem */
  size_t nstage;
  float *cstage;                 /* host staging for allreduce_sum */
  size_t ncstage;
  float *slice;                  /* sharded: the reduced slice, plan->lo[rank] .. lo[rank + 1] */
  int *counts, *displs;          /* sharded: the slices (world entries), allgather's */
  struct req *reqs;
  int nreq, capreq;
};

static struct req *new_req(struct mpi_tr *g) {
  if (g->nreq == g->capreq) {
    g->capreq = g->capreq ? 2 * g->capreq : 64;
    g->reqs = xrealloc(g->reqs, (size_t)g->capreq * sizeof *g->reqs);
  }
  struct req *r = &g->reqs[g->nreq++];
  r->counts = NULL;
  return r;
}

static void m_begin(void *t, size_t n) {
  struct mpi_tr *g = t;
  SCD_ASSERT(g->nreq == 0);
  if (!g->host_mem && n > g->nstage) {
    free(g->stage);
    g->stage = xmalloc(MUL_SIZE(n, sizeof(float)));
    g->nstage = n;
  }
}

static void m_start_allreduce(void *t, float *grads, size_t off, size_t n) {
  struct mpi_tr *g = t;
  for (size_t o = off; o < off + n; o += CHUNK) {
    const size_t m = off + n - o < CHUNK ? off + n - o : CHUNK;
    float *p = g->host_mem ? grads + o : g->stage + o;
    if (!g->host_mem) g->ops->download(p, grads + o, m * sizeof(float));
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, p, (int)m, MPI_FLOAT, MPI_SUM, comm_mpi(), &new_req(g)->r));
  }
}

static void m_start_reduce_scatter(void *t, float *grads, size_t off, size_t n) {
  struct mpi_tr *g = t;
  const struct shard_plan *p = g->plan;
  for (size_t o = off; o < off + n; o += CHUNK) {
    const size_t m = off + n - o < CHUNK ? off + n - o : CHUNK;
    struct req *r = new_req(g);
    r->counts = xcalloc((size_t)p->world, sizeof *r->counts);
    size_t mine = 0, c;
    for (int k = 0; k < p->world; k++) {
      const size_t at = shard_plan_overlap(p, k, o, m, &c);
      r->counts[k] = (int)c;
      if (k == p->rank) mine = c ? at - p->lo[k] : 0;
    }
    CHECK_MPI(MPI_Ireduce_scatter(grads + o, g->slice + mine, r->counts, MPI_FLOAT, MPI_SUM, comm_mpi(), &r->r));
  }
}

/* Let MPI progress the requests in flight (Open MPI advances non-blocking collectives only inside
 * MPI calls, so poke it whenever the backward hands over a bucket). */
static void m_poll(void *t) {
  struct mpi_tr *g = t;
  int flag = 0;
  for (int i = 0; i < g->nreq; i++)
    if (g->reqs[i].r != MPI_REQUEST_NULL) CHECK_MPI(MPI_Test(&g->reqs[i].r, &flag, MPI_STATUS_IGNORE));
}

static double m_wait_all(void *t, float *grads, size_t n) {
  struct mpi_tr *g = t;
  const double t0 = wtime();
  for (int i = 0; i < g->nreq; i++) {
    if (g->reqs[i].r != MPI_REQUEST_NULL) CHECK_MPI(MPI_Wait(&g->reqs[i].r, MPI_STATUS_IGNORE));
    free(g->reqs[i].counts);
  }
  const double waited = wtime() - t0;
  g->nreq = 0;
  if (g->plan) {
    const size_t lo = g->plan->lo[g->plan->rank], cnt = g->plan->lo[g->plan->rank + 1] - lo;
    g->ops->copy(grads + lo, g->slice, cnt * sizeof(float));
  } else if (!g->host_mem) {
    g->ops->upload(grads, g->stage, n * sizeof(float));
  }
  return waited;
}

static void m_allreduce_sum(void *t, float *buf, size_t n) {
  struct mpi_tr *g = t;
  if (g->host_mem) {
    comm_allreduce_sum_f32(buf, n);
    return;
  }
  if (n > g->ncstage) {
    free(g->cstage);
    g->cstage = xmalloc(MUL_SIZE(n, sizeof(float)));
    g->ncstage = n;
  }
  g->ops->download(g->cstage, buf, n * sizeof(float));
  comm_allreduce_sum_f32(g->cstage, n);
  g->ops->upload(buf, g->cstage, n * sizeof(float));
}

static void m_allgather(void *t, float *buf) {
  struct mpi_tr *g = t;
  CHECK_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, g->counts, g->displs, MPI_FLOAT,
                           comm_mpi()));
}

static void m_destroy(void *t) {
  struct mpi_tr *g = t;
  free(g->stage);
  free(g->cstage);
  free(g->slice);
  free(g->counts);
  free(g->displs);
  free(g->reqs);
  free(g);
}

static const struct grad_comm_transport mpi_transport = {
    .name = "mpi",
    .single_rank = 0,
    .begin_step = m_begin,
    .start_allreduce = m_start_allreduce,
    .start_reduce_scatter = m_start_reduce_scatter,
    .poll = m_poll,
    .wait_all = m_wait_all,
    .allreduce_sum = m_allreduce_sum,
    .allgather = m_allgather,
    .destroy = m_destroy,
};

static struct mpi_tr *mpi_tr_new(const struct ops *ops) {
  struct mpi_tr *g = xcalloc(1, sizeof *g);
  g->ops = ops;
  g->host_mem = strcmp(ops->name, "cpu") == 0;
  return g;
}

struct grad_comm *grad_comm_mpi_create(const struct ops *ops, size_t bucket_bytes) {
  return grad_comm_create(ops, bucket_bytes, NULL, &mpi_transport, mpi_tr_new(ops));
}

struct grad_comm *grad_comm_mpi_shard_create(const struct ops *ops, size_t bucket_bytes,
                                             const struct shard_plan *plan) {
  SCD_ASSERT(!strcmp(ops->name, "cpu")); /* the reduce-scatter works on host memory */
  struct mpi_tr *g = mpi_tr_new(ops);
  g->plan = plan;
  g->slice = xmalloc(MUL_SIZE(plan->max_slice + 1, sizeof(float)));
  shard_plan_counts(plan, &g->counts, &g->displs);
  return grad_comm_create(ops, bucket_bytes, plan, &mpi_transport, g);
}
