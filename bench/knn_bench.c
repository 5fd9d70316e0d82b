/* bench/knn_bench.c - speed of the kNN evaluation: n_test x n_train L2-normalised features of
 * dimension D (default 100k x 20k x 384, ks 5,10,50,100,200,500), total seconds, the GFLOP/s of
 * its similarity GEMM, and on the CPU a plain cblas_sgemm of the same shape in the same row blocks.
 *
 *   knn_bench [--test N] [--train N] [--dim D] [--classes C] [--threads T] [--block-mb MB]
 *             [--repeat R] [--device cpu|cuda]
 * One process; threads via --threads (else OMP_NUM_THREADS / OpenBLAS default).  --device cuda
 * (CUDA builds): the similarity GEMMs and the neighbour selection on the GPU (knn_set_device), the
 * votes on the host, as calculation='knn' runs there; --block-mb is then the GPU's similarity
 * scratch (default 512). */
#include "build_config.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "analysis/features_io.h"
#include "analysis/knn.h"
#include "bench/bench_result.h"
#include "core/check.h"
#include "core/log.h"
#include "core/rng.h"
#ifdef HAVE_CUDA
#include "backend/backend.h"
#include "cuda/backend_cuda.h"
#endif

static void usage(void) {
  fprintf(stderr, "usage: knn_bench [--test N] [--train N] [--dim D] [--classes C] [--threads T] "
                  "[--block-mb MB] [--repeat R] [--device cpu|cuda]\n");
  exit(2);
}

/* Rows around C random centres (the realistic shape of CLS features), L2-normalised. */
static void make_rows(float *x, int32_t *lab, int64_t n, int d, int C, const float *centres, uint64_t stream) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    struct rng r;
    rng_init(&r, 12345, RNG_DOMAIN_TEST, stream, (uint64_t)i);
    int c = (int)rng_below(&r, (uint64_t)C);
    lab[i] = c;
    for (int j = 0; j < d; j++) x[(size_t)i * d + j] = centres[(size_t)c * d + j] + (float)rng_normal(&r);
  }
  features_l2_normalize(x, n, d);
}

int main(int argc, char **argv) {
  long n_test = 100000, n_train = 20000, d = 384, C = 8, threads = 0, block_mb = 0, repeat = 1;
  int gpu = 0;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) usage();
    if (!strcmp(argv[i], "--device")) {
      if (!strcmp(argv[i + 1], "cuda"))
        gpu = 1;
      else if (strcmp(argv[i + 1], "cpu"))
        usage();
      i++;
      continue;
    }
    long v = strtol(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--test")) n_test = v;
    else if (!strcmp(argv[i], "--train")) n_train = v;
    else if (!strcmp(argv[i], "--dim")) d = v;
    else if (!strcmp(argv[i], "--classes")) C = v;
    else if (!strcmp(argv[i], "--threads")) threads = v;
    else if (!strcmp(argv[i], "--block-mb")) block_mb = v;
    else if (!strcmp(argv[i], "--repeat")) repeat = v;
    else usage();
    i++;
  }
  if (block_mb == 0) block_mb = gpu ? 512 : 64;
  if (n_test < 1 || n_train < 1 || d < 1 || C < 1 || block_mb < 1 || repeat < 1) usage();
#ifdef _OPENMP
  if (threads > 0) omp_set_num_threads((int)threads);
  threads = omp_get_max_threads();
#endif
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
  if (threads > 0) openblas_set_num_threads((int)threads);
