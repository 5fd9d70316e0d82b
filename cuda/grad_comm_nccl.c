/* grad_comm_nccl.c - gradient averaging with NCCL (grad_comm.h): buckets all-reduced on a side stream
 * as backward produces them, the DINO centre's sums, and a watchdog that ends the job when a
 * collective fails or stalls.
 *
 * One rank per GPU (the CUDA backend has picked the device from the local rank); the communicator
 * comes from an id that rank 0 broadcasts over MPI.  Each bucket: an event recorded on the
 * backend's stream after the kernels that produced it, the side stream waits for it, then
 * ncclAllReduce (sum) in place.  finish() waits for the side stream (the time counted as exposed
 * communication) and divides by the world size on the backend's stream, as the MPI version does.
 * Host waits poll the GPU, ncclCommGetAsyncError and a timeout (&gpu nccl_timeout seconds, 600
 * by default), so a dead peer or a stalled network ends the job with a message instead of a hang. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef HAVE_LIBFABRIC
#include <rdma/fabric.h>
#endif

#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/log.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/grad_comm_nccl.h"
#include "model/grad_comm.h"

#define NCCL_TIMEOUT_DEFAULT 600.0 /* seconds */

struct nccl_gc {
  const struct ops *ops;
  ncclComm_t comm;
  cudaStream_t compute, side;
  cudaEvent_t ready, done, computed;
  struct grad_comm_merge merge; /* the bucketing rule (grad_comm_plan.c) and its pending range */
  float *grads;
  size_t n;
  struct grad_comm_sent sent; /* ranges launched this step; finish's gaps */
  int logged;                          /* the first step's calls have been logged */
  double timeout;
};

/* The communicator comm_exit_all aborts: an agreed error (a non-finite loss on every rank) can end
 * the job with collectives still queued, which ncclCommDestroy would wait for. */
static ncclComm_t live_comm;

static void abort_live_comm(void) {
  if (!live_comm) return;
  ncclCommAbort(live_comm);
  live_comm = NULL;
}

/* ---- start-up report ---------------------------------------------------------------------------- */

/* Which NCCL network plugin the library loaded (dlopen with RTLD_NOLOAD finds only loaded ones). */
static void loaded_net_plugin(char *buf, size_t n) {
  char names[4][128] = {"libnccl-net.so", "libnccl-net-ofi.so", "libnccl-net-aws-ofi.so", ""};
  const char *p = getenv("NCCL_NET_PLUGIN");
  if (p && *p) snprintf(names[3], sizeof names[3], "libnccl-net-%s.so", p);
  snprintf(buf, n, "none (NCCL's own IB/socket transports)");
  for (int i = 0; i < 4; i++) {
    if (!names[i][0]) continue;
    void *h = dlopen(names[i], RTLD_LAZY | RTLD_NOLOAD);
    if (h) {
      snprintf(buf, n, "%s", names[i]);
      dlclose(h);
      return;
    }
  }
}

/* The libfabric providers visible to this process (efa, tcp, shm, ...). */
static void fabric_providers(char *buf, size_t n) {
#ifdef HAVE_LIBFABRIC
  struct fi_info *hints = fi_allocinfo(), *info = NULL;
  buf[0] = 0;
  if (!hints) {
    snprintf(buf, n, "(fi_allocinfo failed)");
    return;
  }
  hints->ep_attr->type = FI_EP_RDM;
  const int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info);
  if (rc != 0) {
    snprintf(buf, n, "none (fi_getinfo: %s)", fi_strerror(-rc));
  } else {
    size_t len = 0;
    for (struct fi_info *i = info; i; i = i->next) {
      const char *pn = i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "?";
      char key[80];
      snprintf(key, sizeof key, "%s,", pn);
      if (strstr(buf, key) || len + strlen(key) + 1 >= n) continue; /* listed once */
      memcpy(buf + len, key, strlen(key) + 1);
      len += strlen(key);
    }
    if (len) buf[len - 1] = 0;
    fi_freeinfo(info);
  }
  fi_freeinfo(hints);
#else
  snprintf(buf, n, "(scdino built without libfabric)");
#endif
}

static void report(void) {
  int v = 0;
  CHECK_NCCL(ncclGetVersion(&v));
  char plugin[512], prov[1024];
  loaded_net_plugin(plugin, sizeof plugin);
  fabric_providers(prov, sizeof prov);
  const char *net = getenv("NCCL_NET"), *fi = getenv("FI_PROVIDER");
  log_info("NCCL %d.%d.%d (built against %d.%d.%d): NCCL_NET=%s, net plugin loaded: %s", v / 10000,
           (v % 10000) / 100, v % 100, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, net && *net ? net : "(unset)",
           plugin);
  log_info("libfabric: FI_PROVIDER=%s, providers seen: %s", fi && *fi ? fi : "(unset)", prov);
  log_detail("NCCL_DEBUG=INFO shows the transport NCCL picks (look for 'NET/OFI Selected Provider is efa')");
}

