#!/bin/sh
# busbw_model.sh - --sizes-from-model: the gradient buckets of a deck's &model (a tiny custom ViT:
# D=48, depth 2, patch 8, 3 channels, head 96/32/64) become the rows, each distinct size once, and
# the footer gives the all-reduce time of one training step.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/busbw_lib.sh"
scratch busbw_model

cat > tiny.nml <<'DECK'
&control calculation = 'train' /
&data channels = 0, 1, 2 /
&model arch = 'custom', embed_dim = 48, depth = 2, num_heads = 3, mlp_ratio = 4.0, patch_size = 8,
       out_dim = 64, head_hidden_dim = 96, head_bottleneck_dim = 32, head_nlayers = 3 /
DECK
# Buckets (elements): last layer 64x32 = 2048; head MLP 48x96+96 + 96x96+96 + 96x32+32 = 17120;
# norm 96; blocks 12x48^2 + 13x48 = 28272 (twice); patch 3x8x8x48 + 48 + cls 48 + pos (1+28^2)x48
# = 46992.  Sorted distinct float sizes: 384 8192 68480 113088 187968 bytes; 122800 elements.
busbw 2 scdino_allreduce_perf --sizes-from-model tiny.nml -n 2 -w 0
expect_rc 0
expect_grep '^# nThread 1 nGpus 1 minBytes 384 maxBytes 187968 step: 5\(buckets\) '
expect_grep '^# Model: 6 gradient buckets of tiny.nml, in the order backward issues them:$'
expect_grep '^#   head.last_layer +2048 elements$'
expect_grep '^#   blocks.1 +28272 elements$'
expect_grep '^#   patch_embed\+cls_token\+pos_embed +46992 elements$'
nchecks=$((nchecks + 1))
got=$(busbw_rows | cut -d, -f1,2 | tr '\n' ' ')
[ "$got" = "384,96 8192,2048 68480,17120 113088,28272 187968,46992 " ] || fail "rows '$got'"
expect_grep '^# Model step allreduce : [0-9.]+ us for 6 buckets, 491200 B \(in-place\); effective busbw [0-9.]+ GB/s$'
# The step time is the in-place times weighted by how often each size occurs (blocks: twice).
step=$(printf '%s\n' "$out" | sed -n 's/^# Model step allreduce : \([0-9.]*\) us.*/\1/p')
nchecks=$((nchecks + 1))
# (Within the rounding of the printed numbers: half a unit of each row's last digit, and of the step.)
busbw_rows | awk -F, -v step="$step" '
  function ulp(s,   d) { d = index(s, "."); return d ? 0.5 * 10 ^ -(length(s) - d) : 0.5 }
  { w = $1 == 113088 ? 2 : 1; t += w * $10; tol += w * ulp($10) }
  END { d = t - step; if (d < 0) d = -d; exit !(d <= tol + 0.05 + 1e-9) }' ||
  fail "step time $step is not the weighted sum of the rows"

# bfloat16 halves the bytes of the same buckets; reduce_scatter takes them too.
busbw 2 scdino_allreduce_perf --sizes-from-model tiny.nml -n 1 -w 0 -d bfloat16
expect_rc 0
expect_grep '^         192            96  bfloat16     sum      -1 '
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
expect_grep '^#   patch_embed\+cls_token\+pos_embed +46992 elements$'
# A bad deck is reported by the deck parser, status 2.
printf "&model embed_dimm = 48 /\n" > bad.nml
busbw1 scdino_allreduce_perf --sizes-from-model bad.nml
expect_rc 2
expect_grep "bad.nml:1"
finish
