/* tiff.c - one TIFF file into a channels-first array (layouts described in tiff.h). */
#include "build_config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>

#include "core/check.h"
#include "data/tiff.h"

/* Refuse images whose decoded size exceeds this: a damaged header must not make us allocate
 * terabytes. */
#define TIFF_MAX_BYTES ((size_t)1 << 31)
#define TIFF_MAX_PAGES 65536
/* Widths and lengths are uint32 in the file but int in struct tiff_info: a larger side would turn
 * negative there (and no cell image is a million pixels wide). */
#define TIFF_MAX_SIDE (1u << 20)
/* Tiles may be larger than a small image (writers pick 256 or 512), but not absurdly so. */
#define TIFF_MAX_TILE_BYTES ((size_t)64 << 20)

/* libtiff reports through process-wide handlers; keep the first error of the current thread's
 * current file, so it ends up in our message naming the file instead of on stderr. */
static _Thread_local char tiff_msg[512];
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;

static void on_error(const char *module, const char *fmt, va_list ap) {
  if (tiff_msg[0]) return;
  char m[400];
  vsnprintf(m, sizeof m, fmt, ap);
  snprintf(tiff_msg, sizeof tiff_msg, "%s", m);
  (void)module; /* libtiff's module is the file name, which the caller adds itself */
}

static void on_warning(const char *module, const char *fmt, va_list ap) {
  /* Warnings (unknown private tags of tifffile, ImageJ, ...) do not affect the pixels. */
  (void)module;
  (void)fmt;
  (void)ap;
}

static void install_handlers(void) {
  TIFFSetErrorHandler(on_error);
  TIFFSetWarningHandler(on_warning);
}

size_t tiff_sample_size(int sample) {
  switch (sample) {
    case TIFF_SAMPLE_U8: case TIFF_SAMPLE_I8: return 1;
    case TIFF_SAMPLE_U16: case TIFF_SAMPLE_I16: return 2;
    case TIFF_SAMPLE_F32: return 4;
    case TIFF_SAMPLE_F64: return 8;
    default: return 0;
  }
}

const char *tiff_sample_name(int sample) {
  switch (sample) {
    case TIFF_SAMPLE_U8: return "uint8";
    case TIFF_SAMPLE_U16: return "uint16";
    case TIFF_SAMPLE_I8: return "int8";
    case TIFF_SAMPLE_I16: return "int16";
    case TIFF_SAMPLE_F32: return "float32";
    case TIFF_SAMPLE_F64: return "float64";
    default: return "unknown";
  }
}

/* Geometry of one page (directory). */
struct page {
  uint32_t w, h;
  uint16_t spp, bps, fmt, planar, photometric, compression;
  int sample;
  int tiled;
};

static int fail(char *err, size_t n, const char *fmt, ...) SCD_PRINTF(3, 4);
static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* Append libtiff's message, if any, to a reason. */
static int fail_tiff(char *err, size_t n, const char *what) {
  if (tiff_msg[0]) return fail(err, n, "%s (libtiff: %s)", what, tiff_msg);
  return fail(err, n, "%s", what);
}

