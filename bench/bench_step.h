/* bench/bench_step.h - the DINO training step the step benchmarks time and tests/gpu/test_gpu_train checks. */
#ifndef SCDINO_BENCH_STEP_H
#define SCDINO_BENCH_STEP_H

#include "data/augment.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/loss_scale.h"
#include "model/ops.h"
#include "model/optim.h"

/* Student/teacher model (weights from seed 40, planned for B images of 2 global crops of G pixels
 * and nl local crops of L pixels), DINO loss (temperatures 0.04, centre momentum 0.9) and AdamW
 * state, and in fp16 the dynamic loss scale that loss and optimizer share (as the trainer's): the
 * same set-up everywhere, so benchmark numbers and test results describe one step. */
struct bench_step {
  const struct ops *ops;
  struct dino_model *m;
  struct dino_loss loss;
  struct optim opt;
  struct loss_scale ls;
};

void bench_step_init(struct bench_step *t, const struct ops *ops, const struct dino_spec *s, int B, int nl,
                     int G, int L);
void bench_step_free(struct bench_step *t);

/* GPU augmentation settings for synthetic uint16 images C x H x W: every channel selected, mean
 * 0.2 and the given std, upstream's crop scales (global 0.14-1, local 0.05-0.14), random, seed 40. */
void bench_step_augment(struct augment *a, int C, int H, int W, int G, int L, int nl, float std);

/* FLOPs of one step (matmuls and attention, 2 per multiply-add): student forward over 2 global and
 * nl local crops of B images, the teacher's forward over the global crops; backward = 2 x forward. */
struct bench_step_flops {
  int Ng, Nl;          /* tokens of a global and of a local crop */
  double fwd_student;  /* student forward */
  double fwd_teacher;  /* teacher forward */
  double total;        /* 3 x fwd_student + fwd_teacher */
};
void bench_step_count_flops(const struct dino_spec *s, int B, int nl, int G, int L, struct bench_step_flops *f);

#endif
