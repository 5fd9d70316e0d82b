/* tests/unit/data/test_shards.c - shard writer and manifest round trip through dataset_open and
 * dataset_read_images (direct and HDF5 read paths, several threads), skipped-file bookkeeping,
 * the errors dataset_open gives for broken shard sets, and an unlabelled set with metadata columns. */
#include "build_config.h"

#include <hdf5.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/shards.h"
#include "data/split.h"
#include "tests/fixtures/testutil.h"

enum { C = 3, H = 6, W = 7, HW = H * W };

static double value(int64_t i, int c, int p) { return (double)((i * 977 + c * 131 + p * 7) % 60000); }

static const char *class_names[] = {"alpha", "beta", "gamma"};
static const char *chan_names[] = {"DAPI", "BF", "PE"};

/* A shard set of n images in shards of the given sizes; image i has label i % 3. */
static void make_set(const char *dir, int dtype, int nshards, const int64_t *counts, int64_t source_count,
                     const int64_t *skipped, int64_t nskipped) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  T_CHECK(system(cmd) == 0, "mkdir %s", dir);
  char names[16][32];
  const char *files[16];
  int64_t total = 0;
  for (int k = 0; k < nshards; k++) total += counts[k];
  int32_t *labels = malloc((size_t)total * sizeof *labels);
  int64_t i = 0;
  for (int k = 0; k < nshards; k++) {
    snprintf(names[k], sizeof names[k], "shard-%05d.h5", k);
    files[k] = names[k];
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, names[k]);
    struct shard_writer *w = shard_writer_create(path, C, H, W, dtype, 2);
    for (int64_t j = 0; j < counts[k]; j++, i++) {
      uint16_t u[C * HW];
      float f[C * HW];
      for (int c = 0; c < C; c++)
        for (int p = 0; p < HW; p++) {
          u[c * HW + p] = (uint16_t)value(i, c, p);
          f[c * HW + p] = (float)(value(i, c, p) * 0.5 - 7.25);
        }
      char rel[64];
      snprintf(rel, sizeof rel, "%s/img%03lld.tif", class_names[i % 3], (long long)i);
      labels[i] = (int32_t)(i % 3);
      shard_writer_add(w, dtype == DATASET_U16 ? (void *)u : (void *)f, labels[i], i, rel);
    }
    T_CHECK(shard_writer_count(w) == counts[k], "writer count");
    shard_writer_close(w);
  }
  double mean[C] = {0.25, 0.5, 0.75}, sd[C] = {0.1, 0.2, 0.3};
  struct manifest_info m = {
      .channels = C, .height = H, .width = W, .dtype = dtype, .count = total, .source_count = source_count,
      .nclasses = 3, .class_names = class_names, .channel_names = chan_names, .nshards = nshards,
      .shard_files = files, .shard_counts = counts, .labels = labels, .nskipped = nskipped,
      .skipped_index = skipped, .mean = mean, .std = sd, .stats_images = total, .tiff_dir = "/data/tiffs",
      .center_crop = 0, .stats_fraction = 0.2, .stats_seed = 42, .source_dtype = "uint16", .file_list_hash = 1234,
  };
  manifest_write(dir, &m);
  free(labels);
}

static int check_image(const struct dataset *ds, int64_t i, const void *img) {
  for (int c = 0; c < C; c++)
    for (int p = 0; p < HW; p++) {
      double want = dataset_dtype(ds) == DATASET_U16 ? value(i, c, p) : (double)(float)(value(i, c, p) * 0.5 - 7.25);
      double got = dataset_dtype(ds) == DATASET_U16 ? ((const uint16_t *)img)[c * HW + p]
                                                    : ((const float *)img)[c * HW + p];
      if (got != want) return 0;
    }
  return 1;
}

struct reader_arg {
  struct dataset *ds;
  int seed, bad;
};

static void *reader(void *p) {
  struct reader_arg *a = p;
  int64_t n = dataset_count(a->ds);
  size_t ib = dataset_image_bytes(a->ds);
  char *buf = malloc(ib * 5);
  for (int r = 0; r < 300; r++) {
    int64_t idx[5];
    for (int k = 0; k < 5; k++) idx[k] = (int64_t)((unsigned)(r * 31 + k * 17 + a->seed * 7) % (unsigned)n);
    dataset_read_images(a->ds, idx, 5, buf);
    for (int k = 0; k < 5; k++) a->bad += !check_image(a->ds, idx[k], buf + (size_t)k * ib);
  }
  free(buf);
  return NULL;
}

