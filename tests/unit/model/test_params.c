/* test_params.c - parameter tables, groups and counts, initialisation statistics, stochastic depth. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/init.h"
#include "model/model_config.h"
#include "model/ops.h"
#include "model/optim.h"
#include "tests/fixtures/testutil.h"

static struct dino_spec vit_small(int K, int norm_last_layer) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){.patch = 16, .in_chans = 5, .dim = 384, .depth = 12, .heads = 6,
                            .mlp_hidden = 1536, .pos_grid = 14, .drop_path_rate = 0.1};
  s.head = (struct head_dims){.hidden = 2048, .bottleneck = 256, .out_dim = K, .nlayers = 3,
                              .norm_last_layer = norm_last_layer};
  return s;
}

/* Sizes of §1.1 and §5.1 from the table alone. */
static void test_tables(void) {
  struct dino_spec s = vit_small(65536, 1);
  struct tensor_table tt;
  struct vit v;
  struct head h;
  dino_build_tables(&s, &tt, &v, &h);
  size_t backbone = 0, headn = 0;
  for (int i = 0; i < tt.n; i++) {
    if (!strncmp(tt.t[i].name, "backbone.", 9)) backbone += tt.t[i].n;
    else headn += tt.t[i].n;
  }
  const size_t D = 384, C = 5, p = 16, N0 = 196, depth = 12;
  const size_t formula = D + (1 + N0) * D + C * p * p * D + D + depth * (12 * D * D + 13 * D) + 2 * D;
  T_CHECK(backbone == 21862272 && formula == 21862272 && vit_param_count(&s.vit) == formula,
          "vit_small p16 C=5: table %zu, formula %zu, vit_param_count %zu (want 21,862,272)",
          backbone, formula, vit_param_count(&s.vit));
  T_CHECK(headn == 22352128, "head (D=384, K=65536): %zu parameters, want 22,352,128", headn);
  int nt[2];
  size_t ne[2];
  optim_group_counts(&tt, nt, ne);
  T_CHECK(nt[0] == 55 && ne[0] == 44083456, "regularised: %d tensors / %zu elements (want 55 / "
          "44,083,456)", nt[0], ne[0]);
  T_CHECK(nt[1] == 102 && ne[1] == 65408, "not regularised: %d tensors / %zu elements (want 102 / "
          "65,408)", nt[1], ne[1]);
  printf("  vit_small+head: backbone %zu, head %zu; groups %d/%zu and %d/%zu\n", backbone, headn,
         nt[0], ne[0], nt[1], ne[1]);
  /* named_parameters() order and the group of the first tensors */
  const char *first[] = {"backbone.cls_token", "backbone.pos_embed", "backbone.patch_embed.proj.weight",
                         "backbone.patch_embed.proj.bias", "backbone.blocks.0.norm1.weight",
                         "backbone.blocks.0.norm1.bias", "backbone.blocks.0.attn.qkv.weight",
                         "backbone.blocks.0.attn.qkv.bias", "backbone.blocks.0.attn.proj.weight",
                         "backbone.blocks.0.attn.proj.bias", "backbone.blocks.0.norm2.weight",
                         "backbone.blocks.0.norm2.bias", "backbone.blocks.0.mlp.fc1.weight",
                         "backbone.blocks.0.mlp.fc1.bias", "backbone.blocks.0.mlp.fc2.weight",
                         "backbone.blocks.0.mlp.fc2.bias", "backbone.blocks.1.norm1.weight"};
  for (int i = 0; i < (int)(sizeof first / sizeof first[0]); i++)
    T_CHECK(!strcmp(tt.t[i].name, first[i]), "tensor %d is %s, want %s", i, tt.t[i].name, first[i]);
  const char *last[] = {"backbone.norm.weight", "backbone.norm.bias", "head.mlp.0.weight",
                        "head.mlp.0.bias", "head.mlp.2.weight", "head.mlp.2.bias", "head.mlp.4.weight",
                        "head.mlp.4.bias", "head.last_layer.weight_g", "head.last_layer.weight_v"};
  for (int i = 0; i < 10; i++)
    T_CHECK(!strcmp(tt.t[tt.n - 10 + i].name, last[i]), "tensor %d is %s, want %s", tt.n - 10 + i,
            tt.t[tt.n - 10 + i].name, last[i]);
  T_CHECK(tt.n == 158, "%d tensors (want 4 + 12 x 12 + 2 + 8)", tt.n);
  T_CHECK(optim_is_regularized(&tt.t[0]) && optim_is_regularized(&tt.t[1]),
          "cls_token and pos_embed are weight-decayed (upstream quirk)");
  const int g = tensors_find(&tt, "head.last_layer.weight_g");
  T_CHECK(g >= 0 && !(tt.t[g].flags & TENSOR_GRAD), "weight_g is frozen with norm_last_layer");
  for (int i = 0; i < tt.n; i++)
    T_CHECK(tt.t[i].off % TENSOR_ALIGN == 0 && (i == 0 || tt.t[i].off >= tt.t[i - 1].off + tt.t[i - 1].n),
            "tensor %d offset", i);
  tensors_free(&tt);
  vit_free(&v);

  /* norm_last_layer = False: weight_g ([K,1], 2-D) is trainable and regularised. */
  s = vit_small(4096, 0);
  dino_build_tables(&s, &tt, &v, &h);
  optim_group_counts(&tt, nt, ne);
  T_CHECK(nt[0] == 56, "without norm_last_layer weight_g joins the regularised group (%d)", nt[0]);
  tensors_free(&tt);
  vit_free(&v);
  /* one-layer head: a bare Linear named head.mlp.* */
  s.head.nlayers = 1;
  dino_build_tables(&s, &tt, &v, &h);
  T_CHECK(tensors_find(&tt, "head.mlp.weight") >= 0 && tensors_find(&tt, "head.mlp.bias") >= 0 &&
          tensors_find(&tt, "head.mlp.0.weight") < 0, "nlayers = 1 names");
  tensors_free(&tt);
  vit_free(&v);
}

