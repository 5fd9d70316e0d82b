/* tests/unit/data/test_imgops.c - image operations against PyTorch references (dino_tiny.h5 /image_ops) and
 * against double-precision evaluations of the formulas. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/imgops.h"
#include "tests/fixtures/testutil.h"

static const char *ref_file;

/* Compare ours with a reference dataset; relative error and max abs difference. */
static void compare(const float *ours, const char *dset, double tol) {
  size_t n;
  long long dims[8];
  int nd;
  float *ref = t_h5_read_f32(ref_file, dset, &n, dims, &nd);
  const double rel = t_rel_err_f32(ours, ref, n), mad = t_max_abs_diff_f32(ours, ref, n);
  size_t same = 0;
  for (size_t i = 0; i < n; i++) same += ours[i] == ref[i];
  printf("  %-44s rel %.2e  max|d| %.2e  bit-equal %zu/%zu\n", dset, rel, mad, same, n);
  T_CHECK(rel <= tol, "%s: relative error %.3e > %.0e", dset, rel, tol);
  free(ref);
}

static void test_reference(void) {
  size_t n;
  long long d[8];
  int nd;
  float *in = t_h5_read_f32(ref_file, "/image_ops/input", &n, d, &nd);
  T_CHECK(nd == 3 && d[0] == 3 && d[1] == 13 && d[2] == 11, "input shape");
  const int C = 3, H = 13, W = 11;
  float out[3 * 20 * 24];

  imgops_resize_bicubic(in, C, H, W, out, 20, 24);
  compare(out, "/image_ops/bicubic_to_20x24", 1e-6);
  imgops_resize_bicubic(in, C, H, W, out, 5, 4);
  compare(out, "/image_ops/bicubic_to_5x4", 1e-6);
  imgops_resize_bilinear(in, C, H, W, out, 20, 24);
  compare(out, "/image_ops/bilinear_to_20x24", 1e-6);
  imgops_resized_crop(in, C, H, W, 2, 1, 9, 7, out, 16, 16);
  compare(out, "/image_ops/resized_crop_top2_left1_h9_w7_to_16", 1e-6);

  /* The fused form the augmentation uses (taps relative to the crop, no copy) is bit-identical. */
  {
    int ih[64], iw[64];
    float wh[64], ww[64], tmp[3 * 13 * 16], fused[3 * 16 * 16];
    imgops_bicubic_taps(9, 16, imgops_scale_for_size(9, 16), ih, wh);
    imgops_bicubic_taps(7, 16, imgops_scale_for_size(7, 16), iw, ww);
    imgops_resample(in, C, H, W, 2, 1, fused, 16, 16, 4, ih, wh, iw, ww, tmp);
    T_CHECK(memcmp(fused, out, sizeof fused) == 0, "fused resized crop differs from crop+resize");
  }

  static const struct {
    float sigma;
    const char *name;
  } blurs[] = {{0.1f, "/image_ops/gaussian_blur_5x5_sigma0.1"},
               {0.7f, "/image_ops/gaussian_blur_5x5_sigma0.7"},
               {1.5f, "/image_ops/gaussian_blur_5x5_sigma1.5"}};
  for (int b = 0; b < 3; b++) {
    float x[3 * 13 * 11], tmp[13 * 11];
    memcpy(x, in, sizeof x);
    imgops_gaussian_blur5(x, C, H, W, blurs[b].sigma, tmp);
    compare(x, blurs[b].name, 1e-6);
  }
  free(in);
}

/* Bit-exact agreement with PyTorch's portable kernels (imgops_ref.h5, see make_imgops_ref.py). */
static void expect_bitexact(const float *ours, const char *file, const char *dset, size_t n_expected) {
  size_t n;
  long long dims[8];
  int nd;
  float *ref = t_h5_read_f32(file, dset, &n, dims, &nd);
  T_CHECK(n == n_expected, "%s: %zu values, expected %zu", dset, n, n_expected);
  size_t diff = 0;
  for (size_t i = 0; i < n && i < n_expected; i++) diff += memcmp(&ours[i], &ref[i], sizeof(float)) != 0;
  printf("  %-44s bit-equal %zu/%zu  max|d| %.2e\n", dset, n - diff, n, t_max_abs_diff_f32(ours, ref, n));
  T_CHECK(diff == 0, "%s: %zu of %zu values differ from PyTorch", dset, diff, n);
  free(ref);
}

