/* tests/unit/analysis/test_features_io.c - features_EEEE.h5: round trip, atomic write, file selection, one
 * malformed file per check of the reader (each must end with exit 3 and a message naming the file
 * and the problem), and the rows of an unlabelled set with metadata columns. */
#include "build_config.h"

#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features_io.h"
#include "tests/fixtures/testutil.h"

static const char *dir;

static void make_features(struct features *f, int64_t n, int d, int C) {
  memset(f, 0, sizeof *f);
  f->n = n;
  f->d = d;
  f->nclasses = C;
  f->x = malloc((size_t)(n * d) * sizeof *f->x);
  f->labels = malloc((size_t)n * sizeof *f->labels);
  f->index = malloc((size_t)n * sizeof *f->index);
  f->paths = malloc((size_t)n * sizeof *f->paths);
  f->class_names = malloc((size_t)C * sizeof *f->class_names);
  for (int64_t i = 0; i < n; i++) {
    for (int j = 0; j < d; j++) f->x[i * d + j] = (float)sin(0.37 * (double)(i * d + j) + 1.0);
    f->labels[i] = (int32_t)((i * 7) % C);
    f->index[i] = 1000 - 3 * i;
    char p[64];
    snprintf(p, sizeof p, "class%d/img_%03lld.tiff", f->labels[i], (long long)i);
    f->paths[i] = strdup(p);
  }
  for (int c = 0; c < C; c++) {
    char s[32];
    snprintf(s, sizeof s, c == 1 ? "CD4+ T cell" : "class%d", c);
    f->class_names[c] = strdup(s);
  }
  features_l2_normalize(f->x, n, d);
  snprintf(f->checkpoint, sizeof f->checkpoint, "run/checkpoint_0007.h5");
  snprintf(f->checkpoint_key, sizeof f->checkpoint_key, "teacher");
  f->epoch = 7;
}

static char *path_in(const char *name) {
  static char buf[8][4096];
  static int slot;
  char *p = buf[slot++ % 8];
  snprintf(p, 4096, "%s/%s", dir, name);
  return p;
}

static int count_files(const char *d, const char *needle) {
  DIR *dd = opendir(d);
  int n = 0;
  struct dirent *e;
  while (dd && (e = readdir(dd)))
    if (strstr(e->d_name, needle)) n++;
  if (dd) closedir(dd);
  return n;
}

static int read_features(void *file) {
  struct features f;
  features_read(file, &f);
  return 0;
}

/* features_read(file) in a child: it must exit with `code` and print `needle` and the file name. */
static void expect_fatal(const char *file, const char *needle) {
  char buf[8192];
  const int code = t_run_child(read_features, (void *)file, 0, buf, sizeof buf);
  T_CHECK(code == 3, "%s: exit status %d, wanted 3 (%s)", file, code, buf);
  T_CHECK(strstr(buf, needle) != NULL, "%s: message lacks '%s': %s", file, needle, buf);
  T_CHECK(strstr(buf, file) != NULL, "%s: message does not name the file: %s", file, buf);
  if (t_verbose) printf("  %s", buf);
}

/* ---- HDF5 surgery on a good file ------------------------------------------------------------- */

static hid_t open_rw(const char *file) {
  hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) exit(99);
  return f;
}

static void replace_dset(const char *file, const char *name, hid_t type, int rank, const hsize_t *dims,
                         const void *data) {
  hid_t f = open_rw(file);
  if (H5Lexists(f, name, H5P_DEFAULT) > 0) H5Ldelete(f, name, H5P_DEFAULT);
  hid_t sp = H5Screate_simple(rank, dims, NULL);
  hid_t d = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d < 0 || H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) exit(99);
  H5Dclose(d);
  H5Sclose(sp);
  H5Fclose(f);
}

static void delete_link(const char *file, const char *name) {
  hid_t f = open_rw(file);
  if (H5Ldelete(f, name, H5P_DEFAULT) < 0) exit(99);
  H5Fclose(f);
}

static void set_attr_i64(const char *file, const char *name, int64_t v) {
  hid_t f = open_rw(file);
  if (H5Aexists(f, name) > 0) H5Adelete(f, name);
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(sp);
  H5Fclose(f);
}

static void delete_attr(const char *file, const char *name) {
  hid_t f = open_rw(file);
  H5Adelete(f, name);
  H5Fclose(f);
}

/* ---- Tests ------------------------------------------------------------------------------------ */

