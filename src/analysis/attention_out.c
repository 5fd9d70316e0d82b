/* attention_out.c - attention maps to run_dir/attention.h5 and to the PNG tree run_dir/attention/. */
#include "build_config.h"

#include <hdf5.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attention.h"
#include "core/check.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "data/shards.h"

void attention_write_h5(const char *path, struct dataset *ds, const struct features_net *net, int64_t epoch,
                        uint64_t seed, const int64_t *idx, int64_t n, const struct attention_size *sz, int nsizes) {
  const int heads = net->vit.d.heads, C = sz[0].prep.nsel, ncls = dataset_nclasses(ds);
  struct h5util_image img;
  hid_t f = h5util_image_begin(path, &img);
  h5util_attr_write_str(f, "format", ATTENTION_FORMAT);
  h5util_attr_write_i64(f, "version", ATTENTION_VERSION);
  h5util_attr_write_str(f, "checkpoint", net->source);
  h5util_attr_write_str(f, "checkpoint_key", net->key);
  h5util_attr_write_i64(f, "epoch", epoch);
  h5util_attr_write_i64(f, "patch_size", net->vit.d.patch);
  h5util_attr_write_i64(f, "heads", heads);
  h5util_attr_write_i64(f, "seed", (int64_t)seed);
  int64_t sizes[2];
  for (int s = 0; s < nsizes; s++) sizes[s] = sz[s].size;
  h5util_attr_write(f, "sizes", H5T_STD_I64LE, H5T_NATIVE_INT64, (hsize_t)nsizes, sizes);
  h5util_attr_write_f64(f, "threshold", sz[0].threshold);
  h5util_attr_write_str(f, "maps",
                        "CLS-query attention of the last block over the patches, per head, renormalised to sum 1; "
                        "raw softmax = maps * (1 - cls_attention)");

  const char **cn = xcalloc((size_t)ncls, sizeof *cn);
  for (int c = 0; c < ncls; c++) cn[c] = dataset_class_name(ds, c);
  h5util_dset_write_strs(f, "class_names", cn, (hsize_t)ncls);
  free(cn);
  const char **chn = xcalloc((size_t)C, sizeof *chn);
  for (int c = 0; c < C; c++) chn[c] = dataset_channel_name(ds, sz[0].prep.sel[c]);
  h5util_dset_write_strs(f, "channel_names", chn, (hsize_t)C);
  free(chn);

  int32_t *labels = xmalloc(MUL_SIZE((size_t)n, sizeof *labels));
  char **paths = xcalloc((size_t)n, sizeof *paths);
  char rel[4096];
  for (int64_t i = 0; i < n; i++) {
    labels[i] = dataset_label(ds, idx[i]);
    dataset_relpath(ds, idx[i], rel, sizeof rel);
    paths[i] = xstrdup(rel);
  }
  const hsize_t hn = (hsize_t)n;
  h5util_dset_write(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &hn, labels);
  h5util_dset_write(f, "index", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &hn, idx);
  h5util_dset_write_strs(f, "paths", (const char *const *)paths, hn);
  for (int64_t i = 0; i < n; i++) free(paths[i]);
  free(paths);
  free(labels);

  for (int s = 0; s < nsizes; s++) {
    const struct attention_size *z = &sz[s];
    char name[64];
    snprintf(name, sizeof name, "size_%d", z->size);
    hid_t g = h5util_group_create(f, name);
    h5util_attr_write_i64(g, "size", z->size);
    h5util_attr_write_i64(g, "height", z->h);
    h5util_attr_write_i64(g, "width", z->w);
    h5util_attr_write_i64(g, "grid_h", z->gh);
    h5util_attr_write_i64(g, "grid_w", z->gw);
    const hsize_t dm[4] = {hn, (hsize_t)heads, (hsize_t)z->gh, (hsize_t)z->gw};
    const hsize_t dc[2] = {hn, (hsize_t)heads};
    const hsize_t di[4] = {hn, (hsize_t)C, (hsize_t)z->h, (hsize_t)z->w};
    h5util_dset_write(g, "maps", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, dm, z->maps);
    h5util_dset_write(g, "cls_attention", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dc, z->cls);
    h5util_dset_write(g, "images", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 4, di, z->imgs);
    if (z->masks) h5util_dset_write(g, "masks", H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, dm, z->masks);
    CHECK_H5(H5Gclose(g));
  }
  h5util_image_save(f, &img, "attention file", path);
}

void attention_image_stem(const char *relpath, char *buf, size_t n) {
  const char *base = strrchr(relpath, '/');
  base = base ? base + 1 : relpath;
  size_t len = strlen(base);
  if (len >= n) len = n - 1;
  memcpy(buf, base, len);
  buf[len] = '\0';
  char *dot = strrchr(buf, '.');
  if (dot && dot != buf) *dot = '\0';
}

