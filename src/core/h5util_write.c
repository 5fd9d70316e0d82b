/* h5util_write.c - writing attributes, datasets and groups; every failure names the file, the
 * object and HDF5's reason. */
#include "build_config.h"

#include <stdio.h>

#include "core/check.h"
#include "core/h5util.h"

/* End the job for a failed write of `what` `name` under loc.  H5Fget_name gives the name the file
 * was created with (a temporary name while it is written; the checkpoint names its in-memory
 * image after the checkpoint). */
SCD_NORETURN static void write_failed(hid_t loc, const char *what, const char *name, const char *expr) {
  char file[1024] = "?", why[512];
  h5util_reason(why, sizeof why, 0);
  H5Fget_name(loc, file, sizeof file);
  scd_fatal(SCD_EXIT_FAILURE, "%s: cannot write %s '%s': %s failed (%s)", file, what, name, expr, why);
}

/* Check a call made for object `name` (a hid_t or herr_t: negative on failure). */
static long long wcheck(long long ret, hid_t loc, const char *what, const char *name, const char *expr) {
  if (ret < 0) write_failed(loc, what, name, expr);
  return ret;
}
#define W(call) wcheck((long long)(call), loc, what, name, #call)

hid_t h5util_str_type(void) {
  hid_t t = (hid_t)CHECK_H5(H5Tcopy(H5T_C_S1));
  CHECK_H5(H5Tset_size(t, H5T_VARIABLE));
  CHECK_H5(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}

void h5util_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *v) {
  const hid_t loc = obj;
  const char *what = "attribute";
  hid_t sp = (hid_t)(n ? W(H5Screate_simple(1, &n, NULL)) : W(H5Screate(H5S_SCALAR)));
  hid_t a = (hid_t)W(H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT));
  W(H5Awrite(a, mtype, v));
  W(H5Aclose(a));
  W(H5Sclose(sp));
}

void h5util_attr_write_str(hid_t obj, const char *name, const char *v) {
  hid_t t = h5util_str_type();
  h5util_attr_write(obj, name, t, t, 0, &v);
  CHECK_H5(H5Tclose(t));
}

void h5util_attr_write_i32(hid_t obj, const char *name, int32_t v) {
  h5util_attr_write(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, 0, &v);
}

void h5util_attr_write_i64(hid_t obj, const char *name, int64_t v) {
  h5util_attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &v);
}

void h5util_attr_write_f64(hid_t obj, const char *name, double v) {
  h5util_attr_write(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &v);
}

hid_t h5util_dcpl_untimed(void) {
  hid_t dcpl = (hid_t)CHECK_H5(H5Pcreate(H5P_DATASET_CREATE));
  CHECK_H5(H5Pset_obj_track_times(dcpl, 0));
  return dcpl;
}

static void dset_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                       const void *data, int untimed) {
  const char *what = "dataset";
  hsize_t nelem = 1;
  for (int i = 0; i < rank; i++) nelem *= dims[i];
  hid_t sp = (hid_t)(rank > 0 ? W(H5Screate_simple(rank, dims, NULL)) : W(H5Screate(H5S_SCALAR)));
  hid_t dcpl = untimed ? h5util_dcpl_untimed() : H5P_DEFAULT;
  hid_t d = (hid_t)W(H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  if (untimed) W(H5Pclose(dcpl));
  /* An empty dataset has nothing to write (and its data pointer may be NULL, which HDF5 refuses). */
  if (nelem > 0) W(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  W(H5Dclose(d));
  W(H5Sclose(sp));
}

void h5util_dset_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                       const void *data) {
  dset_write(loc, name, ftype, mtype, rank, dims, data, 0);
}

void h5util_dset_write_untimed(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank,
                               const hsize_t *dims, const void *data) {
  dset_write(loc, name, ftype, mtype, rank, dims, data, 1);
}

void h5util_dset_write_strs(hid_t loc, const char *name, const char *const *s, hsize_t n) {
  hid_t t = h5util_str_type();
  h5util_dset_write(loc, name, t, t, 1, &n, s);
  CHECK_H5(H5Tclose(t));
}

hid_t h5util_group_create(hid_t loc, const char *name) {
  const char *what = "group";
  return (hid_t)W(H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
}
