/* knn_gpu.c - host side of the kNN neighbour lists on the GPU: reference rows uploaded once, test
 * blocks uploaded, a GEMM and a selection pass per reference tile, the lists back (knn_gpu.h). */
#include "build_config.h"

#include <stdlib.h>

#include "analysis/knn_gpu.h"
#include "core/check.h"
#include "core/log.h"

struct knn_gpu {
  const struct ops *ops;
  const struct device_knn *sel; /* the device's selection */
  int64_t n_ref, block_rows;
  int d, kmax, tile;
  float *ref, *test, *sim; /* device */
  float *ls;               /* device lists [block_rows][kmax] */
  int32_t *lp;
  float *hs;               /* host copies of the lists */
  int32_t *hp;
};

struct knn_gpu *knn_gpu_create(const struct device *dev, const float *ref, int64_t n_ref, int d, int kmax,
                               int64_t block_rows) {
  SCD_ASSERT(dev->knn && n_ref >= 1 && n_ref <= INT32_MAX && d >= 1 && kmax >= 1 && kmax <= dev->knn->max_k &&
             block_rows >= 1);
  const struct ops *ops = dev->ops;
  struct knn_gpu *g = xcalloc(1, sizeof *g);
  g->ops = ops;
  g->sel = dev->knn;
  g->n_ref = n_ref;
  g->d = d;
  g->kmax = kmax;
  g->block_rows = block_rows;
  g->tile = n_ref < KNN_GPU_TILE ? (int)n_ref : KNN_GPU_TILE;
  const size_t refb = MUL_SIZE(MUL_SIZE((size_t)n_ref, (size_t)d), sizeof(float));
  g->ref = ops->alloc(refb);
  ops->upload(g->ref, ref, refb);
  g->test = ops->alloc(MUL_SIZE(MUL_SIZE((size_t)block_rows, (size_t)d), sizeof(float)));
  g->sim = ops->alloc(MUL_SIZE(MUL_SIZE((size_t)block_rows, (size_t)g->tile), sizeof(float)));
  const size_t nl = MUL_SIZE((size_t)block_rows, (size_t)kmax);
  g->ls = ops->alloc(MUL_SIZE(nl, sizeof(float)));
  g->lp = ops->alloc(MUL_SIZE(nl, sizeof(int32_t)));
  g->hs = xmalloc(MUL_SIZE(nl, sizeof(float)));
  g->hp = xmalloc(MUL_SIZE(nl, sizeof(int32_t)));
  return g;
}

void knn_gpu_destroy(struct knn_gpu *g) {
  if (!g) return;
  const struct ops *ops = g->ops;
  ops->sync();
  ops->free(g->ref);
  ops->free(g->test);
  ops->free(g->sim);
  ops->free(g->ls);
  ops->free(g->lp);
  free(g->hs);
  free(g->hp);
  free(g);
}

void knn_gpu_select(struct knn_gpu *g, const float *test, int64_t n_test, int64_t pos0, struct knn_nb *lists,
                    double *t_gemm, double *t_select) {
  SCD_ASSERT(n_test >= 0 && n_test <= g->block_rows && pos0 >= 0 && pos0 + g->n_ref <= INT32_MAX);
  if (n_test == 0) return;
  const struct ops *ops = g->ops;
  const size_t nl = (size_t)n_test * (size_t)g->kmax;
  ops->upload(g->test, test, (size_t)n_test * (size_t)g->d * sizeof(float));
  g->sel->lists_clear(g->ls, g->lp, (int64_t)nl);
  for (int64_t c0 = 0; c0 < g->n_ref; c0 += g->tile) {
    const int w = (int)(g->n_ref - c0 < g->tile ? g->n_ref - c0 : g->tile);
    double t0 = wtime();
    /* sim [n_test][w] = test . ref[c0 .. c0 + w)^T */
    ops->matmul_f32(g->sim, g->test, g->ref + (size_t)c0 * (size_t)g->d, (int)n_test, w, g->d, 0, 1, 0.0f);
    ops->sync();
    double t1 = wtime();
    g->sel->topk(g->sim, n_test, w, w, (int)c0, g->kmax, g->ls, g->lp);
    ops->sync();
    *t_gemm += t1 - t0;
    *t_select += wtime() - t1;
  }
  double t0 = wtime();
  ops->download(g->hs, g->ls, nl * sizeof(float));
  ops->download(g->hp, g->lp, nl * sizeof(int32_t));
  for (size_t i = 0; i < nl; i++) {
    lists[i].s = g->hs[i];
    /* every tile has at least kmax columns or the list keeps empty entries (a share < kmax) */
    lists[i].pos = g->hp[i] == KNN_NB_NONE_POS ? KNN_NB_NONE_POS : (int32_t)(pos0 + g->hp[i]);
  }
  *t_select += wtime() - t0;
}
