/* pipeline.c - calculation='pipeline': prepare (if needed), train, features, knn and attention maps
 * in one launch, then a summary table. */
#include "build_config.h"

#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/anndata.h"
#include "analysis/attention.h"
#include "analysis/features.h"
#include "analysis/features_io.h"
#include "analysis/knn.h"
#include "workflow/pipeline.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "core/signals.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/split.h"
#include "train/checkpoint.h"
#include "train/train.h"

double pipeline_log_last(const char *log_txt, const char *key) {
  FILE *f = fopen(log_txt, "r");
  if (!f) return NAN;
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const size_t np = strlen(pat);
  double value = NAN;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    const char *p = strstr(line, pat);
    if (!p) continue;
    char *end;
    const double v = strtod(p + np, &end);
    value = end != p + np ? v : NAN; /* "null" (a non-finite average) reads as NaN */
  }
  free(line);
  fclose(f);
  return value;
}

void pipeline_read_knn(const char *knn_h5, struct pipeline_summary *s) {
  hid_t f;
  h5util_need(NULL, knn_h5, h5util_file_open(knn_h5, &f));
  hsize_t nk;
  hid_t d;
  h5util_need(NULL, knn_h5, h5util_dset_open(f, "k", 1, H5T_INTEGER, &nk, &d));
  if (nk < 1 || nk > 16) scd_fatal(SCD_EXIT_DATA, "%s: k has %lld values", knn_h5, (long long)nk);
  s->nk = (int)nk;
  h5util_need(NULL, knn_h5, h5util_dset_read(d, "k", nk, H5T_NATIVE_LLONG, s->k));
  CHECK_H5(H5Dclose(d));
  static const char *const sets[3] = {"trained", "raw_pixels", "random_init"};
  s->nsets = 0;
  for (int i = 0; i < 3; i++) {
    if (H5Lexists(f, sets[i], H5P_DEFAULT) <= 0) continue;
    const int j = s->nsets++;
    hid_t g = (hid_t)CHECK_H5(H5Gopen2(f, sets[i], H5P_DEFAULT));
    snprintf(s->set_name[j], sizeof s->set_name[j], "%s", sets[i]);
    s->set_label[j][0] = '\0';
    h5util_optional(NULL, knn_h5, h5util_attr_read_str(g, "label", s->set_label[j], sizeof s->set_label[j]));
    h5util_need(NULL, knn_h5, h5util_dset_read_1d(g, "top1", H5T_FLOAT, H5T_NATIVE_DOUBLE, s->nk, s->top1[j]));
    h5util_need(NULL, knn_h5, h5util_dset_read_1d(g, "top2", H5T_FLOAT, H5T_NATIVE_DOUBLE, s->nk, s->top2[j]));
    CHECK_H5(H5Gclose(g));
  }
  int64_t n_test = 0;
  h5util_optional(NULL, knn_h5, h5util_attr_read_i64(f, "n_test", &n_test));
  s->n_test = n_test;
  CHECK_H5(H5Fclose(f));
}

#define PIPELINE_TXT_FIRST "==== scdino pipeline summary" /* how pipeline.txt begins */

/* The best Top-1 over k of set j (first of equal ones), its k index in *at. */
static double best_top1(const struct pipeline_summary *s, int j, int *at) {
  *at = 0;
  for (int i = 1; i < s->nk; i++)
    if (s->top1[j][i] > s->top1[j][*at]) *at = i;
  return s->top1[j][*at];
}

/* The best baseline's set index and its k index. */
static int best_baseline(const struct pipeline_summary *s, int *at) {
  int best = 1;
  double top = best_top1(s, 1, at);
  for (int j = 2; j < s->nsets; j++) {
    int k;
    const double v = best_top1(s, j, &k);
    if (v > top) best = j, top = v, *at = k;
  }
  return best;
}

static double std_error(double top1_percent, long long n) {
  const double p = top1_percent / 100.0;
  return 100.0 * sqrt(p * (1 - p) / (double)n);
}

