/* knn_report.c - the kNN report: text tables (stdout, run_dir/knn.txt) and run_dir/knn.h5 (the
 * tables and groups per grouping column: knn_groups.c). */
#include "build_config.h"

#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn.h"
#include "core/check.h"
#include "core/fsutil.h"
#include "core/h5util.h"

int64_t knn_report_pick_k(const struct knn_report *rep, int64_t want) {
  const struct knn_result *r = &rep->sets[0].res;
  if (want != 0) {
    for (int j = 0; j < r->nk; j++)
      if (r->k[j] == want) return want;
    return -1;
  }
  int best = 0;
  for (int j = 1; j < r->nk; j++)
    if (r->top1[j] > r->top1[best] || (r->top1[j] == r->top1[best] && r->k[j] < r->k[best])) best = j;
  return r->k[best];
}

static int k_slot(const struct knn_result *r, int64_t k) {
  for (int j = 0; j < r->nk; j++)
    if (r->k[j] == k) return j;
  return 0;
}

static int name_width(const struct knn_report *rep) {
  int w = 5;
  for (int c = 0; c < rep->nclasses; c++) {
    int l = (int)strlen(rep->class_names[c]);
    if (l > w) w = l;
  }
  return w > 24 ? 24 : w;
}

/* Python's round() of a percentage: to the nearest integer, halves to even (as rint does in the
 * default rounding mode). */
static long py_round(double x) { return (long)rint(x); }

#define KNN_FORMAT "scdino-knn"
#define KNN_TXT_FIRST "Run: " /* how knn.txt begins (upstream's first line) */

static void text_upstream(const struct knn_report *rep, FILE *f) {
  const struct knn_result *r = &rep->sets[0].res;
  fprintf(f, KNN_TXT_FIRST "%s_epoch%" PRId64 "\n", rep->features_file, rep->epoch);
  for (int j = 0; j < r->nk; j++)
    fprintf(f, "%" PRId64 "-NN Top1: %ld, Top2: %ld\n", r->k[j], py_round(r->top1[j]), py_round(r->top2[j]));
  fprintf(f, "----\n");
}

static void text_header(const struct knn_report *rep, FILE *f) {
  const struct knn_result *r = &rep->sets[0].res;
  fprintf(f, "kNN evaluation: weighted vote exp(similarity / T), T = %g\n", r->temperature);
  const struct knn_rowset *rs = rep->rs;
  if (rs && rs->pair) {
    fprintf(f, "  reference: %s (%" PRId64 " rows; %s network of %s, epoch %" PRId64 ")\n", rs->ref_path, r->n_train,
            rs->ref.checkpoint_key, rs->ref.checkpoint[0] ? rs->ref.checkpoint : "(checkpoint not recorded)",
            rs->ref.epoch);
    fprintf(f, "  query    : %s (%" PRId64 " rows; %s network of %s, epoch %" PRId64 ")\n", rs->query_path, *r->n_test,
            rs->query.checkpoint_key, rs->query.checkpoint[0] ? rs->query.checkpoint : "(checkpoint not recorded)",
            rs->query.epoch);
    fprintf(f, "  rows     : every query row voted by all %" PRId64 " reference rows (DINO eval_knn)\n", r->n_train);
    fprintf(f, "  classes  : %d (%d of the reference, matched by name)\n", rep->nclasses, rs->ref_classes);
  } else {
    fprintf(f, "  features : %s (%s network of %s, epoch %" PRId64 ")\n", rep->features_file, rep->checkpoint_key,
            rep->checkpoint[0] ? rep->checkpoint : "(checkpoint not recorded)", rep->epoch);
    if (rep->split[0])
      fprintf(f, "  rows     : %" PRId64 " = %" PRId64 " reference + %" PRId64 " test (%s)\n", rep->n_rows, r->n_train,
              *r->n_test, rep->split);
    else
      fprintf(f, "  rows     : %" PRId64 " = %" PRId64 " reference + %" PRId64 " test (knn.train_fraction %g, knn.seed %" PRId64
              ")\n", rep->n_rows, r->n_train, *r->n_test, rep->train_fraction, rep->seed);
    fprintf(f, "  classes  : %d\n", rep->nclasses);
  }
  for (int j = 0; j < r->nk; j++)
    if (r->k_used[j] != r->k[j])
      fprintf(f, "  warning  : k = %" PRId64 " exceeds the %" PRId64 " reference rows; clamped to %" PRId64 "\n",
              r->k[j], r->n_train, r->k_used[j]);
  if (rep->notes[0]) fprintf(f, "%s", rep->notes);
}

