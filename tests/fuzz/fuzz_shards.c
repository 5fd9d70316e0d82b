/* tests/fuzz/fuzz_shards.c - libFuzzer harness for the shard-set reader (dataset_open and the
 * image, label and path reads behind it).
 *
 * The input is not an HDF5 file: mutating HDF5's own byte structures mostly exercises libhdf5's
 * parser, which is not scdino's code.  Instead the bytes describe a shard set - every attribute
 * and dataset of manifest.h5 and of up to three shard files, each either consistent or damaged in
 * one of the ways a file can be (wrong or extreme value, wrong type, wrong length, missing,
 * unwritten) - and the harness writes it with HDF5 into a fresh directory and reads it the way the
 * loader and knn do: dataset_open, every label, every image (both read paths), every path.
 *
 * A bad shard set ends the reader with scd_fatal(), which calls exit(): the fuzzer is linked with
 * --wrap=exit so that exit jumps back here instead (the lock, the HDF5 objects and the file
 * descriptors are reset; the reader's own memory of the abandoned read is leaked, so run this
 * fuzzer with -detect_leaks=0).  What counts
 * as a finding: a crash, a sanitizer report, an exit status other than 3 (SCD_EXIT_DATA), or a
 * success that reads an image outside the set. */
#include "build_config.h"

#include <dirent.h>
#include <fcntl.h>
#include <hdf5.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "data/shards.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);
void __wrap_exit(int code);
void __real_exit(int code);
void __wrap_h5util_lock(void);
void __wrap_h5util_unlock(void);
void __real_h5util_lock(void);
void __real_h5util_unlock(void);

/* ---- exit -> longjmp, and the state an abandoned read leaves behind ---- */
static char dir[256]; /* the shard set of the current input */
static jmp_buf back;
static int in_target, exit_code, lock_depth;
static char open_at_start[4096];

void __wrap_exit(int code) {
  if (in_target) {
    exit_code = code;
    longjmp(back, 1);
  }
  __real_exit(code);
}
void __wrap_h5util_lock(void) {
  __real_h5util_lock();
  lock_depth++;
}
void __wrap_h5util_unlock(void) {
  lock_depth--;
  __real_h5util_unlock();
}

static int fcntl_is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

static void reset_after_exit(void) {
  scd_fatal_rearm();
  while (lock_depth > 0) __wrap_h5util_unlock();
  /* Close what the reader left open: datasets, groups, types and attributes first, then the files
   * (H5close would do it too, but restarting the library costs a tenth of a second). */
  ssize_t n = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (n > 0) {
    hid_t *ids = malloc((size_t)n * sizeof *ids);
    n = H5Fget_obj_ids(H5F_OBJ_ALL, H5F_OBJ_ALL, (size_t)n, ids);
    for (int pass = 0; pass < 2; pass++)
      for (ssize_t k = 0; k < n; k++) {
        H5I_type_t type = H5Iget_type(ids[k]);
        if (pass == 0 && type == H5I_DATASET) H5Dclose(ids[k]);
        if (pass == 0 && type == H5I_GROUP) H5Gclose(ids[k]);
        if (pass == 0 && type == H5I_DATATYPE) H5Tclose(ids[k]);
        if (pass == 0 && type == H5I_ATTR) H5Aclose(ids[k]);
        if (pass == 1 && type == H5I_FILE) H5Fclose(ids[k]);
      }
    free(ids);
  }
  /* The reader's own descriptors of shard files (its pread path); others, such as a sanitizer's
   * symbolizer pipe, stay. */
  for (int fd = 3; fd < (int)sizeof open_at_start; fd++) {
    char p[64], target[512];
    if (open_at_start[fd] || !fcntl_is_open(fd)) continue;
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(p, target, sizeof target - 1);
    if (len > 0 && (target[len] = '\0', strncmp(target, dir, strlen(dir)) == 0)) close(fd);
  }
}

/* A finding: leave the target first, so that libFuzzer's own exit is not caught. */
SCD_NORETURN static void finding(const char *what) {
  in_target = 0;
  fprintf(stderr, "fuzz_shards finding: %s\n", what);
  abort();
}

