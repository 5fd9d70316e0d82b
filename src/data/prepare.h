/* prepare.h - calculation='prepare': a TIFF tree in ImageFolder layout (or a CSV file list) into HDF5
 * shards.
 *
 * prepare_run walks data.tiff_dir (or reads data.file_list), converts the files into
 * shard_dir/shard-NNNNN.h5 (images_per_shard files each; ranks convert disjoint runs of shards),
 * computes the per-channel statistics and writes shard_dir/manifest.h5 last (prepare.c).  The
 * helpers below are the per-image steps (prepare_image.c), exposed for prepare.c and the tests. */
#ifndef SCDINO_PREPARE_H
#define SCDINO_PREPARE_H

#include <limits.h>
#include <stddef.h>

#include "input/config.h"

struct imagefolder;
struct stats_acc;

/* Room for the reason an image is bad: a reason may quote an example path. */
#define PREPARE_WHY_MAX (2 * PATH_MAX)

/* calculation = 'prepare' (every rank); returns the exit status. */
int prepare_run(const struct config *cfg);
/* The deck names images to prepare (&data tiff_dir or file_list): what train and pipeline check
 * their shards against; its name for messages ("" when none). */
int prepare_has_source(const struct config *cfg);
const char *prepare_source(const struct config *cfg);

/* torchvision CenterCrop offset along one axis: int(round((size - crop) / 2)) with Python's
 * round-half-to-even, or minus the left/top zero padding when crop > size. */
int prepare_crop_offset(int size, int crop);

/* Convert a TIFF's [C][sh][sw] samples (enum tiff_sample) to the shard dtype (DATASET_U16 for
 * 8/16-bit unsigned sources, DATASET_F32 otherwise) and centre-crop/pad them to [C][oh][ow]. */
void prepare_crop_convert(const void *src, int sample, int channels, int sh, int sw, void *dst,
                          int oh, int ow);
int prepare_storage_dtype(int sample);

/* The format every image must have, chosen from a sample of the files (prepare_format_choose). */
struct prepare_format {
  int C, H, W;    /* after center_crop */
  int dtype;      /* shard dtype */
  int sample;     /* source sample type of the example */
  char example[PATH_MAX];
};

/* The reference format of the files f lists under root (rank 0): the most common one among a
 * sample of them; exits (3) when none reads as a TIFF image. */
void prepare_format_choose(const struct imagefolder *f, const char *root, int crop, struct prepare_format *ref);

/* Read, check and convert the file full into out [C][H][W]; its statistics go into one (reset
 * here).  Returns 0, or -1 with the reason in why[n]. */
int prepare_image_convert(const char *full, const struct prepare_format *ref, int crop, void *out,
                          struct stats_acc *one, char *why, size_t n);

#endif
