/* tests/unit/core/test_comm_group.c - groups of ranks (comm_group_begin/end), run under mpirun on
 * 1, 2 and 4 ranks by tests/eval/study.sh with the group size as argument: inside a group every
 * collective, rank, size and the node communicator are the group's; comm_all_any spans the world;
 * the world comes back after comm_group_end, and a second grouping works. */
#include "build_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/comm.h"
#include "core/comm_mpi.h"
#include "tests/fixtures/testutil.h"

static void check_world(int N, int W) {
  const struct comm_info *ci = comm_get();
  T_CHECK(ci->rank == W && ci->size == N && comm_rank() == W && comm_size() == N, "world rank/size %d/%d", ci->rank,
          ci->size);
  int64_t sum = W;
  comm_allreduce_sum_i64(&sum, 1);
  T_CHECK(sum == (int64_t)N * (N - 1) / 2, "world sum %lld", (long long)sum);
  int is_world = 0;
  CHECK_MPI(MPI_Comm_compare(comm_mpi(), MPI_COMM_WORLD, &is_world));
  T_CHECK(is_world == MPI_IDENT, "comm_mpi is MPI_COMM_WORLD outside a group");
}

static void check_group(int R, int N, int W) {
  const int g = comm_group_begin(R);
  const struct comm_info *ci = comm_get();
  T_CHECK(g == W / R, "group %d of world rank %d", g, W);
  T_CHECK(ci->rank == W % R && ci->size == R && ci->world_rank == W && ci->world_size == N, "rank %d size %d",
          ci->rank, ci->size);
  T_CHECK(ci->local_size <= R && ci->local_rank < ci->local_size, "node of the group: %d of %d", ci->local_rank,
          ci->local_size);
  T_CHECK(ci->node_size >= ci->local_size, "the node's ranks of the whole job stay: %d", ci->node_size);
  /* Sums, maxima, broadcasts and gathers stay inside the group. */
  int64_t sum = W;
  comm_allreduce_sum_i64(&sum, 1);
  const int64_t first = (int64_t)g * R;
  T_CHECK(sum == first * R + (int64_t)R * (R - 1) / 2, "group sum %lld", (long long)sum);
  double mx = W;
  comm_allreduce_max_f64(&mx, 1);
  T_CHECK(mx == (double)(first + R - 1), "group max %g", mx);
  int root = W;
  comm_bcast(&root, sizeof root, 0);
  T_CHECK(root == first, "bcast from the group's rank 0: %d", root);
  int *all = calloc((size_t)R, sizeof *all);
  comm_allgather(&W, all, sizeof W);
  for (int r = 0; r < R; r++) T_CHECK(all[r] == first + r, "allgather[%d] = %d", r, all[r]);
  free(all);
  T_CHECK(comm_any(W == first) == 1 && comm_any(W == N) == 0, "comm_any in the group");
  int gsize = 0;
  CHECK_MPI(MPI_Comm_size(comm_mpi(), &gsize));
  T_CHECK(gsize == R, "comm_mpi is the group (size %d)", gsize);
  int buf = W;
  comm_node_bcast(&buf, sizeof buf, NULL);
  T_CHECK(buf == first, "node bcast inside the group (all ranks on one node here): %d", buf);
  comm_barrier();
  /* comm_all_any spans every group: only the last world rank raises the flag. */
  T_CHECK(comm_all_any(W == N - 1, "test") == 1, "comm_all_any over the world");
  T_CHECK(comm_all_any(0, NULL) == 0, "comm_all_any of nothing");
  comm_group_end();
}

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  t_init(argc, argv);
  const int N = comm_get()->world_size, W = comm_get()->world_rank;
  const int R = argc > 1 ? atoi(argv[1]) : 1;
  if (R < 1 || N % R != 0) {
    fprintf(stderr, "usage: test_comm_group RANKS_PER_GROUP (a divisor of the rank count %d)\n", N);
    comm_finalize();
    return 2;
  }
  check_world(N, W);
  check_group(R, N, W);
  check_world(N, W);
  check_group(R, N, W); /* again: nothing of the first grouping is left */
  check_group(1, N, W);
  check_world(N, W);
  const int rc = t_finish();
  comm_finalize();
  return rc;
}
