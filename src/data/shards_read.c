/* shards_read.c - opening a shard directory (manifest.h5) and reading images from its shards. */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/check.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "data/shards.h"

struct shard_file {
  char path[PATH_MAX];
  int64_t first, count;   /* global indices first .. first+count-1 */
  atomic_int ready;       /* opened and checked (set under the HDF5 lock) */
  hid_t file, images;
  int fd;                 /* -1 unless direct reads are possible */
  uint64_t *addr;         /* file offset of each image (direct reads) */
  size_t sum;             /* bytes of Fletcher-32 after each image's chunk (direct reads): 0 or 4 */
  int chunk_read;         /* one unfiltered chunk per image: H5Dread_chunk */
  char **paths;           /* loaded on first dataset_path() */
  char **meta;            /* [count][nmeta], loaded on first dataset_meta() */
};

struct dataset {
  char dir[PATH_MAX], manifest[PATH_MAX], tiff_dir[PATH_MAX];
  int C, H, W, dtype;
  size_t image_bytes;
  int64_t n, source_count;
  int nclasses;
  char **class_names, **channel_names;
  int nmeta;
  char **meta_names;
  int nshards;
  struct shard_file *shards;
  int32_t *labels;
  double *mean, *std;
  int64_t *source_index; /* NULL when no file was skipped */
  int direct_io;
  atomic_llong delivered; /* image bytes handed out (the loader threads add concurrently) */
};

/* Limits on what a manifest may claim, checked before anything is allocated or summed: prepare
 * never writes more (an image is a TIFF, at most 2 GiB), and a damaged or forged file must end
 * with a message, not with an allocation of terabytes or an overflowing sum. */
#define SHARDS_MAX_IMAGE_BYTES ((size_t)1 << 31)
#define SHARDS_MAX_IMAGES ((int64_t)INT32_MAX)
#define SHARDS_MAX_CHANNELS 65535
#define SHARDS_MAX_CLASSES 10000
#define SHARDS_MAX_SHARDS (1 << 20)
#define SHARDS_MAX_META 256
/* The smallest std a channel with variation can have: each image's channel holds a 0 and a 1 after
 * min-max scaling, so its std is at least about 1/sqrt(pixels) (5e-5 at 20,000 x 20,000). */
#define SHARDS_STD_MIN 1e-6
#define SHARDS_STATS_TOL 1e-9

/* HDF5's reason for a failed open or read, for the "cannot open" reports. */
static const char *h5_reason(char *buf) { return h5util_reason(buf, 256, 0); }

/* ---- opening ---- */

