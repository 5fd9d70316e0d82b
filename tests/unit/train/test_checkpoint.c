/* test_checkpoint.c - a checkpoint written and read back: same tensors, names, shapes and state.
 *
 * A small model (random weights, moments, step counts, centre, position and metrics) is saved with
 * checkpoint_save, then: the file's layout is walked with the HDF5 API and checked against the
 * tensor table (doc/formats.md: student/, teacher/, optimizer/{exp_avg,exp_avg_sq,step}/,
 * dino_loss/center [1, K], loader and train_metrics groups, root attributes); checkpoint_restore
 * into a fresh model gives bit-identical buffers; checkpoint_read_info gives the hyperparameters;
 * checkpoint_load_weights with a backbone-only table loads the teacher's backbone. */
#include "build_config.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/rng.h"
#include "input/config.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/optim.h"
#include "tests/fixtures/testutil.h"
#include "train/checkpoint.h"

static struct dino_spec make_spec(void) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){.patch = 4, .in_chans = 3, .dim = 16, .depth = 2, .heads = 2,
                            .mlp_hidden = 32, .pos_grid = 4, .drop_path_rate = 0.1};
  s.head = (struct head_dims){.hidden = 24, .bottleneck = 8, .out_dim = 40, .nlayers = 3,
                              .norm_last_layer = 1};
  return s;
}

static void fill(const struct ops *ops, float *dev, size_t n, uint64_t id, double scale) {
  float *h = malloc(n * sizeof(float));
  struct rng r;
  rng_init(&r, 11, RNG_DOMAIN_TEST, id, 0);
  for (size_t i = 0; i < n; i++) h[i] = (float)(scale * rng_normal(&r));
  ops->upload(dev, h, n * sizeof(float));
  free(h);
}

/* Whether two device buffers agree bit for bit: over every tensor of tt (the alignment padding
 * between tensors is not stored), or over all n elements when tt is NULL. */
static int same_dev(const struct ops *ops, const struct tensor_table *tt, const float *a,
                    const float *b, size_t n) {
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  ops->download(x, a, n * sizeof(float));
  ops->download(y, b, n * sizeof(float));
  int same = 1;
  if (!tt) same = memcmp(x, y, n * sizeof(float)) == 0;
  for (int i = 0; tt && i < tt->n; i++)
    same &= memcmp(x + tt->t[i].off, y + tt->t[i].off, tt->t[i].n * sizeof(float)) == 0;
  free(x);
  free(y);
  return same;
}

/* Names of the datasets directly under a group. */
struct names {
  int n;
  char name[256][TENSOR_NAME_MAX];
};
static herr_t collect(hid_t g, const char *name, const H5L_info_t *li, void *op) {
  (void)g;
  (void)li;
  struct names *s = op;
  if (s->n < 256) snprintf(s->name[s->n++], TENSOR_NAME_MAX, "%s", name);
  return 0;
}
static void list_group(hid_t f, const char *group, struct names *s) {
  s->n = 0;
  hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
  T_CHECK(g >= 0, "group %s missing", group);
  if (g < 0) return;
  hsize_t idx = 0;
  H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, collect, s);
  H5Gclose(g);
}

/* Every tensor of tt (with TENSOR_GRAD when grad_only) appears once in the group with its shape,
 * and nothing else does. */
static void check_group(hid_t f, const char *group, const struct tensor_table *tt, int grad_only,
                        int scalar) {
  struct names s;
  list_group(f, group, &s);
  int want = 0;
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    if (grad_only && !(t->flags & TENSOR_GRAD)) continue;
    want++;
    int found = 0;
    for (int k = 0; k < s.n; k++) found += !strcmp(s.name[k], t->name);
    T_CHECK(found == 1, "%s/%s: found %d times", group, t->name, found);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", group, t->name);
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    if (d < 0) continue;
    hid_t sp = H5Dget_space(d);
    hsize_t dims[8];
    const int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
    if (scalar) {
      T_CHECK(nd == 0, "%s: rank %d, expected a scalar", path, nd);
    } else {
      int ok = nd == t->ndim;
      for (int k = 0; ok && k < nd; k++) ok = dims[k] == (hsize_t)t->shape[k];
      char buf[64];
      T_CHECK(ok, "%s: shape differs from the table's %s", path, tensors_shape_str(t, buf, sizeof buf));
    }
    H5Sclose(sp);
    H5Dclose(d);
  }
  T_CHECK(s.n == want, "%s: %d datasets, the table has %d", group, s.n, want);
}

