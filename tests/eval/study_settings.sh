#!/bin/sh
# tests/eval/study_settings.sh - hyperparameter studies (&study settings) through the binary, on the
# 40-image, 3-channel shard set with the tiny training model: a 3-setting teacher-temperature study
# on 2 ranks in 2 groups of 1 (log lines, study.txt rows, study.h5's settings and values, every
# run's echoed deck holding its value, the settings taking effect); one setting's checkpoints
# bit-identical to its echoed deck run alone as a pipeline; restart (finished settings skipped, a
# removed one run again, bit-identical; a signal-stopped study continued, bit-identical); channel
# sets with settings (every set with every setting); the plot, also of a version-2 study.h5; deck
# errors (an unknown key, a key a study may not vary, two settings with one deck) and run folders
# that clash only once the manifest names the channels, refused before any run; the example deck
# input/demo_hparam_study.nml passes the deck checks.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/faults/fault_lib.sh"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch study_settings_sh
train_data shards

TEMPS="settings = 'teacher_temp = 0.04', 'teacher_temp = 0.07', 'teacher_temp = 0.1', ranks_per_run = 1"
R1=teacher_temp_0.04 R2=teacher_temp_0.07 R3=teacher_temp_0.1

# same_runs A B [RUNS]: every checkpoint of the runs bit-identical
same_runs() {
  for r in ${3:-$R1 $R2 $R3}; do
    for f in checkpoint.h5 checkpoint_0000.h5 checkpoint_0001.h5; do ckpt_same "$1/$r/$f" "$2/$r/$f"; done
  done
}

# ---- a 3-setting teacher-temperature study on 2 ranks in 2 groups (each run its own metrics file)
study_deck hs "$TEMPS" "" "" "metrics_file = 'hs.prom'" >hs.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" hs.nml
expect_grep 'study: 3 settings on 2 ranks: 2 groups of 1, each running its share of the runs at the same time'
expect_grep "\[$R1\] ==== study run 1 of 3: $R1 \(channels 0, 1, 2; teacher_temp = 0.04\) in hs/$R1 on 1 rank ===="
expect_grep "\[$R2\] ==== study run 2 of 3: $R2 \(channels 0, 1, 2; teacher_temp = 0.07\) in hs/$R2 on 1 rank ===="
expect_grep "\[$R3\] ==== study run 3 of 3: $R3 \(channels 0, 1, 2; teacher_temp = 0.1\) in hs/$R3 on 1 rank ===="
expect_grep '3 settings, shards in shards, on 2 ranks \(1 per run\)'
expect_grep '==== scdino study summary ===='
for r in $R1 $R2 $R3; do
  for f in pipeline.txt knn.h5 checkpoint_0001.h5 log.txt input.echo.nml; do
    nchecks=$((nchecks + 1))
    [ -s "hs/$r/$f" ] || fail "hs/$r/$f missing or empty"
  done
done
no_tmp hs hs/$R1 hs/$R2 hs/$R3
# Runs of the two groups train at once: each writes hs.<run>.prom, labelled with its run_dir.
nchecks=$((nchecks + 1))
[ ! -e hs.prom ] || fail "hs.prom written: the runs share one metrics file"
for r in $R1 $R2 $R3; do
  nchecks=$((nchecks + 1))
  grep -q "^scdino_epoch{run_dir=\"hs/$r\"" "hs.$r.prom" && grep -q "^  metrics_file = 'hs.$r.prom'" "hs/$r/input.echo.nml" ||
    fail "hs.$r.prom: not run $r's metrics, or its echo does not name it"
done
# Every run's echoed deck is the pipeline that reruns it alone, with its own value.
for v in 0.04 0.07 0.1; do
  nchecks=$((nchecks + 1))
  e=hs/teacher_temp_$v/input.echo.nml
  grep -q "calculation = 'pipeline'" $e && grep -q "^  teacher_temp = $v  " $e && grep -q "run_dir = 'hs/teacher_temp_$v'" $e &&
    ! grep -q "settings = '" $e || fail "$e is not the pipeline deck of teacher_temp = $v"
done
# The settings take effect: the runs' weights differ.
nchecks=$((nchecks + 1))
"$top_builddir/tests/fixtures/ckpt_compare" -e hs/$R1/checkpoint.h5 hs/$R2/checkpoint.h5 /teacher >/dev/null 2>&1 &&
  fail "teacher_temp 0.04 and 0.07 gave the same weights"
