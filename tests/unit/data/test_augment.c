/* tests/unit/data/test_augment.c - multi-crop augmentation: RandomResizedCrop parameters, draw frequencies,
 * reproducibility, the fused pipeline against the plain image operations, deterministic crops. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/augment.h"
#include "data/imgops.h"
#include "input/config.h"
#include "tests/fixtures/testutil.h"

enum { C_ALL = 5, H = 50, W = 50 };

static uint16_t *make_image(unsigned seed) {
  uint16_t *img = malloc(sizeof(uint16_t) * C_ALL * H * W);
  struct rng r;
  rng_init(&r, seed, RNG_DOMAIN_TEST, 1, 0);
  for (int c = 0; c < C_ALL; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        img[(c * H + y) * W + x] = (uint16_t)(1000 + 800 * sin(0.2 * x + 0.3 * y + c) + rng_below(&r, 300) + 200 * c);
  return img;
}

static void setup(struct config *cfg) {
  config_defaults(cfg);
  cfg->crops.global_size = 64; /* small crops keep the test fast; sizes do not change the logic */
  cfg->crops.local_size = 32;
  cfg->crops.local_crops_number = 4;
  cfg->data.n_channels = 3;
  cfg->data.channels[0] = 4;
  cfg->data.channels[1] = 0;
  cfg->data.channels[2] = 2;
}

static const double mean_all[C_ALL] = {0.3, 0.5, 0.2, 0.28, 0.38};
static const double std_all[C_ALL] = {0.22, 0.17, 0.24, 0.19, 0.2};

static void test_rrc(void) {
  struct rng r;
  rng_init(&r, 5, RNG_DOMAIN_TEST, 2, 0);
  const double scales[2][2] = {{0.14, 1.0}, {0.05, 0.14}};
  for (int s = 0; s < 2; s++) {
    double amin = 1e9, amax = 0, rmin = 1e9, rmax = 0;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
      int t, l, h, w;
      augment_rrc_params(&r, H, W, scales[s], &t, &l, &h, &w);
      bad += t < 0 || l < 0 || h < 1 || w < 1 || t + h > H || l + w > W;
      const double area = (double)h * w / (H * W), ratio = (double)w / h;
      amin = area < amin ? area : amin;
      amax = area > amax ? area : amax;
      rmin = ratio < rmin ? ratio : rmin;
      rmax = ratio > rmax ? ratio : rmax;
    }
    printf("  scale (%.2f, %.2f): area %.4f..%.4f  ratio %.3f..%.3f\n", scales[s][0], scales[s][1], amin, amax, rmin, rmax);
    T_CHECK(bad == 0, "%d crops outside the image", bad);
    /* Rounding of w and h to whole pixels widens the bounds by about one pixel per side. */
    const double slack_a = 2.0 * (50.0 + 0.25) / (H * W), lo = scales[s][0], hi = scales[s][1];
    T_CHECK(amin >= lo - slack_a && amax <= hi + slack_a, "area outside scale range");
    T_CHECK(amin < lo + 0.3 * (hi - lo) && amax > hi - 0.3 * (hi - lo), "area range not covered");
    const double side = sqrt(lo * H * W); /* smallest crop side: rounding moves the ratio most */
    T_CHECK(rmin >= 0.75 * (side - 1) / (side + 1) && rmax <= 4.0 / 3.0 * (side + 1) / (side - 1), "ratio out of bounds");
  }
  /* Fallback: a 4 x 100 strip never fits a crop of ratio 3/4..4/3 with area >= 14 %: central crop
   * h = 4, w = round(4 * 4/3) = 5. */
  int fallbacks = 0;
  for (int i = 0; i < 100; i++) {
    int t, l, h, w;
    augment_rrc_params(&r, 4, 100, scales[0], &t, &l, &h, &w);
    fallbacks += t == 0 && l == 47 && h == 4 && w == 5;
  }
  T_CHECK(fallbacks == 100, "fallback crop: %d of 100", fallbacks);
  /* The other fallback branches: tall strip (w = W, h = round(W / (3/4))) and an image whose
   * ratio is in range (whole image); scale (0.999, 1) rarely fits the random tries. */
  int t, l, h, w, tall = 0;
  for (int i = 0; i < 50; i++) {
    augment_rrc_params(&r, 100, 3, scales[0], &t, &l, &h, &w);
    tall += w == 3 && h == 4 && t == 48 && l == 0;
  }
  T_CHECK(tall == 50, "tall fallback: %d of 50", tall);
  /* Round half to even, as Python's round(): w = sqrt(target*ar) exactly 2.5 cannot be forced
   * through the RNG, so check rint's mode directly. */
  T_CHECK(rint(2.5) == 2.0 && rint(3.5) == 4.0, "rint is not round-half-even");
}

