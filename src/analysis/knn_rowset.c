/* knn_rowset.c - the rows of a kNN run: one features file split into reference and query rows
 * (scDINO's global_kNN.py), or two files, every query row voted by every reference row (DINO's
 * eval_knn.py: training donors against held-out donors), their classes matched by name. */
#include "build_config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "data/npshuffle.h"

static void add_note(char *notes, size_t n, const char *fmt, ...) SCD_PRINTF(3, 4);
static void add_note(char *notes, size_t n, const char *fmt, ...) {
  const size_t len = strlen(notes);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(notes + len, n - len, fmt, ap);
  va_end(ap);
}

/* The accuracy needs labels: a file of an unlabelled shard set is refused. */
static void need_labels(const char *path, const struct features *f) {
  if (f->nclasses == 0)
    scd_fatal(SCD_EXIT_INPUT, "kNN needs labelled rows, but %s names no classes: its images came from an unlabelled "
              "shard set (&data labels = 'none', or a file_list without a label column)", path);
}

/* knn.split_by: the rows whose column value is one of knn.query_values are the query rows, the
 * others the reference rows, both in file order.  Every rank reads the column and decides alike. */
static void split_by_column(struct knn_rowset *rs, const struct config *cfg, const char *path) {
  struct features *f = &rs->ref;
  const char *col = cfg->knn.split_by;
  const int m = knn_meta_column(f, col);
  if (m < 0 && strcmp(col, "folder")) {
    char have[1024];
    knn_meta_columns_text(f, have, sizeof have);
    scd_fatal(SCD_EXIT_INPUT, "knn.split_by = '%s' is no metadata column of %s (%s%s); use 'folder' (the first "
              "folder of each path) or a column's name", col, path, f->nmeta ? "its columns: " : "it has none", have);
  }
  if (m >= 0)
    features_read_metadata(path, f);
  else
    features_read_paths(path, f);
  const int64_t n = f->n;
  rs->train_rows = xmalloc(MUL_SIZE((size_t)n, sizeof *rs->train_rows));
  rs->test_rows = xmalloc(MUL_SIZE((size_t)n, sizeof *rs->test_rows));
  for (int64_t i = 0; i < n; i++) {
    char *folder = m >= 0 ? NULL : knn_first_folder(f->paths[i]);
    const char *v = m >= 0 ? f->meta[(size_t)m * (size_t)n + (size_t)i] : folder;
    int query = 0;
    for (int w = 0; w < cfg->knn.n_query_values && !query; w++) query = !strcmp(v, cfg->knn.query_values[w]);
    free(folder);
    if (query)
      rs->test_rows[rs->n_test++] = i;
    else
      rs->train_rows[rs->n_train++] = i;
  }
  if (rs->n_test < 1 || rs->n_train < 1)
    scd_fatal(SCD_EXIT_INPUT, "knn.split_by = '%s' with knn.query_values = '%s'%s leaves %s among the %" PRId64
              " rows of %s (%" PRId64 " have one of those values)", col, cfg->knn.query_values[0],
              cfg->knn.n_query_values > 1 ? ", ..." : "", rs->n_test < 1 ? "no query rows" : "no reference rows", n,
              path, rs->n_test);
}

/* numpy.random.seed(seed); shuffle(arange(n)); reference = first int(fraction * n) rows. */
static void split_at_random(struct knn_rowset *rs, const struct config *cfg, const char *path) {
  const int64_t n = rs->ref.n;
  rs->train_rows = xmalloc(MUL_SIZE((size_t)n, sizeof *rs->train_rows));
  npshuffle_perm((uint32_t)cfg->knn.seed, n, rs->train_rows);
  rs->n_train = (int64_t)(cfg->knn.train_fraction * (double)n);
  rs->n_test = n - rs->n_train;
  if (rs->n_train < 1)
    scd_fatal(SCD_EXIT_INPUT, "knn.train_fraction = %g leaves no reference rows among the %" PRId64 " rows of %s",
              cfg->knn.train_fraction, n, path);
  if (rs->n_test < 1)
    scd_fatal(SCD_EXIT_INPUT, "knn.train_fraction = %g leaves no test rows among the %" PRId64 " rows of %s",
              cfg->knn.train_fraction, n, path);
  rs->test_rows = xmalloc(MUL_SIZE((size_t)rs->n_test, sizeof *rs->test_rows));
  memcpy(rs->test_rows, rs->train_rows + rs->n_train, (size_t)rs->n_test * sizeof *rs->test_rows);
}

