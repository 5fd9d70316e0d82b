/* dino_loss.c - the DINO loss (cross-entropy of centred, sharpened teacher vs student), the centre,
 * and the teacher targets' diagnostics. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/dino_loss.h"
#include "model/schedule.h"

void dino_loss_init(struct dino_loss *l, const struct ops *ops, int K, int ncrops,
                    double warmup_teacher_temp, double teacher_temp,
                    int64_t warmup_teacher_temp_epochs, int64_t nepochs, double student_temp,
                    double center_momentum) {
  SCD_ASSERT(K >= 1 && ncrops >= 2 && nepochs >= 1);
  memset(l, 0, sizeof *l);
  l->ops = ops;
  l->K = K;
  l->ncrops = ncrops;
  l->nteacher = 2;
  l->student_temp = student_temp;
  l->center_momentum = center_momentum;
  l->nepochs = nepochs;
  l->teacher_temp =
      schedule_teacher_temp(warmup_teacher_temp, teacher_temp, warmup_teacher_temp_epochs, nepochs);
  l->center = ops->alloc((size_t)K * sizeof(float));
  l->tsum = ops->alloc((size_t)K * sizeof(float));
  l->loss_dev = ops->alloc(sizeof(float));
  l->stats = ops->alloc(((size_t)K + 1) * sizeof(float));
  l->stats_host = xcalloc((size_t)K + 1, sizeof(float));
}

void dino_loss_free(struct dino_loss *l) {
  if (!l->ops) return;
  l->ops->free(l->center);
  l->ops->free(l->tsum);
  l->ops->free(l->loss_dev);
  l->ops->free(l->stats);
  free(l->stats_host);
  free(l->teacher_temp);
  memset(l, 0, sizeof *l);
}

double dino_loss_teacher_temp(const struct dino_loss *l, int64_t epoch) {
  if (epoch < 0) epoch = 0;
  if (epoch >= l->nepochs) epoch = l->nepochs - 1;
  return l->teacher_temp[epoch];
}

double dino_loss_forward(struct dino_loss *l, const void *student, const void *teacher,
                         void *d_student, int B, int64_t epoch) {
  /* The temperatures are Python floats upstream, applied to fp32 tensors: fp32 here too. */
  l->ops->dino_loss(l->loss_dev, d_student, l->tsum, student, teacher, l->center, B, l->ncrops,
                    l->nteacher, l->K, (float)l->student_temp,
                    (float)dino_loss_teacher_temp(l, epoch), l->ls ? l->ls->scale : 1.0f);
  float loss;
  l->ops->download(&loss, l->loss_dev, sizeof loss);
  l->have_tsum = 1;
  return loss;
}

void dino_loss_update_center(struct dino_loss *l, int B, int world, dino_allreduce_fn allreduce,
                             void *ctx) {
  SCD_ASSERT(l->have_tsum);
  if (allreduce) allreduce(l->tsum, (size_t)l->K, ctx);
  l->ops->center_update(l->center, l->tsum, l->K, (float)((double)l->nteacher * B * world),
                        l->center_momentum);
  l->have_tsum = 0;
}

void dino_loss_stats(struct dino_loss *l, const void *teacher, int B, int64_t epoch) {
  l->ops->dino_stats(l->stats, teacher, l->center, l->nteacher * B, l->K,
                     (float)dino_loss_teacher_temp(l, epoch));
}

void dino_loss_stats_reduce(struct dino_loss *l, int64_t rows, dino_allreduce_fn allreduce, void *ctx,
                            struct dino_stats *out) {
  const size_t n = (size_t)l->K + 1;
  if (allreduce) allreduce(l->stats, n, ctx);
  l->ops->download(l->stats_host, l->stats, n * sizeof(float));
  const float *s = l->stats_host;
  out->entropy = rows > 0 ? (double)s[l->K] / (double)rows : NAN;
  /* The batch mean: the column sums over their total (rows, up to rounding). */
  double total = 0, h = 0;
  for (int k = 0; k < l->K; k++) total += s[k];
  for (int k = 0; k < l->K; k++)
    if (s[k] > 0) {
      const double p = s[k] / total;
      h -= p * log(p);
    }
  out->batch_entropy = total > 0 ? h : NAN;
}

double dino_loss_center_norm(const struct dino_loss *l) {
  const struct ops_seg seg = {0, (size_t)l->K};
  double norm = 0;
  l->ops->seg_norms(&norm, l->center, &seg, 1);
  return norm;
}
