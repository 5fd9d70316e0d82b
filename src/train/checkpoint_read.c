/* checkpoint_read.c - validated reading of checkpoints: root attributes, weights, full training state. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "model/dino_loss.h"
#include "model/optim.h"
#include "train/checkpoint.h"

SCD_NORETURN SCD_PRINTF(2, 3) static void bad(const char *path, const char *fmt, ...) {
  char msg[3072];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  scd_fatal(SCD_EXIT_DATA, "checkpoint %s: %s", path, msg);
}

/* ---- attributes ------------------------------------------------------------------------------- */

/* An attribute the file may lack (rc from an h5util reader): whether it was read.  One that is
 * there but is not a single value of its kind ends the job. */
static int optional(const char *path, int rc) { return h5util_optional("checkpoint", path, rc); }

/* ---- opening and the root attributes ---------------------------------------------------------- */

static hid_t open_checkpoint(const char *path) {
  hid_t fid;
  h5util_need("checkpoint", path, h5util_file_open(path, &fid));
  char fmt[128] = "";
  if (!optional(path, h5util_attr_read_str(fid, "format", fmt, sizeof fmt)))
    bad(path, "no 'format' attribute: not an scdino checkpoint (convert PyTorch .pth files with "
              "examples/import_pytorch.py)");
  if (strcmp(fmt, CKPT_FORMAT) != 0)
    bad(path, "format is '%s', expected '%s'", fmt, CKPT_FORMAT);
  int64_t version = 0;
  h5util_need("checkpoint", path, h5util_attr_read_i64(fid, "version", &version));
  if (version < CKPT_VERSION_OLDEST || version > CKPT_VERSION)
    bad(path, "version %lld is not supported by this scdino (reads versions %d to %d)", (long long)version,
        CKPT_VERSION_OLDEST, CKPT_VERSION);
  return fid;
}

static int geti(hid_t fid, const char *path, const char *name, int *out) {
  int64_t v;
  if (!optional(path, h5util_attr_read_i64(fid, name, &v))) return 0;
  if (v < 0 || v > 1 << 30) bad(path, "attribute '%s' = %lld is out of range", name, (long long)v);
  *out = (int)v;
  return 1;
}

/* /normalization: the training set's statistics and names of the selected channels (absent from
 * imports and older files: nnorm stays 0). */
static void read_normalization(hid_t fid, const char *path, struct ckpt_info *info) {
  if (H5Lexists(fid, "normalization", H5P_DEFAULT) <= 0) return;
  hid_t g = H5Gopen2(fid, "normalization", H5P_DEFAULT);
  if (g < 0) bad(path, "'normalization' is not a group");
  char **names = NULL;
  int64_t n = 0;
  h5util_need("checkpoint", path, h5util_dset_read_strs(g, "channel_names", CKPT_MAX_CHANNELS, &names, &n));
  if (n < 1 || (info->nchannels > 0 && n != info->nchannels))
    bad(path, "normalization/channel_names has %lld names for %d channels", (long long)n, info->nchannels);
  h5util_need("checkpoint", path, h5util_dset_read_1d(g, "mean", H5T_FLOAT, H5T_NATIVE_DOUBLE, n, info->norm_mean));
  h5util_need("checkpoint", path, h5util_dset_read_1d(g, "std", H5T_FLOAT, H5T_NATIVE_DOUBLE, n, info->norm_std));
  CHECK_H5(H5Gclose(g));
  for (int i = 0; i < (int)n; i++) {
    if (!isfinite(info->norm_mean[i]) || !isfinite(info->norm_std[i]) || !(info->norm_std[i] > 0))
      bad(path, "normalization of channel %d: mean %g, std %g (a finite mean and a positive std expected)", i,
          info->norm_mean[i], info->norm_std[i]);
    if (strlen(names[i]) >= CKPT_NAME_MAX)
      bad(path, "normalization/channel_names(%d) is longer than %d bytes", i, CKPT_NAME_MAX - 1);
    snprintf(info->channel_names[i], CKPT_NAME_MAX, "%s", names[i]);
  }
  h5util_strs_free(names, n);
  info->nnorm = (int)n;
}

