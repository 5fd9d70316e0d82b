/* comm.h - MPI start-up, rank bookkeeping and the collectives scdino uses on host memory. */
#ifndef SCDINO_COMM_H
#define SCDINO_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

struct comm_info {
  int rank, size;             /* in the current group (comm_group_begin), else in MPI_COMM_WORLD */
  int local_rank, local_size; /* within the node (MPI_Comm_split_type SHARED) of the current group */
  int thread_level;           /* what MPI_Init_thread provided */
  int world_rank, world_size; /* in MPI_COMM_WORLD, whatever the group */
  int node_rank, node_size;   /* within the node, over every rank of the job (GPU choice, memory share) */
};

/* Initialise MPI (MPI_THREAD_FUNNELED: only the main thread calls MPI). */
void comm_init(int *argc, char ***argv);
void comm_finalize(void);
const struct comm_info *comm_get(void);
int comm_rank(void);
int comm_size(void);

/* In-place sums over all ranks; counts may exceed INT_MAX (sent in chunks). */
void comm_allreduce_sum_f32(float *buf, size_t n);
void comm_allreduce_sum_f64(double *buf, size_t n);
void comm_allreduce_sum_i64(int64_t *buf, size_t n);
void comm_allreduce_max_f64(double *buf, size_t n);
/* Logical OR of a flag over all ranks (e.g. "some rank saw an error / a signal"). */
int comm_any(int flag);
void comm_bcast(void *buf, size_t bytes, int root);
/* From local rank 0 to the other ranks of its node (MPI_COMM_TYPE_SHARED); collective on the node.
 * The others wait polling.  Local rank 0's work before it (a node's copy of the shards) may take
 * longer than &system step_timeout: begin a HEARTBEAT_NODE ring (watchdog.h) before that work, and
 * the wait is progress for the watchdog (waiting_for: what for) while the node's ranks show life,
 * and ends the job when one shows none; without the ring the watchdog bounds the wait. */
void comm_node_bcast(void *buf, size_t bytes, const char *waiting_for);
/* all[r * bytes ...] = rank r's `mine` (bytes each, at most INT_MAX) on every rank. */
void comm_allgather(const void *mine, void *all, size_t bytes);
/* all = every rank's `mine` (counts[r] doubles from rank r, at most INT_MAX), in rank order, on
 * every rank. */
void comm_allgatherv_f64(const double *mine, int n, const int *counts, double *all);
/* On rank 0, all = every rank's counts[r] floats in rank order (all: NULL elsewhere). */
void comm_gatherv_f32(const float *mine, const int *counts, float *all);
void comm_barrier(void);
/* Every rank ends with `code` after a clean MPI_Finalize (no MPI_Abort): for errors that all
 * ranks know about together (deck errors), reported beforehand by rank 0. */
SCD_NORETURN void comm_exit_all(int code);
/* Register fn for comm_exit_all to call before MPI_Finalize (at most 4 functions; registering one
 * twice keeps one): libraries with their own connections, such as an NCCL communicator, are torn
 * down before MPI and the process go. */
void comm_at_exit(void (*fn)(void));

/* Groups (calculation = 'study'): split MPI_COMM_WORLD into world size / ranks_per_group groups of
 * consecutive ranks (ranks_per_group must divide it); until comm_group_end, every collective above,
 * comm_rank, comm_size, comm_get and the node communicator are the group's, so a calculation runs
 * in its group as it would alone on that many ranks.  Returns the group's index (0-based).  Errors
 * still end the whole job (check.c). */
int comm_group_begin(int ranks_per_group);
void comm_group_end(void);
/* Logical OR of a flag over every rank of MPI_COMM_WORLD, also inside a group; the ranks that
 * arrive first wait polling, fed to the watchdog as waiting_for while a HEARTBEAT_WORLD ring shows
 * every rank alive (a study's groups), bounded by the watchdog without one. */
int comm_all_any(int flag, const char *waiting_for);

/* The MPI library's version string (MPI_Get_library_version; callable before MPI_Init). */
const char *comm_library_version(void);

#endif
