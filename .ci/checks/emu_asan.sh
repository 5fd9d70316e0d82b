#!/bin/sh
# .ci/checks/emu_asan.sh - the CUDA backend's kernels under the CPU emulator (tests/emu/) with
# AddressSanitizer and UndefinedBehaviorSanitizer: emulated device memory is host heap, so a
# kernel that reads or writes past a buffer is reported as compute-sanitizer's memcheck would on a
# GPU.  configure --with-cuda --enable-sanitizers in build-emu-san, build what the emulated tests
# need, run them.  Skipped without nvcc (the backend is only built with CUDA).  A few minutes.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
if ! [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
  echo "PASS: emu_asan skipped (no nvcc)"
  exit 0
fi
mkdir -p "$top/build-emu-san" && cd "$top/build-emu-san" || exit 1
if [ ! -f Makefile ]; then
  "$top/configure" -q --with-cuda --enable-sanitizers >configure.log 2>&1 ||
    { tail -20 configure.log; echo "FAIL: emu_asan: configure"; exit 1; }
fi
progs="tests/emu/test_emu tests/emu/test_cublas_emu tests/emu/gpu_ops tests/emu/gpu_model_ref tests/emu/gpu_train \
tests/emu/gpu_augment tests/emu/gpu_nccl tests/emu/scdino tests/emu/scdino_allreduce_perf tests/fixtures/train_mkdata \
tests/fixtures/ckpt_compare tests/fixtures/feat_mkdata"
tests="tests/emu/test_emu tests/emu/divergent.sh tests/emu/test_cublas_emu tests/emu/gpu_ops tests/emu/gpu_model_ref \
tests/emu/gpu_train tests/emu/gpu_augment tests/emu/nccl.sh tests/emu/train.sh tests/emu/busbw.sh tests/emu/shared_gpu.sh \
tests/emu/cudnn.sh tests/emu/features.sh"
# shellcheck disable=SC2086
make -j"$jobs" $progs >build.log 2>&1 || { tail -30 build.log; echo "FAIL: emu_asan: build"; exit 1; }
# check_PROGRAMS is narrowed so that make check builds nothing else (all-am still builds scdino).
make -j"$jobs" check TESTS="$tests" check_PROGRAMS="$progs" >check.log 2>&1
rc=$?
grep -E '^(PASS|FAIL|ERROR|SKIP|XFAIL|XPASS):' check.log | sed 's/^/emu_asan: /'
if [ "$rc" != 0 ]; then
  grep -E -h -B2 -A20 'ERROR: (Address|Leak)Sanitizer|runtime error:|^FAIL' tests/emu/*.log 2>/dev/null | head -80
  echo "FAIL: emu_asan"
  exit 1
fi
echo "PASS: emu_asan (the CUDA kernels under the CPU emulator with ASan + UBSan + LSan)"
