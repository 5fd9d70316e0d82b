/* shards_write.c - writing shard files (shard_writer_*) and manifest.h5 (manifest_write). */
#include "build_config.h"

#include <hdf5.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "data/shards.h"

/* Images are written in blocks of this many (one H5Dwrite each); labels, indices and paths are
 * kept in memory and written at the end (the index may still change, see shard_writer_commit). */
#define WRITER_BLOCK 64

struct shard_writer {
  char path[PATH_MAX], tmp[PATH_MAX];
  int C, H, W, dtype;
  size_t image_bytes;
  hid_t file, images;
  int64_t n, cap;
  int32_t *labels;
  int64_t *index;
  char **paths;
  int nmeta;
  const char *const *meta_names; /* [nmeta], borrowed */
  char **meta;                   /* [cap][nmeta] */
  unsigned char *block;
  int nblock;
  int finished;
};

size_t dataset_dtype_size(int dtype) { return dtype == DATASET_F32 ? 4 : 2; }
const char *dataset_dtype_name(int dtype) { return dtype == DATASET_F32 ? "float32" : "uint16"; }

static hid_t file_type(int dtype) { return dtype == DATASET_F32 ? H5T_IEEE_F32LE : H5T_STD_U16LE; }
static hid_t mem_type(int dtype) { return dtype == DATASET_F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16; }

/* ---- 1-D datasets (the caller holds the HDF5 lock) ---- */

/* Without modification times, so the same input gives byte-identical files (1 rank or many, today
 * or tomorrow). */
static void dset_1d(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int64_t n, const void *data) {
  const hsize_t dims[1] = {(hsize_t)n};
  h5util_dset_write(loc, name, ftype, mtype, 1, dims, data);
}

static void dset_strs(hid_t loc, const char *name, int64_t n, const char *const *strs) {
  h5util_dset_write_strs(loc, name, strs, (hsize_t)n);
}

/* ---- shard writer ---- */