static void test_draw_frequencies(void) {
  struct config cfg;
  setup(&cfg);
  struct augment a;
  augment_init(&a, &cfg, C_ALL, H, W, IMGOPS_U16, mean_all, std_all);
  enum { N = 20000 };
  long hf = 0, vf = 0, br[3] = {0}, bl[3] = {0}, so = 0, sol0 = 0;
  double fmin = 9, fmax = 0, smin = 9, smax = 0;
  for (int64_t s = 0; s < N; s++)
    for (int k = 0; k < 3; k++) {
      struct augment_crop p;
      augment_draw(&a, 3, s, k, &p);
      hf += p.hflip;
      vf += p.vflip;
      br[k] += p.bright;
      bl[k] += p.blur;
      if (k == 1) so += p.solarize;
      else sol0 += p.solarize;
      T_CHECK(p.size == (k < 2 ? 64 : 32), "crop size");
      if (p.bright)
        for (int c = 0; c < 3; c++) {
          fmin = p.factor[c] < fmin ? p.factor[c] : fmin;
          fmax = p.factor[c] > fmax ? p.factor[c] : fmax;
        }
      if (p.blur) {
        smin = p.sigma < smin ? p.sigma : smin;
        smax = p.sigma > smax ? p.sigma : smax;
      }
    }
  const double sd = 5 * sqrt(0.25 / N);
  T_NEAR(hf / (3.0 * N), 0.5, sd, "hflip rate");
  T_NEAR(vf / (3.0 * N), 0.5, sd, "vflip rate");
  for (int k = 0; k < 3; k++) T_NEAR(br[k] / (double)N, 0.8, 5 * sqrt(0.16 / N), "brightness rate");
  T_CHECK(bl[0] == N, "global crop 1 always blurred (%ld)", bl[0]);
  T_NEAR(bl[1] / (double)N, 0.1, 5 * sqrt(0.09 / N), "global crop 2 blur rate");
  T_NEAR(bl[2] / (double)N, 0.5, sd * 2, "local blur rate");
  T_NEAR(so / (double)N, 0.2, 5 * sqrt(0.16 / N), "solarisation rate");
  T_CHECK(sol0 == 0, "solarisation outside global crop 2");
  T_CHECK(fmin >= 0.5 && fmax <= 1.25 && fmin < 0.51 && fmax > 1.24, "brightness factors %g..%g", fmin, fmax);
  T_CHECK(smin >= 0.1f && smax <= 1.5f && smin < 0.11 && smax > 1.49, "sigma %g..%g", smin, smax);
}

/* The crop built from the plain operations in upstream's order: crop, bicubic resize, flips,
 * brightness, blur, solarisation, normalisation.  Must equal the fused pipeline bit for bit. */
static void reference_crop(const struct augment *a, const float *img, const struct augment_crop *p, float *out) {
  const int C = a->nsel, S = p->size;
  imgops_resized_crop(img, C, a->H, a->W, p->top, p->left, p->height, p->width, out, S, S);
  if (p->hflip) imgops_hflip(out, C, S, S);
  if (p->vflip) imgops_vflip(out, C, S, S);
  if (p->bright)
    for (int c = 0; c < C; c++) imgops_brightness(out + (size_t)c * S * S, (size_t)S * S, p->factor[c]);
  float *tmp = malloc(sizeof(float) * S * S);
  if (p->blur) imgops_gaussian_blur5(out, C, S, S, p->sigma, tmp);
  free(tmp);
  if (p->solarize) imgops_solarize(out, (size_t)C * S * S);
  imgops_normalize(out, C, (size_t)S * S, a->mean, a->std);
}

