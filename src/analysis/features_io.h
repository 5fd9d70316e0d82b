/* features_io.h - the CLS features file run_dir/features_EEEE.h5: writing, reading, validation.
 *
 * Layout (doc/formats.md), all readable with h5py / h5dump:
 *   features     float32 [N, D]   L2-normalised CLS rows of the chosen network
 *   labels       int32   [N]      class number, 0 <= label < number of class names; -1 when there
 *                                 are no class names (an unlabelled shard set)
 *   paths        string  [N]      source image path (relative to the TIFF tree)
 *   index        int64   [N]      global sample index in the shard set (unique, >= 0)
 *   class_names  string  [C]      (C = 0: unlabelled)
 *   metadata_columns  string [M]  the shard set's metadata columns (a CSV file list's), in order;
 *                                 absent when there are none
 *   metadata/<name>   string [N]  each row's value of column <name>
 *   root attributes: format = "scdino-features", version = 2, checkpoint (string), epoch (int64),
 *   checkpoint_key ("teacher" | "student"); normalization ("checkpoint", "data", "values", "none"),
 *   norm_mean, norm_std (float64 [channels], when normalised): a record of the input; and, when a
 *   row is more than the last block's CLS token (&features n_last_blocks > 1 or
 *   avgpool_patchtokens), its layout: n_last_blocks, avgpool_patchtokens (0/1), embed_dim (int64)
 *   and blocks (int64 [n_last_blocks], 0-based), a row being the CLS tokens of those blocks, then
 *   the mean patch token of the last one, each embed_dim wide, L2-normalised as a whole.
 * Strings are written fixed-length (checksummed: doc/formats.md); variable-length ones (version 1) are read too.
 * Features and labels travel in one file, so rows can never be misaligned (upstream writes two
 * CSV files and aligns them by replaying an RNG). */
#ifndef SCDINO_FEATURES_IO_H
#define SCDINO_FEATURES_IO_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#define FEATURES_FORMAT "scdino-features"
#define FEATURES_VERSION 2        /* 2: checksummed (newest HDF5 format, Fletcher-32, fixed strings) */
#define FEATURES_VERSION_OLDEST 1 /* version 1 files (no checksums) are still read */
/* Largest tolerated | ||row|| - 1 | on reading: rows are stored L2-normalised. */
#define FEATURES_NORM_TOL 1e-3

struct features {
  int64_t n;            /* rows */
  int d;                /* feature dimension */
  int nclasses;         /* number of class names */
  float *x;             /* [n][d] */
  int32_t *labels;      /* [n] */
  int64_t *index;       /* [n] */
  char **paths;         /* [n] */
  char **class_names;   /* [nclasses] */
  int nmeta;            /* metadata columns */
  char **meta_names;    /* [nmeta] */
  char **meta;          /* [nmeta][n], column-major: meta[m * n + i]; NULL until read (features_read,
                           features_read_metadata) */
  char checkpoint[1024];    /* the checkpoint the features come from */
  char checkpoint_key[64];  /* "teacher" or "student" */
  int64_t epoch;            /* epoch of that checkpoint */
  /* How the images were normalised (written, not read back: a record): "checkpoint", "data",
   * "values" or "none" ("" : not recorded), and the mean/std of each input channel. */
  char normalization[16];
  int nnorm;
  double norm_mean[64], norm_std[64]; /* 64: FEATURES_MAX_CHANNELS (analysis/features.h) */
  /* The row layout (features_net_layout, analysis/features.h): the CLS tokens of the last
   * n_last_blocks of `depth` blocks, then with avgpool the mean patch token; n_last_blocks 1 and
   * avgpool 0 (the last block's CLS token, as files without the attributes) write no attributes.
   * Read back (0 for depth when not recorded). */
  int n_last_blocks, avgpool, depth;
};

/* Write f to path atomically (temporary name, fsync, rename).  Not collective: one rank writes.
 * The caller's rows must already be L2-normalised (features_l2_normalize). */
void features_write(const char *path, const struct features *f);
/* Everything of f but the 'features' dataset (labels, index, paths, class names, attributes) into
 * the open file fid: the rows are written by the caller (features_write, or batch by batch by
 * features_stream_close's caller, analysis/features.h). */
void features_write_meta(hid_t fid, const struct features *f);

/* Read and validate path into f (every array malloc'd; features_free releases them).  Anything
 * wrong - not HDF5, wrong format or version, a missing dataset or attribute, shapes that disagree,
 * labels outside the class list, a duplicate or negative index, non-finite values, rows that are
 * not unit length - ends the job with SCD_EXIT_DATA and a message naming the file and the item. */
void features_read(const char *path, struct features *f);
/* features_read without the rows, the paths and the metadata values (f->x, f->paths and f->meta
 * NULL; the metadata columns' names are read): what the kNN needs of every row, whose feature rows
 * each rank then reads in parts (features_read_rows). */
void features_read_meta(const char *path, struct features *f);
/* Its 'paths' into f->paths, for f read by features_read_meta (rank 0 of the kNN, for its report). */
void features_read_paths(const char *path, struct features *f);
/* The metadata values of every row into f->meta (f: its features_read_meta; rank 0 of the kNN,
 * for the accuracy per metadata group). */
void features_read_metadata(const char *path, struct features *f);
/* Rows rows[0..n) of path's 'features' (f: its features_read_meta) into dst [n][f->d], in the
 * order asked, validated as features_read validates them; the file is read in ascending order in
 * windows of up to 16 MiB, so only the wanted rows and one window are held. */
void features_read_rows(const char *path, const struct features *f, const int64_t *rows, int64_t n, float *dst);
void features_free(struct features *f);

/* Scale each of the n rows of x [n][d] to unit Euclidean length (a zero row stays zero), as
 * torch.nn.functional.normalize(x, dim=1, p=2) does (eps 1e-12). */
void features_l2_normalize(float *x, int64_t n, int d);

/* "features_EEEE.h5" for an epoch (four digits, more when the epoch needs them). */
void features_filename(char *buf, size_t n, int64_t epoch);
/* Find the newest run_dir/features_EEEE.h5 by epoch number.  Returns 0 and fills path (size n)
 * and *epoch, or -1 if there is none. */
int features_find_latest(const char *run_dir, char *path, size_t n, int64_t *epoch);

#endif
