/* ops.h - the backend op interface: every computation of the model, as a table of functions.
 *
 * The model code (vit.c, head.c, dino_model.c, dino_loss.c, optim.c) never touches device memory:
 * it allocates through the table, moves data with upload/download, and calls the ops below.  Two
 * implementations: the CPU reference (src/cpu, fp32, OpenMP, CBLAS) and the CUDA backend.
 *
 * Conventions (all backends):
 *  - Every pointer argument is a DEVICE pointer unless its name ends in _host.
 *  - Parameters, gradients, optimizer moments and the DINO centre are fp32 ("float *"), each set in
 *    one flat allocation described by a tensor table (tensor.h).  Activations are opaque ("void *")
 *    arrays of elements of ops->act_size bytes (4: fp32, 2: bf16 or fp16, ops->precision says
 *    which); their layout is row-major.
 *  - Weights follow PyTorch: a Linear weight is [out, in] and y = x W^T + b.
 *  - Parameter gradients ACCUMULATE (+=), so one gradient buffer collects both backbone calls of a
 *    step; activation gradients are OVERWRITTEN unless a comment says otherwise.
 *  - Sizes are in elements.  Row counts and widths are int (a single activation tensor stays below
 *    2^31 elements per dimension); products are formed in size_t.
 *  - Ops may run asynchronously (CUDA stream order); download() and sync() wait for them. */