/* ---- reading the input ---- */
struct src {
  const uint8_t *p;
  size_t n;
};
static unsigned u8(struct src *s) {
  if (!s->n) return 0;
  s->n--;
  return *s->p++;
}
/* Mostly `good`; sometimes a value chosen to break things. */
static int64_t num(struct src *s, int64_t good) {
  static const int64_t odd[] = {0, -1, 1, 2, 3, 7, 255, 65535, 65536, 1000000, 1000001, INT32_MAX, (int64_t)INT32_MAX + 1,
                                (int64_t)1 << 40, INT64_MAX, INT64_MIN, -90};
  unsigned k = u8(s);
  if (k < 200) return good;
  if (k < 240) return odd[k % (sizeof odd / sizeof odd[0])];
  return good + (int64_t)(int8_t)u8(s);
}

/* ---- writing the described files ---- */
static hid_t t_vlen(void) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  return t;
}

static void attr_i64(hid_t f, const char *name, int64_t v) {
  hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  H5Sclose(sp);
}

static void attr_str(hid_t f, const char *name, const char *v) {
  hid_t t = t_vlen(), sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, t, &v);
  H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
}

/* An attribute that should be an integer: right, missing, a string, or an array. */
static void attr_int_or_not(struct src *s, hid_t f, const char *name, int64_t good) {
  unsigned k = u8(s);
  if (k == 250) return;
  if (k == 251) {
    attr_str(f, name, "1");
    return;
  }
  if (k == 252) {
    hsize_t two = 2;
    int64_t v[2] = {good, good};
    hid_t sp = H5Screate_simple(1, &two, NULL), a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, v);
    H5Aclose(a);
    H5Sclose(sp);
    return;
  }
  attr_i64(f, name, num(s, good));
}

/* A 1-D numeric dataset of n values from vals (or perturbed): right, missing, a different length,
 * a different type, unwritten (claims a length, stores nothing), or a group. */
