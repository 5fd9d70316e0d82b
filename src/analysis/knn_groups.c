/* knn_groups.c - the kNN accuracy per group of query rows: the grouping columns of knn.group_by
 * (metadata columns of the query file, and 'folder', the first folder of each row's path), each
 * column's values over the query rows, and the Top-1 / Top-2 of every feature set per value at every
 * k; their tables in knn.txt and their groups in knn.h5 (doc/formats.md §6). */
#include "build_config.h"

#include <hdf5.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn.h"
#include "core/check.h"
#include "core/h5util.h"

/* ---- Which columns ---------------------------------------------------------------------------- */

/* Append column name (meta: its metadata number, -1 for 'folder') unless it is there already. */
static void add_col(struct knn_report *rep, const char *name, int meta) {
  for (int c = 0; c < rep->ngroupcols; c++)
    if (!strcmp(rep->groups[c].name, name)) return;
  struct knn_group_col *g = &rep->groups[rep->ngroupcols++];
  g->name = xstrdup(name);
  g->meta = meta;
}

int knn_meta_column(const struct features *f, const char *name) {
  for (int m = 0; m < f->nmeta; m++)
    if (!strcmp(f->meta_names[m], name)) return m;
  return -1;
}

void knn_meta_columns_text(const struct features *f, char *buf, size_t n) {
  buf[0] = '\0';
  for (int c = 0; c < f->nmeta && strlen(buf) + 8 < n; c++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s'%s'", c ? ", " : "", f->meta_names[c]);
}

void knn_groups_select(struct knn_report *rep, const struct config *cfg, const struct knn_rowset *rs) {
  const int nw = cfg->knn.n_group_by;
  if (nw == 0 || (nw == 1 && !strcmp(cfg->knn.group_by[0], "none"))) return;
  const struct features *q = rs->pair ? &rs->query : &rs->ref;
  rep->groups = xcalloc((size_t)q->nmeta + (size_t)nw, sizeof *rep->groups);
  for (int w = 0; w < nw; w++) {
    const char *word = cfg->knn.group_by[w];
    const int m = knn_meta_column(q, word);
    if (!strcmp(word, "metadata")) {
      for (int c = 0; c < q->nmeta; c++) add_col(rep, q->meta_names[c], c);
    } else if (m >= 0) {
      add_col(rep, word, m); /* a metadata column named 'folder' too */
    } else if (!strcmp(word, "folder")) {
      add_col(rep, "folder", -1);
    } else {
      char have[1024];
      knn_meta_columns_text(q, have, sizeof have);
      scd_fatal(SCD_EXIT_INPUT, "knn.group_by = '%s' is no metadata column of the query rows' file %s (%s%s); use "
                "'metadata' (every metadata column), 'folder' (the first folder of each path), 'none' or a column's "
                "name", word, rs->query_path, q->nmeta ? "its columns: " : "it has no metadata columns", have);
    }
  }
}

/* ---- The accuracy per value ------------------------------------------------------------------- */

char *knn_first_folder(const char *path) {
  const char *slash = strchr(path, '/');
  const size_t n = slash ? (size_t)(slash - path) : 0;
  char *s = xmalloc(n + 1);
  memcpy(s, path, n);
  s[n] = '\0';
  return s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Column g's key of every query row (owned copies) into key [n_test]. */
static void column_keys(const struct knn_rowset *rs, const struct knn_group_col *g, char **key) {
  for (int64_t i = 0; i < rs->n_test; i++) {
    int64_t row;
    const struct features *f = knn_rowset_query(rs, i, &row);
    key[i] = g->meta >= 0 ? xstrdup(f->meta[(size_t)g->meta * (size_t)f->n + (size_t)row]) : knn_first_folder(f->paths[row]);
  }
}

/* Column g's distinct values (sorted), each row's value and each value's rows; ngroups 0 when there
 * are more than KNN_MAX_GROUPS values. */
static void column_values(struct knn_group_col *g, char **key, int64_t n) {
  char **sorted = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *sorted));
  memcpy(sorted, key, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
  int64_t nv = 0;
  for (int64_t i = 0; i < n; i++)
    if (i == 0 || strcmp(sorted[i], sorted[nv - 1])) sorted[nv++] = sorted[i];
  g->nvalues = nv;
  if (nv <= KNN_MAX_GROUPS) {
    g->ngroups = (int)nv;
    g->values = xmalloc(MUL_SIZE((size_t)nv + 1, sizeof *g->values));
    for (int64_t v = 0; v < nv; v++) g->values[v] = xstrdup(sorted[v]);
    g->test_support = xcalloc((size_t)nv + 1, sizeof *g->test_support);
    g->value_of_row = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *g->value_of_row));
    for (int64_t i = 0; i < n; i++) {
      char **hit = bsearch(&key[i], g->values, (size_t)nv, sizeof *g->values, cmp_str);
      SCD_ASSERT(hit);
      g->value_of_row[i] = (int32_t)(hit - g->values);
      g->test_support[g->value_of_row[i]]++;
    }
  }
  free(sorted);
}