static int page_geometry(TIFF *t, struct page *p, char *err, size_t n) {
  uint16_t compression = 1;
  if (!TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &p->w) || !TIFFGetField(t, TIFFTAG_IMAGELENGTH, &p->h))
    return fail_tiff(err, n, "no image width or length");
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &p->spp);
  TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &p->bps);
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &p->fmt);
  TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &p->planar);
  TIFFGetFieldDefaulted(t, TIFFTAG_COMPRESSION, &compression);
  if (!TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &p->photometric)) p->photometric = PHOTOMETRIC_MINISBLACK;
  p->tiled = TIFFIsTiled(t);
  p->compression = compression;
  if (p->w == 0 || p->h == 0 || p->spp == 0) return fail(err, n, "empty image (%ux%u, %u samples)", p->w, p->h, p->spp);
  if (p->w > TIFF_MAX_SIDE || p->h > TIFF_MAX_SIDE)
    return fail(err, n, "image of %u x %u pixels (width x length) is larger than the limit of %u pixels a side",
                p->w, p->h, TIFF_MAX_SIDE);
  if (p->photometric == PHOTOMETRIC_PALETTE)
    return fail(err, n, "palette-colour images are not supported (the values are colour-table indices)");
  if (p->photometric == PHOTOMETRIC_YCBCR) {
    if (compression != COMPRESSION_JPEG)
      return fail(err, n, "YCbCr images are not supported unless JPEG-compressed");
    TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB); /* let libtiff convert to RGB */
  }
  int s = 0;
  if (p->fmt == SAMPLEFORMAT_UINT && p->bps == 8) s = TIFF_SAMPLE_U8;
  else if (p->fmt == SAMPLEFORMAT_UINT && p->bps == 16) s = TIFF_SAMPLE_U16;
  else if (p->fmt == SAMPLEFORMAT_INT && p->bps == 8) s = TIFF_SAMPLE_I8;
  else if (p->fmt == SAMPLEFORMAT_INT && p->bps == 16) s = TIFF_SAMPLE_I16;
  else if (p->fmt == SAMPLEFORMAT_IEEEFP && p->bps == 32) s = TIFF_SAMPLE_F32;
  else if (p->fmt == SAMPLEFORMAT_IEEEFP && p->bps == 64) s = TIFF_SAMPLE_F64;
  if (!s) {
    const char *f = p->fmt == SAMPLEFORMAT_UINT ? "unsigned integer"
                    : p->fmt == SAMPLEFORMAT_INT ? "signed integer"
                    : p->fmt == SAMPLEFORMAT_IEEEFP ? "floating-point" : "unknown-format";
    return fail(err, n, "%u-bit %s samples are not supported (use uint8, uint16, int8, int16, float32 "
                "or float64)", p->bps, f);
  }
  p->sample = s;
  return 0;
}

/* tifffile writes {"shape": [d0, d1, ...]} into the first page's description. */
static int json_shape(TIFF *t, long long *dims, int maxd) {
  char *desc = NULL;
  if (!TIFFGetField(t, TIFFTAG_IMAGEDESCRIPTION, &desc) || !desc) return 0;
  const char *p = strstr(desc, "\"shape\"");
  if (!p) return 0;
  p = strchr(p, '[');
  if (!p) return 0;
  int nd = 0;
  for (p++; *p && *p != ']' && nd < maxd;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) return 0;
    dims[nd++] = v;
    p = end;
    while (*p == ' ' || *p == ',') p++;
  }
  return *p == ']' ? nd : 0;
}

static int same_geometry(const struct page *a, const struct page *b) {
  return a->w == b->w && a->h == b->h && a->spp == b->spp && a->sample == b->sample;
}

