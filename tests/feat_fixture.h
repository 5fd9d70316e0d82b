/* tests/feat_fixture.h - a shard set, a deck and a checkpoint of a tiny ViT for the features,
 * attention and random-init tests. */
#ifndef SCDINO_TESTS_FEAT_FIXTURE_H
#define SCDINO_TESTS_FEAT_FIXTURE_H

#include <stdint.h>

#include "config.h"

/* The shard set: FF_N images of FF_C channels, FF_H x FF_W, uint16 (shardfix.h: label i % 3,
 * classes c0 c1 c2); image FF_FLAT (in the validation split) has a constant non-zero channel 2. */
enum { FF_N = 40, FF_C = 3, FF_H = 20, FF_W = 20, FF_FLAT = 13 };

/* The deck of the tests (tiny custom ViT: patch 8, embed_dim 48, depth 2, 3 heads; channels 0, 2;
 * features.resize 32) with run_dir and shard_dir filled in, then `extra` deck text (may be ""). */
void ff_config(struct config *cfg, const char *run_dir, const char *shard_dir, const char *extra);
/* Write the shard set into shard_dir (created). */
void ff_make_shards(const char *shard_dir);
/* Write a checkpoint of cfg's model for the selected channels: student from init seed
 * seed_student, teacher from seed_teacher, epoch attribute `epoch` (next epoch to run). */
void ff_make_checkpoint(const struct config *cfg, const char *path, uint64_t seed_student,
                        uint64_t seed_teacher, int64_t epoch);

/* The inference preprocessing written out directly (no tap tables): per-channel min-max in float64
 * (a constant channel becomes 0), bilinear resize to oh x ow by the align_corners=False formula,
 * then (x - mean) / std when mean is not NULL.  raw [C_all][H][W]; out [nsel][oh][ow]. */
void ff_prepare(const uint16_t *raw, int H, int W, const int *sel, int nsel, int oh, int ow, const double *mean,
                const double *std, float *out);

#endif
