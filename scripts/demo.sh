#!/bin/sh
# scripts/demo.sh - install what is missing, build, make the synthetic demo data set, and run the
# demo deck input/demo.nml on 2 MPI ranks.  Outputs land in ./demo/.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
"$top/scripts/build.sh"
cd "$top"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# libgomp reads OMP_WAIT_POLICY when it loads, before scdino runs: spinning OpenMP threads of one
# rank would starve the other rank on a small machine, so ask for sleeping waits here.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
np=${SCDINO_DEMO_RANKS:-2}
if [ ! -d demo/tiff ]; then
  echo "demo: writing synthetic cell images to demo/tiff"
  build/scdino_demo_data -o demo/tiff
fi
echo "demo: mpirun -np $np build/scdino input/demo.nml"
mpirun --oversubscribe -np "$np" build/scdino input/demo.nml
