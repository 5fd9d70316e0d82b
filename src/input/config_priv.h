/* config_priv.h - what config.c, config_check.c, config_suggest.c and config_text.c share: the
 * per-parse bookkeeping (where each key was set, which keys had errors) and small helpers. */
#ifndef SCDINO_CONFIG_PRIV_H
#define SCDINO_CONFIG_PRIV_H

#include <stddef.h>

#include "input/config.h"
#include "input/deck.h"

/* Bookkeeping of one parse; arrays are indexed by key (position in cfg_keys). */
struct cfg_state {
  struct deck *deck;  /* diagnostics go here */
  int *seen;          /* the deck assigns this key (even if wrongly) */
  int *bad;           /* an assignment of this key had an error: skip checks that use it */
  int *line, *col;    /* position of the key's last assignment */
  int *whole_line;    /* line of an assignment without subscript, 0 if none */
  int **elem_line;    /* per element: line of the assignment that set it, 0 if none */
};

static inline int config_key_index(const struct cfg_key *k) { return (int)(k - cfg_keys); }
/* config_table.c: the key or an internal failure (the checks name keys that must be in the table). */
const struct cfg_key *config_key(const char *group, const char *name);
/* Address of element i of key k in cfg, and of its element count (arrays only). */
void *config_field(const struct config *cfg, const struct cfg_key *k, int i);
int *config_count(const struct config *cfg, const struct cfg_key *k);
/* The i-th (0-based) upstream name of k's scdino field ("meta.seed") as *name, *len characters
 * long; 0 when it has no i-th name.  The note after "; " (README's table) is config_scdino_note,
 * "" when there is none. */
int config_scdino_name(const struct cfg_key *k, int i, const char **name, size_t *len);
const char *config_scdino_note(const struct cfg_key *k);
/* A range bound of k as text: integers in full (LLONG_MAX for the open top), reals with %g. */
void config_fmt_bound(const struct cfg_key *k, double x, char *out, size_t n);

/* Cross-key checks (config_check.c); run after every key has been applied.  defaults: the
 * configuration of an empty deck (a named architecture's keys must keep their defaults). */
void config_check(struct cfg_state *st, const struct config *cfg, const struct config *defaults);

/* Apply text, assignments as inside a deck group ("teacher_temp = 0.04, lr = 1e-4"), over cfg with
 * the deck reader and the key table's types, ranges and choices; find names the key of each
 * assignment (NULL: none may be set, the reason in why).  The keys set are written to keys (at most
 * maxkeys, in the text's order; *nkeys of them) and marked in cfg->deck_sets.  check: then also the
 * cross-key checks (config_check) of the result, when the assignments had no error.  Returns the
 * number of errors, their messages in msgs (size n), one a line. */
typedef const struct cfg_key *(*config_key_finder)(const char *name, char *why, size_t n);
int config_apply_assignments(struct config *cfg, const char *text, config_key_finder find, int check, int *keys,
                             int maxkeys, int *nkeys, char *msgs, size_t n);

/* Suggestions (config_suggest.c).  Edit distance is the optimal-string-alignment form of
 * Damerau-Levenshtein (adjacent transpositions cost 1), case-insensitive. */
int config_edit_distance(const char *a, const char *b);
/* Pick the candidates closest to word (a third of the length at most; also an abbreviation made
 * of the initials of underscore-separated parts, such as lr for learning_rate) and write them as
 * "'a'", "'a' or 'b'", "'a', 'b' or 'c'" into out (quote "&" writes &a).  Returns how many were written
 * (0: none); *first (if not NULL) gets the index of the first one. */
int config_suggest(const char *word, const char *const *cands, int ncand, const char *quote, char *out,
                   size_t n, int *first);
/* Upstream names of keys (scDINO/DINO option names: the table's scdino fields) -> the key here; NULL if
 * none.  A key of `group` (NULL: any) comes first where several have the name. */
const struct cfg_key *config_alias(const char *name, const char *group);

#endif
