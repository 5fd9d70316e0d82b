/* tests/unit/data/test_prepare.c - calculation='prepare' end to end in one process: every TIFF variant
 * round-trips into the shards with its exact values, in ImageFolder order; center_crop smaller
 * and larger than the images; the manifest statistics against a direct computation; skipped
 * files and their bookkeeping. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>

#include "core/comm.h"
#include "core/log.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/split.h"
#include "input/config.h"
#include "tests/fixtures/testutil.h"
#include "tests/fixtures/tiffgen.h"

struct file {
  const char *rel; /* path under the tiff root, in the order ImageFolder lists it */
  struct tiffgen g;
  int C, H, W;
};

static void mkdirs_for(const char *path) {
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
  T_CHECK(system(cmd) == 0, "%s", cmd);
}

static void write_tree(const char *root, const struct file *f, int n) {
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  T_CHECK(system(cmd) == 0, "%s", cmd);
  /* Write in reverse so directory order on disk is not the expected order. */
  for (int i = n - 1; i >= 0; i--) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", root, f[i].rel);
    mkdirs_for(path);
    T_CHECK(tiffgen_make(path, &f[i].g, f[i].C, f[i].H, f[i].W) == 0, "write %s", path);
  }
}

static void run_prepare(const char *root, const char *shards, int ips, int crop, const char *on_bad) {
  static struct config cfg;
  config_defaults(&cfg);
  snprintf(cfg.control.calculation, sizeof cfg.control.calculation, "prepare");
  snprintf(cfg.data.tiff_dir, sizeof cfg.data.tiff_dir, "%s", root);
  snprintf(cfg.data.shard_dir, sizeof cfg.data.shard_dir, "%s", shards);
  snprintf(cfg.data.on_bad_image, sizeof cfg.data.on_bad_image, "%s", on_bad);
  cfg.data.images_per_shard = ips;
  cfg.data.center_crop = crop;
  T_CHECK(prepare_run(&cfg) == 0, "prepare of %s", root);
}

/* Python's int(round(d / 2.0)) for the centre-crop offset, written independently of prepare.c:
 * rint() rounds half to even in the default rounding mode, as Python's round() does. */
static int py_offset(int size, int crop) {
  if (crop > size) return -((crop - size) / 2);
  return (int)rint((size - crop) / 2.0);
}

/* Every stored image equals its source (centre-cropped or padded to HxW when crop != 0). */
static void check_images(struct dataset *ds, const struct file *f, int n, int crop) {
  T_CHECK(dataset_count(ds) == n, "%lld images, want %d", (long long)dataset_count(ds), n);
  int C = dataset_channels(ds), H = dataset_height(ds), W = dataset_width(ds);
  size_t ib = dataset_image_bytes(ds);
  void *img = malloc(ib);
  for (int64_t i = 0; i < dataset_count(ds) && i < n; i++) {
    char rel[4096];
    dataset_relpath(ds, i, rel, sizeof rel);
    T_CHECK(!strcmp(rel, f[i].rel), "image %lld is %s, want %s (ImageFolder order)", (long long)i, rel, f[i].rel);
    dataset_read_images(ds, &i, 1, img);
    int top = crop ? py_offset(f[i].H, crop) : 0, left = crop ? py_offset(f[i].W, crop) : 0;
    int bad = 0;
    for (int c = 0; c < C; c++)
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
          int sy = y + top, sx = x + left;
          double want = sy >= 0 && sy < f[i].H && sx >= 0 && sx < f[i].W ? tiffgen_value(&f[i].g, c, sy, sx) : 0;
          size_t k = ((size_t)c * H + y) * W + x;
          double got;
          if (dataset_dtype(ds) == DATASET_U16) {
            got = ((uint16_t *)img)[k];
          } else {
            got = ((float *)img)[k];
            want = (float)want;
          }
          bad += got != want;
        }
    T_CHECK(bad == 0, "%s: %d values differ from the source", f[i].rel, bad);
  }
  free(img);
}

