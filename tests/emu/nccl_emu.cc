/* nccl_emu.cc - the NCCL calls of the gradient communicator and the busbw benchmark, for the CPU
 * emulator (tests/emu/).
 *
 * A communicator is MPI_COMM_WORLD (nccl_mpi.c; its size and this rank must be what
 * ncclCommInitRank is given).  All-reduce, reduce, reduce-scatter, all-gather and broadcast are the
 * MPI collectives on the host buffers that stand for device memory, done on the calling thread
 * once the work queued on their stream has run (runtime.cc's queues; done at once rather than
 * queued, as a rank that waits in MPI for a peer whose collective is still queued would never
 * return); reductions of 8-64-bit integers and fp32/fp64 (sum, product, max, min, and avg of
 * floating types).  fp32 and fp64 all-reduce and reduce combine the ranks' values in rank order,
 * so both give the same sums (nccl_mpi.c).  Calls inside ncclGroupStart/End run as they come:
 * every rank issues them in the same order.  Anything else (fp16/bf16 reductions, other
 * operations) fails with ncclInvalidArgument and a message. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/emu/emu_internal.h"
#include "tests/emu/emu_nccl_mpi.h"

struct ncclComm {
  int nranks, rank;
};

namespace {
char last_msg[256];

ncclResult_t invalid(const char *msg) {
  snprintf(last_msg, sizeof last_msg, "nccl emulator: %s", msg);
  fprintf(stderr, "%s\n", last_msg);
  return ncclInvalidArgument;
}
} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  memcpy(id->internal, "scdino-emu", 10);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (memcmp(id.internal, "scdino-emu", 10) != 0) return invalid("ncclCommInitRank: the id did not come from ncclGetUniqueId");
  int size, me;
  emu_mpi_world(&size, &me);
  if (nranks != size || rank != me) return invalid("ncclCommInitRank: ranks must be those of MPI_COMM_WORLD");
  *comm = new ncclComm{nranks, rank};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) {
  if (!comm) return invalid("ncclCommGetAsyncError: no communicator");
  *e = ncclSuccess;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclInvalidArgument: return "invalid argument";
  case ncclSystemError: return "unhandled system error";
  default: return "NCCL error (emulated)";
  }
}
const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return last_msg;
}

ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return comm ? ncclSuccess : invalid("ncclCommFinalize: no communicator");
}

} // extern "C"

namespace {

/* NCCL's element type as the MPI side's, with its size; false for types MPI has no reduction of
 * (fp16, bf16, fp8). */
bool elem_type(ncclDataType_t type, emu_type *t, size_t *size) {
  switch (type) {
  case ncclInt8: *t = EMU_I8; *size = 1; return true;
  case ncclUint8: *t = EMU_U8; *size = 1; return true;
  case ncclInt32: *t = EMU_I32; *size = 4; return true;
  case ncclUint32: *t = EMU_U32; *size = 4; return true;
  case ncclInt64: *t = EMU_I64; *size = 8; return true;
  case ncclUint64: *t = EMU_U64; *size = 8; return true;
  case ncclFloat32: *t = EMU_F32; *size = 4; return true;
  case ncclFloat64: *t = EMU_F64; *size = 8; return true;
  default: return false;
  }
}

/* The reduction; ncclAvg is a sum divided afterwards (floating types only). */
bool red_op(ncclRedOp_t op, emu_op *o, bool *avg) {
  *avg = false;
  switch (op) {
  case ncclSum: *o = EMU_SUM; return true;
  case ncclProd: *o = EMU_PROD; return true;
  case ncclMax: *o = EMU_MAX; return true;
  case ncclMin: *o = EMU_MIN; return true;
  case ncclAvg: *o = EMU_SUM; *avg = true; return true;
  default: return false;
  }
}

void divide(void *buf, size_t count, emu_type t, int n) {
  if (t == EMU_F32)
    for (size_t i = 0; i < count; i++) ((float *)buf)[i] /= (float)n;
  else
    for (size_t i = 0; i < count; i++) ((double *)buf)[i] /= (double)n;
}

/* The reductions: all-reduce (root -1), reduce-scatter (root -2), reduce onto root. */
ncclResult_t reduction(const char *fn, int root, const void *send, void *recv, size_t count,
                       ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm) {
  char msg[160];
  emu_type t;
  size_t size;
  emu_op o;
  bool avg;
  if (!comm) {
    snprintf(msg, sizeof msg, "%s: no communicator", fn);
    return invalid(msg);
  }
  if (!elem_type(type, &t, &size) || !red_op(op, &o, &avg) || (avg && t != EMU_F32 && t != EMU_F64)) {
    snprintf(msg, sizeof msg, "%s: type %d with operation %d is not emulated", fn, (int)type, (int)op);
    return invalid(msg);
  }
  if (count > (size_t)1 << 30) {
    snprintf(msg, sizeof msg, "%s: more than 2^30 elements", fn);
    return invalid(msg);
  }
  if (root >= comm->nranks || root < -2) {
    snprintf(msg, sizeof msg, "%s: root %d of %d ranks", fn, root, comm->nranks);
    return invalid(msg);
  }
  int rc = 0;
  if (comm->nranks == 1) {
    if (send != recv) memmove(recv, send, count * size);
  } else {
    rc = root == -2   ? emu_mpi_reduce_scatter(send, recv, count, t, o)
         : root == -1 ? emu_mpi_allreduce(send, recv, count, t, o)
                      : emu_mpi_reduce(send, recv, count, t, o, root);
  }
  if (rc == 0 && avg && (root < 0 || root == comm->rank)) divide(recv, count, t, comm->nranks);
  return rc == 0 ? ncclSuccess : ncclSystemError;
}

size_t type_size(ncclDataType_t type) {
  emu_type t;
  size_t size = 0;
  if (elem_type(type, &t, &size)) return size;
  return type == ncclFloat16 || type == ncclBfloat16 ? 2 : 0;
}

} // namespace

extern "C" {

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  emu_stream_force(stream); /* its stream's earlier work first; the collective runs now */
  return reduction("ncclAllReduce", -1, send, recv, count, type, op, comm);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  emu_stream_force(stream); /* its stream's earlier work first; the collective runs now */
  return reduction("ncclReduceScatter", -2, send, recv, count, type, op, comm);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  emu_stream_force(stream); /* its stream's earlier work first; the collective runs now */
  if (root < 0) return invalid("ncclReduce: a negative root");
  return reduction("ncclReduce", root, send, recv, count, type, op, comm);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  emu_stream_force(stream); /* its stream's earlier work first; the collective runs now */
  const size_t size = type_size(type);
  if (!comm || !size) return invalid("ncclAllGather: no communicator, or a type that is not emulated");
  if (comm->nranks == 1) {
    if (send != recv) memmove(recv, send, count * size);
    return ncclSuccess;
  }
  return emu_mpi_allgather(send, recv, count * size) == 0 ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  emu_stream_force(stream); /* its stream's earlier work first; the collective runs now */
  const size_t size = type_size(type);
  if (!comm || !size || root < 0 || root >= comm->nranks)
    return invalid("ncclBroadcast: no communicator, a type that is not emulated, or a bad root");
  if (comm->nranks == 1) {
    if (send != recv) memmove(recv, send, count * size);
    return ncclSuccess;
  }
  return emu_mpi_bcast(send, recv, count * size, root) == 0 ? ncclSuccess : ncclSystemError;
}

} // extern "C"
