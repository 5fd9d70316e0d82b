/* filelist.h - the CSV file list of &data file_list: the images to prepare, named by path, with an
 * optional label column and any number of metadata columns (doc/formats.md §2).
 *
 * The file (RFC 4180): UTF-8 only (a leading byte-order mark is skipped), a header row naming the
 * columns, then one record per image; fields separated by commas, records by LF, CRLF or CR; a
 * field in double quotes may hold commas and quotes (doubled: "a ""b"""); nothing is trimmed;
 * empty lines are skipped.  Column names are unique, non-empty, at most FILELIST_NAME_MAX bytes,
 * without '/' and not '.' (each becomes an HDF5 dataset name), at most FILELIST_MAX_COLUMNS of
 * them.  No field holds a control character (line breaks included).
 *
 * The list: path_column gives each image's file, relative to the CSV's folder or absolute; it must
 * be a regular file, and no two rows may name one file (compared by device and inode, so "a.tif",
 * "./a.tif" and a link to it are one file).  The classes are the sorted distinct values of the
 * label column (as ImageFolder sorts its folders: by bytes), when labels take it; every other
 * column is a metadata column of strings, in header order.  The images keep the CSV's row order.
 *
 * Every problem is reported as "FILE:LINE: what" (the line a record starts on; 1 for the header),
 * for the caller to end the job with exit status 2. */
#ifndef SCDINO_FILELIST_H
#define SCDINO_FILELIST_H

#include <stddef.h>
#include <stdint.h>

struct imagefolder;

#define FILELIST_MAX_COLUMNS 256
#define FILELIST_NAME_MAX 255

/* A parsed CSV: the header's column names and the records' fields. */
struct csv_table {
  int ncols;
  char **names;   /* [ncols] */
  int64_t header_line;
  int64_t nrows;
  char **cells;   /* [nrows][ncols], row-major */
  int64_t *line;  /* [nrows]: the line each record starts on */
};

/* Parse the n bytes of buf, the contents of the file `name` (for messages).  0, or -1 with
 * "name:line: what" in why (size whyn) and t empty. */
int csv_parse(const char *buf, size_t n, const char *name, struct csv_table *t, char *why, size_t whyn);
void csv_free(struct csv_table *t);

/* How the list is read: the path column's name, the label column's name, and whether labels come
 * from it ("column": it must exist; "auto": when the header has it; "none": never, it is then a
 * metadata column like any other). */
struct filelist_opts {
  const char *path_column, *label_column, *labels;
};

/* Read, parse and check the CSV file csv into f (paths as written in the file, labels, class names,
 * metadata; f->from_list set; nclasses 0 and every label -1 when there are no labels).  root (size
 * rootn) gets the absolute folder of the CSV, against which relative paths are resolved.  0, or
 * -1 with why (size whyn) and f empty. */
int filelist_load(const char *csv, const struct filelist_opts *o, struct imagefolder *f, char *root, size_t rootn,
                  char *why, size_t whyn);

#endif