static void roundtrip(const char *dir, int dtype) {
  const int64_t counts[3] = {4, 3, 5};
  make_set(dir, dtype, 3, counts, 12, NULL, 0);
  struct dataset *ds = dataset_open(dir);
  T_CHECK(dataset_direct_shards(ds) == 0, "no shard opened before a read");
  T_CHECK(dataset_count(ds) == 12 && dataset_source_count(ds) == 12, "count");
  T_CHECK(dataset_channels(ds) == C && dataset_height(ds) == H && dataset_width(ds) == W, "shape");
  T_CHECK(dataset_dtype(ds) == dtype, "dtype");
  T_CHECK(dataset_nclasses(ds) == 3 && !strcmp(dataset_class_name(ds, 2), "gamma"), "classes");
  T_CHECK(!strcmp(dataset_channel_name(ds, 1), "BF"), "channel names");
  T_CHECK(dataset_mean(ds)[2] == 0.75 && dataset_std(ds)[1] == 0.2, "mean/std");
  for (int64_t i = 0; i < 12; i++) {
    T_CHECK(dataset_label(ds, i) == i % 3, "label %lld", (long long)i);
    T_CHECK(dataset_source_index(ds, i) == i, "source index");
  }
  char path[4096];
  dataset_relpath(ds, 9, path, sizeof path);
  T_CHECK(!strcmp(path, "alpha/img009.tif"), "relpath %s", path);
  dataset_path(ds, 5, path, sizeof path);
  T_CHECK(!strcmp(path, "/data/tiffs/gamma/img005.tif"), "path %s", path);
  /* Both read paths, in an order that crosses shards. */
  int64_t idx[6] = {11, 0, 4, 3, 7, 8};
  size_t ib = dataset_image_bytes(ds);
  char *buf = malloc(ib * 6);
  for (int direct = 1; direct >= 0; direct--) {
    dataset_set_direct_io(ds, direct);
    memset(buf, 0, ib * 6);
    dataset_read_images(ds, idx, 6, buf);
    int ok = 1;
    for (int k = 0; k < 6; k++) ok &= check_image(ds, idx[k], buf + (size_t)k * ib);
    T_CHECK(ok, "%s read (%s)", direct ? "direct" : "HDF5", dataset_dtype_name(dtype));
  }
  T_CHECK(dataset_direct_shards(ds) == 3, "the writer's shards are read with pread (%d of 3)", dataset_direct_shards(ds));
  /* Four threads at once, on both paths. */
  for (int direct = 1; direct >= 0; direct--) {
    dataset_set_direct_io(ds, direct);
    pthread_t th[4];
    struct reader_arg a[4];
    for (int t = 0; t < 4; t++) {
      a[t] = (struct reader_arg){ds, t, 0};
      pthread_create(&th[t], NULL, reader, &a[t]);
    }
    int bad = 0;
    for (int t = 0; t < 4; t++) {
      pthread_join(th[t], NULL);
      bad += a[t].bad;
    }
    T_CHECK(bad == 0, "%d wrong images from 4 threads (%s)", bad, direct ? "direct" : "HDF5");
  }
  free(buf);
  dataset_close(ds);
}

/* Replace shard 0 by one written with plain HDF5, as other tools might write it. */
enum { DEFLATE_BE, CONTIGUOUS, CHUNKED_NO_OFFSETS, BAD_OFFSETS };
static const char *mode_name[] = {"deflate-compressed big-endian", "contiguous", "one-image chunks without offsets",
                                  "wrong recorded offsets"};

static void rewrite_shard0(const char *dir, int mode) {
  char path[4200];
  snprintf(path, sizeof path, "%s/shard-00000.h5", dir);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (mode == BAD_OFFSETS) { /* a moved last chunk: the reader must notice and not use them */
    hid_t d = H5Dopen2(f, "image_offsets", H5P_DEFAULT);
    uint64_t off[4];
    H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off);
    off[3] = off[0];
    H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off);
    H5Dclose(d);
    H5Fclose(f);
    return;
  }
  hid_t d = H5Dopen2(f, "images", H5P_DEFAULT);
  uint16_t *img = malloc(4 * C * HW * 2);
  H5Dread(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, img);
  H5Dclose(d);
  H5Ldelete(f, "images", H5P_DEFAULT);
  H5Ldelete(f, "image_offsets", H5P_DEFAULT);
  hsize_t dims[4] = {4, C, H, W}, chunk2[4] = {2, C, H, W}, chunk1[4] = {1, C, H, W};
  hid_t sp = H5Screate_simple(4, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (mode == DEFLATE_BE) {
    H5Pset_chunk(dcpl, 4, chunk2);
    H5Pset_deflate(dcpl, 4);
  } else if (mode == CHUNKED_NO_OFFSETS) {
    H5Pset_chunk(dcpl, 4, chunk1);
  }
  d = H5Dcreate2(f, "images", mode == DEFLATE_BE ? H5T_STD_U16BE : H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, img);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Fclose(f);
  free(img);
}

