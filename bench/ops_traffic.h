/* bench/ops_traffic.h - count the bytes and FLOPs of every op a step calls, by wrapping an op table.
 *
 * The benchmarks time a step; these counts say what the time should be at best.  Each op is charged
 * the fewest bytes it must move through device memory: every input read once, every output written
 * once, an accumulated output (+=) read and written.  Work inside an op that the interface does not
 * show (the GEMM attention's score matrices, cuBLASLt's workspace, the bf16 copies of the weights)
 * is not counted, so the sum is the floor of this op split: only fusing ops moves it lower.
 * FLOPs: 2 per multiply-add of the GEMMs (linear, matmul) and of attention (QK^T and PV forward; the
 * four products of the backward).  Classes follow struct ops_profile: GEMM, attention, other. */
#ifndef SCDINO_OPS_TRAFFIC_H
#define SCDINO_OPS_TRAFFIC_H

#include <stdio.h>

#include "model/ops.h"

enum { TRAFFIC_GEMM, TRAFFIC_ATTN, TRAFFIC_OTHER, TRAFFIC_CLASSES };

struct ops_traffic {
  double bytes[TRAFFIC_CLASSES]; /* device memory, as the op interface moves it */
  double flops[TRAFFIC_CLASSES];
  double host_bytes;             /* upload + download (the host link, not device memory) */
  double floor_s[TRAFFIC_CLASSES]; /* sum over calls of max(flops / peak, bytes / bandwidth) */
  long calls[TRAFFIC_CLASSES];
};

/* A table that calls inner's ops and counts them.  act_bytes: the width charged for one activation
 * element (and for a weight read by a GEMM); 0 takes inner->act_size.  One wrapped table per
 * process (the counters are static: op functions have no context argument). */
const struct ops *ops_traffic_wrap(const struct ops *inner, size_t act_bytes);

/* The peaks floor_s is counted against (FLOP/s, bytes/s; until set, floor_s stays 0). */
void ops_traffic_set_peaks(double flops_per_s, double bytes_per_s);

/* The counts since the last reset (reset != 0 zeroes them after reading; t may be NULL). */
void ops_traffic_read(struct ops_traffic *t, int reset);

/* One op's counts since the last reset, by its name in struct ops ("linear_fwd"); 0: no such op. */
int ops_traffic_op(const char *name, double *bytes, double *flops, long *calls);

/* One line per op that moved anything since the last reset, most bytes first: calls, GB, share. */
void ops_traffic_print_ops(FILE *f, const char *indent);

#endif
