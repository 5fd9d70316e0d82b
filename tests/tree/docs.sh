#!/bin/sh
# tests/tree/docs.sh - the design documents stay true to the tree: doc/files.md lists exactly the
# source files there are (each path in backticks in its first column exists; every file is
# listed), and nothing in the repository points to a document outside it.
. "$top_srcdir/tests/lib.sh"
scratch tree_docs
map="$top_srcdir/doc/files.md"
[ -f "$map" ] || { echo "no doc/files.md"; exit 99; }
# The rows of the map: "| `path` | ..."
sed -n 's/^| *`\([^`]*\)` *|.*/\1/p' "$map" | sort -u >listed.txt
(cd "$top_srcdir" && find src cuda bench tests examples scripts input m4 .ci -type f \
  \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc' -o -name '*.def' \
     -o -name '*.sh' -o -name '*.py' -o -name '*.am' -o -name '*.m4' -o -name '*.nml' -o -name '*.in' \
     -o -name '*.sbatch' -o -name 'run_all' -o -name 'run' \) |
  grep -v -e '^tests/fuzz/corpus/' -e '^tests/decks/' -e '/gen/' | sort) >tree.txt
# An in-tree build makes files of its own (tests/env.sh): in a git checkout, ignored files are not sources.
if (cd "$top_srcdir" && git rev-parse --is-inside-work-tree) >/dev/null 2>&1; then
  (cd "$top_srcdir" && git check-ignore --stdin) <tree.txt >ignored.txt || :
  grep -v -x -F -f ignored.txt tree.txt >tree2.txt || :
  mv tree2.txt tree.txt
fi
nchecks=$((nchecks + 2))
missing=$(comm -23 tree.txt listed.txt)
[ -z "$missing" ] || fail "files missing from doc/files.md: $(echo $missing)"
gone=$(cd "$top_srcdir" && for p in $(cat "$OLDPWD/listed.txt"); do [ -e "${p%/}" ] || echo "$p"; done)
[ -z "$gone" ] || fail "doc/files.md lists paths that do not exist: $(echo $gone)"
# No document outside the repository is cited (the design of record is doc/).
nchecks=$((nchecks + 1))
outside=$(cd "$top_srcdir" && grep -r -l -I -E 'SCDINO_ALGORITHM\.md|SCDINO_ALGORITHM §|SCDINO_ALGORITHM section|ANCHORS_LLMC|HPC_BUILD_AND_STYLE|DESIGN\.md|DESIGN section' \
  src cuda bench tests examples scripts input doc README.md m4 configure.ac Makefile.am 2>/dev/null |
  grep -v '^tests/tree/docs\.sh$')
[ -z "$outside" ] || fail "files citing documents outside the repository: $(echo $outside)"
echo "$(wc -l <listed.txt) files listed"
finish
