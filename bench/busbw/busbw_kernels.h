/* busbw_kernels.h - device-side fill and exact check of the busbw benchmark's buffers (C interface). */
#ifndef SCDINO_BUSBW_KERNELS_H
#define SCDINO_BUSBW_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

struct busbw_gen;

/* Enqueue on stream (a cudaStream_t): buf[0..count) = this rank's input values for g.
 * Returns the cudaError_t of the launch (0 = success). */
int busbw_dev_fill(const struct busbw_gen *g, void *buf, unsigned long long count, void *stream);
/* Enqueue on stream: *d_wrong += number of elements of buf[0..count) that differ from the expected
 * result of g (d_wrong is device memory).  Returns the cudaError_t of the launch. */
int busbw_dev_verify(const struct busbw_gen *g, const void *buf, unsigned long long count,
                     unsigned long long *d_wrong, void *stream);

#ifdef __cplusplus
}
#endif

#endif
