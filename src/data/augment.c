/* augment.c - multi-crop augmentation of one image: parameter draws and the fused crop pipeline. */
#include "build_config.h"

#include "data/augment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "input/config.h"

/* Probabilities of scDINO's greyscale multichannel transforms (main_dino.py DataAugmentationDINO). */
#define P_FLIP 0.5
#define P_BRIGHT 0.8
#define BRIGHT_LO 0.5
#define BRIGHT_HI 1.25
#define SIGMA_LO 0.1
#define SIGMA_HI 1.5
#define P_SOLARIZE 0.2

void augment_init(struct augment *a, const struct config *cfg, int C_all, int H, int W,
                  enum imgops_dtype dtype, const double *mean_all, const double *std_all) {
  memset(a, 0, sizeof *a);
  a->C_all = C_all;
  a->H = H;
  a->W = W;
  a->dtype = dtype;
  if (cfg->data.n_channels == 0) {
    if (C_all > AUGMENT_MAX_CHANNELS)
      scd_fatal(SCD_EXIT_INPUT, "&data channels is empty (all channels), but the shards have %d channels; "
                "at most %d can be selected", C_all, AUGMENT_MAX_CHANNELS);
    a->nsel = C_all;
    for (int c = 0; c < C_all; c++) a->sel[c] = c;
  } else {
    a->nsel = cfg->data.n_channels;
    for (int i = 0; i < a->nsel; i++) {
      if (cfg->data.channels[i] >= C_all)
        scd_fatal(SCD_EXIT_INPUT, "&data channels(%d) = %ld, but the shards have %d channels (0 to %d)", i + 1,
                  cfg->data.channels[i], C_all, C_all - 1);
      a->sel[i] = (int)cfg->data.channels[i];
    }
  }
  for (int i = 0; i < a->nsel; i++) {
    a->mean[i] = (float)mean_all[a->sel[i]];
    a->std[i] = (float)std_all[a->sel[i]];
    SCD_ASSERT(a->std[i] > 0.0f);
  }
  a->global_size = (int)cfg->crops.global_size;
  a->local_size = (int)cfg->crops.local_size;
  a->n_local = (int)cfg->crops.local_crops_number;
  SCD_ASSERT(2 + a->n_local <= AUGMENT_CROP_SLOTS);
  SCD_ASSERT(cfg->crops.n_global_scale == 2 && cfg->crops.n_local_scale == 2);
  for (int i = 0; i < 2; i++) {
    a->global_scale[i] = cfg->crops.global_scale[i];
    a->local_scale[i] = cfg->crops.local_scale[i];
  }
  a->random = cfg->crops.augment != 0;
  a->seed = (uint64_t)cfg->control.seed;
}

int augment_ncrops(const struct augment *a) { return 2 + a->n_local; }

int augment_crop_size(const struct augment *a, int crop) {
  return crop < 2 ? a->global_size : a->local_size;
}

/* ---- parameters ------------------------------------------------------------------------------ */

void augment_rrc_params(struct rng *r, int H, int W, const double scale[2], int *top, int *left,
                        int *height, int *width) {
  const double area = (double)H * W;
  const double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; attempt++) {
    const double target = area * rng_uniform_range(r, scale[0], scale[1]);
    const double ar = exp(rng_uniform_range(r, lr0, lr1));
    /* Python's round(): half to even, which rint() does in the default rounding mode. */
    const double w = rint(sqrt(target * ar)), h = rint(sqrt(target / ar));
    if (w > 0 && w <= W && h > 0 && h <= H) {
      *height = (int)h;
      *width = (int)w;
      *top = (int)rng_below(r, (uint64_t)(H - *height + 1));
      *left = (int)rng_below(r, (uint64_t)(W - *width + 1));
      return;
    }
  }
  /* Fallback: the central crop with the aspect ratio clamped to (3/4, 4/3). */
  const double in_ratio = (double)W / H;
  if (in_ratio < 3.0 / 4.0) {
    *width = W;
    *height = (int)rint(*width / (3.0 / 4.0));
  } else if (in_ratio > 4.0 / 3.0) {
    *height = H;
    *width = (int)rint(*height * (4.0 / 3.0));
  } else {
    *width = W;
    *height = H;
  }
  *top = (H - *height) / 2;
  *left = (W - *width) / 2;
}

