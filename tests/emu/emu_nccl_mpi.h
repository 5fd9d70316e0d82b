/* emu_nccl_mpi.h - MPI_COMM_WORLD for the emulator's NCCL stand-in (nccl_mpi.c, C and C++). */
#ifndef SCDINO_EMU_NCCL_MPI_H
#define SCDINO_EMU_NCCL_MPI_H

#ifdef __cplusplus
extern "C" {
#endif

enum emu_type { EMU_F32, EMU_F64, EMU_I32 };
enum emu_op { EMU_SUM, EMU_MAX, EMU_MIN };

/* Size of MPI_COMM_WORLD and this rank (1 and 0 before MPI_Init). */
void emu_mpi_world(int *size, int *rank);
/* MPI_Allreduce over MPI_COMM_WORLD, in place when send == recv; 0 on success. */
int emu_mpi_allreduce(const void *send, void *recv, int count, enum emu_type type, enum emu_op op);

#ifdef __cplusplus
}
#endif
#endif
