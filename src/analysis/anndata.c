/* anndata.c - AnnData files (.h5ad): the writer, and the sibling of every features file.  The
 * layout and why it is so: anndata.h and doc/formats.md. */
#include "build_config.h"

#include <hdf5.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analysis/anndata.h"
#include "analysis/features.h"
#include "analysis/features_io.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "data/shards.h"
#include "data/split.h"

/* ---- the writer -------------------------------------------------------------------------------- */

/* A call of the writer's own (those of h5util name the file themselves): the file and the reason. */
static long long ok(long long ret, const char *file, const char *expr) {
  if (ret < 0) {
    char why[512];
    scd_fatal(SCD_EXIT_FAILURE, "%s: cannot write the AnnData file: %s failed (%s)", file, expr,
              h5util_reason(why, sizeof why, 0));
  }
  return ret;
}
#define OK(call) ok((long long)(call), file, #call)

static void tag(hid_t obj, const char *type, const char *version) {
  h5util_attr_write_str(obj, "encoding-type", type);
  h5util_attr_write_str(obj, "encoding-version", version);
}

static void tag_dset(const char *file, hid_t loc, const char *name, const char *type, const char *version) {
  hid_t d = (hid_t)OK(H5Dopen2(loc, name, H5P_DEFAULT));
  tag(d, type, version);
  OK(H5Dclose(d));
}

static hid_t group(hid_t loc, const char *name, const char *type, const char *version) {
  hid_t g = h5util_group_create(loc, name);
  tag(g, type, version);
  return g;
}

/* numpy.bool_ as h5py stores it: an enum of int8 with FALSE = 0 and TRUE = 1. */
static hid_t bool_type(const char *file) {
  hid_t t = (hid_t)OK(H5Tenum_create(H5T_NATIVE_INT8));
  int8_t v = 0;
  OK(H5Tenum_insert(t, "FALSE", &v));
  v = 1;
  OK(H5Tenum_insert(t, "TRUE", &v));
  return t;
}

/* A 1-D attribute of n fixed-length strings (n may be 0: an empty list, not a scalar). */
static void attr_strs(const char *file, hid_t obj, const char *name, const char *const *s, int64_t n) {
  size_t len = 0;
  for (int64_t i = 0; i < n; i++)
    if (strlen(s[i]) > len) len = strlen(s[i]);
  char *block = xcalloc(n ? (size_t)n : 1, len + 1);
  for (int64_t i = 0; i < n; i++) memcpy(block + (size_t)i * (len + 1), s[i], strlen(s[i]));
  hid_t t = h5util_str_type(len);
  if (n > 0) {
    h5util_attr_write(obj, name, t, t, (hsize_t)n, block);
  } else {
    hsize_t zero = 0;
    hid_t sp = (hid_t)OK(H5Screate_simple(1, &zero, NULL));
    OK(H5Aclose((hid_t)OK(H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT))));
    OK(H5Sclose(sp));
  }
  OK(H5Tclose(t));
  free(block);
}

static void write_strings(const char *file, hid_t loc, const char *name, const char *const *s, int64_t n) {
  h5util_dset_write_strs(loc, name, s, (hsize_t)n);
  tag_dset(file, loc, name, "string-array", "0.2.0");
}

static void write_scalar(const char *file, hid_t loc, const char *name, hid_t type, const void *v,
                         const char *encoding) {
  h5util_dset_write(loc, name, type, type, 0, NULL, v);
  tag_dset(file, loc, name, encoding, "0.2.0");
}

static void write_value(const char *file, hid_t loc, const struct anndata_value *v) {
  hsize_t n = (hsize_t)v->count;
  switch (v->kind) {
  case ANNDATA_CATEGORICAL: {
    for (int64_t i = 0; i < v->count; i++) SCD_ASSERT(v->codes[i] >= -1 && v->codes[i] < v->ncategories);
    hid_t g = group(loc, v->name, "categorical", "0.2.0"), bt = bool_type(file);
    const int8_t no = 0;
    h5util_attr_write(g, "ordered", bt, bt, 0, &no);
    OK(H5Tclose(bt));
    h5util_dset_write(g, "codes", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, &n, v->codes);
    tag_dset(file, g, "codes", "array", "0.2.0");
    write_strings(file, g, "categories", v->strs, v->ncategories);
    OK(H5Gclose(g));
    break;
  }
  case ANNDATA_STRINGS:
    write_strings(file, loc, v->name, v->strs, v->count);
    break;
  case ANNDATA_INT64S:
    h5util_dset_write(loc, v->name, H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &n, v->i64);
    tag_dset(file, loc, v->name, "array", "0.2.0");
    break;
  case ANNDATA_FLOAT64S:
    h5util_dset_write(loc, v->name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &n, v->f64);
    tag_dset(file, loc, v->name, "array", "0.2.0");
    break;
  case ANNDATA_STRING: {
    hid_t t = h5util_str_type(strlen(v->str));
    write_scalar(file, loc, v->name, t, v->str, "string");
    OK(H5Tclose(t));
    break;
  }
  case ANNDATA_INT64:
    write_scalar(file, loc, v->name, H5T_STD_I64LE, &v->i, "numeric-scalar");
    break;
  case ANNDATA_FLOAT64:
    write_scalar(file, loc, v->name, H5T_IEEE_F64LE, &v->f, "numeric-scalar");
    break;
  case ANNDATA_BOOL: {
    hid_t bt = bool_type(file);
    const int8_t b = v->i != 0;
    write_scalar(file, loc, v->name, bt, &b, "numeric-scalar");
    OK(H5Tclose(bt));
    break;
  }
  }
}

