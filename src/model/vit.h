/* vit.h - the Vision Transformer backbone (DINO's vision_transformer.py) on the op interface.
 *
 * Parameters live in flat fp32 buffers described by a tensor table (tensor.h); a `struct vit`
 * holds the dimensions and the element offsets of its tensors, so the same struct serves the
 * student, the teacher and the gradients.  Activations of one backbone call ("pass": B crops of
 * one size) come from an arena (arena.h): a training pass saves what backward needs, block by
 * block; an inference pass reuses one set of buffers for all blocks.  Scratch buffers shared by
 * all passes live in a struct vit_scratch.
 *
 * Forward returns the CLS token after the final LayerNorm (B x D), and optionally the softmax
 * attention of the last block.  Backward is split into begin / one call per block / end, so the
 * caller can interleave several passes (the student's global and local crops) block by block and
 * hand each block's finished gradients to the all-reduce early. */
#ifndef SCDINO_VIT_H
#define SCDINO_VIT_H

#include <stddef.h>

#include "model/arena.h"
#include "model/ops.h"
#include "model/tensor.h"

#define VIT_LN_EPS 1e-6f

struct vit_dims {
  int patch;       /* p */
  int in_chans;    /* C */
  int dim;         /* D */
  int depth;
  int heads;       /* must divide D */
  int mlp_hidden;  /* D * mlp_ratio */
  int pos_grid;    /* side of the position-embedding grid: N0 = pos_grid^2 (upstream 224 / p) */
  double drop_path_rate; /* of the last block (linear in the block index); 0 = none */
  int gelu_approx;       /* the MLP's GELU: 0 exact (erf), 1 tanh approximation (ops.h) */
};

struct vit_block_params { /* element offsets */
  size_t n1w, n1b, qkvw, qkvb, projw, projb, n2w, n2b, fc1w, fc1b, fc2w, fc2b;
  int first, last; /* tensor index range (inclusive) */
};

struct vit {
  struct vit_dims d;
  size_t cls, pos, patch_w, patch_b, norm_w, norm_b;
  struct vit_block_params *blk;
  int embed_first, embed_last; /* cls_token .. patch_embed.proj.bias */
  int norm_first, norm_last;   /* norm.weight, norm.bias */
};

/* Check the dimensions (fatal SCD_EXIT_INPUT with a message on nonsense). */
void vit_check_dims(const struct vit_dims *d);
/* Append the backbone's tensors to tt with the given name prefix ("backbone."), in PyTorch's
 * named_parameters() order, and fill v. */
void vit_init(struct vit *v, const struct vit_dims *d, struct tensor_table *tt, const char *prefix);
void vit_free(struct vit *v);
/* Parameter count by the closed formula of doc/algorithm.md §1.1. */
size_t vit_param_count(const struct vit_dims *d);
/* Drop-path rate of block i: rate * i / (depth - 1) (torch.linspace(0, rate, depth)). */
double vit_drop_rate(const struct vit_dims *d, int block);

struct vit_block_acts {
  void *ln1, *qkv, *state, *attn, *xmid, *ln2, *h, *xout;
  void *g; /* GELU output (training; fc2's weight gradient reads it): kept, not recomputed */
  float *mean1, *rstd1, *mean2, *rstd2;
};

struct vit_pass {
  int Bmax, H, W, gh, gw, Np, N, train;
  int interp;           /* position embedding interpolated (crop grid differs from pos grid) */
  float *interp_m;      /* [1+Np, 1+N0]: pos_out = interp_m pos_embed (row 0 copies the CLS) */
  float *pos;           /* [1+Np, D] interpolated position embedding of the last forward */
  void *cols;           /* [Bmax*Np, C*p*p] patches in conv-weight order */
  void *patches;        /* [Bmax*Np, D] */
  void *x0;             /* [Bmax*N, D] tokens; the running stream in inference */
  struct vit_block_acts *blk; /* depth entries (training) or one shared entry (inference) */
  float *norm_mean, *norm_rstd; /* final LayerNorm statistics of the CLS rows [Bmax] */
  float *dp;            /* drop-path scales [depth][2][Bmax] (training with rate > 0), else NULL */
  void *dres;           /* [Bmax*N, D] gradient of the residual stream (training) */
  void *dbr;            /* [Bmax*N, D] drop-path-scaled branch gradient (training with dp) */
};

