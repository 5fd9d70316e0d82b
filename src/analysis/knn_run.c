/* knn_run.c - calculation='knn': pick the features file, split its rows, evaluate the trained
 * features and the baselines, and write the report. */
#include "build_config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "analysis/features_io.h"
#include "analysis/knn.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/membudget.h"
#include "data/shards.h"

static void pick_features_file_here(const struct config *cfg, char *path, size_t n) {
  if (cfg->knn.features[0]) {
    if (!fs_exists(cfg->knn.features))
      scd_fatal(SCD_EXIT_INPUT, "knn.features = '%s': no such file", cfg->knn.features);
    snprintf(path, n, "%s", cfg->knn.features);
    return;
  }
  int64_t epoch;
  if (features_find_latest(cfg->control.run_dir, path, n, &epoch) != 0)
    scd_fatal(SCD_EXIT_DATA, "no features file to evaluate: knn.features is empty and run_dir '%s' holds no "
              "features_EEEE.h5 (run calculation='features' first, or name a file with knn.features)",
              cfg->control.run_dir);
}

/* cfg->knn.features, else the newest run_dir/features_EEEE.h5: chosen by rank 0 and broadcast, so
 * that every rank reads the same file even where their views of the directory differ (relative
 * paths, file-system caches); a file that is not there ends the job from rank 0. */
static void pick_features_file(const struct config *cfg, char *path, size_t n) {
  if (comm_rank() == 0) pick_features_file_here(cfg, path, n);
  comm_bcast(path, n, 0);
}

static void add_note(struct knn_report *rep, const char *fmt, ...) SCD_PRINTF(2, 3);
static void add_note(struct knn_report *rep, const char *fmt, ...) {
  size_t len = strlen(rep->notes);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rep->notes + len, sizeof rep->notes - len, fmt, ap);
  va_end(ap);
}

/* Evaluate one feature set into the next slot of the report. */
/* &control progress_seconds, for the sets' progress lines. */
static double progress_seconds = -1.0;

/* The per-row outcome is kept for the trained features (with its keep nearest neighbours), and
 * for every set when the query rows are grouped (knn.group_by). */
static void add_set(struct knn_report *rep, const char *name, const char *label, const struct knn_source *src,
                    const struct knn_rowset *rs, const int64_t *k, int nk, double temperature, double t0, int keep) {
  const int d = src->d;
  SCD_ASSERT(rep->nsets < KNN_MAX_SETS);
  struct knn_set *s = &rep->sets[rep->nsets++];
  snprintf(s->name, sizeof s->name, "%s", name);
  snprintf(s->label, sizeof s->label, "%s", label);
  s->dim = d;
  s->rows.keep = keep;
  const int want_rows = rep->nsets == 1 || rep->ngroupcols > 0;
  knn_set_progress(label, progress_seconds);
  knn_evaluate_rows(src, rs->labels, rs->nclasses, rs->train_rows, rs->n_train, rs->test_rows, rs->n_test, k, nk,
                    temperature, &s->res, want_rows ? &s->rows : NULL);
  s->seconds = wtime() - t0;
  int best = 0;
  for (int j = 1; j < nk; j++)
    if (s->res.top1[j] > s->res.top1[best]) best = j;
  log_info("kNN on %s (%d-d): best Top-1 %.2f %% (k = %" PRId64 "), %.2f s", label, d, s->res.top1[best],
           s->res.k[best], s->seconds);
}

