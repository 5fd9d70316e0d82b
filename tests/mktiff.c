/* tests/mktiff.c - write one small TIFF for the shell tests:
 *   mktiff OUT.tif CHANNELS HEIGHT WIDTH u8|u16|i16|f32|f64 [ramp|const|zero|nan|inf] [SEED]
 * ramp: varied values; const: channel 1 constant 7 (NaN after min-max); zero: channel 1 all zero
 * (valid); nan / inf: one NaN / infinite pixel in channel 0 (float types). */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiffgen.h"

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: mktiff OUT.tif C H W u8|u16|i16|f32|f64 [ramp|const|zero|nan|inf] [SEED]\n");
    return 2;
  }
  int C = atoi(argv[2]), H = atoi(argv[3]), W = atoi(argv[4]);
  const char *type = argv[5], *pattern = argc > 6 ? argv[6] : "ramp";
  struct tiffgen g = {.layout = TIFF_LAYOUT_CONTIG, .seed = argc > 7 ? atoi(argv[7]) : 0};
  if (!strcmp(type, "u8")) g.sample = TIFF_SAMPLE_U8;
  else if (!strcmp(type, "u16")) g.sample = TIFF_SAMPLE_U16;
  else if (!strcmp(type, "i16")) g.sample = TIFF_SAMPLE_I16;
  else if (!strcmp(type, "f32")) g.sample = TIFF_SAMPLE_F32;
  else if (!strcmp(type, "f64")) g.sample = TIFF_SAMPLE_F64;
  else {
    fprintf(stderr, "mktiff: unknown type %s\n", type);
    return 2;
  }
  if (C < 1 || H < 1 || W < 1) return 2;
  size_t es = tiff_sample_size(g.sample), plane = (size_t)H * W;
  unsigned char *buf = malloc((size_t)C * plane * es);
  tiffgen_fill(&g, C, H, W, buf);
  if (!strcmp(pattern, "const") || !strcmp(pattern, "zero")) {
    double v = !strcmp(pattern, "const") ? 7 : 0;
    for (size_t p = 0; p < plane && C > 1; p++) {
      size_t k = plane + p;
      switch (g.sample) {
        case TIFF_SAMPLE_U8: buf[k] = (unsigned char)v; break;
        case TIFF_SAMPLE_U16: ((uint16_t *)buf)[k] = (uint16_t)v; break;
        case TIFF_SAMPLE_I16: ((int16_t *)buf)[k] = (int16_t)v; break;
        case TIFF_SAMPLE_F32: ((float *)buf)[k] = (float)v; break;
        default: ((double *)buf)[k] = v;
      }
    }
  } else if (!strcmp(pattern, "nan") || !strcmp(pattern, "inf")) {
    double v = !strcmp(pattern, "nan") ? NAN : INFINITY;
    if (g.sample == TIFF_SAMPLE_F32) ((float *)buf)[W + 1] = (float)v;
    else if (g.sample == TIFF_SAMPLE_F64) ((double *)buf)[W + 1] = v;
    else return 2;
  } else if (strcmp(pattern, "ramp") != 0) {
    fprintf(stderr, "mktiff: unknown pattern %s\n", pattern);
    return 2;
  }
  int rc = tiffgen_write(argv[1], &g, C, H, W, buf);
  free(buf);
  if (rc != 0) fprintf(stderr, "mktiff: cannot write %s\n", argv[1]);
  return rc ? 1 : 0;
}
