/* backend.c - system%device -> the compute backend, and the gradient communicator that goes with it. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#ifdef HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

/* The CPU backend, which computes in fp32 only. */
static const struct ops *cpu(const struct config *cfg) {
  if (!strcmp(cfg->training.precision, "bf16"))
    scd_fatal(SCD_EXIT_INPUT, "&training: precision = 'bf16' needs the CUDA backend; the CPU backend "
              "computes in fp32 (use precision = 'auto' or 'fp32')");
  return backend_cpu();
}

int backend_shared_gpu(const unsigned char (*ids)[16], int n, int *a, int *b) {
  for (int j = 1; j < n; j++)
    for (int i = 0; i < j; i++)
      if (!memcmp(ids[i], ids[j], 16)) {
        *a = i;
        *b = j;
        return 1;
      }
  return 0;
}

#ifdef HAVE_CUDA
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
#endif

const struct ops *backend_select(const struct config *cfg) {
  const char *dev = cfg->system.device;
  if (!strcmp(dev, "cpu")) return cpu(cfg);
#ifdef HAVE_CUDA
  /* precision: 'auto' is bf16 on the GPU; the CPU backend is fp32 whatever it says. */
  const struct ops *cuda = backend_cuda_for(cfg->training.precision);
  /* Every rank must run the same backend (the gradient communicators differ, NCCL's set-up is a
   * collective, and bf16 rows beside fp32 rows would make results depend on the split): with
   * device = 'auto', if some ranks have no usable GPU, all run on the CPU. */
  int64_t on_gpu[2] = {cuda != NULL, 1};
  comm_allreduce_sum_i64(on_gpu, 2);
  if (on_gpu[0] > 0 && on_gpu[0] < on_gpu[1]) {
    if (!strcmp(dev, "cuda"))
      scd_fatal(SCD_EXIT_INPUT, "&system: device = 'cuda', but %lld of %lld ranks have no usable GPU%s%s",
                (long long)(on_gpu[1] - on_gpu[0]), (long long)on_gpu[1], cuda ? "" : ", this one: ",
                cuda ? "" : backend_cuda_why_not());
    log_warn("device = 'auto': only %lld of %lld ranks have a usable GPU (a node with fewer GPUs than "
             "ranks, or without any?); every rank runs on the CPU", (long long)on_gpu[0], (long long)on_gpu[1]);
    return cpu(cfg);
  }
  if (cuda) {
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
    const char *at = backend_cuda_attention(), *how = "";
    if (!strcmp(at, "cudnn") && cuda->act_size == 4) how = " (bf16 only: fp32 runs gemm)";
    else if (!strcmp(at, "flash"))
      how = cuda->act_size == 4 ? " (CUDA cores in fp32)"
            : info.cc_major >= 8 ? " (tensor cores for head dimensions that are multiples of 16)"
                                 : " (CUDA cores below compute capability 8.0)";
    log_info("GPU: %s, compute capability %d.%d, %d SMs, %.1f GiB; attention: %s%s; bias gradients: %s; "
             "GELU: %s; GEMM tuning: %s", info.name, info.cc_major, info.cc_minor, info.sms,
             info.mem_total / 1073741824.0, at, how, cfg->gpu.bias_grad, cfg->gpu.gelu,
             cfg->gpu.gemm_tune ? "on" : "off");
    return cuda;
  }
  if (!strcmp(dev, "cuda"))
    scd_fatal(SCD_EXIT_INPUT,
              "&system: device = 'cuda', but no GPU is usable on this node (%s); use device = "
              "'auto' or 'cpu' to run on the CPU", backend_cuda_why_not());
  log_detail("device = 'auto': no usable GPU (%s), running on the CPU", backend_cuda_why_not());
#else
  if (!strcmp(dev, "cuda"))
    scd_fatal(SCD_EXIT_INPUT,
              "&system: device = 'cuda', but this scdino was built without the CUDA backend "
              "(configure found no usable CUDA toolkit, or --without-cuda); use device = 'auto' or 'cpu'");
#endif
  return cpu(cfg);
}

struct grad_comm *backend_grad_comm(const struct ops *ops) {
#if defined(HAVE_CUDA) && defined(HAVE_NCCL)
  if (!strcmp(ops->name, "cuda")) return grad_comm_nccl_create(ops, 0);
#endif
  return grad_comm_mpi_create(ops, 0);
}

struct grad_comm *backend_grad_comm_shard(const struct ops *ops, const struct shard_plan *plan) {
#if defined(HAVE_CUDA) && defined(HAVE_NCCL)
  if (!strcmp(ops->name, "cuda")) return grad_comm_nccl_shard_create(ops, 0, plan);
#endif
  return grad_comm_mpi_shard_create(ops, 0, plan); /* the CPU backend's (train refuses others) */
}
