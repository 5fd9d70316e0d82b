/* attention.c - calculation='attention': choice of images (named, or drawn per class), CLS-to-patch attention of the last block
 * at two image sizes, gathered on rank 0 and written as attention.h5 and PNG images. */
#include "build_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attention.h"
#include "analysis/features.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/shards.h"
#include "data/split.h"
#include "model/arena.h"
#include "train/checkpoint.h"

static int cmp_i64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* images_per_class validation images of every class, drawn without replacement by a seeded
 * partial shuffle per class; class-major, ascending within a class.  An unlabelled set is one
 * class (label -1). */
static int64_t *choose_images(const struct config *cfg, const struct dataset *ds, int64_t *n_out) {
  struct split s;
  split_dataset(ds, cfg->data.train_fraction, (uint32_t)cfg->data.split_seed, &s);
  qsort(s.val, (size_t)s.n_val, sizeof *s.val, cmp_i64);
  const int unlabelled = dataset_nclasses(ds) == 0, C = unlabelled ? 1 : dataset_nclasses(ds);
  const int64_t want = cfg->attention.images_per_class;
  int64_t *out = xmalloc(MUL_SIZE((size_t)s.n_val + 1, sizeof *out));
  int64_t *cand = xmalloc(MUL_SIZE((size_t)s.n_val + 1, sizeof *cand));
  int64_t n = 0;
  for (int c = 0; c < C; c++) {
    int64_t m = 0;
    for (int64_t i = 0; i < s.n_val; i++)
      if (dataset_label(ds, s.val[i]) == (unlabelled ? -1 : c)) cand[m++] = s.val[i];
    const int64_t k = m < want ? m : want;
    if (k < want)
      log_warn("attention: class '%s' has %" PRId64 " validation image(s), fewer than images_per_class = %" PRId64,
               dataset_class_name(ds, unlabelled ? -1 : c), m, want);
    struct rng r;
    rng_init(&r, (uint64_t)cfg->control.seed, RNG_DOMAIN_ATTENTION, (uint64_t)c, 0);
    for (int64_t i = 0; i < k; i++) {
      const int64_t j = i + (int64_t)rng_below(&r, (uint64_t)(m - i));
      const int64_t t = cand[i];
      cand[i] = cand[j];
      cand[j] = t;
    }
    qsort(cand, (size_t)k, sizeof *cand, cmp_i64);
    memcpy(out + n, cand, (size_t)k * sizeof *cand);
    n += k;
  }
  free(cand);
  split_free(&s);
  if (n < 1)
    scd_fatal(SCD_EXIT_INPUT, "attention: the validation split of %s is empty (data.train_fraction = %g)",
              cfg->data.shard_dir, cfg->data.train_fraction);
  *n_out = n;
  return out;
}

/* Whether rel names the image whose stored path is path: the whole path, or its trailing part from
 * a '/' on ('img3.tif' or 'donor1/img3.tif' for 'donor1/celltypeA/img3.tif'). */
static int path_matches(const char *path, const char *rel) {
  const size_t n = strlen(path), m = strlen(rel);
  return m <= n && strcmp(path + n - m, rel) == 0 && (m == n || path[n - m - 1] == '/');
}

/* The images &attention images names, in its order: each a path (whole or its trailing part) as
 * prepare stored it, or a 0-based index; from the whole shard set, either split.  Rank 0 looks
 * them up (one pass over the stored paths) and tells the others. */
static int64_t *named_images(const struct config *cfg, struct dataset *ds, int64_t *n_out) {
  const int n = cfg->attention.n_images;
  int64_t *out = xmalloc(MUL_SIZE((size_t)n, sizeof *out));
  if (comm_rank() == 0) {
    const int64_t total = dataset_count(ds);
    int64_t *hits = xcalloc((size_t)n, sizeof *hits);
    for (int e = 0; e < n; e++) out[e] = -1;
    char rel[4096] = "";
    for (int64_t i = 0; i < total; i++) {
      dataset_relpath(ds, i, rel, sizeof rel);
      for (int e = 0; e < n; e++)
        if (path_matches(rel, cfg->attention.images[e]) && hits[e]++ == 0) out[e] = i;
    }
    for (int e = 0; e < n; e++) {
      const char *name = cfg->attention.images[e];
      const int digits = name[0] && strspn(name, "0123456789") == strlen(name);
      if (digits && hits[e])
        scd_fatal(SCD_EXIT_INPUT, "attention.images entry %d ('%s') is both an index and the path of image %" PRId64
                  " in %s: write the path with its folder", e + 1, name, out[e], cfg->data.shard_dir);
      if (digits) {
        const int64_t v = strtoll(name, NULL, 10);
        if (strlen(name) > 18 || v >= total)
          scd_fatal(SCD_EXIT_INPUT, "attention.images entry %d ('%s'): %s holds %" PRId64 " images (indices 0 to %" PRId64
                    ")", e + 1, name, cfg->data.shard_dir, total, total - 1);
        out[e] = v;
      } else if (hits[e] == 0) {
        scd_fatal(SCD_EXIT_INPUT, "attention.images entry %d ('%s') is no image of %s (a path as prepare stored it, "
                  "relative to the TIFF folder, e.g. '%s', or its trailing part)", e + 1, name, cfg->data.shard_dir, rel);
      } else if (hits[e] > 1) {
        scd_fatal(SCD_EXIT_INPUT, "attention.images entry %d ('%s') names %" PRId64 " images of %s: give more of the "
                  "path", e + 1, name, hits[e], cfg->data.shard_dir);
      }
      for (int f = 0; f < e; f++)
        if (out[f] == out[e])
          scd_fatal(SCD_EXIT_INPUT, "attention.images entries %d ('%s') and %d ('%s') name the same image", f + 1,
                    cfg->attention.images[f], e + 1, name);
    }
    free(hits);
  }
  comm_bcast(out, (size_t)n * sizeof *out, 0);
  *n_out = n;
  return out;
}

