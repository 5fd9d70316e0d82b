/* study_report.c - the study's comparison of its runs (channel sets, settings): read every run's
 * results, print the table (study.txt), write study.h5. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workflow/pipeline.h"
#include "workflow/study.h"
#include "core/check.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"

#define AT(s, i, b, k) (((size_t)(i) * 3 + (size_t)(b)) * 16 + (size_t)(k))

void study_summary_read(struct study_summary *s) {
  s->final_loss = xcalloc((size_t)s->nsets, sizeof *s->final_loss);
  s->top1 = xcalloc((size_t)s->nsets * 3 * 16, sizeof *s->top1);
  s->top2 = xcalloc((size_t)s->nsets * 3 * 16, sizeof *s->top2);
  s->learned = xcalloc((size_t)s->nsets, sizeof *s->learned);
  static struct pipeline_summary p;
  for (int i = 0; i < s->nsets; i++) {
    char dir[4096], path[4200];
    fs_join(dir, sizeof dir, s->run_dir, s->sets[i].name);
    fs_join(path, sizeof path, dir, "log.txt");
    s->final_loss[i] = pipeline_log_last(path, "train_loss");
    fs_join(path, sizeof path, dir, "knn.h5");
    memset(&p, 0, sizeof p);
    pipeline_read_knn(path, &p);
    s->learned[i] = pipeline_beats_baselines(&p);
    if (i == 0) {
      s->nk = p.nk, s->nbase = p.nsets;
      memcpy(s->k, p.k, sizeof s->k);
      for (int b = 0; b < p.nsets; b++) {
        snprintf(s->base_name[b], sizeof s->base_name[b], "%s", p.set_name[b]);
        snprintf(s->base_label[b], sizeof s->base_label[b], "%s", p.set_label[b]);
      }
    } else if (p.nk != s->nk || p.nsets != s->nbase || memcmp(p.k, s->k, sizeof s->k) != 0) {
      scd_fatal(SCD_EXIT_DATA, "%s: its k values or feature sets differ from those of %s/%s/knn.h5 (a run of "
                "another deck in this study's folder?)", path, s->run_dir, s->sets[0].name);
    }
    for (int b = 0; b < p.nsets; b++)
      for (int k = 0; k < p.nk; k++) {
        s->top1[AT(s, i, b, k)] = p.top1[b][k];
        s->top2[AT(s, i, b, k)] = p.top2[b][k];
      }
  }
}

void study_summary_free(struct study_summary *s) {
  free(s->final_loss);
  free(s->top1);
  free(s->top2);
  free(s->value);
  free(s->learned);
  s->final_loss = s->top1 = s->top2 = NULL;
  s->value = NULL;
  s->learned = NULL;
}

/* Run i's value of the v-th key the settings vary. */
static const char *vary_value(const struct study_summary *s, int i, int v) {
  return s->value[(size_t)i * (size_t)s->nvary + (size_t)v];
}

/* "2 channel sets", "3 settings", "6 runs (2 channel sets x 3 settings)". */
static void runs_text(const struct study_summary *s, char *out, size_t n) {
  const int a = s->nchannel_sets, b = s->nsettings;
  if (a > 0 && b > 0)
    snprintf(out, n, "%d runs (%d channel set%s x %d setting%s)", s->nsets, a, a > 1 ? "s" : "", b, b > 1 ? "s" : "");
  else
    snprintf(out, n, "%d %s%s", s->nsets, b > 0 ? "setting" : "channel set", s->nsets > 1 ? "s" : "");
}

static void channels_text(const struct study_set *set, char *out, size_t n) {
  out[0] = '\0';
  for (int j = 0; j < set->nch; j++) {
    const size_t used = strlen(out);
    snprintf(out + used, n - used, "%s%ld", j ? "," : "", set->ch[j]);
  }
}

