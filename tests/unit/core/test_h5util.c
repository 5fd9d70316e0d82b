/* tests/unit/core/test_h5util.c - the HDF5 helpers: what the readers accept and refuse (the rules of
 * h5util.h: strings of both kinds with blanks trimmed, numbers of the class asked for, single values
 * as scalars or one-element arrays, datasets that store what they claim) and the words of their
 * reasons; the layouts the writers give (scalar or 1-D attributes, scalar and empty datasets);
 * what they refuse that HDF5 would follow (a damaged global heap, links and storage leading out of
 * the file); and the messages of failed writes and of h5util_need (file and object named). */
#include "build_config.h"

#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/h5util.h"
#include "tests/fixtures/testutil.h"

static char file[4200], sumfile[4200];

static void attr_nums(hid_t obj, const char *name, hid_t type, hsize_t n, const void *v, hid_t mtype) {
  hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, mtype, v);
  H5Aclose(a);
  H5Sclose(sp);
}

/* A chunked dataset of n values with nothing written: it claims what it does not store. */
static void lazy(hid_t loc, const char *name, hsize_t n) {
  hid_t sp = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t chunk = 16;
  H5Pset_chunk(dcpl, 1, &chunk);
  hid_t d = H5Dcreate2(loc, name, H5T_STD_I64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
}

static int why_has(const char *needle) {
  int ok = strstr(h5util_why(), needle) != NULL;
  if (!ok) fprintf(stderr, "  why is '%s', expected '%s'\n", h5util_why(), needle);
  return ok;
}

static void test_attributes(void) {
  hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  h5util_attr_write_str(f, "vlen", "scdino-features");
  const int32_t i32 = -7;
  const double f64 = 0.25;
  const int64_t three[3] = {4, 5, 6}, one[1] = {9};
  attr_nums(f, "i32", H5T_STD_I32LE, 0, &i32, H5T_NATIVE_INT32);
  attr_nums(f, "real", H5T_IEEE_F64LE, 0, &f64, H5T_NATIVE_DOUBLE);
  attr_nums(f, "three", H5T_STD_I64LE, 3, three, H5T_NATIVE_INT64);
  attr_nums(f, "one", H5T_STD_I64LE, 1, one, H5T_NATIVE_INT64);
  hid_t g = h5util_group_create(f, "loader");
  h5util_attr_write_i64(g, "seed", 11);
  H5Gclose(g);
  H5Fclose(f);
  t_h5_set_attr_fixed_str(file, "padded", "tanh   ", 7);
  t_h5_set_attr_fixed_str(file, "nulpad", "none", 16);
  f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);

  char s[64];
  int64_t v = 0;
  double x = 0;
  T_CHECK(h5util_attr_read_str(f, "vlen", s, sizeof s) == H5UTIL_OK && !strcmp(s, "scdino-features"), "vlen '%s'", s);
  T_CHECK(!strcmp(h5util_why(), ""), "no reason after success");
  T_CHECK(h5util_attr_read_str(f, "padded", s, sizeof s) == H5UTIL_OK && !strcmp(s, "tanh"), "blanks trimmed '%s'", s);
  T_CHECK(h5util_attr_read_str(f, "nulpad", s, sizeof s) == H5UTIL_OK && !strcmp(s, "none"), "NUL padding '%s'", s);
  T_CHECK(h5util_attr_read_str(f, "vlen", s, 7) == H5UTIL_OK && !strcmp(s, "scdino"), "cut to the buffer '%s'", s);
  T_CHECK(h5util_attr_read_str(f, "absent", s, sizeof s) == H5UTIL_MISSING && why_has("attribute 'absent' is missing"),
          "missing string");
  T_CHECK(h5util_attr_read_str(f, "i32", s, sizeof s) == H5UTIL_BAD &&
              why_has("attribute 'i32' must be a single string"), "an integer is no string");

  T_CHECK(h5util_attr_read_i64(f, "i32", &v) == H5UTIL_OK && v == -7, "int32 read as int64: %lld", (long long)v);
  T_CHECK(h5util_attr_read_i64(f, "one", &v) == H5UTIL_OK && v == 9, "one-element array as a single value");
  v = 123;
  T_CHECK(h5util_attr_read_i64(f, "real", &v) == H5UTIL_BAD && why_has("attribute 'real' must be a single integer"),
          "a real is no integer");
  T_CHECK(v == 123, "nothing stored on failure");
  T_CHECK(h5util_attr_read_i64(f, "three", &v) == H5UTIL_BAD, "three values are not one");
  T_CHECK(h5util_attr_read_i64(f, "vlen", &v) == H5UTIL_BAD, "a string is no integer");
  T_CHECK(h5util_attr_read_f64(f, "real", &x) == H5UTIL_OK && x == 0.25, "real");
  T_CHECK(h5util_attr_read_f64(f, "i32", &x) == H5UTIL_BAD && why_has("must be a single real number"),
          "an integer is no real");

  int64_t a[4];
  int n = 0;
  T_CHECK(h5util_attr_read_i64s(f, "three", a, 4, &n) == H5UTIL_OK && n == 3 && a[2] == 6, "three integers");
  T_CHECK(h5util_attr_read_i64s(f, "i32", a, 4, &n) == H5UTIL_OK && n == 1 && a[0] == -7, "a scalar is one");
  T_CHECK(h5util_attr_read_i64s(f, "three", a, 2, &n) == H5UTIL_BAD && why_has("must be 1 to 2 integers"),
          "more than max");

  g = H5Gopen2(f, "loader", H5P_DEFAULT);
  T_CHECK(h5util_attr_read_i64(g, "seed", &v) == H5UTIL_OK && v == 11, "attribute of a group");
  T_CHECK(h5util_attr_read_i64(g, "epoch", &v) == H5UTIL_MISSING && why_has("attribute 'epoch' of 'loader' is missing"),
          "the group is named");
  H5Gclose(g);
  H5Fclose(f);
}