/* The reference model's table has exactly upstream's names and shapes. */
static void test_reference_names(void) {
  const char *ref = t_datafile("dino_tiny.h5");
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){8, 3, 48, 2, 3, 192, 4, 0, 0};
  s.head = (struct head_dims){.hidden = 96, .bottleneck = 32, .out_dim = 64, .nlayers = 3,
                              .norm_last_layer = 1};
  struct tensor_table tt;
  struct vit v;
  struct head h;
  dino_build_tables(&s, &tt, &v, &h);
  hid_t f = H5Fopen(ref, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t grp = H5Gopen2(f, "/init/student", H5P_DEFAULT);
  hsize_t nobj = 0;
  H5Gget_num_objs(grp, &nobj);
  T_CHECK((int)nobj == tt.n, "upstream has %d tensors, the table %d", (int)nobj, tt.n);
  for (int i = 0; i < tt.n; i++) {
    hid_t d = H5Dopen2(grp, tt.t[i].name, H5P_DEFAULT);
    T_CHECK(d >= 0, "upstream has no tensor %s", tt.t[i].name);
    if (d < 0) continue;
    hid_t sp = H5Dget_space(d);
    hsize_t dims[8];
    const int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
    int same = nd == tt.t[i].ndim;
    for (int k = 0; same && k < nd; k++) same = (int64_t)dims[k] == tt.t[i].shape[k];
    T_CHECK(same, "%s: shape differs from upstream's", tt.t[i].name);
    H5Sclose(sp);
    H5Dclose(d);
  }
  H5Gclose(grp);
  H5Fclose(f);
  tensors_free(&tt);
  vit_free(&v);
}

struct stats {
  double mean, std, min, max;
};
static struct stats stats_of(const float *x, size_t n) {
  struct stats s = {0, 0, 1e300, -1e300};
  double s1 = 0, s2 = 0;
  for (size_t i = 0; i < n; i++) {
    s1 += x[i];
    s2 += (double)x[i] * x[i];
    s.min = fmin(s.min, x[i]);
    s.max = fmax(s.max, x[i]);
  }
  s.mean = s1 / n;
  s.std = sqrt(s2 / n - s.mean * s.mean);
  return s;
}

