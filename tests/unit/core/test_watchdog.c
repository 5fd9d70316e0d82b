/* tests/unit/core/test_watchdog.c - the watchdog ends a rank that makes no progress, whatever the
 * calculation: progress reported through the progress printer (prepare, features, kNN) names the
 * work in the message; a nested start (train inside pipeline) needs its own stop, and after the
 * last stop nothing fires.  Every stall is a pause() that only the watchdog can end (an alarm of
 * 120 s ends a child whose watchdog failed, so the test fails instead of hanging). */
#include "build_config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/progress.h"
#include "core/watchdog.h"
#include "tests/fixtures/testutil.h"

static int stall_in_progress(void *arg) {
  (void)arg;
  alarm(120);
  watchdog_start(0.5);
  struct progress p;
  progress_start(&p, "features", "images", 10, 10, 1e9);
  progress_update(&p, 3, 0);
  for (;;) pause();
}

static int stall_after_nested_stop(void *arg) {
  (void)arg;
  alarm(120);
  watchdog_start(0.5);
  watchdog_start(0.5); /* nested */
  watchdog_progress("a training step", 7);
  watchdog_stop();     /* the inner one: still watching */
  for (;;) pause();
}

static int stopped(void *arg) {
  (void)arg;
  watchdog_start(0.2);
  watchdog_start(0.2);
  watchdog_stop();
  watchdog_stop();
  sleep(2); /* ten timeouts: a watchdog still running would have ended us */
  return 0;
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  char msg[2048];
  int st = t_run_child(stall_in_progress, NULL, 0, msg, sizeof msg);
  T_CHECK(st == SCD_EXIT_FAILURE, "a stall inside progress: status %d", st);
  T_CHECK(strstr(msg, "no progress for ") && strstr(msg, " s in features: another rank has died or is stuck") &&
              !strstr(msg, "global step"),
          "message: '%s'", msg);
  st = t_run_child(stall_after_nested_stop, NULL, 0, msg, sizeof msg);
  T_CHECK(st == SCD_EXIT_FAILURE && strstr(msg, "in a training step (global step 7)"),
          "nested: status %d, '%s'", st, msg);
  st = t_run_child(stopped, NULL, 0, msg, sizeof msg);
  T_CHECK(st == 0 && msg[0] == '\0', "stopped: status %d, '%s'", st, msg);
  return t_finish();
}
