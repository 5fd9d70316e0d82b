/* knn_report.c - the kNN report: text tables (stdout, run_dir/knn.txt) and run_dir/knn.h5, with the
 * Top-1 accuracy per metadata group. */
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
  fprintf(f, "  features : %s (%s network of %s, epoch %" PRId64 ")\n", rep->features_file,
          rep->checkpoint_key, rep->checkpoint[0] ? rep->checkpoint : "(checkpoint not recorded)", rep->epoch);
  fprintf(f, "  rows     : %" PRId64 " = %" PRId64 " reference + %" PRId64 " test (knn.train_fraction %g, knn.seed %" PRId64 ")\n",
          rep->n_rows, r->n_train, *r->n_test, rep->train_fraction, rep->seed);
  fprintf(f, "  classes  : %d\n", rep->nclasses);
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

/* ---- per metadata group ---------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Column m of f over the test rows: its distinct values (sorted) into g, and each test row's group
 * into grp [n_test]; -1 when there are more than KNN_MAX_GROUPS of them. */
static int group_values(const struct features *f, int m, const int64_t *test_rows, int64_t n_test,
                        struct knn_group_col *g, int *grp) {
  char **col = f->meta + (size_t)m * (size_t)f->n;
  char **sorted = xmalloc(MUL_SIZE((size_t)(n_test ? n_test : 1), sizeof *sorted));
  for (int64_t i = 0; i < n_test; i++) sorted[i] = col[test_rows[i]];
  qsort(sorted, (size_t)n_test, sizeof *sorted, cmp_str);
  int64_t nv = 0;
  for (int64_t i = 0; i < n_test; i++)
    if (i == 0 || strcmp(sorted[i], sorted[nv - 1])) sorted[nv++] = sorted[i];
  g->nvalues = nv;
  if (nv > KNN_MAX_GROUPS) {
    free(sorted);
    return -1;
  }
  g->ngroups = (int)nv;
  g->values = xmalloc(MUL_SIZE((size_t)(nv ? nv : 1), sizeof *g->values));
  for (int64_t v = 0; v < nv; v++) g->values[v] = xstrdup(sorted[v]);
  g->test_support = xcalloc((size_t)(nv ? nv : 1), sizeof *g->test_support);
  for (int64_t i = 0; i < n_test; i++) {
    const char *v = col[test_rows[i]];
    char **hit = bsearch(&v, g->values, (size_t)nv, sizeof *g->values, cmp_str);
    SCD_ASSERT(hit);
    grp[i] = (int)(hit - g->values);
    g->test_support[grp[i]]++;
  }
  free(sorted);
  return 0;
}

void knn_report_groups(struct knn_report *rep, const struct features *f, const int64_t *test_rows, int64_t n_test) {
  if (f->nmeta == 0) return;
  SCD_ASSERT(f->meta);
  const int nk = rep->sets[0].res.nk;
  rep->ngroupcols = f->nmeta;
  rep->groups = xcalloc((size_t)f->nmeta, sizeof *rep->groups);
  int *grp = xmalloc(MUL_SIZE((size_t)(n_test ? n_test : 1), sizeof *grp));
  for (int m = 0; m < f->nmeta; m++) {
    struct knn_group_col *g = &rep->groups[m];
    g->name = xstrdup(f->meta_names[m]);
    if (group_values(f, m, test_rows, n_test, g, grp) != 0) continue;
    const size_t G = (size_t)(g->ngroups ? g->ngroups : 1);
    int64_t *hits = xmalloc(MUL_SIZE((size_t)nk, G) * sizeof *hits);
    for (int s = 0; s < rep->nsets; s++) {
      const int64_t *pred = rep->sets[s].pred;
      if (!pred) continue;
      memset(hits, 0, (size_t)nk * G * sizeof *hits);
      for (int64_t i = 0; i < n_test; i++) {
        const int32_t truth = f->labels[test_rows[i]];
        for (int j = 0; j < nk; j++) hits[(size_t)j * G + (size_t)grp[i]] += pred[i * nk + j] == truth;
      }
      g->top1[s] = xmalloc(MUL_SIZE((size_t)nk, G) * sizeof(double));
      for (int j = 0; j < nk; j++)
        for (int v = 0; v < g->ngroups; v++)
          g->top1[s][(size_t)j * G + (size_t)v] =
              g->test_support[v] ? 100.0 * (double)hits[(size_t)j * G + (size_t)v] / (double)g->test_support[v] : 0.0;
    }
    free(hits);
  }
  free(grp);
}

static void text_groups(const struct knn_report *rep, FILE *f, int64_t k) {
  const struct knn_result *r0 = &rep->sets[0].res;
  const int j = k_slot(r0, k);
  for (int m = 0; m < rep->ngroupcols; m++) {
    const struct knn_group_col *g = &rep->groups[m];
    if (g->ngroups == 0) {
      fprintf(f, "\nMetadata column '%s': %" PRId64 " distinct values among the test rows, more than %d: no "
              "per-group table\n", g->name, g->nvalues, KNN_MAX_GROUPS);
      continue;
    }
    int w = (int)strlen(g->name);
    for (int v = 0; v < g->ngroups; v++)
      if ((int)strlen(g->values[v]) > w) w = (int)strlen(g->values[v]);
    w = w > 24 ? 24 : w < 5 ? 5 : w;
    fprintf(f, "\nTop-1 accuracy in %% per value of the metadata column '%s' at k = %" PRId64 ":\n", g->name, k);
    fprintf(f, "  %-*.*s %8s", w, w, g->name, "test");
    for (int s = 0; s < rep->nsets; s++)
      if (g->top1[s]) fprintf(f, "  %12.12s", rep->sets[s].name);
    fprintf(f, "\n");
    for (int v = 0; v < g->ngroups; v++) {
      fprintf(f, "  %-*.*s %8" PRId64, w, w, g->values[v], g->test_support[v]);
      for (int s = 0; s < rep->nsets; s++)
        if (g->top1[s]) fprintf(f, "  %12.2f", g->top1[s][(size_t)j * (size_t)g->ngroups + (size_t)v]);
      fprintf(f, "\n");
    }
  }
}

