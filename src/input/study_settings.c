/* study_settings.c - a study's hyperparameter settings (which keys they may set, applying one over
 * the study's deck, its folder name) and the checks of a study's run folders. */
#include "build_config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "input/config_priv.h"
#include "input/study_settings.h"

const char *study_setting_refused(const struct cfg_key *k) {
  const char *g = k->group, *n = k->name;
  if (strcmp(g, "training") == 0)
    return strcmp(n, "restart") == 0 ? "the study's own: restart = .true. in the study's deck restarts every run"
                                      : NULL;
  if (strcmp(g, "model") == 0 || strcmp(g, "crops") == 0) return NULL;
  if (strcmp(g, "control") == 0) {
    if (strcmp(n, "seed") == 0) return NULL;
    if (strcmp(n, "calculation") == 0 || strcmp(n, "run_dir") == 0)
      return "the study's own: every run is a pipeline in its folder under the study's run_dir";
    return "how the study reports, the same for every run";
  }
  if (strcmp(g, "study") == 0) return "a key of the study itself";
  if (strcmp(g, "data") == 0)
    return strcmp(n, "channels") == 0 ? "&study channel_sets vary the channels"
                                      : "the data are the study's: prepared (and staged) once, and split alike for "
                                        "every run, so that every run is evaluated on the same images";
  if (strcmp(g, "features") == 0 || strcmp(g, "knn") == 0 || strcmp(g, "attention") == 0)
    return "the evaluation is the same for every run, so that the rows of study.txt compare (evaluate a run "
           "otherwise with calculation = 'knn' in its folder)";
  if (strcmp(g, "system") == 0 || strcmp(g, "gpu") == 0)
    return "how the runs are computed, not what they train: a run's result does not depend on it";
  if (strcmp(g, "debug") == 0) return "fault injection is the study's (its own &debug group)";
  return "not a training or model key";
}

/* The key a setting names (config_key_finder): the variable key of that name. */
static const struct cfg_key *setting_key(const char *name, char *why, size_t n) {
  const struct cfg_key *refused = NULL;
  for (int i = 0; i < cfg_nkeys; i++) {
    const struct cfg_key *k = &cfg_keys[i];
    if (strcmp(k->name, name) != 0) continue;
    if (!study_setting_refused(k)) return k;
    if (!refused) refused = k;
  }
  if (refused) {
    snprintf(why, n, "%s.%s cannot be varied by a study: %s", refused->group, refused->name,
             study_setting_refused(refused));
    return NULL;
  }
  const struct cfg_key *alias = config_alias(name, NULL);
  if (alias && !study_setting_refused(alias)) {
    snprintf(why, n, "unknown key '%s'; did you mean '%s'?", name, alias->name);
    return NULL;
  }
  const char **cands = xmalloc((size_t)cfg_nkeys * sizeof *cands);
  int nc = 0;
  for (int i = 0; i < cfg_nkeys; i++)
    if (!study_setting_refused(&cfg_keys[i])) cands[nc++] = cfg_keys[i].name;
  char sugg[256];
  if (config_suggest(name, cands, nc, "'", sugg, sizeof sugg, NULL))
    snprintf(why, n, "unknown key '%s'; did you mean %s?", name, sugg);
  else
    snprintf(why, n, "unknown key '%s' (a setting sets keys of &training, &model, &crops, or seed)", name);
  free(cands);
  return NULL;
}

void study_run_base(const struct config *study, struct config *c) {
  *c = *study;
  snprintf(c->control.calculation, sizeof c->control.calculation, "pipeline");
  c->study.n_channel_sets = 0;
  c->study.n_settings = 0;
  c->study.ranks_per_run = 0;
  memset(c->study.channel_sets, 0, sizeof c->study.channel_sets);
  memset(c->study.settings, 0, sizeof c->study.settings);
}

void study_setting_value(const struct config *c, const struct cfg_key *k, char *out, size_t n) {
  char text[CFG_STRLEN + 64];
  config_value_text(c, k, text, sizeof text);
  size_t used = 0;
  out[0] = '\0';
  for (const char *p = text; *p && used + 1 < n;) {
    char elem[CFG_STRLEN + 64];
    size_t len = 0;
    if (*p == '\'') { /* a string: up to its closing quote, a doubled quote standing for one */
      for (p++; *p && !(p[0] == '\'' && p[1] != '\''); p++) {
        if (p[0] == '\'') p++;
        if (len + 1 < sizeof elem) elem[len++] = *p;
      }
      if (*p) p++;
    } else {
      while (*p && *p != ',') {
        if (len + 1 < sizeof elem) elem[len++] = *p;
        p++;
      }
    }
    elem[len] = '\0';
    const char *e = strcmp(elem, ".true.") == 0 ? "true" : strcmp(elem, ".false.") == 0 ? "false" : elem;
    const int w = snprintf(out + used, n - used, "%s%s", used ? "," : "", e);
    used += w > 0 ? (size_t)w : 0;
    while (*p == ',' || *p == ' ') p++;
  }
}

