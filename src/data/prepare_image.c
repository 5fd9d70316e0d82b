/* prepare_image.c - calculation='prepare', one image at a time: the reference format chosen from a
 * sample of the files, each file read, checked against it, converted to the shard dtype (centre
 * crop or padding) and measured for the statistics.
 *
 * Decisions (see prepare.c for the run as a whole):
 * - Every image must have the channel count, the shard dtype (uint16 for 8/16-bit unsigned
 *   sources, float32 for signed and floating-point ones) and - without center_crop - the height
 *   and width of the reference: the most common shape among up to 16 files spread over the list,
 *   so an odd first file is reported as the odd one.
 * - An image is bad when it is unreadable, of the wrong shape or dtype, holds NaN/Inf, or has a
 *   constant non-zero channel, which upstream's min-max turns into NaN. */
#include "build_config.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fsutil.h"
#include "data/imagefolder.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/stats.h"
#include "data/tiff.h"

int prepare_storage_dtype(int sample) {
  return sample == TIFF_SAMPLE_U8 || sample == TIFF_SAMPLE_U16 ? DATASET_U16 : DATASET_F32;
}

int prepare_crop_offset(int size, int crop) {
  if (crop > size) return -((crop - size) / 2);
  int d = size - crop, k = d / 2;
  if (d % 2 == 0) return k;
  return k % 2 == 0 ? k : k + 1; /* round(k + 0.5) rounds half to even */
}

static double sample_at(const void *src, int sample, size_t i) {
  switch (sample) {
    case TIFF_SAMPLE_U8: return ((const uint8_t *)src)[i];
    case TIFF_SAMPLE_U16: return ((const uint16_t *)src)[i];
    case TIFF_SAMPLE_I8: return ((const int8_t *)src)[i];
    case TIFF_SAMPLE_I16: return ((const int16_t *)src)[i];
    case TIFF_SAMPLE_F32: return ((const float *)src)[i];
    default: return ((const double *)src)[i];
  }
}

void prepare_crop_convert(const void *src, int sample, int channels, int sh, int sw, void *dst, int oh, int ow) {
  int top = prepare_crop_offset(sh, oh), left = prepare_crop_offset(sw, ow);
  int u16 = prepare_storage_dtype(sample) == DATASET_U16;
  size_t n = (size_t)channels * oh * ow;
  if (oh == sh && ow == sw) { /* the common case: no crop, a copy or a widening */
    if (sample == TIFF_SAMPLE_U16 || sample == TIFF_SAMPLE_F32) {
      memcpy(dst, src, n * (sample == TIFF_SAMPLE_U16 ? 2 : 4));
      return;
    }
    if (sample == TIFF_SAMPLE_U8) {
      for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = ((const uint8_t *)src)[i];
      return;
    }
  }
  for (int c = 0; c < channels; c++)
    for (int y = 0; y < oh; y++) {
      int sy = y + top;
      for (int x = 0; x < ow; x++) {
        int sx = x + left;
        size_t o = ((size_t)c * oh + y) * ow + x;
        double v = 0; /* padding */
        if (sy >= 0 && sy < sh && sx >= 0 && sx < sw) v = sample_at(src, sample, ((size_t)c * sh + sy) * sw + sx);
        if (u16)
          ((uint16_t *)dst)[o] = (uint16_t)v;
        else
          ((float *)dst)[o] = (float)v;
      }
    }
}

/* The shape every image must have: chosen from a sample of the files (see prepare_format_choose). */
/* Whether an image of this header fits the reference format (0), else -1 with the reason. */
static int format_fits(const struct tiff_info *info_, const struct prepare_format *ref, int crop, char *why, size_t n) {
  const struct tiff_info info = *info_;
  int rc = -1;
  if (info.channels != ref->C)
    snprintf(why, n, "has %d channel(s), expected %d like most images (e.g. %s)", info.channels, ref->C, ref->example);
  else if (prepare_storage_dtype(info.sample) != ref->dtype)
    snprintf(why, n, "has %s samples, expected %s like most images (e.g. %s)", tiff_sample_name(info.sample),
             ref->dtype == DATASET_U16 ? "8- or 16-bit unsigned" : "signed or floating-point", ref->example);
  else if (!crop && (info.height != ref->H || info.width != ref->W))
    snprintf(why, n, "is %dx%d pixels (height x width), expected %dx%d like most images (e.g. %s); "
             "center_crop makes differently sized images usable", info.height, info.width, ref->H, ref->W, ref->example);
  else
    rc = 0;
  return rc;
}

