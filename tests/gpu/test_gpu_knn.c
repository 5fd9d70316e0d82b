/* test_gpu_knn.c - the kNN neighbour lists on the GPU against the CPU's.
 *
 * 1. The selection kernel (cuda/analysis/knn_kernels.cu) on given similarities, fed in tiles of several
 *    widths, against knn_select_row: entry for entry equal, with similarities from a few dozen
 *    values (ties everywhere, decided by position), k = 1 to KK_MAX_K, fewer rows than k (empty
 *    entries kept), and a row of equal similarities.
 * 2. The CUDA device (backend/device.h): its table and services.
 * 3. Whole evaluations, knn_evaluate on the GPU (knn_set_device) against the CPU, on features whose
 *    dot products are exact in fp32 (multiples of 1/8 in 8 dimensions), so both devices' GEMMs give
 *    the same similarities and the counts must be equal: more reference rows than one tile
 *    (KNN_GPU_TILE), blocks of a few test rows. */
#include "build_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn.h"
#include "analysis/knn_gpu.h"
#include "analysis/knn_lists.h"
#include "backend/backend.h"
#include "core/rng.h"
#include "cuda/analysis/knn_kernels.h"
#include "cuda/backend_cuda.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_util.h"

/* rows x n similarities from `levels` values in [-1, 1]; row 0 all equal when flat. */
static float *make_sims(struct rng *r, int rows, int n, int levels, int flat) {
  float *s = malloc((size_t)rows * n * sizeof *s);
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < n; j++)
      s[(size_t)i * n + j] = flat && i == 0 ? 0.25f : (float)((int)rng_below(r, (uint64_t)levels) * 2 - levels) / levels;
  return s;
}

static void kernel_case(const struct ops *o, struct rng *r, int rows, int n, int kmax, int levels, const int *widths,
                        int nw) {
  float *s = make_sims(r, rows, n, levels, 1);
  float *ds = gpu_f32_up(o, s, (size_t)rows * n);
  float *ls = o->alloc((size_t)rows * kmax * sizeof(float));
  int32_t *lp = o->alloc((size_t)rows * kmax * sizeof(int32_t));
  void *stream = backend_cuda_stream();
  kk_lists_clear(ls, lp, (int64_t)rows * kmax, stream);
  /* tiles of the given widths in turn: columns c0 .. c0 + w of the row-major [rows][n] matrix */
  for (int c0 = 0, t = 0; c0 < n; t++) {
    int w = widths[t % nw];
    if (w > n - c0) w = n - c0;
    kk_topk(ds + c0, rows, w, n, c0, kmax, ls, lp, stream);
    c0 += w;
  }
  float *hs = malloc((size_t)rows * kmax * sizeof *hs);
  int32_t *hp = malloc((size_t)rows * kmax * sizeof *hp);
  o->download(hs, ls, (size_t)rows * kmax * sizeof *hs);
  o->download(hp, lp, (size_t)rows * kmax * sizeof *hp);
  struct knn_nb *want = malloc((size_t)kmax * sizeof *want);
  struct knn_nb *buf = malloc((size_t)knn_select_buf_len(kmax) * sizeof *buf);
  int bad = 0;
  for (int i = 0; i < rows; i++) {
    knn_select_row(s + (size_t)i * n, n, 0, kmax, want, buf);
    for (int m = 0; m < kmax; m++) {
      const size_t at = (size_t)i * kmax + m;
      if (hs[at] != want[m].s || hp[at] != want[m].pos) {
        if (bad++ < 5)
          fprintf(stderr, "  row %d entry %d: GPU (%g, %d), CPU (%g, %d)\n", i, m, hs[at], hp[at], want[m].s,
                  want[m].pos);
      }
    }
  }
  T_CHECK(bad == 0, "GPU lists differ from the CPU's in %d entries (%d rows x %d columns, k = %d, %d levels)", bad,
          rows, n, kmax, levels);
  o->free(ds);
  o->free(ls);
  o->free(lp);
  free(s), free(hs), free(hp), free(want), free(buf);
}

