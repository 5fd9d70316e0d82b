/* tests/hostile/h5v1.h - version-1 files for the hostile tests: a copy of an HDF5 file in the form
 * old scdino and h5py (examples/import_pytorch.py until it wrote version 2) write, so that the
 * readers can be tried on it.
 *
 * h5v1_copy(src, dst) writes dst with the same groups, datasets and attributes as src, but in
 * HDF5's earliest format (no checksums: superblock 0, version-1 object headers, groups as symbol
 * tables), every dataset contiguous without filters, every string variable-length UTF-8 (kept in
 * the global heap), and the root attribute 'version' set to 1.  Returns 0, or -1 with a message on
 * stderr. */
#ifndef SCDINO_TESTS_H5V1_H
#define SCDINO_TESTS_H5V1_H

int h5v1_copy(const char *src, const char *dst);

#endif