/* The raw-pixel baseline, when the shard set of the features is at hand. */
static void raw_pixel_baseline(const struct config *cfg, struct knn_report *rep, const struct knn_rowset *rs,
                               const int64_t *k, int nk) {
  const struct features *f = &rs->ref;
  const char *fpath = rs->ref_path;
  const int64_t n_train = rs->n_train;
  char manifest[4096];
  fs_join(manifest, sizeof manifest, cfg->data.shard_dir, SHARDS_MANIFEST);
  /* Rank 0 decides for all: the baseline's reductions must be made by every rank or by none. */
  int have = comm_rank() == 0 ? fs_exists(manifest) : 0;
  comm_bcast(&have, sizeof have, 0);
  if (!have) {
    log_warn("raw-pixel kNN baseline left out: no shard set at data.shard_dir = '%s'", cfg->data.shard_dir);
    add_note(rep, "  note     : raw-pixel baseline left out (no shard set at %s)\n", cfg->data.shard_dir);
    return;
  }
  double t0 = wtime();
  const int side = (int)cfg->knn.pixel_size;
  struct knn_pixels *px = knn_pixels_open(cfg, f, fpath, side);
  const int d = knn_pixels_dim(px);
  /* The vectors are made where they are used: each rank holds its reference share and its blocks'
   * test rows of them (core/membudget.h). */
  {
    int64_t kmax = 0;
    for (int j = 0; j < nk; j++)
      if (k[j] > kmax) kmax = k[j];
    struct membudget mb = {0};
    membudget_add(&mb, knn_rows_host_bytes(n_train, f->n - n_train, d, kmax, f->nclasses, nk), "raw-pixel vectors",
                  "%s, %lld images", knn_pixels_what(px), (long long)f->n);
    char how[256];
    const double limit = membudget_limit(cfg->system.memory_per_rank, how, sizeof how);
    membudget_check(&mb, "knn's raw-pixel baseline", limit, how);
  }
  char label[64];
  if (side > 0)
    snprintf(label, sizeof label, "raw pixels %dx%d", side, side);
  else
    snprintf(label, sizeof label, "raw pixels");
  const struct knn_source src = {.d = d, .fill = knn_pixels_rows, .ctx = px};
  add_set(rep, "raw_pixels", label, &src, rs, k, nk, cfg->knn.temperature, t0, 0);
  const int64_t invalid = knn_pixels_close(px);
  if (invalid) {
    log_warn("raw-pixel baseline: %" PRId64 " image(s) have a constant non-zero channel and get a zero vector", invalid);
    add_note(rep, "  note     : raw pixels: %" PRId64 " image(s) with a constant non-zero channel use a zero vector\n",
             invalid);
  }
}

/* The random-init baseline: a fresh network of the checkpoint's architecture on the same rows.
 * Its features are computed in whole batches over the ranks (so their bits do not depend on the
 * rank count) and gathered on every rank: the one set of the report that every rank holds whole
 * (features_compute's memory check counts it). */
static void random_init_baseline(const struct config *cfg, struct knn_report *rep, const struct knn_rowset *rs,
                                 const int64_t *k, int nk) {
  double t0 = wtime();
  int d = 0;
  char why[1200];
  float *x = features_random_init(cfg, &rs->ref, rs->ref_path, &d, why, sizeof why);
  if (!x) {
    log_warn("random-init kNN baseline left out: %s", why);
    add_note(rep, "  note     : random-init baseline left out (%s)\n", why);
    return;
  }
  char label[64];
  snprintf(label, sizeof label, "random init (seed %ld)", cfg->control.seed);
  const struct knn_source src = {.d = d, .x = x};
  add_set(rep, "random_init", label, &src, rs, k, nk, cfg->knn.temperature, t0, 0);
  free(x);
}

/* Where one evaluation's numbers go besides its report (rank 0): a kNN-vs-epoch table, a
 * comparison of models (model: its name), or nowhere. */
struct knn_sink {
  struct knn_epochs *epochs;
  struct knn_models *models;
  const char *model;
};

/* One evaluation: the report goes to run_dir/<names[i]>.txt and .h5 for each name, with the note
 * line `note` (NULL: none); its numbers to sink (NULL: none). */
