/* pipeline.h - calculation='pipeline': upstream's six-step snakemake pipeline in one launch.
 *
 *   prepare    only when data.shard_dir holds no complete shard set (then data.tiff_dir or
 *              data.file_list is needed)
 *   train      run_dir/checkpoint.h5, log.txt (the deck's &training; restart as it says)
 *   features   from the checkpoint just trained (features.checkpoint is not used) into
 *              run_dir/features_EEEE.h5
 *   knn        on that file (knn.features is not used): knn.txt, knn.h5, with the raw-pixel and
 *              random-init baselines when knn.baselines; left out for an unlabelled shard set
 *   (with &features epochs other than 'last', features and knn run for every chosen
 *   checkpoint_EEEE.h5 after training - knn_EEEE.txt/.h5 and knn_epochs.txt, knn.txt/.h5 the last
 *   one's - and the summary adds the kNN-vs-epoch table)
 *   attention  when attention.in_pipeline: attention.h5 and the PNG tree
 * and then a summary (stdout and run_dir/pipeline.txt): images, epochs, final loss and the last
 * epoch's collapse diagnostics, wall time of every step, kNN Top-1/Top-2 of every feature set at
 * every k, whether the trained features beat the baselines (and if not, the likely causes), and
 * where the outputs are.
 */
#ifndef SCDINO_PIPELINE_H
#define SCDINO_PIPELINE_H

#include <stdio.h>

#include "analysis/knn.h"
#include "input/config.h"

/* calculation = 'pipeline' (every rank); returns the exit status. */
int pipeline_run(const struct config *cfg);
/* The same without its prepare step, on shards already prepared and checked (a study's sets). */
int pipeline_run_prepared(const struct config *cfg);
/* The prepare step (collective): prepare_run when data.shard_dir holds no complete shard set (then
 * data.tiff_dir or file_list must be set), or its check of the shards against the TIFF tree or the
 * file list (one of them set and check_tiff_tree).  Returns prepare's exit status, or -1 when the
 * shards were there already. */
int pipeline_prepare(const struct config *cfg);

/* Numbers the summary is made of. */
struct pipeline_summary {
  long long images, train_images, feature_rows;
  long long epochs;        /* epochs trained in all (the checkpoint's next epoch) */
  double final_loss;       /* train_loss of the last line of log.txt; NaN if none */
  double diag[4];          /* its teacher_entropy, teacher_batch_entropy, kl, center_norm (NaN: none) */
  long long out_dim;       /* &model out_dim (ln out_dim: the entropy of uniform targets) */
  long long n_test;        /* kNN test rows (knn.h5) */
  int nsteps;
  char step_name[6][16];
  double step_seconds[6];
  int step_skipped[6];
  int knn_skipped;         /* no kNN: the images have no labels */
  int nk;                  /* k values evaluated */
  long long k[16];
  int nsets;               /* trained, raw_pixels, random_init (those present) */
  char set_name[3][32];
  char set_label[3][64];
  double top1[3][16], top2[3][16];
  char run_dir[1024], shard_dir[1024], features_file[4096];
  int attention;           /* attention maps written */
  int has_epochs;          /* features.epochs: knn_epochs holds the kNN-vs-epoch table */
  struct knn_epochs knn_epochs;
};

/* The last value of "key" in run_dir/log.txt (one JSON object per line), e.g. "train_loss"; NaN when
 * there is none (or it is null). */
double pipeline_log_last(const char *log_txt, const char *key);
/* kNN accuracies of every feature set in run_dir/knn.h5 into s (nk, k, nsets, n_test, ...). */
void pipeline_read_knn(const char *knn_h5, struct pipeline_summary *s);
/* Whether the trained features (set 0) learnt more than the baselines: their best Top-1 over k
 * above the best baseline's by more than two standard errors sqrt(p (1 - p) / n_test), p the best
 * baseline's Top-1.  1 yes, 0 no, -1 when there is no baseline or no test row, or a baseline
 * classifies every test row (nothing to beat). */
int pipeline_beats_baselines(const struct pipeline_summary *s);
/* The summary table. */
void pipeline_summary_print(const struct pipeline_summary *s, FILE *f);

#endif