static void test_round_trip(void) {
  struct features f, g;
  make_features(&f, 37, 5, 3);
  const char *p = path_in("features_0007.h5");
  features_write(p, &f);
  T_CHECK(count_files(dir, ".tmp.") == 0, "no temporary file left behind");
  features_read(p, &g);
  T_CHECK(g.n == 37 && g.d == 5 && g.nclasses == 3, "shape %lld x %d, %d classes", (long long)g.n, g.d, g.nclasses);
  T_CHECK(memcmp(f.x, g.x, 37 * 5 * sizeof(float)) == 0, "features bit-identical");
  T_CHECK(memcmp(f.labels, g.labels, 37 * sizeof(int32_t)) == 0, "labels");
  T_CHECK(memcmp(f.index, g.index, 37 * sizeof(int64_t)) == 0, "index");
  int same = 1;
  for (int i = 0; i < 37; i++) same &= strcmp(f.paths[i], g.paths[i]) == 0;
  T_CHECK(same, "paths");
  T_CHECK(strcmp(g.class_names[1], "CD4+ T cell") == 0 && strcmp(g.class_names[2], "class2") == 0, "class names");
  T_CHECK(strcmp(g.checkpoint, "run/checkpoint_0007.h5") == 0, "checkpoint attribute '%s'", g.checkpoint);
  T_CHECK(strcmp(g.checkpoint_key, "teacher") == 0, "checkpoint_key attribute");
  T_CHECK(g.epoch == 7, "epoch attribute");
  /* What other tools see: plain datasets and attributes. */
  size_t n;
  long long dims[8];
  int nd;
  float *x = t_h5_read_f32(p, "/features", &n, dims, &nd);
  T_CHECK(nd == 2 && dims[0] == 37 && dims[1] == 5, "features dataset [37, 5]");
  free(x);
  T_NEAR(t_h5_attr(p, "version"), FEATURES_VERSION, 0, "version attribute");
  T_NEAR(t_h5_attr(p, "epoch"), 7, 0, "epoch attribute");
  features_free(&g);

  /* Overwriting replaces the file whole. */
  f.epoch = 8;
  features_write(p, &f);
  features_read(p, &g);
  T_CHECK(g.epoch == 8, "rewritten file read back");
  features_free(&g);

  /* Fixed-length strings (as numpy 'S' arrays give) are read too, padding removed. */
  char fixed[37][16];
  memset(fixed, 0, sizeof fixed);
  for (int i = 0; i < 37; i++) snprintf(fixed[i], 16, "fixed/%02d.tif", i);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, 16);
  hsize_t d1 = 37;
  replace_dset(p, "paths", t, 1, &d1, fixed);
  H5Tclose(t);
  t_h5_set_attr_fixed_str(p, "checkpoint", "ckpt.h5", 0);
  features_read(p, &g);
  T_CHECK(strcmp(g.paths[0], "fixed/00.tif") == 0 && strcmp(g.paths[36], "fixed/36.tif") == 0, "fixed-length paths");
  T_CHECK(strcmp(g.checkpoint, "ckpt.h5") == 0, "fixed-length attribute");
  features_free(&g);
  features_free(&f);
}

/* features_read_rows(file, meta, rows) in a child (the args are a static struct). */
static struct {
  const char *file;
  const int64_t *rows;
  int64_t n;
} rows_args;
static int read_some_rows(void *unused) {
  (void)unused;
  struct features m;
  features_read_meta(rows_args.file, &m);
  float *x = malloc((size_t)(rows_args.n * m.d) * sizeof *x);
  features_read_rows(rows_args.file, &m, rows_args.rows, rows_args.n, x);
  return 0;
}

/* The kNN's reads: the metadata alone, then rows in any order (repeats included), across the
 * reader's 16 MiB windows: the same bits as the whole read; only the rows read are validated. */
