/* config_table.c - the key table (names, types, defaults, ranges, docs, offsets, restart policy,
 * upstream names) and README's scDINO map built from config_keys.def, lookup by name, and a
 * key's field in a struct config.  The lowest file of src/input: the parser (config.c), the
 * checks (config_check.c) and the texts (config_text.c) use it. */
#include "build_config.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "input/config_priv.h"

#define OFF(g, n) offsetof(struct config, g.n)
#define SZ(g, n) sizeof(((struct config *)0)->g.n)
#define ESZ(g, n) sizeof(((struct config *)0)->g.n[0])

/* A restart policy word of the table (EQUAL, WARN, FREE) as its enum value. */
#define RS(r) CFG_RESTART_##r

const struct cfg_key cfg_keys[] = {
#define CFG_GROUP(g, doc)
#define CFG_END(g)
#define CFG_SCDINO(upstream, here)
#define CFG_INT(g, n, def, lo, hi, rs, sc, doc) \
  {#g, #n, CFG_T_INT, 1, 0, def, lo, hi, NULL, doc, OFF(g, n), 0, SZ(g, n), RS(rs), sc},
#define CFG_REAL(g, n, def, lo, hi, rs, sc, doc) \
  {#g, #n, CFG_T_REAL, 1, 0, def, lo, hi, NULL, doc, OFF(g, n), 0, SZ(g, n), RS(rs), sc},
#define CFG_BOOL(g, n, def, rs, sc, doc) {#g, #n, CFG_T_BOOL, 1, 0, def, 0, 1, NULL, doc, OFF(g, n), 0, SZ(g, n), RS(rs), sc},
#define CFG_STR(g, n, def, rs, sc, doc) {#g, #n, CFG_T_STR, 1, 0, def, 0, 0, NULL, doc, OFF(g, n), 0, SZ(g, n), RS(rs), sc},
#define CFG_CHOICE(g, n, def, ch, rs, sc, doc) \
  {#g, #n, CFG_T_CHOICE, 1, 0, def, 0, 0, ch, doc, OFF(g, n), 0, SZ(g, n), RS(rs), sc},
#define CFG_INTS(g, n, max, def, lo, hi, rs, sc, doc) \
  {#g, #n, CFG_T_INT, max, 1, def, lo, hi, NULL, doc, OFF(g, n), OFF(g, n_##n), ESZ(g, n), RS(rs), sc},
#define CFG_REALS(g, n, max, def, lo, hi, rs, sc, doc) \
  {#g, #n, CFG_T_REAL, max, 1, def, lo, hi, NULL, doc, OFF(g, n), OFF(g, n_##n), ESZ(g, n), RS(rs), sc},
#define CFG_STRS(g, n, max, def, rs, sc, doc) \
  {#g, #n, CFG_T_STR, max, 1, def, 0, 0, NULL, doc, OFF(g, n), OFF(g, n_##n), ESZ(g, n), RS(rs), sc},
#include "input/config_keys.def"
#undef CFG_INT
#undef CFG_REAL
#undef CFG_BOOL
#undef CFG_STR
#undef CFG_CHOICE
#undef CFG_INTS
#undef CFG_REALS
#undef CFG_STRS
};
const int cfg_nkeys = (int)(sizeof cfg_keys / sizeof cfg_keys[0]);

/* README's map: every key (those without an upstream name are skipped when it is written) and the
 * upstream settings without a key, in the table's order. */
const struct cfg_map_row cfg_map_rows[] = {
#define CFG_KEY_ROW(g, n) {#g, #n, NULL, NULL},
#define CFG_INT(g, n, ...) CFG_KEY_ROW(g, n)
#define CFG_REAL(g, n, ...) CFG_KEY_ROW(g, n)
#define CFG_BOOL(g, n, ...) CFG_KEY_ROW(g, n)
#define CFG_STR(g, n, ...) CFG_KEY_ROW(g, n)
#define CFG_CHOICE(g, n, ...) CFG_KEY_ROW(g, n)
#define CFG_INTS(g, n, ...) CFG_KEY_ROW(g, n)
#define CFG_REALS(g, n, ...) CFG_KEY_ROW(g, n)
#define CFG_STRS(g, n, ...) CFG_KEY_ROW(g, n)
#undef CFG_SCDINO
#define CFG_SCDINO(upstream, here) {NULL, NULL, upstream, here},
#include "input/config_keys.def"
#undef CFG_KEY_ROW
#undef CFG_INT
#undef CFG_REAL
#undef CFG_BOOL
#undef CFG_STR
#undef CFG_CHOICE
#undef CFG_INTS
#undef CFG_REALS
#undef CFG_STRS
#undef CFG_SCDINO
};
const int cfg_nmap_rows = (int)(sizeof cfg_map_rows / sizeof cfg_map_rows[0]);
_Static_assert(sizeof cfg_keys / sizeof cfg_keys[0] <= CFG_MAX_KEYS, "raise CFG_MAX_KEYS in config.h");
#undef CFG_GROUP
#undef CFG_END

const struct cfg_group cfg_groups[] = {
#define CFG_GROUP(g, doc) {#g, doc},
#define CFG_END(g)
#define CFG_INT(...)
#define CFG_REAL(...)
#define CFG_BOOL(...)
#define CFG_STR(...)
#define CFG_CHOICE(...)
#define CFG_INTS(...)
#define CFG_REALS(...)
#define CFG_STRS(...)
#define CFG_SCDINO(...)
#include "input/config_keys.def"
};
const int cfg_ngroups = (int)(sizeof cfg_groups / sizeof cfg_groups[0]);

const struct cfg_key *cfg_find(const char *group, const char *name) {
  for (int i = 0; i < cfg_nkeys; i++)
    if (strcasecmp(cfg_keys[i].group, group) == 0 && strcasecmp(cfg_keys[i].name, name) == 0)
      return &cfg_keys[i];
  return NULL;
}

int config_deck_sets(const struct config *cfg, const char *group, const char *name) {
  return cfg->deck_sets[config_key_index(config_key(group, name))];
}

const struct cfg_key *config_key(const char *group, const char *name) {
  const struct cfg_key *k = cfg_find(group, name);
  if (!k) SCD_FAIL("configuration key %s.%s is not in config_keys.def", group, name);
  return k;
}

int cfg_value_same(const struct config *a, const struct config *b, const struct cfg_key *k) {
  const int n = k->is_array ? *config_count(a, k) : 1;
  if (k->is_array && n != *config_count(b, k)) return 0;
  for (int i = 0; i < n; i++) {
    const void *x = config_field(a, k, i), *y = config_field(b, k, i);
    /* strings up to their end (what follows may be left over from a longer one); numbers bit for
     * bit, as the echo's shortest round-trip text compares */
    if (k->type == CFG_T_STR || k->type == CFG_T_CHOICE ? strcmp(x, y) != 0 : memcmp(x, y, k->elem_size) != 0)
      return 0;
  }
  return 1;
}

/* The scdino field: names separated by ", ", then optionally "; " and the note. */
const char *config_scdino_note(const struct cfg_key *k) {
  const char *note = strstr(k->scdino, "; ");
  return note ? note + 2 : "";
}

int config_scdino_name(const struct cfg_key *k, int i, const char **name, size_t *len) {
  const char *note = strstr(k->scdino, "; ");
  const char *end = note ? note : k->scdino + strlen(k->scdino), *p = k->scdino;
  for (int j = 0; p < end; j++) {
    const char *comma = strstr(p, ", ");
    const char *e = comma && comma < end ? comma : end;
    if (j == i) {
      *name = p;
      *len = (size_t)(e - p);
      return 1;
    }
    p = e < end ? e + 2 : end;
  }
  return 0;
}

void *config_field(const struct config *cfg, const struct cfg_key *k, int i) {
  return (char *)cfg + k->offset + (size_t)i * k->elem_size;
}

int *config_count(const struct config *cfg, const struct cfg_key *k) {
  return (int *)((char *)cfg + k->count_offset);
}

void config_fmt_bound(const struct cfg_key *k, double x, char *out, size_t n) {
  if (k->type == CFG_T_INT && x >= (double)LLONG_MAX)
    snprintf(out, n, "%lld", LLONG_MAX);
  else if (k->type == CFG_T_INT)
    snprintf(out, n, "%.0f", x);
  else
    snprintf(out, n, "%g", x);
}