/* The manifest's mean/std against a two-pass computation over the statistics subset. */
static void check_stats(struct dataset *ds) {
  int64_t n = dataset_count(ds);
  int C = dataset_channels(ds);
  size_t hw = (size_t)dataset_height(ds) * dataset_width(ds);
  struct split s;
  split_compute(dataset_source_count(ds), 0.2, 42, &s);
  double *x = malloc(sizeof(double) * (size_t)n * C * hw);
  int64_t used = 0;
  void *img = malloc(dataset_image_bytes(ds));
  for (int64_t k = 0; k < s.n_train; k++) {
    int64_t i = -1;
    for (int64_t j = 0; j < n; j++)
      if (dataset_source_index(ds, j) == s.train[k]) i = j;
    if (i < 0) continue; /* a skipped file */
    dataset_read_images(ds, &i, 1, img);
    for (int c = 0; c < C; c++) {
      double lo = INFINITY, hi = -INFINITY, v;
      for (size_t p = 0; p < hw; p++) {
        v = dataset_dtype(ds) == DATASET_U16 ? ((uint16_t *)img)[c * hw + p] : ((float *)img)[c * hw + p];
        lo = fmin(lo, v);
        hi = fmax(hi, v);
      }
      for (size_t p = 0; p < hw; p++) {
        v = dataset_dtype(ds) == DATASET_U16 ? ((uint16_t *)img)[c * hw + p] : ((float *)img)[c * hw + p];
        x[((size_t)used * C + c) * hw + p] = (v - lo) / (hi - lo);
      }
    }
    used++;
  }
  T_CHECK(used > 0, "statistics subset is empty");
  for (int c = 0; c < C && used > 0; c++) {
    double m = 0, var = 0;
    for (int64_t i = 0; i < used; i++)
      for (size_t p = 0; p < hw; p++) m += x[((size_t)i * C + c) * hw + p];
    m /= (double)used * hw;
    for (int64_t i = 0; i < used; i++)
      for (size_t p = 0; p < hw; p++) {
        double d = x[((size_t)i * C + c) * hw + p] - m;
        var += d * d;
      }
    var /= (double)used * hw;
    T_NEAR(dataset_mean(ds)[c], m, 1e-12, "manifest mean");
    T_NEAR(dataset_std(ds)[c], sqrt(var), 1e-12, "manifest std");
  }
  free(img);
  free(x);
  split_free(&s);
}