struct ranked {
  float v;
  int j;
};
static int cmp_ranked(const void *a, const void *b) {
  const struct ranked *x = a, *y = b;
  if (x->v != y->v) return x->v < y->v ? -1 : 1;
  return (x->j > y->j) - (x->j < y->j);
}

void attention_mask(const float *map, int np, double threshold, uint8_t *mask) {
  struct ranked *r = xmalloc(sizeof *r * (size_t)np);
  double sum = 0;
  for (int j = 0; j < np; j++) {
    r[j].v = map[j];
    r[j].j = j;
    sum += map[j];
  }
  qsort(r, (size_t)np, sizeof *r, cmp_ranked);
  double cum = 0;
  for (int k = 0; k < np; k++) {
    cum += sum > 0 ? r[k].v / sum : 1.0 / np;
    mask[r[k].j] = cum > 1.0 - threshold;
  }
  free(r);
}

/* This rank's share of the images through the network at one size, then gathered on rank 0. */
static void compute_size(const struct features_net *net, struct dataset *ds, const int64_t *idx, int64_t n,
                         struct attention_size *z) {
  const struct ops *ops = net->ops;
  const struct vit *v = &net->vit;
  const int p = v->d.patch, heads = v->d.heads, C = z->prep.nsel;
  z->gh = z->prep.oh / p;
  z->gw = z->prep.ow / p;
  if (z->gh < 1 || z->gw < 1)
    scd_fatal(SCD_EXIT_INPUT, "attention: images of %dx%d are smaller than patch_size = %d", z->prep.oh, z->prep.ow, p);
  z->h = z->gh * p;
  z->w = z->gw * p;
  const int Np = z->gh * z->gw, N = Np + 1;
  const size_t map_row = (size_t)heads * Np, img_row = (size_t)C * z->h * z->w;
  const int rank = comm_rank(), size = comm_size();
  const int64_t lo = features_share_lo(n, 1, rank, size), hi = features_share_lo(n, 1, rank + 1, size);
  const size_t rows = rank == 0 ? (size_t)n : (size_t)(hi - lo);
  z->maps = xcalloc(MUL_SIZE(rows, map_row) + 1, sizeof(float));
  z->cls = xcalloc(MUL_SIZE(rows, (size_t)heads) + 1, sizeof(float));
  z->imgs = xcalloc(MUL_SIZE(rows, img_row) + 1, sizeof(float));
  const int64_t base = rank == 0 ? lo : 0; /* rank 0 holds every row in place */

  struct arena a;
  struct vit_pass pass;
  struct vit_scratch scr;
  vit_infer_plan(&pass, &scr, v, &a, ops, "attention", 1, z->h, z->w);
  const size_t nn = MUL_SIZE((size_t)N, (size_t)N);
  float *attn_dev = ops->alloc(MUL_SIZE(MUL_SIZE(nn, (size_t)heads), sizeof(float)));
  float *attn = xmalloc(MUL_SIZE(MUL_SIZE(nn, (size_t)heads), sizeof(float)));
  float *img_dev = ops->alloc(MUL_SIZE(img_row, sizeof(float)));
  void *cls_act = ops->alloc(MUL_SIZE((size_t)v->d.dim, ops->act_size));
  float *full = xmalloc(MUL_SIZE((size_t)C * z->prep.oh * z->prep.ow, sizeof(float)));
  double *work = xmalloc(features_prep_work_size(&z->prep) * sizeof(double));
  void *raw = xmalloc(dataset_image_bytes(ds));

  for (int64_t i = lo; i < hi; i++) {
    const size_t r = (size_t)(i - lo + base);
    dataset_read_images(ds, idx + i, 1, raw);
    if (features_prep_image(&z->prep, raw, full, work) == FEATURES_PREP_NONFINITE)
      log_rank("attention: sample %" PRId64 " has non-finite pixels; its maps are those of a zero image", idx[i]);
    /* Crop at the top left to whole patches (upstream: img[:, :w - w % p, :h - h % p]). */
    float *img = z->imgs + r * img_row;
    for (int c = 0; c < C; c++)
      for (int y = 0; y < z->h; y++)
        memcpy(img + ((size_t)c * z->h + y) * z->w, full + ((size_t)c * z->prep.oh + y) * z->prep.ow,
               (size_t)z->w * sizeof(float));
    ops->upload(img_dev, img, img_row * sizeof(float));
    vit_forward(v, ops, net->params, &pass, &scr, 1, img_dev, cls_act, attn_dev);
    ops->download(attn, attn_dev, nn * heads * sizeof(float));
    /* Row 0 (the CLS query) of each head: the weight on itself and, renormalised, on the patches. */
    for (int hd = 0; hd < heads; hd++) {
      const float *row = attn + (size_t)hd * nn;
      double sum = 0;
      for (int j = 1; j < N; j++) sum += row[j];
      z->cls[r * heads + hd] = row[0];
      float *m = z->maps + r * map_row + (size_t)hd * Np;
      for (int j = 1; j < N; j++) m[j - 1] = sum > 0 ? (float)(row[j] / sum) : 1.0f / Np;
    }
  }
  free(raw);
  free(work);
  free(full);
  free(attn);
  ops->free(attn_dev);
  ops->free(img_dev);
  ops->free(cls_act);
  vit_pass_free(&pass);
  arena_free(&a);

  features_gather_rows(z->maps, z->maps, n, 1, map_row * sizeof(float), 0);
  features_gather_rows(z->cls, z->cls, n, 1, (size_t)heads * sizeof(float), 0);
  features_gather_rows(z->imgs, z->imgs, n, 1, img_row * sizeof(float), 0);
  if (rank == 0 && z->threshold > 0) {
    z->masks = xmalloc(MUL_SIZE((size_t)n, map_row));
    for (size_t k = 0; k < (size_t)n * heads; k++)
      attention_mask(z->maps + k * Np, Np, z->threshold, z->masks + k * Np);
  }
}

