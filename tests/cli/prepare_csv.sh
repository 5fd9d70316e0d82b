#!/bin/sh
# tests/cli/prepare_csv.sh - input without class folders, and metadata (&data file_list, labels,
# path_column, label_column): a CSV file list with a label column and metadata columns prepared on
# 1 and 2 ranks into identical shards; the metadata in the shards, the manifest and the features
# file; the kNN accuracy per metadata group against a hand computation; an unlabelled tree
# (labels = 'none') and an unlabelled CSV of other images: prepared, trained on, features from the
# labelled run's checkpoint, kNN refused, the pipeline without its kNN step; the stale-shards check
# for both inputs; the deck errors of the new keys.
. "$top_srcdir/tests/lib.sh"
scratch prepare_csv
MK="$top_builddir/tests/fixtures/mktiff"

# 30 images in two clusters of identical pictures (x: seed 1, y: seed 2).  Cluster x is class A from
# donor d1 except rows x03, x08, x13 (donor d2, labelled B); cluster y the reverse.
mkdir -p imgs/plate1 imgs/plate2 || exit 99
i=1
while [ $i -le 15 ]; do
  n=$(printf %02d $i)
  "$MK" imgs/plate1/x$n.tif 2 16 16 u16 ramp 1 && "$MK" imgs/plate2/y$n.tif 2 16 16 u16 ramp 2 || exit 99
  i=$((i + 1))
done
{
  echo "path,label,donor,plate"
  for n in 01 02 03 04 05 06 07 08 09 10 11 12 13 14 15; do
    case $n in 03 | 08 | 13) echo "imgs/plate1/x$n.tif,B,d2,P1" ;; *) echo "imgs/plate1/x$n.tif,A,d1,P1" ;; esac
    case $n in 03 | 08 | 13) echo "\"imgs/plate2/y$n.tif\",A,d2,\"P2, \"\"left\"\"\"" ;;
      *) echo "$dir/imgs/plate2/y$n.tif,B,d1,\"P2, \"\"left\"\"\"" ;; esac
  done
} >list.csv || exit 99

