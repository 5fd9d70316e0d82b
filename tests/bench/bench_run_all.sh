#!/bin/sh
# bench_run_all.sh - bench/run_all --smoke (tiny sizes): every CPU benchmark gives its BENCH lines,
# the table and the JSON report hold the same results, what cannot run is skipped with a reason,
# and a failing benchmark (busbw with an injected wrong element) makes the status non-zero.
. "$top_srcdir/tests/lib.sh"
scratch bench_run_all
ra="$top_srcdir/bench/run_all"
py=$PYTHON3
[ "$py" = none ] && py=$(command -v python3 || echo none)

# Bad arguments: status 2, nothing written.
expect_exit 2 sh "$ra" --smoke --no-such-option --json "$dir/bad.json"
expect_exit 2 sh "$ra" --smoke --only nosuchbench --json "$dir/bad.json"
nchecks=$((nchecks + 1))
[ ! -e "$dir/bad.json" ] || fail "a JSON report was written for bad arguments"

# The smoke run: one thread per benchmark (other tests run beside it); a time limit per benchmark far
# above what the tiny sizes take on a loaded machine (run_all's smoke default is 60 s).
nchecks=$((nchecks + 1))
sh "$ra" --smoke --build "$top_builddir" --work "$dir/work" --json "$dir/report.json" --threads 1 --timeout 900 \
  > table.txt 2> progress.txt
rc=$?
if [ $rc != 0 ]; then
  fail "run_all --smoke: exit status $rc"
  sed 's/^/    | /' progress.txt table.txt >&2
fi
out=$(cat table.txt)
expect_grep '^benchmark +metric +value +unit +notes$'
expect_grep '^-{40,}$'
expect_grep '^memcpy_bw +copy_bw_peak +[0-9.e+]+ +GB/s '
expect_grep '^train_step +step_time +[0-9.e+-]+ +s +ViT D=32 L=1 '
expect_grep '^loader +raw_rate +[0-9.e+]+ +images/s '
expect_grep '^knn +gemm_gflops +[0-9.e+]+ +GFLOP/s '
if [ "$MPIEXEC" != none ]; then
  expect_grep '^busbw\.all_reduce\.mpi +peak_busbw +[0-9.e+-]+ +GB/s +2 ranks'
  expect_grep '^prepare\.np2 +files_per_s +[0-9.e+]+ +files/s '
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  expect_grep '^gpu_train +- +- +- +skipped: no GPU'
  expect_grep '^busbw_nccl +- +- +- +skipped: no GPU'
fi
out=$(cat progress.txt)
expect_grep '^run_all: report: .*/report\.json'
nchecks=$((nchecks + 1))
ls "$dir"/report.json.tmp.* >/dev/null 2>&1 && fail "temporary JSON file left behind"

# The JSON report: structure, machine, the runs, the results and their agreement with the table.
if [ "$py" != none ]; then
  nchecks=$((nchecks + 1))
  "$py" - "$dir/report.json" table.txt "$MPIEXEC" "$SCDINO" <<'PYEOF' || fail "JSON report"
import json, math, os, subprocess, sys
j = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read().splitlines()
mpi = sys.argv[3] != "none"
assert j["format"] == "scdino-bench-report" and j["format_version"] == 1 and j["mode"] == "smoke", j["mode"]
m = j["machine"]
assert m["cores"] == len(os.sched_getaffinity(0)) and m["memory_gib"] > 0 and m["cpu_model"], m
assert isinstance(m["gpus"], list) and len(m["load_average_start"]) == 3, m
ver = subprocess.run([sys.argv[4], "--version"], capture_output=True, text=True).stdout.splitlines()
assert j["versions"]["scdino"] == ver[0].split()[1], (j["versions"], ver[0])
assert j["versions"]["mpi"] and j["versions"]["hdf5"], j["versions"]
assert j["settings"]["threads"] == 1 and j["settings"]["timeout_s"] == 900 and j["settings"]["omp_wait_policy"], j["settings"]

runs = {r["id"]: r for r in j["runs"]}
ids = "memcpy busbw_mpi busbw_nccl train_cpu cpu_vs_torch gpu_train torch_gpu loader prepare knn".split()
assert sorted(runs) == sorted(ids), sorted(runs)
must_run = ["memcpy", "train_cpu", "loader", "knn"] + (["busbw_mpi", "prepare"] if mpi else [])
for r in j["runs"]:
    assert r["status"] in ("ok", "skipped"), r
    if r["status"] == "ok":
        assert r["exit_code"] == 0 and r["seconds"] >= 0 and r["command"] and os.path.exists(r["log"]), r
    else:
        assert r["reason"] and r["command"] is None, r
