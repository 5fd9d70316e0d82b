/* attention_png.c - PNG images of attention maps (colour-mapped) and of input channels (grey), via libpng. */
#include "build_config.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/attention.h"
#include "core/check.h"
#include "core/fsutil.h"

/* matplotlib's viridis sampled at t = i / 16 (8-bit sRGB). */
static const unsigned char viridis17[17][3] = {
    {68, 1, 84},    {72, 24, 106},  {71, 45, 123},  {66, 64, 134},  {59, 82, 139},  {51, 99, 141},
    {44, 114, 142}, {38, 130, 142}, {33, 145, 140}, {31, 160, 136}, {40, 174, 128}, {63, 188, 115},
    {94, 201, 98},  {132, 212, 75}, {173, 220, 48}, {216, 226, 25}, {253, 231, 37},
};

void attention_colormap(double t, unsigned char rgb[3]) {
  if (!(t > 0)) t = 0; /* NaN too */
  if (t > 1) t = 1;
  const double x = t * 16;
  int i = (int)x;
  if (i > 15) i = 15;
  const double f = x - i;
  for (int c = 0; c < 3; c++) {
    const double v = viridis17[i][c] * (1 - f) + viridis17[i + 1][c] * f;
    rgb[c] = (unsigned char)(v + 0.5);
  }
}

/* libpng reports errors through this; the message goes to the fatal error below. */
static char png_msg[256];
static void on_png_error(png_structp png, png_const_charp msg) {
  snprintf(png_msg, sizeof png_msg, "%s", msg);
  png_longjmp(png, 1);
}
static void on_png_warning(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

/* The libpng calls, on an open file; returns 0 or -1 (libpng failed, message in png_msg). */
static int png_encode(FILE *f, const unsigned char *pix, int w, int h, int channels) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, on_png_error, on_png_warning);
  if (!png) {
    snprintf(png_msg, sizeof png_msg, "png_create_write_struct failed");
    return -1;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, NULL);
    snprintf(png_msg, sizeof png_msg, "png_create_info_struct failed");
    return -1;
  }
  png_bytep *rows = calloc((size_t)h, sizeof *rows);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    free(rows);
    return -1;
  }
  if (!rows) png_error(png, "out of memory");
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; y++) rows[y] = (png_bytep)(pix + (size_t)y * w * channels);
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(rows);
  return 0;
}

void attention_png_write(const char *path, const unsigned char *pix, int w, int h, int channels) {
  SCD_ASSERT(w > 0 && h > 0 && (channels == 1 || channels == 3));
  struct fs_mem m;
  if (png_encode(fs_mem_begin(&m), pix, w, h, channels) != 0)
    scd_fatal(SCD_EXIT_FAILURE, "cannot encode %s: %s", path, png_msg);
  fs_mem_commit(&m, "attention map", path);
}

static void range_f32(const float *x, size_t n, double *lo, double *hi) {
  *lo = x[0];
  *hi = x[0];
  for (size_t i = 1; i < n; i++) {
    if (x[i] < *lo) *lo = x[i];
    if (x[i] > *hi) *hi = x[i];
  }
}

/* Whether patch (gy, gx) is outside the grid or left out of the mask. */
static int outside(const uint8_t *mask, int gh, int gw, int gy, int gx) {
  return gy < 0 || gx < 0 || gy >= gh || gx >= gw || !mask[(size_t)gy * gw + gx];
}

void attention_png_map(const char *path, const float *map, const uint8_t *mask, int gh, int gw, int p) {
  double lo, hi;
  range_f32(map, (size_t)gh * gw, &lo, &hi);
  const double scale = hi > lo ? 1.0 / (hi - lo) : 0.0;
  const int w = gw * p, h = gh * p;
  unsigned char *pix = xmalloc(MUL_SIZE(MUL_SIZE((size_t)w, (size_t)h), 3));
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      attention_colormap((map[(size_t)(y / p) * gw + x / p] - lo) * scale, pix + ((size_t)y * w + x) * 3);
  if (mask) /* the outline: kept pixels with a 4-neighbour in a left-out patch or off the image */
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        if (!mask[(size_t)(y / p) * gw + x / p]) continue;
        const int edge = (y == 0 || outside(mask, gh, gw, (y - 1) / p, x / p)) ||
                         (y == h - 1 || outside(mask, gh, gw, (y + 1) / p, x / p)) ||
                         (x == 0 || outside(mask, gh, gw, y / p, (x - 1) / p)) ||
                         (x == w - 1 || outside(mask, gh, gw, y / p, (x + 1) / p));
        if (edge) memset(pix + ((size_t)y * w + x) * 3, 255, 3);
      }
  attention_png_write(path, pix, w, h, 3);
  free(pix);
}

void attention_png_gray(const char *path, const float *img, int h, int w) {
  const size_t n = (size_t)h * w;
  double lo, hi;
  range_f32(img, n, &lo, &hi);
  const double scale = hi > lo ? 255.0 / (hi - lo) : 0.0;
  unsigned char *pix = xmalloc(n);
  for (size_t i = 0; i < n; i++) pix[i] = (unsigned char)((img[i] - lo) * scale + 0.5);
  attention_png_write(path, pix, w, h, 1);
  free(pix);
}
