/* config_check.c - checks that involve more than one key (run after every key is applied), and
 * the output path that must be checked before anything runs (&system metrics_file).
 *
 * A check is skipped when one of its keys already had an error, so a mistyped value does not
 * cause a second, confusing message.  Each message points at the key the deck set (the first
 * one named that the deck contains), or at the whole file when both came from the defaults. */
#include "build_config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fsutil.h"
#include "input/channel_sets.h"
#include "input/config_priv.h"
#include "input/study_settings.h"

struct checker {
  struct cfg_state *st;
  const struct config *cfg;
  const struct config *defaults;
};

static int bad(const struct checker *c, const struct cfg_key *k) { return c->st->bad[config_key_index(k)]; }
static int seen(const struct checker *c, const struct cfg_key *k) { return c->st->seen[config_key_index(k)]; }

/* Report at a (if the deck set it), else at b, else about the whole file. */
static void report(const struct checker *c, const struct cfg_key *a, const struct cfg_key *b, const char *fmt,
                   ...) SCD_PRINTF(4, 5);
static void report(const struct checker *c, const struct cfg_key *a, const struct cfg_key *b, const char *fmt,
                   ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const struct cfg_key *at = a && seen(c, a) ? a : b && seen(c, b) ? b : NULL;
  if (at) {
    int i = config_key_index(at);
    deck_error(c->st->deck, c->st->line[i], c->st->col[i], "%s", msg);
  } else {
    deck_error(c->st->deck, 0, 0, "%s", msg);
  }
}

/* A study runs the pipeline for every set, so what the pipeline needs, it needs too. */
static int calc_is(const struct config *cfg, const char *a, const char *b) {
  if (b && strcmp(b, "pipeline") == 0 && strcmp(cfg->control.calculation, "study") == 0) return 1;
  return strcmp(cfg->control.calculation, a) == 0 || (b && strcmp(cfg->control.calculation, b) == 0);
}

static void check_patch_multiples(const struct checker *c) {
  const struct cfg_key *patch = config_key("model", "patch_size");
  const struct cfg_key *sizes[2] = {config_key("crops", "global_size"), config_key("crops", "local_size")};
  const long values[2] = {c->cfg->crops.global_size, c->cfg->crops.local_size};
  long p = c->cfg->model.patch_size;
  for (int i = 0; i < 2; i++) {
    if (bad(c, patch) || bad(c, sizes[i]) || values[i] % p == 0) continue;
    report(c, sizes[i], patch, "%s = %ld is not a multiple of patch_size = %ld (crops are cut into whole patches)",
           sizes[i]->name, values[i], p);
  }
}

static void check_architecture(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *arch = config_key("model", "arch");
  const struct cfg_key *dim = config_key("model", "embed_dim"), *heads = config_key("model", "num_heads");
  const struct cfg_key *ratio = config_key("model", "mlp_ratio");
  if (bad(c, arch)) return;
  if (strcmp(cfg->model.arch, "custom") == 0) {
    if (!bad(c, dim) && !bad(c, heads) && cfg->model.embed_dim % cfg->model.num_heads != 0)
      report(c, dim, heads, "embed_dim = %ld is not divisible by num_heads = %ld (arch = 'custom')",
             cfg->model.embed_dim, cfg->model.num_heads);
    if (!bad(c, dim) && !bad(c, ratio) && (int)((double)cfg->model.embed_dim * cfg->model.mlp_ratio) < 1)
      report(c, ratio, dim, "mlp_ratio = %g with embed_dim = %ld gives an MLP of width 0", cfg->model.mlp_ratio,
             cfg->model.embed_dim);
    return;
  }
  /* A named architecture fixes these; a changed value would be silently ignored. */
  const char *names[4] = {"embed_dim", "depth", "num_heads", "mlp_ratio"};
  for (int i = 0; i < 4; i++) {
    const struct cfg_key *k = config_key("model", names[i]);
    if (bad(c, k) || !seen(c, k)) continue;
    if (memcmp(config_field(cfg, k, 0), config_field(c->defaults, k, 0), k->elem_size) == 0) continue;
    report(c, k, NULL, "%s is only used with arch = 'custom'; arch = '%s' fixes it (remove %s or set arch = 'custom')",
           k->name, cfg->model.arch, k->name);
  }
}

static void check_scale(const struct checker *c, const char *name, const double *v, int n) {
  const struct cfg_key *k = config_key("crops", name);
  if (bad(c, k)) return;
  if (n != 2)
    report(c, k, NULL, "%s needs exactly 2 values (min, max), got %d", name, n);
  else if (!(v[0] > 0.0))
    report(c, k, NULL, "%s = %g, %g: the smaller area fraction must be > 0", name, v[0], v[1]);
  else if (v[0] > v[1])
    report(c, k, NULL, "%s = %g, %g: min must not exceed max", name, v[0], v[1]);
}

