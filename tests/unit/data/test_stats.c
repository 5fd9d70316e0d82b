/* tests/unit/data/test_stats.c - per-image min-max scaling (with upstream's all-zero-channel rule) and the
 * dataset mean/std against a direct double-precision computation. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/shards.h"
#include "data/stats.h"
#include "tests/fixtures/testutil.h"

enum { C = 4, H = 9, W = 11, HW = H * W, N = 40 };

static uint64_t rng = 88172645463325252ull;
static double uni(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1.0p-53;
}

/* The reference: scale each image in long double, then two-pass mean and variance. */
static void reference(const void *imgs, int dtype, int n, double *mean, double *sd) {
  long double *x = malloc(sizeof(long double) * (size_t)n * C * HW);
  for (int i = 0; i < n; i++)
    for (int c = 0; c < C; c++) {
      long double v[HW], lo = INFINITY, hi = -INFINITY;
      for (int p = 0; p < HW; p++) {
        size_t k = ((size_t)i * C + c) * HW + p;
        v[p] = dtype == DATASET_U16 ? ((const uint16_t *)imgs)[k] : ((const float *)imgs)[k];
        lo = v[p] < lo ? v[p] : lo;
        hi = v[p] > hi ? v[p] : hi;
      }
      for (int p = 0; p < HW; p++) x[((size_t)i * C + c) * HW + p] = (v[p] - lo) / (hi - lo);
    }
  for (int c = 0; c < C; c++) {
    long double s = 0, s2 = 0;
    for (int i = 0; i < n; i++)
      for (int p = 0; p < HW; p++) s += x[((size_t)i * C + c) * HW + p];
    long double m = s / ((long double)n * HW);
    for (int i = 0; i < n; i++)
      for (int p = 0; p < HW; p++) {
        long double d = x[((size_t)i * C + c) * HW + p] - m;
        s2 += d * d;
      }
    mean[c] = (double)m;
    sd[c] = (double)sqrtl(s2 / ((long double)n * HW));
  }
  free(x);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  /* Random images with per-channel offsets and scales, in both stored types. */
  uint16_t *u = malloc(sizeof *u * N * C * HW);
  float *f = malloc(sizeof *f * N * C * HW);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) {
      double off = 1000 * uni(), scale = 50 + 20000 * uni(), pw = 1 + 2 * c;
      for (int p = 0; p < HW; p++) {
        size_t k = ((size_t)i * C + c) * HW + p;
        u[k] = (uint16_t)(off + scale * pow(uni(), pw));
        f[k] = (float)(-300 + off * 0.1 + 5 * scale * pow(uni(), pw) * 1e-3);
      }
    }
  for (int t = 0; t < 2; t++) {
    int dtype = t ? DATASET_F32 : DATASET_U16;
    const void *imgs = t ? (void *)f : (void *)u;
    size_t ib = (size_t)C * HW * dataset_dtype_size(dtype);
    struct stats_acc a, half1, half2;
    stats_acc_init(&a, C);
    stats_acc_init(&half1, C);
    stats_acc_init(&half2, C);
    for (int i = 0; i < N; i++) {
      int bad = stats_acc_add(&a, (const char *)imgs + (size_t)i * ib, dtype, HW);
      T_CHECK(bad == -1, "image %d reported channel %d", i, bad);
      stats_acc_add(i < N / 2 ? &half1 : &half2, (const char *)imgs + (size_t)i * ib, dtype, HW);
    }
    T_CHECK(a.images == N && a.pixels == (int64_t)N * HW, "counts");
    stats_acc_merge(&half1, &half2);
    double mean[C], sd[C], rm[C], rs[C], m2[C], s2[C];
    stats_finish(&a, mean, sd);
    stats_finish(&half1, m2, s2);
    reference(imgs, dtype, N, rm, rs);
    for (int c = 0; c < C; c++) {
      T_NEAR(mean[c], rm[c], 1e-13, "mean");
      T_NEAR(sd[c], rs[c], 1e-12, "std");
      T_NEAR(m2[c], rm[c], 1e-13, "merged mean");
      T_NEAR(s2[c], rs[c], 1e-12, "merged std");
      if (t_verbose) printf("  %s channel %d: mean %.15f (ref %.15f)  std %.15f (ref %.15f)\n",
                            dataset_dtype_name(dtype), c, mean[c], rm[c], sd[c], rs[c]);
    }
    stats_acc_free(&a);
    stats_acc_free(&half1);
    stats_acc_free(&half2);
  }

  /* A known case: one channel 0, 1, 2, 3 -> 0, 1/3, 2/3, 1: mean 1/2, std sqrt(5)/6. */
  {
    uint16_t img[4] = {0, 1, 2, 3};
    struct stats_acc a;
    stats_acc_init(&a, 1);
    stats_acc_add(&a, img, DATASET_U16, 4);
    double m, s;
    stats_finish(&a, &m, &s);
    T_NEAR(m, 0.5, 1e-15, "known mean");
    T_NEAR(s, sqrt(5.0) / 6.0, 1e-15, "known std");
    stats_acc_free(&a);
  }

  /* upstream's rule: an all-zero channel stays 0; a constant non-zero channel gives NaN. */
  {
    float img[3 * 4] = {0, 0, 0, 0, /* all zero */ -4, -2, -1, 0, /* max 0, min -4 */ 1, 2, 3, 5};
    double out[12];
    T_CHECK(stats_minmax(img, DATASET_F32, 3, 4, out) == -1, "all-zero channel accepted");
    T_CHECK(out[0] == 0 && out[3] == 0, "all-zero channel scales to 0");
    /* Some channel is flat, so every channel whose max is 0 gets max 1: (x + 4) / 5. */
    T_NEAR(out[4], 0.0, 0, "rule applies to other max-0 channels");
    T_NEAR(out[5], 2.0 / 5.0, 1e-15, "rule applies to other max-0 channels");
    T_NEAR(out[7], 4.0 / 5.0, 1e-15, "rule applies to other max-0 channels");
    T_NEAR(out[9], 0.25, 1e-15, "ordinary channel");
    float flat[2 * 4] = {1, 2, 3, 4, 7, 7, 7, 7};
    T_CHECK(stats_minmax(flat, DATASET_F32, 2, 4, NULL) == 1, "constant non-zero channel found");
    uint16_t uflat[2 * 4] = {0, 0, 0, 0, 9, 9, 9, 9};
    T_CHECK(stats_minmax(uflat, DATASET_U16, 2, 4, NULL) == 1, "constant channel next to a zero one");
    float nanimg[2 * 4] = {1, 2, 3, 4, 1, NAN, 3, 4};
    T_CHECK(stats_minmax(nanimg, DATASET_F32, 2, 4, NULL) == 1, "NaN pixel");
    float infimg[2 * 4] = {1, INFINITY, 3, 4, 1, 2, 3, 4};
    T_CHECK(stats_minmax(infimg, DATASET_F32, 2, 4, NULL) == 0, "infinite pixel");
    struct stats_acc a;
    stats_acc_init(&a, 2);
    T_CHECK(stats_acc_add(&a, flat, DATASET_F32, 4) == 1 && a.images == 0 && a.sum[0] == 0, "bad image not added");
    stats_acc_free(&a);
  }
  free(u);
  free(f);
  return t_finish();
}
