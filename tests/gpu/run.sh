#!/bin/bash
# tests/gpu/run.sh - on a GPU machine: the GPU tests, then the training benchmarks (scdino and
# PyTorch side by side); full logs under $OUT, a short table last.
#
# usage: tests/gpu/run.sh [PACK_DIR] [STAGE...]
#   PACK_DIR  what tests/gpu/pack.sh made (default build-gpu): bin.tar.xz (or bin/) and debs/
#   STAGE     tests | probe | bench | attnk | attn | torch | autotune | torchtanh | fp16 | extra | train |
#             busbw | e2e | features | knn | goals | all (default
#             all = every stage, in this order: what the goals need first)
#             tests  the GPU unit tests (CUDA ops vs CPU ops, reference model, training steps,
#                    GPU crops, NCCL, fused optimizer; ops and reference model again with the
#                    GEMM tuning)
#             probe  which attention layouts cuDNN builds plans for (tests/gpu/cudnn_probe, with
#                    cuDNN's own error log), in probe.log
#             bench  bench/gpu_train_bench in bf16 at batch 64, with the exact GELU (the next
#                    batch's augmentation during backward, then serially: -S) and with the tanh
#                    GELU (in cuBLASLt's epilogues where the library computes it); the same with
#                    the GEMM algorithms chosen by timing (gpu_train_bench -t: &gpu gemm_tune)
#             attnk  the attention kernels alone (gpu_train_bench -a): forward and backward of the
#                    step's shapes for each set of the flash kernels' options
#             attn   the same step with the attention as batched GEMMs and as cuDNN's (the bench
#                    stage's take the default, the flash kernels)
#             torch  bench/torch_dino_step.py at batch 64: eager and eager with
#                    AdamW(fused=True), torch.compile with each AdamW; autotune:
#                    torch.compile(mode="max-autotune") with the fused AdamW (its compilation
#                    takes minutes; the inductor cache goes to $OUT/inductor-cache.tar.xz, and
#                    comes back from PACK_DIR/inductor-cache.tar.xz in a later call); torchtanh:
#                    eager and compiled with the tanh GELU, to set against scdino's tanh form
#             fp16   precision fp16 (the V100's and T4's, with the dynamic loss scale): the training
#                    test's 200 steps against fp32 (loss within bf16's 5%), also with the kernel
#                    set of compute capability 7.5 (--arch 75: f16 mma.sync m16n8k8, no cp.async)
#                    and 7.0 (batched-GEMM attention); gpu_train_bench at batch 64 in fp16, with
#                    each kernel set (-c 75, -c 70), beside bf16's; torch_dino_step.py with
#                    autocast fp16 + GradScaler (upstream's use_fp16), eager and compiled
#             extra  more gpu_train_bench runs: bf16 with the bias
#                    gradients by the column-sum kernel, with the tanh GELU as kernels; fp32;
#                    ViT-B/16 in bf16 at batch 64; the largest batch that fits (bf16)
#             train  scdino itself: a short training run with device = 'cuda' on tiny data
#             e2e    scdino at full size: one epoch of ViT-S/16 at batch 64 on 3200 synthetic
#                    5 x 256 x 256 images (loader, GPU augmentation, checkpoint), in e2e.log
#             features  calculation='features' on the GPU: ViT-S/16 at 224 from 20000 synthetic
#                    5 x 50 x 50 images (a one-step checkpoint first), batch_size 64 and 256, in
#                    features.log
#             knn    bench/knn_bench with the neighbour lists on the GPU: 100,000 reference x
#                    25,000 test rows and 1,000,000 x 250,000, D = 384, six k up to 500, in
#                    knn.log; the smaller on the host's CPU cores too, for the ratio
#             busbw  scdino_allreduce_perf -B nccl on one rank (in-process NCCL times, 8 B - 1 GiB;
#                    the time at 8 B is the kernel-launch latency floor), and on every GPU if >1
#             goals  the goals at batch 64 in bf16 from results.txt (this run's or an earlier
#                    one's): model step 2,500 images/s and 1.8x the fastest PyTorch mode (every
#                    mode listed), full step (GPU augmentation overlapped) 2,400 images/s,
#                    attention at most 3.5 ms of the profiled step; for upstream's exact GELU,
#                    then for the tanh GELU (both sides in that form)
# Runs from the repository root.  Needs no MPI, HDF5 or libtiff of its own: the Debian runtime
# packages in PACK_DIR/debs are unpacked into a private prefix ($TMPDIR/scdino-rt), never into /
# (without debs/, the system's libraries are used).
# Environment, for a session short of time (or a dry run of this script with the emulated
# programs of tests/emu/ in PACK_DIR/bin):
#   SCDINO_GPU_BENCH_ARGS  options appended to every gpu_train_bench run (e.g. a smaller model)
#   SCDINO_GPU_BATCHES     the batches tried for the largest that fits (default 96 ... 512)
#   SCDINO_GPU_BUSBW_MAX   the largest all-reduce of the busbw stage (default 1G)
#   SCDINO_GPU_E2E_SMALL   1: the train, e2e and features stages on tiny models and data sets
#   SCDINO_GPU_BUDGET      seconds the whole script keeps to (default 540: the device tool stops a
#                          command after 600 s); a run that would not fit in what is left is
#                          skipped and said (run its stage again in another call); 0: no limit,
#                          and no time limit on any run either
# results.txt keeps the lines of stages not run this time (a session split over calls with one
# OUT): bench and extra replace the scdino lines they run, torch the torch lines.
set -u
pack=${1:-build-gpu}
shift || true
stages=${*:-all}
[ "$stages" = all ] && stages="tests probe bench attnk attn torch fp16 extra train busbw e2e features knn autotune goals"
tmp=${TMPDIR:-/tmp}
out=${OUT:-$tmp/scdino-gpu-out}
mkdir -p "$out"
tests_log=$out/tests.log
bench_log=$out/bench.log
summary=$out/summary.txt
if [ ! -d "$pack/bin" ] && [ -f "$pack/bin.tar.xz" ]; then # pack.sh's archive
  rm -rf "$tmp/scdino-pack" && mkdir -p "$tmp/scdino-pack" && tar -C "$tmp/scdino-pack" -xJf "$pack/bin.tar.xz" ||
    { echo "run.sh: cannot unpack $pack/bin.tar.xz"; exit 2; }
  bin=$tmp/scdino-pack/bin