/* ---- waiting with a watchdog -------------------------------------------------------------------- */

/* Wait until ev has completed, polling the communicator's asynchronous error and the timeout. */
static void wait_event(struct nccl_gc *g, cudaEvent_t ev, const char *what) {
  const double t0 = wtime();
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) CHECK_CUDA(e);
    ncclResult_t ae = ncclSuccess;
    CHECK_NCCL_COMM(ncclCommGetAsyncError(g->comm, &ae), g->comm);
    if (ae != ncclSuccess && ae != ncclInProgress) {
      const char *last = ncclGetLastError(g->comm);
      char msg[512];
      snprintf(msg, sizeof msg, "%s", last ? last : "");
      if (live_comm == g->comm) live_comm = NULL;
      ncclCommAbort(g->comm);
      scd_fatal(SCD_EXIT_FAILURE, "NCCL %s failed on rank %d: %s%s%s", what, comm_rank(),
                ncclGetErrorString(ae), msg[0] ? ": " : "", msg);
    }
    if (wtime() - t0 > g->timeout) {
      if (live_comm == g->comm) live_comm = NULL;
      ncclCommAbort(g->comm);
      scd_fatal(SCD_EXIT_FAILURE,
                "NCCL %s did not complete within %.0f s on rank %d: another rank died or stalls, or "
                "the network hangs (NCCL_DEBUG=INFO tells more; &gpu nccl_timeout sets the limit)",
                what, g->timeout, comm_rank());
    }
    const struct timespec ts = {0, 50000}; /* 50 us */
    nanosleep(&ts, NULL);
  }
}

/* ---- buckets ------------------------------------------------------------------------------------ */

static void launch(struct nccl_gc *g, size_t off, size_t n) {
  if (n == 0) return;
  /* after the kernels queued so far (they produced this range) */
  CHECK_CUDA(cudaEventRecord(g->ready, g->compute));
  CHECK_CUDA(cudaStreamWaitEvent(g->side, g->ready, 0));
  CHECK_NCCL_COMM(ncclAllReduce(g->grads + off, g->grads + off, n, ncclFloat32, ncclSum, g->comm,
                                g->side),
                  g->comm);
}

/* Start the calls the merge rule gave (remembered so that finish knows what is left). */
static void send(struct nccl_gc *g, const struct grad_comm_range *r, int k) {
  for (int i = 0; i < k; i++) {
    grad_comm_sent_push(&g->sent, r[i]);
    launch(g, r[i].off, r[i].count);
  }
}

static void n_begin(struct grad_comm *gc, float *grads, size_t n) {
  struct nccl_gc *g = gc->impl;
  g->grads = grads;
  g->n = n;
  g->merge.lo = g->merge.hi = 0; /* nothing pending from an abandoned step */
  g->sent.n = 0;
}

static void n_bucket(struct grad_comm *gc, size_t off, size_t count) {
  struct nccl_gc *g = gc->impl;
  SCD_ASSERT(off + count <= g->n);
  struct grad_comm_range r[2];
  send(g, r, grad_comm_merge_add(&g->merge, off, count, r));
}

static void n_finish(struct grad_comm *gc) {
  struct nccl_gc *g = gc->impl;
  struct grad_comm_range last;
  send(g, &last, grad_comm_merge_flush(&g->merge, &last));
  if (!g->logged) grad_comm_log_calls("nccl", g->sent.v, g->sent.n); /* before gaps sorts them */
  g->logged = 1;
  /* What no bucket covered (padding, or no callback at all) is reduced now, in one group. */
  const int ng = grad_comm_gaps(g->sent.v, g->sent.n, g->n, g->sent.gaps);
  CHECK_NCCL_COMM(ncclGroupStart(), g->comm);
  for (int i = 0; i < ng; i++) launch(g, g->sent.gaps[i].off, g->sent.gaps[i].count);
  CHECK_NCCL_COMM(ncclGroupEnd(), g->comm);
  CHECK_CUDA(cudaEventRecord(g->done, g->side));
  /* First the compute that is still queued (not communication), then what is left of NCCL. */
  CHECK_CUDA(cudaEventRecord(g->computed, g->compute));
  wait_event(g, g->computed, "gradient all-reduce (waiting for backward)");
  const double t0 = wtime();
  wait_event(g, g->done, "gradient all-reduce");
  gc->wait_seconds += wtime() - t0;
  CHECK_CUDA(cudaStreamWaitEvent(g->compute, g->done, 0));
  if (gc->world > 1) { /* the mean over ranks, as DDP */
    const float scale = 1.0f / (float)gc->world;
    const struct ops_seg seg = {0, g->n};
    g->ops->seg_scale(g->grads, &seg, &scale, 1);
  }
  g->sent.n = 0;
}

