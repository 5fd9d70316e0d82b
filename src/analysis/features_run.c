/* features_run.c - calculation='features' (checkpoint -> run_dir/features_EEEE.h5) and the
 * random-init kNN baseline. */
#include "build_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/anndata.h"
#include "analysis/features.h"
#include "analysis/features_io.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "data/shards.h"
#include "data/split.h"
#include "model/model_config.h"
#include "train/checkpoint.h"

/* A model key the deck sets against the checkpoint's value of it. */
SCD_NORETURN static void model_differs(const char *checkpoint, const char *key, const char *deck, const char *file) {
  scd_fatal(SCD_EXIT_DATA, "checkpoint %s does not fit this deck: &model %s = %s in the deck, but %s in the "
            "checkpoint; leave %s out of the deck to take the checkpoint's model, or name the checkpoint "
            "that has this one", checkpoint, key, deck, file, key);
}

static void int_differs(const char *checkpoint, const struct config *cfg, const char *key, long deck, long file) {
  if (!config_deck_sets(cfg, "model", key) || deck == file) return;
  char a[32], b[32];
  snprintf(a, sizeof a, "%ld", deck);
  snprintf(b, sizeof b, "%ld", file);
  model_differs(checkpoint, key, a, b);
}

/* The network is the checkpoint's, but a model key the deck sets itself must agree with it (a key
 * left at its default takes the checkpoint's value): otherwise the features would silently be
 * those of another network than the deck describes (doc/faults.md).  Exit 3, as a restart or
 * init_from with another model. */
static void check_deck_model(const struct config *cfg, const char *checkpoint, const struct ckpt_info *info) {
  if (!info->has_spec) return; /* the deck's model is built, and every tensor's shape checked as it loads */
  const struct vit_dims *v = &info->spec.vit;
  const int custom = !strcmp(cfg->model.arch, "custom");
  if (config_deck_sets(cfg, "model", "arch") && !custom) {
    const char *names[4] = {"embed_dim", "depth", "num_heads", "mlp_hidden"};
    const int want[4] = {config_embed_dim(cfg), config_depth(cfg), config_num_heads(cfg), config_mlp_hidden(cfg)};
    const int got[4] = {v->dim, v->depth, v->heads, v->mlp_hidden};
    for (int i = 0; i < 4; i++)
      if (want[i] != got[i]) {
        char a[128], b[160];
        snprintf(a, sizeof a, "'%s' (%s %d)", cfg->model.arch, names[i], want[i]);
        snprintf(b, sizeof b, "%s %d%s%s%s", names[i], got[i], info->arch[0] ? " (arch '" : "", info->arch,
                 info->arch[0] ? "')" : "");
        model_differs(checkpoint, "arch", a, b);
      }
  }
  if (custom) { /* a named architecture ignores these (config_check refuses other values) */
    int_differs(checkpoint, cfg, "embed_dim", cfg->model.embed_dim, v->dim);
    int_differs(checkpoint, cfg, "depth", cfg->model.depth, v->depth);
    int_differs(checkpoint, cfg, "num_heads", cfg->model.num_heads, v->heads);
    const long dim = config_deck_sets(cfg, "model", "embed_dim") ? cfg->model.embed_dim : v->dim;
    const int hidden = (int)((double)dim * cfg->model.mlp_ratio);
    if (config_deck_sets(cfg, "model", "mlp_ratio") && hidden != v->mlp_hidden) {
      char a[96], b[96];
      snprintf(a, sizeof a, "%g (an MLP of %d for embed_dim %ld)", cfg->model.mlp_ratio, hidden, dim);
      snprintf(b, sizeof b, "an MLP of %d", v->mlp_hidden);
      model_differs(checkpoint, "mlp_ratio", a, b);
    }
  }
  int_differs(checkpoint, cfg, "patch_size", cfg->model.patch_size, v->patch);
  if (config_deck_sets(cfg, "model", "gelu_approximate") &&
      strcmp(cfg->model.gelu_approximate, v->gelu_approx ? "tanh" : "none") != 0) {
    char a[80];
    snprintf(a, sizeof a, "'%s'", cfg->model.gelu_approximate);
    model_differs(checkpoint, "gelu_approximate", a, v->gelu_approx ? "'tanh'" : "'none'");
  }
  if (!info->has_head) return; /* a backbone-only import */
  const struct head_dims *h = &info->spec.head;
  int_differs(checkpoint, cfg, "out_dim", cfg->model.out_dim, h->out_dim);
  int_differs(checkpoint, cfg, "head_hidden_dim", cfg->model.head_hidden_dim, h->hidden);
  int_differs(checkpoint, cfg, "head_bottleneck_dim", cfg->model.head_bottleneck_dim, h->bottleneck);
  int_differs(checkpoint, cfg, "head_nlayers", cfg->model.head_nlayers, h->nlayers);
}

