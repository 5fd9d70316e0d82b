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
         gpu_augment:test_gpu_augment gpu_nccl:test_gpu_nccl gpu_shard:test_gpu_shard gpu_knn:test_gpu_knn \
         gpu_train_bench:gpu_train_bench \
         scdino:scdino scdino_allreduce_perf:scdino_allreduce_perf cudnn_probe:cudnn_probe; do
  ln -s "$e/${p%%:*}" "pack/bin/${p##*:}"
done
for p in tests/gpu/test_gpu_absent tests/unit/model/test_optim_update tests/fixtures/train_mkdata; do
  ln -s "$top_builddir/$p" pack/bin/
done
cd "$top_srcdir" || exit 99 # run.sh runs from the repository root
expect_exit 0 env OUT="$dir/out" TMPDIR="$dir" \
  SCDINO_GPU_BENCH_ARGS="-D 32 -L 1 -H 2 -K 256 -g 32 -l 16 -n 2 -R 40 -B 4 -s 1 -w 0" \
  SCDINO_GPU_BATCHES=8 SCDINO_GPU_BUSBW_MAX=1M SCDINO_GPU_BUDGET=0 SCDINO_GPU_E2E_SMALL=1 bash tests/gpu/run.sh "$dir/pack" \
  tests probe bench attnk attn extra train busbw e2e features
out=$(cat "$dir/out/summary.txt" 2>&1)
for t in test_gpu_absent test_gpu_ops test_gpu_model_ref test_gpu_train test_gpu_augment test_gpu_nccl \
         test_gpu_shard test_optim_update; do
  expect_grep "^$t +PASS "
done
expect_grep '^test_gpu_ops \(tuned\) +PASS '
expect_grep '^test_gpu_model_ref \(tuned\) +PASS '
expect_grep 'cuDNN attention: 14 of 14 forward and 7 of 7 backward calls ran in cuDNN'
expect_grep 'bf16: 4 of 4 bias gradients summed by the weight gradient.s GEMM epilogue'
for r in scdino-bf16 scdino-bf16-gemm scdino-bf16-cudnn scdino-bf16-bgrad-kernel scdino-bf16-tanh \
         scdino-bf16-tanh-kernel scdino-bf16-tune scdino-bf16-tanh-tune scdino-fp32 scdino-vitb-bf16 scdino-bf16-b8; do
  expect_grep "^$r +4 +[0-9.]+ +[0-9.]+ "
done
for r in scdino-bf16 scdino-bf16-gemm scdino-bf16-cudnn scdino-bf16-tune; do
  expect_grep "^$r: profiled model step: GPU time in GEMMs [0-9.]+ ms, attention [0-9.]+ ms, other ops "
  expect_grep "^$r: profiled model step against its floor: GEMMs [0-9.]+x \\([0-9]+ TFLOP/s\\), attention [0-9.]+x"
done
# the model step's floor (bench/ops_traffic.h) in the table, under each run
expect_grep '^  model only +4 +[0-9.]+ +[0-9.]+ +[0-9.]+  floor [0-9]+\.[0-9]{2} ms$'
expect_grep 'largest batch per GPU that fits \(bf16, of 64 8\): 8'
# the stand-in's GELU epilogue is the tanh form: the tanh run has it in the GEMMs
expect_grep '^tanh GELU in the GEMMs: 1$'
# the op-by-op table of a profiled step (bench.log), and the cuDNN probe's verdict (probe.log: the
# stand-in builds every plan)
nchecks=$((nchecks + 1))
grep -Eq '^  o_linear_fwd +gemm +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+%$' "$dir/out/bench.log" ||
  fail "bench.log has no op table row for o_linear_fwd"
