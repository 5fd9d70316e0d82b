/* h5util_read.c - validated reading of attributes and datasets (the rules are in h5util.h).  No
 * reader ends the job: each returns a status and leaves the reason in h5util_why(). */
#include "build_config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/h5util.h"

/* A compressed dataset may hold at most this many bytes per stored byte (deflate's limit is about
 * 1032); an unfiltered one must store all of its bytes. */
#define H5UTIL_MAX_RATIO 4096
#define H5UTIL_MAX_RANK 8

static _Thread_local char why[1024];

const char *h5util_why(void) { return why; }

/* Record why a read failed and return status. */
SCD_PRINTF(2, 3) static int fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return status;
}

static int ok(void) {
  why[0] = '\0';
  return H5UTIL_OK;
}

void h5util_need(const char *kind, const char *file, int rc) {
  if (rc != H5UTIL_OK) scd_fatal(SCD_EXIT_DATA, "%s%s%s: %s", kind ? kind : "", kind ? " " : "", file, why);
}

int h5util_optional(const char *kind, const char *file, int rc) {
  if (rc == H5UTIL_BAD) h5util_need(kind, file, rc);
  return rc == H5UTIL_OK;
}

/* ---- files ---- */

int h5util_file_open(const char *path, hid_t *fid) {
  struct stat st;
  *fid = H5I_INVALID_HID;
  if (stat(path, &st) != 0)
    return errno == ENOENT ? fail(H5UTIL_MISSING, "no such file")
                           : fail(H5UTIL_BAD, "cannot look at it: %s", strerror(errno));
  /* A FIFO or a device would block the open or be read without end. */
  if (!S_ISREG(st.st_mode))
    return fail(H5UTIL_BAD, "not a regular file (%s)",
                S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
  char reason[512];
  const htri_t is = H5Fis_hdf5(path);
  if (is == 0) return fail(H5UTIL_BAD, "not a readable HDF5 file (no HDF5 signature: truncated or damaged?)");
  if (is < 0)
    return fail(H5UTIL_BAD, "not a readable HDF5 file (truncated or damaged?): %s",
                h5util_reason(reason, sizeof reason, 0));
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0)
    return fail(H5UTIL_BAD, "cannot open it as an HDF5 file (truncated or damaged?): %s", h5util_reason(reason, sizeof reason, 0));
  if (h5util_objects_check(f, reason, sizeof reason) != 0) {
    H5Fclose(f);
    return fail(H5UTIL_BAD, "%s", reason);
  }
  *fid = f;
  return ok();
}

int h5util_own_format(const char *path, const void *format) {
  h5util_lock();
  hid_t f;
  int own = 0;
  if (h5util_file_open(path, &f) == H5UTIL_OK) {
    char got[128];
    own = h5util_attr_read_str(f, "format", got, sizeof got) == H5UTIL_OK && !strcmp(got, format);
    CHECK_H5(H5Fclose(f));
  }
  h5util_unlock();
  return own;
}

/* " of 'group'" when obj is not the root group, so that an attribute of /loader is told from one
 * of the file; "" otherwise. */
static const char *owner(hid_t obj, char *buf, size_t n) {
  char path[512] = "";
  buf[0] = '\0';
  if (H5Iget_name(obj, path, sizeof path) > 1) snprintf(buf, n, " of '%s'", path + (path[0] == '/'));
  return buf;
}

/* Dataset names the caller gave relative to loc, as a path from the root ("loader/seed"). */
static const char *dset_path(hid_t loc, const char *name, char *buf, size_t n) {
  char path[512] = "";
  if (H5Iget_name(loc, path, sizeof path) > 1)
    snprintf(buf, n, "%s/%s", path + (path[0] == '/'), name);
  else
    snprintf(buf, n, "%s", name);
  return buf;
}

static const char *class_words(H5T_class_t cls) {
  switch (cls) {
    case H5T_INTEGER: return "integers";
    case H5T_FLOAT: return "floating-point values";
    case H5T_STRING: return "strings";
    default: return "numbers";
  }
}

/* Whether class c is what cls asks for (H5T_NO_CLASS: any number). */
static int class_fits(H5T_class_t c, H5T_class_t cls) {
  return cls == H5T_NO_CLASS ? c == H5T_INTEGER || c == H5T_FLOAT : c == cls;
}

/* ---- strings ---- */

/* The memory type for reading values of file type ft: variable-length strings as char * in ft's
 * character set (HDF5 converts no character set into another), fixed-length ones as they are. */
