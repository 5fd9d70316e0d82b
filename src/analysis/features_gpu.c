/* features_gpu.c - host side of the features preprocessing on the GPU: pinned staging of the raw
 * batch, the taps and statistics on the device, the statuses back. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features_gpu.h"
#include "core/check.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/features_kernels.h"
#include "data/shards.h"

struct features_gpu {
  const struct ops *ops;
  struct features_prep p; /* taps pointing at host copies owned by the caller's prep: not used */
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

struct features_gpu *features_gpu_create(const struct features_prep *p, int max_batch) {
  const struct ops *ops = backend_cuda();
  if (!ops) scd_fatal(SCD_EXIT_INPUT, "GPU preprocessing needs a usable GPU: %s", backend_cuda_why_not());
  SCD_ASSERT(max_batch >= 1 && p->nsel >= 1);
  struct features_gpu *g = xcalloc(1, sizeof *g);
  g->ops = ops;
  g->p = *p;
  g->maxB = max_batch;
  g->image_bytes = MUL_SIZE(MUL_SIZE((size_t)p->C_all, (size_t)p->H * p->W), dataset_dtype_size(p->dtype));
  const size_t batch_bytes = MUL_SIZE((size_t)max_batch, g->image_bytes);
  CHECK_CUDA(cudaHostAlloc((void **)&g->pinned, batch_bytes, cudaHostAllocDefault));
  CHECK_CUDA(cudaEventCreateWithFlags(&g->uploaded, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventRecord(g->uploaded, (cudaStream_t)backend_cuda_stream()));
  g->raw_dev = ops->alloc(batch_bytes);
  const size_t ns = (size_t)p->nsel;
  g->sel = dev_copy(ops, p->sel, ns * sizeof(int));
  g->mean = dev_copy(ops, p->mean, ns * sizeof(double));
  g->std = dev_copy(ops, p->std, ns * sizeof(double));
  g->ih = dev_copy(ops, p->ih, 2 * (size_t)p->oh * sizeof(int));
  g->iw = dev_copy(ops, p->iw, 2 * (size_t)p->ow * sizeof(int));
  g->wh = dev_copy(ops, p->wh, 2 * (size_t)p->oh * sizeof(double));
  g->ww = dev_copy(ops, p->ww, 2 * (size_t)p->ow * sizeof(double));
  g->mnmx = ops->alloc(3 * (size_t)max_batch * ns * sizeof(double));
  g->status = ops->alloc((size_t)max_batch);
  g->p.ih = g->p.iw = NULL; /* the caller's */
  g->p.wh = g->p.ww = NULL;
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
  const struct features_prep *p = &g->p;
  fk_prep(dst, g->status, g->mnmx, g->raw_dev, p->dtype == DATASET_U16, n, p->C_all, p->H, p->W, g->sel, p->nsel,
          p->oh, p->ow, g->ih, g->wh, g->iw, g->ww, g->mean, g->std, p->normalize, cs);
}

void features_gpu_status(struct features_gpu *g, int8_t *status, int n) {
  SCD_ASSERT(n >= 0 && n <= g->maxB);
  if (n > 0) g->ops->download(status, g->status, (size_t)n);
}
