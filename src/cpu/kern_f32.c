/* kern_f32.c - the CPU kernels instantiated in single precision: the backend's arithmetic. */
#include "build_config.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "cpu/kern.h"

/* glibc (2.35+) ships SIMD variants of erff and expf in libmvec, which -lm links as needed.
 * Declaring them as such (what glibc's own headers do under -ffast-math) lets the compiler
 * vectorise the GELU and softmax loops without relaxing any other floating-point rule. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
extern float erff(float) __attribute__((__simd__("notinbranch")));
extern float expf(float) __attribute__((__simd__("notinbranch")));
#endif

#define R float
#define KN(name) name##_f32
#define KGEMM cblas_sgemm
#define KEXP expf
#define KERF erff
#define KTANH tanhf
#define KSQRT sqrtf

#include "cpu/kern_attn.h"
#include "cpu/kern_dense.h"
#include "cpu/kern_head.h"