static void dset_nums(struct src *s, hid_t f, const char *name, hid_t ftype, const int64_t *vals, int64_t n) {
  unsigned k = u8(s);
  if (k == 250) return;
  if (k == 251) {
    H5Gclose(H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    return;
  }
  hsize_t len = (hsize_t)n;
  if (k == 252) len = (hsize_t)num(s, n) & 0xffffffffffULL;
  if (k == 253) ftype = H5T_IEEE_F32LE;
  if (k == 254) ftype = H5T_STD_I8LE;
  hid_t sp = H5Screate_simple(1, &len, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t chunk = 1;
  if (k == 255 || len > 4096) H5Pset_chunk(dcpl, 1, &chunk); /* lazy: nothing is written */
  hid_t d = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (d >= 0 && k != 255 && len <= 4096 && len > 0) {
    int64_t *v = malloc(len * sizeof *v);
    for (hsize_t i = 0; i < len; i++) v[i] = i < (hsize_t)n ? num(s, vals[i]) : (int64_t)i;
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    free(v);
  }
  if (d >= 0) H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
}

/* A 1-D string dataset: names[0..n-1] or damaged like dset_nums. */
static void dset_strs(struct src *s, hid_t f, const char *name, const char *const *names, int64_t n) {
  unsigned k = u8(s);
  if (k == 250) return;
  if (k == 251) {
    int64_t v[4] = {1, 2, 3, 4};
    dset_nums(s, f, name, H5T_STD_I32LE, v, n < 4 ? n : 4);
    return;
  }
  hsize_t len = (hsize_t)n;
  if (k == 252) len = (hsize_t)num(s, n) & 0xffffffffffULL;
  hid_t t = t_vlen(), sp = H5Screate_simple(1, &len, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t chunk = 1;
  if (k == 253 || len > 4096) H5Pset_chunk(dcpl, 1, &chunk);
  hid_t d = H5Dcreate2(f, name, t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (d >= 0 && k != 253 && len <= 4096 && len > 0) {
    const char **v = malloc(len * sizeof *v);
    for (hsize_t i = 0; i < len; i++) v[i] = u8(s) == 255 ? "../x" : i < (hsize_t)n ? names[i] : "extra";
    H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    free(v);
  }
  if (d >= 0) H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Tclose(t);
}

/* One shard file holding images first .. first+count-1 of C x H x W.  Returns the pixels as
 * stored (read back with a plain H5Dread of the whole dataset: the oracle for the reader's own
 * paths) when the images were written with the shape and type described, else NULL. */
static unsigned char *write_shard(struct src *s, const char *path, int64_t first, int64_t count, int C, int H, int W,
                                  int f32) {
  unsigned char *expect = NULL;
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return NULL;
  unsigned k = u8(s);
  hsize_t dims[4] = {(hsize_t)count, (hsize_t)C, (hsize_t)H, (hsize_t)W};
  if (k == 250) dims[u8(s) & 3] += 1;
  hid_t ft = f32 ? H5T_IEEE_F32LE : H5T_STD_U16LE;
  if (k == 251) ft = H5T_STD_I32LE;
  int rank = k == 252 ? 2 : 4;
  hid_t sp = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t chunk[4] = {1, dims[1] ? dims[1] : 1, dims[2] ? dims[2] : 1, dims[3] ? dims[3] : 1};
  int chunked = (u8(s) & 1) || k == 253;
  if (chunked) H5Pset_chunk(dcpl, rank, chunk);
  hid_t d = k == 254 ? -1 : H5Dcreate2(f, "images", ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  size_t n = (size_t)(dims[0] * dims[1] * dims[2] * dims[3]);
  if (d >= 0 && k != 253 && rank == 4 && n > 0 && n <= ((size_t)1 << 20)) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (float)((i * 37 + (size_t)first) % 1000);
    if (u8(s) == 255) v[n / 2] = 0.0f / 0.0f; /* a NaN pixel (float shards) */
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    free(v);
    if (k < 250 || k > 254) { /* the shape and type described: the reader must return these */
      expect = malloc(n * (f32 ? 4 : 2));
      if (H5Dread(d, f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, expect) < 0) {
        free(expect);
        expect = NULL;
      }
    }
  }
  /* Offsets of the one-image chunks, for the reader's pread path: right or perturbed. */
  int64_t *off = calloc((size_t)count + 1, sizeof *off);
  for (int64_t j = 0; j < count && d >= 0 && chunked && rank == 4; j++) {
    hsize_t at[4] = {(hsize_t)j, 0, 0, 0}, csize = 0;
    unsigned mask = 0;
    haddr_t addr = 0;
    if (H5Dget_chunk_info_by_coord(d, at, &mask, &addr, &csize) >= 0) off[j] = (int64_t)addr;
  }
  if (d >= 0) H5Dclose(d);
  int64_t *idx = malloc(((size_t)count + 1) * sizeof *idx);
  const char **paths = malloc(((size_t)count + 1) * sizeof *paths);
  for (int64_t j = 0; j < count; j++) {
    idx[j] = first + j;
    paths[j] = "class/img.tif";
  }
  dset_nums(s, f, "index", H5T_STD_I64LE, idx, count);
  if (chunked) dset_nums(s, f, "image_offsets", H5T_STD_U64LE, off, count);
  dset_strs(s, f, "paths", paths, count);
  free(idx);
  free(paths);
  free(off);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Fclose(f);
  return expect;
}

/* Image buffers of the current read: a read the reader abandons (exit) leaves them here, and the
 * next input frees them, so refused inputs do not pile up memory. */
static unsigned char *img[2];
static void free_images(void) {
  free(img[0]);
  free(img[1]);
  img[0] = img[1] = NULL;
}

static void clean_dir(void) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[512];
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/fuzz_shards.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) abort();
  for (int fd = 3; fd < (int)sizeof open_at_start; fd++) open_at_start[fd] = (char)fcntl_is_open(fd);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct src s = {data, size};
  free_images();
  clean_dir();
  /* The shape of the set: small, so one execution takes milliseconds. */
  int C = 1 + (int)(u8(&s) % 3), H = 1 + (int)(u8(&s) % 6), W = 1 + (int)(u8(&s) % 6);
  int f32 = u8(&s) & 1;
  int nshards = 1 + (int)(u8(&s) % 3), ncls = 1 + (int)(u8(&s) % 3);
  int64_t counts[3], total = 0;
  for (int k = 0; k < nshards; k++) {
    counts[k] = 1 + u8(&s) % 5;
    total += counts[k];
  }
  char mf[300];
  snprintf(mf, sizeof mf, "%s/manifest.h5", dir);
  hid_t f = H5Fcreate(mf, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return 0;
  unsigned k = u8(&s);
  if (k != 250) attr_str(f, "format", k == 251 ? "scdino-features" : SHARDS_FORMAT);
  attr_int_or_not(&s, f, "version", SHARDS_VERSION);
  attr_int_or_not(&s, f, "channels", C);
  attr_int_or_not(&s, f, "height", H);
  attr_int_or_not(&s, f, "width", W);
  k = u8(&s);
  if (k != 250) attr_str(f, "dtype", k == 251 ? "int8" : f32 ? "float32" : "uint16");
  attr_int_or_not(&s, f, "count", total);
  int64_t source_count = num(&s, total);
  if (source_count != total || u8(&s) == 1) attr_i64(f, "source_count", source_count);
  static const char *const cls[] = {"a", "b", "c"}, *const chn[] = {"x", "y", "z"};
  static const char *const files[] = {"shard-00000.h5", "shard-00001.h5", "shard-00002.h5"};
  dset_strs(&s, f, "class_names", cls, ncls);
  dset_strs(&s, f, "channel_names", chn, C);
  dset_strs(&s, f, "shards", files, nshards);
  dset_nums(&s, f, "shard_counts", H5T_STD_I64LE, counts, nshards);
  int64_t labels[15], mean[3] = {1, 1, 1}, skip[4] = {0, 1, 2, 3};
  for (int64_t i = 0; i < total; i++) labels[i] = i % ncls;
  dset_nums(&s, f, "labels", H5T_STD_I32LE, labels, total);
  dset_nums(&s, f, "mean", H5T_IEEE_F64LE, mean, C);
  dset_nums(&s, f, "std", H5T_IEEE_F64LE, mean, C);
  if (source_count > total) dset_nums(&s, f, "skipped_index", H5T_STD_I64LE, skip, 4);
  H5Fclose(f);
  int64_t first = 0;
  static unsigned char *expect[3];
  for (int j = 0; j < nshards; j++) {
    char p[300];
    snprintf(p, sizeof p, "%s/%s", dir, files[j]);
    free(expect[j]);
    expect[j] = u8(&s) != 250 ? write_shard(&s, p, first, counts[j], C, H, W, f32) : NULL;
    first += counts[j];
  }

  in_target = 1;
  if (setjmp(back)) {
    in_target = 0;
    reset_after_exit();
    if (exit_code != SCD_EXIT_DATA) {
      fprintf(stderr, "the shard reader exited with status %d (expected %d: bad data)\n", exit_code, SCD_EXIT_DATA);
      finding("exit status");
    }
    return 0;
  }
  struct dataset *ds = dataset_open(dir);
  int64_t n = dataset_count(ds);
  size_t ib = dataset_image_bytes(ds);
  if (n < 1 || ib < 1 || ib > ((size_t)1 << 31)) finding("accepted an empty set or images over the 2 GiB limit");
  for (int64_t i = 0; i < n; i++)
    if (dataset_label(ds, i) < 0 || dataset_label(ds, i) >= dataset_nclasses(ds)) finding("label out of range");
  /* Read every image on both paths (a damaged shard ends the reader here), then compare: an
   * accepted set must be the one described, and every image must read back as stored. */
  if ((size_t)n * ib > ((size_t)64 << 20)) { /* far more than was described: one image decides */
    img[0] = malloc(ib);
    int64_t zero = 0;
    dataset_read_images(ds, &zero, 1, img[0]);
    finding("accepted a set far larger than its files");
  }
  for (int pass = 0; pass < 2; pass++) { /* the direct (pread / chunk) path, then H5Dread */
    img[pass] = malloc((size_t)n * ib);
    dataset_set_direct_io(ds, pass == 0);
    for (int64_t i = 0; i < n; i++) dataset_read_images(ds, &i, 1, img[pass] + (size_t)i * ib);
  }
  if (n != total || dataset_channels(ds) != C || dataset_height(ds) != H || dataset_width(ds) != W)
    finding("accepted a set whose count or shape differs from its files");
  int64_t i = 0;
  for (int j = 0; j < nshards; j++)
    for (int64_t r = 0; r < counts[j]; r++, i++)
      for (int pass = 0; pass < 2; pass++)
        if (!expect[j] || memcmp(img[pass] + (size_t)i * ib, expect[j] + (size_t)r * ib, ib) != 0) {
          fprintf(stderr, "image %lld (shard %d, row %lld) %s on the %s path\n", (long long)i, j, (long long)r,
                  expect[j] ? "differs from what was stored" : "was read although it was never written",
                  pass == 0 ? "direct" : "H5Dread");
          finding("wrong pixels");
        }
  free_images();
  char rel[4096];
  for (i = 0; i < n; i++) dataset_relpath(ds, i, rel, sizeof rel);
  dataset_close(ds);
  in_target = 0;
  return 0;
}
