/* calc.h - the calculations a deck can ask for, and the dispatch to their modules. */
#ifndef SCDINO_CALC_H
#define SCDINO_CALC_H

#include "config.h"

/* Run cfg->control.calculation.  Every rank calls it; returns the process exit status. */
int calc_run(const struct config *cfg);

/* Entry points of the modules (each returns an exit status, 0 on success). */
int prepare_run(const struct config *cfg);   /* prepare.c   */
int train_run(const struct config *cfg);     /* train.c     */
int features_run(const struct config *cfg);  /* features.c  */
int knn_run(const struct config *cfg);       /* knn.c       */
int attention_run(const struct config *cfg); /* attention.c */
int pipeline_run(const struct config *cfg);  /* pipeline.c  */

#endif
