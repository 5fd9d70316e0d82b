/* augment_kernels.h - the GPU augmentation's kernels as C functions (cuda/data/augment_kernels.cu); the
 * host side (draws, taps, staging, streams) is cuda/data/augment_gpu.c. */
#ifndef SCDINO_AUGMENT_KERNELS_H
#define SCDINO_AUGMENT_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Raw element types, the values of enum imgops_dtype (imgops.h, which is C only). */
#define GAUG_U16 0
#define GAUG_F32 1

/* One crop's parameters on the device; crops of one launch all have side S, and crop i of the
 * launch goes to slot i of the output ([ncrop][nsel][S][S]). */
struct gaug_crop {
  int img;                  /* image of the batch */
  int top, left;            /* region origin in the min-max scaled image */
  int bright, blur, solarize;
  int taps;                 /* offset of the crop's 4*S row taps (ih, wh) and column taps (iw, ww) */
  int fac;                  /* offset of its nsel brightness factors */
  float k5[5];              /* blur kernel (imgops_gaussian_kernel5) */
};

/* Per-image min-max of the selected channels (upstream's rules, double) and the scaled image
 * img [n][nsel][H][W] = (raw - min) / (max - min).  raw is [n][C_all][H][W] of dtype (GAUG_*);
 * mnmx is scratch of 2 * n * nsel doubles; sel, nsel device/host as named.  On stream. */
void gaug_scale(const void *raw, int dtype, int n, int C_all, int H, int W, const int *sel_dev,
                int nsel, double *mnmx, float *img, void *stream);

/* ncrop crops of side S from img: bicubic resample through the taps (flips folded in), brightness,
 * blur, solarisation, (x - mean) / std.  bufA and bufB are scratch of the output's size. */
void gaug_crops(const float *img, int nsel, int H, int W, const struct gaug_crop *crops, int ncrop,
                int S, const int *ih, const float *wh, const int *iw, const float *ww,
                const float *fac, const float *mean, const float *std, float *bufA, float *bufB,
                float *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif
