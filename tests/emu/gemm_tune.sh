#!/bin/sh
# tests/emu/gemm_tune.sh - SCDINO_CUDA_GEMM_TUNE=1 under the CPU emulator, whose heuristic offers
# three candidates per GEMM: each plan's first call times them on the real operands before its
# real run, so a candidate that wrote an accumulating GEMM's output (or the GELU aux input it reads)
# would leave wrong values: the op tests and the reference model must pass as untuned, and a
# training benchmark's report must name the tuned shapes.  A bad value is refused.
. "$top_srcdir/tests/lib.sh"
scratch emu_gemm_tune
e="$top_builddir/tests/emu"
export SCDINO_CUDA_GEMM_TUNE=1
expect_exit 0 "$e/gpu_ops"
expect_grep '^[0-9]+ checks, 0 failed$'
expect_exit 0 "$e/gpu_model_ref"
expect_grep '^[0-9]+ checks, 0 failed$'
expect_exit 0 "$e/gpu_train_bench" -D 32 -L 1 -H 2 -K 256 -g 32 -l 16 -n 2 -R 40 -B 2 -s 1 -w 0 -A tanh
expect_grep 'cuBLASLt tuning: [1-9][0-9]* GEMM shapes, [0-9]+ changed; '
expect_exit 2 env SCDINO_CUDA_GEMM_TUNE=yes "$e/gpu_train_bench" -B 2 -s 1 -w 0
expect_grep "SCDINO_CUDA_GEMM_TUNE = 'yes': expected 0 or 1"
finish
