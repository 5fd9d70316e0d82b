/* h5util.h - small HDF5 writing helpers shared by the output files (features, kNN, attention, shards). */
#ifndef SCDINO_H5UTIL_H
#define SCDINO_H5UTIL_H

#include <hdf5.h>
#include <stdint.h>

/* Every call ends the job through CHECK_H5 on an HDF5 error.  None takes the HDF5 lock
 * (shards_h5_lock): callers that share HDF5 with other threads hold it. */

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
