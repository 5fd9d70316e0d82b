/* test_gpu_augment.c - GPU crops against CPU crops (augment_image) for the same raw images.
 *
 * Random crops (RandomResizedCrop, flips, brightness, blur, solarisation; the draws of
 * augment_draw) and deterministic crops (augment = .false.), uint16 and float32 raw images, a
 * channel selection in another order, non-square images, and two batches in a row as the training
 * loop makes them (the next started before this one's crops are read: staging and crop buffers
 * alternate), then the first again in one call.  The GPU rounds every operation as the CPU does, so the crops are expected
 * to be bit-identical: the check is a relative L2 error of 1e-6 over each crop, and the number of
 * values that differ at all is printed. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/data/augment_gpu.h"
#include "data/augment.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_util.h"

static void *make_raw(int n, int C, int H, int W, enum imgops_dtype dt, struct rng *r) {
  const size_t count = (size_t)n * C * H * W;
  if (dt == IMGOPS_U16) {
    uint16_t *x = malloc(count * sizeof *x);
    for (size_t i = 0; i < count; i++) x[i] = (uint16_t)(100 + rng_below(r, 4000));
    return x;
  }
  float *x = malloc(count * sizeof *x);
  for (size_t i = 0; i < count; i++) x[i] = (float)(rng_normal(r) * 3.0 + 1.0);
  /* Image 0: every channel non-negative with both signed zeros as its minimum, which the CPU's
   * scan and the GPU's reduction meet in different orders. */
  const size_t hw = (size_t)H * W;
  for (int c = 0; c < C; c++) {
    float *p = x + (size_t)c * hw;
    for (size_t i = 0; i < hw; i++) p[i] = fabsf(p[i]) + 0.5f;
    p[3] = -0.0f;
    p[hw / 2] = 0.0f;
    p[hw - 1] = -0.0f;
  }
  return x;
}

static void run(enum imgops_dtype dt, int random, int64_t epoch) {
  const int C_all = 6, H = 60, W = 52, n = 5, G = 32, L = 16, nl = 3;
  struct augment a;
  memset(&a, 0, sizeof a);
  a.C_all = C_all;
  a.H = H;
  a.W = W;
  a.dtype = dt;
  a.nsel = 4;
  const int sel[4] = {4, 0, 2, 5};
  for (int k = 0; k < 4; k++) {
    a.sel[k] = sel[k];
    a.mean[k] = 0.1f + 0.1f * k;
    a.std[k] = 0.2f + 0.05f * k;
  }
  a.global_size = G;
  a.local_size = L;
  a.n_local = nl;
  a.global_scale[0] = 0.14;
  a.global_scale[1] = 1.0;
  a.local_scale[0] = 0.05;
  a.local_scale[1] = 0.4;
  a.random = random;
  a.seed = 40;
  struct rng r;
  rng_init(&r, 11, RNG_DOMAIN_TEST, (uint64_t)dt * 2 + (uint64_t)random, (uint64_t)epoch);
  struct augment_gpu *ag = augment_gpu_create(&a, n);
  struct augment_work *w = augment_work_create(&a);
  const int64_t index[5] = {0, 17, 4, 123456, 9};
  const size_t gsz = (size_t)a.nsel * G * G, lsz = (size_t)a.nsel * L * L;
  const size_t ng = 2 * (size_t)n * gsz, nlv = (size_t)nl * n * lsz;
  const size_t isz = (size_t)C_all * H * W * (dt == IMGOPS_U16 ? 2 : 4);
  float *cg[2], *cl[2];
  void *raw[2];
  float *hg = malloc(ng * sizeof(float)), *hl = malloc(nlv * sizeof(float));
  /* CPU crops of two batches, laid out crop-major as the loader does */
  for (int batch = 0; batch < 2; batch++) {
    raw[batch] = make_raw(n, C_all, H, W, dt, &r);
    cg[batch] = malloc(ng * sizeof(float));
    cl[batch] = malloc(nlv * sizeof(float));
    for (int i = 0; i < n; i++) {
      float *out[2 + 3];
      out[0] = cg[batch] + (0 * (size_t)n + i) * gsz;
      out[1] = cg[batch] + (1 * (size_t)n + i) * gsz;
      for (int k = 0; k < nl; k++) out[2 + k] = cl[batch] + ((size_t)k * n + i) * lsz;
      const int rc = augment_image(&a, w, (const char *)raw[batch] + i * isz, epoch + batch, index[i], out);
      T_CHECK(rc == 0, "image %d: augment_image dropped it", i);
    }
  }
  /* On the GPU as the training loop makes them: batch 1 started (and, after the device-wide
   * synchronisation, made) before batch 0's crops are read, so the two must be in different
   * buffers; then batch 0 once more in one call, serially. */
  float *dg[3], *dl[3];
  augment_gpu_start(ag, raw[0], index, n, epoch);
  augment_gpu_take(ag, &dg[0], &dl[0]);
  augment_gpu_start(ag, raw[1], index, n, epoch + 1);
  CHECK_CUDA(cudaDeviceSynchronize());
  const struct ops *o = backend_cuda();
  for (int step = 0; step < 3; step++) {
    const int batch = step % 2;
    if (step == 1) augment_gpu_take(ag, &dg[1], &dl[1]);
    if (step == 2) augment_gpu_batch(ag, raw[0], index, n, epoch, &dg[2], &dl[2]);
    gpu_f32_down(o, hg, dg[step], ng);
    gpu_f32_down(o, hl, dl[step], nlv);
    size_t diff = 0;
    for (size_t i = 0; i < ng; i++) diff += memcmp(&hg[i], &cg[batch][i], 4) != 0;
    for (size_t i = 0; i < nlv; i++) diff += memcmp(&hl[i], &cl[batch][i], 4) != 0;
    char what[160];
    snprintf(what, sizeof what, "%s %s epoch %lld%s global crops", dt == IMGOPS_U16 ? "uint16" : "float32",
             random ? "random" : "deterministic", (long long)(epoch + batch), step == 2 ? " (again)" : "");
    gpu_cmp(what, hg, cg[batch], ng, 1e-6);
    snprintf(what, sizeof what, "%s %s epoch %lld%s local crops", dt == IMGOPS_U16 ? "uint16" : "float32",
             random ? "random" : "deterministic", (long long)(epoch + batch), step == 2 ? " (again)" : "");
    gpu_cmp(what, hl, cl[batch], nlv, 1e-6);
    printf("%s: %zu of %zu values not bit-identical to the CPU's\n", what, diff, ng + nlv);
  }
  T_CHECK(augment_gpu_exposed_seconds(ag) >= 0, "exposed data time is negative");
  for (int batch = 0; batch < 2; batch++) free(raw[batch]), free(cg[batch]), free(cl[batch]);
  free(hg), free(hl);
  augment_work_destroy(w);
  augment_gpu_destroy(ag);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  (void)gpu_or_skip("bf16");
  run(IMGOPS_U16, 1, 0);
  run(IMGOPS_U16, 1, 7);
  run(IMGOPS_U16, 0, 0);
  run(IMGOPS_F32, 1, 3);
  return t_finish();
}