static hid_t str_mem_type(hid_t ft) {
  if (H5Tis_variable_str(ft) <= 0) return H5Tcopy(ft);
  hid_t mt = H5Tcopy(H5T_C_S1);
  if (mt >= 0 && (H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Tset_cset(mt, H5Tget_cset(ft)) < 0)) {
    H5Tclose(mt);
    return -1;
  }
  return mt;
}

/* A fixed-length string of sz bytes as a malloc'd C string: up to its first NUL, trailing blanks
 * dropped (space padding). */
static char *fixed_str(const char *s, size_t sz) {
  size_t len = strnlen(s, sz);
  while (len > 0 && s[len - 1] == ' ') len--;
  char *out = xmalloc(len + 1);
  memcpy(out, s, len);
  out[len] = '\0';
  return out;
}

/* ---- attributes ---- */

/* Open attribute name of obj, which must hold values of class cls (H5T_NO_CLASS: any number),
 * between 1 and max of them (a scalar is one); their number into *count. */
static int attr_open(hid_t obj, const char *name, H5T_class_t cls, int max, const char *want, hid_t *a,
                     hid_t *ft, int *count) {
  char of[600];
  *a = *ft = -1;
  *count = 0;
  htri_t e = H5Aexists(obj, name);
  if (e == 0) return fail(H5UTIL_MISSING, "attribute '%s'%s is missing", name, owner(obj, of, sizeof of));
  *a = e > 0 ? H5Aopen(obj, name, H5P_DEFAULT) : -1;
  if (*a < 0) return fail(H5UTIL_BAD, "cannot open attribute '%s'%s", name, owner(obj, of, sizeof of));
  *ft = H5Aget_type(*a);
  hid_t sp = H5Aget_space(*a);
  const hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
  if (sp >= 0) H5Sclose(sp);
  if (*ft < 0 || !class_fits(H5Tget_class(*ft), cls) || np < 1 || np > max) {
    if (*ft >= 0) H5Tclose(*ft);
    H5Aclose(*a);
    return fail(H5UTIL_BAD, "attribute '%s'%s must be %s", name, owner(obj, of, sizeof of), want);
  }
  *count = (int)np;
  return H5UTIL_OK;
}

static int attr_read_failed(hid_t obj, const char *name) {
  char of[600], r[512];
  return fail(H5UTIL_BAD, "cannot read attribute '%s'%s: %s", name, owner(obj, of, sizeof of),
              h5util_reason(r, sizeof r, 0));
}

int h5util_attr_read_str(hid_t obj, const char *name, char *buf, size_t n) {
  hid_t a = -1, ft = -1;
  int count = 0;
  int rc = attr_open(obj, name, H5T_STRING, 1, "a single string", &a, &ft, &count);
  if (rc != H5UTIL_OK) return rc;
  hid_t mt = str_mem_type(ft);
  char *s = NULL;
  if (H5Tis_variable_str(ft) > 0) {
    char *v = NULL, of[600], what[700], w[1024];
    snprintf(what, sizeof what, "attribute '%s'%s", name, owner(obj, of, sizeof of));
    if (h5util_gheap_check(a, 1, 1, what, w, sizeof w) != 0) {
      if (mt >= 0) H5Tclose(mt);
      H5Tclose(ft);
      H5Aclose(a);
      return fail(H5UTIL_BAD, "%s", w);
    }
    if (mt >= 0 && H5Aread(a, mt, &v) >= 0) {
      s = xstrdup(v ? v : "");
      H5free_memory(v);
    }
  } else {
    const size_t sz = H5Tget_size(ft);
    char *raw = xcalloc(sz + 1, 1);
    if (mt >= 0 && H5Aread(a, mt, raw) >= 0) s = fixed_str(raw, sz);
    free(raw);
  }
  rc = s ? ok() : attr_read_failed(obj, name);
  if (s) snprintf(buf, n, "%s", s);
  free(s);
  if (mt >= 0) H5Tclose(mt);
  H5Tclose(ft);
  H5Aclose(a);
  return rc;
}

/* 1 to max values of class cls as mtype (elem bytes each) into v, their number into *count; v is
 * written only when all of them were read. */
static int attr_read_nums(hid_t obj, const char *name, H5T_class_t cls, const char *want, int max, hid_t mtype,
                          size_t elem, void *v, int *count) {
  hid_t a = -1, ft = -1;
  int n = 0;
  int rc = attr_open(obj, name, cls, max, want, &a, &ft, &n);
  if (rc != H5UTIL_OK) return rc;
  void *x = xmalloc(MUL_SIZE((size_t)n, elem));
  rc = H5Aread(a, mtype, x) >= 0 ? ok() : attr_read_failed(obj, name);
  if (rc == H5UTIL_OK) {
    memcpy(v, x, (size_t)n * elem);
    *count = n;
  }
  free(x);
  H5Tclose(ft);
  H5Aclose(a);
  return rc;
}

