/* knn.h - weighted k-nearest-neighbour evaluation of feature sets (scDINO global_kNN.py / DINO
 * eval_knn), its metrics, and the kNN report (knn.txt, knn.h5).
 *
 * Method (doc/algorithm.md §8.3), for each test row q and each k:
 *   s_j = q . t_j for every reference (train) row t_j   (cosine: rows are L2-normalised); one
 *         fp32 GEMM per block of test rows (and, on the GPU, per tile of reference rows), so
 *         memory stays bounded
 *   the k_used = min(k, n_train) most similar rows (analysis/knn_lists.h: partial selection on
 *         the CPU, knn_select.c; a shared-memory selection kernel on the GPU, knn_gpu.c)
 *   w_j = exp(s_j / T); score(c) = sum of w_j over the neighbours of class c
 *   classes ranked by score; Top-1: the best class is the truth; Top-2: the truth is among the
 *   first min(2, k) ranked classes.
 * Deterministic tie rules (upstream leaves them to torch.topk / sort):
 *   - neighbours with equal similarity: the reference row that comes first in the reference order
 *     (the shuffled row order) is nearer;
 *   - classes with equal score: the lower class number ranks first;
 *   - only classes that received at least one vote are ranked, so with a single voting class
 *     Top-2 equals Top-1 (upstream may count an arbitrary zero-score class).
 * Weights are computed as exp((s_j - s_1) / T), s_1 the best similarity of the row: the same
 * ranking as exp(s_j / T) (a common factor), without overflow for small T.  Scores are summed
 * in double precision in neighbour order.
 * Metrics per k (sklearn definitions, from the confusion matrix of the Top-1 predictions):
 *   precision(c) = TP / predicted(c)  (0 if c is never predicted)
 *   recall(c)    = TP / support(c)    (0 if c has no test rows)
 *   F1(c)        = 2 TP / (2 TP + FP + FN)  (0 if that is 0/0)
 *   balanced accuracy = mean recall over classes with test rows;
 *   macro F1 = mean F1 over classes that occur in the truth or the predictions.
 * All metrics are computed for every k (knn.h5 has them all); knn.txt prints the per-class table
 * and confusion matrix for one k (knn.table_k, by default the k with the best Top-1).
 * Labels come from the features file, so train and test rows share one encoding and a class
 * absent from either side keeps its number (upstream fits two LabelEncoders).  Any number of
 * test rows works (upstream's n_test // 100 chunking failed below 100), k above the reference
 * count is evaluated as k = n_train with a warning in the report (upstream's topk failed), and
 * the report files are replaced atomically (upstream appended to global_kNN.txt).
 * The query rows are also grouped by the columns knn.group_by selects (their metadata columns, a
 * CSV file list's, and/or the first folder of their paths): the Top-1 / Top-2 per value of each
 * column (e.g. per donor), for every feature set at every k (knn_groups.c). */
#ifndef SCDINO_KNN_H
#define SCDINO_KNN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/features_io.h"
#include "backend/device.h"
#include "input/config.h"
#include "model/ops.h"

/* calculation = 'knn' (knn_run.c; every rank); returns the exit status. */
int knn_run(const struct config *cfg);

#define KNN_MAX_SETS 4 /* feature sets side by side in one report */

struct knn_result {
  int nk, nclasses;
  int64_t *k;             /* [nk] as requested */
  int64_t *k_used;        /* [nk] min(k, n_train) */
  int64_t n_train;
  double temperature;
  int64_t *train_support; /* [C] reference rows per class */
  /* Counts, summed over the test rows seen so far (one block, so one all-reduce adds them): */
  int64_t *counts;        /* [1 + 2 nk + nk C C] */
  int64_t *n_test;        /* -> counts[0] */
  int64_t *top1_correct;  /* [nk] */
  int64_t *top2_correct;  /* [nk] */
  int64_t *confusion;     /* [nk][C][C]: [k][true class][predicted class] */
  /* Derived by knn_result_finish: */
  int64_t *test_support;  /* [C] test rows per class */
  double *top1, *top2;    /* [nk] accuracy in percent */
  double *balanced_accuracy, *macro_f1; /* [nk] in percent */
  double *precision, *recall, *f1;      /* [nk][C] in [0, 1] */
  /* Wall time of knn_accumulate on this rank, split into the similarity GEMM and the rest
   * (top-k selection and votes). */
  double seconds_gemm, seconds_select;
};

