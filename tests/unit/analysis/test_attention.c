/* tests/unit/analysis/test_attention.c - calculation='attention' on a fixture checkpoint: the choice of images,
 * attention.h5 (maps sum to 1 over the patches; maps, CLS self-attention and the stored input
 * against an independent preparation and forward of the teacher backbone), the PNG tree decoded
 * with libpng (sizes, colour map end points at the map's extremes), and the colour map itself. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attention.h"
#include "analysis/features.h"
#include "backend/backend.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/shards.h"
#include "data/split.h"
#include "input/config.h"
#include "model/arena.h"
#include "tests/fixtures/feat_fixture.h"
#include "tests/fixtures/testutil.h"
#include "train/checkpoint.h"

static void test_colormap(void) {
  unsigned char c[3];
  attention_colormap(0.0, c);
  T_CHECK(c[0] == 68 && c[1] == 1 && c[2] == 84, "viridis(0) = %d %d %d", c[0], c[1], c[2]);
  attention_colormap(1.0, c);
  T_CHECK(c[0] == 253 && c[1] == 231 && c[2] == 37, "viridis(1) = %d %d %d", c[0], c[1], c[2]);
  attention_colormap(0.5, c);
  T_CHECK(c[0] == 33 && c[1] == 145 && c[2] == 140, "viridis(0.5) = %d %d %d", c[0], c[1], c[2]);
  attention_colormap(0.5 + 1.0 / 32, c); /* half way between two samples */
  T_CHECK(c[0] == 32 && c[1] == 153 && c[2] == 138, "viridis(0.53125) = %d %d %d", c[0], c[1], c[2]);
  attention_colormap(-3, c);
  T_CHECK(c[0] == 68, "clamped below");
  char stem[64];
  attention_image_stem("B/sub/img_0003.tiff", stem, sizeof stem);
  T_CHECK(!strcmp(stem, "img_0003"), "stem %s", stem);
  attention_image_stem("x.y.tif", stem, sizeof stem);
  T_CHECK(!strcmp(stem, "x.y"), "stem %s", stem);
}

/* Decode a PNG with libpng's simplified API; returns the pixels (format RGB or GRAY), NULL on error. */
static unsigned char *png_load(const char *path, int rgb, int *w, int *h) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&im, path)) return NULL;
  const int channels = (im.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
  if (channels != (rgb ? 3 : 1)) {
    png_image_free(&im);
    return NULL;
  }
  im.format = rgb ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  unsigned char *pix = malloc(PNG_IMAGE_SIZE(im));
  if (!png_image_finish_read(&im, NULL, pix, 0, NULL)) {
    free(pix);
    return NULL;
  }
  *w = (int)im.width;
  *h = (int)im.height;
  return pix;
}

static int64_t read_attr_i64(hid_t loc, const char *name) {
  int64_t v = -1;
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a >= 0) {
    H5Aread(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
  }
  return v;
}