void augment_draw(const struct augment *a, int64_t epoch, int64_t sample, int crop,
                  struct augment_crop *p) {
  struct rng r;
  rng_init(&r, a->seed, RNG_DOMAIN_AUGMENT, (uint64_t)epoch,
           (uint64_t)sample * AUGMENT_CROP_SLOTS + (uint64_t)crop);
  memset(p, 0, sizeof *p);
  p->size = augment_crop_size(a, crop);
  augment_rrc_params(&r, a->H, a->W, crop < 2 ? a->global_scale : a->local_scale, &p->top, &p->left,
                     &p->height, &p->width);
  p->hflip = rng_uniform(&r) < P_FLIP;
  p->vflip = rng_uniform(&r) < P_FLIP;
  p->bright = rng_uniform(&r) < P_BRIGHT;
  if (p->bright)
    for (int c = 0; c < a->nsel; c++) p->factor[c] = (float)rng_uniform_range(&r, BRIGHT_LO, BRIGHT_HI);
  const double p_blur = crop == 0 ? 1.0 : (crop == 1 ? 0.1 : 0.5);
  p->blur = rng_uniform(&r) < p_blur;
  if (p->blur) p->sigma = (float)rng_uniform_range(&r, SIGMA_LO, SIGMA_HI);
  if (crop == 1) p->solarize = rng_uniform(&r) < P_SOLARIZE;
}

/* ---- work area ---------------------------------------------------------------------------------- */

struct augment_work {
  float *img;   /* [nsel][H][W] min-max scaled */
  float *tmp;   /* width-pass rows: H x S_max */
  float *btmp;  /* blur scratch: S_max x S_max */
  float *sbuf;  /* resized channel before the blur: S_max x S_max */
  int *ih, *iw; /* taps */
  float *wh, *ww;
  double flops;
};

struct augment_work *augment_work_create(const struct augment *a) {
  struct augment_work *w = xcalloc(1, sizeof *w);
  const int smax = a->global_size > a->local_size ? a->global_size : a->local_size;
  const int tmax = smax > a->H ? smax : a->H;
  w->img = xmalloc(MUL_SIZE(sizeof(float), MUL_SIZE((size_t)a->nsel * a->H, (size_t)a->W)));
  w->tmp = xmalloc(MUL_SIZE(sizeof(float), MUL_SIZE((size_t)tmax, (size_t)smax)));
  w->btmp = xmalloc(MUL_SIZE(sizeof(float), MUL_SIZE((size_t)smax, (size_t)smax)));
  w->sbuf = xmalloc(MUL_SIZE(sizeof(float), MUL_SIZE((size_t)smax, (size_t)smax)));
  w->ih = xmalloc(sizeof(int) * 4 * (size_t)smax);
  w->iw = xmalloc(sizeof(int) * 4 * (size_t)smax);
  w->wh = xmalloc(sizeof(float) * 4 * (size_t)smax);
  w->ww = xmalloc(sizeof(float) * 4 * (size_t)smax);
  return w;
}

void augment_work_destroy(struct augment_work *w) {
  if (!w) return;
  free(w->img);
  free(w->tmp);
  free(w->btmp);
  free(w->sbuf);
  free(w->ih);
  free(w->iw);
  free(w->wh);
  free(w->ww);
  free(w);
}

double augment_work_flops(const struct augment_work *w) { return w->flops; }

/* ---- the crop pipeline ---------------------------------------------------------------------------- */

/* Reverse the order of n 4-tap entries: output o takes the taps of output n-1-o (a flip of the
 * resized image, with exactly the same arithmetic per pixel). */
static void flip_taps(int *idx, float *wt, int n) {
  for (int a = 0, b = n - 1; a < b; a++, b--)
    for (int j = 0; j < 4; j++) {
      const int ti = idx[4 * a + j];
      idx[4 * a + j] = idx[4 * b + j];
      idx[4 * b + j] = ti;
      const float tw = wt[4 * a + j];
      wt[4 * a + j] = wt[4 * b + j];
      wt[4 * b + j] = tw;
    }
}

/* Brightness on one row: clamp(f*x, 0, 1). */
static void bright_row(float *x, int n, float f) {
  for (int i = 0; i < n; i++) {
    float v = f * x[i];
    v = v < 0.0f ? 0.0f : v; /* two selects the compiler turns into max/min */
    x[i] = v > 1.0f ? 1.0f : v;
  }
}

/* Solarisation (optional) and normalisation, the last step of every crop, on one row. */
static void finish_row(float *x, int n, int solarize, float mean, float std) {
  if (solarize)
    for (int i = 0; i < n; i++) {
      const float v = x[i] > 0.5f ? 1.0f - x[i] : x[i];
      x[i] = (v - mean) / std;
    }
  else
    for (int i = 0; i < n; i++) x[i] = (x[i] - mean) / std;
}

/* Flop counts per pixel (multiply, add, subtract, divide, compare-and-select each count 1). */
#define FLOPS_TAP4 7.0   /* 4 multiplies, 3 adds */
#define FLOPS_BRIGHT 3.0 /* multiply, clamp low, clamp high */
#define FLOPS_BLUR 18.0  /* two 5-tap passes */
#define FLOPS_NORM 2.0
#define FLOPS_SOLAR 2.0
#define FLOPS_MINMAX 4.0 /* min, max, subtract, divide */

/* One crop, channel by channel and row by row: the width pass of the bicubic resize for the rows
 * it needs, then per output row the height pass, brightness and (without blur) the final step
 * while the row is in L1; with blur, the blur's two passes, the final step fused into the second.
 * Intermediate images stay in per-thread scratch (cache-resident); the destination, a batch
 * buffer in cold memory, is written once.  The arithmetic per pixel is exactly that of the
 * separate operations in upstream's order. */