int pipeline_beats_baselines(const struct pipeline_summary *s) {
  if (s->nsets < 2 || s->nk < 1 || s->n_test < 1) return -1;
  int kt, kb;
  const int b = best_baseline(s, &kb);
  if (s->top1[b][kb] >= 100.0) return -1; /* nothing left to beat */
  return best_top1(s, 0, &kt) - s->top1[b][kb] > 2 * std_error(s->top1[b][kb], s->n_test);
}

/* text as lines of at most 100 columns after indent spaces, the first one after lead too (the
 * others after as many spaces). */
static void print_wrapped(FILE *f, int indent, const char *lead, const char *text) {
  const char *p = text;
  for (int first = 1; *p; first = 0) {
    const int in = indent + (int)strlen(lead);
    const char *end = p, *cut = NULL;
    while (*end && end - p < 100 - in) {
      if (*end == ' ') cut = end;
      end++;
    }
    if (!*end || !cut) cut = end;
    fprintf(f, "%*s%s%.*s\n", indent, "", first ? lead : "", (int)(cut - p), p);
    if (first) indent = in;
    p = *cut == ' ' ? cut + 1 : cut;
  }
}

/* Whether the trained features beat the baselines; if not, the likely causes. */
static void print_verdict(const struct pipeline_summary *s, FILE *f) {
  if (s->nsets < 2 || s->nk < 1 || s->n_test < 1) return;
  int kt, kb;
  const int b = best_baseline(s, &kb), beats = pipeline_beats_baselines(s);
  if (beats < 0) {
    fprintf(f, "\n  A baseline classifies every test row: the data leave the trained network nothing to beat.\n");
    return;
  }
  const double t = best_top1(s, 0, &kt), se = std_error(s->top1[b][kb], s->n_test);
  const char *bname = s->set_label[b][0] ? s->set_label[b] : s->set_name[b];
  char text[1024];
  if (beats) {
    snprintf(text, sizeof text, "The trained network learnt more than the baselines: best Top-1 %.2f %% (k=%lld) "
             "against %.2f %% (%s, k=%lld), more than two standard errors (%.2f points each on %lld test rows).",
             t, s->k[kt], s->top1[b][kb], bname, s->k[kb], se, s->n_test);
    fputc('\n', f);
    print_wrapped(f, 2, "", text);
    return;
  }
  snprintf(text, sizeof text, "WARNING: the trained network did not learn more than the baselines: its best Top-1, "
           "%.2f %% (k=%lld), is not above the best baseline's, %.2f %% (%s, k=%lld), by more than two standard "
           "errors (%.2f points each on %lld test rows). Likely causes:", t, s->k[kt], s->top1[b][kb], bname,
           s->k[kb], se, s->n_test);
  fputc('\n', f);
  print_wrapped(f, 2, "", text);
  const int mask = train_diag_failure(s->final_loss, s->diag[0], s->diag[1], s->out_dim);
  if (mask & TRAIN_DIAG_UNIFORM) {
    snprintf(text, sizeof text, "the teacher's outputs stayed nearly uniform (entropy %.3f of ln out_dim = %.3f, "
             "loss %.3f in the last epoch): %s", s->diag[0], log((double)s->out_dim), s->final_loss,
             train_diag_cure(TRAIN_DIAG_UNIFORM));
    print_wrapped(f, 4, "- ", text);
  }
  if (mask & TRAIN_DIAG_ONE_PROTOTYPE) {
    snprintf(text, sizeof text, "the teacher's outputs collapsed to one prototype (batch-mean entropy %.3f in the "
             "last epoch): %s", s->diag[1], train_diag_cure(TRAIN_DIAG_ONE_PROTOTYPE));
    print_wrapped(f, 4, "- ", text);
  }
  fprintf(f, "    - too short a training for this model and data (more epochs; see the loss in log.txt)\n"
          "    - augmentations or a min-max scaling that remove what tells the classes apart, or channels that\n"
          "      do not (the raw-pixel baseline sees the images without the augmentations)\n");
}