static void test_init(void) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){16, 5, 192, 2, 3, 768, 14, 0.1, 0};
  s.head = (struct head_dims){.hidden = 256, .bottleneck = 64, .out_dim = 4096, .nlayers = 3,
                              .norm_last_layer = 1};
  const struct ops *ops = backend_cpu();
  struct dino_model *m = dino_model_create(ops, &s);
  dino_model_init_weights(m, 40);
  const size_t n = m->tt.size;
  float *st = malloc(n * sizeof(float)), *te = malloc(n * sizeof(float)), *again = malloc(n * 4);
  ops->download(st, m->student, n * sizeof(float));
  ops->download(te, m->teacher, n * sizeof(float));
  T_CHECK(!memcmp(st, te, n * sizeof(float)), "the teacher starts as a copy of the student");
  init_params(&m->tt, again, 40);
  T_CHECK(!memcmp(st, again, n * sizeof(float)), "initialisation is a function of the seed");
  init_params(&m->tt, again, 41);
  T_CHECK(memcmp(st, again, n * sizeof(float)), "another seed gives other weights");
  const double pb = 1 / sqrt(5.0 * 16 * 16), vb = 1 / sqrt(64.0);
  for (int i = 0; i < m->tt.n; i++) {
    const struct tensor *t = &m->tt.t[i];
    const struct stats q = stats_of(st + t->off, t->n);
    const char *nm = t->name;
    const size_t L = strlen(nm);
    if (strstr(nm, "patch_embed.proj.weight")) {
      T_CHECK(q.min >= -pb && q.max <= pb && q.max > 0.99 * pb && fabs(q.std - pb / sqrt(3)) < 0.02 * pb,
              "%s: U(+-%.5f)? min %.5f max %.5f std %.5f", nm, pb, q.min, q.max, q.std);
    } else if (strstr(nm, "patch_embed.proj.bias")) {
      T_CHECK(q.min >= -pb && q.max <= pb && q.std > 0.3 * pb, "%s: U(+-%.5f)?", nm, pb);
    } else if (strstr(nm, "weight_g")) {
      T_CHECK(q.min == 1 && q.max == 1, "%s = 1", nm);
    } else if (strstr(nm, "weight_v")) {
      T_CHECK(q.min >= -vb && q.max <= vb && q.max > 0.99 * vb && fabs(q.std - vb / sqrt(3)) < 0.02 * vb,
              "%s: U(+-%.4f)? min %.5f max %.5f std %.5f", nm, vb, q.min, q.max, q.std);
    } else if (!strcmp(nm + L - 5, ".bias")) {
      T_CHECK(q.min == 0 && q.max == 0, "%s = 0", nm);
    } else if (t->ndim == 1) {
      T_CHECK(q.min == 1 && q.max == 1, "%s (LayerNorm) = 1", nm);
    } else {
      /* trunc_normal(0.02): cls_token has only 192 values, so its bound is looser */
      const double tol = t->n < 1000 ? 0.15 : 0.03;
      T_CHECK(fabs(q.std - 0.02) < tol * 0.02 && fabs(q.mean) < 5 * 0.02 / sqrt((double)t->n) + 1e-4 &&
              q.max < 2 && q.min > -2, "%s: trunc_normal(0.02)? mean %.2e std %.5f", nm, q.mean, q.std);
      if (t_verbose) printf("  %-40s mean %+.2e std %.5f\n", nm, q.mean, q.std);
    }
  }
  free(st);
  free(te);
  free(again);
  dino_model_destroy(m);
}