static void test_datasets(void) {
  hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const int32_t lab[4] = {0, 1, 2, 1};
  const hsize_t n4 = 4, n3 = 3, d2[2] = {2, 2};
  const float m[4] = {1, 2, 3, 4};
  h5util_dset_write(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &n4, lab);
  h5util_dset_write(f, "matrix", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, m);
  const char *names[3] = {"a", "CD4+ T cell", ""};
  h5util_dset_write_strs(f, "names", names, n3);
  char fixed[3][8] = {"x  ", "yy", "z"};
  hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate_simple(1, &n3, NULL);
  H5Tset_size(t, 8);
  hid_t d = H5Dcreate2(f, "fixed", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, fixed);
  H5Dclose(d);
  H5Sclose(sp);
  H5Tclose(t);
  lazy(f, "lazy", 1000000);
  H5Gclose(h5util_group_create(f, "group"));

  int64_t out[4];
  hsize_t dims[2];
  T_CHECK(h5util_dset_read_1d(f, "labels", H5T_INTEGER, H5T_NATIVE_INT64, 4, out) == H5UTIL_OK && out[2] == 2,
          "labels read as int64");
  T_CHECK(h5util_dset_read_1d(f, "labels", H5T_INTEGER, H5T_NATIVE_INT64, 3, out) == H5UTIL_BAD &&
              why_has("dataset 'labels' has 4 values, expected 3"), "wrong length");
  T_CHECK(h5util_dset_read_1d(f, "labels", H5T_FLOAT, H5T_NATIVE_DOUBLE, 4, out) == H5UTIL_BAD &&
              why_has("dataset 'labels' must hold floating-point values"), "integers are no reals");
  T_CHECK(h5util_dset_read_1d(f, "labels", H5T_NO_CLASS, H5T_NATIVE_INT64, 4, out) == H5UTIL_OK, "any number");
  T_CHECK(h5util_dset_read_1d(f, "absent", H5T_INTEGER, H5T_NATIVE_INT64, 4, out) == H5UTIL_MISSING &&
              why_has("dataset 'absent' is missing"), "missing dataset");
  T_CHECK(h5util_dset_read_1d(f, "group", H5T_INTEGER, H5T_NATIVE_INT64, 4, out) == H5UTIL_BAD &&
              why_has("'group' is not a dataset"), "a group");
  T_CHECK(h5util_dset_read_1d(f, "matrix", H5T_FLOAT, H5T_NATIVE_INT64, 4, out) == H5UTIL_BAD &&
              why_has("dataset 'matrix' has 2 dimensions, expected 1"), "wrong rank");
  hid_t x;
  T_CHECK(h5util_dset_open(f, "matrix", 2, H5T_FLOAT, dims, &x) == H5UTIL_OK && dims[0] == 2 && dims[1] == 2,
          "2-D open");
  H5Dclose(x);
  T_CHECK(h5util_dset_open(f, "lazy", 1, H5T_INTEGER, dims, &x) == H5UTIL_OK, "lazy opens");
  T_CHECK(h5util_dset_stored(x, "lazy", dims[0]) == H5UTIL_BAD &&
              why_has("dataset 'lazy' claims 1000000 values but stores only 0 bytes (damaged or forged file)"),
          "an unwritten dataset is refused before it is read");
  H5Dclose(x);

  char **s = NULL;
  int64_t ns = 0;
  T_CHECK(h5util_dset_read_strs(f, "names", 10, &s, &ns) == H5UTIL_OK && ns == 3 && !strcmp(s[1], "CD4+ T cell") &&
              !strcmp(s[2], ""), "variable-length strings");
  h5util_strs_free(s, ns);
  T_CHECK(h5util_dset_read_strs(f, "fixed", 10, &s, &ns) == H5UTIL_OK && ns == 3 && !strcmp(s[0], "x") &&
              !strcmp(s[1], "yy"), "fixed-length strings, blanks trimmed");
  h5util_strs_free(s, ns);
  T_CHECK(h5util_dset_read_strs(f, "names", 2, &s, &ns) == H5UTIL_BAD &&
              why_has("dataset 'names' has 3 entries; at most 2 are allowed"), "too many strings");
  T_CHECK(h5util_dset_read_strs(f, "labels", 10, &s, &ns) == H5UTIL_BAD && why_has("must hold strings"),
          "numbers are no strings");
  H5Fclose(f);
}

