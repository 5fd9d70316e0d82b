/* signals.h - what SIGTERM, SIGUSR1 and SIGINT do (preemption, Slurm --signal, Ctrl-C).
 *
 * Two modes:
 *   SIGNALS_EXIT   (prepare, features, knn, attention, set-up): the rank that gets the signal prints
 *                  it, removes its unfinished temporary files (outputs are only ever renamed into
 *                  place complete) and exits with 128 + the signal number, which ends the job.
 *   SIGNALS_DEFER  (the training loop): the signal only asks for a stop (signals_received); the
 *                  ranks agree on it in the per-step all-reduce, finish the step, write a
 *                  checkpoint and exit 0.
 * A second SIGINT always ends the process at once (killed by SIGINT, as Ctrl-C twice should).
 * SIGXFSZ is ignored, so a file-size limit (ulimit -f) fails the write with EFBIG, which the writer
 * reports naming the file, instead of killing the rank.
 *
 * The handler is async-signal-safe: it stores the signal number and
 * posts a semaphore; a helper thread does the printing and, in SIGNALS_EXIT mode, the exit. */
#ifndef SCDINO_SIGNALS_H
#define SCDINO_SIGNALS_H

enum signals_mode { SIGNALS_EXIT = 0, SIGNALS_DEFER = 1 };

/* Install the handlers and start the helper thread (once per process; later calls only set what).
 * what names the running calculation in messages ("calculation 'prepare'"). */
void signals_install(const char *what);
/* Switch mode; what as for signals_install (NULL keeps the current text).  Returns the old mode. */
enum signals_mode signals_set_mode(enum signals_mode mode, const char *what);
/* The first of SIGTERM / SIGUSR1 / SIGINT this process received, or 0. */
int signals_received(void);
/* "SIGTERM", "SIGUSR1", "SIGINT", else "signal N" (static storage for the three, buf otherwise). */
const char *signals_name(int sig);

#endif
