/* tests/gpu/gpu_util.h - helpers of the GPU tests: the CUDA backend or a skip, transfers in the
 * backend's activation type, bf16 and fp16 rounding on the host, random data. */
#ifndef SCDINO_GPU_UTIL_H
#define SCDINO_GPU_UTIL_H

#include <stddef.h>

#include "core/rng.h"
#include "model/ops.h"

/* The CUDA table for precision ('fp32', 'bf16', 'fp16'); prints why and exits 77 (skip) without a
 * GPU. */
const struct ops *gpu_or_skip(const char *precision);
/* Whether o stores activations in bf16, in fp16, in either (16 bits). */
int gpu_is_bf16(const struct ops *o);
int gpu_is_f16(const struct ops *o);
int gpu_is_half(const struct ops *o);
/* x rounded to o's activation type (round to nearest even for bf16 and fp16; fp16 overflows to
 * infinity past 65504, and has subnormals down to 2^-24), in place; gpu_f16_round one value. */
void gpu_round(const struct ops *o, float *x, size_t n);
float gpu_f16_round(float x);
/* Device activations from h (rounded in place first, so host references see the same values). */
void *gpu_act_up(const struct ops *o, float *h, size_t n);
/* Device activations -> host floats. */
void gpu_act_down(const struct ops *o, float *h, const void *d, size_t n);
/* fp32 device buffers. */
float *gpu_f32_up(const struct ops *o, const float *h, size_t n);
void gpu_f32_down(const struct ops *o, float *h, const float *d, size_t n);
/* Fill device activations with NaN (outputs that must be overwritten entirely). */
void gpu_act_poison(const struct ops *o, void *d, size_t n);
/* Host arrays: scale * N(0,1), uniform in [lo, hi), zeros. */
float *gpu_randn(struct rng *r, size_t n, float scale);
float *gpu_randu(struct rng *r, size_t n, float lo, float hi);
float *gpu_zeros(size_t n);
float *gpu_dup(const float *x, size_t n);
/* Relative L2 error of n floats, recorded as a check against tol, printed with -v; NaN fails. */
double gpu_cmp(const char *what, const float *ours, const float *ref, size_t n, double tol);
/* Bitwise equality of n floats (ops whose arithmetic is specified to the rounding). */
void gpu_cmp_exact(const char *what, const float *ours, const float *ref, size_t n);

#endif