static void read_info(hid_t fid, const char *path, struct ckpt_info *info) {
  memset(info, 0, sizeof *info);
  struct vit_dims *v = &info->spec.vit;
  struct head_dims *h = &info->spec.head;
  int ok = 1;
  ok &= geti(fid, path, "patch_size", &v->patch);
  ok &= geti(fid, path, "in_chans", &v->in_chans);
  ok &= geti(fid, path, "embed_dim", &v->dim);
  ok &= geti(fid, path, "depth", &v->depth);
  ok &= geti(fid, path, "num_heads", &v->heads);
  ok &= geti(fid, path, "mlp_hidden", &v->mlp_hidden);
  ok &= geti(fid, path, "pos_grid", &v->pos_grid);
  info->has_spec = ok;
  /* A backbone-only import has no head attributes. */
  int okh = geti(fid, path, "out_dim", &h->out_dim);
  okh &= geti(fid, path, "head_hidden_dim", &h->hidden);
  okh &= geti(fid, path, "head_bottleneck_dim", &h->bottleneck);
  okh &= geti(fid, path, "head_nlayers", &h->nlayers);
  okh &= geti(fid, path, "norm_last_layer", &h->norm_last_layer);
  h->in_dim = v->dim;
  info->has_head = ok && okh;
  optional(path, h5util_attr_read_f64(fid, "drop_path_rate", &v->drop_path_rate));
  optional(path, h5util_attr_read_str(fid, "arch", info->arch, sizeof info->arch));
  /* Files written before the key existed (and imports of upstream weights) used the exact GELU. */
  char gelu[16] = "none";
  optional(path, h5util_attr_read_str(fid, "gelu_approximate", gelu, sizeof gelu));
  if (strcmp(gelu, "none") && strcmp(gelu, "tanh"))
    bad(path, "attribute 'gelu_approximate' is '%s' (expected 'none' or 'tanh')", gelu);
  v->gelu_approx = h->gelu_approx = !strcmp(gelu, "tanh");

  int64_t ch[CKPT_MAX_CHANNELS];
  int n;
  if (optional(path, h5util_attr_read_i64s(fid, "channels", ch, CKPT_MAX_CHANNELS, &n))) {
    info->nchannels = n;
    for (int i = 0; i < n; i++) info->channels[i] = (int)ch[i];
  }

  read_normalization(fid, path, info);

  info->epoch = -1;
  optional(path, h5util_attr_read_i64(fid, "epoch", &info->epoch));
  optional(path, h5util_attr_read_i64(fid, "iteration", &info->iteration));
  optional(path, h5util_attr_read_i64(fid, "global_step", &info->global_step));
  optional(path, h5util_attr_read_i64(fid, "niter_per_epoch", &info->niter_per_epoch));
  optional(path, h5util_attr_read_i64(fid, "epochs", &info->epochs));
  optional(path, h5util_attr_read_i64(fid, "batch_size_per_rank", &info->batch_size_per_rank));
  geti(fid, path, "world_size", &info->world_size);
  optional(path, h5util_attr_read_str(fid, "restart_changes", info->restart_changes, sizeof info->restart_changes));
  geti(fid, path, "global_size", &info->global_size);
  geti(fid, path, "local_size", &info->local_size);
  geti(fid, path, "local_crops_number", &info->local_crops_number);
  optional(path, h5util_attr_read_str(fid, "arithmetic", info->arithmetic, sizeof info->arithmetic));
  if (H5Lexists(fid, "loader", H5P_DEFAULT) > 0) {
    hid_t g = (hid_t)CHECK_H5(H5Gopen2(fid, "loader", H5P_DEFAULT));
    optional(path, h5util_attr_read_i64(g, "n_train", &info->n_train));
    optional(path, h5util_attr_read_str(g, "data_fingerprint", info->data_fingerprint, sizeof info->data_fingerprint));
    CHECK_H5(H5Gclose(g));
  }
  info->has_state = info->epoch >= 0 && H5Lexists(fid, "optimizer", H5P_DEFAULT) > 0 &&
                    H5Lexists(fid, "dino_loss", H5P_DEFAULT) > 0;
  if (info->epoch >= 0 && (info->iteration < 0 || (info->niter_per_epoch > 0 &&
                                                   info->iteration >= info->niter_per_epoch)))
    bad(path, "iteration %lld is outside its epoch of %lld iterations", (long long)info->iteration,
        (long long)info->niter_per_epoch);
}

