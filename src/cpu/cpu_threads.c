/* cpu_threads.c - threads of the CPU backend: OpenMP and BLAS thread counts, per-thread scratch;
 * what its arithmetic depends on. */
#include "build_config.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "cpu/cpu_backend.h"
#include "cpu/kern.h"

void *cpu_scratch(int slot, size_t bytes) {
  static _Thread_local struct {
    void *p;
    size_t n;
  } s[CPU_SCRATCH_SLOTS];
  SCD_ASSERT(slot >= 0 && slot < CPU_SCRATCH_SLOTS);
  if (bytes > s[slot].n) {
    free(s[slot].p);
    s[slot].p = xaligned_alloc(bytes);
    s[slot].n = bytes;
  }
  return s[slot].p;
}

/* OpenBLAS's cblas.h defines OPENBLAS_VERSION and declares its thread controls; other CBLAS
 * libraries are left to their own settings. */

int cpu_blas_serial_begin(void) {
#if defined(OPENBLAS_VERSION) && defined(_OPENMP)
  /* Several OpenMP threads will call BLAS at once on small matrices: a threaded BLAS would only
   * contend for its own thread pool. */
  if (omp_get_max_threads() > 1) {
    const int n = openblas_get_num_threads();
    if (n > 1) {
      openblas_set_num_threads(1);
      return n;
    }
  }
#endif
  return 0;
}

void cpu_blas_serial_end(int saved) {
#if defined(OPENBLAS_VERSION)
  if (saved > 0) openblas_set_num_threads(saved);
#else
  (void)saved;
#endif
}

void cpu_set_threads(int n) {
  if (n <= 0) return;
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
#if defined(OPENBLAS_VERSION)
  openblas_set_num_threads(n);
#endif
}

static const char *libc_name(void) {
#ifdef __GLIBC__
  static char s[32];
  snprintf(s, sizeof s, "glibc %s", gnu_get_libc_version());
  return s;
#else
  return "libc";
#endif
}

void cpu_arithmetic(char *buf, size_t n) {
#if defined(OPENBLAS_VERSION)
  /* OPENBLAS_VERSION is " OpenBLAS 0.3.21 "; DYNAMIC_ARCH builds pick their kernels at run time. */
  char ver[64];
  snprintf(ver, sizeof ver, "%s", OPENBLAS_VERSION);
  char *v = ver + strspn(ver, " ");
  for (size_t k = strlen(v); k > 0 && v[k - 1] == ' '; k--) v[k - 1] = 0;
  snprintf(buf, n, "cpu: %s (%s kernels), %s", v, openblas_get_corename(), libc_name());
#else
  snprintf(buf, n, "cpu: CBLAS, %s", libc_name());
#endif
}
