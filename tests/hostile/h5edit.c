/* tests/hostile/h5edit.c - damage one thing in an HDF5 file, for the hostile-input corpus.
 *
 *   h5edit FILE OP ARGS...
 *
 * The corpus starts from valid files (a shard set, a features file, a checkpoint) and changes one
 * attribute or dataset per case, so each case tests exactly one check.  OBJ names are paths inside
 * the file ("labels", "student/pos_embed").  Ops:
 *   rmattr NAME                 delete a root attribute
 *   attr_str NAME TEXT          set a root attribute to a string (replacing any old one)
 *   attr_int NAME VALUE         ... to a 64-bit integer
 *   attr_float NAME VALUE       ... to a double
 *   attr_ints NAME V,V,...      ... to a 1-D int64 array (not a single value)
 *   rm OBJ                      delete a dataset or group
 *   nums OBJ TYPE V,V,...       replace OBJ by a 1-D dataset of TYPE (i8 i16 i32 i64 u16 u64 f32 f64)
 *   nums2 OBJ TYPE ROWS V,...   ... by a 2-D dataset of ROWS rows
 *   strs OBJ S,S,...            ... by 1-D variable-length strings
 *   fstrs OBJ SIZE S,S,...      ... by 1-D fixed-length strings of SIZE bytes
 *   lazy OBJ TYPE D0[,D1,...]   ... by a chunked dataset of that shape with nothing written: it claims
 *                               data it does not store (a huge shape costs a few bytes); TYPE may
 *                               also be str (variable-length strings)
 *   group OBJ                   ... by an empty group (a name that is not a dataset)
 *   set OBJ FLATINDEX VALUE     overwrite one element in place (VALUE: a number, nan, inf, -inf)
 *   fill OBJ VALUE [FROM TO]    overwrite every element (flat indices FROM..TO) in place
 *   external OBJ PATH           ... by a dataset of the same values kept in external file PATH
 *   virtual OBJ FILE SRC        ... by a virtual dataset whose values are dataset SRC of FILE
 *   elink OBJ FILE TARGET       ... by an external link to TARGET in FILE
 *   soft OBJ TARGET             ... by a soft link to TARGET (a path in this file)
 *   v1                          rewrite the whole file as a version-1 file (tests/hostile/h5v1.h:
 *                               HDF5's earliest format, variable-length strings, no checksums)
 * Exit status 0, 2 on bad arguments, 1 when HDF5 fails. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/hostile/h5v1.h"

static void die(const char *what) {
  fprintf(stderr, "h5edit: %s failed\n", what);
  exit(1);
}
#define H(call) ((call) < 0 ? (die(#call), 0) : 0)

/* Replace dataset name by one of the same type and shape whose values lie outside the file: in
 * external file `file` (virtual: 0), or those of dataset src of `file` (virtual: 1). */