int study_setting_apply(const char *text, struct config *c, int check, struct study_setting *s, char *msgs,
                        size_t n) {
  memset(s, 0, sizeof *s);
  const int nerr =
      config_apply_assignments(c, text, setting_key, check, s->key, STUDY_SETTING_KEYS, &s->nkeys, msgs, n);
  if (nerr) return nerr;
  size_t used = 0;
  for (int i = 0; i < s->nkeys; i++) {
    const struct cfg_key *k = &cfg_keys[s->key[i]];
    char value[STUDY_FOLDER_LEN];
    study_setting_value(c, k, value, sizeof value);
    const int w = snprintf(s->folder + used, sizeof s->folder - used, "%s%s_%s", i ? "_" : "", k->name, value);
    if (w < 0 || (size_t)w >= sizeof s->folder - used) {
      snprintf(msgs, n, "its folder name %.80s... is longer than %zu characters\n", s->folder, sizeof s->folder - 1);
      s->folder[0] = '\0';
      return 1;
    }
    used += (size_t)w;
  }
  return 0;
}

/* The study's own outputs in run_dir (study_report.c, main.c's echo, examples/plot_study.py). */
static const char *const reserved[] = {"study.txt", "study.h5", "input.echo.nml", "plots"};
/* The endings of scdino's output files: a folder named so would pass for one. */
static const char *const file_ends[] = {".h5", ".txt", ".nml", ".png"};

const char *study_folder_check(const char *name, const char *run_dir, long name_max, char *why, size_t n) {
  const size_t len = strlen(name);
  if (len == 0) {
    snprintf(why, n, "the folder name is empty: the run would write into run_dir itself");
    return why;
  }
  if (name[0] == '.') {
    snprintf(why, n, "the folder name '%.80s' begins with '.' (a hidden name; run_dir's lock is .scdino.lock)", name);
    return why;
  }
  if (strchr(name, '/')) {
    snprintf(why, n, "the folder name '%.80s' holds '/': it would be a folder further down", name);
    return why;
  }
  for (size_t i = 0; i < len; i++)
    if (iscntrl((unsigned char)name[i])) {
      snprintf(why, n, "the folder name '%.80s' holds a control character", name);
      return why;
    }
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
    if (strcmp(name, reserved[i]) == 0) {
      snprintf(why, n, "the folder name '%s' is one of the study's own outputs in run_dir (study.txt, study.h5, "
               "input.echo.nml, plots)", name);
      return why;
    }
  for (size_t i = 0; i < sizeof file_ends / sizeof file_ends[0]; i++) {
    const size_t e = strlen(file_ends[i]);
    if (len >= e && strcmp(name + len - e, file_ends[i]) == 0) {
      snprintf(why, n, "the folder name '%.80s' ends in %s, as scdino's output files do", name, file_ends[i]);
      return why;
    }
  }
  if (name_max > 0 && len > (size_t)name_max) {
    snprintf(why, n, "the folder name '%.80s...' has %zu bytes; a file name may have at most %ld here", name, len,
             name_max);
    return why;
  }
  const size_t path = strlen(run_dir) + 1 + len, most = CFG_STRLEN - 1 - CHANNEL_SET_PATH_ROOM;
  if (path > most) {
    snprintf(why, n, "the folder run_dir/<run> = '%.200s/%.80s%s' has %zu characters, more than the %zu allowed "
             "(room is kept for the files in it): choose a shorter run_dir, shorter channel names or shorter "
             "settings", run_dir, name, len > 80 ? "..." : "", path, most);
    return why;
  }
  return NULL;
}

int study_folder_join(const char *set, const char *setting, char *out, size_t n) {
  const int w = snprintf(out, n, "%s%s%s", set, set[0] && setting[0] ? "_" : "", setting);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

int study_folders_check(const char (*folder)[STUDY_FOLDER_LEN], int n, const char *run_dir, long name_max,
                        int *other, char *why, size_t whyn) {
  for (int i = 0; i < n; i++) {
    *other = -1;
    if (study_folder_check(folder[i], run_dir, name_max, why, whyn)) return i;
    for (int j = 0; j < i; j++)
      if (channel_set_folders_clash(folder[i], folder[j])) {
        *other = j;
        return i;
      }
  }
  return -1;
}

void study_run_label(const struct config *study, int i, char *out, size_t n) {
  const int nsets = study->study.n_channel_sets, nsettings = study->study.n_settings;
  const int set = nsettings > 0 ? i / nsettings : i, setting = nsettings > 0 ? i % nsettings : -1;
  char a[CFG_WORDLEN + 32] = "", b[CFG_WORDLEN + 32] = "";
  if (nsets > 0) snprintf(a, sizeof a, "channel_sets(%d) = '%s'", set + 1, study->study.channel_sets[set]);
  if (setting >= 0) snprintf(b, sizeof b, "settings(%d) = '%s'", setting + 1, study->study.settings[setting]);
  snprintf(out, n, "%s%s%s", a, a[0] && b[0] ? " with " : "", b);
}
