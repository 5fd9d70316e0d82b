#!/bin/sh
# tests/eval/models.sh - &features checkpoints: two models (two checkpoints of a tiny run, under
# other names) on one shard set; calculation='features' writes run_dir/<name>/features_EEEE.h5 of
# each, 'knn' each model's report and the comparison knn_models.txt, whose numbers are those of
# single-checkpoint runs; 'knn' alone computing the missing features first (one launch, the same
# table); names that collide, a missing checkpoint, and checkpoints beside features.epochs refused
# before any work.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
scratch models_sh
train_data shards

train_deck run epochs=3 saveckp_freq=1 >train.nml
expect_exit 0 "$SCDINO" train.nml
mkdir -p models && cp run/checkpoint_0000.h5 models/a.h5 && cp run/checkpoint_0002.h5 models/b.pth.h5 || exit 99

two="checkpoints = 'models/a.h5', 'models/b.pth.h5'"

features_knn_deck features cmp "$two" >f.nml
expect_exit 0 "$SCDINO" f.nml
expect_grep 'features: model 2 of 2 \(features.checkpoints\): models/b.pth.h5 into cmp/b.pth'
features_knn_deck knn cmp "$two" >k.nml
expect_exit 0 "$SCDINO" k.nml
expect_grep 'kNN per model: 2 models in cmp/knn_models.txt'
for f in a/features_0000.h5 a/knn.txt a/knn.h5 b.pth/features_0002.h5 b.pth/knn.txt b.pth/knn.h5 knn_models.txt; do
  nchecks=$((nchecks + 1))
  [ -s "cmp/$f" ] || fail "cmp/$f missing"
done
sed 's/^/    | /' cmp/knn_models.txt

# The same as one checkpoint at a time.
for m in a:0 b.pth:2; do
  name=${m%:*} e=${m#*:}
  features_knn_deck features single$e "checkpoint = 'run/checkpoint_000$e.h5'" >s$e.nml
  expect_exit 0 "$SCDINO" s$e.nml
  features_knn_deck knn single$e >sk$e.nml
  expect_exit 0 "$SCDINO" sk$e.nml
  nchecks=$((nchecks + 2))
  h5diff cmp/$name/features_000$e.h5 single$e/features_000$e.h5 /features /features >/dev/null ||
    fail "model $name: features differ from the single run's"
  sed -e "s|cmp/$name/|single$e/|g" -e "s|models/$name.h5|run/checkpoint_000$e.h5|g" cmp/$name/knn.txt |
    cmp -s - single$e/knn.txt || { fail "model $name: knn.txt differs"; diff cmp/$name/knn.txt single$e/knn.txt >&2; }
  # Top-1 at k = 1, 5, 10 of the trained features, raw pixels and random init: knn.txt's columns 2, 6, 10.
  for col in 2 6 10; do
    want=$(awk -v c=$col '/^Accuracy in %/ { t = 1; next } t && /^ +[0-9]+[* ] / { printf "%s ", $c; n++ } n == 3 { exit }' \
      single$e/knn.txt)
    case $col in
      2) pat="^  $name +teacher +$e " ;;
      6) pat='^  raw pixels 6x6 ' ;;
      10) pat="^  random init \\(seed 5\\) of $name " ;;
    esac
    got=$(grep -E "$pat" cmp/knn_models.txt | awk '{ printf "%s %s %s ", $(NF - 2), $(NF - 1), $NF }')
    nchecks=$((nchecks + 1))
    [ -n "$want" ] && [ "$want" = "$got" ] || fail "model $name, column $col: table '$got', single run '$want'"
  done
done
nchecks=$((nchecks + 1))
[ "$(grep -c 'raw pixels' cmp/knn_models.txt)" = 1 ] || fail "the raw pixels not once"

# Refused before any work.
mkdir -p other && cp models/a.h5 other/ || exit 99
features_knn_deck features bad "checkpoints = 'models/a.h5', 'other/a.h5'" >e1.nml
deck_error e1.nml "checkpoints 'models/a.h5' and 'other/a.h5' would both write run_dir/a/"
features_knn_deck features bad "checkpoints = 'models/a.h5', 'models/c.h5'" >e2.nml
deck_error e2.nml "features.checkpoints: checkpoint 'models/c.h5' not found"
features_knn_deck features bad "$two, epochs = 'all'" >e3.nml
deck_error e3.nml 'features.epochs chooses run_dir.s checkpoints and checkpoints names models'
nchecks=$((nchecks + 1))
[ -e bad/a ] && fail "a refused run wrote bad/a/"

# One launch: 'knn' computes the features of the models that have none (here both, on two ranks when
# MPI is there), and its comparison is the two launches'.
features_knn_deck knn cmp2 "$two" >k2.nml
if [ "$MPIEXEC" != none ]; then
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" k2.nml
else
  expect_exit 0 "$SCDINO" k2.nml
fi
expect_grep 'kNN: 2 of 2 models without a features file: computing them first'
nchecks=$((nchecks + 1))
sed 's|cmp2/|cmp/|g' cmp2/knn_models.txt | cmp -s - cmp/knn_models.txt ||
  { fail "knn_models.txt of one launch differs from two launches'"; diff cmp/knn_models.txt cmp2/knn_models.txt >&2; }

finish
