#!/bin/sh
# tests/bench/torch_dino_step.sh - bench/torch_dino_step.py, the PyTorch side of the GPU benchmark, on the
# CPU with a small model: the step runs and its loss is finite, and its FLOP count (the MFU's
# numerator) equals bench_step_count_flops' (bench/train_step, gpu_train_bench) for the same model,
# crops and batch.  Skipped without torch; torch 1.13 (Debian) and 2.x both run it.
. "$top_srcdir/tests/lib.sh"
[ "$PYTHON3" = none ] && skip "no python3"
"$PYTHON3" -c "import torch" 2>/dev/null || skip "python3 has no torch"
scratch torch_dino_step
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
expect_exit 0 "$PYTHON3" "$top_srcdir/bench/torch_dino_step.py" --device cpu --mode eager --dim 64 --depth 2 \
  --heads 2 --patch 16 --chans 5 --global-size 64 --local-size 32 --n-local 2 --out-dim 1024 --batch 16 \
  --steps 2 --warmup 1
expect_grep '^eager step  2: [0-9.]+ ms, loss [0-9]+\.[0-9]+$'
expect_grep '^RESULT mode=eager batch=16 step_ms=[0-9.]+ images_per_s=[0-9.]+ '
py=$(printf '%s\n' "$out" | sed -n 's/^RESULT .* flop=\([0-9]*\) .*/\1/p')
expect_exit 0 "$top_builddir/bench/train_step" -D 64 -L 2 -H 2 -p 16 -C 5 -B 16 -g 64 -l 32 -n 2 -K 1024 \
  -M 2048 -b 256 -s 1 -t 1
c=$(printf '%s\n' "$out" | sed -n 's/.* GFLOP per step (\([0-9]*\) FLOP)$/\1/p')
nchecks=$((nchecks + 1))
{ [ -n "$py" ] && [ "$py" = "$c" ]; } || fail "FLOP per step: torch_dino_step.py '$py', bench/train_step '$c'"
finish
