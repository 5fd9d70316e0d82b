/* backend.c - system%device -> the device: the compute backend with its gradient communicators and
 * services (backend/device.h). */
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

static struct grad_comm *mpi_comm(const struct device *dev) { return grad_comm_mpi_create(dev->ops, 0); }

static struct grad_comm *mpi_comm_shard(const struct device *dev, const struct shard_plan *plan) {
  return grad_comm_mpi_shard_create(dev->ops, 0, plan);
}

const struct device *backend_device_cpu(void) {
  static struct device dev = {.name = "cpu", .grad_comm = mpi_comm, .grad_comm_shard = mpi_comm_shard};
  dev.ops = backend_cpu();
  return &dev;
}

/* The CPU backend, which computes in fp32 only. */
static const struct device *cpu(const struct config *cfg) {
  if (!strcmp(cfg->training.precision, "bf16") || !strcmp(cfg->training.precision, "fp16"))
    scd_fatal(SCD_EXIT_INPUT, "&training: precision = '%s' needs the CUDA backend; the CPU backend "
              "computes in fp32 (use precision = 'auto' or 'fp32')", cfg->training.precision);
  return backend_device_cpu();
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

const struct device *backend_select(const struct config *cfg) {
  const char *dev = cfg->system.device;
  if (!strcmp(dev, "cpu")) return cpu(cfg);
#ifdef HAVE_CUDA
  /* precision: 'auto' is bf16 on the GPU (fp16 below compute capability 8.0, or &gpu arch's); the
   * CPU backend is fp32 whatever it says. */
  backend_cuda_set_arch(cfg->gpu.arch);
  const struct device *cuda = backend_device_cuda(cfg->training.precision);
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
    backend_cuda_configure(cfg, cuda);
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
