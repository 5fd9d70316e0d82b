/* watchdog.h - ends a training rank that makes no progress (&system step_timeout).
 *
 * A rank waiting in a collective for a peer that died without MPI noticing, or stuck itself (a hung
 * file system, a deadlock), would otherwise wait until the job's time limit.  The training loop
 * calls watchdog_progress after every step and around checkpoint writes; a helper thread ends the
 * rank when the time since the last call exceeds the timeout: it prints the rank, what it was doing
 * and for how long, removes unfinished temporary files and exits with status 1, which makes mpirun
 * or srun end the other ranks.  (NCCL collectives have their own watchdog in cuda/grad_comm_nccl.c.) */
#ifndef SCDINO_WATCHDOG_H
#define SCDINO_WATCHDOG_H

#include <stdint.h>

/* Start watching with this timeout in seconds (<= 0: do nothing). */
void watchdog_start(double timeout_s);
/* Progress: doing `what` (static text, e.g. "step") at global step `step` since now. */
void watchdog_progress(const char *what, int64_t step);
/* Stop watching (joins the thread). */
void watchdog_stop(void);

#endif
