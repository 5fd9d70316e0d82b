/* cpu_backend.h - internal declarations shared by the files of the CPU backend. */
#ifndef SCDINO_CPU_BACKEND_H
#define SCDINO_CPU_BACKEND_H

#include <stddef.h>

#include "model/ops.h"

/* fp32-only kernels (cpu_optim.c); meanings as the ops of the same name in ops.h. */
/* ops->arithmetic of the CPU backend: the BLAS library, its kernels, the C library (erf, exp). */
void cpu_arithmetic(char *buf, size_t n);
void cpu_seg_norms(double *norms_host, const float *buf, const struct ops_seg *segs, int nseg);
void cpu_seg_sumsq(double *sumsq_host, const float *buf, const struct ops_seg *segs, int nseg);
void cpu_seg_scale(float *buf, const struct ops_seg *segs, const float *scale_host, int nseg);
void cpu_adamw(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs,
               int nseg, double beta1, double beta2, double eps);
void cpu_ema(float *dst, const float *src, size_t n, double m);
void cpu_center_update(float *center, const float *tsum, int K, float count, double m);

#endif
