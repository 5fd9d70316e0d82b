/* tests/testutil.c - assertions and reference-data helpers for the C unit tests. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

int t_checks = 0, t_failures = 0, t_verbose = 0;

void t_init(int argc, char **argv) {
  const char *v = getenv("T_VERBOSE");
  t_verbose = v && *v && strcmp(v, "0") != 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-v")) t_verbose = 1;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

int t_finish(void) {
  printf("%d checks, %d failed\n", t_checks, t_failures);
  return t_failures ? 1 : 0;
}

double t_rel_err_f32(const float *ours, const float *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)ours[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  if (den == 0) return sqrt(num);
  return sqrt(num / den);
}

double t_rel_err_f64(const double *ours, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = ours[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0) return sqrt(num);
  return sqrt(num / den);
}

double t_max_abs_diff_f32(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > m || d != d) m = d;
  }
  return m;
}

const char *t_datafile(const char *name) {
  static char path[4096];
  const char *dir = getenv("SCDINO_TESTDATA");
  snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "tests/data", name);
  return path;
}

static hid_t open_or_die(const char *file) {
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    fprintf(stderr, "test: cannot open %s\n", file);
    exit(99);
  }
  return f;
}

static void *read_any(const char *file, const char *dset, size_t *n, long long *dims, int *ndim,
                      hid_t memtype, size_t esize) {
  hid_t f = open_or_die(file);
  hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
  if (d < 0) {
    fprintf(stderr, "test: %s has no dataset %s\n", file, dset);
    exit(99);
  }
  hid_t s = H5Dget_space(d);
  int r = H5Sget_simple_extent_ndims(s);
  hsize_t hd[8] = {0};
  H5Sget_simple_extent_dims(s, hd, NULL);
  size_t count = 1;
  for (int i = 0; i < r; i++) {
    count *= hd[i];
    if (dims) dims[i] = (long long)hd[i];
  }
  if (ndim) *ndim = r;
  void *buf = malloc(count * esize + 1);
  if (H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
    fprintf(stderr, "test: cannot read %s:%s\n", file, dset);
    exit(99);
  }
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  if (n) *n = count;
  return buf;
}

float *t_h5_read_f32(const char *file, const char *dset, size_t *n, long long *dims, int *ndim) {
  return read_any(file, dset, n, dims, ndim, H5T_NATIVE_FLOAT, sizeof(float));
}

double *t_h5_read_f64(const char *file, const char *dset, size_t *n) {
  return read_any(file, dset, n, NULL, NULL, H5T_NATIVE_DOUBLE, sizeof(double));
}

double t_h5_attr(const char *file, const char *name) {
  hid_t f = open_or_die(file);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  if (a < 0) {
    fprintf(stderr, "test: %s has no root attribute %s\n", file, name);
    exit(99);
  }
  double v = 0;
  H5Aread(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  H5Fclose(f);
  return v;
}

const char *t_scratch_dir(const char *test_name) {
  static char path[1024];
  snprintf(path, sizeof path, "scratch/%s", test_name);
  char cmd[2 * sizeof path + 64];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", path, path);
  if (system(cmd) != 0) {
    fprintf(stderr, "test: cannot create %s\n", path);
    exit(99);
  }
  return path;
}

int t_run_child(int (*fn)(void *), void *arg, int also_stdout, char *msg, size_t cap) {
  int pfd[2];
  if (pipe(pfd) != 0) exit(99);
  /* or the child writes what is still buffered a second time */
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) exit(99);
  if (pid == 0) {
    dup2(pfd[1], 2);
    if (also_stdout) dup2(pfd[1], 1);
    close(pfd[0]);
    _exit(fn(arg));
  }
  close(pfd[1]);
  size_t len = 0;
  ssize_t got;
  while ((got = read(pfd[0], msg + len, cap - 1 - len)) > 0) len += (size_t)got;
  msg[len] = '\0';
  close(pfd[0]);
  int st = 0;
  if (waitpid(pid, &st, 0) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