static void apply_crop(const struct augment *a, struct augment_work *w, const struct augment_crop *p,
                       float *dst) {
  const int S = p->size, C = a->nsel;
  const size_t SS = (size_t)S * S;
  imgops_bicubic_taps(p->height, S, imgops_scale_for_size(p->height, S), w->ih, w->wh);
  imgops_bicubic_taps(p->width, S, imgops_scale_for_size(p->width, S), w->iw, w->ww);
  if (p->vflip) flip_taps(w->ih, w->wh, S);
  if (p->hflip) flip_taps(w->iw, w->ww, S);
  int rmin = p->height, rmax = 0;
  for (int k = 0; k < 4 * S; k++) {
    rmin = w->ih[k] < rmin ? w->ih[k] : rmin;
    rmax = w->ih[k] > rmax ? w->ih[k] : rmax;
  }
  float k5[5];
  if (p->blur) imgops_gaussian_kernel5(p->sigma, k5);
  for (int c = 0; c < C; c++) {
    const float *src = w->img + (size_t)c * a->H * a->W + (size_t)p->top * a->W + p->left;
    float *d = dst + (size_t)c * SS;
    for (int y = rmin; y <= rmax; y++)
      imgops_taps_cols(w->tmp + (size_t)y * S, src + (size_t)y * a->W, w->iw, w->ww, 4, S);
    float *r = p->blur ? w->sbuf : d;
    for (int y = 0; y < S; y++) {
      const float *rows[4];
      for (int i = 0; i < 4; i++) rows[i] = w->tmp + (size_t)w->ih[4 * y + i] * S;
      float *row = r + (size_t)y * S;
      imgops_taps_rows(row, rows, w->wh + 4 * y, 4, S);
      if (p->bright) bright_row(row, S, p->factor[c]);
      if (!p->blur) finish_row(row, S, p->solarize, a->mean[c], a->std[c]);
    }
    if (p->blur) {
      for (int y = 0; y < S; y++) imgops_blur5_row(w->btmp + (size_t)y * S, r + (size_t)y * S, S, k5);
      for (int y = 0; y < S; y++) {
        float *row = d + (size_t)y * S;
        imgops_blur5_col(row, w->btmp, S, S, y, k5);
        finish_row(row, S, p->solarize, a->mean[c], a->std[c]);
      }
    }
    w->flops += FLOPS_TAP4 * ((double)(rmax - rmin + 1) * S + (double)SS) +
                (FLOPS_NORM + (p->bright ? FLOPS_BRIGHT : 0.0) + (p->blur ? FLOPS_BLUR : 0.0) +
                 (p->solarize ? FLOPS_SOLAR : 0.0)) * (double)SS;
  }
}

/* Deterministic crop: the whole image resized to S, normalised. */
static void whole_image(const struct augment *a, struct augment_work *w, int S, float *dst) {
  imgops_bicubic_taps(a->H, S, imgops_scale_for_size(a->H, S), w->ih, w->wh);
  imgops_bicubic_taps(a->W, S, imgops_scale_for_size(a->W, S), w->iw, w->ww);
  for (int c = 0; c < a->nsel; c++) {
    float *d = dst + (size_t)c * S * S;
    imgops_resample(w->img + (size_t)c * a->H * a->W, 1, a->H, a->W, 0, 0, d, S, S, 4, w->ih, w->wh,
                    w->iw, w->ww, w->tmp);
    for (int y = 0; y < S; y++) finish_row(d + (size_t)y * S, S, 0, a->mean[c], a->std[c]);
    w->flops += FLOPS_TAP4 * ((double)a->H * S + (double)S * S) + FLOPS_NORM * (double)S * S;
  }
}

int augment_image(const struct augment *a, struct augment_work *w, const void *raw, int64_t epoch,
                  int64_t sample, float *const *out) {
  if (imgops_minmax_scale(raw, a->dtype, a->C_all, a->H, a->W, a->sel, a->nsel, w->img) != 0) return -1;
  w->flops += FLOPS_MINMAX * (double)a->nsel * a->H * a->W;
  const int ncrops = augment_ncrops(a);
  if (!a->random) {
    const size_t gbytes = sizeof(float) * (size_t)a->nsel * a->global_size * a->global_size;
    const size_t lbytes = sizeof(float) * (size_t)a->nsel * a->local_size * a->local_size;
    whole_image(a, w, a->global_size, out[0]);
    memcpy(out[1], out[0], gbytes);
    if (ncrops > 2) {
      whole_image(a, w, a->local_size, out[2]);
      for (int k = 3; k < ncrops; k++) memcpy(out[k], out[2], lbytes);
    }
    return 0;
  }
  for (int k = 0; k < ncrops; k++) {
    struct augment_crop p;
    augment_draw(a, epoch, sample, k, &p);
    apply_crop(a, w, &p, out[k]);
  }
  return 0;
}
