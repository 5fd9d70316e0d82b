/* tests/unit/core/test_signals.c - signals.c and watchdog.c in child processes: a deferred signal only sets the
 * stop flag, a signal outside training ends the process with 128 + signal and removes registered
 * temporary files, a deferred signal ends it once exiting is the rule again, a second SIGINT kills
 * at once, SIGXFSZ is ignored (a write past ulimit -f fails with EFBIG), and the watchdog ends a
 * rank that stops making progress (status 1, temporary files removed) but not one that progresses. */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/watchdog.h"
#include "tests/fixtures/testutil.h"

static char tmpfile_path[1024];

/* What a child sleeps where the mechanism under test should already have ended it: long, so that
 * only that mechanism ends it (the status tells), however slow or loaded the machine.  No check
 * here depends on how fast anything happens. */
#define FALLTHROUGH_S 120.0

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Run fn in a child; returns its wait status, *secs the time until it ended. */
static int in_child(int (*fn)(void), double *secs) {
  fflush(stdout);
  fflush(stderr);
  const double t0 = wtime();
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(99);
  }
  if (pid == 0) _exit(fn());
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (secs) *secs = wtime() - t0;
  return st;
}

static void make_tmpfile(void) {
  FILE *f = fopen(tmpfile_path, "w");
  if (!f) _exit(90);
  fputs("unfinished", f);
  fclose(f);
  scd_tmpfile_register(tmpfile_path);
}

/* Training: the signal is only recorded. */
static int deferred(void) {
  signals_install("test");
  signals_set_mode(SIGNALS_DEFER, "training");
  raise(SIGUSR1);
  raise(SIGTERM); /* a later one does not replace the first */
  sleep_s(0.3);   /* the helper thread would have ended us by now in exit mode */
  if (!signals_received()) return 10;
  if (signals_received() != SIGUSR1) return 11;
  if (strcmp(signals_name(SIGUSR1), "SIGUSR1") || strcmp(signals_name(SIGTERM), "SIGTERM")) return 12;
  return 0;
}

/* Elsewhere: a clean exit with 128 + SIGTERM, temporary files removed. */
static int exits(void) {
  signals_install("calculation 'knn'");
  make_tmpfile();
  raise(SIGTERM);
  sleep_s(FALLTHROUGH_S);
  return 20; /* not reached */
}

/* A signal held while deferred ends the process when the mode goes back to exit. */
static int deferred_then_exit(void) {
  signals_install("test");
  signals_set_mode(SIGNALS_DEFER, "training");
  make_tmpfile();
  raise(SIGUSR1);
  sleep_s(0.3);
  signals_set_mode(SIGNALS_EXIT, "calculation 'pipeline'");
  sleep_s(FALLTHROUGH_S);
  return 30;
}

/* Ctrl-C twice. */
static int double_int(void) {
  signals_install("test");
  signals_set_mode(SIGNALS_DEFER, "training");
  raise(SIGINT);
  sleep_s(0.1);
  raise(SIGINT);
  sleep_s(FALLTHROUGH_S);
  return 40;
}

/* ulimit -f: the write fails with EFBIG instead of SIGXFSZ killing the process. */
static int fsize(void) {
  signals_install("test");
  struct rlimit rl = {4096, 4096};
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 50;
  int fd = open(tmpfile_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 51;
  char buf[8192];
  memset(buf, 'x', sizeof buf);
  ssize_t w = write(fd, buf, sizeof buf); /* 4096 written */
  ssize_t w2 = write(fd, buf, sizeof buf); /* nothing fits */
  const int e = errno;
  close(fd);
  unlink(tmpfile_path);
  return w == 4096 && w2 == -1 && e == EFBIG ? 0 : 52;
}

/* No progress for longer than the timeout. */
static int stuck(void) {
  make_tmpfile();
  watchdog_start(0.3);
  watchdog_progress("a training step", 7);
  sleep_s(FALLTHROUGH_S);
  return 60;
}

/* Regular progress for longer than the timeout, then stopped: no exit.  The gaps (0.05 s) are 1/60 of
 * the timeout, so a loaded machine's scheduling delays cannot make them look like a stall. */
static int progressing(void) {
  watchdog_start(3.0);
  for (int i = 0; i < 80; i++) {
    watchdog_progress("a training step", i);
    sleep_s(0.05);
  }
  watchdog_stop();
  sleep_s(3.5);
  return 0;
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  snprintf(tmpfile_path, sizeof tmpfile_path, "%s/out.h5.tmp.1", t_scratch_dir("test_signals"));
  double s;
  int st;

  st = in_child(deferred, &s);
  T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "deferred: status %d (child code %d)", st, WEXITSTATUS(st));

  st = in_child(exits, &s);
  T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGTERM, "exit mode: status %d, wanted exit %d", st,
          128 + SIGTERM);
  T_CHECK(access(tmpfile_path, F_OK) != 0, "exit mode left %s behind", tmpfile_path);

  st = in_child(deferred_then_exit, &s);
  T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGUSR1, "deferred then exit: status %d, wanted exit %d",
          st, 128 + SIGUSR1);
  T_CHECK(access(tmpfile_path, F_OK) != 0, "deferred then exit left %s behind", tmpfile_path);

  st = in_child(double_int, &s);
  T_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT, "second SIGINT: status %d, wanted killed by SIGINT", st);

  st = in_child(fsize, &s);
  T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ulimit -f: status %d (signaled %d, child code %d)", st,
          WIFSIGNALED(st) ? WTERMSIG(st) : 0, WEXITSTATUS(st));

  st = in_child(stuck, &s);
  T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "watchdog: status %d, wanted exit 1", st);
  T_CHECK(s > 0.25, "watchdog ended the stuck child after %.2f s, before its timeout of 0.3 s", s);
  T_CHECK(access(tmpfile_path, F_OK) != 0, "watchdog left %s behind", tmpfile_path);

  st = in_child(progressing, &s);
  T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "watchdog ended a child that made progress: status %d", st);
  return t_finish();
}
