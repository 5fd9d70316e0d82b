/* backend.h - choice of the compute backend (system%device) and of the gradient communicator.
 *
 *   device = 'cpu'   the CPU backend (backend_cpu)
 *   device = 'auto'  the CUDA backend when this build has one (HAVE_CUDA) and a GPU is usable, else
 *                    the CPU backend (a driver that is missing or too old counts as "no GPU")
 *   device = 'cuda'  the CUDA backend; the job ends with SCD_EXIT_INPUT when the build has none or
 *                    no GPU is usable. */
#ifndef SCDINO_BACKEND_H
#define SCDINO_BACKEND_H

#include "input/config.h"
#include "model/grad_comm.h"
#include "model/ops.h"

/* The backend for cfg->system.device (main.c has already set the thread counts). */
const struct ops *backend_select(const struct config *cfg);

/* The CUDA backend (cuda/, only when HAVE_CUDA): NULL when no GPU is usable.  On a CUDA backend it
 * selects this rank's GPU (local rank modulo the visible devices). */
const struct ops *backend_cuda(void);

/* Two ranks that use the same GPU, from every rank's GPU UUID (ids[r], 16 bytes each): returns 1
 * with the first such pair in *a < *b, 0 when every GPU is used by one rank. */
int backend_shared_gpu(const unsigned char (*ids)[16], int n, int *a, int *b);

/* The gradient communicator for a backend: NCCL for the CUDA backend when built with NCCL, MPI
 * otherwise. */
struct grad_comm *backend_grad_comm(const struct ops *ops);
/* The reduce-scatter communicator of the sharded optimizer (&training shard_optimizer) over plan's
 * slices: NCCL for the CUDA backend, MPI for the CPU backend (the CUDA backend built without NCCL
 * has none: train refuses the key there). */
struct grad_comm *backend_grad_comm_shard(const struct ops *ops, const struct shard_plan *plan);

#endif