int h5util_attr_read_i64(hid_t obj, const char *name, int64_t *v) {
  int n;
  return attr_read_nums(obj, name, H5T_INTEGER, "a single integer", 1, H5T_NATIVE_INT64, sizeof *v, v, &n);
}

int h5util_attr_read_f64(hid_t obj, const char *name, double *v) {
  int n;
  return attr_read_nums(obj, name, H5T_FLOAT, "a single real number", 1, H5T_NATIVE_DOUBLE, sizeof *v, v, &n);
}

int h5util_attr_read_i64s(hid_t obj, const char *name, int64_t *v, int max, int *n) {
  char want[64];
  snprintf(want, sizeof want, "1 to %d integers", max);
  return attr_read_nums(obj, name, H5T_INTEGER, want, max, H5T_NATIVE_INT64, sizeof *v, v, n);
}

/* ---- datasets ---- */

int h5util_dset_open(hid_t loc, const char *name, int rank, H5T_class_t cls, hsize_t *dims, hid_t *d) {
  char p[1024];
  SCD_ASSERT(rank >= 1 && rank <= H5UTIL_MAX_RANK);
  dset_path(loc, name, p, sizeof p);
  if (H5Lexists(loc, name, H5P_DEFAULT) <= 0) return fail(H5UTIL_MISSING, "dataset '%s' is missing", p);
  hid_t x = H5Dopen2(loc, name, H5P_DEFAULT);
  if (x < 0) return fail(H5UTIL_BAD, "'%s' is not a dataset", p);
  hid_t t = H5Dget_type(x), sp = H5Dget_space(x);
  const H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
  const int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  hsize_t got[H5UTIL_MAX_RANK] = {0};
  const int have = r == rank && H5Sget_simple_extent_dims(sp, got, NULL) == rank;
  if (t >= 0) H5Tclose(t);
  if (sp >= 0) H5Sclose(sp);
  int rc = H5UTIL_OK;
  if (!class_fits(c, cls))
    rc = fail(H5UTIL_BAD, "dataset '%s' must hold %s", p, class_words(cls));
  else if (r != rank)
    rc = fail(H5UTIL_BAD, "dataset '%s' has %d dimension%s, expected %d", p, r, r == 1 ? "" : "s", rank);
  else if (!have)
    rc = fail(H5UTIL_BAD, "cannot read the shape of dataset '%s'", p);
  if (rc != H5UTIL_OK) {
    H5Dclose(x);
    return rc;
  }
  memcpy(dims, got, (size_t)rank * sizeof *dims);
  *d = x;
  return ok();
}

/* Whether d stores the nelem values its shape claims.  Variable-length elements count one byte
 * each (their heap lies elsewhere). */
static int stored_enough(hid_t d, hsize_t nelem, hsize_t *stored) {
  *stored = H5Dget_storage_size(d);
  if (nelem == 0) return 1;
  hid_t t = H5Dget_type(d), dcpl = H5Dget_create_plist(d);
  const double elem =
      t >= 0 && H5Tis_variable_str(t) <= 0 && H5Tget_class(t) != H5T_VLEN ? (double)H5Tget_size(t) : 1.0;
  const int filters = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0;
  if (t >= 0) H5Tclose(t);
  if (dcpl >= 0) H5Pclose(dcpl);
  const double need = (double)nelem * elem, have = (double)*stored;
  return filters > 0 ? have * H5UTIL_MAX_RATIO >= need : have >= need;
}

int h5util_dset_stored(hid_t d, const char *name, hsize_t nelem) {
  hsize_t stored;
  if (stored_enough(d, nelem, &stored)) return ok();
  return fail(H5UTIL_BAD, "dataset '%s' claims %llu values but stores only %llu bytes (damaged or forged file)",
              name, (unsigned long long)nelem, (unsigned long long)stored);
}

