/* nccl_mpi.c - the MPI side of the emulator's NCCL stand-in (nccl_emu.cc), in C so that only the
 * MPI C wrapper compiles against mpi.h. */
#include "build_config.h"

#include <mpi.h>
#include <string.h>

#include "emu_nccl_mpi.h"

void emu_mpi_world(int *size, int *rank) {
  int init = 0;
  *size = 1;
  *rank = 0;
  MPI_Initialized(&init);
  if (!init) return;
  MPI_Comm_size(MPI_COMM_WORLD, size);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
}

int emu_mpi_allreduce(const void *send, void *recv, int count, enum emu_type type, enum emu_op op) {
  const MPI_Datatype t = type == EMU_F32 ? MPI_FLOAT : type == EMU_F64 ? MPI_DOUBLE : MPI_INT;
  const MPI_Op o = op == EMU_SUM ? MPI_SUM : op == EMU_MAX ? MPI_MAX : MPI_MIN;
  return MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, count, t, o, MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
}
