#!/bin/sh
# tests/emu/cudnn.sh - scdino with device = 'cuda' and &gpu attention = 'cudnn' under the CPU
# emulator (tests/emu/cudnn_emu.cc stands in for cuDNN): cuDNN's fused attention in training, a
# restart bit-identical to an uninterrupted run (the deterministic engine is chosen before the
# nondeterministic one heuristics rank first), and the fallbacks to the GEMM form on cuDNN's state
# when cuDNN offers no engine for the backward node or for any node, has no handle, or fails at
# execution, each said once, the GEMM form in fp32, and the warning when only a nondeterministic
# engine exists.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch emu_cudnn
train_data shards
exe="$top_builddir/tests/emu/scdino"
cuda() { sed "s|&system |\&system device = 'cuda', |"; echo "&gpu attention = 'cudnn' /"; }
unset SCDINO_EMU_CUDNN

# Two epochs at once, and one + restart + one: equal bit for bit.
train_deck full epochs=2 batch_size_per_rank=4 | cuda >full.nml
expect_exit 0 "$exe" full.nml
expect_grep 'attention: cudnn; '
expect_grep 'Epoch \[1/2\] it 10/10'
expect_nogrep 'cuDNN attention'
train_deck split epochs=2 batch_size_per_rank=4 max_steps=10 | cuda >a.nml
expect_exit 0 "$exe" a.nml
train_deck split epochs=2 batch_size_per_rank=4 restart=.true. | cuda >b.nml
expect_exit 0 "$exe" b.nml
expect_grep 'restart: continuing from split/checkpoint.h5 at epoch 1, iteration 0'
ckpt_same full/checkpoint.h5 split/checkpoint.h5

# declined MODE N: one epoch with SCDINO_EMU_CUDNN=MODE trains to the end, and the log names cuDNN's
# attention in exactly N lines (a fallback is said once per direction; further shapes at
# verbosity 2).
declined() {
  train_deck "$1" epochs=1 batch_size_per_rank=4 | cuda >"$1.nml"
  expect_exit 0 env SCDINO_EMU_CUDNN="$1" "$exe" "$1.nml"
  expect_grep 'Epoch \[0/1\] it 10/10'
  nchecks=$((nchecks + 1))
  [ "$(printf '%s\n' "$out" | grep -c 'cuDNN attention')" = "$2" ] ||
    fail "SCDINO_EMU_CUDNN=$1: cuDNN's attention named in $(printf '%s\n' "$out" | grep -c 'cuDNN attention') lines, not $2"
}
# No engine for the backward node: the GEMM form's backward from cuDNN's row statistics.
declined nobwd 1
expect_grep 'cuDNN attention backward for batch 8 x 17 tokens x 2 heads of 8: no engine of this cuDNN runs it; using batched GEMMs$'
# No engine at all: the forward falls back too.
declined none 2
expect_grep 'cuDNN attention forward for batch 8 x 17 tokens x 2 heads of 8: no engine of this cuDNN runs it; using batched GEMMs$'
# cudnnCreate fails (a cuDNN with missing sub-libraries).
declined nohandle 1
expect_grep 'cuDNN attention: cudnnCreate failed \(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED\); using batched GEMMs$'
# Plans build, but every execution fails after a launch failure (what an engine that refuses at run
# time does): said once per direction, the launch error is not left for the next kernel's check.
declined noexec 2
expect_grep "cuDNN attention forward for batch 8 x 17 tokens x 2 heads of 8: execution failed \\(CUDNN_STATUS_EXECUTION_FAILED; .*; CUDA: too many resources requested for launch\\); using batched GEMMs$"
expect_grep 'cuDNN attention backward for batch 8 x 17 tokens x 2 heads of 8: execution failed'

# fp32: cuDNN's fused attention is bf16 only; the log says the GEMM form runs.
train_deck fp32 epochs=1 batch_size_per_rank=8 precision="'fp32'" | cuda >fp32.nml
expect_exit 0 "$exe" fp32.nml
expect_grep 'attention: cudnn \(bf16 only: fp32 runs gemm\); '
expect_nogrep 'cuDNN attention'

# Only a nondeterministic engine: used, with a warning about restarts.
train_deck nondet epochs=1 batch_size_per_rank=4 | cuda >nondet.nml
expect_exit 0 env SCDINO_EMU_CUDNN=nondet "$exe" nondet.nml
expect_grep 'cuDNN attention backward: only a nondeterministic engine runs this shape; restarts are not bit-identical'
finish
