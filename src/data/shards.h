/* shards.h - the HDF5 image shards and their manifest: reading (dataset_*) and writing (shard_writer_*,
 * manifest_write).
 *
 * A shard directory holds manifest.h5 and shard-NNNNN.h5 files (doc/formats.md).  Images are
 * numbered by a dense global index 0..n-1 in ImageFolder order (classes sorted, files sorted), or
 * in the order of a CSV file list; shard k holds a contiguous run of that index.  Every rank opens
 * the directory for itself. */
#ifndef SCDINO_SHARDS_H
#define SCDINO_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#define SHARDS_FORMAT "scdino-shards"
#define SHARDS_VERSION 2        /* 2: checksummed (newest HDF5 format, Fletcher-32, fixed strings) */
#define SHARDS_VERSION_OLDEST 1 /* version 1 shard sets (no checksums) are still read */
#define SHARDS_MANIFEST "manifest.h5"

/* Element type of the stored images. */
enum { DATASET_U16 = 1, DATASET_F32 = 2 };

size_t dataset_dtype_size(int dtype);     /* 2 or 4 */
const char *dataset_dtype_name(int dtype); /* "uint16" / "float32" */

/* ------------------------------------------------------------------------------------------------
 * Reading. */
struct dataset;

/* Read shard_dir/manifest.h5 and check it (format, version, shapes, that every shard file exists).
 * Not collective.  Bad or missing manifests end the job (SCD_EXIT_DATA) with the file named. */
struct dataset *dataset_open(const char *shard_dir);
void dataset_close(struct dataset *ds);

int64_t dataset_count(const struct dataset *ds); /* n images */
int dataset_channels(const struct dataset *ds);  /* C: all source channels */
int dataset_height(const struct dataset *ds);
int dataset_width(const struct dataset *ds);
int dataset_dtype(const struct dataset *ds); /* DATASET_U16 or DATASET_F32 */
size_t dataset_image_bytes(const struct dataset *ds); /* C*H*W*element size */
int32_t dataset_label(const struct dataset *ds, int64_t i); /* -1 in an unlabelled set */
const int32_t *dataset_labels(const struct dataset *ds); /* all n labels */
/* Classes; 0 for an unlabelled set (&data labels = 'none', or a file list without a label column),
 * whose every label is -1. */
int dataset_nclasses(const struct dataset *ds);
/* Name of class c; c = -1 in an unlabelled set gives DATASET_UNLABELLED. */
const char *dataset_class_name(const struct dataset *ds, int c);
#define DATASET_UNLABELLED "unlabelled"
/* Metadata columns (a file list's columns beside the path and the label; 0 for a TIFF tree), their
 * names, and image i's value of column m (from its shard, read on first use as its paths). */
int dataset_nmeta(const struct dataset *ds);
const char *dataset_meta_name(const struct dataset *ds, int m);
void dataset_meta(struct dataset *ds, int64_t i, int m, char *buf, size_t n);
const char *dataset_channel_name(const struct dataset *ds, int c);
const double *dataset_mean(const struct dataset *ds); /* [C], pixel level after per-image min-max */
const double *dataset_std(const struct dataset *ds);  /* [C] */
const char *dataset_dir(const struct dataset *ds);    /* the shard_dir it was opened from */
/* What the images are, from the manifest: count, shape, labels, class and channel names and the
 * channel statistics (computed from the pixels) hashed (FNV-1a).  Copies of a shard set agree;
 * another set of the same size does not.  Checkpoints record it (a restart compares). */
uint64_t dataset_fingerprint(const struct dataset *ds);

/* Files the ImageFolder walk found (skipped bad images included) and the ImageFolder position of
 * image i.  Equal to dataset_count / i unless prepare ran with on_bad_image='skip' and skipped
 * some: the numpy-compatible split is drawn over the source positions, so the split of the
 * remaining images is exactly scDINO's (split_dataset in split.h). */
int64_t dataset_source_count(const struct dataset *ds);
int64_t dataset_source_index(const struct dataset *ds, int64_t i);

/* Copy images idx[0..count-1] into out as [count][C][H][W] in the stored dtype.  Thread-safe: any
 * number of threads may call it at once.  Whole-image reads; shard files are opened once per
 * process and kept open.  A damaged shard ends the job naming the file and the image. */
void dataset_read_images(struct dataset *ds, const int64_t *idx, int count, void *out);
/* Image bytes dataset_read_images has returned so far (for read rates). */
long long dataset_bytes_delivered(struct dataset *ds);

/* Source TIFF of image i: tiff_dir (as recorded by prepare) joined with its relative path. */
void dataset_path(struct dataset *ds, int64_t i, char *buf, size_t n);
/* The path relative to tiff_dir, as stored in the shard ("class/.../file.tif"). */
void dataset_relpath(struct dataset *ds, int64_t i, char *buf, size_t n);

/* Read path selection for tests: 1 (default) lets dataset_read_images use plain pread() where
 * the shard records its images' file offsets (or is contiguous) and H5Dread_chunk for other
 * uncompressed one-image chunks; 0 forces H5Dread for every image. */
