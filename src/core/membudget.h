/* membudget.h - the memory a calculation will need per rank, added up from the deck's keys and
 * checked against what the rank may use before anything large is allocated.
 *
 * A deck that cannot fit (a huge batch, a huge kNN pixel_size, schedules for a million epochs of a
 * large data set) then ends at once with exit status 2 naming the keys that size each part, not
 * hours later with an allocation failure that names a source file.  The parts are the large
 * buffers of each calculation (doc/architecture.md, "Memory"); the estimate leaves out the
 * libraries' own memory, so it is a floor: a deck above it cannot run, one below may still be
 * tight. */
#ifndef SCDINO_MEMBUDGET_H
#define SCDINO_MEMBUDGET_H

#include <stddef.h>

#include "core/check.h"

#define MEMBUDGET_MAX_ITEMS 16

struct membudget {
  int n;
  struct {
    double bytes;
    char what[64];  /* "activations of a training step" */
    char keys[192]; /* "batch_size_per_rank = 64, global_size, local_size, local_crops_number, the model" */
  } item[MEMBUDGET_MAX_ITEMS];
};

/* One part: bytes (a double, so no product of absurd keys can overflow), what it is, the keys
 * that size it (printf format). */
void membudget_add(struct membudget *b, double bytes, const char *what, const char *keys_fmt, ...)
    SCD_PRINTF(4, 5);
double membudget_total(const struct membudget *b);

/* The bytes one rank may use: gib > 0 is &system memory_per_rank; 0 takes the node's memory (the
 * smaller of the physical memory and the job's cgroup limit) over the ranks on this node, and
 * RLIMIT_AS when lower.  *how (size n) says where the number came from. */
double membudget_limit(double gib, char *how, size_t n);

/* Collective: each rank's total against its limit (bytes; how says where it came from, as
 * membudget_limit's); over it on any rank, the job ends (SCD_EXIT_INPUT) with what (the
 * calculation and the kind of memory), both numbers, and every part with its keys.  Otherwise a
 * line at verbosity 2. */
void membudget_check(const struct membudget *b, const char *what, double limit, const char *how);

#endif