void knn_rowset_split(struct knn_rowset *rs, const struct config *cfg, const char *path) {
  memset(rs, 0, sizeof *rs);
  snprintf(rs->ref_path, sizeof rs->ref_path, "%s", path);
  snprintf(rs->query_path, sizeof rs->query_path, "%s", path);
  features_read_meta(path, &rs->ref); /* each rank reads the rows it uses (knn_evaluate_rows) */
  need_labels(path, &rs->ref);
  const int64_t n = rs->ref.n;
  if (cfg->knn.split_by[0])
    split_by_column(rs, cfg, path);
  else
    split_at_random(rs, cfg, path);
  rs->n_rows = n;
  rs->labels = xmalloc(MUL_SIZE((size_t)n, sizeof *rs->labels));
  memcpy(rs->labels, rs->ref.labels, (size_t)n * sizeof *rs->labels);
  rs->nclasses = rs->ref_classes = rs->ref.nclasses;
  rs->class_names = xmalloc(MUL_SIZE((size_t)rs->nclasses, sizeof *rs->class_names));
  memcpy(rs->class_names, rs->ref.class_names, (size_t)rs->nclasses * sizeof *rs->class_names);
  rs->src = (struct knn_source){.d = rs->ref.d, .path = rs->ref_path, .meta = &rs->ref};
}

/* A knn_source's fill for two files: rows below the reference file's count are its rows, the
 * others the query file's.  Each run of rows of one file is one read. */
static void pair_fill(void *ctx, const int64_t *rows, int64_t n, float *dst) {
  const struct knn_rowset *rs = ctx;
  const int64_t nref = rs->ref.n;
  int64_t *local = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *local));
  for (int64_t i = 0; i < n;) {
    const int q = rows[i] >= nref;
    int64_t j = i;
    for (; j < n && (rows[j] >= nref) == q; j++) local[j - i] = q ? rows[j] - nref : rows[j];
    features_read_rows(q ? rs->query_path : rs->ref_path, q ? &rs->query : &rs->ref, local, j - i,
                       dst + (size_t)i * (size_t)rs->ref.d);
    i = j;
  }
  free(local);
}

/* knn.reference / knn.query: checked on rank 0, so that every rank reads the same files. */
static void need_file(const char *key, const char *path) {
  int have = comm_rank() == 0 ? fs_exists(path) : 0;
  comm_bcast(&have, sizeof have, 0);
  if (!have) scd_fatal(SCD_EXIT_INPUT, "knn.%s = '%s': no such file", key, path);
  fs_input_add(path, "features file");
}

