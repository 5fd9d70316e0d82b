/* linear_report.c - the probe's final evaluation and its report: run_dir/linear.txt and linear.h5. */
#include "build_config.h"

#include <hdf5.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "linear/linear.h"

void linear_report_evaluate(struct linear_report *r, struct linear_model *m, const float *x) {
  const int C = r->C, NC = r->nclasses, k = C < LINEAR_TOPK ? C : LINEAR_TOPK;
  const int64_t n = r->n_eval;
  r->k = k;
  r->logits = xmalloc(MUL_SIZE(MUL_SIZE((size_t)n, (size_t)C), sizeof(float)));
  r->topk = xmalloc(MUL_SIZE(MUL_SIZE((size_t)n, (size_t)k), sizeof(int32_t)));
  r->confusion = xcalloc(MUL_SIZE((size_t)NC, (size_t)NC), sizeof(int64_t));
  r->eval_support = xcalloc((size_t)NC, sizeof(int64_t));
  r->precision = xcalloc((size_t)NC, sizeof(double));
  r->recall = xcalloc((size_t)NC, sizeof(double));
  r->f1 = xcalloc((size_t)NC, sizeof(double));
  for (int64_t i0 = 0; i0 < n; i0 += m->rows_max) {
    const int cnt = (int)(n - i0 < m->rows_max ? n - i0 : m->rows_max);
    linear_logits(m, x + (size_t)i0 * m->F, cnt, r->logits + (size_t)i0 * C);
  }
  int64_t hit1 = 0, hit5 = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t *best = r->topk + (size_t)i * k;
    linear_topk(r->logits + (size_t)i * C, C, k, best);
    const int32_t t = r->eval_label[i];
    r->confusion[(size_t)t * NC + best[0]]++;
    hit1 += best[0] == t;
    for (int j = 0; j < k; j++) hit5 += best[j] == t;
  }
  r->final_top1 = n ? 100.0 * (double)hit1 / (double)n : 0;
  r->final_top5 = n ? 100.0 * (double)hit5 / (double)n : 0;
  double rec_sum = 0, f1_sum = 0;
  int n_rec = 0, n_f1 = 0;
  for (int c = 0; c < NC; c++) {
    int64_t tp = r->confusion[(size_t)c * NC + c], support = 0, predicted = 0;
    for (int o = 0; o < NC; o++) {
      support += r->confusion[(size_t)c * NC + o];
      predicted += r->confusion[(size_t)o * NC + c];
    }
    r->eval_support[c] = support;
    const int64_t fp = predicted - tp, fn = support - tp;
    r->precision[c] = predicted ? (double)tp / (double)predicted : 0.0;
    r->recall[c] = support ? (double)tp / (double)support : 0.0;
    r->f1[c] = 2 * tp + fp + fn ? 2.0 * (double)tp / (double)(2 * tp + fp + fn) : 0.0;
    if (support) rec_sum += r->recall[c], n_rec++;
    if (support || predicted) f1_sum += r->f1[c], n_f1++;
  }
  r->balanced_accuracy = n_rec ? 100.0 * rec_sum / n_rec : 0.0;
  r->macro_f1 = n_f1 ? 100.0 * f1_sum / n_f1 : 0.0;
}

/* ---- linear.txt --------------------------------------------------------------------------------- */

static int name_width(const struct linear_report *r) {
  int w = 5;
  for (int c = 0; c < r->nclasses; c++) {
    const int l = (int)strlen(r->class_names[c]);
    if (l > w) w = l;
  }
  return w > 24 ? 24 : w;
}

