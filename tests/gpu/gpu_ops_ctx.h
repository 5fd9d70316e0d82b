/* gpu_ops_ctx.h - what the files of tests/gpu/test_gpu_ops share: the two backends, the random
 * stream, the tolerance and tag of the precision being run, and the checks kept in other files. */
#ifndef SCDINO_GPU_OPS_CTX_H
#define SCDINO_GPU_OPS_CTX_H

#include <stdio.h>

#include "core/rng.h"
#include "model/ops.h"

extern const struct ops *cpu, *g; /* the CPU reference and the CUDA table under test */
extern struct rng R;
extern double TOL; /* relative L2 tolerance of this precision */
extern char tag[32];  /* the precision (and attention) being run, for check names */

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

/* test_gpu_fused.c: the fused ops against the plain ones (bit for bit) and the CPU. */
void check_fused_residual_ln(int B, int rps, int D, int with_s);
void check_gelu_bias(int rows, int cols, int ap);
void check_adamw_copies(void);
/* test_gpu_gelu_gemm.c: GELU in the GEMMs, against the CPU's pairs (emulated: every probe verdict). */
void check_gelu_gemm(int emulated);
/* test_gpu_ops.c: attention against the CPU's (and its state, forward and backward); a Linear's
 * forward and backward (bias: with one). */
void check_attention(int B, int N, int H, int hd);
void check_linear(int M, int N, int K, int bias);
/* test_gpu_kernels.c: the flash kernels' tile widths and options (bf16, fp16; what names the
 * precision and kernel set in the checks); the 16-bit exact GELU within an ulp of double, forward
 * (y, from dx) and backward (from dgy). */
void check_flash_tiles(const char *what);
void check_gelu_ulp(const float *x, const float *gy, const float *y, const void *dx, const void *dgy, size_t n);
/* test_gpu_kernels.c: attention on the shapes of every path (hd 16 to 128, odd ones); fp16 with
 * the kernel sets of compute capability 7.5 and 7.0 (&gpu arch), left at the GPU's own after. */
void check_attention_cases(void);
void check_older_archs(void);

#endif
