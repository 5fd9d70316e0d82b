/* nccl_mpi.c - the MPI side of the emulator's NCCL stand-in (nccl_emu.cc), in C so that only the
 * MPI C wrapper compiles against mpi.h.  NCCL's in-place forms pass overlapping buffers (the
 * rank's chunk inside the whole), which MPI does not allow: the send side is copied first. */
#include "build_config.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "tests/emu/emu_nccl_mpi.h"

static MPI_Datatype mpi_type(enum emu_type t, size_t *size) {
  switch (t) {
  case EMU_I8: *size = 1; return MPI_INT8_T;
  case EMU_U8: *size = 1; return MPI_UINT8_T;
  case EMU_I32: *size = 4; return MPI_INT32_T;
  case EMU_U32: *size = 4; return MPI_UINT32_T;
  case EMU_I64: *size = 8; return MPI_INT64_T;
  case EMU_U64: *size = 8; return MPI_UINT64_T;
  case EMU_F32: *size = 4; return MPI_FLOAT;
  default: *size = 8; return MPI_DOUBLE;
  }
}

static MPI_Op mpi_op(enum emu_op op) {
  return op == EMU_SUM ? MPI_SUM : op == EMU_PROD ? MPI_PROD : op == EMU_MAX ? MPI_MAX : MPI_MIN;
}

void emu_mpi_world(int *size, int *rank) {
  int init = 0;
  *size = 1;
  *rank = 0;
  MPI_Initialized(&init);
  if (!init) return;
  MPI_Comm_size(MPI_COMM_WORLD, size);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
}

/* A private copy of n bytes (NULL if n is 0 or memory ran out; *fail says which). */
static void *copy_of(const void *p, size_t n, int *fail) {
  *fail = 0;
  if (!n) return NULL;
  void *c = malloc(n);
  if (!c) {
    *fail = 1;
    return NULL;
  }
  return memcpy(c, p, n);
}

/* combine(acc, x): acc = acc OP x elementwise, for the floating types. */
#define COMBINE(T)                                                                   \
  static void combine_##T(T *acc, const T *x, size_t n, enum emu_op op) {            \
    for (size_t i = 0; i < n; i++)                                                   \
      acc[i] = op == EMU_SUM    ? acc[i] + x[i]                                      \
               : op == EMU_PROD ? acc[i] * x[i]                                      \
               : op == EMU_MAX  ? (x[i] > acc[i] ? x[i] : acc[i])                    \
                                : (x[i] < acc[i] ? x[i] : acc[i]);                   \
  }
COMBINE(float)
COMBINE(double)

/* A floating-point reduction onto root (-1: every rank) in rank order: every rank's values are
 * gathered and combined as ((v0 OP v1) OP v2) ...  MPI leaves the order of MPI_Allreduce and
 * MPI_Reduce to the implementation (it may differ between the two, and with the message size and
 * the rank count); one rule for both makes an emulated ncclReduce give the emulated ncclAllReduce's
 * sums bit for bit, which the sharded optimizer's comparisons rely on. */
static int ordered(const void *send, void *recv, size_t count, enum emu_type type, enum emu_op op, int root) {
  int n, me;
  emu_mpi_world(&n, &me);
  size_t size;
  const MPI_Datatype t = mpi_type(type, &size);
  const size_t bytes = count * size;
  if (!count) return 0;
  const int receives = root < 0 || root == me;
  char *in = malloc(bytes), *all = receives ? malloc(bytes * (size_t)n) : NULL;
  if (!in || (receives && !all)) {
    free(in);
    free(all);
    return -1;
  }
  memcpy(in, send, bytes); /* send may be recv (in place) */
  const int rc = root < 0 ? MPI_Allgather(in, (int)count, t, all, (int)count, t, MPI_COMM_WORLD)
                          : MPI_Gather(in, (int)count, t, all, (int)count, t, root, MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS && receives) {
    memcpy(recv, all, bytes);
    for (int r = 1; r < n; r++) {
      if (type == EMU_F32) combine_float(recv, (const float *)(all + bytes * (size_t)r), count, op);
      else combine_double(recv, (const double *)(all + bytes * (size_t)r), count, op);
    }
  }
  free(in);
  free(all);
  return rc == MPI_SUCCESS ? 0 : -1;
}

static int overlaps(const void *send, const void *recv, size_t bytes) {
  return send != recv && (const char *)send < (const char *)recv + bytes && (const char *)recv < (const char *)send + bytes;
}

int emu_mpi_allreduce(const void *send, void *recv, size_t count, enum emu_type type, enum emu_op op) {
  size_t size;
  const MPI_Datatype t = mpi_type(type, &size);
  if (count > INT_MAX) return -1;
  if (overlaps(send, recv, count * size)) return -1; /* partly overlapping: NCCL does not allow it either */
  if (type == EMU_F32 || type == EMU_F64) return ordered(send, recv, count, type, op, -1);
  return MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, t, mpi_op(op), MPI_COMM_WORLD) ==
                 MPI_SUCCESS
             ? 0
             : -1;
}

int emu_mpi_reduce(const void *send, void *recv, size_t count, enum emu_type type, enum emu_op op, int root) {
  int n, me;
  emu_mpi_world(&n, &me);
  size_t size;
  const MPI_Datatype t = mpi_type(type, &size);
  if (count > INT_MAX || root < 0 || root >= n) return -1;
  if (me == root && overlaps(send, recv, count * size)) return -1;
  if (type == EMU_F32 || type == EMU_F64) return ordered(send, recv, count, type, op, root);
  const int in_place = me == root && send == recv;
  return MPI_Reduce(in_place ? MPI_IN_PLACE : send, recv, (int)count, t, mpi_op(op), root, MPI_COMM_WORLD) ==
                 MPI_SUCCESS
             ? 0
             : -1;
}

int emu_mpi_reduce_scatter(const void *send, void *recv, size_t count, enum emu_type type, enum emu_op op) {
  int n, me, fail;
  emu_mpi_world(&n, &me);
  size_t size;
  const MPI_Datatype t = mpi_type(type, &size);
  if (count > INT_MAX) return -1;
  void *in = copy_of(send, count * size * (size_t)n, &fail);
  if (fail) return -1;
  const int rc = MPI_Reduce_scatter_block(in, recv, (int)count, t, mpi_op(op), MPI_COMM_WORLD);
  free(in);
  return rc == MPI_SUCCESS ? 0 : -1;
}

int emu_mpi_allgather(const void *send, void *recv, size_t bytes) {
  int fail;
  if (bytes > INT_MAX) return -1;
  void *in = copy_of(send, bytes, &fail);
  if (fail) return -1;
  const int rc = MPI_Allgather(in, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
  free(in);
  return rc == MPI_SUCCESS ? 0 : -1;
}

int emu_mpi_bcast(const void *send, void *recv, size_t bytes, int root) {
  int n, me;
  emu_mpi_world(&n, &me);
  if (bytes > INT_MAX) return -1;
  if (me == root && send != recv) memmove(recv, send, bytes);
  return MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}
