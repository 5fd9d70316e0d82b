/* tiff.h - reading one TIFF file with libtiff into a channels-first [C][H][W] array.
 *
 * Accepted layouts: one page with one or several samples per pixel (contiguous or planar), several
 * pages of one sample each (one channel per page; ImageJ hyperstacks are such files), and the
 * layout tifffile.imwrite gives an H x W x C array with C > 4: H pages of W x C, marked by the
 * description {"shape": [H, W, C]} (read back as the H x W x C image scDINO expects).  Strips or
 * tiles, any compression libtiff decodes.  libtiff's own messages become part of the returned
 * error text; nothing is printed. */
#ifndef SCDINO_TIFF_H
#define SCDINO_TIFF_H

#include <stddef.h>

enum tiff_sample {
  TIFF_SAMPLE_U8 = 1,
  TIFF_SAMPLE_U16,
  TIFF_SAMPLE_I8,
  TIFF_SAMPLE_I16,
  TIFF_SAMPLE_F32,
  TIFF_SAMPLE_F64,
};

enum tiff_layout {
  TIFF_LAYOUT_CONTIG = 1, /* one page, samples interleaved (or a single sample) */
  TIFF_LAYOUT_PLANAR,     /* one page, PLANARCONFIG_SEPARATE */
  TIFF_LAYOUT_PAGES,      /* one channel per page */
  TIFF_LAYOUT_HWC_PAGES,  /* tifffile's H pages of W x C */
};

struct tiff_info {
  int channels, height, width;
  int sample; /* enum tiff_sample */
  int layout; /* enum tiff_layout */
};

size_t tiff_sample_size(int sample);
const char *tiff_sample_name(int sample); /* "uint8", "uint16", ... */

/* Header only: shape, sample type and layout.  Returns 0, or -1 with the reason in err. */
int tiff_probe(const char *path, struct tiff_info *info, char *err, size_t errn);
/* The whole image: *data is a malloc'd [C][H][W] array of info->sample values (native byte
 * order).  Returns 0, or -1 with the reason in err (nothing allocated). */
int tiff_read(const char *path, struct tiff_info *info, void **data, char *err, size_t errn);

#endif
