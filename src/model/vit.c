/* vit.c - the Vision Transformer backbone: parameters, activation plans, forward and backward. */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/vit.h"

void vit_check_dims(const struct vit_dims *d) {
  if (d->patch < 1 || d->in_chans < 1 || d->dim < 1 || d->depth < 1 || d->heads < 1 ||
      d->mlp_hidden < 1 || d->pos_grid < 1)
    scd_fatal(SCD_EXIT_INPUT, "&model: invalid ViT size (patch %d, channels %d, embed_dim %d, "
              "depth %d, num_heads %d, MLP width %d, position grid %d)", d->patch, d->in_chans,
              d->dim, d->depth, d->heads, d->mlp_hidden, d->pos_grid);
  if (d->dim % d->heads)
    scd_fatal(SCD_EXIT_INPUT, "&model: num_heads = %d does not divide embed_dim = %d", d->heads,
              d->dim);
  if (d->gelu_approx != 0 && d->gelu_approx != 1)
    scd_fatal(SCD_EXIT_INPUT, "&model: invalid GELU form %d", d->gelu_approx);
  if (d->drop_path_rate < 0 || d->drop_path_rate >= 1)
    scd_fatal(SCD_EXIT_INPUT, "&model: drop_path_rate = %g is outside [0, 1)", d->drop_path_rate);
}

void vit_init(struct vit *v, const struct vit_dims *d, struct tensor_table *tt, const char *prefix) {
  vit_check_dims(d);
  memset(v, 0, sizeof *v);
  v->d = *d;
  const int64_t D = d->dim, Hm = d->mlp_hidden, p = d->patch, C = d->in_chans;
  const int64_t N0 = (int64_t)d->pos_grid * d->pos_grid;
  const char *P = prefix;
  /* PyTorch's named_parameters(): a module's own parameters first, then its children in
   * registration order (patch_embed, blocks, norm). */
  v->embed_first = tensors_add(tt, 3, (int64_t[]){1, 1, D}, "%scls_token", P);
  tensors_add(tt, 3, (int64_t[]){1, 1 + N0, D}, "%spos_embed", P);
  tensors_add(tt, 4, (int64_t[]){D, C, p, p}, "%spatch_embed.proj.weight", P);
  v->embed_last = tensors_add(tt, 1, (int64_t[]){D}, "%spatch_embed.proj.bias", P);
  v->cls = tt->t[v->embed_first].off;
  v->pos = tt->t[v->embed_first + 1].off;
  v->patch_w = tt->t[v->embed_first + 2].off;
  v->patch_b = tt->t[v->embed_last].off;
  v->blk = xcalloc((size_t)d->depth, sizeof *v->blk);
  for (int i = 0; i < d->depth; i++) {
    struct vit_block_params *b = &v->blk[i];
/* (the index is taken before reading tt->t: tensors_add may move the table) */
#define ADD(field, name, nd, ...)                                                                \
  do {                                                                                           \
    const int ti_ = tensors_add(tt, nd, (int64_t[]){__VA_ARGS__}, "%sblocks.%d." name, P, i);   \
    b->field = tt->t[ti_].off;                                                                   \
  } while (0)
    b->first = tt->n;
    ADD(n1w, "norm1.weight", 1, D);
    ADD(n1b, "norm1.bias", 1, D);
    ADD(qkvw, "attn.qkv.weight", 2, 3 * D, D);
    ADD(qkvb, "attn.qkv.bias", 1, 3 * D);
    ADD(projw, "attn.proj.weight", 2, D, D);
    ADD(projb, "attn.proj.bias", 1, D);
    ADD(n2w, "norm2.weight", 1, D);
    ADD(n2b, "norm2.bias", 1, D);
    ADD(fc1w, "mlp.fc1.weight", 2, Hm, D);
    ADD(fc1b, "mlp.fc1.bias", 1, Hm);
    ADD(fc2w, "mlp.fc2.weight", 2, D, Hm);
    ADD(fc2b, "mlp.fc2.bias", 1, D);
    b->last = tt->n - 1;
#undef ADD
  }
  v->norm_first = tensors_add(tt, 1, (int64_t[]){D}, "%snorm.weight", P);
  v->norm_last = tensors_add(tt, 1, (int64_t[]){D}, "%snorm.bias", P);
  v->norm_w = tt->t[v->norm_first].off;
  v->norm_b = tt->t[v->norm_last].off;
}

