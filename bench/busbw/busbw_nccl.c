/* busbw_nccl.c - the NCCL backend of the busbw benchmark: device buffers, one rank per GPU, a
 * communicator from an id broadcast over MPI, CUDA events around every call, checks on the GPU. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "bench/busbw/busbw.h"
#include "bench/busbw/busbw_kernels.h"
#include "core/check.h"
#include "core/comm.h"
#include "model/grad_comm.h"

static ncclComm_t comm;
static cudaStream_t stream;
static int device = -1;
static unsigned char device_uuid[16]; /* of the chosen GPU: two ranks with the same one share it */
static char *d_send, *d_recv;
static unsigned long long *d_wrong; /* one counter per timed iteration, then the line-up element */
static unsigned long long *h_wrong;
static cudaEvent_t *events;         /* two per timed iteration */
static int nslots;                  /* iterations the arrays above hold */

static SCD_NORETURN void cuda_fail(cudaError_t e, const char *expr, const char *file, int line) {
  scd_fatal_at(file, line, SCD_EXIT_FAILURE, "%s: %s (%s)", expr, cudaGetErrorString(e), cudaGetErrorName(e));
}

static SCD_NORETURN void nccl_fail(ncclResult_t r, const char *expr, const char *file, int line) {
  const char *last = comm ? ncclGetLastError(comm) : ncclGetLastError(NULL);
  scd_fatal_at(file, line, SCD_EXIT_FAILURE, "%s: %s%s%s", expr, ncclGetErrorString(r), last && *last ? ": " : "",
               last ? last : "");
}

#define BUSBW_CHECK_CUDA(call)                                             \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) cuda_fail(e_, #call, __FILE__, __LINE__);       \
  } while (0)
#define BUSBW_CHECK_NCCL(call)                                             \
  do {                                                                     \
    ncclResult_t r_ = (call);                                              \
    if (r_ != ncclSuccess) nccl_fail(r_, #call, __FILE__, __LINE__);       \
  } while (0)

int busbw_nccl_usable(char *why, size_t n) {
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) {
    /* On a host without a driver this is "CUDA driver version is insufficient": no GPU. */
    snprintf(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
  }
  const struct comm_info *ci = comm_get();
  if (ndev == 0) {
    snprintf(why, n, "no CUDA device visible");
    return 0;
  }
  /* One rank per GPU: rank i of the node takes GPU i, or the only GPU it sees when the launcher
   * gives each rank its own (Slurm --gpus-per-task, CUDA_VISIBLE_DEVICES per rank). */
  if (ndev >= ci->local_size) {
    device = ci->local_rank;
  } else if (ndev == 1) {
    device = 0;
  } else {
    snprintf(why, n, "%d ranks on this node but %d GPUs: launch one rank per GPU", ci->local_size, ndev);
    return 0;
  }
  struct cudaDeviceProp p;
  e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) {
    snprintf(why, n, "cudaGetDeviceProperties(%d): %s", device, cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
  }
  memcpy(device_uuid, p.uuid.bytes, sizeof device_uuid);
  return 1;
}

void busbw_nccl_uuid(unsigned char uuid[16]) {
  SCD_ASSERT(device >= 0); /* chosen by busbw_nccl_usable() */
  memcpy(uuid, device_uuid, sizeof device_uuid);
}

void busbw_nccl_init(void) {
  const struct comm_info *ci = comm_get();
  SCD_ASSERT(device >= 0); /* chosen by busbw_nccl_usable() */
  BUSBW_CHECK_CUDA(cudaSetDevice(device));
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (ci->rank == 0) BUSBW_CHECK_NCCL(ncclGetUniqueId(&id));
  CHECK_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
  BUSBW_CHECK_NCCL(ncclCommInitRank(&comm, ci->size, id, ci->rank));
  BUSBW_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
}

static void nccl_version(char *buf, size_t n) {
  int lib = 0, rt = 0, drv = 0; /* -1: the library could not say */
  if (ncclGetVersion(&lib) != ncclSuccess) lib = -1;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = -1;
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = -1;
  snprintf(buf, n, "nccl-headers=%d nccl-library=%d cuda-runtime=%d cuda-driver=%d", NCCL_VERSION_CODE, lib, rt, drv);
}

static void nccl_device(char *buf, size_t n) {
  struct cudaDeviceProp p;
  BUSBW_CHECK_CUDA(cudaGetDeviceProperties(&p, device));
  snprintf(buf, n, " %2d [%04x:%02x:%02x] %s", device, p.pciDomainID, p.pciBusID, p.pciDeviceID, p.name);
}

static int nccl_supports_type(int type) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
  return type >= 0 && type < BUSBW_NTYPE;
#else
  return type >= 0 && type < BUSBW_NTYPE && type != BUSBW_BFLOAT16;
#endif
}

