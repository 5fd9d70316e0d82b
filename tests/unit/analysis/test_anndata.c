/* tests/unit/analysis/test_anndata.c - the AnnData writer (src/analysis/anndata.c): every element's
 * encoding-type and encoding-version, the dataframes' _index and column-order, categoricals (codes,
 * categories, ordered), every uns kind, X written window by window, the checksummed layout, and
 * what the writer refuses: duplicate obs_names (exit 3) and replacing a file it did not write
 * (exit 2, the file untouched); the obs columns of a features file's rows (anndata_features_obs):
 * metadata columns as categoricals or strings, a clashing name, an unlabelled set without a label
 * column.  What anndata itself reads of it: tests/eval/anndata.sh. */
#include "build_config.h"

#include <dirent.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/anndata.h"
#include "analysis/features_io.h"
#include "core/h5util.h"
#include "tests/fixtures/testutil.h"

static const char *dir;

/* ---- a small table --------------------------------------------------------------------------- */

struct src {
  int d;
  int64_t calls, rows_done, widest;
};

static float value(int64_t i, int j) { return (float)(i * 1000 + j) * 0.25f; }

/* X's rows, which must be asked for in order, each once. */
static void rows(void *arg, int64_t row0, int64_t cnt, float *dst) {
  struct src *s = arg;
  T_CHECK(row0 == s->rows_done, "rows asked from %lld, %lld done", (long long)row0, (long long)s->rows_done);
  for (int64_t r = 0; r < cnt; r++)
    for (int j = 0; j < s->d; j++) dst[r * s->d + j] = value(row0 + r, j);
  s->calls++;
  s->rows_done += cnt;
  if (cnt > s->widest) s->widest = cnt;
}

static const char *const names[] = {"a/1.tif", "b/2.tif", "a/3.tif", "c/4.tif", "b/5.tif"};
static const char *const cats[] = {"T cell", "B cell", "NK"};
static const int32_t codes[] = {0, 2, -1, 1, 0};
static const char *const wells[] = {"A01", "A02", "", "B01", "A01"};
static const int64_t idx[] = {7, 3, 11, 0, 5};
static const double area[] = {1.5, -2, 0, 1e300, 3.25};
static const char *const chans[] = {"DNA", "membrane"};
static const int64_t sizes[] = {32, 48};

static void table(struct anndata *a, struct src *s, const char *const *obs_names) {
  static struct anndata_value obs[4], uns[8];
  obs[0] = (struct anndata_value){.name = "label", .kind = ANNDATA_CATEGORICAL, .count = 5, .codes = codes,
                                  .strs = cats, .ncategories = 3};
  obs[1] = (struct anndata_value){.name = "well", .kind = ANNDATA_STRINGS, .count = 5, .strs = wells};
  obs[2] = (struct anndata_value){.name = "index", .kind = ANNDATA_INT64S, .count = 5, .i64 = idx};
  obs[3] = (struct anndata_value){.name = "area", .kind = ANNDATA_FLOAT64S, .count = 5, .f64 = area};
  uns[0] = (struct anndata_value){.name = "checkpoint", .kind = ANNDATA_STRING, .str = "run/checkpoint.h5"};
  uns[1] = (struct anndata_value){.name = "epoch", .kind = ANNDATA_INT64, .i = 79};
  uns[2] = (struct anndata_value){.name = "train_fraction", .kind = ANNDATA_FLOAT64, .f = 0.8};
  uns[3] = (struct anndata_value){.name = "normalize", .kind = ANNDATA_BOOL, .i = 1};
  uns[4] = (struct anndata_value){.name = "channels", .kind = ANNDATA_STRINGS, .count = 2, .strs = chans};
  uns[5] = (struct anndata_value){.name = "input_size", .kind = ANNDATA_INT64S, .count = 2, .i64 = sizes};
  uns[6] = (struct anndata_value){.name = "empty", .kind = ANNDATA_STRING, .str = ""};
  uns[7] = (struct anndata_value){.name = "groups", .kind = ANNDATA_CATEGORICAL, .count = 5, .codes = codes,
                                  .strs = cats, .ncategories = 3};
  *a = (struct anndata){.n = 5, .d = s->d, .obs_names = obs_names, .obs = obs, .nobs = 4, .uns = uns, .nuns = 8,
                        .rows = rows, .arg = s};
}

