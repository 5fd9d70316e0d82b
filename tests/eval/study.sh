#!/bin/sh
# tests/eval/study.sh - calculation='study' through the binary on a 40-image, 3-channel shard set
# with the tiny training model: a 2-set study on 1 rank (per-set runs, study.txt and study.h5
# against each set's knn.h5 and log.txt, the plot); the grouping (a set's checkpoints bit-identical
# on 2 ranks alone and inside a 4-rank study of 2 groups, on 1 rank alone and in 2 groups of 1, and
# in 4 groups of 1 with three idle); stop and restart (finished sets skipped, the stopped one
# continued, bit-identical to an uninterrupted study) on 1, 2 and 4 ranks; comm groups themselves
# (test_comm_group on 1, 2 and 4 ranks); bad decks: unknown channel index or name, repeated sets,
# ranks_per_run that does not divide the ranks or exceeds them, data.channels in a study; sets
# whose folders clash (also only in case), whose folder is an output of the study, empty or longer
# than NAME_MAX, numbers that are one channel's index and another's name, all refused before any
# set runs, from the deck's channel names or the manifest's; a set's folder locked by another job.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch study_sh
train_data shards

# sets_deck RUN_DIR SETS [STUDY_KEYS [TRAINING_KEYS [DEBUG_KEYS]]]: a study of channel sets
sets_deck() { study_deck "$1" "channel_sets = $2${3:+, $3}" "${4:-}" "${5:-}"; }
SETS="'0,1,2', 'ch2'"
S1=ch0_ch1_ch2 S2=ch2

# same_sets A B: every checkpoint of both sets bit-identical
same_sets() {
  for s in $S1 $S2; do
    for f in checkpoint.h5 checkpoint_0000.h5 checkpoint_0001.h5; do ckpt_same "$1/$s/$f" "$2/$s/$f"; done
  done
}

# ---- a 2-set study on 1 rank
sets_deck one "$SETS" >one.nml
bounded 0 "$SCDINO" one.nml
expect_grep 'study: 2 channel sets on 1 rank: 1 group of 1, each running one set after the other'
expect_grep '==== study set 1 of 2: ch0_ch1_ch2 \(channels 0, 1, 2\) in one/ch0_ch1_ch2 on 1 rank ===='
expect_grep '==== study set 2 of 2: ch2 \(channels 2\) in one/ch2 on 1 rank ===='
expect_grep '==== scdino study summary ===='
expect_grep 'best trained Top-1: '
for f in one/study.txt one/study.h5 one/$S1/pipeline.txt one/$S1/knn.h5 one/$S2/checkpoint_0001.h5 \
  one/$S2/features_0001.h5 one/$S2/input.echo.nml; do
  nchecks=$((nchecks + 1))
  [ -s "$f" ] || fail "$f missing or empty"
done
no_tmp one one/$S1 one/$S2
# A set's echoed deck is the pipeline that reruns it alone.
nchecks=$((nchecks + 1))
grep -q "calculation = 'pipeline'" one/$S2/input.echo.nml && grep -q "channels = 2 " one/$S2/input.echo.nml ||
  fail "one/$S2/input.echo.nml is not the set's pipeline deck"
if [ "$PYTHON3" != none ]; then
  cat >check.py <<'PY'
import json, h5py, numpy as np
s = h5py.File("one/study.h5", "r")
names = [n.decode() for n in s["name"][:]]
assert names == ["ch0_ch1_ch2", "ch2"], names
assert [c.decode() for c in s["channels"][:]] == ["0,1,2", "2"]
assert [c.decode() for c in s["channel_set"][:]] == ["0,1,2", "ch2"]
assert list(s["k"][:]) == [1, 3] and s.attrs["ranks"] == 1 and s.attrs["ranks_per_run"] == 1
assert s.attrs["format"].decode() == "scdino-study" and s.attrs["version"] == 3
assert [t.decode() for t in s["setting"][:]] == ["", ""] and len(s["settings"]) == 0
rows = [l.split() for l in open("one/study.txt")]
for i, n in enumerate(names):
    k = h5py.File("one/%s/knn.h5" % n, "r")
    for g in ("trained", "raw_pixels", "random_init"):
        for t in ("top1", "top2"):
            assert np.array_equal(s[g][t][i], k[g][t][:]), (n, g, t)
    loss = [json.loads(l)["train_loss"] for l in open("one/%s/log.txt" % n)][-1]
    assert s["final_loss"][i] == loss, (s["final_loss"][i], loss)
    row = [r for r in rows if r and r[0] == n][0]
    assert abs(float(row[2]) - loss) < 1e-6 and row[3] == "1", row
    cells = [float(x) for x in row[4:] if x != "/"]
    want = [k[g][t][0] for g in ("trained", "raw_pixels", "random_init") for t in ("top1", "top2")]
    assert all(abs(a - b) < 0.006 for a, b in zip(cells, want)) and len(cells) == 6, (cells, want)