void study_summary_print(const struct study_summary *s, FILE *f) {
  char runs[96];
  runs_text(s, runs, sizeof runs);
  fprintf(f, "==== scdino study summary ====\n");
  fprintf(f, "  %s, shards in %s, on %d rank%s (%d per %s)\n", runs, s->shard_dir, s->ranks, s->ranks > 1 ? "s" : "",
          s->ranks_per_run, s->nsettings > 0 ? "run" : "set");
  fprintf(f, "\n  kNN accuracy in %% (Top-1 / Top-2); the baselines see the same channels:\n");
  /* Columns as wide as their widest entry: run names, channel lists, the varied keys' values,
   * feature-set headings. */
  int wname = 3, wch = 8, wcol[3] = {15, 15, 15}, wvary[CFG_MAX_KEYS] = {0};
  char head[3][64];
  for (int v = 0; v < s->nvary; v++) wvary[v] = (int)strlen(cfg_keys[s->vary[v]].name);
  for (int i = 0; i < s->nsets; i++) {
    char ch[CHANNEL_SET_MAX * 6];
    channels_text(&s->sets[i], ch, sizeof ch);
    if ((int)strlen(s->sets[i].name) > wname) wname = (int)strlen(s->sets[i].name);
    if ((int)strlen(ch) > wch) wch = (int)strlen(ch);
    for (int v = 0; v < s->nvary; v++)
      if ((int)strlen(vary_value(s, i, v)) > wvary[v]) wvary[v] = (int)strlen(vary_value(s, i, v));
  }
  for (int b = 0; b < s->nbase; b++) {
    snprintf(head[b], sizeof head[b], "%s", b == 0 ? "trained" : s->base_label[b][0] ? s->base_label[b] : s->base_name[b]);
    wcol[b] = (int)strlen(head[b]) > 15 ? (int)strlen(head[b]) : 15;
  }
  fprintf(f, "  %-*s  %-*s", wname, s->nsettings > 0 ? "run" : "set", wch, "channels");
  for (int v = 0; v < s->nvary; v++) fprintf(f, "  %-*s", wvary[v], cfg_keys[s->vary[v]].name);
  fprintf(f, "  %10s  %4s", "final loss", "k");
  for (int b = 0; b < s->nbase; b++) fprintf(f, "  %-*s", b + 1 < s->nbase ? wcol[b] : 0, head[b]);
  fprintf(f, "\n");
  int best = 0, best_k = 0;
  for (int i = 0; i < s->nsets; i++) {
    char ch[CHANNEL_SET_MAX * 6], loss[32];
    channels_text(&s->sets[i], ch, sizeof ch);
    if (isfinite(s->final_loss[i]))
      snprintf(loss, sizeof loss, "%.6f", s->final_loss[i]);
    else
      snprintf(loss, sizeof loss, "n/a");
    for (int k = 0; k < s->nk; k++) {
      if (s->top1[AT(s, i, 0, k)] > s->top1[AT(s, best, 0, best_k)]) best = i, best_k = k;
      fprintf(f, "  %-*s  %-*s", wname, k == 0 ? s->sets[i].name : "", wch, k == 0 ? ch : "");
      for (int v = 0; v < s->nvary; v++) fprintf(f, "  %-*s", wvary[v], k == 0 ? vary_value(s, i, v) : "");
      fprintf(f, "  %10s  %4lld", k == 0 ? loss : "", s->k[k]);
      for (int b = 0; b < s->nbase; b++) {
        char cell[48];
        snprintf(cell, sizeof cell, "%6.2f / %6.2f", s->top1[AT(s, i, b, k)], s->top2[AT(s, i, b, k)]);
        fprintf(f, "  %-*s", b + 1 < s->nbase ? wcol[b] : 0, cell);
      }
      fprintf(f, "\n");
    }
  }
  fprintf(f, "\n  best trained Top-1: %s, %.2f %% at k = %lld\n", s->sets[best].name, s->top1[AT(s, best, 0, best_k)],
          s->k[best_k]);
  int failed = 0;
  for (int i = 0; i < s->nsets; i++)
    if (s->learned[i] == 0)
      fprintf(f, "%s%s", failed++ ? ", " : "\n  WARNING: the trained network did not learn more than the baselines (by two standard "
              "errors) for: ", s->sets[i].name);
  if (failed) fprintf(f, "\n  (the likely causes are in each run's pipeline.txt)\n");
  fprintf(f, "\n  outputs in %s: %s (pipeline.txt, checkpoint.h5, knn.txt, ...),\n"
          "  study.txt (this table), study.h5 (its numbers)\n", s->run_dir,
          s->nsettings > 0 ? "every run's pipeline in <run>/" : "one pipeline run per set in <set>/");
}

/* Each run's setting as written ("" when none), and under settings/ one dataset per key the
 * settings vary, named group.key, with every run's value: numbers for a key of one integer or real,
 * else the text study_setting_value gives. */