static char *path_in(const char *name) {
  static char buf[8][4096];
  static int slot;
  char *p = buf[slot++ % 8];
  snprintf(p, 4096, "%s/%s", dir, name);
  return p;
}

static int count_tmp(void) {
  DIR *dd = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (dd && (e = readdir(dd)))
    if (strstr(e->d_name, ".tmp.")) n++;
  if (dd) closedir(dd);
  return n;
}

/* ---- reading back with HDF5 ------------------------------------------------------------------ */

static void expect_attr(hid_t obj, const char *what, const char *name, const char *want) {
  char got[256] = "";
  const int rc = h5util_attr_read_str(obj, name, got, sizeof got);
  T_CHECK(rc == H5UTIL_OK && strcmp(got, want) == 0, "%s: attribute %s = '%s' (rc %d), wanted '%s'", what, name, got,
          rc, want);
}

/* Object `path` of f carries encoding-type `type` and encoding-version `version`. */
static void expect_tag(hid_t f, const char *path, const char *type, const char *version) {
  hid_t o = H5Oopen(f, path, H5P_DEFAULT);
  T_CHECK(o >= 0, "%s is missing", path);
  if (o < 0) return;
  expect_attr(o, path, "encoding-type", type);
  expect_attr(o, path, "encoding-version", version);
  H5Oclose(o);
}

/* A 1-D string attribute, its entries joined by '|'. */
static void attr_joined(hid_t obj, const char *name, char *out, size_t n) {
  out[0] = '\0';
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = H5Aget_type(a), sp = H5Aget_space(a);
  hsize_t dims[1] = {0};
  T_CHECK(H5Sget_simple_extent_ndims(sp) == 1 && H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t),
          "attribute %s: a 1-D fixed-length string array", name);
  H5Sget_simple_extent_dims(sp, dims, NULL);
  const size_t w = H5Tget_size(t);
  char *buf = calloc(dims[0] ? dims[0] : 1, w + 1);
  if (dims[0]) H5Aread(a, t, buf);
  for (hsize_t i = 0; i < dims[0]; i++) {
    char one[256];
    snprintf(one, sizeof one, "%.*s", (int)w, buf + i * w);
    snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? "|" : "", one);
  }
  free(buf);
  H5Sclose(sp);
  H5Tclose(t);
  H5Aclose(a);
}

static void strs_joined(hid_t f, const char *name, char *out, size_t n) {
  char **s = NULL;
  int64_t cnt = 0;
  out[0] = '\0';
  T_CHECK(h5util_dset_read_strs(f, name, 100, &s, &cnt) == H5UTIL_OK, "%s: %s", name, h5util_why());
  for (int64_t i = 0; i < cnt; i++) snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? "|" : "", s[i]);
  h5util_strs_free(s, cnt);
}

/* The enum numpy.bool_ is stored as (h5py's): int8 with FALSE = 0, TRUE = 1. */
static void expect_bool_type(hid_t t, const char *what) {
  char n0[16] = "", n1[16] = "";
  int8_t v0 = 0, v1 = 1;
  T_CHECK(H5Tget_class(t) == H5T_ENUM && H5Tget_nmembers(t) == 2 && H5Tget_size(t) == 1, "%s: an int8 enum", what);
  H5Tenum_nameof(t, &v0, n0, sizeof n0);
  H5Tenum_nameof(t, &v1, n1, sizeof n1);
  T_CHECK(strcmp(n0, "FALSE") == 0 && strcmp(n1, "TRUE") == 0, "%s: members %s, %s", what, n0, n1);
}

