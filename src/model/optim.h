/* optim.h - parameter groups, per-tensor gradient clipping, last-layer freezing and AdamW (§5).
 *
 * One step, in upstream's order:
 *     optim_clip(o, grads, clip_grad, NULL);           // per tensor: |g| > clip -> g *= clip/(|g|+1e-6)
 *     optim_step(o, params, grads, lr, wd, frozen);   // frozen: epoch < freeze_last_layer
 * Tensors without TENSOR_GRAD (weight_g with norm_last_layer) never take part; with `frozen` the
 * "last_layer" tensors are skipped entirely (no decay, no moment update, no step count), as
 * PyTorch does for parameters whose .grad is None. */
#ifndef SCDINO_OPTIM_H
#define SCDINO_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "model/grad_comm.h"
#include "model/loss_scale.h"
#include "model/ops.h"
#include "model/shard_plan.h"
#include "model/tensor.h"

#define OPTIM_BETA1 0.9
#define OPTIM_BETA2 0.999
#define OPTIM_EPS 1e-8
#define OPTIM_CLIP_EPS 1e-6

struct optim {
  const struct ops *ops;
  const struct tensor_table *tt;
  float *m, *v;          /* device, hi - lo elements each: exp_avg, exp_avg_sq of elements lo..hi */
  size_t lo, hi;         /* the elements this rank updates: all (0, tt->size), or its slice */
  /* sharded (optim_init_sharded; NULL otherwise): the slices and the communicator that moves them */
  const struct shard_plan *plan;
  struct grad_comm *gc;
  double *part, *allpart; /* norm-block sums of squares: this rank's, every rank's */
  int *npart;             /* blocks per rank */
  struct ops_seg *psegs;  /* this rank's norm blocks */
  struct ops_seg *lsegs;  /* clip segments cut to the slice, offsets from lo */
  struct ops_adamw_seg *lasegs; /* AdamW segments cut to the slice, offsets from lo */
  float *lscales;         /* clip factor of each lsegs entry */
  int64_t *steps;        /* per tensor (host) */
  unsigned char *decay;  /* per tensor: in the regularised group (0) */
  /* scratch */
  struct ops_seg *segs;
  struct ops_adamw_seg *asegs;
  double *norms;
  float *scales;
  int *idx;
  int *ref;              /* tensor index of each AdamW segment (optim_update) */
  float *ascales;        /* clip factor per AdamW segment (optim_update) */
  /* Dynamic loss scaling (NULL: none; set by the caller after init): the gradients are scaled by
   * ls->scale; optim_update skips the step on a non-finite norm, unscales otherwise, and updates
   * ls (loss_scale.h). */
  struct loss_scale *ls;
};

/* Group 0 (weight decay) or 1 (none): biases and 1-D tensors are not regularised (§5.1). */
int optim_is_regularized(const struct tensor *t);
/* Count tensors and elements of the two groups over the trainable tensors of tt. */
void optim_group_counts(const struct tensor_table *tt, int ntensors[2], size_t nelems[2]);
/* Whether a tensor belongs to the head's last layer (dropped while frozen). */
int optim_is_last_layer(const struct tensor *t);

void optim_init(struct optim *o, const struct ops *ops, const struct tensor_table *tt);
/* Sharded (ZeRO-1, &training shard_optimizer): this rank keeps the moments of its slice of plan
 * only, and optim_update updates that slice (the gradients must be reduced there: gc's finish) and
 * all-gathers the weights through gc before the teacher EMA, which runs on the whole buffer.  The
 * result is optim_update's without sharding bit for bit: per-tensor norms are assembled from the
 * slices' norm blocks in block order (shard_plan.h), every other operation is elementwise.  Needs
 * ops->seg_sumsq. */
void optim_init_sharded(struct optim *o, const struct ops *ops, const struct tensor_table *tt,
                        const struct shard_plan *plan, struct grad_comm *gc);
void optim_free(struct optim *o);
/* The moments of every trainable tensor, whole, into host buffers m_host and v_host (tt->size
 * elements; on rank 0 only when sharded, where the slices are gathered; elements of tensors
 * without state are left as they are).  Collective when sharded. */
void optim_moments_download(const struct optim *o, float *m_host, float *v_host);
/* Set the moments from whole host buffers m_host, v_host (tt->size elements, the same on every
 * rank): this rank's part. */
void optim_moments_upload(struct optim *o, const float *m_host, const float *v_host);
/* Per-tensor clipping of trainable gradients (clip <= 0: none).  norms_host (NULL: not wanted)
 * gets the norm of every tensor before clipping (0 for tensors without gradient).  Returns the
 * number of tensors that were clipped.  With a loss scale (o->ls) the gradients are unscaled too
 * (the norms and the clipping are those of the unscaled gradients), never skipped. */
int optim_clip(struct optim *o, float *grads, double clip, double *norms_host);
/* AdamW step with lr on both groups and wd on group 0. */
void optim_step(struct optim *o, float *params, const float *grads, double lr, double wd,
                int frozen_last_layer);
/* The whole update of a step: optim_clip(o, grads, clip, norms_host), optim_step(o, params, grads,
 * lr, wd, frozen_last_layer), then the teacher EMA teacher = momentum teacher + (1 - momentum)
 * params over the whole buffer.  Sharded, the same on this rank's slice, the weights all-gathered
 * before the EMA (grads are left reduced and clipped on the slice only; collective).  A backend with a fused kernel (ops->adamw_ema) does the three in
 * one pass and leaves grads unclipped in memory; otherwise grads end clipped, as with optim_clip.
 * With a loss scale (o->ls): the norms (norms_host) and the clipping are of the unscaled gradients;
 * when a norm is not finite the step is skipped (no clipping, no AdamW, only the EMA; norms_host
 * then holds the non-finite norms); either way loss_scale_update gives ls the verdict
 * (ls->last_skipped).  Returns the number of tensors that were clipped. */
int optim_update(struct optim *o, float *params, float *grads, double clip, double *norms_host,
                 double lr, double wd, int frozen_last_layer, float *teacher, double momentum);

#endif
