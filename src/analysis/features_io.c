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

void features_write(const char *path, const struct features *f) {
  SCD_ASSERT(f->n > 0 && f->d > 0 && f->nclasses > 0);
  char tmp[4096];
  fs_atomic_begin(path, tmp, sizeof tmp);
  hid_t fid = (hid_t)CHECK_H5(H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  hsize_t d2[2] = {(hsize_t)f->n, (hsize_t)f->d};
  hsize_t d1[1] = {(hsize_t)f->n};
  h5util_write_dset(fid, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, f->x);
  h5util_write_dset(fid, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, f->labels);
  h5util_write_dset(fid, "index", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d1, f->index);
  h5util_write_strings(fid, "paths", (const char *const *)f->paths, (hsize_t)f->n);
  h5util_write_strings(fid, "class_names", (const char *const *)f->class_names, (hsize_t)f->nclasses);
  h5util_write_attr_str(fid, "format", FEATURES_FORMAT);
  h5util_write_attr_i64(fid, "version", FEATURES_VERSION);
  h5util_write_attr_str(fid, "checkpoint", f->checkpoint);
  h5util_write_attr_str(fid, "checkpoint_key", f->checkpoint_key);
  h5util_write_attr_i64(fid, "epoch", f->epoch);
  CHECK_H5(H5Fclose(fid));
  fs_atomic_commit(tmp, path);
}

/* ---- Reading -------------------------------------------------------------------------------- */

/* Limits on what a features file may claim, checked before anything is allocated: the kNN keeps
 * per-class tables (k x classes x classes counts), and rows are bounded by the shard set's index. */
#define FEATURES_MAX_ROWS ((hsize_t)INT32_MAX)
#define FEATURES_MAX_DIM 1000000
#define FEATURES_MAX_CLASSES 10000
/* A compressed dataset may hold at most this many bytes per stored byte (deflate: about 1032). */
#define FEATURES_MAX_RATIO 4096

SCD_NORETURN SCD_PRINTF(2, 3) static void bad(const char *path, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  scd_fatal(SCD_EXIT_DATA, "features file %s: %s", path, msg);
}

/* Open a dataset that must exist, with the expected rank and type class; dims gets its shape. */
static hid_t open_dset(hid_t fid, const char *path, const char *name, int rank, H5T_class_t cls,
                       const char *what, hsize_t *dims) {
  if (H5Lexists(fid, name, H5P_DEFAULT) <= 0) bad(path, "missing dataset '%s'", name);
  hid_t d = H5Dopen2(fid, name, H5P_DEFAULT);
  if (d < 0) bad(path, "'%s' is not a dataset", name);
  hid_t t = (hid_t)CHECK_H5(H5Dget_type(d));
  H5T_class_t c = H5Tget_class(t);
  CHECK_H5(H5Tclose(t));
  if (c != cls) bad(path, "dataset '%s' must hold %s", name, what);
  hid_t sp = (hid_t)CHECK_H5(H5Dget_space(d));
  int r = H5Sget_simple_extent_ndims(sp);
  if (r != rank) bad(path, "dataset '%s' has %d dimension%s, expected %d", name, r, r == 1 ? "" : "s", rank);
  CHECK_H5(H5Sget_simple_extent_dims(sp, dims, NULL));
  CHECK_H5(H5Sclose(sp));
  return d;
}

/* A dataset must store what its shape claims before it is read: an unwritten (or forged) chunked
 * dataset claims any shape in a few bytes, and reading it would allocate and fill all of it.
 * Variable-length strings count one byte each. */
static void check_stored(hid_t d, const char *path, const char *name, hsize_t nelem) {
  if (nelem == 0) return;
  hid_t t = (hid_t)CHECK_H5(H5Dget_type(d)), dcpl = (hid_t)CHECK_H5(H5Dget_create_plist(d));
  double elem = H5Tis_variable_str(t) > 0 ? 1.0 : (double)H5Tget_size(t);
  int filters = H5Pget_nfilters(dcpl);
  CHECK_H5(H5Tclose(t));
  CHECK_H5(H5Pclose(dcpl));
  hsize_t stored = H5Dget_storage_size(d);
  double need = (double)nelem * elem, have = (double)stored;
  if (filters > 0 ? have * FEATURES_MAX_RATIO < need : have < need)
    bad(path, "dataset '%s' claims %llu values but stores only %llu bytes (damaged or forged file)", name,
        (unsigned long long)nelem, (unsigned long long)stored);
}

static void read_dset(hid_t d, hid_t memtype, void *buf, const char *path, const char *name) {
  if (H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    bad(path, "cannot read dataset '%s' (damaged file, or values that do not fit the type)", name);
}

/* A 1-D string dataset (variable or fixed length) as n malloc'd C strings; its length must lie in
 * lo..hi (checked before anything is allocated; `what` words the complaint). */
static char **read_strings(hid_t fid, const char *path, const char *name, hsize_t *n, hsize_t lo, hsize_t hi,
                           const char *what) {
  hid_t d = open_dset(fid, path, name, 1, H5T_STRING, "strings", n);
  if (*n < lo || *n > hi) bad(path, "'%s' %s", name, what);
  check_stored(d, path, name, *n);
  hid_t ft = (hid_t)CHECK_H5(H5Dget_type(d));
  size_t count = (size_t)*n;
  char **out = xcalloc(count ? count : 1, sizeof *out);
  if (H5Tis_variable_str(ft) > 0) {
    hid_t mt = (hid_t)CHECK_H5(H5Tcopy(H5T_C_S1));
    CHECK_H5(H5Tset_size(mt, H5T_VARIABLE));
    CHECK_H5(H5Tset_cset(mt, H5Tget_cset(ft)));
    char **raw = xcalloc(count ? count : 1, sizeof *raw);
    read_dset(d, mt, raw, path, name);
    for (size_t i = 0; i < count; i++) out[i] = xstrdup(raw[i] ? raw[i] : "");
    hid_t sp = (hid_t)CHECK_H5(H5Dget_space(d));
    CHECK_H5(H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, raw));
    CHECK_H5(H5Sclose(sp));
    free(raw);
    CHECK_H5(H5Tclose(mt));
  } else {
    size_t sz = H5Tget_size(ft);
    if (sz == 0) bad(path, "dataset '%s' has zero-length strings", name);
    hid_t mt = (hid_t)CHECK_H5(H5Tcopy(ft));
    char *raw = xmalloc(MUL_SIZE(count ? count : 1, sz));
    read_dset(d, mt, raw, path, name);
    for (size_t i = 0; i < count; i++) {
      const char *s = raw + i * sz;
      size_t len = strnlen(s, sz);
      while (len > 0 && s[len - 1] == ' ') len--; /* space-padded strings (Fortran style) */
      out[i] = xmalloc(len + 1);
      memcpy(out[i], s, len);
      out[i][len] = '\0';
    }
    free(raw);
    CHECK_H5(H5Tclose(mt));
  }
  CHECK_H5(H5Tclose(ft));
  CHECK_H5(H5Dclose(d));
  return out;
}

static hid_t open_attr(hid_t fid, const char *path, const char *name, H5T_class_t cls, const char *what) {
  if (H5Aexists(fid, name) <= 0) bad(path, "missing root attribute '%s'", name);
  hid_t a = (hid_t)CHECK_H5(H5Aopen(fid, name, H5P_DEFAULT));
  hid_t t = (hid_t)CHECK_H5(H5Aget_type(a));
  H5T_class_t c = H5Tget_class(t);
  CHECK_H5(H5Tclose(t));
  hid_t sp = (hid_t)CHECK_H5(H5Aget_space(a));
  hssize_t npts = H5Sget_simple_extent_npoints(sp);
  CHECK_H5(H5Sclose(sp));
  if (c != cls || npts != 1) bad(path, "root attribute '%s' must be a single %s", name, what);
  return a;
}

static void read_attr_string(hid_t fid, const char *path, const char *name, char *buf, size_t n) {
  hid_t a = open_attr(fid, path, name, H5T_STRING, "string");
  hid_t ft = (hid_t)CHECK_H5(H5Aget_type(a));
  if (H5Tis_variable_str(ft) > 0) {
    hid_t mt = (hid_t)CHECK_H5(H5Tcopy(H5T_C_S1));
    CHECK_H5(H5Tset_size(mt, H5T_VARIABLE));
    CHECK_H5(H5Tset_cset(mt, H5Tget_cset(ft))); /* HDF5 converts no character sets */
    char *s = NULL;
    if (H5Aread(a, mt, &s) < 0) bad(path, "cannot read root attribute '%s'", name);
    snprintf(buf, n, "%s", s ? s : "");
    H5free_memory(s);
    CHECK_H5(H5Tclose(mt));
  } else {
    size_t sz = H5Tget_size(ft);
    char *raw = xcalloc(sz + 1, 1);
    if (H5Aread(a, ft, raw) < 0) bad(path, "cannot read root attribute '%s'", name);
    size_t len = strnlen(raw, sz);
    while (len > 0 && raw[len - 1] == ' ') len--;
    raw[len] = '\0';
    snprintf(buf, n, "%s", raw);
    free(raw);
  }
  CHECK_H5(H5Tclose(ft));
  CHECK_H5(H5Aclose(a));
}

static int64_t read_attr_i64(hid_t fid, const char *path, const char *name) {
  hid_t a = open_attr(fid, path, name, H5T_INTEGER, "integer");
  int64_t v = 0;
  if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) bad(path, "cannot read root attribute '%s'", name);
  CHECK_H5(H5Aclose(a));
  return v;
}

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
  if (!fs_exists(path)) bad(path, "no such file");
  htri_t is = H5Fis_hdf5(path);
  if (is <= 0) bad(path, "not an HDF5 file (or it cannot be read)");
  hid_t fid = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fid < 0) bad(path, "cannot open the HDF5 file");

  char fmt[256];
  read_attr_string(fid, path, "format", fmt, sizeof fmt);
  if (strcmp(fmt, FEATURES_FORMAT) != 0)
    bad(path, "format attribute is '%s', expected '%s' (not a scdino features file)", fmt, FEATURES_FORMAT);
  int64_t version = read_attr_i64(fid, path, "version");
  if (version != FEATURES_VERSION)
    bad(path, "format version %" PRId64 " is not supported (this scdino reads version %d)", version,
        FEATURES_VERSION);
  read_attr_string(fid, path, "checkpoint", f->checkpoint, sizeof f->checkpoint);
  read_attr_string(fid, path, "checkpoint_key", f->checkpoint_key, sizeof f->checkpoint_key);
  f->epoch = read_attr_i64(fid, path, "epoch");

  hsize_t dx[2], dl[1], di[1], dp[1], dc[1];
  hid_t xs = open_dset(fid, path, "features", 2, H5T_FLOAT, "floating-point values", dx);
  hid_t ls = open_dset(fid, path, "labels", 1, H5T_INTEGER, "integers", dl);
  hid_t is_ = open_dset(fid, path, "index", 1, H5T_INTEGER, "integers", di);
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
  check_stored(xs, path, "features", dx[0] * dx[1]);
  check_stored(ls, path, "labels", dl[0]);
  check_stored(is_, path, "index", di[0]);
  f->n = (int64_t)dx[0];
  f->d = (int)dx[1];
  size_t n = (size_t)f->n;

  char what[128];
  hid_t cs = open_dset(fid, path, "class_names", 1, H5T_STRING, "strings", dc);
  CHECK_H5(H5Dclose(cs));
  snprintf(what, sizeof what, "holds %llu names (1 to %d are supported)", (unsigned long long)dc[0],
           FEATURES_MAX_CLASSES);
  f->class_names = read_strings(fid, path, "class_names", dc, 1, FEATURES_MAX_CLASSES, what);
  f->nclasses = (int)dc[0];
  hid_t ps = open_dset(fid, path, "paths", 1, H5T_STRING, "strings", dp);
  CHECK_H5(H5Dclose(ps));
  snprintf(what, sizeof what, "has %llu rows but 'features' has %llu", (unsigned long long)dp[0],
           (unsigned long long)dx[0]);
  f->paths = read_strings(fid, path, "paths", dp, dx[0], dx[0], what);

  f->x = xmalloc(MUL_SIZE(MUL_SIZE(n, (size_t)f->d), sizeof(float)));
  read_dset(xs, H5T_NATIVE_FLOAT, f->x, path, "features");
  int64_t *lab64 = xmalloc(MUL_SIZE(n, sizeof(int64_t)));
  read_dset(ls, H5T_NATIVE_INT64, lab64, path, "labels");
  f->labels = xmalloc(MUL_SIZE(n, sizeof(int32_t)));
  for (size_t i = 0; i < n; i++) {
    if (lab64[i] < 0 || lab64[i] >= f->nclasses)
      bad(path, "labels[%zu] = %" PRId64 " is outside 0..%d (%d class names)", i, lab64[i], f->nclasses - 1,
          f->nclasses);
    f->labels[i] = (int32_t)lab64[i];
  }
  free(lab64);
  f->index = xmalloc(MUL_SIZE(n, sizeof(int64_t)));
  read_dset(is_, H5T_NATIVE_INT64, f->index, path, "index");
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
