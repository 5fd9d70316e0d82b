/* h5util.h - the HDF5 lock and the HDF5 helpers shared by the files scdino reads and writes (shards,
 * checkpoints, features, kNN, attention). */
#ifndef SCDINO_H5UTIL_H
#define SCDINO_H5UTIL_H

#include <hdf5.h>
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

/* ---- writing ----------------------------------------------------------------------------------- */

/* Every call ends the job through CHECK_H5 on an HDF5 error. */

/* Variable-length UTF-8 string type (h5py hands such values back as str); close with H5Tclose. */
hid_t h5util_str_type(void);
/* Create dataset name of the given rank and shape under loc (default properties) and write data. */
void h5util_write_dset(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                       const void *data);
/* A 1-D dataset of n variable-length strings. */
void h5util_write_strings(hid_t loc, const char *name, const char *const *s, hsize_t n);
/* Attribute name of obj: a scalar when n is 0, else n values in one dimension. */
void h5util_write_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *v);
/* Scalar attributes: a variable-length string, a 64-bit integer, a double. */
void h5util_write_attr_str(hid_t obj, const char *name, const char *v);
void h5util_write_attr_i64(hid_t obj, const char *name, int64_t v);
void h5util_write_attr_f64(hid_t obj, const char *name, double v);

#endif