struct shard_writer *shard_writer_create(const char *path, int channels, int height, int width,
                                         int dtype, int64_t capacity) {
  SCD_ASSERT(channels > 0 && height > 0 && width > 0);
  SCD_ASSERT(dtype == DATASET_U16 || dtype == DATASET_F32);
  struct shard_writer *w = xcalloc(1, sizeof *w);
  snprintf(w->path, sizeof w->path, "%s", path);
  w->C = channels;
  w->H = height;
  w->W = width;
  w->dtype = dtype;
  w->image_bytes = MUL_SIZE(MUL_SIZE(MUL_SIZE((size_t)channels, (size_t)height), (size_t)width),
                            dataset_dtype_size(dtype));
  w->cap = capacity > 0 ? capacity : 16;
  w->labels = xmalloc(MUL_SIZE((size_t)w->cap, sizeof *w->labels));
  w->index = xmalloc(MUL_SIZE((size_t)w->cap, sizeof *w->index));
  w->paths = xcalloc((size_t)w->cap, sizeof *w->paths);
  w->block = xmalloc(MUL_SIZE(WRITER_BLOCK, w->image_bytes));

  fs_atomic_begin(path, w->tmp, sizeof w->tmp);
  h5util_lock();
  w->file = h5util_file_create(w->tmp, H5P_DEFAULT);
  hsize_t dims[4] = {0, (hsize_t)channels, (hsize_t)height, (hsize_t)width};
  hsize_t maxdims[4] = {H5S_UNLIMITED, (hsize_t)channels, (hsize_t)height, (hsize_t)width};
  hsize_t chunk[4] = {1, (hsize_t)channels, (hsize_t)height, (hsize_t)width};
  hid_t sp = (hid_t)CHECK_H5(H5Screate_simple(4, dims, maxdims));
  hid_t dcpl = h5util_dcpl_untimed();
  /* One image per chunk, uncompressed, with its Fletcher-32: a sample is one contiguous read, and
   * readers can use plain pread() on the chunk's file offset and check the sum themselves. */
  CHECK_H5(H5Pset_chunk(dcpl, 4, chunk));
  CHECK_H5(H5Pset_fletcher32(dcpl));
  CHECK_H5(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
  w->images = (hid_t)CHECK_H5(H5Dcreate2(w->file, "images", file_type(dtype), sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
  CHECK_H5(H5Pclose(dcpl));
  CHECK_H5(H5Sclose(sp));
  h5util_unlock();
  return w;
}

static void writer_flush_block(struct shard_writer *w) {
  if (w->nblock == 0) return;
  hsize_t first = (hsize_t)(w->n - w->nblock);
  hsize_t dims[4] = {(hsize_t)w->n, (hsize_t)w->C, (hsize_t)w->H, (hsize_t)w->W};
  hsize_t start[4] = {first, 0, 0, 0};
  hsize_t count[4] = {(hsize_t)w->nblock, (hsize_t)w->C, (hsize_t)w->H, (hsize_t)w->W};
  h5util_lock();
  CHECK_H5(H5Dset_extent(w->images, dims));
  hid_t fsp = (hid_t)CHECK_H5(H5Dget_space(w->images));
  CHECK_H5(H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL));
  hid_t msp = (hid_t)CHECK_H5(H5Screate_simple(4, count, NULL));
  CHECK_H5(H5Dwrite(w->images, mem_type(w->dtype), msp, fsp, H5P_DEFAULT, w->block));
  CHECK_H5(H5Sclose(msp));
  CHECK_H5(H5Sclose(fsp));
  h5util_unlock();
  w->nblock = 0;
}

void shard_writer_add(struct shard_writer *w, const void *image, int32_t label, int64_t index,
                      const char *path) {
  SCD_ASSERT(!w->finished);
  if (w->n == w->cap) {
    w->cap *= 2;
    w->labels = xrealloc(w->labels, MUL_SIZE((size_t)w->cap, sizeof *w->labels));
    w->index = xrealloc(w->index, MUL_SIZE((size_t)w->cap, sizeof *w->index));
    w->paths = xrealloc(w->paths, MUL_SIZE((size_t)w->cap, sizeof *w->paths));
    if (w->nmeta > 0) {
      w->meta = xrealloc(w->meta, MUL_SIZE(MUL_SIZE((size_t)w->cap, (size_t)w->nmeta), sizeof *w->meta));
      memset(w->meta + (size_t)w->n * (size_t)w->nmeta, 0, (size_t)(w->cap - w->n) * (size_t)w->nmeta * sizeof *w->meta);
    }
  }
  w->labels[w->n] = label;
  w->index[w->n] = index;
  w->paths[w->n] = xstrdup(path ? path : "");
  memcpy(w->block + (size_t)w->nblock * w->image_bytes, image, w->image_bytes);
  w->n++;
  if (++w->nblock == WRITER_BLOCK) writer_flush_block(w);
}

void shard_writer_meta_columns(struct shard_writer *w, int nmeta, const char *const *names) {
  SCD_ASSERT(w->n == 0 && nmeta >= 0);
  w->nmeta = nmeta;
  w->meta_names = names;
  w->meta = nmeta > 0 ? xcalloc(MUL_SIZE((size_t)w->cap, (size_t)nmeta), sizeof *w->meta) : NULL;
}

void shard_writer_add_meta(struct shard_writer *w, const char *const *values) {
  SCD_ASSERT(w->n > 0 && !w->finished);
  for (int m = 0; m < w->nmeta; m++) w->meta[(size_t)(w->n - 1) * (size_t)w->nmeta + (size_t)m] = xstrdup(values[m]);
}

int64_t shard_writer_count(const struct shard_writer *w) { return w->n; }

/* Group 'metadata' with one string dataset [n] per column, and 'metadata_columns' naming them in
 * order (the caller holds the lock). */
static void write_meta(struct shard_writer *w) {
  if (w->nmeta == 0) return;
  dset_strs(w->file, "metadata_columns", w->nmeta, w->meta_names);
  hid_t g = h5util_group_create(w->file, "metadata");
  const char **col = xmalloc(MUL_SIZE((size_t)(w->n > 0 ? w->n : 1), sizeof *col));
  for (int m = 0; m < w->nmeta; m++) {
    for (int64_t i = 0; i < w->n; i++) {
      const char *v = w->meta[(size_t)i * (size_t)w->nmeta + (size_t)m];
      col[i] = v ? v : "";
    }
    dset_strs(g, w->meta_names[m], w->n, col);
  }
  free(col);
  CHECK_H5(H5Gclose(g));
  for (size_t i = 0; i < (size_t)w->n * (size_t)w->nmeta; i++) free(w->meta[i]);
  free(w->meta);
  w->meta = NULL;
}

/* File offset of every image chunk, so readers can pread() images without HDF5 (shards_read.c).
 * HDF5 1.10 finds a chunk by coordinate with a walk over the chunk index, so this costs
 * O(n^2); done once here for shards of up to SHARDS_OFFSETS_MAX images, not by every reader. */
#define SHARDS_OFFSETS_MAX 16384
static void write_offsets(struct shard_writer *w) {
  if (w->n == 0 || w->n > SHARDS_OFFSETS_MAX) return;
  CHECK_H5(H5Dflush(w->images));
  uint64_t *addr = xmalloc(MUL_SIZE((size_t)w->n, sizeof *addr));
  for (int64_t j = 0; j < w->n; j++) {
    hsize_t off[4] = {(hsize_t)j, 0, 0, 0}, size = 0;
    unsigned mask = 0;
    haddr_t a = HADDR_UNDEF;
    CHECK_H5(H5Dget_chunk_info_by_coord(w->images, off, &mask, &a, &size));
    SCD_ASSERT(a != HADDR_UNDEF && size == w->image_bytes + 4 && mask == 0);
    addr[j] = (uint64_t)a;
  }
  dset_1d(w->file, "image_offsets", H5T_STD_U64LE, H5T_NATIVE_UINT64, w->n, addr);
  free(addr);
}

void shard_writer_finish(struct shard_writer *w) {
  SCD_ASSERT(!w->finished);
  writer_flush_block(w);
  h5util_lock();
  write_offsets(w);
  dset_1d(w->file, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, w->n, w->labels);
  dset_1d(w->file, "index", H5T_STD_I64LE, H5T_NATIVE_INT64, w->n, w->index);
  dset_strs(w->file, "paths", w->n, (const char *const *)w->paths);
  write_meta(w);
  h5util_attr_write_str(w->file, "format", SHARDS_FORMAT);
  h5util_attr_write_i32(w->file, "version", SHARDS_VERSION);
  CHECK_H5(H5Dclose(w->images));
  CHECK_H5(H5Fclose(w->file));
  h5util_unlock();
  for (int64_t i = 0; i < w->n; i++) free(w->paths[i]);
  free(w->paths);
  free(w->labels);
  free(w->block);
  w->paths = NULL;
  w->labels = NULL;
  w->block = NULL;
  w->finished = 1;
}

void shard_writer_commit(struct shard_writer *w, int64_t index_delta) {
  SCD_ASSERT(w->finished);
  if (index_delta != 0 && w->n > 0) {
    for (int64_t i = 0; i < w->n; i++) w->index[i] += index_delta;
    h5util_lock();
    hid_t f = (hid_t)CHECK_H5(H5Fopen(w->tmp, H5F_ACC_RDWR, H5P_DEFAULT));
    hid_t d = (hid_t)CHECK_H5(H5Dopen2(f, "index", H5P_DEFAULT));
    CHECK_H5(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, w->index));
    CHECK_H5(H5Dclose(d));
    CHECK_H5(H5Fclose(f));
    h5util_unlock();
  }
  fs_atomic_commit(w->tmp, w->path);
  free(w->index);
  free(w);
}

void shard_writer_close(struct shard_writer *w) {
  shard_writer_finish(w);
  shard_writer_commit(w, 0);
}

void shard_writer_discard(struct shard_writer *w) {
  if (!w->finished) shard_writer_finish(w);
  fs_atomic_abort(w->tmp);
  free(w->index);
  free(w);
}

/* ---- manifest ---- */

void manifest_write(const char *shard_dir, const struct manifest_info *m) {
  char path[PATH_MAX];
  fs_join(path, sizeof path, shard_dir, SHARDS_MANIFEST);
  h5util_lock();
  struct h5util_image img;
  hid_t f = h5util_image_begin(path, &img);
  h5util_attr_write_str(f, "format", SHARDS_FORMAT);
  h5util_attr_write_i32(f, "version", SHARDS_VERSION);
  h5util_attr_write_i32(f, "channels", m->channels);
  h5util_attr_write_i32(f, "height", m->height);
  h5util_attr_write_i32(f, "width", m->width);
  h5util_attr_write_str(f, "dtype", dataset_dtype_name(m->dtype));
  h5util_attr_write_i64(f, "count", m->count);
  h5util_attr_write_i64(f, "source_count", m->source_count);
  h5util_attr_write_i64(f, "stats_images", m->stats_images);
  h5util_attr_write_str(f, "tiff_dir", m->tiff_dir ? m->tiff_dir : "");
  h5util_attr_write_i32(f, "center_crop", m->center_crop);
  h5util_attr_write_f64(f, "stats_fraction", m->stats_fraction);
  h5util_attr_write_i64(f, "stats_seed", m->stats_seed);
  h5util_attr_write_str(f, "source_dtype", m->source_dtype ? m->source_dtype : "");
  char hash[32];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)m->file_list_hash);
  h5util_attr_write_str(f, "file_list_hash", hash);
  h5util_attr_write_i64(f, "folder_depth_for_labels", m->label_depth);
  h5util_attr_write_str(f, "label_source", m->label_source ? m->label_source : "folders");
  h5util_attr_write_str(f, "file_list", m->file_list ? m->file_list : "");
  h5util_attr_write_str(f, "creator", PACKAGE_STRING);

  dset_strs(f, "class_names", m->nclasses, m->class_names);
  dset_strs(f, "channel_names", m->channels, m->channel_names);
  if (m->nmeta > 0) dset_strs(f, "metadata_columns", m->nmeta, m->meta_names);
  dset_strs(f, "shards", m->nshards, m->shard_files);
  dset_1d(f, "shard_counts", H5T_STD_I64LE, H5T_NATIVE_INT64, m->nshards, m->shard_counts);
  if (m->shard_bytes) dset_1d(f, "shard_bytes", H5T_STD_I64LE, H5T_NATIVE_INT64, m->nshards, m->shard_bytes);
  if (m->shard_fnv1a) dset_1d(f, "shard_fnv1a", H5T_STD_U64LE, H5T_NATIVE_UINT64, m->nshards, m->shard_fnv1a);
  dset_1d(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, m->count, m->labels);
  dset_1d(f, "skipped_index", H5T_STD_I64LE, H5T_NATIVE_INT64, m->nskipped, m->skipped_index);
  dset_1d(f, "mean", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, m->channels, m->mean);
  dset_1d(f, "std", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, m->channels, m->std);
  h5util_image_close(f, &img);
  h5util_unlock();
  char tmp[PATH_MAX];
  fs_atomic_begin(path, tmp, sizeof tmp);
  fs_write_buffer("shard manifest", tmp, path, img.buf, img.size, NULL, NULL);
  fs_atomic_commit(tmp, path);
  free(img.buf);
}
