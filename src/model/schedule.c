/* schedule.c - upstream's cosine schedules and the teacher-temperature schedule, numpy-exact. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"
#include "model/schedule.h"

/* numpy.linspace(start, stop, num) into out: i*step + start, the last value exactly stop. */
static void linspace(double *out, double start, double stop, int64_t num) {
  if (num <= 0) return;
  if (num == 1) {
    out[0] = start;
    return;
  }
  const double delta = stop - start, step = delta / (double)(num - 1);
  for (int64_t i = 0; i < num; i++)
    out[i] = step == 0 ? (double)i / (double)(num - 1) * delta + start : (double)i * step + start;
  out[num - 1] = stop;
}

double *schedule_cosine(double base, double final, int64_t epochs, int64_t niter_per_ep,
                        int64_t warmup_epochs, double start_warmup_value) {
  if (epochs < 1 || niter_per_ep < 1)
    SCD_FAIL("schedule of %lld epochs x %lld iterations", (long long)epochs, (long long)niter_per_ep);
  const int64_t total = epochs * niter_per_ep;
  const int64_t warm = warmup_epochs > 0 ? warmup_epochs * niter_per_ep : 0;
  if (warm > total)
    scd_fatal(SCD_EXIT_INPUT, "&training: warmup_epochs = %lld is longer than the run (%lld epochs)",
              (long long)warmup_epochs, (long long)epochs);
  double *s = xmalloc(MUL_SIZE((size_t)total, sizeof(double)));
  linspace(s, start_warmup_value, base, warm);
  const int64_t L = total - warm;
  for (int64_t i = 0; i < L; i++)
    s[warm + i] = final + 0.5 * (base - final) * (1 + cos(M_PI * (double)i / (double)L));
  return s;
}

double *schedule_teacher_temp(double warmup, double final, int64_t warmup_epochs, int64_t epochs) {
  if (epochs < 1) SCD_FAIL("teacher temperature schedule of %lld epochs", (long long)epochs);
  if (warmup_epochs > epochs)
    scd_fatal(SCD_EXIT_INPUT,
              "&training: warmup_teacher_temp_epochs = %lld is longer than the run (%lld epochs)",
              (long long)warmup_epochs, (long long)epochs);
  double *s = xmalloc(MUL_SIZE((size_t)epochs, sizeof(double)));
  linspace(s, warmup, final, warmup_epochs);
  for (int64_t e = warmup_epochs > 0 ? warmup_epochs : 0; e < epochs; e++) s[e] = final;
  return s;
}

double schedule_lr_peak(double lr, int64_t batch_size_per_rank, int world_size) {
  return lr * (double)(batch_size_per_rank * world_size) / 256.0;
}
