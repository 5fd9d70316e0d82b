#!/bin/sh
# tests/cli/cli_args.sh - scdino's command line: --help, --version and the argument errors (status 2,
# a message, then the usage on stderr), each without starting MPI or reading a deck.
. "$top_srcdir/tests/lib.sh"
scratch cli_args
usage_line='^usage: scdino DECK.nml +run the calculation'
for h in --help -h; do
  expect_exit 0 "$SCDINO" $h
  expect_grep "$usage_line"
  expect_grep '^Exit status: 0 success, 1 runtime failure, 2 bad deck or arguments, 3 bad data\.$'
done
# the usage goes to stdout for --help (so that `scdino --help | less` works), stderr otherwise
nchecks=$((nchecks + 1))
"$SCDINO" --help 2>/dev/null | grep -E -q "$usage_line" || fail "--help does not write to stdout"
for v in --version -V; do
  expect_exit 0 "$SCDINO" $v
  expect_grep '^scdino [0-9]+\.[0-9]+\.[0-9]+$'
  expect_grep '^  HDF5     : [0-9]+\.[0-9]+\.[0-9]+ \(headers '
done
expect_exit 2 "$SCDINO"
expect_grep '^scdino: error: no input deck given$'
expect_grep "$usage_line"
expect_exit 2 "$SCDINO" --bogus in.nml
expect_grep "^scdino: error: unknown option '--bogus'$"
expect_exit 2 "$SCDINO" a.nml b.nml
expect_grep "^scdino: error: one input deck expected, got 'a.nml' and 'b.nml'$"
nchecks=$((nchecks + 1))
"$SCDINO" a.nml b.nml 2>/dev/null | grep -q . && fail "an argument error writes to stdout"
# a deck named '-' is a file name, not an option (nothing is read from stdin)
expect_exit 2 "$SCDINO" -
expect_grep '^-: cannot open the input deck: No such file or directory$'
expect_nogrep 'unknown option'
nchecks=$((nchecks + 1))
if [ -e a.nml ] || [ -e b.nml ] || [ -e run ]; then fail "an argument error created a file"; fi
finish
