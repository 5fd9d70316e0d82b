/* dino_loss.h - the DINO loss with centring and sharpening, and the centre update (doc/algorithm.md §4).
 *
 * The centre lives in device memory ([1, K], zero at the start, saved in checkpoints).  One step:
 *     loss = dino_loss_forward(l, student_logits, teacher_logits, d_student, B, epoch);
 *     dino_loss_stats(l, teacher_logits, B, epoch);             // diagnostics (optional), then
 *     dino_loss_update_center(l, B, world, allreduce, ctx);   // after the loss, as upstream
 *     dino_loss_stats_reduce(l, rows, allreduce, ctx, &st);   // the diagnostics of all ranks
 * The module does not depend on MPI: the caller passes the all-reduce as a function. */
#ifndef SCDINO_DINO_LOSS_H
#define SCDINO_DINO_LOSS_H

#include <stddef.h>
#include <stdint.h>

#include "model/loss_scale.h"
#include "model/ops.h"

/* In-place sum over all ranks of n floats of device memory; ctx is the caller's. */
typedef void (*dino_allreduce_fn)(float *buf, size_t n, void *ctx);

struct dino_loss {
  const struct ops *ops;
  int K;           /* out_dim */
  int ncrops;      /* student crops: 2 global + local_crops_number */
  int nteacher;    /* teacher crops: 2 */
  double student_temp, center_momentum;
  double *teacher_temp; /* per epoch */
  int64_t nepochs;
  float *center;   /* [K], device */
  float *tsum;     /* [K], column sums of the last teacher logits */
  float *loss_dev; /* [1] */
  float *stats;    /* [K+1], device: ops->dino_stats of the last step's teacher targets */
  float *stats_host; /* [K+1] */
  int have_tsum;
  const struct loss_scale *ls; /* NULL: none; else d_student is scaled by ls->scale */
};

/* What the teacher targets Q of a step say about collapse (doc/algorithm.md §4.5), in nats. */
struct dino_stats {
  double entropy;       /* mean over the teacher rows of all ranks of H(Q_r) */
  double batch_entropy; /* H of the mean of Q over those rows */
};

void dino_loss_init(struct dino_loss *l, const struct ops *ops, int K, int ncrops,
                    double warmup_teacher_temp, double teacher_temp,
                    int64_t warmup_teacher_temp_epochs, int64_t nepochs, double student_temp,
                    double center_momentum);
void dino_loss_free(struct dino_loss *l);
/* Teacher temperature of an epoch (the last one beyond the schedule). */
double dino_loss_teacher_temp(const struct dino_loss *l, int64_t epoch);
/* student [ncrops*B, K], teacher [2B, K] (activations, crop-major); d_student (NULL: no gradient)
 * gets d loss / d student, times the loss scale l->ls->scale when l->ls is set (loss_scale.h).
 * Returns the loss (host, unscaled); keeps the teacher's column sums. */
double dino_loss_forward(struct dino_loss *l, const void *student, const void *teacher,
                         void *d_student, int B, int64_t epoch);
/* center = m center + (1-m) sum(teacher) / (2B * world), the sum all-reduced over ranks with
 * `allreduce` (NULL: one rank). */
void dino_loss_update_center(struct dino_loss *l, int B, int world, dino_allreduce_fn allreduce,
                             void *ctx);
/* The sums of the teacher targets of this step (ops->dino_stats: column sums of Q and its rows'
 * entropies) into l->stats, with the centre the loss used: after dino_loss_forward, before
 * dino_loss_update_center.  Changes nothing the training uses. */
void dino_loss_stats(struct dino_loss *l, const void *teacher, int B, int64_t epoch);
/* l->stats summed over the ranks with allreduce (NULL: one rank) and read back: out gets the mean
 * entropy and the batch-mean target's entropy over rows, the teacher rows of all ranks.  Every rank
 * calls it (a rank without images after zeroing l->stats). */
void dino_loss_stats_reduce(struct dino_loss *l, int64_t rows, dino_allreduce_fn allreduce, void *ctx,
                            struct dino_stats *out);
/* ||center||_2. */
double dino_loss_center_norm(const struct dino_loss *l);

#endif
