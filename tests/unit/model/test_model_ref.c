/* test_model_ref.c - two DINO training steps on the CPU backend against upstream's tensors (dino_tiny.h5).
 *
 * From /init/student (teacher = copy) and the crops of /step1 and /step2: backbone CLS outputs,
 * interpolated position embedding, last-block attention, student and teacher logits, loss, centre
 * before/after, gradients before and after per-tensor clipping, student and teacher weights after
 * AdamW + EMA.  Step 2 continues from step 1's weights, moments and centre.  Tolerances (relative
 * L2 error): 1e-5 forward, 1e-4 gradients, 1e-5 weights. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/grad_comm.h"
#include "model/ops.h"
#include "model/optim.h"
#include "tests/fixtures/dino_ref.h"
#include "tests/fixtures/testutil.h"

#define TOL_FWD 1e-5
#define TOL_GRAD 1e-4
#define TOL_W 1e-5
/* Absolute, per step taken, on the key part of qkv.bias (see cmp_params): a tenth of AdamW's
 * largest possible step (lr = 1e-3). */
#define TOL_KBIAS 1e-4

static const char *ref;
static const struct ops *ops;
static double worst[4]; /* forward, gradients, clipped gradients, weights */

static int h5_has(const char *path) {
  hid_t f = H5Fopen(ref, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return 0;
  /* Check each component so a missing group is not an error. */
  char buf[512];
  int ok = 1;
  for (const char *p = strchr(path + 1, '/');; p = strchr(p + 1, '/')) {
    const size_t n = p ? (size_t)(p - path) : strlen(path);
    snprintf(buf, sizeof buf, "%.*s", (int)n, path);
    if (H5Lexists(f, buf, H5P_DEFAULT) <= 0) {
      ok = 0;
      break;
    }
    if (!p) break;
  }
  H5Fclose(f);
  return ok;
}

static void note(int kind, double e) {
  if (e > worst[kind] || e != e) worst[kind] = e;
}

/* Compare n floats of device memory with a reference dataset. */
static double cmp_dev(const void *dev, size_t n, const char *dset, double tol, int kind) {
  size_t rn = 0;
  float *r = t_h5_read_f32(ref, dset, &rn, NULL, NULL);
  T_CHECK(rn == n, "%s: %zu elements, expected %zu", dset, rn, n);
  float *h = malloc(n * sizeof(float));
  ops->download(h, dev, n * sizeof(float));
  const double e = rn == n ? t_rel_err_f32(h, r, n) : INFINITY;
  T_REL(h, r, rn == n ? n : 0, tol, dset);
  if (rn != n) t_failures++;
  note(kind, e);
  free(h);
  free(r);
  return e;
}

/* Compare every tensor of a flat device buffer with <group>/<name>; tensors without a gradient
 * must be absent from gradient groups. */
static void cmp_params(const struct tensor_table *tt, const char *group, const float *dev,
                       double tol, int kind, int grads, int steps) {
  float *host = malloc(tt->size * sizeof(float));
  ops->download(host, dev, tt->size * sizeof(float));
  double mx = 0, kmax = 0;
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    char path[256];
    snprintf(path, sizeof path, "%s/%s", group, t->name);
    if (grads && !(t->flags & TENSOR_GRAD)) {
      T_CHECK(!h5_has(path), "%s: upstream has a gradient for a frozen tensor", path);
      continue;
    }
    size_t n = 0;
    float *r = t_h5_read_f32(ref, path, &n, NULL, NULL);
    T_CHECK(n == t->n, "%s: %zu elements, expected %zu", path, n, t->n);
    if (n == t->n && grads && dino_ref_is_qkv_bias(t)) {
      /* ... and the gradient of the key part is indeed only noise, here and upstream. */
      const size_t D3 = n / 3;
      double kn = 0, qvn = 0, rkn = 0;
      for (size_t j = 0; j < n; j++) {
        const double x = host[t->off + j];
        if (j >= D3 && j < 2 * D3) {
          kn += x * x;
          rkn += (double)r[j] * r[j];
        } else {
          qvn += x * x;
        }
      }
      T_CHECK(sqrt(kn) <= 1e-6 * sqrt(qvn) && sqrt(rkn) <= 1e-6 * sqrt(qvn),
              "%s: key-part gradient norm %.3e (upstream %.3e) is not noise next to %.3e", path,
              sqrt(kn), sqrt(rkn), sqrt(qvn));
    }
    if (n == t->n && !grads && dino_ref_is_qkv_bias(t)) {
      /* The key part of qkv.bias has an exactly zero gradient (softmax is invariant to adding
       * q.b_k to a whole row of scores): both implementations get rounding noise (~1e-10) there,
       * which AdamW turns into updates of about lr*noise/eps.  Compare q and v relatively and the
       * key part absolutely, at the scale of that noise. */
      const size_t D3 = n / 3;
      const double e = dino_ref_qv_rel_err(host + t->off, r, n);
      const double ek = t_max_abs_diff_f32(host + t->off + D3, r + D3, D3);
      T_CHECK(e <= tol, "%s (q, v parts): relative error %.3e > %.0e", path, e, tol);
      T_CHECK(ek <= TOL_KBIAS * steps, "%s (k part): max abs difference %.3e > %.0e", path, ek,
              TOL_KBIAS * steps);
      if (t_verbose) printf("  %-60s rel err %.3e (q, v), k part abs %.3e\n", path, e, ek);
      if (e > mx || e != e) mx = e;
      if (ek > kmax) kmax = ek;
    } else if (n == t->n) {
      const double e = t_rel_err_f32(host + t->off, r, n);
      T_CHECK(e <= tol, "%s: relative error %.3e > %.0e", path, e, tol);
      if (t_verbose) printf("  %-60s rel err %.3e\n", path, e);
      if (e > mx || e != e) mx = e;
    }
    free(r);
  }
  printf("  %-28s max rel err over %d tensors %.3e (tol %.0e)", group, tt->n, mx, tol);
  if (!grads) printf("; qkv.bias key part max abs diff %.3e (tol %.0e)", kmax, TOL_KBIAS * steps);
  printf("\n");
  note(kind, mx);
  free(host);
}

