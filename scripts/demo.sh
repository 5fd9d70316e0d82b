#!/bin/sh
# scripts/demo.sh - install what is missing, build, make the synthetic demo data set, run the demo
# deck input/demo.nml on 2 MPI ranks (calculation='pipeline': train, features, kNN against the
# raw-pixel and random-network baselines, attention maps), and draw the plots of the run when a
# python with h5py, numpy and matplotlib is at hand.  Outputs land in ./demo/.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh" --plots
"$top/scripts/build.sh"
cd "$top"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# libgomp reads OMP_WAIT_POLICY when it loads, before scdino runs: spinning OpenMP threads of one
# rank would starve the other rank on a small machine, so ask for sleeping waits here.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
np=${SCDINO_DEMO_RANKS:-2}
# The images depend only on the generator and its seed, so a folder written by an older
# scdino_demo_data would silently give other numbers than the ones input/demo.nml quotes: keep a
# fingerprint of the first image next to the data and write everything again when it differs.
stamp() { build/scdino_demo_data -o demo/.stamp -n 1 -c 1 -q && cksum <demo/.stamp/B/B_00000.tiff; }
mkdir -p demo
want=$(stamp)
if [ ! -d demo/tiff ] || [ "$(cat demo/tiff.stamp 2>/dev/null)" != "$want" ]; then
  echo "demo: writing synthetic cell images to demo/tiff (and new shards from them)"
  rm -rf demo/tiff demo/shards demo/run
  build/scdino_demo_data -o demo/tiff
  echo "$want" >demo/tiff.stamp
fi
rm -rf demo/.stamp
# A finished run would be kept (restart = .false. starts again, but its old features, kNN and
# attention files would mix with the new): start from an empty run folder.
rm -rf demo/run
echo "demo: mpirun -np $np build/scdino input/demo.nml"
mpirun --oversubscribe -np "$np" build/scdino input/demo.nml

# Plots: the python on PATH may be a virtual environment without the packages; the system one
# (Debian: scripts/setup.sh --plots) often has them.
py=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import h5py, numpy, matplotlib' >/dev/null 2>&1; then
    py=$p
    break
  fi
done
if [ -n "$py" ]; then
  echo "demo: $py examples/plot_run.py demo/run"
  "$py" examples/plot_run.py demo/run || echo "demo: plotting failed (the run itself is complete)"
else
  echo "demo: no python with h5py, numpy and matplotlib found; plots left out (scripts/setup.sh --plots installs them)"
fi
echo "demo: outputs"
echo "  demo/tiff/             the synthetic images (8 classes x 300, 5 channels, 50 x 50)"
echo "  demo/shards/           the HDF5 shards made from them"
echo "  demo/run/pipeline.txt  the summary: loss, kNN Top-1 of the trained network against raw pixels and a random network"
echo "  demo/run/knn.txt       per-class kNN metrics and confusion matrix"
echo "  demo/run/attention/    attention maps (PNG)"
[ -n "$py" ] && echo "  demo/run/plots/        loss.png, embedding.png, knn.png, attention.png"
exit 0