/* Prepare r for n_train reference rows with the given labels (each in 0..nclasses-1). */
void knn_result_init(struct knn_result *r, int nclasses, const int64_t *k, int nk, double temperature,
                     const int32_t *train_labels, int64_t n_train);
/* Classify n_test rows of test [n_test][d] against train [n_train][d] (n_train as given to
 * knn_result_init) and add the outcome to r's counts.  May be called for several blocks. */
void knn_accumulate(struct knn_result *r, const float *train, const int32_t *train_labels,
                    const float *test, const int32_t *test_labels, int64_t n_test, int d);
/* Collective: sum the counts over all MPI ranks. */
void knn_result_allreduce(struct knn_result *r);
/* Turn the counts into accuracies and per-class metrics. */
void knn_result_finish(struct knn_result *r);
void knn_result_free(struct knn_result *r);

/* Bytes of similarity scratch per block of test rows (default 64 MiB, at least one row per
 * block); tests cut the test rows into many blocks with small values, benchmarks try sizes. */
void knn_set_block_bytes(size_t bytes);
/* Test rows per block instead (&knn block_rows; 0: from the bytes above).  Every rank must set the
 * same value: the blocks' lists are merged over the ranks. */
void knn_set_block_rows(int64_t rows);

/* Progress lines of knn_accumulate on rank 0 ("kNN on LABEL: DONE/TOTAL test rows ...", as
 * core/progress.h prints them), every `seconds` (0: after every block of test rows); none when
 * seconds < 0 (the default).  A set done within `seconds` prints none. */
void knn_set_progress(const char *label, double seconds);

/* Serial convenience: init + accumulate + finish. */
void knn_evaluate(const float *train, const int32_t *train_labels, int64_t n_train, const float *test,
                  const int32_t *test_labels, int64_t n_test, int d, int nclasses, const int64_t *k,
                  int nk, double temperature, struct knn_result *r);

/* The similarity GEMM and the neighbour selection run on this device when it has the knn service
 * (the CUDA backend's: the GPU path, for the largest k up to the service's max_k), else (NULL, or
 * the CPU backend's, the default) on the CPU.  The lists, and so the results, are the same on both
 * for the same similarities (knn_lists.h). */
void knn_set_device(const struct device *dev);

/* Where a feature set's n rows of d values come from, each rank taking only the rows it uses: in
 * memory (x [n][d]), a features file (path and its features_read_meta), or made on demand (fill,
 * not collective: rows[0..n) of the set into dst [n][d]).  One of x, path and fill is set. */
struct knn_source {
  int d;
  const float *x;
  const char *path;
  const struct features *meta;
  void (*fill)(void *ctx, const int64_t *rows, int64_t n, float *dst);
  void *ctx;
};

/* The per-row outcome of an evaluation, gathered on rank 0 (knn_evaluate_rows): every test row's
 * Top-1 prediction and Top-2 outcome at every k, and its `keep` nearest reference rows.  The caller
 * sets keep (clamped to 0 .. the largest k used); the arrays are rank 0's, NULL elsewhere. */
struct knn_rows {
  int keep;
  int64_t n;           /* test rows */
  int nk;
  int32_t *pred;       /* [n][nk] predicted class */
  unsigned char *hit2; /* [n][nk] 1: the truth is among the first min(2, k) classes */
  int32_t *nb;         /* [n][keep] nearest reference rows, nearest first: positions in train_rows */
  float *nb_sim;       /* [n][keep] their similarities */
};
void knn_rows_free(struct knn_rows *rows);

/* Collective: evaluate the feature set src (labels [n]) with reference rows train_rows and test
 * rows test_rows (row numbers into the set).  Each MPI rank holds a contiguous share of the
 * reference rows (1/size of them, on its GPU when there is one) and the test rows of the blocks
 * it owns (blocks are owned in turn); the test rows go through in blocks, the owner broadcasts
 * its block, each rank finds the block's neighbours in its share, an MPI reduction merges the
 * lists on the owner and the owner votes; the counts are summed, so every rank ends with the
 * complete, finished result, the same for any rank count.  This is the entry point for any
 * feature set (trained network, baselines, a randomly initialised network).  rows (NULL: not
 * wanted) gets the per-row outcome on rank 0: each block's owner sends it there. */
void knn_evaluate_rows(const struct knn_source *src, const int32_t *labels, int nclasses,
                       const int64_t *train_rows, int64_t n_train, const int64_t *test_rows,
                       int64_t n_test, const int64_t *k, int nk, double temperature,
                       struct knn_result *r, struct knn_rows *rows);