/* Open the file and work out its layout; leaves t at the first page. */
static TIFF *open_probe(const char *path, struct tiff_info *info, struct page *p0, char *err, size_t n) {
  pthread_once(&handlers_once, install_handlers);
  tiff_msg[0] = '\0';
  struct stat st;
  if (stat(path, &st) != 0) {
    fail(err, n, "cannot open: %s", strerror(errno));
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) { /* a FIFO or device would block or never end */
    fail(err, n, "not a regular file");
    return NULL;
  }
  if (st.st_size == 0) {
    fail(err, n, "empty file");
    return NULL;
  }
  TIFF *t = TIFFOpen(path, "rm"); /* read(), not mmap: cheaper for the small files of cell images */
  if (!t) {
    fail_tiff(err, n, "not a readable TIFF file");
    return NULL;
  }
  if (page_geometry(t, p0, err, n) != 0) goto bad;
  int npages = 1, raw = p0->compression == COMPRESSION_NONE;
  while (TIFFReadDirectory(t)) {
    struct page p;
    if (++npages > TIFF_MAX_PAGES) {
      fail(err, n, "more than %d pages", TIFF_MAX_PAGES);
      goto bad;
    }
    if (page_geometry(t, &p, err, n) != 0) goto bad;
    raw &= p.compression == COMPRESSION_NONE;
    if (!same_geometry(&p, p0)) {
      fail(err, n, "page %d is %ux%u with %u %s sample(s), page 0 is %ux%u with %u %s sample(s)",
           npages - 1, p.w, p.h, p.spp, tiff_sample_name(p.sample), p0->w, p0->h, p0->spp,
           tiff_sample_name(p0->sample));
      goto bad;
    }
  }
  if (tiff_msg[0]) { /* a damaged directory chain ends the loop above with an error */
    fail_tiff(err, n, "damaged page directory");
    goto bad;
  }
  if (TIFFCurrentDirectory(t) != 0 && !TIFFSetDirectory(t, 0)) { /* one page: still current */
    fail_tiff(err, n, "cannot return to the first page");
    goto bad;
  }
  info->sample = p0->sample;
  if (npages == 1) {
    info->channels = p0->spp;
    info->height = (int)p0->h;
    info->width = (int)p0->w;
    info->layout = p0->spp > 1 && p0->planar == PLANARCONFIG_SEPARATE ? TIFF_LAYOUT_PLANAR : TIFF_LAYOUT_CONTIG;
  } else {
    if (p0->spp != 1) {
      fail(err, n, "%d pages of %u samples each: expected one page per channel, or one page with "
           "all channels", npages, p0->spp);
      goto bad;
    }
    long long d[8];
    int nd = json_shape(t, d, 8);
    /* tifffile's layout for an H x W x C array: H pages of W rows and C columns.  A page
     * narrower than it is long marks it (cells are about square; a C x H x W stack written
     * by tifffile has square pages and is read as one channel per page). */
    if (nd == 3 && d[0] == npages && d[1] == (long long)p0->h && d[2] == (long long)p0->w && p0->w < p0->h) {
      info->layout = TIFF_LAYOUT_HWC_PAGES;
      info->channels = (int)p0->w;
      info->height = npages;
      info->width = (int)p0->h;
    } else {
      info->layout = TIFF_LAYOUT_PAGES;
      info->channels = npages;
      info->height = (int)p0->h;
      info->width = (int)p0->w;
    }
  }
  double bytes = (double)info->channels * info->height * info->width * (double)tiff_sample_size(info->sample);
  if (bytes > (double)TIFF_MAX_BYTES) {
    fail(err, n, "image of %d x %d x %d %s samples is too large (over %zu MiB)", info->channels,
         info->height, info->width, tiff_sample_name(info->sample), TIFF_MAX_BYTES >> 20);
    goto bad;
  }
  /* Uncompressed pixels are stored as they are: a header that promises more than the file holds
   * is a truncated (or forged) file; say so before allocating the image. */
  if (raw && bytes > (double)st.st_size) {
    fail(err, n, "truncated or damaged file: %d x %d x %d uncompressed %s samples need %.0f bytes, the file has %lld",
         info->channels, info->height, info->width, tiff_sample_name(info->sample), bytes, (long long)st.st_size);
    goto bad;
  }
  return t;
bad:
  TIFFClose(t);
  return NULL;
}

int tiff_probe(const char *path, struct tiff_info *info, char *err, size_t errn) {
  struct page p0;
  TIFF *t = open_probe(path, info, &p0, err, errn);
  if (!t) return -1;
  TIFFClose(t);
  return 0;
}

/* Copy nrows x ncols samples of nsamp interleaved channels from src (row stride sstride samples
 * per row of one channel group) into dst planes [nsamp][h][w] at (y0, x0). */
