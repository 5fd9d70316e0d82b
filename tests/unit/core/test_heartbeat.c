/* tests/unit/core/test_heartbeat.c - the heartbeat rings that bound the long waits (watchdog.h),
 * run under mpirun by tests/faults/stopped_rank.sh:
 *
 *   test_heartbeat node|world alive|stop
 *
 * node: the node's local rank 0 works while the others wait in comm_node_bcast (staging's wait);
 * world: every rank is a group of one (a study's groups), rank 1 works while the others wait in
 * comm_all_any (the study's end).  alive: the worker reports progress every 0.2 s for 12 s, longer
 * than step_timeout (2 s) plus the margin: the waits must last, every rank exits 0 after the ring's
 * end.  stop: the worker stops itself (SIGSTOP) after 1 s of work: a waiting rank must end the job
 * with exit 1, naming the stopped rank.  The verdicts are the exit status and the message; the
 * shell test's only time limit is its safety timeout. */
#include "build_config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/comm.h"
#include "core/watchdog.h"
#include "core/log.h"

#define STEP_TIMEOUT 2.0

static void work(int stop) {
  const double t0 = wtime();
  for (int i = 0;; i++) {
    watchdog_progress("a piece of work", i);
    if (stop && wtime() - t0 > 1.0) {
      fprintf(stderr, "test_heartbeat: world rank %d stops itself\n", comm_get()->world_rank);
      fflush(stderr);
      raise(SIGSTOP);
    }
    if (wtime() - t0 > 12.0) return;
    const struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
  }
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "node") && strcmp(argv[1], "world")) ||
      (strcmp(argv[2], "alive") && strcmp(argv[2], "stop"))) {
    fprintf(stderr, "usage: test_heartbeat node|world alive|stop\n");
    return 2;
  }
  const int node = !strcmp(argv[1], "node"), stop = !strcmp(argv[2], "stop");
  comm_init(&argc, &argv);
  log_init(comm_rank(), 1);
  watchdog_start(STEP_TIMEOUT);
  int got = 0;
  if (node) {
    heartbeat_begin(HEARTBEAT_NODE, STEP_TIMEOUT);
    int v = 0;
    if (comm_get()->local_rank == 0) {
      work(stop);
      v = 42;
    }
    comm_node_bcast(&v, sizeof v, "waiting for local rank 0's work");
    heartbeat_end(HEARTBEAT_NODE);
    got = comm_get()->local_size == 1 || v == 42;
  } else {
    heartbeat_begin(HEARTBEAT_WORLD, STEP_TIMEOUT);
    const int group = comm_group_begin(1);
    if (group == 1) work(stop);
    comm_group_end();
    got = comm_all_any(comm_rank() == 1, "waiting for rank 1's work") == 1;
    heartbeat_end(HEARTBEAT_WORLD);
  }
  watchdog_stop();
  printf("test_heartbeat: world rank %d: %s\n", comm_rank(), got ? "ok" : "WRONG VALUE");
  comm_finalize();
  return got ? 0 : 1;
}
