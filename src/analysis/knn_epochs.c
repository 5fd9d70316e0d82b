/* knn_epochs.c - the kNN-vs-epoch table of &features epochs (run_dir/knn_epochs.txt, and a part of
 * pipeline.txt). */
#include "build_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features_io.h"
#include "analysis/knn.h"
#include "core/check.h"
#include "core/fsutil.h"

void knn_epochs_add(struct knn_epochs *t, const struct knn_report *rep) {
  const struct knn_result *r = &rep->sets[0].res;
  SCD_ASSERT(r->nk <= 16);
  t->epoch = xrealloc(t->epoch, (size_t)(t->n + 1) * sizeof *t->epoch);
  t->top1 = xrealloc(t->top1, (size_t)(t->n + 1) * sizeof *t->top1);
  t->epoch[t->n] = rep->epoch;
  for (int j = 0; j < r->nk; j++) t->top1[t->n][j] = r->top1[j];
  t->n++;
  t->nk = r->nk;
  for (int j = 0; j < r->nk; j++) t->k[j] = r->k[j];
  snprintf(t->key, sizeof t->key, "%s", rep->checkpoint_key);
  t->n_test = *r->n_test;
  if (rep->nsets < 2) return;
  t->nbase = rep->nsets - 1;
  for (int s = 1; s < rep->nsets; s++) {
    snprintf(t->base_label[s - 1], sizeof t->base_label[0], "%s", rep->sets[s].label);
    for (int j = 0; j < r->nk; j++) t->base_top1[s - 1][j] = rep->sets[s].res.top1[j];
  }
}

/* Rows: the epoch and its features file, then Top-1 at every k; the baselines below, labelled
 * in the same width (doc/formats.md). */
void knn_epochs_text(const struct knn_epochs *t, FILE *f, int indent) {
  fprintf(f, "%*skNN Top-1 accuracy in %% of the %s network per epoch (%" PRId64 " test rows):\n", indent, "",
          t->key[0] ? t->key : "trained", t->n_test);
  fprintf(f, "%*s%8s  %-24s", indent, "", "epoch", "features file");
  for (int j = 0; j < t->nk; j++) {
    char head[32];
    snprintf(head, sizeof head, "k=%" PRId64, t->k[j]);
    fprintf(f, "%9s", head);
  }
  fprintf(f, "\n");
  for (int i = 0; i < t->n; i++) {
    char name[64];
    features_filename(name, sizeof name, t->epoch[i]);
    fprintf(f, "%*s%8" PRId64 "  %-24s", indent, "", t->epoch[i], name);
    for (int j = 0; j < t->nk; j++) fprintf(f, "%9.2f", t->top1[i][j]);
    fprintf(f, "\n");
  }
  if (t->nbase == 0) return;
  fprintf(f, "%*sbaselines (the same for every epoch):\n", indent, "");
  for (int b = 0; b < t->nbase; b++) {
    fprintf(f, "%*s  %-32.32s", indent, "", t->base_label[b]);
    for (int j = 0; j < t->nk; j++) fprintf(f, "%9.2f", t->base_top1[b][j]);
    fprintf(f, "\n");
  }
}

void knn_epochs_claim(const char *run_dir) {
  char path[4096];
  fs_output_claim(fs_join(path, sizeof path, run_dir, KNN_EPOCHS_FILE), "kNN-vs-epoch table", fs_own_text,
                  KNN_EPOCHS_FIRST, "the table goes to control.run_dir: choose another run_dir");
}

void knn_epochs_write(const struct knn_epochs *t, const char *run_dir) {
  char path[4096];
  fs_join(path, sizeof path, run_dir, KNN_EPOCHS_FILE);
  struct fs_mem txt;
  FILE *f = fs_mem_begin(&txt);
  fprintf(f, KNN_EPOCHS_FIRST " ====\n");
  knn_epochs_text(t, f, 0);
  fs_mem_commit(&txt, "kNN-vs-epoch table", path);
}

void knn_epochs_free(struct knn_epochs *t) {
  free(t->epoch);
  free(t->top1);
  memset(t, 0, sizeof *t);
}
