/* cudnn_probe.c - on a GPU machine: which attention shapes and tensor layouts the cuDNN found at
 * run time builds fused-attention plans for (backend_cuda_cudnn_attention_probe).  A diagnosis for
 * &gpu attention = 'cudnn' when cuDNN declines a direction; run with CUDNN_LOGLEVEL_DBG=2
 * CUDNN_LOGDEST_DBG=stderr for cuDNN's own reasons.  Exit 0 when the backend's layout builds a
 * backward plan for some shape, 1 when none does, 77 without a usable GPU. */
#include "build_config.h"

#include <stdio.h>

#include "cuda/backend_cuda.h"

int main(void) {
  if (!backend_cuda()) {
    printf("SKIP: no usable GPU: %s\n", backend_cuda_why_not());
    return 77;
  }
  const int built = backend_cuda_cudnn_attention_probe(stdout);
  printf("%d backward plan(s) built in the backend's layout\n", built);
  return built > 0 ? 0 : 1;
}
