/* channel_sets.h - the channel combinations of a study (&study channel_sets): parsing one set's
 * text ("0,1,2" or "DAPI,BF"), comparing sets and naming their run folders. */
#ifndef SCDINO_CHANNEL_SETS_H
#define SCDINO_CHANNEL_SETS_H

#include <stddef.h>

#include "input/config.h"

#define CHANNEL_SET_MAX 64 /* channels in one set (as &data channels) */

/* Parse text: channels separated by commas (blanks around them ignored), each a 0-based source
 * channel index or one of names[0..nnames-1].  nchannels: the source channel count, -1 if not known
 * yet (indices are then checked against nnames when names are given).  Returns the number of
 * channels written to ch (at most CHANNEL_SET_MAX), or -1 with the reason in why; -2 when a
 * channel is a name but no names are known yet (nnames 0: resolved later, against the manifest). */
int channel_set_parse(const char *text, const char (*names)[CFG_WORDLEN], int nnames, int nchannels, long *ch,
                      char *why, size_t n);
/* Whether two sets select the same channels (in any order). */
int channel_set_same(const long *a, int na, const long *b, int nb);
/* The set's run folder: its channel names (names[c], or "ch<c>" beyond nnames) joined by '_'.
 * Returns -1 (why set) when it does not fit in n or a name holds '/' or is "." or "..". */
int channel_set_dirname(const long *ch, int nch, const char (*names)[CFG_WORDLEN], int nnames, char *out, size_t n,
                        char *why, size_t whyn);

/* Set i of a study's list texts[0..]: parsed as channel_set_parse does (into sets[i]), then, when
 * it parsed, compared with the sets before it (sets[j] with counts[j] channels; a negative count
 * is skipped).  Returns its channel count, -1 or -2 as channel_set_parse, or -3 when it selects
 * the same channels as an earlier set (why: "'<set>' selects the same channels as
 * channel_sets(<j>) = '<that set>'"). */
int channel_sets_parse_one(const char (*texts)[CFG_WORDLEN], int i, const char (*names)[CFG_WORDLEN], int nnames,
                           int nchannels, long (*sets)[CHANNEL_SET_MAX], const int *counts, char *why, size_t n);

#endif