print("study.h5 and study.txt match the sets' runs")
PY
  expect_exit 0 "$PYTHON3" check.py
  expect_grep 'study.h5 and study.txt match'
  if "$PYTHON3" -c 'import matplotlib' 2>/dev/null; then
    expect_exit 0 "$PYTHON3" "$top_srcdir/examples/plot_study.py" one
    nchecks=$((nchecks + 1))
    [ -s one/plots/study.png ] || fail "one/plots/study.png missing"
    expect_exit 2 "$PYTHON3" "$top_srcdir/examples/plot_study.py" one --k 7
    expect_grep "k = 7 is not one of the study's k \(1, 3\)"
  fi
fi

# ---- the grouping: a set's result depends on its own rank count only
sets_deck alone2 "$SETS" >alone2.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" alone2.nml
sets_deck groups4 "$SETS" "ranks_per_run = 2" >groups4.nml
bounded 0 $MPIEXEC -n 4 "$SCDINO" groups4.nml
expect_grep 'study: 2 channel sets on 4 ranks: 2 groups of 2, each running its share of the sets at the same time'
expect_grep '\[ch2\] ==== study set 2 of 2: ch2 \(channels 2\) in groups4/ch2 on 2 ranks ===='
expect_grep '\[ch0_ch1_ch2\] train: backend cpu, gradient all-reduce mpi over 2 ranks'
expect_grep 'on 4 ranks \(2 per set\)'
same_sets alone2 groups4
sets_deck groups2 "$SETS" "ranks_per_run = 1" >groups2.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" groups2.nml
expect_grep '2 groups of 1'
same_sets one groups2
# one set in 4 groups of 1 rank: three groups idle (warned), the set as on 1 rank alone
sets_deck idle4 "'ch2'" "ranks_per_run = 1" >idle4.nml
bounded 0 $MPIEXEC -n 4 "$SCDINO" idle4.nml
expect_grep 'warning: study: 4 groups of 1 rank for 1 set: 3 groups stay idle'
for f in checkpoint.h5 checkpoint_0001.h5; do ckpt_same one/$S2/$f idle4/$S2/$f; done
# (the 1-rank and 2-rank runs differ: the total batch is another)
nchecks=$((nchecks + 1))
"$top_builddir/tests/fixtures/ckpt_compare" -e one/$S2/checkpoint.h5 alone2/$S2/checkpoint.h5 /teacher >/dev/null 2>&1 &&
  fail "1 and 2 ranks gave the same weights: the comparison proves nothing"

# ---- comm groups on 1, 2 and 4 ranks
expect_exit 0 $MPIEXEC -n 1 "$top_builddir/tests/unit/core/test_comm_group" 1
expect_exit 0 $MPIEXEC -n 2 "$top_builddir/tests/unit/core/test_comm_group" 1
expect_exit 0 $MPIEXEC -n 2 "$top_builddir/tests/unit/core/test_comm_group" 2
expect_exit 0 $MPIEXEC -n 4 "$top_builddir/tests/unit/core/test_comm_group" 2
expect_exit 0 $MPIEXEC -n 4 "$top_builddir/tests/unit/core/test_comm_group" 4