/* A scalar dataset of class cls, read as mtype. */
static void read_scalar(hid_t loc, const char *name, H5T_class_t cls, hid_t mtype, void *v) {
  hid_t d = H5Dopen2(loc, name, H5P_DEFAULT), t = H5Dget_type(d), sp = H5Dget_space(d);
  T_CHECK(H5Sget_simple_extent_ndims(sp) == 0 && H5Tget_class(t) == cls, "uns/%s: a scalar of class %d", name, cls);
  H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Sclose(sp);
  H5Tclose(t);
  H5Dclose(d);
}

static void check_structure(const char *p, int d) {
  hid_t f;
  T_CHECK(h5util_file_open(p, &f) == H5UTIL_OK, "open %s: %s", p, h5util_why());
  expect_tag(f, "/", "anndata", "0.1.0");
  expect_attr(f, "/", "format", ANNDATA_FORMAT);
  expect_tag(f, "X", "array", "0.2.0");
  expect_tag(f, "obs", "dataframe", "0.2.0");
  expect_tag(f, "obs/_index", "string-array", "0.2.0");
  expect_tag(f, "obs/label", "categorical", "0.2.0");
  expect_tag(f, "obs/label/codes", "array", "0.2.0");
  expect_tag(f, "obs/label/categories", "string-array", "0.2.0");
  expect_tag(f, "obs/well", "string-array", "0.2.0");
  expect_tag(f, "obs/index", "array", "0.2.0");
  expect_tag(f, "obs/area", "array", "0.2.0");
  expect_tag(f, "var", "dataframe", "0.2.0");
  expect_tag(f, "var/_index", "string-array", "0.2.0");
  const char *dicts[] = {"obsm", "varm", "obsp", "varp", "layers", "uns"};
  for (int k = 0; k < 6; k++) expect_tag(f, dicts[k], "dict", "0.1.0");
  expect_tag(f, "uns/checkpoint", "string", "0.2.0");
  expect_tag(f, "uns/empty", "string", "0.2.0");
  expect_tag(f, "uns/epoch", "numeric-scalar", "0.2.0");
  expect_tag(f, "uns/train_fraction", "numeric-scalar", "0.2.0");
  expect_tag(f, "uns/normalize", "numeric-scalar", "0.2.0");
  expect_tag(f, "uns/channels", "string-array", "0.2.0");
  expect_tag(f, "uns/input_size", "array", "0.2.0");
  expect_tag(f, "uns/groups", "categorical", "0.2.0");

  /* The dataframes. */
  char s[1024];
  hid_t obs = H5Gopen2(f, "obs", H5P_DEFAULT), var = H5Gopen2(f, "var", H5P_DEFAULT);
  expect_attr(obs, "obs", "_index", "_index");
  attr_joined(obs, "column-order", s, sizeof s);
  T_CHECK(strcmp(s, "label|well|index|area") == 0, "obs column-order %s", s);
  expect_attr(var, "var", "_index", "_index");
  attr_joined(var, "column-order", s, sizeof s);
  T_CHECK(strcmp(s, "") == 0, "var column-order %s, wanted empty", s);
  H5Gclose(obs);
  H5Gclose(var);
  strs_joined(f, "obs/_index", s, sizeof s);
  T_CHECK(strcmp(s, "a/1.tif|b/2.tif|a/3.tif|c/4.tif|b/5.tif") == 0, "obs_names %s", s);
  strs_joined(f, "obs/well", s, sizeof s);
  T_CHECK(strcmp(s, "A01|A02||B01|A01") == 0, "obs well %s", s);
  strs_joined(f, "obs/label/categories", s, sizeof s);
  T_CHECK(strcmp(s, "T cell|B cell|NK") == 0, "categories %s", s);
  if (d <= 100) {
    char want[1024] = "";
    strs_joined(f, "var/_index", s, sizeof s);
    for (int j = 0; j < d; j++) snprintf(want + strlen(want), sizeof want - strlen(want), "%sf%d", j ? "|" : "", j);
    T_CHECK(strcmp(s, want) == 0, "var_names %s, wanted %s", s, want);
  }

  /* Categorical codes and ordered; the numbers. */
  int32_t c[5];
  int64_t i64[5];
  double f64[5];
  T_CHECK(h5util_dset_read_1d(f, "obs/label/codes", H5T_INTEGER, H5T_NATIVE_INT32, 5, c) == H5UTIL_OK &&
              memcmp(c, codes, sizeof c) == 0, "codes");
  T_CHECK(h5util_dset_read_1d(f, "obs/index", H5T_INTEGER, H5T_NATIVE_INT64, 5, i64) == H5UTIL_OK &&
              memcmp(i64, idx, sizeof i64) == 0, "index column");
  T_CHECK(h5util_dset_read_1d(f, "obs/area", H5T_FLOAT, H5T_NATIVE_DOUBLE, 5, f64) == H5UTIL_OK &&
              memcmp(f64, area, sizeof f64) == 0, "area column");
  hid_t g = H5Gopen2(f, "obs/label", H5P_DEFAULT), a = H5Aopen(g, "ordered", H5P_DEFAULT), at = H5Aget_type(a);
  int8_t ordered = -1;
  expect_bool_type(at, "ordered");
  H5Aread(a, at, &ordered);
  T_CHECK(ordered == 0, "ordered = %d", ordered);
  H5Tclose(at);
  H5Aclose(a);
  H5Gclose(g);

  /* uns scalars. */
  hid_t u = H5Gopen2(f, "uns", H5P_DEFAULT);
  int64_t e = 0;
  double tf = 0;
  int8_t nb = -1;
  hsize_t dims[2];
  read_scalar(u, "epoch", H5T_INTEGER, H5T_NATIVE_INT64, &e);
  read_scalar(u, "train_fraction", H5T_FLOAT, H5T_NATIVE_DOUBLE, &tf);
  hid_t ds = H5Dopen2(u, "normalize", H5P_DEFAULT), bt = H5Dget_type(ds);
  expect_bool_type(bt, "uns/normalize");
  H5Dread(ds, bt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &nb);
  H5Tclose(bt);
  H5Dclose(ds);
  T_CHECK(e == 79 && tf == 0.8 && nb == 1, "uns epoch %lld, train_fraction %g, normalize %d", (long long)e, tf, nb);
  ds = H5Dopen2(u, "checkpoint", H5P_DEFAULT);
  hid_t st = H5Dget_type(ds), sp = H5Dget_space(ds);
  char ck[64] = "";
  T_CHECK(H5Sget_simple_extent_ndims(sp) == 0 && H5Tget_class(st) == H5T_STRING && !H5Tis_variable_str(st),
          "uns/checkpoint: a scalar fixed-length string");
  if (H5Tget_size(st) < sizeof ck) H5Dread(ds, st, H5S_ALL, H5S_ALL, H5P_DEFAULT, ck);
  T_CHECK(strcmp(ck, "run/checkpoint.h5") == 0, "uns/checkpoint = '%s'", ck);
  H5Sclose(sp);
  H5Tclose(st);
  H5Dclose(ds);
  H5Gclose(u);

  /* X: float32 [5, d], chunked with Fletcher-32, the rows given. */
  hid_t x;
  T_CHECK(h5util_dset_open(f, "X", 2, H5T_FLOAT, dims, &x) == H5UTIL_OK && dims[0] == 5 && dims[1] == (hsize_t)d,
          "X is 5 x %d", d);
  hid_t xt = H5Dget_type(x), pl = H5Dget_create_plist(x);
  T_CHECK(H5Tget_size(xt) == 4, "X is float32");
  T_CHECK(H5Pget_layout(pl) == H5D_CHUNKED && H5Pget_nfilters(pl) >= 1 &&
              H5Pget_filter2(pl, 0, NULL, NULL, NULL, 0, NULL, NULL) == H5Z_FILTER_FLETCHER32,
          "X is chunked with Fletcher-32");
  float *buf = malloc((size_t)5 * (size_t)d * sizeof *buf);
  T_CHECK(h5util_dset_read(x, "X", (hsize_t)5 * (hsize_t)d, H5T_NATIVE_FLOAT, buf) == H5UTIL_OK, "X reads");
  int same = 1;
  for (int64_t i = 0; i < 5; i++)
    for (int j = 0; j < d; j++) same &= buf[i * d + j] == value(i, j);
  T_CHECK(same, "X holds the rows given");
  free(buf);
  H5Pclose(pl);
  H5Tclose(xt);
  H5Dclose(x);
  H5Fclose(f);
}

