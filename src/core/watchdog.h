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
 * or srun end the other ranks.  (NCCL collectives have their own watchdog in
 * cuda/comm/grad_comm_nccl.c.)
 *
 * Waits that may last longer than the timeout (a group of a study waiting for the other groups'
 * sets, a node's ranks waiting for local rank 0's copy of the shards) cannot be bounded by the
 * timeout: they are fed as progress only while the ranks they wait for show life.  That evidence is
 * a heartbeat ring (heartbeat.c) over the ranks of the wait, active for the whole phase that ends in
 * it: every rank keeps one synchronous-mode message (MPI_Issend) to its successor (rank + 1 mod n)
 * outstanding, sending the next, at most one a second, at its first progress point after the last
 * was received, and one receive from its predecessor posted.  A live rank reaches a progress point
 * at least every step_timeout (or its own watchdog ends the job), so a predecessor silent for
 * longer than step_timeout plus a margin has died or been stopped: a rank that waits then ends the
 * job, naming it.  When every live rank waits, the successor of a dead one is among them, so a
 * stopped rank ends the job within step_timeout plus the margin of the last live rank's wait.  Busy
 * ranks only send and receive: they never judge, so a long set is never cut short by a slow one.
 * MPI is FUNNELED: the ring is polled by the main thread only (progress points of other threads
 * skip it).  Outside these phases there is no ring and no extra message. */
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

/* The heartbeat rings: over MPI_COMM_WORLD (a study's groups) and over the current node
 * communicator (staging).  At most one of each at a time. */
enum heartbeat_ring { HEARTBEAT_WORLD, HEARTBEAT_NODE, HEARTBEAT_RINGS };
/* Begin a ring over its communicator (collective there; nothing with timeout_s <= 0 or a single
 * rank); the rank's waits in it are then bounded by timeout_s plus HEARTBEAT_MARGIN of silence. */
void heartbeat_begin(enum heartbeat_ring ring, double timeout_s);
/* End it (collective): every rank's last heartbeat delivered, then a barrier, then the last receive
 * cancelled.  A rank that dies here leaves the others unfed: the watchdog ends the job. */
void heartbeat_end(enum heartbeat_ring ring);
/* Send and receive on every active ring (main thread only; nothing elsewhere or without rings). */
void heartbeat_poll(void);
/* For a rank waiting since `since` (wtime) in a collective of the ring: 1 when the ring is active and
 * its predecessor has shown life within the limit (the caller feeds the watchdog), 0 when the ring
 * is not active (the wait is bounded by the watchdog alone); ends the job, naming the predecessor,
 * when it has been silent for longer.  waiting_for says what the rank waits for ("waiting for ..."). */
int heartbeat_alive(enum heartbeat_ring ring, double since, const char *waiting_for);
#define HEARTBEAT_MARGIN 5.0 /* seconds: the 1 s between heartbeats and the watchdog's own 1 s granularity, twice */

#endif
