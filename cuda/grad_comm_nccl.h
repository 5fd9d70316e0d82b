/* grad_comm_nccl.h - what the NCCL gradient communicator (grad_comm_nccl.c) lends the sharded
 * optimizer's (grad_comm_nccl_shard.c): its NCCL communicator and streams, and its watchdog wait. */
#ifndef SCDINO_GRAD_COMM_NCCL_H
#define SCDINO_GRAD_COMM_NCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>

struct grad_comm;

struct grad_comm_nccl_parts {
  ncclComm_t comm;
  cudaStream_t compute, side; /* the backend's stream; the communicator's side stream */
};

/* The parts of gc, a communicator from grad_comm_nccl_create. */
void grad_comm_nccl_get_parts(const struct grad_comm *gc, struct grad_comm_nccl_parts *p);
/* Wait on the host until ev has completed, polling NCCL's asynchronous error and the timeout
 * (&gpu nccl_timeout); either ends the job with a message naming what. */
void grad_comm_nccl_wait(struct grad_comm *gc, cudaEvent_t ev, const char *what);

#endif