void checkpoint_read_info(const char *path, struct ckpt_info *info) {
  if (comm_rank() == 0) {
    h5util_lock(); /* the loader threads may be using HDF5 */
    hid_t fid = open_checkpoint(path);
    read_info(fid, path, info);
    CHECK_H5(H5Fclose(fid));
    h5util_unlock();
  }
  comm_bcast(info, sizeof *info, 0);
}

int checkpoint_read_deck(const char *path, char *buf, size_t n) {
  int rc = -1;
  if (comm_rank() == 0) {
    h5util_lock();
    hid_t fid = open_checkpoint(path);
    rc = optional(path, h5util_attr_read_str(fid, "deck", buf, n)) ? 0 : -1;
    CHECK_H5(H5Fclose(fid));
    h5util_unlock();
  }
  comm_bcast(&rc, sizeof rc, 0);
  if (rc == 0) comm_bcast(buf, n, 0);
  return rc;
}

/* ---- hyperparameters -------------------------------------------------------------------------- */

/* The first hyperparameter that differs, described into buf; 0 when none does. */
static int spec_diff(const struct ckpt_info *info, const struct dino_spec *s, int restart, char *buf,
                     size_t n) {
  if (!info->has_spec) return 0;
  const struct dino_spec *f = &info->spec;
  /* The same weights compute a different function under the other GELU. */
  if (f->vit.gelu_approx != s->vit.gelu_approx) {
    snprintf(buf, n, "key 'gelu_approximate' is '%s' in the checkpoint but '%s' for this deck "
             "(&model gelu_approximate)", f->vit.gelu_approx ? "tanh" : "none",
             s->vit.gelu_approx ? "tanh" : "none");
    return 1;
  }
  const struct {
    const char *key, *deck;
    int file, mine;
  } k[] = {
      {"patch_size", "&model patch_size", f->vit.patch, s->vit.patch},
      {"in_chans", "the number of &data channels", f->vit.in_chans, s->vit.in_chans},
      {"embed_dim", "&model arch / embed_dim", f->vit.dim, s->vit.dim},
      {"depth", "&model arch / depth", f->vit.depth, s->vit.depth},
      {"num_heads", "&model arch / num_heads", f->vit.heads, s->vit.heads},
      {"mlp_hidden", "&model arch / mlp_ratio", f->vit.mlp_hidden, s->vit.mlp_hidden},
      {"pos_grid", "224 / &model patch_size", f->vit.pos_grid, s->vit.pos_grid},
      {"out_dim", "&model out_dim", f->head.out_dim, s->head.out_dim},
      {"head_hidden_dim", "&model head_hidden_dim", f->head.hidden, s->head.hidden},
      {"head_bottleneck_dim", "&model head_bottleneck_dim", f->head.bottleneck, s->head.bottleneck},
      {"head_nlayers", "&model head_nlayers", f->head.nlayers, s->head.nlayers},
      {"norm_last_layer", "&model norm_last_layer", f->head.norm_last_layer ? 1 : 0,
       s->head.norm_last_layer ? 1 : 0},
  };
  /* The head keys (from out_dim on) only when the file records them; norm_last_layer only for a
   * restart (it decides which tensors have optimizer state; fine-tuning may change it). */
  const int nk = !info->has_head ? 7 : (int)(sizeof k / sizeof k[0]) - (restart ? 0 : 1);
  for (int i = 0; i < nk; i++)
    if (k[i].file != k[i].mine) {
      snprintf(buf, n, "key '%s' is %d in the checkpoint but %d for this deck (%s)", k[i].key,
               k[i].file, k[i].mine, k[i].deck);
      return 1;
    }
  return 0;
}

