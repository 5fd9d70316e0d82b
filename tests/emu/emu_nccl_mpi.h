/* emu_nccl_mpi.h - MPI_COMM_WORLD for the emulator's NCCL stand-in (nccl_mpi.c, C and C++). */
#ifndef SCDINO_EMU_NCCL_MPI_H
#define SCDINO_EMU_NCCL_MPI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum emu_type { EMU_I8, EMU_U8, EMU_I32, EMU_U32, EMU_I64, EMU_U64, EMU_F32, EMU_F64 };
enum emu_op { EMU_SUM, EMU_PROD, EMU_MAX, EMU_MIN };

/* Size of MPI_COMM_WORLD and this rank (1 and 0 before MPI_Init). */
void emu_mpi_world(int *size, int *rank);
/* The collectives over MPI_COMM_WORLD on host buffers, which may overlap as NCCL's in-place forms
 * do; each returns 0 on success.  Floating-point all-reduce and reduce combine the ranks' values in
 * rank order, the same order for both (nccl_mpi.c). */
int emu_mpi_allreduce(const void *send, void *recv, size_t count, enum emu_type type, enum emu_op op);
int emu_mpi_reduce(const void *send, void *recv, size_t count, enum emu_type type, enum emu_op op, int root);
int emu_mpi_reduce_scatter(const void *send, void *recv, size_t count, enum emu_type type, enum emu_op op);
int emu_mpi_allgather(const void *send, void *recv, size_t bytes);
int emu_mpi_bcast(const void *send, void *recv, size_t bytes, int root);

#ifdef __cplusplus
}
#endif
#endif