static void check_channels(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *ch = config_key("data", "channels"), *names = config_key("data", "channel_names");
  if (!bad(c, ch))
    for (int i = 0; i < cfg->data.n_channels; i++)
      for (int j = 0; j < i; j++)
        if (cfg->data.channels[i] == cfg->data.channels[j]) {
          report(c, ch, NULL, "channels(%d) = %ld repeats channels(%d); each channel may be selected once", i + 1,
                 cfg->data.channels[i], j + 1);
          j = i;
        }
  if (!bad(c, names))
    for (int i = 0; i < cfg->data.n_channel_names; i++) {
      if (cfg->data.channel_names[i][0] == '\0') {
        report(c, names, NULL, "channel_names(%d) is empty", i + 1);
        continue;
      }
      for (int j = 0; j < i; j++)
        if (strcmp(cfg->data.channel_names[i], cfg->data.channel_names[j]) == 0) {
          report(c, names, NULL, "channel_names(%d) = '%s' repeats channel_names(%d)", i + 1,
                 cfg->data.channel_names[i], j + 1);
          break;
        }
    }
  if (!bad(c, ch) && !bad(c, names) && cfg->data.n_channel_names > 0)
    for (int i = 0; i < cfg->data.n_channels; i++)
      if (cfg->data.channels[i] >= cfg->data.n_channel_names)
        report(c, ch, names, "channels(%d) = %ld, but channel_names names only %d channels (0 to %d)", i + 1,
               cfg->data.channels[i], cfg->data.n_channel_names, cfg->data.n_channel_names - 1);
}

static void check_schedules(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *epochs = config_key("training", "epochs");
  const struct cfg_key *warm = config_key("training", "warmup_epochs");
  const struct cfg_key *twarm = config_key("training", "warmup_teacher_temp_epochs");
  const struct cfg_key *lr = config_key("training", "lr"), *min_lr = config_key("training", "min_lr");
  if (!bad(c, epochs) && !bad(c, warm) && cfg->training.warmup_epochs > cfg->training.epochs)
    report(c, warm, epochs, "warmup_epochs = %ld exceeds epochs = %ld", cfg->training.warmup_epochs,
           cfg->training.epochs);
  if (!bad(c, epochs) && !bad(c, twarm) && cfg->training.warmup_teacher_temp_epochs > cfg->training.epochs)
    report(c, twarm, epochs, "warmup_teacher_temp_epochs = %ld exceeds epochs = %ld",
           cfg->training.warmup_teacher_temp_epochs, cfg->training.epochs);
  if (!bad(c, lr) && !bad(c, min_lr) && cfg->training.min_lr > cfg->training.lr)
    report(c, min_lr, lr, "min_lr = %g is larger than lr = %g (the cosine schedule decays from lr to min_lr)",
           cfg->training.min_lr, cfg->training.lr);
}

static void check_calculation_needs(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *calc = config_key("control", "calculation");
  if (bad(c, calc)) return;
  const struct cfg_key *tiff = config_key("data", "tiff_dir"), *list = config_key("data", "file_list");
  /* pipeline needs one only when the shards are missing, which pipeline_run checks itself */
  if (!bad(c, tiff) && !bad(c, list) && calc_is(cfg, "prepare", "prepare") && cfg->data.tiff_dir[0] == '\0' &&
      cfg->data.file_list[0] == '\0')
    report(c, calc, NULL, "calculation = '%s' needs tiff_dir (the TIFF tree to convert) or file_list (a CSV "
           "listing the images) in &data", cfg->control.calculation);
  const struct cfg_key *stats = config_key("data", "stats_fraction");
  if (!bad(c, stats) && calc_is(cfg, "prepare", "pipeline") && cfg->data.stats_fraction <= 0.0)
    report(c, stats, calc, "stats_fraction = 0 leaves no images for the per-channel mean/std");
  const struct cfg_key *tf = config_key("data", "train_fraction");
  if (!bad(c, tf) && calc_is(cfg, "train", "pipeline") && cfg->data.train_fraction <= 0.0)
    report(c, tf, calc, "train_fraction = 0 leaves no training images for calculation = '%s'",
           cfg->control.calculation);
  const struct cfg_key *subset = config_key("features", "subset");
  if (!bad(c, tf) && !bad(c, subset) && calc_is(cfg, "features", "pipeline")) {
    if (strcmp(cfg->features.subset, "val") == 0 && cfg->data.train_fraction >= 1.0)
      report(c, tf, subset, "train_fraction = 1 leaves no validation images, but subset = 'val'");
    if (strcmp(cfg->features.subset, "train") == 0 && cfg->data.train_fraction <= 0.0)
      report(c, tf, subset, "train_fraction = 0 leaves no training images, but subset = 'train'");
  }
  const struct cfg_key *ktf = config_key("knn", "train_fraction");
  if (!bad(c, ktf) && calc_is(cfg, "knn", "pipeline") &&
      (cfg->knn.train_fraction <= 0.0 || cfg->knn.train_fraction >= 1.0))
    report(c, ktf, calc, "knn train_fraction = %g leaves no %s rows; it must be strictly between 0 and 1",
           cfg->knn.train_fraction, cfg->knn.train_fraction <= 0.0 ? "reference" : "query");
}