void checkpoint_check_spec(const char *path, const struct ckpt_info *info,
                           const struct dino_spec *spec, int restart) {
  char why[512];
  if (spec_diff(info, spec, restart, why, sizeof why))
    bad(path, "does not fit the model of this deck: %s", why);
}

/* ---- tensors ---------------------------------------------------------------------------------- */

static void shape_str(const hsize_t *d, int nd, char *buf, size_t n) {
  size_t at = 0;
  at += (size_t)snprintf(buf + at, n - at, "[");
  for (int i = 0; i < nd && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
  if (at < n) snprintf(buf + at, n - at, "]");
}

#define PATCH_EMBED "backbone.patch_embed.proj.weight"

void checkpoint_embed_from_config(const struct config *cfg, struct ckpt_embed *e) {
  memset(e, 0, sizeof *e);
  if (cfg->model.use_mean_patch_embedding) e->mode = CKPT_EMBED_MEAN;
  if (cfg->model.n_custom_embedding_map > 0) {
    e->mode = CKPT_EMBED_MAP;
    e->n = cfg->model.n_custom_embedding_map;
    for (int i = 0; i < e->n && i < CKPT_MAX_CHANNELS; i++) e->map[i] = (int)cfg->model.custom_embedding_map[i];
  }
}

/* The patch embedding [D, Cp, p, p] of the file (dims) into dst [D, C, p, p] as emb says. */
static void read_patch_embed(hid_t d, const char *path, const char *name, const hsize_t *dims, int nd,
                             const struct tensor *t, float *dst, const struct ckpt_embed *emb) {
  const int D = (int)t->shape[0], C = (int)t->shape[1], P = (int)t->shape[2];
  const size_t pp = (size_t)t->shape[2] * (size_t)t->shape[3];
  if (nd != 4 || dims[0] != (hsize_t)D || dims[2] != (hsize_t)t->shape[2] || dims[3] != (hsize_t)t->shape[3] ||
      dims[1] < 1 || dims[1] > 4096)
    bad(path, "tensor %s cannot be adapted to %d input channels: its shape is not [%d, channels, %d, %d]", name, C,
        D, P, P);
  const int Cp = (int)dims[1];
  if (emb->mode == CKPT_EMBED_MAP) {
    if (emb->n != C)
      scd_fatal(SCD_EXIT_INPUT, "&model custom_embedding_map has %d entr%s, but %d channel(s) are selected (one "
                "entry per selected channel)", emb->n, emb->n == 1 ? "y" : "ies", C);
    for (int c = 0; c < C; c++)
      if (emb->map[c] >= Cp)
        scd_fatal(SCD_EXIT_INPUT, "&model custom_embedding_map(%d) = %d, but the patch embedding of %s has %d "
                  "channel(s) (0 .. %d)", c + 1, emb->map[c], path, Cp, Cp - 1);
  }
  float *src = xmalloc(MUL_SIZE(MUL_SIZE((size_t)D, (size_t)Cp), pp * sizeof(float)));
  if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, src) < 0)
    bad(path, "cannot read tensor %s (truncated or damaged file?)", name);
  for (int o = 0; o < D; o++)
    for (int c = 0; c < C; c++) {
      float *out = dst + t->off + ((size_t)o * C + c) * pp;
      for (size_t k = 0; k < pp; k++) {
        if (emb->mode == CKPT_EMBED_MAP) {
          out[k] = src[((size_t)o * Cp + emb->map[c]) * pp + k];
        } else { /* the mean over the pretrained channels, the same for every input channel */
          double s = 0;
          for (int q = 0; q < Cp; q++) s += src[((size_t)o * Cp + q) * pp + k];
          out[k] = (float)(s / Cp);
        }
      }
    }
  free(src);
}

