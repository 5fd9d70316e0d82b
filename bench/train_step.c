/* train_step.c - time full DINO training steps of a ViT on the CPU backend, split by op kind.
 *
 * usage: train_step [-D dim] [-L depth] [-H heads] [-p patch] [-C chans] [-B batch] [-g global]
 *                   [-l local] [-n n_local] [-K out_dim] [-M head_hidden] [-b bottleneck]
 *                   [-s steps] [-t threads] [-G] [-a act_bytes] [-O] [-A none|tanh]
 * One step = teacher forward, student forward (global + local crops), DINO loss, backward,
 * centre update, per-tensor clipping, AdamW, EMA: what the training loop runs per iteration.
 * -G: also replay every GEMM of one step (the shapes recorded from the Linear and matmul ops) as a
 * plain cblas_sgemm loop with the same thread count, and print the GEMM efficiency: that loop's
 * time over the time the step's GEMM ops took (bench/cpu_vs_torch.sh).
 * Every run also counts the bytes each op must move and the FLOPs of one step (bench/ops_traffic.h)
 * and prints them by op kind with the rates reached; -a charges activations as that many bytes per
 * element (2: what the GPU's bf16 step moves; default 4, this backend's fp32), -O lists every op.
 * -A: the GELU form (&model gelu_approximate). */
#include "build_config.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_result.h"
#include "bench/bench_step.h"
#include "bench/ops_traffic.h"
#include "core/check.h"
#include "core/log.h"
#include "core/rng.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/ops.h"
#include "model/optim.h"

/* ---- GEMM shapes of a step, and their replay through plain cblas_sgemm ---- */

struct gemm_rec {
  int M, N, K, ta, tb;
  float beta;
};
static struct gemm_rec *recs;
static int nrec, caprec, recording;
static const struct ops *real;

static void rec(int M, int N, int K, int ta, int tb, float beta) {
  if (!recording || M <= 0 || N <= 0 || K <= 0) return;
  if (nrec == caprec) {
    caprec = caprec ? 2 * caprec : 256;
    recs = xrealloc(recs, (size_t)caprec * sizeof *recs);
  }
  recs[nrec++] = (struct gemm_rec){M, N, K, ta, tb, beta};
}
/* The GEMMs inside each op, as kern_dense.h computes them. */
static void r_linear_fwd(void *y, const void *x, const float *w, const float *b, int M, int N, int K) {
  rec(M, N, K, 0, 1, b ? 1.0f : 0.0f);
  real->linear_fwd(y, x, w, b, M, N, K);
}
static void r_linear_bwd(void *dx, float *dw, float *db, const void *dy, const void *x,
                         const float *w, int M, int N, int K) {
  if (dx) rec(M, K, N, 0, 0, 0.0f);
  if (dw) rec(N, K, M, 1, 0, 1.0f);
  real->linear_bwd(dx, dw, db, dy, x, w, M, N, K);
}
static void r_matmul(float *c, const float *a, const float *b, int M, int N, int K, int ta, int tb,
                     float beta) {
  rec(M, N, K, ta, tb, beta);
  real->matmul_f32(c, a, b, M, N, K, ta, tb, beta);
}

/* Seconds of one pass over the recorded GEMMs with cblas_sgemm (BLAS's own threads). */
static double replay(float *A, float *Bm, float *Cm) {
  const double t0 = wtime();
  for (int i = 0; i < nrec; i++) {
    const struct gemm_rec *r = &recs[i];
    cblas_sgemm(CblasRowMajor, r->ta ? CblasTrans : CblasNoTrans, r->tb ? CblasTrans : CblasNoTrans,
                r->M, r->N, r->K, 1.0f, A, r->ta ? r->M : r->K, Bm, r->tb ? r->K : r->N, r->beta, Cm,
                r->N);
  }
  return wtime() - t0;
}

