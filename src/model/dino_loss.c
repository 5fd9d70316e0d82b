/* dino_loss.c - the DINO loss (cross-entropy of centred, sharpened teacher vs student) and the centre. */
#include "build_config.h"

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
}

void dino_loss_free(struct dino_loss *l) {
  if (!l->ops) return;
  l->ops->free(l->center);
  l->ops->free(l->tsum);
  l->ops->free(l->loss_dev);
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