/* The dataspace class of attribute (attr) or dataset `name` of f; the length of its one dimension
 * into *len, if any. */
static H5S_class_t space_of(hid_t f, const char *name, int attr, hsize_t *len) {
  hid_t o = attr ? H5Aopen(f, name, H5P_DEFAULT) : H5Dopen2(f, name, H5P_DEFAULT);
  hid_t sp = attr ? H5Aget_space(o) : H5Dget_space(o);
  const H5S_class_t c = H5Sget_simple_extent_type(sp);
  if (len && (c != H5S_SIMPLE || H5Sget_simple_extent_ndims(sp) != 1 || H5Sget_simple_extent_dims(sp, len, NULL) != 1))
    *len = (hsize_t)-1;
  H5Sclose(sp);
  if (attr)
    H5Aclose(o);
  else
    H5Dclose(o);
  return c;
}

/* The layouts the files keep: h5util_attr_write's n = 0 is a scalar, n = 1 a 1-D attribute. */
static void test_layouts(void) {
  hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const int64_t one = 3;
  h5util_attr_write(f, "scalar", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &one);
  h5util_attr_write(f, "array1", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &one);
  h5util_dset_write(f, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, NULL, &one);
  const hsize_t n0 = 0;
  h5util_dset_write(f, "empty", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &n0, NULL);
  hsize_t len = 9;
  T_CHECK(space_of(f, "scalar", 1, NULL) == H5S_SCALAR, "n = 0: scalar attribute");
  T_CHECK(space_of(f, "array1", 1, &len) == H5S_SIMPLE && len == 1, "n = 1: 1-D attribute");
  T_CHECK(space_of(f, "step", 0, NULL) == H5S_SCALAR, "rank 0: scalar dataset");
  T_CHECK(space_of(f, "empty", 0, &len) == H5S_SIMPLE && len == 0, "an empty dataset, nothing written");
  /* (That untimed datasets make byte-identical files is tested by tests/cli/prepare_mpi.sh.) */
  H5Fclose(f);
}

