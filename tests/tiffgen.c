/* tests/tiffgen.c - TIFF files of every layout, written with libtiff, for the tests. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

#include "tiffgen.h"

double tiffgen_value(const struct tiffgen *g, int c, int y, int x) {
  long h = (long)c * 7919 + (long)y * 131 + (long)x * 17 + (long)g->seed * 101 + 3;
  switch (g->sample) {
    case TIFF_SAMPLE_U8: return (double)((h * 13) % 251);
    case TIFF_SAMPLE_U16: return (double)((h * 37) % 65521);
    case TIFF_SAMPLE_I8: return (double)((h * 13) % 251 - 125);
    case TIFF_SAMPLE_I16: return (double)((h * 37) % 65521 - 32760);
    case TIFF_SAMPLE_F32: return (double)(float)(sin(0.37 * (double)h) * 1000.0 + 0.125 * c);
    default: return sin(0.37 * (double)h) * 1000.0 + 0.125 * c;
  }
}

static void put(int sample, void *buf, size_t i, double v) {
  switch (sample) {
    case TIFF_SAMPLE_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case TIFF_SAMPLE_U16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case TIFF_SAMPLE_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case TIFF_SAMPLE_I16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case TIFF_SAMPLE_F32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v;
  }
}

void tiffgen_fill(const struct tiffgen *g, int C, int H, int W, void *buf) {
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) put(g->sample, buf, ((size_t)c * H + y) * W + x, tiffgen_value(g, c, y, x));
}

static void sample_tags(TIFF *t, int sample, int *bps, int *fmt) {
  switch (sample) {
    case TIFF_SAMPLE_U8: *bps = 8; *fmt = SAMPLEFORMAT_UINT; break;
    case TIFF_SAMPLE_U16: *bps = 16; *fmt = SAMPLEFORMAT_UINT; break;
    case TIFF_SAMPLE_I8: *bps = 8; *fmt = SAMPLEFORMAT_INT; break;
    case TIFF_SAMPLE_I16: *bps = 16; *fmt = SAMPLEFORMAT_INT; break;
    case TIFF_SAMPLE_F32: *bps = 32; *fmt = SAMPLEFORMAT_IEEEFP; break;
    default: *bps = 64; *fmt = SAMPLEFORMAT_IEEEFP;
  }
  (void)t;
}

/* One directory of w x h pixels with spp interleaved (contig) or separate samples, from planes
 * [spp][h][w] (planar) or an interleaved [h][w][spp] buffer (contig). */
static int write_dir(TIFF *t, const struct tiffgen *g, int spp, int planar, uint32_t w, uint32_t h,
                     const unsigned char *data, const char *desc) {
  int bps, fmt;
  sample_tags(t, g->sample, &bps, &fmt);
  size_t es = (size_t)bps / 8;
  int ok = TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w) && TIFFSetField(t, TIFFTAG_IMAGELENGTH, h) &&
           TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, spp) && TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, bps) &&
           TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, fmt) &&
           TIFFSetField(t, TIFFTAG_PLANARCONFIG, planar ? PLANARCONFIG_SEPARATE : PLANARCONFIG_CONTIG) &&
           TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK) &&
           TIFFSetField(t, TIFFTAG_COMPRESSION, g->compression ? g->compression : COMPRESSION_NONE);
  if (ok && spp > 1) {
    uint16_t extra[64];
    for (int i = 0; i < spp - 1 && i < 64; i++) extra[i] = EXTRASAMPLE_UNSPECIFIED;
    ok = TIFFSetField(t, TIFFTAG_EXTRASAMPLES, spp - 1, extra);
  }
  if (ok && g->predictor > 1) ok = TIFFSetField(t, TIFFTAG_PREDICTOR, g->predictor);
  if (ok && desc) ok = TIFFSetField(t, TIFFTAG_IMAGEDESCRIPTION, desc);
  if (!ok) return -1;
  int groups = planar ? spp : 1, nsamp = planar ? 1 : spp;
  size_t rowbytes = (size_t)w * nsamp * es;
  if (g->tile) {
    uint32_t tw = (uint32_t)g->tile, th = (uint32_t)g->tile;
    if (!TIFFSetField(t, TIFFTAG_TILEWIDTH, tw) || !TIFFSetField(t, TIFFTAG_TILELENGTH, th)) return -1;
    unsigned char *tb = calloc((size_t)tw * th * nsamp, es);
    for (int s = 0; s < groups; s++)
      for (uint32_t y0 = 0; y0 < h; y0 += th)
        for (uint32_t x0 = 0; x0 < w; x0 += tw) {
          memset(tb, 0, (size_t)tw * th * nsamp * es);
          for (uint32_t y = y0; y < y0 + th && y < h; y++) {
            uint32_t nx = x0 + tw <= w ? tw : w - x0;
            const unsigned char *src = data + (size_t)s * h * rowbytes + (size_t)y * rowbytes + (size_t)x0 * nsamp * es;
            memcpy(tb + (size_t)(y - y0) * tw * nsamp * es, src, (size_t)nx * nsamp * es);
          }
          if (TIFFWriteTile(t, tb, x0, y0, 0, (uint16_t)s) < 0) {
            free(tb);
            return -1;
          }
        }
    free(tb);
  } else {
    uint32_t rps = g->rows_per_strip > 0 ? (uint32_t)g->rows_per_strip : TIFFDefaultStripSize(t, 0);
    if (!TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, rps)) return -1;
    /* libtiff byte-swaps what it writes in place (big-endian files): hand it a copy. */
    unsigned char *row = malloc(rowbytes);
    for (int s = 0; s < groups; s++)
      for (uint32_t y = 0; y < h; y++) {
        memcpy(row, data + (size_t)s * h * rowbytes + (size_t)y * rowbytes, rowbytes);
        if (TIFFWriteScanline(t, row, y, (uint16_t)s) < 0) {
          free(row);
          return -1;
        }
      }
    free(row);
  }
  return TIFFWriteDirectory(t) ? 0 : -1;
}