/* Everything stored for one size, checked. */
static void check_size(const char *file, const char *run, const struct config *cfg, struct dataset *ds,
                       const struct features_net *net, const int64_t *idx, int n, int size) {
  const int heads = 3, p = 8, C = 2;
  int oh, ow;
  features_resize_shape(FF_H, FF_W, size, &oh, &ow);
  const int gh = oh / p, gw = ow / p, h = gh * p, w = gw * p, Np = gh * gw, N = Np + 1;
  char g[64], d[128];
  snprintf(g, sizeof g, "/size_%d", size);
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t grp = H5Gopen2(f, g, H5P_DEFAULT);
  T_CHECK(grp >= 0, "%s: no group %s", file, g);
  if (grp < 0) return;
  T_CHECK(read_attr_i64(grp, "grid_h") == gh && read_attr_i64(grp, "grid_w") == gw && read_attr_i64(grp, "height") == h,
          "size %d: grid or height attributes", size);
  H5Gclose(grp);
  H5Fclose(f);
  size_t nm = 0, nc = 0, ni = 0;
  long long dims[8];
  int nd = 0;
  snprintf(d, sizeof d, "%s/maps", g);
  float *maps = t_h5_read_f32(file, d, &nm, dims, &nd);
  T_CHECK(nd == 4 && dims[0] == n && dims[1] == heads && dims[2] == gh && dims[3] == gw, "%s shape", d);
  snprintf(d, sizeof d, "%s/cls_attention", g);
  float *cls = t_h5_read_f32(file, d, &nc, NULL, NULL);
  snprintf(d, sizeof d, "%s/images", g);
  float *imgs = t_h5_read_f32(file, d, &ni, dims, &nd);
  T_CHECK(nd == 4 && dims[1] == C && dims[2] == h && dims[3] == w, "%s shape", d);
  if (nm != (size_t)n * heads * Np || nc != (size_t)n * heads || ni != (size_t)n * C * h * w) {
    T_CHECK(0, "size %d: dataset sizes", size);
    return;
  }
  /* Maps: distributions over the patches. */
  double worst = 0;
  for (int k = 0; k < n * heads; k++) {
    double s = 0;
    for (int j = 0; j < Np; j++) {
      T_CHECK(maps[(size_t)k * Np + j] >= 0, "negative attention");
      s += maps[(size_t)k * Np + j];
    }
    worst = fmax(worst, fabs(s - 1));
  }
  printf("size %d: maps sum to 1 within %.2e\n", size, worst);
  T_CHECK(worst <= 1e-5, "size %d: a map sums to 1 +- %g", size, worst);

  /* Inputs: prepared independently (resize, normalise, crop at the top left). */
  const int sel[2] = {0, 2};
  double mean[2], std[2];
  for (int s = 0; s < C; s++) {
    mean[s] = dataset_mean(ds)[sel[s]];
    std[s] = dataset_std(ds)[sel[s]];
  }
  float *full = malloc(sizeof(float) * C * oh * ow), *ref = malloc(sizeof(float) * ni);
  uint16_t *raw = malloc(dataset_image_bytes(ds));
  for (int i = 0; i < n; i++) {
    dataset_read_images(ds, idx + i, 1, raw);
    ff_prepare(raw, FF_H, FF_W, sel, C, oh, ow, mean, std, full);
    for (int c = 0; c < C; c++)
      for (int y = 0; y < h; y++)
        memcpy(ref + (((size_t)i * C + c) * h + y) * w, full + ((size_t)c * oh + y) * ow, sizeof(float) * w);
  }
  T_CHECK(t_max_abs_diff_f32(imgs, ref, ni) <= 1e-5, "size %d: stored inputs differ from the preparation by %g", size,
          t_max_abs_diff_f32(imgs, ref, ni));

  /* Raw softmax rows from the backbone's own forward on those inputs. */
  const struct ops *ops = net->ops;
  struct arena a;
  struct vit_pass pass;
  struct vit_scratch scr;
  vit_infer_plan(&pass, &scr, &net->vit, &a, ops, "t", n, h, w);
  float *dimg = ops->alloc(sizeof(float) * ni), *dattn = ops->alloc(sizeof(float) * n * heads * N * N);
  void *dcls = ops->alloc((size_t)n * 48 * ops->act_size);
  ops->upload(dimg, ref, sizeof(float) * ni);
  vit_forward(&net->vit, ops, net->params, &pass, &scr, n, dimg, dcls, dattn);
  float *attn = malloc(sizeof(float) * n * heads * N * N);
  ops->download(attn, dattn, sizeof(float) * n * heads * N * N);
  float *rawmap = malloc(sizeof(float) * nm), *ours = malloc(sizeof(float) * nm), *self = malloc(sizeof(float) * nc);
  for (int k = 0; k < n * heads; k++) {
    const float *row = attn + (size_t)k * N * N;
    self[k] = row[0];
    for (int j = 0; j < Np; j++) {
      rawmap[(size_t)k * Np + j] = row[1 + j];
      ours[(size_t)k * Np + j] = maps[(size_t)k * Np + j] * (1 - cls[k]);
    }
  }
  T_REL(ours, rawmap, nm, 1e-5, "maps * (1 - cls_attention) vs the backbone's softmax row");
  T_REL(cls, self, nc, 1e-5, "cls_attention vs the backbone's softmax");
  ops->free(dimg);
  ops->free(dattn);
  ops->free(dcls);
  vit_pass_free(&pass);
  arena_free(&a);

  /* PNG files: one per head (RGB, upsampled by p) and one per channel (grey), decodable. */
  for (int i = 0; i < n; i++) {
    char rel[256], stem[128], path[2048];
    dataset_relpath(ds, idx[i], rel, sizeof rel);
    attention_image_stem(rel, stem, sizeof stem);
    for (int hd = 0; hd < heads; hd++) {
      snprintf(path, sizeof path, "%s/attention/c%d/%s/image_size_%d/attn-head%d.png", run, dataset_label(ds, idx[i]),
               stem, size, hd);
      int pw = 0, ph = 0;
      unsigned char *pix = png_load(path, 1, &pw, &ph);
      T_CHECK(pix && pw == w && ph == h, "%s: %s, %dx%d (expected %dx%d)", path, pix ? "decoded" : "not decodable", pw,
              ph, w, h);
      if (!pix) continue;
      /* The strongest patch is drawn at viridis(1), the weakest at viridis(0). */
      const float *m = maps + ((size_t)i * heads + hd) * Np;
      int jmax = 0, jmin = 0;
      for (int j = 1; j < Np; j++) {
        if (m[j] > m[jmax]) jmax = j;
        if (m[j] < m[jmin]) jmin = j;
      }
      const unsigned char *hi = pix + (((size_t)(jmax / gw) * p + p / 2) * w + (size_t)(jmax % gw) * p + p / 2) * 3;
      const unsigned char *lo = pix + (((size_t)(jmin / gw) * p) * w + (size_t)(jmin % gw) * p) * 3;
      T_CHECK(hi[0] == 253 && hi[1] == 231 && hi[2] == 37, "%s: maximum drawn as %d %d %d", path, hi[0], hi[1], hi[2]);
      T_CHECK(lo[0] == 68 && lo[1] == 1 && lo[2] == 84, "%s: minimum drawn as %d %d %d", path, lo[0], lo[1], lo[2]);
      free(pix);
    }
    for (int c = 0; c < C; c++) {
      snprintf(path, sizeof path, "%s/attention/c%d/%s/image_size_%d/channel_ch%d.png", run, dataset_label(ds, idx[i]),
               stem, size, sel[c]);
      int pw = 0, ph = 0;
      unsigned char *pix = png_load(path, 0, &pw, &ph);
      T_CHECK(pix && pw == w && ph == h, "%s: %s, %dx%d", path, pix ? "decoded" : "not decodable", pw, ph);
      if (pix) {
        int lo = 255, hi = 0;
        for (int k = 0; k < pw * ph; k++) {
          lo = pix[k] < lo ? pix[k] : lo;
          hi = pix[k] > hi ? pix[k] : hi;
        }
        T_CHECK(lo == 0 && hi == 255, "%s: grey range %d..%d", path, lo, hi);
      }
      free(pix);
    }
  }
  (void)cfg;
  free(rawmap);
  free(ours);
  free(self);
  free(attn);
  free(raw);
  free(full);
  free(ref);
  free(maps);
  free(cls);
  free(imgs);
}