static ncclDataType_t nccl_type(int t) {
  switch (t) {
  case BUSBW_INT8: return ncclInt8;
  case BUSBW_UINT8: return ncclUint8;
  case BUSBW_INT32: return ncclInt32;
  case BUSBW_UINT32: return ncclUint32;
  case BUSBW_INT64: return ncclInt64;
  case BUSBW_UINT64: return ncclUint64;
  case BUSBW_HALF: return ncclFloat16;
  case BUSBW_DOUBLE: return ncclFloat64;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
  case BUSBW_BFLOAT16: return ncclBfloat16;
#endif
  default: return ncclFloat32;
  }
}

static ncclRedOp_t nccl_op(int op) {
  switch (op) {
  case BUSBW_PROD: return ncclProd;
  case BUSBW_MAX: return ncclMax;
  case BUSBW_MIN: return ncclMin;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
  case BUSBW_AVG: return ncclAvg;
#endif
  default: return ncclSum;
  }
}

static void nccl_alloc(size_t send_bytes, size_t recv_bytes) {
  if (d_send) BUSBW_CHECK_CUDA(cudaFree(d_send));
  if (d_recv) BUSBW_CHECK_CUDA(cudaFree(d_recv));
  cudaError_t e = cudaMalloc((void **)&d_send, send_bytes ? send_bytes : 1);
  if (e == cudaSuccess) e = cudaMalloc((void **)&d_recv, recv_bytes ? recv_bytes : 1);
  if (e != cudaSuccess)
    scd_fatal(SCD_EXIT_FAILURE, "cannot allocate 2 x %zu bytes on GPU %d: %s; use a smaller -e", send_bytes, device,
              cudaGetErrorString(e));
  BUSBW_CHECK_CUDA(cudaMemset(d_send, 0, send_bytes ? send_bytes : 1));
  BUSBW_CHECK_CUDA(cudaMemset(d_recv, 0, recv_bytes ? recv_bytes : 1));
  /* cudaMemset runs on the legacy stream, which our non-blocking stream does not wait for. */
  BUSBW_CHECK_CUDA(cudaDeviceSynchronize());
}

static void ensure_slots(int iters) {
  if (iters <= nslots) return;
  for (int i = 0; i < 2 * nslots; i++) BUSBW_CHECK_CUDA(cudaEventDestroy(events[i]));
  free(events);
  free(h_wrong);
  if (d_wrong) BUSBW_CHECK_CUDA(cudaFree(d_wrong));
  events = xmalloc(2 * (size_t)iters * sizeof *events);
  for (int i = 0; i < 2 * iters; i++) BUSBW_CHECK_CUDA(cudaEventCreate(&events[i]));
  h_wrong = xmalloc((size_t)iters * sizeof *h_wrong);
  BUSBW_CHECK_CUDA(cudaMalloc((void **)&d_wrong, ((size_t)iters + 1) * sizeof *d_wrong));
  /* the alignment all-reduce's element, on our stream (a legacy-stream cudaMemset would not be
   * ordered before it) */
  BUSBW_CHECK_CUDA(cudaMemsetAsync(d_wrong + iters, 0, sizeof *d_wrong, stream));
  nslots = iters;
}

/* Wait for the stream while watching for asynchronous NCCL errors (a failed peer) and the time,
 * so a broken job ends with a message rather than hanging in a synchronize call. */
static void wait_stream(void) {
  const double t0 = MPI_Wtime(), limit = grad_comm_nccl_timeout();
  for (;;) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) cuda_fail(e, "cudaStreamQuery(stream)", __FILE__, __LINE__);
    ncclResult_t async = ncclSuccess;
    BUSBW_CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    if (async != ncclSuccess && async != ncclInProgress)
#else
    if (async != ncclSuccess)
#endif
      nccl_fail(async, "asynchronous NCCL error", __FILE__, __LINE__);
    if (MPI_Wtime() - t0 > limit) {
      ncclCommAbort(comm);
      scd_fatal(SCD_EXIT_FAILURE, "NCCL did not complete within %.0f s on rank %d: another rank died or stalls, "
                "or the network hangs (NCCL_DEBUG=INFO tells more; --timeout sets the limit)",
                limit, comm_rank());
    }
    sched_yield();
  }
}

static void launch(const struct busbw_case *c, int inplace) {
  size_t off = (size_t)c->rank * c->count * busbw_type_size(c->type);
  ncclDataType_t dt = nccl_type(c->type);
  switch (c->coll) {
  case BUSBW_ALL_REDUCE:
    BUSBW_CHECK_NCCL(ncclAllReduce(inplace ? d_recv : d_send, d_recv, c->count, dt, nccl_op(c->op), comm, stream));
    break;
  case BUSBW_REDUCE_SCATTER:
    BUSBW_CHECK_NCCL(ncclReduceScatter(inplace ? d_recv : d_send, inplace ? d_recv + off : d_recv, c->count, dt,
                                       nccl_op(c->op), comm, stream));
    break;
  case BUSBW_ALL_GATHER:
    BUSBW_CHECK_NCCL(ncclAllGather(inplace ? d_recv + off : d_send, d_recv, c->count, dt, comm, stream));
    break;
  default:
    BUSBW_CHECK_NCCL(ncclBroadcast(inplace ? d_recv : d_send, d_recv, c->count, dt, c->root, comm, stream));
    break;
  }
}

