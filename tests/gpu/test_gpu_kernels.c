/* test_gpu_kernels.c - part of tests/gpu/test_gpu_ops: the tensor-core flash kernels' tile widths
 * and options (attention_mma.cu), the 16-bit exact GELU within an ulp of GELU in double
 * (elementwise.cu), attention's shapes, and fp16 with the kernel sets of older GPUs (&gpu arch). */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda/backend_cuda.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_ops_ctx.h"
#include "tests/gpu/gpu_util.h"

/* Every element of got within one unit in the last place of the activation type of exact: what a
 * correct rounding of a value that close to exact gives (bf16: the exact GELU's fast erf,
 * elementwise.cu, must be that close; a rel. L2 tolerance would let a coarse erf through). */
static void check_ulp(const char *what, const float *got, const double *exact, size_t n) {
  const int bits = gpu_is_bf16(g) ? 8 : gpu_is_f16(g) ? 11 : 24; /* significand bits */
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; i++) {
    const double a = fabs(exact[i]);
    double ulp = a > 0 ? ldexp(1.0, ilogb(a) - (bits - 1)) : 1e-30;
    if (gpu_is_f16(g) && ulp < 0x1p-24) ulp = 0x1p-24; /* fp16's subnormal spacing */
    if (!(fabs(got[i] - exact[i]) < ulp) && fabs(got[i] - exact[i]) > 1e-30) {
      if (!bad) first = i;
      bad++;
    }
  }
  T_CHECK(bad == 0, "%s: %zu of %zu values more than an ulp from the exact (first %zu: %.9g, exact %.9g)", what, bad,
          n, first, first < n ? got[first] : 0.0, first < n ? exact[first] : 0.0);
  printf("  %-56s %zu of %zu beyond an ulp\n", what, bad, n);
}

static double gelu_exact(double x, double *grad) {
  const double cdf = 0.5 * (1 + erf(x / sqrt(2.0))), pdf = exp(-0.5 * x * x) / sqrt(2 * M_PI);
  *grad = cdf + x * pdf;
  return x * cdf;
}

/* The bf16 exact GELU (approx 0) of x on the GPU (y: its forward, as the caller computed it from
 * dx, the device copy of x; dgy the device copy of the upstream gradient gy), against GELU in double
 * of the inputs as stored: within an ulp, forward and backward (fp32 keeps erff; the tanh form,
 * tanhf). */
void check_gelu_ulp(const float *x, const float *gy, const float *y, const void *dx, const void *dgy, size_t n) {
  char nm[128];
  float *xs = gpu_dup(x, n), *gs = gpu_dup(gy, n), *yb = gpu_zeros(n);
  double *fe = malloc(n * sizeof *fe), *be = malloc(n * sizeof *be);
  gpu_round(g, xs, n);
  gpu_round(g, gs, n);
  for (size_t i = 0; i < n; i++) {
    double d;
    fe[i] = gelu_exact(xs[i], &d);
    be[i] = gs[i] * d;
  }
  void *db = g->alloc(n * g->act_size);
  g->gelu_bwd(db, dgy, dx, n, 0);
  gpu_act_down(g, yb, db, n);
  check_ulp(NAME(nm, "%s gelu_fwd (approx 0) elementwise", tag), y, fe, n);
  check_ulp(NAME(nm, "%s gelu_bwd (approx 0) elementwise", tag), yb, be, n);
  g->free(db);
  free(xs), free(gs), free(yb), free(fe), free(be);
}

/* The tensor-core flash kernels (attention_mma.cu, bf16 and fp16, hd 32 and 64): the ragged last tile in each
 * of its widths (2, 4, 6 and 8 column tiles of 8), one-tile sequences of each width (the one-kernel
 * backward), and DINO's shapes with each of the kernels' refinements off (the register cap, 4,
 * changes no code). */
void check_flash_tiles(const char *what) {
  static const int option_sets[] = {7, 3, 2, 1, 0};
  backend_cuda_set_attention("flash");
  for (size_t i = 0; i < sizeof option_sets / sizeof *option_sets; i++) {
    const int opts = option_sets[i];
    backend_cuda_set_flash_options(opts);
    snprintf(tag, sizeof tag, "%s flash options %d", what, opts);
    check_attention(1, 197, 1, 64);
    check_attention(2, 37, 2, 64);
    if (opts != 7) continue;
    check_attention(1, 100, 2, 64); /* 36 past the first tile: 6 column tiles */
    check_attention(1, 150, 1, 32); /* 22 past two: 4 */
    check_attention(1, 64, 2, 64);  /* one full tile */
    check_attention(2, 20, 1, 32);  /* one tile of 4 */
    check_attention(1, 130, 1, 64); /* 2 past two full tiles: 2 */
  }
  backend_cuda_set_flash_options(7);
}

/* Attention on the shapes of every path: hd 16 to 128, hd not a multiple of 8, one token. */
void check_attention_cases(void) {
  check_attention(2, 17, 3, 16); /* the reference model: hd 16 */
  check_attention(2, 5, 3, 16);
  check_attention(3, 197, 2, 64); /* ViT-S/16 global crops */
  check_attention(4, 37, 6, 64);  /* local crops */
  check_attention(1, 1, 1, 64);
  check_attention(2, 50, 2, 48); /* hd padded to 64 in the flash kernels */
  check_attention(1, 70, 1, 128);
  check_attention(2, 16, 4, 5); /* hd % 8 != 0 and N % 8 == 0: bf16 takes the flash kernel */
  check_attention(2, 17, 2, 20);
}

/* The kernel sets of older GPUs in fp16 (&gpu arch): 7.5 (a T4: the f16 flash kernels as pairs of
 * m16n8k8 products, tiles copied without cp.async), 7.0 (a V100: attention as batched GEMMs on
 * the flash state); the ops other than attention run the same kernels. */
void check_older_archs(void) {
  static const int archs[] = {75, 70};
  for (int a = 0; a < 2; a++) {
    backend_cuda_set_arch(archs[a]);
    T_CHECK(backend_cuda_arch() == archs[a], "&gpu arch %d: the backend runs %d's kernels", archs[a],
            backend_cuda_arch());
    snprintf(tag, sizeof tag, "fp16 sm_%d flash", archs[a]);
    backend_cuda_set_attention("flash");
    check_attention_cases();
    if (archs[a] == 75) check_flash_tiles("fp16 sm_75");
    check_linear(37, 48, 16, 1);
  }
  backend_cuda_set_arch(0);
  backend_cuda_set_attention("flash");
}