/* A dataframe: the index (its names) and the columns, each of n values. */
static void write_frame(const char *file, hid_t loc, const char *name, const char *const *index, int64_t n,
                        const struct anndata_value *cols, int ncols) {
  hid_t g = group(loc, name, "dataframe", "0.2.0");
  h5util_attr_write_str(g, "_index", "_index");
  const char **order = xcalloc(ncols > 0 ? (size_t)ncols : 1, sizeof *order);
  for (int c = 0; c < ncols; c++) {
    SCD_ASSERT(cols[c].kind <= ANNDATA_FLOAT64S && cols[c].count == n && strcmp(cols[c].name, "_index") != 0);
    order[c] = cols[c].name;
  }
  attr_strs(file, g, "column-order", order, ncols);
  free(order);
  write_strings(file, g, "_index", index, n);
  for (int c = 0; c < ncols; c++) write_value(file, g, &cols[c]);
  OK(H5Gclose(g));
}

/* X, window by window from a->rows. */
static void write_x(const char *file, hid_t fid, const struct anndata *a) {
  hsize_t dims[2] = {(hsize_t)a->n, (hsize_t)a->d};
  hid_t sp = (hid_t)OK(H5Screate_simple(2, dims, NULL));
  hid_t dcpl = h5util_dcpl_untimed();
  h5util_dcpl_checksum(dcpl, 2, dims, sizeof(float));
  OK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER)); /* every row is written */
  hid_t x = (hid_t)OK(H5Dcreate2(fid, "X", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  OK(H5Pclose(dcpl));
  const size_t row_bytes = (size_t)a->d * sizeof(float);
  int64_t window = (int64_t)(((size_t)16 << 20) / row_bytes);
  if (window < 1) window = 1;
  if (window > a->n) window = a->n;
  float *buf = xmalloc(MUL_SIZE((size_t)window, row_bytes));
  for (int64_t r0 = 0; r0 < a->n; r0 += window) {
    const int64_t cnt = a->n - r0 < window ? a->n - r0 : window;
    a->rows(a->arg, r0, cnt, buf);
    hsize_t start[2] = {(hsize_t)r0, 0}, count[2] = {(hsize_t)cnt, (hsize_t)a->d};
    OK(H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL));
    hid_t msp = (hid_t)OK(H5Screate_simple(2, count, NULL));
    OK(H5Dwrite(x, H5T_NATIVE_FLOAT, msp, sp, H5P_DEFAULT, buf));
    OK(H5Sclose(msp));
  }
  free(buf);
  tag(x, "array", "0.2.0");
  OK(H5Dclose(x));
  OK(H5Sclose(sp));
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* AnnData takes repeated obs_names with a warning and then cannot index them; scdino's are paths. */
static void check_unique(const char *path, const char *const *names, int64_t n) {
  const char **s = xmalloc(MUL_SIZE((size_t)n, sizeof *s));
  memcpy(s, names, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_name);
  for (int64_t i = 1; i < n; i++)
    if (strcmp(s[i], s[i - 1]) == 0) {
      int64_t rows[2] = {-1, -1};
      for (int64_t r = 0, k = 0; r < n && k < 2; r++)
        if (strcmp(names[r], s[i]) == 0) rows[k++] = r;
      scd_fatal(SCD_EXIT_DATA, "%s: obs_names must be unique, but rows %" PRId64 " and %" PRId64 " are both '%s'",
                path, rows[0], rows[1], s[i]);
    }
  free(s);
}

/* "" when path may be (re)written (an output's rules, core/fsutil.h), else why not. */
static void replace_refusal(const char *path, const char *hint, char *msg, size_t n) {
  char why[PATH_MAX + 256];
  msg[0] = '\0';
  if (fs_output_check(path, "AnnData file", h5util_own_format, ANNDATA_FORMAT, why, sizeof why) != 0)
    snprintf(msg, n, "refusing to write the AnnData file %.3000s: %.3000s; an output only creates or replaces its own kind of "
             "file%s%s", path, why, hint ? "; " : "", hint ? hint : "");
}

void anndata_check_replace(const char *path, const char *hint) {
  char msg[8192];
  replace_refusal(path, hint, msg, sizeof msg);
  if (msg[0]) scd_fatal(SCD_EXIT_INPUT, "%s", msg);
}

void anndata_write(const char *path, const struct anndata *a) {
  SCD_ASSERT(a->n >= 1 && a->d >= 1 && a->rows);
  anndata_check_replace(path, NULL);
  check_unique(path, a->obs_names, a->n);
  char file[4200];
  fs_atomic_begin(path, file, sizeof file);
  hid_t fid = h5util_file_create(file, H5P_DEFAULT);
  tag(fid, "anndata", "0.1.0");
  h5util_attr_write_str(fid, "format", ANNDATA_FORMAT);
  h5util_attr_write_i64(fid, "version", ANNDATA_VERSION);
  write_x(file, fid, a);
  write_frame(file, fid, "obs", a->obs_names, a->n, a->obs, a->nobs);
  char **vn = NULL;
  if (!a->var_names) {
    vn = xmalloc(MUL_SIZE((size_t)a->d, sizeof *vn));
    for (int j = 0; j < a->d; j++) {
      char s[24];
      snprintf(s, sizeof s, "f%d", j);
      vn[j] = xstrdup(s);
    }
  }
  write_frame(file, fid, "var", a->var_names ? a->var_names : (const char *const *)vn, a->d, NULL, 0);
  if (vn)
    for (int j = 0; j < a->d; j++) free(vn[j]);
  free(vn);
  static const char *const empty[] = {"obsm", "varm", "obsp", "varp", "layers"};
  for (size_t k = 0; k < sizeof empty / sizeof empty[0]; k++) OK(H5Gclose(group(fid, empty[k], "dict", "0.1.0")));
  hid_t uns = group(fid, "uns", "dict", "0.1.0");
  for (int k = 0; k < a->nuns; k++) write_value(file, uns, &a->uns[k]);
  OK(H5Gclose(uns));
  OK(H5Fclose(fid));
  fs_atomic_commit(file, path);
}

/* ---- the features file's sibling --------------------------------------------------------------- */

void anndata_features_path(const char *features_path, char *out, size_t n) {
  const size_t len = strlen(features_path);
  const int h5 = len >= 3 && strcmp(features_path + len - 3, ".h5") == 0;
  const int r = snprintf(out, n, "%s%s", features_path, h5 ? "ad" : ".h5ad");
  if (r < 0 || (size_t)r >= n) scd_fatal(SCD_EXIT_INPUT, "path too long: %s.h5ad", features_path);
}

void anndata_check_features(const char *features_path) {
  char path[4200], msg[8192] = "";
  anndata_features_path(features_path, path, sizeof path);
  /* Rank 0 looks; every rank ends with its message (printed once), none is left computing. */
  if (comm_rank() == 0) {
    h5util_lock();
    replace_refusal(path, "move it away, or set &features anndata = .false.", msg, sizeof msg);
    h5util_unlock();
  }
  comm_bcast(msg, sizeof msg, 0);
  if (msg[0]) scd_fatal(SCD_EXIT_INPUT, "%s", msg);
}

/* X: the rows of the features file as stored. */
struct stored_rows {
  const char *path;
  hid_t dset;
  int d;
};

static void stored_rows(void *arg, int64_t row0, int64_t cnt, float *dst) {
  const struct stored_rows *s = arg;
  hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)cnt, (hsize_t)s->d};
  h5util_need("features file", s->path, h5util_dset_read_slab(s->dset, "features", 2, start, count,
                                                               H5T_NATIVE_FLOAT, dst));
}