static void test_structure(void) {
  struct src s = {.d = 3};
  struct anndata a;
  table(&a, &s, names);
  const char *p = path_in("small.h5ad");
  anndata_write(p, &a);
  T_CHECK(s.calls == 1 && s.rows_done == 5, "X in one window: %lld calls, %lld rows", (long long)s.calls,
          (long long)s.rows_done);
  T_CHECK(count_tmp() == 0, "no temporary file left");
  check_structure(p, 3);
  /* scdino replaces its own file. */
  s = (struct src){.d = 3};
  anndata_write(p, &a);
  check_structure(p, 3);
}

/* Rows of 4 MiB and one more float: 16 MiB windows hold 3 rows, so X comes in 3 + 2. */
static void test_windows(void) {
  struct src s = {.d = (1 << 20) + 1};
  struct anndata a;
  table(&a, &s, names);
  const char *p = path_in("wide.h5ad");
  anndata_write(p, &a);
  T_CHECK(s.calls == 2 && s.widest == 3 && s.rows_done == 5, "X in windows of 3 rows: %lld calls, widest %lld",
          (long long)s.calls, (long long)s.widest);
  check_structure(p, s.d);
  remove(p);
}

static int write_child(void *arg) {
  struct src s = {.d = 3};
  struct anndata a;
  table(&a, &s, arg ? (const char *const *)arg : names);
  anndata_write(path_in(arg ? "dup.h5ad" : "foreign.h5ad"), &a);
  return 0;
}

