/* config_table.c - the key table (names, types, defaults, ranges, docs, offsets) built from
 * config_keys.def, lookup by name, and a key's field in a struct config.  The lowest file of
 * src/input: the parser (config.c), the checks (config_check.c) and the texts (config_text.c) use it. */
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

const struct cfg_key cfg_keys[] = {
#define CFG_GROUP(g, doc)
#define CFG_END(g)
#define CFG_INT(g, n, def, lo, hi, doc) {#g, #n, CFG_T_INT, 1, 0, def, lo, hi, NULL, doc, OFF(g, n), 0, SZ(g, n)},
#define CFG_REAL(g, n, def, lo, hi, doc) {#g, #n, CFG_T_REAL, 1, 0, def, lo, hi, NULL, doc, OFF(g, n), 0, SZ(g, n)},
#define CFG_BOOL(g, n, def, doc) {#g, #n, CFG_T_BOOL, 1, 0, def, 0, 1, NULL, doc, OFF(g, n), 0, SZ(g, n)},
#define CFG_STR(g, n, def, doc) {#g, #n, CFG_T_STR, 1, 0, def, 0, 0, NULL, doc, OFF(g, n), 0, SZ(g, n)},
#define CFG_CHOICE(g, n, def, ch, doc) {#g, #n, CFG_T_CHOICE, 1, 0, def, 0, 0, ch, doc, OFF(g, n), 0, SZ(g, n)},
#define CFG_INTS(g, n, max, def, lo, hi, doc) \
  {#g, #n, CFG_T_INT, max, 1, def, lo, hi, NULL, doc, OFF(g, n), OFF(g, n_##n), ESZ(g, n)},
#define CFG_REALS(g, n, max, def, lo, hi, doc) \
  {#g, #n, CFG_T_REAL, max, 1, def, lo, hi, NULL, doc, OFF(g, n), OFF(g, n_##n), ESZ(g, n)},
#define CFG_STRS(g, n, max, def, doc) \
  {#g, #n, CFG_T_STR, max, 1, def, 0, 0, NULL, doc, OFF(g, n), OFF(g, n_##n), ESZ(g, n)},
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