void knn_rowset_pair(struct knn_rowset *rs, const struct config *cfg, char *notes, size_t nnotes) {
  memset(rs, 0, sizeof *rs);
  rs->pair = 1;
  need_file("reference", cfg->knn.reference);
  need_file("query", cfg->knn.query);
  snprintf(rs->ref_path, sizeof rs->ref_path, "%s", cfg->knn.reference);
  snprintf(rs->query_path, sizeof rs->query_path, "%s", cfg->knn.query);
  struct features *r = &rs->ref, *q = &rs->query;
  features_read_meta(rs->ref_path, r);
  features_read_meta(rs->query_path, q);
  need_labels(rs->ref_path, r);
  need_labels(rs->query_path, q);
  if (r->d != q->d)
    scd_fatal(SCD_EXIT_DATA, "knn.reference %s has features of %d values, knn.query %s of %d: they are not of one "
              "network", rs->ref_path, r->d, rs->query_path, q->d);
  if (strcmp(r->checkpoint, q->checkpoint) || strcmp(r->checkpoint_key, q->checkpoint_key) || r->epoch != q->epoch) {
    log_warn("kNN: knn.reference comes from the %s network of %s (epoch %" PRId64 "), knn.query from the %s network "
             "of %s (epoch %" PRId64 "): features of two networks are not comparable", r->checkpoint_key,
             r->checkpoint, r->epoch, q->checkpoint_key, q->checkpoint, q->epoch);
    add_note(notes, nnotes, "  note     : reference and query features come from different networks (%s, %s)\n",
             r->checkpoint, q->checkpoint);
  }
  if (r->n > INT32_MAX)
    scd_fatal(SCD_EXIT_INPUT, "knn.reference %s has %" PRId64 " rows; at most %d are supported", rs->ref_path, r->n,
              INT32_MAX);
  /* The classes: the reference's, then the query's others, by name. */
  int *qmap = xmalloc(MUL_SIZE((size_t)q->nclasses, sizeof *qmap));
  rs->class_names = xmalloc(MUL_SIZE((size_t)r->nclasses + (size_t)q->nclasses, sizeof *rs->class_names));
  memcpy(rs->class_names, r->class_names, (size_t)r->nclasses * sizeof *rs->class_names);
  rs->ref_classes = rs->nclasses = r->nclasses;
  for (int c = 0; c < q->nclasses; c++) {
    qmap[c] = -1;
    for (int o = 0; o < r->nclasses && qmap[c] < 0; o++)
      if (!strcmp(q->class_names[c], r->class_names[o])) qmap[c] = o;
    if (qmap[c] < 0) {
      qmap[c] = rs->nclasses;
      rs->class_names[rs->nclasses++] = q->class_names[c];
    }
  }
  rs->n_rows = r->n + q->n;
  rs->labels = xmalloc(MUL_SIZE((size_t)rs->n_rows, sizeof *rs->labels));
  memcpy(rs->labels, r->labels, (size_t)r->n * sizeof *rs->labels);
  int64_t *unknown = xcalloc((size_t)rs->nclasses, sizeof *unknown);
  for (int64_t i = 0; i < q->n; i++) {
    rs->labels[r->n + i] = qmap[q->labels[i]];
    if (rs->labels[r->n + i] >= rs->ref_classes) unknown[rs->labels[r->n + i]]++;
  }
  for (int c = rs->ref_classes; c < rs->nclasses; c++) {
    log_warn("kNN: query class '%s' (%" PRId64 " rows) is not a class of the reference %s: its rows count as wrong",
             rs->class_names[c], unknown[c], rs->ref_path);
    add_note(notes, nnotes, "  note     : query class '%s' (%" PRId64 " rows) is not a class of the reference: its "
             "rows count as wrong\n", rs->class_names[c], unknown[c]);
  }
  free(unknown);
  free(qmap);
  rs->n_train = r->n;
  rs->n_test = q->n;
  rs->train_rows = xmalloc(MUL_SIZE((size_t)r->n, sizeof *rs->train_rows));
  rs->test_rows = xmalloc(MUL_SIZE((size_t)q->n, sizeof *rs->test_rows));
  for (int64_t i = 0; i < r->n; i++) rs->train_rows[i] = i;
  for (int64_t i = 0; i < q->n; i++) rs->test_rows[i] = r->n + i;
  rs->src = (struct knn_source){.d = r->d, .fill = pair_fill, .ctx = rs};
}

void knn_rowset_paths(struct knn_rowset *rs) {
  if (!rs->ref.paths) features_read_paths(rs->ref_path, &rs->ref);
  if (rs->pair && !rs->query.paths) features_read_paths(rs->query_path, &rs->query);
  features_read_metadata(rs->query_path, rs->pair ? &rs->query : &rs->ref);
}

const struct features *knn_rowset_query(const struct knn_rowset *rs, int64_t i, int64_t *file_row) {
  const int64_t row = rs->test_rows[i];
  *file_row = rs->pair ? row - rs->ref.n : row;
  return rs->pair ? &rs->query : &rs->ref;
}

void knn_rowset_free(struct knn_rowset *rs) {
  features_free(&rs->ref);
  if (rs->pair) features_free(&rs->query);
  free(rs->labels);
  free(rs->class_names); /* the names themselves are the files' */
  free(rs->train_rows);
  free(rs->test_rows);
  memset(rs, 0, sizeof *rs);
}