void vit_free(struct vit *v) {
  free(v->blk);
  v->blk = NULL;
}

size_t vit_param_count(const struct vit_dims *d) {
  const size_t D = (size_t)d->dim, N0 = (size_t)d->pos_grid * d->pos_grid;
  const size_t Hm = (size_t)d->mlp_hidden;
  /* cls + pos + patch conv + blocks (qkv, proj, fc1, fc2 with biases, two LayerNorms) + norm;
   * with Hm = 4D the block term is 12 D^2 + 13 D, as in §1.1. */
  const size_t block = 3 * D * D + 3 * D + D * D + D + 2 * Hm * D + Hm + D + 4 * D;
  return D + (1 + N0) * D + (size_t)d->in_chans * d->patch * d->patch * D + D +
         (size_t)d->depth * block + 2 * D;
}

double vit_drop_rate(const struct vit_dims *d, int block) {
  if (d->depth < 2) return 0.0;
  return d->drop_path_rate * block / (d->depth - 1);
}

int vit_tokens(const struct vit *v, int H, int W) {
  return 1 + (H / v->d.patch) * (W / v->d.patch);
}

void vit_pass_plan(struct vit_pass *p, const struct vit *v, struct arena *a, const char *tag,
                   int Bmax, int H, int W, int train) {
  const struct vit_dims *d = &v->d;
  const struct ops *ops = a->ops;
  const int nb = train ? d->depth : 1;
  if (!a->base) {
    if (H < d->patch || W < d->patch)
      scd_fatal(SCD_EXIT_INPUT, "crop size %dx%d is smaller than patch_size = %d", H, W, d->patch);
    free(p->blk);
    memset(p, 0, sizeof *p);
    p->blk = xcalloc((size_t)nb, sizeof *p->blk);
  }
  SCD_ASSERT(p->blk != NULL); /* placing follows a counting call on the same pass */
  p->Bmax = Bmax;
  p->H = H;
  p->W = W;
  p->gh = H / d->patch;
  p->gw = W / d->patch;
  p->Np = p->gh * p->gw;
  p->N = p->Np + 1;
  p->train = train;
  const size_t e = ops->act_size, D = (size_t)d->dim, Hm = (size_t)d->mlp_hidden;
  const size_t T = MUL_SIZE((size_t)Bmax, (size_t)p->N), Np = (size_t)p->Np;
  const size_t N0 = (size_t)d->pos_grid * d->pos_grid;
  const size_t rowlen = (size_t)d->in_chans * d->patch * d->patch;
  const size_t TD = MUL_SIZE(T, D) * e;

  /* Whether the crop needs an interpolated position embedding (upstream: not when the patch
   * count equals N0 and the crop is square); the matrix is only computed when placing. */
  p->interp = !((size_t)p->Np == N0 && H == W);
  p->cols = arena_take(a, MUL_SIZE(MUL_SIZE((size_t)Bmax * Np, rowlen), e), "%s.cols", tag);
  p->patches = arena_take(a, MUL_SIZE((size_t)Bmax * Np, D) * e, "%s.patches", tag);
  p->x0 = arena_take(a, TD, "%s.tokens", tag);
  if (p->interp) {
    p->interp_m = arena_take(a, (1 + Np) * (1 + N0) * sizeof(float), "%s.pos_interp", tag);
    p->pos = arena_take(a, (1 + Np) * D * sizeof(float), "%s.pos", tag);
  }
  for (int i = 0; i < nb; i++) {
    struct vit_block_acts *b = &p->blk[i];
    if (train) {
      b->ln1 = arena_take(a, TD, "%s.blocks.%d.ln1", tag, i);
      b->mean1 = arena_take(a, T * sizeof(float), "%s.blocks.%d.ln1_mean", tag, i);
      b->rstd1 = arena_take(a, T * sizeof(float), "%s.blocks.%d.ln1_rstd", tag, i);
      b->qkv = arena_take(a, 3 * TD, "%s.blocks.%d.qkv", tag, i);
      b->state = arena_take(a, ops->attn_state_bytes(Bmax, p->N, d->heads, (int)(D / (size_t)d->heads)), "%s.blocks.%d.attn_state",
                            tag, i);
      b->attn = arena_take(a, TD, "%s.blocks.%d.attn", tag, i);
      b->xmid = arena_take(a, TD, "%s.blocks.%d.x_mid", tag, i);
      b->ln2 = arena_take(a, TD, "%s.blocks.%d.ln2", tag, i);
      b->mean2 = arena_take(a, T * sizeof(float), "%s.blocks.%d.ln2_mean", tag, i);
      b->rstd2 = arena_take(a, T * sizeof(float), "%s.blocks.%d.ln2_rstd", tag, i);
      b->h = arena_take(a, MUL_SIZE(T, Hm) * e, "%s.blocks.%d.fc1", tag, i);
      b->g = arena_take(a, MUL_SIZE(T, Hm) * e, "%s.blocks.%d.gelu", tag, i);
      b->xout = arena_take(a, TD, "%s.blocks.%d.x_out", tag, i);
    } else {
      /* Inference: the LayerNorm outputs and the attention output share one buffer, the residual
       * stream is updated in place in x0, GELU runs in place. */
      b->ln1 = b->attn = b->ln2 = arena_take(a, TD, "%s.ln_attn", tag);
      b->qkv = arena_take(a, 3 * TD, "%s.qkv", tag);
      b->h = arena_take(a, MUL_SIZE(T, Hm) * e, "%s.fc1", tag);
      b->xmid = b->xout = p->x0;
    }
  }
  if (train) {
    p->norm_mean = arena_take(a, (size_t)Bmax * sizeof(float), "%s.norm_mean", tag);
    p->norm_rstd = arena_take(a, (size_t)Bmax * sizeof(float), "%s.norm_rstd", tag);
    if (d->drop_path_rate > 0) {
      p->dp = arena_take(a, (size_t)d->depth * 2 * Bmax * sizeof(float), "%s.drop_path", tag);
      p->dbr = arena_take(a, TD, "%s.d_branch", tag);
    }
    p->dres = arena_take(a, TD, "%s.d_stream", tag);
  }
  if (a->base && p->interp) {
    float *m = xmalloc(MUL_SIZE((1 + Np) * sizeof(float), 1 + N0));
    vit_pos_interp_matrix(d->pos_grid, p->gh, p->gw, H, W, m);
    ops->upload(p->interp_m, m, (1 + Np) * (1 + N0) * sizeof(float));
    free(m);
  }
}