static int knn_run_file(const struct config *cfg, const char *const *names, int nnames, const struct knn_sink *sink,
                        const char *note) {
  progress_seconds = cfg->control.progress_seconds;
  /* On a GPU the similarity GEMMs and the neighbour selection run there (the same lists). */
  const struct device *dev = backend_select(cfg);
  knn_set_device(dev);
  knn_set_block_rows(cfg->knn.block_rows);
  const int nk = cfg->knn.n_k;
  if (nk < 1) scd_fatal(SCD_EXIT_INPUT, "knn.k is empty: give at least one neighbour count");
  int64_t k[16];
  int table_k_found = cfg->knn.table_k == 0;
  for (int j = 0; j < nk; j++) {
    k[j] = cfg->knn.k[j];
    table_k_found |= k[j] == cfg->knn.table_k;
  }
  if (!table_k_found)
    scd_fatal(SCD_EXIT_INPUT, "knn.table_k = %ld is not one of the evaluated knn.k", cfg->knn.table_k);

  static struct knn_report rep; /* large (paths, notes): keep it off the stack */
  memset(&rep, 0, sizeof rep);
  static struct knn_rowset rs;
  if (cfg->knn.reference[0]) {
    knn_rowset_pair(&rs, cfg, rep.notes, sizeof rep.notes);
  } else {
    char fpath[4096];
    pick_features_file(cfg, fpath, sizeof fpath);
    fs_input_add(fpath, "features file");
    knn_rowset_split(&rs, cfg, fpath);
  }
  if (note) add_note(&rep, "  note     : %s\n", note);
  knn_groups_select(&rep, cfg, &rs); /* a column the query file lacks ends the job before any work */
  for (int i = 0; i < nnames && comm_rank() == 0; i++)
    knn_report_claim(cfg->control.run_dir, names[i]); /* before anything is computed for it */
  double t0 = wtime();
  const struct features *f = &rs.ref;
  if (rs.pair)
    log_info("kNN: reference %s (%" PRId64 " rows), query %s (%" PRId64 " rows): %d features, %d classes (%s network, "
             "epoch %" PRId64 "); neighbours on the %s backend, reference rows shared over %d rank%s", rs.ref_path,
             rs.n_train, rs.query_path, rs.n_test, f->d, rs.nclasses, f->checkpoint_key, f->epoch, dev->name,
             comm_size(), comm_size() > 1 ? "s" : "");
  else
    log_info("kNN: %s: %" PRId64 " rows of %d features, %d classes (%s network, epoch %" PRId64 "); neighbours on the "
             "%s backend, reference rows shared over %d rank%s", rs.ref_path, f->n, f->d, f->nclasses,
             f->checkpoint_key, f->epoch, dev->name, comm_size(), comm_size() > 1 ? "s" : "");
  const int64_t n_train = rs.n_train, n_test = rs.n_test;

  /* The neighbours kept per query row: -1 = the largest k with two files, none with one. */
  int64_t kmax = 0;
  for (int j = 0; j < nk; j++)
    if (k[j] > kmax) kmax = k[j];
  if (kmax > n_train) kmax = n_train;
  int64_t keep = cfg->knn.keep_neighbours < 0 ? (rs.pair ? kmax : 0) : cfg->knn.keep_neighbours;
  if (keep > kmax) {
    log_warn("knn.keep_neighbours = %" PRId64 " exceeds the largest k used (%" PRId64 "): %" PRId64 " are kept", keep,
             kmax, kmax);
    keep = kmax;
  }

  /* The rows' labels, indices and order on every rank, then the evaluation's shares and blocks,
   * checked before they are taken (core/membudget.h); rank 0 also keeps the per-row outcome. */
  {
    struct membudget mb = {0};
    membudget_add(&mb, (double)rs.n_rows * (sizeof(int32_t) + 2 * sizeof(int64_t)),
                  rs.pair ? "the features files' labels and indices" : "the features file's labels and indices",
                  rs.pair ? "their %" PRId64 " rows" : "its %" PRId64 " rows", rs.n_rows);
    membudget_add(&mb, knn_rows_host_bytes(n_train, n_test, f->d, kmax, rs.nclasses, nk),
                  "reference share, owned test rows, blocks, neighbour lists", "knn block_rows = %ld, the largest k %" PRId64
                  ", %d rank(s)", cfg->knn.block_rows, kmax, comm_size());
    const int row_sets = rep.ngroupcols > 0 && cfg->knn.baselines && !rs.pair ? 3 : 1;
    membudget_add(&mb, 2.0 * (double)n_test * (5.0 * nk * row_sets + 8.0 * (double)keep),
                  "each query row's outcome (rank 0)", "knn.keep_neighbours = %" PRId64 ", %d k, %d feature set(s)", keep,
                  nk, row_sets);
    char how[256];
    const double limit = membudget_limit(cfg->system.memory_per_rank, how, sizeof how);
    membudget_check(&mb, "knn", limit, how);
  }

  snprintf(rep.features_file, sizeof rep.features_file, "%s", rs.query_path);
  snprintf(rep.checkpoint, sizeof rep.checkpoint, "%s", f->checkpoint);
  snprintf(rep.checkpoint_key, sizeof rep.checkpoint_key, "%s", f->checkpoint_key);
  rep.epoch = rs.pair ? rs.query.epoch : f->epoch;
  rep.n_rows = rs.n_rows;
  rep.train_fraction = cfg->knn.train_fraction;
  rep.seed = cfg->knn.seed;
  if (cfg->knn.split_by[0] && !rs.pair) {
    size_t len = (size_t)snprintf(rep.split, sizeof rep.split, "knn.split_by '%s': query rows where it is ",
                                  cfg->knn.split_by);
    for (int w = 0; w < cfg->knn.n_query_values && len < sizeof rep.split; w++)
      len += (size_t)snprintf(rep.split + len, sizeof rep.split - len, "%s'%s'", w ? ", " : "", cfg->knn.query_values[w]);
  }
  rep.nclasses = rs.nclasses;
  rep.class_names = rs.class_names;
  rep.rs = &rs;

  char label[64];
  snprintf(label, sizeof label, "%s", f->checkpoint_key[0] ? f->checkpoint_key : "trained");
  add_set(&rep, "trained", label, &rs.src, &rs, k, nk, cfg->knn.temperature, t0, (int)keep);
  rep.table_k = knn_report_pick_k(&rep, cfg->knn.table_k);
  for (int j = 0; j < nk; j++)
    if (rep.sets[0].res.k_used[j] != k[j])
      log_warn("k = %" PRId64 " exceeds the %" PRId64 " reference rows; clamped to %" PRId64, k[j], n_train,
               rep.sets[0].res.k_used[j]);

  /* Baselines on the same rows: raw pixels, and a randomly initialised network of the checkpoint's
   * architecture (analysis/features.h).  A further one is one add_set call.  Two files: their rows
   * are of two shard sets, which the features files do not name: no baselines. */
  if (cfg->knn.baselines && rs.pair) {
    log_info("kNN: no baselines for knn.reference / knn.query (their images are in two shard sets)");
    add_note(&rep, "  note     : no baselines with knn.reference / knn.query\n");
  } else if (cfg->knn.baselines) {
    raw_pixel_baseline(cfg, &rep, &rs, k, nk);
    random_init_baseline(cfg, &rep, &rs, k, nk);
  }

  if (comm_rank() == 0) {
    knn_rowset_paths(&rs);
    knn_report_groups(&rep);
    if (log_verbosity() >= 1) {
      log_raw("\n");
      knn_report_text(&rep, stdout, 0);
      log_raw("\n");
      fflush(stdout);
    }
    for (int i = 0; i < nnames; i++) {
      knn_report_write(&rep, cfg->control.run_dir, names[i]);
      log_info("kNN report written to %s/%s.txt and %s/%s.h5", cfg->control.run_dir, names[i], cfg->control.run_dir,
               names[i]);
    }
    if (sink && sink->epochs) knn_epochs_add(sink->epochs, &rep);
    if (sink && sink->models) knn_models_add(sink->models, sink->model, &rep);
  }
  comm_barrier();
  knn_report_free(&rep);
  knn_rowset_free(&rs);
  return 0;
}

