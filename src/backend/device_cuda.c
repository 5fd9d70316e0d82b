/* device_cuda.c - the CUDA backend's device (CUDA builds): the op tables of cuda/, the NCCL
 * communicators (MPI when built without NCCL), and the services of cuda/ behind device.h's tables:
 * GPU crops, the features' image preparation, the kNN selection, memory, the GEMM-tuning report. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "cuda/analysis/features_gpu.h"
#include "cuda/analysis/knn_kernels.h"
#include "cuda/backend_cuda.h"
#include "cuda/data/augment_gpu.h"

#ifdef HAVE_NCCL
static struct grad_comm *nccl_comm(const struct device *dev) { return grad_comm_nccl_create(dev->ops, 0); }

static struct grad_comm *nccl_comm_shard(const struct device *dev, const struct shard_plan *plan) {
  return grad_comm_nccl_shard_create(dev->ops, 0, plan);
}
#else
/* Without NCCL the MPI communicator stages device memory through the host; there is no sharded one. */
static struct grad_comm *mpi_comm(const struct device *dev) { return grad_comm_mpi_create(dev->ops, 0); }
#endif

static const struct device_crops crops = {
    .create = augment_gpu_create,
    .destroy = augment_gpu_destroy,
    .start = augment_gpu_start,
    .take = augment_gpu_take,
    .mark = augment_gpu_mark,
    .exposed_seconds = augment_gpu_exposed_seconds,
};

static struct features_gpu *prep_create(const struct device_image_prep *p, int max_batch) {
  return features_gpu_create(p->C_all, p->H, p->W, p->dtype, p->sel, p->nsel, p->mean, p->std, p->normalize, p->oh,
                             p->ow, p->ih, p->wh, p->iw, p->ww, max_batch);
}

static const struct device_features_prep features_prep = {
    .create = prep_create,
    .destroy = features_gpu_destroy,
    .prep = features_gpu_prep,
    .status = features_gpu_status,
};

static void knn_clear(float *s, int32_t *pos, int64_t n) { kk_lists_clear(s, pos, n, backend_cuda_stream()); }

static void knn_topk(const float *sim, int64_t rows, int ncols, int64_t ld, int col0, int kmax, float *s,
                     int32_t *pos) {
  kk_topk(sim, rows, ncols, ld, col0, kmax, s, pos, backend_cuda_stream());
}

static const struct device_knn knn = {.max_k = KK_MAX_K, .lists_clear = knn_clear, .topk = knn_topk};

const struct device *backend_device_cuda(const char *precision) {
  const struct ops *ops = backend_cuda_for(precision);
  if (!ops) return NULL;
  static struct device dev[3]; /* bf16, fp32, fp16 */
  struct device *d = &dev[!strcmp(ops->precision, "fp16") ? 2 : ops->act_size == 4];
  *d = (struct device){
      .name = "cuda",
      .ops = ops,
#ifdef HAVE_NCCL
      .grad_comm = nccl_comm,
      .grad_comm_shard = nccl_comm_shard,
      .shard_in_place = 1, /* NCCL reduces each part in place at its owner */
#else
      .grad_comm = mpi_comm,
#endif
      .crops = &crops,
      .features_prep = &features_prep,
      .knn = &knn,
      .memory = backend_cuda_memory,
      .report = backend_cuda_gemm_tuning_report,
  };
  return d;
}

/* One rank per GPU: a node whose launcher left every rank the same single visible GPU would share
 * it (NCCL refuses that with "Duplicate GPU detected"; MPI would run, slowly). */
static void check_gpus_distinct(void) {
  const int n = comm_size();
  if (n == 1) return;
  struct backend_cuda_info info;
  backend_cuda_info(&info);
  unsigned char(*ids)[16] = xmalloc(MUL_SIZE((size_t)n, sizeof *ids));
  comm_allgather(info.uuid, ids, sizeof info.uuid);
  int a, b;
  if (backend_shared_gpu((const unsigned char(*)[16])ids, n, &a, &b))
    scd_fatal(SCD_EXIT_INPUT, "&system: ranks %d and %d use the same GPU; launch one rank per GPU (as many "
              "ranks per node as GPUs, or CUDA_VISIBLE_DEVICES set per rank by the launcher)", a, b);
  free(ids);
}

void backend_cuda_configure(const struct config *cfg, const struct device *dev) {
  check_gpus_distinct();
  backend_cuda_set_attention(cfg->gpu.attention);
  backend_cuda_set_bias_grad(cfg->gpu.bias_grad);
  backend_cuda_set_gelu(cfg->gpu.gelu);
  backend_cuda_set_gemm_tune(cfg->gpu.gemm_tune);
#ifdef HAVE_NCCL
  grad_comm_nccl_set_timeout(cfg->gpu.nccl_timeout);
#endif
  struct backend_cuda_info info;
  backend_cuda_info(&info);
  const char *at = backend_cuda_attention(), *how = "", *prec = dev->ops->precision;
  const int arch = backend_cuda_arch(), fp16 = !strcmp(prec, "fp16");
  if (!strcmp(at, "cudnn") && dev->ops->act_size == 4) how = " (bf16 only: fp32 runs gemm)";
  else if (!strcmp(at, "cudnn") && fp16) how = " (bf16 only: fp16 runs gemm on the flash state)";
  else if (!strcmp(at, "flash"))
    how = dev->ops->act_size == 4 ? " (CUDA cores in fp32)"
          : fp16 && arch >= 75    ? " (mma.sync tensor cores for head dimensions 32 and 64, else batched GEMMs)"
          : fp16                  ? " (batched tensor-core GEMMs on the flash state: sm_70 has no mma.sync m16n8k8)"
                                  : " (tensor cores for head dimensions that are multiples of 16)";
  char kset[64] = ""; /* &gpu arch: an older GPU's kernels on this one */
  if (arch != info.cc_major * 10 + info.cc_minor)
    snprintf(kset, sizeof kset, " (the kernels of compute capability %d.%d: &gpu arch)", arch / 10, arch % 10);
  log_info("GPU: %s, compute capability %d.%d%s, %d SMs, %.1f GiB; precision: %s%s; attention: %s%s; bias "
           "gradients: %s; GELU: %s; GEMM tuning: %s", info.name, info.cc_major, info.cc_minor, kset, info.sms,
           info.mem_total / 1073741824.0, prec, fp16 ? " (fp32 master weights, dynamic loss scaling)" : "", at,
           how, cfg->gpu.bias_grad, cfg->gpu.gelu, cfg->gpu.gemm_tune ? "on" : "off");
}