int h5util_dset_read(hid_t d, const char *name, hsize_t nelem, hid_t mtype, void *buf) {
  int rc = h5util_dset_stored(d, name, nelem);
  if (rc != H5UTIL_OK) return rc;
  if (nelem > 0 && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    return fail(H5UTIL_BAD, "cannot read dataset '%s' (damaged file, or values that do not fit the type)", name);
  return ok();
}

int h5util_dset_read_slab(hid_t d, const char *name, int rank, const hsize_t *start, const hsize_t *count,
                          hid_t mtype, void *buf) {
  SCD_ASSERT(rank >= 1 && rank <= 8);
  hid_t fsp = H5Dget_space(d), msp = H5Screate_simple(rank, count, NULL);
  herr_t e = fsp >= 0 && msp >= 0 ? 0 : -1;
  if (e >= 0) e = H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL);
  if (e >= 0) e = H5Dread(d, mtype, msp, fsp, H5P_DEFAULT, buf);
  char reason[512] = "";
  if (e < 0) h5util_reason(reason, sizeof reason, 0);
  if (msp >= 0) H5Sclose(msp);
  if (fsp >= 0) H5Sclose(fsp);
  if (e < 0)
    return fail(H5UTIL_BAD, "cannot read %llu %s of dataset '%s' from %llu on: %s", (unsigned long long)count[0],
                count[0] == 1 ? "entry" : "entries", name, (unsigned long long)start[0],
                reason[0] ? reason : "HDF5 gives no reason");
  return ok();
}

/* h5util_dset_open of a 1-D dataset, and its path for messages into p. */
static int open_1d(hid_t loc, const char *name, H5T_class_t cls, hsize_t *len, hid_t *d, char *p, size_t pn) {
  int rc = h5util_dset_open(loc, name, 1, cls, len, d);
  if (rc == H5UTIL_OK) dset_path(loc, name, p, pn);
  return rc;
}

int h5util_dset_read_1d(hid_t loc, const char *name, H5T_class_t cls, hid_t mtype, int64_t n, void *out) {
  hsize_t dims[1] = {0};
  hid_t d = -1;
  char p[1024];
  int rc = open_1d(loc, name, cls, dims, &d, p, sizeof p);
  if (rc != H5UTIL_OK) return rc;
  if (dims[0] != (hsize_t)n)
    rc = fail(H5UTIL_BAD, "dataset '%s' has %llu value%s, expected %lld", p, (unsigned long long)dims[0],
              dims[0] == 1 ? "" : "s", (long long)n);
  else
    rc = h5util_dset_read(d, p, dims[0], mtype, out);
  H5Dclose(d);
  return rc;
}

int h5util_dset_read_strs(hid_t loc, const char *name, int64_t max, char ***out, int64_t *n) {
  hsize_t dims[1] = {0};
  hid_t d = -1;
  char p[1024];
  int rc = open_1d(loc, name, H5T_STRING, dims, &d, p, sizeof p);
  if (rc != H5UTIL_OK) return rc;
  if (dims[0] > (hsize_t)max) {
    H5Dclose(d);
    return fail(H5UTIL_BAD, "dataset '%s' has %llu entries; at most %lld are allowed", p,
                (unsigned long long)dims[0], (long long)max);
  }
  rc = h5util_dset_stored(d, p, dims[0]);
  hid_t ft = H5Dget_type(d), mt = ft >= 0 ? str_mem_type(ft) : -1;
  const size_t count = (size_t)dims[0], sz = ft >= 0 ? H5Tget_size(ft) : 0;
  const int vlen = ft >= 0 && H5Tis_variable_str(ft) > 0;
  char **s = xcalloc(count ? count : 1, sizeof *s);
  if (rc == H5UTIL_OK && (mt < 0 || (!vlen && sz == 0)))
    rc = fail(H5UTIL_BAD, "dataset '%s' has zero-length or unreadable strings", p);
  char what[1100], w[1024];
  snprintf(what, sizeof what, "dataset '%s'", p);
  if (rc == H5UTIL_OK && vlen && h5util_gheap_check(d, 0, count, what, w, sizeof w) != 0)
    rc = fail(H5UTIL_BAD, "%s", w);
  if (rc == H5UTIL_OK && count > 0) {
    /* Variable-length: count pointers to HDF5's copies; fixed: count strings of sz bytes. */
    char *raw = xcalloc(count, vlen ? sizeof(char *) : sz);
    if (H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0) {
      rc = fail(H5UTIL_BAD, "cannot read dataset '%s' (damaged file?)", p);
    } else if (vlen) {
      char **v = (char **)raw;
      for (size_t i = 0; i < count; i++) s[i] = xstrdup(v[i] ? v[i] : "");
      hid_t sp = H5Dget_space(d);
      H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, raw);
      H5Sclose(sp);
    } else {
      for (size_t i = 0; i < count; i++) s[i] = fixed_str(raw + i * sz, sz);
    }
    free(raw);
  }
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  H5Dclose(d);
  if (rc != H5UTIL_OK) {
    h5util_strs_free(s, (int64_t)count);
    return rc;
  }
  *out = s;
  *n = (int64_t)count;
  return ok();
}

void h5util_strs_free(char **s, int64_t n) {
  if (!s) return;
  for (int64_t i = 0; i < n; i++) free(s[i]);
  free(s);
}