int knn_run_epochs(const struct config *cfg, const int64_t *epochs, int n, struct knn_epochs *t) {
  const char *dir = cfg->control.run_dir;
  char name[64], last[64] = "knn";
  /* Every output is refused or accepted before the first evaluation. */
  for (int i = 0; i < n && comm_rank() == 0; i++) {
    snprintf(name, sizeof name, "knn_%04" PRId64, epochs[i]);
    knn_report_claim(dir, name);
    if (i == n - 1) knn_report_claim(dir, last);
  }
  if (comm_rank() == 0) knn_epochs_claim(dir);
  struct knn_epochs table;
  memset(&table, 0, sizeof table);
  static struct config c;
  c = *cfg;
  for (int i = 0; i < n; i++) {
    char path[4096];
    features_epoch_path(path, sizeof path, dir, "features", epochs[i]);
    if (strlen(path) >= sizeof c.knn.features)
      scd_fatal(SCD_EXIT_INPUT, "the path %s is too long; choose a shorter control.run_dir", path);
    memcpy(c.knn.features, path, strlen(path) + 1);
    /* The baselines are the same for every epoch: once, with the last. */
    c.knn.baselines = i == n - 1 ? cfg->knn.baselines : 0;
    snprintf(name, sizeof name, "knn_%04" PRId64, epochs[i]);
    const char *names[2] = {name, last};
    log_info("kNN: features file %d of %d (features.epochs): %s", i + 1, n, path);
    char note[128];
    snprintf(note, sizeof note, "baselines: in knn_%04" PRId64 ".txt, the last epoch's (the same for every epoch)",
             epochs[n - 1]);
    const struct knn_sink sink = {.epochs = &table};
    const int rc = knn_run_file(&c, names, i == n - 1 ? 2 : 1, &sink, i < n - 1 && cfg->knn.baselines ? note : NULL);
    if (rc != 0) return rc;
  }
  if (comm_rank() == 0) {
    knn_epochs_write(&table, dir);
    log_info("kNN per epoch: %d epoch%s in %s/%s", n, n > 1 ? "s" : "", dir, KNN_EPOCHS_FILE);
    if (t)
      *t = table;
    else
      knn_epochs_free(&table);
  }
  comm_barrier();
  return 0;
}

