/* tests/dino_ref.h - the settings of the PyTorch DINO reference file (tests/data/dino_tiny.h5). */
#ifndef SCDINO_TESTS_DINO_REF_H
#define SCDINO_TESTS_DINO_REF_H

#include "dino_loss.h"
#include "dino_model.h"
#include "ops.h"

/* Root attributes of the reference: the batch, the crops and the hyper-parameters of its steps. */
struct dino_ref {
  int B, ncrops, nl, G, L, K; /* batch, crops (2 + nl), local crops, global/local size, out_dim */
  struct dino_spec spec;      /* the model; pos_embed built for the global size, no drop path */
  double lr, wd, clip, momentum;
  int epoch, freeze_last_layer;
};

/* Read them from file (the CPU and the GPU reference tests build the same model from it). */
void dino_ref_read(const char *file, struct dino_ref *r);
/* The DINO loss with the reference's temperatures and centre momentum. */
void dino_ref_loss_init(const char *file, const struct dino_ref *r, struct dino_loss *loss, const struct ops *ops);

#endif