static int64_t root_i64(hid_t f, const char *name) {
  int64_t v = -1;
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  T_CHECK(a >= 0, "root attribute %s missing", name);
  if (a < 0) return v;
  H5Aread(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  return v;
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  const struct ops *ops = backend_cpu();
  static struct config cfg;
  config_defaults(&cfg);
  snprintf(cfg.model.arch, sizeof cfg.model.arch, "custom");
  cfg.training.epochs = 7;
  const struct dino_spec spec = make_spec();
  const int channels[3] = {0, 2, 4};
  const char *dir = t_scratch_dir("test_checkpoint");
  char path[4096];
  fs_join(path, sizeof path, dir, "checkpoint.h5");

  /* A state with every part distinguishable. */
  struct dino_model *m = dino_model_create(ops, &spec);
  struct dino_loss l;
  dino_loss_init(&l, ops, spec.head.out_dim, 4, 0.04, 0.04, 0, 7, 0.1, 0.9);
  struct optim o;
  optim_init(&o, ops, &m->tt);
  const size_t n = m->tt.size;
  dino_model_init_weights(m, 3);
  fill(ops, m->teacher, n, 1, 0.05);
  fill(ops, o.m, n, 2, 1e-3);
  fill(ops, o.v, n, 3, 1e-6);
  fill(ops, l.center, (size_t)spec.head.out_dim, 4, 0.1);
  for (int i = 0; i < m->tt.n; i++) o.steps[i] = (m->tt.t[i].flags & TENSOR_GRAD) ? 100 + i : 0;
  struct ckpt_state st = {.cfg = &cfg, .model = m, .opt = &o, .loss = &l, .nchannels = 3,
                          .channels = channels, .epoch = 3, .iteration = 5, .niter_per_epoch = 9,
                          .world_size = 2, .n_train = 77};
  st.metrics = (struct ckpt_metrics){1.5, 10, 2e-4, 0.3, 5, 150, 12.5};
  checkpoint_save(path, &st);
  T_CHECK(fs_exists(path), "%s not written", path);

  /* Layout, names and shapes against the table. */
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  T_CHECK(f >= 0, "cannot open %s", path);
  check_group(f, "student", &m->tt, 0, 0);
  check_group(f, "teacher", &m->tt, 0, 0);
  check_group(f, "optimizer/exp_avg", &m->tt, 1, 0);
  check_group(f, "optimizer/exp_avg_sq", &m->tt, 1, 0);
  check_group(f, "optimizer/step", &m->tt, 1, 1);
  T_CHECK(tensors_find(&m->tt, "head.last_layer.weight_g") >= 0 &&
              !(m->tt.t[tensors_find(&m->tt, "head.last_layer.weight_g")].flags & TENSOR_GRAD),
          "weight_g must be frozen with norm_last_layer");
  T_CHECK(H5Lexists(f, "student/backbone.pos_embed", H5P_DEFAULT) > 0 &&
              H5Lexists(f, "teacher/head.last_layer.weight_v", H5P_DEFAULT) > 0 &&
              H5Lexists(f, "student/module.backbone.pos_embed", H5P_DEFAULT) <= 0,
          "PyTorch state_dict names without the module. prefix");
  struct tensor c = {.ndim = 2, .shape = {1, spec.head.out_dim}, .n = (size_t)spec.head.out_dim};
  snprintf(c.name, sizeof c.name, "center");
  struct tensor_table ct = {.t = &c, .n = 1, .cap = 1, .size = c.n};
  check_group(f, "dino_loss", &ct, 0, 0);
  T_CHECK(H5Lexists(f, "loader", H5P_DEFAULT) > 0 && H5Lexists(f, "train_metrics", H5P_DEFAULT) > 0,
          "loader / train_metrics groups missing");
  T_CHECK(root_i64(f, "version") == CKPT_VERSION, "version");
  T_CHECK(root_i64(f, "epoch") == 3 && root_i64(f, "iteration") == 5 &&
              root_i64(f, "global_step") == 3 * 9 + 5 && root_i64(f, "world_size") == 2,
          "position attributes");
  T_CHECK(root_i64(f, "embed_dim") == 16 && root_i64(f, "out_dim") == 40 &&
              root_i64(f, "head_bottleneck_dim") == 8 && root_i64(f, "pos_grid") == 4,
          "hyperparameter attributes");
  H5Fclose(f);

  /* The root attributes as the readers see them. */
  struct ckpt_info info;
  checkpoint_read_info(path, &info);
  T_CHECK(info.has_spec && info.has_state, "has_spec %d has_state %d", info.has_spec, info.has_state);
  /* field by field: memcmp would also compare the padding before drop_path_rate, which the
   * compound literal in make_spec leaves unspecified (it differed at -O1 --coverage) */
  const struct vit_dims *rv = &info.spec.vit, *wv = &spec.vit;
  T_CHECK(rv->patch == wv->patch && rv->in_chans == wv->in_chans && rv->dim == wv->dim &&
              rv->depth == wv->depth && rv->heads == wv->heads &&
              rv->mlp_hidden == wv->mlp_hidden && rv->pos_grid == wv->pos_grid &&
              rv->drop_path_rate == wv->drop_path_rate,
          "vit dimensions read back differ");
  T_CHECK(info.spec.head.out_dim == 40 && info.spec.head.hidden == 24 &&
              info.spec.head.bottleneck == 8 && info.spec.head.nlayers == 3 &&
              info.spec.head.norm_last_layer == 1,
          "head dimensions read back differ");
  T_CHECK(info.nchannels == 3 && info.channels[1] == 2 && info.channels[2] == 4, "channels");
  T_CHECK(info.epoch == 3 && info.iteration == 5 && info.niter_per_epoch == 9 &&
              info.world_size == 2 && info.n_train == 77 && info.epochs == 7,
          "position read back");
  T_CHECK(!strcmp(info.arch, "custom"), "arch '%s'", info.arch);

  /* Restore into a fresh model: bit-identical state. */
  struct dino_model *m2 = dino_model_create(ops, &spec);
  struct dino_loss l2;
  dino_loss_init(&l2, ops, spec.head.out_dim, 4, 0.04, 0.04, 0, 7, 0.1, 0.9);
  struct optim o2;
  optim_init(&o2, ops, &m2->tt);
  struct ckpt_state st2 = {.cfg = &cfg, .model = m2, .opt = &o2, .loss = &l2};
  struct ckpt_info info2;
  checkpoint_restore(path, &st2, &info2);
  T_CHECK(same_dev(ops, &m->tt, m->student, m2->student, n), "student differs after restore");
  T_CHECK(same_dev(ops, &m->tt, m->teacher, m2->teacher, n), "teacher differs after restore");
  /* moments of trainable tensors (frozen weight_g has none stored: zero after restore) */
  int gi = tensors_find(&m->tt, "head.last_layer.weight_g");
  float *h1 = malloc(n * sizeof(float)), *h2 = malloc(n * sizeof(float));
  for (int which = 0; which < 2; which++) {
    ops->download(h1, which ? o.v : o.m, n * sizeof(float));
    ops->download(h2, which ? o2.v : o2.m, n * sizeof(float));
    int bad = 0;
    for (int i = 0; i < m->tt.n; i++) {
      const struct tensor *t = &m->tt.t[i];
      if (i == gi) continue;
      bad += memcmp(h1 + t->off, h2 + t->off, t->n * sizeof(float)) != 0;
    }
    T_CHECK(bad == 0, "%s: %d tensors differ after restore", which ? "exp_avg_sq" : "exp_avg", bad);
  }
  free(h1);
  free(h2);
  T_CHECK(!memcmp(o.steps, o2.steps, (size_t)m->tt.n * sizeof *o.steps), "step counts differ");
  T_CHECK(same_dev(ops, NULL, l.center, l2.center, (size_t)spec.head.out_dim), "centre differs");
  T_CHECK(st2.epoch == 3 && st2.iteration == 5, "position %lld/%lld", (long long)st2.epoch,
          (long long)st2.iteration);
  T_CHECK(!memcmp(&st.metrics, &st2.metrics, sizeof st.metrics), "metrics differ");

  /* A backbone-only table (what features and attention build) loads the teacher's backbone. */
  struct tensor_table bt;
  struct vit bv;
  tensors_init(&bt);
  vit_init(&bv, &spec.vit, &bt, "backbone.");
  float *bb = ops->alloc(bt.size * sizeof(float));
  checkpoint_load_weights(path, CKPT_TEACHER, NULL, &bt, ops, bb);
  float *hb = malloc(bt.size * sizeof(float)), *ht = malloc(n * sizeof(float));
  ops->download(hb, bb, bt.size * sizeof(float));
  ops->download(ht, m->teacher, n * sizeof(float));
  int bad = 0;
  for (int i = 0; i < bt.n; i++) {
    const int j = tensors_find(&m->tt, bt.t[i].name);
    bad += j < 0 || memcmp(hb + bt.t[i].off, ht + m->tt.t[j].off, bt.t[i].n * sizeof(float)) != 0;
  }
  T_CHECK(bad == 0 && bt.n > 10, "%d of %d backbone tensors differ", bad, bt.n);
  free(hb);
  free(ht);
  ops->free(bb);
  vit_free(&bv);
  tensors_free(&bt);

  optim_free(&o2);
  dino_loss_free(&l2);
  dino_model_destroy(m2);
  optim_free(&o);
  dino_loss_free(&l);
  dino_model_destroy(m);
  return t_finish();
}