static void gemm_efficiency(double gemm_s, int threads, const char *notes) {
  size_t a = 1, b = 1, c = 1;
  double flops = 0;
  for (int i = 0; i < nrec; i++) {
    const struct gemm_rec *r = &recs[i];
    if ((size_t)r->M * r->K > a) a = (size_t)r->M * r->K;
    if ((size_t)r->K * r->N > b) b = (size_t)r->K * r->N;
    if ((size_t)r->M * r->N > c) c = (size_t)r->M * r->N;
    flops += 2.0 * r->M * r->N * r->K;
  }
  float *A = xmalloc(a * sizeof(float)), *Bm = xmalloc(b * sizeof(float)), *Cm = xcalloc(c, sizeof(float));
  for (size_t i = 0; i < a; i++) A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  for (size_t i = 0; i < b; i++) Bm[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
#ifdef OPENBLAS_VERSION
  if (threads > 0) openblas_set_num_threads(threads);
#else
  (void)threads;
#endif
  double best = 1e300;
  for (int k = 0; k < 4; k++) {
    const double t = replay(A, Bm, Cm);
    if (k && t < best) best = t;
  }
  printf("GEMMs of one step: %d calls, %.2f GFLOP; scdino's Linear/matmul ops %.3f s (%.1f GFLOP/s), "
         "plain cblas_sgemm loop %.3f s (%.1f GFLOP/s): GEMM efficiency %.0f%%\n",
         nrec, flops / 1e9, gemm_s, flops / gemm_s / 1e9, best, flops / best / 1e9, 100 * best / gemm_s);
  bench_result("train_step", "gemm_efficiency", 100 * best / gemm_s, "%", "%s", notes);
  free(A);
  free(Bm);
  free(Cm);
}

int main(int argc, char **argv) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){16, 5, 192, 12, 3, 768, 14, 0.1, 0};
  s.head = (struct head_dims){.hidden = 2048, .bottleneck = 256, .out_dim = 65536, .nlayers = 3,
                              .norm_last_layer = 1};
  int B = 8, G = 224, L = 96, nl = 8, steps = 3, threads = 0, gemm = 0, act_bytes = 0, per_op = 0, opt;
  while ((opt = getopt(argc, argv, "D:L:H:p:C:B:g:l:n:K:M:b:s:t:Ga:OA:")) != -1) {
    switch (opt) {
    case 'D': s.vit.dim = atoi(optarg); break;
    case 'L': s.vit.depth = atoi(optarg); break;
    case 'H': s.vit.heads = atoi(optarg); break;
    case 'p': s.vit.patch = atoi(optarg); break;
    case 'C': s.vit.in_chans = atoi(optarg); break;
    case 'B': B = atoi(optarg); break;
    case 'g': G = atoi(optarg); break;
    case 'l': L = atoi(optarg); break;
    case 'n': nl = atoi(optarg); break;
    case 'K': s.head.out_dim = atoi(optarg); break;
    case 'M': s.head.hidden = atoi(optarg); break;
    case 'b': s.head.bottleneck = atoi(optarg); break;
    case 'G': gemm = 1; break;
    case 's': steps = atoi(optarg); break;
    case 't': threads = atoi(optarg); break;
    case 'a': act_bytes = atoi(optarg); break;
    case 'O': per_op = 1; break;
    case 'A':
      if (strcmp(optarg, "none") && strcmp(optarg, "tanh")) {
        fprintf(stderr, "train_step: -A %s: expected none or tanh\n", optarg);
        return 2;
      }
      s.vit.gelu_approx = s.head.gelu_approx = !strcmp(optarg, "tanh");
      break;
    default: fprintf(stderr, "see the header of bench/train_step.c for the options\n"); return 2;
    }
  }
  if (steps < 1 || B < 1 || nl < 0 || s.vit.dim < 1 || s.vit.depth < 1 || s.vit.heads < 1 || s.vit.patch < 1 ||
      act_bytes < 0) {
    fprintf(stderr, "train_step: -s, -B, -D, -L, -H and -p must be positive, -n and -a not negative\n");
    return 2;
  }
  s.vit.mlp_hidden = 4 * s.vit.dim;
  s.vit.pos_grid = 224 / s.vit.patch;
  real = backend_cpu();
  static struct ops recorder;
  recorder = *real;
  recorder.linear_fwd = r_linear_fwd;
  recorder.linear_bwd = r_linear_bwd;
  recorder.matmul_f32 = r_matmul;
  const struct ops *ops = ops_traffic_wrap(gemm ? &recorder : real, (size_t)act_bytes);
  ops->set_threads(threads);
  struct bench_step st;
  bench_step_init(&st, ops, &s, B, nl, G, L);
  struct dino_model *m = st.m;

  const size_t C = (size_t)s.vit.in_chans, ng = 2 * (size_t)B * C * G * G, nlc = (size_t)nl * B * C * L * L;
  float *h = xmalloc((ng > nlc ? ng : nlc) * sizeof(float));
  struct rng r;
  rng_init(&r, 1, RNG_DOMAIN_TEST, 0, 0);
  float *g = ops->alloc(ng * sizeof(float)), *l = ops->alloc((nlc ? nlc : 1) * sizeof(float));
  for (size_t i = 0; i < ng; i++) h[i] = (float)rng_normal(&r);
  ops->upload(g, h, ng * sizeof(float));
  for (size_t i = 0; i < nlc; i++) h[i] = (float)rng_normal(&r);
  ops->upload(l, h, nlc * sizeof(float));

  struct bench_step_flops sf;
  bench_step_count_flops(&s, B, nl, G, L, &sf);
  const int Ng = sf.Ng, Nl = sf.Nl;
  const double flops = sf.total;
  printf("ViT D=%d depth=%d heads=%d p=%d C=%zu, head K=%d; B=%d, global %d (%d tokens) x2, local %d "
         "(%d tokens) x%d; %zu parameters, activations %.1f MiB; %.1f GFLOP per step (%.0f FLOP)\n",
         s.vit.dim, s.vit.depth, s.vit.heads, s.vit.patch, C, s.head.out_dim, B, G, Ng, L, Nl, nl,
         tensors_numel(&m->tt), m->acts.size / 1048576.0, flops / 1e9, flops);

  double best = 1e300, best_gemm = 0;
  struct ops_profile p1 = {0}; /* step 1's op times, for its traffic */
  struct ops_traffic tr;
  for (int it = 0; it <= steps; it++) {
    struct ops_profile p;
    ops->profile(NULL, 1);
    ops_traffic_read(NULL, 1);
    recording = it == 1; /* the shapes are the same every step */
    struct dino_droppath dp = {40, (uint64_t)it, NULL};
    const double t0 = wtime();
    dino_model_forward(m, g, l, B, &dp);
    const double t1 = wtime();
    const double lv = dino_loss_forward(&st.loss, m->sh.logits, m->th.logits, m->sh.dlogits, B, 0);
    dino_loss_update_center(&st.loss, B, 1, NULL, NULL);
    const double t2 = wtime();
    dino_model_backward(m, B, NULL, NULL);
    const double t3 = wtime();
    optim_clip(&st.opt, m->grads, 3.0, NULL);
    optim_step(&st.opt, m->student, m->grads, 1e-4, 0.04, 0);
    dino_model_ema(m, 0.996);
    const double t4 = wtime();
    ops->profile(&p, 0);
    if (it == 1) {
      p1 = p;
      ops_traffic_read(&tr, 0);
    }
    const double tot = t4 - t0;
    printf("%s step %d: %.3f s (forward %.3f, loss %.3f, backward %.3f, optimizer+EMA %.3f) "
           "GEMM %.1f%%, attention %.1f%%, other ops %.1f%%; %.1f GFLOP/s; %.2f images/s; loss %.4f\n",
           it ? "" : "(warm-up)", it, tot, t1 - t0, t2 - t1, t3 - t2, t4 - t3,
           100 * p.gemm_s / tot, 100 * p.attn_s / tot, 100 * p.other_s / tot, flops / tot / 1e9,
           B / tot, lv);
    if (it && tot < best) {
      best = tot;
      best_gemm = p.gemm_s;
    }
  }
  printf("best step %.3f s, %.1f GFLOP/s, %.2f images/s\n", best, flops / best / 1e9, B / best);
  const double tsec[TRAFFIC_CLASSES] = {p1.gemm_s, p1.attn_s, p1.other_s};
  const char *const kind[TRAFFIC_CLASSES] = {"GEMMs", "attention", "other ops"};
  double all = 0;
  printf("traffic of step 1 (each op's inputs read once, outputs written once; activations %d bytes wide):\n",
         act_bytes ? act_bytes : (int)ops->act_size);
  for (int c = 0; c < TRAFFIC_CLASSES; c++) {
    all += tr.bytes[c];
    printf("  %-9s %9.3f GB %10.2f GFLOP in %.3f s: %.2f GB/s, %.1f GFLOP/s\n", kind[c], tr.bytes[c] / 1e9,
           tr.flops[c] / 1e9, tsec[c], tsec[c] > 0 ? tr.bytes[c] / tsec[c] / 1e9 : 0,
           tsec[c] > 0 ? tr.flops[c] / tsec[c] / 1e9 : 0);
  }
  printf("  all       %9.3f GB; host link %.3f GB\n", all / 1e9, tr.host_bytes / 1e9);
  if (per_op) ops_traffic_print_ops(stdout, "    ");
  char nthr[16] = "default";
  if (threads > 0) snprintf(nthr, sizeof nthr, "%d", threads);
  char notes[256];
  snprintf(notes, sizeof notes, "ViT D=%d L=%d p=%d C=%zu K=%d, batch %d, crops 2x%d+%dx%d, %s threads, best of %d",
           s.vit.dim, s.vit.depth, s.vit.patch, C, s.head.out_dim, B, G, nl, L, nthr, steps);
  bench_result("train_step", "step_time", best, "s", "%s", notes);
  bench_result("train_step", "images_per_s", B / best, "images/s", "%s", notes);
  bench_result("train_step", "gflops", flops / best / 1e9, "GFLOP/s", "%.3g GFLOP per step", flops / 1e9);
  bench_result("train_step", "traffic", all / 1e9, "GB", "bytes the ops of one step move at least (%s)", notes);
  if (gemm) gemm_efficiency(best_gemm, threads, notes);
  free(h);
  ops->free(g);
  ops->free(l);
  bench_step_free(&st);
  return 0;
}
