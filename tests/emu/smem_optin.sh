#!/bin/sh
# tests/emu/smem_optin.sh - the CUDA ops on a GPU that lets a block have 99 KiB of shared memory
# (compute capability 8.6 and 8.9; SCDINO_EMU_SMEM_OPTIN) instead of an H100's 227 KiB: every
# kernel stays within it, and the tensor-core attention hands the head dimension whose backward
# needs more (128) to the CUDA-core kernels instead of failing to launch.
. "$top_srcdir/tests/lib.sh"
scratch emu_smem_optin
expect_exit 0 env SCDINO_EMU_SMEM_OPTIN=101376 SCDINO_EMU_STATS=2 "$top_builddir/tests/emu/gpu_ops"
expect_grep ' checks, 0 failed$'
# hd 128 runs once per implementation check in bf16 (the flash pass): its backward on CUDA cores
expect_grep 'tc_bwd_dq_kernel<HDP>'
expect_grep 'attn_bwd_dq_kernel<T, HDP>'
finish