/* &features checkpoints: each model's newest run_dir/<name>/features_EEEE.h5 into its
 * run_dir/<name>/knn.txt, knn.h5, and the comparison run_dir/knn_models.txt; the features of a
 * model that has none are computed first, so one launch compares the models. */
static int knn_run_models(const struct config *cfg) {
  const int n = cfg->features.n_checkpoints;
  static struct config c;
  c = *cfg;
  static struct knn_models table;
  memset(&table, 0, sizeof table);
  char (*files)[4096] = xmalloc((size_t)n * sizeof *files);
  int *missing = xcalloc((size_t)n, sizeof *missing), nmissing = 0;
  for (int i = 0; i < n; i++) {
    char dir[4096];
    features_model_dir(cfg, i, dir, sizeof dir);
    int64_t epoch;
    if (comm_rank() == 0) missing[i] = features_find_latest(dir, files[i], sizeof files[i], &epoch) != 0;
    comm_bcast(&missing[i], sizeof missing[i], 0);
    nmissing += missing[i];
  }
  if (nmissing > 0) {
    log_info("kNN: %d of %d model%s without a features file: computing %s first", nmissing, n, n > 1 ? "s" : "",
             nmissing > 1 ? "them" : "it");
    features_extract_models(cfg, missing);
  }
  free(missing);
  /* Every model's features file there and every output accepted before the first evaluation. */
  for (int i = 0; i < n; i++) {
    char dir[4096];
    features_model_dir(cfg, i, dir, sizeof dir);
    if (comm_rank() == 0) {
      int64_t epoch;
      if (features_find_latest(dir, files[i], sizeof files[i], &epoch) != 0)
        scd_fatal(SCD_EXIT_FAILURE, "features.checkpoints: %s holds no features_EEEE.h5 of model '%s'", dir,
                  cfg->features.checkpoints[i]);
      knn_report_claim(dir, "knn");
    }
    comm_bcast(files[i], sizeof files[i], 0);
  }
  if (comm_rank() == 0) knn_models_claim(cfg->control.run_dir);
  for (int i = 0; i < n; i++) {
    char dir[4096], name[CFG_WORDLEN];
    features_model_dir(cfg, i, dir, sizeof dir);
    config_model_name(cfg->features.checkpoints[i], name, sizeof name);
    if (strlen(dir) >= sizeof c.control.run_dir || strlen(files[i]) >= sizeof c.knn.features)
      scd_fatal(SCD_EXIT_INPUT, "the path %s is too long; choose a shorter control.run_dir", files[i]);
    memcpy(c.control.run_dir, dir, strlen(dir) + 1);
    memcpy(c.knn.features, files[i], strlen(files[i]) + 1);
    log_info("kNN: model %d of %d (features.checkpoints): %s", i + 1, n, files[i]);
    const char *names[1] = {"knn"};
    const struct knn_sink sink = {.models = &table, .model = name};
    const int rc = knn_run_file(&c, names, 1, &sink, NULL);
    if (rc != 0) {
      free(files);
      return rc;
    }
  }
  free(files);
  if (comm_rank() == 0) {
    knn_models_write(&table, cfg->control.run_dir);
    log_info("kNN per model: %d model%s in %s/%s", n, n > 1 ? "s" : "", cfg->control.run_dir, KNN_MODELS_FILE);
  }
  comm_barrier();
  return 0;
}

int knn_run(const struct config *cfg) {
  if (cfg->features.n_checkpoints > 0) return knn_run_models(cfg);
  int n;
  int64_t *epochs = features_epochs_select(cfg, "features", "calculation='features' with the same "
                                           "features.epochs writes them", &n);
  if (!epochs) {
    const char *names[1] = {"knn"};
    return knn_run_file(cfg, names, 1, NULL, NULL);
  }
  const int rc = knn_run_epochs(cfg, epochs, n, NULL);
  free(epochs);
  return rc;
}
