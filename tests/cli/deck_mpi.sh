#!/bin/sh
# tests/cli/deck_mpi.sh - the deck under mpirun: a bad deck is reported once (rank 0) and every rank
# exits with status 2 without MPI_Abort; a good deck reaches every rank intact.
. "$top_srcdir/tests/lib.sh"
decks="$top_srcdir/tests/decks"
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
scratch deck_mpi
cp "$decks/bad_many.nml" . || exit 99
nchecks=$((nchecks + 6))
$MPIEXEC -n 2 "$SCDINO" bad_many.nml >stdout.txt 2>stderr.txt </dev/null
rc=$?
[ "$rc" = 2 ] || fail "exit status $rc, wanted 2"
grep '^bad_many.nml:' "$decks/bad_many.err" >want.txt
grep '^bad_many.nml:' stderr.txt >got.txt
cmp -s want.txt got.txt || { fail "messages differ (printed twice?)"; diff want.txt got.txt >&2; }
[ "$(grep -c '^scdino: 17 errors in bad_many.nml; nothing was run$' stderr.txt)" = 1 ] ||
  fail "summary line not printed exactly once"
grep -q 'MPI_ABORT' stderr.txt stdout.txt && fail "the job was aborted instead of ending cleanly"
grep -q '^bad_many.nml' stdout.txt && fail "messages on stdout"
[ "$(ls -A)" = "$(printf 'bad_many.nml\ngot.txt\nstderr.txt\nstdout.txt\nwant.txt')" ] ||
  fail "files were created: $(ls -A)"
# A good deck: every rank holds the same configuration as a local parse of the file.
cp "$decks/good_full.nml" . || exit 99
expect_exit 0 $MPIEXEC -n 2 "$top_builddir/tests/unit/input/test_config_mpi" good_full.nml
expect_grep "2 ranks agree"
finish
