#!/bin/sh
# tests/cli/deck_errors.sh - every bad deck in tests/decks through the real binary: exit status 2,
# exactly the messages of its .err file on stderr, nothing on stdout, nothing written.  Also an
# input deck that is missing, a directory, or binary.
. "$top_srcdir/tests/lib.sh"
decks="$top_srcdir/tests/decks"
scratch deck_errors

# check_deck NAME: run scdino NAME.nml in $dir/NAME (prepared by the caller) and compare with
# $decks/NAME.err; the directory must hold afterwards exactly what it held before.
check_deck() {
  name=$1
  before=$(cd "$dir/$name" && ls -A)
  (cd "$dir/$name" && "$SCDINO" "$name.nml" >"$dir/$name.stdout" 2>"$dir/$name.stderr" </dev/null)
  rc=$?
  nchecks=$((nchecks + 4))
  [ "$rc" = 2 ] || fail "$name: exit status $rc, wanted 2"
  if ! cmp -s "$decks/$name.err" "$dir/$name.stderr"; then
    fail "$name: messages differ from tests/decks/$name.err"
    diff -u "$decks/$name.err" "$dir/$name.stderr" | sed 's/^/    /' >&2
  fi
  [ -s "$dir/$name.stdout" ] && fail "$name: wrote to stdout: $(head -c 300 "$dir/$name.stdout")"
  after=$(cd "$dir/$name" && ls -A)
  [ "$after" = "$before" ] || fail "$name: files were created: $after"
}

n=0
for nml in "$decks"/bad_*.nml; do
  name=$(basename "$nml" .nml)
  if [ ! -f "$decks/$name.err" ]; then
    fail "$name.nml has no $name.err"
    continue
  fi
  mkdir "$dir/$name" && cp "$nml" "$dir/$name/" || exit 99
  check_deck "$name"
  n=$((n + 1))
done
nchecks=$((nchecks + 1))
[ "$n" -ge 20 ] || fail "only $n bad decks"
for err in "$decks"/bad_*.err; do
  nchecks=$((nchecks + 1))
  [ -f "${err%.err}.nml" ] || fail "$(basename "$err") has no deck"
done

# Not a deck at all: missing, a directory, binary content.
mkdir "$dir/missing_file" || exit 99
check_deck missing_file
mkdir -p "$dir/directory_deck/directory_deck.nml" || exit 99
check_deck directory_deck
mkdir "$dir/binary_deck" && printf '&control calculation = \000 /\n' >"$dir/binary_deck/binary_deck.nml" || exit 99
check_deck binary_deck
echo "$n bad decks checked"
finish
