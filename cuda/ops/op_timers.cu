/* op_timers.cu - per-kind op timing with CUDA events (ops->profile, backend_cuda_set_profiling).
 *
 * Off by default: an event pair around every op costs time.  On, each op records a pair from a
 * pool on the compute stream; reading the times waits for the last one and sums the intervals,
 * per kind and per op name (the backend function that queued it), so a profile says which ops to
 * work on. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "cuda/ops/cuda_internal.h"

struct prof_pair {
  cudaEvent_t a, b;
  int kind, name;
};

/* Per-name sums: names are the __func__ strings of the backend's functions (static storage, so the
 * pointer identifies the name). */
#define PROF_NAMES 128
struct prof_name {
  const char *name;
  int kind;
  long calls;
  double s;
};
static struct prof_name prof_names[PROF_NAMES];
static int prof_nnames;

static int prof_name_index(const char *name, int kind) {
  for (int i = 0; i < prof_nnames; i++)
    if (prof_names[i].name == name && prof_names[i].kind == kind) return i;
  if (prof_nnames == PROF_NAMES) return PROF_NAMES - 1; /* more names than slots: the last sums them */
  prof_names[prof_nnames].name = name;
  prof_names[prof_nnames].kind = kind;
  return prof_nnames++;
}
#define PROF_POOL 4096
static struct prof_pair *prof_pool;
static int prof_used, prof_on;
static double prof_acc[3];
static long prof_calls;

static void prof_flush(void) {
  if (!prof_used) return;
  CHECK_CUDA(cudaEventSynchronize(prof_pool[prof_used - 1].b));
  for (int i = 0; i < prof_used; i++) {
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, prof_pool[i].a, prof_pool[i].b));
    prof_acc[prof_pool[i].kind] += ms * 1e-3;
    prof_names[prof_pool[i].name].s += ms * 1e-3;
    prof_names[prof_pool[i].name].calls++;
  }
  prof_used = 0;
}

int prof_begin(int kind, const char *name) {
  prof_calls++;
  if (!prof_on) return -1;
  if (!prof_pool) {
    prof_pool = (struct prof_pair *)xcalloc(PROF_POOL, sizeof *prof_pool);
    for (int i = 0; i < PROF_POOL; i++) {
      CHECK_CUDA(cudaEventCreate(&prof_pool[i].a));
      CHECK_CUDA(cudaEventCreate(&prof_pool[i].b));
    }
  }
  if (prof_used == PROF_POOL) prof_flush();
  prof_pool[prof_used].kind = kind;
  prof_pool[prof_used].name = prof_name_index(name, kind);
  CHECK_CUDA(cudaEventRecord(prof_pool[prof_used].a, cu.stream));
  return prof_used;
}

void prof_end(int i) {
  if (i < 0) return;
  CHECK_CUDA(cudaEventRecord(prof_pool[i].b, cu.stream));
  prof_used = i + 1;
}

void prof_read(struct ops_profile *p, int reset) {
  prof_flush();
  if (p) {
    p->gemm_s = prof_acc[P_GEMM];
    p->attn_s = prof_acc[P_ATTN];
    p->other_s = prof_acc[P_OTHER];
    p->calls = prof_calls;
  }
  if (reset) {
    memset(prof_acc, 0, sizeof prof_acc);
    memset(prof_names, 0, sizeof prof_names);
    prof_nnames = 0;
    prof_calls = 0;
  }
}

void prof_set(int on) {
  if (!on && prof_on) prof_flush();
  prof_on = on != 0;
}

static int prof_by_time(const void *a, const void *b) {
  const double x = ((const struct prof_name *)a)->s, y = ((const struct prof_name *)b)->s;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The `top` op names with the most GPU time since the last reset (all of them for top <= 0), with
 * calls, total and mean time and the share of the timed total; the sums are not reset. */
void prof_report(FILE *f, int top) {
  prof_flush();
  struct prof_name sorted[PROF_NAMES];
  const int n = prof_nnames;
  memcpy(sorted, prof_names, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, prof_by_time);
  double total = 0;
  for (int i = 0; i < n; i++) total += sorted[i].s;
  static const char *kinds[] = {"gemm", "attention", "other"};
  fprintf(f, "  %-28s %-9s %6s %10s %10s %6s\n", "op", "kind", "calls", "total ms", "mean us",
          "share");
  for (int i = 0; i < n && (top <= 0 || i < top); i++)
    fprintf(f, "  %-28s %-9s %6ld %10.3f %10.1f %5.1f%%\n", sorted[i].name, kinds[sorted[i].kind],
            sorted[i].calls, 1e3 * sorted[i].s, sorted[i].calls ? 1e6 * sorted[i].s / sorted[i].calls : 0.0,
            total > 0 ? 100 * sorted[i].s / total : 0.0);
}
