/* head.h - the DINO projection head: MLP (Linear-GELU-...-Linear), L2 norm, weight-normalised last layer.
 *
 *   z = mlp(x);  zn = z / max(|z|, 1e-12);  logits = zn W^T,  W[k] = g[k] v[k] / |v[k]|
 * The MLP has nlayers Linears: in_dim -> hidden (GELU) -> ... -> hidden (GELU) -> bottleneck, or a
 * single in_dim -> bottleneck Linear when nlayers = 1 (then named "mlp.weight"/"mlp.bias", as in
 * PyTorch).  With norm_last_layer, weight_g stays 1 and has no gradient (requires_grad=False). */
#ifndef SCDINO_HEAD_H
#define SCDINO_HEAD_H

#include <stddef.h>

#include "model/arena.h"
#include "model/ops.h"
#include "model/tensor.h"

#define HEAD_MAX_LAYERS 16

struct head_dims {
  int in_dim, hidden, bottleneck, out_dim, nlayers;
  int norm_last_layer;
  int gelu_approx; /* the MLP's GELU: 0 exact (erf), 1 tanh approximation (ops.h) */
};

struct head {
  struct head_dims d;
  int nlin;                            /* Linears in the MLP */
  int nin[HEAD_MAX_LAYERS], nout[HEAD_MAX_LAYERS];
  size_t w[HEAD_MAX_LAYERS], b[HEAD_MAX_LAYERS]; /* element offsets */
  size_t wg, wv;
  int tg, tv;                          /* tensor indices of weight_g, weight_v */
  int first, last;                     /* tensor index range of the head */
};

/* Append the head's tensors (prefix "head.") to tt and fill h; fatal SCD_EXIT_INPUT on bad sizes. */
void head_init(struct head *h, const struct head_dims *d, struct tensor_table *tt, const char *prefix);

struct head_pass {
  int Rmax, train;
  void *in;                          /* [R, in_dim] input rows: the backbones write their CLS here */
  void *pre[HEAD_MAX_LAYERS];        /* Linear outputs (the last one is z [R, bottleneck]) */
  void *post[HEAD_MAX_LAYERS];       /* GELU outputs (inference: in place, = pre) */
  void *zn;                          /* [R, bottleneck] */
  float *znorm;                      /* [R] */
  float *wn, *vnorm;                 /* effective last-layer weight [K, bottleneck], |v| [K] */
  void *logits;                      /* [R, K] */
  void *dlogits;                     /* [R, K] gradient of the logits (training; the loss writes it) */
  float *dwn;                        /* [K, bottleneck] */
  void *dzn, *dz, *dbuf[2];          /* backward scratch */
  void *din;                         /* [R, in_dim] gradient for the backbones */
};

/* Plan a head pass of up to Rmax rows (two-run protocol of arena.h). */
void head_plan(struct head_pass *p, const struct head *h, struct arena *a, const char *tag, int Rmax,
               int train);
/* logits of the R rows of p->in. */
void head_forward(const struct head *h, const struct ops *ops, const float *params,
                  struct head_pass *p, int R);
/* From p->dlogits: parameter gradients (+=; none for a frozen weight_g) and p->din. */
void head_backward(const struct head *h, const struct ops *ops, const float *params, float *grads,
                   struct head_pass *p, int R);

#endif
