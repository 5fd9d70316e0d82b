/* test_gpu_shard.c - the sharded optimizer on the CUDA backend under mpirun, one GPU per rank (the
 * emulator runs it on 1, 2 and 3 ranks: tests/emu/train_shard.sh): the NCCL reduce-scatter
 * communicator (cuda/comm/grad_comm_nccl.c) and optim_update on this rank's slice against the
 * NCCL all-reduce communicator and the unsharded optim_update, bit for bit.
 *
 * As tests/unit/backend/test_grad_comm_shard.c on the CPU: gradients that depend on (rank, step,
 * element), handed over from the top of the buffer down with some ranges left for finish, in
 * buckets of one, several and one call per range; the slice after finish must be the all-reduce's
 * mean (under the emulator, whose ncclReduce and ncclAllReduce add in the same order; NCCL on GPUs
 * may order them differently on 3 or more ranks), then three steps of a small DINO model (head's
 * last layer over four norm blocks; clip 0.05; the last layer frozen in the first) must leave the
 * same norms (seg_sumsq's block sums against seg_norms), student, teacher and, gathered on rank
 * 0, moments.  (That the weights' bf16 copies follow the all-gather shows in whole runs:
 * tests/emu/train_shard.sh.) */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "model/dino_model.h"
#include "model/grad_comm.h"
#include "model/ops.h"
#include "model/optim.h"
#include "model/shard_plan.h"
#include "tests/fixtures/shardopt_fixture.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_util.h"

#ifdef HAVE_NCCL
/* Device buffer d (n floats) into the host buffer h. */
static float *down(const struct ops *o, float *h, const float *d, size_t n) {
  gpu_f32_down(o, h, d, n);
  return h;
}

static void run(const struct ops *o, size_t bucket, int rank, int world) {
  struct dino_model *a = shardopt_model(o), *b = shardopt_model(o);
  const struct tensor_table *tt = &a->tt;
  const size_t n = tt->size;
  struct shard_plan plan;
  shard_plan_init(&plan, &b->tt, world, rank, OPS_NORM_BLOCK);
  struct grad_comm *ga = grad_comm_nccl_create(o, bucket), *gb = grad_comm_nccl_shard_create(o, bucket, &plan);
  T_CHECK(!strcmp(gb->name, "nccl-shard") && gb->world == world && gb->plan == &plan, "communicator %s of %d ranks",
          gb->name, gb->world);
  struct optim oa, ob;
  optim_init(&oa, o, tt);
  optim_init_sharded(&ob, o, &b->tt, &plan, gb);
  const size_t lo = plan.lo[rank], hi = plan.lo[rank + 1];
  double *na = calloc((size_t)tt->n, sizeof *na), *nb = calloc((size_t)tt->n, sizeof *nb);
  float *h = malloc(n * sizeof(float)), *fa = malloc(n * sizeof(float)), *fb = malloc(n * sizeof(float));
  float *ma = malloc(n * sizeof(float)), *va = malloc(n * sizeof(float));
  for (int k = 0; k < 3; k++) {
    shardopt_grads(h, tt, rank, k);
    o->upload(a->grads, h, n * sizeof(float));
    o->upload(b->grads, h, n * sizeof(float));
    shardopt_reduce(ga, a->grads, n);
    shardopt_reduce(gb, b->grads, n);
    T_CHECK(shardopt_ndiff(down(o, fa, a->grads, n) + lo, down(o, fb, b->grads, n) + lo, hi - lo) == 0,
            "bucket %zu step %d: the slice [%zu, %zu) is not the all-reduce's mean", bucket, k, lo, hi);
    const int ca = optim_update(&oa, a->student, a->grads, 0.05, na, 1e-3, 0.04, k == 0, a->teacher, 0.996);
    const int cb = optim_update(&ob, b->student, b->grads, 0.05, nb, 1e-3, 0.04, k == 0, b->teacher, 0.996);
    T_CHECK(ca == cb && ca > 0 && ca < tt->n, "step %d: %d vs %d tensors clipped", k, ca, cb);
    T_CHECK(!memcmp(na, nb, (size_t)tt->n * sizeof *na), "bucket %zu step %d: norms differ", bucket, k);
    T_CHECK(shardopt_ndiff(down(o, fa, a->student, n), down(o, fb, b->student, n), n) == 0,
            "bucket %zu step %d: student", bucket, k);
    T_CHECK(shardopt_ndiff(down(o, fa, a->teacher, n), down(o, fb, b->teacher, n), n) == 0,
            "bucket %zu step %d: teacher", bucket, k);
    down(o, ma, oa.m, n);
    down(o, va, oa.v, n);
    T_CHECK(shardopt_ndiff(ma + lo, down(o, fb, ob.m, hi - lo), hi - lo) == 0 &&
                shardopt_ndiff(va + lo, down(o, fb, ob.v, hi - lo), hi - lo) == 0,
            "bucket %zu step %d: this rank's moments differ", bucket, k);
  }
  /* The moments as a checkpoint gathers them (rank 0). */
  memset(fa, 0, n * sizeof(float));
  memset(fb, 0, n * sizeof(float));
  optim_moments_download(&ob, fa, fb);
  if (rank == 0) {
    size_t bad = 0;
    for (int i = 0; i < tt->n; i++) {
      const struct tensor *t = &tt->t[i];
      if (t->flags & TENSOR_GRAD)
        bad += shardopt_ndiff(ma + t->off, fa + t->off, t->n) + shardopt_ndiff(va + t->off, fb + t->off, t->n);
    }
    T_CHECK(bad == 0, "bucket %zu: %zu gathered moments differ", bucket, bad);
  }
  optim_free(&oa);
  optim_free(&ob);
  ga->destroy(ga);
  gb->destroy(gb);
  shard_plan_free(&plan);
  dino_model_destroy(a);
  dino_model_destroy(b);
  free(na), free(nb), free(h), free(fa), free(fb), free(ma), free(va);
}
#endif

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  t_init(argc, argv);
  const struct ops *o = gpu_or_skip("bf16");
#ifndef HAVE_NCCL
  (void)o;
  printf("SKIP: scdino was built without NCCL\n");
  comm_finalize();
  return 77;
#else
  const int rank = comm_rank(), world = comm_size();
  const size_t buckets[] = {0, 64 * sizeof(float), 1};
  for (int i = 0; i < 3; i++) run(o, buckets[i], rank, world);
  if (rank == 0) printf("gpu grad_comm_nccl_shard on %d rank(s): checked\n", world);
  const int status = t_finish();
  comm_finalize();
  return status;
#endif
}
