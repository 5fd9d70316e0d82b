#!/bin/sh
# tests/emu/features.sh - calculation='features' with device = 'cuda' under the CPU emulator: the
# images prepared on the GPU from raw batches (cuda/analysis/features_gpu.h: min-max, bilinear resize and
# normalisation in float64 as the CPU rounds them) give the CPU backend's features, to fp32
# rounding in fp32 and to bf16's in bf16, with the same flat-channel verdict; resized and not.  And
# calculation='knn' on the emulated GPU gives the CPU's report.
. "$top_srcdir/tests/lib.sh"
scratch emu_features
"$top_builddir/tests/fixtures/feat_mkdata" . || exit 99
exe="$top_builddir/tests/emu/scdino"
deck() { # deck RUN_DIR RESIZE [DEVICE [PRECISION]]
  cat <<NML
&control calculation = 'features', run_dir = '$1', seed = 11 /
&data shard_dir = 'shards', channels = 0, 2, train_fraction = 0.5 /
&features checkpoint = 'ckpt.h5', resize = $2, batch_size = 8, subset = 'all' /
&training precision = '${4:-auto}' /
&system device = '${3:-cpu}' /
NML
}
# max |a - b| over the features of two files, with h5py
maxdiff() {
  "$PYTHON3" -c "import h5py, numpy as np, sys
a = h5py.File(sys.argv[1], 'r')['features'][:]; b = h5py.File(sys.argv[2], 'r')['features'][:]
assert a.shape == b.shape, (a.shape, b.shape)
print('%.3g' % np.abs(a - b).max())" "$1" "$2"
}
for resize in 32 0; do
  deck cpu$resize $resize >cpu$resize.nml
  expect_exit 0 "$SCDINO" cpu$resize.nml
  deck fp32_$resize $resize cuda fp32 >fp32_$resize.nml
  expect_exit 0 "$exe" fp32_$resize.nml
  expect_grep '1 image\(s\) have a constant non-zero channel; it is set to 0'
  expect_grep 'features: 40 x 48 written to fp32_'"$resize"'/features_0002.h5'
  deck bf16_$resize $resize cuda bf16 >bf16_$resize.nml
  expect_exit 0 "$exe" bf16_$resize.nml
  if [ "$PYTHON3" != none ]; then
    d=$(maxdiff cpu$resize/features_0002.h5 fp32_$resize/features_0002.h5)
    nchecks=$((nchecks + 1))
    awk -v d="$d" 'BEGIN { exit !(d < 2e-6) }' || fail "resize $resize: fp32 GPU features differ from the CPU's by $d"
    d=$(maxdiff cpu$resize/features_0002.h5 bf16_$resize/features_0002.h5)
    nchecks=$((nchecks + 1))
    awk -v d="$d" 'BEGIN { exit !(d < 3e-2) }' || fail "resize $resize: bf16 GPU features differ from the CPU's by $d"
  fi
done
# calculation='knn' on the emulated GPU (similarities and neighbour lists there) and on the CPU, on
# one features file, 2 ranks each (reference shares, lists merged): the same report.
if [ "$MPIEXEC" != none ]; then
  for dev in cpu cuda; do
    mkdir -p knn_$dev && cp cpu32/features_0002.h5 knn_$dev/ || exit 99
    cat >knn_$dev.nml <<NML
&control calculation = 'knn', run_dir = 'knn_$dev' /
&data shard_dir = 'shards', channels = 0, 2, train_fraction = 0.5 /
&knn k = 1, 3, 10, baselines = .false., block_rows = 3 /
&system device = '$dev' /
NML
    expect_exit 0 $MPIEXEC -n 2 "$exe" knn_$dev.nml
    expect_grep "neighbours on the $dev backend, reference rows shared over 2 ranks"
  done
  nchecks=$((nchecks + 1))
  sed 's/knn_cuda/knn_cpu/g' knn_cuda/knn.txt | cmp -s - knn_cpu/knn.txt ||
    { fail "kNN on the emulated GPU differs from the CPU's"; diff knn_cpu/knn.txt knn_cuda/knn.txt >&2; }
  # The block of query rows by default, on a GPU of 256 MiB: a few reference rows per rank once
  # sized the GPU's buffers for millions of query rows (512 MiB of similarities over them, and
  # cudaMalloc failed); the block is at most the query rows, and the report the same.
  mkdir -p knn_auto && cp cpu32/features_0002.h5 knn_auto/ || exit 99
  sed -e 's/knn_cuda/knn_auto/' -e 's/, block_rows = 3//' knn_cuda.nml >knn_auto.nml
  SCDINO_EMU_MEM_MIB=256 expect_exit 0 $MPIEXEC -n 2 "$exe" knn_auto.nml
  nchecks=$((nchecks + 1))
  sed 's/knn_auto/knn_cpu/g' knn_auto/knn.txt | cmp -s - knn_cpu/knn.txt ||
    { fail "kNN on the emulated GPU with the default block differs from the CPU's"; diff knn_cpu/knn.txt knn_auto/knn.txt >&2; }
fi
finish
