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
 * The raw batch and the crop tables go through pinned host buffers (two, used in turn); the upload
 * and the kernels run on a stream of the augmentation's own into one of two crop buffers, and the
 * backend's stream (backend_cuda_stream) waits for them by an event.  So the training loop can make
 * the next batch's crops while this step's backward runs (augment_gpu_start during the step,
 * augment_gpu_take at the next): the host part hides behind the queued backward, the kernels run
 * beside it, and only what the backend's stream waits for counts as data time
 * (augment_gpu_exposed_seconds). */
#ifndef SCDINO_AUGMENT_GPU_H
#define SCDINO_AUGMENT_GPU_H

#include <stdint.h>

#include "data/augment.h"

struct augment_gpu;

/* For batches of up to max_batch raw images of the shape and dtype a describes (a is copied). */
struct augment_gpu *augment_gpu_create(const struct augment *a, int max_batch);
void augment_gpu_destroy(struct augment_gpu *g);

/* Make the crops of n raw images (host memory, [n][C_all][H][W] of a->dtype; index[i] the global
 * sample index of image i) for epoch: the host part now (the raw batch copied into pinned memory,
 * every crop's draws and taps), the upload and the kernels queued on the augmentation's stream, into
 * the crop buffer the backend's stream has finished with.  raw and index may be reused on return.
 * At most one batch is started and not taken; n == 0 starts nothing.  The images must be valid for
 * min-max (the loader leaves out those upstream drops). */
void augment_gpu_start(struct augment_gpu *g, const void *raw, const int64_t *index, int n,
                       int64_t epoch);

/* The crops of the batch started last: work queued on the backend's stream from here on sees them.
 * *global gets the device address of [2][n][C][G][G] and *local of [n_local][n][C][L][L] (fp32,
 * owned by g); they stay valid for the backend's work queued before the next take but one. */
void augment_gpu_take(struct augment_gpu *g, float **global, float **local);

/* augment_gpu_start, then augment_gpu_take (n == 0: the buffers, nothing made). */
void augment_gpu_batch(struct augment_gpu *g, const void *raw, const int64_t *index, int n,
                       int64_t epoch, float **global, float **local);

/* Before an augment_gpu_start that should hide behind the work queued on the backend's stream so
 * far: the start then counts as exposed only the backend's idle time between the end of that work
 * and the end of its own host part (without a mark, all of its host part). */
void augment_gpu_mark(struct augment_gpu *g);

/* Seconds the augmentation kept the backend's stream idle since the last call (exposed data time):
 * start's host part where nothing hid it, and take's wait for the crops' kernels.  Waits for the
 * events it reads (at a step's end they have completed). */
double augment_gpu_exposed_seconds(struct augment_gpu *g);

/* Host seconds spent in augment_gpu_start (drawing, taps, copying into pinned memory, queueing),
 * hidden or not. */
double augment_gpu_host_seconds(const struct augment_gpu *g);

#endif
