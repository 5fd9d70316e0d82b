/* features_gpu.h - calculation='features' preprocessing on the GPU (CUDA builds only): the
 * features_prep service of the CUDA device (src/backend/device_cuda.c).
 *
 * features_compute (src/analysis/features.c) uses it through the device: the raw batch goes to the
 * GPU (tens of KB per image instead of the resized float32 image's MB), and min-max, the bilinear
 * resize and the normalisation run there in float64, rounded as features_prep_image rounds them,
 * so the network sees the CPU's input bit for bit while the host only reads the shards. */
#ifndef SCDINO_FEATURES_GPU_H
#define SCDINO_FEATURES_GPU_H

#include <stdint.h>

struct features_gpu;

/* For batches of up to max_batch raw images [C_all][H][W] of dtype (DATASET_U16 / DATASET_F32),
 * prepared into [nsel][oh][ow]: channels sel, their mean and std (normalize), the bilinear taps (2
 * per output row: ih, wh; per output column: iw, ww).  The arrays are copied to the device. */
struct features_gpu *features_gpu_create(int C_all, int H, int W, int dtype, const int *sel, int nsel,
                                         const double *mean, const double *std, int normalize, int oh, int ow,
                                         const int *ih, const double *wh, const int *iw, const double *ww,
                                         int max_batch);
void features_gpu_destroy(struct features_gpu *g);

/* Queue the preparation of n raw images (host memory, [n][C_all][H][W]; reusable on return) into
 * dst, device float32 [n][nsel][oh][ow], on the backend's stream. */
void features_gpu_prep(struct features_gpu *g, const void *raw, int n, float *dst);

/* The FEATURES_PREP_* results of the last features_gpu_prep's n images (waits for them). */
void features_gpu_status(struct features_gpu *g, int8_t *status, int n);

#endif