/* What makes a file prove its integrity: the newest format (superblock 2 or later, with its
 * checksum), Fletcher-32 on every chunked dataset, compact scalars, fixed-length strings. */
static void test_integrity(void) {
  hid_t f = h5util_file_create(sumfile, H5P_DEFAULT);
  const int64_t one = 3;
  int64_t big[3000];
  for (int i = 0; i < 3000; i++) big[i] = (int64_t)i * i - 7;
  const hsize_t nbig = 3000, n2[2] = {300000, 2};
  h5util_dset_write(f, "big", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &nbig, big);
  h5util_dset_write(f, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, NULL, &one);
  float *wide = calloc(600000, sizeof *wide);
  h5util_dset_write(f, "wide", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, n2, wide);
  free(wide);
  h5util_attr_write_str(f, "format", "scdino-test");
  const char *names[3] = {"a", "class_two", ""};
  h5util_dset_write_strs(f, "names", names, 3);
  H5F_info2_t info;
  T_CHECK(H5Fget_info2(f, &info) >= 0 && info.super.version >= 2, "superblock version %u", info.super.version);
  H5Fclose(f);

  T_CHECK(h5util_file_open(sumfile, &f) == H5UTIL_OK, "open: %s", h5util_why());
  hid_t d = H5Dopen2(f, "big", H5P_DEFAULT), dcpl = H5Dget_create_plist(d);
  unsigned flags = 0;
  size_t ncd = 0;
  T_CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_nfilters(dcpl) == 1 &&
              H5Pget_filter2(dcpl, 0, &flags, &ncd, NULL, 0, NULL, NULL) == H5Z_FILTER_FLETCHER32,
          "a dataset is chunked with Fletcher-32");
  H5Pclose(dcpl);
  H5Dclose(d);
  d = H5Dopen2(f, "wide", H5P_DEFAULT);
  dcpl = H5Dget_create_plist(d);
  hsize_t chunk[2] = {0, 0};
  T_CHECK(H5Pget_chunk(dcpl, 2, chunk) == 2 && chunk[1] == 2 && chunk[0] * 2 * 4 <= (1 << 20) && chunk[0] > 1000,
          "chunks of at most 1 MiB: %llu x %llu", (unsigned long long)chunk[0], (unsigned long long)chunk[1]);
  H5Pclose(dcpl);
  H5Dclose(d);
  d = H5Dopen2(f, "step", H5P_DEFAULT);
  dcpl = H5Dget_create_plist(d);
  T_CHECK(H5Pget_layout(dcpl) == H5D_COMPACT, "a scalar dataset is compact");
  H5Pclose(dcpl);
  H5Dclose(d);
  hid_t a = H5Aopen(f, "format", H5P_DEFAULT), t = H5Aget_type(a);
  T_CHECK(H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) == 0, "string attributes are fixed-length");
  H5Tclose(t);
  H5Aclose(a);
  char s[32];
  T_CHECK(h5util_attr_read_str(f, "format", s, sizeof s) == H5UTIL_OK && !strcmp(s, "scdino-test"), "'%s'", s);
  char **strs = NULL;
  int64_t ns = 0;
  T_CHECK(h5util_dset_read_strs(f, "names", 10, &strs, &ns) == H5UTIL_OK && ns == 3 && !strcmp(strs[0], "a") &&
              !strcmp(strs[1], "class_two") && !strcmp(strs[2], ""),
          "fixed-length string dataset read back");
  h5util_strs_free(strs, ns);
  int64_t back[3000];
  T_CHECK(h5util_dset_read_1d(f, "big", H5T_INTEGER, H5T_NATIVE_INT64, 3000, back) == H5UTIL_OK &&
              !memcmp(back, big, sizeof big),
          "chunked values read back");
  H5Fclose(f);
}