/* Masks as upstream DINO's --threshold: a worked example, then the defining property on random maps
 * (the kept patches hold at least the threshold; without their smallest one, less). */
static void test_mask(void) {
  const float m[4] = {0.1f, 0.4f, 0.2f, 0.3f};
  uint8_t k[4];
  attention_mask(m, 4, 0.6, k); /* ascending 0.1 0.2 0.3 0.4: cumulative 0.1 0.3 0.6 1.0 > 0.4 */
  T_CHECK(!k[0] && k[1] && !k[2] && k[3], "threshold 0.6: %d%d%d%d, want 0101", k[0], k[1], k[2], k[3]);
  attention_mask(m, 4, 0.35, k); /* > 0.65: only 0.4 */
  T_CHECK(!k[0] && k[1] && !k[2] && !k[3], "threshold 0.35: %d%d%d%d, want 0100", k[0], k[1], k[2], k[3]);
  attention_mask(m, 4, 1.0, k);
  T_CHECK(k[0] && k[1] && k[2] && k[3], "threshold 1 keeps every patch");
  const float eq[3] = {0.25f, 0.5f, 0.25f}; /* a tie: the earlier patch sorts first, so goes first */
  attention_mask(eq, 3, 0.7, k);          /* cumulative 0.25 (patch 0), 0.5 (patch 2), 1.0 > 0.3 */
  T_CHECK(!k[0] && k[1] && k[2], "tie: %d%d%d, want 011", k[0], k[1], k[2]);
  struct rng r;
  rng_init(&r, 3, RNG_DOMAIN_TEST, 7, 0);
  for (int t = 0; t < 200; t++) {
    float map[50];
    uint8_t mask[50];
    double sum = 0;
    for (int j = 0; j < 50; j++) sum += map[j] = (float)(rng_uniform(&r) * rng_uniform(&r));
    const double th = 0.05 + 0.9 * rng_uniform(&r);
    attention_mask(map, 50, th, mask);
    double kept = 0, smallest = 1e30;
    for (int j = 0; j < 50; j++)
      if (mask[j]) {
        kept += map[j] / sum;
        if (map[j] / sum < smallest) smallest = map[j] / sum;
      }
    T_CHECK(kept >= th - 1e-6 && kept - smallest < th + 1e-6, "map %d, threshold %.3f: kept %.4f, smallest %.4f", t, th,
            kept, smallest);
  }
}