/* Read <group>/<t->name> into dst + t->off, checking presence, type, shape and finiteness.  hint
 * (may be "") is appended to shape messages; emb (NULL: none) adapts the patch embedding. */
static void read_tensor(hid_t fid, const char *path, const char *group, const struct tensor *t,
                        float *dst, const char *hint, const struct ckpt_embed *emb) {
  char name[TENSOR_NAME_MAX + 64];
  snprintf(name, sizeof name, "%s/%s", group, t->name);
  if (H5Lexists(fid, group, H5P_DEFAULT) <= 0) bad(path, "no group '%s'", group);
  char want[128], got[128];
  tensors_shape_str(t, want, sizeof want);
  if (H5Lexists(fid, name, H5P_DEFAULT) <= 0)
    bad(path, "tensor %s is missing; the model of this deck needs it with shape %s%s", name, want, hint);
  hid_t d = H5Dopen2(fid, name, H5P_DEFAULT);
  if (d < 0) bad(path, "'%s' is not a dataset", name);
  hid_t ty = (hid_t)CHECK_H5(H5Dget_type(d));
  const H5T_class_t cls = H5Tget_class(ty);
  CHECK_H5(H5Tclose(ty));
  if (cls != H5T_FLOAT) bad(path, "tensor %s does not hold floating-point values", name);
  hid_t sp = (hid_t)CHECK_H5(H5Dget_space(d));
  const int nd = H5Sget_simple_extent_ndims(sp);
  hsize_t dims[H5S_MAX_RANK] = {0};
  int same = nd == t->ndim && nd <= H5S_MAX_RANK;
  if (nd > 0 && nd <= H5S_MAX_RANK) CHECK_H5(H5Sget_simple_extent_dims(sp, dims, NULL));
  CHECK_H5(H5Sclose(sp));
  for (int i = 0; same && i < nd; i++) same = dims[i] == (hsize_t)t->shape[i];
  if (emb && emb->mode != CKPT_EMBED_NONE && !strcmp(t->name, PATCH_EMBED)) {
    read_patch_embed(d, path, name, dims, nd, t, dst, emb);
    same = -1;
  }
  if (!same) {
    shape_str(dims, nd < 0 ? 0 : nd > H5S_MAX_RANK ? H5S_MAX_RANK : nd, got, sizeof got);
    bad(path, "tensor %s has shape %s in the checkpoint, but the model of this deck needs %s%s", name,
        got, want, hint);
  }
  if (same > 0 && H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst + t->off) < 0)
    bad(path, "cannot read tensor %s (truncated or damaged file?)", name);
  CHECK_H5(H5Dclose(d));
  for (size_t i = 0; i < t->n; i++)
    if (!isfinite(dst[t->off + i]))
      bad(path, "tensor %s holds a non-finite value at element %zu", name, i);
}

struct extra_scan {
  const struct tensor_table *tt;
  char first[TENSOR_NAME_MAX];
};

/* Whether name's first component ("backbone", "head") is used by some tensor of tt. */
static int prefix_used(const struct tensor_table *tt, const char *name) {
  const char *dot = strchr(name, '.');
  const size_t n = dot ? (size_t)(dot - name) + 1 : strlen(name);
  for (int i = 0; i < tt->n; i++)
    if (!strncmp(tt->t[i].name, name, n)) return 1;
  return 0;
}

static herr_t scan_cb(hid_t g, const char *name, const H5L_info_t *li, void *op) {
  (void)g;
  (void)li;
  struct extra_scan *s = op;
  if (!s->first[0] && prefix_used(s->tt, name) && tensors_find(s->tt, name) < 0)
    snprintf(s->first, sizeof s->first, "%s", name);
  return 0;
}

