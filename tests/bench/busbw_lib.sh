# tests/bench/busbw_lib.sh - helpers for the busbw benchmark tests (sourced after tests/lib.sh).
#   busbw NRANKS PROGRAM ARGS...   run a benchmark program under mpirun; output in $out, status $rc
#   busbw1 PROGRAM ARGS...         run it alone (an MPI singleton: quicker, and how -h is used)
#   busbw_rows                     the table rows of $out as nccl_to_csv.py would read them:
#                                  CSV size,count,type,redop,root,time,algbw,busbw,wrong x2
BUSBW_BIN=$top_builddir
busbw() {
  n=$1; prog=$2; shift 2
  [ "$MPIEXEC" = none ] && skip "no MPI launcher"
  out=$($MPIEXEC -n "$n" "$BUSBW_BIN/$prog" "$@" 2>&1 </dev/null); rc=$?
}
busbw1() {
  prog=$1; shift
  out=$("$BUSBW_BIN/$prog" "$@" 2>&1 </dev/null); rc=$?
}
# Rows: lines that do not start with '#' and have the 13 fields of the table.
busbw_rows() {
  printf '%s\n' "$out" | awk '
    /^#/ || NF == 0 { next }
    NF != 13 { printf "BADROW:%s\n", $0; next }
    { printf "%s", $1; for (i = 2; i <= 13; i++) printf ",%s", $i; printf "\n" }'
}
# expect_rc CODE: check $rc.
expect_rc() {
  nchecks=$((nchecks + 1))
  if [ "$rc" != "$1" ]; then
    fail "exit status $rc (wanted $1)"
    printf '%s\n' "$out" | sed 's/^/    | /' >&2
  fi
}