void knn_report_text(const struct knn_report *rep, FILE *f, int full) {
  if (full) text_upstream(rep, f);
  text_header(rep, f);
  text_summary(rep, f);
  text_per_class(rep, f, rep->table_k);
  text_groups(rep, f, rep->table_k);
  if (full) text_confusion(rep, f, rep->table_k);
}

/* ---- knn.h5 ---------------------------------------------------------------------------------- */

/* metadata_groups/<column>: values, test_support, top1_<set> [nk][groups]; a column with too many
 * values only its attribute distinct_values. */
static void write_h5_groups(const struct knn_report *rep, hid_t fid) {
  if (rep->ngroupcols == 0) return;
  const hsize_t K = (hsize_t)rep->sets[0].res.nk;
  hid_t top = h5util_group_create(fid, "metadata_groups");
  for (int m = 0; m < rep->ngroupcols; m++) {
    const struct knn_group_col *g = &rep->groups[m];
    hid_t gc = h5util_group_create(top, g->name);
    h5util_attr_write_i64(gc, "distinct_values", g->nvalues);
    h5util_attr_write_i64(gc, "max_groups", KNN_MAX_GROUPS);
    if (g->ngroups > 0) {
      const hsize_t G = (hsize_t)g->ngroups, kg[2] = {K, G};
      h5util_dset_write_strs(gc, "values", (const char *const *)g->values, G);
      h5util_dset_write(gc, "test_support", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &G, g->test_support);
      for (int s = 0; s < rep->nsets; s++) {
        if (!g->top1[s]) continue;
        char name[64];
        snprintf(name, sizeof name, "top1_%s", rep->sets[s].name);
        h5util_dset_write(gc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, kg, g->top1[s]);
      }
    }
    CHECK_H5(H5Gclose(gc));
  }
  CHECK_H5(H5Gclose(top));
}

static void write_h5(const struct knn_report *rep, const char *path) {
  const struct knn_result *r0 = &rep->sets[0].res;
  const hsize_t K = (hsize_t)r0->nk, C = (hsize_t)rep->nclasses;
  struct h5util_image img;
  hid_t fid = h5util_image_begin(path, &img);
  h5util_attr_write_str(fid, "format", KNN_FORMAT);
  h5util_attr_write_i64(fid, "version", 2); /* 2: checksummed */
  h5util_attr_write_str(fid, "features_file", rep->features_file);
  h5util_attr_write_str(fid, "checkpoint", rep->checkpoint);
  h5util_attr_write_str(fid, "checkpoint_key", rep->checkpoint_key);
  h5util_attr_write_i64(fid, "epoch", rep->epoch);
  h5util_attr_write_f64(fid, "temperature", r0->temperature);
  h5util_attr_write_i64(fid, "seed", rep->seed);
  h5util_attr_write_f64(fid, "train_fraction", rep->train_fraction);
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
  write_h5_groups(rep, fid);
  h5util_image_save(fid, &img, "kNN report", path);
}

void knn_report_write(const struct knn_report *rep, const char *run_dir) {
  char path[4096];
  fs_mkdir_p(run_dir);
  fs_join(path, sizeof path, run_dir, "knn.txt");
  struct fs_mem txt;
  knn_report_text(rep, fs_mem_begin(&txt), 1);
  fs_mem_commit(&txt, "kNN report", path);

  fs_join(path, sizeof path, run_dir, "knn.h5");
  write_h5(rep, path);
}

void knn_report_claim(const char *run_dir) {
  static const char hint[] = "the kNN report goes to control.run_dir: choose another run_dir";
  char path[4096];
  fs_output_claim(fs_join(path, sizeof path, run_dir, "knn.txt"), "kNN report", fs_own_text, KNN_TXT_FIRST, hint);
  fs_output_claim(fs_join(path, sizeof path, run_dir, "knn.h5"), "kNN report", h5util_own_format, KNN_FORMAT, hint);
}

void knn_report_free(struct knn_report *rep) {
  for (int s = 0; s < rep->nsets; s++) {
    knn_result_free(&rep->sets[s].res);
    free(rep->sets[s].pred);
    rep->sets[s].pred = NULL;
  }
  rep->nsets = 0;
  for (int m = 0; m < rep->ngroupcols; m++) {
    struct knn_group_col *g = &rep->groups[m];
    for (int v = 0; v < g->ngroups; v++) free(g->values[v]);
    for (int s = 0; s < KNN_MAX_SETS; s++) free(g->top1[s]);
    free(g->values);
    free(g->test_support);
    free(g->name);
  }
  free(rep->groups);
  rep->groups = NULL;
  rep->ngroupcols = 0;
}
