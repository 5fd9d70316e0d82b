/* tests/shardset.h - write a synthetic shard set (shard files + manifest.h5) for tests and benchmarks. */
#ifndef SCDINO_TESTS_SHARDSET_H
#define SCDINO_TESTS_SHARDSET_H

#include <stddef.h>
#include <stdint.h>

/* What to write.  Only the pixels, labels and relative paths differ between the fixtures, so they
 * come from a callback; the manifest's provenance fields are fixed (source_count = count,
 * stats_fraction 0.2, stats_seed 42, source_dtype "uint16", nothing skipped). */
struct shardset {
  int channels, height, width, dtype; /* dtype: DATASET_U16 or DATASET_F32 */
  int64_t count;                      /* images */
  int64_t per_shard;                  /* images per shard file (the last may hold fewer) */
  int nclasses;
  const char *const *class_names;     /* [nclasses] */
  const char *const *channel_names;   /* [channels]; NULL: "ch0", "ch1", ... */
  const double *mean, *std;           /* [channels]: the manifest's normalisation statistics */
  int64_t stats_images;               /* images the statistics claim to cover; 0: count */
  const char *tiff_dir;               /* recorded source directory (never read) */
  /* Fill image i ([C][H][W] of dtype), write its path relative to tiff_dir into rel and return its
   * label.  Called once per image for i = 0, 1, ..., count-1 in that order, so a generator may
   * draw from one RNG stream kept in ctx. */
  int32_t (*image)(void *ctx, int64_t i, void *img, char *rel, size_t reln);
  void *ctx;
};

/* Write dir/shard-NNNNN.h5 and dir/manifest.h5 (dir must exist) with the shard_writer API. */
void shardset_write(const char *dir, const struct shardset *s);

#endif