#ifndef SCDINO_OPS_H
#define SCDINO_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Elements per partial sum of seg_norms: a norm is the square root of the in-order sum of the
 * squares of its blocks of OPS_NORM_BLOCK elements (counted from the tensor's start), so that it
 * depends neither on the thread count nor, with the sharded optimizer (model/shard_plan.h), on the
 * rank count: slices of the buffer begin and end on these blocks. */
#define OPS_NORM_BLOCK 16384

/* One tensor inside a flat fp32 buffer: elements off .. off+n-1. */
struct ops_seg {
  size_t off, n;
};

/* One AdamW update (PyTorch's decoupled form, per tensor):
 *   p *= decay;  m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2;
 *   p -= step_size * m / (sqrt(v) / bc2_sqrt + eps)
 * with decay = 1 - lr*wd, step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t) computed
 * on the host in double from the tensor's own step count t; beta1, beta2 and eps are passed in
 * double and 1-beta is formed in double before rounding to fp32 (as PyTorch's Python scalars). */
struct ops_adamw_seg {
  size_t off, n;
  float decay, step_size, bc2_sqrt;
};

/* Time spent in the ops since the last reset, by kind (backends without timers report zeros). */
struct ops_profile {
  double gemm_s;   /* linear_fwd/bwd, matmul_f32 */
  double attn_s;   /* attn_fwd/bwd (batched small GEMMs + softmax) */
  double other_s;  /* every other op: norms, GELU, residuals, tokens, loss, optimizer, copies */
  long calls;
};

struct ops {
  const char *name;      /* "cpu", "cuda" */
  const char *precision; /* the activations' type: "fp32", "bf16" or "fp16" (fp16's range needs
                          * dynamic loss scaling: model/loss_scale.h) */
  size_t act_size;       /* bytes of one activation element */
  /* What decides the last bits of the results besides the deck (the BLAS library and the CPU
   * kernels it picked, or the GPU and cuBLAS), as one line into buf; not the thread count, which
   * changes nothing.  Checkpoints record it; a restart on other arithmetic is warned of. */
  void (*arithmetic)(char *buf, size_t n);

  /* ---- memory ------------------------------------------------------------------------------ */
  void *(*alloc)(size_t bytes); /* zero-filled, >= 64-byte aligned; ends the job if out of memory */
  void (*free)(void *p);
  void (*upload)(void *dst, const void *src_host, size_t bytes);
  void (*download)(void *dst_host, const void *src, size_t bytes); /* waits for queued ops */
  void (*copy)(void *dst, const void *src, size_t bytes);
  void (*zero)(void *p, size_t bytes);
  /* Conversions between fp32 device arrays and activations. */
  void (*act_from_f32)(void *dst, const float *src, size_t n);
  void (*act_to_f32)(float *dst, const void *src, size_t n);
  void (*sync)(void);
  /* The fp32 parameter buffer [params, params+n) changed (optimizer step, EMA, load).  A backend
   * that keeps reduced-precision copies of weights refreshes them here.  May be NULL. */
  void (*params_changed)(const float *params, size_t n);
  /* Compute threads (CPU: OpenMP and BLAS); n <= 0 leaves the default. */
  void (*set_threads)(int n);
  /* Fill *p with the times since the last reset (reset != 0 also zeroes them).  May be NULL. */
  void (*profile)(struct ops_profile *p, int reset);

  /* ---- dense layers ------------------------------------------------------------------------ */
  /* y[M,N] = x[M,K] w[N,K]^T + b[N]; b may be NULL. */
  void (*linear_fwd)(void *y, const void *x, const float *w, const float *b, int M, int N, int K);
  /* dx[M,K] = dy[M,N] w (overwritten; NULL skips it), dw[N,K] += dy^T x (NULL skips),
   * db[N] += column sums of dy (NULL skips). */
  void (*linear_bwd)(void *dx, float *dw, float *db, const void *dy, const void *x, const float *w,
                     int M, int N, int K);
  /* Optional (NULL: linear_fwd into a buffer, then residual_fwd with s = NULL): y[M,N] = r[M,N] +
   * (x[M,K] w[N,K]^T + b[N]), the Linear's output added to the residual stream r by the GEMM, not
   * stored on its own; y may alias r.  Rounded once to the activation type (the pair rounds the
   * Linear's output first), so it matches the pair to the activation type's rounding.  For
   * branches without drop path (the teacher, the student's block 0). */
  void (*linear_residual_fwd)(void *y, const void *r, const void *x, const float *w, const float *b,
                              int M, int N, int K);
  /* Optional (NULL: never): whether linear_gelu_fwd and gelu_linear_bwd below compute this GELU
   * inside the GEMM; the model calls them only then (else the op pairs they stand for). */
  int (*gelu_in_gemm)(int approx);
  /* h[M,N] = gelu(x[M,K] w[N,K]^T + b[N]) and pre[M,N] = the GELU's input (NULL: not stored, in
   * inference).  The GELU is computed from the unrounded product, so the results match
   * linear_fwd into pre then gelu_fwd to the activation type's rounding.  NULL with gelu_in_gemm. */
  void (*linear_gelu_fwd)(void *h, void *pre, const void *x, const float *w, const float *b,
                          int M, int N, int K, int approx);
  /* The backward of y = gelu(pre) w^T + b (NULL with gelu_in_gemm):
   *   dpre[M,K] = (dy[M,N] w[N,K]) * gelu'(pre)  (overwritten),
   *   dw[N,K] += dy^T h, db[N] += column sums of dy  (h = gelu(pre) as the forward stored it).
   * The bias gradient of the Linear whose output pre was is left to that Linear's linear_bwd. */
  void (*gelu_linear_bwd)(void *dpre, float *dw, float *db, const void *dy, const void *h,
                          const void *pre, const float *w, int M, int N, int K, int approx);
  /* fp32 c[M,N] = op(a) op(b) + beta c, op(a) = a^T [K,M] stored when ta, else a [M,K]; op(b) =
   * b^T stored [N,K] when tb, else b [K,N].  For small products in parameter space (position
   * embedding interpolation). */
  void (*matmul_f32)(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb,
                     float beta);

  /* ---- patch embedding and tokens ---------------------------------------------------------- */
  /* cols[B*gh*gw, C*p*p] from images img[B,C,H,W] (fp32), gh = H/p, gw = W/p (remainders are
   * dropped, like the strided conv): row (b, gy, gx) holds the patch in (c, ky, kx) order, the
   * layout of the Conv2d weight [D,C,p,p], so patch embedding is linear_fwd(cols, weight). */
  void (*patchify)(void *cols, const float *img, int B, int C, int H, int W, int p);
  /* x[B, 1+Np, D]: x[b,0] = cls + pos[0], x[b,1+i] = patches[b*Np+i] + pos[1+i]; pos [1+Np, D]. */
  void (*tokens_fwd)(void *x, const void *patches, const float *cls, const float *pos, int B,
                     int Np, int D);
  /* dpatches[B*Np, D] = the patch rows of dx (NULL skips); dcls[D] += sum_b dx[b,0];
   * dpos[1+Np, D] += sum_b dx[b]. */
  void (*tokens_bwd)(void *dpatches, float *dcls, float *dpos, const void *dx, int B, int Np, int D);

  /* ---- normalisation ----------------------------------------------------------------------- */
  /* LayerNorm over D with biased variance: y = (x - mean) * rstd * g + b, rstd = 1/sqrt(var+eps).
   * Row r of x starts at x + r*ldx (ldx = D: contiguous rows; ldx = N*D: the CLS token of each
   * sample); y is contiguous [rows, D].  mean, rstd [rows] are saved unless NULL. */
  void (*layernorm_fwd)(void *y, float *mean, float *rstd, const void *x, int ldx, const float *g,
                        const float *b, int rows, int D, float eps);
  /* dx (rows at stride ldx) += the input gradient (ACCUMULATES: the residual stream);
   * dg[D] += sum_r dy * xhat, db[D] += sum_r dy. */
  void (*layernorm_bwd)(void *dx, float *dg, float *db, const void *dy, const void *x, int ldx,
                        const float *mean, const float *rstd, const float *g, int rows, int D);
  /* The residual of residual_fwd and the LayerNorm of its result in one pass (a pre-norm block's
   * residual and the next LayerNorm: one read of the stream instead of two):
   *   y = x + s[b] f  (residual_fwd);  ln = layernorm_fwd of y (ldx = D, rows = B*rps),
   * mean and rstd saved unless NULL.  The LayerNorm reads y as stored (rounded to the activation
   * type), so the results are those of the two ops in turn, bit for bit.  y may alias x. */
  void (*residual_layernorm_fwd)(void *y, void *ln, float *mean, float *rstd, const void *x,
                                 const void *f, const float *s, const float *g, const float *b,
                                 int B, int rps, int D, float eps);
  /* layernorm_bwd (ldx = D, rows = B*rps; dx ACCUMULATES), then the branch gradient of the
   * residual that produced x, df = s[b] dx (residual_bwd of the accumulated dx as stored), in one
   * pass; the results are those of the two ops in turn, bit for bit.  s == NULL: s[b] = 1. */
  void (*layernorm_residual_bwd)(void *dx, float *dg, float *db, void *df, const float *s,
                                 const void *dy, const void *x, const float *mean,
                                 const float *rstd, const float *g, int B, int rps, int D);
  /* y = x / max(||x||_2, 1e-12) per row (F.normalize); norm[rows] = ||x|| saved. */
  void (*l2norm_fwd)(void *y, float *norm, const void *x, int rows, int D);
  void (*l2norm_bwd)(void *dx, const void *dy, const void *y, const float *norm, int rows, int D);
  /* Weight normalisation along dim 0 (torch weight_norm), no epsilon:
   * w[k,:] = v[k,:] * (g[k] / ||v[k,:]||); vnorm[K] saved. */
  void (*weightnorm_fwd)(float *w, float *vnorm, const float *g, const float *v, int K, int D);
  /* dv += (g/|v|) (dw - v (v.dw)/|v|^2); dg += (v.dw)/|v| (dg NULL: frozen g). */
  void (*weightnorm_bwd)(float *dg, float *dv, const float *dw, const float *g, const float *v,
                         const float *vnorm, int K, int D);

  /* ---- attention --------------------------------------------------------------------------- */
  /* Bytes of the per-block state attn_fwd saves for attn_bwd (the CPU backend: the fp32 softmax
   * probabilities [B,H,N,N]; a flash-attention backend: row statistics; the CUDA backend's choice
   * between them can depend on the head dimension hd). */
  size_t (*attn_state_bytes)(int B, int N, int H, int hd);
  /* qkv [B, N, 3, H, hd] (the qkv Linear output: all q, then all k, then all v);
   * out [B, N, H, hd] = softmax(q k^T * scale) v for every (b, h).  state: saved for backward, NULL
   * in inference.  probs: when not NULL, also the softmax matrices as fp32 [B, H, N, N]. */
  void (*attn_fwd)(void *out, void *state, float *probs, const void *qkv, int B, int N, int H,
                   int hd, float scale);
  /* dqkv [B, N, 3, H, hd] (overwritten) from dout [B, N, H, hd]; out is attn_fwd's output for
   * these qkv (fused kernels take D_i = dout_i . out_i from it). */
  void (*attn_bwd)(void *dqkv, const void *dout, const void *out, const void *qkv,
                   const void *state, int B, int N, int H, int hd, float scale);

  /* ---- elementwise ------------------------------------------------------------------------- */
  /* GELU, y may alias x; approx selects the function, as PyTorch's nn.GELU(approximate=...):
   *   0 ('none'): exact, 0.5 x (1 + erf(x/sqrt 2));
   *   1 ('tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
  void (*gelu_fwd)(void *y, const void *x, size_t n, int approx);
  /* dx = dy * gelu'(x), the derivative of the same function; dx may alias dy. */
  void (*gelu_bwd)(void *dx, const void *dy, const void *x, size_t n, int approx);
  /* gelu_bwd over rows x cols, then db[cols] += the column sums of dx as stored: the bias gradient
   * of the Linear whose output x was (its linear_bwd then takes db = NULL), without reading dx
   * again.  The results are those of gelu_bwd and linear_bwd's db, bit for bit. */
  void (*gelu_bwd_bias)(void *dx, float *db, const void *dy, const void *x, int rows, int cols,
                        int approx);
  /* Residual with stochastic depth: y = x + s[b] f for the rps rows of sample b (rows b*rps ..
   * b*rps+rps-1, each D wide); s == NULL means s[b] = 1.  y may alias x. */
  void (*residual_fwd)(void *y, const void *x, const void *f, const float *s, int B, int rps, int D);
  /* Branch gradient df = s[b] dy (the identity path's gradient is dy itself). */
  void (*residual_bwd)(void *df, const void *dy, const float *s, int B, int rps, int D);

  /* ---- DINO loss --------------------------------------------------------------------------- */
  /* student [ns*B, K] and teacher [nt*B, K] logits, crop-major (crop c of sample b is row c*B+b).
   *   Q_i = softmax((t_i - center) / teacher_temp),  L_v = log_softmax(s_v / student_temp)
   *   loss = 1/n sum_{i<nt} sum_{v<ns, v!=i} mean_b(-sum_k Q_i L_v),  n = nt*ns - min(nt,ns)
   * loss[0] (fp32, device) gets the value; ds (NULL skips) = grad_scale * d loss / d student
   * (overwritten; grad_scale is the loss scale, a power of two, 1 without loss scaling: the
   * scaled gradient is rounded once to the activation type); tsum[K] = column sums of the teacher
   * logits (for the centre update). */
  void (*dino_loss)(float *loss, void *ds, float *tsum, const void *student, const void *teacher,
                    const float *center, int B, int ns, int nt, int K, float student_temp,
                    float teacher_temp, float grad_scale);
  /* center = center * m + (tsum / count) * (1 - m), as upstream's update_center (m and 1-m
   * rounded to fp32 from double, like PyTorch's Python scalars). */
  void (*center_update)(float *center, const float *tsum, int K, float count, double m);
  /* Diagnostics of the teacher targets (doc/algorithm.md §4.5): with Q_r = softmax((t_r - center) /
   * teacher_temp) for the rows r < rows of teacher [rows, K], as dino_loss forms them,
   *   stats[k] = sum_r Q_r[k]  (k < K),   stats[K] = sum_r H(Q_r),  H(q) = -sum_k q_k log q_k (nats).
   * Sums in a fixed order (the same bits at every run); reads its inputs only. */
  void (*dino_stats)(float *stats, const void *teacher, const float *center, int rows, int K,
                     float teacher_temp);

  /* ---- optimizer --------------------------------------------------------------------------- */
  /* norms_host[i] = ||buf[segs[i]]||_2. */
  void (*seg_norms)(double *norms_host, const float *buf, const struct ops_seg *segs, int nseg);
  /* Optional (NULL: no sharded optimizer): sumsq_host[i] = the sum of squares of buf[segs[i]] in
   * double, for segments of at most OPS_NORM_BLOCK elements, added as seg_norms adds a block's
   * (the CPU: in element order; CUDA: in a fixed tree): the block partials seg_norms adds up in
   * block order, so that norms assembled from them are seg_norms' bit for bit. */
  void (*seg_sumsq)(double *sumsq_host, const float *buf, const struct ops_seg *segs, int nseg);
  /* buf[segs[i]] *= scale_host[i]. */
  void (*seg_scale)(float *buf, const struct ops_seg *segs, const float *scale_host, int nseg);
  /* AdamW on each segment (see struct ops_adamw_seg); p, g, m, v share the offsets. */
  void (*adamw)(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs,
                int nseg, double beta1, double beta2, double eps);
  /* Teacher EMA: dst = dst * m + (1 - m) * src over n elements (m and 1-m rounded to fp32). */
  void (*ema)(float *dst, const float *src, size_t n, double m);
  /* Optional (NULL: the caller runs seg_scale, adamw and ema in turn): clipping, AdamW and the
   * teacher EMA in one pass over the flat buffers, with the results of
   *     seg_scale(g, segs, gscale_host, nseg);  adamw(p, g, m, v, segs, nseg, beta1, beta2, eps);
   *     ema(teacher, p, n, momentum);
   * (segs as struct ops_seg for seg_scale) except that g is left unscaled in memory: the clip
   * factor gscale_host[i] of segment i is applied on the fly (gscale_host NULL: no clipping). */
  void (*adamw_ema)(float *p, const float *g, float *m, float *v,
                    const struct ops_adamw_seg *segs, int nseg, const float *gscale_host,
                    double beta1, double beta2, double eps, float *teacher, size_t n,
                    double momentum);
};

/* The CPU reference backend (src/cpu). */
const struct ops *backend_cpu(void);

#endif
