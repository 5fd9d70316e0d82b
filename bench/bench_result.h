/* bench_result.h - the uniform result line of every benchmark: "BENCH name metric value unit [notes]".
 *
 * One line per headline number, next to each program's own human-readable output; bench/run_all
 * collects them into its table and JSON report (bench/README.md lists every name and metric).
 * name, metric and unit are single tokens (blanks become '_'); the value is printed with %.6g
 * ("nan" when it is not finite, which run_all reports as null); notes are free text to the end of
 * the line.  Programs whose output other tools parse (the nccl-tests table) put "# " before it.
 * Header-only, so benchmarks that do not link libscdino.a (memcpy_bw) use it too. */
#ifndef SCDINO_BENCH_RESULT_H
#define SCDINO_BENCH_RESULT_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

/* Format checking of the notes (GCC and Clang); not check.h's, which memcpy_bw does not use. */
#if defined(__GNUC__)
#define BENCH_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define BENCH_PRINTF(a, b)
#endif

static inline void bench_result_token(FILE *f, const char *s) {
  if (!s || !*s) s = "-";
  for (; *s; s++) fputc(*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' ? '_' : *s, f);
}

/* The line to f, after lead ("" or "# "); notes_fmt may be NULL. */
static inline void bench_vresult_to(FILE *f, const char *lead, const char *name, const char *metric, double value,
                                    const char *unit, const char *notes_fmt, va_list ap) {
  char notes[512] = "";
  if (notes_fmt) vsnprintf(notes, sizeof notes, notes_fmt, ap);
  for (char *p = notes; *p; p++)
    if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
  fprintf(f, "%sBENCH ", lead ? lead : "");
  bench_result_token(f, name);
  fputc(' ', f);
  bench_result_token(f, metric);
  if (isfinite(value))
    fprintf(f, " %.6g ", value);
  else
    fprintf(f, " nan ");
  bench_result_token(f, unit);
  fprintf(f, "%s%s\n", notes[0] ? " " : "", notes);
  fflush(f);
}

static inline void bench_result_to(FILE *f, const char *lead, const char *name, const char *metric, double value,
                                   const char *unit, const char *notes_fmt, ...) BENCH_PRINTF(7, 8);
static inline void bench_result(const char *name, const char *metric, double value, const char *unit,
                                const char *notes_fmt, ...) BENCH_PRINTF(5, 6);

static inline void bench_result_to(FILE *f, const char *lead, const char *name, const char *metric, double value,
                                   const char *unit, const char *notes_fmt, ...) {
  va_list ap;
  va_start(ap, notes_fmt);
  bench_vresult_to(f, lead, name, metric, value, unit, notes_fmt, ap);
  va_end(ap);
}

/* The usual case: the line on stdout. */
static inline void bench_result(const char *name, const char *metric, double value, const char *unit,
                                const char *notes_fmt, ...) {
  va_list ap;
  va_start(ap, notes_fmt);
  bench_vresult_to(stdout, "", name, metric, value, unit, notes_fmt, ap);
  va_end(ap);
}

#endif
