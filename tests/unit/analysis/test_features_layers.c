/* tests/unit/analysis/test_features_layers.c - features of several blocks (upstream
 * get_intermediate_layers) by construction: the last slot is vit_forward's CLS bit for bit, block
 * i's slot is the CLS of the same network cut after block i (its first i+1 blocks and the final
 * norm), the normed tokens' first row is the CLS; features_compute's rows in the layout of
 * features_net_layout (the blocks, then the mean patch token summed in double), with and without
 * L2 normalisation, the one-block layout being today's rows bit for bit; the layout attributes of
 * the features file written and read back. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "analysis/features_io.h"
#include "backend/backend.h"
#include "core/rng.h"
#include "data/shards.h"
#include "model/arena.h"
#include "tests/fixtures/feat_fixture.h"
#include "tests/fixtures/testutil.h"

static const struct vit_dims tiny = {.patch = 8, .in_chans = 2, .dim = 24, .depth = 3, .heads = 3, .mlp_hidden = 48,
                                     .pos_grid = 4, .drop_path_rate = 0, .gelu_approx = 0};

/* One inference forward of net on B images img (host) of S x S: the CLS slots of the last nlast
 * blocks [nlast][B][D] and, when tokens is not NULL, every normed token of the last block. */
static void forward(const struct features_net *net, int B, int S, const float *img, int nlast, float *cls,
                    float *tokens) {
  const struct ops *ops = net->ops;
  const struct vit *v = &net->vit;
  const int D = v->d.dim, N = vit_tokens(v, S, S);
  struct arena a;
  struct vit_pass p;
  struct vit_scratch s;
  vit_infer_plan(&p, &s, v, &a, ops, "t", B, S, S);
  const size_t ni = (size_t)B * v->d.in_chans * S * S;
  float *dimg = ops->alloc(ni * sizeof(float));
  ops->upload(dimg, img, ni * sizeof(float));
  void *dcls = ops->alloc((size_t)nlast * B * D * sizeof(float)), *dtok = ops->alloc((size_t)B * N * D * sizeof(float));
  if (nlast == 1 && !tokens)
    vit_forward(v, ops, net->params, &p, &s, B, dimg, dcls, NULL);
  else
    vit_forward_layers(v, ops, net->params, &p, &s, B, dimg, nlast, dcls, tokens ? dtok : NULL, NULL);
  ops->download(cls, dcls, (size_t)nlast * B * D * sizeof(float)); /* the CPU's activations are fp32 */
  if (tokens) ops->download(tokens, dtok, (size_t)B * N * D * sizeof(float));
  ops->free(dimg);
  ops->free(dcls);
  ops->free(dtok);
  vit_pass_free(&p);
  arena_free(&a);
}

static void test_blocks(void) {
  const struct ops *ops = backend_cpu();
  enum { B = 3, S = 32 };
  const int D = tiny.dim, depth = tiny.depth, N = 1 + (S / 8) * (S / 8);
  struct features_net net;
  features_net_random(&net, backend_device_cpu(), &tiny, 7);
  float img[B * 2 * S * S];
  struct rng r;
  rng_init(&r, 3, RNG_DOMAIN_TEST, 0, 0);
  for (size_t i = 0; i < sizeof img / sizeof *img; i++) img[i] = (float)rng_normal(&r);
  float *cls = malloc(sizeof(float) * depth * B * D), *tok = malloc(sizeof(float) * B * N * D);
  float *one = malloc(sizeof(float) * B * D);
  forward(&net, B, S, img, depth, cls, tok);
  forward(&net, B, S, img, 1, one, NULL);
  T_CHECK(!memcmp(cls + (size_t)(depth - 1) * B * D, one, sizeof(float) * B * D),
          "the last block's slot differs from vit_forward's CLS");
  for (int b = 0; b < B; b++)
    T_CHECK(!memcmp(tok + (size_t)b * N * D, one + (size_t)b * D, sizeof(float) * D),
            "token 0 of image %d is not its CLS", b);
  /* Block i's slot: the network cut after block i gives the same CLS. */
  for (int keep = 1; keep < depth; keep++) {
    struct vit_dims d = tiny;
    d.depth = keep;
    struct features_net cut;
    features_net_random(&cut, backend_device_cpu(), &d, 99);
    float *host = malloc(sizeof(float) * net.tt.size), *chost = malloc(sizeof(float) * cut.tt.size);
    ops->download(host, net.params, sizeof(float) * net.tt.size);
    for (int t = 0; t < cut.tt.n; t++) {
      const int i = tensors_find(&net.tt, cut.tt.t[t].name);
      T_CHECK(i >= 0, "%s is no tensor of the full network", cut.tt.t[t].name);
      if (i >= 0) memcpy(chost + cut.tt.t[t].off, host + net.tt.t[i].off, sizeof(float) * cut.tt.t[t].n);
    }
    ops->upload(cut.params, chost, sizeof(float) * cut.tt.size);
    forward(&cut, B, S, img, 1, one, NULL);
    T_CHECK(!memcmp(cls + (size_t)(keep - 1) * B * D, one, sizeof(float) * B * D),
            "block %d's slot differs from the CLS of the network cut after it", keep - 1);
    free(host);
    free(chost);
    features_net_free(&cut);
  }
  free(cls);
  free(tok);
  free(one);
  features_net_free(&net);
}