/* Stochastic depth: keyed, per sample, independent per branch, student only. */
static void test_droppath(void) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){4, 1, 8, 3, 2, 16, 2, 0.5, 0};
  s.head = (struct head_dims){.hidden = 8, .bottleneck = 4, .out_dim = 8, .nlayers = 2,
                              .norm_last_layer = 1};
  const struct ops *ops = backend_cpu();
  struct dino_model *m = dino_model_create(ops, &s);
  dino_model_init_weights(m, 1);
  const int B = 200, nl = 2;
  dino_model_plan(m, B, nl, 8, 4);
  const size_t ng = (size_t)2 * B * 8 * 8, nlc = (size_t)nl * B * 4 * 4;
  float *g = ops->alloc(ng * sizeof(float)), *l = ops->alloc(nlc * sizeof(float));
  float *h = malloc(ng * sizeof(float));
  for (size_t i = 0; i < ng; i++) h[i] = (float)sin(0.37 * i);
  ops->upload(g, h, ng * sizeof(float));
  for (size_t i = 0; i < nlc; i++) h[i] = (float)cos(0.11 * i);
  ops->upload(l, h, nlc * sizeof(float));
  const size_t K = 8, ns = (size_t)(2 + nl) * B * K, nt = (size_t)2 * B * K;
  float *s1 = malloc(ns * 4), *s2 = malloc(ns * 4), *t1 = malloc(nt * 4), *t2 = malloc(nt * 4);
  struct dino_droppath dp = {.seed = 5, .step = 17, .sample_ids = NULL};
  dino_model_forward(m, g, l, B, &dp);
  ops->download(s1, m->sh.logits, ns * 4);
  ops->download(t1, m->th.logits, nt * 4);
  /* scales of the global pass: block 0 none; block 1 rate 0.25, block 2 rate 0.5 */
  const int Bp = m->sg.Bmax;
  float *sc = malloc((size_t)3 * 2 * Bp * sizeof(float));
  ops->download(sc, m->sg.dp, (size_t)3 * 2 * Bp * sizeof(float));
  for (int blk = 0; blk < 3; blk++) {
    const double rate = 0.5 * blk / 2, keep = 1 - rate;
    int zeros = 0, bad = 0, same = 0;
    for (int r = 0; r < 2 * B; r++) {
      const float a = sc[(blk * 2) * Bp + r], b = sc[(blk * 2 + 1) * Bp + r];
      zeros += (a == 0) + (b == 0);
      bad += !(a == 0 || a == (float)(1 / keep)) || !(b == 0 || b == (float)(1 / keep));
      same += a == b;
    }
    const double frac = zeros / (4.0 * B);
    T_CHECK(!bad, "block %d: scales must be 0 or 1/keep", blk);
    T_CHECK(fabs(frac - rate) < 0.06, "block %d: dropped fraction %.3f for rate %.2f", blk, frac, rate);
    if (blk == 2) T_CHECK(same < 2 * B * 0.75, "attention and MLP draws look dependent (%d)", same);
    printf("  drop-path block %d: rate %.2f, dropped %.3f\n", blk, rate, frac);
  }
  dino_model_forward(m, g, l, B, &dp);
  ops->download(s2, m->sh.logits, ns * 4);
  T_CHECK(!memcmp(s1, s2, ns * 4), "the same key gives the same masks");
  dp.step = 18;
  dino_model_forward(m, g, l, B, &dp);
  ops->download(s2, m->sh.logits, ns * 4);
  ops->download(t2, m->th.logits, nt * 4);
  T_CHECK(memcmp(s1, s2, ns * 4), "another step gives other masks");
  T_CHECK(!memcmp(t1, t2, nt * 4), "the teacher has no stochastic depth");
  /* Keyed by sample id: a sample's masks do not depend on its position in the batch. */
  int64_t *ids = malloc(B * sizeof(int64_t));
  for (int b = 0; b < B; b++) ids[b] = 1000 + b;
  dp.sample_ids = ids;
  dino_model_forward(m, g, l, B, &dp);
  float *sa = malloc((size_t)3 * 2 * Bp * 4), *sb = malloc((size_t)3 * 2 * Bp * 4);
  ops->download(sa, m->sg.dp, (size_t)3 * 2 * Bp * 4);
  for (int b = 0; b < B; b++) ids[b] = 1000 + (b + 1) % B; /* rotate the batch */
  dino_model_forward(m, g, l, B, &dp);
  ops->download(sb, m->sg.dp, (size_t)3 * 2 * Bp * 4);
  int moved = 1;
  for (int j = 0; j < 6; j++)
    for (int c = 0; c < 2; c++)
      for (int b = 0; b < B; b++)
        moved &= sb[j * Bp + c * B + b] == sa[j * Bp + c * B + (b + 1) % B];
  T_CHECK(moved, "masks follow the sample id, not the batch position");
  free(ids), free(sa), free(sb), free(sc), free(h), free(s1), free(s2), free(t1), free(t2);
  ops->free(g);
  ops->free(l);
  dino_model_destroy(m);
}

