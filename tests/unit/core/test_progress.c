/* tests/unit/core/test_progress.c - the progress printer: the lines and the end line, rank 0's share
 * scaled to the whole, bytes as MB/s, no line at all for a negative interval or for work done
 * within one interval, and the ETA arithmetic (fed with made-up times: nothing here is measured). */
#include "build_config.h"

#include <stdio.h>
#include <string.h>

#include "core/progress.h"
#include "tests/fixtures/testutil.h"

/* Each run prints into the child's stdout, which the test reads. */
static int every_update(void *arg) {
  (void)arg;
  struct progress p;
  progress_start(&p, "lbl", "things", 4, 4, 0.0);
  for (int i = 1; i <= 4; i++) progress_update(&p, i, 0);
  progress_end(&p);
  return 0;
}

static int share_and_bytes(void *arg) {
  (void)arg;
  struct progress p;
  progress_start(&p, "kNN on x", "test rows", 10, 5, 0.0);
  progress_update(&p, 1, 2e6);
  progress_end(&p);
  return 0;
}

static int silent(void *arg) {
  const double interval = *(const double *)arg;
  struct progress p;
  progress_start(&p, "quiet", "things", 4, 4, interval);
  progress_update(&p, 2, 0);
  progress_update(&p, 4, 0);
  progress_end(&p);
  return 0;
}

static int count(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  char out[8192];
  T_CHECK(t_run_child(every_update, NULL, 1, out, sizeof out) == 0, "every_update ran");
  T_CHECK(strstr(out, "lbl: 1/4 things (25 %), ") && strstr(out, "lbl: 3/4 things (75 %), "), "lines: %s", out);
  T_CHECK(count(out, " things/s, ETA ") == 3, "a line per update but the last: %s", out);
  T_CHECK(strstr(out, "lbl: 4/4 things (100 %) in ") && count(out, "(100 %)") == 1, "one end line: %s", out);

  T_CHECK(t_run_child(share_and_bytes, NULL, 1, out, sizeof out) == 0, "share_and_bytes ran");
  T_CHECK(strstr(out, "kNN on x: 2/10 test rows (20 %), ") != NULL, "rank 0's share scaled: %s", out);
  T_CHECK(strstr(out, " test rows/s, ") && strstr(out, " MB/s, ETA "), "MB/s column: %s", out);
  T_CHECK(strstr(out, "kNN on x: 2/10 test rows (20 %) in ") != NULL, "the end line says what was done: %s", out);

  double interval = -1;
  T_CHECK(t_run_child(silent, &interval, 1, out, sizeof out) == 0 && !strstr(out, "quiet"), "negative: %s", out);
  interval = 3600;
  T_CHECK(t_run_child(silent, &interval, 1, out, sizeof out) == 0 && !strstr(out, "quiet"), "within one: %s", out);

  char eta[32];
  T_CHECK(!strcmp(progress_fmt_eta(5.0, 0, 10, eta, sizeof eta), "?"), "nothing done: %s", eta);
  T_CHECK(!strcmp(progress_fmt_eta(10.0, 1, 5, eta, sizeof eta), "50.0s"), "50 s left: %s", eta);
  T_CHECK(!strcmp(progress_fmt_eta(60.0, 2, 250, eta, sizeof eta), "2h05m00s"), "2 h 5 min left: %s", eta);
  return t_finish();
}
