/* h5util_write.c - writing attributes, datasets and groups; every failure names the file, the
 * object and HDF5's reason. */
#include "build_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fsutil.h"
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

/* Links and attributes kept in the object header (checksummed), never in "dense" storage: that
 * lives in a fractal heap whose blocks carry no checksum, and HDF5 1.10 crashes on some damage
 * there.  Headers grow by continuation blocks, which are checksummed too. */
static herr_t compact_only(hid_t cpl, int links) {
  if (H5Pset_attr_phase_change(cpl, 65535, 0) < 0) return -1;
  return links ? H5Pset_link_phase_change(cpl, 65535, 0) : 0;
}

hid_t h5util_file_create(const char *path, hid_t fapl) {
  char why[512];
  hid_t a = fapl == H5P_DEFAULT ? H5Pcreate(H5P_FILE_ACCESS) : H5Pcopy(fapl), c = H5Pcreate(H5P_FILE_CREATE);
  /* The newest format: superblock, object headers and every index carry checksums.  No times in the
   * root group's header: the same content gives the same bytes. */
  errno = 0;
  hid_t f = a < 0 || c < 0 || H5Pset_libver_bounds(a, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0 ||
                    H5Pset_obj_track_times(c, 0) < 0 || compact_only(c, 1) < 0
                ? H5I_INVALID_HID
                : H5Fcreate(path, H5F_ACC_TRUNC, c, a);
  const int err = errno; /* the system's reason, where HDF5's stack has none (a full disk) */
  if (a >= 0) H5Pclose(a);
  if (c >= 0) H5Pclose(c);
  if (f < 0)
    scd_fatal(SCD_EXIT_FAILURE, "%s: cannot create the HDF5 file: %s%s%s", path, h5util_reason(why, sizeof why, 0),
              err ? "; errno: " : "", err ? strerror(err) : "");
  return f;
}

/* The core driver's buffer passes through these callbacks, so that it outlives H5Fclose. */
static void *image_malloc(size_t size, H5FD_file_image_op_t op, void *udata) {
  (void)op;
  struct h5util_image *img = udata;
  img->size = size;
  return malloc(size);
}

static void *image_memcpy(void *dest, const void *src, size_t size, H5FD_file_image_op_t op, void *udata) {
  (void)op;
  (void)udata;
  return memcpy(dest, src, size);
}

static void *image_realloc(void *ptr, size_t size, H5FD_file_image_op_t op, void *udata) {
  (void)op;
  struct h5util_image *img = udata;
  img->size = size; /* the last resize at close is the truncation to the file's end */
  return realloc(ptr, size);
}

static herr_t image_free(void *ptr, H5FD_file_image_op_t op, void *udata) {
  struct h5util_image *img = udata;
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE)
    img->buf = ptr; /* kept: the complete file */
  else
    free(ptr);
  return 0;
}

/* The property lists share the one record (the caller's). */
static void *image_udata_copy(void *udata) { return udata; }
static herr_t image_udata_free(void *udata) {
  (void)udata;
  return 0;
}

hid_t h5util_image_create(const char *name, struct h5util_image *img) {
  img->buf = NULL;
  img->size = 0;
  hid_t fapl = (hid_t)CHECK_H5(H5Pcreate(H5P_FILE_ACCESS));
  CHECK_H5(H5Pset_fapl_core(fapl, (size_t)16 << 20, 0));
  H5FD_file_image_callbacks_t cb = {image_malloc,     image_memcpy,     image_realloc, image_free,
                                    image_udata_copy, image_udata_free, img};
  CHECK_H5(H5Pset_file_image_callbacks(fapl, &cb));
  hid_t f = h5util_file_create(name, fapl);
  CHECK_H5(H5Pclose(fapl));
  return f;
}

void h5util_image_close(hid_t fid, struct h5util_image *img) {
  char file[1024] = "?", why[512];
  H5Fget_name(fid, file, sizeof file);
  /* The driver's buffer grows in large steps: the file is its first `used` bytes (closing only
   * rewrites the superblock in place, or gives space back at the end). */
  const ssize_t used = H5Fflush(fid, H5F_SCOPE_GLOBAL) < 0 ? -1 : H5Fget_file_image(fid, NULL, 0);
  if (used <= 0 || H5Fclose(fid) < 0 || !img->buf)
    scd_fatal(SCD_EXIT_FAILURE, "%s: cannot complete the file in memory: %s", file, h5util_reason(why, sizeof why, 0));
  if ((size_t)used < img->size) img->size = (size_t)used;
}

