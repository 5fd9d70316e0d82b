#!/bin/sh
# tests/emu/shared_gpu.sh - ranks that share a GPU (found by its UUID; SCDINO_EMU_SAME_GPU=1 gives
# every emulated process the same one) are refused with a message naming them: scdino with
# device = 'cuda' stops with status 2, scdino_allreduce_perf -B nccl stops, and -B auto measures
# over MPI and says why.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/cli/train_lib.sh"
. "$top_srcdir/tests/bench/busbw_lib.sh"
scratch emu_shared_gpu
[ "$MPIEXEC" = none ] && skip "no MPI launcher"
train_data shards
train_deck run epochs=1 batch_size_per_rank=4 | sed "s|&system |\&system device = 'cuda', |" >deck.nml
export SCDINO_EMU_SAME_GPU=1
expect_exit 2 mpirun_n 2 "$top_builddir/tests/emu/scdino" deck.nml
expect_grep 'ranks 0 and 1 use the same GPU; launch one rank per GPU'
nchecks=$((nchecks + 1))
[ ! -e run/checkpoint.h5 ] || fail "a checkpoint was written"
BUSBW_BIN=$top_builddir/tests/emu
busbw 2 scdino_allreduce_perf -B nccl -b 1K -e 1K -n 1 -w 0
expect_rc 1
expect_grep 'error: -B nccl: ranks 0 and 1 use the same GPU; launch one rank per GPU'
busbw 2 scdino_allreduce_perf -b 1K -e 1K -n 1 -w 0
expect_rc 0
expect_grep '-B auto chose mpi: ranks 0 and 1 share a GPU'
# One rank alone has nothing to share with.
unset SCDINO_EMU_SAME_GPU
finish
