/* study.c - calculation='study': prepare once, then the pipeline for every run (a channel set, a
 * setting, or a set with a setting), in groups of ranks side by side when &study ranks_per_run
 * asks, then the comparison (study_report.c). */
#include "build_config.h"

#include <hdf5.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "workflow/pipeline.h"
#include "workflow/study.h"
#include "core/check.h"
#include "core/watchdog.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "core/runlock.h"
#include "core/signals.h"
#include "data/shards.h"
#include "train/checkpoint.h"

#define MAX_SETS (sizeof((struct config *)0)->study.channel_sets / sizeof((struct config *)0)->study.channel_sets[0])
#define MAX_SETTINGS (sizeof((struct config *)0)->study.settings / sizeof((struct config *)0)->study.settings[0])

/* The settings of the deck, each applied over the study's deck (checked at deck time). */
static struct study_setting settings[MAX_SETTINGS];

/* A setting that fails now passed the deck's checks: its first message, for the error. */
static const char *first_line(char *msgs) {
  char *e = strchr(msgs, '\n');
  if (e) *e = '\0';
  return msgs;
}

/* The channel sets of the deck against the manifest's channels (every rank: the same answer
 * everywhere) into sets; without channel_sets, one set: the deck's channels (all when it names
 * none), folder "".  Returns the number of sets. */
static int resolve_sets(const struct config *cfg, long name_max, struct study_set *sets) {
  struct dataset *ds = dataset_open(cfg->data.shard_dir);
  if (dataset_nclasses(ds) == 0)
    scd_fatal(SCD_EXIT_INPUT, "calculation = 'study' compares the channel sets by kNN accuracy, but the images of %s "
              "have no labels (&data labels)", cfg->data.shard_dir);
  const int C = dataset_channels(ds);
  static char names[1024][CFG_WORDLEN];
  int nnames = cfg->data.n_channel_names;
  if (nnames > 0) {
    memcpy(names, cfg->data.channel_names, sizeof cfg->data.channel_names);
  } else {
    nnames = C < 1024 ? C : 1024;
    for (int c = 0; c < nnames; c++) snprintf(names[c], CFG_WORDLEN, "%s", dataset_channel_name(ds, c));
  }
  dataset_close(ds);
  const int n = cfg->study.n_channel_sets;
  if (n == 0) {
    struct study_set *s = &sets[0];
    s->nch = cfg->data.n_channels > 0 ? cfg->data.n_channels : (C < CHANNEL_SET_MAX ? C : CHANNEL_SET_MAX);
    for (int c = 0; c < s->nch; c++) s->ch[c] = cfg->data.n_channels > 0 ? cfg->data.channels[c] : c;
    return 1;
  }
  static struct channel_set_list l;
  memset(&l, 0, sizeof l);
  l.texts = (const char(*)[CFG_WORDLEN])cfg->study.channel_sets;
  l.names = (const char(*)[CFG_WORDLEN])names, l.nnames = nnames, l.nchannels = C;
  l.run_dir = cfg->control.run_dir, l.name_max = name_max;
  for (int i = 0; i < n; i++) {
    struct study_set *s = &sets[i];
    char why[1600];
    snprintf(s->text, sizeof s->text, "%s", cfg->study.channel_sets[i]);
    s->nch = channel_set_list_add(&l, i, why, sizeof why);
    if (s->nch == -3) scd_fatal(SCD_EXIT_INPUT, "&study channel_sets(%d) = '%s': %s", i + 1, s->text, why);
    if (s->nch <= -4) scd_fatal(SCD_EXIT_INPUT, "&study channel_sets(%d) = %s", i + 1, why);
    if (s->nch < 0)
      scd_fatal(SCD_EXIT_INPUT, "&study channel_sets(%d) = %s (shards in %s)", i + 1, why, cfg->data.shard_dir);
    memcpy(s->ch, l.ch[i], sizeof s->ch);
    snprintf(s->name, sizeof s->name, "%s", l.folder[i]);
  }
  return n;
}

/* The study's runs: every channel set with every setting, set after set (study_run_label's order),
 * their folders checked before any runs.  Returns the runs (*nruns of them; the caller frees). */
