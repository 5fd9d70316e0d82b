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

/* 'metadata_columns' and the group 'metadata' with a string dataset [n] per column. */
static void write_metadata(hid_t fid, const struct features *f) {
  if (f->nmeta == 0) return;
  SCD_ASSERT(f->meta && f->meta_names);
  h5util_dset_write_strs(fid, "metadata_columns", (const char *const *)f->meta_names, (hsize_t)f->nmeta);
  hid_t g = h5util_group_create(fid, "metadata");
  for (int m = 0; m < f->nmeta; m++)
    h5util_dset_write_strs(g, f->meta_names[m], (const char *const *)f->meta + (size_t)m * (size_t)f->n,
                           (hsize_t)f->n);
  CHECK_H5(H5Gclose(g));
}

void features_write_meta(hid_t fid, const struct features *f) {
  SCD_ASSERT(f->n > 0 && f->d > 0 && f->nclasses >= 0);
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
  if (f->normalization[0]) h5util_attr_write_str(fid, "normalization", f->normalization);
  if (f->nnorm > 0) {
    h5util_attr_write(fid, "norm_mean", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, (hsize_t)f->nnorm, f->norm_mean);
    h5util_attr_write(fid, "norm_std", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, (hsize_t)f->nnorm, f->norm_std);
  }
  if (f->n_last_blocks > 1 || f->avgpool) { /* today's one CLS token writes none: the same file as before */
    const int parts = f->n_last_blocks + f->avgpool;
    SCD_ASSERT(f->d % parts == 0 && f->depth >= f->n_last_blocks && f->n_last_blocks <= 256);
    int64_t blocks[256];
    for (int k = 0; k < f->n_last_blocks; k++) blocks[k] = f->depth - f->n_last_blocks + k;
    h5util_attr_write_i64(fid, "n_last_blocks", f->n_last_blocks);
    h5util_attr_write_i64(fid, "avgpool_patchtokens", f->avgpool);
    h5util_attr_write_i64(fid, "embed_dim", f->d / parts);
    h5util_attr_write(fid, "blocks", H5T_STD_I64LE, H5T_NATIVE_INT64, (hsize_t)f->n_last_blocks, blocks);
  }
  write_metadata(fid, f);
}