static void text_header(const struct linear_report *r, FILE *f) {
  fprintf(f, LINEAR_TXT_FIRST " (DINO eval_linear): a linear classifier on frozen features\n");
  fprintf(f, "  network  : %s network of %s (epoch %" PRId64 "), frozen\n", r->checkpoint_key, r->checkpoint,
          r->ckpt_epoch);
  char blocks[64];
  if (r->n_last_blocks > 1)
    snprintf(blocks, sizeof blocks, "the CLS tokens of blocks %d to %d", r->depth - r->n_last_blocks, r->depth - 1);
  else
    snprintf(blocks, sizeof blocks, "the CLS token of block %d", r->depth - 1);
  fprintf(f, "  features : %d = %s (0-based)%s, %d each, after the final norm\n", r->F, blocks,
          r->avgpool ? " and the mean patch token of the last" : "", r->embed_dim);
  fprintf(f, "  training : %" PRId64 " rows, %s\n", r->n_train, r->train_set);
  fprintf(f, "  evaluated: %" PRId64 " rows, %s\n", r->n_eval, r->eval_set);
  fprintf(f, "  classes  : %d", r->C);
  if (r->nclasses > r->C) fprintf(f, " (and %d of the evaluation rows only, never predicted)", r->nclasses - r->C);
  fprintf(f, "\n  SGD      : %" PRId64 " epochs, batch %" PRId64 ", lr %g (= %g x %" PRId64 " / 256), cosine to 0 per "
          "epoch, momentum %g, weight decay %g, seed %" PRId64 ", augmentation %s\n", r->epochs, r->batch_size,
          r->lr_scaled, r->lr, r->batch_size, r->momentum, r->weight_decay, r->seed, r->augment ? "on" : "off");
}

static void text_epochs(const struct linear_report *r, FILE *f) {
  const int top5 = r->C >= LINEAR_TOPK;
  fprintf(f, "\n%6s %12s %12s %12s %8s", "epoch", "lr", "train loss", "eval loss", "top1");
  if (top5) fprintf(f, " %8s", "top5");
  fprintf(f, "\n");
  for (int64_t e = 0; e < r->epochs; e++) {
    fprintf(f, "%6" PRId64 " %12.6g %12.6f %12.6f %8.2f", e + 1, r->lrs[e], r->train_loss[e], r->eval_loss[e],
            r->top1[e]);
    if (top5) fprintf(f, " %8.2f", r->top5[e]);
    fprintf(f, "\n");
  }
}

static void text_final(const struct linear_report *r, FILE *f) {
  const int w = name_width(r), NC = r->nclasses;
  fprintf(f, "\nAfter %" PRId64 " epochs: Top-1 %.2f %%", r->epochs, r->final_top1);
  if (r->C >= LINEAR_TOPK)
    fprintf(f, ", Top-5 %.2f %%", r->final_top5);
  else
    fprintf(f, " (no Top-5: fewer than 5 classes)");
  fprintf(f, "; best Top-1 %.2f %% after epoch %" PRId64 "\n", r->best_top1, r->best_epoch);
  fprintf(f, "\nPer-class metrics of the final layer:\n");
  fprintf(f, "  %4s %-*s %8s %8s %10s %8s %8s\n", "", w, "class", "train", "eval", "precision", "recall", "F1");
  for (int c = 0; c < NC; c++)
    fprintf(f, "  %4d %-*.*s %8" PRId64 " %8" PRId64 " %10.4f %8.4f %8.4f\n", c, w, w, r->class_names[c],
            r->train_support[c], r->eval_support[c], r->precision[c], r->recall[c], r->f1[c]);
  fprintf(f, "  balanced accuracy %.2f %%, macro F1 %.2f %%, Top-1 %.2f %%\n", r->balanced_accuracy, r->macro_f1,
          r->final_top1);
  int64_t big = 1;
  for (size_t i = 0; i < (size_t)NC * NC; i++) big = r->confusion[i] > big ? r->confusion[i] : big;
  int cw = 3;
  for (int64_t v = big; v >= 1000; v /= 10) cw++;
  fprintf(f, "\nConfusion matrix (rows: true class, columns: predicted class):\n");
  fprintf(f, "  %4s %-*s", "", w, "");
  for (int c = 0; c < NC; c++) fprintf(f, " %*d", cw, c);
  fprintf(f, "\n");
  for (int t = 0; t < NC; t++) {
    fprintf(f, "  %4d %-*.*s", t, w, w, r->class_names[t]);
    for (int c = 0; c < NC; c++) fprintf(f, " %*" PRId64, cw, r->confusion[(size_t)t * NC + c]);
    fprintf(f, "\n");
  }
}