else
  [ -d "$pack/bin" ] || { echo "run.sh: no $pack/bin or $pack/bin.tar.xz (run tests/gpu/pack.sh here first)"; exit 2; }
  bin=$(cd "$pack/bin" && pwd)
fi

# ---- runtime libraries ---------------------------------------------------------------------------
rt=$tmp/scdino-rt
unpack() { # a .deb into $rt: dpkg -x, or ar + tar where there is no dpkg
  if command -v dpkg >/dev/null 2>&1; then
    dpkg -x "$1" "$rt"
  else
    local d
    d=$(mktemp -d)
    (cd "$d" && ar x "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")" && tar -xf data.tar.* -C "$rt")
    rm -rf "$d"
  fi
}
if [ ! -d "$rt/usr" ] && ls "$pack"/debs/*.deb >/dev/null 2>&1; then
  mkdir -p "$rt"
  for f in "$pack"/debs/*.deb; do unpack "$f"; done
fi
nvlibs=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | paste -sd:)
# the relocated Open MPI, when the packages were unpacked (a system one needs no prefix)
[ -d "$rt/usr" ] && export OPAL_PREFIX=$rt/usr OPAL_SYSCONFDIR=$rt/etc/openmpi PATH=$rt/usr/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# cuDNN for scdino: the newest libcudnn.so.9 of the toolkit's and torch's wheel goes first
# (&gpu attention = 'cudnn' needs 9.17 or later; with an older one attention runs as batched
# GEMMs), as scdino --version reports it.  PyTorch runs without this path (its own libraries).
# A newer cuDNN cannot travel in the pack: cuDNN loads every engine sub-library when it finalizes
# its first tensor descriptor, and the precompiled engines alone are 245 MB (174 MB as xz) of the
# 64 MiB the device tool carries.
base_ld="$rt/usr/lib/x86_64-linux-gnu:$rt/usr/lib/x86_64-linux-gnu/openmpi/lib:$nvlibs:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cudnn_dir="" cudnn_ver=""
for d in /usr/local/cuda/lib64 /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib; do
  [ -e "$d/libcudnn.so.9" ] || continue
  v=$(LD_LIBRARY_PATH="$d:$base_ld" "$bin/scdino" --version 2>/dev/null | sed -n 's/^ *cuDNN *: \([0-9.]*\).*/\1/p')
  [ -n "$v" ] || continue
  if [ -z "$cudnn_ver" ] || [ "$(printf '%s\n' "$cudnn_ver" "$v" | sort -V | tail -1)" != "$cudnn_ver" ]; then
    cudnn_dir=$d cudnn_ver=$v
  fi
