/* tests/dino_ref.h - the settings of the PyTorch DINO reference file (tests/data/dino_tiny.h5). */
#ifndef SCDINO_TESTS_DINO_REF_H
#define SCDINO_TESTS_DINO_REF_H

#include <stddef.h>

#include "arena.h"
#include "dino_loss.h"
#include "dino_model.h"
#include "ops.h"
#include "optim.h"
#include "tensor.h"
#include "vit.h"

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

/* What both tests step through the reference: the model from /init/student (teacher = copy),
 * planned for the reference's crops, its loss and AdamW, and an inference pass of the 2B global
 * crops (the last-block attention and the CLS through the inference path). */
struct dino_ref_run {
  struct dino_model *m;
  struct dino_loss loss;
  struct optim opt;
  struct arena aa;      /* the inference pass's activations */
  struct vit_pass ip;
  struct vit_scratch is;
  int N;                /* tokens of a global crop */
  float *attn;          /* [2B, heads, N, N] on the device */
  void *cls_inf;        /* [2B, dim] activations on the device */
};

void dino_ref_run_init(const char *file, const struct dino_ref *r, const struct ops *ops, struct dino_ref_run *s);
void dino_ref_run_free(struct dino_ref_run *s);
/* Load every tensor of the table from <group>/<name> of the file into a flat fp32 device buffer
 * (each must have the table's shape). */
void dino_ref_load_params(const char *file, const struct ops *ops, const struct tensor_table *tt, const char *group,
                          float *dev);
/* Whether t is an attn.qkv.bias, whose key part has an exactly zero gradient (both sides hold
 * rounding noise there, so the tests compare it apart). */
int dino_ref_is_qkv_bias(const struct tensor *t);
/* Relative error over the query and value thirds of a qkv.bias of n values. */
double dino_ref_qv_rel_err(const float *ours, const float *ref, size_t n);

#endif