/* ---- linear.h5 ---------------------------------------------------------------------------------- */

static void write_attrs(hid_t fid, const struct linear_report *r) {
  h5util_attr_write_str(fid, "format", LINEAR_FORMAT);
  h5util_attr_write_i64(fid, "version", 1);
  h5util_attr_write_str(fid, "checkpoint", r->checkpoint);
  h5util_attr_write_str(fid, "checkpoint_key", r->checkpoint_key);
  h5util_attr_write_i64(fid, "epoch", r->ckpt_epoch);
  h5util_attr_write_str(fid, "train_set", r->train_set);
  h5util_attr_write_str(fid, "eval_set", r->eval_set);
  h5util_attr_write_i64(fid, "n_last_blocks", r->n_last_blocks);
  h5util_attr_write_i64(fid, "avgpool_patchtokens", r->avgpool);
  h5util_attr_write_i64(fid, "embed_dim", r->embed_dim);
  h5util_attr_write_i64(fid, "depth", r->depth);
  h5util_attr_write_i64(fid, "feature_dim", r->F);
  h5util_attr_write_i64(fid, "epochs", r->epochs);
  h5util_attr_write_i64(fid, "batch_size", r->batch_size);
  h5util_attr_write_f64(fid, "lr", r->lr);
  h5util_attr_write_f64(fid, "lr_scaled", r->lr_scaled);
  h5util_attr_write_f64(fid, "momentum", r->momentum);
  h5util_attr_write_f64(fid, "weight_decay", r->weight_decay);
  h5util_attr_write_i64(fid, "seed", r->seed);
  h5util_attr_write_i64(fid, "augment", r->augment);
  h5util_attr_write_i64(fid, "n_train", r->n_train);
  h5util_attr_write_i64(fid, "n_eval", r->n_eval);
  h5util_attr_write_i64(fid, "classes", r->C);
  h5util_attr_write_f64(fid, "top1", r->final_top1);
  if (r->C >= LINEAR_TOPK) h5util_attr_write_f64(fid, "top5", r->final_top5);
  h5util_attr_write_f64(fid, "best_top1", r->best_top1);
  h5util_attr_write_i64(fid, "best_epoch", r->best_epoch);
  h5util_attr_write_f64(fid, "balanced_accuracy", r->balanced_accuracy);
  h5util_attr_write_f64(fid, "macro_f1", r->macro_f1);
  h5util_attr_write_str(fid, "units", "top1, top5, balanced_accuracy, macro_f1 in percent; precision, recall, f1 in "
                        "[0, 1]; confusion[true][predicted]; losses: mean cross entropy (nats)");
}

static void f32(hid_t loc, const char *name, int rank, const hsize_t *dims, const float *v) {
  h5util_dset_write(loc, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, rank, dims, v);
}
static void f64(hid_t loc, const char *name, hsize_t n, const double *v) {
  h5util_dset_write(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, v);
}
static void i64(hid_t loc, const char *name, int rank, const hsize_t *dims, const int64_t *v) {
  h5util_dset_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, rank, dims, v);
}
static void i32(hid_t loc, const char *name, int rank, const hsize_t *dims, const int32_t *v) {
  h5util_dset_write(loc, name, H5T_STD_I32LE, H5T_NATIVE_INT32, rank, dims, v);
}

