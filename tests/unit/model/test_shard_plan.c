/* test_shard_plan.c - the sharded optimizer's slices (model/shard_plan.h): for tables of tensors of
 * assorted sizes (padding between them, frozen ones, some larger than several norm blocks) and 1 to
 * 9 ranks, the slices tile the buffer in rank order, every boundary is a norm-block boundary, the
 * blocks cover every trainable tensor in order and each lies in its owner's slice, the slices are
 * balanced to a block, and shard_plan_overlap cuts ranges right.  Then the property the plan exists
 * for: per-tensor norms assembled from the CPU backend's block sums of squares (seg_sumsq), added
 * in block order over the ranks' blocks (shard_plan_sumsq), are seg_norms' bit for bit. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/ops.h"
#include "model/shard_plan.h"
#include "model/tensor.h"
#include "tests/fixtures/testutil.h"

/* Whether pos is a boundary a slice may have with norm blocks of block elements. */
static int aligned(const struct tensor_table *tt, size_t pos, size_t block) {
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    if (pos > t->off && pos < t->off + t->n) return (pos - t->off) % block == 0;
  }
  return 1;
}

static void check_plan(const struct tensor_table *tt, int world, size_t block) {
  for (int rank = 0; rank < world; rank++) {
    struct shard_plan p;
    shard_plan_init(&p, tt, world, rank, block);
    T_CHECK(p.lo[0] == 0 && p.lo[world] == tt->size, "world %d: slices [%zu, %zu) of %zu", world, p.lo[0],
            p.lo[world], tt->size);
    size_t maxs = 0;
    for (int r = 0; r < world; r++) {
      T_CHECK(p.lo[r] <= p.lo[r + 1], "world %d: slice %d goes backwards", world, r);
      T_CHECK(aligned(tt, p.lo[r], block), "world %d block %zu: boundary %zu inside a norm block", world, block,
              p.lo[r]);
      const size_t len = p.lo[r + 1] - p.lo[r];
      if (len > maxs) maxs = len;
      /* balanced: a boundary moves up to the next block boundary at most */
      T_CHECK(len <= tt->size / (size_t)world + 2 * block, "world %d: slice %d has %zu of %zu elements", world,
              r, len, tt->size);
    }
    T_CHECK(p.max_slice == maxs, "max_slice %zu vs %zu", p.max_slice, maxs);
    /* blocks: every trainable tensor covered in order, each block in its owner's slice */
    int k = 0;
    for (int i = 0; i < tt->n; i++) {
      const struct tensor *t = &tt->t[i];
      if (!(t->flags & TENSOR_GRAD)) continue;
      for (size_t o = 0; o < t->n; o += block, k++) {
        T_CHECK(k < p.nblk && p.blk[k].tensor == i && p.blk[k].off == t->off + o &&
                    p.blk[k].n == (t->n - o < block ? t->n - o : block),
                "world %d: block %d of tensor %s", world, k, t->name);
        if (k >= p.nblk) break;
      }
    }
    T_CHECK(k == p.nblk, "world %d: %d blocks expected, %d in the plan", world, k, p.nblk);
    T_CHECK(p.blk_lo[0] == 0 && p.blk_lo[world] == p.nblk, "world %d: block ranges", world);
    for (int r = 0; r < world; r++)
      for (int b = p.blk_lo[r]; b < p.blk_lo[r + 1]; b++)
        T_CHECK(p.blk[b].off >= p.lo[r] && p.blk[b].off + p.blk[b].n <= p.lo[r + 1],
                "world %d: block %d not in rank %d's slice", world, b, r);
    /* overlap: a range across everything gives each rank its slice; one past the end nothing */
    for (int r = 0; r < world; r++) {
      size_t c;
      const size_t at = shard_plan_overlap(&p, r, 0, tt->size, &c);
      T_CHECK(at == p.lo[r] && c == p.lo[r + 1] - p.lo[r], "overlap of rank %d", r);
      shard_plan_overlap(&p, r, tt->size, 5, &c);
      T_CHECK(c == 0, "overlap past the end");
    }
    T_CHECK(p.rank == rank && p.world == world, "rank/world");
    shard_plan_free(&p);
  }
}