static void text_summary(const struct knn_report *rep, FILE *f) {
  const struct knn_result *r0 = &rep->sets[0].res;
  fprintf(f, "\nAccuracy in %% (Top-1, Top-2, balanced accuracy, macro F1) per k:\n");
  fprintf(f, "%8s", "");
  for (int s = 0; s < rep->nsets; s++) {
    char head[96];
    snprintf(head, sizeof head, "%s (%d-d)", rep->sets[s].label, rep->sets[s].dim);
    fprintf(f, "  %-34.34s", head);
  }
  fprintf(f, "\n%8s", "");
  for (int s = 0; s < rep->nsets; s++) {
    char rule[40];
    memset(rule, '-', 34);
    rule[34] = '\0';
    fprintf(f, "  %s", rule);
  }
  fprintf(f, "\n%8s", "k");
  for (int s = 0; s < rep->nsets; s++) fprintf(f, "  %8s%8s%9s%9s", "top1", "top2", "bal.acc", "macroF1");
  fprintf(f, "\n");
  for (int j = 0; j < r0->nk; j++) {
    fprintf(f, "%7" PRId64 "%c", r0->k[j], r0->k_used[j] != r0->k[j] ? '*' : ' ');
    for (int s = 0; s < rep->nsets; s++) {
      const struct knn_result *r = &rep->sets[s].res;
      fprintf(f, "  %8.2f%8.2f%9.2f%9.2f", r->top1[j], r->top2[j], r->balanced_accuracy[j], r->macro_f1[j]);
    }
    fprintf(f, "\n");
  }
  int clamped = 0;
  for (int j = 0; j < r0->nk; j++) clamped |= r0->k_used[j] != r0->k[j];
  if (clamped) fprintf(f, "  * k clamped to the %" PRId64 " reference rows\n", r0->n_train);
}

static void text_per_class(const struct knn_report *rep, FILE *f, int64_t k) {
  const int C = rep->nclasses, w = name_width(rep);
  const struct knn_result *r0 = &rep->sets[0].res;
  const int j = k_slot(r0, k);
  if (rep->nsets > 1) {
    fprintf(f, "\nPer-class F1 at k = %" PRId64 ":\n", k);
    fprintf(f, "  %4s %-*s %8s", "", w, "class", "test");
    for (int s = 0; s < rep->nsets; s++) fprintf(f, "  %12.12s", rep->sets[s].name);
    fprintf(f, "\n");
    for (int c = 0; c < C; c++) {
      fprintf(f, "  %4d %-*.*s %8" PRId64, c, w, w, rep->class_names[c], r0->test_support[c]);
      for (int s = 0; s < rep->nsets; s++)
        fprintf(f, "  %12.4f", rep->sets[s].res.f1[(size_t)j * C + c]);
      fprintf(f, "\n");
    }
  }
  fprintf(f, "\nPer-class metrics of the %s features at k = %" PRId64 ":\n", rep->sets[0].label, k);
  fprintf(f, "  %4s %-*s %8s %8s %10s %8s %8s\n", "", w, "class", "train", "test", "precision", "recall", "F1");
  for (int c = 0; c < C; c++)
    fprintf(f, "  %4d %-*.*s %8" PRId64 " %8" PRId64 " %10.4f %8.4f %8.4f\n", c, w, w, rep->class_names[c],
            r0->train_support[c], r0->test_support[c], r0->precision[(size_t)j * C + c],
            r0->recall[(size_t)j * C + c], r0->f1[(size_t)j * C + c]);
  fprintf(f, "  balanced accuracy %.2f %%, macro F1 %.2f %%, Top-1 %.2f %%\n", r0->balanced_accuracy[j],
          r0->macro_f1[j], r0->top1[j]);
}

static void text_confusion(const struct knn_report *rep, FILE *f, int64_t k) {
  const int C = rep->nclasses, w = name_width(rep);
  const struct knn_result *r0 = &rep->sets[0].res;
  const int64_t *cm = r0->confusion + (size_t)k_slot(r0, k) * (size_t)C * (size_t)C;
  int64_t big = 1;
  for (size_t i = 0; i < (size_t)C * (size_t)C; i++)
    if (cm[i] > big) big = cm[i];
  int cw = 1;
  while (big >= 10) {
    big /= 10;
    cw++;
  }
  if (cw < 3) cw = 3;
  fprintf(f, "\nConfusion matrix of the %s features at k = %" PRId64 " (rows: true class, columns: predicted class):\n",
          rep->sets[0].label, k);
  fprintf(f, "  %4s %-*s", "", w, "");
  for (int c = 0; c < C; c++) fprintf(f, " %*d", cw, c);
  fprintf(f, "\n");
  for (int t = 0; t < C; t++) {
    fprintf(f, "  %4d %-*.*s", t, w, w, rep->class_names[t]);
    for (int c = 0; c < C; c++) fprintf(f, " %*" PRId64, cw, cm[(size_t)t * C + c]);
    fprintf(f, "\n");
  }
}

