/* tests/hostile/h5v1.c - a copy of an HDF5 file in the form version-1 files have (h5v1.h). */
#include "build_config.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/hostile/h5v1.h"

struct copy {
  hid_t dst;
  int failed;
};

static int bad(struct copy *c, const char *what, const char *name) {
  fprintf(stderr, "h5v1_copy: %s of '%s' failed\n", what, name);
  c->failed = 1;
  return -1;
}

/* The variable-length UTF-8 string type (h5py's str). */
static hid_t vlen_str(void) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

/* Read n values of file type ft from src (an attribute when is_attr, else a dataset) into a buffer
 * for writing with *wt: strings as char * (variable-length), others in their native type. */
static void *read_values(hid_t src, int is_attr, hid_t ft, size_t n, hid_t *wt, hid_t *ftype) {
  const int str = H5Tget_class(ft) == H5T_STRING, vlen = str && H5Tis_variable_str(ft) > 0;
  if (str) {
    *wt = *ftype = vlen_str();
    const size_t sz = vlen ? sizeof(char *) : H5Tget_size(ft);
    hid_t mt = vlen ? vlen_str() : H5Tcopy(ft);
    char *raw = calloc(n ? n : 1, sz + 1);
    herr_t e = is_attr ? H5Aread(src, mt, raw) : H5Dread(src, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw);
    H5Tclose(mt);
    if (e < 0) {
      free(raw);
      return NULL;
    }
    if (vlen) return raw;
    char **s = calloc(n ? n : 1, sizeof *s);
    for (size_t i = 0; i < n; i++) {
      const size_t len = strnlen(raw + i * sz, sz);
      s[i] = calloc(len + 1, 1);
      memcpy(s[i], raw + i * sz, len);
    }
    free(raw);
    return s;
  }
  *wt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
  *ftype = H5Tcopy(ft);
  void *buf = calloc(n ? n : 1, H5Tget_size(*wt));
  if ((is_attr ? H5Aread(src, *wt, buf) : H5Dread(src, *wt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf)) < 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

static void free_values(void *buf, hid_t ft, size_t n) {
  if (buf && H5Tget_class(ft) == H5T_STRING)
    for (size_t i = 0; i < n; i++) free(((char **)buf)[i]);
  free(buf);
}

struct attrs {
  struct copy *c;
  hid_t to;
};

static herr_t copy_attr(hid_t obj, const char *name, const H5A_info_t *info, void *data) {
  (void)info;
  struct copy *c = ((struct attrs *)data)->c;
  const hid_t to = ((struct attrs *)data)->to;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), ft = H5Aget_type(a), sp = H5Aget_space(a), wt = -1, fty = -1;
  const size_t n = (size_t)H5Sget_simple_extent_npoints(sp);
  void *buf = read_values(a, 1, ft, n, &wt, &fty);
  hid_t b = buf ? H5Acreate2(to, name, fty, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
  if (b < 0 || H5Awrite(b, wt, buf) < 0) bad(c, "attribute", name);
  if (b >= 0) H5Aclose(b);
  free_values(buf, ft, n);
  H5Tclose(wt);
  H5Tclose(fty);
  H5Tclose(ft);
  H5Sclose(sp);
  H5Aclose(a);
  return c->failed ? -1 : 0;
}

static void copy_attrs(struct copy *c, hid_t from, hid_t to) {
  struct attrs a = {c, to};
  hsize_t idx = 0;
  if (H5Aiterate2(from, H5_INDEX_NAME, H5_ITER_INC, &idx, copy_attr, &a) < 0) bad(c, "attributes", "?");
}

/* A dataset as h5py writes one by default: contiguous, no filters, data written at once. */
static void copy_dataset(struct copy *c, hid_t src, const char *name, hid_t lcpl) {
  hid_t d = H5Dopen2(src, name, H5P_DEFAULT), ft = H5Dget_type(d), sp = H5Dget_space(d), wt = -1, fty = -1;
  const size_t n = (size_t)H5Sget_simple_extent_npoints(sp);
  void *buf = read_values(d, 0, ft, n, &wt, &fty);
  /* Fixed at its shape: a contiguous dataset cannot grow. */
  hsize_t dims[H5S_MAX_RANK];
  const int rank = H5Sget_simple_extent_dims(sp, dims, NULL);
  hid_t fsp = rank > 0 ? H5Screate_simple(rank, dims, NULL) : H5Scopy(sp);
  hid_t e = buf ? H5Dcreate2(c->dst, name, fty, fsp, lcpl, H5P_DEFAULT, H5P_DEFAULT) : -1;
  if (e < 0 || (n > 0 && H5Dwrite(e, wt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)) bad(c, "dataset", name);
  if (e >= 0) {
    copy_attrs(c, d, e);
    H5Dclose(e);
  }
  free_values(buf, ft, n);
  H5Tclose(wt);
  H5Tclose(fty);
  H5Tclose(ft);
  H5Sclose(fsp);
  H5Sclose(sp);
  H5Dclose(d);
}

static herr_t copy_object(hid_t src, const char *name, const H5O_info_t *info, void *data) {
  struct copy *c = data;
  if (!strcmp(name, ".")) return 0;
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  if (info->type == H5O_TYPE_GROUP) {
    hid_t g = H5Gcreate2(c->dst, name, lcpl, H5P_DEFAULT, H5P_DEFAULT), s = H5Gopen2(src, name, H5P_DEFAULT);
    if (g < 0 || s < 0) bad(c, "group", name);
    else copy_attrs(c, s, g);
    if (g >= 0) H5Gclose(g);
    if (s >= 0) H5Gclose(s);
  } else if (info->type == H5O_TYPE_DATASET) {
    copy_dataset(c, src, name, lcpl);
  }
  H5Pclose(lcpl);
  return c->failed ? -1 : 0;
}

int h5v1_copy(const char *src, const char *dst) {
  hid_t s = H5Fopen(src, H5F_ACC_RDONLY, H5P_DEFAULT);
  struct copy c = {H5Fcreate(dst, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), 0};
  if (s < 0 || c.dst < 0) {
    fprintf(stderr, "h5v1_copy: cannot open %s or create %s\n", src, dst);
    return -1;
  }
  copy_attrs(&c, s, c.dst);
  if (!c.failed && H5Ovisit(s, H5_INDEX_NAME, H5_ITER_INC, copy_object, &c) < 0) bad(&c, "objects", src);
  /* The version attribute says 1, in the type the file had. */
  if (!c.failed && H5Aexists(c.dst, "version") > 0) {
    hid_t a = H5Aopen(c.dst, "version", H5P_DEFAULT);
    const long long one = 1;
    if (a < 0 || H5Awrite(a, H5T_NATIVE_LLONG, &one) < 0) bad(&c, "attribute", "version");
    if (a >= 0) H5Aclose(a);
  }
  H5Fclose(s);
  if (H5Fclose(c.dst) < 0) bad(&c, "closing", dst);
  return c.failed ? -1 : 0;
}
