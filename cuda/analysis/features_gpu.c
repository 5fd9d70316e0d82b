/* features_gpu.c - host side of the features preprocessing on the GPU: pinned staging of the raw
 * batch, the taps and statistics on the device, the statuses back. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "cuda/analysis/features_gpu.h"
#include "cuda/analysis/features_kernels.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_check.h"
#include "data/shards.h"

struct features_gpu {
  const struct ops *ops;
  int C_all, H, W, u16, nsel, oh, ow, normalize;
  int maxB;
  size_t image_bytes;
  char *pinned;          /* the raw batch on its way (host) */
  void *raw_dev;
  cudaEvent_t uploaded;  /* the copy from pinned has left */
  int *sel, *ih, *iw;
  double *wh, *ww, *mean, *std, *mnmx;
  int8_t *status;
};

static void *dev_copy(const struct ops *ops, const void *src, size_t bytes) {
  void *d = ops->alloc(bytes ? bytes : 1);
  if (bytes) ops->upload(d, src, bytes);
  return d;
}

struct features_gpu *features_gpu_create(int C_all, int H, int W, int dtype, const int *sel, int nsel,
                                         const double *mean, const double *std, int normalize, int oh, int ow,
                                         const int *ih, const double *wh, const int *iw, const double *ww,
                                         int max_batch) {
  const struct ops *ops = backend_cuda();
  if (!ops) scd_fatal(SCD_EXIT_INPUT, "GPU preprocessing needs a usable GPU: %s", backend_cuda_why_not());
  SCD_ASSERT(max_batch >= 1 && nsel >= 1);
  struct features_gpu *g = xcalloc(1, sizeof *g);
  g->ops = ops;
  g->C_all = C_all;
  g->H = H;
  g->W = W;
  g->u16 = dtype == DATASET_U16;
  g->nsel = nsel;
  g->oh = oh;
  g->ow = ow;
  g->normalize = normalize;
  g->maxB = max_batch;
  g->image_bytes = MUL_SIZE(MUL_SIZE((size_t)C_all, (size_t)H * W), dataset_dtype_size(dtype));
  const size_t batch_bytes = MUL_SIZE((size_t)max_batch, g->image_bytes);
  CHECK_CUDA(cudaHostAlloc((void **)&g->pinned, batch_bytes, cudaHostAllocDefault));
  CHECK_CUDA(cudaEventCreateWithFlags(&g->uploaded, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventRecord(g->uploaded, (cudaStream_t)backend_cuda_stream()));
  g->raw_dev = ops->alloc(batch_bytes);
  const size_t ns = (size_t)nsel;
  g->sel = dev_copy(ops, sel, ns * sizeof(int));
  g->mean = dev_copy(ops, mean, ns * sizeof(double));
  g->std = dev_copy(ops, std, ns * sizeof(double));
  g->ih = dev_copy(ops, ih, 2 * (size_t)oh * sizeof(int));
  g->iw = dev_copy(ops, iw, 2 * (size_t)ow * sizeof(int));
  g->wh = dev_copy(ops, wh, 2 * (size_t)oh * sizeof(double));
  g->ww = dev_copy(ops, ww, 2 * (size_t)ow * sizeof(double));
  g->mnmx = ops->alloc(3 * (size_t)max_batch * ns * sizeof(double));
  g->status = ops->alloc((size_t)max_batch);
  return g;
}

void features_gpu_destroy(struct features_gpu *g) {
  if (!g) return;
  const struct ops *ops = g->ops;
  ops->sync();
  CHECK_CUDA(cudaFreeHost(g->pinned));
  CHECK_CUDA(cudaEventDestroy(g->uploaded));
  void *bufs[] = {g->raw_dev, g->sel, g->mean, g->std, g->ih, g->iw, g->wh, g->ww, g->mnmx, g->status};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ops->free(bufs[i]);
  free(g);
}

void features_gpu_prep(struct features_gpu *g, const void *raw, int n, float *dst) {
  SCD_ASSERT(n >= 0 && n <= g->maxB);
  if (n == 0) return;
  cudaStream_t cs = (cudaStream_t)backend_cuda_stream();
  CHECK_CUDA(cudaEventSynchronize(g->uploaded)); /* the pinned buffer's last copy has left */
  const size_t bytes = (size_t)n * g->image_bytes;
  memcpy(g->pinned, raw, bytes);
  /* on the backend's stream: after the forward that read raw_dev's previous batch, before this one's */
  CHECK_CUDA(cudaMemcpyAsync(g->raw_dev, g->pinned, bytes, cudaMemcpyHostToDevice, cs));
  CHECK_CUDA(cudaEventRecord(g->uploaded, cs));
  fk_prep(dst, g->status, g->mnmx, g->raw_dev, g->u16, n, g->C_all, g->H, g->W, g->sel, g->nsel, g->oh, g->ow, g->ih,
          g->wh, g->iw, g->ww, g->mean, g->std, g->normalize, cs);
}

void features_gpu_status(struct features_gpu *g, int8_t *status, int n) {
  SCD_ASSERT(n >= 0 && n <= g->maxB);
  if (n > 0) g->ops->download(status, g->status, (size_t)n);
}
