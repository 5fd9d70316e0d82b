/* calc.c - dispatch of `calculation` to the module that implements it, inside the signal handlers
 * and the watchdog that every calculation runs under.  Every module is part of every build; the
 * deck parser already refused a calculation outside the table, so the last line is a guard. */
#include "build_config.h"

#include <string.h>

#include <stdio.h>

#include "analysis/attention.h"
#include "analysis/features.h"
#include "analysis/knn.h"
#include "workflow/pipeline.h"
#include "workflow/study.h"
#include "calc.h"
#include "core/check.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/watchdog.h"
#include "data/prepare.h"
#include "linear/linear.h"
#include "train/train.h"

struct calc_entry {
  const char *name;
  int (*run)(const struct config *cfg);
};

static const struct calc_entry calcs[] = {
    {"prepare", prepare_run}, {"train", train_run}, {"features", features_run},
    {"knn", knn_run},     {"attention", attention_run}, {"linear", linear_run},
    {"pipeline", pipeline_run}, {"study", study_run},
};

int calc_run(const struct config *cfg) {
  for (size_t i = 0; i < sizeof calcs / sizeof calcs[0]; i++) {
    if (strcmp(calcs[i].name, cfg->control.calculation) != 0) continue;
    /* SIGTERM / SIGUSR1 / SIGINT: a clean exit here, a checkpoint and exit 0 in training. */
    char what[64];
    snprintf(what, sizeof what, "calculation '%s'", calcs[i].name);
    signals_install(what);
    /* A rank that makes no progress for step_timeout seconds ends the job (watchdog.h). */
    watchdog_start(cfg->system.step_timeout);
    const int rc = calcs[i].run(cfg);
    watchdog_stop();
    return rc;
  }
  scd_fatal(SCD_EXIT_INPUT, "unknown calculation '%s'", cfg->control.calculation);
}