/* Norms from gathered block partials (the sharded optimizer's way) against seg_norms, bitwise. */
static void check_norms(const struct tensor_table *tt, const float *g, int world) {
  const struct ops *ops = backend_cpu();
  double *want = calloc((size_t)tt->n, sizeof *want), *ss = calloc((size_t)tt->n, sizeof *ss);
  struct ops_seg *segs = calloc((size_t)tt->n, sizeof *segs);
  for (int i = 0; i < tt->n; i++) segs[i] = (struct ops_seg){tt->t[i].off, tt->t[i].n};
  ops->seg_norms(want, g, segs, tt->n);
  struct shard_plan p;
  shard_plan_init(&p, tt, world, 0, OPS_NORM_BLOCK);
  double *part = calloc((size_t)p.nblk + 1, sizeof *part);
  for (int r = 0; r < world; r++) { /* each rank's blocks, as that rank computes them */
    const int first = p.blk_lo[r], nb = p.blk_lo[r + 1] - first;
    struct ops_seg *bs = calloc((size_t)nb + 1, sizeof *bs);
    for (int b = 0; b < nb; b++) bs[b] = (struct ops_seg){p.blk[first + b].off, p.blk[first + b].n};
    if (nb) ops->seg_sumsq(part + first, g, bs, nb);
    free(bs);
  }
  shard_plan_sumsq(&p, part, ss, tt->n);
  int bad = 0;
  for (int i = 0; i < tt->n; i++) {
    if (!(tt->t[i].flags & TENSOR_GRAD)) continue;
    const double got = sqrt(ss[i]);
    if (memcmp(&got, &want[i], sizeof got)) {
      bad++;
      fprintf(stderr, "world %d: %s norm %.17g, seg_norms %.17g\n", world, tt->t[i].name, got, want[i]);
    }
  }
  T_CHECK(bad == 0, "world %d: %d norms differ from seg_norms", world, bad);
  shard_plan_free(&p);
  free(part);
  free(want);
  free(ss);
  free(segs);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  struct tensor_table tt;
  tensors_init(&tt);
  const int64_t shapes[][2] = {{3, 5}, {100000, 1}, {7, 1}, {16384, 2}, {1, 1}, {40000, 1}, {999, 33}, {2, 2},
                               {3 * OPS_NORM_BLOCK, 1}};
  const int nsh = (int)(sizeof shapes / sizeof shapes[0]);
  for (int i = 0; i < nsh; i++) tensors_add(&tt, 2, shapes[i], "t%d", i);
  tt.t[4].flags = 0; /* a frozen tensor: no norm blocks */
  for (int world = 1; world <= 9; world++) {
    check_plan(&tt, world, OPS_NORM_BLOCK);
    check_plan(&tt, world, 100);
    check_plan(&tt, world, 1);
  }
  float *g = malloc(tt.size * sizeof(float));
  struct rng r;
  rng_init(&r, 7, RNG_DOMAIN_TEST, 0, 0);
  for (size_t i = 0; i < tt.size; i++) g[i] = (float)rng_normal(&r) * (i % 7 == 0 ? 100.0f : 0.01f);
  /* The last tensor's blocks make the order show: 16384 ones (2^14), then two blocks whose sums of
   * squares are 0.6 of an ulp of 2^14 each: added in block order 2^14 + 2 ulp, added the other way
   * round 2^14 + 1 ulp. */
  const struct tensor *last = &tt.t[nsh - 1];
  const float tiny = sqrtf(0.6f) * ldexpf(1.0f, -19); /* tiny^2 = 0.6 x 2^-38, ulp(2^14) = 2^-38 */
  for (size_t j = 0; j < last->n; j++) g[last->off + j] = j < OPS_NORM_BLOCK ? 1.0f : 0.0f;
  g[last->off + OPS_NORM_BLOCK] = g[last->off + 2 * OPS_NORM_BLOCK] = tiny;
  for (int world = 1; world <= 9; world++) check_norms(&tt, g, world);
  free(g);
  /* A table smaller than the ranks: empty slices are allowed and still tile. */
  struct tensor_table small;
  tensors_init(&small);
  const int64_t one[1] = {3};
  tensors_add(&small, 1, one, "only");
  check_plan(&small, 8, OPS_NORM_BLOCK);
  tensors_free(&small);
  tensors_free(&tt);
  return t_finish();
}