/* One source of images, and labels that it can give. */
static void check_data_source(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *tiff = config_key("data", "tiff_dir"), *list = config_key("data", "file_list");
  const struct cfg_key *labels = config_key("data", "labels"), *depth = config_key("data", "folder_depth_for_labels");
  const struct cfg_key *pc = config_key("data", "path_column"), *lc = config_key("data", "label_column");
  if (bad(c, tiff) || bad(c, list) || bad(c, labels)) return;
  const int has_list = cfg->data.file_list[0] != '\0';
  if (has_list && cfg->data.tiff_dir[0])
    report(c, list, tiff, "set one of tiff_dir and file_list: both name the images to prepare");
  if (has_list && !strcmp(cfg->data.labels, "folders"))
    report(c, labels, list, "labels = 'folders' takes the classes from the folders of tiff_dir; with file_list "
           "use 'column' (its label_column), 'none' or 'auto'");
  if (!has_list && !strcmp(cfg->data.labels, "column"))
    report(c, labels, NULL, "labels = 'column' takes the classes from a column of file_list, which is not set");
  if (!bad(c, depth) && cfg->data.folder_depth_for_labels >= 0 && (has_list || !strcmp(cfg->data.labels, "none")))
    report(c, depth, labels, "folder_depth_for_labels applies to classes from the folders of tiff_dir, not to %s",
           has_list ? "file_list" : "labels = 'none'");
  if (has_list && !bad(c, pc) && !bad(c, lc) && !cfg->data.path_column[0])
    report(c, pc, NULL, "path_column must name the file_list column of the image paths");
  if (has_list && !bad(c, pc) && !bad(c, lc) && !strcmp(cfg->data.path_column, cfg->data.label_column) &&
      strcmp(cfg->data.labels, "none") != 0)
    report(c, lc, pc, "label_column and path_column both name '%s'", cfg->data.path_column);
}

static void check_misc(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *run_dir = config_key("control", "run_dir");
  if (!bad(c, run_dir) && cfg->control.run_dir[0] == '\0')
    report(c, run_dir, NULL, "run_dir must not be empty");
  const struct cfg_key *shard_dir = config_key("data", "shard_dir");
  if (!bad(c, shard_dir) && cfg->data.shard_dir[0] == '\0')
    report(c, shard_dir, NULL, "shard_dir must not be empty");
  const struct cfg_key *k = config_key("knn", "k");
  if (!bad(c, k)) {
    if (cfg->knn.n_k == 0) report(c, k, NULL, "k needs at least one neighbour count");
    for (int i = 0; i < cfg->knn.n_k; i++)
      for (int j = 0; j < i; j++)
        if (cfg->knn.k[i] == cfg->knn.k[j]) {
          report(c, k, NULL, "k(%d) = %ld repeats k(%d)", i + 1, cfg->knn.k[i], j + 1);
          j = i;
        }
  }
  const struct cfg_key *mean = config_key("model", "use_mean_patch_embedding"),
                       *map = config_key("model", "custom_embedding_map");
  if (!bad(c, mean) && !bad(c, map) && cfg->model.use_mean_patch_embedding && cfg->model.n_custom_embedding_map > 0)
    report(c, map, mean, "custom_embedding_map and use_mean_patch_embedding = .true. are two ways to adapt the "
           "patch embedding: set one");
  const struct cfg_key *prec = config_key("training", "precision"), *dev = config_key("system", "device");
  if (!bad(c, prec) && !bad(c, dev) &&
      (strcmp(cfg->training.precision, "bf16") == 0 || strcmp(cfg->training.precision, "fp16") == 0) &&
      strcmp(cfg->system.device, "cpu") == 0)
    report(c, prec, dev, "precision = '%s' needs a GPU, but device = 'cpu' (use 'fp32' or 'auto')",
           cfg->training.precision);
  const struct cfg_key *arch = config_key("gpu", "arch");
  if (!bad(c, arch) && cfg->gpu.arch != 0 && cfg->gpu.arch < 70)
    report(c, arch, NULL, "arch = %ld: 0 (the GPU's own kernels) or a compute capability times 10 of 70 (V100) or "
           "later", (long)cfg->gpu.arch);
  /* (device = 'auto' that finds GPUs is refused when the backend is chosen: train.c) */
}

