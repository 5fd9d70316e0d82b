/* op_timers.cu - per-kind op timing with CUDA events (ops->profile, backend_cuda_set_profiling).
 *
 * Off by default: an event pair around every op costs time.  On, each op records a pair from a
 * pool on the compute stream; reading the times waits for the last one and sums the intervals. */
#include "build_config.h"

#include <string.h>

#include "cuda_internal.h"

struct prof_pair {
  cudaEvent_t a, b;
  int kind;
};
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
  }
  prof_used = 0;
}

int prof_begin(int kind) {
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
    prof_calls = 0;
  }
}

void prof_set(int on) {
  if (!on && prof_on) prof_flush();
  prof_on = on != 0;
}
