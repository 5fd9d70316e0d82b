/* cpu_threads.c - threads of the CPU backend: OpenMP and BLAS thread counts, per-thread scratch. */
#include "build_config.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <stdlib.h>

#include "core/check.h"
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

void cpu_split(size_t n, size_t *lo, size_t *hi) {
#ifdef _OPENMP
  const size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
#else
  const size_t nt = 1, t = 0;
#endif
  *lo = n * t / nt;
  *hi = n * (t + 1) / nt;
}

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
