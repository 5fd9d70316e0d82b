/* test_gpu_absent.c - without a usable GPU the CUDA backend says so, cleanly: backend_cuda(), both
 * precisions and the CUDA device give NULL with a reason, and the other entry points report
 * nothing in use.
 * Runs on machines without a GPU (the point of it); skips (77) where a GPU is usable. */
#include "build_config.h"

#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "cuda/backend_cuda.h"
#include "tests/fixtures/testutil.h"

int main(int argc, char **argv) {
  t_init(argc, argv);
  const struct ops *o = backend_cuda();
  if (o) {
    struct backend_cuda_info info;
    backend_cuda_info(&info);
    printf("SKIP: a GPU is usable here (%s)\n", info.name);
    return 77;
  }
  const char *why = backend_cuda_why_not();
  printf("no GPU: %s\n", why);
  T_CHECK(why && *why, "no reason given");
  T_CHECK(strstr(why, "cudaGetDeviceCount") || strstr(why, "no CUDA device") || strstr(why, "GPU"),
          "unexpected reason '%s'", why);
  /* asking again (another precision) is just as quiet, and gives the same answer */
  T_CHECK(backend_cuda_for("fp32") == NULL && backend_cuda_for("bf16") == NULL &&
              backend_cuda_for("auto") == NULL && backend_cuda() == NULL,
          "a table without a GPU");
  T_CHECK(backend_device_cuda("fp32") == NULL && backend_device_cuda("auto") == NULL, "a device without a GPU");
  T_CHECK(!strcmp(why, backend_cuda_why_not()), "the reason changed");
  struct backend_cuda_info info;
  T_CHECK(backend_cuda_info(&info) == 0 && info.name[0] == 0, "device facts without a device");
  T_CHECK(backend_cuda_stream() == NULL, "a stream without a device");
  size_t in_use = 1, peak = 1, fr = 1, tot = 1;
  backend_cuda_memory(&in_use, &peak, &fr, &tot);
  T_CHECK(in_use == 0 && peak == 0 && fr == 0 && tot == 0, "memory figures %zu %zu %zu %zu", in_use,
          peak, fr, tot);
  return t_finish();
}