int tiffgen_write(const char *path, const struct tiffgen *g, int C, int H, int W, const void *chw) {
  TIFF *t = TIFFOpen(path, g->big_endian ? "wb" : "wl");
  if (!t) return -1;
  const unsigned char *src = chw;
  int bps, fmt;
  sample_tags(t, g->sample, &bps, &fmt);
  size_t es = (size_t)bps / 8, plane = (size_t)H * W * es;
  int rc = 0;
  char desc[256];
  switch (g->layout) {
    case TIFF_LAYOUT_PLANAR:
      rc = write_dir(t, g, C, C > 1, (uint32_t)W, (uint32_t)H, src, NULL);
      break;
    case TIFF_LAYOUT_PAGES:
      if (g->imagej)
        snprintf(desc, sizeof desc, "ImageJ=1.11a\nimages=%d\nchannels=%d\nhyperstack=true\nmode=grayscale\n", C, C);
      for (int c = 0; c < C && rc == 0; c++) rc = write_dir(t, g, 1, 0, (uint32_t)W, (uint32_t)H, src + c * plane, g->imagej && c == 0 ? desc : NULL);
      break;
    case TIFF_LAYOUT_HWC_PAGES: {
      /* tifffile's layout of an H x W x C array: page y holds W rows of C values. */
      unsigned char *page = malloc((size_t)W * C * es);
      snprintf(desc, sizeof desc, "{\"shape\": [%d, %d, %d]}", H, W, C);
      for (int y = 0; y < H && rc == 0; y++) {
        for (int x = 0; x < W; x++)
          for (int c = 0; c < C; c++)
            memcpy(page + ((size_t)x * C + c) * es, src + (((size_t)c * H + y) * W + x) * es, es);
        rc = write_dir(t, g, 1, 0, (uint32_t)C, (uint32_t)W, page, y == 0 ? desc : NULL);
      }
      free(page);
      break;
    }
    default: { /* contiguous: interleave */
      unsigned char *hwc = malloc((size_t)H * W * C * es);
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
          for (int c = 0; c < C; c++)
            memcpy(hwc + (((size_t)y * W + x) * C + c) * es, src + (((size_t)c * H + y) * W + x) * es, es);
      rc = write_dir(t, g, C, 0, (uint32_t)W, (uint32_t)H, hwc, NULL);
      free(hwc);
    }
  }
  TIFFClose(t);
  return rc;
}

int tiffgen_make(const char *path, const struct tiffgen *g, int C, int H, int W) {
  int bps, fmt;
  sample_tags(NULL, g->sample, &bps, &fmt);
  void *buf = malloc((size_t)C * H * W * (size_t)(bps / 8));
  tiffgen_fill(g, C, H, W, buf);
  int rc = tiffgen_write(path, g, C, H, W, buf);
  free(buf);
  return rc;
}