#endif
  log_init(0, 1);
  char devname[300] = "CPU";
  if (gpu) {
#ifdef HAVE_CUDA
    const struct device *dev = backend_device_cuda("fp32");
    if (!dev) {
      fprintf(stderr, "knn_bench: --device cuda: no usable GPU: %s\n", backend_cuda_why_not());
      return 77;
    }
    knn_set_device(dev);
    struct backend_cuda_info info;
    backend_cuda_info(&info);
    snprintf(devname, sizeof devname, "%s", info.name);
#else
    fprintf(stderr, "knn_bench: --device cuda: this build has no CUDA backend\n");
    return 2;
#endif
  }

  float *centres = xmalloc(MUL_SIZE((size_t)C, (size_t)d) * sizeof(float));
  struct rng r;
  rng_init(&r, 1, RNG_DOMAIN_TEST, 99, 0);
  for (long i = 0; i < C * d; i++) centres[i] = (float)(0.25 * rng_normal(&r));
  float *train = xmalloc(MUL_SIZE((size_t)n_train, (size_t)d) * sizeof(float));
  float *test = xmalloc(MUL_SIZE((size_t)n_test, (size_t)d) * sizeof(float));
  int32_t *tl = xmalloc((size_t)n_train * sizeof *tl), *tel = xmalloc((size_t)n_test * sizeof *tel);
  make_rows(train, tl, n_train, (int)d, (int)C, centres, 1);
  make_rows(test, tel, n_test, (int)d, (int)C, centres, 2);

  const int64_t ks[] = {5, 10, 50, 100, 200, 500};
  const int nk = 6;
  const double flop = 2.0 * (double)n_test * (double)n_train * (double)d;
  const size_t block_bytes = (size_t)block_mb << 20;
  int64_t block = (int64_t)(block_bytes / ((size_t)n_train * sizeof(float)));
  if (block < 1) block = 1;
  if (block > n_test) block = n_test;
  printf("# knn_bench: %ld test x %ld reference rows, D = %ld, %ld classes, k = 5,10,50,100,200,500, "
         "T = 0.1, on %s, %ld thread%s, similarity scratch %ld MiB\n",
         n_test, n_train, d, C, devname, threads, threads == 1 ? "" : "s", block_mb);
  printf("# %-22s %10s %10s %10s %12s\n", "what", "seconds", "gemm s", "select s", "GEMM GFLOP/s");

  knn_set_block_bytes(block_bytes);
  char notes[160];
  snprintf(notes, sizeof notes, "%ld test x %ld reference rows, D=%ld, 6 values of k, %s", n_test, n_train, d,
           gpu ? devname : "CPU");
  double best_t = 0, best_gemm = 0, best_sel = 0, best_sgemm = 0;
  for (long it = 0; it < repeat; it++) {
    struct knn_result res;
    double t0 = wtime();
    knn_evaluate(train, tl, n_train, test, tel, n_test, (int)d, (int)C, ks, nk, 0.1, &res);
    double t = wtime() - t0;
    printf("  %-22s %10.3f %10.3f %10.3f %12.1f\n", "knn_evaluate", t, res.seconds_gemm, res.seconds_select,
           flop / res.seconds_gemm * 1e-9);
    if (it == 0 || t < best_t) {
      best_t = t;
      best_gemm = res.seconds_gemm;
      best_sel = res.seconds_select;
    }
    if (it == 0)
      printf("# top1 %% per k: %.2f %.2f %.2f %.2f %.2f %.2f\n", res.top1[0], res.top1[1], res.top1[2],
             res.top1[3], res.top1[4], res.top1[5]);
    knn_result_free(&res);
  }

  if (gpu) {
    bench_result("knn_gpu", "time", best_t, "s", "%s", notes);
    bench_result("knn_gpu", "gemm_gflops", flop / best_gemm * 1e-9, "GFLOP/s", "fp32 similarity GEMMs on the GPU");
    bench_result("knn_gpu", "select_time", best_sel, "s", "neighbour selection on the GPU, lists back, votes");
    free(centres), free(train), free(test), free(tl), free(tel);
    return 0;
  }
  /* The same GEMM alone: the same row blocks into the same scratch, nothing else. */
  float *sim = xmalloc(MUL_SIZE(MUL_SIZE((size_t)block, (size_t)n_train), sizeof(float)));
  for (long it = 0; it < repeat; it++) {
    double t0 = wtime();
    for (int64_t b0 = 0; b0 < n_test; b0 += block) {
      int64_t m = n_test - b0 < block ? n_test - b0 : block;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n_train, (int)d, 1.0f,
                  test + (size_t)b0 * (size_t)d, (int)d, train, (int)d, 0.0f, sim, (int)n_train);
    }
    double t = wtime() - t0;
    printf("  %-22s %10.3f %10.3f %10s %12.1f\n", "plain sgemm (blocked)", t, t, "-", flop / t * 1e-9);
    if (it == 0 || t < best_sgemm) best_sgemm = t;
  }
  bench_result("knn", "time", best_t, "s", "%s", notes);
  bench_result("knn", "gemm_gflops", flop / best_gemm * 1e-9, "GFLOP/s", "similarity GEMM inside knn_evaluate");
  bench_result("knn", "gemm_efficiency", 100 * best_sgemm / best_gemm, "%",
               "plain cblas_sgemm of the same row blocks over knn_evaluate's GEMM time");
  /* One square-ish sgemm of the same inner dimension, as the reference of what BLAS reaches. */
  {
    int64_t m = block < 4096 ? block : 4096;
    int64_t nn = n_train < 4096 ? n_train : 4096;
    double t0 = wtime();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nn, (int)d, 1.0f, test, (int)d, train,
                (int)d, 0.0f, sim, (int)nn);
    double t = wtime() - t0;
    printf("  %-22s %10.3f %10.3f %10s %12.1f   (%lld x %lld x %ld)\n", "plain sgemm (one call)", t, t, "-",
           2.0 * (double)m * (double)nn * (double)d / t * 1e-9, (long long)m, (long long)nn, d);
  }
  free(sim);
  free(centres);
  free(train);
  free(test);
  free(tl);
  free(tel);
  return 0;
}