static struct study_set *resolve_runs(const struct config *cfg, int *nruns) {
  /* The longest folder name of run_dir's file system (rank 0's answer: the same everywhere). */
  long name_max = comm_rank() == 0 ? pathconf(cfg->control.run_dir, _PC_NAME_MAX) : 0;
  comm_bcast(&name_max, sizeof name_max, 0);
  if (name_max <= 0) name_max = NAME_MAX;
  static struct study_set sets[MAX_SETS];
  memset(sets, 0, sizeof sets);
  const int nsets = resolve_sets(cfg, name_max, sets);
  const int nsettings = cfg->study.n_settings, nsetting = nsettings > 0 ? nsettings : 1;
  for (int j = 0; j < nsettings; j++) {
    static struct config base;
    static char msgs[4096];
    study_run_base(cfg, &base);
    if (study_setting_apply(cfg->study.settings[j], &base, 0, &settings[j], msgs, sizeof msgs) != 0)
      scd_fatal(SCD_EXIT_INPUT, "&study settings(%d) = '%s': %s", j + 1, cfg->study.settings[j], first_line(msgs));
  }
  const int n = nsets * nsetting;
  struct study_set *runs = xcalloc((size_t)n, sizeof *runs);
  char(*folder)[STUDY_FOLDER_LEN] = xcalloc((size_t)n, sizeof *folder);
  char label[256], other_label[256], why[1600];
  for (int i = 0; i < n; i++) {
    runs[i] = sets[i / nsetting];
    runs[i].setting = nsettings > 0 ? i % nsetting : -1;
    study_run_label(cfg, i, label, sizeof label);
    if (study_folder_join(sets[i / nsetting].name, nsettings > 0 ? settings[i % nsetting].folder : "", runs[i].name,
                          sizeof runs[i].name) != 0)
      scd_fatal(SCD_EXIT_INPUT, "&study %s: its folder name is longer than %zu characters", label,
                sizeof runs[i].name - 1);
    memcpy(folder[i], runs[i].name, sizeof folder[i]);
  }
  int other;
  const int bad_run = study_folders_check((const char(*)[STUDY_FOLDER_LEN])folder, n, cfg->control.run_dir, name_max,
                                          &other, why, sizeof why);
  if (bad_run >= 0) {
    study_run_label(cfg, bad_run, label, sizeof label);
    if (other < 0) scd_fatal(SCD_EXIT_INPUT, "&study %s: %s", label, why);
    study_run_label(cfg, other, other_label, sizeof other_label);
    scd_fatal(SCD_EXIT_INPUT, "&study %s would write the folder %s/%s of %s%s", label, cfg->control.run_dir,
              folder[other], other_label,
              strcmp(folder[bad_run], folder[other]) == 0 ? "" : " (the same folder where case is ignored)");
  }
  free(folder);
  *nruns = n;
  return runs;
}

/* The deck of one run: the study's with the set's channels, the setting applied and the run's
 * folder, as calculation = 'pipeline' (its input.echo.nml reruns it alone). */
static void set_config(const struct config *cfg, const struct study_set *s, struct config *c) {
  study_run_base(cfg, c);
  char dir[2 * CFG_STRLEN];
  fs_join(dir, sizeof dir, cfg->control.run_dir, s->name);
  if (strlen(dir) >= sizeof c->control.run_dir)
    scd_fatal(SCD_EXIT_INPUT, "study: the run folder %s is too long; choose a shorter control.run_dir", dir);
  memcpy(c->control.run_dir, dir, strlen(dir) + 1);
  /* Runs of parallel groups train at once: each has its own metrics file, name.<run>.prom beside
   * the deck's name.prom (node_exporter's textfile collector reads every *.prom there). */
  if (cfg->system.metrics_file[0]) {
    const char *m = cfg->system.metrics_file, *slash = strrchr(m, '/'), *dot = strrchr(m, '.');
    const size_t stem = dot && (!slash || dot > slash + 1) ? (size_t)(dot - m) : strlen(m);
    char path[2 * CFG_STRLEN];
    snprintf(path, sizeof path, "%.*s.%s%s", (int)stem, m, s->name, m + stem);
    if (strlen(path) >= sizeof c->system.metrics_file)
      scd_fatal(SCD_EXIT_INPUT, "study: the metrics file %s is too long; choose a shorter system.metrics_file", path);
    memcpy(c->system.metrics_file, path, strlen(path) + 1);
  }
  if (s->text[0]) { /* a channel set; else the deck's channels, as they are */
    for (int i = 0; i < s->nch; i++) c->data.channels[i] = s->ch[i];
    c->data.n_channels = s->nch;
  }
  c->data.check_tiff_tree = 0; /* checked once, by the study's prepare step */
  if (s->setting >= 0) {
    static char msgs[4096];
    struct study_setting one;
    if (study_setting_apply(cfg->study.settings[s->setting], c, 0, &one, msgs, sizeof msgs) != 0)
      scd_fatal(SCD_EXIT_INPUT, "&study settings(%d) = '%s': %s", s->setting + 1, cfg->study.settings[s->setting],
                first_line(msgs));
  }
}

