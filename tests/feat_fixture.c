/* tests/feat_fixture.c - shard set, deck and tiny-ViT checkpoint for the features and attention tests. */
#include "build_config.h"

#include "feat_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "checkpoint.h"
#include "dino_loss.h"
#include "dino_model.h"
#include "fsutil.h"
#include "init.h"
#include "model_config.h"
#include "optim.h"
#include "shardfix.h"
#include "shards.h"

void ff_config(struct config *cfg, const char *run_dir, const char *shard_dir, const char *extra) {
  char text[8192], err[8192];
  snprintf(text, sizeof text,
           "&control calculation = 'features', run_dir = '%s', seed = 11, verbosity = 0 /\n"
           "&data shard_dir = '%s', channels = 0, 2, train_fraction = 0.5 /\n"
           "&model arch = 'custom', patch_size = 8, embed_dim = 48, depth = 2, num_heads = 3, mlp_ratio = 4,\n"
           "       out_dim = 64, head_hidden_dim = 96, head_bottleneck_dim = 32, head_nlayers = 3 /\n"
           "&crops global_size = 32, local_size = 16, local_crops_number = 2 /\n"
           "&features resize = 32, batch_size = 6 /\n"
           "&knn k = 1, 3, 5 /\n"
           "&attention images_per_class = 2, image_size = 44 /\n"
           "%s\n",
           run_dir, shard_dir, extra);
  if (config_parse_text("fixture.nml", text, cfg, err, sizeof err) != 0) {
    fprintf(stderr, "fixture deck errors:\n%s\n%s\n", err, text);
    exit(99);
  }
}

void ff_make_shards(const char *shard_dir) {
  fs_mkdir_p(shard_dir);
  const int64_t bad[1] = {FF_FLAT};
  shardfix_make(shard_dir, FF_N, FF_C, FF_H, FF_W, DATASET_U16, 16, bad, 1, 2);
}

void ff_make_checkpoint(const struct config *cfg, const char *path, uint64_t seed_student,
                        uint64_t seed_teacher, int64_t epoch) {
  const struct ops *ops = backend_cpu();
  int channels[CKPT_MAX_CHANNELS];
  const int nch = cfg->data.n_channels;
  for (int i = 0; i < nch; i++) channels[i] = (int)cfg->data.channels[i];
  struct dino_spec spec;
  model_config_spec(&spec, cfg, nch);
  struct dino_model *m = dino_model_create(ops, &spec);
  /* Teacher and student differ, so a test sees which one was loaded. */
  dino_model_init_weights(m, seed_teacher);
  float *t = ops->alloc(m->tt.size * sizeof(float));
  ops->copy(t, m->teacher, m->tt.size * sizeof(float));
  dino_model_init_weights(m, seed_student);
  ops->copy(m->teacher, t, m->tt.size * sizeof(float));
  ops->free(t);
  struct optim opt;
  optim_init(&opt, ops, &m->tt);
  struct dino_loss loss;
  dino_loss_init(&loss, ops, spec.head.out_dim, 2 + (int)cfg->crops.local_crops_number, 0.04, 0.04, 0, 1, 0.1, 0.9);
  struct ckpt_state st;
  memset(&st, 0, sizeof st);
  st.cfg = cfg;
  st.model = m;
  st.opt = &opt;
  st.loss = &loss;
  st.nchannels = nch;
  st.channels = channels;
  st.epoch = epoch;
  st.iteration = 0;
  st.niter_per_epoch = 1;
  st.world_size = 1;
  st.n_train = FF_N / 2;
  checkpoint_save(path, &st);
  dino_loss_free(&loss);
  optim_free(&opt);
  dino_model_destroy(m);
}

static double bilinear_at(const double *img, int H, int W, int oh, int ow, int y, int x) {
  double sy = ((double)y + 0.5) * H / oh - 0.5, sx = ((double)x + 0.5) * W / ow - 0.5;
  if (sy < 0) sy = 0;
  if (sx < 0) sx = 0;
  const int y0 = (int)floor(sy), x0 = (int)floor(sx);
  const int y1 = y0 + 1 < H ? y0 + 1 : H - 1, x1 = x0 + 1 < W ? x0 + 1 : W - 1;
  const double ly = sy - y0, lx = sx - x0;
  return (1 - ly) * ((1 - lx) * img[y0 * W + x0] + lx * img[y0 * W + x1]) +
         ly * ((1 - lx) * img[y1 * W + x0] + lx * img[y1 * W + x1]);
}

void ff_prepare(const uint16_t *raw, int H, int W, const int *sel, int nsel, int oh, int ow, const double *mean,
                const double *std, float *out) {
  double *ch = malloc(sizeof(double) * H * W);
  for (int s = 0; s < nsel; s++) {
    const uint16_t *p = raw + (size_t)sel[s] * H * W;
    double lo = p[0], hi = p[0];
    for (int i = 0; i < H * W; i++) {
      lo = fmin(lo, p[i]);
      hi = fmax(hi, p[i]);
    }
    for (int i = 0; i < H * W; i++) ch[i] = hi > lo ? (p[i] - lo) / (hi - lo) : 0.0;
    for (int y = 0; y < oh; y++)
      for (int x = 0; x < ow; x++) {
        double v = bilinear_at(ch, H, W, oh, ow, y, x);
        if (mean) v = (v - mean[s]) / std[s];
        out[((size_t)s * oh + y) * ow + x] = (float)v;
      }
  }
  free(ch);
}
