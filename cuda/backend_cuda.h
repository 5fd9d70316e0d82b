/* backend_cuda.h - the CUDA backend as C code sees it: op tables, device facts, memory, stream.
 *
 * The ops tables implement ops.h on one GPU (local rank i of a node takes GPU i, or the only GPU
 * the launcher left visible).  Three precisions share every kernel: 'bf16' (bf16 activations,
 * tensor-core GEMMs with fp32 accumulation, a bf16 copy of the weights refreshed through
 * params_changed; compute capability 8.0 or later), 'fp16' (the same in IEEE half precision, on
 * compute capability 7.0 or later; the model layer scales the loss, model/loss_scale.h) and 'fp32'
 * (fp32 activations and GEMMs, no TF32: results compare with the CPU backend).  Parameters,
 * gradients, moments, LayerNorm statistics, softmax and the loss are fp32 in all three.
 *
 * Only in builds with CUDA (HAVE_CUDA): C code calls these under #ifdef HAVE_CUDA. */
#ifndef SCDINO_BACKEND_CUDA_H
#define SCDINO_BACKEND_CUDA_H

#include <stddef.h>

#include "model/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table for precision 'auto' (bf16 on compute capability 8.0 or later, else fp16), 'bf16',
 * 'fp16' or 'fp32'; NULL when no GPU is usable (no driver, no device, more ranks on the node than
 * GPUs, a GPU older than sm_70), silently: the reason is in backend_cuda_why_not().  'bf16' on a GPU
 * below 8.0 ends the job (SCD_EXIT_INPUT).  The first successful call picks and initialises the
 * GPU. */
const struct ops *backend_cuda(void);
const struct ops *backend_cuda_for(const char *precision);
const char *backend_cuda_why_not(void);
/* The compute capability (times 10) whose kernel set runs: the GPU's, or a lower one set here
 * (&gpu arch; 0 = the GPU's own), e.g. 75 for a T4's kernels (f16 mma.sync m16n8k8, no cp.async)
 * on a newer GPU, for tests.  Set it before the first backend_cuda_for: 'auto' follows it.
 * backend_cuda_arch: the one in force (0 before the GPU is initialised). */
void backend_cuda_set_arch(int arch);
int backend_cuda_arch(void);

struct backend_cuda_info {
  char name[256];        /* "NVIDIA H100 80GB HBM3" */
  int device;            /* CUDA device ordinal in use */
  int cc_major, cc_minor;
  int sms;
  size_t mem_total;      /* bytes */
  int runtime_version, driver_version; /* CUDART_VERSION style (12040 = 12.4) */
  size_t cublaslt_version;
  unsigned char uuid[16]; /* the GPU's UUID: two ranks with the same one share a GPU */
};
/* Facts about the GPU in use; returns 0 when the backend is not initialised. */
int backend_cuda_info(struct backend_cuda_info *info);

/* Device memory: bytes held by the backend's allocations now and at most since the last reset
 * (parameters, gradients, moments, activations, scratch), and the device's free/total bytes. */
void backend_cuda_memory(size_t *in_use, size_t *peak, size_t *dev_free, size_t *dev_total);
void backend_cuda_reset_peak(void);

/* The cudaStream_t every op is queued on (for NCCL and copies that must order with the ops). */
void *backend_cuda_stream(void);

/* The choices of the deck's &gpu group (backend_select sets them from the deck; the benchmark and
 * test programs from their options).  Set them before activations are planned.
 *
 * The attention implementation: 'flash' (default: own flash-attention style kernels, only the row
 * log-sum-exp kept: mma.sync tensor cores in bf16 for head dimensions 32 and 64, wmma for other
 * multiples of 16, else CUDA cores), 'gemm' (per-head batched tensor-core GEMMs through cuBLAS, the
 * softmax matrices kept for backward) or 'cudnn' (cuDNN's fused attention, bf16 only, with the flash
 * kernel's state; batched GEMMs on that state stand in for shapes or directions cuDNN declines, and
 * the fp32 table keeps 'gemm').  Setting it drops cuDNN's cached plans and refusals. */
void backend_cuda_set_attention(const char *impl);
const char *backend_cuda_attention(void);
/* The flash kernels' refinements on tensor cores (cuda/ops/attention_mma.cu), for comparisons: bit 1
 * the ragged last tile computes only its column tiles that hold tokens, bit 2 sequences of at most
 * 64 tokens take the one-kernel backward, bit 4 registers capped for more blocks per multiprocessor;
 * 7 (all) by default. */
void backend_cuda_set_flash_options(int opts);
/* How Linear layers' bias gradients are summed: 'epilogue' (default: by the weight gradient's
 * cuBLASLt GEMM, its BGRADB epilogue, so the output gradient is not read again; shapes for which
 * cuBLASLt has no such algorithm, said once in the log, take the kernel) or 'kernel' (a separate
 * column-sum kernel over the output gradient).  Setting it drops cuBLASLt's cached plans.  _fused: how many bias gradients the epilogue has
 * summed so far. */
void backend_cuda_set_bias_grad(const char *how);
const char *backend_cuda_bias_grad(void);
long backend_cuda_bias_grad_fused(void);
/* GELU inside the GEMMs (cuBLASLt's GELU epilogues, cuda/ops/gelu_gemm.cu): "epilogue" (default: where
 * the library computes the model's GELU, see backend_cuda_gelu_library) or "kernel" (always a
 * kernel of its own).  backend_cuda_gelu_library: the
 * GELU cuBLASLt's epilogue computes for fp32 (act = 0), bf16 (1) or fp16 (2) activations, found by a probe:
 * "none" (exact), "tanh", "neither", "declined" (no algorithm) or "unprobed" (no GPU context).
 * backend_cuda_gelu_fused: how many GEMMs have run a GELU epilogue. */
void backend_cuda_set_gelu(const char *how);
const char *backend_cuda_gelu(void);
const char *backend_cuda_gelu_library(int act);
long backend_cuda_gelu_fused(void);
/* Why cuDNN's fused attention cannot run on this build and GPU ("" when it can), and how many
 * forward and backward calls it has run so far (the rest went to the flash kernel). */
const char *backend_cuda_cudnn_attention_why_not(void);
void backend_cuda_cudnn_attention_runs(long *fwd, long *bwd);
/* Which attention shapes and tensor layouts this cuDNN builds plans for, printed to f (a stdio
 * FILE *): the diagnosis of a cuDNN that declines the backend's layout.  Returns the number of
 * backward plans built in the backend's own layout. */
int backend_cuda_cudnn_attention_probe(void *f);

/* Per-kind op timing with CUDA events (ops->profile): off by default because recording events
 * around every op costs time; on, profile() waits for the GPU and sums the event intervals. */
void backend_cuda_set_profiling(int on);
/* With profiling on: the `top` ops (backend functions) with the most GPU time since the last
 * ops->profile reset, one line each, to f (stdio FILE *). */
void backend_cuda_profile_report(void *f, int top);
/* GEMM tuning (&gpu gemm_tune): on, cuBLASLt's candidate algorithms are timed on each GEMM
 * shape's first call and the fastest kept (off by default: timing noise can choose differently on a
 * restart).  The report: one log line of what the tuning chose and gained; nothing when off. */
void backend_cuda_set_gemm_tune(int on);
void backend_cuda_gemm_tuning_report(void);

#ifdef __cplusplus
}
#endif

#endif
