/* train_diag.c - collapse and learning diagnostics at the end of an epoch (doc/algorithm.md §4.5):
 * the teacher targets' entropies, the KL part of the loss and the centre's norm, on a line of the
 * log and in log.txt, and a warning when the epoch shows one of DINO's two failure modes. */
#include "build_config.h"

#include <math.h>

#include "core/log.h"
#include "train/train.h"
#include "train/train_priv.h"

/* The thresholds (doc/algorithm.md §4.5 gives the reasoning). */
#define DIAG_UNIFORM_LOSS 0.9   /* uniform: the loss above this share of ln K ... */
#define DIAG_UNIFORM_ENTROPY 0.8 /* ... and the teacher entropy above this share */
#define DIAG_COLLAPSE_FRAC 0.1  /* one prototype: batch-mean entropy below this share of ln K ... */
#define DIAG_COLLAPSE_MIN 0.5   /* ... or below this many nats, whichever is larger */
#define DIAG_GRACE_EPOCHS 2     /* epochs before any warning (and warmup_teacher_temp_epochs) */

double train_diag_collapse_threshold(long long out_dim) {
  return fmax(DIAG_COLLAPSE_MIN, DIAG_COLLAPSE_FRAC * log((double)out_dim));
}

int train_diag_failure(double loss, double entropy, double batch_entropy, long long out_dim) {
  const double ln_k = log((double)out_dim);
  int mask = 0;
  if (loss > DIAG_UNIFORM_LOSS * ln_k && entropy > DIAG_UNIFORM_ENTROPY * ln_k) mask |= TRAIN_DIAG_UNIFORM;
  if (batch_entropy < train_diag_collapse_threshold(out_dim)) mask |= TRAIN_DIAG_ONE_PROTOTYPE;
  return mask;
}

const char *train_diag_cure(int mask) {
  if (mask & TRAIN_DIAG_UNIFORM)
    return "the teacher is not sharpening: try a lower &training teacher_temp and warmup_teacher_temp, a lower "
           "momentum_teacher (a faster teacher), a higher lr, a smaller &model out_dim, more epochs";
  if (mask & TRAIN_DIAG_ONE_PROTOTYPE)
    return "the centring is too weak: check &training center_momentum (upstream 0.9; 1 switches centring off), "
           "raise teacher_temp and warmup_teacher_temp, lower lr";
  return "";
}

void train_diag_epoch(struct trainer *t, int64_t epoch, double loss, struct train_diag *d) {
  const struct ckpt_metrics *mt = &t->ck.metrics;
  const struct config *cfg = t->cfg;
  d->ln_k = log((double)t->loss.K);
  d->entropy = mt->diag_steps > 0 ? mt->entropy_sum / mt->diag_steps : NAN;
  d->batch_entropy = mt->diag_steps > 0 ? mt->batch_entropy_sum / mt->diag_steps : NAN;
  d->kl = loss - d->entropy; /* the cross-entropy is H(Q) + KL(Q || P) over the same pairs */
  d->center_norm = dino_loss_center_norm(&t->loss);
  log_info("Teacher targets: entropy %.4f per image, %.4f of the batch mean (ln out_dim = %.4f); KL part of "
           "the loss %.4f; centre norm %.4g", d->entropy, d->batch_entropy, d->ln_k, d->kl, d->center_norm);

  /* Uniform targets are normal while the network is young and the teacher temperature warms up. */
  const int64_t grace = cfg->training.warmup_teacher_temp_epochs > DIAG_GRACE_EPOCHS
                            ? cfg->training.warmup_teacher_temp_epochs : DIAG_GRACE_EPOCHS;
  if (epoch < grace || !(mt->diag_steps > 0) || !isfinite(loss)) return;
  const int mask = train_diag_failure(loss, d->entropy, d->batch_entropy, t->loss.K);
  /* Said the first epoch it holds, and again at the last epoch if it still does. */
  const int say = epoch + 1 == t->epochs ? mask : mask & ~t->diag_warned;
  if (say & TRAIN_DIAG_UNIFORM)
    log_warn("epoch %lld: the teacher's outputs are nearly uniform (teacher entropy %.3f and loss %.3f, ln out_dim "
             "= %.3f): the network learns nothing; %s", (long long)epoch, d->entropy, loss, d->ln_k,
             train_diag_cure(TRAIN_DIAG_UNIFORM));
  if (say & TRAIN_DIAG_ONE_PROTOTYPE)
    log_warn("epoch %lld: the teacher's outputs collapsed to one prototype (entropy of the batch-mean target "
             "%.3f < %.3f nats: every image gets nearly the same target); %s", (long long)epoch, d->batch_entropy,
             train_diag_collapse_threshold(t->loss.K), train_diag_cure(TRAIN_DIAG_ONE_PROTOTYPE));
  t->diag_warned |= mask;
}
