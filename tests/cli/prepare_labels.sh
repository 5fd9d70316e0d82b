#!/bin/sh
# tests/cli/prepare_labels.sh - &data folder_depth_for_labels (scDINO's option): on a tree
# donor/condition/celltype/img.tif the classes come from the folder that many levels above each
# file (0: its own folder, the cell type; 1: the condition); the default, -1, stays ImageFolder's
# first level (the donor).  The file order does not change.  A depth deeper than a file's folders is
# a deck error naming the file; another depth on an existing shard set is refused.
. "$top_srcdir/tests/lib.sh"
scratch prepare_labels
for p in d1/ctrl/Tcell/a d1/ctrl/Bcell/b d1/stim/Tcell/c d2/ctrl/NK/d d2/stim/Bcell/e d2/stim/NK/f; do
  mkdir -p "tiffs/$(dirname $p)" && "$top_builddir/tests/fixtures/mktiff" "tiffs/$p.tif" 2 16 16 u16 ramp || exit 99
done

deck() { # deck SHARD_DIR DEPTH
  printf "&control calculation = 'prepare' /\n&data tiff_dir = 'tiffs', shard_dir = '%s', folder_depth_for_labels = %s /\n" "$1" "$2"
}
# classes DIR: the manifest's class names and the labels in file order, on one line
classes() {
  printf '%s | %s\n' "$(h5dump -d class_names "$1/manifest.h5" | sed -n 's/^ *([0-9]*): *//p' | tr -d '",' | tr '\n' ' ')" \
    "$(h5dump -d labels "$1/manifest.h5" | sed -n 's/^ *([0-9]*): *//p' | tr -d ',' | tr '\n' ' ' | tr -s ' ')"
}
check() { # check DIR WANTED
  nchecks=$((nchecks + 1))
  got=$(classes "$1")
  [ "$got" = "$2" ] || fail "$1: classes | labels = '$got', wanted '$2'"
}

# ImageFolder order of the files: d1/ctrl/Bcell/b, d1/ctrl/Tcell/a, d1/stim/Tcell/c, d2/ctrl/NK/d,
# d2/stim/Bcell/e, d2/stim/NK/f.
deck top -1 >top.nml
expect_exit 0 "$SCDINO" top.nml
check top "d1 d2  | 0 0 0 1 1 1 "
deck cell 0 >cell.nml
expect_exit 0 "$SCDINO" cell.nml
expect_grep "prepare: classes from the folder 0 level\(s\) above each file \(folder_depth_for_labels\): 3 classes"
check cell "Bcell NK Tcell  | 0 2 2 1 0 1 "
deck cond 1 >cond.nml
expect_exit 0 "$SCDINO" cond.nml
check cond "ctrl stim  | 0 0 1 0 1 1 "

# Deeper than the tree.
deck deep 3 >deep.nml
expect_exit 2 "$SCDINO" deep.nml
expect_grep "error: &data folder_depth_for_labels = 3: .*/tiffs/d1/ctrl/Bcell/b.tif has too few folder\(s\) above it under the root, fewer than folder_depth_for_labels \+ 1 = 4"
# Another depth on an existing set.
deck cell 1 >cell1.nml
expect_exit 2 "$SCDINO" cell1.nml
expect_grep "shard_dir 'cell' holds a complete shard set of other input: folder_depth_for_labels was 0, now 1"
finish
