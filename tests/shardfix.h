/* tests/shardfix.h - small synthetic shard sets for the loader tests (written with shards.h). */
#ifndef SCDINO_TESTS_SHARDFIX_H
#define SCDINO_TESTS_SHARDFIX_H

#include <stdint.h>

/* Write n images [C][H][W] (dtype DATASET_U16 or DATASET_F32) into dir as shards of per_shard
 * images plus manifest.h5.  Pixel values depend only on (image index, channel, position), so every
 * process that builds or reads the set sees the same data.  Images listed in bad[0..nbad-1] get a
 * constant non-zero channel `bad_channel` (upstream drops such images). */
void shardfix_make(const char *dir, int64_t n, int C, int H, int W, int dtype, int64_t per_shard,
                   const int64_t *bad, int nbad, int bad_channel);
/* The pixel value shardfix_make stores. */
double shardfix_pixel(int64_t index, int c, int y, int x);

#endif
