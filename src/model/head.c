/* head.c - the DINO projection head: parameters, activation plan, forward and backward. */
#include "build_config.h"

#include <string.h>

#include "core/check.h"
#include "model/head.h"

void head_init(struct head *h, const struct head_dims *d, struct tensor_table *tt, const char *prefix) {
  if (d->in_dim < 1 || d->hidden < 1 || d->bottleneck < 1 || d->out_dim < 1 || d->nlayers < 1 ||
      d->nlayers > HEAD_MAX_LAYERS)
    scd_fatal(SCD_EXIT_INPUT, "&model: invalid DINO head (in %d, head_hidden_dim %d, "
              "head_bottleneck_dim %d, out_dim %d, head_nlayers %d; at most %d layers)", d->in_dim,
              d->hidden, d->bottleneck, d->out_dim, d->nlayers, HEAD_MAX_LAYERS);
  memset(h, 0, sizeof *h);
  h->d = *d;
  h->nlin = d->nlayers;
  h->first = tt->n;
  for (int l = 0; l < h->nlin; l++) {
    h->nin[l] = l == 0 ? d->in_dim : d->hidden;
    h->nout[l] = l == h->nlin - 1 ? d->bottleneck : d->hidden;
    const int64_t ws[2] = {h->nout[l], h->nin[l]}, bs[1] = {h->nout[l]};
    int tw, tb;
    if (h->nlin == 1) { /* nn.Linear directly, not an nn.Sequential */
      tw = tensors_add(tt, 2, ws, "%smlp.weight", prefix);
      tb = tensors_add(tt, 1, bs, "%smlp.bias", prefix);
    } else { /* Sequential indices: Linear at 2l, GELU at 2l+1 */
      tw = tensors_add(tt, 2, ws, "%smlp.%d.weight", prefix, 2 * l);
      tb = tensors_add(tt, 1, bs, "%smlp.%d.bias", prefix, 2 * l);
    }
    h->w[l] = tt->t[tw].off;
    h->b[l] = tt->t[tb].off;
  }
  /* weight_norm registers weight_g, then weight_v. */
  h->tg = tensors_add(tt, 2, (int64_t[]){d->out_dim, 1}, "%slast_layer.weight_g", prefix);
  h->tv = tensors_add(tt, 2, (int64_t[]){d->out_dim, d->bottleneck}, "%slast_layer.weight_v", prefix);
  if (d->norm_last_layer) tt->t[h->tg].flags &= ~(unsigned)TENSOR_GRAD;
  h->wg = tt->t[h->tg].off;
  h->wv = tt->t[h->tv].off;
  h->last = h->tv;
}

void head_plan(struct head_pass *p, const struct head *h, struct arena *a, const char *tag, int Rmax,
               int train) {
  const size_t e = a->ops->act_size, R = (size_t)Rmax, K = (size_t)h->d.out_dim;
  const size_t bn = (size_t)h->d.bottleneck;
  memset(p, 0, sizeof *p);
  p->Rmax = Rmax;
  p->train = train;
  p->in = arena_take(a, R * h->d.in_dim * e, "%s.in", tag);
  for (int l = 0; l < h->nlin; l++) {
    p->pre[l] = arena_take(a, R * h->nout[l] * e, "%s.linear%d", tag, l);
    if (l < h->nlin - 1)
      p->post[l] = train ? arena_take(a, R * h->nout[l] * e, "%s.gelu%d", tag, l) : p->pre[l];
  }
  p->zn = arena_take(a, R * bn * e, "%s.z_normalised", tag);
  p->znorm = arena_take(a, R * sizeof(float), "%s.z_norm", tag);
  p->wn = arena_take(a, MUL_SIZE(K, bn) * sizeof(float), "%s.last_layer_weight", tag);
  p->vnorm = arena_take(a, K * sizeof(float), "%s.last_layer_vnorm", tag);
  p->logits = arena_take(a, MUL_SIZE(R, K) * e, "%s.logits", tag);
  if (!train) return;
  p->dlogits = arena_take(a, MUL_SIZE(R, K) * e, "%s.d_logits", tag);
  p->dwn = arena_take(a, MUL_SIZE(K, bn) * sizeof(float), "%s.d_last_layer_weight", tag);
  p->dzn = arena_take(a, R * bn * e, "%s.d_z_normalised", tag);
  p->dz = arena_take(a, R * bn * e, "%s.d_z", tag);
  size_t wmax = (size_t)h->d.in_dim;
  for (int l = 0; l < h->nlin; l++)
    if ((size_t)h->nout[l] > wmax) wmax = (size_t)h->nout[l];
  p->dbuf[0] = arena_take(a, R * wmax * e, "%s.d_hidden0", tag);
  p->dbuf[1] = arena_take(a, R * wmax * e, "%s.d_hidden1", tag);
  p->din = arena_take(a, R * h->d.in_dim * e, "%s.d_in", tag);
}

void head_forward(const struct head *h, const struct ops *ops, const float *P, struct head_pass *p,
                  int R) {
  SCD_ASSERT(R >= 1 && R <= p->Rmax);
  const int K = h->d.out_dim, bn = h->d.bottleneck;
  const void *x = p->in;
  for (int l = 0; l < h->nlin; l++) {
    ops->linear_fwd(p->pre[l], x, P + h->w[l], P + h->b[l], R, h->nout[l], h->nin[l]);
    if (l < h->nlin - 1) {
      ops->gelu_fwd(p->post[l], p->pre[l], (size_t)R * h->nout[l], h->d.gelu_approx);
      x = p->post[l];
    }
  }
  ops->l2norm_fwd(p->zn, p->znorm, p->pre[h->nlin - 1], R, bn);
  ops->weightnorm_fwd(p->wn, p->vnorm, P + h->wg, P + h->wv, K, bn);
  ops->linear_fwd(p->logits, p->zn, p->wn, NULL, R, K, bn);
}

void head_backward(const struct head *h, const struct ops *ops, const float *P, float *G,
                   struct head_pass *p, int R) {
  SCD_ASSERT(p->train);
  const int K = h->d.out_dim, bn = h->d.bottleneck;
  ops->zero(p->dwn, (size_t)K * bn * sizeof(float));
  ops->linear_bwd(p->dzn, p->dwn, NULL, p->dlogits, p->zn, p->wn, R, K, bn);
  ops->weightnorm_bwd(h->d.norm_last_layer ? NULL : G + h->wg, G + h->wv, p->dwn, P + h->wg,
                      P + h->wv, p->vnorm, K, bn);
  ops->l2norm_bwd(p->dz, p->dzn, p->zn, p->znorm, R, bn);
  const void *dy = p->dz;
  for (int l = h->nlin - 1; l >= 0; l--) {
    const void *x = l ? p->post[l - 1] : p->in;
    void *dx = l ? p->dbuf[l & 1] : p->din;
    ops->linear_bwd(dx, G + h->w[l], G + h->b[l], dy, x, P + h->w[l], R, h->nout[l], h->nin[l]);
    if (l) ops->gelu_bwd(dx, dx, p->pre[l - 1], (size_t)R * h->nin[l], h->d.gelu_approx);
    dy = dx;
  }
}
