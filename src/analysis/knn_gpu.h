/* knn_gpu.h - the kNN neighbour lists on a device with the knn service (backend/device.h: the CUDA
 * backend's): the reference rows stay on the device, the similarities of a block of test rows
 * against a tile of reference rows come from one fp32 GEMM (the backend's matmul_f32: cuBLASLt, no
 * TF32), and the service's selection (cuda/analysis/knn_kernels.cu) keeps each row's kmax nearest across the
 * tiles.  The lists are those of knn_select_cpu for the same
 * similarities (analysis/knn_lists.h); fp32 GEMMs on the two devices may round a similarity
 * differently in the last bit, which changes a list only where two rows are that close. */
#ifndef SCDINO_KNN_GPU_H
#define SCDINO_KNN_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "analysis/knn_lists.h"
#include "backend/device.h"

/* Reference rows per tile: one GEMM and one selection pass over [block rows][tile]. */
#define KNN_GPU_TILE 32768

struct knn_gpu;

/* Upload ref [n_ref][d] (n_ref >= 1) to dev (which has the knn service); lists of kmax (<=
 * dev->knn->max_k) for up to block_rows test rows a call. */
struct knn_gpu *knn_gpu_create(const struct device *dev, const float *ref, int64_t n_ref, int d, int kmax,
                               int64_t block_rows);
/* lists [n_test][kmax] (host) for test [n_test][d] (host, n_test <= block_rows), positions
 * pos0 + reference row; adds the GEMM and selection seconds. */
void knn_gpu_select(struct knn_gpu *g, const float *test, int64_t n_test, int64_t pos0, struct knn_nb *lists,
                    double *t_gemm, double *t_select);
void knn_gpu_destroy(struct knn_gpu *g);

#endif