done
export LD_LIBRARY_PATH="${cudnn_dir:+$cudnn_dir:}$base_ld"
# the reference tensors: PACK_DIR's copy where there is one (a checkout in the middle of a change)
testdata=$PWD/tests/data
[ -d "$pack/testdata" ] && testdata=$(cd "$pack/testdata" && pwd)
export SCDINO_TESTDATA=$testdata OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
budget=${SCDINO_GPU_BUDGET:-540}
# afford LABEL SECONDS: whether a run that may take that long fits in the budget (else said, 1);
# limit SECONDS: that timeout, cut to what is left of the budget; 0 (timeout's "none") when the
# budget is 0, so that a dry run under the emulator on a busy machine is never cut short.
afford() {
  [ "$budget" = 0 ] && return 0
  [ $((budget - SECONDS)) -ge "$2" ] && return 0
  note "skipped, the time budget (${budget}s) would not hold it: $1"
  return 1
}
limit() {
  local l=$1
  [ "$budget" = 0 ] && { echo 0; return; }
  [ $((budget - SECONDS)) -lt "$l" ] && l=$((budget - SECONDS))
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}
note "cuDNN for scdino: ${cudnn_ver:-none found} ${cudnn_dir:+in $cudnn_dir}"
{
  echo "== $(date -u) on $(hostname)"
  nvidia-smi 2>&1
  echo "== libraries of the binaries"
  ldd "$bin/test_gpu_ops" 2>&1
} >> "$tests_log"
for b in test_gpu_ops scdino; do
  if ldd "$bin/$b" | grep -q "not found"; then
    note "MISSING LIBRARIES of $b: $(ldd "$bin/$b" | grep 'not found' | paste -sd' ')"
  fi
done

# ---- tests ---------------------------------------------------------------------------------------
run_test() { # name, timeout[, label: said after the name[, arguments of the test...]]
  local name=$1 t0 rc outf=$tmp/scdino-gpu-test.out label=$1${3:+ ($3)}
  afford "$label" 30 || return 0
  t0=$(date +%s)
  echo "==== $label" >> "$tests_log"
  # Synchronous launches: a sticky CUDA error is reported at the call that caused it.
  CUDA_LAUNCH_BLOCKING=1 timeout "$(limit "$2")" "$bin/$name" "${@:4}" > "$outf" 2>&1
  rc=$?
  cat "$outf" >> "$tests_log"
  # A failure: once more under compute-sanitizer's memcheck, when the toolkit has it.
  local cs=/usr/local/cuda/bin/compute-sanitizer
  if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ -x "$cs" ] && afford "$name under compute-sanitizer" 60; then
    echo "==== $name under compute-sanitizer --tool memcheck" >> "$tests_log"
    timeout "$(limit 300)" "$cs" --tool memcheck --print-limit 20 "$bin/$name" "${@:4}" >> "$tests_log" 2>&1
  fi
  local res=FAIL
  case $rc in 0) res=PASS ;; 77) res=SKIP ;; 124) res="TIMEOUT" ;; esac
  local checks
  checks=$(grep -E '^[0-9]+ checks, [0-9]+ failed' "$outf" | tail -1)
  note "$(printf '%-22s %-7s %4ss  %s' "$label" "$res" "$(( $(date +%s) - t0 ))" "$checks")"
  grep -E "^(FAIL|SKIP)|error|cuDNN attention|bias gradients summed" "$outf" | head -20 | sed 's/^/    /' >> "$summary"
  rm -f "$outf"
}
if [[ " $stages " == *" tests "* ]]; then
  note "GPU tests (log: tests.log)"
  run_test test_gpu_absent 60
  run_test test_gpu_ops 300
  run_test test_gpu_model_ref 120
  run_test test_gpu_train 300
  run_test test_gpu_augment 120
  run_test test_gpu_nccl 120
  run_test test_gpu_shard 120
  run_test test_gpu_knn 120
  run_test test_optim_update 120
  # the GEMMs tuned (&gpu gemm_tune): candidates timed on the real operands first
  run_test test_gpu_ops 300 tuned --gemm-tune
  run_test test_gpu_model_ref 120 tuned --gemm-tune
fi

