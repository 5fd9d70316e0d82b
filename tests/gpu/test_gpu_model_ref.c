/* test_gpu_model_ref.c - the checks of test_model_ref (two DINO training steps against upstream
 * PyTorch's tensors in dino_tiny.h5) with the CUDA backend, in fp32 and in bf16, with each of the
 * attention implementations (gemm and flash; in bf16 also cudnn).
 *
 * Same sequence as the CPU test: forward (CLS outputs, interpolated position embedding, logits,
 * last-block attention through the inference path), loss, centre, gradients before and after
 * per-tensor clipping, AdamW and the EMA, twice.  Tolerances (relative L2 error per tensor):
 * fp32 2e-5 forward, 2e-4 gradients, 2e-5 weights (the CPU test's, doubled: sums run in another
 * order); bf16 5e-2 forward and 2.5e-1 gradients (bf16 activations carry 2^-9 relative per value
 * and per layer; a wrong kernel gives errors of order 1).  bf16 weights: AdamW's first steps move
 * every element by about lr, in the direction of its gradient's sign, which rounding can flip
 * where a gradient is tiny; so no element may differ by more than 2.5 lr per step taken, and the
 * whole buffer by 1e-2 relative.  The key part of qkv.bias has an exactly zero gradient, so both
 * sides hold rounding noise there, which AdamW's first steps (eps 1e-8) turn into moves of up to lr
 * whatever its size: its gradient must be noise (at most 1e-4 of the largest q, v bias gradient),
 * and its weights may differ by 2 lr per step.  The position embedding interpolated at step 2 comes
 * from weights updated once, so in bf16 it is held to the weights' 1e-2, and the centre, which
 * follows bf16 teacher outputs, to 2e-2 before and after each update. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/backend_cuda.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/ops.h"
#include "model/optim.h"
#include "tests/fixtures/dino_ref.h"
#include "tests/fixtures/testutil.h"
#include "tests/gpu/gpu_util.h"

#define KGRAD_REL 1e-4 /* the key part's gradient against the largest q, v part's */

static const char *ref;
static const struct ops *ops;
static double tol_fwd, tol_grad, tol_w;
static char tag[16];

/* Compare n values of device memory (activations when act, else fp32) with a dataset. */
static void cmp_dev(const void *dev, int act, size_t n, const char *dset, double tol) {
  size_t rn = 0;
  float *r = t_h5_read_f32(ref, dset, &rn, NULL, NULL);
  T_CHECK(rn == n, "%s: %zu elements, expected %zu", dset, rn, n);
  float *h = malloc(n * sizeof(float));
  if (act)
    gpu_act_down(ops, h, dev, n);
  else
    gpu_f32_down(ops, h, dev, n);
  char what[256];
  snprintf(what, sizeof what, "%s %s", tag, dset);
  if (rn == n) gpu_cmp(what, h, r, n, tol);
  free(h);
  free(r);
}

static double lr_ref; /* AdamW's learning rate of the reference */

/* Weights in bf16: every element within 2.5 lr per step, the whole buffer within 1e-2. */
static void cmp_weights_bf16(const struct tensor_table *tt, const char *group, const float *host,
                             int steps) {
  double num = 0, den = 0, mx = 0;
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    char path[256];
    snprintf(path, sizeof path, "%s/%s", group, t->name);
    size_t n = 0;
    float *r = t_h5_read_f32(ref, path, &n, NULL, NULL);
    T_CHECK(n == t->n, "%s: %zu elements, expected %zu", path, n, t->n);
    for (size_t j = 0; j < n && n == t->n; j++) {
      const double d = (double)host[t->off + j] - r[j];
      num += d * d;
      den += (double)r[j] * r[j];
      if (fabs(d) > mx || d != d) mx = fabs(d);
    }
    free(r);
  }
  const double rel = sqrt(num / den);
  printf("  %s %-28s whole buffer rel err %.3e (tol 1e-2), max abs diff %.3e (tol %.1e)\n", tag,
         group, rel, mx, 2.5 * lr_ref * steps);
  T_CHECK(rel <= 1e-2, "%s %s: relative error %.3e", tag, group, rel);
  T_CHECK(mx <= 2.5 * lr_ref * steps, "%s %s: an element differs by %.3e", tag, group, mx);
}

