#!/bin/sh
# bench/cpu_vs_torch.sh - the same DINO training step in scdino's CPU backend and in PyTorch.
#
#   bench/cpu_vs_torch.sh [BUILD_DIR]        (BUILD_DIR: where bench/train_step is built; default .)
#   THREADS=2 STEPS=3 PYTHON=/usr/bin/python3 CONFIGS="demo vit_tiny" bench/cpu_vs_torch.sh build
#
# For each configuration, bench/train_step (scdino, built by `make`) and
# bench/torch_step.py (PyTorch, same model, crops, batch and step) run one after the other with the
# same number of threads; each reports its best step of STEPS (after a warm-up step).  Printed: both
# step times, the ratio scdino / PyTorch (<= 1: scdino is no slower), and scdino's GEMM efficiency
# (its Linear/matmul ops against a plain cblas_sgemm loop over the same shapes).  Run it on a quiet
# machine; repeat it and take the best.  Each row is also given as BENCH lines named
# cpu_vs_torch.CONFIG (bench/bench_result.sh): scdino_step_time, torch_step_time, ratio, gemm_efficiency.
#   tiny      a one-block toy (seconds; bench/run_all --smoke)
#   demo      the demo deck's model: ViT D=64 depth 2 p8, crops 64/32 x4, K=4096, batch 32
#   vit_tiny  DINO's ViT-Ti/16 on 5 channels, crops 224/96 x8, K=65536, batch 8
#   small     a ViT-S/16 width at depth 4 (D=384), crops 224/96 x8, K=65536, batch 4
set -eu
build=${1:-.}
threads=${THREADS:-2}
steps=${STEPS:-3}
py=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_result.sh"
exe="$build/bench/train_step"
[ -x "$exe" ] || { echo "cpu_vs_torch.sh: $exe not found (run make in the build directory)"; exit 2; }
"$py" -c "import torch" 2>/dev/null || { echo "cpu_vs_torch.sh: $py has no torch"; exit 2; }
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

args_of() {
  case $1 in
    tiny) echo "-D 32 -L 1 -H 2 -p 8 -C 2 -B 2 -g 32 -l 16 -n 2 -K 256 -M 64 -b 32" ;;
    demo) echo "-D 64 -L 2 -H 2 -p 8 -C 5 -B 32 -g 64 -l 32 -n 4 -K 4096 -M 512 -b 128" ;;
    vit_tiny) echo "-D 192 -L 12 -H 3 -p 16 -C 5 -B 8 -g 224 -l 96 -n 8 -K 65536 -M 2048 -b 256" ;;
    small) echo "-D 384 -L 4 -H 6 -p 16 -C 5 -B 4 -g 224 -l 96 -n 8 -K 65536 -M 2048 -b 256" ;;
    *) echo "cpu_vs_torch.sh: unknown configuration $1" >&2; exit 2 ;;
  esac
}

printf '%-9s %8s %12s %12s %14s %8s\n' config threads "scdino s" "PyTorch s" "scdino/torch" "GEMM eff"
for c in ${CONFIGS:-demo vit_tiny}; do
  a=$(args_of "$c")
  # shellcheck disable=SC2086
  so=$("$exe" $a -s "$steps" -t "$threads" -G)
  # shellcheck disable=SC2086
  to=$("$py" "$here/torch_step.py" $a -s "$steps" -t "$threads")
  s=$(printf '%s\n' "$so" | sed -n 's/^best step \([0-9.]*\) s.*/\1/p')
  t=$(printf '%s\n' "$to" | sed -n 's/^best step \([0-9.]*\) s.*/\1/p')
  g=$(printf '%s\n' "$so" | sed -n 's/.*GEMM efficiency \([0-9]*\)%.*/\1/p')
  if [ -n "${VERBOSE:-}" ]; then printf '%s\n%s\n' "$so" "$to"; fi
  r=$(awk -v s="$s" -v t="$t" 'BEGIN { if (t > 0) printf "%.2f", s / t }')
  printf '%-9s %8s %12s %12s %14s %7s%%\n' "$c" "$threads" "$s" "$t" "$r" "$g"
  notes="$threads thread(s), best of $steps steps"
  bench_result "cpu_vs_torch.$c" scdino_step_time "$s" s "$notes"
  bench_result "cpu_vs_torch.$c" torch_step_time "$t" s "$notes, PyTorch $("$py" -c 'import torch; print(torch.__version__)')"
  bench_result "cpu_vs_torch.$c" ratio "$r" x "scdino step time / PyTorch step time (<= 1: scdino no slower)"
  bench_result "cpu_vs_torch.$c" gemm_efficiency "$g" % "plain cblas_sgemm loop over scdino's GEMM ops, same shapes"
done