void vit_pass_free(struct vit_pass *p) {
  free(p->blk);
  memset(p, 0, sizeof *p);
}

void vit_scratch_plan(struct vit_scratch *s, const struct vit *v, struct arena *a, size_t Tmax,
                      int Npmax, int train) {
  const size_t e = a->ops->act_size, D = (size_t)v->d.dim, Hm = (size_t)v->d.mlp_hidden;
  const size_t TD = MUL_SIZE(Tmax, D) * e;
  memset(s, 0, sizeof *s);
  s->Tmax = Tmax;
  s->tmp = arena_take(a, TD, "vit.tmp");
  if (!train) return;
  s->dln = arena_take(a, TD, "vit.d_ln");
  s->dattn = arena_take(a, TD, "vit.d_attn");
  s->dqkv = arena_take(a, 3 * TD, "vit.d_qkv");
  s->dh = arena_take(a, MUL_SIZE(Tmax, Hm) * e, "vit.d_fc1");
  s->dpatches = arena_take(a, TD, "vit.d_patches");
  s->dpos = arena_take(a, (1 + (size_t)Npmax) * D * sizeof(float), "vit.d_pos");
}

void vit_infer_plan(struct vit_pass *p, struct vit_scratch *s, const struct vit *v, struct arena *a,
                    const struct ops *ops, const char *tag, int B, int H, int W) {
  arena_init(a, ops);
  memset(p, 0, sizeof *p);
  for (int run = 0; run < 2; run++) {
    vit_pass_plan(p, v, a, tag, B, H, W, 0);
    vit_scratch_plan(s, v, a, (size_t)B * p->N, p->Np, 0);
    if (run == 0) arena_alloc(a);
  }
  arena_check(a);
}

size_t vit_infer_bytes(const struct vit *v, const struct ops *ops, int B, int H, int W) {
  struct arena a;
  struct vit_pass p;
  struct vit_scratch s;
  arena_init(&a, ops);
  memset(&p, 0, sizeof p);
  vit_pass_plan(&p, v, &a, "count", B, H, W, 0); /* counting only */
  vit_scratch_plan(&s, v, &a, (size_t)B * p.N, p.Np, 0);
  const size_t bytes = a.size;
  arena_free(&a);
  vit_pass_free(&p);
  return bytes;
}