expect_grep '^cuDNN attention probe: [1-9][0-9]* backward plan\(s\) built in the backend.s layout \(probe.log\)$'
expect_grep 'scdino train on the GPU: PASS \([1-9][0-9]* log lines with a loss\)'
expect_grep '^scdino e2e \(vit_tiny, batch 8\): \(epoch 0: [1-9][0-9]* steps, [0-9]+ images in [^,]+, [^ ]+ img/s\)$'
expect_grep 'NCCL all_reduce on 1 rank\(s\): busbw\.all_reduce\.nccl min_size_time'
expect_grep '^attention per step \(1 blocks\), flash options 7: forward [0-9.]+ ms \+ backward [0-9.]+ ms = [0-9.]+ ms$'
expect_grep '^scdino features \(vit_tiny at 32, batch_size 64\): 24 x 192 \([0-9.]+ s, [0-9.]+ images/s on 1 rank\)$'
expect_grep '^scdino features \(vit_tiny at 32, batch_size 256\): 24 x 192 '
expect_grep '^scdino-bf16-serial +4 +[0-9.]+ +[0-9.]+ '
expect_nogrep 'FAIL|failed:|TIMEOUT|skipped'
# A later call with the same OUT: the attn stage again replaces only its own lines of results.txt.
n_before=$(grep -c '^scdino-bf16 \|^scdino-bf16-tanh ' "$dir/out/results.txt")
expect_exit 0 env OUT="$dir/out" TMPDIR="$dir" \
  SCDINO_GPU_BENCH_ARGS="-D 32 -L 1 -H 2 -K 256 -g 32 -l 16 -n 2 -R 40 -B 4 -s 1 -w 0" \
  SCDINO_GPU_BATCHES=8 SCDINO_GPU_BUDGET=0 bash tests/gpu/run.sh "$dir/pack" attn
nchecks=$((nchecks + 1))
[ "$n_before" = 2 ] && [ "$(grep -c '^scdino-bf16 \|^scdino-bf16-tanh ' "$dir/out/results.txt")" = 2 ] &&
  [ "$(grep -c '^scdino-bf16-gemm ' "$dir/out/results.txt")" = 1 ] ||
  fail "results.txt after a second call: $(cut -d' ' -f1 "$dir/out/results.txt" | paste -sd' ')"
# pack.sh's form: the programs as bin.tar.xz, unpacked by run.sh (here with nothing to run).
mkdir -p "$dir/pack3/bin" && : > "$dir/pack3/bin/placeholder" && tar -C "$dir/pack3" -cJf "$dir/pack3/bin.tar.xz" bin &&
  rm -rf "$dir/pack3/bin"
