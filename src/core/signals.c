/* signals.c - SIGTERM / SIGUSR1 / SIGINT handling: deferred stop in training, clean exit elsewhere. */
#include "build_config.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/signals.h"

/* Shared between the handler (which may run on any thread), the helper thread and the main thread:
 * lock-free atomics, which are both async-signal-safe and free of data races between threads
 * (volatile sig_atomic_t is only for a thread and its own handler). */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal state needs lock-free atomic int");
static atomic_int first_sig; /* first stop signal received (0: none) */
static atomic_int n_int;     /* SIGINTs received */
static atomic_int mode = SIGNALS_EXIT;
static sem_t wake;
static int installed;
static pthread_mutex_t what_lock = PTHREAD_MUTEX_INITIALIZER;
static char what_text[128] = "scdino";

static void on_signal(int sig) {
  const int saved = errno; /* a handler must leave errno as it found it */
  if (sig == SIGINT && n_int++ > 0) {
    /* Ctrl-C twice: end now, by the signal itself, so the shell sees "interrupted". */
    static const char msg[] = "scdino: second SIGINT: stopping immediately\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, NULL);
    raise(SIGINT);
    errno = saved;
    return;
  }
  int none = 0;
  atomic_compare_exchange_strong(&first_sig, &none, sig);
  sem_post(&wake);
  errno = saved;
}

const char *signals_name(int sig) {
  static char buf[32];
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: snprintf(buf, sizeof buf, "signal %d", sig); return buf;
  }
}

int signals_received(void) { return first_sig; }

/* The helper thread: reports a signal, and in SIGNALS_EXIT mode ends the process.  It never calls
 * MPI (MPI runs with MPI_THREAD_FUNNELED); a rank that exits with a non-zero status before
 * MPI_Finalize makes mpirun (orte_abort_on_non_zero_status) or srun (--kill-on-bad-exit) end the
 * other ranks. */
static void *watcher(void *arg) {
  (void)arg;
  int reported = 0;
  for (;;) {
    while (sem_wait(&wake) != 0 && errno == EINTR) {
    }
    const int sig = first_sig;
    if (!sig) continue;
    char what[sizeof what_text];
    pthread_mutex_lock(&what_lock);
    memcpy(what, what_text, sizeof what);
    pthread_mutex_unlock(&what_lock);
    /* Already ending on an error of its own (mpirun's SIGTERM after another rank's abort, say):
     * that error is the message; end quietly. */
    if (scd_fatal_started()) _exit(128 + sig);
    if (mode == SIGNALS_EXIT) {
      /* The unfinished files go first: printing may wait on a pipe that mpirun, which sends
       * SIGKILL one second after its SIGTERM, no longer drains. */
      scd_tmpfile_remove_all();
      const int rank = comm_rank(), size = comm_size();
      fflush(stdout);
      if (size > 1)
        fprintf(stderr, "scdino: error (rank %d of %d): %s received during %s: stopped; unfinished output files "
                        "removed (finished ones are complete); run it again\n", rank, size, signals_name(sig), what);
      else
        fprintf(stderr, "scdino: error: %s received during %s: stopped; unfinished output files removed "
                        "(finished ones are complete); run it again\n", signals_name(sig), what);
      fflush(stderr);
      _exit(128 + sig);
    }
    if (!reported) {
      reported = 1;
      /* Rank 0 says it when it got the signal itself; the loop reports the agreed stop anyway. */
      log_info("%s received: every rank finishes the step in progress, then a checkpoint is written and "
               "scdino exits with status 0", signals_name(sig));
    }
  }
  return NULL;
}

static void set_what(const char *what) {
  if (!what) return;
  pthread_mutex_lock(&what_lock);
  snprintf(what_text, sizeof what_text, "%s", what);
  pthread_mutex_unlock(&what_lock);
}

enum signals_mode signals_set_mode(enum signals_mode m, const char *what) {
  const enum signals_mode old = (enum signals_mode)mode;
  set_what(what);
  mode = m;
  /* A signal that arrived while deferred ends the process now that exiting is the rule. */
  if (installed && m == SIGNALS_EXIT && first_sig) sem_post(&wake);
  return old;
}

void signals_install(const char *what) {
  set_what(what);
  if (installed) return;
  if (sem_init(&wake, 0, 0) != 0) SCD_FAIL("sem_init: %s", strerror(errno));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART; /* blocking reads and waits carry on; the loop polls the flag */
  CHECK_SYS(sigaction(SIGTERM, &sa, NULL));
  CHECK_SYS(sigaction(SIGUSR1, &sa, NULL));
  CHECK_SYS(sigaction(SIGINT, &sa, NULL));
  struct sigaction ign;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  CHECK_SYS(sigaction(SIGXFSZ, &ign, NULL));
  /* The helper must not take the signals itself: block them in it (threads inherit the mask). */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGUSR1);
  sigaddset(&block, SIGINT);
  CHECK_PTHREAD(pthread_sigmask(SIG_BLOCK, &block, &old));
  pthread_t th;
  pthread_attr_t at;
  CHECK_PTHREAD(pthread_attr_init(&at));
  CHECK_PTHREAD(pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED));
  CHECK_PTHREAD(pthread_create(&th, &at, watcher, NULL));
  CHECK_PTHREAD(pthread_attr_destroy(&at));
  CHECK_PTHREAD(pthread_sigmask(SIG_SETMASK, &old, NULL));
  installed = 1;
}