/* h5util_fletcher32 is the sum HDF5's filter stores after a chunk (even and odd lengths). */
static void test_fletcher32(void) {
  const size_t lens[3] = {1001, 4096, 1};
  for (int k = 0; k < 3; k++) {
    const hsize_t n = lens[k];
    unsigned char *v = malloc(n);
    for (size_t i = 0; i < n; i++) v[i] = (unsigned char)(i * 131 + 7 * k + (i >> 8));
    hid_t f = h5util_file_create(sumfile, H5P_DEFAULT);
    h5util_dset_write(f, "bytes", H5T_STD_U8LE, H5T_NATIVE_UCHAR, 1, &n, v);
    H5Fclose(f);
    f = H5Fopen(sumfile, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "bytes", H5P_DEFAULT), sp = H5Dget_space(d);
    hsize_t off = 0, size = 0;
    unsigned mask = 9;
    haddr_t addr = HADDR_UNDEF;
    T_CHECK(H5Dget_chunk_info(d, sp, 0, &off, &mask, &addr, &size) >= 0 && size == n + 4 && mask == 0,
            "one chunk of %zu bytes and its sum: %llu", lens[k], (unsigned long long)size);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    unsigned char *raw = malloc(n + 4);
    FILE *fp = fopen(sumfile, "rb");
    T_CHECK(fp && fseek(fp, (long)addr, SEEK_SET) == 0 && fread(raw, 1, n + 4, fp) == n + 4, "raw chunk read");
    if (fp) fclose(fp);
    const uint32_t stored = (uint32_t)raw[n] | (uint32_t)raw[n + 1] << 8 | (uint32_t)raw[n + 2] << 16 |
                            (uint32_t)raw[n + 3] << 24;
    T_CHECK(!memcmp(raw, v, n) && stored == h5util_fletcher32(v, n), "%zu bytes: stored %08x, computed %08x",
            lens[k], stored, h5util_fletcher32(v, n));
    free(raw);
    free(v);
  }
}

/* Opening refuses what is not a regular HDF5 file without blocking on it. */
static void test_open(void) {
  char p[4300];
  hid_t f;
  snprintf(p, sizeof p, "%s.none", file);
  T_CHECK(h5util_file_open(p, &f) == H5UTIL_MISSING && why_has("no such file"), "missing file");
  snprintf(p, sizeof p, "%s.fifo", file);
  unlink(p);
  T_CHECK(mkfifo(p, 0600) == 0, "mkfifo");
  T_CHECK(h5util_file_open(p, &f) == H5UTIL_BAD && why_has("not a regular file (a FIFO)"), "a FIFO");
  unlink(p);
  snprintf(p, sizeof p, "%s.txt", file);
  FILE *fp = fopen(p, "w");
  fputs("not hdf5\n", fp);
  fclose(fp);
  T_CHECK(h5util_file_open(p, &f) == H5UTIL_BAD && why_has("not a readable HDF5 file"), "a text file");
  unlink(p);
}

/* ---- what HDF5 trusts ---- */

/* A file as h5py and old scdino write one: the earliest format, variable-length strings (kept in
 * a global heap collection, which has no checksum). */
static void write_vlen_file(void) {
  hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  hid_t sc = H5Screate(H5S_SCALAR);
  const char *one = "scdino-checkpoint", *three[3] = {"a", "bb", "ccc"};
  hid_t a = H5Acreate2(f, "format", t, sc, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, &one);
  H5Aclose(a);
  const hsize_t n = 3;
  hid_t sp = H5Screate_simple(1, &n, NULL), d = H5Dcreate2(f, "names", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, three);
  H5Dclose(d);
  H5Sclose(sp);
  H5Sclose(sc);
  H5Tclose(t);
  H5Fclose(f);
}

/* The file offset of the global heap collection, and of its objects' headers (object k's at
 * obj[k], k < *nobj; the last is the free space). */
static long gcol_find(long *obj, int *nobj) {
  FILE *fp = fopen(file, "rb");
  static unsigned char b[1 << 16];
  const size_t size = fread(b, 1, sizeof b, fp);
  fclose(fp);
  *nobj = 0;
  for (size_t off = 0; off + 16 <= size; off++) {
    if (memcmp(b + off, "GCOL\1", 5) != 0) continue;
    for (size_t p = off + 16; p + 16 <= size && *nobj < 16;) {
      uint64_t len = 0;
      for (int k = 7; k >= 0; k--) len = len << 8 | b[p + 8 + k];
      obj[(*nobj)++] = (long)p;
      if (b[p] == 0 && b[p + 1] == 0) break;
      p += 16 + (len + 7) / 8 * 8;
    }
    return (long)off;
  }
  return -1;
}

