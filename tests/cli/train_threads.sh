#!/bin/sh
# tests/cli/train_threads.sh - training does not depend on the compute thread count: 1, 2 and 3
# threads per rank give bit-identical checkpoints (weights, optimizer state, centre), so a job
# requeued onto nodes with another core count continues exactly.  Every reduction of the CPU
# backend has a fixed order: the GEMMs run as tiles whose shapes come from the matrix sizes alone,
# and sums over rows or over a tensor use fixed blocks added in order (doc/algorithm.md, "Thread
# count").  The model is wider than train_lib's (D = 96, 50 tokens per global crop, K = 4608) so
# that the GEMMs span several tiles (rows and columns), the GELU several blocks and the gradient
# norms several blocks; clipping is on (clip_grad 0.3) so the norms change the weights.  Before
# the fixed order, 3 threads changed 138 of the 188 datasets within 6 steps.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch train_threads
"$top_builddir/tests/fixtures/train_mkdata" shards 24 3 32 32 >/dev/null || exit 99
for n in 1 2 3; do
  train_deck t$n epochs=2 batch_size_per_rank=8 clip_grad=0.3 |
    sed -e "s/&system /\&system threads = $n, /" \
        -e "s/embed_dim = 16, depth = 2, num_heads = 2/embed_dim = 96, depth = 2, num_heads = 4/" \
        -e "s/out_dim = 64, head_hidden_dim = 32/out_dim = 4608, head_hidden_dim = 128/" \
        -e "s/global_size = 16, local_size = 8/global_size = 28, local_size = 12/" >t$n.nml
  expect_exit 0 "$SCDINO" t$n.nml
  expect_grep "train: 6 steps in "
done
ckpt_same t1/checkpoint.h5 t2/checkpoint.h5
ckpt_same t1/checkpoint.h5 t3/checkpoint.h5
for line in 1 2; do
  nchecks=$((nchecks + 1))
  a=$(json_field t1/log.txt $line train_loss)
  b=$(json_field t3/log.txt $line train_loss)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "epoch $line train_loss: 1 thread $a, 3 threads $b"
done
finish