/* Whether the run in run_dir is finished: its pipeline ended (pipeline.txt) after its last epoch. */
static int set_finished(const struct config *c) {
  char path[4096];
  fs_join(path, sizeof path, c->control.run_dir, "pipeline.txt");
  if (!fs_exists(path)) return 0;
  fs_join(path, sizeof path, c->control.run_dir, CKPT_FILE);
  hid_t f;
  if (h5util_file_open(path, &f) != 0) return 0;
  int64_t epoch = -1;
  const int rc = h5util_attr_read_i64(f, "epoch", &epoch);
  CHECK_H5(H5Fclose(f));
  return rc == 0 && epoch >= c->training.epochs;
}

static void write_echo(const struct config *c) {
  char path[4096];
  fs_mkdir_p(c->control.run_dir);
  fs_join(path, sizeof path, c->control.run_dir, "input.echo.nml");
  struct fs_mem txt;
  config_echo(fs_mem_begin(&txt), c);
  fs_mem_commit(&txt, "echoed deck", path);
}

/* What a run is called in the log: a set (a channel study) or a run (settings). */
static const char *run_noun(const struct config *cfg) { return cfg->study.n_settings > 0 ? "run" : "set"; }

/* Run the runs of this group (group, group + ngroups, ...); returns the exit status, *stopped set
 * when a signal stopped a run before its end. */
static int run_sets(const struct config *cfg, const struct study_set *sets, int nsets, int group, int ngroups,
                    int *stopped) {
  static struct config c;
  /* Between runs (and while a group waits for the others at the end) a signal only asks for a
   * stop: a group that is done must not end the job while another writes its stop checkpoint. */
  signals_set_mode(SIGNALS_DEFER, "calculation 'study' (between channel sets)");
  for (int i = group; i < nsets && !*stopped; i += ngroups) {
    if (comm_any(signals_received() != 0)) {
      *stopped = 1;
      break;
    }
    const struct study_set *s = &sets[i];
    set_config(cfg, s, &c);
    if (ngroups > 1) log_set_tag(s->name);
    char what[CHANNEL_SET_MAX * 6 + CFG_WORDLEN + 16] = "channels ";
    for (int j = 0; j < s->nch; j++) {
      const size_t used = strlen(what);
      snprintf(what + used, sizeof what - used, "%s%ld", j ? ", " : "", s->ch[j]);
    }
    if (s->setting >= 0) {
      const size_t used = strlen(what);
      snprintf(what + used, sizeof what - used, "; %s", cfg->study.settings[s->setting]);
    }
    log_info("==== study %s %d of %d: %s (%s) in %s on %d rank%s ====", run_noun(cfg), i + 1, nsets, s->name, what,
             c.control.run_dir, comm_size(), comm_size() > 1 ? "s" : "");
    /* The run's folder is its group's while it runs: no other job (a rerun of the run alone, say)
     * writes it meanwhile. */
    if (comm_rank() == 0) runlock_acquire(c.control.run_dir, "run_dir");
    int done = 0;
    if (cfg->training.restart && comm_rank() == 0) done = set_finished(&c);
    comm_bcast(&done, sizeof done, 0);
    if (done) {
      log_info("study: %s is finished (pipeline.txt, checkpoint at epoch %ld); skipped", c.control.run_dir,
               c.training.epochs);
      if (comm_rank() == 0) runlock_release(c.control.run_dir);
      continue;
    }
    if (comm_rank() == 0) write_echo(&c);
    const int rc = pipeline_run_prepared(&c);
    if (comm_rank() == 0) runlock_release(c.control.run_dir);
    if (rc != 0) return rc;
    signals_set_mode(SIGNALS_DEFER, "calculation 'study' (between channel sets)");
    char path[4096];
    fs_join(path, sizeof path, c.control.run_dir, "pipeline.txt");
    done = comm_rank() == 0 ? fs_exists(path) : 0;
    comm_bcast(&done, sizeof done, 0);
    *stopped = !done;
  }
  if (ngroups > 1) {
    log_set_tag("");
    log_info("study: group %d of %d is done with its %ss; waiting for the other groups", group + 1, ngroups,
             run_noun(cfg));
  }
  return 0;
}

