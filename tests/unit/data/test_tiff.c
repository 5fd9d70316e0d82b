/* tests/unit/data/test_tiff.c - tiff_read on every layout, sample type, tiling and compression, and its
 * refusals (with libtiff's messages kept off stderr). */
#include "build_config.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <tiffio.h>
#include <unistd.h>

#include "data/tiff.h"
#include "tests/fixtures/testutil.h"
#include "tests/fixtures/tiffgen.h"

static const char *dir;

/* Write a variant, read it back, compare every sample bit for bit. */
static void roundtrip(const char *name, struct tiffgen g, int C, int H, int W, int want_layout) {
  char path[4096], err[1024];
  snprintf(path, sizeof path, "%s/%s.tif", dir, name);
  size_t es = tiff_sample_size(g.sample);
  void *src = malloc((size_t)C * H * W * es);
  tiffgen_fill(&g, C, H, W, src);
  T_CHECK(tiffgen_write(path, &g, C, H, W, src) == 0, "%s: cannot write", name);
  struct tiff_info pi, info;
  T_CHECK(tiff_probe(path, &pi, err, sizeof err) == 0, "%s: probe: %s", name, err);
  void *data = NULL;
  int rc = tiff_read(path, &info, &data, err, sizeof err);
  T_CHECK(rc == 0, "%s: read: %s", name, err);
  if (rc == 0) {
    T_CHECK(info.channels == C && info.height == H && info.width == W, "%s: shape %dx%dx%d, want %dx%dx%d", name,
            info.channels, info.height, info.width, C, H, W);
    T_CHECK(info.sample == g.sample, "%s: sample %s, want %s", name, tiff_sample_name(info.sample),
            tiff_sample_name(g.sample));
    T_CHECK(info.layout == want_layout, "%s: layout %d, want %d", name, info.layout, want_layout);
    T_CHECK(pi.channels == info.channels && pi.layout == info.layout, "%s: probe and read disagree", name);
    if (info.channels == C && info.height == H && info.width == W && info.sample == g.sample)
      T_CHECK(memcmp(src, data, (size_t)C * H * W * es) == 0, "%s: pixel values differ", name);
  }
  if (t_verbose) printf("  %-28s ok\n", name);
  free(data);
  free(src);
}

static void expect_refused(const char *name, const char *path, const char *want) {
  char err[1024] = "";
  struct tiff_info info;
  void *data = (void *)1;
  int rc = tiff_read(path, &info, &data, err, sizeof err);
  T_CHECK(rc == -1, "%s: accepted", name);
  T_CHECK(data == NULL, "%s: data not NULL after a failure", name);
  T_CHECK(strstr(err, want) != NULL, "%s: message '%s' lacks '%s'", name, err, want);
  if (t_verbose) printf("  %-28s refused: %s\n", name, err);
}

