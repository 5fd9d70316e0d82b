/* grad_comm_mpi.c - gradient averaging with MPI_Iallreduce per bucket (grad_comm.h), any backend. */
#include "build_config.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/log.h"
#include "model/grad_comm.h"

/* One MPI_Iallreduce in flight: elements [off, off+n) of the gradient buffer. */
struct req {
  size_t off, n;
  MPI_Request r;
};

struct mpi_gc {
  const struct ops *ops;
  int host_mem;          /* the backend's device memory is host memory (CPU backend) */
  struct grad_comm_merge merge; /* the bucketing rule (grad_comm_plan.c) and its pending range */
  float *grads;          /* this step's buffer (device) */
  float *stage;          /* host copy of the gradients when !host_mem */
  size_t n;
  struct req *reqs;
  int nreq, capreq;
  struct grad_comm_sent sent; /* this step's bucket calls (before chunking); finish's gaps */
  int logged;                          /* the first step's calls have been logged */
  float *cstage;         /* host staging for allreduce_sum */
  size_t ncstage;
};

/* Start the reduction of [off, off+n) (at most INT_MAX elements per MPI call). */
static void launch(struct mpi_gc *g, size_t off, size_t n) {
  const size_t chunk = (size_t)1 << 30;
  for (size_t o = off; o < off + n; o += chunk) {
    const size_t m = off + n - o < chunk ? off + n - o : chunk;
    if (g->nreq == g->capreq) {
      g->capreq = g->capreq ? 2 * g->capreq : 64;
      g->reqs = xrealloc(g->reqs, (size_t)g->capreq * sizeof *g->reqs);
    }
    struct req *r = &g->reqs[g->nreq++];
    r->off = o;
    r->n = m;
    float *p = g->host_mem ? g->grads + o : g->stage + o;
    if (!g->host_mem) g->ops->download(p, g->grads + o, m * sizeof(float));
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, p, (int)m, MPI_FLOAT, MPI_SUM, comm_mpi(), &r->r));
  }
}

/* Start the calls the merge rule gave (remembered so that finish knows what is left). */
static void send(struct mpi_gc *g, const struct grad_comm_range *r, int k) {
  for (int i = 0; i < k; i++) {
    grad_comm_sent_push(&g->sent, r[i]);
    launch(g, r[i].off, r[i].count);
  }
}

/* Let MPI progress the requests in flight (Open MPI advances non-blocking collectives only inside
 * MPI calls, so poke it whenever the backward hands over a bucket). */
static void progress(struct mpi_gc *g) {
  if (g->nreq == 0) return;
  int flag = 0;
  for (int i = 0; i < g->nreq; i++) {
    if (g->reqs[i].r == MPI_REQUEST_NULL) continue;
    CHECK_MPI(MPI_Test(&g->reqs[i].r, &flag, MPI_STATUS_IGNORE));
  }
}

static void m_begin(struct grad_comm *gc, float *grads, size_t n) {
  struct mpi_gc *g = gc->impl;
  SCD_ASSERT(g->nreq == 0);
  g->grads = grads;
  if (!g->host_mem && n > g->n) {
    free(g->stage);
    g->stage = xmalloc(MUL_SIZE(n, sizeof(float)));
  }
  g->n = n;
  g->merge.lo = g->merge.hi = 0; /* nothing pending from an abandoned step */
  g->sent.n = 0;
}

static void m_bucket(struct grad_comm *gc, size_t off, size_t count) {
  struct mpi_gc *g = gc->impl;
  SCD_ASSERT(off + count <= g->n);
  if (gc->world == 1 || count == 0) return;
  struct grad_comm_range r[2];
  send(g, r, grad_comm_merge_add(&g->merge, off, count, r));
  progress(g);
}

static void m_finish(struct grad_comm *gc) {
  struct mpi_gc *g = gc->impl;
  if (gc->world == 1) return;
  struct grad_comm_range last;
  send(g, &last, grad_comm_merge_flush(&g->merge, &last));
  if (!g->logged) grad_comm_log_calls("mpi", g->sent.v, g->sent.n); /* before gaps sorts them */
  g->logged = 1;
  const double t0 = wtime();
  /* Whatever no bucket covered (padding between ranges, or no callback at all) is reduced now. */
  const int ng = grad_comm_gaps(g->sent.v, g->sent.n, g->n, g->sent.gaps);
  for (int i = 0; i < ng; i++) launch(g, g->sent.gaps[i].off, g->sent.gaps[i].count);
  for (int i = 0; i < g->nreq; i++)
    if (g->reqs[i].r != MPI_REQUEST_NULL) CHECK_MPI(MPI_Wait(&g->reqs[i].r, MPI_STATUS_IGNORE));
  gc->wait_seconds += wtime() - t0;
  if (!g->host_mem) g->ops->upload(g->grads, g->stage, g->n * sizeof(float));
  g->nreq = 0;
  g->sent.n = 0;
  /* The mean over ranks, as DDP: sum / world (exact for a power-of-two world). */
  const float scale = 1.0f / (float)gc->world;
  struct ops_seg seg = {0, g->n};
  g->ops->seg_scale(g->grads, &seg, &scale, 1);
}

static void m_allreduce(struct grad_comm *gc, float *buf, size_t n) {
  struct mpi_gc *g = gc->impl;
  if (gc->world == 1) return;
  const double t0 = wtime();
  if (g->host_mem) {
    comm_allreduce_sum_f32(buf, n);
  } else {
    if (n > g->ncstage) {
      free(g->cstage);
      g->cstage = xmalloc(MUL_SIZE(n, sizeof(float)));
      g->ncstage = n;
    }
    g->ops->download(g->cstage, buf, n * sizeof(float));
    comm_allreduce_sum_f32(g->cstage, n);
    g->ops->upload(buf, g->cstage, n * sizeof(float));
  }
  gc->wait_seconds += wtime() - t0;
}

static void m_destroy(struct grad_comm *gc) {
  if (!gc) return;
  struct mpi_gc *g = gc->impl;
  free(g->stage);
  free(g->cstage);
  free(g->reqs);
  grad_comm_sent_free(&g->sent);
  free(g);
  free(gc);
}

struct grad_comm *grad_comm_mpi_create(const struct ops *ops, size_t bucket_bytes) {
  struct grad_comm *gc = xcalloc(1, sizeof *gc);
  struct mpi_gc *g = xcalloc(1, sizeof *g);
  g->ops = ops;
  g->host_mem = strcmp(ops->name, "cpu") == 0;
  grad_comm_merge_init(&g->merge, bucket_bytes);
  grad_comm_sent_init(&g->sent);
  gc->name = "mpi";
  gc->world = comm_size();
  gc->begin_step = m_begin;
  gc->bucket_ready = m_bucket;
  gc->finish = m_finish;
  gc->allreduce_sum = m_allreduce;
  gc->destroy = m_destroy;
  gc->impl = g;
  return gc;
}

void grad_comm_allreduce_cb(float *buf, size_t n, void *ctx) {
  struct grad_comm *gc = ctx;
  gc->allreduce_sum(gc, buf, n);
}