/* The summary (rank 0): every run's numbers, the keys the settings vary and each run's values. */
static void write_summary(const struct config *cfg, const struct study_set *sets, int nsets, int N, int R) {
  static struct study_summary s;
  static struct config c;
  memset(&s, 0, sizeof s);
  s.nsets = nsets, s.ranks = N, s.ranks_per_run = R, s.sets = sets;
  s.nchannel_sets = cfg->study.n_channel_sets, s.nsettings = cfg->study.n_settings;
  s.setting_text = (const char(*)[CFG_WORDLEN])cfg->study.settings;
  snprintf(s.run_dir, sizeof s.run_dir, "%s", cfg->control.run_dir);
  snprintf(s.shard_dir, sizeof s.shard_dir, "%s", cfg->data.shard_dir);
  for (int j = 0; j < cfg->study.n_settings; j++)
    for (int k = 0; k < settings[j].nkeys; k++) {
      int have = 0;
      for (int v = 0; v < s.nvary; v++) have |= s.vary[v] == settings[j].key[k];
      if (!have) s.vary[s.nvary++] = settings[j].key[k];
    }
  s.value = xcalloc((size_t)nsets * (size_t)(s.nvary > 0 ? s.nvary : 1), sizeof *s.value);
  for (int i = 0; i < nsets && s.nvary > 0; i++) {
    set_config(cfg, &sets[i], &c);
    for (int v = 0; v < s.nvary; v++)
      study_setting_value(&c, &cfg_keys[s.vary[v]], s.value[(size_t)i * (size_t)s.nvary + (size_t)v],
                          sizeof s.value[0]);
  }
  study_summary_read(&s);
  if (log_verbosity() >= 1) {
    log_raw("\n");
    study_summary_print(&s, stdout);
    fflush(stdout);
  }
  study_summary_write(&s);
  study_summary_free(&s);
}

int study_run(const struct config *cfg) {
  const int N = comm_get()->world_size;
  const int R = cfg->study.ranks_per_run > 0 ? (int)cfg->study.ranks_per_run : N;
  if (R > N)
    scd_fatal(SCD_EXIT_INPUT, "&study ranks_per_run = %d is more than the %d rank%s of this launch", R, N,
              N > 1 ? "s" : "");
  if (N % R != 0)
    scd_fatal(SCD_EXIT_INPUT, "&study ranks_per_run = %d does not divide the %d ranks of this launch into groups of "
              "equal size", R, N);
  const int ngroups = N / R;

  log_info("==== study: prepare ====");
  const int prc = pipeline_prepare(cfg);
  if (prc > 0) return prc;
  int nsets;
  struct study_set *sets = resolve_runs(cfg, &nsets);
  const int nch = cfg->study.n_channel_sets, nst = cfg->study.n_settings;
  char what[96];
  if (nch > 0 && nst > 0)
    snprintf(what, sizeof what, "%d channel set%s x %d setting%s = %d runs", nch, nch > 1 ? "s" : "", nst,
             nst > 1 ? "s" : "", nsets);
  else
    snprintf(what, sizeof what, "%d %s%s", nsets, nch > 0 ? "channel set" : "setting", nsets > 1 ? "s" : "");
  char plural[8];
  snprintf(plural, sizeof plural, "%ss", run_noun(cfg));
  log_info("study: %s on %d rank%s: %d group%s of %d, each running %s %s%s", what, N, N > 1 ? "s" : "", ngroups,
           ngroups > 1 ? "s" : "", R,
           ngroups > 1 ? "its share of the" : "one", ngroups > 1 ? plural : run_noun(cfg),
           ngroups > 1 ? " at the same time as the others" : " after the other");

  if (ngroups > nsets)
    log_warn("study: %d groups of %d rank%s for %d %s%s: %d group%s stay idle (choose a larger &study ranks_per_run)",
             ngroups, R, R > 1 ? "s" : "", nsets, run_noun(cfg), nsets > 1 ? "s" : "", ngroups - nsets,
             ngroups - nsets > 1 ? "s" : "");
  int group = 0, stopped = 0;
  if (ngroups > 1) {
    /* A group that is done waits for the others, maybe for hours: the ring tells it whether they
     * live (core/watchdog.h). */
    heartbeat_begin(HEARTBEAT_WORLD, cfg->system.step_timeout);
    group = comm_group_begin(R);
    log_init(comm_rank(), log_verbosity()); /* every group's rank 0 prints, its lines tagged */
  }
  const int rc = run_sets(cfg, sets, nsets, group, ngroups, &stopped);
  if (rc != 0) return rc;
  if (ngroups > 1) {
    comm_group_end();
    log_init(comm_rank(), log_verbosity());
  }
  stopped = comm_all_any(stopped, "waiting for the other groups' channel sets");
  heartbeat_end(HEARTBEAT_WORLD);
  if (stopped) {
    log_info("study: stopped on a signal before every %s was finished; run the same deck again with &training "
             "restart = .true. to skip the finished %ss and continue the others from their checkpoints",
             run_noun(cfg), run_noun(cfg));
    free(sets);
    return 0;
  }
  if (comm_rank() == 0) write_summary(cfg, sets, nsets, N, R);
  free(sets);
  comm_barrier();
  return 0;
}