static int is_regular(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

#define BAD(...) scd_fatal(SCD_EXIT_DATA, __VA_ARGS__)

/* The manifest's format, version, image shape and dtype. */
static void open_format(struct dataset *ds, hid_t f) {
  const char *mf = ds->manifest;
  char s[256];
  if (!h5util_optional(NULL, mf, h5util_attr_read_str(f, "format", s, sizeof s)))
    BAD("%s: not a scdino shard manifest (no 'format' attribute)", mf);
  if (strcmp(s, SHARDS_FORMAT) != 0)
    BAD("%s: not a scdino shard manifest (format is '%s', expected '%s')", mf, s, SHARDS_FORMAT);
  int64_t ver = 0, C = 0, H = 0, W = 0;
  h5util_need(NULL, mf, h5util_attr_read_i64(f, "version", &ver));
  if (ver < SHARDS_VERSION_OLDEST || ver > SHARDS_VERSION)
    BAD("%s: manifest version %lld, but this scdino reads versions %d to %d (prepare the shards again)", mf,
        (long long)ver, SHARDS_VERSION_OLDEST, SHARDS_VERSION);
  h5util_need(NULL, mf, h5util_attr_read_i64(f, "channels", &C));
  h5util_need(NULL, mf, h5util_attr_read_i64(f, "height", &H));
  h5util_need(NULL, mf, h5util_attr_read_i64(f, "width", &W));
  if (C < 1 || C > SHARDS_MAX_CHANNELS || H < 1 || H > 1000000 || W < 1 || W > 1000000)
    BAD("%s: implausible image shape channels=%lld height=%lld width=%lld", mf, (long long)C,
        (long long)H, (long long)W);
  ds->C = (int)C;
  ds->H = (int)H;
  ds->W = (int)W;
  h5util_need(NULL, mf, h5util_attr_read_str(f, "dtype", s, sizeof s));
  if (!strcmp(s, "uint16"))
    ds->dtype = DATASET_U16;
  else if (!strcmp(s, "float32"))
    ds->dtype = DATASET_F32;
  else
    BAD("%s: dtype '%s' is not uint16 or float32", mf, s);
  ds->image_bytes = MUL_SIZE(MUL_SIZE(MUL_SIZE((size_t)C, (size_t)H), (size_t)W), dataset_dtype_size(ds->dtype));
  if (ds->image_bytes > SHARDS_MAX_IMAGE_BYTES)
    BAD("%s: images of %lld x %lld x %lld %s values are larger than the limit of %zu MiB", mf, (long long)C,
        (long long)H, (long long)W, s, SHARDS_MAX_IMAGE_BYTES >> 20);
  h5util_optional(NULL, mf, h5util_attr_read_str(f, "tiff_dir", ds->tiff_dir, sizeof ds->tiff_dir));
}

/* The class and channel names, and the shard files: each named, counted and present; ds->n is
 * their total. */
static void open_shards(struct dataset *ds, hid_t f) {
  const char *mf = ds->manifest;
  int64_t ncls = 0, nch = 0, nsh = 0;
  h5util_need(NULL, mf, h5util_dset_read_strs(f, "class_names", SHARDS_MAX_CLASSES, &ds->class_names, &ncls));
  ds->nclasses = (int)ncls; /* 0: an unlabelled set */
  int64_t nmeta = 0;
  if (!h5util_optional(NULL, mf, h5util_dset_read_strs(f, "metadata_columns", SHARDS_MAX_META, &ds->meta_names, &nmeta))) {
    ds->meta_names = NULL;
    nmeta = 0;
  }
  ds->nmeta = (int)nmeta;
  for (int m = 0; m < ds->nmeta; m++)
    if (!ds->meta_names[m][0] || strchr(ds->meta_names[m], '/'))
      BAD("%s: metadata column name '%s' is not a dataset name", mf, ds->meta_names[m]);
  h5util_need(NULL, mf, h5util_dset_read_strs(f, "channel_names", ds->C, &ds->channel_names, &nch));
  if (nch != ds->C) BAD("%s: dataset 'channel_names' has %lld entries, not one per channel (%lld)", mf,
                        (long long)nch, (long long)ds->C);
  char **names;
  h5util_need(NULL, mf, h5util_dset_read_strs(f, "shards", SHARDS_MAX_SHARDS, &names, &nsh));
  if (nsh < 1) BAD("%s: dataset 'shards' is empty", mf);
  ds->nshards = (int)nsh;
  int64_t *counts = xmalloc(MUL_SIZE((size_t)nsh, sizeof *counts));
  h5util_need(NULL, mf, h5util_dset_read_1d(f, "shard_counts", H5T_INTEGER, H5T_NATIVE_INT64, nsh, counts));
  ds->shards = xcalloc((size_t)nsh, sizeof *ds->shards);
  int64_t total = 0;
  for (int64_t k = 0; k < nsh; k++) {
    struct shard_file *sf = &ds->shards[k];
    if (counts[k] < 1 || strchr(names[k], '/'))
      BAD("%s: shard %lld ('%s') has count %lld or a bad name", mf, (long long)k, names[k], (long long)counts[k]);
    if (counts[k] > SHARDS_MAX_IMAGES - total) /* checked before the sum, which could overflow */
      BAD("%s: the shard counts add up to more than %lld images (shard %lld has count %lld)", mf,
          (long long)SHARDS_MAX_IMAGES, (long long)k, (long long)counts[k]);
    fs_join(sf->path, sizeof sf->path, ds->dir, names[k]);
    sf->first = total;
    sf->count = counts[k];
    sf->fd = -1;
    total += counts[k];
    if (!fs_exists(sf->path))
      BAD("%s: shard file %s listed in the manifest is missing", mf, sf->path);
    if (!is_regular(sf->path)) BAD("%s: shard %s is not a regular file", mf, sf->path);
  }
  free(counts);
  h5util_strs_free(names, nsh);
  int64_t cnt = total;
  h5util_optional(NULL, mf, h5util_attr_read_i64(f, "count", &cnt));
  if (cnt != total)
    BAD("%s: attribute count=%lld but the shard counts add up to %lld", mf, (long long)cnt, (long long)total);
  ds->n = total;
}

/* Every image's label, and the channel statistics. */
static void open_labels_stats(struct dataset *ds, hid_t f) {
  const char *mf = ds->manifest;
  const int C = ds->C;
  ds->labels = xmalloc(MUL_SIZE((size_t)ds->n, sizeof *ds->labels));
  h5util_need(NULL, mf, h5util_dset_read_1d(f, "labels", H5T_INTEGER, H5T_NATIVE_INT32, ds->n, ds->labels));
  for (int64_t i = 0; i < ds->n; i++) {
    if (ds->nclasses == 0 && ds->labels[i] != -1)
      BAD("%s: image %lld has label %d, but the set names no classes (an unlabelled set's labels are -1)", mf,
          (long long)i, ds->labels[i]);
    if (ds->nclasses > 0 && (ds->labels[i] < 0 || ds->labels[i] >= ds->nclasses))
      BAD("%s: image %lld has label %d, outside 0..%d", mf, (long long)i, ds->labels[i], ds->nclasses - 1);
  }
  ds->mean = xmalloc(MUL_SIZE((size_t)C, sizeof(double)));
  ds->std = xmalloc(MUL_SIZE((size_t)C, sizeof(double)));
  h5util_need(NULL, mf, h5util_dset_read_1d(f, "mean", H5T_FLOAT, H5T_NATIVE_DOUBLE, C, ds->mean));
  h5util_need(NULL, mf, h5util_dset_read_1d(f, "std", H5T_FLOAT, H5T_NATIVE_DOUBLE, C, ds->std));
  /* The statistics are of pixels min-max scaled to [0, 1] (stats.h): a mean in [0, 1], a std in
   * [0, 0.5].  A std of 0 (a channel without variation) is refused where that channel is used. */
  for (int c = 0; c < C; c++) {
    if (!(ds->mean[c] >= -SHARDS_STATS_TOL && ds->mean[c] <= 1 + SHARDS_STATS_TOL))
      BAD("%s: mean of channel %d is %g, outside [0, 1] (the statistics of pixels scaled to [0, 1]): damaged "
          "manifest, prepare the shards again", mf, c, ds->mean[c]);
    if (!(ds->std[c] == 0 || (ds->std[c] >= SHARDS_STD_MIN && ds->std[c] <= 0.5 + SHARDS_STATS_TOL)))
      BAD("%s: std of channel %d is %g, neither 0 nor in [%g, 0.5] (the statistics of pixels scaled to [0, 1]): "
          "damaged manifest, prepare the shards again", mf, c, ds->std[c], SHARDS_STD_MIN);
  }
}

/* Files skipped by prepare: their ImageFolder positions, so the split matches upstream's. */
static void open_skipped(struct dataset *ds, hid_t f) {
  const char *mf = ds->manifest;
  const int64_t total = ds->n;
  ds->source_count = total;
  h5util_optional(NULL, mf, h5util_attr_read_i64(f, "source_count", &ds->source_count));
  if (ds->source_count > SHARDS_MAX_IMAGES)
    BAD("%s: source_count %lld is larger than the limit of %lld images", mf, (long long)ds->source_count,
        (long long)SHARDS_MAX_IMAGES);
  if (ds->source_count < total) /* compared before subtracting: a negative count would overflow */
    BAD("%s: source_count %lld is smaller than count %lld", mf, (long long)ds->source_count, (long long)total);
  int64_t nskip = ds->source_count - total;
  if (nskip <= 0) return;
  int64_t *skip = xmalloc(MUL_SIZE((size_t)nskip, sizeof *skip));
  h5util_need(NULL, mf, h5util_dset_read_1d(f, "skipped_index", H5T_INTEGER, H5T_NATIVE_INT64, nskip, skip));
  ds->source_index = xmalloc(MUL_SIZE((size_t)total, sizeof *ds->source_index));
  int64_t k = 0, i = 0;
  for (int64_t p = 0; p < ds->source_count; p++) {
    if (k < nskip && skip[k] == p) {
      k++;
      continue;
    }
    if (i >= total) break;
    ds->source_index[i++] = p;
  }
  if (k != nskip || i != total)
    BAD("%s: dataset 'skipped_index' is not an ascending list of positions below %lld", mf,
        (long long)ds->source_count);
  free(skip);
}

struct dataset *dataset_open(const char *shard_dir) {
  struct dataset *ds = xcalloc(1, sizeof *ds);
  snprintf(ds->dir, sizeof ds->dir, "%s", shard_dir);
  fs_join(ds->manifest, sizeof ds->manifest, shard_dir, SHARDS_MANIFEST);
  const char *mf = ds->manifest;
  ds->direct_io = 1;
  if (!fs_is_dir(shard_dir))
    BAD("shard_dir '%s' does not exist: run calculation='prepare' first", shard_dir);
  if (!fs_exists(mf))
    BAD("%s not found: shard_dir '%s' has no complete shard set (run calculation='prepare'; an "
        "interrupted prepare leaves no manifest)", mf, shard_dir);
  if (!is_regular(mf)) BAD("%s: not a regular file", mf);
  h5util_lock();
  hid_t f;
  h5util_need(NULL, mf, h5util_file_open(mf, &f));
  open_format(ds, f);
  open_shards(ds, f);
  open_labels_stats(ds, f);
  open_skipped(ds, f);
  H5Fclose(f);
  h5util_unlock();
  return ds;
}

void dataset_close(struct dataset *ds) {
  if (!ds) return;
  h5util_lock();
  for (int k = 0; k < ds->nshards; k++) {
    struct shard_file *sf = &ds->shards[k];
    if (atomic_load(&sf->ready)) {
      H5Dclose(sf->images);
      H5Fclose(sf->file);
      if (sf->fd >= 0) close(sf->fd);
    }
    free(sf->addr);
    h5util_strs_free(sf->paths, sf->count);
    h5util_strs_free(sf->meta, sf->meta ? sf->count * ds->nmeta : 0);
  }
  h5util_unlock();
  free(ds->shards);
  h5util_strs_free(ds->class_names, ds->nclasses);
  h5util_strs_free(ds->channel_names, ds->C);
  h5util_strs_free(ds->meta_names, ds->nmeta);
  free(ds->labels);
  free(ds->mean);
  free(ds->std);
  free(ds->source_index);
  free(ds);
}

int64_t dataset_count(const struct dataset *ds) { return ds->n; }
int dataset_channels(const struct dataset *ds) { return ds->C; }
int dataset_height(const struct dataset *ds) { return ds->H; }
int dataset_width(const struct dataset *ds) { return ds->W; }
int dataset_dtype(const struct dataset *ds) { return ds->dtype; }
size_t dataset_image_bytes(const struct dataset *ds) { return ds->image_bytes; }
const int32_t *dataset_labels(const struct dataset *ds) { return ds->labels; }
int dataset_nclasses(const struct dataset *ds) { return ds->nclasses; }
const double *dataset_mean(const struct dataset *ds) { return ds->mean; }
const double *dataset_std(const struct dataset *ds) { return ds->std; }

uint64_t dataset_fingerprint(const struct dataset *ds) {
  uint64_t h = HASH_FNV1A_INIT;
  char dims[128];
  const int len = snprintf(dims, sizeof dims, "%lld %d %d %d %d %d", (long long)ds->n, ds->C, ds->H, ds->W, ds->dtype,
                           ds->nclasses);
  h = hash_fnv1a(h, dims, (size_t)len);
  h = hash_fnv1a(h, ds->labels, (size_t)ds->n * sizeof *ds->labels);
  h = hash_fnv1a(h, ds->mean, (size_t)ds->C * sizeof *ds->mean);
  h = hash_fnv1a(h, ds->std, (size_t)ds->C * sizeof *ds->std);
  for (int c = 0; c < ds->nclasses; c++) h = hash_fnv1a(h, ds->class_names[c], strlen(ds->class_names[c]) + 1);
  for (int c = 0; c < ds->C; c++) h = hash_fnv1a(h, ds->channel_names[c], strlen(ds->channel_names[c]) + 1);
  return h;
}
const char *dataset_dir(const struct dataset *ds) { return ds->dir; }
int64_t dataset_source_count(const struct dataset *ds) { return ds->source_count; }
void dataset_set_direct_io(struct dataset *ds, int on) { ds->direct_io = on; }

int dataset_direct_shards(const struct dataset *ds) {
  int n = 0;
  for (int k = 0; k < ds->nshards; k++) n += atomic_load(&ds->shards[k].ready) && ds->shards[k].fd >= 0;
  return n;
}

static void check_index(const struct dataset *ds, int64_t i) {
  if (i < 0 || i >= ds->n)
    scd_fatal(SCD_EXIT_FAILURE, "image index %lld is outside 0..%lld of %s", (long long)i,
              (long long)ds->n - 1, ds->manifest);
}

int32_t dataset_label(const struct dataset *ds, int64_t i) {
  check_index(ds, i);
  return ds->labels[i];
}

const char *dataset_class_name(const struct dataset *ds, int c) {
  if (c == -1 && ds->nclasses == 0) return DATASET_UNLABELLED;
  SCD_ASSERT(c >= 0 && c < ds->nclasses);
  return ds->class_names[c];
}

int dataset_nmeta(const struct dataset *ds) { return ds->nmeta; }

const char *dataset_meta_name(const struct dataset *ds, int m) {
  SCD_ASSERT(m >= 0 && m < ds->nmeta);
  return ds->meta_names[m];
}

const char *dataset_channel_name(const struct dataset *ds, int c) {
  SCD_ASSERT(c >= 0 && c < ds->C);
  return ds->channel_names[c];
}

int64_t dataset_source_index(const struct dataset *ds, int64_t i) {
  check_index(ds, i);
  return ds->source_index ? ds->source_index[i] : i;
}

/* ---- shard files ---- */

static int shard_of(const struct dataset *ds, int64_t i) {
  int lo = 0, hi = ds->nshards - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (ds->shards[mid].first <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* The recorded offsets are trusted only if they are those HDF5 gives for the first and the last
 * image (a rewritten file, h5repack for instance, moves chunks) and every image has its size.
 * The lookup by coordinate walks the chunk index (linear in 1.10), so it is not done for all. */
static int offsets_agree(const struct shard_file *sf, size_t image_bytes) {
  image_bytes += sf->sum;
  int64_t probe[2] = {0, sf->count - 1};
  for (int k = 0; k < 2; k++) {
    hsize_t off[4] = {(hsize_t)probe[k], 0, 0, 0}, size = 0;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    if (H5Dget_chunk_info_by_coord(sf->images, off, &mask, &addr, &size) < 0 || addr != sf->addr[probe[k]] ||
        mask != 0 || size != image_bytes)
      return 0;
  }
  return 1;
}

/* Offsets the writer records are ascending and never overlap (each new chunk goes after the last).
 * Checked for all, since offsets_agree probes only two: a damaged middle offset would otherwise
 * make pread() return another image's bytes, or metadata, without any error. */
static int offsets_ordered(const struct shard_file *sf, size_t image_bytes) {
  image_bytes += sf->sum;
  for (int64_t j = 0; j + 1 < sf->count; j++)
    if (sf->addr[j] > UINT64_MAX - image_bytes || sf->addr[j] + image_bytes > sf->addr[j + 1]) return 0;
  return 1;
}

/* Open and check shard k (caller holds the HDF5 lock). */
static void shard_open(struct dataset *ds, struct shard_file *sf) {
  const char *p = sf->path;
  h5util_need("shard", p, h5util_file_open(p, &sf->file));
  hsize_t dims[4] = {0, 0, 0, 0}; /* [images, channels, height, width] */
  h5util_need(NULL, p, h5util_dset_open(sf->file, "images", 4, H5T_NO_CLASS, dims, &sf->images));
  hid_t t = H5Dget_type(sf->images);
  if (dims[0] != (hsize_t)sf->count || dims[1] != (hsize_t)ds->C || dims[2] != (hsize_t)ds->H ||
      dims[3] != (hsize_t)ds->W)
    BAD("%s: 'images' has shape [%llu, %llu, %llu, %llu], the manifest says [%lld, %d, %d, %d]", p,
        (unsigned long long)dims[0], (unsigned long long)dims[1], (unsigned long long)dims[2],
        (unsigned long long)dims[3], (long long)sf->count, ds->C, ds->H, ds->W);
  H5T_class_t cls = H5Tget_class(t);
  size_t tsz = H5Tget_size(t);
  int ok = ds->dtype == DATASET_U16 ? cls == H5T_INTEGER && tsz == 2 && H5Tget_sign(t) == H5T_SGN_NONE
                                    : cls == H5T_FLOAT && tsz == 4;
  if (!ok) BAD("%s: 'images' is not of type %s as the manifest says", p, dataset_dtype_name(ds->dtype));
  h5util_need(NULL, p, h5util_dset_stored(sf->images, "images", dims[0] * dims[1] * dims[2] * dims[3]));
  hid_t native = ds->dtype == DATASET_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT;
  int native_type = H5Tequal(t, native) > 0;
  H5Tclose(t);

  /* The shard's own index must be the run of global indices the manifest gives it. */
  int64_t *idx = xmalloc(MUL_SIZE((size_t)sf->count, sizeof *idx));
  h5util_need(NULL, p, h5util_dset_read_1d(sf->file, "index", H5T_INTEGER, H5T_NATIVE_INT64, sf->count, idx));
  for (int64_t j = 0; j < sf->count; j++)
    if (idx[j] != sf->first + j)
      BAD("%s: image %lld has global index %lld, the manifest places it at %lld", p, (long long)j,
          (long long)idx[j], (long long)(sf->first + j));
  free(idx);

  /* Read paths, fastest first.  Direct: every image is one uncompressed block at a known file
   * offset - a contiguous dataset, or one-image chunks (followed by their Fletcher-32 in version 2
   * shards, checked here) whose offsets the writer recorded in 'image_offsets' - so pread() needs
   * neither HDF5 nor the lock.  Chunk: one-image unfiltered chunks read whole with H5Dread_chunk
   * (a B-tree lookup, no conversion).  Otherwise H5Dread. */
  hid_t dcpl = H5Dget_create_plist(sf->images);
  H5D_layout_t layout = H5Pget_layout(dcpl);
  const int nfilters = H5Pget_nfilters(dcpl);
  int unfiltered = native_type && nfilters == 0;
  unsigned flags = 0, cd[4];
  size_t ncd = 4;
  const int summed = native_type && nfilters == 1 &&
                     H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, 0, NULL, NULL) == H5Z_FILTER_FLETCHER32;
  hsize_t chunk[4] = {0, 0, 0, 0};
  const int one_image = layout == H5D_CHUNKED && H5Pget_chunk(dcpl, 4, chunk) == 4 && chunk[0] == 1 &&
                        chunk[1] == (hsize_t)ds->C && chunk[2] == (hsize_t)ds->H && chunk[3] == (hsize_t)ds->W;
  sf->chunk_read = unfiltered && one_image;
  sf->sum = summed ? 4 : 0;
  H5Pclose(dcpl);
  if (unfiltered && layout == H5D_CONTIGUOUS) {
    haddr_t base = H5Dget_offset(sf->images);
    if (base != HADDR_UNDEF) {
      sf->addr = xmalloc(MUL_SIZE((size_t)sf->count, sizeof *sf->addr));
      for (int64_t j = 0; j < sf->count; j++) sf->addr[j] = base + (uint64_t)j * ds->image_bytes;
    }
  } else if (one_image && (unfiltered || summed)) {
    /* Offsets that are missing, damaged or not trusted leave the chunk reads. */
    sf->addr = xmalloc(MUL_SIZE((size_t)sf->count, sizeof *sf->addr));
    if (h5util_dset_read_1d(sf->file, "image_offsets", H5T_INTEGER, H5T_NATIVE_UINT64, sf->count, sf->addr) !=
            H5UTIL_OK ||
        !offsets_agree(sf, ds->image_bytes) || !offsets_ordered(sf, ds->image_bytes)) {
      free(sf->addr);
      sf->addr = NULL;
    }
  }
  if (sf->addr) {
    long long fsize = fs_file_size(p);
    for (int64_t j = 0; j < sf->count; j++)
      if (fsize < 0 || sf->addr[j] > (uint64_t)fsize || sf->addr[j] + ds->image_bytes + sf->sum > (uint64_t)fsize)
        BAD("%s: image %lld lies beyond the end of the file (truncated shard)", p, (long long)j);
    sf->fd = open(p, O_RDONLY | O_CLOEXEC);
    if (sf->fd < 0) BAD("%s: cannot open: %s", p, strerror(errno));
  }
}

static struct shard_file *shard_ready(struct dataset *ds, int k) {
  struct shard_file *sf = &ds->shards[k];
  if (!atomic_load_explicit(&sf->ready, memory_order_acquire)) {
    h5util_lock();
    if (!atomic_load_explicit(&sf->ready, memory_order_relaxed)) {
      shard_open(ds, sf);
      atomic_store_explicit(&sf->ready, 1, memory_order_release);
    }
    h5util_unlock();
  }
  return sf;
}

static void pread_all(const struct shard_file *sf, int64_t j, void *buf, size_t n, uint64_t at) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(sf->fd, (char *)buf + done, n - done, (off_t)(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) BAD("%s: reading image %lld: %s", sf->path, (long long)j, strerror(errno));
    if (r == 0) BAD("%s: image %lld: unexpected end of file (truncated shard)", sf->path, (long long)j);
    done += (size_t)r;
  }
}

static void read_direct(const struct dataset *ds, const struct shard_file *sf, int64_t j, char *out) {
  pread_all(sf, j, out, ds->image_bytes, sf->addr[j]);
  if (!sf->sum) return;
  /* HDF5's Fletcher-32 filter keeps the sum after the chunk, little-endian. */
  unsigned char s[4];
  pread_all(sf, j, s, 4, sf->addr[j] + ds->image_bytes);
  const uint32_t stored = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
  if (stored != h5util_fletcher32(out, ds->image_bytes))
    BAD("%s: image %lld fails its Fletcher-32 checksum (damaged shard)", sf->path, (long long)j);
}

static void read_hdf5(const struct dataset *ds, const struct shard_file *sf, int64_t j, void *out) {
  hsize_t start[4] = {(hsize_t)j, 0, 0, 0};
  hsize_t count[4] = {1, (hsize_t)ds->C, (hsize_t)ds->H, (hsize_t)ds->W};
  hid_t native = ds->dtype == DATASET_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT;
  char why[256];
  h5util_lock();
  if (sf->chunk_read && ds->direct_io) {
    uint32_t mask = 0;
    if (H5Dread_chunk(sf->images, H5P_DEFAULT, start, &mask, out) < 0)
      BAD("%s: cannot read image %lld: %s", sf->path, (long long)j, h5_reason(why));
    h5util_unlock();
    return;
  }
  if (h5util_dset_read_slab(sf->images, "images", 4, start, count, native, out) != H5UTIL_OK)
    BAD("%s: cannot read image %lld: %s", sf->path, (long long)j, h5util_why());
  h5util_unlock();
}

long long dataset_bytes_delivered(struct dataset *ds) { return atomic_load(&ds->delivered); }

void dataset_read_images(struct dataset *ds, const int64_t *idx, int count, void *out) {
  atomic_fetch_add(&ds->delivered, (long long)count * (long long)ds->image_bytes);
  char *o = out;
  for (int b = 0; b < count; b++, o += ds->image_bytes) {
    check_index(ds, idx[b]);
    int k = shard_of(ds, idx[b]);
    struct shard_file *sf = shard_ready(ds, k);
    int64_t j = idx[b] - sf->first;
    if (sf->fd >= 0 && ds->direct_io)
      read_direct(ds, sf, j, o);
    else
      read_hdf5(ds, sf, j, o);
  }
}

void dataset_relpath(struct dataset *ds, int64_t i, char *buf, size_t n) {
  check_index(ds, i);
  struct shard_file *sf = shard_ready(ds, shard_of(ds, i));
  h5util_lock();
  if (!sf->paths) {
    int64_t np = 0;
    h5util_need(NULL, sf->path, h5util_dset_read_strs(sf->file, "paths", sf->count, &sf->paths, &np));
    if (np != sf->count)
      BAD("%s: dataset 'paths' has %lld entries, not one per image (%lld)", sf->path, (long long)np,
          (long long)sf->count);
  }
  snprintf(buf, n, "%s", sf->paths[i - sf->first]);
  h5util_unlock();
}

/* The shard's metadata columns (caller holds the lock): one string per image of each. */
static void load_meta(const struct dataset *ds, struct shard_file *sf) {
  sf->meta = xcalloc(MUL_SIZE((size_t)sf->count, (size_t)ds->nmeta), sizeof *sf->meta);
  for (int m = 0; m < ds->nmeta; m++) {
    char name[300], **col = NULL;
    int64_t nc = 0;
    snprintf(name, sizeof name, "metadata/%s", ds->meta_names[m]);
    h5util_need(NULL, sf->path, h5util_dset_read_strs(sf->file, name, sf->count, &col, &nc));
    if (nc != sf->count)
      BAD("%s: dataset '%s' has %lld entries, not one per image (%lld)", sf->path, name, (long long)nc,
          (long long)sf->count);
    for (int64_t j = 0; j < nc; j++) sf->meta[(size_t)j * (size_t)ds->nmeta + (size_t)m] = col[j];
    free(col);
  }
}

void dataset_meta(struct dataset *ds, int64_t i, int m, char *buf, size_t n) {
  check_index(ds, i);
  SCD_ASSERT(m >= 0 && m < ds->nmeta);
  struct shard_file *sf = shard_ready(ds, shard_of(ds, i));
  h5util_lock();
  if (!sf->meta) load_meta(ds, sf);
  snprintf(buf, n, "%s", sf->meta[(size_t)(i - sf->first) * (size_t)ds->nmeta + (size_t)m]);
  h5util_unlock();
}

void dataset_path(struct dataset *ds, int64_t i, char *buf, size_t n) {
  char rel[PATH_MAX];
  dataset_relpath(ds, i, rel, sizeof rel);
  if (ds->tiff_dir[0] && rel[0] != '/')
    snprintf(buf, n, "%s/%s", ds->tiff_dir, rel);
  else
    snprintf(buf, n, "%s", rel);
}

/* ---- prepare's "already done?" check ---- */

void manifest_shard_list(const char *shard_dir, struct shard_list *l) {
  char mf[PATH_MAX];
  fs_join(mf, sizeof mf, shard_dir, SHARDS_MANIFEST);
  memset(l, 0, sizeof *l);
  h5util_lock();
  hid_t f;
  if (h5util_file_open(mf, &f) != H5UTIL_OK) BAD("%s cannot be opened: %s", mf, h5util_why());
  if (h5util_dset_read_strs(f, "shards", SHARDS_MAX_SHARDS, &l->files, &l->n) != H5UTIL_OK || l->n < 1)
    BAD("%s: cannot read its list of shards (%s)", mf, h5util_why());
  l->bytes = xmalloc(MUL_SIZE((size_t)l->n, sizeof *l->bytes));
  l->fnv1a = xmalloc(MUL_SIZE((size_t)l->n, sizeof *l->fnv1a));
  l->has_checks = H5Lexists(f, "shard_bytes", H5P_DEFAULT) > 0 && H5Lexists(f, "shard_fnv1a", H5P_DEFAULT) > 0;
  if (l->has_checks &&
      (h5util_dset_read_1d(f, "shard_bytes", H5T_INTEGER, H5T_NATIVE_INT64, l->n, l->bytes) != H5UTIL_OK ||
       h5util_dset_read_1d(f, "shard_fnv1a", H5T_INTEGER, H5T_NATIVE_UINT64, l->n, l->fnv1a) != H5UTIL_OK))
    BAD("%s: cannot read shard_bytes / shard_fnv1a (%s)", mf, h5util_why());
  for (int64_t k = 0; k < l->n; k++)
    if (strchr(l->files[k], '/') || !strcmp(l->files[k], "..") || !l->files[k][0])
      BAD("%s: shard name '%s' is not a file name", mf, l->files[k]);
  CHECK_H5(H5Fclose(f));
  h5util_unlock();
}

void shard_list_free(struct shard_list *l) {
  h5util_strs_free(l->files, l->n);
  free(l->bytes);
  free(l->fnv1a);
  memset(l, 0, sizeof *l);
}

int manifest_read_settings(const char *shard_dir, struct manifest_settings *s, char *why, size_t n) {
  char mf[PATH_MAX], buf[256];
  fs_join(mf, sizeof mf, shard_dir, SHARDS_MANIFEST);
  memset(s, 0, sizeof *s);
  if (!fs_exists(mf)) {
    snprintf(why, n, "no %s", mf);
    return -1;
  }
  h5util_lock();
  int rc = -1;
  hid_t f;
  int64_t ver = 0, crop = 0, ch = 0, nch = 0;
  char **names = NULL;
  if (h5util_file_open(mf, &f) != H5UTIL_OK) {
    snprintf(why, n, "%s cannot be opened: %s", mf, h5util_why());
  } else if (h5util_attr_read_str(f, "format", buf, sizeof buf) != H5UTIL_OK || strcmp(buf, SHARDS_FORMAT) != 0) {
    snprintf(why, n, "%s is not a scdino shard manifest", mf);
  } else if (h5util_attr_read_i64(f, "version", &ver) != H5UTIL_OK || ver != SHARDS_VERSION) {
    snprintf(why, n, "%s has version %lld, not %d", mf, (long long)ver, SHARDS_VERSION);
  } else if (h5util_attr_read_i64(f, "source_count", &s->source_count) != H5UTIL_OK ||
             h5util_attr_read_i64(f, "count", &s->count) != H5UTIL_OK ||
             h5util_attr_read_i64(f, "center_crop", &crop) != H5UTIL_OK ||
             h5util_attr_read_f64(f, "stats_fraction", &s->stats_fraction) != H5UTIL_OK ||
             h5util_attr_read_i64(f, "stats_seed", &s->stats_seed) != H5UTIL_OK ||
             h5util_attr_read_i64(f, "channels", &ch) != H5UTIL_OK ||
             h5util_attr_read_str(f, "file_list_hash", buf, sizeof buf) != H5UTIL_OK ||
             h5util_dset_read_strs(f, "channel_names", SHARDS_MAX_CHANNELS, &names, &nch) != H5UTIL_OK) {
    snprintf(why, n, "%s lacks the attributes prepare records (%s)", mf, h5util_why());
  } else if (s->count < 0 || s->source_count < s->count) { /* checked before nskipped is computed */
    snprintf(why, n, "%s has count %lld and source_count %lld", mf, (long long)s->count, (long long)s->source_count);
  } else {
    s->file_list_hash = strtoull(buf, NULL, 16);
    int64_t depth = -1;
    if (h5util_attr_read_i64(f, "folder_depth_for_labels", &depth) != H5UTIL_OK) depth = -1;
    if (h5util_attr_read_str(f, "label_source", s->label_source, sizeof s->label_source) != H5UTIL_OK)
      snprintf(s->label_source, sizeof s->label_source, "folders");
    s->label_depth = (int)depth;
    s->center_crop = (int)crop;
    s->channels = (int)ch;
    s->nskipped = s->source_count - s->count;
    int64_t nsh = 0;
    char **shards = NULL;
    if (h5util_dset_read_strs(f, "shards", SHARDS_MAX_SHARDS, &shards, &nsh) != H5UTIL_OK) {
      shards = NULL;
      nsh = 0;
    }
    for (int64_t k = 0; k < nsh; k++) {
      char p[PATH_MAX];
      fs_join(p, sizeof p, shard_dir, shards[k]);
      s->shards_missing += !fs_exists(p);
    }
    if (!shards) s->shards_missing = 1;
    h5util_strs_free(shards, nsh);
    size_t len = 0;
    for (int64_t i = 0; i < nch; i++) {
      int w = snprintf(s->channel_names_joined + len, sizeof s->channel_names_joined - len, "%s%s",
                       i ? "\n" : "", names[i]);
      if (w < 0 || (size_t)w >= sizeof s->channel_names_joined - len) break;
      len += (size_t)w;
    }
    rc = 0;
  }
  h5util_strs_free(names, nch);
  if (f >= 0) H5Fclose(f);
  h5util_unlock();
  return rc;
}
