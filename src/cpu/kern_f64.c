/* kern_f64.c - the CPU kernels instantiated in double precision, for the finite-difference tests. */
#include "build_config.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "cpu/kern.h"

/* glibc's libmvec SIMD variants of erf and exp (see kern_f32.c). */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
extern double erf(double) __attribute__((__simd__("notinbranch")));
extern double exp(double) __attribute__((__simd__("notinbranch")));
#endif

#define R double
#define KN(name) name##_f64
#define KGEMM cblas_dgemm
#define KEXP exp
#define KERF erf
#define KTANH tanh
#define KSQRT sqrt

#include "cpu/kern_attn.h"
#include "cpu/kern_dense.h"
#include "cpu/kern_head.h"
