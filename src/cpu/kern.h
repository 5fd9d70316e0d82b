/* kern.h - the CPU backend's compute kernels, declared in single (_f32) and double (_f64) precision.
 *
 * The kernels are written once, as templates over the element type (kern_dense.h, kern_attn.h,
 * kern_head.h), and instantiated by kern_f32.c (the backend's arithmetic) and kern_f64.c (linked
 * only into the tests: the finite-difference checks run the very same code in double).  Argument
 * meanings are those of the op of the same name in ops.h; the backend (backend_cpu.c) wraps them. */
#ifndef SCDINO_CPU_KERN_H
#define SCDINO_CPU_KERN_H

#include <stddef.h>

#define KERN_DECLARE(R, S)                                                                        \
  void kern_linear_fwd_##S(R *y, const R *x, const R *w, const R *b, int M, int N, int K);        \
  void kern_linear_bwd_##S(R *dx, R *dw, R *db, const R *dy, const R *x, const R *w, int M, int N, \
                           int K);                                                                \
  void kern_matmul_##S(R *c, const R *a, const R *b, int M, int N, int K, int ta, int tb, R beta); \
  void kern_patchify_##S(R *cols, const R *img, int B, int C, int H, int W, int p);              \
  void kern_tokens_fwd_##S(R *x, const R *patches, const R *cls, const R *pos, int B, int Np,     \
                           int D);                                                                \
  void kern_tokens_bwd_##S(R *dpatches, R *dcls, R *dpos, const R *dx, int B, int Np, int D);     \
  void kern_layernorm_fwd_##S(R *y, R *mean, R *rstd, const R *x, int ldx, const R *g, const R *b, \
                              int rows, int D, double eps);                                       \
  void kern_layernorm_bwd_##S(R *dx, R *dg, R *db, const R *dy, const R *x, int ldx,             \
                              const R *mean, const R *rstd, const R *g, int rows, int D);         \
  void kern_residual_layernorm_fwd_##S(R *y, R *ln, R *mean, R *rstd, const R *x, const R *f,     \
                                       const R *s, const R *g, const R *b, int B, int rps, int D, \
                                       double eps);                                               \
  void kern_layernorm_residual_bwd_##S(R *dx, R *dg, R *db, R *df, const R *s, const R *dy,       \
                                       const R *x, const R *mean, const R *rstd, const R *g,      \
                                       int B, int rps, int D);                                    \
  void kern_gelu_fwd_##S(R *y, const R *x, size_t n, int approx);                                 \
  void kern_gelu_bwd_##S(R *dx, const R *dy, const R *x, size_t n, int approx);                   \
  void kern_gelu_bwd_bias_##S(R *dx, R *db, const R *dy, const R *x, int rows, int cols,          \
                              int approx);                                                        \
  void kern_residual_fwd_##S(R *y, const R *x, const R *f, const R *s, int B, int rps, int D);    \
  void kern_residual_bwd_##S(R *df, const R *dy, const R *s, int B, int rps, int D);              \
  void kern_attn_fwd_##S(R *out, R *P, const R *qkv, int B, int N, int H, int hd, R scale);       \
  void kern_attn_bwd_##S(R *dqkv, const R *dout, const R *qkv, const R *P, int B, int N, int H,   \
                         int hd, R scale);                                                        \
  void kern_l2norm_fwd_##S(R *y, R *norm, const R *x, int rows, int D);                           \
  void kern_l2norm_bwd_##S(R *dx, const R *dy, const R *y, const R *norm, int rows, int D);       \
  void kern_weightnorm_fwd_##S(R *w, R *vnorm, const R *g, const R *v, int K, int D);             \
  void kern_weightnorm_bwd_##S(R *dg, R *dv, const R *dw, const R *g, const R *v, const R *vnorm, \
                               int K, int D);                                                     \
  void kern_dino_loss_##S(R *loss, R *ds, R *tsum, const R *s, const R *t, const R *center, int B, \
                          int ns, int nt, int K, R student_temp, R teacher_temp);          \
  void kern_dino_stats_##S(R *stats, const R *t, const R *center, int rows, int K, R teacher_temp);

KERN_DECLARE(float, f32)
KERN_DECLARE(double, f64)

/* Per-thread scratch that persists between calls (kernels must not malloc/free large buffers per
 * call: fresh mmap'd pages would be faulted in every time).  Slot 0..CPU_SCRATCH_SLOTS-1 of the
 * calling thread, grown as needed, kept until the process ends. */
#define CPU_SCRATCH_SLOTS 4
void *cpu_scratch(int slot, size_t bytes);

/* BLAS threading around OpenMP regions that call BLAS from several threads at once: begin sets
 * the BLAS library to one thread (returns the previous count, 0 if nothing was changed), end
 * restores it.  cpu_set_threads sets both OpenMP's and the BLAS library's thread counts. */
int cpu_blas_serial_begin(void);
void cpu_blas_serial_end(int saved);
void cpu_set_threads(int n);

#endif
