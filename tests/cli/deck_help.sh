#!/bin/sh
# tests/cli/deck_help.sh - `scdino --help-input` lists every key of src/input/config_keys.def under its
# group, in table order, with lines that fit a terminal.
. "$top_srcdir/tests/lib.sh"
scratch deck_help
expect_exit 0 "$SCDINO" --help-input
printf '%s\n' "$out" >help.txt
sed -n 's/^CFG_[A-Z]*(\([a-z_0-9]*\), *\([a-z_0-9]*\),.*/\1.\2/p' "$top_srcdir/src/input/config_keys.def" >table.txt
awk '/^&[a-z_0-9]+  \(/ { g = substr($1, 2) } /^  [a-z_0-9]+( |$)/ { print g "." $1 }' help.txt >listed.txt
nchecks=$((nchecks + 3))
nkeys=$(wc -l <table.txt)
[ "$nkeys" -gt 50 ] || fail "only $nkeys keys found in config_keys.def"
if ! cmp -s table.txt listed.txt; then
  fail "--help-input does not list exactly the keys of config_keys.def"
  diff table.txt listed.txt | sed 's/^/    /' >&2
fi
wide=$(awk 'length > 79' help.txt)
[ -z "$wide" ] || fail "lines wider than 79 columns: $wide"
# Each group with its doc, the type, default and range forms.
for g in $(sed -n 's/^CFG_GROUP(\([a-z_0-9]*\),.*/\1/p' "$top_srcdir/src/input/config_keys.def"); do
  expect_grep "^&$g  \("
done
expect_grep "^  calculation +one of 'prepare', 'train', 'features', 'knn',"
expect_grep "'pipeline'; required$"
expect_grep "^  epochs +integer, 1 to 1000000; default 10$"
expect_grep "^  lr +real, 0 to 10; default 0.0005$"
expect_grep "^  k +integer array \(up to 16\), each 1 to 1000000; default 5,\$"
expect_grep "^ +10, 50, 100, 200, 500\$"
expect_grep "^  augment +logical; default .true.$"
expect_grep "^  channel_names +string array \(up to 64\); default: empty$"
echo "$nkeys keys listed"
finish