static void test_attention_run(const char *dir) {
  char shards[512], run[512], ckpt[800], file[1000];
  snprintf(shards, sizeof shards, "%s/shards", dir);
  snprintf(run, sizeof run, "%s/run", dir);
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.h5", run);
  ff_make_shards(shards);
  static struct config cfg;
  ff_config(&cfg, run, shards, "");
  snprintf(cfg.control.calculation, sizeof cfg.control.calculation, "attention");
  fs_mkdir_p(run);
  ff_make_checkpoint(&cfg, ckpt, 1, 2, 5);
  T_CHECK(attention_run(&cfg) == 0, "attention_run failed");
  snprintf(file, sizeof file, "%s/attention.h5", run);
  T_CHECK(fs_exists(file), "%s missing", file);

  /* Two validation images per class, class-major and ascending. */
  size_t n = 0;
  double *index = t_h5_read_f64(file, "/index", &n);
  double *labels = t_h5_read_f64(file, "/labels", NULL);
  T_CHECK(n == 6, "%zu images, expected 6", n);
  struct dataset *ds = dataset_open(shards);
  struct split sp;
  split_dataset(ds, cfg.data.train_fraction, (uint32_t)cfg.data.split_seed, &sp);
  int64_t idx[6];
  for (size_t i = 0; i < n && i < 6; i++) {
    idx[i] = (int64_t)index[i];
    int in_val = 0;
    for (int64_t j = 0; j < sp.n_val; j++) in_val |= sp.val[j] == idx[i];
    T_CHECK(in_val, "image %lld is not in the validation split", (long long)idx[i]);
    T_CHECK((int)labels[i] == (int)(i / 2) && dataset_label(ds, idx[i]) == (int)(i / 2), "image %zu class %d", i,
            (int)labels[i]);
    if (i % 2) T_CHECK(idx[i] > idx[i - 1], "not ascending within the class");
  }
  hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
  T_CHECK(read_attr_i64(f, "epoch") == 4 && read_attr_i64(f, "heads") == 3 && read_attr_i64(f, "patch_size") == 8,
          "root attributes");
  H5Fclose(f);

  if (n == 6) {
    struct features_input in;
    features_input_data(&in, &cfg, ds, 1);
    struct features_prep prep;
    features_prep_init(&prep, &cfg, ds, &in, 32);
    struct vit_dims d;
    int64_t epoch;
    features_checkpoint_dims(&cfg, ckpt, &prep, &d, &epoch);
    struct features_net net;
    features_net_load(&net, backend_device_cpu(), &d, NULL, ckpt, "teacher");
    check_size(file, run, &cfg, ds, &net, idx, 6, 32);
    check_size(file, run, &cfg, ds, &net, idx, 6, 44);
    features_net_free(&net);
    features_prep_free(&prep);
  }

  /* The same seed draws the same images; the choice is a function of the seed only.  This run also
   * draws masks (threshold 0.6): each the mask of its stored map, outlined in white on the PNG. */
  cfg.attention.threshold = 0.6;
  T_CHECK(attention_run(&cfg) == 0, "attention_run (again) failed");
  double *index2 = t_h5_read_f64(file, "/index", &n);
  T_CHECK(n == 6 && !memcmp(index, index2, sizeof(double) * 6), "a second run chose other images");
  size_t nmask = 0, nmap = 0;
  double *masks = t_h5_read_f64(file, "/size_32/masks", &nmask);
  float *maps = t_h5_read_f32(file, "/size_32/maps", &nmap, NULL, NULL);
  T_CHECK(masks && maps && nmask == nmap && nmap % 18 == 0, "size_32/masks: %zu values, maps %zu", nmask, nmap);
  if (masks && maps && nmask == nmap && nmap % 18 == 0) {
    const int np = (int)(nmap / 18);
    uint8_t *want = malloc((size_t)np);
    int bad = 0, kept = 0;
    for (int k = 0; k < 18; k++) {
      attention_mask(maps + (size_t)k * np, np, 0.6, want);
      for (int j = 0; j < np; j++) {
        bad += (masks[(size_t)k * np + j] != 0) != (want[j] != 0);
        kept += want[j] != 0;
      }
    }
    T_CHECK(bad == 0 && kept > 0 && kept < 18 * np, "masks: %d differ from attention_mask, %d of %d kept", bad, kept,
            18 * np);
    /* The first head's PNG of the first image: white exactly on the outline's pixels. */
    char rel[256], stem[128], path[2048];
    dataset_relpath(ds, (int64_t)index[0], rel, sizeof rel);
    attention_image_stem(rel, stem, sizeof stem);
    snprintf(path, sizeof path, "%s/attention/%s/%s/image_size_32/attn-head0.png", run,
             dataset_class_name(ds, (int)labels[0]), stem);
    int w = 0, h = 0;
    unsigned char *pix = png_load(path, 1, &w, &h);
    T_CHECK(pix != NULL, "%s cannot be read", path);
    if (pix) {
      const int p = 8, gw = w / p, gh = h / p;
      int white = 0, inside = 0;
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
          const unsigned char *q = pix + ((size_t)y * w + x) * 3;
          const int is_white = q[0] == 255 && q[1] == 255 && q[2] == 255;
          const int in = masks[(size_t)(y / p) * gw + x / p] != 0;
          white += is_white;
          inside += in;
          if (is_white && !in) T_CHECK(0, "(%d, %d): white outside the mask", x, y);
          if (in && (x == 0 || y == 0 || x == w - 1 || y == h - 1))
            T_CHECK(is_white, "(%d, %d): the edge of a kept patch at the border is not white", x, y);
        }
      T_CHECK(white > 0 && white < inside + 1, "%d white pixels, %d inside the mask", white, inside);
      (void)gh;
      free(pix);
    }
    free(want);
  }
  free(masks);
  free(maps);
  free(index2);
  split_free(&sp);
  dataset_close(ds);
  free(index);
  free(labels);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  log_init(0, t_verbose ? 1 : 0);
  test_colormap();
  test_mask();
  test_attention_run(t_scratch_dir("test_attention"));
  return t_finish();
}