void features_checkpoint_dims(const struct config *cfg, const char *checkpoint,
                              const struct features_prep *prep, struct vit_dims *d, int64_t *epoch) {
  if (!fs_exists(checkpoint))
    scd_fatal(SCD_EXIT_INPUT, "checkpoint '%s' not found (set features.checkpoint, or train first: "
              "calculation='train' writes run_dir/%s)", checkpoint, CKPT_FILE);
  /* What the step reads, no output of it may replace (core/fsutil.h). */
  char manifest[4096];
  fs_join(manifest, sizeof manifest, cfg->data.shard_dir, SHARDS_MANIFEST);
  fs_input_add(manifest, "manifest");
  fs_input_add(checkpoint, "checkpoint");
  struct ckpt_info info;
  checkpoint_read_info(checkpoint, &info);
  check_deck_model(cfg, checkpoint, &info);
  const int adapt = cfg->model.use_mean_patch_embedding || cfg->model.n_custom_embedding_map > 0;
  if (info.has_spec) {
    *d = info.spec.vit;
  } else {
    struct dino_spec s;
    model_config_spec(&s, cfg, prep->nsel);
    *d = s.vit;
  }
  if (adapt) d->in_chans = prep->nsel; /* the patch embedding is adapted as it loads */
  if (d->in_chans != prep->nsel)
    scd_fatal(SCD_EXIT_INPUT, "checkpoint %s holds a network for %d channels, but data.channels selects %d",
              checkpoint, d->in_chans, prep->nsel);
  *epoch = features_checkpoint_epoch(&info);
}

int64_t features_checkpoint_epoch(const struct ckpt_info *info) {
  /* checkpoint_EEEE.h5 holds epoch = EEEE + 1 (the next epoch to run); a checkpoint written inside
   * an epoch is numbered by that epoch. */
  if (info->epoch < 0) return 0;
  if (info->iteration > 0) return info->epoch;
  return info->epoch > 0 ? info->epoch - 1 : 0;
}

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The global indices of features.subset, ascending. */
static int64_t *subset_rows(const struct config *cfg, const struct dataset *ds, int64_t *n) {
  const char *sub = cfg->features.subset;
  int64_t *idx;
  if (strcmp(sub, "all") == 0) {
    *n = dataset_count(ds);
    idx = xmalloc(MUL_SIZE((size_t)*n + 1, sizeof *idx));
    for (int64_t i = 0; i < *n; i++) idx[i] = i;
  } else {
    struct split s;
    split_dataset(ds, cfg->data.train_fraction, (uint32_t)cfg->data.split_seed, &s);
    const int val = strcmp(sub, "val") == 0;
    *n = val ? s.n_val : s.n_train;
    idx = xmalloc(MUL_SIZE((size_t)*n + 1, sizeof *idx));
    memcpy(idx, val ? s.val : s.train, (size_t)*n * sizeof *idx);
    split_free(&s);
    qsort(idx, (size_t)*n, sizeof *idx, cmp_i64);
  }
  if (*n < 1)
    scd_fatal(SCD_EXIT_INPUT, "features.subset = '%s' holds no images of the %" PRId64 " in %s "
              "(data.train_fraction = %g)", sub, dataset_count(ds), cfg->data.shard_dir, cfg->data.train_fraction);
  return idx;
}