static void outside(hid_t f, const char *name, const char *file, const char *src, int virtual) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0) die("H5Dopen2");
  hid_t ft = H5Dget_type(d), sp = H5Dget_space(d), mt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
  hsize_t dims[8] = {0};
  const int rank = H5Sget_simple_extent_dims(sp, dims, NULL);
  const hssize_t n = H5Sget_simple_extent_npoints(sp);
  hid_t fsp = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  void *buf = calloc((size_t)n + 1, H5Tget_size(mt));
  if (rank < 1 || fsp < 0 || dcpl < 0 || H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) die("reading OBJ");
  H(H5Dclose(d));
  H(H5Ldelete(f, name, H5P_DEFAULT));
  if (virtual)
    H(H5Pset_virtual(dcpl, fsp, file, src, fsp));
  else
    H(H5Pset_external(dcpl, file, 0, (hsize_t)n * H5Tget_size(ft)));
  hid_t e = H5Dcreate2(f, name, ft, fsp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (e < 0) die("H5Dcreate2");
  if (!virtual) H(H5Dwrite(e, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
  H(H5Dclose(e));
  free(buf);
  H(H5Pclose(dcpl));
  H(H5Sclose(fsp));
  H(H5Sclose(sp));
  H(H5Tclose(mt));
  H(H5Tclose(ft));
}

static hid_t type_of(const char *t) {
  if (!strcmp(t, "i8")) return H5T_STD_I8LE;
  if (!strcmp(t, "i16")) return H5T_STD_I16LE;
  if (!strcmp(t, "i32")) return H5T_STD_I32LE;
  if (!strcmp(t, "i64")) return H5T_STD_I64LE;
  if (!strcmp(t, "u16")) return H5T_STD_U16LE;
  if (!strcmp(t, "u64")) return H5T_STD_U64LE;
  if (!strcmp(t, "f32")) return H5T_IEEE_F32LE;
  if (!strcmp(t, "f64")) return H5T_IEEE_F64LE;
  fprintf(stderr, "h5edit: unknown type '%s'\n", t);
  exit(2);
}

static double value_of(const char *s) {
  if (!strcmp(s, "nan")) return NAN;
  if (!strcmp(s, "inf")) return INFINITY;
  if (!strcmp(s, "-inf")) return -INFINITY;
  return strtod(s, NULL);
}

/* Split "a,b,c" in place; returns the count (an empty string gives 0 items). */
static int split(char *s, char **out, int max) {
  int n = 0;
  if (!*s) return 0;
  for (char *p = s; n < max;) {
    out[n++] = p;
    char *c = strchr(p, ',');
    if (!c) break;
    *c = '\0';
    p = c + 1;
  }
  return n;
}

static void unlink_if(hid_t f, const char *name) {
  if (H5Lexists(f, name, H5P_DEFAULT) > 0) H(H5Ldelete(f, name, H5P_DEFAULT));
}

static void attr_replace(hid_t f, const char *name, hid_t type, hid_t space, const void *v) {
  if (H5Aexists(f, name) > 0) H(H5Adelete(f, name));
  hid_t a = H5Acreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (a < 0) die("H5Acreate2");
  H(H5Awrite(a, type, v));
  H(H5Aclose(a));
}

/* A dataset of `type` and shape dims holding the values v (converted from double). */
static void write_nums(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims, const double *v) {
  unlink_if(f, name);
  hid_t sp = H5Screate_simple(rank, dims, NULL);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H(H5Pset_create_intermediate_group(lcpl, 1));
  hid_t d = H5Dcreate2(f, name, type, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  if (d < 0) die("H5Dcreate2");
  hsize_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  if (n) H(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v));
  H(H5Dclose(d));
  H(H5Pclose(lcpl));
  H(H5Sclose(sp));
}

int main(int argc, char **argv) {
  if (argc < 3 || (argc < 4 && strcmp(argv[2], "v1") != 0)) {
    fprintf(stderr, "usage: h5edit FILE OP ARGS... (see tests/hostile/h5edit.c)\n");
    return 2;
  }
  if (!strcmp(argv[2], "v1")) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.v1.%ld", argv[1], (long)getpid());
    if (h5v1_copy(argv[1], tmp) != 0 || rename(tmp, argv[1]) != 0) die("h5v1_copy");
    return 0;
  }
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  const char *file = argv[1], *op = argv[2], *name = argv[3];
  hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) die("H5Fopen");
  hid_t scalar = H5Screate(H5S_SCALAR);
  static char *items[1 << 16];
  static double vals[1 << 16];
  if (!strcmp(op, "rmattr")) {
    H(H5Adelete(f, name));
  } else if (!strcmp(op, "attr_str") && argc == 5) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H(H5Tset_size(t, H5T_VARIABLE));
    H(H5Tset_cset(t, H5T_CSET_UTF8));
    const char *s = argv[4];
    attr_replace(f, name, t, scalar, &s);
    H(H5Tclose(t));
  } else if (!strcmp(op, "attr_int") && argc == 5) {
    int64_t v = strtoll(argv[4], NULL, 0);
    if (H5Aexists(f, name) > 0) H(H5Adelete(f, name));
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) die("H5Acreate2");
    H(H5Awrite(a, H5T_NATIVE_INT64, &v));
    H(H5Aclose(a));
  } else if (!strcmp(op, "attr_float") && argc == 5) {
    double v = value_of(argv[4]);
    if (H5Aexists(f, name) > 0) H(H5Adelete(f, name));
    hid_t a = H5Acreate2(f, name, H5T_IEEE_F64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) die("H5Acreate2");
    H(H5Awrite(a, H5T_NATIVE_DOUBLE, &v));
    H(H5Aclose(a));
  } else if (!strcmp(op, "attr_ints") && argc == 5) {
    int n = split(argv[4], items, 1 << 16);
    int64_t *v = calloc((size_t)n + 1, sizeof *v);
    for (int i = 0; i < n; i++) v[i] = strtoll(items[i], NULL, 0);
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    if (H5Aexists(f, name) > 0) H(H5Adelete(f, name));
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) die("H5Acreate2");
    H(H5Awrite(a, H5T_NATIVE_INT64, v));
    H(H5Aclose(a));
    H(H5Sclose(sp));
    free(v);
  } else if (!strcmp(op, "rm")) {
    H(H5Ldelete(f, name, H5P_DEFAULT));
  } else if ((!strcmp(op, "nums") && argc == 6) || (!strcmp(op, "nums2") && argc == 7)) {
    int two = !strcmp(op, "nums2");
    int n = split(argv[two ? 6 : 5], items, 1 << 16);
    for (int i = 0; i < n; i++) vals[i] = value_of(items[i]);
    hsize_t rows = two ? strtoull(argv[5], NULL, 0) : (hsize_t)n;
    hsize_t dims[2] = {rows, rows ? (hsize_t)n / rows : 0};
    if (two && rows * dims[1] != (hsize_t)n) {
      fprintf(stderr, "h5edit: %d values do not make %llu rows\n", n, (unsigned long long)rows);
      return 2;
    }
    write_nums(f, name, type_of(argv[4]), two ? 2 : 1, dims, vals);
  } else if ((!strcmp(op, "strs") && argc == 5) || (!strcmp(op, "fstrs") && argc == 6)) {
    int fixed = !strcmp(op, "fstrs");
    int n = split(argv[fixed ? 5 : 4], items, 1 << 16);
    hid_t t = H5Tcopy(H5T_C_S1);
    size_t sz = fixed ? strtoull(argv[4], NULL, 0) : 0;
    H(H5Tset_size(t, fixed ? sz : H5T_VARIABLE));
    char *fbuf = fixed ? calloc((size_t)n + 1, sz) : NULL;
    for (int i = 0; fixed && i < n; i++) strncpy(fbuf + (size_t)i * sz, items[i], sz);
    unlink_if(f, name);
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0) die("H5Dcreate2");
    if (n) H(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, fixed ? (void *)fbuf : (void *)items));
    H(H5Dclose(d));
    H(H5Sclose(sp));
    H(H5Tclose(t));
    free(fbuf);
  } else if (!strcmp(op, "lazy") && argc == 6) {
    int n = split(argv[5], items, 8);
    hsize_t dims[8], chunk[8];
    for (int i = 0; i < n; i++) {
      dims[i] = strtoull(items[i], NULL, 0);
      chunk[i] = 1;
    }
    unlink_if(f, name);
    hid_t sp = H5Screate_simple(n, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H(H5Pset_chunk(dcpl, n, chunk));
    hid_t t = H5Tcopy(H5T_C_S1);
    H(H5Tset_size(t, H5T_VARIABLE));
    hid_t d = H5Dcreate2(f, name, !strcmp(argv[4], "str") ? t : type_of(argv[4]), sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d < 0) die("H5Dcreate2");
    H(H5Dclose(d));
    H(H5Tclose(t));
    H(H5Pclose(dcpl));
    H(H5Sclose(sp));
  } else if (!strcmp(op, "external") && argc == 5) {
    outside(f, name, argv[4], NULL, 0);
  } else if (!strcmp(op, "virtual") && argc == 6) {
    outside(f, name, argv[4], argv[5], 1);
  } else if (!strcmp(op, "elink") && argc == 6) {
    unlink_if(f, name);
    H(H5Lcreate_external(argv[4], argv[5], f, name, H5P_DEFAULT, H5P_DEFAULT));
  } else if (!strcmp(op, "soft") && argc == 5) {
    unlink_if(f, name);
    H(H5Lcreate_soft(argv[4], f, name, H5P_DEFAULT, H5P_DEFAULT));
  } else if (!strcmp(op, "group")) {
    unlink_if(f, name);
    hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) die("H5Gcreate2");
    H(H5Gclose(g));
  } else if ((!strcmp(op, "set") && argc == 6) || (!strcmp(op, "fill") && (argc == 5 || argc == 7))) {
    int all = !strcmp(op, "fill");
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) die("H5Dopen2");
    hid_t sp = H5Dget_space(d);
    int rank = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[8] = {0};
    H5Sget_simple_extent_dims(sp, dims, NULL);
    double v = value_of(argv[all ? 4 : 5]);
    if (all) {
      hssize_t n = H5Sget_simple_extent_npoints(sp);
      double *buf = malloc((size_t)n * sizeof *buf + 8);
      H(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
      hssize_t from = argc == 7 ? (hssize_t)strtoll(argv[5], NULL, 0) : 0;
      hssize_t to = argc == 7 ? (hssize_t)strtoll(argv[6], NULL, 0) : n - 1;
      for (hssize_t i = from; i <= to && i < n; i++) buf[i] = v;
      H(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
      free(buf);
    } else if (rank == 0) { /* a scalar: the one element */
      H(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v));
    } else {
      /* Flat index -> coordinates, last dimension fastest. */
      hsize_t flat = strtoull(argv[4], NULL, 0), coord[8];
      for (int k = rank - 1; k >= 0; k--) {
        coord[k] = flat % dims[k];
        flat /= dims[k];
      }
      H(H5Sselect_elements(sp, H5S_SELECT_SET, 1, coord));
      hsize_t one = 1;
      hid_t msp = H5Screate_simple(1, &one, NULL);
      H(H5Dwrite(d, H5T_NATIVE_DOUBLE, msp, sp, H5P_DEFAULT, &v));
      H(H5Sclose(msp));
    }
    H(H5Sclose(sp));
    H(H5Dclose(d));
  } else {
    fprintf(stderr, "h5edit: unknown operation or wrong arguments: %s\n", op);
    return 2;
  }
  H(H5Sclose(scalar));
  H(H5Fclose(f));
  return 0;
}