void pipeline_summary_print(const struct pipeline_summary *s, FILE *f) {
  char dur[32];
  double total = 0;
  fprintf(f, PIPELINE_TXT_FIRST " ====\n");
  fprintf(f, "  images      : %lld in %s (%lld in the training split); %lld feature rows\n", s->images, s->shard_dir,
          s->train_images, s->feature_rows);
  if (isfinite(s->final_loss))
    fprintf(f, "  training    : %lld epochs, final loss %.6f\n", s->epochs, s->final_loss);
  else
    fprintf(f, "  training    : %lld epochs, final loss n/a\n", s->epochs);
  if (isfinite(s->diag[0]))
    fprintf(f, "  last epoch  : teacher entropy %.3f per image, %.3f of the batch mean (ln out_dim = %.3f); KL %.3f; "
            "centre norm %.3g\n", s->diag[0], s->diag[1], log((double)s->out_dim), s->diag[2], s->diag[3]);
  fprintf(f, "  wall time   :");
  for (int i = 0; i < s->nsteps; i++) {
    total += s->step_seconds[i];
    fprintf(f, " %s %s%s", s->step_name[i], s->step_skipped[i] ? "skipped" : log_fmt_duration(s->step_seconds[i], dur, sizeof dur),
            i + 1 < s->nsteps ? "," : "");
  }
  fprintf(f, "; total %s\n", log_fmt_duration(total, dur, sizeof dur));
  if (s->knn_skipped) {
    fprintf(f, "\n  kNN         : left out (the images have no labels)\n");
  } else {
    /* Columns: the trained features first, then the baselines (knn.h5 set labels). */
    fprintf(f, "\n  kNN accuracy in %% (Top-1 / Top-2):\n  %8s", "k");
    for (int j = 0; j < s->nsets; j++) {
      char head[64];
      snprintf(head, sizeof head, "%s%s", j == 0 ? "trained: " : "",
               s->set_label[j][0] ? s->set_label[j] : s->set_name[j]);
      fprintf(f, j + 1 < s->nsets ? "  %-24.24s" : "  %.24s", head);
    }
    fprintf(f, "\n");
  }
  for (int i = 0; i < s->nk; i++) {
    fprintf(f, "  %8lld", s->k[i]);
    for (int j = 0; j < s->nsets; j++) {
      char cell[48];
      snprintf(cell, sizeof cell, "%6.2f / %6.2f", s->top1[j][i], s->top2[j][i]);
      fprintf(f, j + 1 < s->nsets ? "  %-24s" : "  %s", cell);
    }
    fprintf(f, "\n");
  }
  print_verdict(s, f);
  if (s->has_epochs) {
    fprintf(f, "\n");
    knn_epochs_text(&s->knn_epochs, f, 2);
  }
  fprintf(f, "\n  outputs in %s:\n", s->run_dir);
  fprintf(f, "    checkpoint.h5, checkpoint_EEEE.h5   weights (student, teacher), optimizer, position\n");
  fprintf(f, "    log.txt                             one JSON line per epoch (loss, lr, wd, throughput, diagnostics)\n");
  const char *base = strrchr(s->features_file, '/');
  fprintf(f, "    %-35s CLS features, labels, paths\n", base ? base + 1 : s->features_file);
  if (s->has_epochs) fprintf(f, "    features_EEEE.h5                    the same for every epoch of the table\n");
  if (!s->knn_skipped)
    fprintf(f, "    knn.txt, knn.h5                     kNN report: per-class metrics, confusion matrices\n");
  if (s->has_epochs)
    fprintf(f, "    knn_EEEE.txt, knn_EEEE.h5           the kNN report of every epoch of the table\n"
            "    %-35s the table of kNN Top-1 per epoch\n", KNN_EPOCHS_FILE);
  if (s->attention)
    fprintf(f, "    attention.h5, attention/            last-block attention maps (HDF5 and PNG)\n");
  fprintf(f, "    pipeline.txt                        this summary\n");
}

