/* progress.c - the one progress printer (format in progress.h). */
#include "build_config.h"

#include <inttypes.h>
#include <stdio.h>

#include "core/log.h"
#include "core/progress.h"
#include "core/watchdog.h"

void progress_start(struct progress *p, const char *label, const char *unit, int64_t total, int64_t share,
                    double interval) {
  snprintf(p->label, sizeof p->label, "%s", label);
  watchdog_progress(p->label, -1);
  snprintf(p->unit, sizeof p->unit, "%s", unit);
  p->total = total;
  p->share = share;
  p->done = 0;
  p->bytes = 0;
  p->interval = interval;
  p->t0 = p->last = wtime();
  p->lines = 0;
}

const char *progress_fmt_eta(double elapsed, int64_t done, int64_t left, char *buf, size_t n) {
  if (done <= 0) {
    snprintf(buf, n, "?");
    return buf;
  }
  return log_fmt_duration(elapsed * (double)left / (double)done, buf, n);
}

/* Rank 0's count as a count of the whole (an empty share is done). */
static int64_t whole(const struct progress *p) {
  if (p->share <= 0) return p->total;
  return p->share == p->total ? p->done : p->done * p->total / p->share;
}

/* The line; `final` gives the end form. */
static void print_line(struct progress *p, double now, int final) {
  const double el = now - p->t0;
  const int64_t done = whole(p);
  const double pct = p->total > 0 ? 100.0 * (double)done / (double)p->total : 100.0;
  char rate[96], when[48];
  const int n = snprintf(rate, sizeof rate, "%.1f %s/s", el > 0 ? (double)done / el : 0.0, p->unit);
  if (p->bytes > 0 && n > 0 && (size_t)n < sizeof rate)
    snprintf(rate + n, sizeof rate - (size_t)n, ", %.1f MB/s", el > 0 ? p->bytes / el / 1e6 : 0.0);
  if (final) {
    log_info("%s: %" PRId64 "/%" PRId64 " %s (%.0f %%) in %s, %s", p->label, done, p->total, p->unit, pct,
             log_fmt_duration(el, when, sizeof when), rate);
  } else {
    log_info("%s: %" PRId64 "/%" PRId64 " %s (%.0f %%), %s, ETA %s", p->label, done, p->total, p->unit, pct, rate,
             progress_fmt_eta(el, done, p->total - done, when, sizeof when));
  }
  p->last = now;
  p->lines++;
}

void progress_update(struct progress *p, int64_t done, double bytes) {
  watchdog_progress(p->label, -1); /* work is being done: a rank stuck elsewhere ends the job */
  p->done = done;
  p->bytes = bytes;
  if (p->interval < 0 || !log_is_root()) return;
  const double now = wtime();
  /* The last update is left to progress_end, whose line says the same and how long it all took. */
  if (done >= (p->share > 0 ? p->share : p->total) || now - p->last < p->interval) return;
  print_line(p, now, 0);
}

void progress_end(struct progress *p) {
  if (p->interval < 0 || !log_is_root()) return;
  const double now = wtime();
  /* Work done within one interval stays silent, as it printed no line either. */
  if (p->lines == 0 && now - p->t0 < p->interval) return;
  print_line(p, now, 1);
}