/* A name that is safe as one path component. */
static void safe_name(const char *s, char *buf, size_t n) {
  size_t j = 0;
  for (; s[j] && j + 1 < n; j++) {
    const char ch = s[j];
    const int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                   ch == '_' || ch == '.' || ch == '+';
    buf[j] = ok ? ch : '_';
  }
  buf[j] = '\0';
  if (!strcmp(buf, ".") || !strcmp(buf, "..") || !buf[0]) snprintf(buf, n, "_");
}

/* Every PNG file of the tree under run_dir/attention/, in order: visit(dir, file, i, s, head, channel,
 * arg) with head >= 0 for a map, channel >= 0 for an input channel (the other -1); a folder's first
 * file is head 0. */
typedef void (*png_visit)(const char *dir, const char *file, int64_t i, int s, int head, int channel, void *arg);
static void png_tree(const char *run_dir, struct dataset *ds, int heads, const int64_t *idx, int64_t n,
                     const struct attention_size *sz, int nsizes, png_visit visit, void *arg) {
  const int C = sz[0].prep.nsel;
  char (*stems)[256] = xcalloc((size_t)n, sizeof *stems);
  char rel[4096], dir[4800], file[5400], tmp[256], cls[256];
  for (int64_t i = 0; i < n; i++) {
    dataset_relpath(ds, idx[i], rel, sizeof rel);
    attention_image_stem(rel, tmp, sizeof tmp);
    safe_name(tmp, stems[i], sizeof stems[i]);
    /* Two chosen files of one class with the same name (in different sub-folders) stay apart. */
    for (int64_t j = 0; j < i; j++)
      if (dataset_label(ds, idx[j]) == dataset_label(ds, idx[i]) && !strcmp(stems[j], stems[i])) {
        snprintf(tmp, sizeof tmp, "%.200s_%" PRId64, stems[i], idx[i]);
        memcpy(stems[i], tmp, sizeof tmp);
        break;
      }
  }
  for (int64_t i = 0; i < n; i++) {
    safe_name(dataset_class_name(ds, dataset_label(ds, idx[i])), cls, sizeof cls);
    for (int s = 0; s < nsizes; s++) {
      snprintf(dir, sizeof dir, "%s/attention/%s/%s/image_size_%d", run_dir, cls, stems[i], sz[s].size);
      for (int hd = 0; hd < heads; hd++) {
        snprintf(file, sizeof file, "%s/attn-head%d.png", dir, hd);
        visit(dir, file, i, s, hd, -1, arg);
      }
      for (int c = 0; c < C; c++) {
        safe_name(dataset_channel_name(ds, sz[s].prep.sel[c]), tmp, sizeof tmp);
        snprintf(file, sizeof file, "%s/channel_%s.png", dir, tmp);
        visit(dir, file, i, s, -1, c, arg);
      }
    }
  }
  free(stems);
}

struct png_out {
  const struct attention_size *sz;
  int heads, patch;
};

static void write_png(const char *dir, const char *file, int64_t i, int s, int head, int channel, void *arg) {
  const struct png_out *o = arg;
  const struct attention_size *z = &o->sz[s];
  if (head == 0) fs_mkdir_p(dir);
  if (head >= 0) {
    const size_t k = ((size_t)i * o->heads + head) * (size_t)z->gh * z->gw;
    attention_png_map(file, z->maps + k, z->masks ? z->masks + k : NULL, z->gh, z->gw, o->patch);
  } else {
    const size_t hw = (size_t)z->h * z->w;
    attention_png_gray(file, z->imgs + ((size_t)i * z->prep.nsel + channel) * hw, z->h, z->w);
  }
}

void attention_write_pngs(const char *run_dir, struct dataset *ds, const struct features_net *net,
                          const int64_t *idx, int64_t n, const struct attention_size *sz, int nsizes) {
  struct png_out o = {sz, net->vit.d.heads, net->vit.d.patch};
  png_tree(run_dir, ds, o.heads, idx, n, sz, nsizes, write_png, &o);
}

static const char claim_hint[] = "the maps go to control.run_dir/attention.h5 and control.run_dir/attention/: "
                                 "choose another run_dir";

static void claim_png(const char *dir, const char *file, int64_t i, int s, int head, int channel, void *arg) {
  (void)dir, (void)i, (void)s, (void)head, (void)channel, (void)arg;
  static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static const struct fs_magic png = {signature, sizeof signature};
  fs_output_claim(file, "attention map", fs_own_magic, &png, claim_hint);
}

void attention_claim_outputs(const char *run_dir, struct dataset *ds, int heads, const int64_t *idx, int64_t n,
                             const struct attention_size *sz, int nsizes) {
  char path[4096];
  fs_join(path, sizeof path, run_dir, "attention.h5");
  fs_output_claim(path, "attention file", h5util_own_format, ATTENTION_FORMAT, claim_hint);
  png_tree(run_dir, ds, heads, idx, n, sz, nsizes, claim_png, NULL);
}
