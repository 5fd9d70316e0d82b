/* knn_kernels.h - the kNN neighbour selection on the GPU as C functions (cuda/analysis/knn_kernels.cu); the
 * host side (similarity GEMM by tiles, lists back to the host) is src/analysis/knn_gpu.c. */
#ifndef SCDINO_KNN_KERNELS_H
#define SCDINO_KNN_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The largest neighbour count the GPU selection keeps per row (larger ones run on the CPU). */
#define KK_MAX_K 2048

/* Empty lists: s[i] = -infinity, pos[i] = INT32_MAX for the n entries (farther than any row). */
void kk_lists_clear(float *s, int32_t *pos, int64_t n, void *stream);

/* For each of the rows of sim [rows][ld] (device, similarities of reference rows col0 ..
 * col0 + ncols - 1 in columns 0 .. ncols - 1), keep in the lists s/pos [rows][kmax] (device, nearest
 * first) the kmax nearest of the list and the row's columns: nearer = higher similarity, then the
 * lower position (knn.h's tie rule).  1 <= kmax <= KK_MAX_K.  On stream. */
void kk_topk(const float *sim, int64_t rows, int ncols, int64_t ld, int col0, int kmax, float *s, int32_t *pos,
             void *stream);

#ifdef __cplusplus
}
#endif

#endif
