#!/bin/sh
# scripts/setup.sh - install the Debian/Ubuntu packages scdino needs; skips what is present.
#
#   scripts/setup.sh            build and demo dependencies
#   scripts/setup.sh --tests    also what tests of make check need: tifffile (files as tifffile
#                               writes them), anndata (the .h5ad files as anndata reads them),
#                               PyTorch (export to and import from .pth), matplotlib
#                               and scikit-learn (examples/plot_run.py), procps (pgrep),
#                               shellcheck (the Slurm scripts), prometheus (promtool),
#                               prometheus-node-exporter and curl (the metrics file)
#   scripts/setup.sh --plots    also matplotlib and scikit-learn for examples/plot_run.py
#   scripts/setup.sh --bench    also PyTorch for the CPU comparison benchmark
#   scripts/setup.sh --fuzz     also clang and its libFuzzer runtime
#   scripts/setup.sh --static   also clang's static analyzer (scan-build)
#   scripts/setup.sh --sm70     also clang-16 and pip (.ci/checks/sm70.sh: V100/T4 device code)
#
# Safe to run again: it installs only what is missing.  Needs root (or sudo).
set -eu

pkgs="build-essential autoconf automake pkg-config make
libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools libtiff-dev libopenblas-dev
libpng-dev libfabric-dev python3 python3-h5py python3-numpy"
for arg in "$@"; do
  case "$arg" in
    --tests) pkgs="$pkgs python3-tifffile python3-anndata python3-torch python3-matplotlib python3-sklearn procps shellcheck prometheus prometheus-node-exporter curl" ;;
    --plots) pkgs="$pkgs python3-matplotlib python3-sklearn" ;;
    --bench) pkgs="$pkgs python3-torch" ;;
    --fuzz) pkgs="$pkgs clang libclang-rt-14-dev" ;;
    --static) pkgs="$pkgs clang clang-tools" ;;
    --sm70) pkgs="$pkgs clang-16 python3-pip" ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

missing=""
for p in $pkgs; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
if [ -z "$missing" ]; then
  echo "setup: all packages present"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: missing packages:$missing" >&2
  echo "setup: no apt-get here; install the equivalents (MPI, parallel HDF5, libtiff, OpenBLAS, libpng) by hand" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "setup: installing$missing"
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when the install fails on stale ones (a fresh machine has none).
if ! $SUDO apt-get install -y -q --no-install-recommends $missing; then
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends $missing
fi
