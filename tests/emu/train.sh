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
# fp16 (upstream's use_fp16): the precision and the loss scale in the log, log.txt and the metrics
# file; the first steps' overflows skipped, halving the scale; a NaN in a gradient (&debug
# nan_at_step) skips the step and halves the scale instead of stopping (on 2 ranks, a NaN on one
# rank skips the step on both); a restart after the skips is bit-identical to the run in one go,
# the scale and its counter taken from the checkpoint; &gpu arch = 75 (a T4's kernel set) and 70
# (a V100's) train with precision 'auto' = fp16.
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

# fp16.  The test model's loss gradient, large at 8 images a step, overflows fp16 at GradScaler's
# first scales: its first steps are skipped, the scale halved each time, until it fits (7 steps,
# down to 512, as upstream's GradScaler finds its level at the start of a run); the checks below
# take those numbers from the log, not from this paragraph.
# scale_at EPOCH IT: "SCALE SKIPPED" of that progress line (IT 1-based) in the last output.
scale_at() {
  printf '%s\n' "$out" |
    sed -n "s/.*Epoch \[$1\/[0-9]*\] it $2\/[0-9]* .* | loss scale \([0-9]*\), \([0-9]*\) skipped\$/\1 \2/p" | tail -1
}
# skip_at EPOCH IT VERDICT: whether the step of progress line IT was skipped (VERDICT 1: the scale
# halved and one skip more than at line IT-1; 0: both unchanged).
skip_at() {
  nchecks=$((nchecks + 1))
  # shellcheck disable=SC2046 # the two words of each line
  set -- "$1" "$2" "$3" $(scale_at "$1" $(($2 - 1))) $(scale_at "$1" "$2")
  if [ $# != 7 ]; then
    fail "no loss scale in the progress lines $(($2 - 1)) and $2 of epoch $1"
  elif [ "$3" = 1 ] && { [ "$7" != $(($5 + 1)) ] || [ "$6" != $(($4 / 2)) ]; }; then
    fail "epoch $1 it $2: not skipped: loss scale $4 -> $6, skipped $5 -> $7"
  elif [ "$3" = 0 ] && { [ "$7" != "$5" ] || [ "$6" != "$4" ]; }; then
    fail "epoch $1 it $2: skipped: loss scale $4 -> $6, skipped $5 -> $7"
  fi
}
h16() { train_deck "$@" batch_size_per_rank=8 precision="'fp16'" log_every=1 | cuda; }
# Without a NaN: the first steps are skipped, the scale halved for each (no growth in 10 steps:
# scale x 2^skipped = 2^16); global step 8 (epoch 1, line 4) is not skipped.
h16 h0 epochs=2 >h0.nml
expect_exit 0 "$exe" h0.nml
expect_grep 'precision: fp16 \(fp32 master weights, dynamic loss scaling\); attention: flash \(mma.sync tensor cores'
expect_grep 'train: precision fp16 with dynamic loss scaling: initial scale 65536'
expect_grep 'Epoch \[0/2\] it 1/5 .* \| loss scale 32768, 1 skipped$'
# shellcheck disable=SC2046
set -- $(scale_at 1 5)
nchecks=$((nchecks + 1))
[ $# = 2 ] && [ "$2" -ge 1 ] && [ $(($1 << $2)) = 65536 ] || fail "h0: last loss scale and skips '$*': not 2^16 halved once per skip"
skip_at 1 4 0
expect_nogrep 'non-finite gradient'
# A NaN in the gradient of global step 8 is an overflow to the loss scale: that step is skipped, the
# scale halved; the run ends normally.  The final scale and count in log.txt, the metrics file and
# the checkpoint.
nan16="nan_at_step = 8, nan_tensor = 'backbone.blocks.1.mlp.fc2.weight'"
h16 h1 epochs=2 | sed "s|&system |\&system metrics_file = 'h1.prom', |" >h1.nml
echo "&debug $nan16 /" >>h1.nml
expect_exit 0 "$exe" h1.nml
skip_at 1 4 1
skip_at 1 5 0
expect_nogrep 'non-finite gradient'
# shellcheck disable=SC2046
set -- $(scale_at 1 5)
nchecks=$((nchecks + 1))
grep -q "\"loss_scale\": $1, \"skipped_steps\": $2}" h1/log.txt || fail "h1/log.txt: no loss scale $1 and $2 skipped steps"
nchecks=$((nchecks + 1))
grep -q "^scdino_skipped_steps{.*} $2\$" h1.prom && grep -q "^scdino_loss_scale{.*} $1\$" h1.prom ||
  fail "h1.prom: no skipped-step count $2 and loss scale $1"
nchecks=$((nchecks + 1))
h5dump -a /fp16_scaler/scale h1/checkpoint.h5 | grep -q "(0): $1\$" || fail "h1/checkpoint.h5: no fp16_scaler/scale $1"
# The same in two launches, stopped before the NaN's step: the second continues from the saved
# scale, counter and skips, and ends bit-identical to the run in one go.
h16 h2 epochs=2 max_steps=8 >h2a.nml
echo "&debug $nan16 /" >>h2a.nml
expect_exit 0 "$exe" h2a.nml
# shellcheck disable=SC2046
set -- $(scale_at 1 3)
h16 h2 epochs=2 restart=.true. >h2b.nml
echo "&debug $nan16 /" >>h2b.nml
expect_exit 0 "$exe" h2b.nml
expect_grep "restart: fp16 loss scale $1 \([0-9]+ finite steps since it last changed\), $2 steps skipped so far"
ckpt_same h1/checkpoint.h5 h2/checkpoint.h5
# &gpu arch: the kernel sets of a T4 (7.5: f16 mma.sync m16n8k8) and a V100 (7.0: attention as
# batched GEMMs) on this GPU; precision 'auto' is fp16 there, and the steps after the skipped ones
# update the weights with those kernels
for a in 75 70; do
  train_deck sm$a epochs=2 batch_size_per_rank=8 log_every=1 | cuda | gpu "arch = $a" >sm$a.nml
  expect_exit 0 "$exe" sm$a.nml
  expect_grep "compute capability 9\.0 \(the kernels of compute capability $((a / 10))\.$((a % 10)): &gpu arch\)"
  expect_grep 'precision: fp16 \(fp32 master weights, dynamic loss scaling\)'
  expect_grep 'Epoch \[1/2\] it 5/5 .* loss [0-9]+\.[0-9]+ .* \| loss scale [0-9]+, [0-9]+ skipped$'
  skip_at 1 5 0
done
expect_grep 'attention: flash \(batched tensor-core GEMMs on the flash state'
# bf16 below compute capability 8.0 (here the T4's kernel set) is refused, fp16 suggested
train_deck bf75 epochs=1 batch_size_per_rank=8 precision="'bf16'" | cuda | gpu "arch = 75" >bf75.nml
expect_exit 2 "$exe" bf75.nml
expect_grep "error: &training: precision = 'bf16' needs compute capability 8\.0 or later; GPU 0 \(.*\) runs the kernels \(&gpu arch\) of 7\.5: use precision = 'fp16' or 'auto'"

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

  # fp16: a NaN on rank 1 at global step 8 skips that step on both ranks, and training goes on
  debug_deck nan16 "nan_at_step = 8, nan_rank = 1, nan_tensor = '$t'" epochs=2 batch_size_per_rank=4 \
    precision="'fp16'" log_every=1 | cuda >nan16.nml
  expect_exit 0 mpirun_n 2 "$exe" nan16.nml
  skip_at 1 4 1
  expect_nogrep 'non-finite gradient'
fi
finish