/* Each row's split of the deck (0 'train', 1 'val'): one of them for subset 'train' or 'val'. */
static int32_t *row_splits(const struct config *cfg, struct dataset *ds, const struct features *meta) {
  int32_t *code = xmalloc(MUL_SIZE((size_t)meta->n, sizeof *code));
  const char *sub = cfg->features.subset;
  if (strcmp(sub, "all") != 0) {
    for (int64_t i = 0; i < meta->n; i++) code[i] = strcmp(sub, "val") == 0;
    return code;
  }
  struct split s;
  split_dataset(ds, cfg->data.train_fraction, (uint32_t)cfg->data.split_seed, &s);
  unsigned char *val = xcalloc((size_t)dataset_count(ds), 1);
  for (int64_t i = 0; i < s.n_val; i++) val[s.val[i]] = 1;
  for (int64_t i = 0; i < meta->n; i++) code[i] = val[meta->index[i]];
  free(val);
  split_free(&s);
  return code;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Metadata column m of f as the obs column v: categorical over its sorted distinct values when it
 * has fewer of them than rows, else strings; what v points into goes to o->cats[m], o->codes[m]. */
static void metadata_obs(const struct features *f, int m, struct anndata_obs *o, struct anndata_value *v) {
  const int64_t n = f->n;
  const char **col = (const char **)f->meta + (size_t)m * (size_t)n;
  const char **cats = xmalloc(MUL_SIZE((size_t)n, sizeof *cats));
  memcpy(cats, col, (size_t)n * sizeof *cats);
  qsort(cats, (size_t)n, sizeof *cats, cmp_str);
  int64_t nc = 0;
  for (int64_t i = 0; i < n; i++)
    if (i == 0 || strcmp(cats[i], cats[nc - 1])) cats[nc++] = cats[i];
  o->cats[m] = cats;
  if (nc == n) { /* as many values as rows: strings, as anndata keeps them */
    *v = (struct anndata_value){.name = o->names[m], .kind = ANNDATA_STRINGS, .count = n, .strs = col};
    return;
  }
  int32_t *codes = o->codes[m] = xmalloc(MUL_SIZE((size_t)n, sizeof *codes));
  for (int64_t i = 0; i < n; i++) {
    const char **hit = bsearch(&col[i], cats, (size_t)nc, sizeof *cats, cmp_str);
    SCD_ASSERT(hit);
    codes[i] = (int32_t)(hit - cats);
  }
  *v = (struct anndata_value){.name = o->names[m], .kind = ANNDATA_CATEGORICAL, .count = n, .codes = codes,
                              .strs = cats, .ncategories = nc};
}

void anndata_features_obs(const struct features *f, const int32_t *split, struct anndata_obs *o) {
  static const char *const split_names[] = {"train", "val"};
  SCD_ASSERT(f->nmeta == 0 || f->meta);
  memset(o, 0, sizeof *o);
  o->cols = xcalloc((size_t)f->nmeta + 3, sizeof *o->cols);
  o->names = xcalloc((size_t)f->nmeta + 1, sizeof *o->names);
  o->cats = xcalloc((size_t)f->nmeta + 1, sizeof *o->cats);
  o->codes = xcalloc((size_t)f->nmeta + 1, sizeof *o->codes);
  struct anndata_value *c = o->cols;
  if (f->nclasses > 0) /* an unlabelled set's rows have no class to show */
    c[o->n++] = (struct anndata_value){.name = "label", .kind = ANNDATA_CATEGORICAL, .count = f->n,
                                       .codes = f->labels, .strs = (const char *const *)f->class_names,
                                       .ncategories = f->nclasses};
  c[o->n++] = (struct anndata_value){.name = "split", .kind = ANNDATA_CATEGORICAL, .count = f->n, .codes = split,
                                     .strs = split_names, .ncategories = 2};
  c[o->n++] = (struct anndata_value){.name = "index", .kind = ANNDATA_INT64S, .count = f->n, .i64 = f->index};
  for (int m = 0; m < f->nmeta; m++) {
    /* A name taken already (or the index's own) gets "meta_" in front until it is free. */
    char *name = xstrdup(f->meta_names[m]);
    for (int taken = 1; taken;) {
      taken = strcmp(name, "_index") == 0;
      for (int j = 0; j < o->n && !taken; j++) taken = strcmp(name, c[j].name) == 0;
      if (taken) {
        char *longer = xmalloc(strlen(name) + 6);
        snprintf(longer, strlen(name) + 6, "meta_%s", name);
        free(name);
        name = longer;
      }
    }
    o->names[m] = name;
    o->nmeta = m + 1;
    metadata_obs(f, m, o, &c[o->n++]);
  }
}

void anndata_obs_free(struct anndata_obs *o) {
  for (int m = 0; m < o->nmeta; m++) {
    free(o->names[m]);
    free(o->cats[m]);
    free(o->codes[m]);
  }
  free(o->names);
  free(o->cats);
  free(o->codes);
  free(o->cols);
  memset(o, 0, sizeof *o);
}

/* The checkpoint's recorded architecture name ("" when it records none: imported weights). */
static void checkpoint_arch(const char *checkpoint, char *arch, size_t n) {
  hid_t fid;
  arch[0] = '\0';
  if (h5util_file_open(checkpoint, &fid) != H5UTIL_OK) return;
  if (h5util_attr_read_str(fid, "arch", arch, n) != H5UTIL_OK) arch[0] = '\0';
  H5Fclose(fid);
}

#define UNS_MAX 32
#define UNS_STR(k, v) uns[nu++] = (struct anndata_value){.name = (k), .kind = ANNDATA_STRING, .str = (v)}
#define UNS_INT(k, v) uns[nu++] = (struct anndata_value){.name = (k), .kind = ANNDATA_INT64, .i = (v)}

void anndata_write_features(const struct config *cfg, struct dataset *ds, const struct features_net *net,
                            const struct features_prep *prep, const char *features_path,
                            const struct features *meta) {
  char path[4200];
  anndata_features_path(features_path, path, sizeof path);
  h5util_lock();
  hid_t fid, dset;
  hsize_t dims[2];
  h5util_need("features file", features_path, h5util_file_open(features_path, &fid));
  h5util_need("features file", features_path, h5util_dset_open(fid, "features", 2, H5T_FLOAT, dims, &dset));
  SCD_ASSERT(dims[0] == (hsize_t)meta->n && dims[1] == (hsize_t)meta->d);
  struct stored_rows src = {features_path, dset, meta->d};

  int32_t *split = row_splits(cfg, ds, meta);
  struct anndata_obs obs;
  anndata_features_obs(meta, split, &obs);

  const char *chn[FEATURES_MAX_CHANNELS];
  int64_t chi[FEATURES_MAX_CHANNELS], in_size[2] = {prep->oh, prep->ow};
  for (int c = 0; c < prep->nsel; c++) {
    chn[c] = dataset_channel_name(ds, prep->sel[c]);
    chi[c] = prep->sel[c];
  }
  char date[32], arch[CFG_WORDLEN];
  const time_t now = time(NULL);
  struct tm tm;
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  checkpoint_arch(meta->checkpoint, arch, sizeof arch);
  char *deck = config_echo_text(cfg);
  struct anndata_value uns[UNS_MAX];
  int nu = 0;
  UNS_STR("scdino_version", PACKAGE_VERSION);
  UNS_STR("date", date);
  if (config_deck_path()[0]) UNS_STR("deck_path", config_deck_path());
  UNS_STR("deck", deck);
  UNS_STR("features_file", features_path);
  UNS_STR("checkpoint", meta->checkpoint);
  UNS_STR("checkpoint_key", meta->checkpoint_key);
  UNS_INT("epoch", meta->epoch);
  if (arch[0]) UNS_STR("arch", arch);
  UNS_INT("patch_size", net->vit.d.patch);
  UNS_INT("embed_dim", net->vit.d.dim);
  UNS_INT("depth", net->vit.d.depth);
  UNS_INT("num_heads", net->vit.d.heads);
  uns[nu++] = (struct anndata_value){.name = "channels", .kind = ANNDATA_STRINGS, .count = prep->nsel, .strs = chn};
  uns[nu++] = (struct anndata_value){.name = "channel_indices", .kind = ANNDATA_INT64S, .count = prep->nsel,
                                     .i64 = chi};
  UNS_INT("resize", cfg->features.resize);
  uns[nu++] = (struct anndata_value){.name = "input_size", .kind = ANNDATA_INT64S, .count = 2, .i64 = in_size};
  uns[nu++] = (struct anndata_value){.name = "normalize", .kind = ANNDATA_BOOL, .i = prep->normalize};
  UNS_STR("subset", cfg->features.subset);
  UNS_STR("shard_dir", cfg->data.shard_dir);
  uns[nu++] = (struct anndata_value){.name = "train_fraction", .kind = ANNDATA_FLOAT64, .f = cfg->data.train_fraction};
  UNS_INT("split_seed", cfg->data.split_seed);
  SCD_ASSERT(nu <= UNS_MAX);

  const struct anndata a = {.n = meta->n, .d = meta->d, .obs_names = (const char *const *)meta->paths,
                            .obs = obs.cols, .nobs = obs.n, .uns = uns, .nuns = nu,
                            .rows = stored_rows, .arg = &src};
  anndata_write(path, &a);
  log_info("features: AnnData file %s (scanpy: sc.read_h5ad)", path);
  H5Dclose(dset);
  H5Fclose(fid);
  h5util_unlock();
  free(deck);
  anndata_obs_free(&obs);
  free(split);
}