static void test_read_rows(void) {
  struct features f, m, g;
  const int64_t n = 70000;
  const int d = 64; /* 16 MiB = 65,536 rows: two windows */
  make_features(&f, n, d, 4);
  for (int64_t i = 0; i < n; i++) f.index[i] = 3 * i + 1;
  const char *p = path_in("features_rows.h5");
  features_write(p, &f);
  features_read_meta(p, &m);
  T_CHECK(m.x == NULL && m.paths == NULL, "the metadata read leaves the rows and paths out");
  T_CHECK(m.n == n && m.d == d && m.nclasses == 4 && m.epoch == 7, "metadata shape %lld x %d", (long long)m.n, m.d);
  T_CHECK(memcmp(m.labels, f.labels, (size_t)n * sizeof(int32_t)) == 0, "metadata labels");
  T_CHECK(memcmp(m.index, f.index, (size_t)n * sizeof(int64_t)) == 0, "metadata index");
  int64_t rows[] = {69999, 0, 65535, 65536, 12, 12, 65537, 1, 69998, 30000};
  const int64_t nr = (int64_t)(sizeof rows / sizeof rows[0]);
  float *x = malloc((size_t)(nr * d) * sizeof *x);
  features_read_rows(p, &m, rows, nr, x);
  int same = 1;
  for (int64_t i = 0; i < nr; i++) same &= memcmp(x + i * d, f.x + rows[i] * d, (size_t)d * sizeof(float)) == 0;
  T_CHECK(same, "rows in the order asked, across two windows, bit-identical");
  features_read(p, &g);
  T_CHECK(memcmp(g.x, f.x, (size_t)(n * d) * sizeof(float)) == 0, "the whole read over two windows");
  features_free(&g);

  /* A NaN in row 65540: a read that skips it passes, one that asks for it names it. */
  f.x[65540 * d + 3] = NAN;
  features_write(p, &f);
  features_read_rows(p, &m, rows, nr, x);
  T_CHECK(1, "rows around a bad row read");
  int64_t bad_rows[] = {5, 65540};
  rows_args.file = p, rows_args.rows = bad_rows, rows_args.n = 2;
  char buf[8192];
  int code = t_run_child(read_some_rows, NULL, 0, buf, sizeof buf);
  T_CHECK(code == 3 && strstr(buf, "features[65540, 3] is NaN") && strstr(buf, p), "the bad row named (exit %d): %s",
          code, buf);
  int64_t beyond[] = {n};
  rows_args.rows = beyond, rows_args.n = 1;
  code = t_run_child(read_some_rows, NULL, 0, buf, sizeof buf);
  T_CHECK(code == 3 && strstr(buf, "row 70000 asked for; the file has 70000"), "a row past the end (exit %d): %s",
          code, buf);
  free(x);
  features_free(&m);
  features_free(&f);
}

static void test_helpers(void) {
  float x[] = {3, 4, 0, 0, 1, 1};
  features_l2_normalize(x, 3, 2);
  T_NEAR(x[0], 0.6, 1e-7, "normalised x0");
  T_NEAR(x[1], 0.8, 1e-7, "normalised x1");
  T_CHECK(x[2] == 0 && x[3] == 0, "a zero row stays zero");
  T_NEAR(x[4], 1 / sqrt(2.0), 1e-7, "normalised x4");
  char buf[64];
  features_filename(buf, sizeof buf, 12);
  T_CHECK(strcmp(buf, "features_0012.h5") == 0, "filename %s", buf);
  features_filename(buf, sizeof buf, 12345);
  T_CHECK(strcmp(buf, "features_12345.h5") == 0, "filename %s", buf);

  /* The newest by epoch number, not by name or time; other names are ignored. */
  char sub[4200];
  snprintf(sub, sizeof sub, "%s/pick", dir);
  char cmd[8600];
  snprintf(cmd, sizeof cmd,
           "mkdir -p %s && cd %s && touch features_0002.h5 features_0010.h5 features_0009.h5 features_x.h5 "
           "features_0011.h5.tmp.99 features_12.txt features_.h5 old_features_0099.h5",
           sub, sub);
  if (system(cmd) != 0) exit(99);
  char path[4096];
  int64_t e = -1;
  T_CHECK(features_find_latest(sub, path, sizeof path, &e) == 0 && e == 10, "newest epoch %lld", (long long)e);
  T_CHECK(strstr(path, "/pick/features_0010.h5") != NULL, "newest file %s", path);
  snprintf(cmd, sizeof cmd, "touch %s/features_100.h5", sub);
  if (system(cmd) != 0) exit(99);
  T_CHECK(features_find_latest(sub, path, sizeof path, &e) == 0 && e == 100, "epoch 100 beats 0010");
  T_CHECK(features_find_latest(path_in("no-such-dir"), path, sizeof path, &e) == -1, "missing directory");
  snprintf(cmd, sizeof cmd, "mkdir -p %s/empty", dir);
  if (system(cmd) != 0) exit(99);
  T_CHECK(features_find_latest(path_in("empty"), path, sizeof path, &e) == -1, "no features file");
}

