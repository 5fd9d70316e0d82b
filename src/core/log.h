/* log.h - output with timestamps and verbosity levels, the wall clock, durations as text. */
#ifndef SCDINO_LOG_H
#define SCDINO_LOG_H

#include <stdio.h>

#include "core/check.h"

/* Verbosity (&control verbosity): 0 quiet (errors and warnings), 1 progress, 2 detail, 3 debug:
 * every rank's own view besides (its share of the data, its timings, the phases of a checkpoint
 * write), for a stuck or slow multi-rank run. */
void log_init(int rank, int verbosity);
int log_verbosity(void);
int log_is_root(void);
/* Every line after this starts with "[tag] " (after the time stamp); "" = none.  A study's groups
 * print at the same time, each line naming its channel set. */
void log_set_tag(const char *tag);

void log_info(const char *fmt, ...) SCD_PRINTF(1, 2);   /* rank 0, verbosity >= 1 */
void log_detail(const char *fmt, ...) SCD_PRINTF(1, 2); /* rank 0, verbosity >= 2 */
void log_debug(const char *fmt, ...) SCD_PRINTF(1, 2);  /* every rank, prefixed with its number, verbosity >= 3 */
void log_warn(const char *fmt, ...) SCD_PRINTF(1, 2);   /* rank 0, always */
void log_rank(const char *fmt, ...) SCD_PRINTF(1, 2);   /* any rank, prefixed with its number */
/* Print without timestamp (tables, echoed decks); rank 0, verbosity >= 1. */
void log_raw(const char *fmt, ...) SCD_PRINTF(1, 2);

/* Monotonic wall-clock seconds. */
double wtime(void);
/* Sleep s seconds (s <= 0: not at all), the whole time even when a signal arrives meanwhile. */
void wsleep(double s);

/* Format seconds as "1h02m03s" / "2m03s" / "3.4s" into buf (for ETA columns). */
const char *log_fmt_duration(double s, char *buf, size_t n);
/* Peak resident memory of this process in MiB (from getrusage). */
double log_peak_rss_mib(void);

#endif
