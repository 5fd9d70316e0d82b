#!/bin/sh
# tests/emu/features.sh - calculation='features' with device = 'cuda' under the CPU emulator: the
# images prepared on the GPU from raw batches (src/analysis/features_gpu.h: min-max, bilinear resize and
# normalisation in float64 as the CPU rounds them) give the CPU backend's features, to fp32
# rounding in fp32 and to bf16's in bf16, with the same flat-channel verdict; resized and not.
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
finish