int attention_run(const struct config *cfg) {
  const double t0 = wtime();
  const struct device *dev = backend_select(cfg);
  char ckpt[4096];
  features_checkpoint_path(cfg, ckpt, sizeof ckpt);
  struct dataset *ds = dataset_open(cfg->data.shard_dir);

  struct attention_size sz[2];
  memset(sz, 0, sizeof sz);
  int nsizes = 0;
  /* features.resize (0: the stored size, named by its smaller edge) and attention.image_size. */
  const int H = dataset_height(ds), W = dataset_width(ds), native = H < W ? H : W;
  const int sizes[2] = {cfg->features.resize > 0 ? (int)cfg->features.resize : native, (int)cfg->attention.image_size};
  struct features_input in; /* the channels and statistics of the checkpoint's network, as for features */
  features_input_choose(&in, cfg, ds, ckpt, "attention");
  for (int s = 0; s < 2; s++) {
    if (s == 1 && sizes[1] == sizes[0]) break;
    sz[nsizes].size = sizes[s];
    sz[nsizes].threshold = cfg->attention.threshold;
    features_prep_init(&sz[nsizes].prep, cfg, ds, &in, sizes[s] == native ? 0 : sizes[s]);
    nsizes++;
  }
  struct vit_dims d;
  int64_t epoch;
  features_checkpoint_dims(cfg, ckpt, &sz[0].prep, &d, &epoch);
  struct features_net net;
  struct ckpt_embed emb;
  checkpoint_embed_from_config(cfg, &emb);
  features_net_load(&net, dev, &d, &emb, ckpt, cfg->features.checkpoint_key);

  int64_t n;
  const int named = cfg->attention.n_images > 0;
  int64_t *idx = named ? named_images(cfg, ds, &n) : choose_images(cfg, ds, &n);
  if (comm_rank() == 0) attention_claim_outputs(cfg->control.run_dir, ds, d.heads, idx, n, sz, nsizes);
  char how[64];
  if (named)
    snprintf(how, sizeof how, "named by attention.images");
  else
    snprintf(how, sizeof how, "%ld per class", cfg->attention.images_per_class);
  log_info("attention: %s network of %s (epoch %" PRId64 "), %" PRId64 " image(s) (%s), %d head(s)", net.key, ckpt,
           epoch, n, how, d.heads);
  for (int s = 0; s < nsizes; s++) {
    compute_size(&net, ds, idx, n, &sz[s]);
    log_info("attention: size %d: %dx%d input, %dx%d patches", sz[s].size, sz[s].h, sz[s].w, sz[s].gh, sz[s].gw);
  }
  if (comm_rank() == 0) {
    char path[4096];
    fs_mkdir_p(cfg->control.run_dir);
    fs_join(path, sizeof path, cfg->control.run_dir, "attention.h5");
    attention_write_h5(path, ds, &net, epoch, (uint64_t)cfg->control.seed, idx, n, sz, nsizes);
    attention_write_pngs(cfg->control.run_dir, ds, &net, idx, n, sz, nsizes);
    log_info("attention: maps written to %s and %s/attention/ (%.1f s)", path, cfg->control.run_dir, wtime() - t0);
  }
  comm_barrier();
  for (int s = 0; s < nsizes; s++) {
    free(sz[s].maps);
    free(sz[s].cls);
    free(sz[s].imgs);
    free(sz[s].masks);
    features_prep_free(&sz[s].prep);
  }
  free(idx);
  features_net_free(&net);
  dataset_close(ds);
  return 0;
}
