/* nccl_emu.cc - the NCCL calls of the gradient communicator, for the CPU emulator (tests/emu/).
 *
 * A communicator is MPI_COMM_WORLD (nccl_mpi.c) (its size and this rank must be what ncclCommInitRank is given);
 * ncclAllReduce of fp32/fp64/int32 sums, maxima and minima is an MPI_Allreduce on the host buffers
 * that stand for device memory, done at once on the calling thread.  Calls inside
 * ncclGroupStart/End run as they come: every rank issues them in the same order.  Anything else
 * (other types or operations) fails with ncclInvalidArgument and a message. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_nccl_mpi.h"

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

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  (void)stream;
  if (!comm) return invalid("ncclAllReduce: no communicator");
  emu_type t;
  size_t size;
  switch (type) {
  case ncclFloat32: t = EMU_F32; size = 4; break;
  case ncclFloat64: t = EMU_F64; size = 8; break;
  case ncclInt32: t = EMU_I32; size = 4; break;
  default: return invalid("ncclAllReduce: only fp32, fp64 and int32 are emulated");
  }
  emu_op o;
  switch (op) {
  case ncclSum: o = EMU_SUM; break;
  case ncclMax: o = EMU_MAX; break;
  case ncclMin: o = EMU_MIN; break;
  default: return invalid("ncclAllReduce: only sum, max and min are emulated");
  }
  if (count > (size_t)1 << 30) return invalid("ncclAllReduce: more than 2^30 elements");
  if (comm->nranks == 1) {
    if (send != recv) memmove(recv, send, count * size);
    return ncclSuccess;
  }
  return emu_mpi_allreduce(send, recv, (int)count, t, o) == 0 ? ncclSuccess : ncclSystemError;
}

} // extern "C"
