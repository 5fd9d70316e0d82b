/* test_gpu_nccl.c - the NCCL gradient communicator on one rank: buckets as backward hands them over
 * (merged, out of order, with gaps), finish, the centre's all-reduce.
 *
 * One GPU gives a one-rank communicator, where the sum over ranks is the identity: every element
 * must come back bit-identical (an element reduced twice, skipped, or read before the producing
 * kernel ran would differ), and the ops queued after finish must see the result.  Several ranks
 * need one GPU each (NCCL refuses two ranks on one device); bench/gpu_train_bench under mpirun
 * exercises that on a multi-GPU node. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/grad_comm.h"
#include "model/ops.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_util.h"

int main(int argc, char **argv) {
  t_init(argc, argv);
  const struct ops *o = gpu_or_skip("bf16");
#ifndef HAVE_NCCL
  printf("SKIP: scdino was built without NCCL\n");
  return 77;
#else
  struct grad_comm *gc = grad_comm_nccl_create(o, 4096); /* 1024-float buckets */
  T_CHECK(gc && !strcmp(gc->name, "nccl") && gc->world == 1, "communicator: %s, world %d",
          gc ? gc->name : "(none)", gc ? gc->world : 0);
  struct rng r;
  rng_init(&r, 1, RNG_DOMAIN_TEST, 5, 0);
  const size_t n = 100003;
  float *h = gpu_randn(&r, n, 1.0f), *back = gpu_zeros(n);
  float *d = gpu_f32_up(o, h, n);
  for (int round = 0; round < 3; round++) {
    /* the gradients are produced on the backend's stream right before they are handed over */
    float *d0 = o->alloc(n * sizeof(float));
    gc->begin_step(gc, d, n);
    o->copy(d, d0, n * sizeof(float)); /* zero, then the values back, as backward would write */
    o->upload(d, h, n * sizeof(float));
    if (round == 0) { /* descending adjacent ranges (the model's order), a gap at the start */
      size_t hi = n;
      while (hi > 5000) {
        const size_t lo = hi > 777 ? hi - 777 : 0;
        gc->bucket_ready(gc, lo, hi - lo);
        hi = lo;
      }
    } else if (round == 1) { /* disjoint, out of order, gaps in between */
      gc->bucket_ready(gc, 50000, 10);
      gc->bucket_ready(gc, 10, 20000);
      gc->bucket_ready(gc, 90000, 10003);
    } /* round 2: no bucket at all, finish reduces everything */
    gc->finish(gc);
    gpu_f32_down(o, back, d, n);
    char what[64];
    snprintf(what, sizeof what, "gradients after finish (round %d)", round);
    gpu_cmp_exact(what, back, h, n);
    o->free(d0);
  }
  /* the centre's sums: blocking, in place */
  float *c = gpu_randn(&r, 65536, 1.0f), *cb = gpu_zeros(65536);
  float *dc = gpu_f32_up(o, c, 65536);
  gc->allreduce_sum(gc, dc, 65536);
  gpu_f32_down(o, cb, dc, 65536);
  gpu_cmp_exact("allreduce_sum of 65536 floats", cb, c, 65536);
  T_CHECK(gc->wait_seconds >= 0, "wait_seconds %g", gc->wait_seconds);
  printf("NCCL wait %.6f s in all\n", gc->wait_seconds);
  o->free(d);
  o->free(dc);
  gc->destroy(gc);
  free(h), free(back), free(c), free(cb);
  return t_finish();
#endif
}
