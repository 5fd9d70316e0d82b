/* study.c - calculation='study': prepare once, then the pipeline for every channel set, in groups
 * of ranks side by side when &study ranks_per_run asks, then the comparison (study_report.c). */
#include "build_config.h"

#include <hdf5.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "analysis/pipeline.h"
#include "analysis/study.h"
#include "core/check.h"
#include "core/heartbeat.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "core/runlock.h"
#include "core/signals.h"
#include "core/watchdog.h"
#include "data/shards.h"
#include "train/checkpoint.h"

/* The sets of the deck against the manifest's channels (every rank: the same answer everywhere). */
static int resolve_sets(const struct config *cfg, struct study_set *sets) {
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
  /* The longest folder name of run_dir's file system (rank 0's answer: the same everywhere). */
  long name_max = comm_rank() == 0 ? pathconf(cfg->control.run_dir, _PC_NAME_MAX) : 0;
  comm_bcast(&name_max, sizeof name_max, 0);
  if (name_max <= 0) name_max = NAME_MAX;
  const int n = cfg->study.n_channel_sets;
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

/* The deck of one set: the study's with the set's channels and run folder, as calculation =
 * 'pipeline' (its input.echo.nml reruns that set alone). */
static void set_config(const struct config *cfg, const struct study_set *s, struct config *c) {
  *c = *cfg;
  snprintf(c->control.calculation, sizeof c->control.calculation, "pipeline");
  char dir[2 * CFG_STRLEN];
  fs_join(dir, sizeof dir, cfg->control.run_dir, s->name);
  if (strlen(dir) >= sizeof c->control.run_dir)
    scd_fatal(SCD_EXIT_INPUT, "study: the run folder %s is too long; choose a shorter control.run_dir", dir);
  memcpy(c->control.run_dir, dir, strlen(dir) + 1);
  for (int i = 0; i < s->nch; i++) c->data.channels[i] = s->ch[i];
  c->data.n_channels = s->nch;
  c->data.check_tiff_tree = 0; /* checked once, by the study's prepare step */
  c->study.n_channel_sets = 0;
  c->study.ranks_per_run = 0;
}

/* Whether the set in run_dir is finished: its pipeline ended (pipeline.txt) after the last epoch. */
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

/* Run the sets of this group (group, group + ngroups, ...); returns the exit status, *stopped set
 * when a signal stopped a set before its end. */
static int run_sets(const struct config *cfg, const struct study_set *sets, int nsets, int group, int ngroups,
                    int *stopped) {
  static struct config c;
  /* Between sets (and while a group waits for the others at the end) a signal only asks for a
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
    char chans[CHANNEL_SET_MAX * 6] = "";
    for (int j = 0; j < s->nch; j++) {
      const size_t used = strlen(chans);
      snprintf(chans + used, sizeof chans - used, "%s%ld", j ? ", " : "", s->ch[j]);
    }
    log_info("==== study set %d of %d: %s (channels %s) in %s on %d rank%s ====", i + 1, nsets, s->name, chans,
             c.control.run_dir, comm_size(), comm_size() > 1 ? "s" : "");
    /* The set's folder is its group's while it runs: no other job (a rerun of the set alone, say)
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
    log_info("study: group %d of %d is done with its sets; waiting for the other groups", group + 1, ngroups);
  }
  return 0;
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
  static struct study_set sets[sizeof cfg->study.channel_sets / sizeof cfg->study.channel_sets[0]];
  const int nsets = resolve_sets(cfg, sets);
  log_info("study: %d channel set%s on %d rank%s: %d group%s of %d, each running %s", nsets, nsets > 1 ? "s" : "",
           N, N > 1 ? "s" : "", ngroups, ngroups > 1 ? "s" : "", R,
           ngroups > 1 ? "its share of the sets at the same time as the others" : "one set after the other");

  if (ngroups > nsets)
    log_warn("study: %d groups of %d rank%s for %d set%s: %d group%s stay idle (choose a larger &study ranks_per_run)",
             ngroups, R, R > 1 ? "s" : "", nsets, nsets > 1 ? "s" : "", ngroups - nsets, ngroups - nsets > 1 ? "s" : "");
  int group = 0, stopped = 0;
  if (ngroups > 1) {
    /* A group that is done waits for the others, maybe for hours: the ring tells it whether they
     * live (watchdog.h). */
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
    log_info("study: stopped on a signal before every set was finished; run the same deck again with &training "
             "restart = .true. to skip the finished sets and continue the others from their checkpoints");
    return 0;
  }
  if (comm_rank() == 0) {
    struct study_summary s;
    memset(&s, 0, sizeof s);
    s.nsets = nsets, s.ranks = N, s.ranks_per_run = R, s.sets = sets;
    snprintf(s.run_dir, sizeof s.run_dir, "%s", cfg->control.run_dir);
    snprintf(s.shard_dir, sizeof s.shard_dir, "%s", cfg->data.shard_dir);
    study_summary_read(&s);
    if (log_verbosity() >= 1) {
      log_raw("\n");
      study_summary_print(&s, stdout);
      fflush(stdout);
    }
    study_summary_write(&s);
    study_summary_free(&s);
  }
  comm_barrier();
  return 0;
}