/* What the later steps of a calculation will need, checked before the first runs (a pipeline
 * would otherwise report them after hours of training). */
static void check_later_steps(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *calc = config_key("control", "calculation");
  if (bad(c, calc)) return;
  const struct cfg_key *k = config_key("knn", "k"), *tk = config_key("knn", "table_k");
  if (!bad(c, k) && !bad(c, tk) && calc_is(cfg, "knn", "pipeline") && cfg->knn.table_k != 0) {
    int found = 0;
    for (int i = 0; i < cfg->knn.n_k; i++) found |= cfg->knn.k[i] == cfg->knn.table_k;
    if (!found) report(c, tk, k, "table_k = %ld is not one of the evaluated k", cfg->knn.table_k);
  }
  /* The pipeline's network is the deck's model (features and attention read other checkpoints,
   * whose patch size is known only then). */
  if (!calc_is(cfg, "pipeline", "pipeline")) return;
  const struct cfg_key *patch = config_key("model", "patch_size");
  if (bad(c, patch)) return;
  const long p = cfg->model.patch_size;
  const struct cfg_key *rs = config_key("features", "resize");
  if (!bad(c, rs) && cfg->features.resize > 0 && cfg->features.resize < p)
    report(c, rs, patch, "resize = %ld is smaller than patch_size = %ld: the images would hold no whole patch",
           cfg->features.resize, p);
  const struct cfg_key *is = config_key("attention", "image_size"), *inp = config_key("attention", "in_pipeline");
  if (!bad(c, is) && !bad(c, inp) && cfg->attention.in_pipeline && cfg->attention.image_size < p)
    report(c, is, patch, "image_size = %ld is smaller than patch_size = %ld: the attention maps would hold no "
           "whole patch", cfg->attention.image_size, p);
}

/* &features normalization and its values, channel_map; &knn reference / query and group_by. */
static void check_heldout(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *norm = config_key("features", "normalization"), *mean = config_key("features", "mean"),
                       *std = config_key("features", "std");
  if (!bad(c, norm) && !bad(c, mean) && !bad(c, std)) {
    const int values = strcmp(cfg->features.normalization, "values") == 0;
    if (values && (cfg->features.n_mean == 0 || cfg->features.n_std == 0))
      report(c, norm, NULL, "normalization = 'values' needs mean and std, one value per channel the network "
             "takes (scDINO's norm_per_channel)");
    else if (values && cfg->features.n_mean != cfg->features.n_std)
      report(c, std, mean, "mean has %d values but std has %d: give one of each per channel", cfg->features.n_mean,
             cfg->features.n_std);
    else if (!values && (cfg->features.n_mean > 0 || cfg->features.n_std > 0))
      report(c, cfg->features.n_mean > 0 ? mean : std, norm, "mean and std are used only with normalization = "
             "'values' (normalization = '%s')", cfg->features.normalization);
  }
  const struct cfg_key *map = config_key("features", "channel_map"), *ch = config_key("data", "channels");
  if (!bad(c, map) && !bad(c, ch) && cfg->features.n_channel_map > 0 && cfg->data.n_channels > 0)
    report(c, map, ch, "channel_map names the data channels of the checkpoint's channels, in its order: it replaces "
           "data.channels; give one of them");
  const struct cfg_key *calc = config_key("control", "calculation"), *ref = config_key("knn", "reference"),
                       *query = config_key("knn", "query"), *feat = config_key("knn", "features");
  if (!bad(c, ref) && !bad(c, query) && !bad(c, feat)) {
    const int r = cfg->knn.reference[0] != '\0', q = cfg->knn.query[0] != '\0';
    if (r != q)
      report(c, r ? ref : query, NULL, "knn.%s needs knn.%s: the query rows are voted by the reference rows",
             r ? "reference" : "query", r ? "query" : "reference");
    else if (r && cfg->knn.features[0])
      report(c, feat, ref, "knn.features (one file, split into reference and query rows) and knn.reference / "
             "knn.query (two files) are two ways to choose the rows: give one");
    else if (r && !bad(c, calc) && calc_is(cfg, "pipeline", "pipeline"))
      report(c, ref, calc, "knn.reference and knn.query are for calculation = 'knn' (a %s evaluates the features it "
             "computes)", cfg->control.calculation);
  }
  /* A split by a column: its name and values are checked against the file by the kNN (knn_rowset.c). */
  const struct cfg_key *split = config_key("knn", "split_by"), *values = config_key("knn", "query_values");
  if (!bad(c, split) && !bad(c, values) && !bad(c, ref)) {
    const int s = cfg->knn.split_by[0] != '\0', v = cfg->knn.n_query_values > 0;
    if (s && !v)
      report(c, split, values, "split_by = '%s' needs query_values: the column's values of the query rows",
             cfg->knn.split_by);
    else if (v && !s)
      report(c, values, split, "query_values are the values of knn.split_by's column for the query rows: set split_by");
    else if (s && cfg->knn.reference[0])
      report(c, split, ref, "knn.split_by splits one features file; knn.reference / knn.query are two files: give "
             "one of them");
    for (int w = 0; s && v && w < cfg->knn.n_query_values; w++)
      for (int u = 0; u < w; u++)
        if (!strcmp(cfg->knn.query_values[w], cfg->knn.query_values[u])) {
          report(c, values, NULL, "query_values lists '%s' twice", cfg->knn.query_values[w]);
          w = cfg->knn.n_query_values;
          break;
        }
  }
  /* The column names are checked against the query file by the kNN (knn_groups_select). */
  const struct cfg_key *group = config_key("knn", "group_by");
  for (int w = 0; !bad(c, group) && w < cfg->knn.n_group_by; w++) {
    if (!cfg->knn.group_by[w][0]) {
      report(c, group, NULL, "group_by names an empty column; use 'none' for no groups");
      break;
    }
    if (cfg->knn.n_group_by > 1 && !strcmp(cfg->knn.group_by[w], "none")) {
      report(c, group, NULL, "group_by = 'none' (no groups) stands alone, not beside other columns");
      break;
    }
  }
}

