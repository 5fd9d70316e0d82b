#!/bin/sh
# tests/gpu/pack.sh - get a GPU session ready, on this (GPU-less) machine: build the GPU tests, the
# benchmark and the binary in a --with-cuda build directory, pack them (stripped, PACK/bin.tar.xz)
# and the Debian runtime libraries they link (Open MPI, HDF5, libtiff, OpenBLAS; PACK/debs) into
# PACK, and print the one command to run on the GPU machine.
#
# usage: tests/gpu/pack.sh BUILD_DIR [PACK_DIR]
#   BUILD_DIR  a build configured with --with-cuda (e.g. mkdir b && cd b && ../configure --with-cuda)
#   PACK_DIR   default: build-gpu at the top of the source tree (ignored by git through /build*/;
#              the device tool carries it when its name is given in `carry`)
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [PACK_DIR]" >&2; exit 2; }
build=$(cd "$1" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
pack=${2:-$top/build-gpu}
grep -q '^#define HAVE_CUDA 1' "$build/build_config.h" ||
  { echo "$build is not configured --with-cuda" >&2; exit 2; }
progs="tests/gpu/test_gpu_ops tests/gpu/test_gpu_model_ref tests/gpu/test_gpu_train
tests/gpu/test_gpu_augment tests/gpu/test_gpu_nccl tests/gpu/test_gpu_shard tests/gpu/test_gpu_knn tests/gpu/test_gpu_absent tests/unit/model/test_optim_update
tests/gpu/cudnn_probe
bench/gpu_train_bench bench/knn_bench tests/fixtures/train_mkdata scdino scdino_allreduce_perf"
# shellcheck disable=SC2086
make -C "$build" -j"$(nproc)" $progs
# The programs travel as one xz archive: each links the whole static CUDA library (about 4 MB
# stripped, 45 MB for the set), and the device tool carries 64 MiB in all with the source tree;
# compressed they are 2 MB.  run.sh unpacks bin.tar.xz when there is no bin/.
stage=$(mktemp -d)
mkdir -p "$stage/bin"
for p in $progs; do
  cp "$build/$p" "$stage/bin/"
  strip "$stage/bin/$(basename "$p")"
done
mkdir -p "$pack"
rm -rf "$pack/bin"
tar -C "$stage" -cJf "$pack/bin.tar.xz" bin
rm -rf "$stage"
if ! ls "$pack"/debs/*.deb >/dev/null 2>&1; then
  fetch=${SCDINO_SHARED:-/work/shared}/device/fetch-runtime-debs.sh
  [ -x "$fetch" ] || fetch=$top/../shared/device/fetch-runtime-debs.sh
  "$fetch" "$pack/debs"
fi
# libtiff's own dependencies that the shared list leaves out (the GPU machine has no libjpeg: the
# first GPU session's scdino did not load)
extra="libjpeg62-turbo"
for p in $extra; do
  ls "$pack"/debs/"$p"_*.deb >/dev/null 2>&1 || (cd "$pack/debs" && apt-get download "$p")
done
du -sh "$pack"
rel=${pack#"$top"/}
cat <<MSG
Ready.  On the GPU machine (device tool, from the repository root), with carry = ["$rel"]:
    tests/gpu/run.sh $rel all
It keeps to 540 s (SCDINO_GPU_BUDGET), what the goals need first; runs that did not fit are listed
in summary.txt as skipped: run their stages in a second call, e.g. 'extra train busbw'.
MSG