/* Overwrite n bytes at offset off of the file (the old ones into old, when not NULL). */
static void poke(long off, const void *v, size_t n, void *old) {
  FILE *fp = fopen(file, "r+b");
  fseek(fp, off, SEEK_SET);
  if (old && fread(old, 1, n, fp) != n) T_CHECK(0, "poke: cannot read");
  fseek(fp, off, SEEK_SET);
  fwrite(v, 1, n, fp);
  fclose(fp);
}

/* In a child (a crash or a hang must fail the test, not end it): the string attribute or the
 * string dataset is refused with a reason naming the damaged heap. */
static int read_damaged(void *arg) {
  alarm(60);
  const int dset = *(const int *)arg;
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  char s[64];
  char **v = NULL;
  int64_t n = 0;
  const int rc = dset ? h5util_dset_read_strs(f, "names", 10, &v, &n) : h5util_attr_read_str(f, "format", s, sizeof s);
  printf("%d %s\n", rc, h5util_why());
  return rc == H5UTIL_BAD && strstr(h5util_why(), "global heap at offset") ? 0 : 1;
}

static void expect_refused(const char *what, int dset) {
  char msg[2048];
  const int st = t_run_child(read_damaged, &dset, 1, msg, sizeof msg);
  T_CHECK(st == 0, "%s: status %d (a crash or hang is -1), '%s'", what, st, msg);
}

static void test_global_heap(void) {
  write_vlen_file();
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  char s[64], **v = NULL;
  int64_t n = 0;
  T_CHECK(h5util_attr_read_str(f, "format", s, sizeof s) == H5UTIL_OK && !strcmp(s, "scdino-checkpoint"),
          "an intact heap: '%s'", s);
  T_CHECK(h5util_dset_read_strs(f, "names", 10, &v, &n) == H5UTIL_OK && n == 3 && !strcmp(v[2], "ccc"),
          "an intact heap: strings of a dataset");
  h5util_strs_free(v, n);
  H5Fclose(f);
  long obj[16];
  int nobj = 0;
  const long g = gcol_find(obj, &nobj);
  T_CHECK(g > 0 && nobj == 5, "a collection of 4 strings and its free space: at %ld, %d objects", g, nobj);
  if (g <= 0 || nobj != 5) return;
  unsigned char old[8], big[8] = {0x11, 0, 0, 0, 0, 0, 0, 0x40}, zero[8] = {0}, two[2] = {2, 0};
  /* An object longer than its collection (HDF5 1.10 copies past the heap: SIGSEGV). */
  poke(obj[0] + 8, big, 8, old);
  expect_refused("object 1 of 2^62 bytes", 0);
  poke(obj[0] + 8, old, 8, NULL);
  /* Free space of size 0 (HDF5 1.10 parses it forever). */
  poke(obj[4] + 8, zero, 8, old);
  expect_refused("free space of 0 bytes", 1);
  poke(obj[4] + 8, old, 8, NULL);
  /* Two objects of one index. */
  poke(obj[3], two, 2, old);
  expect_refused("index 2 twice", 1);
  poke(obj[3], old, 2, NULL);
  /* A string whose object is longer than the string (HDF5 copies the object into the string's
   * buffer): object 2 ("a") claims 8 bytes, its padded size. */
  unsigned char eight[8] = {8, 0, 0, 0, 0, 0, 0, 0};
  poke(obj[1] + 8, eight, 8, old);
  expect_refused("object longer than its string", 1);
  poke(obj[1] + 8, old, 8, NULL);
  f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  T_CHECK(h5util_attr_read_str(f, "format", s, sizeof s) == H5UTIL_OK, "restored: %s", h5util_why());
  H5Fclose(f);
}

