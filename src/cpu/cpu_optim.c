/* cpu_optim.c - fp32 CPU kernels of the optimizer side: segment norms and scaling, AdamW, EMA, centre. */
#include "build_config.h"

#include <math.h>
#include <stddef.h>

#include "cpu/cpu_backend.h"
#include "cpu/kern.h"

/* Elements per partial sum of a norm: the partials are added in block order, so a norm does not
 * depend on the thread count (an OpenMP reduction's order does) nor on the rank count (ops.h). */
#define NORM_BLOCK OPS_NORM_BLOCK

static double block_sumsq(const float *x, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
  return ss;
}

void cpu_seg_norms(double *norms_host, const float *buf, const struct ops_seg *segs, int nseg) {
  for (int s = 0; s < nseg; s++) {
    const float *x = buf + segs[s].off;
    const size_t n = segs[s].n, nblk = (n + NORM_BLOCK - 1) / NORM_BLOCK;
    if (nblk <= 1) { /* most tensors: no team for one block */
      norms_host[s] = sqrt(block_sumsq(x, n));
      continue;
    }
    double *part = cpu_scratch(0, nblk * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblk; b++)
      part[b] = block_sumsq(x + b * NORM_BLOCK, b + 1 < nblk ? NORM_BLOCK : n - b * NORM_BLOCK);
    double ss = 0;
    for (size_t b = 0; b < nblk; b++) ss += part[b];
    norms_host[s] = sqrt(ss);
  }
}

void cpu_seg_sumsq(double *sumsq_host, const float *buf, const struct ops_seg *segs, int nseg) {
#pragma omp parallel for schedule(dynamic, 16)
  for (int s = 0; s < nseg; s++) sumsq_host[s] = block_sumsq(buf + segs[s].off, segs[s].n);
}

void cpu_seg_scale(float *buf, const struct ops_seg *segs, const float *scale_host, int nseg) {
  for (int s = 0; s < nseg; s++) {
    float *x = buf + segs[s].off;
    const size_t n = segs[s].n;
    const float c = scale_host[s];
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= c;
  }
}

void cpu_adamw(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs,
               int nseg, double beta1, double beta2, double eps) {
  /* Python floats upstream: 1 - beta is formed in double, then every scalar is rounded to fp32. */
  const float b1 = (float)beta1, b2 = (float)beta2, omb1 = (float)(1.0 - beta1),
              omb2 = (float)(1.0 - beta2), e = (float)eps;
  for (int s = 0; s < nseg; s++) {
    const size_t o = segs[s].off, n = segs[s].n;
    const float decay = segs[s].decay, step = segs[s].step_size, bc2 = segs[s].bc2_sqrt;
    float *ps = p + o, *ms = m + o, *vs = v + o;
    const float *gs = g + o;
    /* The same float operations, in the same order, as torch.optim.AdamW (single-tensor path). */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
      const float gi = gs[i];
      const float pi = ps[i] * decay;
      const float mi = ms[i] * b1 + gi * omb1;
      const float vi = vs[i] * b2 + omb2 * gi * gi;
      const float denom = sqrtf(vi) / bc2 + e;
      ms[i] = mi;
      vs[i] = vi;
      ps[i] = pi + (-step) * (mi / denom);
    }
  }
}

void cpu_ema(float *dst, const float *src, size_t n, double m) {
  const float a = (float)m, b = (float)(1.0 - m);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) dst[i] = dst[i] * a + b * src[i];
}

void cpu_center_update(float *center, const float *tsum, int K, float count, double m) {
  const float a = (float)m, b = (float)(1.0 - m);
  for (int k = 0; k < K; k++) center[k] = center[k] * a + (tsum[k] / count) * b;
}
