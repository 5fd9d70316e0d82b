/* backend.h - choice of the compute backend (system%device): the device (backend/device.h) with
 * its op table, gradient communicators and services.
 *
 *   device = 'cpu'   the CPU backend (backend_cpu)
 *   device = 'auto'  the CUDA backend when this build has one (HAVE_CUDA) and a GPU is usable, else
 *                    the CPU backend (a driver that is missing or too old counts as "no GPU")
 *   device = 'cuda'  the CUDA backend; the job ends with SCD_EXIT_INPUT when the build has none or
 *                    no GPU is usable. */
#ifndef SCDINO_BACKEND_H
#define SCDINO_BACKEND_H

#include "backend/device.h"
#include "input/config.h"

/* The device for cfg->system.device (main.c has already set the thread counts).  Collective: every
 * rank gets the same backend. */
const struct device *backend_select(const struct config *cfg);

/* The CPU backend's device (no services). */
const struct device *backend_device_cpu(void);

/* The CUDA backend's device for precision 'auto' (bf16, or fp16 below compute capability 8.0), 'bf16', 'fp16' or 'fp32' (device_cuda.c, CUDA
 * builds only): NULL when no GPU is usable (cuda/ops/backend_cuda.h says why).  It does not read
 * the deck's &gpu group; backend_select does that. */
const struct device *backend_device_cuda(const char *precision);
/* The deck's &gpu group applied to the CUDA backend, one rank per GPU checked, and the GPU named in
 * the log (device_cuda.c, CUDA builds only). */
void backend_cuda_configure(const struct config *cfg, const struct device *dev);

/* Two ranks that use the same GPU, from every rank's GPU UUID (ids[r], 16 bytes each): returns 1
 * with the first such pair in *a < *b, 0 when every GPU is used by one rank. */
int backend_shared_gpu(const unsigned char (*ids)[16], int n, int *a, int *b);

#endif
