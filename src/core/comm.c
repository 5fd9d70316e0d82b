/* comm.c - MPI start-up and host-memory collectives. */
#include "build_config.h"

#include <limits.h>
#include <stdio.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/watchdog.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/log.h"

static struct comm_info info = {0, 1, 0, 1, 0, 0, 1, 0, 1};

static MPI_Comm node_comm = MPI_COMM_NULL;  /* the ranks of this node (MPI_COMM_TYPE_SHARED) */
static MPI_Comm group_comm = MPI_COMM_NULL; /* the current group (comm_group_begin); NULL: none */

MPI_Comm comm_mpi(void) { return group_comm != MPI_COMM_NULL ? group_comm : MPI_COMM_WORLD; }

MPI_Comm comm_mpi_node(void) { return node_comm; }

/* Complete rq, polling every 20 ms.  With waiting_for (what the rank waits for, "waiting for ..."),
 * while the heartbeat ring of the wait shows the awaited ranks alive, the wait is progress for the
 * watchdog (another rank does long work before it joins); without that ring it is not, and the
 * watchdog bounds the wait (watchdog.h). */
static void wait_alive(MPI_Request *rq, enum heartbeat_ring ring, const char *waiting_for) {
  const double since = wtime();
  for (int done = 0;;) {
    CHECK_MPI(MPI_Test(rq, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (waiting_for && heartbeat_alive(ring, since, waiting_for))
      watchdog_progress(waiting_for, -1);
    else
      heartbeat_poll();
    const struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
}

void comm_node_bcast(void *buf, size_t bytes, const char *waiting_for) {
  if (info.local_size <= 1) return;
  SCD_ASSERT(bytes <= INT32_MAX);
  MPI_Request rq;
  CHECK_MPI(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, node_comm, &rq));
  wait_alive(&rq, HEARTBEAT_NODE, waiting_for); /* local rank 0 works (its own progress feeds its watchdog) */
}

void comm_init(int *argc, char ***argv) {
  CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &info.thread_level));
  /* Errors come back as codes, so CHECK_MPI can report the call site. */
  CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &info.rank));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &info.size));
  CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &node_comm));
  CHECK_MPI(MPI_Comm_set_errhandler(node_comm, MPI_ERRORS_RETURN));
  CHECK_MPI(MPI_Comm_rank(node_comm, &info.local_rank));
  CHECK_MPI(MPI_Comm_size(node_comm, &info.local_size));
  info.world_rank = info.rank, info.world_size = info.size;
  info.node_rank = info.local_rank, info.node_size = info.local_size;
  scd_note_mpi(info.rank, info.size);
}

void comm_finalize(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

const struct comm_info *comm_get(void) { return &info; }
int comm_rank(void) { return info.rank; }
int comm_size(void) { return info.size; }

/* Chunks of at most 2^30 elements keep every count inside an int. */
#define CHUNK ((size_t)1 << 30)

static void allreduce(void *buf, size_t n, size_t elem, MPI_Datatype t, MPI_Op op) {
  if (info.size == 1) return;
  char *p = buf;
  for (size_t off = 0; off < n; off += CHUNK) {
    size_t m = n - off < CHUNK ? n - off : CHUNK;
    CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, p + off * elem, (int)m, t, op, comm_mpi()));
  }
}

void comm_allreduce_sum_f32(float *buf, size_t n) { allreduce(buf, n, sizeof *buf, MPI_FLOAT, MPI_SUM); }
void comm_allreduce_sum_f64(double *buf, size_t n) { allreduce(buf, n, sizeof *buf, MPI_DOUBLE, MPI_SUM); }
void comm_allreduce_sum_i64(int64_t *buf, size_t n) { allreduce(buf, n, sizeof *buf, MPI_INT64_T, MPI_SUM); }
void comm_allreduce_max_f64(double *buf, size_t n) { allreduce(buf, n, sizeof *buf, MPI_DOUBLE, MPI_MAX); }

int comm_any(int flag) {
  int v = flag ? 1 : 0;
  allreduce(&v, 1, sizeof v, MPI_INT, MPI_LOR);
  return v;
}

void comm_bcast(void *buf, size_t bytes, int root) {
  if (info.size == 1) return;
  char *p = buf;
  for (size_t off = 0; off < bytes; off += CHUNK) {
    size_t m = bytes - off < CHUNK ? bytes - off : CHUNK;
    CHECK_MPI(MPI_Bcast(p + off, (int)m, MPI_BYTE, root, comm_mpi()));
  }
}

