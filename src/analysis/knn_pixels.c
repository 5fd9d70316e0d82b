/* knn_pixels.c - raw-pixel feature vectors for the kNN baseline, read from the shard set where they are used. */
#include "build_config.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "data/imgops.h"
#include "data/shards.h"

#define PIXEL_BATCH 256 /* images per dataset_read_images call */

/* torchvision CenterCrop offset along one axis: round((size - crop) / 2) with Python's round
 * (halves to even), or, when the crop is larger, minus the zero padding put before the image. */
static int crop_offset(int size, int crop) {
  if (crop > size) return -((crop - size) / 2);
  return (int)rint((size - crop) / 2.0);
}

/* The shard set must be the one the features were computed from. */
static void check_same_dataset(const struct dataset *ds, const struct features *f, const char *file,
                               const char *shard_dir) {
  if (dataset_nclasses(ds) != f->nclasses)
    scd_fatal(SCD_EXIT_DATA, "features file %s has %d classes but the shard set %s has %d; "
              "knn.features and data.shard_dir do not belong together", file, f->nclasses, shard_dir,
              dataset_nclasses(ds));
  for (int c = 0; c < f->nclasses; c++)
    if (strcmp(dataset_class_name(ds, c), f->class_names[c]) != 0)
      scd_fatal(SCD_EXIT_DATA, "features file %s names class %d '%s' but the shard set %s names it '%s'",
                file, c, f->class_names[c], shard_dir, dataset_class_name(ds, c));
  const int64_t count = dataset_count(ds);
  for (int64_t i = 0; i < f->n; i++) {
    if (f->index[i] >= count)
      scd_fatal(SCD_EXIT_DATA, "features file %s row %" PRId64 ": sample index %" PRId64
                " is beyond the %" PRId64 " images of the shard set %s", file, i, f->index[i], count, shard_dir);
    const int32_t l = dataset_label(ds, f->index[i]);
    if (l != f->labels[i])
      scd_fatal(SCD_EXIT_DATA, "features file %s row %" PRId64 " (sample index %" PRId64 ") has label %d"
                " but the shard set %s gives %d; knn.features and data.shard_dir do not belong together",
                file, i, f->index[i], (int)f->labels[i], shard_dir, (int)l);
  }
}

struct pixel_geom {
  int C, H, W, dtype;  /* stored images */
  int nsel, sel[64];   /* selected source channels */
  int ch, cw;          /* after the centre crop (= H, W without one) */
  int top, left;       /* crop offsets */
  int oh, ow;          /* after the resize */
  float mean[64], std[64];
};

/* One image -> one L2-normalised row; returns 0, or -1 (zero row) when min-max gives NaN. */
static int pixel_row(const struct pixel_geom *g, const void *raw, float *sel_buf, float *crop_buf,
                     float *mm_buf, float *row) {
  const size_t hw = (size_t)g->H * (size_t)g->W, chw = (size_t)g->ch * (size_t)g->cw;
  /* Selected channels as float32 (exact for uint16), so the crop can zero-pad like torchvision. */
  for (int s = 0; s < g->nsel; s++) {
    float *dst = sel_buf + (size_t)s * hw;
    if (g->dtype == DATASET_U16) {
      const uint16_t *src = (const uint16_t *)raw + (size_t)g->sel[s] * hw;
      for (size_t p = 0; p < hw; p++) dst[p] = (float)src[p];
    } else {
      memcpy(dst, (const float *)raw + (size_t)g->sel[s] * hw, hw * sizeof(float));
    }
  }
  const float *cropped = sel_buf;
  if (g->ch != g->H || g->cw != g->W || g->top || g->left) {
    imgops_crop(sel_buf, g->nsel, g->H, g->W, g->top, g->left, g->ch, g->cw, crop_buf);
    cropped = crop_buf;
  }
  int ident[64];
  for (int s = 0; s < g->nsel; s++) ident[s] = s;
  const size_t dim = (size_t)g->nsel * (size_t)g->oh * (size_t)g->ow;
  if (imgops_minmax_scale(cropped, IMGOPS_F32, g->nsel, g->ch, g->cw, ident, g->nsel, mm_buf) != 0) {
    memset(row, 0, dim * sizeof *row);
    return -1;
  }
  if (g->oh != g->ch || g->ow != g->cw)
    imgops_resize_bilinear(mm_buf, g->nsel, g->ch, g->cw, row, g->oh, g->ow);
  else
    memcpy(row, mm_buf, chw * g->nsel * sizeof *row);
  imgops_normalize(row, g->nsel, (size_t)g->oh * (size_t)g->ow, g->mean, g->std);
  features_l2_normalize(row, 1, (int)dim);
  return 0;
}

struct knn_pixels {
  struct dataset *ds;
  const struct features *f;
  struct pixel_geom g;
  int dim;
  size_t img_bytes;
  int64_t invalid; /* zero rows made by this rank */
  char what[160];
};

