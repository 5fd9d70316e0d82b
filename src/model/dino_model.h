/* dino_model.h - student and teacher (ViT + DINO head) with multi-crop forward and backward (§3).
 *
 * Owns the parameter table and three flat fp32 device buffers with that layout: student, teacher
 * and the student's gradients; plus one activation allocation for a training step, planned for a
 * batch size and the two crop sizes.  One training step, as upstream:
 *
 *     dino_model_forward(m, global, local, B, &dp);       // teacher on [g1;g2], student on all crops
 *     loss = dino_loss_forward(&l, m->sh.logits, m->th.logits, m->sh.dlogits, B, epoch);
 *     dino_loss_update_center(&l, B, world, allreduce, ctx);
 *     dino_model_backward(m, B, grads_ready, ctx);      // gradients of the student into m->grads
 *     (all-reduce the gradients)  optim_clip(...);  optim_step(...);
 *     dino_model_ema(m, momentum);                      // teacher = m teacher + (1-m) student
 *
 * The student's backbone runs twice (global crops, then local crops) and the head once on all
 * rows, crop-major: [g1 (B rows); g2; l1; ...].  The teacher sees the two global crops. */
#ifndef SCDINO_DINO_MODEL_H
#define SCDINO_DINO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "model/arena.h"
#include "model/head.h"
#include "model/ops.h"
#include "model/tensor.h"
#include "model/vit.h"

struct dino_spec {
  struct vit_dims vit;   /* drop_path_rate applies to the student only */
  struct head_dims head; /* head.in_dim is set from vit.dim */
};

/* Called during backward as soon as the gradients of tensors first..last (inclusive indices into
 * the table; their buffer ranges are contiguous) are final: head, final norm, each block from the
 * last to the first, then the embeddings.  The ranges are disjoint and cover the table. */
typedef void (*dino_grads_ready_fn)(int first_tensor, int last_tensor, void *ctx);
/* The grads_ready calls of one backward, in call order, from the tables alone (no memory, so
 * scdino_allreduce_perf --sizes-from-model can replay them): group 0 the head, 1 the final norm,
 * 2 .. depth+1 the blocks from the last to the first, depth+2 the embeddings.  Backward makes its
 * calls through these, so the two cannot disagree. */
int dino_ready_count(const struct vit *v);
void dino_ready_group(const struct vit *v, const struct head *h, int k, int *first, int *last);
/* Short name of group k: "head", "norm", "blocks.11", "embed" (cls_token, pos_embed, patch_embed). */
const char *dino_ready_name(const struct vit *v, int k, char *buf, size_t n);

/* Keys of the student's stochastic depth for one step: mask of (block, branch, crop, sample) is
 * drawn from RNG_DOMAIN_DROPPATH with id0 = step, so it does not depend on ranks or threads. */
struct dino_droppath {
  uint64_t seed;
  uint64_t step;             /* global iteration */
  const int64_t *sample_ids; /* [B] global image indices; NULL = 0..B-1 */
};

struct dino_model {
  const struct ops *ops;
  struct dino_spec spec;
  struct tensor_table tt;
  struct vit vit;
  struct head head;
  float *student, *teacher, *grads; /* device, tt.size floats each */
  /* step plan (dino_model_plan) */
  int Bmax, n_local, global_size, local_size;
  struct arena acts;
  struct vit_pass sg, sl, tg;       /* student global, student local, teacher global */
  struct vit_scratch vs;
  struct head_pass sh, th;          /* student head [(2+n_local) B rows], teacher head [2B] */
  float *dp_host;                   /* staging of drop-path scales */
};

/* The parameter table alone (no memory): backbone "backbone.*" then head "head.*". */
void dino_build_tables(const struct dino_spec *spec, struct tensor_table *tt, struct vit *v,
                       struct head *h);
struct dino_model *dino_model_create(const struct ops *ops, const struct dino_spec *spec);
void dino_model_destroy(struct dino_model *m);
/* Upstream initialisation of the student from the seed (init.h); the teacher becomes a copy. */
void dino_model_init_weights(struct dino_model *m, uint64_t seed);
void dino_model_copy_student_to_teacher(struct dino_model *m);
/* Bytes dino_model_plan would allocate for these sizes, and the parameter count in *nparams,
 * from the tables alone (nothing allocated on the device): the memory check before a run. */
size_t dino_model_plan_bytes(const struct ops *ops, const struct dino_spec *spec, int Bmax, int n_local,
                             int global_size, int local_size, size_t *nparams);
/* Allocate the activations of a step of up to Bmax images with n_local local crops. */
void dino_model_plan(struct dino_model *m, int Bmax, int n_local, int global_size, int local_size);
/* global_crops [2B, C, G, G] and local_crops [n_local B, C, L, L], fp32 device, crop-major.
 * dp NULL: no stochastic depth (evaluation).  Fills m->th.logits and m->sh.logits. */
void dino_model_forward(struct dino_model *m, const float *global_crops, const float *local_crops,
                        int B, const struct dino_droppath *dp);
/* Student gradients (m->grads, zeroed first) from m->sh.dlogits; cb may be NULL. */
void dino_model_backward(struct dino_model *m, int B, dino_grads_ready_fn cb, void *ctx);
/* teacher = momentum * teacher + (1 - momentum) * student, every tensor (weight_g too). */
void dino_model_ema(struct dino_model *m, double momentum);

#endif