/* Host bytes per rank that knn_evaluate_rows takes beside an in-memory set (the reference share,
 * the owned test rows, a block of test rows, their lists and, on the CPU, similarities), for the
 * memory check (core/membudget.h). */
double knn_rows_host_bytes(int64_t n_train, int64_t n_test, int d, int64_t kmax, int nclasses, int nk);

/* ---- The rows of a run (knn_rowset.c) --------------------------------------------------------- */

/* What calculation = 'knn' evaluates: one features file whose rows are split into reference and
 * query rows (knn.features, knn.train_fraction, knn.seed: scDINO's global_kNN.py), or two files
 * (knn.reference, knn.query) whose every query row is voted by every reference row (DINO
 * eval_knn.py: training donors against held-out donors).  The rows of src are the reference file's,
 * then (pair) the query file's; the classes are the reference file's, then those only the query
 * file has (matched by name: a query row of such a class cannot be predicted right).  A file without
 * classes (an unlabelled shard set's) is refused (exit 3): the accuracy needs labels. */
struct knn_rowset {
  int pair;
  char ref_path[4096], query_path[4096]; /* the same file when not pair */
  struct features ref, query;            /* features_read_meta of each (query: unused when not pair) */
  struct knn_source src;
  int64_t n_rows;                        /* rows of src */
  int32_t *labels;                       /* [n_rows], numbered as class_names */
  int nclasses, ref_classes;             /* class_names[0 .. ref_classes) are the reference file's */
  char **class_names;                    /* [nclasses] */
  int64_t *train_rows, n_train;          /* the reference rows of src, in the reference order */
  int64_t *test_rows, n_test;            /* the query rows of src */
};
/* Collective.  One file, split as numpy.random.seed(knn.seed); shuffle(arange(n)) orders it. */
void knn_rowset_split(struct knn_rowset *rs, const struct config *cfg, const char *path);
/* Collective.  knn.reference and knn.query: the same feature dimension (else exit 3); a different
 * checkpoint or network is warned of.  Notes for the report are appended to notes (size n). */
void knn_rowset_pair(struct knn_rowset *rs, const struct config *cfg, char *notes, size_t n);
/* Rank 0: read the paths of the file(s) and the metadata values of the query file (the report's
 * per-row tables and groups). */
void knn_rowset_paths(struct knn_rowset *rs);
/* Query row i (0 .. n_test): its features file (meta), and its row there. */
const struct features *knn_rowset_query(const struct knn_rowset *rs, int64_t i, int64_t *file_row);
void knn_rowset_free(struct knn_rowset *rs);

/* ---- Report (knn_report.c) ------------------------------------------------------------------- */

struct knn_set {
  char name[32];   /* HDF5 group in knn.h5: "trained", "raw_pixels", "random_init", ... */
  char label[64];  /* column heading in the tables */
  int dim;         /* feature dimension */
  double seconds;  /* wall time of the evaluation (feature building included) */
  struct knn_result res;
  /* The per-row outcome (rank 0; knn_evaluate_rows): always for sets[0], whose kept neighbours go to
   * knn.h5's query/; for the others only when the query rows are grouped (pred NULL otherwise). */
  struct knn_rows rows;
};

/* Grouping columns with more distinct values than this among the query rows get no per-group table
 * (a note says so): a group of a handful of rows has no accuracy worth reading. */
#define KNN_MAX_GROUPS 64

/* A features file's metadata columns (knn_groups.c; used by knn.group_by and knn.split_by): the
 * number of the column named name (-1: none); the names as "'a', 'b'" into buf (size n); the first
 * folder of a row's path, the 'folder' column ("" when it has none; the caller frees it). */
int knn_meta_column(const struct features *f, const char *name);
void knn_meta_columns_text(const struct features *f, char *buf, size_t n);
char *knn_first_folder(const char *path);

/* The accuracy per value of one grouping column over the query rows (knn_groups.c). */
struct knn_group_col {
  char *name;                  /* the metadata column, or "folder" (the first folder of each path) */
  int meta;                    /* its number among the query file's metadata columns; -1: 'folder' */
  int64_t nvalues;             /* distinct values among the query rows */
  int ngroups;                 /* nvalues, or 0 when that exceeds KNN_MAX_GROUPS (no table) */
  char **values;               /* [ngroups] sorted by bytes */
  int64_t *test_support;       /* [ngroups] query rows of each value */
  int32_t *value_of_row;       /* [n_test] each query row's value (numbered as values) */
  double *top1[KNN_MAX_SETS];  /* [nk][ngroups] percent, for each feature set (sets[s].rows) */
  double *top2[KNN_MAX_SETS];
};

