/* model_config.h - struct dino_spec from the input deck. */
#ifndef SCDINO_MODEL_CONFIG_H
#define SCDINO_MODEL_CONFIG_H

#include "input/config.h"
#include "model/dino_model.h"

#define MODEL_POS_IMG_SIZE 224 /* upstream's img_size=[224]: the position-embedding grid */

/* Dimensions of &model for images of in_chans selected channels. */
void model_config_spec(struct dino_spec *s, const struct config *cfg, int in_chans);

#endif
