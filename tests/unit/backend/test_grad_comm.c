/* test_grad_comm.c - the MPI gradient communicator under mpirun: bucketed averages and centre sums.
 *
 * Each rank fills a "gradient" buffer with values that depend on (rank, element), hands it over in
 * ranges as the model's backward does (descending, adjacent, some ranges never handed over so that
 * finish must reduce the gaps), with a small bucket size so that ranges are merged and split into
 * several MPI_Iallreduce calls; the result must be the mean over ranks on every rank, for the CPU
 * backend (in place) and for a backend whose memory is staged through the host.  The values are
 * small integers times a power of two, so sums are exact and only the final division rounds.
 * Also comm_allgather, the check that no two ranks share a GPU (backend_shared_gpu) on the
 * gathered ids, and with --exit-hooks the functions comm_exit_all calls (comm_at_exit). */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/comm.h"
#include "model/grad_comm.h"
#include "model/ops.h"
#include "tests/fixtures/testutil.h"

static float value(int rank, size_t i) { return (float)((int)((i * 7 + (size_t)rank * 13) % 101) - 50) * 0.25f; }

/* A backend that is not "cpu": grad_comm must stage its memory through the host. */
static struct ops staged;

static void run(const struct ops *ops, size_t n, size_t bucket_bytes, int rank, int world) {
  struct grad_comm *gc = grad_comm_mpi_create(ops, bucket_bytes);
  T_CHECK(gc->world == world, "world %d vs %d", gc->world, world);
  float *g = ops->alloc(n * sizeof(float));
  float *h = malloc(n * sizeof(float));
  for (int step = 0; step < 3; step++) {
    for (size_t i = 0; i < n; i++) h[i] = value(rank + step, i);
    ops->upload(g, h, n * sizeof(float));
    gc->begin_step(gc, g, n);
    /* Ranges from the top down, of varying sizes; every fourth is left to finish. */
    size_t hi = n;
    int k = 0;
    while (hi > 0) {
      size_t len = 1 + (size_t)((k * 37 + 11) % 97);
      if (len > hi) len = hi;
      if (k % 4 != 3) gc->bucket_ready(gc, hi - len, len);
      hi -= len;
      k++;
    }
    gc->finish(gc);
    ops->download(h, g, n * sizeof(float));
    int bad = 0;
    for (size_t i = 0; i < n && bad < 5; i++) {
      float sum = 0;
      for (int r = 0; r < world; r++) sum += value(r + step, i);
      const float want = sum * (1.0f / (float)world);
      if (h[i] != want) {
        bad++;
        fprintf(stderr, "rank %d step %d element %zu: %g, expected %g\n", rank, step, i, h[i], want);
      }
    }
    T_CHECK(bad == 0, "%s backend, bucket %zu bytes: wrong means", ops->name, bucket_bytes);
  }
  /* Centre sums: a blocking in-place sum. */
  for (size_t i = 0; i < n; i++) h[i] = value(rank, i);
  ops->upload(g, h, n * sizeof(float));
  gc->allreduce_sum(gc, g, n);
  ops->download(h, g, n * sizeof(float));
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float sum = 0;
    for (int r = 0; r < world; r++) sum += value(r, i);
    bad += h[i] != sum;
  }
  T_CHECK(bad == 0, "%s backend: allreduce_sum wrong in %d elements", ops->name, bad);
  T_CHECK(world == 1 || gc->wait_seconds > 0, "no communication time recorded");
  free(h);
  ops->free(g);
  gc->destroy(gc);
}

/* Every rank's 16-byte id gathered; distinct ids pass, a repeated one is named by the first pair. */
static void check_gpu_ids(int rank, int world) {
  unsigned char mine[16], (*ids)[16] = malloc((size_t)world * sizeof *ids);
  memset(mine, 0xa5, sizeof mine);
  mine[0] = (unsigned char)rank;
  mine[15] = (unsigned char)(rank * 7);
  comm_allgather(mine, ids, sizeof mine);
  int ok = 1;
  for (int r = 0; r < world; r++)
    ok &= ids[r][0] == (unsigned char)r && ids[r][15] == (unsigned char)(r * 7) && ids[r][8] == 0xa5;
  T_CHECK(ok, "comm_allgather: every rank's id in rank order");
  int a = -1, b = -1;
  T_CHECK(!backend_shared_gpu((const unsigned char(*)[16])ids, world, &a, &b), "distinct GPUs: no pair");
  if (world > 1) {
    memcpy(ids[world - 1], ids[0], 16);
    T_CHECK(backend_shared_gpu((const unsigned char(*)[16])ids, world, &a, &b) && a == 0 && b == world - 1,
            "the same GPU on ranks 0 and %d: found %d and %d", world - 1, a, b);
  }
  unsigned char four[4][16] = {{1}, {2}, {3}, {2}};
  T_CHECK(backend_shared_gpu((const unsigned char(*)[16])four, 4, &a, &b) && a == 1 && b == 3, "pair 1, 3: %d, %d", a, b);
  T_CHECK(!backend_shared_gpu((const unsigned char(*)[16])four, 3, &a, &b), "first three distinct");
  free(ids);
}

/* comm_at_exit: comm_exit_all runs the registered functions, the last registered first, each once
 * however often it was registered (tests/cli/grad_comm.sh checks the lines and the status). */
static void hook_first(void) { printf("exit hook first on rank %d\n", comm_rank()); }
static void hook_second(void) { printf("exit hook second on rank %d\n", comm_rank()); }

static SCD_NORETURN void exit_through_hooks(void) {
  comm_at_exit(hook_first);
  comm_at_exit(hook_second);
  comm_at_exit(hook_first);
  comm_exit_all(5);
}

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  t_init(argc, argv);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--exit-hooks")) exit_through_hooks();
  const int rank = comm_rank(), world = comm_size();
  staged = *backend_cpu();
  staged.name = "staged";
  for (int b = 0; b < 3; b++) {
    const size_t bucket = b == 0 ? 0 : b == 1 ? 64 * sizeof(float) : 1;
    run(backend_cpu(), 5000, bucket, rank, world);
    run(&staged, 777, bucket, rank, world);
  }
  check_gpu_ids(rank, world);
  if (rank == 0) printf("grad_comm on %d rank(s): checked\n", world);
  const int status = t_finish();
  comm_finalize();
  return status;
}
