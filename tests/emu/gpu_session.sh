#!/bin/sh
# tests/emu/gpu_session.sh - a dry run of the GPU session script, tests/gpu/run.sh, with the
# emulated programs of tests/emu/ in place of the packed GPU ones (tests/gpu/pack.sh): every stage
# but torch, on a tiny model (SCDINO_GPU_BENCH_ARGS), so that a session on a lent GPU does not
# find the script's bugs first.  Checks the summary: each GPU test passed, cuDNN ran its attention
# calls, the benchmark table has its rows, scdino trained, the busbw stage reported.
. "$top_srcdir/tests/lib.sh"
command -v bash >/dev/null 2>&1 || skip "no bash"
command -v mpirun.openmpi >/dev/null 2>&1 || skip "no mpirun.openmpi (the launcher name run.sh uses)"
scratch emu_gpu_session
mkdir -p pack/bin
e="$top_builddir/tests/emu"
for p in gpu_ops:test_gpu_ops gpu_model_ref:test_gpu_model_ref gpu_train:test_gpu_train \
         gpu_augment:test_gpu_augment gpu_nccl:test_gpu_nccl gpu_train_bench:gpu_train_bench \
         scdino:scdino scdino_allreduce_perf:scdino_allreduce_perf; do
  ln -s "$e/${p%%:*}" "pack/bin/${p##*:}"
done
for p in tests/gpu/test_gpu_absent tests/test_optim_update tests/train_mkdata; do
  ln -s "$top_builddir/$p" pack/bin/
done
cd "$top_srcdir" || exit 99 # run.sh runs from the repository root
expect_exit 0 env OUT="$dir/out" TMPDIR="$dir" \
  SCDINO_GPU_BENCH_ARGS="-D 32 -L 1 -H 2 -K 256 -g 32 -l 16 -n 2 -R 40 -B 4 -s 1 -w 0" \
  SCDINO_GPU_BATCHES=8 SCDINO_GPU_BUSBW_MAX=1M bash tests/gpu/run.sh "$dir/pack" tests bench train busbw
out=$(cat "$dir/out/summary.txt" 2>&1)
for t in test_gpu_absent test_gpu_ops test_gpu_model_ref test_gpu_train test_gpu_augment test_gpu_nccl \
         test_optim_update; do
  expect_grep "^$t +PASS "
done
expect_grep 'cuDNN attention: 14 of 14 forward and 7 of 7 backward calls ran in cuDNN'
expect_grep 'bf16: 4 of 4 bias gradients summed by the weight gradient.s GEMM epilogue'
for r in scdino-bf16 scdino-bf16-flash scdino-bf16-cudnn scdino-bf16-bgrad-kernel scdino-fp32 scdino-bf16-b8; do
  expect_grep "^$r +4 +[0-9.]+ +[0-9.]+ "
done
for r in scdino-bf16 scdino-bf16-flash scdino-bf16-cudnn; do
  expect_grep "^$r: profiled model step: GPU time in GEMMs [0-9.]+ ms, attention [0-9.]+ ms, other ops "
  expect_grep "^$r: profiled model step against its floor: GEMMs [0-9.]+x \\([0-9]+ TFLOP/s\\), attention [0-9.]+x"
done
# the model step's floor (bench/ops_traffic.h) in the table, under each run
expect_grep '^  model only +4 +[0-9.]+ +[0-9.]+ +[0-9.]+  floor [0-9]+\.[0-9]{2} ms$'
expect_grep 'largest batch per GPU that fits \(bf16, of 64 8\): 8'
expect_grep 'scdino train on the GPU: PASS \([1-9][0-9]* log lines with a loss\)'
expect_grep 'NCCL all_reduce on 1 rank\(s\): busbw\.all_reduce\.nccl min_size_time'
expect_nogrep 'FAIL|failed:|TIMEOUT'
# the benchmark's peaks follow the GPU's name (gpu_peaks): an H100 PCIe, an H200 NVL
tiny="-D 32 -L 1 -H 2 -K 256 -g 32 -l 16 -n 2 -R 40 -B 2 -s 1 -w 0"
out=$(SCDINO_EMU_NAME="NVIDIA H100 PCIe" "$e/gpu_train_bench" $tiny 2>&1)
expect_grep 'MFU against 756\.5 TFLOP/s'
expect_grep 'floor of the model step at 756 TFLOP/s and 2000 GB/s'
out=$(SCDINO_EMU_NAME="NVIDIA H200 NVL" "$e/gpu_train_bench" $tiny -P fp32 2>&1)
expect_grep 'MFU against 59\.8 TFLOP/s'
expect_grep 'floor of the model step at 60 TFLOP/s and 4800 GB/s'
finish
