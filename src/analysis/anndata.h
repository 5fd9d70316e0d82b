/* anndata.h - AnnData files (.h5ad), what scanpy and anndata.read_h5ad open: a writer for any
 * table of rows (anndata_write) and the sibling of every features file, features_EEEE.h5ad
 * (anndata_write_features).
 *
 * The layout follows AnnData's on-disk format (anndata 0.8 and later; doc/formats.md): every group
 * and dataset carries the attributes encoding-type and encoding-version:
 *   /         anndata 0.1.0; also scdino's format = "scdino-anndata", version = 1
 *   X         array 0.2.0, float32 [n, d]
 *   obs       dataframe 0.2.0, attributes _index = "_index" and column-order = its columns
 *     _index    string-array 0.2.0 [n] (obs_names)
 *     COLUMN    categorical 0.2.0 (codes int32 [n], -1 = missing; categories string-array;
 *               attribute ordered = False), string-array 0.2.0 or array 0.2.0 (int64, float64)
 *   var       dataframe 0.2.0: _index = var_names [d], no columns
 *   obsm, varm, obsp, varp, layers   dict 0.1.0, empty
 *   uns       dict 0.1.0: string 0.2.0 and numeric-scalar 0.2.0 scalars, string-array and array
 * Written as every scdino file is (core/h5util.h): newest HDF5 format, checksummed headers,
 * chunked datasets with Fletcher-32, fixed-length UTF-8 strings, which anndata decodes (it reads
 * string arrays with h5py's asstr() and decodes fixed-length attributes).  scdino never reads an
 * .h5ad back. */
#ifndef SCDINO_ANNDATA_H
#define SCDINO_ANNDATA_H

#include <stddef.h>
#include <stdint.h>

#include "input/config.h"

#define ANNDATA_FORMAT "scdino-anndata" /* root attribute format: a file scdino may replace */
#define ANNDATA_VERSION 1

/* An obs column or an uns entry.  obs columns are array kinds of n values (count is n). */
enum anndata_kind {
  ANNDATA_CATEGORICAL, /* codes [count] over strs [ncategories] */
  ANNDATA_STRINGS,     /* strs [count] */
  ANNDATA_INT64S,      /* i64 [count] */
  ANNDATA_FLOAT64S,    /* f64 [count] */
  ANNDATA_STRING,      /* str (uns only) */
  ANNDATA_INT64,       /* i (uns only) */
  ANNDATA_FLOAT64,     /* f (uns only) */
  ANNDATA_BOOL         /* i != 0 (uns only): numpy.bool_ */
};

struct anndata_value {
  const char *name; /* no '/' */
  enum anndata_kind kind;
  int64_t count;
  const char *const *strs;
  int64_t ncategories;
  const int32_t *codes;
  const int64_t *i64;
  const double *f64;
  const char *str;
  int64_t i;
  double f;
};

struct anndata {
  int64_t n;                       /* observations: rows of X, >= 1 */
  int d;                           /* variables: columns of X, >= 1 */
  const char *const *obs_names;    /* [n], unique */
  const struct anndata_value *obs; /* columns of obs, in order */
  int nobs;
  const char *const *var_names;    /* [d]; NULL: "f0", "f1", ... */
  const struct anndata_value *uns;
  int nuns;
  /* Rows [row0, row0 + cnt) of X into dst [cnt][d]: X is written in windows of at most 16 MiB. */
  void (*rows)(void *arg, int64_t row0, int64_t cnt, float *dst);
  void *arg;
};

/* Write a to path under a temporary name, renamed into place when complete.  Duplicate obs_names
 * end the job (SCD_EXIT_DATA); so does anndata_check_replace's refusal.  Not collective; the
 * caller holds h5util_lock where other threads may call HDF5. */
void anndata_write(const char *path, const struct anndata *a);
/* Whether path may be (re)written: it does not exist, or it is an AnnData file scdino wrote (root
 * attribute format = ANNDATA_FORMAT).  Anything else ends the job (SCD_EXIT_INPUT) naming the file
 * and what it is; `hint` (NULL: none) is appended, e.g. how to turn the output off. */
void anndata_check_replace(const char *path, const char *hint);

/* ---- the features file's sibling ------------------------------------------------------------- */

struct dataset;
struct features;
struct features_net;
struct features_prep;

/* "DIR/features_EEEE.h5ad" for "DIR/features_EEEE.h5" (".h5ad" appended to any other name). */
void anndata_features_path(const char *features_path, char *out, size_t n);
/* Collective, before features_path is computed: anndata_check_replace on its sibling (rank 0
 * looks; every rank ends with the message). */
void anndata_check_features(const char *features_path);
/* Rank 0, once features_path is complete: its sibling .h5ad.  X = its rows as stored (read back
 * window by window); obs_names = the paths; obs = anndata_features_obs's columns; uns = the run's
 * provenance (doc/formats.md).  meta is what was written into the features file
 * (features_stream_close). */
/* The obs columns of the rows of f (its metadata values read): label (categorical over the class
 * names, in class order; left out when f has no classes, an unlabelled shard set's rows), split
 * (categorical 'train'/'val' from split [n]: 0 or 1, the split of the deck each row belongs to),
 * index (int64, the shard set's sample index), then every metadata column of f in its order:
 * categorical over its sorted distinct values when it has fewer values than rows, else strings (as
 * anndata itself stores a string column); a metadata column named like an earlier column (or
 * '_index') is written as "meta_<name>".  o->cols [o->n] point into f, split and o. */
struct anndata_obs {
  int n;
  struct anndata_value *cols;
  int nmeta;
  char **names;        /* [nmeta] the metadata columns' obs names */
  const char ***cats;  /* [nmeta] their categories */
  int32_t **codes;     /* [nmeta] their codes (NULL: a string column) */
};
void anndata_features_obs(const struct features *f, const int32_t *split, struct anndata_obs *o);
void anndata_obs_free(struct anndata_obs *o);
void anndata_write_features(const struct config *cfg, struct dataset *ds, const struct features_net *net,
                            const struct features_prep *prep, const char *features_path,
                            const struct features *meta);

#endif