/* Drop-path scales of block i, branch j (0 attention, 1 MLP), or NULL when the block has none. */
static const float *dp_scales(const struct vit *v, const struct vit_pass *p, int i, int j) {
  if (!p->dp || vit_drop_rate(&v->d, i) <= 0) return NULL;
  return p->dp + ((size_t)i * 2 + j) * p->Bmax;
}

int vit_gelu_in_gemm(const struct vit *v, const struct ops *ops) {
  return ops->gelu_in_gemm && ops->gelu_in_gemm(v->d.gelu_approx);
}

static float attn_scale(const struct vit_dims *d) {
  return (float)pow((double)(d->dim / d->heads), -0.5); /* head_dim ** -0.5 */
}

static void block_forward(const struct vit *v, const struct ops *ops, const float *P,
                          struct vit_pass *p, struct vit_scratch *s, int B, int i, const void *x,
                          float *probs) {
  const struct vit_dims *d = &v->d;
  const struct vit_block_params *w = &v->blk[i];
  struct vit_block_acts *A = &p->blk[p->train ? i : 0];
  const int D = d->dim, Hm = d->mlp_hidden, N = p->N, T = B * N;
  /* Block 0's first LayerNorm reads the tokens; a later block's came with the residual that
   * ended the block before it (one pass over the stream for both, below). */
  if (i == 0)
    ops->layernorm_fwd(A->ln1, A->mean1, A->rstd1, x, D, P + w->n1w, P + w->n1b, T, D, VIT_LN_EPS);
  ops->linear_fwd(A->qkv, A->ln1, P + w->qkvw, P + w->qkvb, T, 3 * D, D);
  ops->attn_fwd(A->attn, A->state, probs, A->qkv, B, N, d->heads, D / d->heads, attn_scale(d));
  /* Without drop path on a branch (the teacher, the student's block 0) a backend may add the
   * branch's last Linear to the stream inside its GEMM: the branch output is never stored. */
  const float *s0 = dp_scales(v, p, i, 0), *s1 = dp_scales(v, p, i, 1);
  if (!s0 && ops->linear_residual_fwd) {
    ops->linear_residual_fwd(A->xmid, x, A->attn, P + w->projw, P + w->projb, T, D, D);
    ops->layernorm_fwd(A->ln2, A->mean2, A->rstd2, A->xmid, D, P + w->n2w, P + w->n2b, T, D,
                       VIT_LN_EPS);
  } else {
    ops->linear_fwd(s->tmp, A->attn, P + w->projw, P + w->projb, T, D, D);
    ops->residual_layernorm_fwd(A->xmid, A->ln2, A->mean2, A->rstd2, x, s->tmp, s0, P + w->n2w,
                                P + w->n2b, B, N, D, VIT_LN_EPS);
  }
  /* Training keeps the pre-activation for GELU's backward and the output for fc2's: reading
   * the output back costs less than computing it again (the step's traffic, bench/README.md).
   * Where the backend computes this GELU inside fc1's GEMM, the pre-activation is never read. */
  void *g = p->train ? A->g : A->h;
  if (vit_gelu_in_gemm(v, ops)) {
    ops->linear_gelu_fwd(g, p->train ? A->h : NULL, A->ln2, P + w->fc1w, P + w->fc1b, T, Hm, D,
                         d->gelu_approx);
  } else {
    ops->linear_fwd(A->h, A->ln2, P + w->fc1w, P + w->fc1b, T, Hm, D);
    ops->gelu_fwd(g, A->h, (size_t)T * Hm, d->gelu_approx);
  }
  const int fused = !s1 && ops->linear_residual_fwd;
  if (fused)
    ops->linear_residual_fwd(A->xout, A->xmid, g, P + w->fc2w, P + w->fc2b, T, D, Hm);
  else
    ops->linear_fwd(s->tmp, g, P + w->fc2w, P + w->fc2b, T, D, Hm);
  if (i + 1 < d->depth) {
    const struct vit_block_params *wn = &v->blk[i + 1];
    struct vit_block_acts *An = &p->blk[p->train ? i + 1 : 0];
    if (fused)
      ops->layernorm_fwd(An->ln1, An->mean1, An->rstd1, A->xout, D, P + wn->n1w, P + wn->n1b, T,
                         D, VIT_LN_EPS);
    else
      ops->residual_layernorm_fwd(A->xout, An->ln1, An->mean1, An->rstd1, A->xmid, s->tmp, s1,
                                  P + wn->n1w, P + wn->n1b, B, N, D, VIT_LN_EPS);
  } else if (!fused) {
    ops->residual_fwd(A->xout, A->xmid, s->tmp, s1, B, N, D);
  }
}

