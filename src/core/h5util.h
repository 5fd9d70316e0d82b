/* h5util.h - the HDF5 lock and the one set of HDF5 helpers with which scdino reads and writes its
 * files (shards and manifest, checkpoints, features, kNN, attention maps). */
#ifndef SCDINO_H5UTIL_H
#define SCDINO_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the lock -------------------------------------------------------------------------------- */

/* This HDF5 (parallel, so not built thread-safe) is called by one thread at a time: every HDF5
 * call that may run beside another thread's (the loader threads read shards) is made under this
 * process-wide lock.  Recursive.  None of the helpers below takes it: their callers hold it. */
void h5util_lock(void);
void h5util_unlock(void);
/* For check.c's shutdown, which must keep other threads out of a library that exit() is closing:
 * h5util_quiesce waits (at most 10 s, so that a thread stuck in a hung file system cannot hold
 * the exit up) until no other thread is inside HDF5 and keeps them out; h5util_unquiesce gives
 * that back (the exit did not happen); h5util_release_thread gives back every hold of the
 * calling thread (it failed inside a locked call and will wait to be ended by another). */
void h5util_quiesce(void);
void h5util_unquiesce(void);
void h5util_release_thread(void);

/* ---- HDF5's own reason for a failure ------------------------------------------------------------ */

/* Fletcher-32 of n bytes as HDF5's filter computes it (16-bit big-endian words; an odd last byte
 * is the high half of a word); the filter stores it after the chunk, little-endian.  For the shard
 * reader's direct reads, which bypass HDF5's own check. */
uint32_t h5util_fletcher32(const void *data, size_t n);

/* The innermost message of this thread's HDF5 error stack, where the error was detected ("file
 * signature not found" rather than the API's "unable to open file"), into buf; with_func adds
 * " (in FUNCTION)".  Returns buf. */
const char *h5util_reason(char *buf, size_t n, int with_func);

/* ---- reading ----------------------------------------------------------------------------------- */

/* Readers never end the job: they return H5UTIL_OK, H5UTIL_MISSING (no such attribute or dataset)
 * or H5UTIL_BAD (it is there but is not what was asked for, or cannot be read); then h5util_why()
 * says what is wrong in words that name the object ("attribute 'version' must be a single
 * integer", "dataset 'labels' claims 90 values but stores only 0 bytes (damaged or forged file)").
 * The caller puts its file's name in front and decides: an optional attribute may be missing, a
 * damaged data file ends the job with SCD_EXIT_DATA.  A failed attribute read stores nothing (a
 * failed dataset read may have filled part of the caller's buffer).
 *
 * What every reader accepts:
 *   strings  variable- or fixed-length, any character set; a fixed-length string ends at its
 *            first NUL and loses its trailing blanks (space-padded, Fortran style); an unset
 *            variable-length string reads as "".  A string attribute longer than the caller's
 *            buffer is cut to fit.
 *   numbers  of the class asked for only: an integer reader takes integer types (of any size
 *            and sign; a value that does not fit fails), never floating-point ones, which would be
 *            truncated; a real reader takes floating-point types only.
 *   one value  an attribute of one element: a scalar, or an array of one (h5py writes both).
 *   datasets   must store the values their shape claims before they are read: an unwritten or
 *            forged chunked dataset claims any shape in a few bytes (h5util_dset_read). */
enum { H5UTIL_OK = 0, H5UTIL_MISSING = 1, H5UTIL_BAD = 2 };

/* What the last reader of this thread found wrong ("" after success). */
const char *h5util_why(void);

/* For the items of a data file, rc being a reader's status: h5util_need ends the job unless the
 * item was read; h5util_optional returns whether it was read (0: it is missing) and ends the job
 * only when it is there but wrong.  The message is "KIND FILE: why" (SCD_EXIT_DATA); kind says
 * what the file is for ("checkpoint"), NULL for nothing. */
void h5util_need(const char *kind, const char *file, int rc);
int h5util_optional(const char *kind, const char *file, int rc);

/* Open path read-only: H5UTIL_MISSING when there is no such file; H5UTIL_BAD when it is not a
 * regular file (a FIFO would block), not HDF5, or cannot be opened (the reason in h5util_why()).
 * *fid is closed by the caller after success. */
int h5util_file_open(const char *path, hid_t *fid);

/* An output's own kind of file (fs_own_fn, core/fsutil.h): 1 when path is an HDF5 file whose root
 * attribute 'format' is the string format ("scdino-features"), else 0.  Takes the lock itself. */
int h5util_own_format(const char *path, const void *format);

/* A single string, 64-bit integer, or double attribute `name` of obj (a file, group or dataset). */
int h5util_attr_read_str(hid_t obj, const char *name, char *buf, size_t n);
int h5util_attr_read_i64(hid_t obj, const char *name, int64_t *v);
int h5util_attr_read_f64(hid_t obj, const char *name, double *v);
/* 1 to max integers (a scalar is one) into v; their number in *n. */
int h5util_attr_read_i64s(hid_t obj, const char *name, int64_t *v, int max, int *n);

/* Open dataset `name` of loc, which must have `rank` dimensions (1 to 8; its shape into dims) and
 * values of class cls (H5T_NO_CLASS: integers or floating-point values).  *d is closed by the
 * caller (H5Dclose) after success. */
int h5util_dset_open(hid_t loc, const char *name, int rank, H5T_class_t cls, hsize_t *dims, hid_t *d);
/* H5UTIL_OK when dataset d (named `name` in messages) stores the nelem values its shape claims: all
 * their bytes, or, compressed, at least 1/4096 of them (deflate packs about 1/1032 at best). */
int h5util_dset_stored(hid_t d, const char *name, hsize_t nelem);
/* Read all nelem values of dataset d (named `name` in messages) as mtype into buf, once it is
 * known to store them. */
