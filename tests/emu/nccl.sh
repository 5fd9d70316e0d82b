#!/bin/sh
# tests/emu/nccl.sh - the NCCL gradient communicator (tests/gpu/test_gpu_nccl) under the emulator
# on 1, 2 and 3 ranks: bucketed gradient means and centre sums through ncclAllReduce, whose
# stand-in is MPI_Allreduce on the emulated device memory.
. "$top_srcdir/tests/lib.sh"
scratch emu_nccl
for n in 1 2 3; do
  expect_exit 0 mpirun_n $n "$top_builddir/tests/emu/gpu_nccl"
  expect_grep '^6 checks, 0 failed$'
done
finish
