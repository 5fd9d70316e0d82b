#!/bin/sh
# scripts/build.sh - configure (once) and build scdino in ./build; extra arguments go to configure.
# Used by scripts/demo.sh and scripts/test.sh.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
jobs=$(nproc 2>/dev/null || echo 2)
[ -x configure ] || ./autogen.sh
mkdir -p build
cd build
if [ ! -f config.status ] || [ "$#" -gt 0 ]; then
  ../configure "$@"
fi
make -j"$jobs"