static void test_refusals(void) {
  char msg[8192];
  /* A file that is not scdino's AnnData: exit 2, left as it was. */
  const char *p = path_in("foreign.h5ad");
  FILE *fp = fopen(p, "w");
  fputs("someone's notes\n", fp);
  fclose(fp);
  int code = t_run_child(write_child, NULL, 0, msg, sizeof msg);
  T_CHECK(code == 2 && strstr(msg, p) && strstr(msg, "is not scdino's own AnnData file"), "foreign file: exit %d: %s", code, msg);
  fp = fopen(p, "r");
  char line[64] = "";
  T_CHECK(fp && fgets(line, sizeof line, fp) && strcmp(line, "someone's notes\n") == 0, "the file is untouched");
  if (fp) fclose(fp);
  /* An HDF5 file without scdino's format attribute (an AnnData file written by anndata itself). */
  remove(p);
  hid_t f = h5util_file_create(p, H5P_DEFAULT);
  h5util_attr_write_str(f, "encoding-type", "anndata");
  H5Fclose(f);
  code = t_run_child(write_child, NULL, 0, msg, sizeof msg);
  T_CHECK(code == 2 && strstr(msg, "is not scdino's own AnnData file"), "anndata's own file: exit %d: %s", code,
          msg);
  /* Duplicate obs_names: exit 3 naming both rows, nothing written. */
  static const char *const dup[] = {"a/1.tif", "b/2.tif", "a/3.tif", "b/2.tif", "c/5.tif"};
  code = t_run_child(write_child, (void *)dup, 0, msg, sizeof msg);
  T_CHECK(code == 3 && strstr(msg, "rows 1 and 3 are both 'b/2.tif'"), "duplicate names: exit %d: %s", code, msg);
  T_CHECK(!fopen(path_in("dup.h5ad"), "r") && count_tmp() == 0, "nothing written");
  if (t_verbose) printf("  %s", msg);
}

/* obs of 4 rows with metadata: donor (2 values: categorical), well (4: strings), label (a metadata
 * column named like the class column: "meta_label"); then unlabelled: no class column, and the
 * metadata 'label' keeps its name. */