static void test_bitexact(void) {
  const char *file = t_datafile("imgops_ref.h5");
  size_t n;
  long long d[8];
  int nd;
  float *in = t_h5_read_f32(file, "/input", &n, d, &nd);
  const int C = (int)d[0], H = (int)d[1], W = (int)d[2];
  float *out = malloc(sizeof(float) * 3 * 224 * 224);
  static const int sizes[][2] = {{224, 224}, {96, 96}, {50, 61}, {13, 11}, {37, 29}};
  char name[64];
  for (int k = 0; k < 5; k++) {
    const int h = sizes[k][0], w = sizes[k][1], c = h == 224 ? 2 : C;
    imgops_resize_bicubic(in, c, H, W, out, h, w);
    snprintf(name, sizeof name, "/bicubic_%dx%d", h, w);
    expect_bitexact(out, file, name, (size_t)c * h * w);
    imgops_resize_bilinear(in, c, H, W, out, h, w);
    snprintf(name, sizeof name, "/bilinear_%dx%d", h, w);
    expect_bitexact(out, file, name, (size_t)c * h * w);
  }
  static const int crops[][5] = {{3, 2, 30, 21, 96}, {10, 4, 9, 13, 96}, {0, 0, 37, 29, 96}};
  for (int k = 0; k < 3; k++) {
    const int *q = crops[k], c = C;
    imgops_resized_crop(in, c, H, W, q[0], q[1], q[2], q[3], out, q[4], q[4]);
    snprintf(name, sizeof name, "/crop_%d_%d_%d_%d_to_%d", q[0], q[1], q[2], q[3], q[4]);
    expect_bitexact(out, file, name, (size_t)c * q[4] * q[4]);
  }
  static const int pe[][2] = {{14, 6}, {28, 12}, {14, 30}, {4, 2}};
  for (int k = 0; k < 4; k++) {
    const int S = pe[k][0], m = pe[k][1];
    snprintf(name, sizeof name, "/posgrid_%d_to_%d", S, m);
    float *g = t_h5_read_f32(file, name, &n, d, &nd);
    const float sc = imgops_scale_for_factor((m + 0.1) / S);
    imgops_resize_bicubic_scaled(g, (int)d[0], S, S, out, m, m, sc, sc);
    snprintf(name, sizeof name, "/posembed_%d_to_%d", S, m);
    expect_bitexact(out, file, name, (size_t)d[0] * m * m);
    free(g);
  }
  /* torchvision's Gaussian kernels (portable exp: glibc's expf is the same correctly rounded
   * function; the AVX2 build's vectorised exp differs in the last bit for some sigmas). */
  float *sig = t_h5_read_f32(file, "/gauss_sigma", &n, d, &nd);
  float *ker = malloc(sizeof(float) * 5 * n);
  for (size_t i = 0; i < n; i++) imgops_gaussian_kernel5(sig[i], ker + 5 * i);
  expect_bitexact(ker, file, "/gauss_kernel5", 5 * n);
  free(ker);
  free(sig);
  free(out);
  free(in);
}

/* Keys' cubic in double, for the independent evaluation below. */
static double keys(double d) {
  const double A = -0.75;
  d = fabs(d);
  if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
  if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
  return 0;
}

/* The position-embedding interpolation of doc/algorithm.md §1.4, in double, from the
 * formula: scale S/(n+0.1), src = scale*(dst+0.5)-0.5, taps i0-1..i0+2 clamped, H then W. */
static void posembed_double(const double *g, int D, int S, int n, double scale, double *out) {
  for (int c = 0; c < D; c++)
    for (int y = 0; y < n; y++)
      for (int x = 0; x < n; x++) {
        const double sy = scale * (y + 0.5) - 0.5, sx = scale * (x + 0.5) - 0.5;
        const int iy = (int)floor(sy), ix = (int)floor(sx);
        double acc = 0;
        for (int a = -1; a <= 2; a++)
          for (int b = -1; b <= 2; b++) {
            int yy = iy + a, xx = ix + b;
            yy = yy < 0 ? 0 : (yy > S - 1 ? S - 1 : yy);
            xx = xx < 0 ? 0 : (xx > S - 1 ? S - 1 : xx);
            acc += keys(sy - (iy + a)) * keys(sx - (ix + b)) * g[((size_t)c * S + yy) * S + xx];
          }
        out[((size_t)c * n + y) * n + x] = acc;
      }
}

