/* test_cublas_emu.h - what the files of tests/emu/test_cublas_emu share: the check counter, the
 * random stream, the typed buffer and the double-precision reference, the abort harness, and the
 * GELU epilogues' checks kept in test_cublas_emu_gelu.cc. */
#ifndef SCDINO_TEST_CUBLAS_EMU_H
#define SCDINO_TEST_CUBLAS_EMU_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

/* Counts a check, and reports it (printf-style) when !ok. */
extern int checks, failures;
void check(bool ok, const char *fmt, ...);

#define CK(call)                                                                                   \
  do {                                                                                             \
    cublasStatus_t st_ = (call);                                                                   \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasLtGetStatusName(st_));  \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

double uniform(void); /* in [-1, 1), from the one random stream of the program */

/* A typed buffer of `count` elements. */
struct Buf {
  cudaDataType_t t;
  std::vector<unsigned char> bytes;
  Buf(cudaDataType_t type, size_t count)
      : t(type), bytes(count * (type == CUDA_R_32F ? 4 : 2)) {}
  size_t esize() const { return t == CUDA_R_32F ? 4 : 2; }
  void *p() { return bytes.data(); }
  void *at(size_t i) { return bytes.data() + i * esize(); }
  double get(size_t i) const {
    if (t == CUDA_R_32F) return ((const float *)bytes.data())[i];
    if (t == CUDA_R_16F) return __half2float(((const __half *)bytes.data())[i]);
    return __bfloat162float(((const __nv_bfloat16 *)bytes.data())[i]);
  }
  void set(size_t i, double v) {
    if (t == CUDA_R_32F)
      ((float *)bytes.data())[i] = (float)v;
    else if (t == CUDA_R_16F)
      ((__half *)bytes.data())[i] = __float2half_rn((float)v);
    else
      ((__nv_bfloat16 *)bytes.data())[i] = __float2bfloat16_rn((float)v);
  }
  void fill_random() {
    for (size_t i = 0; i < bytes.size() / esize(); i++) set(i, uniform());
  }
  void fill_nan() {
    for (size_t i = 0; i < bytes.size() / esize(); i++) set(i, NAN);
  }
};

const char *tname(cudaDataType_t t);
/* What one rounding of ref to type t may add: half an ulp, bounded by 2^-8 |ref| for bf16 (8
 * significant bits) and 2^-11 |ref| for fp16 (11), plus fp16's subnormal spacing 2^-24 / 2. */
inline double round_tol(cudaDataType_t t, double ref) {
  if (t == CUDA_R_16BF) return ldexp(fabs(ref), -8);
  if (t == CUDA_R_16F) return ldexp(fabs(ref), -11) + ldexp(1.0, -25);
  return 0;
}

/* One product to check: the m x n matrix at D + off (leading dimension ldd) against alpha op(A)
 * op(B) + beta C (+ bias), computed in double from the stored values. */
struct Ref {
  bool ta, tb;
  int m, n, k;
  double alpha, beta;
  const Buf *A;
  size_t aoff;
  int lda;
  const Buf *B;
  size_t boff;
  int ldb;
  const Buf *C; /* the C values as they were before the call */
  size_t coff;
  int ldc;
  const Buf *D;
  size_t doff;
  int ldd;
  const Buf *bias;
};

/* Element (i, j) of alpha op(A) op(B) + beta C (+ bias) in double; *tol: the float sum's error
 * bound, before any rounding to D's type. */
double reference(const Ref &r, int i, int j, double *tol);

/* Runs f in a child; it must abort with stderr starting "cublas_emu: <fn>: unsupported" (and
 * containing `also`, if given). */
void expect_abort(const char *fn, void (*f)(void), const char *also = NULL);

/* A fresh fp32 matmul descriptor (compute and scale type fp32). */
cublasLtMatmulDesc_t new_desc(void);
/* The heuristic's answer for a 4 x 4 x 4 fp32 product with d (its epilogue set to e first, unless
 * e is CUBLASLT_EPILOGUE_DEFAULT): the status, and in *found how many algorithms (-1 before). */
cublasStatus_t heuristic_4x4(cublasLtHandle_t lt, cublasLtMatmulDesc_t d, cublasLtEpilogue_t e,
                             int *found);

/* ---- the GELU epilogues (test_cublas_emu_gelu.cc) -------------------------------------------- */

/* The three GELUs SCDINO_EMU_LT_GELU selects (unset or tanh, erf, wrong), and its values. */
enum { GELU_TANH, GELU_ERF, GELU_SIGMOID };
extern const char *gelu_env[3];

/* D against gelu(sum) (aux NULL: the GELU epilogues) or sum * gelu'(aux) (DGELU, aux of D's type
 * with leading dimension auxld), sum as in reference; returns the number of bad elements. */
int compare_gelu(const Ref &r, const char *what, int v, const Buf *aux, int auxld);

/* The GELU epilogues' own tests: each SCDINO_EMU_LT_GELU told apart, GELU of the float sum, the
 * decline knob, the aux matrix's rules; and the settings around them that must abort. */
void test_gelu(cublasLtHandle_t lt);
void test_gelu_aborts(void);

#endif