# ---- stop and restart on 1 rank: SIGTERM at global step 3 of every set's training
sets_deck stop1 "$SETS" "" "" "signal_at_step = 3" >stop1.nml
bounded 0 "$SCDINO" stop1.nml
expect_grep 'train: stopped after 4 steps of this launch \(SIGTERM\)'
expect_grep 'study: stopped on a signal before every set was finished; run the same deck again with &training restart = \.true\.'
expect_nogrep 'study set 2 of 2'
nchecks=$((nchecks + 2))
[ -e stop1/$S2 ] && fail "set 2 started after set 1 was stopped"
[ -e stop1/study.txt ] && fail "study.txt written by a stopped study"
# restart: set 1 continues and ends; set 2 starts and is stopped at the same step
sets_deck stop1 "$SETS" "" "restart = .true." "signal_at_step = 3" >stop1r.nml
bounded 0 "$SCDINO" stop1r.nml
expect_grep "restart: continuing from stop1/$S1/checkpoint.h5 at epoch 0, iteration 4"
expect_grep "restart: stop1/$S2/checkpoint.h5 does not exist; starting from scratch"
expect_grep 'study: stopped on a signal'
# restart again: set 1 is finished and skipped, set 2 continues
bounded 0 "$SCDINO" stop1r.nml
expect_grep "study: stop1/$S1 is finished \(pipeline.txt, checkpoint at epoch 2\); skipped"
expect_grep "restart: continuing from stop1/$S2/checkpoint.h5 at epoch 0, iteration 4"
expect_grep '==== scdino study summary ===='
same_sets one stop1
# everything finished: a restart skips every set and writes the summary again
bounded 0 "$SCDINO" stop1r.nml
expect_grep "study: stop1/$S2 is finished"
expect_nogrep 'pipeline step'
expect_grep '==== scdino study summary ===='

# ---- stop and restart in groups: 2 ranks in 2 groups of 1, 4 ranks in 2 groups of 2 (rank 0 of
# every group raises the signal)
for n in 2 4; do
  r=$((n / 2))
  sets_deck stop$n "$SETS" "ranks_per_run = $r" "" "signal_at_step = 3" >stop$n.nml
  bounded 0 $MPIEXEC -n $n "$SCDINO" stop$n.nml
  expect_grep "\[$S1\] train: stopped after 4 steps"
  expect_grep "\[$S2\] train: stopped after 4 steps"
  expect_grep 'study: stopped on a signal'
  sets_deck stop$n "$SETS" "ranks_per_run = $r" "restart = .true." >stop${n}r.nml
  bounded 0 $MPIEXEC -n $n "$SCDINO" stop${n}r.nml
  expect_grep "\[$S2\] restart: continuing from stop$n/$S2/checkpoint.h5 at epoch [01], iteration [04] \(global step 4\)"
  expect_grep '==== scdino study summary ===='
done
same_sets one stop2
same_sets alone2 stop4

# ---- bad decks: clear errors, exit 2, nothing trained
bad() { # bad RANKS PATTERN SETS [STUDY_KEYS]
  sets_deck bad "$3" "$4" >bad.nml
  if [ "$1" = 1 ]; then
    bounded 2 "$SCDINO" bad.nml
  else
    bounded 2 $MPIEXEC -n "$1" "$SCDINO" bad.nml
  fi
  expect_grep "$2"
  nchecks=$((nchecks + 1))
  if [ -e bad/ch0 ] || [ -e bad/ch0_ch1 ]; then fail "a set ran despite the error"; fi
  rm -rf bad
}
bad 1 "&study channel_sets\(2\) = '0,5': channel 5 does not exist \(the images have 3 channels, 0 to 2\)" "'0', '0,5'"
bad 1 "&study channel_sets\(1\) = 'ch0,GFP': no channel is named 'GFP' \(the channels: 'ch0', 'ch1', 'ch2'" "'ch0,GFP'"
bad 2 "&study channel_sets\(2\) = '1,0' selects the same channels as channel_sets\(1\) = 'ch0,ch1'" "'ch0,ch1', '1,0'"
bad 1 "bad.nml:10:8: channel_sets\(2\) = '1, 0' selects the same channels as channel_sets\(1\) = '0,1'" "'0,1', '1, 0'"
bad 1 "channel_sets\(1\) = '0,,1' has an empty channel" "'0,,1'"
bad 1 "channel_sets\(1\) = '' is empty" "''"
bad 2 "&study ranks_per_run = 3 is more than the 2 ranks of this launch" "'0', '1'" "ranks_per_run = 3"
bad 4 "&study ranks_per_run = 3 does not divide the 4 ranks of this launch" "'0', '1'" "ranks_per_run = 3"
sets_deck bad "'0'" | sed "s/train_fraction = 0.75/train_fraction = 0.75, channels = 0, 1/" >bad.nml
bounded 2 "$SCDINO" bad.nml
expect_grep "channels is not used with calculation = 'study'"
# The folders, when the deck names the channels: 'a_b,c' and 'a,b_c' would both write bad/a_b_c.
sets_deck bad "'a_b,c', 'a,b_c'" | sed "s/train_fraction = 0.75/train_fraction = 0.75, channel_names = 'a_b', 'c', 'a', 'b_c'/" >bad.nml
bounded 2 "$SCDINO" bad.nml
expect_grep "bad.nml:10:8: channel_sets\(2\) = 'a,b_c' would write the folder bad/a_b_c of channel_sets\(1\) = 'a_b,c' \(their channel names joined by _\)"

