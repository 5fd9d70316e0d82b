/* features_io.c - writing and validated reading of the CLS features file features_EEEE.h5. */
#include "build_config.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features_io.h"
#include "core/check.h"
#include "core/fsutil.h"
#include "core/h5util.h"

/* ---- Writing -------------------------------------------------------------------------------- */

void features_write_meta(hid_t fid, const struct features *f) {
  SCD_ASSERT(f->n > 0 && f->d > 0 && f->nclasses > 0);
  hsize_t d1[1] = {(hsize_t)f->n};
  h5util_dset_write(fid, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, f->labels);
  h5util_dset_write(fid, "index", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d1, f->index);
  h5util_dset_write_strs(fid, "paths", (const char *const *)f->paths, (hsize_t)f->n);
  h5util_dset_write_strs(fid, "class_names", (const char *const *)f->class_names, (hsize_t)f->nclasses);
  h5util_attr_write_str(fid, "format", FEATURES_FORMAT);
  h5util_attr_write_i64(fid, "version", FEATURES_VERSION);
  h5util_attr_write_str(fid, "checkpoint", f->checkpoint);
  h5util_attr_write_str(fid, "checkpoint_key", f->checkpoint_key);
  h5util_attr_write_i64(fid, "epoch", f->epoch);
}

void features_write(const char *path, const struct features *f) {
  SCD_ASSERT(f->n > 0 && f->d > 0 && f->nclasses > 0);
  struct h5util_image img;
  hid_t fid = h5util_image_begin(path, &img);
  hsize_t d2[2] = {(hsize_t)f->n, (hsize_t)f->d};
  h5util_dset_write(fid, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, f->x);
  features_write_meta(fid, f);
  h5util_image_save(fid, &img, "features file", path);
}

/* ---- Reading -------------------------------------------------------------------------------- */

/* Limits on what a features file may claim, checked before anything is allocated: the kNN keeps
 * per-class tables (k x classes x classes counts), and rows are bounded by the shard set's index. */
#define FEATURES_MAX_ROWS ((hsize_t)INT32_MAX)
#define FEATURES_MAX_DIM 1000000
#define FEATURES_MAX_CLASSES 10000

SCD_NORETURN SCD_PRINTF(2, 3) static void bad(const char *path, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  scd_fatal(SCD_EXIT_DATA, "features file %s: %s", path, msg);
}

/* An item the file must have (rc from an h5util reader). */
static void need(const char *path, int rc) { h5util_need("features file", path, rc); }

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Values the kNN relies on (labels were range-checked while reading): a unique non-negative
 * index, finite unit-length rows. */
static void validate(const char *path, const struct features *f) {
  for (int64_t i = 0; i < f->n; i++)
    if (f->index[i] < 0) bad(path, "index[%" PRId64 "] = %" PRId64 " is negative", i, f->index[i]);
  int64_t *sorted = xmalloc(MUL_SIZE((size_t)f->n, sizeof *sorted));
  memcpy(sorted, f->index, (size_t)f->n * sizeof *sorted);
  qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_i64);
  for (int64_t i = 1; i < f->n; i++)
    if (sorted[i] == sorted[i - 1]) {
      int64_t v = sorted[i], first = -1, second = -1;
      for (int64_t r = 0; r < f->n && second < 0; r++)
        if (f->index[r] == v) {
          if (first < 0)
            first = r;
          else
            second = r;
        }
      free(sorted);
      bad(path, "index value %" PRId64 " appears twice (rows %" PRId64 " and %" PRId64 ")", v, first, second);
    }
  free(sorted);
  for (int64_t i = 0; i < f->n; i++) {
    const float *row = f->x + (size_t)i * (size_t)f->d;
    double ss = 0;
    for (int j = 0; j < f->d; j++) {
      if (!isfinite(row[j]))
        bad(path, "features[%" PRId64 ", %d] is %s (row of sample index %" PRId64 ")", i, j,
            isnan(row[j]) ? "NaN" : "infinite", f->index[i]);
      ss += (double)row[j] * (double)row[j];
    }
    double norm = sqrt(ss);
    if (fabs(norm - 1.0) > FEATURES_NORM_TOL)
      bad(path, "row %" PRId64 " of 'features' has length %.6g; rows must be L2-normalised", i, norm);
  }
}