static void test_pipeline(void) {
  struct config cfg;
  setup(&cfg);
  struct augment a;
  augment_init(&a, &cfg, C_ALL, H, W, IMGOPS_U16, mean_all, std_all);
  T_CHECK(a.nsel == 3 && a.sel[0] == 4 && a.mean[0] == (float)0.38 && a.std[2] == (float)0.24, "channel selection");
  struct augment_work *w = augment_work_create(&a);
  const int nc = augment_ncrops(&a);
  float *out[6], *out2[6];
  for (int k = 0; k < nc; k++) {
    const int S = augment_crop_size(&a, k);
    out[k] = malloc(sizeof(float) * 3 * S * S);
    out2[k] = malloc(sizeof(float) * 3 * S * S);
  }
  float *scaled = malloc(sizeof(float) * 3 * H * W), *ref = malloc(sizeof(float) * 3 * 64 * 64);
  int hflips = 0, vflips = 0, solar = 0, mismatches = 0;
  for (int64_t s = 0; s < 40; s++) {
    uint16_t *img = make_image((unsigned)s);
    T_CHECK(augment_image(&a, w, img, 2, s, out) == 0, "valid image rejected");
    T_CHECK(imgops_minmax_scale(img, IMGOPS_U16, C_ALL, H, W, a.sel, 3, scaled) == 0, "minmax");
    for (int k = 0; k < nc; k++) {
      struct augment_crop p;
      augment_draw(&a, 2, s, k, &p);
      hflips += p.hflip;
      vflips += p.vflip;
      solar += p.solarize;
      reference_crop(&a, scaled, &p, ref);
      const int S = p.size;
      mismatches += memcmp(ref, out[k], sizeof(float) * 3 * S * S) != 0;
    }
    /* Same key, same crops; another sample index or epoch, other crops. */
    augment_image(&a, w, img, 2, s, out2);
    for (int k = 0; k < nc; k++) {
      const int S = augment_crop_size(&a, k);
      T_CHECK(memcmp(out[k], out2[k], sizeof(float) * 3 * S * S) == 0, "crop %d not reproducible", k);
    }
    augment_image(&a, w, img, 3, s, out2);
    T_CHECK(memcmp(out[0], out2[0], sizeof(float) * 3 * 64 * 64) != 0, "epoch does not change crops");
    augment_image(&a, w, img, 2, s + 1000, out2);
    T_CHECK(memcmp(out[2], out2[2], sizeof(float) * 3 * 32 * 32) != 0, "sample index does not change crops");
    free(img);
  }
  printf("  fused pipeline vs plain operations: %d of %d crops differ (hflips %d, vflips %d, solarised %d)\n",
         mismatches, 40 * nc, hflips, vflips, solar);
  T_CHECK(mismatches == 0, "%d crops differ from the plain operations", mismatches);
  T_CHECK(hflips > 0 && vflips > 0 && solar > 0, "flips and solarisation were exercised");
  /* Work is counted. */
  T_CHECK(augment_work_flops(w) > 1e6, "flop counter %g", augment_work_flops(w));

  /* A constant non-zero channel: upstream drops the image. */
  uint16_t *img = make_image(99);
  for (int i = 0; i < H * W; i++) img[2 * H * W + i] = 777;
  memset(out[0], 0x7f, sizeof(float) * 3 * 64 * 64);
  T_CHECK(augment_image(&a, w, img, 0, 0, out) == -1, "NaN image not rejected");
  T_CHECK(((uint32_t *)out[0])[0] == 0x7f7f7f7fu, "output written for a rejected image");
  /* A constant zero channel is fine (it stays 0). */
  for (int i = 0; i < H * W; i++) img[2 * H * W + i] = 0;
  T_CHECK(augment_image(&a, w, img, 0, 0, out) == 0, "zero channel rejected");
  free(img);

  /* Deterministic crops: the whole image resized, normalised; global crops equal, locals equal. */
  cfg.crops.augment = 0;
  struct augment d;
  augment_init(&d, &cfg, C_ALL, H, W, IMGOPS_U16, mean_all, std_all);
  img = make_image(7);
  T_CHECK(augment_image(&d, w, img, 123, 45, out) == 0, "deterministic");
  imgops_minmax_scale(img, IMGOPS_U16, C_ALL, H, W, d.sel, 3, scaled);
  imgops_resize_bicubic(scaled, 3, H, W, ref, 64, 64);
  imgops_normalize(ref, 3, 64 * 64, d.mean, d.std);
  T_CHECK(memcmp(ref, out[0], sizeof(float) * 3 * 64 * 64) == 0, "global crop is not the resized image");
  T_CHECK(memcmp(ref, out[1], sizeof(float) * 3 * 64 * 64) == 0, "global crops differ");
  imgops_resize_bicubic(scaled, 3, H, W, ref, 32, 32);
  imgops_normalize(ref, 3, 32 * 32, d.mean, d.std);
  for (int k = 2; k < nc; k++)
    T_CHECK(memcmp(ref, out[k], sizeof(float) * 3 * 32 * 32) == 0, "local crop %d is not the resized image", k);
  augment_image(&d, w, img, 9, 1, out2);
  T_CHECK(memcmp(out[0], out2[0], sizeof(float) * 3 * 64 * 64) == 0, "deterministic crops depend on the key");
  free(img);

  /* Float32 raw images go through the same path. */
  cfg.crops.augment = 1;
  augment_init(&d, &cfg, C_ALL, H, W, IMGOPS_F32, mean_all, std_all);
  img = make_image(8);
  float *fimg = malloc(sizeof(float) * C_ALL * H * W);
  for (int i = 0; i < C_ALL * H * W; i++) fimg[i] = (float)img[i];
  T_CHECK(augment_image(&a, w, img, 1, 5, out) == 0 && augment_image(&d, w, fimg, 1, 5, out2) == 0, "f32");
  for (int k = 0; k < nc; k++) {
    const int S = augment_crop_size(&a, k);
    T_CHECK(memcmp(out[k], out2[k], sizeof(float) * 3 * S * S) == 0, "uint16 and float32 input differ (crop %d)", k);
  }
  free(fimg);
  free(img);

  for (int k = 0; k < nc; k++) {
    free(out[k]);
    free(out2[k]);
  }
  free(scaled);
  free(ref);
  augment_work_destroy(w);
}