# ---- benchmarks ------------------------------------------------------------------------------------
results=$out/results.txt
touch "$results"
drop() { grep -v "$1" "$results" > "$results.new"; mv "$results.new" "$results"; }
[[ " $stages " == *" bench "* ]] && drop '^scdino-bf16\(-mpi\|-serial\|-tanh\|-tune\|-tanh-tune\)\? '
[[ " $stages " == *" attn "* ]] && drop '^scdino-bf16-\(gemm\|flash\|cudnn\) '
[[ " $stages " == *" extra "* ]] && drop '^scdino-\(bf16-bgrad-kernel\|bf16-tanh-kernel\|fp32\|vitb-bf16\|bf16-b[0-9]*\) '
[[ " $stages " == *" torch "* ]] && drop '^torch-\(eager\|eager-fused\|compile\|compile-fused\) '
[[ " $stages " == *" autotune "* ]] && drop '^torch-max-autotune-fused '
[[ " $stages " == *" torchtanh "* ]] && drop '^torch-[a-z-]*-tanh '
[[ " $stages " == *" fp16 "* ]] && drop '^\(scdino\|torch\)-[a-z-]*fp16[a-z0-9-]* '
bench() { # label, arguments...; the op-by-op profile (-x) goes to the summary too
  local label=$1 outf=$tmp/scdino-gpu-bench.out
  shift
  afford "gpu_train_bench $label" 60 || return 90
  echo "==== gpu_train_bench $*" >> "$bench_log"
  # shellcheck disable=SC2086
  timeout "$(limit 300)" "$bin/gpu_train_bench" "$@" ${SCDINO_GPU_BENCH_ARGS:-} > "$outf" 2>&1
  local rc=$?
  cat "$outf" >> "$bench_log"
  if [ $rc = 0 ]; then echo "$label $(grep '^RESULT' "$outf" | tail -1)" >> "$results"; fi
  grep '^profiled model step' "$outf" | while read -r l; do note "$label: $l"; done
  return $rc
}
# The communicator: NCCL, or MPI (-M) when NCCL could not start (one rank, no network?), as the
# first run found (bench stage) or as results.txt says (a later call's extra stage).
m=""
grep -q '^scdino-bf16-mpi ' "$results" && m=-M
if [[ " $stages " == *" bench "* ]]; then
  bench "scdino-bf16" -B 64 -P bf16 -x
  rc=$?
  if [ $rc != 0 ] && [ $rc != 90 ]; then
    note "gpu_train_bench with NCCL failed: $(tail -1 "$bench_log"); again with MPI (-M)"
    m=-M
    bench "scdino-bf16-mpi" -B 64 -P bf16 -x $m || note "gpu_train_bench failed: $(tail -1 "$bench_log")"
  fi
  # the next batch's augmentation serial, at its own step, against the default (made during the
  # step before's backward)
  bench "scdino-bf16-serial" -B 64 -P bf16 -s 5 -S $m
  # the tanh GELU: in cuBLASLt's epilogues where the probe finds the library computes it (said
  # at verbosity 2 only, so the RESULT line's gelu_in_gemm tells)
  bench "scdino-bf16-tanh" -B 64 -P bf16 -s 5 -x -A tanh $m
  grep -h "GELU epilogue\|GELU with approximate" "$bench_log" | sort -u | while read -r l; do note "$l"; done
  note "tanh GELU in the GEMMs: $(grep '^scdino-bf16-tanh ' "$results" | tr ' ' '\n' | sed -n 's/^gelu_in_gemm=//p')"
  # the GEMM algorithms chosen by timing the heuristic's candidates on the first call of each shape
  bench "scdino-bf16-tune" -B 64 -P bf16 -s 5 -x -t $m
  bench "scdino-bf16-tanh-tune" -B 64 -P bf16 -s 5 -A tanh -t $m
  grep -h "cuBLASLt tuning:" "$bench_log" | sort | uniq -c | sort -rn | head -5 | while read -r l; do note "$l"; done
fi
if [[ " $stages " == *" attnk "* ]] && afford "gpu_train_bench -a" 40; then
  # the attention kernels alone: the step's shapes, each set of the flash kernels' options
  echo "==== gpu_train_bench -a" >> "$bench_log"
  timeout "$(limit 120)" "$bin/gpu_train_bench" -a ${SCDINO_GPU_BENCH_ARGS:-} > "$tmp/scdino-attn.out" 2>&1
  cat "$tmp/scdino-attn.out" >> "$bench_log"
  grep '^attention per step' "$tmp/scdino-attn.out" | while read -r l; do note "$l"; done
fi
if [[ " $stages " == *" probe "* ]]; then
  echo "==== cudnn_probe (CUDNN_LOGLEVEL_DBG=2)" > "$out/probe.log"
  CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr timeout "$(limit 120)" "$bin/cudnn_probe" >> "$out/probe.log" 2>&1
  note "cuDNN attention probe: $(tail -1 "$out/probe.log") (probe.log)"
fi
if [[ " $stages " == *" attn "* ]]; then
  # the attention implementations side by side: whole steps, and the attention's own GPU time (-x)
  # (the bench stage's runs take the default, the flash kernels)
  bench "scdino-bf16-gemm" -B 64 -P bf16 -s 5 -x -i gemm $m
  bench "scdino-bf16-cudnn" -B 64 -P bf16 -s 5 -x -i cudnn $m
  grep -h 'cuDNN attention' "$bench_log" | sort -u | while read -r l; do note "$l"; done
