#!/bin/sh
# tests/cli/loader_mpi.sh - the loader on 2 real MPI ranks: every training sample is visited each
# epoch and its crops are bit-identical to a single rank's (tests/unit/data/test_loader_mpi.c).
. "$top_srcdir/tests/lib.sh"
scratch loader_mpi
expect_exit 0 mpirun_n 2 "$top_builddir/tests/unit/data/test_loader_mpi" "$dir"
expect_grep '2 ranks: [0-9]+ crops hashed, 0 mismatches'
expect_grep ' 0 failed'
finish
