#!/bin/sh
# tests/eval/epochs.sh - &features epochs: a tiny run of 3 epochs keeping every checkpoint_EEEE.h5,
# then calculation='features' and 'knn' with epochs = 'all' (three features files and reports, a
# kNN-vs-epoch table whose numbers are those of three single-checkpoint runs with &features
# checkpoint and &knn features; the same on two ranks; its plot), a list, 'last' as before (one
# file, no per-epoch outputs), the errors (an epoch without its file, a bad word, a list beside
# features.checkpoint), and a pipeline with epochs = 'all' whose table in pipeline.txt is the
# standalone one.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch epochs_sh
train_data shards

train_deck run epochs=3 saveckp_freq=1 >train.nml
expect_exit 0 "$SCDINO" train.nml
for e in 0000 0001 0002; do
  nchecks=$((nchecks + 1))
  [ -s run/checkpoint_$e.h5 ] || fail "run/checkpoint_$e.h5 missing"
done


# Every saved epoch.
features_knn_deck features run "epochs = 'all'" >fa.nml
expect_exit 0 "$SCDINO" fa.nml
expect_grep 'features: checkpoint 1 of 3 \(features.epochs\): run/checkpoint_0000.h5'
expect_grep 'features: checkpoint 3 of 3 \(features.epochs\): run/checkpoint_0002.h5'
features_knn_deck knn run "epochs = 'all'" >ka.nml
expect_exit 0 "$SCDINO" ka.nml
expect_grep 'kNN: features file 2 of 3 \(features.epochs\): run/features_0001.h5'
expect_grep 'kNN per epoch: 3 epochs in run/knn_epochs.txt'
for f in features_0000.h5 features_0001.h5 features_0002.h5 knn_0000.txt knn_0000.h5 knn_0001.txt knn_0001.h5 \
  knn_0002.txt knn_0002.h5 knn.txt knn.h5 knn_epochs.txt; do
  nchecks=$((nchecks + 1))
  [ -s "run/$f" ] || fail "run/$f missing"
done
nchecks=$((nchecks + 3))
ls run | grep -q tmp && fail "temporary files left in run"
cmp -s run/knn.txt run/knn_0002.txt || fail "knn.txt is not the last epoch's report"
[ "$(grep -Ec '^ +[0-9]+  features_000[0-2]\.h5 ' run/knn_epochs.txt)" = 3 ] || fail "not 3 epoch rows in the table"
sed 's/^/    | /' run/knn_epochs.txt
# Each epoch's own network: the features differ.
nchecks=$((nchecks + 1))
h5diff -q run/features_0000.h5 run/features_0002.h5 /features /features >/dev/null &&
  fail "features_0000.h5 and features_0002.h5 are the same: not each epoch's network"

