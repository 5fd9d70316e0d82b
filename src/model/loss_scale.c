/* loss_scale.c - GradScaler's dynamic loss scale: halve on overflow, double after a run of finite steps. */
#include "build_config.h"

#include <math.h>
#include <string.h>

#include "model/loss_scale.h"

void loss_scale_init(struct loss_scale *ls, int on) {
  memset(ls, 0, sizeof *ls);
  ls->on = on != 0;
  ls->scale = on ? LOSS_SCALE_INIT : 1.0f;
  ls->last_scale = ls->scale;
}

/* torch._amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu): backoff 0.5, growth 2.0. */
void loss_scale_update(struct loss_scale *ls, int found_inf) {
  ls->last_scale = ls->scale;
  ls->last_skipped = ls->on && found_inf;
  if (!ls->on) return;
  if (found_inf) {
    ls->scale = (float)((double)ls->scale * 0.5);
    ls->growth = 0;
    ls->skipped++;
    return;
  }
  const int64_t successful = ls->growth + 1;
  if (successful == LOSS_SCALE_INTERVAL) {
    const float grown = (float)((double)ls->scale * 2.0);
    if (isfinite(grown)) ls->scale = grown;
    ls->growth = 0;
  } else {
    ls->growth = successful;
  }
}