/* Rank 0: what the features file says of its rows: the images that had features (keep[i] = 1;
 * the others are named and left out), their labels, sample indices and paths, the network. */
static void file_meta(const struct config *cfg, struct dataset *ds, const struct features_net *net,
                      const struct features_input *in, const int64_t *idx, int64_t n, const int8_t *status,
                      int64_t epoch, struct features *f, unsigned char *keep) {
  SCD_ASSERT(status); /* rank 0 has it */
  memset(f, 0, sizeof *f);
  f->d = features_net_width(net);
  f->n_last_blocks = net->n_last_blocks;
  f->avgpool = net->avgpool;
  f->depth = net->vit.d.depth;
  f->nclasses = dataset_nclasses(ds);
  f->labels = xmalloc(MUL_SIZE((size_t)n, sizeof *f->labels));
  f->index = xmalloc(MUL_SIZE((size_t)n, sizeof *f->index));
  f->paths = xcalloc((size_t)n, sizeof *f->paths);
  f->class_names = xcalloc((size_t)(f->nclasses > 0 ? f->nclasses : 1), sizeof *f->class_names);
  for (int c = 0; c < f->nclasses; c++) f->class_names[c] = (char *)dataset_class_name(ds, c);
  f->nmeta = dataset_nmeta(ds); /* metadata columns: [nmeta][n] (features_io.h), filled below */
  f->meta_names = xcalloc((size_t)(f->nmeta > 0 ? f->nmeta : 1), sizeof *f->meta_names);
  for (int m = 0; m < f->nmeta; m++) f->meta_names[m] = (char *)dataset_meta_name(ds, m);
  f->meta = xcalloc(MUL_SIZE((size_t)(f->nmeta > 0 ? f->nmeta : 1), (size_t)n), sizeof *f->meta);
  char rel[4096];
  int64_t m = 0, flat = 0, bad = 0;
  for (int64_t i = 0; i < n; i++) {
    dataset_relpath(ds, idx[i], rel, sizeof rel);
    keep[i] = status[i] != FEATURES_PREP_NONFINITE;
    if (!keep[i]) {
      if (bad++ < 5) log_warn("features: %s (sample %" PRId64 ") has non-finite pixels; left out", rel, idx[i]);
      continue;
    }
    if (status[i] == FEATURES_PREP_FLAT && flat++ < 5)
      log_detail("features: %s (sample %" PRId64 ") has a constant channel, set to 0", rel, idx[i]);
    f->labels[m] = dataset_label(ds, idx[i]);
    f->index[m] = idx[i];
    f->paths[m] = xstrdup(rel);
    for (int c = 0; c < f->nmeta; c++) {
      dataset_meta(ds, idx[i], c, rel, sizeof rel);
      f->meta[(size_t)c * (size_t)n + (size_t)m] = xstrdup(rel);
    }
    m++;
  }
  /* The columns run over the kept rows only: close the gaps left by images left out. */
  for (int c = 1; c < f->nmeta && m < n; c++)
    memmove(f->meta + (size_t)c * (size_t)m, f->meta + (size_t)c * (size_t)n, (size_t)m * sizeof *f->meta);
  if (flat)
    log_warn("features: %" PRId64 " image(s) have a constant non-zero channel; it is set to 0 (upstream would "
             "substitute image 0)", flat);
  if (bad) log_warn("features: %" PRId64 " image(s) with non-finite pixels left out", bad);
  if (m < 1) scd_fatal(SCD_EXIT_DATA, "features: no image of %s could be prepared", cfg->data.shard_dir);
  f->n = m;
  snprintf(f->normalization, sizeof f->normalization, "%s", in->how);
  f->nnorm = in->normalize ? in->nsel : 0;
  for (int s = 0; s < f->nnorm; s++) {
    f->norm_mean[s] = in->mean[s];
    f->norm_std[s] = in->std[s];
  }
  snprintf(f->checkpoint, sizeof f->checkpoint, "%s", net->source);
  snprintf(f->checkpoint_key, sizeof f->checkpoint_key, "%s", net->key);
  f->epoch = epoch;
}

