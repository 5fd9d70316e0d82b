/* grad_comm_nccl.c - the NCCL transport of the gradient communicator (grad_comm.h, grad_comm.c):
 * buckets all-reduced (or reduced onto the slices' owners, sharded) on a side stream as backward
 * produces them, the DINO centre's sums, the weights' all-gather, and a watchdog that ends the job
 * when a collective fails or stalls.
 *
 * One rank per GPU (the CUDA backend has picked the device from the local rank); the communicator
 * comes from an id that rank 0 broadcasts over MPI.  Each bucket: an event recorded on the
 * backend's stream after the kernels that produced it, the side stream waits for it, then
 * ncclAllReduce (sum) in place.  wait_all waits for the side stream (the time counted as exposed
 * communication) and the backend's stream waits for it before grad_comm.c divides by the world
 * size.  Host waits poll the GPU, ncclCommGetAsyncError and a timeout (&gpu nccl_timeout seconds,
 * 600 by default), so a dead peer or a stalled network ends the job with a message instead of a
 * hang.
 *
 * Sharded (&training shard_optimizer): the slices (plan, model/shard_plan.h) end on norm blocks, so
 * they are unequal and ncclReduceScatter (equal counts) does not fit.  A bucket [off, off + n) is
 * one NCCL group of an ncclReduce (sum, in place) per rank whose slice it touches, with that rank as
 * the root: the owner gets the sum of its part, the other ranks' copies of it stay as they were.
 * The weights' all-gather is a group of ncclBroadcast calls (in place, root = each slice's owner).
 * Whether a slice's sum equals the all-reduce's bit for bit depends on NCCL adding the ranks'
 * values in the same order in ncclReduce as in ncclAllReduce: true on 1 and 2 ranks, and under the
 * emulator (tests/emu/nccl_mpi.c adds in rank order for both); real NCCL's ring and tree orders may
 * differ between the two on 3 or more ranks, the difference then being fp32 rounding. */
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
#include "model/grad_comm.h"
#include "model/shard_plan.h"

#define NCCL_TIMEOUT_DEFAULT 600.0 /* seconds */

