/* linear_run.c - calculation='linear': a checkpoint's frozen backbone, the features of the training
 * and evaluation rows, the epochs of SGD on rank 0, and the report. */
#include "build_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/watchdog.h"
#include "data/sampler.h"
#include "data/shards.h"
#include "data/split.h"
#include "linear/linear.h"
#include "train/checkpoint.h"

/* The rows of one side: which images of which shard set, prepared how. */
struct side {
  struct dataset *ds;
  struct features_input in;
  struct features_prep prep;
  int64_t *idx, n;  /* global indices asked for, ascending */
  float *x;         /* rank 0: the features of the rows kept, [kept][F] */
  int64_t kept;
  int64_t *row;     /* rank 0: which of idx each kept row is */
};

struct linear_job {
  const struct config *cfg;
  const struct device *dev;
  const struct ops *ops; /* dev->ops */
  char ckpt[4096];
  int64_t ckpt_epoch;
  struct vit_dims d;
  struct features_net net;
  int F, root;
  struct side train, eval;
  int query; /* eval is linear.query_dir (else the validation split of train.ds) */
  int32_t *eval_map; /* class of the evaluation set -> class of the report */
  struct linear_report rep;
};

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static int64_t *sorted(const int64_t *v, int64_t n) {
  int64_t *s = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *s));
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_i64);
  return s;
}

/* The classes of the report: the training set's (the layer's outputs), then those of the evaluation
 * set that it lacks, matched by name. */
static void map_classes(struct linear_job *j) {
  struct linear_report *r = &j->rep;
  const struct dataset *t = j->train.ds, *e = j->eval.ds;
  const int C = dataset_nclasses(t), CE = dataset_nclasses(e);
  r->C = C;
  r->class_names = xcalloc((size_t)(C + CE), sizeof *r->class_names);
  for (int c = 0; c < C; c++) r->class_names[c] = xstrdup(dataset_class_name(t, c));
  r->nclasses = C;
  j->eval_map = xmalloc(MUL_SIZE((size_t)CE, sizeof *j->eval_map));
  for (int q = 0; q < CE; q++) {
    int c = 0;
    while (c < r->nclasses && strcmp(r->class_names[c], dataset_class_name(e, q)) != 0) c++;
    if (c == r->nclasses) r->class_names[r->nclasses++] = xstrdup(dataset_class_name(e, q));
    j->eval_map[q] = c;
  }
}

