/* runlock.c - one job at a time in a run_dir or shard_dir (runlock.h). */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/runlock.h"

#define RUNLOCK_FILE ".scdino.lock"
#define RUNLOCK_MAX 4

static char held[RUNLOCK_MAX][PATH_MAX];
static int nheld, at_exit_set;

struct holder {
  char host[256], job[64];
  long pid;
  long long since;
};

static void my_identity(struct holder *h) {
  memset(h, 0, sizeof *h);
  if (gethostname(h->host, sizeof h->host - 1) != 0) snprintf(h->host, sizeof h->host, "unknown");
  const char *job = getenv("SLURM_JOB_ID"); /* who we are, not a setting */
  snprintf(h->job, sizeof h->job, "%s", job ? job : "");
  h->pid = (long)getpid();
  h->since = (long long)time(NULL);
}

/* Parse "host=H pid=P job=J since=T"; 0 when the file says who holds it. */
static int read_holder(const char *path, struct holder *h) {
  memset(h, 0, sizeof *h);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512] = "";
  const int got = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  if (!got) return -1;
  char *p;
  if ((p = strstr(line, "host="))) sscanf(p + 5, "%255s", h->host);
  if ((p = strstr(line, "pid="))) h->pid = strtol(p + 4, NULL, 10);
  if ((p = strstr(line, "job="))) sscanf(p + 4, "%63[^ \n]", h->job);
  if ((p = strstr(line, "since="))) h->since = strtoll(p + 6, NULL, 10);
  return h->host[0] && h->pid > 0 ? 0 : -1;
}

/* Whether process pid of this host has ended (a zombie has: only its parent has not reaped it). */
static int process_gone(long pid) {
  if (kill((pid_t)pid, 0) == -1 && errno == ESRCH) return 1;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *close_paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
  return close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z';
}

/* 1 when the holder is known to be gone (or is a former run of this very Slurm job). */
static int holder_gone(const struct holder *h, const struct holder *me, const char **why) {
  if (me->job[0] && !strcmp(h->job, me->job)) {
    *why = "it belongs to an earlier run of this Slurm job (requeued)";
    return 1;
  }
  if (strcmp(h->host, me->host) != 0) return 0;
  if (h->pid == me->pid) {
    *why = "it names this very process";
    return 1;
  }
  /* The rank 0 of a job that was just ended (MPI_Abort, mpirun's SIGKILL a second after its
   * SIGTERM) may take a few seconds to go: a job started right after it waits up to 10 s. */
  for (int i = 0; i < 100; i++) {
    if (process_gone(h->pid)) {
      *why = "that process no longer runs";
      return 1;
    }
    struct timespec ts = {0, 100000000L};
    nanosleep(&ts, NULL);
  }
  return 0;
}

void runlock_release(const char *dir) {
  char path[PATH_MAX];
  fs_join(path, sizeof path, dir, RUNLOCK_FILE);
  for (int i = 0; i < nheld; i++)
    if (!strcmp(held[i], path)) {
      unlink(path);
      scd_tmpfile_unregister(path);
      snprintf(held[i], PATH_MAX, "%s", held[nheld - 1]);
      nheld--;
      return;
    }
}

void runlock_release_all(void) {
  for (int i = 0; i < nheld; i++) {
    unlink(held[i]);
    scd_tmpfile_unregister(held[i]);
  }
  nheld = 0;
}

void runlock_acquire(const char *dir, const char *what) {
  char path[PATH_MAX];
  fs_mkdir_p(dir);
  fs_join(path, sizeof path, dir, RUNLOCK_FILE);
  for (int i = 0; i < nheld; i++)
    if (!strcmp(held[i], path)) return;
  SCD_ASSERT(nheld < RUNLOCK_MAX);
  struct holder me, h;
  my_identity(&me);
  for (int attempt = 0;; attempt++) {
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      char line[512];
      const int n = snprintf(line, sizeof line, "host=%s pid=%ld job=%s since=%lld\n", me.host, me.pid, me.job,
                             me.since);
      const int ok = write(fd, line, (size_t)n) == n;
      if (close(fd) != 0 || !ok) {
        unlink(path);
        scd_fatal(SCD_EXIT_FAILURE, "cannot write the lock %s: %s", path, strerror(errno));
      }
      snprintf(held[nheld++], PATH_MAX, "%s", path);
      scd_tmpfile_register(path); /* a fatal error or a signal removes it too */
      if (!at_exit_set) {
        atexit(runlock_release_all);
        at_exit_set = 1;
      }
      return;
    }
    if (errno != EEXIST) scd_fatal(SCD_EXIT_FAILURE, "cannot create the lock %s: %s", path, strerror(errno));
    if (attempt > 0) /* taken again between our look and our retry: another job is starting */
      scd_fatal(SCD_EXIT_INPUT, "%s '%s' is being taken by another scdino job at this moment (%s)", what, dir,
                path);
    const char *why = "";
    if (read_holder(path, &h) != 0) {
      log_warn("%s: a lock file that names no job (damaged or not scdino's); taking it over", path);
    } else if (holder_gone(&h, &me, &why)) {
      log_warn("%s: taking over the lock of pid %ld on %s (%s)", path, h.pid, h.host, why);
    } else {
      char since[64] = "an unknown time";
      const time_t t = (time_t)h.since;
      struct tm tm;
      if (h.since > 0 && localtime_r(&t, &tm)) strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S", &tm);
      scd_fatal(SCD_EXIT_INPUT,
                "%s '%s' is in use by another scdino job (pid %ld on host %s%s%s, since %s): two jobs must not "
                "share it.  Choose another %s, or, if that job is gone, remove %s", what, dir, h.pid, h.host,
                h.job[0] ? ", Slurm job " : "", h.job, since, what, path);
    }
    if (unlink(path) != 0 && errno != ENOENT)
      scd_fatal(SCD_EXIT_FAILURE, "cannot remove the stale lock %s: %s", path, strerror(errno));
  }
}
