# tests/lib.sh - helpers for the shell tests (sourced after tests/env.sh).
#   fail MSG            report a failure (the test goes on; finish() sets the status)
#   skip MSG            exit 77 (skipped)
#   expect_exit CODE CMD...     run CMD, check its exit status; output in $out
#   expect_grep PATTERN         check that $out matches the extended regex PATTERN
#   mpirun_n N CMD...           run CMD on N ranks with $MPIEXEC (skips if there is none)
#   deck_error DECK PATTERN     scdino DECK ends with exit 2 (an input error) and output matching PATTERN
#   features_knn_deck CALC RUN_DIR [FEATURES_KEYS [KNN_KEYS]]   a features/knn deck on ./shards
#   scratch NAME                fresh directory under the build tree; sets $dir and cds there
#   finish                      print the summary and exit 0/1
nfail=0
nchecks=0
fail() { echo "FAIL: $*" >&2; nfail=$((nfail + 1)); }
skip() { echo "SKIP: $*"; exit 77; }
expect_exit() {
  want=$1; shift
  nchecks=$((nchecks + 1))
  out=$("$@" 2>&1 </dev/null); got=$?
  if [ "$got" != "$want" ]; then
    fail "exit status $got (wanted $want): $*"
    printf '%s\n' "$out" | sed 's/^/    | /' >&2
  fi
  return 0
}
expect_grep() {
  nchecks=$((nchecks + 1))
  if ! printf '%s\n' "$out" | grep -E -q -e "$1"; then
    fail "output does not match /$1/"
    printf '%s\n' "$out" | sed 's/^/    | /' >&2
  fi
}
expect_nogrep() {
  nchecks=$((nchecks + 1))
  if printf '%s\n' "$out" | grep -E -q -e "$1"; then
    fail "output unexpectedly matches /$1/"
  fi
}
mpirun_n() {
  n=$1; shift
  [ "$MPIEXEC" = none ] && skip "no MPI launcher"
  $MPIEXEC -n "$n" "$@"
}
deck_error() {
  expect_exit 2 "$SCDINO" "$1"
  expect_grep "$2"
}
features_knn_deck() {
  cat <<EOF
&control calculation = '$1', run_dir = '$2', seed = 5 /
&data shard_dir = 'shards' /
&features resize = 16, subset = 'all', batch_size = 16, anndata = .false.${3:+, $3} /
&knn k = 1, 5, 10, pixel_size = 6${4:+, $4} /
EOF
}
scratch() {
  dir="$top_builddir/scratch/$1"
  rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || { echo "cannot create $dir"; exit 99; }
}
finish() {
  echo "$nchecks checks, $nfail failed"
  [ "$nfail" = 0 ]
  exit $?
}
