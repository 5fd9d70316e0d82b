#!/bin/sh
# tests/grad_comm.sh - tests/test_grad_comm on 1, 2 and 3 ranks (bucketed gradient means, centre sums).
. "$top_srcdir/tests/lib.sh"
scratch grad_comm
for n in 1 2 3; do
  expect_exit 0 mpirun_n $n "$top_builddir/tests/test_grad_comm"
  expect_grep "grad_comm on $n rank\(s\): checked"
done
finish