# ---- the sets' folders and channels against the manifest's channel names, before any set runs:
# every refusal is exit 2 with nothing trained (bad/ holds the study's echoed deck only).
# named SHARDS NAMES: a copy of the shards whose manifest names the channels NAMES (a,b,c)
named() {
  rm -rf "$1" && cp -r shards "$1" && "$top_builddir/tests/hostile/h5edit" "$1/manifest.h5" strs channel_names "$2" ||
    exit 99
}
# bad_named SHARDS RANKS PATTERN SETS [STUDY_KEYS]
bad_named() {
  sets_deck bad "$4" "$5" | sed "s/shard_dir = 'shards'/shard_dir = '$1'/" >bad.nml
  if [ "$2" = 1 ]; then
    bounded 2 "$SCDINO" bad.nml
  else
    bounded 2 $MPIEXEC -n "$2" "$SCDINO" bad.nml
  fi
  expect_grep "$3"
  nchecks=$((nchecks + 1))
  left=$(ls -A bad | grep -v -x input.echo.nml)
  [ -z "$left" ] || fail "a set ran or left files despite the error: bad/ holds $left"
  rm -rf bad
}
# Two sets, one folder: on 2 ranks in groups of 1 both groups would write bad/x_y at once.
named xy_shards 'x,y,x_y'
bad_named xy_shards 2 "&study channel_sets\(2\) = 'x_y' would write the folder bad/x_y of channel_sets\(1\) = 'x,y'" \
  "'x,y', 'x_y'" "ranks_per_run = 1"
named case_shards 'BF,bf,DNA'
bad_named case_shards 1 "would write the folder bad/BF of channel_sets\(1\) = 'BF' \(as bf, the same folder where case is ignored\)" "'BF', 'bf'"
# A number that is the index of one channel and the name of another; a set named like the study's
# own outputs (after a set that would have trained first).
named num_shards '1,0,study.h5'
bad_named num_shards 1 "&study channel_sets\(1\) = '0': 0 is ambiguous: the index of channel 0 \(named '1'\) and the name of channel 1; a channel in double quotes is always a name: write \"1\" for channel 0, \"0\" for channel 1" "'0'"
bad_named num_shards 1 "&study channel_sets\(2\) = 'study.h5': the folder name 'study.h5' is one of the study's own outputs in run_dir" \
  "'\"1\"', 'study.h5'"
# An empty channel name: that set's folder would be run_dir itself.
named empty_shards 'a,,c'
bad_named empty_shards 1 "&study channel_sets\(2\) = '1': channel 1 has an empty name: the set's folder would be run_dir itself" "'a', '1'"
# Longer than a file name may be (NAME_MAX): five names of 63 characters joined.
long=$(printf '%063d' 0 | tr 0 L)
"$top_builddir/tests/fixtures/train_mkdata" long_shards 40 5 20 20 >/dev/null || exit 99
"$top_builddir/tests/hostile/h5edit" long_shards/manifest.h5 strs channel_names "${long}A,${long}B,${long}C,${long}D,${long}E" ||
  exit 99
bad_named long_shards 1 "&study channel_sets\(2\) = '0,1,2,3,4': the folder name 'L+_L+[.][.][.]' has 319 bytes; a file name may have at most [0-9]+ here" \
  "'0', '0,1,2,3,4'"
# A set's folder is locked by its group while it runs: a lock of another live process is refused.
mkdir -p bad/ch2 && echo "host=$(hostname) pid=$$ job= since=1" >bad/ch2/.scdino.lock || exit 99
sets_deck bad "'ch2'" >bad.nml
bounded 2 "$SCDINO" bad.nml
expect_grep "run_dir 'bad/ch2' is in use by another scdino job \(pid $$ on host"
nchecks=$((nchecks + 1))
[ -e bad/ch2/pipeline.txt ] && fail "the set ran in a locked folder"
rm -rf bad

finish