/* features_compute's rows against the same batches written out here. */
static void test_compute(const char *dir) {
  char shards[600];
  snprintf(shards, sizeof shards, "%s/shards", dir);
  ff_make_shards(shards);
  struct dataset *ds = dataset_open(shards);
  const int sel[2] = {0, 2}, S = 16, batch = 3, D = tiny.dim, N = 1 + (S / 8) * (S / 8);
  struct features_prep prep;
  features_prep_setup(&prep, dataset_channels(ds), dataset_height(ds), dataset_width(ds), dataset_dtype(ds), sel, 2,
                      NULL, NULL, S, 0);
  enum { n = 8 };
  const int64_t idx[n] = {1, 4, 5, 9, 20, 21, 30, 39};
  struct features_net net;
  features_net_random(&net, backend_device_cpu(), &tiny, 5);
  float *today = features_compute(&net, &prep, ds, idx, n, batch, 1, NULL, NULL, "t");
  features_net_layout(&net, 2, 1, 0, "test");
  T_CHECK(features_net_width(&net) == 3 * D, "width %d", features_net_width(&net));
  float *rows = features_compute(&net, &prep, ds, idx, n, batch, 1, NULL, NULL, "t");
  features_net_layout(&net, 2, 1, 1, "test");
  float *rows_l2 = features_compute(&net, &prep, ds, idx, n, batch, 1, NULL, NULL, "t");

  const size_t img = (size_t)2 * S * S;
  float *imgs = malloc(sizeof(float) * img * batch), *cls = malloc(sizeof(float) * 2 * batch * D);
  float *tok = malloc(sizeof(float) * batch * N * D), *want = malloc(sizeof(float) * 3 * D);
  double *work = malloc(sizeof(double) * features_prep_work_size(&prep));
  void *raw = malloc(dataset_image_bytes(ds));
  double worst = 0;
  for (int b0 = 0; b0 < n; b0 += batch) {
    const int cnt = n - b0 < batch ? n - b0 : batch;
    for (int i = 0; i < cnt; i++) {
      dataset_read_images(ds, idx + b0 + i, 1, raw);
      features_prep_image(&prep, raw, imgs + img * i, work);
    }
    forward(&net, cnt, S, imgs, 2, cls, tok);
    for (int i = 0; i < cnt; i++) {
      memcpy(want, cls + (size_t)i * D, sizeof(float) * D);
      memcpy(want + D, cls + ((size_t)cnt + i) * D, sizeof(float) * D);
      for (int j = 0; j < D; j++) {
        double s = 0;
        for (int t = 1; t < N; t++) s += tok[((size_t)i * N + t) * D + j];
        want[2 * D + j] = (float)(s / (N - 1));
      }
      const float *got = rows + (size_t)(b0 + i) * 3 * D;
      T_CHECK(!memcmp(got, want, sizeof(float) * 3 * D), "row %d: not [block 1 CLS, block 2 CLS, mean patch token]",
              b0 + i);
      /* The one-block layout is today's features: the last block's CLS, L2-normalised. */
      features_l2_normalize(want + D, 1, D);
      T_CHECK(!memcmp(today + (size_t)(b0 + i) * D, want + D, sizeof(float) * D), "row %d: today's features changed",
              b0 + i);
      double ss = 0;
      for (int j = 0; j < 3 * D; j++) ss += (double)got[j] * got[j];
      for (int j = 0; j < 3 * D; j++) {
        const double e = fabs(rows_l2[(size_t)(b0 + i) * 3 * D + j] - got[j] / sqrt(ss));
        worst = e > worst ? e : worst;
      }
    }
  }
  T_CHECK(worst <= 1e-7, "L2-normalised rows differ from the rows over their norm by %g", worst);
  free(imgs);
  free(cls);
  free(tok);
  free(want);
  free(work);
  free(raw);
  free(today);
  free(rows);
  free(rows_l2);
  features_net_free(&net);
  features_prep_free(&prep);
  dataset_close(ds);
}

/* The layout attributes: written for a row of several parts, read back; none for one CLS token. */
static void test_file_layout(const char *dir) {
  enum { n = 2, d = 6 };
  float x[n * d];
  for (int i = 0; i < n * d; i++) x[i] = (float)(1 + i % 5);
  features_l2_normalize(x, n, d);
  int32_t labels[n] = {0, 1};
  int64_t index[n] = {3, 8};
  char *paths[n] = {"a/x.tif", "b/y.tif"}, *names[2] = {"a", "b"};
  struct features f = {.n = n, .d = d, .nclasses = 2, .x = x, .labels = labels, .index = index, .paths = paths,
                       .class_names = names, .epoch = 1, .n_last_blocks = 2, .avgpool = 1, .depth = 5};
  snprintf(f.checkpoint, sizeof f.checkpoint, "c.h5");
  snprintf(f.checkpoint_key, sizeof f.checkpoint_key, "teacher");
  char path[700];
  snprintf(path, sizeof path, "%s/layout.h5", dir);
  features_write(path, &f);
  struct features g;
  features_read(path, &g);
  T_CHECK(g.n_last_blocks == 2 && g.avgpool == 1 && g.depth == 5, "layout read back as %d blocks of %d, avgpool %d",
          g.n_last_blocks, g.depth, g.avgpool);
  T_CHECK(t_h5_attr(path, "embed_dim") == 2, "embed_dim %g", t_h5_attr(path, "embed_dim"));
  features_free(&g);
  f.n_last_blocks = 1;
  f.avgpool = 0;
  features_write(path, &f);
  features_read(path, &g);
  T_CHECK(g.n_last_blocks == 1 && g.avgpool == 0, "one CLS token read back as %d blocks, avgpool %d", g.n_last_blocks,
          g.avgpool);
  features_free(&g);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  const char *dir = t_scratch_dir("test_features_layers");
  test_blocks();
  test_compute(dir);
  test_file_layout(dir);
  return t_finish();
}