/* Top-1 / Top-2 of set s per value of g at every k, from the set's per-row outcome. */
static void column_accuracy(struct knn_group_col *g, const struct knn_rowset *rs, const struct knn_rows *rows, int s) {
  const int nk = rows->nk, G = g->ngroups;
  double *t1 = g->top1[s] = xcalloc(MUL_SIZE((size_t)nk, (size_t)G) + 1, sizeof *t1);
  double *t2 = g->top2[s] = xcalloc(MUL_SIZE((size_t)nk, (size_t)G) + 1, sizeof *t2);
  for (int64_t i = 0; i < rs->n_test; i++) {
    const int v = g->value_of_row[i], truth = rs->labels[rs->test_rows[i]];
    for (int j = 0; j < nk; j++) {
      t1[(size_t)j * G + v] += rows->pred[i * nk + j] == truth;
      t2[(size_t)j * G + v] += rows->hit2[i * nk + j];
    }
  }
  for (int j = 0; j < nk; j++)
    for (int v = 0; v < G; v++) {
      t1[(size_t)j * G + v] *= 100.0 / (double)g->test_support[v];
      t2[(size_t)j * G + v] *= 100.0 / (double)g->test_support[v];
    }
}

void knn_report_groups(struct knn_report *rep) {
  const struct knn_rowset *rs = rep->rs;
  const int64_t n = rs->n_test;
  char **key = xmalloc(MUL_SIZE((size_t)n + 1, sizeof *key));
  for (int c = 0; c < rep->ngroupcols; c++) {
    struct knn_group_col *g = &rep->groups[c];
    column_keys(rs, g, key);
    column_values(g, key, n);
    for (int64_t i = 0; i < n; i++) free(key[i]);
    if (g->ngroups == 0) continue;
    for (int s = 0; s < rep->nsets; s++)
      if (rep->sets[s].rows.pred) column_accuracy(g, rs, &rep->sets[s].rows, s);
  }
  free(key);
}

/* ---- knn.txt and knn.h5 ----------------------------------------------------------------------- */

static int k_slot(const struct knn_result *r, int64_t k) {
  for (int j = 0; j < r->nk; j++)
    if (r->k[j] == k) return j;
  return 0;
}