/* A tensor of the file that the deck's model lacks (a deeper or wider model) is refused. */
static void check_extra(hid_t fid, const char *path, const char *group, const struct tensor_table *tt,
                        const char *hint) {
  hid_t g = (hid_t)CHECK_H5(H5Gopen2(fid, group, H5P_DEFAULT));
  struct extra_scan s = {tt, ""};
  hsize_t idx = 0;
  if (H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, &idx, scan_cb, &s) < 0)
    bad(path, "cannot list group '%s' (damaged file?)", group);
  CHECK_H5(H5Gclose(g));
  if (s.first[0])
    bad(path, "tensor %s/%s is not part of the model of this deck%s", group, s.first, hint);
}

static void load_group(hid_t fid, const char *path, const char *group, const struct tensor_table *tt,
                       float *host, const char *hint, const struct ckpt_embed *emb) {
  for (int i = 0; i < tt->n; i++) read_tensor(fid, path, group, &tt->t[i], host, hint, emb);
  check_extra(fid, path, group, tt, hint);
}

/* The hint appended to tensor messages: the first differing hyperparameter, when both sides are
 * known. */
static void make_hint(const struct ckpt_info *info, const struct dino_spec *spec, int restart,
                      char *hint, size_t n) {
  char why[512];
  hint[0] = '\0';
  if (spec && spec_diff(info, spec, restart, why, sizeof why)) snprintf(hint, n, " (%s)", why);
}

/* Rank 0: open, read the attributes, load /student and/or /teacher into the host buffers (NULL:
 * skip), check the hyperparameters; the file stays open for the caller (restore) when fid_out. */
static void load_weights_rank0(const char *path, const struct tensor_table *tt,
                               const struct dino_spec *spec, int restart, float *student,
                               float *teacher, struct ckpt_info *info, hid_t *fid_out,
                               const struct ckpt_embed *emb) {
  hid_t fid = open_checkpoint(path);
  read_info(fid, path, info);
  struct dino_spec adapted;
  if (spec && emb && emb->mode != CKPT_EMBED_NONE && info->has_spec) { /* another channel count on purpose */
    adapted = *spec;
    adapted.vit.in_chans = info->spec.vit.in_chans;
    spec = &adapted;
  }
  char hint[600];
  make_hint(info, spec, restart, hint, sizeof hint);
  if (student) load_group(fid, path, "student", tt, student, hint, emb);
  if (teacher) load_group(fid, path, "teacher", tt, teacher, hint, emb);
  const int pe = emb && emb->mode != CKPT_EMBED_NONE ? tensors_find(tt, PATCH_EMBED) : -1;
  if (pe >= 0 && info->has_spec)
    log_info("%s: patch embedding of %d channel(s) adapted to %d (%s)", path, info->spec.vit.in_chans,
             (int)tt->t[pe].shape[1], emb->mode == CKPT_EMBED_MAP ? "custom_embedding_map" : "use_mean_patch_embedding: their mean");
  /* Shapes agree; what shapes cannot show (num_heads, norm_last_layer) is checked here. */
  if (spec) checkpoint_check_spec(path, info, spec, restart);
  if (fid_out)
    *fid_out = fid;
  else
    CHECK_H5(H5Fclose(fid));
}

static void bcast_upload(const struct ops *ops, float *dev, float *host, size_t n) {
  comm_bcast(host, n * sizeof(float), 0);
  ops->upload(dev, host, n * sizeof(float));
  if (ops->params_changed) ops->params_changed(dev, n);
}

void checkpoint_load_weights(const char *path, enum ckpt_which which, const struct ckpt_embed *emb,
                             const struct tensor_table *tt, const struct ops *ops, float *params) {
  float *host = xcalloc(tt->size, sizeof(float));
  if (comm_rank() == 0) {
    struct ckpt_info info;
    h5util_lock();
    load_weights_rank0(path, tt, NULL, 0, which == CKPT_STUDENT ? host : NULL,
                       which == CKPT_TEACHER ? host : NULL, &info, NULL, emb);
    h5util_unlock();
  }
  bcast_upload(ops, params, host, tt->size);
  free(host);
}