struct knn_pixels *knn_pixels_open(const struct config *cfg, const struct features *f, const char *features_file,
                                   int side) {
  const char *shard_dir = cfg->data.shard_dir;
  struct knn_pixels *p = xcalloc(1, sizeof *p);
  p->ds = dataset_open(shard_dir);
  p->f = f;
  struct dataset *ds = p->ds;
  check_same_dataset(ds, f, features_file, shard_dir);

  struct pixel_geom *gp = &p->g, g;
  memset(&g, 0, sizeof g);
  g.C = dataset_channels(ds);
  g.H = dataset_height(ds);
  g.W = dataset_width(ds);
  g.dtype = dataset_dtype(ds);
  if (cfg->data.n_channels == 0) {
    if (g.C > 64) scd_fatal(SCD_EXIT_INPUT, "the shard set %s has %d channels; select at most 64 with data.channels",
                            shard_dir, g.C);
    g.nsel = g.C;
    for (int c = 0; c < g.C; c++) g.sel[c] = c;
  } else {
    g.nsel = cfg->data.n_channels;
    for (int s = 0; s < g.nsel; s++) {
      if (cfg->data.channels[s] >= g.C)
        scd_fatal(SCD_EXIT_INPUT, "data.channels(%d) = %ld, but the shard set %s has channels 0..%d", s + 1,
                  cfg->data.channels[s], shard_dir, g.C - 1);
      g.sel[s] = (int)cfg->data.channels[s];
    }
  }
  const double *mean = dataset_mean(ds), *std = dataset_std(ds);
  for (int s = 0; s < g.nsel; s++) {
    g.mean[s] = (float)mean[g.sel[s]];
    g.std[s] = (float)std[g.sel[s]];
    if (!(g.std[s] > 0))
      scd_fatal(SCD_EXIT_DATA, "%s/%s: channel %d has standard deviation %g; cannot normalise", shard_dir,
                SHARDS_MANIFEST, g.sel[s], (double)g.std[s]);
  }
  const int crop = (int)cfg->data.center_crop;
  g.ch = crop > 0 ? crop : g.H;
  g.cw = crop > 0 ? crop : g.W;
  g.top = crop > 0 ? crop_offset(g.H, crop) : 0;
  g.left = crop > 0 ? crop_offset(g.W, crop) : 0;
  g.oh = side > 0 ? side : g.ch;
  g.ow = side > 0 ? side : g.cw;
  const size_t d = MUL_SIZE(MUL_SIZE((size_t)g.nsel, (size_t)g.oh), (size_t)g.ow);
  if (d > INT32_MAX) scd_fatal(SCD_EXIT_INPUT, "raw-pixel vectors of %zu values are too long; lower knn.pixel_size", d);
  p->dim = (int)d;
  p->img_bytes = dataset_image_bytes(ds);
  *gp = g;
  snprintf(p->what, sizeof p->what, "knn pixel_size = %d (%d x %d x %d channels per image)", side, g.oh, g.ow, g.nsel);
  return p;
}

int knn_pixels_dim(const struct knn_pixels *p) { return p->dim; }
const char *knn_pixels_what(const struct knn_pixels *p) { return p->what; }

void knn_pixels_rows(void *ctx, const int64_t *rows, int64_t n, float *dst) {
  struct knn_pixels *p = ctx;
  const struct pixel_geom *g = &p->g;
  const size_t d = (size_t)p->dim;
  void *raw = xmalloc(MUL_SIZE(PIXEL_BATCH, p->img_bytes));
  int64_t idx[PIXEL_BATCH];
  int64_t invalid = 0;
  for (int64_t b0 = 0; b0 < n; b0 += PIXEL_BATCH) {
    const int cnt = (int)(n - b0 < PIXEL_BATCH ? n - b0 : PIXEL_BATCH);
    for (int i = 0; i < cnt; i++) {
      SCD_ASSERT(rows[b0 + i] >= 0 && rows[b0 + i] < p->f->n);
      idx[i] = p->f->index[rows[b0 + i]];
    }
    dataset_read_images(p->ds, idx, cnt, raw);
#pragma omp parallel reduction(+ : invalid)
    {
      const size_t hw = (size_t)g->H * g->W, chw = (size_t)g->ch * g->cw;
      float *sel_buf = xmalloc(MUL_SIZE((size_t)g->nsel, hw) * sizeof(float));
      float *crop_buf = xmalloc(MUL_SIZE((size_t)g->nsel, chw) * sizeof(float));
      float *mm_buf = xmalloc(MUL_SIZE((size_t)g->nsel, chw) * sizeof(float));
#pragma omp for schedule(dynamic, 4)
      for (int i = 0; i < cnt; i++)
        if (pixel_row(g, (const char *)raw + (size_t)i * p->img_bytes, sel_buf, crop_buf, mm_buf,
                      dst + (size_t)(b0 + i) * d) != 0)
          invalid++;
      free(sel_buf);
      free(crop_buf);
      free(mm_buf);
    }
  }
  free(raw);
  p->invalid += invalid;
}

int64_t knn_pixels_close(struct knn_pixels *p) {
  int64_t invalid = p->invalid;
  comm_allreduce_sum_i64(&invalid, 1);
  dataset_close(p->ds);
  free(p);
  return invalid;
}