/* Every tensor of a flat fp32 device buffer against <group>/<name>. */
static void cmp_params(const struct tensor_table *tt, const char *group, const float *dev,
                       double tol, int grads, int steps) {
  float *host = malloc(tt->size * sizeof(float));
  gpu_f32_down(ops, host, dev, tt->size);
  if (!grads && gpu_is_bf16(ops)) {
    cmp_weights_bf16(tt, group, host, steps);
    free(host);
    return;
  }
  double mx = 0;
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    if (grads && !(t->flags & TENSOR_GRAD)) continue;
    char path[256];
    snprintf(path, sizeof path, "%s/%s", group, t->name);
    size_t n = 0;
    float *r = t_h5_read_f32(ref, path, &n, NULL, NULL);
    T_CHECK(n == t->n, "%s: %zu elements, expected %zu", path, n, t->n);
    if (n != t->n) {
      free(r);
      continue;
    }
    double e;
    if (dino_ref_is_qkv_bias(t)) { /* q and v relative, k absolute (see the header) */
      const size_t D3 = n / 3;
      const float *h = host + t->off;
      e = dino_ref_qv_rel_err(h, r, n);
      if (grads) {
        double kmax = 0, qvmax = 0;
        for (size_t j = 0; j < n; j++) {
          const double a = fabs(h[j]);
          if (j >= D3 && j < 2 * D3) kmax = a > kmax || a != a ? a : kmax;
          else if (a > qvmax) qvmax = a;
        }
        T_CHECK(kmax <= KGRAD_REL * qvmax, "%s %s (k part): gradient %.3e, q and v up to %.3e", tag, path, kmax,
                qvmax);
      } else {
        const double ek = t_max_abs_diff_f32(h + D3, r + D3, D3);
        T_CHECK(ek <= 2 * lr_ref * steps, "%s %s (k part): max abs difference %.3e > %.1e", tag, path, ek,
                2 * lr_ref * steps);
      }
    } else {
      e = t_rel_err_f32(host + t->off, r, n);
    }
    T_CHECK(e <= tol, "%s %s: relative error %.3e > %.1e", tag, path, e, tol);
    if (t_verbose) printf("  %s %-60s rel err %.3e\n", tag, path, e);
    if (e > mx || e != e) mx = e;
    free(r);
  }
  printf("  %s %-28s max rel err over %d tensors %.3e (tol %.0e)\n", tag, group, tt->n, mx, tol);
  free(host);
}

static float *upload_dataset(const char *dset) {
  size_t n = 0;
  float *h = t_h5_read_f32(ref, dset, &n, NULL, NULL);
  float *d = gpu_f32_up(ops, h, n);
  free(h);
  return d;
}

