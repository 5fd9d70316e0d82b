#!/bin/sh
# .ci/checks/static.sh - clang's static analyzer (scan-build) over the whole CPU build in
# build-static: scdino, the bench programs and the tools (not the tests).  Fails on any report
# (null dereferences, uninitialised reads, leaks, dead stores...); the reports are listed, and the
# HTML pages with the paths are kept under build-static/reports.  A few minutes on 2 cores.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
if ! command -v scan-build >/dev/null 2>&1 || ! command -v clang >/dev/null 2>&1; then
  "$top/scripts/setup.sh" --static >/dev/null 2>&1 </dev/null
  command -v scan-build >/dev/null 2>&1 ||
    { echo "FAIL: static: scan-build is not installed (scripts/setup.sh --static)"; exit 1; }
fi
# The MPI wrapper compiles with clang; the analyzer sees the wrapper's include path through CPPFLAGS.
OMPI_CC=clang
MPICH_CC=clang
export OMPI_CC MPICH_CC
mpi_inc=$(mpicc -showme:compile 2>/dev/null || mpicc -compile-info 2>/dev/null | sed 's/^[^ ]* //')
rm -rf "$top/build-static" && mkdir -p "$top/build-static" && cd "$top/build-static" || exit 1
scan-build --use-cc=mpicc "$top/configure" -q --without-cuda CPPFLAGS="$mpi_inc" >configure.log 2>&1 ||
  { tail -20 configure.log; echo "FAIL: static: configure"; exit 1; }
scan-build --use-cc=mpicc -o reports --status-bugs make -j"$jobs" >build.log 2>&1
rc=$?
if [ "$rc" != 0 ]; then
  for f in reports/*/report-*.html; do
    [ -f "$f" ] || continue
    file=$(sed -n 's/^<!-- BUGFILE \(.*\) -->$/\1/p' "$f")
    line=$(sed -n 's/^<!-- BUGLINE \(.*\) -->$/\1/p' "$f")
    desc=$(sed -n 's/^<!-- BUGDESC \(.*\) -->$/\1/p' "$f")
    echo "static: ${file#"$top"/}:$line: $desc"
  done
  grep -E '^[^ ]+:[0-9]+:[0-9]+: error:' build.log | head -20
  echo "FAIL: static (scan-build: $(grep -o '[0-9]* bugs\? found' build.log | tail -1))"
  exit 1
fi
echo "PASS: static (scan-build: no reports)"