static void test_posembed(void) {
  static const int cases[][2] = {{14, 6}, {28, 12}, {14, 30}, {4, 2}, {14, 7}};
  const int D = 5;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const int S = cases[k][0], n = cases[k][1];
    const double sf = (n + 0.1) / S;
    T_CHECK((int)floor(S * sf) == n, "output size floor(S*sf) = %d, want %d", (int)floor(S * sf), n);
    float *g = malloc(sizeof(float) * D * S * S), *o = malloc(sizeof(float) * D * n * n);
    double *gd = malloc(sizeof(double) * D * S * S), *od = malloc(sizeof(double) * D * n * n);
    for (int i = 0; i < D * S * S; i++) {
      g[i] = (float)sin(0.37 * i + 0.1 * k) * 0.02f;
      gd[i] = g[i];
    }
    const float sc = imgops_scale_for_factor(sf);
    imgops_resize_bicubic_scaled(g, D, S, S, o, n, n, sc, sc);
    /* Against the formula with the scale PyTorch uses (float 1/scale_factor): float rounding
     * only.  Against the exact S/(n+0.1): the float scale adds up to ~1.5e-6 (PyTorch too). */
    float *of = malloc(sizeof(float) * D * n * n);
    posembed_double(gd, D, S, n, (double)sc, od);
    for (int i = 0; i < D * n * n; i++) of[i] = (float)od[i];
    const double rel = t_rel_err_f32(o, of, (size_t)D * n * n);
    posembed_double(gd, D, S, n, S / (n + 0.1), od);
    for (int i = 0; i < D * n * n; i++) of[i] = (float)od[i];
    const double rel2 = t_rel_err_f32(o, of, (size_t)D * n * n);
    printf("  pos-embed bicubic %2dx%-2d -> %2dx%-2d scale %.6f  rel %.2e (float scale) %.2e (exact)\n",
           S, S, n, n, sc, rel, rel2);
    T_CHECK(rel <= 1e-6, "pos-embed %d->%d: relative error %.3e", S, n, rel);
    T_CHECK(rel2 <= 3e-6, "pos-embed %d->%d vs exact scale: relative error %.3e", S, n, rel2);
    /* Not the size-based scale: the two must differ (DINOv2 vs DINO, section 1.4). */
    if (S % n != 0 || n > S) {
      float *o2 = malloc(sizeof(float) * D * n * n);
      imgops_resize_bicubic(g, D, S, S, o2, n, n);
      T_CHECK(t_max_abs_diff_f32(o, o2, (size_t)D * n * n) > 1e-5, "scale S/(n+0.1) had no effect");
      free(o2);
    }
    free(g);
    free(o);
    free(gd);
    free(od);
    free(of);
  }
  /* The exposed taps: 14 -> 6 at scale 14/6.1; output 0: src = 2.29508*0.5-0.5 = 0.64754. */
  int idx[24];
  float w[24];
  imgops_bicubic_taps(14, 6, imgops_scale_for_factor(6.1 / 14), idx, w);
  T_CHECK(idx[0] == 0 && idx[1] == 0 && idx[2] == 1 && idx[3] == 2, "taps of output 0: %d %d %d %d",
          idx[0], idx[1], idx[2], idx[3]);
  const double t = 14.0 / 6.1 * 0.5 - 0.5;
  T_NEAR(w[0], keys(1 + t), 1e-6, "w0");
  T_NEAR(w[1], keys(t), 1e-6, "w1");
  T_NEAR(w[2], keys(1 - t), 1e-6, "w2");
  T_NEAR(w[3], keys(2 - t), 1e-6, "w3");
  for (int o = 0; o < 6; o++) T_NEAR(w[4 * o] + w[4 * o + 1] + w[4 * o + 2] + w[4 * o + 3], 1.0, 1e-6, "tap sum");
}

static void test_small_ops(void) {
  /* Crop with zero padding. */
  float img[2 * 3 * 4];
  for (int i = 0; i < 24; i++) img[i] = (float)(i + 1);
  float c[2 * 2 * 3];
  imgops_crop(img, 2, 3, 4, -1, 2, 2, 3, c);
  const float want[12] = {0, 0, 0, 3, 4, 0, 0, 0, 0, 15, 16, 0};
  T_CHECK(memcmp(c, want, sizeof want) == 0, "crop with padding");
  /* Flips. */
  float f[24];
  memcpy(f, img, sizeof f);
  imgops_hflip(f, 2, 3, 4);
  T_CHECK(f[0] == 4 && f[3] == 1 && f[4] == 8 && f[12] == 16, "hflip");
  imgops_hflip(f, 2, 3, 4);
  T_CHECK(memcmp(f, img, sizeof f) == 0, "hflip twice");
  imgops_vflip(f, 2, 3, 4);
  T_CHECK(f[0] == 9 && f[8] == 1 && f[12] == 21 && f[20] == 13, "vflip");
  /* Brightness clamps to [0,1]; solarise; normalise. */
  float b[4] = {0.1f, 0.5f, 0.9f, 1.0f};
  imgops_brightness(b, 4, 1.25f);
  T_CHECK(b[0] == 0.1f * 1.25f && b[1] == 0.625f && b[2] == 1.0f && b[3] == 1.0f, "brightness");
  float s[4] = {0.2f, 0.5f, 0.75f, 1.0f};
  imgops_solarize(s, 4);
  T_CHECK(s[0] == 0.2f && s[1] == 0.5f && s[2] == 0.25f && s[3] == 0.0f, "solarize");
  float nrm[4] = {1, 2, 3, 4};
  const float mean[2] = {1, 2}, sd[2] = {2, 4};
  imgops_normalize(nrm, 2, 2, mean, sd);
  T_CHECK(nrm[0] == 0 && nrm[1] == 0.5f && nrm[2] == 0.25f && nrm[3] == 0.5f, "normalize");
  /* Gaussian kernel: symmetric, sums to 1, the sigma=0.7 values from the formula. */
  float k[5];
  imgops_gaussian_kernel5(0.7f, k);
  double e[5], es = 0;
  for (int i = 0; i < 5; i++) es += (e[i] = exp(-0.5 * ((i - 2) / 0.7) * ((i - 2) / 0.7)));
  for (int i = 0; i < 5; i++) T_NEAR(k[i], e[i] / es, 2e-7, "gaussian tap");
  T_CHECK(k[0] == k[4] && k[1] == k[3], "kernel symmetric");
}