#define G(l, s, ...) {.layout = TIFF_LAYOUT_##l, .sample = TIFF_SAMPLE_##s, __VA_ARGS__}

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  t_init(argc, argv);
  log_init(0, t_verbose ? 1 : 0);
  const char *base = t_scratch_dir("test_prepare");
  char root[4096], shards[4096], path[4200];

  /* Offsets: Python rounds (size - crop) / 2 half to even. */
  T_CHECK(prepare_crop_offset(50, 45) == 2 && prepare_crop_offset(51, 45) == 3 && prepare_crop_offset(52, 45) == 4 &&
              prepare_crop_offset(53, 50) == 2 && prepare_crop_offset(50, 50) == 0,
          "crop offsets (round half to even)");
  T_CHECK(prepare_crop_offset(45, 50) == -2 && prepare_crop_offset(44, 50) == -3, "padding offsets");

  /* 1. Integer sources stored as uint16: every layout, compression, tiling, byte order. */
  const struct file u16[] = {
      {"a/01_contig.tif", G(CONTIG, U16, .seed = 1), 5, 12, 14},
      {"a/02_planar.tif", G(PLANAR, U16, .seed = 2, .rows_per_strip = 5), 5, 12, 14},
      {"a/03_pages.tif", G(PAGES, U16, .seed = 3), 5, 12, 14},
      {"a/04_tifffile_hwc.tif", G(HWC_PAGES, U16, .seed = 4), 5, 12, 14},
      {"a/05_tiled.tif", G(CONTIG, U16, .seed = 5, .tile = 16), 5, 12, 14},
      {"a/06_tiled_planar.tiff", G(PLANAR, U16, .seed = 6, .tile = 16), 5, 12, 14},
      {"a/07_deflate.TIF", G(CONTIG, U16, .seed = 7, .compression = COMPRESSION_ADOBE_DEFLATE, .predictor = 2), 5, 12, 14},
      {"a/08_lzw_pages_u8.tif", G(PAGES, U8, .seed = 8, .compression = COMPRESSION_LZW), 5, 12, 14},
      {"a/09_packbits_u8.tif", G(CONTIG, U8, .seed = 9, .compression = COMPRESSION_PACKBITS), 5, 12, 14},
      {"b/10_bigendian.tif", G(CONTIG, U16, .seed = 10, .big_endian = 1), 5, 12, 14},
      {"b/12_hwc_u8_deflate.tif", G(HWC_PAGES, U8, .seed = 12, .compression = COMPRESSION_ADOBE_DEFLATE), 5, 12, 14},
      {"b/deep/11_imagej.tif", G(PAGES, U16, .seed = 11, .imagej = 1), 5, 12, 14},
  };
  snprintf(root, sizeof root, "%s/u16/tiffs", base);
  snprintf(shards, sizeof shards, "%s/u16/shards", base);
  write_tree(root, u16, 12);
  snprintf(path, sizeof path, "%s/a/notes.txt", root);
  fclose(fopen(path, "w")); /* not an image: ignored */
  run_prepare(root, shards, 5, 0, "error");
  struct dataset *ds = dataset_open(shards);
  T_CHECK(dataset_dtype(ds) == DATASET_U16 && dataset_channels(ds) == 5 && dataset_height(ds) == 12 &&
              dataset_width(ds) == 14, "u16 set shape");
  T_CHECK(dataset_nclasses(ds) == 2 && !strcmp(dataset_class_name(ds, 1), "b"), "classes");
  for (int i = 0; i < 12; i++) T_CHECK(dataset_label(ds, i) == (i < 9 ? 0 : 1), "label of %d", i);
  check_images(ds, u16, 12, 0);
  check_stats(ds);
  dataset_close(ds);

  /* 2. Signed and floating-point sources stored as float32. */
  const struct file flt[] = {
      {"x/1_f32.tif", G(CONTIG, F32, .seed = 21), 3, 10, 9},
      {"x/2_f32_planar_tiled_deflate.tif", G(PLANAR, F32, .seed = 22, .tile = 16, .compression = COMPRESSION_ADOBE_DEFLATE, .predictor = 3), 3, 10, 9},
      {"x/3_f64.tif", G(CONTIG, F64, .seed = 23), 3, 10, 9},
      {"y/4_i16_pages.tif", G(PAGES, I16, .seed = 24), 3, 10, 9},
      {"y/5_i8_hwc.tif", G(HWC_PAGES, I8, .seed = 25), 3, 10, 9},
      {"y/6_f32_bigendian.tif", G(PLANAR, F32, .seed = 26, .big_endian = 1), 3, 10, 9},
  };
  snprintf(root, sizeof root, "%s/f32/tiffs", base);
  snprintf(shards, sizeof shards, "%s/f32/shards", base);
  write_tree(root, flt, 6);
  run_prepare(root, shards, 4, 0, "error");
  ds = dataset_open(shards);
  T_CHECK(dataset_dtype(ds) == DATASET_F32, "float set stored as float32");
  check_images(ds, flt, 6, 0);
  check_stats(ds);
  dataset_close(ds);

  /* 3. center_crop smaller and larger than images of two sizes (both parities). */
  const struct file crop[] = {
      {"c/1.tif", G(CONTIG, U16, .seed = 31), 2, 12, 14},
      {"c/2.tif", G(CONTIG, U16, .seed = 32), 2, 13, 11},
      {"d/3.tif", G(PLANAR, U16, .seed = 33), 2, 12, 14},
      {"d/4.tif", G(PAGES, U16, .seed = 34), 2, 13, 11},
  };
  snprintf(root, sizeof root, "%s/crop/tiffs", base);
  write_tree(root, crop, 4);
  for (int k = 0; k < 2; k++) {
    int size = k ? 16 : 7;
    snprintf(shards, sizeof shards, "%s/crop/shards%d", base, size);
    run_prepare(root, shards, 3, size, "error");
    ds = dataset_open(shards);
    T_CHECK(dataset_height(ds) == size && dataset_width(ds) == size, "crop %d shape", size);
    check_images(ds, crop, 4, size);
    check_stats(ds);
    dataset_close(ds);
  }

  /* 4. on_bad_image='skip': bad files are left out, listed, and the split still works over the
   * full file list. */
  const struct file mixed[] = {
      {"p/1.tif", G(CONTIG, U16, .seed = 41), 3, 8, 8},
      {"p/2.tif", G(CONTIG, U16, .seed = 42), 3, 8, 8},
      {"p/3_bad.tif", G(CONTIG, U16, .seed = 43), 4, 8, 8}, /* 4 channels */
      {"p/4.tif", G(CONTIG, U16, .seed = 44), 3, 8, 8},
      {"q/5.tif", G(CONTIG, U16, .seed = 45), 3, 8, 8},
      {"q/6_bad.tif", G(CONTIG, U16, .seed = 46), 3, 9, 8}, /* 9 x 8 */
      {"q/7.tif", G(CONTIG, U16, .seed = 47), 3, 8, 8},
  };
  snprintf(root, sizeof root, "%s/skip/tiffs", base);
  snprintf(shards, sizeof shards, "%s/skip/shards", base);
  write_tree(root, mixed, 7);
  run_prepare(root, shards, 2, 0, "skip");
  ds = dataset_open(shards);
  const struct file good[] = {mixed[0], mixed[1], mixed[3], mixed[4], mixed[6]};
  check_images(ds, good, 5, 0);
  T_CHECK(dataset_source_count(ds) == 7, "source count");
  static const int64_t src[5] = {0, 1, 3, 4, 6};
  for (int i = 0; i < 5; i++) T_CHECK(dataset_source_index(ds, i) == src[i], "source index of %d", i);
  T_CHECK(dataset_label(ds, 2) == 0 && dataset_label(ds, 3) == 1, "labels after skipping");
  check_stats(ds);
  dataset_close(ds);
  snprintf(path, sizeof path, "%s/skipped.txt", shards);
  FILE *f = fopen(path, "r");
  T_CHECK(f != NULL, "skipped.txt written");
  if (f) {
    char line[8192];
    int nl = 0;
    while (fgets(line, sizeof line, f)) {
      nl++;
      if (nl == 1) T_CHECK(strstr(line, "p/3_bad.tif\thas 4 channel(s), expected 3") != NULL, "line 1: %s", line);
      if (nl == 2) T_CHECK(strstr(line, "q/6_bad.tif\tis 9x8 pixels") != NULL, "line 2: %s", line);
    }
    fclose(f);
    T_CHECK(nl == 2, "skipped.txt has %d lines, want 2", nl);
  }

  int rc = t_finish();
  comm_finalize();
  return rc;
}