# study.txt: one row per setting with its value; study.h5 the same numbers.
nchecks=$((nchecks + 1))
grep -E -q "^  run +channels +teacher_temp +final loss +k +trained" hs/study.txt || fail "study.txt has no teacher_temp column"
for v in 0.04 0.07 0.1; do
  nchecks=$((nchecks + 1))
  grep -E -q "^  teacher_temp_$v +0,1,2 +$v +[0-9.]+ +1 " hs/study.txt || fail "study.txt has no row for teacher_temp = $v"
done
if [ "$PYTHON3" != none ] && "$PYTHON3" -c 'import h5py' 2>/dev/null; then
  cat >check.py <<'PY'
import json, h5py, numpy as np
s = h5py.File("hs/study.h5", "r")
assert s.attrs["format"].decode() == "scdino-study" and s.attrs["version"] == 3
names = [n.decode() for n in s["name"][:]]
assert names == ["teacher_temp_0.04", "teacher_temp_0.07", "teacher_temp_0.1"], names
assert [t.decode() for t in s["setting"][:]] == ["teacher_temp = 0.04", "teacher_temp = 0.07", "teacher_temp = 0.1"]
assert [t.decode() for t in s["channel_set"][:]] == ["", "", ""]
assert [t.decode() for t in s["channels"][:]] == ["0,1,2"] * 3
assert list(s["settings"]) == ["training.teacher_temp"], list(s["settings"])
assert list(s["settings/training.teacher_temp"][:]) == [0.04, 0.07, 0.1]
assert s.attrs["ranks"] == 2 and s.attrs["ranks_per_run"] == 1
for i, n in enumerate(names):
    k = h5py.File("hs/%s/knn.h5" % n, "r")
    for g in ("trained", "raw_pixels", "random_init"):
        assert np.array_equal(s[g]["top1"][i], k[g]["top1"][:]), (n, g)
    loss = [json.loads(l)["train_loss"] for l in open("hs/%s/log.txt" % n)][-1]
    assert s["final_loss"][i] == loss, (s["final_loss"][i], loss)
print("study.h5 holds every setting's value and numbers")
PY
  expect_exit 0 "$PYTHON3" check.py
  expect_grep 'study.h5 holds every setting'
  if "$PYTHON3" -c 'import matplotlib' 2>/dev/null; then
    expect_exit 0 "$PYTHON3" "$top_srcdir/examples/plot_study.py" hs
    nchecks=$((nchecks + 1))
    [ -s hs/plots/study.png ] || fail "hs/plots/study.png missing"
    # a study.h5 of version 2 (channel sets only, before the settings) is still drawn
    mkdir -p v2 && cp hs/study.h5 v2/ && "$PYTHON3" - <<'PY' || exit 99
import h5py
with h5py.File("v2/study.h5", "r+") as f:
    del f["setting"], f["settings"]
    f.attrs["version"] = 2
PY
    expect_exit 0 "$PYTHON3" "$top_srcdir/examples/plot_study.py" v2
    nchecks=$((nchecks + 1))
    [ -s v2/plots/study.png ] || fail "v2/plots/study.png missing"
  fi
fi

# ---- bit-identity: a setting's echoed deck run alone as a pipeline on 1 rank
sed "s|run_dir = 'hs/$R2'|run_dir = 'alone'|" hs/$R2/input.echo.nml >alone.nml
bounded 0 "$SCDINO" alone.nml
for f in checkpoint.h5 checkpoint_0000.h5 checkpoint_0001.h5; do ckpt_same hs/$R2/$f alone/$f; done

# ---- restart: finished settings are skipped; a removed one runs again, bit-identical
cp -r hs hs_first
study_deck hs "$TEMPS" "restart = .true." >hsr.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" hsr.nml
for r in $R1 $R2 $R3; do expect_grep "study: hs/$r is finished \(pipeline.txt, checkpoint at epoch 2\); skipped"; done
expect_nogrep 'pipeline step'
expect_grep '==== scdino study summary ===='
rm -rf hs/$R3
bounded 0 $MPIEXEC -n 2 "$SCDINO" hsr.nml
expect_grep "study: hs/$R1 is finished"
expect_grep "study: hs/$R2 is finished"
expect_grep "\[$R3\] restart: hs/$R3/checkpoint.h5 does not exist; starting from scratch"
same_runs hs_first hs

# ---- stop and restart in 2 groups: SIGTERM at global step 3 of every run, then the same deck
# with restart = .true. continues every run from its checkpoint, bit-identically
study_deck stop "$TEMPS" "" "signal_at_step = 3" >stop.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" stop.nml
expect_grep "\[$R1\] train: stopped after 4 steps"
expect_grep 'study: stopped on a signal before every run was finished'
study_deck stop "$TEMPS" "restart = .true." >stopr.nml
bounded 0 $MPIEXEC -n 2 "$SCDINO" stopr.nml
expect_grep "\[$R1\] restart: continuing from stop/$R1/checkpoint.h5"
expect_grep '==== scdino study summary ===='
same_runs hs_first stop

