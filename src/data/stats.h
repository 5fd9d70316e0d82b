/* stats.h - per-channel dataset mean and std (scDINO's mean_std_dataset.py, with its bugs fixed).
 *
 * Each image is min-max scaled per channel as upstream's normalize_numpy_0_to_1 does (float64;
 * when some channel is constant, channels whose maximum is 0 get maximum 1, so an all-zero channel
 * stays 0); the statistics are the population mean and std over every pixel of every image used.
 * Fixed upstream bugs: the moments start at 0 (upstream: torch.empty garbage times 0), the images
 * are the centre-cropped ones (upstream ignores center_crop), and every image of the subset counts
 * (upstream uses 10 batches of int(len/10) and drops the remainder). */
#ifndef SCDINO_STATS_H
#define SCDINO_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Sums over the images added so far; merge in a fixed order for results that do not depend on
 * how many ranks computed them. */
struct stats_acc {
  int channels;
  int64_t images, pixels; /* pixels per channel */
  double *sum, *sumsq;    /* [channels] */
};

void stats_acc_init(struct stats_acc *a, int channels);
void stats_acc_free(struct stats_acc *a);
void stats_acc_reset(struct stats_acc *a);
void stats_acc_merge(struct stats_acc *dst, const struct stats_acc *src);

/* Min-max scale one raw image [C][hw] (DATASET_U16 or DATASET_F32) into out (float64) as upstream
 * does.  Returns -1 if the result is finite everywhere, else the first channel that becomes NaN
 * (constant and non-zero, or holding NaN/Inf). */
int stats_minmax(const void *img, int dtype, int channels, size_t hw, double *out);
/* Add one raw image, min-max scaled as stats_minmax does.  Returns -1, or the channel that makes
 * the image NaN (then nothing is added). */
int stats_acc_add(struct stats_acc *a, const void *img, int dtype, size_t hw);
/* Population mean and std per channel: mean = S1/n, std = sqrt(S2/n - mean^2). */
void stats_finish(const struct stats_acc *a, double *mean, double *std);

#endif
