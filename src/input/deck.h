/* deck.h - Fortran-namelist reader: groups, keys, subscripts and typed values with line/column,
 * independent of the configuration table (config.c gives the entries their meaning).
 *
 * Grammar accepted (see deck.c for the details and the choices made where Fortran is vague):
 *   &group key = value [, value ...] [key(i) = ...] [key(i:j) = ...] /     (or $group ... $end,
 *   &group ... &end); `!` comments; values separated by commas and/or blanks and newlines; a
 *   trailing comma; integers, reals with e/E/d/D exponents, logicals (T, F, true, false, and
 *   anything starting with .T/.F), strings in '...' or "..." (a doubled quote is a quote; a
 *   string ends on its own line), repeat counts r*value and r* (r null values), null values
 *   (a = 1,,3).  Names are case-insensitive and stored in lower case. */
#ifndef SCDINO_DECK_H
#define SCDINO_DECK_H

#include <stddef.h>

#include "core/check.h"

enum deck_kind { DECK_NULL, DECK_INT, DECK_REAL, DECK_LOGICAL, DECK_STRING };

struct deck_value {
  enum deck_kind kind;
  long long repeat; /* r of r*value (1 without a repeat count) */
  long long i;      /* DECK_INT */
  double r;         /* DECK_INT and DECK_REAL (the integer converted) */
  int b;            /* DECK_LOGICAL: 0 or 1 */
  char *s;          /* DECK_STRING: the unescaped text */
  char *text;       /* the value as written (for messages) */
  int line, col;
};

struct deck_entry {
  int group;            /* index into deck.groups */
  char *key;            /* lower case */
  int has_sub;          /* a subscript was written: key(lo) or key(lo:hi) */
  long long lo, hi;     /* 1-based; hi = lo for key(lo) (the list may run on past hi then) */
  int is_range;         /* key(lo:hi): at most hi-lo+1 values */
  struct deck_value *values;
  int nvalues;
  int bad;              /* a syntax error inside this entry: do not apply it */
  int line, col;        /* of the key */
};

struct deck_group {
  char *name; /* lower case */
  int line, col;
  int closed; /* a '/', &end or $end was seen */
};

struct deck_diag {
  int line, col; /* line 0: about the whole file, no source line shown */
  int seq;       /* order of discovery, to keep sorting stable */
  char *msg;
};

/* Limits on what a deck may make the reader keep: a 16 MiB file of commas or errors must not
 * take gigabytes or minutes.  No key takes more than a few dozen values. */
#define DECK_MAX_VALUES 65536 /* values (before repeat counts) of one key */
#define DECK_MAX_DIAGS 1000   /* diagnostics kept; later ones are only counted (deck.nmore) */

struct deck {
  char *path;
  char **lines; /* source lines without their newline, for echoing in messages */
  int nlines;
  struct deck_group *groups;
  int ngroups;
  struct deck_entry *entries;
  int nentries;
  struct deck_diag *diags;
  int ndiags;
  int nmore; /* diagnostics after the first DECK_MAX_DIAGS: counted, not kept */
};

/* Parse `text` (NUL-terminated; `path` is used in messages).  Never stops at the first error:
 * every problem becomes a diagnostic in deck->diags and parsing resumes at the next line. */
void deck_parse(struct deck *d, const char *path, const char *text);
void deck_free(struct deck *d);

/* Add a diagnostic at line/col (line 0 = the whole file). */
void deck_error(struct deck *d, int line, int col, const char *fmt, ...) SCD_PRINTF(4, 5);
/* Whether DECK_MAX_DIAGS diagnostics are kept already (later ones need no careful wording). */
int deck_full(const struct deck *d);
/* For the reader's arrays: `p` (holding n elements of `elem` bytes) with room for one more;
 * capacities double, so reading stays linear in the size of the deck. */
void *deck_grow(void *p, int n, size_t elem);

/* All diagnostics, sorted by position (whole-file ones last), each as
 *   path:line:col: message
 *   <the source line>
 *   <caret under the column>
 * into buf (always NUL-terminated; "(... more errors not shown)" when it does not fit).
 * Returns the number of diagnostics, those counted beyond DECK_MAX_DIAGS included. */
int deck_format_errors(const struct deck *d, char *buf, size_t n);

/* Parse a bare value list ("5, 10, 3*0.5") into values; for the table's default texts.
 * Returns the number of errors (0 on success); *vals must be released with deck_values_free. */
int deck_parse_values(const char *text, struct deck_value **vals, int *n);
void deck_values_free(struct deck_value *vals, int n);

#endif