/* Objects whose values would come from outside the file are refused at open, by name. */
static void test_outside(void) {
  static const struct {
    const char *what, *why;
  } cases[] = {{"soft", "'w' is a soft link to '/x'"},
               {"external link", "'w' is an external link to '/x' in other.h5"},
               {"external storage", "dataset 'w' keeps its values in an external file ('w.bin')"},
               {"virtual", "dataset 'w' is a virtual dataset"}};
  for (int k = 0; k < 4; k++) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    const hsize_t n = 4;
    const float x[4] = {1, 2, 3, 4};
    h5util_dset_write(f, "x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, &n, x);
    hid_t sp = H5Screate_simple(1, &n, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    if (k == 0) H5Lcreate_soft("/x", f, "w", H5P_DEFAULT, H5P_DEFAULT);
    if (k == 1) H5Lcreate_external("other.h5", "/x", f, "w", H5P_DEFAULT, H5P_DEFAULT);
    if (k == 2) H5Pset_external(dcpl, "w.bin", 0, 16);
    if (k == 3) H5Pset_virtual(dcpl, sp, ".", "x", sp);
    if (k >= 2) d = H5Dcreate2(f, "w", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Fclose(f);
    H5Pclose(fapl);
    const int rc = h5util_file_open(file, &f);
    T_CHECK(rc == H5UTIL_BAD && why_has(cases[k].why), "%s refused", cases[k].what);
    if (rc == H5UTIL_OK) H5Fclose(f);
  }
  hid_t f = H5Fcreate(file, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g = h5util_group_create(f, "g");
  const hsize_t n = 1;
  const int32_t one = 1;
  h5util_dset_write(g, "y", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &n, &one);
  H5Gclose(g);
  H5Fclose(f);
  T_CHECK(h5util_file_open(file, &f) == H5UTIL_OK, "hard links and stored values: %s", h5util_why());
  H5Fclose(f);
  unlink("w.bin");
}

/* Failures end the job naming the file and the object. */
static int write_twice(void *arg) {
  (void)arg;
  hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
  h5util_attr_write_i64(f, "scalar", 1); /* exists already */
  return 0;
}

static int need_missing(void *arg) {
  (void)arg;
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  int64_t v;
  h5util_need("checkpoint", "run/x.h5", h5util_attr_read_i64(f, "version", &v));
  return 0;
}

static int optional_bad(void *arg) {
  (void)arg;
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  char s[16];
  int64_t v;
  if (h5util_optional(NULL, "m.h5", h5util_attr_read_i64(f, "version", &v))) return 10; /* missing: no error */
  h5util_optional(NULL, "m.h5", h5util_attr_read_str(f, "scalar", s, sizeof s));
  return 0;
}

static void test_failures(void) {
  char msg[2048];
  int st = t_run_child(write_twice, NULL, 0, msg, sizeof msg);
  T_CHECK(st == SCD_EXIT_FAILURE, "failed write: status %d", st);
  T_CHECK(strstr(msg, file) && strstr(msg, "cannot write attribute 'scalar'"), "failed write: '%s'", msg);
  st = t_run_child(need_missing, NULL, 0, msg, sizeof msg);
  T_CHECK(st == SCD_EXIT_DATA && strstr(msg, "checkpoint run/x.h5: attribute 'version' is missing"),
          "h5util_need: status %d, '%s'", st, msg);
  st = t_run_child(optional_bad, NULL, 0, msg, sizeof msg);
  T_CHECK(st == SCD_EXIT_DATA && strstr(msg, "error: m.h5: attribute 'scalar' must be a single string"),
          "h5util_optional: status %d, '%s'", st, msg);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the reasons come from h5util_why and the messages */
  snprintf(file, sizeof file, "%s/t.h5", t_scratch_dir("test_h5util"));
  snprintf(sumfile, sizeof sumfile, "%s/sum.h5", t_scratch_dir("test_h5util"));
  test_attributes();
  test_datasets();
  test_layouts();
  test_integrity();
  test_fletcher32();
  test_open();
  test_failures();
  test_global_heap(); /* these rewrite the file test_failures reads */
  test_outside();
  return t_finish();
}
