/* knn_models.c - the comparison of the models of &features checkpoints on one shard set
 * (run_dir/knn_models.txt). */
#include "build_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "analysis/knn.h"
#include "core/check.h"
#include "core/fsutil.h"

void knn_models_add(struct knn_models *t, const char *name, const struct knn_report *rep) {
  const struct knn_result *r = &rep->sets[0].res;
  SCD_ASSERT(t->n < KNN_MAX_MODELS && r->nk <= 16);
  const int i = t->n++;
  snprintf(t->name[i], sizeof t->name[i], "%s", name);
  snprintf(t->key[i], sizeof t->key[i], "%s", rep->checkpoint_key);
  t->epoch[i] = rep->epoch;
  t->nk = r->nk;
  t->n_test = *r->n_test;
  for (int j = 0; j < r->nk; j++) {
    t->k[j] = r->k[j];
    t->top1[i][j] = r->top1[j];
  }
  for (int s = 1; s < rep->nsets; s++) {
    const struct knn_set *set = &rep->sets[s];
    if (!strcmp(set->name, "random_init")) {
      t->has_random[i] = 1;
      snprintf(t->random_label[i], sizeof t->random_label[i], "%s", set->label);
      for (int j = 0; j < r->nk; j++) t->random_top1[i][j] = set->res.top1[j];
    } else if (!strcmp(set->name, "raw_pixels") && !t->has_raw) {
      t->has_raw = 1;
      snprintf(t->raw_label, sizeof t->raw_label, "%s", set->label);
      for (int j = 0; j < r->nk; j++) t->raw_top1[j] = set->res.top1[j];
    }
  }
}

/* A row: its label in 40 columns after two spaces, then Top-1 at every k (doc/formats.md). */
static void row(FILE *f, const char *label, const double *top1, int nk) {
  fprintf(f, "  %-40.40s", label);
  for (int j = 0; j < nk; j++) fprintf(f, "%9.2f", top1[j]);
  fprintf(f, "\n");
}

void knn_models_text(const struct knn_models *t, FILE *f) {
  fprintf(f, "kNN Top-1 accuracy in %% per model (%" PRId64 " test rows):\n", t->n_test);
  fprintf(f, "  %-24s  %-8s%6s", "model", "network", "epoch");
  for (int j = 0; j < t->nk; j++) {
    char head[32];
    snprintf(head, sizeof head, "k=%" PRId64, t->k[j]);
    fprintf(f, "%9s", head);
  }
  fprintf(f, "\n");
  for (int i = 0; i < t->n; i++) {
    char label[64];
    snprintf(label, sizeof label, "%-24.24s  %-8.8s%6" PRId64, t->name[i], t->key[i], t->epoch[i]);
    row(f, label, t->top1[i], t->nk);
  }
  int any = t->has_raw;
  for (int i = 0; i < t->n; i++) any |= t->has_random[i];
  if (!any) return;
  fprintf(f, "baselines:\n");
  if (t->has_raw) row(f, t->raw_label, t->raw_top1, t->nk);
  for (int i = 0; i < t->n; i++) {
    if (!t->has_random[i]) continue;
    char label[160];
    snprintf(label, sizeof label, "%s of %s", t->random_label[i], t->name[i]);
    row(f, label, t->random_top1[i], t->nk);
  }
}

void knn_models_claim(const char *run_dir) {
  char path[4096];
  fs_output_claim(fs_join(path, sizeof path, run_dir, KNN_MODELS_FILE), "kNN comparison of models", fs_own_text,
                  KNN_MODELS_FIRST, "the table goes to control.run_dir: choose another run_dir");
}

void knn_models_write(const struct knn_models *t, const char *run_dir) {
  char path[4096];
  fs_mkdir_p(run_dir);
  fs_join(path, sizeof path, run_dir, KNN_MODELS_FILE);
  struct fs_mem txt;
  FILE *f = fs_mem_begin(&txt);
  fprintf(f, KNN_MODELS_FIRST " ====\n");
  knn_models_text(t, f);
  fs_mem_commit(&txt, "kNN comparison of models", path);
}