void vit_forward(const struct vit *v, const struct ops *ops, const float *params,
                 struct vit_pass *p, struct vit_scratch *s, int B, const float *img,
                 void *cls_out, float *last_attn) {
  vit_forward_layers(v, ops, params, p, s, B, img, 1, cls_out, NULL, last_attn);
}

void vit_forward_layers(const struct vit *v, const struct ops *ops, const float *params,
                        struct vit_pass *p, struct vit_scratch *s, int B, const float *img, int nlast,
                        void *cls_out, void *tokens_out, float *last_attn) {
  const struct vit_dims *d = &v->d;
  SCD_ASSERT(nlast >= 1 && nlast <= d->depth && (nlast == 1 || !p->train) && (!tokens_out || !p->train));
  const int D = d->dim, N = p->N, Np = p->Np, N0 = d->pos_grid * d->pos_grid;
  SCD_ASSERT(B >= 1 && B <= p->Bmax && (size_t)B * N <= s->Tmax);
  ops->patchify(p->cols, img, B, d->in_chans, p->H, p->W, d->patch);
  ops->linear_fwd(p->patches, p->cols, params + v->patch_w, params + v->patch_b, B * Np, D,
                  d->in_chans * d->patch * d->patch);
  const float *pos = params + v->pos;
  if (p->interp) {
    ops->matmul_f32(p->pos, p->interp_m, params + v->pos, 1 + Np, D, 1 + N0, 0, 0, 0.0f);
    pos = p->pos;
  }
  ops->tokens_fwd(p->x0, p->patches, params + v->cls, pos, B, Np, D);
  const void *x = p->x0;
  const size_t part = (size_t)B * D * ops->act_size; /* bytes of one block's CLS rows */
  for (int i = 0; i < d->depth; i++) {
    block_forward(v, ops, params, p, s, B, i, x, i == d->depth - 1 ? last_attn : NULL);
    x = p->train ? p->blk[i].xout : p->x0;
    /* get_intermediate_layers: an earlier block's output through the final norm, CLS rows only
     * (LayerNorm is per row); inference updates the stream in place, so it is taken now. */
    const int k = i - (d->depth - nlast);
    if (k >= 0 && i < d->depth - 1)
      ops->layernorm_fwd((char *)cls_out + (size_t)k * part, NULL, NULL, x, N * D, params + v->norm_w,
                         params + v->norm_b, B, D, VIT_LN_EPS);
  }
  ops->layernorm_fwd((char *)cls_out + (size_t)(nlast - 1) * part, p->norm_mean, p->norm_rstd, x, N * D,
                     params + v->norm_w, params + v->norm_b, B, D, VIT_LN_EPS);
  if (tokens_out)
    ops->layernorm_fwd(tokens_out, NULL, NULL, x, D, params + v->norm_w, params + v->norm_b, B * N, D, VIT_LN_EPS);
}

void vit_backward_begin(const struct vit *v, const struct ops *ops, const float *params,
                        float *grads, struct vit_pass *p, int B, const void *dcls) {
  SCD_ASSERT(p->train);
  const int D = v->d.dim, N = p->N;
  const void *x = p->blk[v->d.depth - 1].xout;
  /* Only the CLS rows reach the output: the rest of the stream's gradient starts at zero. */
  ops->zero(p->dres, (size_t)B * N * D * ops->act_size);
  ops->layernorm_bwd(p->dres, grads + v->norm_w, grads + v->norm_b, dcls, x, N * D, p->norm_mean,
                     p->norm_rstd, params + v->norm_w, B, D);
}

