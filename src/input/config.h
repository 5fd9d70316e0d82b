/* config.h - the typed run configuration, generated from config_keys.def.
 *
 * Access is cfg->group.key (cfg->training.lr; arrays as cfg->data.channels[i] with the count in
 * cfg->data.n_channels).  The struct is plain data, so rank 0 parses the deck and broadcasts it
 * as bytes. */
#ifndef SCDINO_CONFIG_H
#define SCDINO_CONFIG_H

#include <stddef.h>

#define CFG_STRLEN 1024 /* paths and free text */
#define CFG_WORDLEN 64  /* choices and names   */
#define CFG_NOMIN (-1e300)
#define CFG_NOMAX (1e300)
#define CFG_MAX_KEYS 256 /* keys in config_keys.def, at most (checked where the table is built) */

/* The first line of every &system metrics_file that scdino writes (train/train_metrics.c): an existing
 * file is replaced only when it begins so or is empty (config_check.c, at deck time). */
#define CFG_METRICS_FIRST_LINE "# HELP scdino_info "

struct config {
#define CFG_GROUP(g, doc) struct {
#define CFG_END(g) } g;
#define CFG_INT(g, n, def, lo, hi, rs, sc, doc) long n;
#define CFG_REAL(g, n, def, lo, hi, rs, sc, doc) double n;
#define CFG_BOOL(g, n, def, rs, sc, doc) int n;
#define CFG_STR(g, n, def, rs, sc, doc) char n[CFG_STRLEN];
#define CFG_CHOICE(g, n, def, choices, rs, sc, doc) char n[CFG_WORDLEN];
#define CFG_INTS(g, n, max, def, lo, hi, rs, sc, doc) long n[max]; int n_##n;
#define CFG_REALS(g, n, max, def, lo, hi, rs, sc, doc) double n[max]; int n_##n;
#define CFG_STRS(g, n, max, def, rs, sc, doc) char n[max][CFG_WORDLEN]; int n_##n;
#define CFG_SCDINO(upstream, here)
#include "input/config_keys.def"
#undef CFG_GROUP
#undef CFG_END
#undef CFG_INT
#undef CFG_REAL
#undef CFG_BOOL
#undef CFG_STR
#undef CFG_CHOICE
#undef CFG_INTS
#undef CFG_REALS
#undef CFG_STRS
#undef CFG_SCDINO
  /* Which keys the input deck assigns, by position in cfg_keys (config_deck_sets): a step that takes
   * a value from a file unless the deck gives one (features and attention take the model of their
   * checkpoint) refuses a file that contradicts what the deck says.  Last, so that the values alone
   * can be compared. */
  unsigned char deck_sets[CFG_MAX_KEYS];
};

/* One row per key, in table order: what the parser, the checks, --help-input, the echo, the
 * restart's comparison and the upstream names use. */
enum cfg_type { CFG_T_INT, CFG_T_REAL, CFG_T_BOOL, CFG_T_STR, CFG_T_CHOICE };
/* What a restart does when the key differs from the checkpoint's run (config_keys.def). */
enum cfg_restart { CFG_RESTART_EQUAL, CFG_RESTART_WARN, CFG_RESTART_FREE };

struct cfg_key {
  const char *group;
  const char *name;
  enum cfg_type type;
  int maxcount;        /* 1 for a scalar, else the array capacity */
  int is_array;        /* declared with CFG_INTS/REALS/STRS       */
  const char *def;     /* default as namelist value text; "" + CHOICE = required */
  double min, max;     /* inclusive range for INT/REAL             */
  const char *choices; /* "a|b|c" for CHOICE                       */
  const char *doc;
  size_t offset;       /* of the value (or first element) in struct config */
  size_t count_offset; /* of the int element count, arrays only    */
  size_t elem_size;    /* bytes per element                        */
  enum cfg_restart restart;
  const char *scdino;  /* upstream name(s) ["; note"], "" if none    */
};

struct cfg_group {
  const char *name;
  const char *doc;
};

