/* schedule.h - upstream's per-iteration schedules (cosine_scheduler) and the per-epoch teacher temperature.
 *
 * All in double precision with numpy's arithmetic, so the arrays match upstream's float64 numpy
 * arrays to the last bits (doc/algorithm.md §4.1, §5.3, §5.4). */
#ifndef SCDINO_SCHEDULE_H
#define SCDINO_SCHEDULE_H

#include <stdint.h>

/* cosine_scheduler(base, final, epochs, niter_per_ep, warmup_epochs, start_warmup_value): a
 * malloc'd array of epochs*niter_per_ep values: a linear warm-up (numpy linspace, both ends
 * included, so the peak appears twice) followed by final + (base-final)/2 (1 + cos(pi i / L)).
 * Ends with SCD_EXIT_INPUT when the warm-up is longer than the run. */
double *schedule_cosine(double base, double final, int64_t epochs, int64_t niter_per_ep,
                        int64_t warmup_epochs, double start_warmup_value);
/* Teacher temperature per epoch: linspace(warmup, final, warmup_epochs) then final. */
double *schedule_teacher_temp(double warmup, double final, int64_t warmup_epochs, int64_t epochs);
/* The peak learning rate: lr * (batch_size_per_rank * world_size) / 256. */
double schedule_lr_peak(double lr, int64_t batch_size_per_rank, int world_size);

#endif
