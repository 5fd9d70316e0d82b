/* comm_mpi.h - the MPI communicator of the current group, for the few files that call MPI
 * themselves (the rest use comm.h's collectives, which follow it too). */
#ifndef SCDINO_COMM_MPI_H
#define SCDINO_COMM_MPI_H

#include <mpi.h>

/* The current group's communicator (comm_group_begin), MPI_COMM_WORLD outside a group.  Every
 * collective of a calculation goes over it; only the abort path (check.c) uses MPI_COMM_WORLD. */
MPI_Comm comm_mpi(void);
/* The current group's node communicator (MPI_COMM_TYPE_SHARED): the ranks of this node in it. */
MPI_Comm comm_mpi_node(void);

#endif
