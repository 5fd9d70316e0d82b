/* vit_pos.c - the bicubic position-embedding interpolation of DINO as a matrix (doc/algorithm.md §1.4). */
#include "build_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/imgops.h"
#include "model/vit.h"

/* Upstream interpolates the S x S grid of patch position embeddings with
 * F.interpolate(scale_factor=((gh+0.1)/S, (gw+0.1)/S), mode='bicubic'): the source scale is
 * S/(g+0.1), not S/g, and the output has g rows because floor(S*(g+0.1)/S) = g.  Every output
 * position is a fixed linear combination of the inputs (separable 4-tap weights, indices clamped),
 * so the whole map is one matrix; forward is m * pos_embed and backward m^T * dpos. */
int vit_pos_interp_matrix(int S, int gh, int gw, int H, int W, float *m) {
  const size_t nin = 1 + (size_t)S * S, nout = 1 + (size_t)gh * gw;
  memset(m, 0, nout * nin * sizeof(float));
  m[0] = 1.0f; /* the CLS position is passed through */
  if ((size_t)gh * gw == (size_t)S * S && H == W) {
    for (size_t i = 1; i < nout; i++) m[i * nin + i] = 1.0f;
    return 0;
  }
  const double fh = (gh + 0.1) / S, fw = (gw + 0.1) / S;
  if ((int)floor(S * fh) != gh || (int)floor(S * fw) != gw)
    SCD_FAIL("position-embedding interpolation: output size %d x %d does not match the grid %d x %d",
             (int)floor(S * fh), (int)floor(S * fw), gh, gw);
  int *ih = xmalloc((size_t)gh * 4 * sizeof(int)), *iw = xmalloc((size_t)gw * 4 * sizeof(int));
  float *wh = xmalloc((size_t)gh * 4 * sizeof(float)), *ww = xmalloc((size_t)gw * 4 * sizeof(float));
  imgops_bicubic_taps(S, gh, imgops_scale_for_factor(fh), ih, wh);
  imgops_bicubic_taps(S, gw, imgops_scale_for_factor(fw), iw, ww);
  for (int oy = 0; oy < gh; oy++)
    for (int ox = 0; ox < gw; ox++) {
      float *row = m + (1 + (size_t)oy * gw + ox) * nin;
      for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
          /* Clamped taps can repeat an index: their weights add. */
          const size_t src = 1 + (size_t)ih[oy * 4 + a] * S + iw[ox * 4 + b];
          row[src] += (float)((double)wh[oy * 4 + a] * ww[ox * 4 + b]);
        }
    }
  free(ih);
  free(iw);
  free(wh);
  free(ww);
  return 1;
}