static void other_layouts(const char *dir) {
  const int64_t counts[2] = {4, 2};
  /* Shards read with pread() after the reads below: shard 1 (ours) always, shard 0 when the
   * offsets of its images are known and right. */
  static const int want_direct[] = {1, 2, 1, 1};
  for (int mode = DEFLATE_BE; mode <= BAD_OFFSETS; mode++) {
    make_set(dir, DATASET_U16, 2, counts, 6, NULL, 0);
    rewrite_shard0(dir, mode);
    struct dataset *ds = dataset_open(dir);
    int64_t idx[4] = {3, 1, 5, 0};
    size_t ib = dataset_image_bytes(ds);
    char *buf = malloc(ib * 4);
    dataset_read_images(ds, idx, 4, buf);
    int ok = 1;
    for (int k = 0; k < 4; k++) ok &= check_image(ds, idx[k], buf + (size_t)k * ib);
    T_CHECK(ok, "images from a shard with %s", mode_name[mode]);
    T_CHECK(dataset_direct_shards(ds) == want_direct[mode], "%s: %d shards read directly, want %d", mode_name[mode],
            dataset_direct_shards(ds), want_direct[mode]);
    free(buf);
    dataset_close(ds);
  }
}

static void skipped_files(const char *dir) {
  /* 10 files found, positions 2 and 7 skipped: 8 images. */
  const int64_t counts[2] = {5, 3}, skipped[2] = {2, 7};
  make_set(dir, DATASET_U16, 2, counts, 10, skipped, 2);
  struct dataset *ds = dataset_open(dir);
  static const int64_t src[8] = {0, 1, 3, 4, 5, 6, 8, 9};
  int ok = dataset_count(ds) == 8 && dataset_source_count(ds) == 10;
  for (int64_t i = 0; i < 8 && ok; i++) ok = dataset_source_index(ds, i) == src[i];
  T_CHECK(ok, "source positions of the remaining images");
  /* The split of the remaining images is upstream's split over all 10 files, minus the two. */
  for (uint32_t seed = 0; seed < 50; seed++) {
    struct split all, s;
    split_compute(10, 0.8, seed, &all);
    split_dataset(ds, 0.8, seed, &s);
    int64_t nt = 0, nv = 0;
    int same = 1;
    for (int64_t k = 0; k < all.n_train; k++)
      if (all.train[k] != 2 && all.train[k] != 7) {
        int64_t d = all.train[k] - (all.train[k] > 2) - (all.train[k] > 7);
        same &= nt < s.n_train && s.train[nt++] == d;
      }
    for (int64_t k = 0; k < all.n_val; k++)
      if (all.val[k] != 2 && all.val[k] != 7) {
        int64_t d = all.val[k] - (all.val[k] > 2) - (all.val[k] > 7);
        same &= nv < s.n_val && s.val[nv++] == d;
      }
    same &= nt == s.n_train && nv == s.n_val;
    T_CHECK(same, "split_dataset with skipped files, seed %u", seed);
    split_free(&all);
    split_free(&s);
  }
  /* Without skipped files split_dataset is split_compute. */
  dataset_close(ds);
  make_set(dir, DATASET_U16, 2, counts, 8, NULL, 0);
  ds = dataset_open(dir);
  struct split a, b;
  split_compute(8, 0.8, 40, &a);
  split_dataset(ds, 0.8, 40, &b);
  T_CHECK(a.n_train == b.n_train && !memcmp(a.train, b.train, (size_t)a.n_train * 8) &&
              !memcmp(a.val, b.val, (size_t)a.n_val * 8), "split_dataset == split_compute");
  split_free(&a);
  split_free(&b);
  dataset_close(ds);
}