void checkpoint_load_model(const char *path, const struct ckpt_embed *emb, struct dino_model *m,
                           struct ckpt_info *info) {
  const size_t n = m->tt.size;
  float *s = xcalloc(n, sizeof(float)), *t = xcalloc(n, sizeof(float));
  if (comm_rank() == 0) {
    h5util_lock();
    load_weights_rank0(path, &m->tt, &m->spec, 0, s, t, info, NULL, emb);
    h5util_unlock();
  }
  comm_bcast(info, sizeof *info, 0);
  bcast_upload(m->ops, m->student, s, n);
  bcast_upload(m->ops, m->teacher, t, n);
  free(s);
  free(t);
}

/* ---- full training state ---------------------------------------------------------------------- */

static int64_t read_step(hid_t fid, const char *path, const char *tname) {
  char name[TENSOR_NAME_MAX + 32];
  snprintf(name, sizeof name, "optimizer/step/%s", tname);
  if (H5Lexists(fid, name, H5P_DEFAULT) <= 0) bad(path, "%s is missing", name);
  hid_t d = H5Dopen2(fid, name, H5P_DEFAULT);
  if (d < 0) bad(path, "'%s' is not a dataset", name);
  hid_t sp = (hid_t)CHECK_H5(H5Dget_space(d));
  const hssize_t np = H5Sget_simple_extent_npoints(sp);
  CHECK_H5(H5Sclose(sp));
  int64_t v = -1;
  if (np != 1 || H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) < 0)
    bad(path, "cannot read %s as one integer", name);
  CHECK_H5(H5Dclose(d));
  if (v < 0) bad(path, "%s = %lld is negative", name, (long long)v);
  return v;
}

static void read_metrics(hid_t fid, const char *path, struct ckpt_metrics *m) {
  memset(m, 0, sizeof *m);
  if (H5Lexists(fid, "train_metrics", H5P_DEFAULT) <= 0) return;
  hid_t g = (hid_t)CHECK_H5(H5Gopen2(fid, "train_metrics", H5P_DEFAULT));
  optional(path, h5util_attr_read_f64(g, "loss_sum", &m->loss_sum));
  optional(path, h5util_attr_read_f64(g, "loss_count", &m->loss_count));
  optional(path, h5util_attr_read_f64(g, "lr_sum", &m->lr_sum));
  optional(path, h5util_attr_read_f64(g, "wd_sum", &m->wd_sum));
  optional(path, h5util_attr_read_i64(g, "steps", &m->steps));
  optional(path, h5util_attr_read_i64(g, "images", &m->images));
  optional(path, h5util_attr_read_f64(g, "seconds", &m->seconds));
  optional(path, h5util_attr_read_f64(g, "entropy_sum", &m->entropy_sum));
  optional(path, h5util_attr_read_f64(g, "batch_entropy_sum", &m->batch_entropy_sum));
  optional(path, h5util_attr_read_f64(g, "diag_steps", &m->diag_steps));
  CHECK_H5(H5Gclose(g));
}

/* fp16's loss scale (loss_scale.h) from /fp16_scaler into ls; returns 0 when the file has none. */
static int read_scaler(hid_t fid, const char *path, struct loss_scale *ls) {
  if (H5Lexists(fid, "fp16_scaler", H5P_DEFAULT) <= 0) return 0;
  hid_t g = (hid_t)CHECK_H5(H5Gopen2(fid, "fp16_scaler", H5P_DEFAULT));
  double scale = 0;
  int64_t growth = -1, skipped = -1;
  h5util_need("checkpoint", path, h5util_attr_read_f64(g, "scale", &scale));
  h5util_need("checkpoint", path, h5util_attr_read_i64(g, "growth_tracker", &growth));
  h5util_need("checkpoint", path, h5util_attr_read_i64(g, "skipped_steps", &skipped));
  CHECK_H5(H5Gclose(g));
  /* a positive finite fp32 value, as the run that wrote it held it */
  if (!(scale > 0) || !isfinite(scale) || (double)(float)scale != scale)
    bad(path, "fp16_scaler/scale = %g is not a positive fp32 loss scale", scale);
  if (growth < 0 || growth >= LOSS_SCALE_INTERVAL || skipped < 0)
    bad(path, "fp16_scaler: growth_tracker = %lld or skipped_steps = %lld out of range", (long long)growth,
        (long long)skipped);
  ls->scale = (float)scale;
  ls->growth = growth;
  ls->skipped = skipped;
  return 1;
}

