/* study_settings.h - the hyperparameter settings of a study (&study settings) and the run folders
 * of a study.
 *
 * A setting is a string of assignments as inside a deck group ("teacher_temp = 0.04, lr = 1e-4"),
 * read by the deck reader and applied over the study's deck with the key table's types, ranges and
 * choices (config_apply_assignments): no second parser.  A key is named by its own name; the keys a
 * study may vary (study_setting_refused) have names no other variable key has.  The run's folder
 * is its keys and values joined by '_' (teacher_temp_0.04), the values as the echoed deck writes
 * them (so 1e-4 and 0.0001 are one folder), after its channel set's folder when the study has
 * channel sets too (every set runs every setting).  Every folder is checked (study_folder_check)
 * and compared with the others (study_folders_check) before any run starts. */
#ifndef SCDINO_STUDY_SETTINGS_H
#define SCDINO_STUDY_SETTINGS_H

#include <stddef.h>

#include "input/channel_sets.h"
#include "input/config.h"

#define STUDY_SETTING_KEYS 16             /* keys in one setting */
#define STUDY_FOLDER_LEN (CFG_STRLEN / 2) /* a run folder's name, with its end */

struct study_setting {
  int nkeys;
  int key[STUDY_SETTING_KEYS];     /* indices into cfg_keys, in the order the setting names them */
  char folder[STUDY_FOLDER_LEN];   /* its keys and values joined by '_'; "" when it cannot be named */
};

/* Why a study may not vary key k, or NULL when it may: keys of &training (but restart), &model,
 * &crops, and control.seed. */
const char *study_setting_refused(const struct cfg_key *k);

/* The deck a run of the study starts from: the study's as calculation = 'pipeline', without its
 * &study keys (a run's input.echo.nml reruns it alone). */
void study_run_base(const struct config *study, struct config *c);

/* Apply setting text over c (a study_run_base deck) into s (keys and folder).  check: also the
 * deck's cross-key checks on the result (at deck time; a run applies a setting checked then).
 * Returns the number of errors, their messages in msgs (size n), one a line. */
int study_setting_apply(const char *text, struct config *c, int check, struct study_setting *s, char *msgs,
                        size_t n);

/* Key k's value in c as a folder name and the study's table show it: the echo's text ("0.04",
 * "0.0001"), strings without their quotes, logicals as true/false, elements joined by ','. */
void study_setting_value(const struct config *c, const struct cfg_key *k, char *out, size_t n);

/* Why name cannot be a run folder under run_dir (why set), or NULL: empty, '/', '.' first (hidden;
 * run_dir's lock is .scdino.lock), a control character, one of the study's own outputs in run_dir
 * (study.txt, study.h5, input.echo.nml, plots), ending like an output file (.h5, .txt, .nml, .png),
 * longer than name_max bytes (the file system's NAME_MAX), or making run_dir/<name> longer than
 * CFG_STRLEN - 1 - CHANNEL_SET_PATH_ROOM. */
const char *study_folder_check(const char *name, const char *run_dir, long name_max, char *why, size_t n);

/* A run's folder: its channel set's folder and its setting's joined by '_' (either may be "").
 * Returns -1 when it does not fit in n. */
int study_folder_join(const char *set, const char *setting, char *out, size_t n);

/* Run i of the study's deck in messages: "channel_sets(a) = '...' with settings(b) = '...'", or
 * either alone when the study has only channel sets or only settings.  The runs are every set with
 * every setting, set after set: run i is set i / nsettings, setting i % nsettings. */
void study_run_label(const struct config *study, int i, char *out, size_t n);

/* Check the run folders folder[0..n-1]: each with study_folder_check, and none the same folder as
 * one before it (channel_set_folders_clash).  Returns -1 when all are good; else the first bad
 * row, with *other the earlier row it clashes with (-1: its folder is refused, why set). */
int study_folders_check(const char (*folder)[STUDY_FOLDER_LEN], int n, const char *run_dir, long name_max,
                        int *other, char *why, size_t whyn);

#endif