void knn_report_text(const struct knn_report *rep, FILE *f, int full) {
  if (full) text_upstream(rep, f);
  text_header(rep, f);
  text_summary(rep, f);
  text_per_class(rep, f, rep->table_k);
  knn_groups_text(rep, f, rep->table_k);
  if (full) text_confusion(rep, f, rep->table_k);
}

/* ---- knn.h5 ---------------------------------------------------------------------------------- */

/* Each query row: where it is, its class, its prediction and Top-2 outcome at every k (of the
 * trained features), its kept neighbours; the reference rows those name. */
static void write_rows(hid_t fid, const struct knn_report *rep) {
  const struct knn_rowset *rs = rep->rs;
  const struct knn_rows *rows = &rep->sets[0].rows;
  if (!rs || !rows->pred) return;
  const int64_t n = rs->n_test;
  const hsize_t N = (hsize_t)n, K = (hsize_t)rows->nk, nk2[2] = {N, K}, nkeep[2] = {N, (hsize_t)rows->keep};
  int64_t *row = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *row)), *index = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *index));
  int32_t *label = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *label));
  const char **paths = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *paths));
  for (int64_t i = 0; i < n; i++) {
    const struct features *f = knn_rowset_query(rs, i, &row[i]);
    index[i] = f->index[row[i]];
    paths[i] = f->paths[row[i]];
    label[i] = rs->labels[rs->test_rows[i]];
  }
  hid_t g = h5util_group_create(fid, "query");
  h5util_dset_write(g, "row", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &N, row);
  h5util_dset_write(g, "index", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &N, index);
  h5util_dset_write_strs(g, "path", (const char *const *)paths, N);
  h5util_dset_write(g, "label", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &N, label);
  h5util_dset_write(g, "prediction", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, nk2, rows->pred);
  h5util_dset_write(g, "top2", H5T_STD_U8LE, H5T_NATIVE_UCHAR, 2, nk2, rows->hit2);
  free(paths);
  if (rows->keep > 0) {
    /* Positions in the reference order -> rows of the reference file (and their sample indices). */
    const size_t m = MUL_SIZE((size_t)n, (size_t)rows->keep);
    int64_t *nb = xmalloc(MUL_SIZE(m + 1, sizeof *nb)), *nbi = xmalloc(MUL_SIZE(m + 1, sizeof *nbi));
    for (size_t e = 0; e < m; e++) {
      nb[e] = rs->train_rows[rows->nb[e]];
      nbi[e] = rs->ref.index[nb[e]];
    }
    h5util_dset_write(g, "neighbours", H5T_STD_I64LE, H5T_NATIVE_INT64, 2, nkeep, nb);
    h5util_dset_write(g, "neighbour_index", H5T_STD_I64LE, H5T_NATIVE_INT64, 2, nkeep, nbi);
    h5util_dset_write(g, "neighbour_similarity", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, nkeep, rows->nb_sim);
    free(nb);
    free(nbi);
    hid_t gr = h5util_group_create(fid, "reference");
    const hsize_t R = (hsize_t)rs->ref.n;
    h5util_dset_write(gr, "index", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &R, rs->ref.index);
    h5util_dset_write_strs(gr, "path", (const char *const *)rs->ref.paths, R);
    h5util_dset_write(gr, "label", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &R, rs->labels);
    CHECK_H5(H5Gclose(gr));
  }
  CHECK_H5(H5Gclose(g));
  free(row);
  free(index);
  free(label);
}

