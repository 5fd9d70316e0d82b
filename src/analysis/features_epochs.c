/* features_epochs.c - &features epochs: which of a run's numbered files (checkpoint_EEEE.h5,
 * features_EEEE.h5) a calculation takes, and calculation='features' for several checkpoints: those
 * epochs', or the models of &features checkpoints. */
#include "build_config.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/anndata.h"
#include "analysis/features.h"
#include "analysis/features_io.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "train/checkpoint.h"

void features_epoch_path(char *buf, size_t n, const char *run_dir, const char *prefix, int64_t epoch) {
  char name[128];
  snprintf(name, sizeof name, "%s_%04" PRId64 ".h5", prefix, epoch);
  fs_join(buf, n, run_dir, name);
}

/* "<prefix>_EEEE.h5" exactly as training and features name it (other paddings are not theirs) ->
 * EEEE, else -1. */
static int64_t name_epoch(const char *name, const char *prefix) {
  const size_t lp = strlen(prefix);
  if (strncmp(name, prefix, lp) != 0 || name[lp] != '_') return -1;
  const char *p = name + lp + 1;
  const size_t digits = strspn(p, "0123456789");
  if (digits == 0 || digits > 18 || strcmp(p + digits, ".h5") != 0) return -1;
  const int64_t e = strtoll(p, NULL, 10);
  char canon[128];
  snprintf(canon, sizeof canon, "%s_%04" PRId64 ".h5", prefix, e);
  return strcmp(canon, name) == 0 ? e : -1;
}

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Rank 0: the epochs of run_dir's <prefix>_EEEE.h5, ascending (malloc'd, *n of them). */
static int64_t *scan(const char *run_dir, const char *prefix, int *n) {
  int cap = 16;
  int64_t *e = xmalloc((size_t)cap * sizeof *e);
  *n = 0;
  DIR *dir = opendir(run_dir);
  if (!dir) return e;
  const struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    const int64_t v = name_epoch(de->d_name, prefix);
    if (v < 0) continue;
    if (*n == cap) e = xrealloc(e, (size_t)(cap *= 2) * sizeof *e);
    e[(*n)++] = v;
  }
  closedir(dir);
  qsort(e, (size_t)*n, sizeof *e, cmp_i64);
  return e;
}

/* "0, 1, 2" (or "none") of the epochs there, for a message. */
static void list_text(const int64_t *e, int n, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len + 24 < cap; i++) len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, i ? ", " : "", e[i]);
  if (n == 0) snprintf(buf, cap, "none");
}

/* Rank 0: what the deck's words choose among the files there. */
static int64_t *choose_here(const struct config *cfg, const char *prefix, const char *hint, int *n) {
  const char *dir = cfg->control.run_dir;
  int have;
  int64_t *there = scan(dir, prefix, &have);
  char avail[2048];
  list_text(there, have, avail, sizeof avail);
  if (!strcmp(cfg->features.epochs[0], "all")) {
    if (have == 0)
      scd_fatal(SCD_EXIT_INPUT, "features.epochs = 'all': run_dir '%s' holds no %s_EEEE.h5 (%s)", dir, prefix, hint);
    *n = have;
    return there;
  }
  *n = cfg->features.n_epochs;
  int64_t *e = xmalloc((size_t)*n * sizeof *e);
  for (int i = 0; i < *n; i++) {
    e[i] = strtoll(cfg->features.epochs[i], NULL, 10);
    int found = 0;
    for (int j = 0; j < have && !found; j++) found = there[j] == e[i];
    if (!found) {
      char path[4096];
      features_epoch_path(path, sizeof path, dir, prefix, e[i]);
      scd_fatal(SCD_EXIT_INPUT, "features.epochs names epoch %" PRId64 ", but %s is not there; the epochs of "
                "run_dir's %s_EEEE.h5 are: %s (%s)", e[i], path, prefix, avail, hint);
    }
  }
  free(there);
  qsort(e, (size_t)*n, sizeof *e, cmp_i64);
  return e;
}