/* The network, the shard sets and their rows; nothing computed yet. */
static void job_setup(struct linear_job *j, const struct config *cfg) {
  memset(j, 0, sizeof *j);
  j->cfg = cfg;
  j->root = comm_rank() == 0;
  j->dev = backend_select(cfg);
  j->ops = j->dev->ops;
  features_checkpoint_path(cfg, j->ckpt, sizeof j->ckpt);
  struct side *t = &j->train, *e = &j->eval;
  t->ds = dataset_open(cfg->data.shard_dir);
  features_input_choose(&t->in, cfg, t->ds, j->ckpt, "linear probe");
  features_prep_init(&t->prep, cfg, t->ds, &t->in, (int)cfg->features.resize);
  features_checkpoint_dims(cfg, j->ckpt, &t->prep, &j->d, &j->ckpt_epoch);
  struct ckpt_embed emb;
  checkpoint_embed_from_config(cfg, &emb);
  features_net_load(&j->net, j->dev, &j->d, &emb, j->ckpt, cfg->features.checkpoint_key);
  /* eval_linear's features: not L2-normalised */
  features_net_layout(&j->net, (int)cfg->linear.n_last_blocks, cfg->linear.avgpool_patchtokens, 0,
                      "linear.n_last_blocks");
  j->F = features_net_width(&j->net);

  struct split sp;
  split_dataset(t->ds, cfg->data.train_fraction, (uint32_t)cfg->data.split_seed, &sp);
  t->n = sp.n_train;
  t->idx = sorted(sp.train, sp.n_train);
  j->query = cfg->linear.query_dir[0] != '\0';
  if (j->query) {
    char manifest[4096];
    fs_join(manifest, sizeof manifest, cfg->linear.query_dir, SHARDS_MANIFEST);
    fs_input_add(manifest, "manifest of linear.query_dir");
    e->ds = dataset_open(cfg->linear.query_dir);
    features_input_choose(&e->in, cfg, e->ds, j->ckpt, "linear probe: query set");
    if (e->in.nsel != t->in.nsel)
      scd_fatal(SCD_EXIT_INPUT, "linear.query_dir = '%s' feeds %d channels to the network, the training set %d",
                cfg->linear.query_dir, e->in.nsel, t->in.nsel);
    features_prep_init(&e->prep, cfg, e->ds, &e->in, (int)cfg->features.resize);
    e->n = dataset_count(e->ds);
    e->idx = xmalloc(MUL_SIZE((size_t)e->n + 1, sizeof *e->idx));
    for (int64_t i = 0; i < e->n; i++) e->idx[i] = i;
  } else {
    e->ds = t->ds;
    e->prep = t->prep; /* shares its taps: freed once, with the training side's */
    e->n = sp.n_val;
    e->idx = sorted(sp.val, sp.n_val);
  }
  split_free(&sp);
  if (t->n < 1)
    scd_fatal(SCD_EXIT_INPUT, "linear: the training split of %s is empty (data.train_fraction = %g)",
              cfg->data.shard_dir, cfg->data.train_fraction);
  if (e->n < 1)
    scd_fatal(SCD_EXIT_INPUT, "linear: no evaluation rows: the validation split of %s is empty (data.train_fraction = "
              "%g; or name a shard set with linear.query_dir)", cfg->data.shard_dir, cfg->data.train_fraction);
  map_classes(j);
}

/* Rank 0 holds both sides' features, the per-row report and, with save_inputs, every epoch's order. */
static void check_memory(const struct linear_job *j) {
  const struct config *cfg = j->cfg;
  struct membudget mb = {0};
  const double F = j->F, C = j->rep.C;
  if (j->root) {
    membudget_add(&mb, (double)j->train.n * F * sizeof(float), "the training rows' features (rank 0)",
                  "the training split, linear n_last_blocks = %ld, avgpool_patchtokens", cfg->linear.n_last_blocks);
    membudget_add(&mb, (double)j->eval.n * (F + 2 * C + 16) * sizeof(float), "the evaluation rows (rank 0)",
                  "the evaluation rows, linear n_last_blocks");
    membudget_add(&mb, (double)cfg->linear.batch_size * (2 * F + 2 * C) * sizeof(float) + 6 * F * C * sizeof(float),
                  "the linear layer and a batch", "linear batch_size = %ld", cfg->linear.batch_size);
    if (cfg->linear.save_inputs)
      membudget_add(&mb, (double)cfg->linear.epochs * (double)j->train.n * sizeof(int64_t),
                    "every epoch's order (save_inputs)", "linear epochs = %ld", cfg->linear.epochs);
  }
  char how[256];
  const double limit = membudget_limit(cfg->system.memory_per_rank, how, sizeof how);
  membudget_check(&mb, "linear", limit, how);
}

/* Collective: the features of a side's rows, computed over the ranks with prep; rank 0 keeps those of
 * the images that could be prepared (the others are named once and left out). */