/* &features epochs: 'last', 'all' or distinct epoch numbers; with a list or 'all' the files are
 * run_dir's, so a single file named by the deck contradicts it; a pipeline's listed epochs must be
 * ones its training keeps (checkpoint_EEEE.h5: EEEE % saveckp_freq == 0, or the last epoch). */
static void check_epochs(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *ep = config_key("features", "epochs"), *calc = config_key("control", "calculation");
  if (bad(c, ep) || bad(c, calc)) return;
  const int n = cfg->features.n_epochs;
  for (int i = 0; i < n; i++) {
    const char *w = cfg->features.epochs[i];
    if (!strcmp(w, "last") || !strcmp(w, "all")) {
      if (n > 1) {
        report(c, ep, NULL, "epochs = '%s' stands alone, not beside other values", w);
        return;
      }
      continue;
    }
    size_t len = strspn(w, "0123456789");
    if (len == 0 || w[len] != '\0' || len > 9) {
      report(c, ep, NULL, "epochs = '%s': give 'last', 'all' or 0-based epoch numbers (e.g. epochs = '0', '5', '9')", w);
      return;
    }
    for (int j = 0; j < i; j++)
      if (strtol(cfg->features.epochs[j], NULL, 10) == strtol(w, NULL, 10)) {
        report(c, ep, NULL, "epochs names epoch %ld twice", strtol(w, NULL, 10));
        return;
      }
  }
  if (n == 0) {
    report(c, ep, NULL, "epochs is empty: give 'last', 'all' or epoch numbers");
    return;
  }
  if (!strcmp(cfg->features.epochs[0], "last")) return;
  const struct cfg_key *ck = config_key("features", "checkpoint"), *kf = config_key("knn", "features"),
                       *ref = config_key("knn", "reference");
  if (calc_is(cfg, "features", NULL) && !bad(c, ck) && cfg->features.checkpoint[0])
    report(c, ck, ep, "features.checkpoint names one checkpoint, but epochs = '%s' chooses run_dir's "
           "checkpoint_EEEE.h5: give one of them", cfg->features.epochs[0]);
  if (calc_is(cfg, "knn", NULL) && !bad(c, kf) && cfg->knn.features[0])
    report(c, kf, ep, "knn.features names one features file, but features.epochs = '%s' chooses run_dir's "
           "features_EEEE.h5: give one of them", cfg->features.epochs[0]);
  if (calc_is(cfg, "knn", NULL) && !bad(c, ref) && cfg->knn.reference[0])
    report(c, ref, ep, "knn.reference / knn.query take two given files; features.epochs = '%s' is for run_dir's "
           "features_EEEE.h5: give one of them", cfg->features.epochs[0]);
  const struct cfg_key *ne = config_key("training", "epochs"), *fq = config_key("training", "saveckp_freq");
  if (!calc_is(cfg, "pipeline", "pipeline") || bad(c, ne) || bad(c, fq)) return;
  const long epochs = cfg->training.epochs, freq = cfg->training.saveckp_freq;
  for (int i = 0; i < n && strcmp(cfg->features.epochs[0], "all") != 0; i++) {
    const long e = strtol(cfg->features.epochs[i], NULL, 10);
    if (e >= epochs || freq <= 0 || (e % freq != 0 && e != epochs - 1)) {
      report(c, ep, fq, "epochs names epoch %ld, but the training (epochs = %ld, saveckp_freq = %ld) keeps no "
             "checkpoint_%04ld.h5", e, epochs, freq, e);
      return;
    }
  }
  if (freq <= 0) report(c, fq, ep, "saveckp_freq = 0 keeps no checkpoint_EEEE.h5 for features.epochs = 'all'");
}