/* Rows of multiples of 1/8 in [-1/2, 1/2]: every dot product and partial sum is exact in fp32. */
static float *exact_rows(struct rng *r, int64_t n, int d, int32_t *lab, int C) {
  float *x = malloc((size_t)n * d * sizeof *x);
  for (int64_t i = 0; i < n; i++) {
    lab[i] = (int32_t)rng_below(r, (uint64_t)C);
    for (int j = 0; j < d; j++) x[i * d + j] = (float)((int)rng_below(r, 9) - 4) / 8.0f + (j == lab[i] ? 0.5f : 0.0f);
  }
  return x;
}

static void evaluate_case(const struct device *dev, struct rng *r, int64_t n_train, int64_t n_test, int64_t block_rows) {
  const int d = 8, C = 5;
  const int64_t ks[] = {1, 5, 50, 200, 3};
  const int nk = 5;
  int32_t *tl = malloc((size_t)n_train * sizeof *tl), *el = malloc((size_t)n_test * sizeof *el);
  float *tr = exact_rows(r, n_train, d, tl, C), *te = exact_rows(r, n_test, d, el, C);
  struct knn_result cpu, gpu;
  knn_set_device(NULL);
  knn_set_block_rows(0);
  knn_evaluate(tr, tl, n_train, te, el, n_test, d, C, ks, nk, 0.1, &cpu);
  knn_set_device(dev);
  knn_set_block_rows(block_rows);
  knn_evaluate(tr, tl, n_train, te, el, n_test, d, C, ks, nk, 0.1, &gpu);
  knn_set_device(NULL);
  knn_set_block_rows(0);
  const size_t ncounts = 1 + 2 * (size_t)nk + (size_t)nk * C * C;
  T_CHECK(memcmp(cpu.counts, gpu.counts, ncounts * sizeof *cpu.counts) == 0,
          "kNN counts differ between the CPU and the GPU (%lld reference x %lld test rows, blocks of %lld)",
          (long long)n_train, (long long)n_test, (long long)block_rows);
  T_CHECK(*gpu.n_test == n_test, "GPU evaluation counted %lld test rows, not %lld", (long long)*gpu.n_test,
          (long long)n_test);
  if (t_verbose)
    printf("  %lld x %lld: top-1 %.2f %.2f %.2f %.2f %.2f (CPU %.2f ...)\n", (long long)n_train, (long long)n_test,
           gpu.top1[0], gpu.top1[1], gpu.top1[2], gpu.top1[3], gpu.top1[4], cpu.top1[0]);
  knn_result_free(&cpu);
  knn_result_free(&gpu);
  free(tl), free(el), free(tr), free(te);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  const struct ops *o = gpu_or_skip("fp32");
  struct rng r;
  rng_init(&r, 5, RNG_DOMAIN_TEST, 41, 0);
  const int w1[] = {3000}, w3[] = {700, 1, 1500};
  kernel_case(o, &r, 4, 3000, 1, 16, w1, 1);
  kernel_case(o, &r, 4, 3000, 7, 16, w3, 3);
  kernel_case(o, &r, 3, 3000, 300, 40, w3, 3);
  kernel_case(o, &r, 3, 2500, KK_MAX_K, 64, w3, 3);
  kernel_case(o, &r, 3, 100, 300, 8, w1, 1); /* fewer rows than k: empty entries at the end */
  /* The CUDA device: its fp32 table and every service, the selection's up to KK_MAX_K. */
  const struct device *dev = backend_device_cuda("fp32");
  T_CHECK(dev && !strcmp(dev->name, "cuda") && dev->ops == o && dev->knn && dev->knn->max_k == KK_MAX_K &&
              dev->crops && dev->features_prep && dev->memory && dev->report && dev->grad_comm,
          "the CUDA device lacks a service");
  T_CHECK(backend_device_cuda("bf16")->ops == backend_cuda_for("bf16"), "the bf16 device's table");
  T_CHECK(backend_device_cuda("fp32") == dev && dev->ops == o, "the fp32 device changed");
  evaluate_case(dev, &r, 600, 23, 5);
  evaluate_case(dev, &r, KNN_GPU_TILE + 1500, 9, 4); /* two reference tiles */
  return t_finish();
}