struct nccl_tr {
  const struct shard_plan *plan; /* the sharded communicator's, else NULL */
  ncclComm_t comm;
  cudaStream_t compute, side; /* the backend's stream; the side stream of the collectives */
  cudaEvent_t ready, done, computed;
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
static void wait_event(struct nccl_tr *g, cudaEvent_t ev, const char *what) {
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

/* ---- the transport ------------------------------------------------------------------------------ */

/* The side stream waits for what the backend's stream has queued so far (the kernels that produced
 * the data). */
static void side_after_compute(struct nccl_tr *g) {
  CHECK_CUDA(cudaEventRecord(g->ready, g->compute));
  CHECK_CUDA(cudaStreamWaitEvent(g->side, g->ready, 0));
}

static void n_start_allreduce(void *t, float *grads, size_t off, size_t n) {
  struct nccl_tr *g = t;
  side_after_compute(g);
  CHECK_NCCL_COMM(ncclAllReduce(grads + off, grads + off, n, ncclFloat32, ncclSum, g->comm, g->side), g->comm);
}

/* Each owner's part reduced onto it, in one group. */
static void n_start_reduce_scatter(void *t, float *grads, size_t off, size_t n) {
  struct nccl_tr *g = t;
  const struct shard_plan *p = g->plan;
  side_after_compute(g);
  CHECK_NCCL_COMM(ncclGroupStart(), g->comm);
  for (int r = 0; r < p->world; r++) {
    size_t c;
    const size_t at = shard_plan_overlap(p, r, off, n, &c);
    if (c)
      CHECK_NCCL_COMM(ncclReduce(grads + at, grads + at, c, ncclFloat32, ncclSum, r, g->comm, g->side), g->comm);
  }
  CHECK_NCCL_COMM(ncclGroupEnd(), g->comm);
}

/* finish's calls for the gaps go in one group. */
static void n_group(void *t, int open) {
  struct nccl_tr *g = t;
  CHECK_NCCL_COMM(open ? ncclGroupStart() : ncclGroupEnd(), g->comm);
}

static double n_wait_all(void *t, float *grads, size_t n) {
  struct nccl_tr *g = t;
  (void)grads;
  (void)n;
  const char *what = g->plan ? "gradient reduce-scatter" : "gradient all-reduce";
  char first[96];
  snprintf(first, sizeof first, "%s (waiting for backward)", what);
  CHECK_CUDA(cudaEventRecord(g->done, g->side));
  /* First the compute that is still queued (not communication), then what is left of NCCL. */
  CHECK_CUDA(cudaEventRecord(g->computed, g->compute));
  wait_event(g, g->computed, first);
  const double t0 = wtime();
  wait_event(g, g->done, what);
  const double waited = wtime() - t0;
  CHECK_CUDA(cudaStreamWaitEvent(g->compute, g->done, 0));
  return waited;
}

static void n_allreduce_sum(void *t, float *buf, size_t n) {
  struct nccl_tr *g = t;
  side_after_compute(g);
  CHECK_NCCL_COMM(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->comm, g->side), g->comm);
  CHECK_CUDA(cudaEventRecord(g->done, g->side));
  CHECK_CUDA(cudaStreamWaitEvent(g->compute, g->done, 0));
  wait_event(g, g->done, "all-reduce of the DINO centre");
}

/* Every slice broadcast from its owner, in one group, after the optimizer's kernels; the backend's
 * stream waits for it (a stall shows at the next host wait, finish's, under the watchdog). */
static void n_allgather(void *t, float *buf) {
  struct nccl_tr *g = t;
  const struct shard_plan *p = g->plan;
  side_after_compute(g);
  CHECK_NCCL_COMM(ncclGroupStart(), g->comm);
  for (int r = 0; r < p->world; r++) {
    const size_t c = p->lo[r + 1] - p->lo[r];
    if (c)
      CHECK_NCCL_COMM(ncclBroadcast(buf + p->lo[r], buf + p->lo[r], c, ncclFloat32, r, g->comm, g->side), g->comm);
  }
  CHECK_NCCL_COMM(ncclGroupEnd(), g->comm);
  CHECK_CUDA(cudaEventRecord(g->done, g->side));
  CHECK_CUDA(cudaStreamWaitEvent(g->compute, g->done, 0));
}

static void n_destroy(void *t) {
  struct nccl_tr *g = t;
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
  free(g);
}

/* The communicator spans every rank of the current group, also a single one, so one code path
 * runs everywhere (single_rank). */
static const struct grad_comm_transport nccl_transport = {
    .name = "nccl",
    .single_rank = 1,
    .start_allreduce = n_start_allreduce,
    .start_reduce_scatter = n_start_reduce_scatter,
    .group = n_group,
    .wait_all = n_wait_all,
    .allreduce_sum = n_allreduce_sum,
    .allgather = n_allgather,
    .destroy = n_destroy,
};

static double timeout_s = NCCL_TIMEOUT_DEFAULT; /* &gpu nccl_timeout */

void grad_comm_nccl_set_timeout(double seconds) {
  if (!(seconds > 0)) SCD_FAIL("NCCL timeout %g s: must be positive", seconds);
  timeout_s = seconds;
}

double grad_comm_nccl_timeout(void) { return timeout_s; }

static struct nccl_tr *nccl_tr_new(const struct ops *ops) {
  void *stream = backend_cuda_stream();
  if (!stream || strcmp(ops->name, "cuda") != 0)
    SCD_FAIL("the NCCL gradient communicator needs the CUDA backend, not '%s'", ops->name);
  struct nccl_tr *g = xcalloc(1, sizeof *g);
  g->compute = (cudaStream_t)stream;
  g->timeout = grad_comm_nccl_timeout();
  const struct comm_info *ci = comm_get();
  /* Over the current group (comm_mpi.h): a study's groups each get their own. */
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
  return g;
}

struct grad_comm *grad_comm_nccl_create(const struct ops *ops, size_t bucket_bytes) {
  return grad_comm_create(ops, bucket_bytes, NULL, &nccl_transport, nccl_tr_new(ops));
}

struct grad_comm *grad_comm_nccl_shard_create(const struct ops *ops, size_t bucket_bytes,
                                              const struct shard_plan *plan) {
  struct nccl_tr *g = nccl_tr_new(ops);
  g->plan = plan;
  return grad_comm_create(ops, bucket_bytes, plan, &nccl_transport, g);
}