fi
# PyTorch runs: label, timeout, then torch_dino_step.py's options.  torch.compile's caches go to
# $tmp/inductor-cache, seeded from PACK_DIR/inductor-cache.tar.xz where an earlier call left one
# (max-autotune compiles for minutes; a warm cache cuts that, not the step time), and back to
# $OUT/inductor-cache.tar.xz for the next call.
export TORCHINDUCTOR_CACHE_DIR=$tmp/inductor-cache
if [ ! -d "$TORCHINDUCTOR_CACHE_DIR" ] && [ -f "$pack/inductor-cache.tar.xz" ]; then
  mkdir -p "$TORCHINDUCTOR_CACHE_DIR" && tar -C "$TORCHINDUCTOR_CACHE_DIR" -xJf "$pack/inductor-cache.tar.xz"
fi
torch_run() {
  local label=$1 secs=$2
  shift 2
  afford "torch_dino_step.py $*" "$secs" || return 0
  echo "==== torch_dino_step.py $*" >> "$bench_log"
  # torch loads its own CUDA libraries: no LD_LIBRARY_PATH of ours
  if env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 timeout "$(limit 540)" python3 "$torch_py" --batch 64 "$@" >> "$bench_log" 2>&1; then
    echo "$label $(grep '^RESULT' "$bench_log" | tail -1)" >> "$results"
  else
    note "torch_dino_step.py $* failed: $(tail -1 "$bench_log")"
  fi
}
# the script: PACK_DIR's copy where there is one (a checkout in the middle of a change), else the tree's
torch_py=bench/torch_dino_step.py
[ -f "$pack/torch_dino_step.py" ] && torch_py=$pack/torch_dino_step.py
if [[ " $stages " == *" torch "* ]]; then
  # every mode; the goals are judged against the fastest
  torch_run torch-eager 90 --mode eager
  torch_run torch-eager-fused 90 --mode eager --fused
  torch_run torch-compile 240 --mode compile
  torch_run torch-compile-fused 240 --mode compile --fused
fi
if [[ " $stages " == *" autotune "* ]]; then # minutes of compilation: a stage of its own
  torch_run torch-max-autotune-fused 300 --mode max-autotune --fused
fi
if [[ " $stages " == *" torchtanh "* ]]; then # the tanh GELU on both sides
  torch_run torch-eager-tanh 90 --mode eager --gelu tanh
  torch_run torch-compile-fused-tanh 240 --mode compile --fused --gelu tanh
fi
if [[ " $stages " == *" fp16 "* ]]; then
  # fp16 with the loss scale: 200 training steps against fp32, with each kernel set; the model step
  # beside bf16's; PyTorch's own fp16 (autocast + GradScaler, upstream's use_fp16)
  note "fp16 (log: tests.log, bench.log)"
  run_test test_gpu_train 300 "fp16, 200 steps" --steps 200
  run_test test_gpu_train 300 "fp16 sm_75 kernels, 200 steps" --steps 200 --arch 75
  run_test test_gpu_train 300 "fp16 sm_70 kernels" --arch 70
  bench "scdino-fp16" -B 64 -P fp16 -s 5 -x $m
  bench "scdino-fp16-sm75" -B 64 -P fp16 -s 5 -x -c 75 $m
  bench "scdino-fp16-sm70" -B 64 -P fp16 -s 5 -c 70 $m
  grep -h "fp16 loss scale after" "$bench_log" | sort | uniq -c | while read -r l; do note "$l"; done
  torch_run torch-eager-fp16 90 --mode eager --precision fp16
  torch_run torch-compile-fused-fp16 240 --mode compile --fused --precision fp16
fi
if [ -d "${TORCHINDUCTOR_CACHE_DIR:-}" ] && [[ " $stages " == *" torch"* ]]; then
  tar -C "$TORCHINDUCTOR_CACHE_DIR" -cJf "$out/inductor-cache.tar.xz" . 2>/dev/null
  [ "$(stat -c %s "$out/inductor-cache.tar.xz" 2>/dev/null || echo 0)" -gt 16000000 ] && rm -f "$out/inductor-cache.tar.xz"
fi
if [[ " $stages " == *" extra "* ]]; then
  # bias gradients by a column-sum kernel, against the weight gradient's GEMM epilogue
  bench "scdino-bf16-bgrad-kernel" -B 64 -P bf16 -s 5 -b kernel $m
  grep -h 'bias-gradient epilogue' "$bench_log" | sort -u | while read -r l; do note "$l"; done
  # the tanh GELU as kernels, against the epilogues of the bench stage
  bench "scdino-bf16-tanh-kernel" -B 64 -P bf16 -s 5 -A tanh -e kernel $m
  bench "scdino-fp32" -B 64 -P fp32 -s 5 $m
  # ViT-B/16 at batch 64: its speed and peak memory (the issue asks whether it fits unrecomputed)
  bench "scdino-vitb-bf16" -B 64 -P bf16 -D 768 -H 12 -s 3 -w 1 $m
  largest=64
  for b in ${SCDINO_GPU_BATCHES:-96 128 192 256 384 512}; do
    bench "scdino-bf16-b$b" -B $b -P bf16 -s 3 -w 1 $m
    rc=$?
    [ $rc = 0 ] && { largest=$b; continue; }
    [ $rc = 90 ] && break
    grep -q "out of memory" <(tail -3 "$bench_log") || note "batch $b failed for another reason than memory:"
    tail -2 "$bench_log" | sed 's/^/    /' >> "$summary"
    break
  done
  note "largest batch per GPU that fits (bf16, of 64 ${SCDINO_GPU_BATCHES:-96 128 192 256 384 512}): $largest"