/* Channel indices of two digits (upstream's selected_channels string allows single digits only):
 * a 12-channel image, channels = 11, 3, 10; the deterministic crop must be exactly those planes,
 * min-max scaled, resized and normalised with their own statistics. */
static void test_many_channels(void) {
  enum { C12 = 12 };
  struct config cfg;
  setup(&cfg);
  cfg.crops.augment = 0;
  cfg.data.n_channels = 3;
  cfg.data.channels[0] = 11;
  cfg.data.channels[1] = 3;
  cfg.data.channels[2] = 10;
  double mean12[C12], std12[C12];
  for (int c = 0; c < C12; c++) {
    mean12[c] = 0.1 + 0.03 * c;
    std12[c] = 0.15 + 0.01 * c;
  }
  struct augment a;
  augment_init(&a, &cfg, C12, H, W, IMGOPS_U16, mean12, std12);
  T_CHECK(a.nsel == 3 && a.sel[0] == 11 && a.sel[1] == 3 && a.sel[2] == 10, "selection 11, 3, 10");
  T_CHECK(a.mean[0] == (float)mean12[11] && a.std[2] == (float)std12[10], "statistics of channels 11 and 10");
  /* Each plane its own pattern, so a wrong plane cannot pass. */
  uint16_t *img = malloc(sizeof(uint16_t) * C12 * H * W);
  for (int c = 0; c < C12; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        img[(c * H + y) * W + x] = (uint16_t)(500 + 400 * sin(0.1 * (c + 1) * x + 0.07 * c * y) + 37 * c);
  struct augment_work *w = augment_work_create(&a);
  float *out[6];
  for (int k = 0; k < augment_ncrops(&a); k++) out[k] = malloc(sizeof(float) * 3 * 64 * 64);
  T_CHECK(augment_image(&a, w, img, 0, 0, out) == 0, "12-channel image rejected");
  /* Expected: the planes copied out by hand, then the plain operations. */
  float *planes = malloc(sizeof(float) * 3 * H * W), *ref = malloc(sizeof(float) * 3 * 64 * 64);
  const int want[3] = {11, 3, 10};
  for (int j = 0; j < 3; j++) {
    const uint16_t *p = img + (size_t)want[j] * H * W;
    uint16_t lo = p[0], hi = p[0];
    for (int i = 0; i < H * W; i++) {
      lo = p[i] < lo ? p[i] : lo;
      hi = p[i] > hi ? p[i] : hi;
    }
    for (int i = 0; i < H * W; i++) planes[(size_t)j * H * W + i] = (float)((double)(p[i] - lo) / (double)(hi - lo));
  }
  float *scaled = malloc(sizeof(float) * 3 * H * W);
  T_CHECK(imgops_minmax_scale(img, IMGOPS_U16, C12, H, W, a.sel, 3, scaled) == 0, "minmax");
  double maxdiff = 0;
  for (int i = 0; i < 3 * H * W; i++) maxdiff = fmax(maxdiff, fabs((double)scaled[i] - planes[i]));
  T_CHECK(maxdiff < 1e-6, "min-max of channels 11, 3, 10 differs from the planes by %g", maxdiff);
  imgops_resize_bicubic(scaled, 3, H, W, ref, 64, 64);
  imgops_normalize(ref, 3, 64 * 64, a.mean, a.std);
  T_CHECK(memcmp(ref, out[0], sizeof(float) * 3 * 64 * 64) == 0, "global crop of channels 11, 3, 10");
  printf("  channels 11, 3, 10 of a 12-channel image: min-max within %.1e, crop exact\n", maxdiff);
  for (int k = 0; k < augment_ncrops(&a); k++) free(out[k]);
  free(planes);
  free(scaled);
  free(ref);
  free(img);
  augment_work_destroy(w);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_rrc();
  test_draw_frequencies();
  test_pipeline();
  test_many_channels();
  return t_finish();
}