void checkpoint_restore(const char *path, struct ckpt_state *st, struct ckpt_info *info) {
  struct dino_model *m = st->model;
  const struct tensor_table *tt = &m->tt;
  const size_t n = tt->size;
  const int K = st->loss->K;
  float *hs = xcalloc(n, sizeof(float)), *ht = xcalloc(n, sizeof(float));
  float *hm = xcalloc(n, sizeof(float)), *hv = xcalloc(n, sizeof(float));
  float *hc = xcalloc((size_t)K, sizeof(float));
  int64_t *steps = xcalloc((size_t)tt->n, sizeof *steps);
  int scaler = 0;
  if (comm_rank() == 0) {
    h5util_lock();
    hid_t fid;
    load_weights_rank0(path, tt, &m->spec, 1, hs, ht, info, &fid, NULL);
    if (!info->has_state)
      bad(path, "holds weights but no training state (optimizer, centre, position), so training "
                "cannot continue from it; start from its weights with &training init_from instead");
    for (int i = 0; i < tt->n; i++) {
      const struct tensor *t = &tt->t[i];
      if (!(t->flags & TENSOR_GRAD)) continue;
      read_tensor(fid, path, "optimizer/exp_avg", t, hm, "", NULL);
      read_tensor(fid, path, "optimizer/exp_avg_sq", t, hv, "", NULL);
      steps[i] = read_step(fid, path, t->name);
    }
    struct tensor c = {.ndim = 2, .shape = {1, K}, .off = 0, .n = (size_t)K};
    snprintf(c.name, sizeof c.name, "center");
    read_tensor(fid, path, "dino_loss", &c, hc, "", NULL);
    read_metrics(fid, path, &st->metrics);
    if (st->ls && st->ls->on) scaler = read_scaler(fid, path, st->ls);
    CHECK_H5(H5Fclose(fid));
    h5util_unlock();
  }
  if (st->ls && st->ls->on) {
    comm_bcast(&scaler, sizeof scaler, 0);
    comm_bcast(st->ls, sizeof *st->ls, 0);
    if (!scaler)
      log_info("restart: %s has no fp16 loss scale (written by a bf16 or fp32 run); it starts at %g", path,
               (double)st->ls->scale);
    else
      log_info("restart: fp16 loss scale %g (%lld finite steps since it last changed), %lld steps skipped so far",
               (double)st->ls->scale, (long long)st->ls->growth, (long long)st->ls->skipped);
  }
  comm_bcast(info, sizeof *info, 0);
  comm_bcast(&st->metrics, sizeof st->metrics, 0);
  comm_bcast(steps, (size_t)tt->n * sizeof *steps, 0);
  const struct ops *ops = m->ops;
  bcast_upload(ops, m->student, hs, n);
  bcast_upload(ops, m->teacher, ht, n);
  comm_bcast(hm, n * sizeof(float), 0);
  comm_bcast(hv, n * sizeof(float), 0);
  optim_moments_upload(st->opt, hm, hv); /* sharded: this rank's slice */
  memcpy(st->opt->steps, steps, (size_t)tt->n * sizeof *steps);
  comm_bcast(hc, (size_t)K * sizeof(float), 0);
  ops->upload(st->loss->center, hc, (size_t)K * sizeof(float));
  st->epoch = info->epoch;
  st->iteration = info->iteration;
  free(hs);
  free(ht);
  free(hm);
  free(hv);
  free(hc);
  free(steps);
}