expect_exit 0 env OUT="$dir/out3" TMPDIR="$dir" bash tests/gpu/run.sh "$dir/pack3" goals
nchecks=$((nchecks + 1))
[ -f "$dir/scdino-pack/bin/placeholder" ] || fail "run.sh did not unpack bin.tar.xz"
# A budget the runs do not fit in: each skipped run is said, nothing runs past it.
expect_exit 0 env OUT="$dir/out2" TMPDIR="$dir" SCDINO_GPU_BUDGET=20 bash tests/gpu/run.sh "$dir/pack" tests bench
out=$(cat "$dir/out2/summary.txt" 2>&1)
expect_grep '^skipped, the time budget \(20s\) would not hold it: test_gpu_ops$'
expect_grep '^skipped, the time budget \(20s\) would not hold it: gpu_train_bench scdino-bf16$'
expect_nogrep 'PASS|RESULT'
# The goals stage judges results.txt: the fastest bf16 run at batch 64 (the flash one here, not
# the larger batch) against every PyTorch mode and the fastest, on the model step, the full step
# alongside, and the profiled step's attention time.
cat > "$dir/out/results.txt" <<'EOF'
scdino-bf16 RESULT precision=bf16 batch=64 images_per_s=900.0 mfu=0.4100 model_images_per_s=1000.0 model_mfu=0.4600 prof_attn_ms=4.00
scdino-bf16-flash RESULT precision=bf16 batch=64 images_per_s=2450.0 mfu=0.4400 model_images_per_s=2600.0 model_mfu=0.5000 prof_attn_ms=3.20
scdino-bf16-b128 RESULT precision=bf16 batch=128 images_per_s=4000.0 mfu=0.9000 model_images_per_s=5000.0 model_mfu=0.9500
torch-eager RESULT mode=eager fused=0 batch=64 step_ms=128.00 images_per_s=500.0 mfu=0.2000
torch-compile RESULT mode=compile fused=0 batch=64 step_ms=64.00 images_per_s=1000.0 mfu=0.4000
torch-max-autotune-fused RESULT mode=max-autotune fused=1 batch=64 step_ms=50.00 images_per_s=1300.0 mfu=0.4000
scdino-bf16-tanh RESULT precision=bf16 batch=64 images_per_s=1000.0 mfu=0.4500 model_images_per_s=1200.0 model_mfu=0.5400
torch-eager-tanh RESULT mode=eager batch=64 step_ms=128.00 images_per_s=600.0 mfu=0.2000
torch-compile-fused-tanh RESULT mode=compile batch=64 step_ms=64.00 images_per_s=960.0 mfu=0.4000
EOF
expect_exit 0 env OUT="$dir/out" TMPDIR="$dir" bash tests/gpu/run.sh "$dir/pack" goals
out=$(cat "$dir/out/summary.txt" 2>&1)
expect_grep '^goals at batch 64, bf16, GELU exact \(upstream\): scdino scdino-bf16-flash, 2600\.0 images/s \(model step\), 2450\.0 \(full step, GPU augmentation\)$'
expect_grep '^  model step images/s: 2600\.0, goal at least 2500: met$'
expect_grep '^  full step images/s: 2450\.0, goal at least 2400: met$'
expect_grep '^  over torch-eager \(500\.0 images/s\): 5\.20x$'
expect_grep '^  over torch-compile \(1000\.0 images/s\): 2\.60x$'
expect_grep '^  over the fastest PyTorch, torch-max-autotune-fused: 2\.00x, goal at least 1\.8x: met$'
expect_grep '^  attention, forward \+ backward \(profiled step\): 3\.20 ms, goal at most 3\.5 ms: met$'
# the tanh form against PyTorch in the tanh form
expect_grep '^goals at batch 64, bf16, GELU tanh \(both sides\): scdino scdino-bf16-tanh, 1200\.0 images/s \(model step\), 1000\.0 \(full step, GPU augmentation\)$'
expect_grep '^  over torch-eager-tanh \(600\.0 images/s\): 2\.00x$'
expect_grep '^  over the fastest PyTorch, torch-compile-fused-tanh: 1\.25x, goal at least 1\.8x: NOT met$'
nchecks=$((nchecks + 1)) # the exact form's verdicts name no tanh run
[ "$(echo "$out" | grep -c 'over torch-eager-tanh')" = 1 ] || fail "a tanh PyTorch run judged against the exact form"
grep -v '^torch' "$dir/out/results.txt" > "$dir/r" && mv "$dir/r" "$dir/out/results.txt"
expect_exit 0 env OUT="$dir/out" TMPDIR="$dir" bash tests/gpu/run.sh "$dir/pack" goals
out=$(cat "$dir/out/summary.txt" 2>&1)
expect_grep '^  over PyTorch: not measured \(no PyTorch run at batch 64\)$'
# the benchmark's peaks follow the GPU's name (gpu_peaks): an H100 PCIe, an H200 NVL
tiny="-D 32 -L 1 -H 2 -K 256 -g 32 -l 16 -n 2 -R 40 -B 2 -s 1 -w 0"
out=$(SCDINO_EMU_NAME="NVIDIA H100 PCIe" "$e/gpu_train_bench" $tiny 2>&1)
expect_grep 'MFU against 756\.5 TFLOP/s'
expect_grep 'floor of the model step at 756 TFLOP/s and 2000 GB/s'
out=$(SCDINO_EMU_NAME="NVIDIA H200 NVL" "$e/gpu_train_bench" $tiny -P fp32 2>&1)
expect_grep 'MFU against 59\.8 TFLOP/s'
expect_grep 'floor of the model step at 60 TFLOP/s and 4800 GB/s'
finish
