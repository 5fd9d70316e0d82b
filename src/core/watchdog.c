/* watchdog.c - a helper thread that ends a rank that makes no progress for too long. */
#include "build_config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/watchdog.h"
#include "core/comm.h"
#include "core/log.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static int running, stopping, depth;
static double timeout, last;
static char doing[160] = "start-up";
static int64_t at_step;

void watchdog_progress(const char *what, int64_t step) {
  heartbeat_poll(); /* a progress point shows life to the ranks that wait (main thread only) */
  if (!running) return;
  pthread_mutex_lock(&lock);
  last = wtime();
  snprintf(doing, sizeof doing, "%s", what); /* a copy: the caller's text may be on its stack */
  at_step = step;
  pthread_mutex_unlock(&lock);
}

/* Never calls MPI (MPI_THREAD_FUNNELED): exiting with status 1 before MPI_Finalize is what makes the
 * launcher end the other ranks.  Ranks are named in MPI_COMM_WORLD, also inside a study's groups. */
SCD_NORETURN static void die(const char *why) {
  const struct comm_info *ci = comm_get();
  char who[64] = "";
  if (ci->world_size > 1) snprintf(who, sizeof who, " (rank %d of %d)", ci->world_rank, ci->world_size);
  fflush(stdout);
  fprintf(stderr, "scdino: error%s: %s; ending the job (&system step_timeout = %g)\n", who, why, timeout);
  fflush(stderr);
  scd_tmpfile_remove_all();
  _exit(SCD_EXIT_FAILURE);
}

void watchdog_expire(const char *why) { die(why); }

SCD_NORETURN static void expire(double idle, const char *what, int64_t step) {
  char where[64] = "", why[400];
  if (step >= 0) snprintf(where, sizeof where, " (global step %lld)", (long long)step);
  snprintf(why, sizeof why, "no progress for %.3g s in %s%s: another rank has died or is stuck, or the file system "
           "or network hangs", idle, what, where);
  die(why);
}

static void *watch(void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock);
  while (!stopping) {
    const double idle = wtime() - last;
    if (idle > timeout) expire(idle, doing, at_step);
    /* Look again when the timeout could expire, at most a second from now. */
    double wait = timeout - idle;
    if (wait > 1.0) wait = 1.0;
    if (wait < 0.01) wait = 0.01;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const long ns = (long)(wait * 1e9);
    ts.tv_sec += (ts.tv_nsec + ns) / 1000000000L;
    ts.tv_nsec = (ts.tv_nsec + ns) % 1000000000L;
    const int rc = pthread_cond_timedwait(&cond, &lock, &ts);
    if (rc != 0 && rc != ETIMEDOUT) SCD_FAIL("pthread_cond_timedwait: error %d", rc);
  }
  pthread_mutex_unlock(&lock);
  return NULL;
}

void watchdog_start(double timeout_s) {
  if (running) { /* nested (train inside pipeline): one watch, counted */
    depth++;
    watchdog_progress("start-up", -1);
    return;
  }
  if (timeout_s <= 0) return;
  depth = 1;
  timeout = timeout_s;
  last = wtime();
  snprintf(doing, sizeof doing, "start-up");
  at_step = -1;
  stopping = 0;
  CHECK_PTHREAD(pthread_create(&thread, NULL, watch, NULL));
  running = 1;
}

void watchdog_stop(void) {
  if (!running || --depth > 0) return;
  pthread_mutex_lock(&lock);
  stopping = 1;
  pthread_cond_signal(&cond);
  pthread_mutex_unlock(&lock);
  CHECK_PTHREAD(pthread_join(thread, NULL));
  running = 0;
}
