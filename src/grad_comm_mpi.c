/* grad_comm_mpi.c - gradient averaging with MPI_Iallreduce per bucket (grad_comm.h), any backend. */
#include "build_config.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "grad_comm.h"
#include "log.h"

/* One MPI_Iallreduce in flight: elements [off, off+n) of the gradient buffer. */
struct req {
  size_t off, n;
  MPI_Request r;
};

struct mpi_gc {
  const struct ops *ops;
  int host_mem;          /* the backend's device memory is host memory (CPU backend) */
  size_t bucket;         /* elements: ranges are merged up to this size */
  float *grads;          /* this step's buffer (device) */
  float *stage;          /* host copy of the gradients when !host_mem */
  size_t n;
  size_t lo, hi;         /* pending (not yet sent) merged range; empty when lo == hi */
  struct req *reqs;
  int nreq, capreq;
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
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, p, (int)m, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r->r));
  }
}

static void flush_pending(struct mpi_gc *g) {
  if (g->hi > g->lo) {
    launch(g, g->lo, g->hi - g->lo);
  }
  g->lo = g->hi = 0;
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
  g->lo = g->hi = 0;
}

static void m_bucket(struct grad_comm *gc, size_t off, size_t count) {
  struct mpi_gc *g = gc->impl;
  SCD_ASSERT(off + count <= g->n);
  if (gc->world == 1 || count == 0) return;
  if (g->hi > g->lo && off + count == g->lo) {
    g->lo = off; /* adjacent below the pending range: merge */
  } else if (g->hi > g->lo && off == g->hi) {
    g->hi = off + count; /* adjacent above */
  } else {
    flush_pending(g);
    g->lo = off;
    g->hi = off + count;
  }
  if (g->hi - g->lo >= g->bucket) flush_pending(g);
  progress(g);
}

static int cmp_req(const void *a, const void *b) {
  const struct req *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

static void m_finish(struct grad_comm *gc) {
  struct mpi_gc *g = gc->impl;
  if (gc->world == 1) return;
  flush_pending(g);
  const double t0 = wtime();
  /* Whatever no bucket covered (padding between ranges, or no callback at all) is reduced now. */
  qsort(g->reqs, (size_t)g->nreq, sizeof *g->reqs, cmp_req);
  size_t at = 0;
  const int nsent = g->nreq;
  for (int i = 0; i < nsent; i++) {
    const size_t off = g->reqs[i].off, n = g->reqs[i].n;
    SCD_ASSERT(off >= at); /* ranges never overlap */
    if (off > at) launch(g, at, off - at);
    at = off + n;
  }
  if (at < g->n) launch(g, at, g->n - at);
  for (int i = 0; i < g->nreq; i++)
    if (g->reqs[i].r != MPI_REQUEST_NULL) CHECK_MPI(MPI_Wait(&g->reqs[i].r, MPI_STATUS_IGNORE));
  gc->wait_seconds += wtime() - t0;
  if (!g->host_mem) g->ops->upload(g->grads, g->stage, g->n * sizeof(float));
  g->nreq = 0;
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
  free(g);
  free(gc);
}

struct grad_comm *grad_comm_mpi_create(const struct ops *ops, size_t bucket_bytes) {
  struct grad_comm *gc = xcalloc(1, sizeof *gc);
  struct mpi_gc *g = xcalloc(1, sizeof *g);
  g->ops = ops;
  g->host_mem = strcmp(ops->name, "cpu") == 0;
  g->bucket = (bucket_bytes ? bucket_bytes : GRAD_COMM_BUCKET_BYTES) / sizeof(float);
  if (g->bucket == 0) g->bucket = 1;
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
