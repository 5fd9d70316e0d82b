/* features_gpu.h - calculation='features' preprocessing on the GPU (CUDA builds only).
 *
 * features_compute (src/analysis/features.c) uses it on the CUDA backend: the raw batch goes to the GPU
 * (tens of KB per image instead of the resized float32 image's MB), and min-max, the bilinear
 * resize and the normalisation run there in float64, rounded as features_prep_image rounds them,
 * so the network sees the CPU's input bit for bit while the host only reads the shards. */
#ifndef SCDINO_FEATURES_GPU_H
#define SCDINO_FEATURES_GPU_H

#include <stdint.h>

#include "analysis/features.h"

struct features_gpu;

/* For batches of up to max_batch images prepared as p says (p's taps are copied). */
struct features_gpu *features_gpu_create(const struct features_prep *p, int max_batch);
void features_gpu_destroy(struct features_gpu *g);

/* Queue the preparation of n raw images (host memory, [n][C_all][H][W] of p->dtype; reusable on
 * return) into dst, device float32 [n][nsel][oh][ow], on the backend's stream. */
void features_gpu_prep(struct features_gpu *g, const void *raw, int n, float *dst);

/* The FEATURES_PREP_* results of the last features_gpu_prep's n images (waits for them). */
void features_gpu_status(struct features_gpu *g, int8_t *status, int n);

#endif