struct knn_report {
  char features_file[4096];
  char checkpoint[1024];
  char checkpoint_key[64];
  int64_t epoch;
  int64_t n_rows;           /* rows of the features file */
  double train_fraction;
  int64_t seed;
  char split[512];          /* knn.split_by's rule, "" = the random split (train_fraction, seed) */
  int64_t table_k;          /* k of the per-class tables (one of the evaluated k) */
  int nclasses;
  char *const *class_names; /* [nclasses], borrowed */
  int nsets;
  struct knn_set sets[KNN_MAX_SETS]; /* sets[0]: the trained features */
  char notes[4096];         /* free text lines for the report (baselines left out, ...) */
  /* The rows (rank 0: with the paths): one file split, or reference and query files. */
  const struct knn_rowset *rs;
  /* The grouping columns of the query rows (knn.group_by; knn_groups_select), their accuracies
   * filled by knn_report_groups. */
  int ngroupcols;
  struct knn_group_col *groups;
};

/* Every rank, before the evaluation: the grouping columns of knn.group_by (words: 'metadata' =
 * every metadata column of the query file, 'folder' = the first folder of each query row's path,
 * a metadata column's name, or 'none' alone) into rep->groups, in the order named, each once; a
 * name that is no metadata column of the query file (and not 'folder') ends the job (exit 2).  A
 * metadata column named 'folder' is meant by the word 'folder'.  The query file is rs's. */
void knn_groups_select(struct knn_report *rep, const struct config *cfg, const struct knn_rowset *rs);
/* Rank 0, after the evaluation: each grouping column's values over the query rows (the metadata
 * read: features_read_metadata; the paths: knn_rowset_paths) and, for every set with rows, the
 * Top-1 / Top-2 of each value's query rows at every k.  Before knn_report_text / knn_report_write. */
void knn_report_groups(struct knn_report *rep);
/* One table per grouping column at k (knn_report_text), and knn.h5's groups/ (knn_report_write). */
void knn_groups_text(const struct knn_report *rep, FILE *f, int64_t k);
void knn_groups_write_h5(const struct knn_report *rep, hid_t fid);
void knn_groups_free(struct knn_report *rep);

/* The k reported in the per-class tables: want if non-zero (it must be one of the evaluated k;
 * -1 otherwise), else the k with the best Top-1 of sets[0] (the smaller k on a tie). */
int64_t knn_report_pick_k(const struct knn_report *rep, int64_t want);
/* The human-readable report.  full=1 (knn.txt) starts with upstream's lines
 * "Run: ...", "{k}-NN Top1: X, Top2: Y" (integers, rounded half to even like Python's round)
 * and "----", and ends with the confusion matrix; full=0 is the stdout table. */
void knn_report_text(const struct knn_report *rep, FILE *f, int full);
/* Write run_dir/<name>.txt and run_dir/<name>.h5 atomically (one rank calls it); name "knn", or
 * "knn_EEEE" for one epoch of features.epochs. */
void knn_report_write(const struct knn_report *rep, const char *run_dir, const char *name);
/* Before the evaluation, on the rank that will write them: end the job (exit 2) when <name>.txt or
 * <name>.h5 of run_dir would replace an input of the run or a file that is not a kNN report
 * (core/fsutil.h, fs_output_claim). */
void knn_report_claim(const char *run_dir, const char *name);
void knn_report_free(struct knn_report *rep);

/* ---- kNN per epoch (knn_run.c, knn_epochs.c) ------------------------------------------------- */

#define KNN_EPOCHS_FILE "knn_epochs.txt"
#define KNN_EPOCHS_FIRST "==== scdino kNN per epoch" /* how knn_epochs.txt begins */

/* The kNN-vs-epoch table: the trained features' Top-1 at every k for each epoch, and the
 * baselines' once (they do not depend on the epoch: the same rows, the same random network). */
struct knn_epochs {
  int n;                     /* epochs */
  int64_t *epoch;            /* [n] */
  double (*top1)[16];        /* [n][nk] percent */
  int nk;
  int64_t k[16];
  char key[64];              /* the network (teacher, student) */
  int64_t n_test;            /* query rows */
  int nbase;                 /* baselines */
  char base_label[KNN_MAX_SETS][64];
  double base_top1[KNN_MAX_SETS][16];
};

