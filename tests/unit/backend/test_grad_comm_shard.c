/* test_grad_comm_shard.c - the sharded optimizer under mpirun (tests/cli/train_shard.sh runs it on
 * 1, 2 and 3 ranks): the reduce-scatter communicator and optim_update on this rank's slice against
 * the all-reduce communicator and the unsharded optim_update, bit for bit.
 *
 * Each rank makes gradients that depend on (rank, step, element) (not exact in fp32, so that the
 * order of the sum over ranks shows), hands them over in ranges from the top of the buffer down as
 * backward does, some left for finish, with bucket sizes that give one, several and one call per
 * range.  The reduce-scatter's slice must be the all-reduce's mean on the same elements; then three
 * optimizer steps (the last layer frozen in the first, clip 0.05 so that some tensors are clipped)
 * on a small DINO model whose head's last layer spans four norm blocks must leave identical norms,
 * student, teacher and step counts on every rank, and moments that, gathered on rank 0 as a
 * checkpoint gathers them, are the unsharded ones.  optim_moments_upload (a restart) must give each
 * rank its slice back. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/comm.h"
#include "model/dino_model.h"
#include "model/grad_comm.h"
#include "model/ops.h"
#include "model/optim.h"
#include "model/shard_plan.h"
#include "tests/fixtures/shardopt_fixture.h"
#include "tests/fixtures/testutil.h"

struct state {
  struct dino_model *m;
  struct optim o;
  struct grad_comm *gc;
};

static void run(size_t bucket, int rank, int world) {
  const struct ops *ops = backend_cpu();
  struct state a, b;
  a.m = shardopt_model(ops);
  b.m = shardopt_model(ops);
  const struct tensor_table *tt = &a.m->tt;
  const size_t n = tt->size;
  struct shard_plan plan;
  shard_plan_init(&plan, &b.m->tt, world, rank, OPS_NORM_BLOCK);
  a.gc = grad_comm_mpi_create(ops, bucket);
  b.gc = grad_comm_mpi_shard_create(ops, bucket, &plan);
  T_CHECK(b.gc->world == world && b.gc->plan == &plan, "shard communicator of %d ranks", world);
  optim_init(&a.o, ops, tt);
  optim_init_sharded(&b.o, ops, &b.m->tt, &plan, b.gc);
  const size_t lo = plan.lo[rank], hi = plan.lo[rank + 1];
  T_CHECK(b.o.lo == lo && b.o.hi == hi, "optimizer slice [%zu, %zu) vs plan [%zu, %zu)", b.o.lo, b.o.hi, lo, hi);
  double *na = calloc((size_t)tt->n, sizeof *na), *nb = calloc((size_t)tt->n, sizeof *nb);
  float *fa = malloc(n * sizeof(float)), *fb = malloc(n * sizeof(float));
  for (int k = 0; k < 3; k++) {
    shardopt_grads(a.m->grads, tt, rank, k);
    memcpy(b.m->grads, a.m->grads, n * sizeof(float));
    shardopt_reduce(a.gc, a.m->grads, n);
    shardopt_reduce(b.gc, b.m->grads, n);
    T_CHECK(shardopt_ndiff(a.m->grads + lo, b.m->grads + lo, hi - lo) == 0,
            "bucket %zu step %d: the reduce-scatter's slice [%zu, %zu) is not the all-reduce's mean", bucket, k, lo, hi);
    const int ca = optim_update(&a.o, a.m->student, a.m->grads, 0.05, na, 1e-3, 0.04, k == 0, a.m->teacher, 0.996);
    const int cb = optim_update(&b.o, b.m->student, b.m->grads, 0.05, nb, 1e-3, 0.04, k == 0, b.m->teacher, 0.996);
    T_CHECK(ca == cb && ca > 0 && ca < tt->n, "step %d: %d vs %d tensors clipped", k, ca, cb);
    T_CHECK(!memcmp(na, nb, (size_t)tt->n * sizeof *na), "bucket %zu step %d: norms differ", bucket, k);
    T_CHECK(shardopt_ndiff(a.m->student, b.m->student, n) == 0, "bucket %zu step %d: student differs", bucket, k);
    T_CHECK(shardopt_ndiff(a.m->teacher, b.m->teacher, n) == 0, "bucket %zu step %d: teacher differs", bucket, k);
    T_CHECK(!memcmp(a.o.steps, b.o.steps, (size_t)tt->n * sizeof *a.o.steps), "step %d: step counts", k);
    T_CHECK(shardopt_ndiff(a.o.m + lo, b.o.m, hi - lo) == 0 && shardopt_ndiff(a.o.v + lo, b.o.v, hi - lo) == 0,
            "bucket %zu step %d: this rank's moments differ", bucket, k);
  }
  /* The moments as a checkpoint gathers them (rank 0), then uploaded again as a restart does. */
  memset(fa, 0, n * sizeof(float));
  memset(fb, 0, n * sizeof(float));
  optim_moments_download(&b.o, rank == 0 ? fa : NULL, rank == 0 ? fb : NULL);
  if (rank == 0) {
    size_t bad = 0;
    for (int i = 0; i < tt->n; i++) {
      const struct tensor *t = &tt->t[i];
      if (!(t->flags & TENSOR_GRAD)) continue;
      bad += shardopt_ndiff(a.o.m + t->off, fa + t->off, t->n) + shardopt_ndiff(a.o.v + t->off, fb + t->off, t->n);
    }
    T_CHECK(bad == 0, "bucket %zu: %zu gathered moments differ", bucket, bad);
  }
  struct optim c;
  optim_init_sharded(&c, ops, &b.m->tt, &plan, b.gc);
  optim_moments_upload(&c, a.o.m, a.o.v);
  T_CHECK(shardopt_ndiff(c.m, a.o.m + lo, hi - lo) == 0 && shardopt_ndiff(c.v, a.o.v + lo, hi - lo) == 0, "upload: slice");
  T_CHECK(world == 1 || b.gc->wait_seconds > 0, "no communication time recorded");
  optim_free(&c);
  optim_free(&a.o);
  optim_free(&b.o);
  a.gc->destroy(a.gc);
  b.gc->destroy(b.gc);
  shard_plan_free(&plan);
  dino_model_destroy(a.m);
  dino_model_destroy(b.m);
  free(na);
  free(nb);
  free(fa);
  free(fb);
}

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  t_init(argc, argv);
  const int rank = comm_rank(), world = comm_size();
  const size_t buckets[] = {0, 64 * sizeof(float), 1};
  for (int i = 0; i < 3; i++) run(buckets[i], rank, world);
  if (rank == 0) printf("grad_comm_shard on %d rank(s): checked\n", world);
  const int status = t_finish();
  comm_finalize();
  return status;
}