static void n_allreduce(struct grad_comm *gc, float *buf, size_t n) {
  struct nccl_gc *g = gc->impl;
  if (n == 0) return;
  const double t0 = wtime();
  CHECK_CUDA(cudaEventRecord(g->ready, g->compute));
  CHECK_CUDA(cudaStreamWaitEvent(g->side, g->ready, 0));
  CHECK_NCCL_COMM(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->comm, g->side), g->comm);
  CHECK_CUDA(cudaEventRecord(g->done, g->side));
  CHECK_CUDA(cudaStreamWaitEvent(g->compute, g->done, 0));
  wait_event(g, g->done, "all-reduce of the DINO centre");
  gc->wait_seconds += wtime() - t0;
}

static void n_destroy(struct grad_comm *gc) {
  if (!gc) return;
  struct nccl_gc *g = gc->impl;
  /* Wait for the side stream through the polling wait: a peer that died after the last step
   * ends the job with a message instead of hanging the exit. */
  CHECK_CUDA(cudaEventRecord(g->done, g->side));
  wait_event(g, g->done, "the last all-reduce before shutdown");
  if (live_comm == g->comm) live_comm = NULL;
  CHECK_NCCL_COMM(ncclCommDestroy(g->comm), NULL);
  CHECK_CUDA(cudaEventDestroy(g->ready));
  CHECK_CUDA(cudaEventDestroy(g->done));
  CHECK_CUDA(cudaEventDestroy(g->computed));
  CHECK_CUDA(cudaStreamDestroy(g->side));
  grad_comm_sent_free(&g->sent);
  free(g);
  free(gc);
}

/* For the sharded communicator (grad_comm_nccl_shard.c), which runs its collectives on these. */
void grad_comm_nccl_get_parts(const struct grad_comm *gc, struct grad_comm_nccl_parts *p) {
  const struct nccl_gc *g = gc->impl;
  p->comm = g->comm;
  p->compute = g->compute;
  p->side = g->side;
}

void grad_comm_nccl_wait(struct grad_comm *gc, cudaEvent_t ev, const char *what) {
  wait_event(gc->impl, ev, what);
}

static double timeout_s = NCCL_TIMEOUT_DEFAULT; /* &gpu nccl_timeout */

void grad_comm_nccl_set_timeout(double seconds) {
  if (!(seconds > 0)) SCD_FAIL("NCCL timeout %g s: must be positive", seconds);
  timeout_s = seconds;
}

double grad_comm_nccl_timeout(void) { return timeout_s; }

struct grad_comm *grad_comm_nccl_create(const struct ops *ops, size_t bucket_bytes) {
  void *stream = backend_cuda_stream();
  if (!stream || strcmp(ops->name, "cuda") != 0)
    SCD_FAIL("the NCCL gradient communicator needs the CUDA backend, not '%s'", ops->name);
  struct grad_comm *gc = xcalloc(1, sizeof *gc);
  struct nccl_gc *g = xcalloc(1, sizeof *g);
  g->ops = ops;
  g->compute = (cudaStream_t)stream;
  grad_comm_merge_init(&g->merge, bucket_bytes);
  grad_comm_sent_init(&g->sent);
  g->timeout = grad_comm_nccl_timeout();
  const struct comm_info *ci = comm_get();
  /* The communicator spans every rank of the current group (comm_mpi.h), also a single one, so one
   * code path runs everywhere; a study's groups each get their own. */
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (ci->rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  if (ci->size > 1) CHECK_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm_mpi()));
  CHECK_NCCL(ncclCommInitRank(&g->comm, ci->size, id, ci->rank));
  live_comm = g->comm;
  comm_at_exit(abort_live_comm);
  CHECK_CUDA(cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking));
  CHECK_CUDA(cudaEventCreateWithFlags(&g->ready, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&g->computed, cudaEventDisableTiming));
  report();
  gc->name = "nccl";
  gc->world = ci->size;
  gc->begin_step = n_begin;
  gc->bucket_ready = n_bucket;
  gc->finish = n_finish;
  gc->allreduce_sum = n_allreduce;
  gc->destroy = n_destroy;
  gc->impl = g;
  return gc;
}