static int open_and_read(void *dir) {
  struct dataset *ds = dataset_open(dir);
  /* Broken shards show up when an image of them is first read. */
  int64_t idx = dataset_count(ds) - 1;
  void *buf = malloc(dataset_image_bytes(ds));
  dataset_read_images(ds, &idx, 1, buf);
  return 0;
}

/* dataset_open in a child process; check its exit status and message. */
static void expect_open_error(const char *what, const char *dir, const char *want) {
  char msg[4096];
  const int status = t_run_child(open_and_read, (void *)dir, 0, msg, sizeof msg);
  T_CHECK(status == 3, "%s: exit status %d, want 3", what, status);
  T_CHECK(strstr(msg, want) != NULL, "%s: message '%s' lacks '%s'", what, msg, want);
  if (t_verbose) printf("  %-26s %s", what, msg);
}

static void edit_manifest(const char *dir, const char *attr, const char *sval, int ival, const char *drop) {
  char path[4200];
  snprintf(path, sizeof path, "%s/manifest.h5", dir);
  if (attr && sval) t_h5_set_attr_fixed_str(path, attr, sval, 0);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (attr && !sval) {
    H5Adelete(f, attr);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, attr, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &ival);
    H5Aclose(a);
    H5Sclose(sp);
  }
  if (drop) H5Ldelete(f, drop, H5P_DEFAULT);
  H5Fclose(f);
}

static void broken(const char *dir) {
  const int64_t counts[2] = {4, 3};
  char path[4200], cmd[8600];
  snprintf(path, sizeof path, "%s/nowhere", dir);
  expect_open_error("no shard_dir", path, "does not exist");
  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  snprintf(path, sizeof path, "%s/manifest.h5", dir);
  unlink(path);
  expect_open_error("no manifest", dir, "manifest.h5 not found");

  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  FILE *f = fopen(path, "w");
  fputs("not hdf5\n", f);
  fclose(f);
  expect_open_error("manifest not HDF5", dir, "manifest.h5: not a readable HDF5 file");

  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  edit_manifest(dir, "format", "scdino-checkpoint", 0, NULL);
  expect_open_error("wrong format", dir, "format is 'scdino-checkpoint'");

  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  edit_manifest(dir, "version", NULL, 99, NULL);
  expect_open_error("wrong version", dir, "manifest version 99");

  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  edit_manifest(dir, NULL, NULL, 0, "labels");
  expect_open_error("missing labels", dir, "dataset 'labels' is missing");

  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  edit_manifest(dir, NULL, NULL, 0, "shard_counts");
  expect_open_error("missing shard_counts", dir, "'shard_counts' is missing");

  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  edit_manifest(dir, "channels", NULL, 4, NULL);
  expect_open_error("wrong channel count", dir, "'channel_names' has 3 entries, not one per channel (4)");

  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  snprintf(path, sizeof path, "%s/shard-00001.h5", dir);
  unlink(path);
  expect_open_error("missing shard", dir, "shard-00001.h5 listed in the manifest is missing");

  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  snprintf(cmd, sizeof cmd, "truncate -s 3000 '%s'", path);
  T_CHECK(system(cmd) == 0, "truncate");
  expect_open_error("truncated shard", dir, "shard-00001.h5");

  /* A shard from another set: the manifest says 3 images, the file holds 5. */
  const int64_t other[2] = {4, 5};
  char dir2[4200];
  snprintf(dir2, sizeof dir2, "%s_other", dir);
  make_set(dir2, DATASET_U16, 2, other, 9, NULL, 0);
  make_set(dir, DATASET_U16, 2, counts, 7, NULL, 0);
  snprintf(cmd, sizeof cmd, "cp '%s/shard-00001.h5' '%s/shard-00001.h5'", dir2, dir);
  T_CHECK(system(cmd) == 0, "cp");
  expect_open_error("shard of another set", dir, "'images' has shape [5, 3, 6, 7], the manifest says [3, 3, 6, 7]");
}

/* A set of 5 images in 2 shards with metadata columns 'donor' and 'well id', nclasses classes and
 * every label `label` (0 and -1: the good unlabelled set). */