static void file_meta_free(struct features *f) {
  for (int64_t i = 0; i < f->n; i++) free(f->paths[i]);
  for (size_t i = 0; i < (size_t)f->nmeta * (size_t)f->n; i++) free(f->meta[i]);
  free(f->meta);
  free(f->meta_names);
  free(f->paths);
  free(f->class_names);
  free(f->labels);
  free(f->index);
}

void features_extract(const struct config *cfg, char *out_path, size_t out_n) {
  const double t0 = wtime();
  const struct device *dev = backend_select(cfg);
  char ckpt[4096];
  features_checkpoint_path(cfg, ckpt, sizeof ckpt);
  struct dataset *ds = dataset_open(cfg->data.shard_dir);
  struct features_input in;
  features_input_choose(&in, cfg, ds, ckpt, "features");
  struct features_prep prep;
  features_prep_init(&prep, cfg, ds, &in, (int)cfg->features.resize);
  struct vit_dims d;
  int64_t epoch;
  features_checkpoint_dims(cfg, ckpt, &prep, &d, &epoch);
  struct features_net net;
  struct ckpt_embed emb;
  checkpoint_embed_from_config(cfg, &emb);
  features_net_load(&net, dev, &d, &emb, ckpt, cfg->features.checkpoint_key);
  features_net_layout(&net, (int)cfg->features.n_last_blocks, cfg->features.avgpool_patchtokens, 1,
                      "features.n_last_blocks");
  const int width = features_net_width(&net);

  int64_t n;
  int64_t *idx = subset_rows(cfg, ds, &n);
  log_info("features: %s network of %s (epoch %" PRId64 "), %s subset: %" PRId64 " of %" PRId64
           " images, %d channels resized to %dx%d, %s backend", net.key, ckpt, epoch, cfg->features.subset, n,
           dataset_count(ds), prep.nsel, prep.oh, prep.ow, dev->name);
  if (net.n_last_blocks > 1 || net.avgpool)
    log_info("features: rows of %d values: the CLS tokens of blocks %d to %d%s (embed_dim %d each)", width,
             d.depth - net.n_last_blocks, d.depth - 1, net.avgpool ? " and the mean patch token of the last" : "",
             d.dim);
  const int root = comm_rank() == 0;
  int8_t *status = root ? xmalloc((size_t)n) : NULL;
  /* Written while computed: no rank holds more than a few batches of rows (features.h). */
  char name[64], path[4096];
  features_filename(name, sizeof name, epoch);
  fs_join(path, sizeof path, cfg->control.run_dir, name);
  if (root) {
    fs_output_claim(path, "features file", h5util_own_format, FEATURES_FORMAT,
                    "its name is control.run_dir/features_EEEE.h5 (EEEE: the checkpoint's epoch), so choose "
                    "another run_dir or name the checkpoint elsewhere");
    fs_mkdir_p(cfg->control.run_dir);
  }
  if (cfg->features.anndata) anndata_check_features(path); /* before the work, not after */
  struct features_stream *stream = features_stream_open(path, n, width, (int)cfg->features.batch_size);
  const double t1 = wtime();
  features_compute(&net, &prep, ds, idx, n, (int)cfg->features.batch_size, 0, stream, status, "features");
  const double tc = wtime() - t1;
  struct features meta;
  memset(&meta, 0, sizeof meta);
  unsigned char *keep = NULL;
  if (root) {
    keep = xmalloc((size_t)n);
    file_meta(cfg, ds, &net, &in, idx, n, status, epoch, &meta, keep);
  }
  features_stream_close(stream, root ? &meta : NULL, keep);
  if (root) {
    log_info("features: %" PRId64 " x %d written to %s (%.1f s, %.1f images/s on %d rank%s)", meta.n, width, path,
             wtime() - t0, tc > 0 ? n / tc : 0.0, comm_size(), comm_size() > 1 ? "s" : "");
    if (cfg->features.anndata) anndata_write_features(cfg, ds, &net, &prep, path, &meta);
    file_meta_free(&meta);
    free(keep);
  }
  snprintf(out_path, out_n, "%s", path);
  free(status);
  free(idx);
  features_net_free(&net);
  features_prep_free(&prep);
  dataset_close(ds);
}