# The same numbers, one checkpoint at a time (the last with the baselines, the others without, as
# the per-epoch reports).
for e in 0 1 2; do
  E=000$e
  base=.false.; [ $e = 2 ] && base=.true.
  features_knn_deck features single$e "checkpoint = 'run/checkpoint_$E.h5'" >s$e.nml
  expect_exit 0 "$SCDINO" s$e.nml
  features_knn_deck knn single$e "" "baselines = $base" >sk$e.nml
  expect_exit 0 "$SCDINO" sk$e.nml
  nchecks=$((nchecks + 3))
  h5diff run/features_$E.h5 single$e/features_$E.h5 /features /features >/dev/null ||
    fail "features_$E.h5 differs from the single-checkpoint run's"
  # The same report; the earlier epochs' say where the baselines are.
  note='  note     : baselines: in knn_0002.txt, the last epoch.s \(the same for every epoch\)'
  [ $e = 2 ] || grep -Eq "^$note$" run/knn_$E.txt || fail "knn_$E.txt does not say where the baselines are"
  grep -Ev "^$note$" run/knn_$E.txt >k$e.txt
  sed "s|single$e/|run/|g" single$e/knn.txt | cmp -s - k$e.txt ||
    { fail "knn_$E.txt differs from the single run's knn.txt"; diff single$e/knn.txt k$e.txt >&2; }
  # Top-1 of the trained features at k = 1, 5, 10: the second column of knn.txt's accuracy table.
  want=$(awk '/^Accuracy in %/ { t = 1; next } t && /^ +[0-9]+[* ] / { printf "%s ", $2; n++ } n == 3 { exit }' \
    single$e/knn.txt)
  got=$(awk -v e=$e '$1 == e && $2 ~ /^features_/ { printf "%s %s %s ", $3, $4, $5 }' run/knn_epochs.txt)
  nchecks=$((nchecks + 1))
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "epoch $e: table row '$got', single run '$want'"
done
# The baselines once, as the last single run's raw-pixel and random-init columns.
for col in 3 4; do
  want=$(awk -v c=$col '/^Accuracy in %/ { t = 1; next } t && /^ +[0-9]+[* ] / { printf "%s ", $(2 + 4 * (c - 2)); n++ }
    n == 3 { exit }' single2/knn.txt)
  label=$([ $col = 3 ] && echo 'raw pixels 6x6' || echo 'random init')
  got=$(grep "^  $label" run/knn_epochs.txt | awk '{ printf "%s %s %s ", $(NF - 2), $(NF - 1), $NF }')
  nchecks=$((nchecks + 1))
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "baseline $label: table '$got', single run '$want'"
done

# examples/plot_run.py draws the table and the collapse diagnostics (when matplotlib is there); a damaged table is one line, exit 3.
if [ "$PYTHON3" != none ] && "$PYTHON3" -c 'import matplotlib, h5py' 2>/dev/null; then
  expect_exit 0 "$PYTHON3" "$top_srcdir/examples/plot_run.py" run --out plots
  expect_grep '^loss.png: loss, schedules, teacher entropy and KL$'
  nchecks=$((nchecks + 1))
  [ -s plots/knn_epochs.png ] || fail "plots/knn_epochs.png missing"
  mkdir -p damaged && { head -3 run/knn_epochs.txt; echo '       1  features_0001.h5  x'; } >damaged/knn_epochs.txt
  expect_exit 3 "$PYTHON3" "$top_srcdir/examples/plot_run.py" damaged
  expect_grep '^plot_run.py: damaged/knn_epochs.txt: .*line 4 is not a row of the table'
else
  echo "note: plot check not run (no Python with matplotlib)"
fi

# Two ranks: the same files and table.
if [ "$MPIEXEC" != none ]; then
  mkdir -p two && cp run/checkpoint_000?.h5 two/ || exit 99
  features_knn_deck features two "epochs = 'all'" >f2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" f2.nml
  features_knn_deck knn two "epochs = 'all'" >k2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" k2.nml
  nchecks=$((nchecks + 2))
  h5diff run/features_0001.h5 two/features_0001.h5 /features /features >/dev/null || fail "2 ranks: other features"
  sed 's|two/|run/|g' two/knn_epochs.txt | cmp -s - run/knn_epochs.txt || fail "2 ranks: another knn_epochs.txt"
fi

# A list, in any order: those epochs, ascending, the same rows.
mkdir -p list && cp run/checkpoint_0000.h5 run/checkpoint_0002.h5 list/ || exit 99
features_knn_deck features list "epochs = '2', '0'" >fl.nml
expect_exit 0 "$SCDINO" fl.nml
features_knn_deck knn list "epochs = '2', '0'" >kl.nml
expect_exit 0 "$SCDINO" kl.nml
nchecks=$((nchecks + 2))
[ -f list/features_0001.h5 ] && fail "epoch 1 was not asked for"
grep -E '^ +[0-9]+  features_' list/knn_epochs.txt | sed 's/^ *//' >l.rows
grep -E '^ +(0|2)  features_' run/knn_epochs.txt | sed 's/^ *//' | cmp -s - l.rows || fail "list rows differ from 'all'"

# 'last' (the default) as before: checkpoint.h5, one features file, one report, no table.
mkdir -p last && cp run/checkpoint.h5 last/ || exit 99
features_knn_deck features last >f1.nml
expect_exit 0 "$SCDINO" f1.nml
expect_nogrep '\(features.epochs\)'
features_knn_deck knn last >k1.nml
expect_exit 0 "$SCDINO" k1.nml
nchecks=$((nchecks + 2))
[ "$(ls last)" = "$(printf '%s\n' checkpoint.h5 features_0002.h5 input.echo.nml knn.h5 knn.txt)" ] ||
  fail "'last' wrote other files: $(ls last | tr '\n' ' ')"
h5diff run/features_0002.h5 last/features_0002.h5 /features /features >/dev/null || fail "'last' features differ"

# Errors, before any work: an epoch without its checkpoint, a bad word, a list beside one checkpoint,
# a kNN epoch without its features file.
features_knn_deck features run "epochs = '0', '7'" >e1.nml
deck_error e1.nml 'features.epochs names epoch 7, but run/checkpoint_0007.h5 is not there; the epochs of run_dir.s checkpoint_EEEE.h5 are: 0, 1, 2'
features_knn_deck features run "epochs = 'first'" >e2.nml
deck_error e2.nml "epochs = 'first': give 'last', 'all' or 0-based epoch numbers"
features_knn_deck features run "epochs = 'all', '2'" >e3.nml
deck_error e3.nml "epochs = 'all' stands alone"
features_knn_deck features run "epochs = 'all', checkpoint = 'run/checkpoint_0001.h5'" >e4.nml
deck_error e4.nml 'features.checkpoint names one checkpoint, but epochs'
features_knn_deck knn list "epochs = '1'" >e5.nml
deck_error e5.nml 'list/features_0001.h5 is not there; the epochs of run_dir.s features_EEEE.h5 are: 0, 2'

# A pipeline with every epoch: the same training, so the same table, also in pipeline.txt.
train_deck prun epochs=3 saveckp_freq=1 | sed "s/calculation = 'train'/calculation = 'pipeline'/" >p.nml
cat >>p.nml <<'EOF'
&features resize = 16, subset = 'all', batch_size = 16, anndata = .false., epochs = 'all' /
&knn k = 1, 5, 10, pixel_size = 6 /
&attention in_pipeline = .false. /
EOF
expect_exit 0 "$SCDINO" p.nml
expect_grep 'kNN Top-1 accuracy in % of the teacher network per epoch'
nchecks=$((nchecks + 3))
sed 's|prun/|run/|g' prun/knn_epochs.txt | cmp -s - run/knn_epochs.txt ||
  { fail "the pipeline's table differs"; diff prun/knn_epochs.txt run/knn_epochs.txt >&2; }
sed -n '/kNN Top-1 accuracy in % of/,/random init/p' prun/pipeline.txt | sed 's/^  //' >pt.rows
tail -n +2 prun/knn_epochs.txt | cmp -s - pt.rows || { fail "pipeline.txt's table is not knn_epochs.txt's"; diff pt.rows prun/knn_epochs.txt >&2; }
grep -q 'knn_EEEE.txt, knn_EEEE.h5' prun/pipeline.txt || fail "pipeline.txt does not list the per-epoch reports"

finish