static void write_settings(hid_t fid, const struct study_summary *s) {
  const char **texts = xcalloc((size_t)s->nsets, sizeof *texts);
  for (int i = 0; i < s->nsets; i++) texts[i] = s->sets[i].setting >= 0 ? s->setting_text[s->sets[i].setting] : "";
  h5util_dset_write_strs(fid, "setting", texts, (hsize_t)s->nsets);
  hid_t g = h5util_group_create(fid, "settings");
  const hsize_t n = (hsize_t)s->nsets;
  double *num = xcalloc((size_t)s->nsets, sizeof *num);
  long long *whole = xcalloc((size_t)s->nsets, sizeof *whole);
  for (int v = 0; v < s->nvary; v++) {
    const struct cfg_key *k = &cfg_keys[s->vary[v]];
    char name[2 * CFG_WORDLEN];
    snprintf(name, sizeof name, "%s.%s", k->group, k->name);
    for (int i = 0; i < s->nsets; i++) {
      texts[i] = vary_value(s, i, v);
      num[i] = strtod(texts[i], NULL); /* the shortest text that reads back to the value */
      whole[i] = strtoll(texts[i], NULL, 10);
    }
    if (!k->is_array && k->type == CFG_T_REAL)
      h5util_dset_write(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, num);
    else if (!k->is_array && k->type == CFG_T_INT)
      h5util_dset_write(g, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, 1, &n, whole);
    else
      h5util_dset_write_strs(g, name, texts, n);
  }
  CHECK_H5(H5Gclose(g));
  free(whole);
  free(num);
  free(texts);
}

void study_summary_write(const struct study_summary *s) {
  char path[4096];
  fs_join(path, sizeof path, s->run_dir, "study.txt");
  struct fs_mem txt;
  study_summary_print(s, fs_mem_begin(&txt));
  fs_mem_commit(&txt, "study summary", path);

  fs_join(path, sizeof path, s->run_dir, "study.h5");
  struct h5util_image img;
  hid_t fid = h5util_image_begin(path, &img);
  h5util_attr_write_str(fid, "format", "scdino-study");
  /* 2: checksummed, as every file of this version; 3: the settings (setting, settings/) */
  h5util_attr_write_i64(fid, "version", 3);
  h5util_attr_write_i64(fid, "ranks", s->ranks);
  h5util_attr_write_i64(fid, "ranks_per_run", s->ranks_per_run);
  h5util_attr_write_str(fid, "shard_dir", s->shard_dir);
  const char **names = xcalloc((size_t)s->nsets, sizeof *names), **texts = xcalloc((size_t)s->nsets, sizeof *texts);
  char(*chans)[CHANNEL_SET_MAX * 6] = xcalloc((size_t)s->nsets, sizeof *chans);
  const char **chp = xcalloc((size_t)s->nsets, sizeof *chp);
  for (int i = 0; i < s->nsets; i++) {
    names[i] = s->sets[i].name, texts[i] = s->sets[i].text;
    channels_text(&s->sets[i], chans[i], sizeof chans[i]);
    chp[i] = chans[i];
  }
  h5util_dset_write_strs(fid, "name", names, (hsize_t)s->nsets);
  h5util_dset_write_strs(fid, "channel_set", texts, (hsize_t)s->nsets);
  h5util_dset_write_strs(fid, "channels", chp, (hsize_t)s->nsets);
  write_settings(fid, s);
  hsize_t dims[2] = {(hsize_t)s->nsets, (hsize_t)s->nk};
  h5util_dset_write(fid, "final_loss", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, dims, s->final_loss);
  const hsize_t nk = (hsize_t)s->nk;
  h5util_dset_write(fid, "k", H5T_STD_I64LE, H5T_NATIVE_LLONG, 1, &nk, s->k);
  double *buf = xcalloc((size_t)s->nsets * (size_t)s->nk, sizeof *buf);
  for (int b = 0; b < s->nbase; b++) {
    hid_t g = h5util_group_create(fid, s->base_name[b]);
    if (s->base_label[b][0]) h5util_attr_write_str(g, "label", s->base_label[b]);
    for (int t = 0; t < 2; t++) {
      const double *src = t ? s->top2 : s->top1;
      for (int i = 0; i < s->nsets; i++)
        for (int k = 0; k < s->nk; k++) buf[(size_t)i * (size_t)s->nk + (size_t)k] = src[AT(s, i, b, k)];
      h5util_dset_write(g, t ? "top2" : "top1", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, dims, buf);
    }
    CHECK_H5(H5Gclose(g));
  }
  h5util_image_save(fid, &img, "study summary", path);
  free(buf);
  free(chp);
  free(chans);
  free(texts);
  free(names);
}