# ---- channel sets with settings: every set with every setting, on 1 rank
study_deck both "channel_sets = '0,1,2', 'ch2', settings = 'teacher_temp = 0.07', 'lr = 0.02, epochs = 3'" >both.nml
bounded 0 "$SCDINO" both.nml
expect_grep 'study: 2 channel sets x 2 settings = 4 runs on 1 rank'
expect_grep '==== study run 4 of 4: ch2_lr_0.02_epochs_3 \(channels 2; lr = 0.02, epochs = 3\) in both/ch2_lr_0.02_epochs_3'
expect_grep '4 runs \(2 channel sets x 2 settings\), shards in shards'
for r in ch0_ch1_ch2_teacher_temp_0.07 ch0_ch1_ch2_lr_0.02_epochs_3 ch2_teacher_temp_0.07 ch2_lr_0.02_epochs_3; do
  nchecks=$((nchecks + 1))
  [ -s both/$r/pipeline.txt ] || fail "both/$r did not run"
done
nchecks=$((nchecks + 3))
[ "$(wc -l <both/ch2_lr_0.02_epochs_3/log.txt)" = 3 ] || fail "epochs = 3 did not train 3 epochs"
grep -q "^  channels = 2 " both/ch2_teacher_temp_0.07/input.echo.nml &&
  grep -q "^  teacher_temp = 0.07 " both/ch2_teacher_temp_0.07/input.echo.nml ||
  fail "both/ch2_teacher_temp_0.07/input.echo.nml lacks its channel or its setting"
grep -E -q "^  ch2_lr_0.02_epochs_3 +2 +0.04 +0.02 +3 +[0-9.]+ +1 " both/study.txt ||
  fail "study.txt: no row with the channel set's and the setting's columns"

# ---- errors: exit 2, nothing run
bad() { # bad PATTERN STUDY_KEYS
  study_deck bad "$2" >bad.nml
  bounded 2 "$SCDINO" bad.nml
  expect_grep "$1"
  nchecks=$((nchecks + 1))
  [ -e bad ] && fail "bad/ was made despite the error"
  rm -rf bad
}
bad "bad.nml:10:8: settings\(2\) = 'teacher_tmp = 0.07': unknown key 'teacher_tmp'; did you mean 'teacher_temp'\?" \
  "settings = 'teacher_temp = 0.04', 'teacher_tmp = 0.07'"
bad "settings\(1\) = 'k = 5': knn.k cannot be varied by a study: the evaluation is the same for every run" "settings = 'k = 5'"
bad "settings\(1\) = 'momentum_teacher = 2': momentum_teacher = 2 is out of range: it must be between 0 and 1" \
  "settings = 'momentum_teacher = 2'"
bad "settings\(2\) = 'teacher_temp = 0.040' gives the same deck as settings\(1\) = 'teacher_temp = 0.04'" \
  "settings = 'teacher_temp = 0.04', 'teacher_temp = 0.040'"
bad "settings\(1\) = 'warmup_epochs = 3': warmup_epochs = 3 exceeds epochs = 2" "settings = 'warmup_epochs = 3'"
# Folders that are one only once the manifest names the channels: set x with lr and seed, set
# x_lr_0.0001 with seed (both x_lr_0.0001_seed_3), refused before any run.
rm -rf xs && cp -r shards xs && "$top_builddir/tests/hostile/h5edit" xs/manifest.h5 strs channel_names 'x,x_lr_0.0001,z' ||
  exit 99
study_deck bad "channel_sets = 'x', 'x_lr_0.0001', settings = 'lr = 1e-4, seed = 3', 'seed = 3'" |
  sed "s/shard_dir = 'shards'/shard_dir = 'xs'/" >bad.nml
bounded 2 "$SCDINO" bad.nml
expect_grep "&study channel_sets\(2\) = 'x_lr_0.0001' with settings\(2\) = 'seed = 3' would write the folder bad/x_lr_0.0001_seed_3 of channel_sets\(1\) = 'x' with settings\(1\) = 'lr = 1e-4, seed = 3'"
nchecks=$((nchecks + 1))
left=$(ls -A bad | grep -v -x input.echo.nml)
[ -z "$left" ] || fail "a run started despite the error: bad/ holds $left"

# ---- the example deck passes the deck checks (it stops at the missing demo TIFFs: nothing to train)
bounded 3 "$SCDINO" "$top_srcdir/input/demo_hparam_study.nml"
expect_grep "tiff_dir 'demo/tiff': No such file or directory"
expect_nogrep 'errors? in .*demo_hparam_study.nml'
rm -rf demo

finish