extern const struct cfg_key cfg_keys[];
extern const int cfg_nkeys;
extern const struct cfg_group cfg_groups[];
extern const int cfg_ngroups;

/* README's table of scDINO's settings, in table order: a key's row (group and name set; the
 * key's scdino field, rows of keys without one left out) or an upstream setting without a key
 * of its own (CFG_SCDINO: upstream and here, Markdown). */
struct cfg_map_row {
  const char *group, *name;
  const char *upstream, *here;
};
extern const struct cfg_map_row cfg_map_rows[];
extern const int cfg_nmap_rows;

/* Look up a key; NULL if the group has no such key. */
const struct cfg_key *cfg_find(const char *group, const char *name);
/* Whether key k holds the same value in a and b (arrays: the same count and elements). */
int cfg_value_same(const struct config *a, const struct config *b, const struct cfg_key *k);
/* Whether the input deck assigns group.name itself (1), or leaves it at its default (0). */
int config_deck_sets(const struct config *cfg, const char *group, const char *name);

/* ---- Loading, checking and echoing (config.c, on top of the deck parser in deck.c) ---- */
#include <stdio.h>

/* Fill every key with its default from the table. */
void config_defaults(struct config *cfg);
/* Parse deck text (path is used in messages), apply it over the defaults, run the type, range and
 * cross-key checks.  Returns the number of errors; all messages ("file:line:col: ..." with the line
 * echoed and a caret) are appended to err (size errn), one after another. */
int config_parse_text(const char *path, const char *text, struct config *cfg, char *err, size_t errn);
/* Collective: rank 0 reads and parses the file, prints every error to stderr, and broadcasts the
 * result; on error every rank exits with status 2 and nothing is written. */
void config_load(const char *path, struct config *cfg);
/* The deck config_load read (an absolute path where it resolves; "" before config_load): the
 * provenance that outputs record (the AnnData file's uns). */
const char *config_deck_path(void);
/* Write the effective deck (every key, defaults included) as a namelist that reads back to the
 * same configuration. */
void config_echo(FILE *f, const struct config *cfg);
/* The same as a malloc'd string (the checkpoint's "deck"). */
char *config_echo_text(const struct config *cfg);
/* Key k's value as the echo writes it ("5, 10", "'run'", ".true."; "" for an empty list), into
 * out (size n, truncated to fit). */
void config_value_text(const struct config *cfg, const struct cfg_key *k, char *out, size_t n);
/* What an earlier run's echoed deck (a checkpoint's "deck") says about a key. */
enum cfg_had { CFG_HAD_NOT, CFG_HAD_VALUE, CFG_HAD_BAD };
/* Parse an earlier run's echoed deck with the deck parser over the defaults into cfg.  had[i]
 * (cfg_nkeys entries): whether it sets key i (CFG_HAD_NOT: a version without the key), to a value
 * this version takes, or to one it refuses (CFG_HAD_BAD: then bad_text[i] gets the value as
 * written).  Keys and groups this version does not know are left out, and nothing is
 * reported: the caller compares. */
void config_parse_echo(const char *path, const char *text, struct config *cfg, unsigned char *had,
                       char (*bad_text)[CFG_STRLEN]);
/* `scdino --help-input`: every key with group, type, default, allowed values and doc. */
void config_help(FILE *f);
/* The same reference as a Markdown page (doc/input.md). */
void config_help_markdown(FILE *f);
/* README's table of scDINO's settings and their deck keys, as Markdown (`make input-doc` puts it
 * between README.md's scdino-map markers). */
void config_help_scdino_map(FILE *f);
/* Derived values used everywhere. */
/* A model of &features checkpoints by name: the file's name without its folder and a final ".h5"
 * ("models/dino_vits16.pth.h5" -> "dino_vits16.pth"); its outputs go to run_dir/<name>/. */
void config_model_name(const char *checkpoint, char *buf, size_t n);
int config_embed_dim(const struct config *cfg); /* arch -> D */
int config_depth(const struct config *cfg);
int config_num_heads(const struct config *cfg);
int config_mlp_hidden(const struct config *cfg);

#endif