/* Optimizer semantics beyond the reference: frozen last layer (no decay, no moments, no step
 * count), frozen weight_g, groups (a zero gradient leaves a bias unchanged and only decays a
 * weight), and a late first step using its own bias correction. */
static void test_optim_semantics(void) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){4, 1, 8, 2, 2, 16, 2, 0, 0};
  s.head = (struct head_dims){.hidden = 8, .bottleneck = 4, .out_dim = 8, .nlayers = 2,
                              .norm_last_layer = 1};
  const struct ops *ops = backend_cpu();
  struct dino_model *m = dino_model_create(ops, &s);
  dino_model_init_weights(m, 3);
  const size_t n = m->tt.size;
  float *g = malloc(n * 4), *p0 = malloc(n * 4), *p1 = malloc(n * 4), *p2 = malloc(n * 4);
  float *mom = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = (float)sin(1.3 * i + 0.2);
  const int tb = tensors_find(&m->tt, "backbone.blocks.0.attn.proj.bias");
  const int tw = tensors_find(&m->tt, "backbone.blocks.0.attn.proj.weight");
  const int tv = tensors_find(&m->tt, "head.last_layer.weight_v");
  const int tg = tensors_find(&m->tt, "head.last_layer.weight_g");
  memset(g + m->tt.t[tb].off, 0, m->tt.t[tb].n * 4);
  memset(g + m->tt.t[tw].off, 0, m->tt.t[tw].n * 4);
  ops->upload(m->grads, g, n * 4);
  struct optim o;
  optim_init(&o, ops, &m->tt);
  const double lr = 0.01, wd = 0.1;
  ops->download(p0, m->student, n * 4);
  optim_step(&o, m->student, m->grads, lr, wd, 1);
  ops->download(p1, m->student, n * 4);
  ops->download(mom, o.m, n * 4);
  for (int i = 0; i < m->tt.n; i++) {
    const struct tensor *t = &m->tt.t[i];
    const int frozen = i == tv || i == tg;
    const int same = !memcmp(p0 + t->off, p1 + t->off, t->n * 4);
    double ms = 0;
    for (size_t j = 0; j < t->n; j++) ms += fabs(mom[t->off + j]);
    T_CHECK(frozen ? same && ms == 0 && o.steps[i] == 0 : o.steps[i] == 1,
            "%s after a frozen step: unchanged %d, |m| %g, steps %lld", t->name, same, ms,
            (long long)o.steps[i]);
  }
  int ok = 1;
  for (size_t j = 0; j < m->tt.t[tb].n; j++) ok &= p1[m->tt.t[tb].off + j] == p0[m->tt.t[tb].off + j];
  T_CHECK(ok, "a bias with zero gradient is not decayed");
  ok = 1;
  const float decay = (float)(1 - lr * wd);
  for (size_t j = 0; j < m->tt.t[tw].n; j++)
    ok &= p1[m->tt.t[tw].off + j] == p0[m->tt.t[tw].off + j] * decay;
  T_CHECK(ok, "a weight with zero gradient is only decayed by 1 - lr wd");
  optim_step(&o, m->student, m->grads, lr, wd, 0);
  ops->download(p2, m->student, n * 4);
  T_CHECK(o.steps[tv] == 1 && o.steps[tg] == 0 && o.steps[tb] == 2, "step counts %lld %lld %lld",
          (long long)o.steps[tv], (long long)o.steps[tg], (long long)o.steps[tb]);
  /* weight_v's first step: m = 0.1 g, v = 0.001 g^2, bias corrections of step 1 */
  double err = 0, ref = 0;
  const struct tensor *v = &m->tt.t[tv];
  for (size_t j = 0; j < v->n; j++) {
    const double gj = g[v->off + j], mj = 0.1 * gj, vj = 0.001 * gj * gj;
    const double want = p1[v->off + j] * (1 - lr * wd) -
                        lr / (1 - 0.9) * mj / (sqrt(vj) / sqrt(1 - 0.999) + 1e-8);
    err = fmax(err, fabs(want - p2[v->off + j]));
    ref = fmax(ref, fabs(want));
  }
  T_CHECK(err <= 1e-6 * ref, "late first AdamW step of weight_v off by %.3e", err);
  T_CHECK(!memcmp(p0 + m->tt.t[tg].off, p2 + m->tt.t[tg].off, m->tt.t[tg].n * 4),
          "weight_g never changes with norm_last_layer");
  /* clipping: every norm above the clip ends at the clip, the others are untouched */
  double *norms = calloc((size_t)m->tt.n, sizeof(double));
  const int nclip = optim_clip(&o, m->grads, 1.5, norms);
  float *gc = malloc(n * 4);
  ops->download(gc, m->grads, n * 4);
  int nabove = 0;
  for (int i = 0; i < m->tt.n; i++) {
    const struct tensor *t = &m->tt.t[i];
    double s2 = 0;
    for (size_t j = 0; j < t->n; j++) s2 += (double)gc[t->off + j] * gc[t->off + j];
    if (!(t->flags & TENSOR_GRAD)) {
      T_CHECK(norms[i] == 0 && !memcmp(gc + t->off, g + t->off, t->n * 4), "%s clipped", t->name);
    } else if (norms[i] > 1.5) {
      nabove++;
      T_CHECK(fabs(sqrt(s2) - 1.5) < 1e-5, "%s: clipped norm %.7f", t->name, sqrt(s2));
    } else {
      T_CHECK(!memcmp(gc + t->off, g + t->off, t->n * 4), "%s changed below the clip", t->name);
    }
  }
  T_CHECK(nclip == nabove && nabove > 0, "%d tensors clipped, %d above the clip", nclip, nabove);
  free(norms), free(gc), free(g), free(p0), free(p1), free(p2), free(mom);
  optim_free(&o);
  dino_model_destroy(m);
}