void comm_allgather(const void *mine, void *all, size_t bytes) {
  SCD_ASSERT(bytes <= INT_MAX);
  if (info.size == 1) {
    memmove(all, mine, bytes);
    return;
  }
  CHECK_MPI(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, comm_mpi()));
}

void comm_allgatherv_f64(const double *mine, int n, const int *counts, double *all) {
  if (info.size == 1) {
    memmove(all, mine, (size_t)n * sizeof *all);
    return;
  }
  int *displs = xcalloc((size_t)info.size, sizeof *displs);
  for (int r = 1; r < info.size; r++) displs[r] = displs[r - 1] + counts[r - 1];
  CHECK_MPI(MPI_Allgatherv(mine, n, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, comm_mpi()));
  free(displs);
}

void comm_gatherv_f32(const float *mine, const int *counts, float *all) {
  if (info.size == 1) {
    memmove(all, mine, (size_t)counts[0] * sizeof *all);
    return;
  }
  int *displs = xcalloc((size_t)info.size, sizeof *displs);
  for (int r = 1; r < info.size; r++) displs[r] = displs[r - 1] + counts[r - 1];
  CHECK_MPI(MPI_Gatherv(mine, counts[info.rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0, comm_mpi()));
  free(displs);
}

void comm_barrier(void) {
  if (info.size > 1) CHECK_MPI(MPI_Barrier(comm_mpi()));
}

#define MAX_EXIT_HOOKS 4
static void (*exit_hooks[MAX_EXIT_HOOKS])(void);

void comm_at_exit(void (*fn)(void)) {
  for (int i = 0; i < MAX_EXIT_HOOKS; i++) {
    if (exit_hooks[i] == fn) return;
    if (!exit_hooks[i]) {
      exit_hooks[i] = fn;
      return;
    }
  }
  SCD_FAIL("comm_at_exit: more than %d functions", MAX_EXIT_HOOKS);
}

void comm_exit_all(int code) {
  scd_exit_claim(code);
  fflush(stdout);
  fflush(stderr);
  scd_tmpfile_remove_all();
  for (int i = MAX_EXIT_HOOKS - 1; i >= 0; i--) /* the last registered first */
    if (exit_hooks[i]) exit_hooks[i]();
  comm_finalize();
  exit(code);
}

static struct comm_info world_info; /* outside the group */
static MPI_Comm world_node_comm;

int comm_group_begin(int ranks_per_group) {
  SCD_ASSERT(group_comm == MPI_COMM_NULL && ranks_per_group > 0 && info.world_size % ranks_per_group == 0);
  const int group = info.world_rank / ranks_per_group;
  MPI_Comm g, n;
  CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, group, info.world_rank, &g));
  CHECK_MPI(MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN));
  CHECK_MPI(MPI_Comm_split_type(g, MPI_COMM_TYPE_SHARED, info.world_rank, MPI_INFO_NULL, &n));
  CHECK_MPI(MPI_Comm_set_errhandler(n, MPI_ERRORS_RETURN));
  world_info = info, world_node_comm = node_comm;
  group_comm = g, node_comm = n;
  CHECK_MPI(MPI_Comm_rank(g, &info.rank));
  CHECK_MPI(MPI_Comm_size(g, &info.size));
  CHECK_MPI(MPI_Comm_rank(n, &info.local_rank));
  CHECK_MPI(MPI_Comm_size(n, &info.local_size));
  return group;
}

void comm_group_end(void) {
  SCD_ASSERT(group_comm != MPI_COMM_NULL);
  CHECK_MPI(MPI_Comm_free(&node_comm));
  CHECK_MPI(MPI_Comm_free(&group_comm));
  info = world_info, node_comm = world_node_comm;
}

int comm_all_any(int flag, const char *waiting_for) {
  int v = flag ? 1 : 0;
  if (info.world_size == 1) return v;
  MPI_Request rq;
  CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD, &rq));
  wait_alive(&rq, HEARTBEAT_WORLD, waiting_for);
  return v;
}

const char *comm_library_version(void) {
  static char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) return "unknown";
  /* Keep the first line: Open MPI appends repository and date details. */
  char *nl = strchr(v, '\n');
  if (nl) *nl = '\0';
  nl = strchr(v, ',');
  if (nl && strstr(v, "Open MPI")) *nl = '\0';
  return v;
}