int h5util_dset_read(hid_t d, const char *name, hsize_t nelem, hid_t mtype, void *buf);
/* Read the block of dataset d (rank dimensions) that starts at start and spans count, as mtype into
 * buf (packed, count's shape), with the HDF5 error's reason in h5util_why() on failure (a chunk
 * that fails its checksum, a block outside the shape).  Not locked: callers that share HDF5 with
 * other threads hold h5util_lock. */
int h5util_dset_read_slab(hid_t d, const char *name, int rank, const hsize_t *start, const hsize_t *count,
                          hid_t mtype, void *buf);
/* Open and read a 1-D dataset of exactly n values of class cls (H5T_NO_CLASS as above) as mtype. */
int h5util_dset_read_1d(hid_t loc, const char *name, H5T_class_t cls, hid_t mtype, int64_t n, void *out);
/* A 1-D string dataset of at most max entries as *n malloc'd strings in *out (h5util_strs_free). */
int h5util_dset_read_strs(hid_t loc, const char *name, int64_t max, char ***out, int64_t *n);
void h5util_strs_free(char **s, int64_t n);

/* ---- what HDF5 trusts and scdino checks (h5util_guard.c) ------------------------------------------ */

/* Every object of file fid is reached through hard links only (a soft, external or user-defined
 * link is refused: scdino writes none, and an external one would read another file), and every
 * dataset keeps its values in the file itself (contiguous, chunked or compact; a virtual dataset
 * or external storage is refused: their values would bypass the file's checksums).  0, or -1 with
 * the reason, naming the object, in why.  h5util_file_open checks this before it returns a file. */
int h5util_objects_check(hid_t fid, char *why, size_t n);
/* Before HDF5 reads the n variable-length strings of obj (an attribute when is_attr, else a
 * dataset; `what` names it in messages): each must refer to an object of its own length in a
 * global heap collection that is whole - inside the file, its objects tiling it exactly with sane
 * sizes and unique indices, its free space consistent.  The collections carry no checksum and
 * HDF5 1.10 crashes or hangs on such damage.  0, or -1 with the reason in why ("global heap at
 * offset N is damaged (...)").  The string readers below call it. */
int h5util_gheap_check(hid_t obj, int is_attr, size_t n, const char *what, char *why, size_t wn);

/* ---- writing ----------------------------------------------------------------------------------- */

/* A failure ends the job (SCD_EXIT_FAILURE) with a message naming the file, the object and HDF5's
 * reason.  Every file proves its integrity (doc/formats.md): it is written in the library's newest
 * format, whose superblock, object headers and chunk indices carry checksums; every dataset is
 * chunked with the Fletcher-32 filter (a scalar or empty one is compact, inside its checksummed
 * header); strings are fixed-length, null-terminated UTF-8 (variable-length ones would live in the
 * global heap, which has no checksum; h5py hands them back as bytes). */

/* Create (truncate) path with fapl (H5P_DEFAULT, or one with a driver set) in the newest format. */
hid_t h5util_file_create(const char *path, hid_t fapl);

/* A file built in memory (the core driver, nothing on disk), for writers that must do every byte of
 * I/O themselves, checked (HDF5 1.10 cannot close a file whose write failed and crashes at exit
 * trying again).  h5util_image_create makes one named `name` (the name failure messages give);
 * h5util_image_close closes it, which completes it (the newest format marks an open file in its
 * superblock and clears the mark at close), and leaves the whole file in img->buf (malloc'd, the
 * caller frees it), img->size bytes. */
struct h5util_image {
  void *buf;
  size_t size;
};
hid_t h5util_image_create(const char *name, struct h5util_image *img);
void h5util_image_close(hid_t fid, struct h5util_image *img);
/* The common case: a file `path` built in memory (h5util_image_begin, named after path in failure
 * messages), then closed, written atomically with every write checked (fs_write_buffer: a full
 * disk ends the job with exit 1 naming `what` and the file, nothing half-written left) and freed
 * (h5util_image_save). */
hid_t h5util_image_begin(const char *path, struct h5util_image *img);
void h5util_image_save(hid_t fid, struct h5util_image *img, const char *what, const char *path);
/* The fixed-length string type for strings of up to len bytes (close with H5Tclose). */
hid_t h5util_str_type(size_t len);
/* Set dcpl's layout for a dataset of rank dims and element size elem as described above. */
void h5util_dcpl_checksum(hid_t dcpl, int rank, const hsize_t *dims, size_t elem);
/* Attribute `name` of obj: a scalar when n is 0, else n values in one dimension (even when n is 1:
 * the two are different layouts, and the files keep the one they have). */
void h5util_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *v);
/* Scalar attributes. */
void h5util_attr_write_str(hid_t obj, const char *name, const char *v);
void h5util_attr_write_i32(hid_t obj, const char *name, int32_t v);
void h5util_attr_write_i64(hid_t obj, const char *name, int64_t v);
void h5util_attr_write_f64(hid_t obj, const char *name, double v);
/* Dataset `name` of loc with rank dimensions dims (rank 0: a scalar), written from data (nothing
 * is written when it is empty).  No modification time is recorded, so that the same input gives
 * byte-identical files (the shards, which every rank count must write alike). */
void h5util_dset_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                       const void *data);
/* Dataset creation properties that record no modification time (close with H5Pclose). */
hid_t h5util_dcpl_untimed(void);
/* A 1-D dataset of n strings (fixed-length, as wide as the longest). */
void h5util_dset_write_strs(hid_t loc, const char *name, const char *const *s, hsize_t n);
/* A new group `name` of loc (close with H5Gclose). */
hid_t h5util_group_create(hid_t loc, const char *name);

#endif
