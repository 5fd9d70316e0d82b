#!/bin/sh
# busbw_model.sh - --sizes-from-model: the rows are the all-reduce calls one training step of a
# deck's &model makes (backward's ready ranges merged up to GRAD_COMM_BUCKET_BYTES = 4 MiB by the
# communicators' own rule, grad_comm_plan), each distinct size once, and the footer gives their
# all-reduce time for one step.  The calls are checked against what the trainer logs for its first
# step on 2 ranks.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/bench/busbw_lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch busbw_model

# A tiny model (D=48, depth 2, patch 8, 3 channels, head 96/32/64): the whole buffer is under one
# bucket, so the trainer sends it as ONE call at the end of backward.  Elements: head 64 (weight_g,
# handed over with the rest although it is fixed) + 2048 + 17120, norm 96, blocks 12x48^2 + 13x48 =
# 28272 (twice), patch 3x8x8x48 + 48 + cls 48 + pos (1+28^2)x48 = 46992: 122864, 491456 bytes.
cat > tiny.nml <<'DECK'
&control calculation = 'train' /
&data channels = 0, 1, 2 /
&model arch = 'custom', embed_dim = 48, depth = 2, num_heads = 3, mlp_ratio = 4.0, patch_size = 8,
       out_dim = 64, head_hidden_dim = 96, head_bottleneck_dim = 32, head_nlayers = 3 /
DECK
busbw 2 scdino_allreduce_perf --sizes-from-model tiny.nml -n 2 -w 0
expect_rc 0
expect_grep '^# nThread 1 nGpus 1 minBytes 491456 maxBytes 491456 step: 1\(buckets\) '
expect_grep '^# Model: 1 gradient buckets of tiny.nml, in the order backward issues them:$'
expect_grep '^#   head\+norm\+blocks.1\+blocks.0\+embed +122864 elements$'
nchecks=$((nchecks + 1))
got=$(busbw_rows | cut -d, -f1,2 | tr '\n' ' ')
[ "$got" = "491456,122864 " ] || fail "rows '$got'"
expect_grep '^# Model step allreduce : [0-9.]+ us for 1 buckets, 491456 B \(in-place\); effective busbw [0-9.]+ GB/s$'

# A model whose blocks are over the bucket (D=320, depth 3, patch 4, 3 channels, head 32/16/64),
# which trains in a second on the 20x20 test images.  Backward hands over head 12944, norm 640,
# blocks 12x320^2 + 13x320 = 1232960 each, embeddings 320 + (1+56^2)x320 + 3x4x4x320 + 320 =
# 1019840.  Calls: head+norm+blocks.2 = 1246544 (the bucket fills at block 2), blocks.1 and
# blocks.0 (alone: over the bucket), embed (under it: sent by finish) = 4 calls, 3 distinct sizes.
train_data shards
cat > mid.nml <<'DECK'
&control calculation = 'train', run_dir = 'run', seed = 5, verbosity = 2 /
&data shard_dir = 'shards', train_fraction = 1.0, channels = 0, 1, 2 /
&model arch = 'custom', patch_size = 4, embed_dim = 320, depth = 3, num_heads = 4, mlp_ratio = 4,
       out_dim = 64, head_hidden_dim = 32, head_bottleneck_dim = 16 /
&crops global_size = 16, local_size = 8, local_crops_number = 2 /
&training batch_size_per_rank = 4, max_steps = 1, warmup_epochs = 1 /
&system loader_threads = 1, prefetch_batches = 2 /
DECK
busbw 2 scdino_allreduce_perf --sizes-from-model mid.nml -n 2 -w 0
expect_rc 0
expect_grep '^# nThread 1 nGpus 1 minBytes 4079360 maxBytes 4986176 step: 3\(buckets\) '
expect_grep '^# Model: 4 gradient buckets of mid.nml, in the order backward issues them:$'
expect_grep '^#   head\+norm\+blocks.2 +1246544 elements$'
expect_grep '^#   blocks.1 +1232960 elements$'
expect_grep '^#   blocks.0 +1232960 elements$'
expect_grep '^#   embed +1019840 elements$'
nchecks=$((nchecks + 1))
got=$(busbw_rows | cut -d, -f1,2 | tr '\n' ' ')
[ "$got" = "4079360,1019840 4931840,1232960 4986176,1246544 " ] || fail "rows '$got'"
expect_grep '^# Model step allreduce : [0-9.]+ us for 4 buckets, 18929216 B \(in-place\); effective busbw [0-9.]+ GB/s$'
# The step time is the in-place times weighted by how often each size occurs (blocks 1 and 0: twice).
step=$(printf '%s\n' "$out" | sed -n 's/^# Model step allreduce : \([0-9.]*\) us.*/\1/p')
nchecks=$((nchecks + 1))
# (Within the rounding of the printed numbers: half a unit of each row's last digit, and of the step.)
busbw_rows | awk -F, -v step="$step" '
  function ulp(s,   d) { d = index(s, "."); return d ? 0.5 * 10 ^ -(length(s) - d) : 0.5 }
  { w = $1 == 4931840 ? 2 : 1; t += w * $10; tol += w * ulp($10) }
  END { d = t - step; if (d < 0) d = -d; exit !(d <= tol + 0.05 + 1e-9) }' ||
  fail "step time $step is not the weighted sum of the rows"

# The trainer's own first step (2 ranks, the MPI communicator) logs the calls it made: the same.
bench_calls=$(printf '%s\n' "$out" | sed -n 's/^#   [^ ]* *\([0-9][0-9]*\) elements$/\1/p' | tr '\n' ' ')
expect_exit 0 mpirun_n 2 "$SCDINO" mid.nml
expect_grep 'gradient all-reduce mpi: 4 bucket calls per step, elements in issue order: 1246544 1232960 1232960 1019840$'
train_calls=$(printf '%s\n' "$out" | sed -n 's/.*gradient all-reduce mpi: .* in issue order: \(.*\)$/\1 /p')
nchecks=$((nchecks + 1))
[ -n "$bench_calls" ] && [ "$bench_calls" = "$train_calls" ] ||
  fail "the benchmark's calls '$bench_calls' are not the trainer's '$train_calls'"

# bfloat16 halves the bytes of the same calls; reduce_scatter takes them too.
busbw 2 scdino_allreduce_perf --sizes-from-model tiny.nml -n 1 -w 0 -d bfloat16
expect_rc 0
expect_grep '^      245728        122864  bfloat16     sum      -1 '
busbw 2 scdino_reducescatter_perf --sizes-from-model tiny.nml -n 1 -w 0
expect_rc 0
expect_grep '^# Model step allreduce : '

# No channels in the deck: the patch embedding is unknown until --in-chans gives it.
sed '/^&data/d' tiny.nml > nochan.nml
busbw1 scdino_allreduce_perf --sizes-from-model nochan.nml -n 1 -w 0
expect_rc 2
expect_grep 'nochan.nml: &data channels is empty .*give --in-chans N'
busbw1 scdino_allreduce_perf --sizes-from-model nochan.nml --in-chans 3 -n 1 -w 0
expect_rc 0
expect_grep '^#   head\+norm\+blocks.1\+blocks.0\+embed +122864 elements$'
# A bad deck is reported by the deck parser, status 2.
printf "&model embed_dimm = 48 /\n" > bad.nml
busbw1 scdino_allreduce_perf --sizes-from-model bad.nml
expect_rc 2
expect_grep "bad.nml:1"
finish
