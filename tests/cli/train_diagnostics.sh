#!/bin/sh
# tests/cli/train_diagnostics.sh - collapse and learning diagnostics (doc/algorithm.md §4.5, issue 37).
# Tiny decks of 3 epochs (no warning before epoch 2):
#  - a healthy one, on 1 and 2 ranks: no warning; every log.txt line has the teacher entropy, the
#    batch-mean entropy, the KL part and the centre norm within their bounds (0 <= H <= H(batch
#    mean) <= ln K, KL >= 0, loss = H + KL); the per-epoch line; the metrics file's gauges; a stop
#    inside an epoch and a restart give the same diagnostics as the uninterrupted run;
#  - a teacher temperature of 100 (uniform targets): the warning at epoch 2 naming the keys;
#  - centring off (center_momentum = 1: the centre stays 0) with a sharp teacher: the collapse to
#    one prototype, warned at epoch 2 naming center_momentum;
#  - the collapsed deck as a pipeline: pipeline.txt shows the last epoch's diagnostics and says that
#    the trained network did not learn more than the baselines, naming the collapse.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch train_diagnostics
train_data shards
LNK=4.1588830833596715 # ln 64, the decks' out_dim

# check_log FILE: every line's diagnostics within their bounds.
check_log() {
  nchecks=$((nchecks + 1))
  [ "$(grep -c '"steps": [0-9]*, "teacher_entropy": [0-9.e+-]*, "teacher_batch_entropy": [0-9.e+-]*, "kl": [0-9.e+-]*, "center_norm": [0-9.e+-]*}$' "$1")" = 3 ] ||
    { fail "$1: not 3 lines ending in the diagnostics"; cat "$1" >&2; return; }
  for n in 1 2 3; do
    nchecks=$((nchecks + 1))
    awk -v l="$(json_field "$1" $n train_loss)" -v h="$(json_field "$1" $n teacher_entropy)" \
        -v b="$(json_field "$1" $n teacher_batch_entropy)" -v kl="$(json_field "$1" $n kl)" \
        -v c="$(json_field "$1" $n center_norm)" -v lnk=$LNK 'BEGIN {
      ok = h >= 0 && h <= b + 1e-6 && b <= lnk + 1e-6 && kl >= -1e-6 && c >= 0
      d = l - h - kl; if (d < 0) d = -d
      exit !(ok && d <= 1e-12 * (l > 1 ? l : 1)) }' ||
      fail "$1 line $n: diagnostics out of bounds: $(sed -n "${n}p" "$1")"
  done
}

# A healthy deck: no warning, the fields, the log line, the metrics file's gauges.
train_deck ok epochs=3 batch_size_per_rank=8 | sed "s|&system |\&system metrics_file = 'ok.prom', |" >ok.nml
expect_exit 0 "$SCDINO" ok.nml
expect_nogrep "the teacher's outputs"
expect_grep "Teacher targets: entropy [0-9.]+ per image, [0-9.]+ of the batch mean \(ln out_dim = 4.1589\); KL part of the loss [0-9.]+; centre norm [0-9.e+-]+$"
check_log ok/log.txt
for m in scdino_teacher_entropy scdino_teacher_batch_entropy scdino_loss_kl scdino_center_norm; do
  nchecks=$((nchecks + 1))
  grep -Eq "^$m\{[^}]*\} [0-9][0-9.e+-]*$" ok.prom || fail "ok.prom: no finite $m"
done
nchecks=$((nchecks + 1))
grep -Eq '^scdino_log_out_dim\{[^}]*\} 4.158883' ok.prom || fail "ok.prom: scdino_log_out_dim is not ln 64"

# Stopped inside epoch 1 and restarted: the epoch sums come back from the checkpoint.
train_deck ok2 epochs=3 batch_size_per_rank=8 max_steps=7 >ok2a.nml
expect_exit 0 "$SCDINO" ok2a.nml
train_deck ok2 epochs=3 batch_size_per_rank=8 restart=.true. >ok2b.nml
expect_exit 0 "$SCDINO" ok2b.nml
expect_grep "restart: continuing from ok2/checkpoint.h5 at epoch 1, iteration 2"
for n in 1 2 3; do
  for k in train_loss teacher_entropy teacher_batch_entropy kl center_norm; do
    nchecks=$((nchecks + 1))
    a=$(json_field ok/log.txt $n $k) b=$(json_field ok2/log.txt $n $k)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "ok2/log.txt line $n: $k $b, uninterrupted run $a"
  done
