/* channel_sets.h - the channel combinations of a study (&study channel_sets): parsing one set's
 * text ("0,1,2" or "DAPI,BF"), comparing sets and naming their run folders. */
#ifndef SCDINO_CHANNEL_SETS_H
#define SCDINO_CHANNEL_SETS_H

#include <stddef.h>

#include "input/config.h"

#define CHANNEL_SET_MAX 64 /* channels in one set (as &data channels) */
/* Room kept after a set's folder path (run_dir/<set>) for the file names the pipeline puts in it
 * and keeps in deck strings of CFG_STRLEN (run_dir/<set>/features_0001.h5 as knn.features). */
#define CHANNEL_SET_PATH_ROOM 64

/* Parse text: channels separated by commas (blanks around them ignored), each a 0-based source
 * channel index or one of names[0..nnames-1]; a channel in double (or single) quotes is always a
 * name.  A bare number is an index, or the name of a channel when no channel has that index (names
 * such as '405'); a number that is both the index of one channel and the name of another is refused
 * as ambiguous.  nchannels: the source channel count, -1 if not known yet (indices are then checked
 * against nnames when names are given).  Returns the number of channels written to ch (at most
 * CHANNEL_SET_MAX), or -1 with the reason in why; -2 when a channel is a name but no names are
 * known yet (nnames 0: resolved later, against the manifest). */
int channel_set_parse(const char *text, const char (*names)[CFG_WORDLEN], int nnames, int nchannels, long *ch,
                      char *why, size_t n);
/* Whether two sets select the same channels (in any order). */
int channel_set_same(const long *a, int na, const long *b, int nb);
/* The set's run folder: its channel names (names[c], or "ch<c>" beyond nnames) joined by '_', as
 * scDINO names its runs.  Returns -1 (why set) when the folder cannot be run_dir/<it>: a channel
 * name that is empty, "." or "..", or holds '/' (the folder would be run_dir itself or elsewhere);
 * a folder name that study_folder_check refuses (study_settings.h: hidden, reserved, too long, ...);
 * or when it does not fit in out (n). */
int channel_set_dirname(const long *ch, int nch, const char (*names)[CFG_WORDLEN], int nnames, const char *run_dir,
                        long name_max, char *out, size_t n, char *why, size_t whyn);
/* Whether two sets' folders are one: the same name, or names that differ only in case (one folder
 * on a file system that ignores case).  Two sets such as 'a_b,c' and 'a,b_c' (both a_b_c) clash. */
int channel_set_folders_clash(const char *a, const char *b);

/* ---- a study's list of sets, each parsed once and compared with those before it --------------- */

#define CHANNEL_SET_LIST_MAX 32 /* sets in one list (&study channel_sets) */

struct channel_set_list {
  /* set by the caller */
  const char (*texts)[CFG_WORDLEN]; /* the sets as written */
  const char (*names)[CFG_WORDLEN]; /* the channel names known (nnames of them; 0: not known yet) */
  int nnames, nchannels;            /* nchannels: the source channel count, -1 if not known yet */
  const char *run_dir;              /* NULL: the folders are not named (the channel names come later) */
  long name_max;                    /* the file system's NAME_MAX under run_dir */
  /* filled per set by channel_set_list_add */
  long ch[CHANNEL_SET_LIST_MAX][CHANNEL_SET_MAX];
  int count[CHANNEL_SET_LIST_MAX];
  char folder[CHANNEL_SET_LIST_MAX][CFG_STRLEN / 2];
};

/* Set i of the list: parsed as channel_set_parse does (into ch[i]); its run folder named and
 * checked as channel_set_dirname does (into folder[i]) when run_dir is set; then compared with
 * the sets before it that resolved.  Returns its channel count; -1 or -2 as channel_set_parse;
 * -3 when its folder cannot be made (why: the reason); -4 when it selects the same channels as an
 * earlier set (why: "'<set>' selects the same channels as channel_sets(<j>) = '<that set>'"); -5
 * when it would write an earlier set's folder (why: "'<set>' would write the folder ..."). */
int channel_set_list_add(struct channel_set_list *l, int i, char *why, size_t n);

#endif