fi

# ---- scdino end to end -----------------------------------------------------------------------------
if [[ " $stages " == *" train "* ]] && afford "scdino train" 60; then
  w=$tmp/scdino-train
  rm -rf "$w" && mkdir -p "$w"
  echo "==== scdino train, device = 'cuda'" >> "$tests_log"
  # SCDINO_GPU_E2E_SMALL=1 (the dry run under the emulator): work that takes seconds there
  nimg=64 gs=64 ls=32 nl=4 tb=16
  [ "${SCDINO_GPU_E2E_SMALL:-0}" = 1 ] && nimg=16 gs=32 ls=16 nl=2 tb=4
  "$bin/train_mkdata" "$w/shards" "$nimg" 3 64 64 >> "$tests_log" 2>&1
  cat > "$w/deck.nml" <<NML
&control calculation = 'train', run_dir = '$w/run' /
&data shard_dir = '$w/shards' /
&model arch = 'vit_tiny', patch_size = 16, out_dim = 4096 /
&crops global_size = $gs, local_size = $ls, local_crops_number = $nl /
&training epochs = 2, batch_size_per_rank = $tb, log_every = 1, warmup_epochs = 1 /
&system device = 'cuda' /
NML
  if timeout "$(limit 300)" "$bin/scdino" "$w/deck.nml" > "$w/train.out" 2>&1; then
    note "scdino train on the GPU: PASS ($(grep -c 'Epoch .* loss' "$w/train.out") log lines with a loss)"
  else
    note "scdino train on the GPU: FAIL (see tests.log)"
  fi
  cat "$w/train.out" >> "$tests_log"
fi

# ---- scdino at full size: ViT-S/16, 5 x 256 x 256 uint16 images, batch 64 ---------------------------
# The training loop itself (loader, GPU augmentation, steps, the epoch's checkpoint), as a user runs
# it: its log lines' images/s next to gpu_train_bench's.
if [[ " $stages " == *" e2e "* ]] && afford "scdino e2e" 120; then
  w=$tmp/scdino-e2e
  rm -rf "$w" && mkdir -p "$w"
  # SCDINO_GPU_E2E_SMALL=1: a tiny model and data set instead (the dry run under the emulator)
  if [ "${SCDINO_GPU_E2E_SMALL:-0}" = 1 ]; then
    set -- 48 3 64 vit_tiny 1024 64 32 2 8
  else
    set -- 3200 5 256 vit_small 65536 224 96 8 64
  fi
  echo "==== scdino e2e: $4, batch $9, $1 images of $2 x $3 x $3" > "$out/e2e.log"
  "$bin/train_mkdata" "$w/shards" "$1" "$2" "$3" "$3" >> "$out/e2e.log" 2>&1
  cat > "$w/deck.nml" <<NML
&control calculation = 'train', run_dir = '$w/run' /
&data shard_dir = '$w/shards' /
&model arch = '$4', patch_size = 16, out_dim = $5 /
&crops global_size = $6, local_size = $7, local_crops_number = $8 /
&training epochs = 1, batch_size_per_rank = $9, log_every = 5, warmup_epochs = 0, saveckp_freq = 1 /
&system device = 'cuda', loader_threads = 8 /
NML
  if timeout "$(limit 240)" "$bin/scdino" "$w/deck.nml" >> "$out/e2e.log" 2>&1; then
    note "scdino e2e ($4, batch $9): $(grep 'Averaged stats' "$out/e2e.log" | tail -1 | sed 's/.*(epoch/(epoch/')"
    grep 'Epoch \[0/1\] it' "$out/e2e.log" | tail -2 | sed 's/^/    /' >> "$summary"
  else
    note "scdino e2e: FAIL (e2e.log)"
  fi
fi