/* grads_ready bookkeeping: the ranges in call order. */
struct ready {
  int calls, first[64], last[64];
};
static void on_ready(int first, int last, void *ctx) {
  struct ready *r = ctx;
  if (r->calls < 64) {
    r->first[r->calls] = first;
    r->last[r->calls] = last;
  }
  r->calls++;
}

/* Expected: head, final norm, blocks from the last to the first, embeddings. */
static void check_ready(const struct ready *r, const struct dino_model *m) {
  const int depth = m->vit.d.depth;
  int ok = r->calls == depth + 3;
  if (ok) {
    ok &= r->first[0] == m->head.first && r->last[0] == m->head.last;
    ok &= r->first[1] == m->vit.norm_first && r->last[1] == m->vit.norm_last;
    for (int i = 0; i < depth; i++)
      ok &= r->first[2 + i] == m->vit.blk[depth - 1 - i].first &&
            r->last[2 + i] == m->vit.blk[depth - 1 - i].last;
    ok &= r->first[depth + 2] == m->vit.embed_first && r->last[depth + 2] == m->vit.embed_last;
    /* together they cover the table once */
    int covered = 0;
    for (int c = 0; c < r->calls; c++) covered += r->last[c] - r->first[c] + 1;
    ok &= covered == m->tt.n && m->vit.embed_first == 0 && m->head.last == m->tt.n - 1;
  }
  T_CHECK(ok, "grads_ready ranges (%d calls) are not head, norm, blocks %d..0, embeddings",
          r->calls, depth - 1);
  /* They are what dino_ready_group lists (the sequence scdino_allreduce_perf --sizes-from-model
   * replays), and their buffer ranges (grad_comm_tensor_range, padding included) tile the buffer
   * from the top down, so the communicator sees adjacent descending ranges. */
  int same = r->calls == dino_ready_count(&m->vit);
  size_t top = m->tt.size;
  for (int k = 0; same && k < r->calls; k++) {
    int first, last;
    dino_ready_group(&m->vit, &m->head, k, &first, &last);
    const struct grad_comm_range g = grad_comm_tensor_range(&m->tt, first, last);
    same = first == r->first[k] && last == r->last[k] && g.off + g.count == top;
    top = g.off;
  }
  T_CHECK(same && top == 0, "grads_ready calls differ from dino_ready_group, or their ranges do not tile the buffer");
}

