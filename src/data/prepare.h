/* prepare.h - calculation='prepare': a TIFF tree in ImageFolder layout into HDF5 shards.
 *
 * prepare_run walks data.tiff_dir, converts the files into
 * shard_dir/shard-NNNNN.h5 (images_per_shard files each; ranks convert disjoint runs of shards),
 * computes the per-channel statistics and writes shard_dir/manifest.h5 last.  The helpers below
 * are the per-image steps, exposed for tests. */
#ifndef SCDINO_PREPARE_H
#define SCDINO_PREPARE_H

#include <stddef.h>

#include "input/config.h"

/* calculation = 'prepare' (every rank); returns the exit status. */
int prepare_run(const struct config *cfg);

/* torchvision CenterCrop offset along one axis: int(round((size - crop) / 2)) with Python's
 * round-half-to-even, or minus the left/top zero padding when crop > size. */
int prepare_crop_offset(int size, int crop);

/* Convert a TIFF's [C][sh][sw] samples (enum tiff_sample) to the shard dtype (DATASET_U16 for
 * 8/16-bit unsigned sources, DATASET_F32 otherwise) and centre-crop/pad them to [C][oh][ow]. */
void prepare_crop_convert(const void *src, int sample, int channels, int sh, int sw, void *dst,
                          int oh, int ow);
int prepare_storage_dtype(int sample);

#endif