void knn_groups_text(const struct knn_report *rep, FILE *f, int64_t k) {
  const int j = k_slot(&rep->sets[0].res, k);
  for (int c = 0; c < rep->ngroupcols; c++) {
    const struct knn_group_col *g = &rep->groups[c];
    char what[320];
    if (g->meta >= 0)
      snprintf(what, sizeof what, "the metadata column '%s'", g->name);
    else
      snprintf(what, sizeof what, "'folder' (the first folder of each path)");
    if (g->ngroups == 0) {
      fprintf(f, "\nGroups by %s: %" PRId64 " distinct values among the query rows, more than %d: no per-group table\n",
              what, g->nvalues, KNN_MAX_GROUPS);
      continue;
    }
    int w = (int)strlen(g->name);
    for (int v = 0; v < g->ngroups; v++)
      if ((int)strlen(g->values[v]) > w) w = (int)strlen(g->values[v]);
    w = w > 24 ? 24 : w < 7 ? 7 : w;
    fprintf(f, "\nAccuracy in %% per value of %s at k = %" PRId64 ", Top-1 / Top-2 (every k: knn.h5 groups/%s):\n",
            what, k, g->name);
    fprintf(f, "  %-*.*s %8s", w, w, g->name, "rows");
    for (int s = 0; s < rep->nsets; s++)
      if (g->top1[s]) fprintf(f, "  %13.13s", rep->sets[s].name);
    fprintf(f, "\n");
    for (int v = 0; v < g->ngroups; v++) {
      fprintf(f, "  %-*.*s %8" PRId64, w, w, g->values[v][0] ? g->values[v] : "(empty)", g->test_support[v]);
      for (int s = 0; s < rep->nsets; s++)
        if (g->top1[s])
          fprintf(f, "  %6.2f/%6.2f", g->top1[s][(size_t)j * g->ngroups + v], g->top2[s][(size_t)j * g->ngroups + v]);
      fprintf(f, "\n");
    }
  }
}

/* group_columns [ncols] (the order), and groups/<column>: attributes source, distinct_values,
 * max_groups; with a table, values, test_support, value_of_row and top1_<set>, top2_<set> [nk][groups]. */
void knn_groups_write_h5(const struct knn_report *rep, hid_t fid) {
  if (rep->ngroupcols == 0) return;
  const char **names = xmalloc(MUL_SIZE((size_t)rep->ngroupcols, sizeof *names));
  for (int c = 0; c < rep->ngroupcols; c++) names[c] = rep->groups[c].name;
  h5util_dset_write_strs(fid, "group_columns", names, (hsize_t)rep->ngroupcols);
  free(names);
  const hsize_t K = (hsize_t)rep->sets[0].res.nk, N = (hsize_t)rep->rs->n_test;
  hid_t top = h5util_group_create(fid, "groups");
  for (int c = 0; c < rep->ngroupcols; c++) {
    const struct knn_group_col *g = &rep->groups[c];
    hid_t gc = h5util_group_create(top, g->name);
    h5util_attr_write_str(gc, "source", g->meta >= 0 ? "metadata" : "folder");
    h5util_attr_write_i64(gc, "distinct_values", g->nvalues);
    h5util_attr_write_i64(gc, "max_groups", KNN_MAX_GROUPS);
    if (g->ngroups > 0) {
      const hsize_t G = (hsize_t)g->ngroups, kg[2] = {K, G};
      h5util_dset_write_strs(gc, "values", (const char *const *)g->values, G);
      h5util_dset_write(gc, "test_support", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &G, g->test_support);
      h5util_dset_write(gc, "value_of_row", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &N, g->value_of_row);
      for (int s = 0; s < rep->nsets; s++) {
        if (!g->top1[s]) continue;
        char name[64];
        snprintf(name, sizeof name, "top1_%s", rep->sets[s].name);
        h5util_dset_write(gc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, kg, g->top1[s]);
        snprintf(name, sizeof name, "top2_%s", rep->sets[s].name);
        h5util_dset_write(gc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, kg, g->top2[s]);
      }
    }
    CHECK_H5(H5Gclose(gc));
  }
  CHECK_H5(H5Gclose(top));
}

void knn_groups_free(struct knn_report *rep) {
  for (int c = 0; c < rep->ngroupcols; c++) {
    struct knn_group_col *g = &rep->groups[c];
    for (int v = 0; v < g->ngroups; v++) free(g->values[v]);
    for (int s = 0; s < KNN_MAX_SETS; s++) {
      free(g->top1[s]);
      free(g->top2[s]);
    }
    free(g->values);
    free(g->test_support);
    free(g->value_of_row);
    free(g->name);
  }
  free(rep->groups);
  rep->groups = NULL;
  rep->ngroupcols = 0;
}
