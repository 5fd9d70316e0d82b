#!/bin/sh
# tests/cli/deck_help.sh - `scdino --help-input` lists every key of src/input/config_keys.def under its
# group, in table order, with lines that fit a terminal, each with its restart policy and upstream
# names; --help-input=markdown lists them too, as one table row each, and doc/input.md is exactly
# its output; --help-input=scdino-map is README.md's table of scDINO's settings, exactly as README
# has it between its markers (neither stale: `make input-doc`).
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
expect_grep "'pipeline', 'study'; required$"
expect_grep "^  epochs +integer, 1 to 1000000; default 10$"
expect_grep "^  lr +real, 0 to 10; default 0.0005$"
expect_grep "^  k +integer array \(up to 16\), each 1 to 1000000; default 5,\$"
expect_grep "^ +10, 50, 100, 200, 500\$"
expect_grep "^  augment +logical; default .true.$"
expect_grep "^  channel_names +string array \(up to 64\); default: empty$"
# The restart policy and the upstream names, after the doc.
expect_grep "^  seed +integer, 0 to 2147483647; default 40$"
expect_grep "^ {24}On restart: must stay as in the checkpoint.$"
expect_grep "^ {24}On restart: may change, with a warning.$"
expect_grep "^ {24}scDINO: meta.seed.$"
expect_grep "^ {24}scDINO: meta.name_of_run, meta.output_dir.$"
# The Markdown form: a row per key under its group's heading, and doc/input.md up to date.
expect_exit 0 "$SCDINO" --help-input=markdown
printf '%s\n' "$out" >input.md
awk '/^## / { g = $2 } /^\| `[a-z_0-9]+` \|/ { k = $2; gsub(/`/, "", k); print g "." k }' input.md >listed_md.txt
nchecks=$((nchecks + 2))
if ! cmp -s table.txt listed_md.txt; then
  fail "--help-input=markdown does not list exactly the keys of config_keys.def"
  diff table.txt listed_md.txt | sed 's/^/    /' >&2
fi
if ! cmp -s input.md "$top_srcdir/doc/input.md"; then
  fail "doc/input.md is stale: run 'make input-doc' in the build directory and commit it"
  diff "$top_srcdir/doc/input.md" input.md | head -20 | sed 's/^/    /' >&2
fi
expect_grep '^\| `attention` \| one of .flash., .gemm., .cudnn. \| `.flash.` \| '
expect_grep '^\| `calculation` \| .* \| required \| '
expect_grep '^\| `batch_size_per_rank` \| .*\. On restart: may change, with a warning. scDINO: `train_scDINO.batch_size_per_gpu`. \|$'
# README's map: a row per key with an upstream name, and the rows without a key of their own.
expect_exit 0 "$SCDINO" --help-input=scdino-map
printf '\n%s\n\n' "$out" >map.md
expect_grep '^\| `train_scDINO.batch_size_per_gpu` \| `&training batch_size_per_rank` \|$'
expect_grep '^\| `meta.name_of_run`, `meta.output_dir` \| `&control run_dir` \|$'
expect_grep '^\| `train_scDINO.epochs` \| `&training epochs` \(upstream trains epochs\+1: set 11 to match its 10\) \|$'
expect_grep '^\| `train_scDINO.num_gpus` \| the number of MPI ranks \(`mpirun -np`\) \|$'
sed -n '/^<!-- scdino-map: /,/^<!-- scdino-map end -->$/p' "$top_srcdir/README.md" | sed '1d;$d' >readme_map.md
nchecks=$((nchecks + 1))
if ! cmp -s map.md readme_map.md; then
  fail "README.md's table of scDINO's settings is stale: run 'make input-doc' in the build directory and commit it"
  diff readme_map.md map.md | head -20 | sed 's/^/    /' >&2
fi
echo "$nkeys keys listed"
finish
