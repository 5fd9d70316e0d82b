/* train_guard.c - numerical faults: a non-finite loss or gradient stops training, naming the step,
 * the first bad tensor and the last good checkpoint.
 *
 * Gradients are checked every step at no extra cost: the per-tensor norms that clipping computes
 * anyway (optim_update) are non-finite exactly when some element is, and they are computed after
 * the all-reduce, so every rank sees the same verdict (an agreement all-reduce makes sure).  With
 * clip_grad = 0 the norms cost one extra read of the gradient buffer.  Weights are not scanned every
 * step: a non-finite weight makes the next loss non-finite, and then the weights are scanned to name
 * the first bad tensor.  Under fp16's dynamic loss scale (model/loss_scale.h) a non-finite gradient
 * is an overflow of the scaled gradients: the step is skipped and the scale halved, and training
 * stops only when that happens at a scale of LOSS_SCALE_FLOOR (1) or less. */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/comm.h"
#include "train/train_priv.h"

void train_guard_check_grads(struct trainer *t, struct step_result *r) {
  const struct tensor_table *tt = &t->model->tt;
  r->bad_grad = -1;
  for (int i = 0; i < tt->n && r->bad_grad < 0; i++)
    if ((tt->t[i].flags & TENSOR_GRAD) && !isfinite(t->gnorms[i])) r->bad_grad = i;
  /* fp16: an overflow at a loss scale above the floor skipped the step and halved the scale
   * (GradScaler); at the floor the unscaled gradients themselves overflow, and training stops */
  if (r->skipped && t->ls.last_scale > LOSS_SCALE_FLOOR) r->bad_grad = -1;
  /* Gradients are identical on every rank after the all-reduce; agree anyway, so that no rank can
   * ever stop alone and leave the others waiting. */
  if (comm_any(r->bad_grad >= 0) && r->bad_grad < 0) r->bad_grad = tt->n; /* "on another rank" */
}

int train_guard_first_nonfinite(const struct ops *ops, const struct tensor_table *tt, const float *buf) {
  struct ops_seg *segs = xcalloc((size_t)tt->n, sizeof *segs);
  double *norms = xcalloc((size_t)tt->n, sizeof *norms);
  for (int i = 0; i < tt->n; i++) {
    segs[i].off = tt->t[i].off;
    segs[i].n = tt->t[i].n;
  }
  ops->seg_norms(norms, buf, segs, tt->n);
  int bad = -1;
  for (int i = 0; i < tt->n && bad < 0; i++)
    if (!isfinite(norms[i])) bad = i;
  free(segs);
  free(norms);
  return bad;
}

static void last_good(const struct trainer *t, char *buf, size_t n) {
  if (t->last_good[0])
    snprintf(buf, n, "%s; continue from it with &training restart = .true. after lowering lr or setting clip_grad",
             t->last_good);
  else
    snprintf(buf, n, "none (no checkpoint written yet)");
}

void train_guard_fail(const struct trainer *t, int64_t epoch, int64_t it, const struct step_result *r) {
  if (t->rank == 0) {
    const struct tensor_table *tt = &t->model->tt;
    char good[PATH_MAX + 128];
    last_good(t, good, sizeof good);
    fflush(stdout);
    if (r->nonfinite) {
      const int ws = train_guard_first_nonfinite(t->ops, tt, t->model->student);
      const int wt = ws < 0 ? train_guard_first_nonfinite(t->ops, tt, t->model->teacher) : -1;
      char weights[TENSOR_NAME_MAX + 160];
      if (ws >= 0 || wt >= 0)
        snprintf(weights, sizeof weights, "first non-finite weight: %s/%s", ws >= 0 ? "student" : "teacher",
                 tt->t[ws >= 0 ? ws : wt].name);
      else
        snprintf(weights, sizeof weights, "every weight is finite, so it arose in the forward pass (input data "
                 "or an overflowing activation)");
      fprintf(stderr,
              "scdino: error: non-finite loss at epoch %lld, iteration %lld of %lld (global step %lld) on %d of %d "
              "rank%s (rank 0: %g); %s; training stopped.  Last good checkpoint: %s\n",
              (long long)epoch, (long long)it, (long long)t->niter, (long long)(epoch * t->niter + it),
              r->nonfinite, t->world, t->world > 1 ? "s" : "", r->loss_local, weights, good);
    } else {
      const int b = r->bad_grad;
      char name[TENSOR_NAME_MAX + 64];
      if (b < tt->n)
        snprintf(name, sizeof name, "%s (norm %g)", tt->t[b].name, t->gnorms[b]);
      else
        snprintf(name, sizeof name, "(found on another rank)");
      int nbad = 0;
      for (int i = 0; i < tt->n; i++) nbad += (tt->t[i].flags & TENSOR_GRAD) && !isfinite(t->gnorms[i]);
      char fp16[160] = "";
      if (t->ls.on)
        snprintf(fp16, sizeof fp16, " at fp16 loss scale %g (the unscaled gradients overflow fp16; %lld step%s "
                 "skipped before)", (double)t->ls.last_scale, (long long)t->ls.skipped - 1,
                 t->ls.skipped == 2 ? "" : "s");
      fprintf(stderr,
              "scdino: error: non-finite gradient at epoch %lld, iteration %lld of %lld (global step %lld)%s: first "
              "bad tensor %s, %d of %d tensors non-finite (loss %g); training stopped, the weights of this step "
              "are not saved.  Last good checkpoint: %s\n",
              (long long)epoch, (long long)it, (long long)t->niter, (long long)(epoch * t->niter + it), fp16, name,
              nbad, tt->n, r->loss_ranks > 0 ? r->loss_sum / (double)r->loss_ranks : NAN, good);
    }
  }
  comm_exit_all(SCD_EXIT_FAILURE);
}
