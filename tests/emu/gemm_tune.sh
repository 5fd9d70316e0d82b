#!/bin/sh
# tests/emu/gemm_tune.sh - GEMM tuning (&gpu gemm_tune) under the CPU emulator, whose heuristic offers
# three candidates per GEMM: each plan's first call times them on the real operands before its
# real run, so a candidate that wrote an accumulating GEMM's output (or the GELU aux input it reads)
# would leave wrong values: the op tests and the reference model must pass as untuned, and a
# training benchmark's report and scdino's training log must name the tuned shapes.  A bad choice
# of the benchmark's GPU options is refused.
. "$top_srcdir/tests/lib.sh"
scratch emu_gemm_tune
e="$top_builddir/tests/emu"
expect_exit 0 "$e/gpu_ops" --gemm-tune
expect_grep '^[0-9]+ checks, 0 failed$'
expect_exit 0 "$e/gpu_model_ref" --gemm-tune
expect_grep '^[0-9]+ checks, 0 failed$'
expect_exit 0 "$e/gpu_train_bench" -D 32 -L 1 -H 2 -K 256 -g 32 -l 16 -n 2 -R 40 -B 2 -s 1 -w 0 -A tanh -t
expect_grep 'cuBLASLt tuning: [1-9][0-9]* GEMM shapes, [0-9]+ changed; '
expect_exit 2 "$e/gpu_train_bench" -B 2 -s 1 -w 0 -i fast
expect_grep "attention implementation 'fast': expected 'flash', 'gemm' or 'cudnn'"
# scdino: the deck's key turns it on; the log and the echo say so.
. "$top_srcdir/tests/cli/train_lib.sh"
train_data shards
train_deck tuned epochs=1 batch_size_per_rank=8 | sed "s|&system |\&system device = 'cuda', |" >tuned.nml
echo "&gpu gemm_tune = .true. /" >>tuned.nml
expect_exit 0 "$e/scdino" tuned.nml
expect_grep 'GEMM tuning: on$'
expect_grep 'cuBLASLt tuning: [1-9][0-9]* GEMM shapes, [0-9]+ changed; '
nchecks=$((nchecks + 1))
grep -q '^ *gemm_tune = \.true\.' tuned/input.echo.nml || fail "the echo does not record gemm_tune"
finish