void config_model_name(const char *checkpoint, char *buf, size_t n) {
  const char *base = strrchr(checkpoint, '/');
  base = base ? base + 1 : checkpoint;
  size_t len = strlen(base);
  if (len > 3 && !strcmp(base + len - 3, ".h5")) len -= 3;
  snprintf(buf, n, "%.*s", (int)len, base);
}

/* &features checkpoints: distinct names, and no other choice of the files beside it. */
static void check_models(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *m = config_key("features", "checkpoints"), *ep = config_key("features", "epochs"),
                       *ck = config_key("features", "checkpoint"), *kf = config_key("knn", "features"),
                       *ref = config_key("knn", "reference");
  if (bad(c, m) || cfg->features.n_checkpoints == 0) return;
  char names[64][CFG_WORDLEN];
  for (int i = 0; i < cfg->features.n_checkpoints; i++) {
    const char *p = cfg->features.checkpoints[i];
    config_model_name(p, names[i], sizeof names[i]);
    if (!names[i][0] || !strcmp(names[i], ".") || !strcmp(names[i], "..")) {
      report(c, m, NULL, "checkpoints = '%s' names no file", p);
      return;
    }
    for (int j = 0; j < i; j++)
      if (!strcmp(names[i], names[j])) {
        report(c, m, NULL, "checkpoints '%s' and '%s' would both write run_dir/%s/: give files of distinct names",
               cfg->features.checkpoints[j], p, names[i]);
        return;
      }
  }
  if (!bad(c, ep) && cfg->features.n_epochs > 0 && strcmp(cfg->features.epochs[0], "last") != 0)
    report(c, ep, m, "features.epochs chooses run_dir's checkpoints and checkpoints names models: give one of them");
  else if (!bad(c, ck) && cfg->features.checkpoint[0])
    report(c, ck, m, "features.checkpoint names one model and checkpoints several: give one of them");
  else if (!bad(c, kf) && cfg->knn.features[0] && calc_is(cfg, "knn", NULL))
    report(c, kf, m, "knn.features names one features file, but checkpoints evaluates run_dir/<name>/'s: give one "
           "of them");
  else if (!bad(c, ref) && cfg->knn.reference[0] && calc_is(cfg, "knn", NULL))
    report(c, ref, m, "knn.reference / knn.query take two given files, not features.checkpoints: give one of them");
  else if (calc_is(cfg, "pipeline", "pipeline"))
    report(c, m, NULL, "checkpoints is for calculation = 'features' and 'knn' (a %s evaluates what it trains)",
           cfg->control.calculation);
}

/* Whether two spellings of a folder are the same string ("run", "run/", "./run"). */
static int same_dir_name(const char *a, const char *b) {
  while (a[0] == '.' && a[1] == '/') a += 2;
  while (b[0] == '.' && b[1] == '/') b += 2;
  size_t la = strlen(a), lb = strlen(b);
  while (la > 1 && a[la - 1] == '/') la--;
  while (lb > 1 && b[lb - 1] == '/') lb--;
  return la == lb && strncmp(a, b, la) == 0;
}

/* &system metrics_file, now rather than at the first progress line after the set-up (or after a
 * pipeline's prepare): a path that is a folder, an input of the run or another kind of file, or in a
 * folder that is not there.  Once training runs, writing it is best effort (train_metrics.c). */
