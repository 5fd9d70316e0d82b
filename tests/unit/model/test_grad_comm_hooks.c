/* test_grad_comm_hooks.c - the gradient communicator (grad_comm.c) on one rank over a transport that
 * writes down its calls: which start calls the ranges backward hands over become (merged into
 * buckets, sent when full or when a range is not adjacent, the rest at finish), poll after each
 * non-empty range, finish's gaps between group(1) and group(0) then one wait_all whose seconds go to
 * wait_seconds, an abandoned step's pending range dropped, no call with an empty range or buffer;
 * a transport that is not single_rank called for nothing on one rank; the sharded communicator
 * starting reduce-scatters, never all-gathering on one rank, and gathering its slice on the host;
 * the table's names. */
#include "build_config.h"

#include <stdio.h>
#include <string.h>

#include "core/comm.h"
#include "model/grad_comm.h"
#include "model/ops.h"
#include "model/shard_plan.h"
#include "tests/fixtures/testutil.h"

#define N 300

struct rec {
  char log[1024];
  int destroyed;
};

static void note(void *t, const char *fmt, size_t a, size_t b) {
  struct rec *r = t;
  const size_t len = strlen(r->log);
  snprintf(r->log + len, sizeof r->log - len, fmt, a, b);
}

static void r_begin(void *t, size_t n) { note(t, " B%zu", n, 0); }
static void r_allreduce(void *t, float *g, size_t off, size_t n) { (void)g; note(t, " A%zu+%zu", off, n); }
static void r_scatter(void *t, float *g, size_t off, size_t n) { (void)g; note(t, " R%zu+%zu", off, n); }
static void r_poll(void *t) { note(t, " P", 0, 0); }
static void r_group(void *t, int open) { note(t, " G%zu", (size_t)open, 0); }
static double r_wait(void *t, float *g, size_t n) {
  (void)g;
  note(t, " W%zu", n, 0);
  return 0.5;
}
static void r_sum(void *t, float *buf, size_t n) { (void)buf; note(t, " S%zu", n, 0); }
static void r_gather(void *t, float *buf) { (void)buf; note(t, " X", 0, 0); }
static void r_destroy(void *t) { ((struct rec *)t)->destroyed = 1; }

static struct grad_comm_transport rec_transport = {
    .name = "rec", .begin_step = r_begin, .start_allreduce = r_allreduce, .start_reduce_scatter = r_scatter,
    .poll = r_poll, .group = r_group, .wait_all = r_wait, .allreduce_sum = r_sum, .allgather = r_gather,
    .destroy = r_destroy,
};

static void expect_log(struct rec *r, const char *what, const char *want) {
  T_CHECK(!strcmp(r->log, want), "%s: calls '%s', expected '%s'", what, r->log, want);
  r->log[0] = '\0';
}

/* A step of backward's shape: merged up to the 100-element bucket, a range not adjacent to the
 * pending one, an empty range, and two ranges never handed over. */
static void step(struct grad_comm *gc, float *g) {
  gc->begin_step(gc, g, N);
  const size_t ranges[][2] = {{290, 10}, {270, 20}, {240, 30}, {200, 40}, {150, 50}, {0, 0}, {50, 50}};
  for (int i = 0; i < 7; i++) gc->bucket_ready(gc, ranges[i][0], ranges[i][1]);
  gc->finish(gc);
}

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  t_init(argc, argv);
  T_CHECK(comm_size() == 1, "run on one rank");
  const struct ops *ops = backend_cpu();
  float g[N], want[N];
  for (int i = 0; i < N; i++) g[i] = want[i] = 0.25f * (float)(i - 100);
  struct rec r = {"", 0};

  /* single_rank: every call made, no division on one rank. */
  rec_transport.single_rank = 1;
  struct grad_comm *gc = grad_comm_create(ops, 100 * sizeof(float), NULL, &rec_transport, &r);
  T_CHECK(!strcmp(gc->name, "rec") && gc->world == 1 && !gc->plan && !gc->allgather, "all-reduce table");
  step(gc, g);
  expect_log(&r, "step", " B300 P P P A200+100 P P A150+50 P A50+50 G1 A0+50 A100+50 G0 W300");
  T_CHECK(gc->wait_seconds == 0.5, "wait_seconds %g: wait_all's 0.5 s", gc->wait_seconds);
  T_CHECK(!memcmp(g, want, sizeof g), "one rank: the gradients changed");
  gc->begin_step(gc, g, N);
  gc->bucket_ready(gc, 250, 50);
  gc->begin_step(gc, g, N); /* the first step abandoned: its pending range is not sent */
  gc->finish(gc);
  expect_log(&r, "abandoned step", " B300 P B300 G1 A0+300 G0 W300");
  gc->allreduce_sum(gc, g, 0);
  gc->allreduce_sum(gc, g, 7);
  expect_log(&r, "centre sums", " S7");
  T_CHECK(gc->wait_seconds >= 1.0, "wait_seconds %g: two waits and a sum", gc->wait_seconds);
  gc->destroy(gc);
  T_CHECK(r.destroyed, "the transport was not destroyed");

  /* Not single_rank: one rank makes no call but begin_step. */
  rec_transport.single_rank = 0;
  gc = grad_comm_create(ops, 100 * sizeof(float), NULL, &rec_transport, &r);
  step(gc, g);
  gc->allreduce_sum(gc, g, 7);
  expect_log(&r, "one rank, not single_rank", " B300");
  T_CHECK(gc->wait_seconds == 0, "wait_seconds %g without waits", gc->wait_seconds);
  gc->destroy(gc);

  /* Sharded, one rank owning [0, N): reduce-scatters; no all-gather; the slice gathered as it is. */
  rec_transport.single_rank = 1;
  size_t lo[2] = {0, N};
  struct shard_plan plan = {.world = 1, .rank = 0, .size = N, .lo = lo, .max_slice = N};
  gc = grad_comm_create(ops, 0, &plan, &rec_transport, &r);
  T_CHECK(!strcmp(gc->name, "rec-shard") && gc->plan == &plan && gc->allgather && gc->gather_slice, "shard table");
  step(gc, g);
  expect_log(&r, "sharded step, 4 MiB buckets", " B300 P P P P P R150+150 P R50+50 G1 R0+50 R100+50 G0 W300");
  gc->allgather(gc, g);
  expect_log(&r, "all-gather on one rank", "");
  float full[N];
  memset(full, 0, sizeof full);
  gc->gather_slice(gc, g, full);
  T_CHECK(!memcmp(full, want, sizeof full), "gather_slice: the slice");
  const double mine[2] = {1.5, -2.0};
  const int counts[1] = {2};
  double all[2] = {0, 0};
  gc->allgather_f64(gc, mine, 2, counts, all);
  T_CHECK(all[0] == 1.5 && all[1] == -2.0, "allgather_f64: %g %g", all[0], all[1]);
  gc->destroy(gc);

  const int status = t_finish();
  comm_finalize();
  return status;
}
