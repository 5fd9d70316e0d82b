/* augment_gpu.h - scDINO's multi-crop augmentation on the GPU, from raw batches (CUDA builds only).
 *
 * The training loop uses it instead of the CPU augmentation when the CUDA backend is active: the
 * loader runs in LOADER_RAW mode (raw images [n][C_all][H][W] and their global indices) and
 *
 *     struct augment_gpu *ag = augment_gpu_create(loader_augment(loader), batch_size);
 *     ...  b = loader_next(loader);
 *     augment_gpu_batch(ag, b->raw, b->index, b->n, b->epoch, &global, &local);
 *     dino_model_forward(model, global, local, b->n, &dp);   // device crops, crop-major
 *
 * Every crop is drawn on the host with augment_draw (the same Philox keys as the CPU path: seed,
 * epoch, sample index, crop number) and its bicubic taps with imgops_bicubic_taps; the GPU does
 * the per-image min-max (double), the resampling, flips, brightness, blur, solarisation and
 * normalisation with every float operation rounded on its own in the CPU's order, so GPU crops
 * equal CPU crops (augment_image) bit for bit on the same raw image.
 *
 * The raw batch and the crop tables go through pinned host buffers (two, used in turn) and an
 * asynchronous copy on a stream of their own; the kernels wait for the copy on the backend's
 * stream (backend_cuda_stream).  The host copy into the pinned buffer is the only synchronous
 * part, so the upload of batch t+1 overlaps whatever of step t the GPU has not finished. */
#ifndef SCDINO_AUGMENT_GPU_H
#define SCDINO_AUGMENT_GPU_H

#include <stdint.h>

#include "data/augment.h"

struct augment_gpu;

/* For batches of up to max_batch raw images of the shape and dtype a describes (a is copied). */
struct augment_gpu *augment_gpu_create(const struct augment *a, int max_batch);
void augment_gpu_destroy(struct augment_gpu *g);

/* Queue the crops of n raw images (host memory, [n][C_all][H][W] of a->dtype; index[i] the global
 * sample index of image i) for epoch: *global gets the device address of [2][n][C][G][G] and
 * *local of [n_local][n][C][L][L] (fp32, owned by g, valid until the next call).  The images must
 * be valid for min-max (the loader leaves out those upstream drops). */
void augment_gpu_batch(struct augment_gpu *g, const void *raw, const int64_t *index, int n,
                       int64_t epoch, float **global, float **local);

/* Host seconds spent in augment_gpu_batch (drawing, taps, copying into pinned memory, queueing). */
double augment_gpu_host_seconds(const struct augment_gpu *g);

#endif
