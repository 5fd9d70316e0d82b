#!/bin/sh
# tests/cli/train_shard.sh - &training shard_optimizer (ZeRO-1): the sharded optimizer gives the
# unsharded run's training bit for bit, and its checkpoints are complete.
#
# First tests/unit/backend/test_grad_comm_shard on 1, 2 and 3 ranks (the reduce-scatter against the
# all-reduce, optim_update on a slice against the whole one).  Then whole runs of the tiny model
# (its head's last layer widened to 4096 outputs, 65536 elements: four norm blocks, so that slices
# split tensors) sharded and unsharded on 1, 2 and 3 ranks: the checkpoints' student, teacher,
# AdamW state and centre must be identical (the moments gathered from the slices); a wider model
# (D = 320, two bucket calls a step) on 3 ranks the same, and the memory check counts the slice.
# Restarts across rank counts and modes: an unsharded 2-rank run stopped after 3 steps continues
# sharded on 3 ranks, a sharded one unsharded, both sharded on 1 rank; the stop and end checkpoints
# of each pair are identical.
# Last, examples/export_pytorch.py reads a sharded run's checkpoint (skipped without torch).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch train_shard
for n in 1 2 3; do
  expect_exit 0 mpirun_n $n "$top_builddir/tests/unit/backend/test_grad_comm_shard"
  expect_grep "grad_comm_shard on $n rank\(s\): checked"
done

train_data shards
wide() { sed 's/out_dim = 64/out_dim = 4096/'; }
for n in 1 2 3; do
  train_deck u$n epochs=2 batch_size_per_rank=4 | wide >u$n.nml
  train_deck s$n epochs=2 batch_size_per_rank=4 shard_optimizer=.true. | wide >s$n.nml
  expect_exit 0 mpirun_n $n "$SCDINO" u$n.nml
  expect_grep "gradient all-reduce mpi over $n rank"
  expect_exit 0 mpirun_n $n "$SCDINO" s$n.nml
  expect_grep "gradient reduce-scatter mpi-shard over $n rank"
  expect_grep "train: optimizer sharded over $n ranks? \(&training shard_optimizer\): AdamW moments of at most [0-9]+ of 127232 elements per rank"
  ckpt_same u$n/checkpoint.h5 s$n/checkpoint.h5
  ckpt_same u$n/checkpoint_0000.h5 s$n/checkpoint_0000.h5
done

# D = 320: gradients in two bucket calls, slices inside the blocks' big tensors.
for m in u s; do
  train_deck b$m epochs=1 batch_size_per_rank=1 max_steps=2 $([ $m = s ] && echo shard_optimizer=.true.) |
    sed 's/embed_dim = 16, depth = 2/embed_dim = 320, depth = 3/; s/seed = 5 \//seed = 5, verbosity = 2 \//' >b$m.nml
  expect_exit 0 mpirun_n 3 "$SCDINO" b$m.nml
done
expect_grep "gradient all-reduce mpi reduce-scatter: 2 bucket calls per step"
ckpt_same bu/checkpoint.h5 bs/checkpoint.h5
# The memory check counts a third of the moments (and the received slice): 5 P -> 3 P + 3 P / 3 of
# P = 3501584 x 4 bytes (its table, shown when a deck does not fit).
for m in u s; do sed 's/&system /\&system memory_per_rank = 0.0001, /' b$m.nml >mem$m.nml; done
expect_exit 2 mpirun_n 3 "$SCDINO" memu.nml
expect_grep "weights, gradients, AdamW moments +0\.07 GiB"
expect_exit 2 mpirun_n 3 "$SCDINO" mems.nml
expect_grep "weights, gradients, AdamW moments \(sharded\) +0\.05 GiB  \(.*shard_optimizer over 3 ranks\)"

# Restarts: stop after 3 steps on 2 ranks, continue on 3 (other mode) and on 1 (sharded).
for m in u s; do
  train_deck r$m epochs=2 batch_size_per_rank=4 max_steps=3 $([ $m = s ] && echo shard_optimizer=.true.) | wide >r$m-a.nml
  expect_exit 0 mpirun_n 2 "$SCDINO" r$m-a.nml
  mkdir -p r$m-1 && cp r$m/checkpoint.h5 r$m-1/checkpoint.h5 && cp r$m/checkpoint.h5 r$m-stop.h5
  train_deck r$m epochs=2 batch_size_per_rank=4 restart=.true. $([ $m = u ] && echo shard_optimizer=.true.) | wide >r$m-b.nml
  expect_exit 0 mpirun_n 3 "$SCDINO" r$m-b.nml
  expect_grep "restart: continuing from r$m/checkpoint.h5 at epoch 0"
  train_deck r$m-1 epochs=2 batch_size_per_rank=4 restart=.true. shard_optimizer=.true. | wide >r$m-c.nml
  expect_exit 0 "$SCDINO" r$m-c.nml
  expect_grep "train: optimizer sharded over 1 rank "
done
ckpt_same ru-stop.h5 rs-stop.h5
ckpt_same ru/checkpoint.h5 rs/checkpoint.h5
ckpt_same ru-1/checkpoint.h5 rs-1/checkpoint.h5

if [ "$PYTHON3" != none ] && "$PYTHON3" -c "import torch, h5py, numpy" 2>/dev/null; then
  expect_exit 0 "$PYTHON3" "$top_srcdir/examples/export_pytorch.py" s3/checkpoint.h5 s3.pth
  expect_grep "s3.pth: student and teacher \(38 tensors each\), epoch 2, optimizer, dino_loss.center"
fi
finish