void vit_backward_block(const struct vit *v, const struct ops *ops, const float *P, float *G,
                        struct vit_pass *p, struct vit_scratch *s, int B, int i) {
  const struct vit_dims *d = &v->d;
  const struct vit_block_params *w = &v->blk[i];
  const struct vit_block_acts *A = &p->blk[i];
  const int D = d->dim, Hm = d->mlp_hidden, N = p->N, T = B * N;
  const void *x = i ? p->blk[i - 1].xout : p->x0;
  const float *s1 = dp_scales(v, p, i, 0), *s2 = dp_scales(v, p, i, 1);

  /* MLP branch: x_out = x_mid + s2 * fc2(gelu(fc1(ln2(x_mid)))); p->dres holds dL/dx_out and
   * becomes dL/dx_mid when LayerNorm's backward adds the branch's contribution.  The branch's
   * gradient s2 dL/dx_out is in p->dbr: the block above wrote it with its first LayerNorm's
   * backward (one pass for both); the last block scales it here. */
  const void *dz = p->dres;
  if (s2) {
    if (i == d->depth - 1) ops->residual_bwd(p->dbr, p->dres, s2, B, N, D);
    dz = p->dbr;
  }
  if (vit_gelu_in_gemm(v, ops)) {
    /* GELU's derivative applied by fc2's input-gradient GEMM; fc1's bias gradient by fc1's */
    ops->gelu_linear_bwd(s->dh, G + w->fc2w, G + w->fc2b, dz, A->g, A->h, P + w->fc2w, T, D, Hm,
                         d->gelu_approx);
    ops->linear_bwd(s->dln, G + w->fc1w, G + w->fc1b, s->dh, A->ln2, P + w->fc1w, T, Hm, D);
  } else {
    ops->linear_bwd(s->dh, G + w->fc2w, G + w->fc2b, dz, A->g, P + w->fc2w, T, D, Hm);
    /* fc1's bias gradient comes with GELU's backward, which writes its output gradient */
    ops->gelu_bwd_bias(s->dh, G + w->fc1b, s->dh, A->h, T, Hm, d->gelu_approx);
    ops->linear_bwd(s->dln, G + w->fc1w, NULL, s->dh, A->ln2, P + w->fc1w, T, Hm, D);
  }
  /* Attention branch: x_mid = x + s1 * proj(attn(qkv(ln1(x)))); its gradient s1 dL/dx_mid comes
   * with LayerNorm 2's backward. */
  const void *dy = p->dres;
  if (s1) {
    ops->layernorm_residual_bwd(p->dres, G + w->n2w, G + w->n2b, p->dbr, s1, s->dln, A->xmid,
                                A->mean2, A->rstd2, P + w->n2w, B, N, D);
    dy = p->dbr;
  } else {
    ops->layernorm_bwd(p->dres, G + w->n2w, G + w->n2b, s->dln, A->xmid, D, A->mean2, A->rstd2,
                       P + w->n2w, T, D);
  }
  ops->linear_bwd(s->dattn, G + w->projw, G + w->projb, dy, A->attn, P + w->projw, T, D, D);
  ops->attn_bwd(s->dqkv, s->dattn, A->attn, A->qkv, A->state, B, N, d->heads, D / d->heads, attn_scale(d));
  ops->linear_bwd(s->dln, G + w->qkvw, G + w->qkvb, s->dqkv, A->ln1, P + w->qkvw, T, 3 * D, D);
  /* x is block i-1's output: LayerNorm 1's backward also leaves that block's MLP-branch gradient
   * in p->dbr. */
  const float *sp = i ? dp_scales(v, p, i - 1, 1) : NULL;
  if (sp)
    ops->layernorm_residual_bwd(p->dres, G + w->n1w, G + w->n1b, p->dbr, sp, s->dln, x, A->mean1,
                                A->rstd1, P + w->n1w, B, N, D);
  else
    ops->layernorm_bwd(p->dres, G + w->n1w, G + w->n1b, s->dln, x, D, A->mean1, A->rstd1,
                       P + w->n1w, T, D);
}

void vit_backward_end(const struct vit *v, const struct ops *ops, const float *params,
                      float *grads, struct vit_pass *p, struct vit_scratch *s, int B) {
  const struct vit_dims *d = &v->d;
  const int D = d->dim, Np = p->Np, N0 = d->pos_grid * d->pos_grid;
  float *dpos = grads + v->pos;
  if (p->interp) {
    dpos = s->dpos;
    ops->zero(dpos, (size_t)(1 + Np) * D * sizeof(float));
  }
  ops->tokens_bwd(s->dpatches, grads + v->cls, dpos, p->dres, B, Np, D);
  /* The interpolation is linear in pos_embed: its gradient is interp_m^T dpos. */
  if (p->interp)
    ops->matmul_f32(grads + v->pos, p->interp_m, s->dpos, 1 + N0, D, 1 + Np, 1, 0, 1.0f);
  ops->linear_bwd(NULL, grads + v->patch_w, grads + v->patch_b, s->dpatches, p->cols,
                  params + v->patch_w, B * Np, D, d->in_chans * d->patch * d->patch);
}