/* Collective: calculation='knn' over run_dir/features_EEEE.h5 of each epoch (ascending): the report
 * knn_EEEE.txt / knn_EEEE.h5 of each, the last one's also as knn.txt / knn.h5 and with the
 * baselines (knn.baselines; computed once), and the table run_dir/knn_epochs.txt; every output is
 * claimed before any work.  t (rank 0; NULL: not wanted) gets the table (knn_epochs_free). */
int knn_run_epochs(const struct config *cfg, const int64_t *epochs, int n, struct knn_epochs *t);
/* Rank 0: add a report's row (its sets[0]) and, when it has them, its baselines. */
void knn_epochs_add(struct knn_epochs *t, const struct knn_report *rep);
/* The table as text: for knn_epochs.txt (and pipeline.txt, indented by indent spaces). */
void knn_epochs_text(const struct knn_epochs *t, FILE *f, int indent);
/* knn_epochs.txt of run_dir: claim it before the work (exit 2 when it may not be written), write
 * it atomically. */
void knn_epochs_claim(const char *run_dir);
void knn_epochs_write(const struct knn_epochs *t, const char *run_dir);
void knn_epochs_free(struct knn_epochs *t);

/* ---- kNN per model of &features checkpoints (knn_run.c, knn_models.c) ------------------------- */

#define KNN_MODELS_FILE "knn_models.txt"
#define KNN_MODELS_FIRST "==== scdino kNN per model" /* how knn_models.txt begins */
#define KNN_MAX_MODELS 64

/* The comparison of models on one shard set: each model's trained Top-1 at every k and its
 * random-init baseline (its own architecture), the raw pixels once (the same rows for all). */
struct knn_models {
  int n;
  char name[KNN_MAX_MODELS][64];      /* run_dir/<name>/ */
  char key[KNN_MAX_MODELS][64];       /* teacher, student */
  int64_t epoch[KNN_MAX_MODELS];
  double top1[KNN_MAX_MODELS][16];
  int has_random[KNN_MAX_MODELS];
  char random_label[KNN_MAX_MODELS][64];
  double random_top1[KNN_MAX_MODELS][16];
  int has_raw;
  char raw_label[64];
  double raw_top1[16];
  int nk;
  int64_t k[16];
  int64_t n_test;
};

/* Rank 0: add model `name`'s report. */
void knn_models_add(struct knn_models *t, const char *name, const struct knn_report *rep);
/* knn_models.txt of run_dir: the text, its claim before the work (exit 2), the atomic write. */
void knn_models_text(const struct knn_models *t, FILE *f);
void knn_models_claim(const char *run_dir);
void knn_models_write(const struct knn_models *t, const char *run_dir);

/* ---- Raw-pixel baseline (knn_pixels.c) -------------------------------------------------------- */

/* Feature vectors of raw pixels for the shard-set images of the rows of f (its index column), as
 * the training input sees them: selected channels (cfg->data.channels), centre crop
 * (cfg->data.center_crop), per-image min-max, bilinear resize to side x side (side 0: native
 * size), the manifest's mean/std normalisation, flattened and L2-normalised.  The default side 16
 * (knn.pixel_size) keeps the coarse layout of a 50x50 cell in 16x16xC values (1280 for five
 * channels): a baseline that sees cell shape and channel intensities but not fine texture, and a
 * similarity GEMM of the same order as that of 384-d features.  The vectors are made where they
 * are used (knn_pixels_rows is a knn_source's fill: each rank reads and processes only the images
 * of its rows), so no rank holds them all.  The shard set is cfg->data.shard_dir; its class
 * names and labels must match f's (a features file of another shard set is refused, naming
 * features_file).  An image that min-max scaling cannot handle (a constant non-zero channel) gets
 * a zero row. */
struct knn_pixels;
struct knn_pixels *knn_pixels_open(const struct config *cfg, const struct features *f, const char *features_file,
                                   int side);
int knn_pixels_dim(const struct knn_pixels *p);
/* "knn pixel_size = S (H x W x C channels per image)", for messages. */
const char *knn_pixels_what(const struct knn_pixels *p);
/* Rows rows[0..n) of f (row numbers) into dst [n][dim]; ctx is the knn_pixels. */
void knn_pixels_rows(void *ctx, const int64_t *rows, int64_t n, float *dst);
/* Collective: the zero rows made on all ranks; frees p. */
int64_t knn_pixels_close(struct knn_pixels *p);

#endif