static float *upload_dataset(const char *dset, size_t *n_out) {
  size_t n = 0;
  float *h = t_h5_read_f32(ref, dset, &n, NULL, NULL);
  float *d = ops->alloc(n * sizeof(float));
  ops->upload(d, h, n * sizeof(float));
  free(h);
  if (n_out) *n_out = n;
  return d;
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  ref = t_datafile("dino_tiny.h5");
  ops = backend_cpu();
  struct dino_ref rf;
  dino_ref_read(ref, &rf);
  const int B = rf.B, ncrops = rf.ncrops, nl = rf.nl, K = rf.K;
  T_CHECK(ncrops == 2 + nl, "ncrops %d vs n_local %d", ncrops, nl);

  const double lr = rf.lr, wd = rf.wd, clip = rf.clip, mom = rf.momentum;
  const int epoch = rf.epoch, freeze = rf.freeze_last_layer;

  /* The model, its loss and optimizer, and an inference pass of the backbone for the attention
   * maps (and to check that path too). */
  struct dino_ref_run st;
  dino_ref_run_init(ref, &rf, ops, &st);
  struct dino_model *m = st.m;
  const int N = st.N, D = rf.spec.vit.dim, H = rf.spec.vit.heads;

  for (int step = 1; step <= 2; step++) {
    char p[256];
    printf("step %d\n", step);
    snprintf(p, sizeof p, "/step%d/inputs/global", step);
    float *g = upload_dataset(p, NULL);
    snprintf(p, sizeof p, "/step%d/inputs/local", step);
    float *l = upload_dataset(p, NULL);

    snprintf(p, sizeof p, "/step%d/center_before", step);
    cmp_dev(st.loss.center, (size_t)K, p, TOL_FWD, 0);

    dino_model_forward(m, g, l, B, NULL);
    const size_t e = ops->act_size;
    snprintf(p, sizeof p, "/step%d/outputs/student_cls_global", step);
    cmp_dev(m->sh.in, (size_t)2 * B * D, p, TOL_FWD, 0);
    snprintf(p, sizeof p, "/step%d/outputs/student_cls_local", step);
    cmp_dev((char *)m->sh.in + (size_t)2 * B * D * e, (size_t)nl * B * D, p, TOL_FWD, 0);
    snprintf(p, sizeof p, "/step%d/outputs/pos_embed_local", step);
    T_CHECK(m->sl.interp, "the local crops must use an interpolated position embedding");
    cmp_dev(m->sl.pos, (size_t)m->sl.N * D, p, TOL_FWD, 0);
    snprintf(p, sizeof p, "/step%d/outputs/student_logits", step);
    cmp_dev(m->sh.logits, (size_t)ncrops * B * K, p, TOL_FWD, 0);
    snprintf(p, sizeof p, "/step%d/outputs/teacher_logits", step);
    cmp_dev(m->th.logits, (size_t)2 * B * K, p, TOL_FWD, 0);

    /* Last-block attention of the student's global forward (before the update), through the
     * inference path, whose CLS must agree with the training path's. */
    vit_forward(&m->vit, ops, m->student, &st.ip, &st.is, 2 * B, g, st.cls_inf, st.attn);
    snprintf(p, sizeof p, "/step%d/outputs/attention_last_global", step);
    cmp_dev(st.attn, (size_t)2 * B * H * N * N, p, TOL_FWD, 0);
    snprintf(p, sizeof p, "/step%d/outputs/student_cls_global", step);
    cmp_dev(st.cls_inf, (size_t)2 * B * D, p, TOL_FWD, 0);

    const double lv = dino_loss_forward(&st.loss, m->sh.logits, m->th.logits, m->sh.dlogits, B, epoch);
    snprintf(p, sizeof p, "/step%d/outputs/loss", step);
    double *rl = t_h5_read_f64(ref, p, NULL);
    const double le = fabs(lv - rl[0]) / fabs(rl[0]);
    printf("  loss %.8f reference %.8f rel err %.3e\n", lv, rl[0], le);
    T_CHECK(le <= TOL_FWD, "loss %.9g vs %.9g", lv, rl[0]);
    note(0, le);
    free(rl);

    struct ready rd = {0};
    dino_model_backward(m, B, on_ready, &rd);
    check_ready(&rd, m);
    snprintf(p, sizeof p, "/step%d/grads", step);
    cmp_params(&m->tt, p, m->grads, TOL_GRAD, 1, 1, step);

    dino_loss_update_center(&st.loss, B, 1, NULL, NULL);
    snprintf(p, sizeof p, "/step%d/center_after", step);
    cmp_dev(st.loss.center, (size_t)K, p, TOL_FWD, 0);

    optim_clip(&st.opt, m->grads, clip, NULL);
    snprintf(p, sizeof p, "/step%d/clipped_grads", step);
    cmp_params(&m->tt, p, m->grads, TOL_GRAD, 2, 1, step);

    optim_step(&st.opt, m->student, m->grads, lr, wd, epoch < freeze);
    snprintf(p, sizeof p, "/step%d/student", step);
    cmp_params(&m->tt, p, m->student, TOL_W, 3, 0, step);
    dino_model_ema(m, mom);
    snprintf(p, sizeof p, "/step%d/teacher", step);
    cmp_params(&m->tt, p, m->teacher, TOL_W, 3, 0, step);
    ops->free(g);
    ops->free(l);
  }
  /* The optimizer and the EMA alone, on upstream's own inputs: /init/student with upstream's
   * clipped step-1 gradients must give upstream's step-1 student, and the EMA of /init with that
   * student upstream's step-1 teacher (no propagated gradient differences here). */
  {
    struct optim o1;
    optim_init(&o1, ops, &m->tt);
    dino_ref_load_params(ref, ops, &m->tt, "/init/student", m->student);
    dino_ref_load_params(ref, ops, &m->tt, "/init/student", m->teacher);
    float *gbuf = ops->alloc(m->tt.size * sizeof(float));
    /* frozen weight_g has no reference gradient: leave it zero */
    float *host = calloc(m->tt.size, sizeof(float));
    for (int i = 0; i < m->tt.n; i++) {
      const struct tensor *t = &m->tt.t[i];
      if (!(t->flags & TENSOR_GRAD)) continue;
      char p[256];
      snprintf(p, sizeof p, "/step1/clipped_grads/%s", t->name);
      size_t n = 0;
      float *x = t_h5_read_f32(ref, p, &n, NULL, NULL);
      if (n == t->n) memcpy(host + t->off, x, n * sizeof(float));
      free(x);
    }
    ops->upload(gbuf, host, m->tt.size * sizeof(float));
    optim_step(&o1, m->student, gbuf, lr, wd, 0);
    printf("optimizer alone (upstream gradients):\n");
    cmp_params(&m->tt, "/step1/student", m->student, TOL_W, 3, 0, 1);
    dino_ref_load_params(ref, ops, &m->tt, "/step1/student", m->student);
    dino_model_ema(m, mom);
    cmp_params(&m->tt, "/step1/teacher", m->teacher, TOL_W, 3, 0, 1);
    free(host);
    ops->free(gbuf);
    optim_free(&o1);
  }
  /* Per-tensor step counters: every trainable tensor stepped twice, weight_g never. */
  for (int i = 0; i < m->tt.n; i++)
    T_CHECK(st.opt.steps[i] == ((m->tt.t[i].flags & TENSOR_GRAD) ? 2 : 0), "%s: %lld steps",
            m->tt.t[i].name, (long long)st.opt.steps[i]);
  printf("worst relative errors: forward %.3e, gradients %.3e, clipped %.3e, weights %.3e\n",
         worst[0], worst[1], worst[2], worst[3]);
  dino_ref_run_free(&st);
  return t_finish();
}
