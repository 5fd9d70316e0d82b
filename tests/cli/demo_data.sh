#!/bin/sh
# tests/cli/demo_data.sh - scdino_demo_data: the ImageFolder tree it promises (classes, names, 50 x 50
# x 5 uint16 channels-last TIFF as prepare reads it), the same files for the same seed whatever
# the thread count or -n / -c, other files for another seed, and its argument errors.
. "$top_srcdir/tests/lib.sh"
DEMO="$top_builddir/scdino_demo_data"
scratch demo_data
expect_exit 0 env OMP_NUM_THREADS=2 "$DEMO" -o a -n 4 -s 7
expect_grep 'scdino_demo_data: 32 images \(8 classes x 4\) in a'
expect_exit 0 env OMP_NUM_THREADS=1 "$DEMO" -o b -n 4 -s 7 -q
expect_exit 0 "$DEMO" -o c -n 4 -s 8 -q
nchecks=$((nchecks + 5))
[ "$(ls a | tr '\n' ' ')" = "B NK T4 T8 granulocyte mono_classical mono_nonclassical pDC " ] ||
  fail "classes: $(ls a | tr '\n' ' ')"
[ "$(ls a/NK | tr '\n' ' ')" = "NK_00000.tiff NK_00001.tiff NK_00002.tiff NK_00003.tiff " ] || fail "files: $(ls a/NK)"
diff -r a b >/dev/null || fail "same seed, different files with 1 and 2 threads"
cmp -s a/B/B_00000.tiff c/B/B_00000.tiff && fail "seeds 7 and 8 give the same image"
# An image depends only on (seed, class, index), not on -n or -c: scripts/demo.sh fingerprints the
# generator by writing just the first image this way.
expect_exit 0 "$DEMO" -o d -n 1 -c 1 -s 7 -q
nchecks=$((nchecks + 3))
[ "$(ls d | tr '\n' ' ')" = "B " ] || fail "-c 1: classes $(ls d | tr '\n' ' ')"
cmp -s a/B/B_00000.tiff d/B/B_00000.tiff || fail "-n 1 -c 1 gives another first image than -n 4"
cmp -s a/B/B_00000.tiff a/B/B_00001.tiff && fail "two images of a class are the same"
[ "$(find a -name '*.tiff' | wc -l)" = 32 ] || fail "not 32 files"
cat >p.nml <<EOF2
&control calculation = 'prepare' /
&data tiff_dir = 'a', shard_dir = 'shards' /
EOF2
expect_exit 0 "$SCDINO" p.nml
expect_grep 'images are 5 channel\(s\) x 50 x 50, uint16 \(stored as uint16\)'
expect_grep 'prepare: 32 images in 1 shard\(s\)'
expect_exit 2 "$DEMO" -n 3
expect_grep 'usage: scdino_demo_data -o DIR'
expect_exit 2 "$DEMO" -o x -n many
expect_grep '-n wants a number'
expect_exit 2 "$DEMO" -o x -c 9
finish