for i in must_run:
    assert runs[i]["status"] == "ok", runs[i]
if not mpi:
    assert runs["busbw_mpi"]["reason"].startswith("no MPI launcher"), runs["busbw_mpi"]

res = j["results"]
assert j["summary"]["results"] == len(res) and j["summary"]["ok"] + j["summary"]["skipped"] == len(ids), j["summary"]
val = {}
for r in res:
    assert runs[r["run"]]["status"] == "ok", r
    assert isinstance(r["value"], (int, float)) and math.isfinite(r["value"]) and r["value"] > 0, r
    assert r["unit"] and r["metric"] and " " not in r["benchmark"] + r["metric"] + r["unit"], r
    val[(r["benchmark"], r["metric"])] = r
for k in [("memcpy_bw", "copy_bw_peak"), ("memcpy_bw", "copy_bw_max_size"), ("train_step", "step_time"),
          ("train_step", "images_per_s"), ("train_step", "gemm_efficiency"), ("loader", "raw_rate"),
          ("loader", "augment_rate"), ("knn", "time"), ("knn", "gemm_gflops")] + \
         ([("busbw.all_reduce.mpi", "peak_busbw"), ("busbw.all_reduce.mpi", "max_size_busbw"),
           ("prepare.np1", "files_per_s"), ("prepare.np2", "files_per_s")] if mpi else []):
    assert k in val, k
# Numbers that must agree: the smoke step has batch 2; the peak busbw is at least that at the max size;
# the memcpy peak is at least the rate at the max size.
ts, ips = val[("train_step", "step_time")]["value"], val[("train_step", "images_per_s")]["value"]
assert abs(ts * ips - 2) < 1e-4, (ts, ips)
assert val[("memcpy_bw", "copy_bw_peak")]["value"] >= val[("memcpy_bw", "copy_bw_max_size")]["value"]
if mpi:
    assert val[("busbw.all_reduce.mpi", "peak_busbw")]["value"] >= val[("busbw.all_reduce.mpi", "max_size_busbw")]["value"]
if runs["cpu_vs_torch"]["status"] == "ok":
    assert ("cpu_vs_torch.tiny", "ratio") in val and ("torch_step", "step_time") not in val

# The table: header, rule, one row per result (same benchmark, metric, value, unit, notes), then
# one row per skipped benchmark.
assert table[0].split() == ["benchmark", "metric", "value", "unit", "notes"] and set(table[1]) == {"-"}, table[:2]
rows = table[2:]
skipped = [r for r in j["runs"] if r["status"] == "skipped"]
assert len(rows) == len(res) + len(skipped), (len(rows), len(res), len(skipped))
for row, r in zip(rows, res):
    f = row.split(None, 4)
    assert f[0] == r["benchmark"] and f[1] == r["metric"] and f[3] == r["unit"], (row, r)
    assert abs(float(f[2]) - r["value"]) <= 1e-9 * abs(r["value"]) and (f[4] if len(f) > 4 else "") == r["notes"], (row, r)
for row, r in zip(rows[len(res):], skipped):
    f = row.split(None, 4)
    assert f[0] == r["id"] and f[1:4] == ["-", "-", "-"] and f[4] == "skipped: " + r["reason"], (row, r)
PYEOF
fi

# A benchmark that fails: busbw with a wrong element injected exits 7; run_all says FAILED, exits 1.
if [ "$MPIEXEC" != none ]; then
  nchecks=$((nchecks + 1))
  SCDINO_BUSBW_INJECT_FAULT=1:0 sh "$ra" --smoke --build "$top_builddir" --work "$dir/work2" \
    --json "$dir/fail.json" --only busbw_mpi > table2.txt 2> progress2.txt
  rc=$?
  [ $rc = 1 ] || fail "run_all with a failing benchmark: exit status $rc (wanted 1)"
  out=$(cat table2.txt)
  expect_grep '^busbw_mpi +- +- +- +FAILED: exit status 7: # Out of bounds values : [0-9]+ FAILED$'
  if [ "$py" != none ]; then
    nchecks=$((nchecks + 1))
    "$py" - "$dir/fail.json" <<'PYEOF' || fail "JSON report of the failed run"
import json, sys
j = json.load(open(sys.argv[1]))
(r,) = j["runs"]
assert r["id"] == "busbw_mpi" and r["status"] == "failed" and r["exit_code"] == 7, r
assert j["summary"] == {"ok": 0, "failed": 1, "timeout": 0, "skipped": 0, "results": len(j["results"])}, j["summary"]
PYEOF
  fi
fi
finish
