#!/bin/sh
# tests/emu/divergent.sh - the emulator stops a kernel whose threads cannot all meet at a barrier
# (some returned while others wait at __syncthreads) with status 99 and a message naming the
# kernel, the block and the threads; and a wmma load from a pointer that is not 256-bit aligned, as
# CUDA requires.
. "$top_srcdir/tests/lib.sh"
scratch emu_divergent
expect_exit 99 "$top_builddir/tests/emu/test_emu" divergent
expect_grep 'kernel divergent, block \(0,0,0\), threads 0-63: some threads returned while others wait at __syncthreads: 0 __syncthreads, 32 returned'
expect_exit 99 "$top_builddir/tests/emu/test_emu" misaligned
expect_grep 'kernel wmma_tile: wmma::load_matrix_sync at 0x[0-9a-f]+: the pointer must be 256-bit aligned'
finish