int features_run(const struct config *cfg) {
  char path[4096];
  int n;
  int64_t *epochs = features_epochs_select(cfg, "checkpoint", "calculation='train' keeps them every "
                                           "training.saveckp_freq epochs and at the last", &n);
  if (cfg->features.n_checkpoints > 0)
    features_extract_models(cfg, NULL);
  else if (epochs)
    features_extract_epochs(cfg, epochs, n, path, sizeof path);
  else
    features_extract(cfg, path, sizeof path);
  free(epochs);
  return 0;
}

/* The shard set must be the one the features file was computed from. */
static void check_same_dataset(const struct dataset *ds, const struct features *f, const char *file) {
  const char *dir = dataset_dir(ds);
  int same = dataset_nclasses(ds) == f->nclasses;
  for (int c = 0; same && c < f->nclasses; c++) same = strcmp(dataset_class_name(ds, c), f->class_names[c]) == 0;
  if (!same)
    scd_fatal(SCD_EXIT_DATA, "features file %s and the shard set %s name different classes; knn.features and "
              "data.shard_dir do not belong together", file, dir);
  for (int64_t i = 0; i < f->n; i++)
    if (f->index[i] >= dataset_count(ds) || dataset_label(ds, f->index[i]) != f->labels[i])
      scd_fatal(SCD_EXIT_DATA, "features file %s row %" PRId64 " (sample index %" PRId64 ") does not match the "
                "shard set %s; knn.features and data.shard_dir do not belong together", file, i, f->index[i], dir);
}

float *features_random_init(const struct config *cfg, const struct features *f, const char *features_file,
                            int *dim, char *why, size_t whyn) {
  char manifest[4096];
  fs_join(manifest, sizeof manifest, cfg->data.shard_dir, SHARDS_MANIFEST);
  /* Rank 0 decides, so every rank takes the same branch. */
  int have[2] = {fs_exists(f->checkpoint), fs_exists(manifest)};
  comm_bcast(have, sizeof have, 0);
  if (!have[0]) {
    snprintf(why, whyn, "the checkpoint of the features, '%s', is not at hand", f->checkpoint);
    return NULL;
  }
  if (!have[1]) {
    snprintf(why, whyn, "no shard set at data.shard_dir = '%s'", cfg->data.shard_dir);
    return NULL;
  }
  struct dataset *ds = dataset_open(cfg->data.shard_dir);
  check_same_dataset(ds, f, features_file);
  struct features_input in;
  features_input_choose(&in, cfg, ds, f->checkpoint, "random-init baseline");
  struct features_prep prep;
  features_prep_init(&prep, cfg, ds, &in, (int)cfg->features.resize);
  struct vit_dims d;
  int64_t epoch;
  features_checkpoint_dims(cfg, f->checkpoint, &prep, &d, &epoch);
  const struct device *dev = backend_select(cfg);
  struct features_net net;
  features_net_random(&net, dev, &d, (uint64_t)cfg->control.seed);
  /* the rows of the features it is compared with: the same blocks */
  features_net_layout(&net, f->n_last_blocks, f->avgpool, 1, "the features file's n_last_blocks");
  log_info("random-init baseline: %s backbone (embed_dim %d, depth %d, patch %d), %s, %" PRId64 " images",
           f->checkpoint, d.dim, d.depth, d.patch, net.source, f->n);
  float *x = features_compute(&net, &prep, ds, f->index, f->n, (int)cfg->features.batch_size, 1, NULL, NULL,
                              "random-init features");
  *dim = features_net_width(&net);
  features_net_free(&net);
  features_prep_free(&prep);
  dataset_close(ds);
  return x;
}
