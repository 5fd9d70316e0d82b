#!/bin/sh
# tests/emu/train.sh - scdino with device = 'cuda' under the CPU emulator (tests/emu/scdino): GPU
# augmentation from raw batches, the CUDA ops in bf16 and fp32, gradients over the NCCL
# communicator on 1 and 2 ranks, checkpoints; the restart contract on that path (one epoch, a
# restart, the second epoch equal bit for bit to two epochs in one run); a bias-gradient epilogue
# whose sums are wrong (SCDINO_EMU_LT_BGRADB=wrong), caught by the backend's check with one warning,
# the run then the same bit for bit as one with the column-sum kernel (&gpu bias_grad = 'kernel');
# the tanh GELU in cuBLASLt's epilogues, tracking the run with GELU kernels;
# and a NaN in one rank's gradient, found by the GPU's norms after the NCCL all-reduce, ending both
# ranks with status 1 through comm_exit_all (which aborts the NCCL communicator).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
scratch emu_train
train_data shards
exe="$top_builddir/tests/emu/scdino"
cuda() { sed "s|&system |\&system device = 'cuda', |"; }
# gpu 'KEY = VALUE': the deck on stdin with a &gpu group
gpu() { cat; echo "&gpu $1 /"; }

# One rank, fp32: the backend and communicator the log names, a finite loss, a checkpoint.
train_deck fp32 epochs=1 batch_size_per_rank=8 precision="'fp32'" log_every=1 | cuda >fp32.nml
expect_exit 0 "$exe" fp32.nml
expect_grep 'train: backend cuda, gradient all-reduce nccl over 1 rank$'
expect_grep 'Epoch \[0/1\] it 5/5 eta [^ ]+ loss [0-9]+\.[0-9]+ '
nchecks=$((nchecks + 1))
[ -f fp32/checkpoint.h5 ] || fail "fp32: no checkpoint"

# One rank, bf16, our fused attention: the log says where it runs.
train_deck flash epochs=1 batch_size_per_rank=8 | cuda | gpu "attention = 'flash'" >flash.nml
expect_exit 0 "$exe" flash.nml
expect_grep 'attention: flash \(tensor cores for head dimensions that are multiples of 16\); bias gradients: epilogue; GELU: epilogue; GEMM tuning: off$'
expect_grep 'Epoch \[0/1\] it 5/5'

# One rank, bf16: wrong epilogue sums are caught at once and the kernel takes over, so the run
# is the kernel's bit for bit.
train_deck kernel epochs=1 batch_size_per_rank=8 | cuda | gpu "bias_grad = 'kernel'" >kernel.nml
expect_exit 0 "$exe" kernel.nml
expect_grep 'bias gradients: kernel;'
expect_nogrep 'bias-gradient epilogue'
train_deck wrong epochs=1 batch_size_per_rank=8 | cuda >wrong.nml
expect_exit 0 env SCDINO_EMU_LT_BGRADB=wrong "$exe" wrong.nml
expect_grep "warning: cuBLASLt's bias-gradient epilogue \(BGRADB\) disagrees with the column sums"
nchecks=$((nchecks + 1))
[ "$(printf '%s\n' "$out" | grep -c 'bias-gradient epilogue')" = 1 ] || fail "the wrong epilogue was not said exactly once"
expect_grep 'Epoch \[0/1\] it 5/5'
ckpt_same kernel/checkpoint.h5 wrong/checkpoint.h5

# One rank, bf16, the GELU in tanh form: computed in cuBLASLt's epilogues (the stand-in's GELU is
# the tanh form), said in the log; the run tracks the one with GELU kernels (&gpu gelu = 'kernel')
# to bf16 rounding.
tanh_deck() { train_deck "$1" epochs=1 batch_size_per_rank=8 log_every=1 | cuda | sed "s/num_heads = 2,/num_heads = 2, gelu_approximate = 'tanh',/"; }
tanh_deck gk | gpu "gelu = 'kernel'" >gk.nml
expect_exit 0 "$exe" gk.nml
expect_grep 'GELU tanh$'
tanh_deck ge >ge.nml
expect_exit 0 "$exe" ge.nml
expect_grep 'GELU tanh \(in the MLP.s GEMMs\)$'
expect_grep 'Epoch \[0/1\] it 5/5'
nchecks=$((nchecks + 1))
if ! "$top_builddir/tests/fixtures/ckpt_compare" -r 0.5 -g 0.005 -k 0.01 ge/checkpoint.h5 gk/checkpoint.h5 /student /teacher >cmp.out 2>&1; then
  fail "GELU in the epilogue: the weights left the kernels' run"
  sed 's/^/    | /' cmp.out >&2
fi

# Two ranks, bf16 (precision 'auto' on the GPU): two epochs at once, and one + restart + one.
if [ "$MPIEXEC" != none ]; then
  train_deck full epochs=2 batch_size_per_rank=4 | cuda >full.nml
  expect_exit 0 mpirun_n 2 "$exe" full.nml
  expect_grep 'train: backend cuda, gradient all-reduce nccl over 2 ranks$'
  expect_grep 'Epoch \[1/2\] it 5/5'
  train_deck split epochs=2 batch_size_per_rank=4 max_steps=5 | cuda >a.nml
  expect_exit 0 mpirun_n 2 "$exe" a.nml
  expect_grep 'stopped after 5 steps of this launch at the end of epoch 0'
  train_deck split epochs=2 batch_size_per_rank=4 restart=.true. | cuda >b.nml
  expect_exit 0 mpirun_n 2 "$exe" b.nml
  expect_grep 'restart: continuing from split/checkpoint.h5 at epoch 1, iteration 0'
  ckpt_same full/checkpoint.h5 split/checkpoint.h5

  t=backbone.blocks.1.mlp.fc2.weight
  debug_deck nan "nan_at_step = 2, nan_rank = 1, nan_tensor = '$t'" epochs=1 batch_size_per_rank=4 | cuda >nan.nml
  expect_exit 1 mpirun_n 2 "$exe" nan.nml
  expect_grep "error: non-finite gradient at epoch 0, iteration 2 of 5 \(global step 2\): first bad tensor $t \(norm nan\)"
  expect_nogrep 'MPI_ABORT'
fi
finish
