#!/bin/sh
# tests/emu/order.sh - the emulated GPU op, augmentation, reference-model, training and kNN tests again
# with blocks, warps and lanes run last first, each warp on through its warp barriers
# (SCDINO_EMU_ORDER=reverse, tests/emu/fiber.cc).  A kernel that lacks a __syncthreads between
# threads writing and reading (or rewriting) shared memory can pass in the default order and fail in
# this one: without the first barrier of dino_loss.cu's block_reduce, gpu_ops passes in the default
# order and finds 12 failures in this one.
. "$top_srcdir/tests/lib.sh"
scratch emu_order
for t in gpu_ops gpu_augment gpu_model_ref gpu_train gpu_knn; do
  expect_exit 0 env SCDINO_EMU_ORDER=reverse "$top_builddir/tests/emu/$t"
  expect_grep ' checks, 0 failed$'
done
expect_exit 99 env SCDINO_EMU_ORDER=backwards "$top_builddir/tests/emu/test_emu"
expect_grep 'SCDINO_EMU_ORDER=backwards \(forward or reverse\)'
expect_exit 99 env SCDINO_EMU_STREAMS=later "$top_builddir/tests/emu/test_emu"
expect_grep 'SCDINO_EMU_STREAMS=later \(sync or deferred\)'
finish
