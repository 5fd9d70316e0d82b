/* features_kernels.h - the GPU preprocessing of calculation='features' as a C function
 * (cuda/analysis/features_kernels.cu); the host side is cuda/analysis/features_gpu.c. */
#ifndef SCDINO_FEATURES_KERNELS_H
#define SCDINO_FEATURES_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst [n][nsel][oh][ow] float32 = features_prep_image of each raw image [n][C_all][H][W] (uint16
 * where u16, else float32), status[n] its FEATURES_PREP_* result; mnmx is scratch of 3 n nsel
 * doubles; the taps (2 per output row / column), sel, mean and std on the device.  On stream. */
void fk_prep(float *dst, int8_t *status, double *mnmx, const void *raw, int u16, int n, int C_all, int H, int W,
             const int *sel, int nsel, int oh, int ow, const int *ih, const double *wh, const int *iw,
             const double *ww, const double *mean, const double *std, int normalize, void *stream);

#ifdef __cplusplus
}
#endif

#endif
