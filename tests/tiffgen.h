/* tests/tiffgen.h - writing TIFF files of every layout scdino reads, with libtiff, for the tests.
 *
 * Pixel values are a fixed function of (channel, row, column) - tiffgen_value - so a test can
 * check a decoded image without keeping the source. */
#ifndef SCDINO_TESTS_TIFFGEN_H
#define SCDINO_TESTS_TIFFGEN_H

#include <stddef.h>

#include "tiff.h"

struct tiffgen {
  int layout;       /* enum tiff_layout (TIFF_LAYOUT_CONTIG, _PLANAR, _PAGES, _HWC_PAGES) */
  int sample;       /* enum tiff_sample */
  int tile;         /* tile side (multiple of 16), 0 = strips */
  int rows_per_strip; /* 0 = libtiff's default */
  int compression;  /* COMPRESSION_NONE (0 means none too), _ADOBE_DEFLATE, _LZW, _PACKBITS */
  int predictor;    /* 0/1 none, 2 horizontal, 3 floating point */
  int big_endian;
  int imagej;       /* PAGES only: an ImageJ hyperstack description */
  int seed;         /* shifts the pixel pattern */
};

/* The value at (c, y, x) for a sample type: varied, non-constant per channel, in range. */
double tiffgen_value(const struct tiffgen *g, int c, int y, int x);
/* Fill buf [C][H][W] with tiffgen_value in the sample type. */
void tiffgen_fill(const struct tiffgen *g, int C, int H, int W, void *buf);
/* Write a [C][H][W] image of g->sample values.  Returns 0 or -1. */
int tiffgen_write(const char *path, const struct tiffgen *g, int C, int H, int W, const void *chw);
/* tiffgen_fill + tiffgen_write. */
int tiffgen_make(const char *path, const struct tiffgen *g, int C, int H, int W);

#endif