void features_write(const char *path, const struct features *f) {
  SCD_ASSERT(f->n > 0 && f->d > 0 && f->nclasses >= 0);
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
#define FEATURES_MAX_META 256

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

/* What the kNN relies on of the index (labels were range-checked while reading): unique,
 * non-negative values. */
static void validate_index(const char *path, const struct features *f) {
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
}

/* Row i as the kNN relies on it: finite, unit length. */
static void validate_row(const char *path, const struct features *f, int64_t i, const float *row) {
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

/* The file's format, attributes and the shape of 'features' (its dataset left open in *xs). */
static hid_t open_checked(const char *path, struct features *f, hid_t *xs) {
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
  hsize_t dx[2];
  need(path, h5util_dset_open(fid, "features", 2, H5T_FLOAT, dx, xs));
  if (dx[0] == 0 || dx[1] == 0)
    bad(path, "dataset 'features' is empty (%llu x %llu)", (unsigned long long)dx[0], (unsigned long long)dx[1]);
  if (dx[1] > FEATURES_MAX_DIM) bad(path, "dataset 'features' has %llu columns; that is not a feature dimension",
                           (unsigned long long)dx[1]);
  if (dx[0] > FEATURES_MAX_ROWS)
    bad(path, "dataset 'features' has %llu rows, more than the limit of %llu", (unsigned long long)dx[0],
        (unsigned long long)FEATURES_MAX_ROWS);
  /* Before anything is allocated for them (every read checks its part again). */
  need(path, h5util_dset_stored(*xs, "features", dx[0] * dx[1]));
  if (f->n == 0) {
    f->n = (int64_t)dx[0];
    f->d = (int)dx[1];
  } else if ((int64_t)dx[0] != f->n || (int)dx[1] != f->d) {
    bad(path, "'features' is %llu x %llu now, %" PRId64 " x %d when it was first read (the file was replaced)",
        (unsigned long long)dx[0], (unsigned long long)dx[1], f->n, f->d);
  }
  return fid;
}

/* The row layout attributes, when there (else one CLS token per row), checked against the width. */
static void read_layout(const char *path, hid_t fid, struct features *f) {
  int64_t nl = 1, ap = 0, dim = f->d;
  f->n_last_blocks = 1;
  if (!h5util_optional("features file", path, h5util_attr_read_i64(fid, "n_last_blocks", &nl))) return;
  need(path, h5util_attr_read_i64(fid, "avgpool_patchtokens", &ap));
  need(path, h5util_attr_read_i64(fid, "embed_dim", &dim));
  if (nl < 1 || nl > 256 || (ap != 0 && ap != 1) || dim < 1 || (nl + ap) * dim != f->d)
    bad(path, "row layout n_last_blocks = %" PRId64 ", avgpool_patchtokens = %" PRId64 ", embed_dim = %" PRId64
        " does not make the %d values of a row", nl, ap, dim, f->d);
  int64_t blocks[256];
  int nb = 0;
  need(path, h5util_attr_read_i64s(fid, "blocks", blocks, 256, &nb));
  if (nb != nl || blocks[0] < 0)
    bad(path, "attribute 'blocks' does not list the n_last_blocks = %" PRId64 " blocks of a row", nl);
  for (int k = 1; k < nb; k++)
    if (blocks[k] != blocks[k - 1] + 1) bad(path, "attribute 'blocks' does not list consecutive blocks");
  f->n_last_blocks = (int)nl;
  f->avgpool = (int)ap;
  f->depth = (int)(blocks[nb - 1] + 1);
}

/* The metadata columns' names, and a string dataset [n] storing its bytes for each (not read). */
static void check_metadata(const char *path, hid_t fid, struct features *f) {
  int64_t nm = 0;
  if (!h5util_optional("features file", path,
                       h5util_dset_read_strs(fid, "metadata_columns", FEATURES_MAX_META, &f->meta_names, &nm)))
    return;
  f->nmeta = (int)nm;
  for (int m = 0; m < f->nmeta; m++) {
    const char *name = f->meta_names[m];
    if (!name[0] || strchr(name, '/') || !strcmp(name, "."))
      bad(path, "metadata column name '%s' is not a dataset name", name);
    char ds[300];
    snprintf(ds, sizeof ds, "metadata/%s", name);
    hsize_t dims[1];
    hid_t d;
    need(path, h5util_dset_open(fid, ds, 1, H5T_STRING, dims, &d));
    if (dims[0] != (hsize_t)f->n)
      bad(path, "'%s' has %llu rows but 'features' has %" PRId64, ds, (unsigned long long)dims[0], f->n);
    need(path, h5util_dset_stored(d, ds, dims[0]));
    CHECK_H5(H5Dclose(d));
  }
}

void features_read_metadata(const char *path, struct features *f) {
  if (f->nmeta == 0 || f->meta) return;
  hid_t fid;
  need(path, h5util_file_open(path, &fid));
  f->meta = xcalloc(MUL_SIZE((size_t)f->nmeta, (size_t)f->n), sizeof *f->meta);
  for (int m = 0; m < f->nmeta; m++) {
    char ds[300], **col = NULL;
    int64_t nr = 0;
    snprintf(ds, sizeof ds, "metadata/%s", f->meta_names[m]);
    need(path, h5util_dset_read_strs(fid, ds, f->n, &col, &nr));
    if (nr != f->n) bad(path, "'%s' has %lld rows but 'features' has %" PRId64, ds, (long long)nr, f->n);
    memcpy(f->meta + (size_t)m * (size_t)f->n, col, (size_t)nr * sizeof *col);
    free(col);
  }
  CHECK_H5(H5Fclose(fid));
}

void features_read_meta(const char *path, struct features *f) {
  memset(f, 0, sizeof *f);
  hid_t xs, fid = open_checked(path, f, &xs);
  CHECK_H5(H5Dclose(xs));
  need(path, h5util_attr_read_str(fid, "checkpoint", f->checkpoint, sizeof f->checkpoint));
  need(path, h5util_attr_read_str(fid, "checkpoint_key", f->checkpoint_key, sizeof f->checkpoint_key));
  need(path, h5util_attr_read_i64(fid, "epoch", &f->epoch));
  read_layout(path, fid, f);

  hsize_t dl[1], di[1];
  hid_t ls, is_;
  need(path, h5util_dset_open(fid, "labels", 1, H5T_INTEGER, dl, &ls));
  need(path, h5util_dset_open(fid, "index", 1, H5T_INTEGER, di, &is_));
  if (dl[0] != (hsize_t)f->n)
    bad(path, "'labels' has %llu rows but 'features' has %" PRId64, (unsigned long long)dl[0], f->n);
  if (di[0] != (hsize_t)f->n)
    bad(path, "'index' has %llu rows but 'features' has %" PRId64, (unsigned long long)di[0], f->n);
  need(path, h5util_dset_stored(ls, "labels", dl[0]));
  need(path, h5util_dset_stored(is_, "index", di[0]));
  const size_t n = (size_t)f->n;

  /* 'paths' is checked, not read (the kNN does not need it; features_read reads it) */
  hsize_t dp[1];
  hid_t ps;
  need(path, h5util_dset_open(fid, "paths", 1, H5T_STRING, dp, &ps));
  if (dp[0] > (hsize_t)f->n)
    bad(path, "dataset 'paths' has %llu entries; at most %" PRId64 " are allowed", (unsigned long long)dp[0], f->n);
  need(path, h5util_dset_stored(ps, "paths", dp[0]));
  CHECK_H5(H5Dclose(ps));
  if (dp[0] != (hsize_t)f->n)
    bad(path, "'paths' has %llu rows but 'features' has %" PRId64, (unsigned long long)dp[0], f->n);

  int64_t nc = 0;
  need(path, h5util_dset_read_strs(fid, "class_names", FEATURES_MAX_CLASSES, &f->class_names, &nc));
  f->nclasses = (int)nc; /* 0: unlabelled rows, every label -1 */
  check_metadata(path, fid, f);

  int64_t *lab64 = xmalloc(MUL_SIZE(n, sizeof(int64_t)));
  need(path, h5util_dset_read(ls, "labels", dl[0], H5T_NATIVE_INT64, lab64));
  f->labels = xmalloc(MUL_SIZE(n, sizeof(int32_t)));
  for (size_t i = 0; i < n; i++) {
    if (f->nclasses == 0 && lab64[i] != -1)
      bad(path, "labels[%zu] = %" PRId64 ", but the file names no classes (unlabelled rows have label -1)", i,
          lab64[i]);
    if (f->nclasses > 0 && (lab64[i] < 0 || lab64[i] >= f->nclasses))
      bad(path, "labels[%zu] = %" PRId64 " is outside 0..%d (%d class names)", i, lab64[i], f->nclasses - 1,
          f->nclasses);
    f->labels[i] = (int32_t)lab64[i];
  }
  free(lab64);
  f->index = xmalloc(MUL_SIZE(n, sizeof(int64_t)));
  need(path, h5util_dset_read(is_, "index", di[0], H5T_NATIVE_INT64, f->index));
  CHECK_H5(H5Dclose(ls));
  CHECK_H5(H5Dclose(is_));
  CHECK_H5(H5Fclose(fid));
  validate_index(path, f);
}

/* Rows rows[0..n) (all rows in order when rows is NULL) into dst [n][d].  The file is read in
 * ascending row order, in windows of up to 16 MiB from one wanted row to the last wanted row
 * inside the window, so a share of rows scattered over the file costs sequential reads, and no
 * more than the window beside what is kept. */
struct want {
  int64_t row, at;
};
static int cmp_want(const void *a, const void *b) {
  const struct want *x = a, *y = b;
  return x->row != y->row ? (x->row > y->row) - (x->row < y->row) : (x->at > y->at) - (x->at < y->at);
}

static void read_rows(const char *path, const struct features *f, const int64_t *rows, int64_t n, float *dst) {
  if (n <= 0) return;
  const size_t d = (size_t)f->d, row_bytes = d * sizeof(float);
  struct want *w = NULL;
  if (rows) {
    w = xmalloc(MUL_SIZE((size_t)n, sizeof *w));
    for (int64_t i = 0; i < n; i++) {
      if (rows[i] < 0 || rows[i] >= f->n)
        bad(path, "row %" PRId64 " asked for; the file has %" PRId64, rows[i], f->n);
      w[i] = (struct want){rows[i], i};
    }
    qsort(w, (size_t)n, sizeof *w, cmp_want);
  }
  struct features shape = {.n = f->n, .d = f->d};
  hid_t xs, fid = open_checked(path, &shape, &xs);
  int64_t window = (int64_t)(((size_t)16 << 20) / row_bytes);
  if (window < 1) window = 1;
  float *buf = rows ? xmalloc(MUL_SIZE((size_t)(window < f->n ? window : f->n), row_bytes)) : NULL;
  for (int64_t i = 0; i < n;) {
    const int64_t r0 = rows ? w[i].row : i;
    int64_t j = i + 1;
    if (rows)
      while (j < n && w[j].row < r0 + window) j++;
    else
      j = n - i < window ? n : i + window;
    const int64_t cnt = (rows ? w[j - 1].row : j - 1) - r0 + 1;
    float *to = rows ? buf : dst + (size_t)r0 * d;
    hsize_t start[2] = {(hsize_t)r0, 0}, count[2] = {(hsize_t)cnt, (hsize_t)d};
    need(path, h5util_dset_read_slab(xs, "features", 2, start, count, H5T_NATIVE_FLOAT, to));
    for (int64_t k = i; k < j; k++) {
      const int64_t row = rows ? w[k].row : k;
      const float *src = to + (size_t)(row - r0) * d;
      validate_row(path, f, row, src);
      if (rows) memcpy(dst + (size_t)w[k].at * d, src, row_bytes);
    }
    i = j;
  }
  free(buf);
  free(w);
  CHECK_H5(H5Dclose(xs));
  CHECK_H5(H5Fclose(fid));
}

void features_read_rows(const char *path, const struct features *f, const int64_t *rows, int64_t n, float *dst) {
  SCD_ASSERT(rows != NULL || n == 0);
  read_rows(path, f, rows, n, dst);
}

void features_read_paths(const char *path, struct features *f) {
  hid_t fid;
  need(path, h5util_file_open(path, &fid));
  int64_t np = 0;
  need(path, h5util_dset_read_strs(fid, "paths", f->n, &f->paths, &np));
  if (np != f->n) bad(path, "'paths' has %lld rows but 'features' has %" PRId64, (long long)np, f->n);
  CHECK_H5(H5Fclose(fid));
}

void features_read(const char *path, struct features *f) {
  features_read_meta(path, f);
  features_read_paths(path, f);
  f->x = xmalloc(MUL_SIZE(MUL_SIZE((size_t)f->n, (size_t)f->d), sizeof(float)));
  read_rows(path, f, NULL, f->n, f->x);
  features_read_metadata(path, f);
}

void features_free(struct features *f) {
  if (f->paths)
    for (int64_t i = 0; i < f->n; i++) free(f->paths[i]);
  if (f->class_names)
    for (int c = 0; c < f->nclasses; c++) free(f->class_names[c]);
  free(f->paths);
  free(f->class_names);
  if (f->meta)
    for (size_t i = 0; i < (size_t)f->nmeta * (size_t)f->n; i++) free(f->meta[i]);
  for (int m = 0; f->meta_names && m < f->nmeta; m++) free(f->meta_names[m]);
  free(f->meta);
  free(f->meta_names);
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