/* Is there a complete shard set at dir? */
static int shards_complete(const char *dir) {
  struct manifest_settings ms;
  char why[4200];
  return manifest_read_settings(dir, &ms, why, sizeof why) == 0 && ms.shards_missing == 0;
}

static void step_begin(struct pipeline_summary *s, const char *name) {
  snprintf(s->step_name[s->nsteps], sizeof s->step_name[0], "%s", name);
  log_info("==== pipeline step %d: %s ====", s->nsteps + 1, name);
}

int pipeline_prepare(const struct config *c) {
  int have = comm_rank() == 0 ? shards_complete(c->data.shard_dir) : 0;
  comm_bcast(&have, sizeof have, 0);
  if (have) {
    log_info("%s: %s holds a complete shard set; prepare skipped", c->control.calculation, c->data.shard_dir);
    /* ... once prepare's check finds it made from this TIFF tree and these &data settings. */
    if (prepare_has_source(c) && c->data.check_tiff_tree) {
      const int rc = prepare_run(c);
      if (rc != 0) return rc;
    }
    return -1;
  }
  if (!prepare_has_source(c))
    scd_fatal(SCD_EXIT_INPUT, "%s: data.shard_dir = '%s' holds no complete shard set and data.tiff_dir and "
              "data.file_list are empty: name the TIFF tree or the CSV file list to prepare", c->control.calculation,
              c->data.shard_dir);
  return prepare_run(c);
}

/* Before anything runs (rank 0): the outputs whose names are known now - the features file's is
 * that of the last epoch - may not replace an input of the run or a file of another kind
 * (core/fsutil.h).  Each step checks its own again as it starts (the attention PNGs only then). */
static void claim_outputs(const struct config *c, const int64_t *epochs, int n) {
  static const char hint[] = "the pipeline writes its outputs to control.run_dir: choose another run_dir";
  char path[4096], name[64];
  features_filename(name, sizeof name, c->training.epochs - 1);
  fs_join(path, sizeof path, c->control.run_dir, name);
  if (n == 0) fs_output_claim(path, "features file", h5util_own_format, FEATURES_FORMAT, hint);
  for (int i = 0; i < n; i++) {
    features_epoch_path(path, sizeof path, c->control.run_dir, "features", epochs[i]);
    fs_output_claim(path, "features file", h5util_own_format, FEATURES_FORMAT, hint);
    snprintf(name, sizeof name, "knn_%04" PRId64, epochs[i]);
    knn_report_claim(c->control.run_dir, name);
  }
  if (n > 0) knn_epochs_claim(c->control.run_dir);
  knn_report_claim(c->control.run_dir, "knn");
  if (c->attention.in_pipeline)
    fs_output_claim(fs_join(path, sizeof path, c->control.run_dir, "attention.h5"), "attention file",
                    h5util_own_format, ATTENTION_FORMAT, hint);
  fs_output_claim(fs_join(path, sizeof path, c->control.run_dir, "pipeline.txt"), "pipeline summary", fs_own_text,
                  PIPELINE_TXT_FIRST, hint);
}

/* The epochs of features.epochs the training will keep (checkpoint_EEEE.h5; config_check refused a
 * listed epoch it keeps not): malloc'd, *n of them; NULL for 'last'. */
static int64_t *epochs_planned(const struct config *c, int *n) {
  *n = 0;
  if (c->features.n_epochs == 0 || !strcmp(c->features.epochs[0], "last")) return NULL;
  const long E = c->training.epochs, freq = c->training.saveckp_freq;
  int64_t *e = xmalloc(((size_t)E + (size_t)c->features.n_epochs + 1) * sizeof *e);
  if (!strcmp(c->features.epochs[0], "all")) {
    for (long i = 0; i < E; i++)
      if (freq > 0 && (i % freq == 0 || i == E - 1)) e[(*n)++] = i;
  } else {
    for (int i = 0; i < c->features.n_epochs; i++) e[(*n)++] = strtoll(c->features.epochs[i], NULL, 10);
  }
  return e;
}