int prepare_image_convert(const char *full, const struct prepare_format *ref, int crop, void *out,
                          struct stats_acc *one, char *why, size_t n) {
  struct tiff_info info;
  void *data = NULL;
  /* The header first: an image of the wrong shape is refused before it is decoded (a huge
   * compressed one would take memory and time for nothing). */
  if (tiff_probe(full, &info, why, n) != 0 || format_fits(&info, ref, crop, why, n) != 0) return -1;
  if (tiff_read(full, &info, &data, why, n) != 0) return -1;
  int rc = format_fits(&info, ref, crop, why, n); /* the same, unless the file changed meanwhile */
  if (rc == 0) {
    prepare_crop_convert(data, info.sample, ref->C, info.height, info.width, out, ref->H, ref->W);
    size_t hw = (size_t)ref->H * ref->W;
    if (ref->dtype == DATASET_F32) {
      const float *v = out;
      for (size_t i = 0; i < (size_t)ref->C * hw; i++)
        if (!isfinite(v[i])) {
          snprintf(why, n, "pixel (channel %zu, row %zu, column %zu) is %s%s", i / hw, i % hw / (size_t)ref->W,
                   i % (size_t)ref->W, isnan(v[i]) ? "NaN" : "infinite",
                   info.sample == TIFF_SAMPLE_F64 && !isnan(v[i]) ? " in float32" : "");
          rc = -1;
          break;
        }
    }
    stats_acc_reset(one);
    int c = rc == 0 ? stats_acc_add(one, out, ref->dtype, hw) : -1;
    if (c >= 0) {
      double v = ref->dtype == DATASET_F32 ? ((const float *)out)[(size_t)c * hw] : ((const uint16_t *)out)[(size_t)c * hw];
      snprintf(why, n, "channel %d is constant (%g)%s: per-image min-max scaling divides 0 by 0 (scDINO "
               "silently drops such images)", c, v, crop ? " after center_crop" : "");
      rc = -1;
    }
  }
  free(data);
  return rc;
}

/* The most common (channels, dtype[, height, width]) among up to 16 files spread over the list
 * (ties: the earliest), so one odd file - even the first - does not make every other image
 * "wrong". */
void prepare_format_choose(const struct imagefolder *f, const char *root, int crop, struct prepare_format *ref) {
  enum { NPROBE = 16 };
  struct { struct tiff_info info; int64_t pos; int votes; } cand[NPROBE];
  int ncand = 0;
  char full[PATH_MAX], why[PREPARE_WHY_MAX], first_why[PATH_MAX + PREPARE_WHY_MAX + 8] = "";
  int64_t nprobe = f->n < NPROBE ? f->n : NPROBE;
  for (int64_t k = 0; k < nprobe; k++) {
    int64_t pos = nprobe > 1 ? k * (f->n - 1) / (nprobe - 1) : 0;
    struct tiff_info info;
    fs_join(full, sizeof full, root, f->paths[pos]);
    if (tiff_probe(full, &info, why, sizeof why) != 0) {
      if (!first_why[0]) snprintf(first_why, sizeof first_why, "%s: %s", full, why);
      continue;
    }
    int j;
    for (j = 0; j < ncand; j++) {
      const struct tiff_info *c = &cand[j].info;
      if (c->channels == info.channels && prepare_storage_dtype(c->sample) == prepare_storage_dtype(info.sample) &&
          (crop || (c->height == info.height && c->width == info.width)))
        break;
    }
    if (j == ncand) {
      cand[ncand].info = info;
      cand[ncand].pos = pos;
      cand[ncand++].votes = 0;
    }
    cand[j].votes++;
  }
  /* None of the sample opens: look for any readable file before giving up. */
  for (int64_t pos = 0; ncand == 0 && pos < f->n; pos++) {
    fs_join(full, sizeof full, root, f->paths[pos]);
    if (tiff_probe(full, &cand[0].info, why, sizeof why) == 0) {
      cand[0].pos = pos;
      cand[0].votes = 1;
      ncand = 1;
    }
  }
  if (ncand == 0) scd_fatal(SCD_EXIT_DATA, "none of the %lld files under %s reads as a TIFF image (e.g. %s)",
                            (long long)f->n, root, first_why);
  int best = 0;
  for (int j = 1; j < ncand; j++)
    if (cand[j].votes > cand[best].votes) best = j;
  const struct tiff_info *b = &cand[best].info;
  ref->C = b->channels;
  ref->H = crop ? crop : b->height;
  ref->W = crop ? crop : b->width;
  ref->dtype = prepare_storage_dtype(b->sample);
  ref->sample = b->sample;
  fs_join(ref->example, sizeof ref->example, root, f->paths[cand[best].pos]);
}