static void side_features(struct linear_job *j, struct side *s, const struct features_prep *prep, const char *what) {
  const int root = j->root;
  int8_t *status = root ? xmalloc((size_t)s->n + 1) : NULL;
  float *x = features_compute(&j->net, prep, s->ds, s->idx, s->n, (int)j->cfg->features.batch_size, 0, NULL,
                              status, what);
  if (!root || !status) return;
  const size_t F = (size_t)j->F;
  const int first = s->row == NULL;
  if (first) s->row = xmalloc(MUL_SIZE((size_t)s->n + 1, sizeof *s->row));
  int64_t m = 0, bad = 0;
  for (int64_t i = 0; i < s->n; i++) {
    if (status[i] == FEATURES_PREP_NONFINITE) {
      if (first && bad++ < 5) {
        char rel[4096];
        dataset_relpath(s->ds, s->idx[i], rel, sizeof rel);
        log_warn("linear: %s (sample %" PRId64 ") has non-finite pixels; left out", rel, s->idx[i]);
      }
      continue;
    }
    if (m != i) memmove(x + (size_t)m * F, x + (size_t)i * F, F * sizeof(float));
    SCD_ASSERT(first || s->row[m] == i); /* the same images every epoch: it depends on the pixels only */
    s->row[m++] = i;
  }
  if (bad > 5) log_warn("linear: %" PRId64 " images with non-finite pixels left out (%s)", bad, what);
  if (m < 1) scd_fatal(SCD_EXIT_DATA, "linear: no image of %s could be prepared (%s)", dataset_dir(s->ds), what);
  s->kept = m;
  free(s->x);
  s->x = x;
  free(status);
}

/* Rank 0: the labels, indices and paths of the kept rows into the report. */
static void rows_meta(struct linear_job *j) {
  struct linear_report *r = &j->rep;
  const struct side *t = &j->train, *e = &j->eval;
  r->n_train = t->kept;
  r->n_eval = e->kept;
  r->train_label = xmalloc(MUL_SIZE((size_t)t->kept, sizeof *r->train_label));
  r->train_support = xcalloc((size_t)r->nclasses, sizeof *r->train_support);
  for (int64_t i = 0; i < t->kept; i++) {
    r->train_label[i] = dataset_label(t->ds, t->idx[t->row[i]]);
    r->train_support[r->train_label[i]]++;
  }
  r->eval_label = xmalloc(MUL_SIZE((size_t)e->kept, sizeof *r->eval_label));
  r->eval_index = xmalloc(MUL_SIZE((size_t)e->kept, sizeof *r->eval_index));
  r->eval_paths = xcalloc((size_t)e->kept, sizeof *r->eval_paths);
  char rel[4096];
  for (int64_t i = 0; i < e->kept; i++) {
    const int64_t g = e->idx[e->row[i]];
    r->eval_index[i] = g;
    r->eval_label[i] = j->eval_map[dataset_label(e->ds, g)];
    dataset_relpath(e->ds, g, rel, sizeof rel);
    r->eval_paths[i] = xstrdup(rel);
  }
}

/* Rank 0: one epoch of SGD over the training rows in the epoch's order; returns the mean batch loss. */
static double train_epoch(struct linear_job *j, struct linear_model *m, int64_t epoch, double lr, int64_t *order,
                          float *xb, int32_t *yb) {
  const struct config *cfg = j->cfg;
  const struct side *t = &j->train;
  const int64_t n = t->kept, B = cfg->linear.batch_size;
  const size_t F = (size_t)j->F;
  int64_t *pos = xmalloc(MUL_SIZE((size_t)n, sizeof *pos));
  for (int64_t i = 0; i < n; i++) pos[i] = i;
  sampler_permutation(pos, n, (uint64_t)cfg->linear.seed, epoch, order);
  free(pos);
  double sum = 0;
  int64_t nb = 0;
  for (int64_t b0 = 0; b0 < n; b0 += B, nb++) {
    const int cnt = (int)(n - b0 < B ? n - b0 : B);
    for (int i = 0; i < cnt; i++) {
      memcpy(xb + (size_t)i * F, t->x + (size_t)order[b0 + i] * F, F * sizeof(float));
      yb[i] = j->rep.train_label[order[b0 + i]];
    }
    sum += linear_step(m, xb, yb, cnt, lr, cfg->linear.momentum, cfg->linear.weight_decay);
    watchdog_progress("a linear probe step", epoch);
  }
  return sum / (double)nb;
}

/* The epochs: with augment the training features again each epoch (collective), then rank 0's SGD
 * and evaluation. */