static void check_metrics_file(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *k = config_key("system", "metrics_file"), *calc = config_key("control", "calculation");
  const char *path = cfg->system.metrics_file;
  if (bad(c, k) || bad(c, calc) || !path[0] || !calc_is(cfg, "train", "pipeline")) return;
  char why[2 * CFG_STRLEN + 128], dir[CFG_STRLEN];
  if (fs_output_check(path, "metrics file", fs_own_text, CFG_METRICS_FIRST_LINE, why, sizeof why) != 0) {
    report(c, k, NULL, "metrics_file = '%s': %s (scdino replaces only a metrics file it wrote, or an empty file)",
           path, why);
    return;
  }
  fs_dir_of(path, dir, sizeof dir);
  if (fs_is_dir(dir)) {
    if (access(dir, W_OK | X_OK) != 0)
      report(c, k, NULL, "metrics_file = '%s': cannot write in the folder %s: %s", path, dir, strerror(errno));
  } else if (fs_exists(dir)) {
    report(c, k, NULL, "metrics_file = '%s': %s is not a folder", path, dir);
  } else if (!same_dir_name(dir, cfg->control.run_dir)) { /* run_dir is made before training */
    report(c, k, NULL, "metrics_file = '%s': the folder %s does not exist (the exporter's folder: create it first)",
           path, dir);
  }
}

/* &study channel_sets: what can be checked before the manifest is read (syntax, repeats, and the
 * names and indices when the deck names the channels); the list l gets the sets' folders when the
 * deck names the channels (else l->run_dir is NULL).  Returns whether every set is good. */
static int check_study_sets(const struct checker *c, struct channel_set_list *l) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *sets = config_key("study", "channel_sets"), *names = config_key("data", "channel_names");
  /* The run folders are checked here when the deck names the channels (else the manifest names
   * them, and the study checks the folders before any set runs). */
  _Static_assert(sizeof cfg->study.channel_sets / sizeof cfg->study.channel_sets[0] <= CHANNEL_SET_LIST_MAX,
                 "a channel_set_list holds every set of the deck");
  memset(l, 0, sizeof *l);
  l->texts = (const char(*)[CFG_WORDLEN])cfg->study.channel_sets;
  l->names = (const char(*)[CFG_WORDLEN])cfg->data.channel_names;
  l->nnames = (int)cfg->data.n_channel_names, l->nchannels = -1;
  l->run_dir = l->nnames > 0 && !bad(c, config_key("control", "run_dir")) ? cfg->control.run_dir : NULL;
  l->name_max = NAME_MAX;
  int good = 1;
  for (int i = 0; i < cfg->study.n_channel_sets; i++) {
    char why[1200];
    const int got = channel_set_list_add(l, i, why, sizeof why);
    if (got == -1 || got == -4) report(c, sets, NULL, "channel_sets(%d) = %s", i + 1, why);
    if (got == -3) report(c, sets, names, "channel_sets(%d) = '%s': %s", i + 1, cfg->study.channel_sets[i], why);
    if (got == -5) report(c, sets, names, "channel_sets(%d) = %s", i + 1, why);
    good &= got > 0;
  }
  return good;
}

/* &study settings: each applied over the study's deck (types, ranges, keys a study may vary) and,
 * when the deck itself had no error, checked as the deck of its run would be; no two the same deck;
 * their folders.  Fills folder[i] (the setting's folder); returns whether every setting is good. */
static int check_study_settings(const struct checker *c, char (*folder)[STUDY_FOLDER_LEN]) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *key = config_key("study", "settings");
  const int n = cfg->study.n_settings, clean = c->st->deck->ndiags == 0;
  struct config *run = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *run);
  int good = 1;
  for (int i = 0; i < n; i++) {
    static char msgs[4096];
    struct study_setting s;
    study_run_base(cfg, &run[i]);
    folder[i][0] = '\0';
    if (study_setting_apply(cfg->study.settings[i], &run[i], clean, &s, msgs, sizeof msgs) != 0) {
      for (char *m = msgs, *e; m && *m; m = e ? e + 1 : NULL) {
        e = strchr(m, '\n');
        if (e) *e = '\0';
        report(c, key, NULL, "settings(%d) = '%s': %s", i + 1, cfg->study.settings[i], m);
      }
      good = 0;
      continue;
    }
    snprintf(folder[i], STUDY_FOLDER_LEN, "%s", s.folder);
    for (int j = 0; j < i; j++) {
      if (!folder[j][0]) continue;
      int same = 1;
      for (int k = 0; k < cfg_nkeys && same; k++) same = cfg_value_same(&run[i], &run[j], &cfg_keys[k]);
      if (same) {
        report(c, key, NULL, "settings(%d) = '%s' gives the same deck as settings(%d) = '%s'", i + 1,
               cfg->study.settings[i], j + 1, cfg->study.settings[j]);
        good = 0, folder[i][0] = '\0';
        break;
      }
    }
  }
  free(run);
  return good;
}

