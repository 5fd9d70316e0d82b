"""bench_result.py - the uniform result line of the Python benchmarks, as bench/bench_result.h prints it:
"BENCH name metric value unit [notes]" (name, metric and unit single tokens; a value that is not a
finite number is printed as "nan", which bench/run_all reports as null)."""
import math
import sys


def bench_result(name, metric, value, unit, notes=""):
    def token(s):
        return "".join("_" if c.isspace() else c for c in (str(s) or "-"))
    try:
        v = float(value)
        text = f"{v:.6g}" if math.isfinite(v) else "nan"
    except (TypeError, ValueError):
        text = "nan"
    notes = " ".join(str(notes).split())
    print(f"BENCH {token(name)} {token(metric)} {text} {token(unit)}{' ' + notes if notes else ''}")
    sys.stdout.flush()
