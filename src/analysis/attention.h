/* attention.h - last-block attention maps of the CLS token (calculation='attention', upstream
 * visualise_attention.py, doc/algorithm.md §8.5).
 *
 * For attention.images_per_class images of every class, drawn from the validation split with a
 * seeded draw (RNG_DOMAIN_ATTENTION, id0 = class; upstream's random.sample is unseeded), and for
 * two image sizes - features.resize (upstream 224; 0 = the stored size, named by its smaller edge)
 * and attention.image_size (upstream 480; one set when both are equal) - the image is prepared as
 * for the features (analysis/features.h: min-max, bilinear resize of the smaller edge, normalisation),
 * cropped at the top left to a multiple of the patch size (as upstream), and run through the
 * backbone (position embedding interpolated).  The last block's attention of the CLS query to
 * every patch gives one map per head.
 *
 * run_dir/attention.h5 (format "scdino-attention", version ATTENTION_VERSION below):
 *   class_names [C], channel_names [nsel], labels int32 [n], index int64 [n], paths [n]
 *   size_<S>/maps           float32 [n, heads, gh, gw]  CLS -> patch attention, renormalised to sum
 *                                                      to 1 over the patches of each head
 *   size_<S>/cls_attention  float32 [n, heads]          the CLS query's attention to itself: the raw
 *                                                      softmax row is maps * (1 - cls_attention)
 *   size_<S>/images         float32 [n, nsel, h, w]     the network input (h = gh p, w = gw p)
 *   size_<S>/masks          uint8 [n, heads, gh, gw]    with attention.threshold > 0: 1 where the
 *                                                      patch is among those holding that share of
 *                                                      the head's mass (attention_mask)
 *   attributes: format, version, checkpoint, checkpoint_key, epoch, patch_size, heads, seed,
 *   sizes (int64 [nsizes]), threshold (0: no masks); each size_<S> group: size, height, width,
 *   grid_h, grid_w.
 * Upstream saves the raw softmax row; a per-head colour map (min to max) is the same either way.
 *
 * PNG images (libpng), upstream's tree under run_dir/attention/<class>/<file>/image_size_<S>/:
 *   attn-head<j>.png   the map of head j, min-max colour-mapped (viridis, as matplotlib's imsave
 *                      default), upsampled nearest-neighbour by the patch size to h x w; with
 *                      masks, the mask's outline drawn in white
 *   channel_<name>.png each input channel as a grey image, min-max scaled (upstream writes
 *                      original_img_channel_<name>.png once per image, next to the size folders). */
#ifndef SCDINO_ATTENTION_H
#define SCDINO_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "analysis/features.h"

/* calculation = 'attention' (every rank); returns the exit status. */
int attention_run(const struct config *cfg);

#define ATTENTION_FORMAT "scdino-attention"
#define ATTENTION_VERSION 2 /* 2: checksummed (newest HDF5 format, Fletcher-32, fixed strings) */

struct dataset;

/* One of the two image sizes and everything computed at it (rows gathered on rank 0). */
struct attention_size {
  int size;                  /* smaller edge after the resize */
  double threshold;          /* attention.threshold (0: no masks) */
  struct features_prep prep;
  int gh, gw, h, w;          /* patch grid and the cropped image it covers */
  float *maps;               /* [n][heads][gh*gw] */
  float *cls;                /* [n][heads] */
  float *imgs;               /* [n][nsel][h][w] */
  uint8_t *masks;            /* [n][heads][gh*gw] (attention.threshold > 0; rank 0), else NULL */
};

/* The mask of one map (np patches) keeping `threshold` of its mass, as upstream DINO's
 * visualize_attention: weights sorted ascending (ties by patch order) and normalised to sum 1,
 * a patch kept where the cumulative sum up to it exceeds 1 - threshold: the largest patches that
 * hold that share (a little more: the patch that crosses it is kept). */
void attention_mask(const float *map, int np, double threshold, uint8_t *mask);

/* ---- attention_out.c (rank 0) ---------------------------------------------------------------- */

/* attention.h5 at path, atomically. */
void attention_write_h5(const char *path, struct dataset *ds, const struct features_net *net, int64_t epoch,
                        uint64_t seed, const int64_t *idx, int64_t n, const struct attention_size *sz, int nsizes);
/* Before the maps are computed: end the job (exit 2) when attention.h5 or a PNG of the tree would
 * replace an input of the run or a file of another kind (core/fsutil.h, fs_output_claim). */
void attention_claim_outputs(const char *run_dir, struct dataset *ds, int heads, const int64_t *idx, int64_t n,
                             const struct attention_size *sz, int nsizes);
/* The PNG tree under run_dir/attention/. */
void attention_write_pngs(const char *run_dir, struct dataset *ds, const struct features_net *net,
                          const int64_t *idx, int64_t n, const struct attention_size *sz, int nsizes);
/* Directory name of an image: its file name without the extension ("img_0003" for
 * "B/sub/img_0003.tiff"). */
void attention_image_stem(const char *relpath, char *buf, size_t n);

/* ---- attention_png.c ------------------------------------------------------------------------- */

/* viridis at t in [0, 1] (clamped) as 8-bit RGB: linear between 17 samples of matplotlib's map. */
void attention_colormap(double t, unsigned char rgb[3]);
/* Write a 8-bit PNG atomically: channels 1 (grey) or 3 (RGB), rows of w * channels bytes. */
void attention_png_write(const char *path, const unsigned char *pix, int w, int h, int channels);
/* map [gh][gw] -> RGB PNG of (gh p) x (gw p): min-max colour-mapped, each value a p x p block
 * (a constant map is drawn at the colour of 0); mask (may be NULL): the pixels of kept patches
 * that touch a patch left out or the image's edge are white (the mask's outline). */
void attention_png_map(const char *path, const float *map, const uint8_t *mask, int gh, int gw, int p);
/* img [h][w] -> grey PNG, min-max scaled to 0..255 (a constant image is black). */
void attention_png_gray(const char *path, const float *img, int h, int w);

#endif
