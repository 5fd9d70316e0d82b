/* cuda_check.h - error checks for CUDA runtime, cuBLAS(Lt), cuDNN and NCCL calls (C and C++).
 *
 * Each macro evaluates the call once; on failure it ends the job through scd_fatal_at (check.h)
 * with the file, line, the failing call and the library's own error name and string.  Only the
 * macros of the libraries whose headers the including file has included can be expanded. */
#ifndef SCDINO_CUDA_CHECK_H
#define SCDINO_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "core/check.h"
#ifdef __cplusplus
}
#endif

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    cudaError_t scd_ce_ = (call);                                                             \
    if (scd_ce_ != cudaSuccess)                                                               \
      scd_fatal_at(__FILE__, __LINE__, SCD_EXIT_FAILURE, "%s: %s (%s)", #call,                \
                   cudaGetErrorString(scd_ce_), cudaGetErrorName(scd_ce_));                   \
  } while (0)

/* After a kernel launch: the launch configuration was valid (errors of the kernel itself surface
 * at the next synchronising call, which is checked too). */
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

#define CHECK_CUBLAS(call)                                                                    \
  do {                                                                                        \
    cublasStatus_t scd_cb_ = (call);                                                          \
    if (scd_cb_ != CUBLAS_STATUS_SUCCESS)                                                     \
      scd_fatal_at(__FILE__, __LINE__, SCD_EXIT_FAILURE, "%s: %s (%s)", #call,                \
                   cublasLtGetStatusString(scd_cb_), cublasLtGetStatusName(scd_cb_));         \
  } while (0)

#define CHECK_CUDNN(call)                                                                     \
  do {                                                                                        \
    cudnnStatus_t scd_cd_ = (call);                                                           \
    if (scd_cd_ != CUDNN_STATUS_SUCCESS)                                                      \
      scd_fatal_at(__FILE__, __LINE__, SCD_EXIT_FAILURE, "%s: %s", #call,                     \
                   cudnnGetErrorString(scd_cd_));                                             \
  } while (0)

/* NCCL: the library's last error message (which names the failing peer or transport) follows
 * the status string. */
#define CHECK_NCCL_COMM(call, comm)                                                           \
  do {                                                                                        \
    ncclResult_t scd_nr_ = (call);                                                            \
    if (scd_nr_ != ncclSuccess) {                                                             \
      const char *scd_nl_ = ncclGetLastError(comm);                                           \
      scd_fatal_at(__FILE__, __LINE__, SCD_EXIT_FAILURE, "%s: %s%s%s", #call,                 \
                   ncclGetErrorString(scd_nr_), scd_nl_ && *scd_nl_ ? ": " : "",              \
                   scd_nl_ ? scd_nl_ : "");                                                   \
    }                                                                                         \
  } while (0)
#define CHECK_NCCL(call) CHECK_NCCL_COMM(call, NULL)

#endif