/* A good file under a new name, to be damaged. */
static const char *good_copy(const char *name, struct features *f) {
  const char *p = path_in(name);
  features_write(p, f);
  return p;
}

static void test_malformed(void) {
  struct features f;
  make_features(&f, 12, 4, 3);
  const char *p;

  expect_fatal(path_in("absent.h5"), "no such file");
  p = path_in("text.h5");
  FILE *fp = fopen(p, "w");
  fputs("this is not HDF5\n", fp);
  fclose(fp);
  expect_fatal(p, "not a readable HDF5 file");

  p = good_copy("no_labels.h5", &f);
  delete_link(p, "labels");
  expect_fatal(p, "dataset 'labels' is missing");
  p = good_copy("no_features.h5", &f);
  delete_link(p, "features");
  expect_fatal(p, "dataset 'features' is missing");
  p = good_copy("no_index.h5", &f);
  delete_link(p, "index");
  expect_fatal(p, "dataset 'index' is missing");
  p = good_copy("no_paths.h5", &f);
  delete_link(p, "paths");
  expect_fatal(p, "dataset 'paths' is missing");
  p = good_copy("no_classes.h5", &f);
  delete_link(p, "class_names");
  expect_fatal(p, "dataset 'class_names' is missing");

  int32_t lab13[13] = {0};
  hsize_t d13 = 13;
  p = good_copy("labels_13.h5", &f);
  replace_dset(p, "labels", H5T_NATIVE_INT32, 1, &d13, lab13);
  expect_fatal(p, "'labels' has 13 rows but 'features' has 12");
  int64_t idx11[11] = {0};
  hsize_t d11 = 11;
  p = good_copy("index_11.h5", &f);
  replace_dset(p, "index", H5T_NATIVE_INT64, 1, &d11, idx11);
  expect_fatal(p, "'index' has 11 rows but 'features' has 12");
  float flat[48] = {0};
  hsize_t d48 = 48;
  p = good_copy("features_1d.h5", &f);
  replace_dset(p, "features", H5T_NATIVE_FLOAT, 1, &d48, flat);
  expect_fatal(p, "dataset 'features' has 1 dimension, expected 2");
  hsize_t d3[3] = {12, 2, 2};
  p = good_copy("features_3d.h5", &f);
  replace_dset(p, "features", H5T_NATIVE_FLOAT, 3, d3, flat);
  expect_fatal(p, "dataset 'features' has 3 dimensions, expected 2");
  int32_t ints[48] = {0};
  hsize_t d2[2] = {12, 4};
  p = good_copy("features_int.h5", &f);
  replace_dset(p, "features", H5T_NATIVE_INT32, 2, d2, ints);
  expect_fatal(p, "dataset 'features' must hold floating-point values");
  int32_t cls[3] = {0, 1, 2};
  hsize_t dc = 3;
  p = good_copy("classes_int.h5", &f);
  replace_dset(p, "class_names", H5T_NATIVE_INT32, 1, &dc, cls);
  expect_fatal(p, "dataset 'class_names' must hold strings");

  p = good_copy("format.h5", &f);
  t_h5_set_attr_fixed_str(p, "format", "scdino-checkpoint", 0);
  expect_fatal(p, "format attribute is 'scdino-checkpoint', expected 'scdino-features'");
  p = good_copy("version.h5", &f);
  set_attr_i64(p, "version", 3);
  expect_fatal(p, "format version 3 is not supported (this scdino reads versions 1 to 2)");
  p = good_copy("no_format.h5", &f);
  delete_attr(p, "format");
  expect_fatal(p, "attribute 'format' is missing");
  p = good_copy("no_epoch.h5", &f);
  delete_attr(p, "epoch");
  expect_fatal(p, "attribute 'epoch' is missing");

  /* Bad values: written through features_write, which does not judge them. */
  f.x[3 * 4 + 2] = NAN;
  expect_fatal(good_copy("nan.h5", &f), "features[3, 2] is NaN");
  f.x[3 * 4 + 2] = INFINITY;
  expect_fatal(good_copy("inf.h5", &f), "features[3, 2] is infinite");
  f.x[3 * 4 + 2] = 2.0f;
  expect_fatal(good_copy("norm.h5", &f), "row 3 of 'features' has length");
  features_l2_normalize(f.x + 3 * 4, 1, 4);
  f.labels[5] = 3;
  expect_fatal(good_copy("label_range.h5", &f), "labels[5] = 3 is outside 0..2 (3 class names)");
  f.labels[5] = -1;
  expect_fatal(good_copy("label_neg.h5", &f), "labels[5] = -1 is outside 0..2");
  f.labels[5] = 0;
  f.index[9] = f.index[2];
  expect_fatal(good_copy("dup_index.h5", &f), "appears twice (rows 2 and 9)");
  f.index[9] = -4;
  expect_fatal(good_copy("neg_index.h5", &f), "index[9] = -4 is negative");
  f.index[9] = 5000;
  /* And the repaired struct reads again. */
  struct features g;
  features_read(good_copy("repaired.h5", &f), &g);
  T_CHECK(g.n == 12, "repaired file reads");
  features_free(&g);
  features_free(&f);
}