static void scatter(unsigned char *dst, const unsigned char *src, size_t es, int nsamp, int first_ch,
                    uint32_t h, uint32_t w, uint32_t y0, uint32_t x0, uint32_t nrows, uint32_t ncols,
                    uint32_t src_row_pixels) {
  size_t plane = (size_t)h * w;
  for (uint32_t r = 0; r < nrows; r++) {
    const unsigned char *s = src + (size_t)r * src_row_pixels * nsamp * es;
    size_t drow = (size_t)(y0 + r) * w + x0;
    if (nsamp == 1) {
      memcpy(dst + (plane * first_ch + drow) * es, s, (size_t)ncols * es);
      continue;
    }
    for (int c = 0; c < nsamp; c++) {
      unsigned char *d = dst + (plane * (size_t)(first_ch + c) + drow) * es;
      switch (es) {
        case 1: for (uint32_t x = 0; x < ncols; x++) d[x] = s[(size_t)x * nsamp + c]; break;
        case 2: {
          uint16_t *dd = (uint16_t *)(void *)d;
          const uint16_t *ss = (const uint16_t *)(const void *)s;
          for (uint32_t x = 0; x < ncols; x++) dd[x] = ss[(size_t)x * nsamp + c];
          break;
        }
        case 4: {
          uint32_t *dd = (uint32_t *)(void *)d;
          const uint32_t *ss = (const uint32_t *)(const void *)s;
          for (uint32_t x = 0; x < ncols; x++) dd[x] = ss[(size_t)x * nsamp + c];
          break;
        }
        default:
          for (uint32_t x = 0; x < ncols; x++) memcpy(d + (size_t)x * es, s + ((size_t)x * nsamp + c) * es, es);
      }
    }
  }
}

/* Decode the current page into planes [spp][h][w] starting at channel plane `first_ch` of dst. */
static int read_page(TIFF *t, const struct page *p, unsigned char *dst, int first_ch, char *err, size_t n) {
  size_t es = tiff_sample_size(p->sample);
  int separate = p->planar == PLANARCONFIG_SEPARATE && p->spp > 1;
  int groups = separate ? p->spp : 1;     /* passes over the image */
  int nsamp = separate ? 1 : p->spp;      /* interleaved samples per pass */
  if (p->tiled) {
    uint32_t tw = 0, th = 0;
    if (!TIFFGetField(t, TIFFTAG_TILEWIDTH, &tw) || !TIFFGetField(t, TIFFTAG_TILELENGTH, &th) || !tw || !th)
      return fail_tiff(err, n, "tiled image without tile size");
    /* Both sides are checked before they are multiplied: the product of two uint32 from the
     * file can overflow even 64 bits. */
    if (tw > TIFF_MAX_SIDE || th > TIFF_MAX_SIDE ||
        (double)tw * th * nsamp * (double)es > (double)TIFF_MAX_TILE_BYTES)
      return fail(err, n, "tiles of %u x %u pixels are larger than the limit of %zu MiB per tile", tw, th,
                  TIFF_MAX_TILE_BYTES >> 20);
    tmsize_t tsize = TIFFTileSize(t);
    tmsize_t want = (tmsize_t)tw * th * nsamp * (tmsize_t)es;
    if (tsize <= 0 || tsize < want) return fail_tiff(err, n, "bad tile size");
    unsigned char *buf = xmalloc((size_t)tsize);
    for (int g = 0; g < groups; g++)
      for (uint32_t y = 0; y < p->h; y += th)
        for (uint32_t x = 0; x < p->w; x += tw) {
          uint32_t tile = TIFFComputeTile(t, x, y, 0, (uint16_t)g);
          tmsize_t got = TIFFReadEncodedTile(t, tile, buf, tsize);
          if (got < want) {
            free(buf);
            char what[96];
            snprintf(what, sizeof what, "cannot decode tile %u (truncated or damaged file)", tile);
            return fail_tiff(err, n, what);
          }
          uint32_t nr = p->h - y < th ? p->h - y : th, nc = p->w - x < tw ? p->w - x : tw;
          scatter(dst, buf, es, nsamp, first_ch + g, p->h, p->w, y, x, nr, nc, tw);
        }
    free(buf);
  } else {
    uint32_t rps = p->h;
    TIFFGetFieldDefaulted(t, TIFFTAG_ROWSPERSTRIP, &rps);
    if (rps == 0 || rps > p->h) rps = p->h;
    tmsize_t ssize = TIFFStripSize(t);
    if (ssize <= 0) return fail_tiff(err, n, "bad strip size");
    unsigned char *buf = xmalloc((size_t)ssize);
    for (int g = 0; g < groups; g++)
      for (uint32_t y = 0; y < p->h; y += rps) {
        uint32_t nr = p->h - y < rps ? p->h - y : rps;
        tmsize_t want = (tmsize_t)nr * p->w * nsamp * (tmsize_t)es;
        if (want > ssize) {
          free(buf);
          return fail(err, n, "strip larger than libtiff's strip size");
        }
        uint32_t strip = TIFFComputeStrip(t, y, (uint16_t)g);
        tmsize_t got = TIFFReadEncodedStrip(t, strip, buf, want);
        if (got != want) {
          free(buf);
          char what[96];
          snprintf(what, sizeof what, "cannot decode strip %u (truncated or damaged file)", strip);
          return fail_tiff(err, n, what);
        }
        scatter(dst, buf, es, nsamp, first_ch + g, p->h, p->w, y, 0, nr, p->w, p->w);
      }
    free(buf);
  }
  if (tiff_msg[0]) return fail_tiff(err, n, "decoding error");
  return 0;
}