/* The whole model's gradient with stochastic depth on, against central differences of the loss
 * in fp32 (the masks are fixed by the key): a check that backward applies the same scales. */
static double model_loss(struct dino_model *m, struct dino_loss *l, const float *g, const float *lc,
                         int B, const struct dino_droppath *dp, int with_grad) {
  dino_model_forward(m, g, lc, B, dp);
  const double v = dino_loss_forward(l, m->sh.logits, m->th.logits, with_grad ? m->sh.dlogits : NULL, B, 0);
  if (with_grad) dino_model_backward(m, B, NULL, NULL);
  return v;
}
static void test_model_fd(void) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){4, 2, 16, 3, 2, 32, 2, 0.5, 0};
  s.head = (struct head_dims){.hidden = 16, .bottleneck = 8, .out_dim = 16, .nlayers = 3,
                              .norm_last_layer = 1};
  const struct ops *ops = backend_cpu();
  struct dino_model *m = dino_model_create(ops, &s);
  dino_model_init_weights(m, 9);
  const int B = 6, nl = 2;
  dino_model_plan(m, B, nl, 8, 4);
  struct dino_loss l;
  dino_loss_init(&l, ops, 16, 2 + nl, 0.04, 0.04, 0, 1, 0.1, 0.9);
  const size_t ng = (size_t)2 * B * 2 * 8 * 8, nlc = (size_t)nl * B * 2 * 4 * 4;
  float *h = malloc(ng * 4), *g = ops->alloc(ng * 4), *lc = ops->alloc(nlc * 4);
  for (size_t i = 0; i < ng; i++) h[i] = (float)sin(0.37 * i + 1);
  ops->upload(g, h, ng * 4);
  for (size_t i = 0; i < nlc; i++) h[i] = (float)cos(0.23 * i);
  ops->upload(lc, h, nlc * 4);
  /* a student that differs from the teacher, so the loss is not at a symmetric point */
  const size_t n = m->tt.size;
  float *p = malloc(n * 4), *gr = malloc(n * 4);
  ops->download(p, m->student, n * 4);
  for (size_t i = 0; i < n; i++) p[i] += 0.01f * (float)sin(2.1 * i);
  ops->upload(m->student, p, n * 4);
  struct dino_droppath dp = {.seed = 3, .step = 1, .sample_ids = NULL};
  model_loss(m, &l, g, lc, B, &dp, 1);
  ops->download(gr, m->grads, n * 4);
  float *sc = malloc((size_t)3 * 2 * m->sg.Bmax * 4);
  ops->download(sc, m->sg.dp, (size_t)3 * 2 * m->sg.Bmax * 4);
  int dropped = 0;
  for (int r = 0; r < 2 * B; r++) dropped += sc[(2 * 2) * m->sg.Bmax + r] == 0;
  T_CHECK(dropped > 0 && dropped < 2 * B, "block 2 drops %d of %d rows", dropped, 2 * B);
  const char *names[] = {"backbone.blocks.2.mlp.fc2.weight", "backbone.blocks.2.attn.proj.weight",
                         "backbone.blocks.0.attn.qkv.weight", "backbone.pos_embed",
                         "backbone.patch_embed.proj.weight", "head.last_layer.weight_v"};
  /* Along the unit direction u of each tensor's gradient the derivative is |g|: a directional
   * difference has far more signal than single coordinates in fp32. */
  float *p0 = malloc(n * 4);
  memcpy(p0, p, n * 4);
  for (int k = 0; k < 6; k++) {
    const struct tensor *t = &m->tt.t[tensors_find(&m->tt, names[k])];
    double gn = 0;
    for (size_t i = 0; i < t->n; i++) gn += (double)gr[t->off + i] * gr[t->off + i];
    gn = sqrt(gn);
    const double hh = 1e-2;
    double lv[2];
    for (int sgn = 0; sgn < 2; sgn++) {
      memcpy(p, p0, n * 4);
      for (size_t i = 0; i < t->n; i++)
        p[t->off + i] += (float)((sgn ? -hh : hh) * gr[t->off + i] / gn);
      ops->upload(m->student, p, n * 4);
      lv[sgn] = model_loss(m, &l, g, lc, B, &dp, 0);
    }
    const double fd = (lv[0] - lv[1]) / (2 * hh), e = fabs(fd - gn) / gn;
    if (t_verbose) printf("  model FD with drop-path %-36s |g| %.5f fd %.5f rel err %.2e\n", names[k], gn, fd, e);
    T_CHECK(e < 1e-2, "%s: directional derivative %.6f vs |grad| %.6f", names[k], fd, gn);
  }
  ops->upload(m->student, p0, n * 4);
  free(p0);
  free(h), free(p), free(gr), free(sc);
  ops->free(g);
  ops->free(lc);
  dino_loss_free(&l);
  dino_model_destroy(m);
}

