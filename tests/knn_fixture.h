/* tests/knn_fixture.h - a tiny shard set and matching features files for the kNN tests. */
#ifndef SCDINO_TESTS_KNN_FIXTURE_H
#define SCDINO_TESTS_KNN_FIXTURE_H

#include <stdint.h>

#include "features_io.h"

enum { FX_C = 3, FX_H = 12, FX_W = 12, FX_NCLS = 3, FX_NIMG = 90 };

/* The images and labels written by fx_make_shards (ImageFolder order: classes in blocks). */
extern uint16_t fx_images[FX_NIMG][FX_C][FX_H][FX_W];
extern int32_t fx_labels[FX_NIMG];
extern const double fx_mean[FX_C], fx_std[FX_C];

/* Write shard_dir/shard-00000.h5 and shard_dir/manifest.h5 (tests/shardset.c).  Class c
 * has a bright 4x4 square in channel 0 at a class-specific place, channel 1 a ramp, noise
 * everywhere; image 17 has a constant non-zero channel 1. */
void fx_make_shards(const char *shard_dir);
/* Features of n of the images (index (37 i) mod 90: scrambled order), with a class signal. */
void fx_make_features(struct features *f, int n);

#endif
