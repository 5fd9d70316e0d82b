/* study.h - calculation='study': scDINO's channel study, and hyperparameter studies, in one launch.
 *
 * &study channel_sets lists channel combinations, &study settings hyperparameter settings
 * (input/study_settings.h); the study's runs are every set with every setting (either list alone
 * when the other is empty).  The study prepares the shards once (as the pipeline does), then runs
 * the pipeline (train, features, kNN with its baselines, attention maps) for every run on a copy of
 * the deck whose data.channels is the set, with the setting applied, and whose run_dir is
 * run_dir/<the set's channel names joined by _>[_<the setting's keys and values joined by _>], and
 * ends with a table comparing the runs: run_dir/study.txt (also printed) and run_dir/study.h5
 * (doc/formats.md).  Every run's folder is checked before any run starts (study_folders_check: no
 * two runs share one, none is reserved, empty or too long), and locked (runlock.h) by the group
 * running it.
 *
 * With &study ranks_per_run = R below the rank count N, the ranks form N/R groups of consecutive
 * ranks (comm_group_begin), each with its own communicators (MPI and NCCL); group g runs runs g,
 * g + N/R, ...  A run depends only on its own deck and R, so its checkpoints are the same whatever
 * the grouping.  A world heartbeat ring (core/watchdog.h) runs from the split to the study's end, so
 * the groups that are done wait for the others as long as these live.  Restart (&training restart =
 * .true.): a run whose pipeline.txt exists and whose checkpoint has every epoch (its own epochs) is
 * skipped; the others run, continuing from their checkpoints. */
#ifndef SCDINO_STUDY_H
#define SCDINO_STUDY_H

#include <stdio.h>

#include "input/channel_sets.h"
#include "input/config.h"
#include "input/study_settings.h"

/* calculation = 'study' (every rank); returns the exit status. */
int study_run(const struct config *cfg);

/* One run of the study: a channel set with a setting. */
struct study_set {
  char text[CFG_WORDLEN]; /* the channel set as the deck writes it; "": the deck's channels */
  long ch[CHANNEL_SET_MAX]; /* the channels (all of the images' when the deck's are all) */
  int nch;
  int setting;               /* index into &study settings; -1: none */
  char name[STUDY_FOLDER_LEN]; /* its run folder under run_dir */
};

/* What the summary is made of: per run, the numbers of its run_dir (log.txt, knn.h5). */
struct study_summary {
  int nsets, ranks, ranks_per_run;
  int nchannel_sets, nsettings; /* the deck's lists (nsets = their product, either taken as 1 when 0) */
  char run_dir[CFG_STRLEN], shard_dir[CFG_STRLEN];
  const struct study_set *sets;
  const char (*setting_text)[CFG_WORDLEN]; /* &study settings as written */
  int nvary;                               /* keys any setting sets, in the order first named */
  int vary[CFG_MAX_KEYS];                  /* their indices into cfg_keys */
  char (*value)[STUDY_FOLDER_LEN];         /* [nsets][nvary]: each run's value (study_setting_value) */
  double *final_loss;   /* [nsets] */
  int nk;
  long long k[16];
  int nbase;                            /* feature sets in knn.h5: trained, then the baselines */
  char base_name[3][32], base_label[3][64];
  double *top1, *top2;                  /* [nsets][nbase][nk] */
  int *learned;                         /* [nsets]: pipeline_beats_baselines of each run */
};

/* Read every run's results from run_dir/<run>/ (rank 0); the caller frees with study_summary_free
 * (value too). */
void study_summary_read(struct study_summary *s);
void study_summary_free(struct study_summary *s);
/* The table (study.txt). */
void study_summary_print(const struct study_summary *s, FILE *f);
/* run_dir/study.txt and run_dir/study.h5, each written atomically. */
void study_summary_write(const struct study_summary *s);

#endif
