/* fault_inject.c - the &debug fault injections (signals, rank failures, NaN gradients, slow writes). */
#include "build_config.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "model/tensor.h"
#include "train/fault_inject.h"

static int nan_index = -1, nan_input;
static int paused;

static void check_rank(const char *key, long rank, int allow_all) {
  const int size = comm_size();
  if (rank >= size || (rank < 0 && !allow_all))
    scd_fatal(SCD_EXIT_INPUT, "&debug %s = %ld, but this job has %d rank%s (0 to %d)", key, rank, size,
              size == 1 ? "" : "s", size - 1);
}

void fault_inject_setup(const struct config *cfg, const struct tensor_table *tt) {
  nan_index = -1;
  nan_input = 0;
  paused = 0;
  if (cfg->debug.signal_at_step >= 0) check_rank("signal_rank", cfg->debug.signal_rank, 1);
  if (cfg->debug.fail_at_step >= 0) check_rank("fail_rank", cfg->debug.fail_rank, 0);
  if (cfg->debug.nan_at_step < 0) return;
  check_rank("nan_rank", cfg->debug.nan_rank, 0);
  if (!strcmp(cfg->debug.nan_tensor, "input")) {
    nan_input = 1; /* the NaN goes into the first pixel of the batch instead */
    return;
  }
  for (int i = 0; i < tt->n && nan_index < 0; i++) {
    if (!(tt->t[i].flags & TENSOR_GRAD)) continue;
    if (!cfg->debug.nan_tensor[0] || !strcmp(cfg->debug.nan_tensor, tt->t[i].name)) nan_index = i;
  }
  if (nan_index < 0) {
    const int k = tensors_find(tt, cfg->debug.nan_tensor);
    scd_fatal(SCD_EXIT_INPUT, "&debug nan_tensor = '%s' %s (a trainable tensor is e.g. '%s')", cfg->debug.nan_tensor,
              k >= 0 ? "has no gradient in this model" : "is not a tensor of this model", tt->t[0].name);
  }
}

SCD_NORETURN static void fail(const struct config *cfg, int64_t step) {
  const char *how = cfg->debug.fail_how;
  const long rank = cfg->debug.fail_rank;
  if (!strcmp(how, "oom")) {
    /* The real path of a failed allocation: xmalloc reports the size and ends the job. */
    void *p = xmalloc((size_t)1 << 62);
    SCD_FAIL("an allocation of 2^62 bytes succeeded (%p): cannot simulate running out of memory", p);
  }
  if (!strcmp(how, "kill")) {
    fprintf(stderr, "scdino: debug (rank %ld): &debug fail_how = 'kill': SIGKILL to myself at global step %lld\n",
            rank, (long long)step);
    fflush(stderr);
    raise(SIGKILL);
  }
  if (!strcmp(how, "hang")) {
    fprintf(stderr, "scdino: debug (rank %ld): &debug fail_how = 'hang': stuck forever at global step %lld\n", rank,
            (long long)step);
    fflush(stderr);
    for (;;) pause();
  }
  scd_fatal(SCD_EXIT_DATA, "&debug fail_at_step = %lld: simulated failure of rank %ld (as an unreadable shard would "
            "end it)", (long long)step, rank);
}

void fault_inject_step(const struct config *cfg, int64_t step) {
  const int rank = comm_rank();
  wsleep(cfg->debug.step_sleep);
  if (step == cfg->debug.fail_at_step && rank == cfg->debug.fail_rank) fail(cfg, step);
  if (step == cfg->debug.signal_at_step && (cfg->debug.signal_rank < 0 || rank == cfg->debug.signal_rank)) {
    const int sig = !strcmp(cfg->debug.signal_name, "USR1") ? SIGUSR1 : !strcmp(cfg->debug.signal_name, "INT") ? SIGINT : SIGTERM;
    log_rank("debug: raising SIG%s at the start of global step %lld", cfg->debug.signal_name, (long long)step);
    raise(sig);
  }
}

int fault_inject_nan_tensor(const struct config *cfg, int64_t step) {
  if (nan_index < 0 || step != cfg->debug.nan_at_step || comm_rank() != cfg->debug.nan_rank) return -1;
  return nan_index;
}

int fault_inject_nan_input(const struct config *cfg, int64_t step) {
  return nan_input && step == cfg->debug.nan_at_step && comm_rank() == cfg->debug.nan_rank;
}

void fault_inject_checkpoint_pause(const struct config *cfg, const char *tmp_path) {
  if (cfg->debug.checkpoint_pause <= 0 || paused) return;
  paused = 1;
  log_warn("debug: checkpoint write paused for %g s with half of %s written (&debug checkpoint_pause)",
           cfg->debug.checkpoint_pause, tmp_path);
  fflush(stdout);
  fflush(stderr);
  wsleep(cfg->debug.checkpoint_pause);
}
