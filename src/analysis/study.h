/* study.h - calculation='study': scDINO's channel study in one launch.
 *
 * &study channel_sets lists channel combinations; the study prepares the shards once (as the
 * pipeline does), then runs the pipeline (train, features, kNN with its baselines, attention maps)
 * for every set on a copy of the deck whose data.channels is the set and whose run_dir is
 * run_dir/<the set's channel names joined by _>, and ends with a table comparing the sets:
 * run_dir/study.txt (also printed) and run_dir/study.h5 (doc/formats.md).
 *
 * With &study ranks_per_run = R below the rank count N, the ranks form N/R groups of consecutive
 * ranks (comm_group_begin), each with its own communicators (MPI and NCCL); group g runs sets g,
 * g + N/R, ...  A set's run depends only on its own deck and R, so its checkpoints are the same
 * whatever the grouping.  Restart (&training restart = .true.): a set whose pipeline.txt exists and
 * whose checkpoint has every epoch is skipped; the others run, continuing from their checkpoints. */
#ifndef SCDINO_STUDY_H
#define SCDINO_STUDY_H

#include <stdio.h>

#include "input/channel_sets.h"
#include "input/config.h"

/* calculation = 'study' (every rank); returns the exit status. */
int study_run(const struct config *cfg);

/* One set of the study. */
struct study_set {
  char text[CFG_WORDLEN]; /* as the deck writes it */
  long ch[CHANNEL_SET_MAX];
  int nch;
  char name[CFG_STRLEN / 2]; /* its run folder under run_dir */
};

/* What the summary is made of: per set, the numbers of its run_dir (log.txt, knn.h5). */
struct study_summary {
  int nsets, ranks, ranks_per_run;
  char run_dir[CFG_STRLEN], shard_dir[CFG_STRLEN];
  const struct study_set *sets;
  double *final_loss;   /* [nsets] */
  int nk;
  long long k[16];
  int nbase;                            /* feature sets in knn.h5: trained, then the baselines */
  char base_name[3][32], base_label[3][64];
  double *top1, *top2;                  /* [nsets][nbase][nk] */
  int *learned;                         /* [nsets]: pipeline_beats_baselines of each set's run */
};

/* Read every set's results from run_dir/<set>/ (rank 0); the caller frees with study_summary_free. */
void study_summary_read(struct study_summary *s);
void study_summary_free(struct study_summary *s);
/* The table (study.txt). */
void study_summary_print(const struct study_summary *s, FILE *f);
/* run_dir/study.txt and run_dir/study.h5, each written atomically. */
void study_summary_write(const struct study_summary *s);

#endif