static void make_meta_set(const char *dir, int nclasses, int32_t label) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  T_CHECK(system(cmd) == 0, "mkdir %s", dir);
  const char *files[2] = {"shard-00000.h5", "shard-00001.h5"}, *meta_names[2] = {"donor", "well id"};
  const int64_t counts[2] = {3, 2};
  int32_t labels[5];
  uint16_t img[C * HW] = {0};
  for (int k = 0, i = 0; k < 2; k++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, files[k]);
    struct shard_writer *w = shard_writer_create(path, C, H, W, DATASET_U16, 1);
    shard_writer_meta_columns(w, 2, meta_names);
    for (int64_t j = 0; j < counts[k]; j++, i++) {
      char rel[64], donor[16], well[32];
      snprintf(rel, sizeof rel, "plate/img%d.tif", i);
      snprintf(donor, sizeof donor, "d%d", i % 2);
      snprintf(well, sizeof well, "A%02d, \"x\"", i);
      const char *values[2] = {donor, well};
      labels[i] = label;
      shard_writer_add(w, img, label, i, rel);
      shard_writer_add_meta(w, values);
    }
    shard_writer_close(w);
  }
  double mean[C] = {0.25, 0.5, 0.75}, sd[C] = {0.1, 0.2, 0.3};
  struct manifest_info m = {
      .channels = C, .height = H, .width = W, .dtype = DATASET_U16, .count = 5, .source_count = 5,
      .nclasses = nclasses, .class_names = class_names, .channel_names = chan_names, .nmeta = 2,
      .meta_names = meta_names, .nshards = 2, .shard_files = files, .shard_counts = counts, .labels = labels,
      .mean = mean, .std = sd, .stats_images = 5, .tiff_dir = "/data", .stats_fraction = 0.2, .stats_seed = 42,
      .source_dtype = "uint16", .file_list_hash = 99, .label_source = "none", .file_list = "/data/list.csv",
  };
  manifest_write(dir, &m);
}

static void metadata_unlabelled(const char *dir, const char *other) {
  make_meta_set(dir, 0, -1);
  struct dataset *ds = dataset_open(dir);
  T_CHECK(dataset_nclasses(ds) == 0 && dataset_label(ds, 4) == -1, "unlabelled: no classes, label -1");
  T_CHECK(!strcmp(dataset_class_name(ds, -1), DATASET_UNLABELLED), "the class name of label -1");
  T_CHECK(dataset_nmeta(ds) == 2 && !strcmp(dataset_meta_name(ds, 1), "well id"), "metadata columns");
  char v[64];
  dataset_meta(ds, 4, 1, v, sizeof v);
  T_CHECK(!strcmp(v, "A04, \"x\""), "image 4's well: %s", v);
  dataset_meta(ds, 1, 0, v, sizeof v);
  T_CHECK(!strcmp(v, "d1"), "image 1's donor: %s", v);
  dataset_meta(ds, 3, 0, v, sizeof v);
  T_CHECK(!strcmp(v, "d1"), "image 3's donor: %s", v);
  dataset_close(ds);
  struct manifest_settings st;
  char why[1024];
  T_CHECK(manifest_read_settings(dir, &st, why, sizeof why) == 0 && !strcmp(st.label_source, "none"),
          "label_source: %s", st.label_source);
  /* A set of a TIFF tree (roundtrip's) whose label_source is unreadable, as one made before the
   * attribute existed: its classes came from the folders. */
  edit_manifest(other, "label_source", NULL, 0, NULL);
  T_CHECK(manifest_read_settings(other, &st, why, sizeof why) == 0 && !strcmp(st.label_source, "folders"),
          "label_source without the attribute: %s", st.label_source);
  ds = dataset_open(other);
  T_CHECK(dataset_nmeta(ds) == 0, "a tree's set has no metadata");
  dataset_close(ds);

  make_meta_set(dir, 0, 1);
  expect_open_error("labelled image, no classes", dir,
                    "image 0 has label 1, but the set names no classes (an unlabelled set's labels are -1)");
  make_meta_set(dir, 3, -1);
  expect_open_error("label -1 with classes", dir, "image 0 has label -1, outside 0..2");
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  const char *base = t_scratch_dir("test_shards");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/u16", base);
  roundtrip(dir, DATASET_U16);
  snprintf(dir, sizeof dir, "%s/f32", base);
  roundtrip(dir, DATASET_F32);
  snprintf(dir, sizeof dir, "%s/layouts", base);
  other_layouts(dir);
  snprintf(dir, sizeof dir, "%s/skipped", base);
  skipped_files(dir);
  snprintf(dir, sizeof dir, "%s/broken", base);
  broken(dir);
  snprintf(dir, sizeof dir, "%s/meta", base);
  char u16[4096];
  snprintf(u16, sizeof u16, "%s/u16", base);
  metadata_unlabelled(dir, u16);
  return t_finish();
}