done

# Two ranks: the sums of both ranks' targets.
if [ "$MPIEXEC" != none ]; then
  train_deck ok3 epochs=3 batch_size_per_rank=4 >ok3.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" ok3.nml
  expect_nogrep "the teacher's outputs"
  check_log ok3/log.txt
fi

# Teacher temperature 100: uniform targets (H = ln K), warned once the grace epochs are over.
train_deck uni epochs=3 batch_size_per_rank=8 teacher_temp=100 warmup_teacher_temp=100 >uni.nml
expect_exit 0 "$SCDINO" uni.nml
expect_grep "warning: epoch 2: the teacher's outputs are nearly uniform \(teacher entropy 4.159 and loss [0-9.]+, ln out_dim = 4.159\): the network learns nothing; the teacher is not sharpening: try a lower &training teacher_temp and warmup_teacher_temp, a lower momentum_teacher"
expect_nogrep "epoch [01]: the teacher's outputs"
expect_nogrep "collapsed to one prototype"
check_log uni/log.txt
nchecks=$((nchecks + 1))
awk -v h="$(json_field uni/log.txt 3 teacher_entropy)" -v lnk=$LNK 'BEGIN { exit !(lnk - h < 1e-4) }' ||
  fail "uni: teacher entropy $(json_field uni/log.txt 3 teacher_entropy) is not ln 64"

# Centring off and a sharp teacher: one prototype for every image.
train_deck one epochs=3 batch_size_per_rank=8 center_momentum=1.0 >one.nml
expect_exit 0 "$SCDINO" one.nml
expect_grep "warning: epoch 2: the teacher's outputs collapsed to one prototype \(entropy of the batch-mean target [0-9.]+ < 0.500 nats: every image gets nearly the same target\); the centring is too weak: check &training center_momentum"
expect_nogrep "outputs are nearly uniform"
check_log one/log.txt
nchecks=$((nchecks + 1))
[ "$(grep -c '"center_norm": 0}$' one/log.txt)" = 3 ] || fail "one: the centre moved with center_momentum = 1"

# The same as a pipeline on 3 classes of cells: its summary says the network did not learn.
"$top_builddir/scdino_demo_data" -o tiff -n 20 -c 3 -q || exit 99
cat >p.nml <<EOF
&control calculation = 'pipeline', run_dir = 'p', seed = 3 /
&data tiff_dir = 'tiff', shard_dir = 'pshards', channels = 1, 2, 4 /
&model arch = 'custom', patch_size = 8, embed_dim = 16, depth = 1, num_heads = 2, out_dim = 64,
       head_hidden_dim = 32, head_bottleneck_dim = 16 /
&crops global_size = 32, local_size = 16, local_crops_number = 2 /
&training epochs = 3, batch_size_per_rank = 8, warmup_epochs = 1, lr = 0.05, center_momentum = 1.0 /
&features resize = 32 /
&knn k = 1, 3 /
&attention in_pipeline = .false. /
EOF
expect_exit 0 "$SCDINO" p.nml
expect_grep "warning: epoch 2: the teacher's outputs collapsed to one prototype"
nchecks=$((nchecks + 4))
grep -Eq "^  last epoch  : teacher entropy [0-9.]+ per image, [0-9.]+ of the batch mean \(ln out_dim = 4.159\); KL [0-9.]+; centre norm 0$" p/pipeline.txt ||
  fail "pipeline.txt: no diagnostics of the last epoch"
flat=$(tr '\n' ' ' <p/pipeline.txt | tr -s ' ') # the summary's lines joined
case $flat in *"WARNING: the trained network did not learn more than the baselines: its best Top-1, "*) ;;
  *) fail "pipeline.txt: no verdict" ;; esac
printf '%s\n' "$flat" | grep -Eq "\(.* points each on [0-9]+ test rows\)\. Likely causes:" || fail "pipeline.txt: the test rows"
case $flat in *"- the teacher's outputs collapsed to one prototype (batch-mean entropy "*"in the last epoch): the centring is too weak: check &training center_momentum"*) ;;
  *) fail "pipeline.txt: the collapse not named"; cat p/pipeline.txt >&2 ;; esac
finish