/* The runs' folders (every set with every setting), when every one is known. */
static void check_study_folders(const struct checker *c, const struct channel_set_list *l,
                                const char (*setting)[STUDY_FOLDER_LEN]) {
  const struct config *cfg = c->cfg;
  const int nsets = cfg->study.n_channel_sets, nset = nsets > 0 ? nsets : 1;
  const int nsettings = cfg->study.n_settings, nsetting = nsettings > 0 ? nsettings : 1;
  char(*folder)[STUDY_FOLDER_LEN] = xcalloc((size_t)nset * (size_t)nsetting, sizeof *folder);
  for (int i = 0; i < nset * nsetting; i++) {
    const char *a = nsets > 0 ? l->folder[i / nsetting] : "", *b = nsettings > 0 ? setting[i % nsetting] : "";
    if (study_folder_join(a, b, folder[i], sizeof folder[i]) != 0) folder[i][0] = '\0';
  }
  char why[1200], ra[200], rb[200];
  int other;
  const int bad_row = study_folders_check((const char(*)[STUDY_FOLDER_LEN])folder, nset * nsetting,
                                          cfg->control.run_dir, NAME_MAX, &other, why, sizeof why);
  if (bad_row >= 0) {
    const struct cfg_key *key = config_key("study", nsettings > 0 ? "settings" : "channel_sets");
    const struct cfg_key *names = config_key("data", "channel_names");
    study_run_label(cfg, bad_row, ra, sizeof ra);
    if (other < 0) {
      report(c, key, names, "%s: %s", ra, why);
    } else {
      study_run_label(cfg, other, rb, sizeof rb);
      report(c, key, names, "%s would write the folder %s/%s of %s%s", ra, cfg->control.run_dir, folder[other], rb,
             strcmp(folder[bad_row], folder[other]) == 0 ? "" : " (the same folder where case is ignored)");
    }
  }
  free(folder);
}

/* &study: the sets and settings, and the keys a study does not use. */
static void check_study(const struct checker *c) {
  const struct config *cfg = c->cfg;
  const struct cfg_key *calc = config_key("control", "calculation"), *sets = config_key("study", "channel_sets");
  const struct cfg_key *settings = config_key("study", "settings");
  const struct cfg_key *ch = config_key("data", "channels"), *names = config_key("data", "channel_names");
  if (bad(c, calc) || strcmp(cfg->control.calculation, "study") != 0) {
    if (!bad(c, calc) && !bad(c, sets) && cfg->study.n_channel_sets > 0)
      report(c, sets, NULL, "channel_sets is only used with calculation = 'study'");
    if (!bad(c, calc) && !bad(c, settings) && cfg->study.n_settings > 0)
      report(c, settings, NULL, "settings is only used with calculation = 'study'");
    return;
  }
  if (!bad(c, ch) && !bad(c, sets) && cfg->data.n_channels > 0 && cfg->study.n_channel_sets > 0)
    report(c, ch, NULL, "channels is not used with calculation = 'study' and &study channel_sets: channel_sets "
           "names the channels of every run");
  if (bad(c, sets) || bad(c, names) || bad(c, settings)) return;
  if (cfg->study.n_channel_sets == 0 && cfg->study.n_settings == 0) {
    report(c, calc, NULL, "calculation = 'study' needs &study channel_sets (e.g. channel_sets = '0,1,2', '0', '1,2') "
           "or settings (e.g. settings = 'teacher_temp = 0.04', 'teacher_temp = 0.07')");
    return;
  }
  static struct channel_set_list l;
  static char setting[sizeof cfg->study.settings / sizeof cfg->study.settings[0]][STUDY_FOLDER_LEN];
  const int sets_good = check_study_sets(c, &l), settings_good = check_study_settings(c, setting);
  /* Every run's folder, when the deck names every one (channel sets named by the manifest's
   * channel names are checked by the study, before any run starts). */
  if (sets_good && settings_good && (cfg->study.n_channel_sets == 0 || l.run_dir) &&
      !bad(c, config_key("control", "run_dir")))
    check_study_folders(c, &l, (const char(*)[STUDY_FOLDER_LEN])setting);
}

void config_check(struct cfg_state *st, const struct config *cfg, const struct config *defaults) {
  struct checker c = {st, cfg, defaults};
  check_patch_multiples(&c);
  check_architecture(&c);
  check_scale(&c, "global_scale", cfg->crops.global_scale, cfg->crops.n_global_scale);
  check_scale(&c, "local_scale", cfg->crops.local_scale, cfg->crops.n_local_scale);
  check_channels(&c);
  check_schedules(&c);
  check_calculation_needs(&c);
  check_data_source(&c);
  check_later_steps(&c);
  check_misc(&c);
  check_study(&c);
  check_heldout(&c);
  check_epochs(&c);
  check_models(&c);
  check_metrics_file(&c);
}
