/* grad_comm_plan.c - which all-reduce calls the gradient communicator makes (grad_comm.h): the
 * bucket-merging rule of grad_comm.c (every transport's), and the whole-step plan that
 * scdino_allreduce_perf --sizes-from-model sweeps.  Pure bookkeeping (no MPI, no device), plus the
 * log line that shows a run's calls. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/log.h"
#include "model/grad_comm.h"
#include "model/tensor.h"

size_t grad_comm_bucket_elems(size_t bucket_bytes) {
  const size_t e = (bucket_bytes ? bucket_bytes : GRAD_COMM_BUCKET_BYTES) / sizeof(float);
  return e ? e : 1;
}

void grad_comm_merge_init(struct grad_comm_merge *m, size_t bucket_bytes) {
  m->bucket = grad_comm_bucket_elems(bucket_bytes);
  m->lo = m->hi = 0;
}

int grad_comm_merge_flush(struct grad_comm_merge *m, struct grad_comm_range *out) {
  const int k = m->hi > m->lo;
  if (k) *out = (struct grad_comm_range){m->lo, m->hi - m->lo};
  m->lo = m->hi = 0;
  return k;
}

int grad_comm_merge_add(struct grad_comm_merge *m, size_t off, size_t count, struct grad_comm_range out[2]) {
  int k = 0;
  if (count == 0) return 0;
  if (m->hi > m->lo && off + count == m->lo) {
    m->lo = off; /* adjacent below the pending range (backward goes down the buffer) */
  } else if (m->hi > m->lo && off == m->hi) {
    m->hi = off + count; /* adjacent above */
  } else {
    k += grad_comm_merge_flush(m, &out[k]);
    m->lo = off;
    m->hi = off + count;
  }
  /* Send once the bucket is full, so communication starts while backward goes on. */
  if (m->hi - m->lo >= m->bucket) k += grad_comm_merge_flush(m, &out[k]);
  return k;
}

void grad_comm_sent_init(struct grad_comm_sent *s) {
  s->n = 0;
  s->cap = 64;
  s->v = xmalloc((size_t)s->cap * sizeof *s->v);
  s->gaps = xmalloc(((size_t)s->cap + 1) * sizeof *s->gaps);
}

void grad_comm_sent_push(struct grad_comm_sent *s, struct grad_comm_range r) {
  if (s->n == s->cap) {
    s->cap *= 2;
    s->v = xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
    s->gaps = xrealloc(s->gaps, ((size_t)s->cap + 1) * sizeof *s->gaps);
  }
  s->v[s->n++] = r;
}

void grad_comm_sent_free(struct grad_comm_sent *s) {
  free(s->v);
  free(s->gaps);
  s->v = s->gaps = NULL;
  s->n = s->cap = 0;
}

static int cmp_range(const void *a, const void *b) {
  const struct grad_comm_range *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

int grad_comm_gaps(struct grad_comm_range *sent, int nsent, size_t total, struct grad_comm_range *gaps) {
  if (nsent > 0) qsort(sent, (size_t)nsent, sizeof *sent, cmp_range);
  size_t at = 0;
  int k = 0;
  for (int i = 0; i < nsent; i++) {
    SCD_ASSERT(sent[i].off >= at); /* ranges never overlap */
    if (sent[i].off > at) gaps[k++] = (struct grad_comm_range){at, sent[i].off - at};
    at = sent[i].off + sent[i].count;
  }
  SCD_ASSERT(at <= total);
  if (at < total) gaps[k++] = (struct grad_comm_range){at, total - at};
  return k;
}

int grad_comm_plan(const struct grad_comm_range *ready, int nready, size_t total, size_t bucket_bytes,
                   struct grad_comm_range *calls, int max) {
  SCD_ASSERT(nready >= 0 && max >= 0);
  /* Every ready range gives at most two calls, the end one more; the gaps at most one per call + 1. */
  const size_t cap = 2 * (size_t)nready + 1;
  struct grad_comm_range *sent = xmalloc(MUL_SIZE(2 * cap + 1, sizeof *sent)), *gaps = sent + cap;
  struct grad_comm_merge m;
  grad_comm_merge_init(&m, bucket_bytes);
  int n = 0;
  for (int i = 0; i < nready; i++) {
    SCD_ASSERT(ready[i].off + ready[i].count <= total);
    n += grad_comm_merge_add(&m, ready[i].off, ready[i].count, sent + n);
  }
  n += grad_comm_merge_flush(&m, sent + n);
  for (int i = 0; i < n && i < max; i++) calls[i] = sent[i];
  /* finish() reduces what no call covered, after the others (gaps sorts sent: copied out above). */
  const int ng = grad_comm_gaps(sent, n, total, gaps);
  for (int i = 0; i < ng; i++)
    if (n + i < max) calls[n + i] = gaps[i];
  free(sent);
  return n + ng;
}

struct grad_comm_range grad_comm_tensor_range(const struct tensor_table *tt, int first, int last) {
  SCD_ASSERT(first >= 0 && first <= last && last < tt->n);
  const size_t off = tt->t[first].off;
  const size_t end = last + 1 < tt->n ? tt->t[last + 1].off : tt->size;
  return (struct grad_comm_range){off, end - off};
}

void grad_comm_log_calls(const char *who, const struct grad_comm_range *calls, int n) {
  char list[1024];
  size_t len = 0;
  list[0] = '\0';
  for (int i = 0; i < n; i++) {
    const int w = snprintf(list + len, sizeof list - len, " %zu", calls[i].count);
    if (w < 0 || (size_t)w >= sizeof list - len - 4) { /* room for " ..." */
      snprintf(list + len, sizeof list - len, " ...");
      break;
    }
    len += (size_t)w;
  }
  log_detail("gradient all-reduce %s: %d bucket call%s per step, elements in issue order:%s", who, n,
             n == 1 ? "" : "s", list);
}
