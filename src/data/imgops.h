/* imgops.h - float32 C x H x W image operations that reproduce PyTorch/torchvision arithmetic.
 *
 * Images are planar (channel-major) float arrays, rows contiguous.  Resizing is separable: a
 * table of taps (source indices and weights) per output row and per output column, first
 * applied along the width, then along the height, with the products summed in tap order - the
 * same float operations, in the same order, as PyTorch 1.13's CPU upsample kernels: bit-identical
 * to its portable kernels (ATEN_CPU_CAPABILITY=default; tests/data/imgops_ref.h5), and within FMA
 * rounding (relative ~4e-7) of the AVX2 kernels it selects on most machines. */
#ifndef SCDINO_IMGOPS_H
#define SCDINO_IMGOPS_H

#include <stddef.h>
#include <stdint.h>

/* Element types of raw images. */
enum imgops_dtype { IMGOPS_U16 = 0, IMGOPS_F32 = 1 };

#define IMGOPS_MAX_CHANNELS 1024 /* selected channels of one image */
#define IMGOPS_CUBIC_A (-0.75f) /* Keys' cubic, PyTorch's A */

/* --- 1-D taps ------------------------------------------------------------------------------ */

/* Source-coordinate scale of F.interpolate(size=out): (float)in / out. */
float imgops_scale_for_size(int in, int out);
/* Scale of F.interpolate(scale_factor=sf): (float)(1/sf).  The position-embedding interpolation
 * uses sf = (n + 0.1) / S, i.e. scale S / (n + 0.1), not S / n. */
float imgops_scale_for_factor(double scale_factor);

/* Bicubic taps (align_corners=False): for output o, src = scale*(o+0.5)-0.5 (no clamp),
 * i0 = floor(src), t = src - i0; the 4 taps are i0-1..i0+2 clamped to [0, in-1] with weights
 * W(1+t), W(t), W(1-t), W(2-t).  idx and w hold 4 entries per output.  Precision follows PyTorch
 * 1.13 exactly: src in double from the float scale, floor of src rounded to float, t and the
 * weights in float (so t can be a hair below 0 where src rounds up to an integer). */
void imgops_bicubic_taps(int in, int out, float scale, int *idx, float *w);
/* Bilinear taps (align_corners=False): src = max(0, scale*(o+0.5)-0.5) in double, i0 = (int)src,
 * i1 = min(i0+1, in-1), weights (1-l, l) with l = (float)(src - i0); unchanged sizes copy.
 * idx and w hold 2 per output. */
void imgops_bilinear_taps(int in, int out, float scale, int *idx, float *w);

/* Separable resampling with precomputed taps: tmp[c][y][x] = sum_j ww[x][j] src[c][y][iw[x][j]],
 * then dst[c][y][x] = sum_i wh[y][i] tmp[c][ih[y][i]][x].  Tap indices are relative to (top,left),
 * which selects a region of src (the taps must stay inside src).  tmp holds C*H*Wo floats. */
void imgops_resample(const float *src, int C, int H, int W, int top, int left, float *dst, int Ho,
                     int Wo, int ntap, const int *ih, const float *wh, const int *iw,
                     const float *ww, float *tmp);

/* Row-level pieces of the above, for pipelines that fuse further work into each row:
 * dst[x] = sum_i wt[i] * rows[i][x] (height pass), and dst[x] = sum_j ww[x][j] src[iw[x][j]]
 * (width pass), both summed in tap order. */
void imgops_taps_rows(float *restrict dst, const float *const *rows, const float *wt, int ntap, int n);
void imgops_taps_cols(float *restrict dst, const float *restrict src, const int *iw, const float *ww,
                      int ntap, int n);

/* --- Whole-image conveniences (allocate their scratch) ------------------------------------- */