/* The features step: the last checkpoint's, or with features.epochs those of every chosen
 * checkpoint_EEEE.h5 there now (*epochs, *n; s->features_file: the last one's). */
static void features_step(const struct config *c, struct pipeline_summary *s, int64_t **epochs, int *n) {
  *epochs = NULL;
  *n = 0;
  if (c->features.n_epochs == 0 || !strcmp(c->features.epochs[0], "last")) {
    features_extract(c, s->features_file, sizeof s->features_file);
    return;
  }
  *epochs = features_epochs_select(c, "checkpoint", "the training keeps them every training.saveckp_freq epochs "
                                   "and at the last", n);
  features_extract_epochs(c, *epochs, *n, s->features_file, sizeof s->features_file);
}

/* The pipeline; with_prepare 0: the shards were prepared (and checked) before (a study). */
static int pipeline_steps(const struct config *cfg, int with_prepare) {
  static struct pipeline_summary s;
  memset(&s, 0, sizeof s);
  snprintf(s.run_dir, sizeof s.run_dir, "%s", cfg->control.run_dir);
  snprintf(s.shard_dir, sizeof s.shard_dir, "%s", cfg->data.shard_dir);
  /* The later steps read what the earlier ones wrote, whatever the deck names. */
  static struct config c;
  c = *cfg;
  c.features.checkpoint[0] = '\0';
  if (cfg->features.checkpoint[0])
    log_warn("pipeline: features.checkpoint = '%s' is not used; the features come from the checkpoint just trained",
             cfg->features.checkpoint);
  if (cfg->knn.features[0])
    log_warn("pipeline: knn.features = '%s' is not used; kNN runs on the features just computed", cfg->knn.features);

  {
    int np;
    int64_t *planned = epochs_planned(&c, &np);
    if (comm_rank() == 0) claim_outputs(&c, planned, np);
    if (planned) { /* refused before the training, not after it */
      features_epochs_claim(&c, planned, np, "the pipeline writes its outputs to control.run_dir: choose another "
                            "run_dir");
    } else if (c.features.anndata) {
      char name[64], path[4096];
      features_filename(name, sizeof name, c.training.epochs - 1);
      anndata_check_features(fs_join(path, sizeof path, c.control.run_dir, name));
    }
    free(planned);
  }

  double t = wtime();
  step_begin(&s, "prepare");
  if (with_prepare) {
    const int rc = pipeline_prepare(&c);
    if (rc > 0) return rc;
    s.step_skipped[s.nsteps] = rc < 0;
  } else {
    log_info("pipeline: the shards in %s are prepared; prepare skipped", c.data.shard_dir);
    s.step_skipped[s.nsteps] = 1;
  }
  s.step_seconds[s.nsteps++] = wtime() - t;

  t = wtime();
  step_begin(&s, "train");
  int rc = train_run(&c);
  if (rc != 0) return rc;
  if (train_stopped()) {
    /* Preempted: the checkpoint is written; a relaunch with restart = .true. continues here. */
    log_info("pipeline: training stopped early on a signal; features, kNN and attention maps come after a "
             "relaunch of this deck");
    return 0;
  }
  /* A signal after the last step's agreement (while the last checkpoint was written, say) reached
   * some ranks only: switching to exit-on-signal would end those alone while the others went on
   * into the features' collectives.  Agree on it here and stop together. */
  if (comm_any(signals_received() != 0)) {
    log_info("pipeline: training is complete, but a stop signal came at its end; features, kNN and "
             "attention maps come after a relaunch of this deck (with restart = .true.)");
    return 0;
  }
  signals_set_mode(SIGNALS_EXIT, "calculation 'pipeline' (features, knn, attention)");
  s.step_seconds[s.nsteps++] = wtime() - t;

  t = wtime();
  step_begin(&s, "features");
  int n_epochs;
  int64_t *epochs;
  features_step(&c, &s, &epochs, &n_epochs);
  s.step_seconds[s.nsteps++] = wtime() - t;

  t = wtime();
  step_begin(&s, "knn");
  struct dataset *shards = dataset_open(c.data.shard_dir);
  s.knn_skipped = dataset_nclasses(shards) == 0; /* every rank reads the same manifest */
  dataset_close(shards);
  if (s.knn_skipped) {
    log_info("pipeline: kNN left out: the images of %s have no labels (&data labels)", c.data.shard_dir);
    s.step_skipped[s.nsteps] = 1;
  } else {
    if (strlen(s.features_file) >= sizeof c.knn.features)
      scd_fatal(SCD_EXIT_INPUT, "pipeline: the path %s is too long; choose a shorter control.run_dir", s.features_file);
    memcpy(c.knn.features, s.features_file, strlen(s.features_file) + 1);
    if (epochs) {
      c.knn.features[0] = '\0';
      rc = knn_run_epochs(&c, epochs, n_epochs, &s.knn_epochs);
      s.has_epochs = comm_rank() == 0;
    } else {
      rc = knn_run(&c);
    }
    free(epochs);
    epochs = NULL;
    if (rc != 0) return rc;
  }
  s.step_seconds[s.nsteps++] = wtime() - t;

  if (c.attention.in_pipeline) {
    t = wtime();
    step_begin(&s, "attention");
    rc = attention_run(&c);
    if (rc != 0) return rc;
    s.step_seconds[s.nsteps++] = wtime() - t;
    s.attention = 1;
  }

  char path[4096];
  struct ckpt_info info; /* collective */
  fs_join(path, sizeof path, c.control.run_dir, CKPT_FILE);
  checkpoint_read_info(path, &info);
  s.epochs = info.epoch;
  if (comm_rank() == 0) {
    struct dataset *ds = dataset_open(c.data.shard_dir);
    struct split sp;
    split_dataset(ds, c.data.train_fraction, (uint32_t)c.data.split_seed, &sp);
    s.images = dataset_count(ds);
    s.train_images = sp.n_train;
    split_free(&sp);
    dataset_close(ds);
    fs_join(path, sizeof path, c.control.run_dir, "log.txt");
    s.final_loss = pipeline_log_last(path, "train_loss");
    static const char *const diag_keys[4] = {"teacher_entropy", "teacher_batch_entropy", "kl", "center_norm"};
    for (int i = 0; i < 4; i++) s.diag[i] = pipeline_log_last(path, diag_keys[i]);
    s.out_dim = c.model.out_dim;
    struct features fe;
    features_read_meta(s.features_file, &fe);
    s.feature_rows = fe.n;
    features_free(&fe);
    fs_join(path, sizeof path, c.control.run_dir, "knn.h5");
    if (!s.knn_skipped) pipeline_read_knn(path, &s);

    if (log_verbosity() >= 1) {
      log_raw("\n");
      pipeline_summary_print(&s, stdout);
      fflush(stdout);
    }
    fs_join(path, sizeof path, c.control.run_dir, "pipeline.txt");
    struct fs_mem txt;
    pipeline_summary_print(&s, fs_mem_begin(&txt));
    fs_mem_commit(&txt, "pipeline summary", path);
    if (s.has_epochs) knn_epochs_free(&s.knn_epochs);
  }
  free(epochs);
  comm_barrier();
  return 0;
}

int pipeline_run(const struct config *cfg) { return pipeline_steps(cfg, 1); }

int pipeline_run_prepared(const struct config *cfg) { return pipeline_steps(cfg, 0); }
