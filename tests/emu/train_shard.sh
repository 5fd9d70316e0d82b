#!/bin/sh
# tests/emu/train_shard.sh - &training shard_optimizer (ZeRO-1) with device = 'cuda' under the CPU
# emulator: the NCCL reduce-scatter communicator (cuda/comm/grad_comm_nccl.c: grouped ncclReduce
# per bucket, ncclBroadcast of the weights) and the GPU's block sums of squares give the unsharded
# run's training bit for bit.  The emulated ncclReduce and ncclAllReduce add the ranks' values in
# the same (rank) order (tests/emu/nccl_mpi.c), so the comparison is exact.
#
# First tests/emu/gpu_shard (tests/gpu/test_gpu_shard.c) on 1, 2 and 3 ranks: the communicator and
# optim_update on a slice against the all-reduce ones.  Then scdino, bf16 (the weights' bf16
# copies must follow the all-gather), the tiny model with its head's last layer widened to 4096
# outputs (four norm blocks, so that slices split tensors), sharded and unsharded on 1, 2 and 3
# ranks for 2 steps: checkpoints (student, teacher, AdamW moments gathered from the slices,
# centre) identical; device = 'auto' the same.  Last, restarts across modes and rank counts: 2
# steps on 2 ranks, then 2 more on 3 ranks in the other mode; the two stops and the two ends
# identical.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch emu_train_shard
for n in 1 2 3; do
  expect_exit 0 mpirun_n $n "$top_builddir/tests/emu/gpu_shard"
  expect_grep "gpu grad_comm_nccl_shard on $n rank\(s\): checked"
done

train_data shards
exe="$top_builddir/tests/emu/scdino"
cuda() { sed "s|&system |\&system device = 'cuda', |; s/out_dim = 64/out_dim = 4096/"; }
for n in 1 2 3; do
  train_deck u$n epochs=1 batch_size_per_rank=2 max_steps=2 | cuda >u$n.nml
  train_deck s$n epochs=1 batch_size_per_rank=2 max_steps=2 shard_optimizer=.true. | cuda >s$n.nml
  expect_exit 0 mpirun_n $n "$exe" u$n.nml
  expect_grep "train: backend cuda, gradient all-reduce nccl over $n rank"
  expect_exit 0 mpirun_n $n "$exe" s$n.nml
  expect_grep "train: backend cuda, gradient reduce-scatter nccl-shard over $n rank"
  expect_grep "train: optimizer sharded over $n ranks? \(&training shard_optimizer\): AdamW moments of at most [0-9]+ of 127232 elements per rank, [0-9.]+ MiB \(the gradients reduced in place\)"
  ckpt_same u$n/checkpoint.h5 s$n/checkpoint.h5
done
# device = 'auto' finds the (emulated) GPU and shards there too.
sed "s/device = 'cuda'/device = 'auto'/; s/run_dir = 's2'/run_dir = 'a2'/" s2.nml >a2.nml
expect_exit 0 mpirun_n 2 "$exe" a2.nml
expect_grep "train: backend cuda, gradient reduce-scatter nccl-shard over 2 ranks"
ckpt_same s2/checkpoint.h5 a2/checkpoint.h5

# Restarts: stop after 2 steps on 2 ranks, continue on 3 in the other mode.
for m in u s; do
  train_deck r$m epochs=1 batch_size_per_rank=2 max_steps=2 $([ $m = s ] && echo shard_optimizer=.true.) |
    cuda >r$m-a.nml
  expect_exit 0 mpirun_n 2 "$exe" r$m-a.nml
  cp r$m/checkpoint.h5 r$m-stop.h5
  train_deck r$m epochs=1 batch_size_per_rank=2 max_steps=2 restart=.true. $([ $m = u ] && echo shard_optimizer=.true.) |
    cuda >r$m-b.nml
  expect_exit 0 mpirun_n 3 "$exe" r$m-b.nml
  expect_grep "restart: continuing from r$m/checkpoint.h5 at epoch 0"
done
ckpt_same ru-stop.h5 rs-stop.h5
ckpt_same ru/checkpoint.h5 rs/checkpoint.h5
finish