static void write_h5(const struct linear_report *r, const char *path) {
  struct h5util_image img;
  hid_t fid = h5util_image_begin(path, &img);
  write_attrs(fid, r);
  const hsize_t C = (hsize_t)r->C, NC = (hsize_t)r->nclasses, F = (hsize_t)r->F, E = (hsize_t)r->epochs;
  const hsize_t N = (hsize_t)r->n_eval, T = (hsize_t)r->n_train, cf[2] = {C, F}, cc[2] = {NC, NC};
  h5util_dset_write_strs(fid, "class_names", (const char *const *)r->class_names, NC);
  f32(fid, "weight", 2, cf, r->w);
  f32(fid, "bias", 1, &C, r->b);
  f32(fid, "weight_init", 2, cf, r->w_init);
  i64(fid, "train_support", 1, &NC, r->train_support);
  i64(fid, "eval_support", 1, &NC, r->eval_support);
  f64(fid, "precision", NC, r->precision);
  f64(fid, "recall", NC, r->recall);
  f64(fid, "f1", NC, r->f1);
  i64(fid, "confusion", 2, cc, r->confusion);
  hid_t g = h5util_group_create(fid, "epochs");
  f64(g, "lr", E, r->lrs);
  f64(g, "train_loss", E, r->train_loss);
  f64(g, "eval_loss", E, r->eval_loss);
  f64(g, "top1", E, r->top1);
  if (r->C >= LINEAR_TOPK) f64(g, "top5", E, r->top5);
  CHECK_H5(H5Gclose(g));
  g = h5util_group_create(fid, "eval");
  const hsize_t nc[2] = {N, C}, nk[2] = {N, (hsize_t)r->k};
  i64(g, "index", 1, &N, r->eval_index);
  h5util_dset_write_strs(g, "path", (const char *const *)r->eval_paths, N);
  i32(g, "label", 1, &N, r->eval_label);
  i32(g, "topk", 2, nk, r->topk);
  f32(g, "logits", 2, nc, r->logits);
  int32_t *pred = xmalloc(MUL_SIZE((size_t)N + 1, sizeof *pred));
  for (hsize_t i = 0; i < N; i++) pred[i] = r->topk[i * (hsize_t)r->k];
  i32(g, "prediction", 1, &N, pred);
  free(pred);
  CHECK_H5(H5Gclose(g));
  if (r->eval_x) {
    g = h5util_group_create(fid, "inputs");
    const hsize_t ef[2] = {N, F}, tf[2] = {T, F}, et[2] = {E, T};
    if (r->train_x) f32(g, "train_features", 2, tf, r->train_x);
    i32(g, "train_labels", 1, &T, r->train_label);
    i64(g, "order", 2, et, r->order);
    f32(g, "eval_features", 2, ef, r->eval_x);
    CHECK_H5(H5Gclose(g));
  }
  h5util_image_save(fid, &img, "linear probe report", path);
}

void linear_report_claim(const char *run_dir) {
  static const char hint[] = "the linear probe's report goes to control.run_dir: choose another run_dir";
  char path[4096];
  fs_output_claim(fs_join(path, sizeof path, run_dir, "linear.txt"), "linear probe report", fs_own_text,
                  LINEAR_TXT_FIRST, hint);
  fs_output_claim(fs_join(path, sizeof path, run_dir, "linear.h5"), "linear probe report", h5util_own_format,
                  LINEAR_FORMAT, hint);
}

void linear_report_write(const struct linear_report *r, const char *run_dir) {
  char path[4096];
  fs_mkdir_p(run_dir);
  if (log_verbosity() >= 1) {
    log_raw("\n");
    text_header(r, stdout);
    text_final(r, stdout);
    log_raw("\n");
    fflush(stdout);
  }
  struct fs_mem txt;
  FILE *f = fs_mem_begin(&txt);
  text_header(r, f);
  text_epochs(r, f);
  text_final(r, f);
  fs_mem_commit(&txt, "linear probe report", fs_join(path, sizeof path, run_dir, "linear.txt"));
  write_h5(r, fs_join(path, sizeof path, run_dir, "linear.h5"));
}

void linear_report_free(struct linear_report *r) {
  free(r->logits);
  free(r->topk);
  free(r->confusion);
  free(r->eval_support);
  free(r->precision);
  free(r->recall);
  free(r->f1);
  r->logits = NULL;
  r->topk = NULL;
  r->confusion = r->eval_support = NULL;
  r->precision = r->recall = r->f1 = NULL;
}
