/* calc.h - the dispatch of the deck's `calculation` to the module that runs it: prepare
 * (data/prepare.h), train (train/train.h), features (analysis/features.h), knn (analysis/knn.h),
 * attention (analysis/attention.h), linear (linear/linear.h), pipeline (workflow/pipeline.h), study
 * (workflow/study.h).
 * Each module declares its own entry point, int X_run(const struct config *cfg), returning the
 * process exit status. */
#ifndef SCDINO_CALC_H
#define SCDINO_CALC_H

#include "input/config.h"

/* Run cfg->control.calculation.  Every rank calls it; returns the process exit status. */
int calc_run(const struct config *cfg);

#endif