static void run_epochs(struct linear_job *j, struct linear_model *m) {
  const struct config *cfg = j->cfg;
  struct linear_report *r = &j->rep;
  const int64_t E = cfg->linear.epochs;
  const int size = cfg->features.resize > 0 ? (int)cfg->features.resize
                                            : (j->train.prep.H < j->train.prep.W ? j->train.prep.H : j->train.prep.W);
  struct linear_aug aug = {(uint64_t)cfg->linear.seed, 0};
  struct features_prep aprep;
  linear_aug_prep(&aprep, &j->train.prep, size, &aug);
  float *xb = NULL;
  int32_t *yb = NULL;
  int64_t *order = NULL;
  for (int64_t e = 0; e < E; e++) {
    if (cfg->linear.augment) {
      char what[96];
      snprintf(what, sizeof what, "linear: augmented training features, epoch %" PRId64, e);
      aug.epoch = e;
      side_features(j, &j->train, &aprep, what);
    }
    if (!j->root) continue;
    const int64_t n = j->train.kept;
    if (!xb) { /* the kept training rows are known once their features are */
      rows_meta(j);
      xb = xmalloc(MUL_SIZE(MUL_SIZE((size_t)cfg->linear.batch_size, (size_t)j->F), sizeof(float)));
      yb = xmalloc(MUL_SIZE((size_t)cfg->linear.batch_size, sizeof *yb));
      order = xmalloc(MUL_SIZE(cfg->linear.save_inputs ? (size_t)E * (size_t)n : (size_t)n, sizeof *order));
    }
    int64_t *ord = cfg->linear.save_inputs ? order + (size_t)e * (size_t)n : order;
    r->train_loss[e] = train_epoch(j, m, e, r->lrs[e], ord, xb, yb);
    linear_eval(m, j->eval.x, r->eval_label, j->eval.kept, &r->eval_loss[e], &r->top1[e], &r->top5[e]);
    if (e == 0 || r->top1[e] > r->best_top1) r->best_top1 = r->top1[e], r->best_epoch = e + 1;
    if (r->C >= LINEAR_TOPK)
      log_info("linear: epoch %" PRId64 "/%" PRId64 ": lr %.4g, train loss %.4f, eval loss %.4f, Top-1 %.2f %%, Top-5 "
               "%.2f %%", e + 1, E, r->lrs[e], r->train_loss[e], r->eval_loss[e], r->top1[e], r->top5[e]);
    else
      log_info("linear: epoch %" PRId64 "/%" PRId64 ": lr %.4g, train loss %.4f, eval loss %.4f, Top-1 %.2f %%", e + 1,
               E, r->lrs[e], r->train_loss[e], r->eval_loss[e], r->top1[e]);
  }
  free(xb);
  free(yb);
  if (cfg->linear.save_inputs) {
    r->order = order;
    r->eval_x = j->eval.x;
    r->train_x = cfg->linear.augment ? NULL : j->train.x;
  } else {
    free(order);
  }
}

static void describe(struct linear_job *j) {
  const struct config *cfg = j->cfg;
  struct linear_report *r = &j->rep;
  snprintf(r->checkpoint, sizeof r->checkpoint, "%s", j->ckpt);
  snprintf(r->checkpoint_key, sizeof r->checkpoint_key, "%s", j->net.key);
  r->ckpt_epoch = j->ckpt_epoch;
  snprintf(r->train_set, sizeof r->train_set, "the training split of %s (data.train_fraction %g, split_seed %ld)",
           cfg->data.shard_dir, cfg->data.train_fraction, cfg->data.split_seed);
  if (j->query)
    snprintf(r->eval_set, sizeof r->eval_set, "every image of %s (linear.query_dir; classes matched by name)",
             cfg->linear.query_dir);
  else
    snprintf(r->eval_set, sizeof r->eval_set, "the validation split of %s", cfg->data.shard_dir);
  r->n_last_blocks = j->net.n_last_blocks;
  r->avgpool = j->net.avgpool;
  r->embed_dim = j->d.dim;
  r->depth = j->d.depth;
  r->F = j->F;
  r->epochs = cfg->linear.epochs;
  r->batch_size = cfg->linear.batch_size;
  r->seed = cfg->linear.seed;
  r->lr = cfg->linear.lr;
  r->lr_scaled = cfg->linear.lr * (double)cfg->linear.batch_size / 256.0; /* upstream's linear scaling rule */
  r->momentum = cfg->linear.momentum;
  r->weight_decay = cfg->linear.weight_decay;
  r->augment = cfg->linear.augment;
  const size_t E = (size_t)r->epochs;
  r->lrs = xcalloc(E, sizeof(double));
  r->train_loss = xcalloc(E, sizeof(double));
  r->eval_loss = xcalloc(E, sizeof(double));
  r->top1 = xcalloc(E, sizeof(double));
  r->top5 = xcalloc(E, sizeof(double));
  linear_cosine_lrs(r->lr_scaled, r->epochs, r->lrs);
}