hid_t h5util_image_begin(const char *path, struct h5util_image *img) {
  char name[4200];
  snprintf(name, sizeof name, "%s (built in memory)", path);
  return h5util_image_create(name, img);
}

void h5util_image_save(hid_t fid, struct h5util_image *img, const char *what, const char *path) {
  h5util_image_close(fid, img);
  fs_save_buffer(what, path, img->buf, img->size);
  free(img->buf);
  img->buf = NULL;
}

hid_t h5util_str_type(size_t len) {
  hid_t t = (hid_t)CHECK_H5(H5Tcopy(H5T_C_S1));
  /* Fixed length: variable-length strings live in HDF5's global heap, which has no checksum. */
  CHECK_H5(H5Tset_size(t, len > 0 ? len + 1 : 1));
  CHECK_H5(H5Tset_strpad(t, H5T_STR_NULLTERM));
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
  hid_t t = h5util_str_type(strlen(v));
  h5util_attr_write(obj, name, t, t, 0, v);
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
  CHECK_H5(compact_only(dcpl, 0));
  return dcpl;
}

void h5util_dcpl_checksum(hid_t dcpl, int rank, const hsize_t *dims, size_t elem) {
  hsize_t nelem = 1;
  for (int i = 0; i < rank; i++) nelem *= dims[i];
  if (rank == 0 || nelem == 0) {
    /* Nothing to chunk: kept inside the object header, which has its own checksum. */
    CHECK_H5(H5Pset_layout(dcpl, H5D_COMPACT));
    return;
  }
  /* Chunks of at most about 1 MiB, halving the outermost dimensions first. */
  hsize_t chunk[H5S_MAX_RANK];
  double bytes = (double)nelem * (double)elem;
  for (int i = 0; i < rank; i++) chunk[i] = dims[i];
  for (int i = 0; i < rank; i++)
    while (chunk[i] > 1 && bytes > (double)(1 << 20)) {
      const hsize_t half = (chunk[i] + 1) / 2;
      bytes = bytes / (double)chunk[i] * (double)half;
      chunk[i] = half;
    }
  CHECK_H5(H5Pset_chunk(dcpl, rank, chunk));
  CHECK_H5(H5Pset_fletcher32(dcpl));
}

void h5util_dset_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                       const void *data) {
  const char *what = "dataset";
  hsize_t nelem = 1;
  for (int i = 0; i < rank; i++) nelem *= dims[i];
  hid_t sp = (hid_t)(rank > 0 ? W(H5Screate_simple(rank, dims, NULL)) : W(H5Screate(H5S_SCALAR)));
  hid_t dcpl = h5util_dcpl_untimed();
  h5util_dcpl_checksum(dcpl, rank, dims, H5Tget_size(ftype));
  hid_t d = (hid_t)W(H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  W(H5Pclose(dcpl));
  /* An empty dataset has nothing to write (and its data pointer may be NULL, which HDF5 refuses). */
  if (nelem > 0) W(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  W(H5Dclose(d));
  W(H5Sclose(sp));
}

void h5util_dset_write_strs(hid_t loc, const char *name, const char *const *s, hsize_t n) {
  size_t len = 0;
  for (hsize_t i = 0; i < n; i++)
    if (strlen(s[i]) > len) len = strlen(s[i]);
  /* Fixed-length strings as wide as the longest, packed into one block. */
  char *block = xcalloc(n ? (size_t)n : 1, len + 1);
  for (hsize_t i = 0; i < n; i++) memcpy(block + (size_t)i * (len + 1), s[i], strlen(s[i]));
  hid_t t = h5util_str_type(len);
  h5util_dset_write(loc, name, t, t, 1, &n, block);
  CHECK_H5(H5Tclose(t));
  free(block);
}

hid_t h5util_group_create(hid_t loc, const char *name) {
  const char *what = "group";
  hid_t gcpl = (hid_t)W(H5Pcreate(H5P_GROUP_CREATE));
  W(H5Pset_obj_track_times(gcpl, 0)); /* no times: the same content gives the same bytes */
  W(compact_only(gcpl, 1));
  hid_t g = (hid_t)W(H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT));
  W(H5Pclose(gcpl));
  return g;
}