/* The deck's defaults give scDINO's model (vit_small/16, DINO head with K = 65536). */
static void test_model_config(void) {
  static struct config cfg;
  config_defaults(&cfg);
  struct dino_spec s;
  model_config_spec(&s, &cfg, 5);
  T_CHECK(s.vit.patch == 16 && s.vit.in_chans == 5 && s.vit.dim == 384 && s.vit.depth == 12 &&
          s.vit.heads == 6 && s.vit.mlp_hidden == 1536 && s.vit.pos_grid == 14 &&
          s.vit.drop_path_rate == 0.1, "default ViT dimensions");
  T_CHECK(s.head.in_dim == 384 && s.head.hidden == 2048 && s.head.bottleneck == 256 &&
          s.head.out_dim == 65536 && s.head.nlayers == 3 && s.head.norm_last_layer == 1,
          "default head dimensions");
  snprintf(cfg.model.arch, sizeof cfg.model.arch, "custom");
  cfg.model.embed_dim = 96;
  cfg.model.depth = 4;
  cfg.model.num_heads = 4;
  cfg.model.mlp_ratio = 2.5;
  cfg.model.patch_size = 8;
  model_config_spec(&s, &cfg, 3);
  T_CHECK(s.vit.dim == 96 && s.vit.depth == 4 && s.vit.heads == 4 && s.vit.mlp_hidden == 240 &&
          s.vit.pos_grid == 28 && s.vit.in_chans == 3, "custom ViT dimensions");
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_tables();
  test_model_config();
  test_reference_names();
  test_init();
  test_droppath();
  test_optim_semantics();
  test_model_fd();
  return t_finish();
}