static void test_minmax(void) {
  const int H = 2, W = 3, sel[3] = {2, 0, 1};
  uint16_t u[3 * 6] = {0, 0, 0, 0, 0, 0,        /* channel 0: all zero (flat, stays 0) */
                       10, 20, 30, 40, 50, 60,  /* channel 1 */
                       7, 7, 9, 7, 7, 8};       /* channel 2 */
  float o[18];
  T_CHECK(imgops_minmax_scale(u, IMGOPS_U16, 3, H, W, sel, 3, o) == 0, "valid image");
  T_CHECK(o[0] == 0.0f && o[2] == 1.0f && o[5] == 0.5f, "channel 2 scaled: %g %g %g", o[0], o[2], o[5]);
  for (int i = 6; i < 12; i++) T_CHECK(o[i] == 0.0f, "all-zero channel stays 0");
  T_CHECK(o[12] == 0.0f && o[17] == 1.0f && o[14] == (float)(20.0 / 50.0), "channel 1 scaled");
  u[0] = 5; /* channel 0 no longer flat zero */
  for (int i = 1; i < 6; i++) u[i] = 5;
  T_CHECK(imgops_minmax_scale(u, IMGOPS_U16, 3, H, W, sel, 3, o) == -1, "flat non-zero channel -> NaN image");
  T_CHECK(imgops_minmax_valid(u, IMGOPS_U16, 3, H, W, sel + 1, 1) == -1, "valid() agrees");
  const int sel1[1] = {1};
  T_CHECK(imgops_minmax_valid(u, IMGOPS_U16, 3, H, W, sel1, 1) == 0, "channel 1 alone valid");
  /* Float input: a channel with max 0 but negative values is rescaled to max 1 only when some
   * channel is flat (upstream's rule). */
  float fl[12] = {-2, -1, 0, 0, 0, 0, /* channel 0: max 0, min -2 */
                  0, 0, 0, 0, 0, 0};  /* channel 1: flat zero */
  const int s01[2] = {0, 1};
  T_CHECK(imgops_minmax_scale(fl, IMGOPS_F32, 2, H, W, s01, 2, o) == 0, "float image valid");
  T_CHECK(o[0] == 0.0f && o[1] == (float)(1.0 / 3.0) && o[2] == (float)(2.0 / 3.0), "max 0 -> 1: %g %g", o[1], o[2]);
  T_CHECK(imgops_minmax_scale(fl, IMGOPS_F32, 2, H, W, s01, 1, o) == 0 && o[1] == 0.5f, "no flat channel: plain min-max");
  /* Signed zeros: the -0 pixel scales to the same bits whichever zero the channel has first
   * (the GPU's reduction visits pixels in another order). */
  float z1[6] = {-0.0f, 0.0f, 1, 2, 3, 4}, z2[6] = {0.0f, -0.0f, 1, 2, 3, 4}, o1[6], o2[6];
  const int s0[1] = {0};
  T_CHECK(imgops_minmax_scale(z1, IMGOPS_F32, 1, H, W, s0, 1, o1) == 0 &&
              imgops_minmax_scale(z2, IMGOPS_F32, 1, H, W, s0, 1, o2) == 0, "signed zeros valid");
  T_CHECK(memcmp(&o1[0], &o2[1], sizeof(float)) == 0 && memcmp(&o1[1], &o2[0], sizeof(float)) == 0 &&
              memcmp(&o1[2], &o2[2], 4 * sizeof(float)) == 0,
          "signed zeros: the same bits in either order (%g %g vs %g %g)", o1[0], o1[1], o2[1], o2[0]);
  fl[3] = NAN;
  T_CHECK(imgops_minmax_scale(fl, IMGOPS_F32, 2, H, W, s01, 2, o) == -1, "NaN pixel");
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  ref_file = t_datafile("dino_tiny.h5");
  test_reference();
  test_bitexact();
  test_posembed();
  test_small_ops();
  test_minmax();
  return t_finish();
}