void features_read(const char *path, struct features *f) {
  memset(f, 0, sizeof *f);
  hid_t fid;
  need(path, h5util_file_open(path, &fid));

  char fmt[256];
  need(path, h5util_attr_read_str(fid, "format", fmt, sizeof fmt));
  if (strcmp(fmt, FEATURES_FORMAT) != 0)
    bad(path, "format attribute is '%s', expected '%s' (not a scdino features file)", fmt, FEATURES_FORMAT);
  int64_t version = 0;
  need(path, h5util_attr_read_i64(fid, "version", &version));
  if (version < FEATURES_VERSION_OLDEST || version > FEATURES_VERSION)
    bad(path, "format version %" PRId64 " is not supported (this scdino reads versions %d to %d)", version,
        FEATURES_VERSION_OLDEST, FEATURES_VERSION);
  need(path, h5util_attr_read_str(fid, "checkpoint", f->checkpoint, sizeof f->checkpoint));
  need(path, h5util_attr_read_str(fid, "checkpoint_key", f->checkpoint_key, sizeof f->checkpoint_key));
  need(path, h5util_attr_read_i64(fid, "epoch", &f->epoch));

  hsize_t dx[2], dl[1], di[1];
  hid_t xs, ls, is_;
  need(path, h5util_dset_open(fid, "features", 2, H5T_FLOAT, dx, &xs));
  need(path, h5util_dset_open(fid, "labels", 1, H5T_INTEGER, dl, &ls));
  need(path, h5util_dset_open(fid, "index", 1, H5T_INTEGER, di, &is_));
  if (dx[0] == 0 || dx[1] == 0)
    bad(path, "dataset 'features' is empty (%llu x %llu)", (unsigned long long)dx[0], (unsigned long long)dx[1]);
  if (dx[1] > FEATURES_MAX_DIM) bad(path, "dataset 'features' has %llu columns; that is not a feature dimension",
                           (unsigned long long)dx[1]);
  if (dl[0] != dx[0])
    bad(path, "'labels' has %llu rows but 'features' has %llu", (unsigned long long)dl[0], (unsigned long long)dx[0]);
  if (di[0] != dx[0])
    bad(path, "'index' has %llu rows but 'features' has %llu", (unsigned long long)di[0], (unsigned long long)dx[0]);
  if (dx[0] > FEATURES_MAX_ROWS)
    bad(path, "dataset 'features' has %llu rows, more than the limit of %llu", (unsigned long long)dx[0],
        (unsigned long long)FEATURES_MAX_ROWS);
  /* Before anything is allocated for them (h5util_dset_read checks again, before reading). */
  need(path, h5util_dset_stored(xs, "features", dx[0] * dx[1]));
  need(path, h5util_dset_stored(ls, "labels", dl[0]));
  need(path, h5util_dset_stored(is_, "index", di[0]));
  f->n = (int64_t)dx[0];
  f->d = (int)dx[1];
  size_t n = (size_t)f->n;

  int64_t nc = 0, np = 0;
  need(path, h5util_dset_read_strs(fid, "class_names", FEATURES_MAX_CLASSES, &f->class_names, &nc));
  f->nclasses = (int)nc;
  if (nc < 1) bad(path, "'class_names' holds no names");
  need(path, h5util_dset_read_strs(fid, "paths", f->n, &f->paths, &np));
  if (np != f->n)
    bad(path, "'paths' has %lld rows but 'features' has %llu", (long long)np, (unsigned long long)dx[0]);

  f->x = xmalloc(MUL_SIZE(MUL_SIZE(n, (size_t)f->d), sizeof(float)));
  need(path, h5util_dset_read(xs, "features", dx[0] * dx[1], H5T_NATIVE_FLOAT, f->x));
  int64_t *lab64 = xmalloc(MUL_SIZE(n, sizeof(int64_t)));
  need(path, h5util_dset_read(ls, "labels", dl[0], H5T_NATIVE_INT64, lab64));
  f->labels = xmalloc(MUL_SIZE(n, sizeof(int32_t)));
  for (size_t i = 0; i < n; i++) {
    if (lab64[i] < 0 || lab64[i] >= f->nclasses)
      bad(path, "labels[%zu] = %" PRId64 " is outside 0..%d (%d class names)", i, lab64[i], f->nclasses - 1,
          f->nclasses);
    f->labels[i] = (int32_t)lab64[i];
  }
  free(lab64);
  f->index = xmalloc(MUL_SIZE(n, sizeof(int64_t)));
  need(path, h5util_dset_read(is_, "index", di[0], H5T_NATIVE_INT64, f->index));
  CHECK_H5(H5Dclose(xs));
  CHECK_H5(H5Dclose(ls));
  CHECK_H5(H5Dclose(is_));
  CHECK_H5(H5Fclose(fid));
  validate(path, f);
}

void features_free(struct features *f) {
  if (f->paths)
    for (int64_t i = 0; i < f->n; i++) free(f->paths[i]);
  if (f->class_names)
    for (int c = 0; c < f->nclasses; c++) free(f->class_names[c]);
  free(f->paths);
  free(f->class_names);
  free(f->x);
  free(f->labels);
  free(f->index);
  memset(f, 0, sizeof *f);
}

void features_l2_normalize(float *x, int64_t n, int d) {
  for (int64_t i = 0; i < n; i++) {
    float *row = x + (size_t)i * (size_t)d;
    double ss = 0;
    for (int j = 0; j < d; j++) ss += (double)row[j] * (double)row[j];
    double norm = sqrt(ss);
    double s = 1.0 / (norm > 1e-12 ? norm : 1e-12);
    for (int j = 0; j < d; j++) row[j] = (float)((double)row[j] * s);
  }
}

void features_filename(char *buf, size_t n, int64_t epoch) {
  snprintf(buf, n, "features_%04" PRId64 ".h5", epoch);
}

/* "features_<digits>.h5" -> epoch, else -1. */
static int64_t parse_name(const char *name) {
  const char *pre = "features_";
  size_t lp = strlen(pre);
  if (strncmp(name, pre, lp) != 0) return -1;
  const char *p = name + lp;
  int64_t e = 0;
  int digits = 0;
  while (*p >= '0' && *p <= '9') {
    if (e > (INT64_MAX - 9) / 10) return -1;
    e = e * 10 + (*p - '0');
    p++;
    digits++;
  }
  if (digits == 0 || strcmp(p, ".h5") != 0) return -1;
  return e;
}

int features_find_latest(const char *run_dir, char *path, size_t n, int64_t *epoch) {
  DIR *dir = opendir(run_dir);
  if (!dir) return -1;
  int64_t best = -1;
  char bestname[512] = "";
  struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    int64_t e = parse_name(de->d_name);
    /* Same epoch written with more zero padding: keep the first name in byte order. */
    if (e > best || (e == best && e >= 0 && strcmp(de->d_name, bestname) < 0)) {
      best = e;
      snprintf(bestname, sizeof bestname, "%s", de->d_name);
    }
  }
  closedir(dir);
  if (best < 0) return -1;
  fs_join(path, n, run_dir, bestname);
  *epoch = best;
  return 0;
}
