/* watchdog.h - ends a rank that makes no progress (&system step_timeout), in every calculation,
 * and a rank that waits for ranks that show no sign of life.
 *
 * A rank waiting in a collective for a peer that died without MPI noticing, or stuck itself (a hung
 * file system, a deadlock), would otherwise wait until the job's time limit.  calc_run watches the
 * whole calculation; the training loop calls watchdog_progress after every step and around
 * checkpoint writes, the progress printer (progress.h) at every unit of prepare's, features' and
 * kNN's work, the TIFF tree walk at every folder; a helper thread ends the rank when the time since
 * the last call exceeds the timeout: it prints the rank, what it was doing
 * and for how long, removes unfinished temporary files and exits with status 1, which makes mpirun
 * or srun end the other ranks.  (NCCL collectives have their own watchdog in cuda/grad_comm_nccl.c.)
 *
 * Waits that may last longer than the timeout are bounded by heartbeat rings instead (heartbeat.h). */
#ifndef SCDINO_WATCHDOG_H
#define SCDINO_WATCHDOG_H

#include <stdint.h>

#include "core/check.h"

/* Start watching with this timeout in seconds (<= 0: do nothing).  A start while watching only
 * counts (and marks progress): each start needs its stop. */
void watchdog_start(double timeout_s);
/* Progress: doing `what` (copied, e.g. "a training step") at global step `step` (-1: none) since now.
 * On the main thread it also polls the heartbeat rings. */
void watchdog_progress(const char *what, int64_t step);
/* Stop watching (joins the thread). */
void watchdog_stop(void);
/* End this rank now as the watchdog does (the message, temporary files removed, exit status 1, no
 * MPI): `why` says what no longer lives. */
SCD_NORETURN void watchdog_expire(const char *why);

#endif