# ---- feature extraction: ViT-S/16 at 224 from 50 x 50 5-channel images ---------------------------
# A checkpoint from one training step, then calculation='features' over every image (the GPU
# prepares them from the raw batches; the host reads the shards), at the default batch and at 256.
if [[ " $stages " == *" features "* ]] && afford "scdino features" 90; then
  w=$tmp/scdino-feat
  rm -rf "$w" && mkdir -p "$w"
  nimg=20000 arch=vit_small crops="" tb=64 rs=224
  # SCDINO_GPU_E2E_SMALL=1: a tiny model, data set and crops (the dry run under the emulator)
  [ "${SCDINO_GPU_E2E_SMALL:-0}" = 1 ] && nimg=24 arch=vit_tiny tb=8 rs=32 \
    crops="&crops global_size = 32, local_size = 16, local_crops_number = 2 /"
  echo "==== scdino features: $arch at $rs, $nimg images of 5 x 50 x 50" > "$out/features.log"
  "$bin/train_mkdata" "$w/shards" "$nimg" 5 50 50 >> "$out/features.log" 2>&1
  cat > "$w/train.nml" <<NML
&control calculation = 'train', run_dir = '$w/run' /
&data shard_dir = '$w/shards' /
&model arch = '$arch', patch_size = 16, out_dim = 4096 /
$crops
&training epochs = 1, batch_size_per_rank = $tb, max_steps = 1, warmup_epochs = 0 /
&system device = 'cuda', loader_threads = 8 /
NML
  if timeout "$(limit 120)" "$bin/scdino" "$w/train.nml" >> "$out/features.log" 2>&1; then
    for fb in 64 256; do
      cat > "$w/feat$fb.nml" <<NML
&control calculation = 'features', run_dir = '$w/run$fb' /
&data shard_dir = '$w/shards' /
&features checkpoint = '$w/run/checkpoint.h5', subset = 'all', batch_size = $fb, resize = $rs /
&system device = 'cuda' /
NML
      echo "==== features, batch_size $fb" >> "$out/features.log"
      if OMP_NUM_THREADS=16 timeout "$(limit 120)" "$bin/scdino" "$w/feat$fb.nml" >> "$out/features.log" 2>&1; then
        note "scdino features ($arch at $rs, batch_size $fb): $(grep -o '[0-9]* x [0-9]* written to .*' "$out/features.log" | tail -1 | sed 's/written to [^ ]* //')"
      else
        note "scdino features (batch_size $fb): FAIL (features.log)"
      fi
    done
  else
    note "scdino features: the training step for its checkpoint failed (features.log)"
  fi
fi