static void test_features_obs(void) {
  static char *classes[] = {"A", "B"}, *mnames[] = {"donor", "well", "label"};
  static char *meta[] = {"d2", "d1", "d2", "d2", "W1", "W2", "W3", "W4", "x", "y", "x", "x"};
  static char *paths[] = {"p/1.tif", "p/2.tif", "q/3.tif", "q/4.tif"};
  static int32_t labels[] = {0, 1, 1, 0}, split[] = {0, 1, 0, 0};
  static int64_t index[] = {4, 5, 6, 7};
  struct features f = {.n = 4, .d = 3, .nclasses = 2, .labels = labels, .index = index, .paths = paths,
                       .class_names = classes, .nmeta = 3, .meta_names = mnames, .meta = meta};
  struct anndata_obs o;
  anndata_features_obs(&f, split, &o);
  char got[256] = "";
  for (int c = 0; c < o.n; c++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", c ? "|" : "", o.cols[c].name);
  T_CHECK(strcmp(got, "label|split|index|donor|well|meta_label") == 0, "obs columns %s", got);
  const struct anndata_value *donor = &o.cols[3], *well = &o.cols[4], *ml = &o.cols[5];
  T_CHECK(donor->kind == ANNDATA_CATEGORICAL && donor->ncategories == 2 && !strcmp(donor->strs[0], "d1") &&
              !strcmp(donor->strs[1], "d2") && donor->codes[0] == 1 && donor->codes[1] == 0 && donor->codes[3] == 1,
          "donor: categorical over d1, d2");
  T_CHECK(well->kind == ANNDATA_STRINGS && well->count == 4 && !strcmp(well->strs[2], "W3"), "well: strings");
  T_CHECK(ml->kind == ANNDATA_CATEGORICAL && ml->ncategories == 2 && ml->codes[1] == 1, "meta_label: categorical");
  /* Written: the file holds them as AnnData encodes them. */
  struct src s = {.d = 3};
  const struct anndata a = {.n = 4, .d = 3, .obs_names = (const char *const *)paths, .obs = o.cols, .nobs = o.n,
                            .rows = rows, .arg = &s};
  const char *p = path_in("meta.h5ad");
  anndata_write(p, &a);
  hid_t h = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t g = H5Gopen2(h, "obs", H5P_DEFAULT);
  attr_joined(g, "column-order", got, sizeof got);
  T_CHECK(strcmp(got, "label|split|index|donor|well|meta_label") == 0, "column-order %s", got);
  H5Gclose(g);
  expect_tag(h, "obs/donor", "categorical", "0.2.0");
  expect_tag(h, "obs/well", "string-array", "0.2.0");
  strs_joined(h, "obs/donor/categories", got, sizeof got);
  T_CHECK(strcmp(got, "d1|d2") == 0, "obs/donor/categories %s", got);
  strs_joined(h, "obs/well", got, sizeof got);
  T_CHECK(strcmp(got, "W1|W2|W3|W4") == 0, "obs/well %s", got);
  H5Fclose(h);
  anndata_obs_free(&o);

  /* Unlabelled: every label -1, no classes. */
  static int32_t none[] = {-1, -1, -1, -1};
  f.nclasses = 0, f.class_names = NULL, f.labels = none;
  anndata_features_obs(&f, split, &o);
  got[0] = '\0';
  for (int c = 0; c < o.n; c++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", c ? "|" : "", o.cols[c].name);
  T_CHECK(strcmp(got, "split|index|donor|well|label") == 0, "unlabelled obs columns %s", got);
  anndata_obs_free(&o);
}

static void test_paths(void) {
  char out[64];
  anndata_features_path("run/features_0080.h5", out, sizeof out);
  T_CHECK(strcmp(out, "run/features_0080.h5ad") == 0, "%s", out);
  anndata_features_path("feats", out, sizeof out);
  T_CHECK(strcmp(out, "feats.h5ad") == 0, "%s", out);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  dir = t_scratch_dir("test_anndata");
  test_structure();
  test_windows();
  test_refusals();
  test_features_obs();
  test_paths();
  return t_finish();
}
