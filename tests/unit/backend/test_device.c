/* test_device.c - what backend selection hands train/ and analysis/ on the CPU backend: the
 * device of device = 'cpu' (and 'auto' without a GPU) is the CPU op table with the MPI
 * communicators (all-reduce and the sharded optimizer's reduce-scatter, neither in place) and none
 * of the optional services, so the callers make crops, prepare images and select neighbours on the
 * host.  (The CUDA device's services: tests/gpu/test_gpu_knn, run under the emulator.) */
#include "build_config.h"

#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "core/comm.h"
#include "model/shard_plan.h"
#include "model/tensor.h"
#include "tests/fixtures/testutil.h"

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  t_init(argc, argv);
  const struct device *cpu = backend_device_cpu();
  T_CHECK(cpu && !strcmp(cpu->name, "cpu") && cpu->ops == backend_cpu(), "the CPU device has the CPU op table");
  T_CHECK(!cpu->crops && !cpu->features_prep && !cpu->knn && !cpu->memory && !cpu->report,
          "the CPU device offers no service");
  T_CHECK(cpu->grad_comm && cpu->grad_comm_shard && !cpu->shard_in_place, "the CPU device's communicators");

  static struct config cfg;
  config_defaults(&cfg);
  snprintf(cfg.system.device, sizeof cfg.system.device, "cpu");
  T_CHECK(backend_select(&cfg) == cpu, "device = 'cpu' selects the CPU device");
#ifndef HAVE_CUDA
  snprintf(cfg.system.device, sizeof cfg.system.device, "auto");
  T_CHECK(backend_select(&cfg) == cpu, "device = 'auto' without the CUDA backend selects the CPU device");
#endif

  struct grad_comm *gc = cpu->grad_comm(cpu);
  T_CHECK(!strcmp(gc->name, "mpi") && gc->world == comm_size() && !gc->plan, "all-reduce: %s", gc->name);
  gc->destroy(gc);
  struct tensor_table tt;
  tensors_init(&tt);
  tensors_add(&tt, 2, (const int64_t[]){4, 8}, "w");
  struct shard_plan plan;
  shard_plan_init(&plan, &tt, comm_size(), comm_rank(), 8);
  gc = cpu->grad_comm_shard(cpu, &plan);
  T_CHECK(!strcmp(gc->name, "mpi-shard") && gc->plan == &plan, "reduce-scatter: %s", gc->name);
  gc->destroy(gc);
  shard_plan_free(&plan);
  tensors_free(&tt);
  const int rc = t_finish();
  comm_finalize();
  return rc;
}