h5vals() { # h5vals FILE DATASET: its values on one line, numbers blank-separated, strings by |
  v=$(h5dump -y -w 0 -d "$2" "$1" | sed -n '/DATA {/,/}/p' | sed '1d;$d' | sed 's/^ *//')
  case $v in \"*) printf '%s' "$v" | sed 's/", "/"|"/g' ;; *) printf '%s' "$v" | sed 's/, / /g' ;; esac
}
check_eq() { # check_eq WHAT GOT WANTED
  nchecks=$((nchecks + 1))
  [ "$2" = "$3" ] || fail "$1 = '$2', wanted '$3'"
}
same_dirs() { # same_dirs A B: the same file names and bytes
  nchecks=$((nchecks + 1))
  [ "$(ls "$1")" = "$(ls "$2")" ] || { fail "$1 and $2 hold different files"; return; }
  for f in "$1"/*; do cmp -s "$f" "$2/$(basename "$f")" || fail "$f and $2/$(basename "$f") differ"; done
}
model='&model arch = '"'"'custom'"'"', patch_size = 4, embed_dim = 8, depth = 1, num_heads = 2, out_dim = 16,
  head_hidden_dim = 8, head_bottleneck_dim = 4 /
&crops global_size = 8, local_size = 4, local_crops_number = 1 /
&training epochs = 1, batch_size_per_rank = 4, warmup_epochs = 0 /
&features resize = 8, batch_size = 8, subset = '"'"'all'"'"' /
&attention images_per_class = 1, image_size = 12 /
&system device = '"'"'cpu'"'"', loader_threads = 1 /'
deck() { # deck CALCULATION RUN_DIR DATA-KEYS [EXTRA]
  printf "&control calculation = '%s', run_dir = '%s', seed = 5 /\n&data %s /\n%s\n%s\n" "$1" "$2" "$3" "$model" "$4"
}

# ---- the CSV with labels and metadata, on 1 and 2 ranks ----
deck prepare run "file_list = 'list.csv', shard_dir = 'c1', images_per_shard = 8" >c1.nml
expect_exit 0 "$SCDINO" c1.nml
expect_grep "prepare: 30 files listed in $dir/list.csv, 2 classes from column 'label'; 2 metadata column\(s\): donor, plate"
expect_grep 'prepare: 30 images in 4 shard\(s\) under c1'
if [ "$MPIEXEC" != none ]; then
  deck prepare run "file_list = 'list.csv', shard_dir = 'c2', images_per_shard = 8" >c2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" c2.nml
  same_dirs c1 c2
fi
check_eq "class_names" "$(h5vals c1/manifest.h5 class_names)" '"A"|"B"'
check_eq "labels" "$(h5vals c1/manifest.h5 labels)" "0 1 0 1 1 0 0 1 0 1 0 1 0 1 1 0 0 1 0 1 0 1 0 1 1 0 0 1 0 1"
check_eq "metadata_columns" "$(h5vals c1/manifest.h5 metadata_columns)" '"donor"|"plate"'
check_eq "label_source" "$(h5dump -a label_source c1/manifest.h5 | sed -n 's/^ *(0): //p')" '"column"'
check_eq "shard 0 donors" "$(h5vals c1/shard-00000.h5 metadata/donor)" '"d1"|"d1"|"d1"|"d1"|"d2"|"d2"|"d1"|"d1"'
check_eq "shard 0 plates" "$(h5vals c1/shard-00000.h5 metadata/plate)" \
  '"P1"|"P2, "left""|"P1"|"P2, "left""|"P1"|"P2, "left""|"P1"|"P2, "left""'
check_eq "shard 0 paths" "$(h5vals c1/shard-00000.h5 paths | cut -d'|' -f1-2)" "\"imgs/plate1/x01.tif\"|\"$dir/imgs/plate2/y01.tif\""

# Again: nothing to do.  A changed metadata value is another file list: refused.
expect_exit 0 "$SCDINO" c1.nml
expect_grep "c1 is complete and matches list.csv \(30 files, 30 images\): nothing to do"
sed 's/x05.tif,A,d1/x05.tif,A,d9/' list.csv >list2.csv && cp list.csv list.keep && cp list2.csv list.csv || exit 99
deck_error c1.nml "shard_dir 'c1' holds a complete shard set of other input: it was made from another file list"
# ... also where training checks its shards first (check_tiff_tree).
deck train run "file_list = 'list.csv', shard_dir = 'c1'" >t1.nml
deck_error t1.nml "shard_dir 'c1' holds a complete shard set of other input"
cp list.keep list.csv || exit 99

# ---- pipeline on the labelled set: features carry the metadata; kNN per group ----
# k = 7 with 24 reference rows: whatever the split, a cluster keeps at least 15 - 6 = 9 reference rows
# at similarity 1 (identical images), of which at most 3 are of the minority class, so every row is
# predicted its cluster's majority class: donor d1's test rows are all right, donor d2's all wrong
# (raw pixels; the networks map identical images alike too).  numpy.random.seed(40);
# shuffle(arange(30)) ends 25 24 5 7 27 6: the test rows, of donors d2 d2 d2 d1 d1 d1 and plates
# P2 P1 P2 P2 P2 P1 (row 2(n-1) is x_n, row 2(n-1)+1 is y_n), so Top-1 is 50 %.
deck pipeline run "file_list = 'list.csv', shard_dir = 'c1'" \
  "&knn k = 7, train_fraction = 0.8, pixel_size = 4 /" >p1.nml
expect_exit 0 "$SCDINO" p1.nml
expect_grep 'pipeline step 4: knn'
f=run/features_0000.h5
check_eq "features donor" "$(h5vals $f metadata/donor | cut -d'|' -f1-8)" '"d1"|"d1"|"d1"|"d1"|"d2"|"d2"|"d1"|"d1"'
check_eq "features metadata_columns" "$(h5vals $f metadata_columns)" '"donor"|"plate"'
check_eq "features labels" "$(h5vals $f labels | cut -d' ' -f1-6)" "0 1 0 1 1 0"
check_eq "kNN donor values" "$(h5vals run/knn.h5 groups/donor/values)" '"d1"|"d2"'
check_eq "kNN donor test rows" "$(h5vals run/knn.h5 groups/donor/test_support)" "3 3"
check_eq "kNN donor raw pixels Top-1" "$(h5vals run/knn.h5 groups/donor/top1_raw_pixels)" "100 0"
check_eq "kNN plate values" "$(h5vals run/knn.h5 groups/plate/values)" '"P1"|"P2, "left""'
check_eq "kNN plate test rows" "$(h5vals run/knn.h5 groups/plate/test_support)" "2 4"
check_eq "kNN plate raw pixels Top-1" "$(h5vals run/knn.h5 groups/plate/top1_raw_pixels)" "50 50"
check_eq "kNN grouping columns" "$(h5vals run/knn.h5 group_columns)" '"donor"|"plate"'
check_eq "kNN raw pixels Top-1" "$(h5vals run/knn.h5 raw_pixels/top1)" "50"
for s in trained random_init; do
  nchecks=$((nchecks + 1))
  h5dump -d groups/donor/top1_$s -d groups/donor/top2_$s run/knn.h5 >/dev/null 2>&1 || fail "knn.h5 lacks top1/top2_$s"
done
# Two ranks, every test row in a block of its own: each row's prediction comes from the rank that
# owns its block, and the groups are the same.
if [ "$MPIEXEC" != none ]; then
  deck knn run2 "shard_dir = 'c1'" \
    "&knn features = 'run/features_0000.h5', k = 7, train_fraction = 0.8, pixel_size = 4, block_rows = 1 /" >k2.nml
  expect_exit 0 $MPIEXEC -n 2 "$SCDINO" k2.nml
  for obj in donor/values donor/test_support donor/value_of_row donor/top1_trained donor/top1_raw_pixels \
    donor/top1_random_init donor/top2_trained plate/top1_trained plate/top1_raw_pixels plate/top1_random_init; do
    nchecks=$((nchecks + 1))
    h5diff run/knn.h5 run2/knn.h5 "/groups/$obj" "/groups/$obj" >/dev/null ||
      fail "knn.h5 /groups/$obj differs between 1 and 2 ranks"
  done
fi
nchecks=$((nchecks + 1))
grep -A3 "per value of the metadata column 'donor' at k = 7" run/knn.txt | grep -E -q '^  d2 +3 +[0-9.]+/ *[0-9.]+ +0\.00/' ||
  fail "knn.txt: no donor table with d2 at 0.00 for raw pixels: $(grep -A3 "column 'donor'" run/knn.txt)"

# ---- an unlabelled tree (labels = 'none'): every TIFF under tiff_dir ----
mkdir -p tree/a/b tree/c || exit 99
"$MK" tree/top.tif 2 16 16 u16 ramp 3 && "$MK" tree/a/b/1.tif 2 16 16 u16 ramp 4 && "$MK" tree/a/2.tif 2 16 16 u16 ramp 5 &&
  "$MK" tree/c/3.tif 2 16 16 u16 ramp 6 && "$MK" tree/c/4.tif 2 16 16 u16 ramp 7 && "$MK" tree/c/5.tif 2 16 16 u16 ramp 8 ||
  exit 99
deck train runu "tiff_dir = 'tree', labels = 'none', shard_dir = 'u'" >u.nml
expect_exit 0 "$SCDINO" u.nml
expect_grep "prepare: 6 TIFF files, unlabelled \(labels = 'none'\)"
nchecks=$((nchecks + 1))
grep -q '"epoch": 0' runu/log.txt || fail "no epoch in runu/log.txt"
check_eq "unlabelled tree paths" "$(h5vals u/shard-00000.h5 paths)" '"top.tif"|"a/2.tif"|"a/b/1.tif"|"c/3.tif"|"c/4.tif"|"c/5.tif"'
check_eq "unlabelled tree labels" "$(h5vals u/manifest.h5 labels)" "-1 -1 -1 -1 -1 -1"
check_eq "unlabelled tree classes" "$(h5dump -d class_names u/manifest.h5 | grep -c DATASPACE)" 1
check_eq "unlabelled tree class count" "$(h5dump -d class_names u/manifest.h5 | sed -n 's/.*SIMPLE { ( \([0-9]*\) ).*/\1/p')" 0
# A file added: the shards are stale.
"$MK" tree/c/6.tif 2 16 16 u16 ramp 9 || exit 99
deck_error u.nml "shard_dir 'u' holds a complete shard set of other input: it was made from another file list \(6 files, now 7\)"
rm tree/c/6.tif
# The same tree with its folders as classes is other input too.
deck prepare runu "tiff_dir = 'tree', shard_dir = 'u'" >u2.nml
deck_error u2.nml "shard_dir 'u' holds a complete shard set of other input"

# ---- a second, unlabelled set of other images with a CSV of metadata ----
mkdir -p new || exit 99
{
  echo "well,path,donor"
  for n in 1 2 3 4 5 6 7 8; do
    "$MK" new/n$n.tif 2 16 16 u16 ramp $((20 + n)) || exit 99
    echo "W$n,new/n$n.tif,d$((n % 2 + 3))"
  done
} >new.csv
deck prepare runn "file_list = 'new.csv', shard_dir = 'n'" >n.nml
expect_exit 0 "$SCDINO" n.nml
expect_grep "prepare: 8 files listed in $dir/new.csv, unlabelled; 2 metadata column\(s\): well, donor"
check_eq "unlabelled CSV labels" "$(h5vals n/manifest.h5 labels)" "-1 -1 -1 -1 -1 -1 -1 -1"
# Features of the new images from the labelled run's checkpoint.
deck features runn "shard_dir = 'n'" | sed "s|^&features |\&features checkpoint = 'run/checkpoint.h5', |" >nf.nml
expect_exit 0 "$SCDINO" nf.nml
expect_grep 'features: 8 x 8 written to runn/features_0000.h5'
check_eq "new features labels" "$(h5vals runn/features_0000.h5 labels)" "-1 -1 -1 -1 -1 -1 -1 -1"
check_eq "new features wells" "$(h5vals runn/features_0000.h5 metadata/well)" '"W1"|"W2"|"W3"|"W4"|"W5"|"W6"|"W7"|"W8"'
check_eq "new features donors" "$(h5vals runn/features_0000.h5 metadata/donor)" '"d4"|"d3"|"d4"|"d3"|"d4"|"d3"|"d4"|"d3"'
deck knn runn "shard_dir = 'n'" >nk.nml
deck_error nk.nml "kNN needs labelled rows, but runn/features_0000.h5 names no classes"
# The pipeline on it: trained, features and attention maps; kNN left out.
deck pipeline runp "file_list = 'new.csv', shard_dir = 'n'" >np.nml
expect_exit 0 "$SCDINO" np.nml
expect_grep 'pipeline: kNN left out: the images of n have no labels'
expect_grep 'kNN         : left out \(the images have no labels\)'
nchecks=$((nchecks + 2))
[ ! -e runp/knn.h5 ] || fail "runp/knn.h5 written for unlabelled images"
[ "$(find runp/attention/unlabelled -name 'attn-head*.png' | wc -l)" = 4 ] || fail "attention maps of the unlabelled set"
# A balanced sampler needs classes.
deck train runb "shard_dir = 'n'" | sed "s/^&training /\&training sampler = 'balanced', /" >nb.nml
deck_error nb.nml "sampler = 'balanced' draws a class first, but the images of n have no labels"

# ---- deck errors of the new keys ----
deck prepare run "file_list = 'list.csv', tiff_dir = 'tree'" >e1.nml
deck_error e1.nml "e1\.nml:[0-9]+:[0-9]+: set one of tiff_dir and file_list"
deck prepare run "tiff_dir = 'tree', labels = 'column'" >e2.nml
deck_error e2.nml "labels = 'column' takes the classes from a column of file_list, which is not set"
deck prepare run "file_list = 'list.csv', folder_depth_for_labels = 1" >e3.nml
deck_error e3.nml "folder_depth_for_labels applies to classes from the folders of tiff_dir, not to file_list"
deck prepare run "file_list = 'new.csv', labels = 'column', shard_dir = 'e4'" >e4.nml
deck_error e4.nml "new\.csv:1: no column 'label' for the labels \(&data label_column, labels = 'column'\); the header names 'well', 'path', 'donor'"
nchecks=$((nchecks + 1))
[ ! -e e4 ] || fail "a refused file list left e4 behind"
finish