static void job_free(struct linear_job *j) {
  struct linear_report *r = &j->rep;
  linear_report_free(r);
  for (int c = 0; c < r->nclasses; c++) free(r->class_names[c]);
  for (int64_t i = 0; r->eval_paths && i < r->n_eval; i++) free(r->eval_paths[i]);
  void *bufs[] = {r->class_names, r->eval_paths, r->train_label, r->eval_label, r->eval_index, r->train_support,
                  r->lrs, r->train_loss, r->eval_loss, r->top1, r->top5, (void *)r->order, (void *)r->w_init,
                  j->eval_map, j->train.idx, j->train.x, j->train.row, j->eval.idx, j->eval.x, j->eval.row};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
  features_net_free(&j->net);
  features_prep_free(&j->train.prep);
  if (j->query) {
    features_prep_free(&j->eval.prep);
    dataset_close(j->eval.ds);
  }
  dataset_close(j->train.ds);
}

int linear_run(const struct config *cfg) {
  const double t0 = wtime();
  static struct linear_job j; /* large (paths): off the stack */
  job_setup(&j, cfg);
  if (j.root) linear_report_claim(cfg->control.run_dir); /* before anything is computed for it */
  check_memory(&j);
  describe(&j);
  char blocks[64] = "its last block";
  if (j.net.n_last_blocks > 1) snprintf(blocks, sizeof blocks, "its last %d blocks", j.net.n_last_blocks);
  log_info("linear: %s network of %s (epoch %" PRId64 "), %d features per image (the CLS token%s of %s%s), %" PRId64
           " training and %" PRId64 " evaluation images, %d classes, %s backend, %d rank%s", j.net.key, j.ckpt,
           j.ckpt_epoch, j.F, j.net.n_last_blocks > 1 ? "s" : "", blocks,
           j.net.avgpool ? " and the mean patch token" : "", j.train.n, j.eval.n, j.rep.C, j.dev->name, comm_size(),
           comm_size() > 1 ? "s" : "");

  side_features(&j, &j.eval, &j.eval.prep, "linear: evaluation features");
  if (!cfg->linear.augment) side_features(&j, &j.train, &j.train.prep, "linear: training features");
  struct linear_model m = {0};
  if (j.root) {
    linear_model_init(&m, j.ops, j.F, j.rep.C, (int)cfg->linear.batch_size, (uint64_t)cfg->linear.seed);
    float *w0 = xmalloc(MUL_SIZE(MUL_SIZE((size_t)j.F, (size_t)j.rep.C), sizeof(float)));
    memcpy(w0, m.w, (size_t)j.F * j.rep.C * sizeof(float));
    j.rep.w_init = w0;
  }
  run_epochs(&j, &m);
  if (j.root) {
    j.rep.w = m.w;
    j.rep.b = m.b;
    linear_report_evaluate(&j.rep, &m, j.eval.x);
    linear_report_write(&j.rep, cfg->control.run_dir);
    log_info("linear: Top-1 %.2f %% after %ld epochs (%.1f s); report in %s/linear.txt and linear.h5", j.rep.final_top1,
             cfg->linear.epochs, wtime() - t0, cfg->control.run_dir);
  }
  linear_model_free(&m);
  job_free(&j);
  return 0;
}
