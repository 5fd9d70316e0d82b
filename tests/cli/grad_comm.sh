#!/bin/sh
# tests/cli/grad_comm.sh - tests/unit/backend/test_grad_comm on 1, 2 and 3 ranks (bucketed gradient means, centre sums,
# the functions comm_exit_all calls).
. "$top_srcdir/tests/lib.sh"
scratch grad_comm
for n in 1 2 3; do
  expect_exit 0 mpirun_n $n "$top_builddir/tests/unit/backend/test_grad_comm"
  expect_grep "grad_comm on $n rank\(s\): checked"
  # comm_exit_all: the exit hooks, newest first and once each, then the status on every rank
  expect_exit 5 mpirun_n $n "$top_builddir/tests/unit/backend/test_grad_comm" --exit-hooks
  for r in $(seq 0 $((n - 1))); do
    expect_grep "exit hook second on rank $r"
    [ "$(printf '%s\n' "$out" | grep -c "exit hook first on rank $r\$")" = 1 ] || fail "rank $r: hook first not run once"
    printf '%s\n' "$out" | grep "on rank $r\$" | head -1 | grep -q second || fail "rank $r: hook second not first"
  done
done
finish
