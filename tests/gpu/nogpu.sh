# tests/gpu/nogpu.sh - a CUDA build on a machine without a usable GPU: device='auto' runs on the CPU
# quietly, device='cuda' ends with exit status 2 and a message that says why.  Skips where a GPU is
# usable (tests/gpu/run.sh covers that case).
. "$top_srcdir/tests/lib.sh"
"$top_builddir/tests/gpu/test_gpu_absent" >/dev/null 2>&1
rc=$?
[ "$rc" = 77 ] && skip "a GPU is usable here"
[ "$rc" = 0 ] || fail "tests/gpu/test_gpu_absent failed (status $rc)"
scratch nogpu
cat > cuda.nml <<'NML'
&control
  calculation = 'train'
  run_dir = 'run'
  verbosity = 0
/
&data
  shard_dir = 'no-shards-here'
/
&system
  device = 'cuda'
/
NML
expect_exit 2 "$SCDINO" cuda.nml
expect_grep "device = 'cuda'.*(no GPU|without the CUDA backend)"
sed "s/device = 'cuda'/device = 'auto'/" cuda.nml > auto.nml
# 'auto' falls back to the CPU without a word about the GPU and stops at the missing shards
# (verbosity 0: no banner or echoed deck, which name the CUDA build)
expect_exit 2 "$SCDINO" auto.nml
expect_grep "no-shards-here"
expect_nogrep "GPU|cuda"
finish