/* tifffile's H pages of W x C into [C][H][W]: page y, row x, column c -> out[c][y][x]. */
static void hwc_page_to_chw(unsigned char *out, const unsigned char *page, size_t es, int C, int H, int W, int y) {
  for (int x = 0; x < W; x++)
    for (int c = 0; c < C; c++)
      memcpy(out + (((size_t)c * H + y) * W + x) * es, page + ((size_t)x * C + c) * es, es);
}

int tiff_read(const char *path, struct tiff_info *info, void **data, char *err, size_t errn) {
  struct page p0;
  *data = NULL;
  TIFF *t = open_probe(path, info, &p0, err, errn);
  if (!t) return -1;
  size_t es = tiff_sample_size(info->sample);
  size_t total = (size_t)info->channels * info->height * info->width * es;
  unsigned char *out = xmalloc(total);
  unsigned char *page = NULL;
  int rc = 0;
  if (info->layout == TIFF_LAYOUT_CONTIG || info->layout == TIFF_LAYOUT_PLANAR) {
    rc = read_page(t, &p0, out, 0, err, errn);
  } else {
    if (info->layout == TIFF_LAYOUT_HWC_PAGES) page = xmalloc((size_t)p0.w * p0.h * es);
    int np = info->layout == TIFF_LAYOUT_PAGES ? info->channels : info->height;
    for (int k = 0; k < np && rc == 0; k++) {
      if (k > 0 && !TIFFReadDirectory(t)) {
        rc = fail_tiff(err, errn, "cannot read the next page");
        break;
      }
      struct page p;
      if (page_geometry(t, &p, err, errn) != 0) {
        rc = -1;
        break;
      }
      if (info->layout == TIFF_LAYOUT_PAGES) {
        rc = read_page(t, &p, out, k, err, errn);
      } else {
        rc = read_page(t, &p, page, 0, err, errn);
        if (rc == 0) hwc_page_to_chw(out, page, es, info->channels, info->height, info->width, k);
      }
      if (rc != 0) {
        char inner[400];
        snprintf(inner, sizeof inner, "%s", err);
        fail(err, errn, "page %d: %s", k, inner);
      }
    }
  }
  free(page);
  TIFFClose(t);
  if (rc != 0) {
    free(out);
    return -1;
  }
  *data = out;
  return 0;
}