static void nccl_measure(const struct busbw_case *c, int inplace, const struct busbw_opts *o, struct busbw_result *res) {
  struct busbw_layout l;
  busbw_layout_of(c, inplace, 0, &l);
  size_t ts = busbw_type_size(c->type);
  char *bufs[2] = {d_send, d_recv};
  char *in = l.in_buf >= 0 ? bufs[l.in_buf] + l.in_off * ts : NULL;
  char *out = bufs[l.out_buf] + l.out_off * ts;
  ensure_slots(o->iters);

  struct busbw_gen g = busbw_case_gen(c, 0);
  if (in) BUSBW_CHECK_CUDA((cudaError_t)busbw_dev_fill(&g, in, l.in_count, stream));
  for (int w = 0; w < o->warmup; w++) launch(c, inplace);
  BUSBW_CHECK_CUDA(cudaMemsetAsync(d_wrong, 0, (size_t)o->iters * sizeof *d_wrong, stream));
  wait_stream();
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

  /* Everything is enqueued without waiting; the events bracket only the collective.  Fills and
   * checks take different times on different ranks (a broadcast's root alone fills): after them a
   * one-element all-reduce lines the streams up, so that no rank's timed interval holds its wait
   * for a peer still filling or checking.  (The MPI backend uses a barrier; here a host barrier
   * would put the launch latency inside the interval.) */
  for (int it = 0; it < o->iters; it++) {
    int checked = busbw_is_checked(o, it);
    if (checked) {
      g = busbw_case_gen(c, (uint64_t)it + 1);
      if (l.poison_count) BUSBW_CHECK_CUDA(cudaMemsetAsync(d_recv, 0xff, l.poison_count * ts, stream));
      if (in) BUSBW_CHECK_CUDA((cudaError_t)busbw_dev_fill(&g, in, l.in_count, stream));
    }
    if (c->nranks > 1 && (checked || (it > 0 && busbw_is_checked(o, it - 1))))
      BUSBW_CHECK_NCCL(ncclAllReduce(d_wrong + nslots, d_wrong + nslots, 1, ncclUint64, ncclSum, comm, stream));
    BUSBW_CHECK_CUDA(cudaEventRecord(events[2 * it], stream));
    launch(c, inplace);
    BUSBW_CHECK_CUDA(cudaEventRecord(events[2 * it + 1], stream));
    if (checked) {
      if (o->inject_rank == c->rank && o->inject_elem < l.out_count)
        BUSBW_CHECK_CUDA(cudaMemsetAsync(out + o->inject_elem * ts, 0xff, ts, stream));
      BUSBW_CHECK_CUDA((cudaError_t)busbw_dev_verify(&g, out, l.out_count, d_wrong + it, stream));
    }
    if (o->blocking) {
      wait_stream();
      CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }
  }
  wait_stream();
  for (int it = 0; it < o->iters; it++) {
    float ms = 0;
    BUSBW_CHECK_CUDA(cudaEventElapsedTime(&ms, events[2 * it], events[2 * it + 1]));
    res->times[it] = ms * 1e-3;
  }
  BUSBW_CHECK_CUDA(cudaMemcpy(h_wrong, d_wrong, (size_t)o->iters * sizeof *h_wrong, cudaMemcpyDeviceToHost));
  for (int it = 0; it < o->iters; it++) res->wrong[it] = busbw_is_checked(o, it) ? h_wrong[it] : UINT64_MAX;
}

static void nccl_finalize(void) {
  if (comm) {
    wait_stream();
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    BUSBW_CHECK_NCCL(ncclCommFinalize(comm));
#endif
    BUSBW_CHECK_NCCL(ncclCommDestroy(comm));
    comm = NULL;
  }
  for (int i = 0; i < 2 * nslots; i++) BUSBW_CHECK_CUDA(cudaEventDestroy(events[i]));
  free(events);
  free(h_wrong);
  events = NULL;
  h_wrong = NULL;
  nslots = 0;
  if (d_wrong) BUSBW_CHECK_CUDA(cudaFree(d_wrong));
  if (d_send) BUSBW_CHECK_CUDA(cudaFree(d_send));
  if (d_recv) BUSBW_CHECK_CUDA(cudaFree(d_recv));
  d_wrong = NULL;
  d_send = d_recv = NULL;
  if (stream) BUSBW_CHECK_CUDA(cudaStreamDestroy(stream));
  stream = NULL;
}

const struct busbw_backend busbw_backend_nccl = {
    .name = "nccl",
    .mpi_layout = 0,
    .max_count = SIZE_MAX,
    .version = nccl_version,
    .device = nccl_device,
    .supports_type = nccl_supports_type,
    .alloc = nccl_alloc,
    .measure = nccl_measure,
    .finalize = nccl_finalize,
};