static void write_raw_tiff(const char *path, int bps, int fmt, int photometric) {
  TIFF *t = TIFFOpen(path, "w");
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 8);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, 8);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, bps);
  TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, fmt);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, photometric);
  TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 8);
  if (photometric == PHOTOMETRIC_PALETTE) {
    uint16_t map[256] = {0};
    TIFFSetField(t, TIFFTAG_COLORMAP, map, map, map);
  }
  unsigned char buf[8 * 8 * 4] = {0};
  TIFFWriteEncodedStrip(t, 0, buf, (tmsize_t)(8 * 8 * bps / 8));
  TIFFClose(t);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  dir = t_scratch_dir("test_tiff");
  const int C = 5, H = 23, W = 37; /* odd sizes: partial strips and tiles */

  /* Layouts and sample types. */
  int samples[] = {TIFF_SAMPLE_U8, TIFF_SAMPLE_U16, TIFF_SAMPLE_I8, TIFF_SAMPLE_I16, TIFF_SAMPLE_F32, TIFF_SAMPLE_F64};
  int layouts[] = {TIFF_LAYOUT_CONTIG, TIFF_LAYOUT_PLANAR, TIFF_LAYOUT_PAGES, TIFF_LAYOUT_HWC_PAGES};
  for (size_t s = 0; s < sizeof samples / sizeof *samples; s++)
    for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++) {
      struct tiffgen g = {.layout = layouts[l], .sample = samples[s], .rows_per_strip = 5, .seed = (int)(s * 4 + l)};
      char name[64];
      snprintf(name, sizeof name, "%s_layout%d", tiff_sample_name(samples[s]), layouts[l]);
      roundtrip(name, g, C, H, W, layouts[l]);
    }
  /* Tiles, compression, predictors, byte order. */
  struct {
    const char *name;
    struct tiffgen g;
  } v[] = {
      {"u16_contig_tiled", {.layout = TIFF_LAYOUT_CONTIG, .sample = TIFF_SAMPLE_U16, .tile = 16}},
      {"u16_planar_tiled", {.layout = TIFF_LAYOUT_PLANAR, .sample = TIFF_SAMPLE_U16, .tile = 16}},
      {"u8_pages_tiled", {.layout = TIFF_LAYOUT_PAGES, .sample = TIFF_SAMPLE_U8, .tile = 32}},
      {"f32_planar_tiled_deflate", {.layout = TIFF_LAYOUT_PLANAR, .sample = TIFF_SAMPLE_F32, .tile = 16,
                                    .compression = COMPRESSION_ADOBE_DEFLATE, .predictor = 3}},
      {"u16_contig_deflate_pred2", {.layout = TIFF_LAYOUT_CONTIG, .sample = TIFF_SAMPLE_U16,
                                    .compression = COMPRESSION_ADOBE_DEFLATE, .predictor = 2, .rows_per_strip = 4}},
      {"u16_planar_lzw", {.layout = TIFF_LAYOUT_PLANAR, .sample = TIFF_SAMPLE_U16, .compression = COMPRESSION_LZW}},
      {"u8_contig_packbits", {.layout = TIFF_LAYOUT_CONTIG, .sample = TIFF_SAMPLE_U8, .compression = COMPRESSION_PACKBITS}},
      {"u16_hwc_deflate", {.layout = TIFF_LAYOUT_HWC_PAGES, .sample = TIFF_SAMPLE_U16, .compression = COMPRESSION_ADOBE_DEFLATE}},
      {"u16_contig_bigendian", {.layout = TIFF_LAYOUT_CONTIG, .sample = TIFF_SAMPLE_U16, .big_endian = 1}},
      {"f32_pages_bigendian", {.layout = TIFF_LAYOUT_PAGES, .sample = TIFF_SAMPLE_F32, .big_endian = 1}},
      {"u16_imagej_hyperstack", {.layout = TIFF_LAYOUT_PAGES, .sample = TIFF_SAMPLE_U16, .imagej = 1}},
  };
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) roundtrip(v[i].name, v[i].g, C, H, W, v[i].g.layout);
  /* One channel; and a square tifffile C x H x W stack (5 pages of 37 x 37 with a "shape"
   * description) stays one channel per page. */
  roundtrip("u16_single", (struct tiffgen){.layout = TIFF_LAYOUT_CONTIG, .sample = TIFF_SAMPLE_U16}, 1, H, W,
            TIFF_LAYOUT_CONTIG);
  {
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/chw_stack.tif", dir);
    struct tiffgen g = {.layout = TIFF_LAYOUT_PAGES, .sample = TIFF_SAMPLE_U16};
    TIFF *t = TIFFOpen(path, "w");
    uint16_t page[37 * 37];
    for (int c = 0; c < 5; c++) {
      for (int i = 0; i < 37 * 37; i++) page[i] = (uint16_t)tiffgen_value(&g, c, i / 37, i % 37);
      TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 37);
      TIFFSetField(t, TIFFTAG_IMAGELENGTH, 37);
      TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 16);
      TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
      TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
      TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 37);
      if (c == 0) TIFFSetField(t, TIFFTAG_IMAGEDESCRIPTION, "{\"shape\": [5, 37, 37]}");
      TIFFWriteEncodedStrip(t, 0, page, sizeof page);
      TIFFWriteDirectory(t);
    }
    TIFFClose(t);
    struct tiff_info info;
    void *data = NULL;
    T_CHECK(tiff_read(path, &info, &data, err, sizeof err) == 0, "chw stack: %s", err);
    T_CHECK(info.layout == TIFF_LAYOUT_PAGES && info.channels == 5 && info.height == 37 && info.width == 37,
            "chw stack read as layout %d, %d x %d x %d", info.layout, info.channels, info.height, info.width);
    if (data) T_CHECK(((uint16_t *)data)[3 * 37 * 37 + 2 * 37 + 5] == (uint16_t)tiffgen_value(&g, 3, 2, 5), "chw stack value");
    free(data);
  }

  /* Refusals; libtiff must not print anything itself. */
  char path[4096], good[4096];
  fflush(stderr);
  char errlog[4096];
  snprintf(errlog, sizeof errlog, "%s/stderr.txt", dir);
  int saved = dup(2), fd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, 2);

  snprintf(path, sizeof path, "%s/missing.tif", dir);
  expect_refused("missing", path, "No such file");
  snprintf(path, sizeof path, "%s/empty.tif", dir);
  fclose(fopen(path, "w"));
  expect_refused("empty", path, "empty file");
  snprintf(path, sizeof path, "%s/text.tif", dir);
  FILE *f = fopen(path, "w");
  fputs("this is not a TIFF file at all, just some text\n", f);
  fclose(f);
  expect_refused("not a tiff", path, "not a readable TIFF");
  /* Truncated: a good uncompressed file cut in the middle of its pixels. */
  snprintf(good, sizeof good, "%s/u16_layout1.tif", dir);
  snprintf(path, sizeof path, "%s/truncated.tif", dir);
  {
    struct tiffgen g = {.layout = TIFF_LAYOUT_CONTIG, .sample = TIFF_SAMPLE_U16, .rows_per_strip = 5};
    tiffgen_make(good, &g, C, H, W);
    FILE *in = fopen(good, "rb");
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, in);
    fclose(in);
    /* libtiff writes the directory after the pixels: cutting the file loses it. */
    FILE *out = fopen(path, "wb");
    fwrite(buf, 1, n / 2, out);
    fclose(out);
    free(buf);
  }
  expect_refused("truncated", path, "");
  /* Truncated pixels with an intact directory. */
  snprintf(path, sizeof path, "%s/short_strips.tif", dir);
  {
    /* Build a file whose single strip claims more bytes than the file holds. */
    FILE *out = fopen(path, "wb");
    const uint32_t w = 16, h = 16, data_off = 8;
    unsigned char hdr[8] = {'I', 'I', 42, 0, 0, 0, 0, 0};
    uint32_t ifd = data_off + 100; /* only 100 of the 512 pixel bytes are present */
    memcpy(hdr + 4, &ifd, 4);
    fwrite(hdr, 1, 8, out);
    unsigned char pix[100] = {0};
    fwrite(pix, 1, 100, out);
    struct { uint16_t tag, type; uint32_t count, value; } e[] = {
        {256, 4, 1, w}, {257, 4, 1, h}, {258, 3, 1, 16}, {259, 3, 1, 1}, {262, 3, 1, 1},
        {273, 4, 1, data_off}, {277, 3, 1, 1}, {278, 4, 1, h}, {279, 4, 1, w * h * 2},
    };
    uint16_t n = sizeof e / sizeof *e;
    fwrite(&n, 2, 1, out);
    fwrite(e, sizeof *e, n, out);
    uint32_t next = 0;
    fwrite(&next, 4, 1, out);
    fclose(out);
  }
  expect_refused("strip beyond end of file", path, "truncated or damaged");
  snprintf(path, sizeof path, "%s/u32.tif", dir);
  write_raw_tiff(path, 32, SAMPLEFORMAT_UINT, PHOTOMETRIC_MINISBLACK);
  expect_refused("uint32", path, "32-bit unsigned integer samples are not supported");
  snprintf(path, sizeof path, "%s/bilevel.tif", dir);
  write_raw_tiff(path, 1, SAMPLEFORMAT_UINT, PHOTOMETRIC_MINISBLACK);
  expect_refused("1-bit", path, "1-bit");
  snprintf(path, sizeof path, "%s/palette.tif", dir);
  write_raw_tiff(path, 8, SAMPLEFORMAT_UINT, PHOTOMETRIC_PALETTE);
  expect_refused("palette", path, "palette");
  /* Pages of different sizes. */
  snprintf(path, sizeof path, "%s/mixed_pages.tif", dir);
  {
    TIFF *t = TIFFOpen(path, "w");
    for (int p = 0; p < 2; p++) {
      uint16_t px[12 * 12] = {0};
      TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 10 + 2 * p);
      TIFFSetField(t, TIFFTAG_IMAGELENGTH, 10);
      TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 16);
      TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
      TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
      TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 10);
      TIFFWriteEncodedStrip(t, 0, px, (10 + 2 * p) * 10 * 2);
      TIFFWriteDirectory(t);
    }
    TIFFClose(t);
  }
  expect_refused("pages of different sizes", path, "page 1 is 12x10");
  /* Several pages of several samples each. */
  snprintf(path, sizeof path, "%s/pages_rgb.tif", dir);
  {
    struct tiffgen g = {.layout = TIFF_LAYOUT_CONTIG, .sample = TIFF_SAMPLE_U8};
    unsigned char buf[3 * 8 * 8];
    tiffgen_fill(&g, 3, 8, 8, buf);
    TIFF *t = TIFFOpen(path, "w");
    for (int p = 0; p < 2; p++) {
      TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 8);
      TIFFSetField(t, TIFFTAG_IMAGELENGTH, 8);
      TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
      TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
      TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
      TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 8);
      TIFFWriteEncodedStrip(t, 0, buf, sizeof buf);
      TIFFWriteDirectory(t);
    }
    TIFFClose(t);
  }
  expect_refused("pages of 3 samples", path, "2 pages of 3 samples");

  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  struct stat st;
  T_CHECK(stat(errlog, &st) == 0 && st.st_size == 0, "libtiff printed %lld bytes on stderr (see %s)",
          (long long)st.st_size, errlog);
  return t_finish();
}