struct vit_scratch {
  size_t Tmax;          /* rows (tokens) the buffers hold */
  void *tmp;            /* [T, D] branch outputs / scaled branch gradients */
  void *dln, *dattn, *dqkv, *dh, *dpatches;
  float *dpos;          /* [1+Np, D] gradient of the interpolated position embedding */
};

/* Bytes vit_infer_plan would take for these sizes, nothing allocated (the memory check). */
size_t vit_infer_bytes(const struct vit *v, const struct ops *ops, int B, int H, int W);

/* Plan a pass of up to Bmax crops of H x W (see arena.h for the two-run protocol); train = 0 plans
 * an inference pass (one set of block buffers, no saved activations).  p must be zeroed before
 * its first plan (it may be re-planned; vit_pass_free releases it).  In the placing run the
 * interpolation matrix is computed and uploaded. */
void vit_pass_plan(struct vit_pass *p, const struct vit *v, struct arena *a, const char *tag,
                   int Bmax, int H, int W, int train);
void vit_pass_free(struct vit_pass *p);
/* Tokens per crop (1 + patches) of an H x W crop. */
int vit_tokens(const struct vit *v, int H, int W);
/* Whether the backend computes this model's GELU inside the MLP's GEMMs (ops->gelu_in_gemm). */
int vit_gelu_in_gemm(const struct vit *v, const struct ops *ops);
/* Scratch for passes of at most Tmax tokens in all (B * N) and at most Npmax patches per crop;
 * train = 0 plans only what inference needs. */
void vit_scratch_plan(struct vit_scratch *s, const struct vit *v, struct arena *a, size_t Tmax,
                      int Npmax, int train);
/* An inference pass of up to B crops of H x W with its scratch, in an arena of its own: a is
 * initialised, counted, allocated and placed (release with vit_pass_free and arena_free). */
void vit_infer_plan(struct vit_pass *p, struct vit_scratch *s, const struct vit *v, struct arena *a,
                    const struct ops *ops, const char *tag, int B, int H, int W);

/* The bicubic position-embedding interpolation matrix of doc/algorithm.md §1.4, on the host:
 * m [(1+gh*gw) x (1+S*S)] with S = pos_grid; returns whether interpolation applies at all
 * (0: the crop uses pos_embed unchanged and m is the identity). */
int vit_pos_interp_matrix(int S, int gh, int gw, int H, int W, float *m);

/* Forward B crops img [B, C, H, W] (fp32, device) through the pass: cls_out [B, D] gets the CLS
 * tokens after the final norm; last_attn (NULL: skip) the last block's softmax [B, heads, N, N]. */
void vit_forward(const struct vit *v, const struct ops *ops, const float *params,
                 struct vit_pass *p, struct vit_scratch *s, int B, const float *img,
                 void *cls_out, float *last_attn);

/* vit_forward with the outputs of upstream's get_intermediate_layers(x, nlast): cls_out
 * [nlast, B, D] gets the CLS tokens of the last nlast blocks, each block's output through the
 * final norm, the earliest block first (slot nlast-1 is vit_forward's cls_out, bit for bit);
 * tokens_out (NULL: skip) [B*N, D] every token of the last block through the final norm.  nlast > 1
 * and tokens_out are for inference passes; 1 <= nlast <= depth. */
void vit_forward_layers(const struct vit *v, const struct ops *ops, const float *params,
                        struct vit_pass *p, struct vit_scratch *s, int B, const float *img, int nlast,
                        void *cls_out, void *tokens_out, float *last_attn);

/* Backward of a training pass: begin with the gradient of the CLS outputs dcls [B, D]; then call
 * vit_backward_block for i = depth-1 down to 0, in that order (block i reads the branch gradient
 * block i+1 left in the pass); then vit_backward_end.  Parameter gradients accumulate into grads. */
void vit_backward_begin(const struct vit *v, const struct ops *ops, const float *params,
                        float *grads, struct vit_pass *p, int B, const void *dcls);
void vit_backward_block(const struct vit *v, const struct ops *ops, const float *params,
                        float *grads, struct vit_pass *p, struct vit_scratch *s, int B, int i);
void vit_backward_end(const struct vit *v, const struct ops *ops, const float *params,
                      float *grads, struct vit_pass *p, struct vit_scratch *s, int B);

#endif