static void write_h5(const struct knn_report *rep, const char *path) {
  const struct knn_result *r0 = &rep->sets[0].res;
  const hsize_t K = (hsize_t)r0->nk, C = (hsize_t)rep->nclasses;
  struct h5util_image img;
  hid_t fid = h5util_image_begin(path, &img);
  h5util_attr_write_str(fid, "format", KNN_FORMAT);
  h5util_attr_write_i64(fid, "version", 2); /* 2: checksummed */
  const int pair = rep->rs && rep->rs->pair;
  h5util_attr_write_str(fid, "rows", pair ? "reference/query" : "split");
  h5util_attr_write_str(fid, "features_file", rep->features_file);
  if (pair) {
    h5util_attr_write_str(fid, "reference_file", rep->rs->ref_path);
    h5util_attr_write_str(fid, "query_file", rep->rs->query_path);
    h5util_attr_write_i64(fid, "reference_classes", rep->rs->ref_classes);
  }
  h5util_attr_write_str(fid, "checkpoint", rep->checkpoint);
  h5util_attr_write_str(fid, "checkpoint_key", rep->checkpoint_key);
  h5util_attr_write_i64(fid, "epoch", rep->epoch);
  h5util_attr_write_f64(fid, "temperature", r0->temperature);
  if (!pair && rep->split[0]) {
    h5util_attr_write_str(fid, "split", rep->split);
  } else if (!pair) {
    h5util_attr_write_i64(fid, "seed", rep->seed);
    h5util_attr_write_f64(fid, "train_fraction", rep->train_fraction);
  }
  h5util_attr_write_i64(fid, "n_rows", rep->n_rows);
  h5util_attr_write_i64(fid, "n_train", r0->n_train);
  h5util_attr_write_i64(fid, "n_test", *r0->n_test);
  h5util_attr_write_i64(fid, "table_k", rep->table_k);
  h5util_attr_write_str(fid, "units",
                        "top1, top2, balanced_accuracy, macro_f1 in percent; precision, recall, f1 in [0, 1]; "
                        "confusion[k][true][predicted]");
  h5util_dset_write(fid, "k", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &K, r0->k);
  h5util_dset_write(fid, "k_used", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &K, r0->k_used);
  h5util_dset_write(fid, "train_support", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &C, r0->train_support);
  h5util_dset_write(fid, "test_support", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &C, r0->test_support);
  h5util_dset_write_strs(fid, "class_names", (const char *const *)rep->class_names, C);
  for (int s = 0; s < rep->nsets; s++) {
    const struct knn_set *set = &rep->sets[s];
    const struct knn_result *r = &set->res;
    hid_t g = h5util_group_create(fid, set->name);
    h5util_attr_write_str(g, "label", set->label);
    h5util_attr_write_i64(g, "dim", set->dim);
    h5util_attr_write_f64(g, "seconds", set->seconds);
    const hsize_t kc[2] = {K, C}, kcc[3] = {K, C, C};
    h5util_dset_write(g, "top1", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &K, r->top1);
    h5util_dset_write(g, "top2", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &K, r->top2);
    h5util_dset_write(g, "balanced_accuracy", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &K, r->balanced_accuracy);
    h5util_dset_write(g, "macro_f1", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &K, r->macro_f1);
    h5util_dset_write(g, "precision", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, kc, r->precision);
    h5util_dset_write(g, "recall", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, kc, r->recall);
    h5util_dset_write(g, "f1", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, kc, r->f1);
    h5util_dset_write(g, "confusion", H5T_STD_I64LE, H5T_NATIVE_INT64, 3, kcc, r->confusion);
    CHECK_H5(H5Gclose(g));
  }
  write_rows(fid, rep);
  knn_groups_write_h5(rep, fid);
  h5util_image_save(fid, &img, "kNN report", path);
}

void knn_report_write(const struct knn_report *rep, const char *run_dir, const char *name) {
  char path[4096], file[128];
  fs_mkdir_p(run_dir);
  snprintf(file, sizeof file, "%s.txt", name);
  fs_join(path, sizeof path, run_dir, file);
  struct fs_mem txt;
  knn_report_text(rep, fs_mem_begin(&txt), 1);
  fs_mem_commit(&txt, "kNN report", path);

  snprintf(file, sizeof file, "%s.h5", name);
  fs_join(path, sizeof path, run_dir, file);
  write_h5(rep, path);
}

void knn_report_claim(const char *run_dir, const char *name) {
  static const char hint[] = "the kNN report goes to control.run_dir: choose another run_dir";
  char path[4096], file[128];
  snprintf(file, sizeof file, "%s.txt", name);
  fs_output_claim(fs_join(path, sizeof path, run_dir, file), "kNN report", fs_own_text, KNN_TXT_FIRST, hint);
  snprintf(file, sizeof file, "%s.h5", name);
  fs_output_claim(fs_join(path, sizeof path, run_dir, file), "kNN report", h5util_own_format, KNN_FORMAT, hint);
}

void knn_report_free(struct knn_report *rep) {
  for (int s = 0; s < rep->nsets; s++) {
    knn_result_free(&rep->sets[s].res);
    knn_rows_free(&rep->sets[s].rows);
  }
  rep->nsets = 0;
  knn_groups_free(rep);
}
