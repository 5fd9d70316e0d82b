/* heartbeat.c - the heartbeat rings that bound the long waits of studies and staging (watchdog.h). */
#include "build_config.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "core/check.h"
#include "core/watchdog.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/log.h"

#define TAG 1
#define EVERY 1.0 /* seconds between two heartbeats of a rank, at least */

struct ring {
  int on;
  MPI_Comm comm;         /* a duplicate: its messages meet no other code's */
  int pred, succ;        /* ring neighbours in comm */
  int pred_world, size;  /* the predecessor in MPI_COMM_WORLD (messages), the ring's size */
  MPI_Request send, recv;
  char out, in;          /* one byte each way, its value unused */
  double sent, heard, limit;
};

static struct ring rings[HEARTBEAT_RINGS];
static int active;       /* rings on */
static pthread_t owner;  /* the thread that may call MPI (FUNNELED): the one that began the rings */

static const char *ring_name(enum heartbeat_ring which) { return which == HEARTBEAT_WORLD ? "world" : "node"; }

void heartbeat_begin(enum heartbeat_ring which, double timeout_s) {
  struct ring *r = &rings[which];
  SCD_ASSERT(!r->on);
  if (timeout_s <= 0) return;
  MPI_Comm base = which == HEARTBEAT_WORLD ? MPI_COMM_WORLD : comm_mpi_node();
  int rank, size;
  CHECK_MPI(MPI_Comm_size(base, &size));
  if (size < 2) return;
  CHECK_MPI(MPI_Comm_dup(base, &r->comm)); /* keeps base's error handler: errors come back as codes */
  CHECK_MPI(MPI_Comm_rank(r->comm, &rank));
  r->size = size;
  r->pred = (rank + size - 1) % size;
  r->succ = (rank + 1) % size;
  MPI_Group g, world;
  CHECK_MPI(MPI_Comm_group(r->comm, &g));
  CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  CHECK_MPI(MPI_Group_translate_ranks(g, 1, &r->pred, world, &r->pred_world));
  CHECK_MPI(MPI_Group_free(&g));
  CHECK_MPI(MPI_Group_free(&world));
  if (!active) owner = pthread_self();
  SCD_ASSERT(pthread_equal(owner, pthread_self()));
  CHECK_MPI(MPI_Irecv(&r->in, 1, MPI_BYTE, r->pred, TAG, r->comm, &r->recv));
  CHECK_MPI(MPI_Issend(&r->out, 1, MPI_BYTE, r->succ, TAG, r->comm, &r->send));
  r->sent = r->heard = wtime();
  r->limit = timeout_s + HEARTBEAT_MARGIN;
  r->on = 1;
  active++;
  log_detail("heartbeat: %s ring of %d ranks begun (silence limit %g s)", ring_name(which), size, r->limit);
}

/* Take what the predecessor sent (and post the next receive); with may_send, send the next
 * heartbeat once the last was received and a second has passed. */
static void poll_ring(struct ring *r, int may_send) {
  int done = 0;
  CHECK_MPI(MPI_Test(&r->recv, &done, MPI_STATUS_IGNORE));
  const double now = wtime();
  if (done) {
    r->heard = now;
    CHECK_MPI(MPI_Irecv(&r->in, 1, MPI_BYTE, r->pred, TAG, r->comm, &r->recv));
  }
  if (r->send != MPI_REQUEST_NULL) CHECK_MPI(MPI_Test(&r->send, &done, MPI_STATUS_IGNORE)); /* NULL once done */
  if (may_send && r->send == MPI_REQUEST_NULL && now - r->sent >= EVERY) {
    CHECK_MPI(MPI_Issend(&r->out, 1, MPI_BYTE, r->succ, TAG, r->comm, &r->send));
    r->sent = now;
  }
}

void heartbeat_poll(void) {
  if (!active || !pthread_equal(owner, pthread_self())) return;
  for (int i = 0; i < HEARTBEAT_RINGS; i++)
    if (rings[i].on) poll_ring(&rings[i], 1);
}

int heartbeat_alive(enum heartbeat_ring which, double since, const char *waiting_for) {
  struct ring *r = &rings[which];
  if (!r->on) return 0;
  heartbeat_poll();
  /* Silence counts from the start of the wait: a busy rank hears its predecessor only at its own
   * progress points, which may be up to step_timeout apart. */
  const double from = r->heard > since ? r->heard : since, silent = wtime() - from;
  if (silent > r->limit) {
    char why[512];
    snprintf(why, sizeof why, "rank %d has shown no sign of life for %.3g s while this rank was %s (the %s "
             "heartbeat ring of %d ranks): it has died or been stopped, or the network hangs", r->pred_world, silent,
             waiting_for, ring_name(which), r->size);
    watchdog_expire(why);
  }
  return 1;
}

void heartbeat_end(enum heartbeat_ring which) {
  struct ring *r = &rings[which];
  if (!r->on) return;
  SCD_ASSERT(pthread_equal(owner, pthread_self()));
  /* The last heartbeat to the successor is received (its receive is always posted, and it polls
   * here too); no new one is sent.  Not fed to the watchdog: a rank that dies now ends the job. */
  while (r->send != MPI_REQUEST_NULL) {
    poll_ring(r, 0);
    const struct timespec ts = {0, 1000000};
    if (r->send != MPI_REQUEST_NULL) nanosleep(&ts, NULL);
  }
  /* Every rank's heartbeats are received once all have passed here: the posted receive is the
   * last one, and matches nothing. */
  CHECK_MPI(MPI_Barrier(r->comm));
  CHECK_MPI(MPI_Cancel(&r->recv));
  CHECK_MPI(MPI_Wait(&r->recv, MPI_STATUS_IGNORE));
  CHECK_MPI(MPI_Comm_free(&r->comm));
  r->on = 0;
  active--;
}