static void run(const char *precision, const char *attention) {
  ops = gpu_or_skip(precision);
  backend_cuda_set_attention(attention);
  snprintf(tag, sizeof tag, "%s/%s", precision, attention);
  const int bf = gpu_is_bf16(ops);
  tol_fwd = bf ? 5e-2 : 2e-5;
  tol_grad = bf ? 2.5e-1 : 2e-4;
  tol_w = 2e-5; /* fp32; bf16 weights: cmp_weights_bf16 */
  struct dino_ref rf;
  dino_ref_read(ref, &rf);
  const int B = rf.B, ncrops = rf.ncrops, nl = rf.nl, K = rf.K;
  const double lr = lr_ref = rf.lr, wd = rf.wd, clip = rf.clip, mom = rf.momentum;
  const int epoch = rf.epoch, freeze = rf.freeze_last_layer;

  struct dino_ref_run st;
  dino_ref_run_init(ref, &rf, ops, &st);
  struct dino_model *m = st.m;
  const int N = st.N, D = rf.spec.vit.dim, H = rf.spec.vit.heads;
  const size_t e = ops->act_size;

  for (int step = 1; step <= 2; step++) {
    char p[256];
    printf("%s step %d\n", tag, step);
    snprintf(p, sizeof p, "/step%d/inputs/global", step);
    float *gl = upload_dataset(p);
    snprintf(p, sizeof p, "/step%d/inputs/local", step);
    float *lc = upload_dataset(p);
    snprintf(p, sizeof p, "/step%d/center_before", step);
    cmp_dev(st.loss.center, 0, (size_t)K, p, bf ? 2e-2 : 1e-5);
    dino_model_forward(m, gl, lc, B, NULL);
    snprintf(p, sizeof p, "/step%d/outputs/student_cls_global", step);
    cmp_dev(m->sh.in, 1, (size_t)2 * B * D, p, tol_fwd);
    snprintf(p, sizeof p, "/step%d/outputs/student_cls_local", step);
    cmp_dev((char *)m->sh.in + (size_t)2 * B * D * e, 1, (size_t)nl * B * D, p, tol_fwd);
    snprintf(p, sizeof p, "/step%d/outputs/pos_embed_local", step);
    /* fp32 in both precisions, from weights that bf16 steps have moved */
    cmp_dev(m->sl.pos, 0, (size_t)m->sl.N * D, p, bf && step > 1 ? 1e-2 : 2e-5);
    snprintf(p, sizeof p, "/step%d/outputs/student_logits", step);
    cmp_dev(m->sh.logits, 1, (size_t)ncrops * B * K, p, tol_fwd);
    snprintf(p, sizeof p, "/step%d/outputs/teacher_logits", step);
    cmp_dev(m->th.logits, 1, (size_t)2 * B * K, p, tol_fwd);
    vit_forward(&m->vit, ops, m->student, &st.ip, &st.is, 2 * B, gl, st.cls_inf, st.attn);
    snprintf(p, sizeof p, "/step%d/outputs/attention_last_global", step);
    cmp_dev(st.attn, 0, (size_t)2 * B * H * N * N, p, tol_fwd);
    snprintf(p, sizeof p, "/step%d/outputs/student_cls_global", step);
    cmp_dev(st.cls_inf, 1, (size_t)2 * B * D, p, tol_fwd);

    const double lv = dino_loss_forward(&st.loss, m->sh.logits, m->th.logits, m->sh.dlogits, B, epoch);
    snprintf(p, sizeof p, "/step%d/outputs/loss", step);
    double *rl = t_h5_read_f64(ref, p, NULL);
    const double le = fabs(lv - rl[0]) / fabs(rl[0]);
    printf("  %s loss %.8f reference %.8f rel err %.3e\n", tag, lv, rl[0], le);
    T_CHECK(le <= (bf ? 2e-2 : 2e-5), "%s loss %.9g vs %.9g", tag, lv, rl[0]);
    free(rl);

    dino_model_backward(m, B, NULL, NULL);
    snprintf(p, sizeof p, "/step%d/grads", step);
    cmp_params(&m->tt, p, m->grads, tol_grad, 1, step);
    dino_loss_update_center(&st.loss, B, 1, NULL, NULL);
    snprintf(p, sizeof p, "/step%d/center_after", step);
    cmp_dev(st.loss.center, 0, (size_t)K, p, bf ? 2e-2 : 2e-5);
    optim_clip(&st.opt, m->grads, clip, NULL);
    snprintf(p, sizeof p, "/step%d/clipped_grads", step);
    cmp_params(&m->tt, p, m->grads, tol_grad, 1, step);
    optim_step(&st.opt, m->student, m->grads, lr, wd, epoch < freeze);
    snprintf(p, sizeof p, "/step%d/student", step);
    cmp_params(&m->tt, p, m->student, tol_w, 0, step);
    dino_model_ema(m, mom);
    snprintf(p, sizeof p, "/step%d/teacher", step);
    cmp_params(&m->tt, p, m->teacher, tol_w, 0, step);
    ops->free(gl);
    ops->free(lc);
  }
  dino_ref_run_free(&st);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  /* --gemm-tune: the same checks with cuBLASLt's candidates timed first (&gpu gemm_tune) */
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--gemm-tune")) backend_cuda_set_gemm_tune(1);
  ref = t_datafile("dino_tiny.h5");
  run("fp32", "gemm");
  run("fp32", "flash");
  run("bf16", "gemm");
  run("bf16", "flash");
  run("bf16", "cudnn");
  return t_finish();
}
