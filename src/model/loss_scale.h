/* loss_scale.h - dynamic loss scaling for fp16 activations, PyTorch GradScaler's state machine
 * (doc/algorithm.md §5.8).
 *
 * fp16 has 5 exponent bits: small activation gradients underflow to zero and large ones overflow.
 * The loss gradient is multiplied by the scale before backward (ops->dino_loss's grad_scale, set by
 * dino_loss_forward from struct dino_loss's ls), so the fp32 parameter gradients come out scaled;
 * optim_update (struct optim's ls) takes their norms, and
 *   - if any is inf or NaN (an fp16 overflow at this scale, GradScaler's found_inf): the step is
 *     skipped (no AdamW step: parameters, moments and step counts unchanged; the teacher EMA still
 *     runs, as upstream's scaler.step skips only optimizer.step()), and loss_scale_update halves
 *     the scale;
 *   - else the gradients are unscaled (times 1/scale, folded into the clip factors: clipping sees
 *     unscaled gradients, as after upstream's scaler.unscale_), the update runs, and after
 *     LOSS_SCALE_INTERVAL such steps in a row the scale doubles.
 * The scale is a power of two, so scaling and unscaling are exact in fp32.  The scale and the
 * growth counter are saved in checkpoints, so a restart continues bit for bit.
 *
 * Without loss scaling (fp32, bf16: on = 0) the scale is 1 and no step is skipped. */
#ifndef SCDINO_LOSS_SCALE_H
#define SCDINO_LOSS_SCALE_H

#include <stdint.h>

#define LOSS_SCALE_INIT 65536.0f  /* GradScaler's init_scale, 2^16 */
#define LOSS_SCALE_INTERVAL 2000  /* GradScaler's growth_interval */
/* A step that overflows at a scale of 1 or less overflows fp16 with unscaled gradients: the
 * training guard stops the run instead of skipping (src/train/train_guard.c). */
#define LOSS_SCALE_FLOOR 1.0f

struct loss_scale {
  int on;          /* dynamic loss scaling (fp16 activations) */
  float scale;     /* the loss scale, fp32 as GradScaler's _scale; 1 when off */
  int64_t growth;  /* finite steps in a row since the scale last changed (_growth_tracker) */
  int64_t skipped; /* steps skipped since training began (restored from checkpoints) */
  /* the last loss_scale_update: whether it skipped its step, and the scale that step used */
  int last_skipped;
  float last_scale;
};

/* Scale LOSS_SCALE_INIT and nothing counted when on, else the inert scale 1. */
void loss_scale_init(struct loss_scale *ls, int on);
/* The verdict of a step that ran at ls->scale (found_inf: some gradient was inf or NaN): GradScaler's
 * update.  found_inf: scale *= 0.5, growth = 0, skipped += 1; else growth += 1, and when it reaches
 * LOSS_SCALE_INTERVAL, scale *= 2 (kept if finite) and growth = 0.  Off: nothing changes. */
void loss_scale_update(struct loss_scale *ls, int found_inf);

#endif
