/* test_schedule.c - cosine schedules and teacher temperature against upstream (dino_tiny.h5, released log). */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/schedule.h"
#include "tests/fixtures/testutil.h"

/* The `args` attribute of /schedules/<name>: base, final, epochs, niter_per_ep, warmup_epochs. */
static void read_args(const char *file, const char *dset, double args[5]) {
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = f >= 0 ? H5Dopen2(f, dset, H5P_DEFAULT) : -1;
  hid_t a = d >= 0 ? H5Aopen(d, "args", H5P_DEFAULT) : -1;
  if (a < 0 || H5Aread(a, H5T_NATIVE_DOUBLE, args) < 0) {
    fprintf(stderr, "cannot read %s:%s/args\n", file, dset);
    exit(99);
  }
  H5Aclose(a);
  H5Dclose(d);
  H5Fclose(f);
}

static double mean(const double *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += x[i];
  return s / n;
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  const char *ref = t_datafile("dino_tiny.h5");
  const char *names[3] = {"/schedules/lr", "/schedules/wd", "/schedules/momentum"};
  for (int k = 0; k < 3; k++) {
    double a[5];
    read_args(ref, names[k], a);
    size_t n = 0;
    double *want = t_h5_read_f64(ref, names[k], &n);
    double *got = schedule_cosine(a[0], a[1], (int64_t)a[2], (int64_t)a[3], (int64_t)a[4], 0.0);
    T_CHECK(n == (size_t)(a[2] * a[3]), "%s: %zu values for %g x %g", names[k], n, a[2], a[3]);
    /* Differences relative to the schedule's largest value: numpy's vectorised cos may differ
     * from libm's by an ulp, which 1 + cos amplifies near the end of the schedule. */
    double mx = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
      mx = fmax(mx, fabs(got[i] - want[i]));
      top = fmax(top, fabs(want[i]));
    }
    printf("  %-22s %zu values, max diff / max value %.3e\n", names[k], n, mx / top);
    T_CHECK(mx <= 1e-15 * top, "%s differs from numpy by %.3e", names[k], mx);
    free(want);
    free(got);
  }
  /* Quirks of §5.3: lr starts at 0, the peak appears twice, the end never reaches final. */
  {
    double *s = schedule_cosine(1.25e-4, 1e-6, 7, 13, 2, 0.0);
    T_CHECK(s[0] == 0.0, "first lr %g", s[0]);
    T_CHECK(s[25] == 1.25e-4 && s[26] == 1.25e-4, "warm-up peak not repeated: %g %g", s[25], s[26]);
    const double last = 1e-6 + 0.5 * (1.25e-4 - 1e-6) * (1 + cos(M_PI * 64 / 65));
    T_CHECK(s[90] == last && s[90] > 1e-6, "last lr %.9g", s[90]);
    free(s);
  }
  /* The released scDINO run (§5.4): 8 GPUs x 30, 101 epochs, 374 iterations, warm-up 10. */
  {
    const int64_t niter = 374, E = 101;
    const double peak = schedule_lr_peak(0.0005, 30, 8);
    T_NEAR(peak, 4.6875e-4, 1e-18, "peak lr 8 x 30");
    T_NEAR(schedule_lr_peak(0.0005, 30, 2), 1.171875e-4, 1e-18, "peak lr 2 x 30");
    double *lr = schedule_cosine(peak, 1e-6, E, niter, 10, 0.0);
    double *wd = schedule_cosine(0.04, 0.4, E, niter, 0, 0.0);
    T_NEAR(mean(lr, niter), 2.33810845e-05, 1e-13, "epoch-0 mean lr (released log)");
    T_NEAR(mean(lr + 10 * niter, niter), 4.68703732e-04, 1e-12, "epoch-10 mean lr");
    T_NEAR(mean(wd, niter), 0.04002890770, 1e-11, "epoch-0 mean wd");
    T_NEAR(mean(lr + 100 * niter, niter), 1.0466e-06, 1e-10, "epoch-100 mean lr");
    T_NEAR(mean(wd + 100 * niter, niter), 0.39997, 1e-5, "epoch-100 mean wd");
    free(lr);
    free(wd);
  }
  /* Teacher temperature per epoch: constant by default, linear warm-up when asked. */
  {
    double *t = schedule_teacher_temp(0.04, 0.04, 0, 11);
    int ok = 1;
    for (int e = 0; e < 11; e++) ok &= t[e] == 0.04;
    T_CHECK(ok, "constant teacher temperature");
    free(t);
    t = schedule_teacher_temp(0.04, 0.07, 30, 100);
    T_CHECK(t[0] == 0.04 && t[29] == 0.07 && t[30] == 0.07 && t[99] == 0.07, "warm-up ends");
    T_NEAR(t[15], 0.04 + 15 * (0.03 / 29), 1e-16, "linear teacher-temperature warm-up");
    free(t);
  }
  return t_finish();
}
