/* log.c - output with timestamps and verbosity levels, the wall clock, durations as text. */
#include "build_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#include "core/log.h"

static int log_rank_id = 0;
static int log_level = 1;
static char log_tag[80];

void log_init(int rank, int verbosity) {
  log_rank_id = rank;
  log_level = verbosity;
}

int log_verbosity(void) { return log_level; }
int log_is_root(void) { return log_rank_id == 0; }

void log_set_tag(const char *tag) {
  if (tag[0])
    snprintf(log_tag, sizeof log_tag, "[%s] ", tag);
  else
    log_tag[0] = '\0';
}

double wtime(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void wsleep(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) { /* the rest, after a signal */
  }
}

static void stamp(FILE *f) {
  time_t now = time(NULL);
  struct tm tmv;
  localtime_r(&now, &tmv);
  fprintf(f, "[%02d:%02d:%02d] ", tmv.tm_hour, tmv.tm_min, tmv.tm_sec);
}

static void vlog(FILE *f, const char *prefix, int with_stamp, const char *fmt, va_list ap) {
  if (with_stamp) stamp(f);
  fputs(log_tag, f);
  if (prefix) fputs(prefix, f);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  fflush(f);
}

#define LOG_BODY(cond, file, prefix, with_stamp) \
  do {                                           \
    if (!(cond)) return;                         \
    va_list ap;                                  \
    va_start(ap, fmt);                           \
    vlog(file, prefix, with_stamp, fmt, ap);     \
    va_end(ap);                                  \
  } while (0)

void log_info(const char *fmt, ...) { LOG_BODY(log_rank_id == 0 && log_level >= 1, stdout, NULL, 1); }
void log_detail(const char *fmt, ...) { LOG_BODY(log_rank_id == 0 && log_level >= 2, stdout, NULL, 1); }
void log_warn(const char *fmt, ...) { LOG_BODY(log_rank_id == 0, stderr, "warning: ", 1); }

void log_debug(const char *fmt, ...) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "[rank %d] ", log_rank_id);
  LOG_BODY(log_level >= 3, stdout, prefix, 1);
}

void log_rank(const char *fmt, ...) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "[rank %d] ", log_rank_id);
  LOG_BODY(1, stdout, prefix, 1);
}

void log_raw(const char *fmt, ...) {
  if (log_rank_id != 0 || log_level < 1) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fflush(stdout);
}

const char *log_fmt_duration(double s, char *buf, size_t n) {
  if (s < 0 || s != s) s = 0;
  long is = (long)(s + 0.5);
  if (s < 60)
    snprintf(buf, n, "%.1fs", s);
  else if (is < 3600)
    snprintf(buf, n, "%ldm%02lds", is / 60, is % 60);
  else
    snprintf(buf, n, "%ldh%02ldm%02lds", is / 3600, (is / 60) % 60, is % 60);
  return buf;
}

double log_peak_rss_mib(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
  return (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}
