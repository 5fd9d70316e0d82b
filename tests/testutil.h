/* tests/testutil.h - assertions and reference-data helpers shared by the C unit tests.
 *
 * A test calls T_CHECK / T_NEAR / T_REL as often as it likes and ends with `return t_finish();`,
 * which prints a summary and returns 0 (pass) or 1 (fail).  Exit 77 means "skipped". */
#ifndef SCDINO_TESTUTIL_H
#define SCDINO_TESTUTIL_H

#include <stddef.h>
#include <stdio.h>

extern int t_checks, t_failures;

#define T_CHECK(cond, ...)                                               \
  do {                                                                   \
    t_checks++;                                                          \
    if (!(cond)) {                                                       \
      t_failures++;                                                      \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
      fprintf(stderr, __VA_ARGS__);                                      \
      fputc('\n', stderr);                                               \
    }                                                                    \
  } while (0)

/* |a - b| <= tol */
#define T_NEAR(a, b, tol, what)                                                           \
  do {                                                                                    \
    double ta_ = (double)(a), tb_ = (double)(b);                                          \
    T_CHECK(ta_ - tb_ <= (tol) && tb_ - ta_ <= (tol), "%s: %.9g vs %.9g (tol %g)", what, ta_, tb_, \
            (double)(tol));                                                               \
  } while (0)

/* ||ours - ref|| / ||ref|| <= tol over n floats; prints the error either way at -v. */
#define T_REL(ours, ref, n, tol, what)                                                     \
  do {                                                                                     \
    double e_ = t_rel_err_f32((ours), (ref), (n));                                         \
    if (t_verbose) printf("  %-48s rel err %.3e (tol %.0e)\n", what, e_, (double)(tol)); \
    T_CHECK(e_ <= (tol), "%s: relative error %.3e > %.0e", what, e_, (double)(tol));       \
  } while (0)

extern int t_verbose; /* set from the environment variable T_VERBOSE */

void t_init(int argc, char **argv);
int t_finish(void);
double t_rel_err_f32(const float *ours, const float *ref, size_t n);
double t_rel_err_f64(const double *ours, const double *ref, size_t n);
double t_max_abs_diff_f32(const float *a, const float *b, size_t n);

/* Path of a file in tests/data (SCDINO_TESTDATA, else ../tests/data relative to srcdir). */
const char *t_datafile(const char *name);
/* Read a whole dataset of dino_tiny.h5-style files as float32 (converted by HDF5).  dims gets
 * the shape (up to 8), *ndim its rank; returns a malloc'd buffer or exits the test on error. */
float *t_h5_read_f32(const char *file, const char *dset, size_t *n, long long *dims, int *ndim);
double *t_h5_read_f64(const char *file, const char *dset, size_t *n);
/* Scalar attribute of the root group, as double. */
double t_h5_attr(const char *file, const char *name);
/* A fresh scratch directory for this test under the build tree (removed at the start). */
const char *t_scratch_dir(const char *test_name);
/* Run fn(arg) in a child process that exits with what fn returns (for code that ends the process
 * on failure): its stderr, and its stdout too when also_stdout, is read into msg (cap bytes,
 * NUL-terminated).  Returns the child's exit status, or -1 when it did not exit. */
int t_run_child(int (*fn)(void *), void *arg, int also_stdout, char *msg, size_t cap);

#endif
