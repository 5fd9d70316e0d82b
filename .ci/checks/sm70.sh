#!/bin/sh
# .ci/checks/sm70.sh - the device code of every cuda/**/*.cu compiles for the V100 (sm_70) and the
# T4 (sm_75) with a CUDA 12 toolchain.  This machine's nvcc (CUDA 13) has no sm_70, and NVIDIA's
# PyPI wheels carry CUDA 12's headers, libdevice and ptxas but not its nvcc, so the device side is
# compiled by clang's CUDA front end (clang-16) against CUDA 12.1 from those wheels, cached under
# ~/.cache/scdino/cuda-12.1.  ptxas refuses an instruction the architecture lacks (mma.sync
# m16n8k8 below sm_75, bf16 wmma below 8.0), so an unguarded kernel fails here; cuobjdump (PyPI)
# must then name the architecture of every cubin.  Nothing runs and nothing links: the host side is
# the default build's.  Headers CUDA 12.1 lacks (cuBLASLt, cuDNN, NCCL) come from the default
# toolkit, after CUDA 12's.  Without PyPI it says SKIP and passes.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/scdino/cuda-12.1
root=$cache/root
cuobjdump=$cache/pkgs/nvidia/cu13/bin/cuobjdump
out=$top/build-sm70
cfg=$top/build/build_config.h

if ! command -v clang-16 >/dev/null 2>&1 || ! command -v pip3 >/dev/null 2>&1; then
  "$top/scripts/setup.sh" --sm70 >/dev/null 2>&1 </dev/null
  command -v clang-16 >/dev/null 2>&1 || { echo "FAIL: sm70: clang-16 is not installed (scripts/setup.sh --sm70)"; exit 1; }
  command -v pip3 >/dev/null 2>&1 || { echo "FAIL: sm70: pip3 is not installed (scripts/setup.sh --sm70)"; exit 1; }
fi
[ -f "$cfg" ] || { echo "FAIL: sm70: $cfg is missing (configure the default build first)"; exit 1; }

# CUDA 12.1 (the newest clang-16 knows) from NVIDIA's wheels, laid out as a toolkit for clang.
if [ ! -x "$root/bin/ptxas" ] || [ ! -x "$cuobjdump" ]; then
  rm -rf "$cache" && mkdir -p "$cache" || exit 1
  if ! pip3 install -q --disable-pip-version-check --no-deps --target "$cache/pkgs" \
      nvidia-cuda-nvcc-cu12==12.1.105 nvidia-cuda-runtime-cu12==12.1.105 \
      nvidia-cuda-cuobjdump==13.5.37 >"$cache/pip.log" 2>&1; then
    tail -3 "$cache/pip.log"
    rm -rf "$cache"
    echo "SKIP: sm70: the CUDA 12 wheels could not be fetched from PyPI"
    exit 0
  fi
  w=$cache/pkgs/nvidia
  mkdir -p "$root/bin" "$root/include" "$root/nvvm" &&
    cp -R "$w/cuda_runtime/include/." "$root/include/" &&
    cp -R "$w/cuda_nvcc/include/." "$root/include/" &&
    cp -R "$w/cuda_nvcc/nvvm/libdevice" "$root/nvvm/" &&
    cp "$w/cuda_nvcc/bin/ptxas" "$root/bin/" || { rm -rf "$cache"; echo "FAIL: sm70: unpacking the wheels"; exit 1; }
fi

rm -rf "$out" && mkdir -p "$out" || exit 1
n=0
bad=0
for src in $(cd "$top" && find cuda -name '*.cu' | sort); do
  for sm in 70 75; do
    obj=$out/$(echo "$src" | tr '/' '_').sm_$sm.cubin
    n=$((n + 1))
    if ! clang-16 -x cuda --cuda-path="$root" --cuda-gpu-arch=sm_$sm --cuda-device-only \
        -Wno-unknown-cuda-version -std=c++17 -O2 -I"$top/build" -I"$top/src" -I"$top" \
        -idirafter /usr/local/cuda/include -c "$top/$src" -o "$obj" >"$obj.log" 2>&1; then
      echo "sm70: $src for sm_$sm:"
      grep -E 'error|ptxas' "$obj.log" | head -5
      bad=$((bad + 1))
    elif ! "$cuobjdump" -elf "$obj" 2>/dev/null | grep -q "sm=$sm,"; then
      echo "sm70: $src: cuobjdump does not show sm_$sm device code"
      bad=$((bad + 1))
    fi
  done
done
if [ "$bad" != 0 ]; then
  echo "FAIL: sm70: $bad of $n compilations (in $out)"
  exit 1
fi
echo "PASS: sm70: $n cubins, every cuda/*.cu for sm_70 and sm_75 with CUDA 12.1 (cuobjdump: sm=70, sm=75)"