int64_t *features_epochs_select(const struct config *cfg, const char *prefix, const char *hint, int *n) {
  *n = 0;
  if (cfg->features.n_epochs == 0 || !strcmp(cfg->features.epochs[0], "last")) return NULL;
  int64_t *e = NULL;
  if (comm_rank() == 0) e = choose_here(cfg, prefix, hint, n);
  comm_bcast(n, sizeof *n, 0);
  if (comm_rank() != 0) e = xmalloc((size_t)*n * sizeof *e);
  comm_bcast(e, (size_t)*n * sizeof *e, 0);
  return e;
}

void features_epochs_claim(const struct config *cfg, const int64_t *epochs, int n, const char *hint) {
  char path[4096];
  for (int i = 0; i < n; i++) {
    features_epoch_path(path, sizeof path, cfg->control.run_dir, "features", epochs[i]);
    if (comm_rank() == 0) fs_output_claim(path, "features file", h5util_own_format, FEATURES_FORMAT, hint);
    if (cfg->features.anndata) anndata_check_features(path);
  }
}

void features_extract_epochs(const struct config *cfg, const int64_t *epochs, int n, char *last, size_t last_n) {
  /* Every output is refused or accepted before the first checkpoint is read. */
  features_epochs_claim(cfg, epochs, n, "its name is control.run_dir/features_EEEE.h5 (EEEE: the checkpoint's "
                        "epoch): choose another run_dir, or features.epochs without that epoch");
  static struct config c;
  c = *cfg;
  for (int i = 0; i < n; i++) {
    char ckpt[4096];
    features_epoch_path(ckpt, sizeof ckpt, cfg->control.run_dir, "checkpoint", epochs[i]);
    if (strlen(ckpt) >= sizeof c.features.checkpoint)
      scd_fatal(SCD_EXIT_INPUT, "the path %s is too long; choose a shorter control.run_dir", ckpt);
    memcpy(c.features.checkpoint, ckpt, strlen(ckpt) + 1);
    log_info("features: checkpoint %d of %d (features.epochs): %s", i + 1, n, ckpt);
    features_extract(&c, last, last_n);
  }
}

void features_model_dir(const struct config *cfg, int i, char *buf, size_t n) {
  char name[CFG_WORDLEN];
  config_model_name(cfg->features.checkpoints[i], name, sizeof name);
  fs_join(buf, n, cfg->control.run_dir, name);
}

void features_extract_models(const struct config *cfg, const int *only) {
  const int n = cfg->features.n_checkpoints;
  static struct config c;
  c = *cfg;
  /* Every checkpoint there and every output accepted before the first model runs. */
  for (int i = 0; i < n; i++) {
    if (only && !only[i]) continue;
    const char *ckpt = cfg->features.checkpoints[i];
    int have = comm_rank() == 0 ? fs_exists(ckpt) : 0;
    comm_bcast(&have, sizeof have, 0);
    if (!have) scd_fatal(SCD_EXIT_INPUT, "features.checkpoints: checkpoint '%s' not found", ckpt);
    struct ckpt_info info;
    checkpoint_read_info(ckpt, &info);
    char dir[4096], name[64], path[4096];
    features_model_dir(cfg, i, dir, sizeof dir);
    features_filename(name, sizeof name, features_checkpoint_epoch(&info));
    fs_join(path, sizeof path, dir, name);
    if (comm_rank() == 0)
      fs_output_claim(path, "features file", h5util_own_format, FEATURES_FORMAT, "a model's features go to "
                      "control.run_dir/<its file name without .h5>/: choose another run_dir");
    if (cfg->features.anndata) anndata_check_features(path);
  }
  for (int i = 0; i < n; i++) {
    if (only && !only[i]) continue;
    char dir[4096], path[4096];
    features_model_dir(cfg, i, dir, sizeof dir);
    if (strlen(dir) >= sizeof c.control.run_dir)
      scd_fatal(SCD_EXIT_INPUT, "the path %s is too long; choose a shorter control.run_dir", dir);
    memcpy(c.control.run_dir, dir, strlen(dir) + 1);
    snprintf(c.features.checkpoint, sizeof c.features.checkpoint, "%s", cfg->features.checkpoints[i]);
    log_info("features: model %d of %d (features.checkpoints): %s into %s", i + 1, n, cfg->features.checkpoints[i],
             dir);
    features_extract(&c, path, sizeof path);
  }
}
