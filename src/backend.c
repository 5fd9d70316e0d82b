/* backend.c - system%device -> the compute backend, and the gradient communicator that goes with it. */
#include "build_config.h"

#include <string.h>

#include "backend.h"
#include "check.h"
#include "log.h"
#ifdef HAVE_CUDA
#include "../cuda/backend_cuda.h"
#endif

/* The CPU backend, which computes in fp32 only. */
static const struct ops *cpu(const struct config *cfg) {
  if (!strcmp(cfg->training.precision, "bf16"))
    scd_fatal(SCD_EXIT_INPUT, "&training: precision = 'bf16' needs the CUDA backend; the CPU backend "
              "computes in fp32 (use precision = 'auto' or 'fp32')");
  return backend_cpu();
}

const struct ops *backend_select(const struct config *cfg) {
  const char *dev = cfg->system.device;
  if (!strcmp(dev, "cpu")) return cpu(cfg);
#ifdef HAVE_CUDA
  /* precision: 'auto' is bf16 on the GPU; the CPU backend is fp32 whatever it says. */
  const struct ops *cuda = backend_cuda_for(cfg->training.precision);
  if (cuda) return cuda;
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