# ---- kNN at scale: the similarity GEMMs and the neighbour selection on the GPU ---------------------
if [[ " $stages " == *" knn "* ]] && afford "knn_bench on the GPU" 60; then
  echo "==== knn_bench" > "$out/knn.log"
  shapes="100000:25000 1000000:250000"
  [ "${SCDINO_GPU_E2E_SMALL:-0}" = 1 ] && shapes="3000:500"
  for shape in $shapes; do
    nref=${shape%:*} ntest=${shape#*:}
    for dev in cuda cpu; do
      # the CPU side only at the smaller shape (its time grows with the product)
      [ "$dev" = cpu ] && [ "$nref" -gt 100000 ] && continue
      afford "knn_bench $dev $nref x $ntest" 30 || continue
      echo "==== knn_bench --device $dev --train $nref --test $ntest" >> "$out/knn.log"
      if OMP_NUM_THREADS=$(nproc) timeout "$(limit 300)" "$bin/knn_bench" --device "$dev" --train "$nref" --test "$ntest" \
        --dim 384 >> "$out/knn.log" 2>&1; then
        name=knn; [ "$dev" = cuda ] && name=knn_gpu
        note "kNN on $dev, $nref reference x $ntest test rows, D = 384: $(grep "^BENCH $name time" "$out/knn.log" | tail -1 | cut -d' ' -f4-5), GEMM $(grep "^BENCH $name gemm_gflops" "$out/knn.log" | tail -1 | cut -d' ' -f4-5)"
      else
        note "knn_bench --device $dev ($nref x $ntest): FAIL (knn.log)"
      fi
    done
  done
fi

# ---- NCCL bus bandwidth ------------------------------------------------------------------------------
if [[ " $stages " == *" busbw "* ]]; then
  busbw_log=$out/busbw.log
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  for n in 1 $([ "${ngpu:-0}" -gt 1 ] && echo "$ngpu"); do
    afford "scdino_allreduce_perf on $n rank(s)" 60 || continue
    echo "==== scdino_allreduce_perf -B nccl, $n rank(s)" >> "$busbw_log"
    if timeout "$(limit 300)" mpirun.openmpi --oversubscribe -np "$n" "$bin/scdino_allreduce_perf" -B nccl -b 8 -e "${SCDINO_GPU_BUSBW_MAX:-1G}" -f 4 \
      -n 50 -w 5 -c 10 --json "$out/busbw-np$n.json" >> "$busbw_log" 2>&1; then
      note "NCCL all_reduce on $n rank(s): $(grep -E 'BENCH .* min_size_time' "$busbw_log" | tail -1 | sed 's/^# BENCH //')"
      [ "$n" -gt 1 ] && note "  $(grep -E 'BENCH .* max_size_busbw' "$busbw_log" | tail -1 | sed 's/^# BENCH //')"
    else
      note "scdino_allreduce_perf -B nccl on $n rank(s) failed: $(grep -m1 -E 'error|Error' "$busbw_log" || tail -1 "$busbw_log")"
    fi
  done
fi

# ---- the table ---------------------------------------------------------------------------------------
if [ -s "${results:-/nonexistent}" ]; then
  {
    echo
    printf '%-20s %5s %9s %9s %6s %7s %8s %6s %9s\n' run batch "step ms" "images/s" MFU "data ms" \
      "comp ms" "comm" "peak MiB"
    while read -r label rest; do
      get() { echo "$rest" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
      printf '%-20s %5s %9s %9s %6s %7s %8s %6s %9s\n' "$label" "$(get batch)" "$(get step_ms)" \
        "$(get images_per_s)" "$(get mfu)" "$(get data_ms)" "$(get compute_ms)" "$(get comm_ms)" \
        "$(get peak_mib)"
      if [ -n "$(get model_step_ms)" ]; then
        printf '%-20s %5s %9s %9s %6s  floor %s ms\n' "  model only" "$(get batch)" "$(get model_step_ms)" \
          "$(get model_images_per_s)" "$(get model_mfu)" "$(get floor_ms)"
      fi
    done < "$results"
  } | tee -a "$summary"
fi
# ---- the issue's goals -------------------------------------------------------------------------------
# The fastest scdino bf16 run at batch 64 (any attention, NCCL or MPI) against every PyTorch mode at
# batch 64: images/s of the model step (crops made once, as PyTorch's are) and of the full step (the
# GPU augmentation overlapped), the ratio to the fastest PyTorch mode, the attention's GPU time in
# the profiled step.
if [[ " $stages " == *" goals "* ]]; then
  if [ -s "$results" ]; then
    for form in none tanh; do
      awk -v form=$form '
        function get(k,   i) {
          for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2)
          return ""
        }
        function goal(what, v, g, unit, less) {
          printf "  %s: %s%s, goal %s%s%s: %s\n", what, v, unit, less ? "at most " : "at least ", g, unit,
                 (less ? v + 0 <= g : v + 0 >= g) ? "met" : "NOT met"
        }
        BEGIN { mine = form == "tanh" ? "^scdino-bf16-tanh(-tune)?$" : "^scdino-bf16(-gemm|-flash|-cudnn|-mpi|-tune)?$"
                tmine = form == "tanh" ? "^torch-.*-tanh$" : "^torch-[a-z-]*$" }
        $1 ~ mine && get("batch") == 64 {
          v = get("model_images_per_s") + 0
          if (v > best) { best = v; label = $1; full = get("images_per_s") + 0; attn = get("prof_attn_ms") + 0 }
        }
        $1 ~ tmine && (form == "tanh" || $1 !~ /-tanh$/) && get("batch") == 64 {
          v = get("images_per_s") + 0
          tl[++nt] = $1; tv[nt] = v
          if (v > tbest) { tbest = v; tlabel = $1 }
        }
        END {
          print ""
          if (best <= 0) { printf "goals (GELU %s): no scdino bf16 run at batch 64 in results.txt\n", form; exit }
          printf "goals at batch 64, bf16, GELU %s: scdino %s, %.1f images/s (model step), %.1f (full step, GPU augmentation)\n",
                 form == "tanh" ? "tanh (both sides)" : "exact (upstream)", label, best, full
          goal("model step images/s", sprintf("%.1f", best), 2500, "", 0)
          goal("full step images/s", sprintf("%.1f", full), 2400, "", 0)
          if (tbest <= 0) printf "  over PyTorch: not measured (no PyTorch run at batch 64)\n"
          else {
            for (i = 1; i <= nt; i++) printf "  over %s (%.1f images/s): %.2fx\n", tl[i], tv[i], best / tv[i]
            goal("over the fastest PyTorch, " tlabel, sprintf("%.2f", best / tbest), 1.8, "x", 0)
          }
          if (attn > 0) goal("attention, forward + backward (profiled step)", sprintf("%.2f", attn), 3.5, " ms", 1)
        }' "$results" | tee -a "$summary"
    done
  else
    note "goals: no results.txt (run the bench and torch stages)"
  fi
fi
echo "logs: $out (summary.txt, tests.log, bench.log, busbw.log, results.txt)"
