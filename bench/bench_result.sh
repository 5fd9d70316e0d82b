# bench/bench_result.sh - the uniform result line for the shell benchmarks (sourced), the same as
# bench/bench_result.h prints: "BENCH name metric value unit [notes]".
#   bench_result NAME METRIC VALUE UNIT [NOTES...]
# NAME, METRIC and UNIT are single tokens (blanks become '_'); an empty or non-numeric VALUE is
# printed as "nan" (bench/run_all reports it as null).
# shellcheck shell=sh
bench_result() {
  _br_name=$(printf '%s' "${1:--}" | tr ' \t' '__')
  _br_metric=$(printf '%s' "${2:--}" | tr ' \t' '__')
  _br_value=$3
  _br_unit=$(printf '%s' "${4:--}" | tr ' \t' '__')
  shift 4
  case $_br_value in '' | *[!0-9.eE+-]*) _br_value=nan ;; esac
  case $_br_value in *[0-9]*) ;; *) _br_value=nan ;; esac
  printf 'BENCH %s %s %s %s%s\n' "$_br_name" "$_br_metric" "$_br_value" "$_br_unit" "${*:+ $*}"
}