/* F.interpolate(x[None], size=(Ho,Wo), mode='bicubic', align_corners=False), no antialias. */
void imgops_resize_bicubic(const float *src, int C, int H, int W, float *dst, int Ho, int Wo);
/* Same with explicit source scales (scale_h, scale_w), as interpolate(scale_factor=...). */
void imgops_resize_bicubic_scaled(const float *src, int C, int H, int W, float *dst, int Ho, int Wo,
                                  float scale_h, float scale_w);
/* F.interpolate(..., mode='bilinear', align_corners=False), no antialias. */
void imgops_resize_bilinear(const float *src, int C, int H, int W, float *dst, int Ho, int Wo);

/* torchvision F.crop: rows top..top+h-1, columns left..left+w-1; outside the image reads 0. */
void imgops_crop(const float *src, int C, int H, int W, int top, int left, int h, int w, float *dst);
/* F.resized_crop(..., BICUBIC): crop (zero padded) then bicubic resize to Ho x Wo. */
void imgops_resized_crop(const float *src, int C, int H, int W, int top, int left, int h, int w,
                         float *dst, int Ho, int Wo);

/* In-place flips: horizontal = reverse each row (flip(-1)), vertical = reverse rows (flip(-2)). */
void imgops_hflip(float *x, int C, int H, int W);
void imgops_vflip(float *x, int C, int H, int W);

/* --- Point and neighbourhood operations ---------------------------------------------------- */

/* torchvision's 1-D Gaussian kernel of size 5 in float32: x = -2..2, k = exp(-0.5 (x/sigma)^2),
 * k /= sum(k), bit-identical to torchvision 0.14 on PyTorch's portable kernels (same summation
 * order; PyTorch's AVX2 exp differs in the last bit for some sigmas). */
void imgops_gaussian_kernel5(float sigma, float k[5]);
/* 5x5 Gaussian blur with 2-pixel reflect padding, as torchvision.transforms.GaussianBlur((5,5))
 * on a tensor; the 2-D kernel k_y (x) k_x is applied separably (10 instead of 25 multiply-adds per
 * pixel; torchvision's oneDNN convolution uses fused multiply-adds, so neither order would be
 * bit-identical: the difference is float rounding, relative ~1e-7).  tmp holds H*W floats. */
void imgops_gaussian_blur5(float *x, int C, int H, int W, float sigma, float *tmp);
/* Row-level pieces of the blur: the width pass of one row (reflected at the ends), and output row
 * y of the height pass from the width-passed image tmp [H][W]. */
void imgops_blur5_row(float *restrict dst, const float *restrict src, int n, const float k[5]);
void imgops_blur5_col(float *restrict dst, const float *tmp, int H, int W, int y, const float k[5]);
/* Brightness as TF.adjust_brightness on a float tensor: x = clamp(f*x, 0, 1). */
void imgops_brightness(float *x, size_t n, float f);
/* Solarisation at 0.5: x > 0.5 -> 1 - x. */
void imgops_solarize(float *x, size_t n);
/* Normalize: x[c] = (x[c] - mean[c]) / std[c] in float32, like torchvision's Normalize. */
void imgops_normalize(float *x, int C, size_t hw, const float *mean, const float *std);

/* scDINO's per-image min-max (normalize_numpy_0_to_1) on the selected channels, in float64:
 * x = (x - min_c) / (max_c - min_c); if some channel has max == min, every channel whose max is 0
 * gets max = 1.  src is raw [C_all][H][W] of type dtype; sel[0..nsel-1] are source channels; dst is
 * [nsel][H][W] float32.  Returns 0, or -1 when the result would contain NaN (a constant non-zero
 * channel, or a non-finite pixel): upstream drops such an image. */
int imgops_minmax_scale(const void *src, enum imgops_dtype dtype, int C_all, int H, int W,
                        const int *sel, int nsel, float *dst);
/* Same check only, no output (for loaders that pass raw images on). */
int imgops_minmax_valid(const void *src, enum imgops_dtype dtype, int C_all, int H, int W,
                        const int *sel, int nsel);

#endif