void dataset_set_direct_io(struct dataset *ds, int on);
/* Shards opened so far whose images are read with plain pread(), without HDF5 or its lock. */
int dataset_direct_shards(const struct dataset *ds);

/* ------------------------------------------------------------------------------------------------
 * Writing.  A shard is written under a temporary name and renamed when complete. */
struct shard_writer;

/* capacity: expected image count (a hint; the file grows as needed). */
struct shard_writer *shard_writer_create(const char *path, int channels, int height, int width,
                                         int dtype, int64_t capacity);
/* Append one image [C][H][W] of the writer's dtype, its class label, global index and source path
 * (relative to tiff_dir).  Besides its images, labels, paths and indices a shard holds
 * 'image_offsets' (uint64 [n], the file offset of each image's chunk) for lock-free reads. */
void shard_writer_add(struct shard_writer *w, const void *image, int32_t label, int64_t index,
                      const char *path);
/* Metadata columns (names borrowed until the writer finishes): set before the first image; then
 * every shard_writer_add is followed by shard_writer_add_meta with the image's nmeta values. */
void shard_writer_meta_columns(struct shard_writer *w, int nmeta, const char *const *names);
void shard_writer_add_meta(struct shard_writer *w, const char *const *values);
int64_t shard_writer_count(const struct shard_writer *w);
/* Flush, fsync and rename to the final name; frees w. */
void shard_writer_close(struct shard_writer *w);

/* Two-step close for prepare, where the global index of a rank's first image is known only once
 * every rank has finished: finish writes everything and closes the file under its temporary name;
 * commit adds index_delta to every stored index (if non-zero), fsyncs, renames and frees w. */
void shard_writer_finish(struct shard_writer *w);
void shard_writer_commit(struct shard_writer *w, int64_t index_delta);
/* Remove the temporary file without renaming (an empty or abandoned shard); frees w. */
void shard_writer_discard(struct shard_writer *w);

/* Everything manifest.h5 records.  Arrays are borrowed. */
struct manifest_info {
  int channels, height, width, dtype;
  int64_t count;         /* images in the shards */
  int64_t source_count;  /* files found by the ImageFolder walk */
  int nclasses;                     /* 0: unlabelled (every label -1) */
  const char *const *class_names;   /* [nclasses] */
  const char *const *channel_names; /* [channels] */
  int nmeta;
  const char *const *meta_names;    /* [nmeta] metadata columns */
  int nshards;
  const char *const *shard_files;   /* [nshards] file names inside shard_dir */
  const int64_t *shard_counts;      /* [nshards] */
  const int64_t *shard_bytes;       /* [nshards] file sizes (for staging checks) */
  const uint64_t *shard_fnv1a;      /* [nshards] FNV-1a 64 of each file's bytes */
  const int32_t *labels;            /* [count] */
  int64_t nskipped;
  const int64_t *skipped_index;     /* [nskipped] source positions of skipped files, ascending */
  const double *mean, *std;         /* [channels] */
  int64_t stats_images;             /* images the statistics were computed over */
  /* What produced the shards (checked when prepare runs again). */
  const char *tiff_dir;             /* absolute */
  int center_crop;
  double stats_fraction;
  int64_t stats_seed;
  const char *source_dtype;         /* TIFF sample type of the first image ("uint8", ...) */
  uint64_t file_list_hash;          /* FNV-1a over the relative paths of all source files */
  int label_depth;                  /* &data folder_depth_for_labels the classes came from (-1: first level) */
  const char *label_source;         /* where the classes came from: "folders", "column" or "none" */
  const char *file_list;            /* the CSV file list, absolute ("" for a TIFF tree) */
};

/* Write shard_dir/manifest.h5 atomically. */
void manifest_write(const char *shard_dir, const struct manifest_info *m);

/* Settings of an existing manifest, for prepare's "already done?" check.  Returns 0 and fills the
 * fields if shard_dir/manifest.h5 exists and opens as a manifest of this format and version,
 * else -1 (nothing to reuse) with the reason in why. */
struct manifest_settings {
  int64_t source_count, count;
  uint64_t file_list_hash;
  int label_depth; /* -1 when the manifest does not say (made before the key existed) */
  char label_source[16]; /* "folders" when the manifest does not say (made before the key existed) */
  int center_crop;
  double stats_fraction;
  int64_t stats_seed;
  int64_t nskipped;
  int channels;
  char channel_names_joined[4096]; /* names separated by '\n' */
  int shards_missing;              /* listed shard files that are not there */
};
int manifest_read_settings(const char *shard_dir, struct manifest_settings *s, char *why, size_t n);

/* The shard files a manifest lists, with the size and FNV-1a 64 of each when prepare recorded them
 * (has_checks 0: a manifest made before they were).  Ends the job (SCD_EXIT_DATA) naming the file
 * when the manifest cannot be read. */
struct shard_list {
  int64_t n;
  char **files;
  int64_t *bytes;
  uint64_t *fnv1a;
  int has_checks;
};
void manifest_shard_list(const char *shard_dir, struct shard_list *l);
void shard_list_free(struct shard_list *l);

#endif
