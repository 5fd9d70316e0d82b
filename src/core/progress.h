/* progress.h - the progress lines of the long loops (prepare's files, features' images, kNN's test
 * rows), printed by rank 0 at most every `interval` seconds (&control progress_seconds):
 *
 *   LABEL: DONE/TOTAL UNIT (PCT %), RATE UNIT/s[, MB/s], ETA DURATION
 *
 * and at the end, when the work took at least `interval` or a line was printed before:
 *
 *   LABEL: DONE/TOTAL UNIT (PCT %) in DURATION, RATE UNIT/s[, MB/s]
 *
 * Durations are log_fmt_duration's ("3.4s", "2m03s", "1h02m03s"); the MB/s column appears when
 * bytes are counted.  interval 0 prints a line at every update but the last (the end line says
 * it), a negative interval nothing. */
#ifndef SCDINO_PROGRESS_H
#define SCDINO_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

struct progress {
  char label[160], unit[32];
  int64_t total, share, done;
  double interval, t0, last, bytes;
  int lines;
};

/* Start counting `total` units.  share: the part of total that rank 0's own counts cover, when
 * each rank counts only its part of the work (features, kNN: the parts differ by a batch at most,
 * so rank 0's progress stands for every rank's and is scaled to the whole); total when the counts
 * are already global (prepare's, reduced over the ranks). */
void progress_start(struct progress *p, const char *label, const char *unit, int64_t total, int64_t share,
                    double interval);
/* done units (and bytes read, 0 when not counted) so far. */
void progress_update(struct progress *p, int64_t done, double bytes);
void progress_end(struct progress *p);

/* The time left when `done` of `done + left` units took `elapsed` seconds, as log_fmt_duration
 * writes it into buf; "?" before anything is done.  Returns buf. */
const char *progress_fmt_eta(double elapsed, int64_t done, int64_t left, char *buf, size_t n);

#endif
