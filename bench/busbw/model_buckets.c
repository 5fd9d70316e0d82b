/* model_buckets.c - the gradient all-reduce calls of the ViT + DINO head described by a deck's
 * &model.  Nothing here restates the model or the bucketing: the tensor table is the trainer's
 * (dino_build_tables), the ranges and their order are backward's (dino_ready_group,
 * grad_comm_tensor_range) and the merging is the communicators' (grad_comm_plan), so the benchmark
 * cannot drift from what the trainer sends. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/busbw/model_buckets.h"
#include "core/check.h"
#include "input/config.h"
#include "model/dino_model.h"
#include "model/grad_comm.h"
#include "model/model_config.h"

/* Name of a call: the ready groups it covers joined by '+', or the first and last of them. */
static void call_name(const struct vit *v, const struct grad_comm_range *ready, int nready,
                      const struct grad_comm_range *call, char *buf) {
  int first = -1, last = -1;
  for (int k = 0; k < nready; k++) {
    if (ready[k].count == 0 || ready[k].off < call->off || ready[k].off + ready[k].count > call->off + call->count)
      continue;
    if (first < 0) first = k;
    last = k;
  }
  if (first < 0) {
    snprintf(buf, BENCH_MODEL_NAME, "(not covered by a range)"); /* a gap finish() reduces */
    return;
  }
  char a[32], b[32];
  size_t len = 0;
  buf[0] = '\0';
  for (int k = first; k <= last; k++) {
    const int w = snprintf(buf + len, BENCH_MODEL_NAME - len, "%s%s", k > first ? "+" : "",
                           dino_ready_name(v, k, a, sizeof a));
    if (w < 0 || (size_t)w >= BENCH_MODEL_NAME - len) {
      snprintf(buf, BENCH_MODEL_NAME, "%s..%s (%d ranges)", dino_ready_name(v, first, a, sizeof a),
               dino_ready_name(v, last, b, sizeof b), last - first + 1);
      return;
    }
    len += (size_t)w;
  }
}

int bench_model_buckets(const struct config *cfg, size_t sizes[], char (*names)[BENCH_MODEL_NAME], int max) {
  if (cfg->data.n_channels == 0) return -1;
  struct dino_spec spec;
  model_config_spec(&spec, cfg, cfg->data.n_channels);
  struct tensor_table tt;
  struct vit v;
  struct head h;
  dino_build_tables(&spec, &tt, &v, &h);

  /* The ranges backward hands to the communicator, in its order (train_step.c's grads_ready). */
  const int nready = dino_ready_count(&v);
  struct grad_comm_range *ready = xmalloc(MUL_SIZE((size_t)nready, sizeof *ready));
  for (int k = 0; k < nready; k++) {
    int first, last;
    dino_ready_group(&v, &h, k, &first, &last);
    ready[k] = grad_comm_tensor_range(&tt, first, last);
  }
  /* The calls they become: count them first, then fill. */
  const int ncalls = grad_comm_plan(ready, nready, tt.size, 0, NULL, 0);
  struct grad_comm_range *calls = xmalloc(MUL_SIZE((size_t)ncalls, sizeof *calls));
  const int filled = grad_comm_plan(ready, nready, tt.size, 0, calls, ncalls);
  SCD_ASSERT(filled == ncalls);
  for (int i = 0; i < ncalls && i < max; i++) {
    sizes[i] = calls[i].count;
    if (names) call_name(&v, ready, nready, &calls[i], names[i]);
  }
  free(calls);
  free(ready);
  vit_free(&v);
  tensors_free(&tt);
  return ncalls;
}