/* Rows of an unlabelled shard set with metadata columns: written, read whole and in parts; the
 * reader's checks of them. */
static void test_metadata(void) {
  struct features f, g, m;
  make_features(&f, 6, 4, 1);
  free(f.class_names[0]);
  f.nclasses = 0;
  for (int64_t i = 0; i < f.n; i++) f.labels[i] = -1;
  f.nmeta = 2;
  f.meta_names = malloc(2 * sizeof *f.meta_names);
  f.meta_names[0] = strdup("donor");
  f.meta_names[1] = strdup("well, \"id\"");
  f.meta = malloc((size_t)(2 * f.n) * sizeof *f.meta);
  for (int64_t i = 0; i < f.n; i++) {
    char v[32];
    snprintf(v, sizeof v, "d%lld", (long long)(i % 3));
    f.meta[i] = strdup(v);
    snprintf(v, sizeof v, "W%02lld", (long long)i);
    f.meta[f.n + i] = strdup(v);
  }
  const char *p = path_in("features_meta.h5");
  features_write(p, &f);
  features_read(p, &g);
  T_CHECK(g.nclasses == 0 && g.labels[5] == -1, "unlabelled rows read back");
  T_CHECK(g.nmeta == 2 && !strcmp(g.meta_names[1], "well, \"id\"") && g.meta, "metadata columns read back");
  int same = g.nmeta == 2 && g.meta;
  for (int64_t i = 0; same && i < 2 * f.n; i++) same = !strcmp(g.meta[i], f.meta[i]);
  T_CHECK(same, "metadata values read back, column by column");
  features_free(&g);
  features_read_meta(p, &m);
  T_CHECK(m.nmeta == 2 && m.meta == NULL && !strcmp(m.meta_names[0], "donor"), "the kNN's read: names, no values");
  features_read_metadata(p, &m);
  T_CHECK(m.meta && !strcmp(m.meta[4], "d1") && !strcmp(m.meta[m.n + 4], "W04"), "values on demand");
  features_free(&m);

  /* What the reader refuses. */
  const char *q = good_copy("meta_labelled_row.h5", &f);
  const int32_t lab[6] = {-1, -1, 0, -1, -1, -1};
  const hsize_t n6 = 6;
  replace_dset(q, "labels", H5T_NATIVE_INT32, 1, &n6, lab);
  expect_fatal(q, "labels[2] = 0, but the file names no classes (unlabelled rows have label -1)");
  q = good_copy("meta_short.h5", &f);
  const char *five[5] = {"a", "b", "c", "d", "e"};
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  const hsize_t n5 = 5;
  replace_dset(q, "metadata/donor", t, 1, &n5, five);
  expect_fatal(q, "'metadata/donor' has 5 rows but 'features' has 6");
  q = good_copy("meta_missing.h5", &f);
  delete_link(q, "metadata/donor");
  expect_fatal(q, "dataset 'metadata/donor' is missing");
  q = good_copy("meta_slash.h5", &f);
  const char *names[2] = {"donor", "a/b"};
  replace_dset(q, "metadata_columns", t, 1, (const hsize_t[]){2}, names);
  expect_fatal(q, "metadata column name 'a/b' is not a dataset name");
  H5Tclose(t);
  features_free(&f);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  dir = t_scratch_dir("test_features_io");
  test_round_trip();
  test_helpers();
  test_read_rows();
  test_malformed();
  test_metadata();
  return t_finish();
}
