/* config.c - the configuration: defaults from the key table, applying a parsed deck (types,
 * ranges, choices, subscripts, duplicates, unknown names with suggestions), loading on rank 0
 * with broadcast, and the values derived from the architecture.
 *
 * Arrays: `key = v1, v2` replaces the whole list (its length becomes the number of values, a null
 * keeps the element that was there), unlike Fortran, where a short list leaves the trailing
 * elements as they were: `k = 5, 10` means the two neighbour counts 5 and 10.  `key(i) = ...`
 * changes elements from i on and may lengthen the list by appending. */
#include "build_config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "input/config_priv.h"

static void state_init(struct cfg_state *st, struct deck *d) {
  st->deck = d;
  st->seen = xcalloc((size_t)cfg_nkeys, sizeof(int));
  st->bad = xcalloc((size_t)cfg_nkeys, sizeof(int));
  st->line = xcalloc((size_t)cfg_nkeys, sizeof(int));
  st->col = xcalloc((size_t)cfg_nkeys, sizeof(int));
  st->whole_line = xcalloc((size_t)cfg_nkeys, sizeof(int));
  st->elem_line = xcalloc((size_t)cfg_nkeys, sizeof(int *));
  for (int i = 0; i < cfg_nkeys; i++) st->elem_line[i] = xcalloc((size_t)cfg_keys[i].maxcount, sizeof(int));
}

static void state_free(struct cfg_state *st) {
  for (int i = 0; i < cfg_nkeys; i++) free(st->elem_line[i]);
  free(st->elem_line);
  free(st->seen);
  free(st->bad);
  free(st->line);
  free(st->col);
  free(st->whole_line);
}

/* ---- converting one value ---- */

static const char *type_name(const struct cfg_key *k) {
  switch (k->type) {
  case CFG_T_INT: return "an integer";
  case CFG_T_REAL: return "a real number";
  case CFG_T_BOOL: return "a logical (.true. or .false.)";
  case CFG_T_STR:
  case CFG_T_CHOICE: return "a string in quotes";
  }
  return "?";
}

static void describe(const struct deck_value *v, char *out, size_t n) {
  switch (v->kind) {
  case DECK_INT: snprintf(out, n, "the integer %s", v->text); break;
  case DECK_REAL: snprintf(out, n, "the real number %s", v->text); break;
  case DECK_LOGICAL: snprintf(out, n, "the logical %s", v->text); break;
  case DECK_STRING: snprintf(out, n, "the string %.200s", v->text); break;
  case DECK_NULL: snprintf(out, n, "a null value"); break;
  }
}

static void range_error(struct cfg_state *st, const struct cfg_key *k, const char *label,
                        const struct deck_value *v) {
  char lo[40], hi[40];
  config_fmt_bound(k, k->min, lo, sizeof lo);
  config_fmt_bound(k, k->max, hi, sizeof hi);
  if (k->min <= CFG_NOMIN)
    deck_error(st->deck, v->line, v->col, "%s = %s is out of range: it must be <= %s", label, v->text, hi);
  else if (k->max >= CFG_NOMAX)
    deck_error(st->deck, v->line, v->col, "%s = %s is out of range: it must be >= %s", label, v->text, lo);
  else
    deck_error(st->deck, v->line, v->col, "%s = %s is out of range: it must be between %s and %s", label,
               v->text, lo, hi);
}

static void choice_list(const char *choices, char *out, size_t n) {
  size_t used = 0;
  const char *p = choices;
  while (*p && used + 1 < n) {
    const char *e = strchr(p, '|');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int w = snprintf(out + used, n - used, "%s'%.*s'", used ? ", " : "", (int)len, p);
    if (w < 0 || (size_t)w >= n - used) break;
    used += (size_t)w;
    p = e ? e + 1 : p + len;
  }
}

/* Find s among "a|b|c" ignoring case; writes the table's spelling into out. */
static int choice_match(const char *choices, const char *s, char *out, size_t n) {
  const char *p = choices;
  size_t sl = strlen(s);
  while (*p) {
    const char *e = strchr(p, '|');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == sl && strncasecmp(p, s, len) == 0) {
      snprintf(out, n, "%.*s", (int)len, p);
      return 1;
    }
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

static void choice_error(struct cfg_state *st, const struct cfg_key *k, const struct deck_value *v) {
  char list[512], hint[256] = "", words[16][CFG_WORDLEN];
  const char *cands[16];
  int nc = 0;
  for (const char *p = k->choices; *p && nc < 16;) {
    const char *e = strchr(p, '|');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(words[nc], CFG_WORDLEN, "%.*s", (int)len, p);
    cands[nc] = words[nc];
    nc++;
    p = e ? e + 1 : p + len;
  }
  choice_list(k->choices, list, sizeof list);
  char sugg[200];
  if (config_suggest(v->s, cands, nc, "'", sugg, sizeof sugg, NULL))
    snprintf(hint, sizeof hint, "; did you mean %s?", sugg);
  deck_error(st->deck, v->line, v->col, "%s = '%.100s' is not allowed: use one of %s%s", k->name, v->s, list,
             hint);
}

/* Convert v for key k into dst (one element).  label names the element in messages. */
static int convert(struct cfg_state *st, const struct cfg_key *k, const char *label, const struct deck_value *v,
                   void *dst) {
  char got[300];
  describe(v, got, sizeof got);
  switch (k->type) {
  case CFG_T_INT: {
    long x;
    if (v->kind == DECK_INT) {
      if (v->i < LONG_MIN || v->i > LONG_MAX) goto range;
      x = (long)v->i;
    } else if (v->kind == DECK_REAL) {
      if (v->r != floor(v->r)) {
        deck_error(st->deck, v->line, v->col, "wrong type for %s: expected %s, got %s (not a whole number)",
                   label, type_name(k), got);
        return 0;
      }
      if (!(fabs(v->r) < 9.2e18)) goto range;
      x = (long)v->r;
    } else {
      goto type;
    }
    if ((double)x < k->min || (double)x > k->max) goto range;
    *(long *)dst = x;
    return 1;
  }
  case CFG_T_REAL:
    if (v->kind != DECK_INT && v->kind != DECK_REAL) goto type;
    if (v->r < k->min || v->r > k->max) goto range;
    *(double *)dst = v->r;
    return 1;
  case CFG_T_BOOL:
    if (v->kind != DECK_LOGICAL) goto type;
    *(int *)dst = v->b;
    return 1;
  case CFG_T_STR:
  case CFG_T_CHOICE: {
    if (v->kind != DECK_STRING) goto type;
    char canon[CFG_WORDLEN];
    const char *s = v->s;
    if (k->type == CFG_T_CHOICE) {
      if (!choice_match(k->choices, v->s, canon, sizeof canon)) {
        choice_error(st, k, v);
        return 0;
      }
      s = canon;
    }
    size_t len = strlen(s);
    if (len + 1 > k->elem_size) {
      deck_error(st->deck, v->line, v->col, "the string for %s is too long: %zu characters, at most %zu",
                 label, len, k->elem_size - 1);
      return 0;
    }
    memset(dst, 0, k->elem_size); /* zero tails keep the struct comparable with memcmp */
    memcpy(dst, s, len);
    return 1;
  }
  }
type:
  if (k->type == CFG_T_CHOICE) {
    char list[512];
    choice_list(k->choices, list, sizeof list);
    deck_error(st->deck, v->line, v->col, "wrong type for %s: expected a string in quotes, one of %s; got %s",
               label, list, got);
  } else {
    deck_error(st->deck, v->line, v->col, "wrong type for %s: expected %s, got %s", label, type_name(k), got);
  }
  return 0;
range:
  range_error(st, k, label, v);
  return 0;
}

/* ---- applying one entry ---- */

/* Element j (0-based) of the expanded value list, following repeat counts. */
static const struct deck_value *nth_value(const struct deck_entry *e, long long j) {
  for (int i = 0; i < e->nvalues; i++) {
    if (j < e->values[i].repeat) return &e->values[i];
    j -= e->values[i].repeat;
  }
  return NULL;
}

static const char *group_of(const struct cfg_state *st, const struct deck_entry *e) {
  SCD_ASSERT(e->group >= 0 && e->group < st->deck->ngroups); /* the reader files every entry under its group */
  return st->deck->groups[e->group].name;
}

static void apply_scalar(struct cfg_state *st, struct config *cfg, const struct cfg_key *k,
                         const struct deck_entry *e, long long total) {
  int ki = config_key_index(k);
  if (e->has_sub) {
    deck_error(st->deck, e->line, e->col, "'%s' is a single value, not an array: remove the subscript (%lld)",
               k->name, e->lo);
    st->bad[ki] = 1;
    return;
  }
  if (total != 1) {
    if (total == 0)
      deck_error(st->deck, e->line, e->col, "no value given for '%s'", k->name);
    else
      deck_error(st->deck, e->line, e->col, "'%s' takes a single value, got %lld", k->name, total);
    st->bad[ki] = 1;
    return;
  }
  if (st->whole_line[ki]) {
    deck_error(st->deck, e->line, e->col, "duplicate key '%s' in &%s (first set at line %d)", k->name,
               group_of(st, e), st->whole_line[ki]);
    return;
  }
  st->whole_line[ki] = e->line;
  const struct deck_value *v = &e->values[0];
  if (v->kind == DECK_NULL) return; /* a null value leaves the key as it was */
  union {
    long l;
    double d;
    int b;
  } tmp;
  void *dst = config_field(cfg, k, 0);
  if (k->type == CFG_T_STR || k->type == CFG_T_CHOICE) {
    if (!convert(st, k, k->name, v, dst)) st->bad[ki] = 1;
  } else if (convert(st, k, k->name, v, &tmp)) {
    memcpy(dst, &tmp, k->elem_size);
  } else {
    st->bad[ki] = 1;
  }
}

static void apply_array(struct cfg_state *st, struct config *cfg, const struct cfg_key *k,
                        const struct deck_entry *e, long long total) {
  int ki = config_key_index(k);
  int cap = k->maxcount;
  int *count = config_count(cfg, k);
  long long lo = e->has_sub ? e->lo : 1;
  if (lo < 1 || lo > cap || (e->is_range && e->hi > cap)) {
    deck_error(st->deck, e->line, e->col, "subscript %lld is out of range for '%s': it holds at most %d value%s (%s(1:%d))",
               lo < 1 || lo > cap ? lo : e->hi, k->name, cap, cap > 1 ? "s" : "", k->name, cap);
    st->bad[ki] = 1;
    return;
  }
  if (e->is_range && total > e->hi - e->lo + 1) {
    deck_error(st->deck, e->line, e->col, "too many values for %s(%lld:%lld): %lld given for %lld element%s",
               k->name, e->lo, e->hi, total, e->hi - e->lo + 1, e->hi > e->lo ? "s" : "");
    st->bad[ki] = 1;
    return;
  }
  if (lo - 1 + total > cap) {
    deck_error(st->deck, e->line, e->col, "too many values for '%s': it holds at most %d, got %lld%s", k->name,
               cap, lo - 1 + total, e->has_sub ? " (counting from the subscript)" : "");
    st->bad[ki] = 1;
    return;
  }
  if (e->has_sub && total == 0) {
    deck_error(st->deck, e->line, e->col, "no value given for %s(%lld)", k->name, lo);
    st->bad[ki] = 1;
    return;
  }
  /* Duplicates: a whole-list assignment claims every element. */
  long long first = e->has_sub ? lo - 1 : 0, last = e->has_sub ? lo - 1 + total : cap;
  for (long long j = first; j < last; j++) {
    int prev = st->elem_line[ki][j];
    if (!prev) continue;
    if (!e->has_sub || st->whole_line[ki])
      deck_error(st->deck, e->line, e->col, "duplicate key '%s' in &%s (first set at line %d)", k->name,
                 group_of(st, e), prev);
    else
      deck_error(st->deck, e->line, e->col, "element %s(%lld) is set twice (first at line %d)", k->name, j + 1,
                 prev);
    return;
  }
  for (long long j = first; j < last; j++) st->elem_line[ki][j] = e->line;
  if (!e->has_sub) st->whole_line[ki] = e->line;

  if (e->has_sub && lo > *count + 1) {
    deck_error(st->deck, e->line, e->col,
               "%s(%lld) would leave %s(%d:%lld) without values (the list has %d element%s)", k->name, lo,
               k->name, *count + 1, lo - 1, *count, *count == 1 ? "" : "s");
    st->bad[ki] = 1;
    return;
  }

  /* Convert into a scratch copy first: a bad element leaves the list untouched. */
  size_t bytes = (size_t)cap * k->elem_size;
  char *buf = xmalloc(bytes);
  memcpy(buf, config_field(cfg, k, 0), bytes);
  int ok = 1;
  for (long long j = 0; j < total; j++) {
    const struct deck_value *v = nth_value(e, j);
    long long idx = lo - 1 + j;
    char label[96];
    snprintf(label, sizeof label, "%s(%lld)", k->name, idx + 1);
    if (v->kind == DECK_NULL) {
      if (idx >= *count) {
        deck_error(st->deck, v->line, v->col, "%s is a null value but has no earlier value to keep", label);
        ok = 0;
      }
      continue;
    }
    if (!convert(st, k, label, v, buf + idx * (long long)k->elem_size)) ok = 0;
  }
  if (ok) {
    int n = e->has_sub ? (int)(lo - 1 + total > *count ? lo - 1 + total : *count) : (int)total;
    memset(buf + (size_t)n * k->elem_size, 0, (size_t)(cap - n) * k->elem_size);
    memcpy(config_field(cfg, k, 0), buf, bytes);
    *count = n;
  } else {
    st->bad[ki] = 1;
  }
  free(buf);
}

static void apply_entry(struct cfg_state *st, struct config *cfg, const struct cfg_key *k,
                        const struct deck_entry *e) {
  int ki = config_key_index(k);
  st->seen[ki] = 1;
  st->line[ki] = e->line;
  st->col[ki] = e->col;
  if (e->bad) { /* the syntax error has been reported */
    st->bad[ki] = 1;
    return;
  }
  long long total = 0;
  for (int i = 0; i < e->nvalues; i++) {
    total += e->values[i].repeat;
    if (total > INT_MAX) break;
  }
  if (k->is_array)
    apply_array(st, cfg, k, e, total);
  else
    apply_scalar(st, cfg, k, e, total);
}

/* ---- names that are not in the table ---- */

static void unknown_key(struct cfg_state *st, const struct deck_entry *e) {
  const char *g = group_of(st, e);
  if (deck_full(st->deck)) { /* only counted now: spare the suggestions (a deck of a million keys) */
    deck_error(st->deck, e->line, e->col, "unknown key");
    return;
  }
  const struct cfg_key *alias = config_alias(e->key, g);
  char sugg[256];
  if (alias) {
    if (strcmp(alias->group, g) == 0)
      deck_error(st->deck, e->line, e->col, "unknown key '%s' in &%s; did you mean '%s'?", e->key, g, alias->name);
    else
      deck_error(st->deck, e->line, e->col, "unknown key '%s' in &%s; did you mean '%s' in &%s?", e->key, g,
                 alias->name, alias->group);
    return;
  }
  /* The same name in other groups. */
  char owners[256] = "";
  int nown = 0;
  for (int i = 0; i < cfg_nkeys; i++) {
    if (strcmp(cfg_keys[i].name, e->key) != 0) continue;
    size_t used = strlen(owners);
    snprintf(owners + used, sizeof owners - used, "%s&%s", nown ? " or " : "", cfg_keys[i].group);
    nown++;
  }
  if (nown) {
    deck_error(st->deck, e->line, e->col, "key '%s' belongs to %s, not &%s", e->key, owners, g);
    return;
  }
  const char **cands = xmalloc((size_t)cfg_nkeys * sizeof *cands);
  int nc = 0;
  for (int i = 0; i < cfg_nkeys; i++)
    if (strcmp(cfg_keys[i].group, g) == 0) cands[nc++] = cfg_keys[i].name;
  if (config_suggest(e->key, cands, nc, "'", sugg, sizeof sugg, NULL)) {
    deck_error(st->deck, e->line, e->col, "unknown key '%s' in &%s; did you mean %s?", e->key, g, sugg);
    free(cands);
    return;
  }
  /* Nothing close in this group: the closest key of any group. */
  nc = 0;
  for (int i = 0; i < cfg_nkeys; i++) cands[nc++] = cfg_keys[i].name;
  int which = -1;
  if (config_suggest(e->key, cands, nc, "'", sugg, sizeof sugg, &which) && which >= 0) {
    deck_error(st->deck, e->line, e->col, "unknown key '%s' in &%s; did you mean '%s' in &%s?", e->key, g,
               cfg_keys[which].name, cfg_keys[which].group);
  } else {
    deck_error(st->deck, e->line, e->col, "unknown key '%s' in &%s (scdino --help-input lists the keys)", e->key,
               g);
  }
  free(cands);
}

static int group_known(const char *name) {
  for (int i = 0; i < cfg_ngroups; i++)
    if (strcmp(cfg_groups[i].name, name) == 0) return 1;
  return 0;
}

static void check_groups(struct cfg_state *st) {
  const struct deck *d = st->deck;
  for (int i = 0; i < d->ngroups; i++) {
    const struct deck_group *g = &d->groups[i];
    if (!group_known(g->name) && deck_full(st->deck)) {
      deck_error(st->deck, g->line, g->col, "unknown group");
      continue;
    }
    if (!group_known(g->name)) {
      const char *cands[64];
      int nc = 0;
      for (int j = 0; j < cfg_ngroups && nc < 64; j++) cands[nc++] = cfg_groups[j].name;
      char sugg[256];
      if (config_suggest(g->name, cands, nc, "&", sugg, sizeof sugg, NULL)) {
        deck_error(st->deck, g->line, g->col, "unknown group &%s; did you mean %s?", g->name, sugg);
      } else {
        char all[512] = "";
        for (int j = 0; j < cfg_ngroups; j++) {
          size_t used = strlen(all);
          snprintf(all + used, sizeof all - used, "%s&%s", j ? ", " : "", cfg_groups[j].name);
        }
        deck_error(st->deck, g->line, g->col, "unknown group &%s; the groups are %s", g->name, all);
      }
      continue;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(d->groups[j].name, g->name) == 0) {
        deck_error(st->deck, g->line, g->col, "duplicate group &%s (first at line %d); put its keys in one group",
                   g->name, d->groups[j].line);
        break;
      }
  }
}

static void check_required(struct cfg_state *st, const struct config *cfg) {
  for (int i = 0; i < cfg_nkeys; i++) {
    const struct cfg_key *k = &cfg_keys[i];
    if (k->type != CFG_T_CHOICE || k->def[0] != '\0' || st->bad[i]) continue;
    if (((const char *)config_field(cfg, k, 0))[0] != '\0') continue;
    char list[512];
    choice_list(k->choices, list, sizeof list);
    const struct deck_group *g = NULL;
    for (int j = 0; j < st->deck->ngroups && !g; j++)
      if (strcmp(st->deck->groups[j].name, k->group) == 0) g = &st->deck->groups[j];
    if (g)
      deck_error(st->deck, g->line, g->col, "missing required key '%s' in &%s (one of %s)", k->name, k->group,
                 list);
    else
      deck_error(st->deck, 0, 0, "missing required key '%s': add a group &%s with %s = one of %s", k->name,
                 k->group, k->name, list);
  }
}

/* ---- public entry points ---- */

void config_defaults(struct config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  struct deck d;
  memset(&d, 0, sizeof d);
  d.path = xstrdup("config_keys.def");
  struct cfg_state st;
  state_init(&st, &d);
  for (int i = 0; i < cfg_nkeys; i++) {
    const struct cfg_key *k = &cfg_keys[i];
    if (k->def[0] == '\0') continue; /* empty list, or a required choice */
    struct deck_entry e;
    memset(&e, 0, sizeof e);
    e.key = (char *)k->name;
    if (deck_parse_values(k->def, &e.values, &e.nvalues) != 0)
      SCD_FAIL("default \"%s\" of %s.%s in config_keys.def does not parse", k->def, k->group, k->name);
    apply_entry(&st, cfg, k, &e);
    deck_values_free(e.values, e.nvalues);
    if (d.ndiags) SCD_FAIL("default of %s.%s in config_keys.def: %s", k->group, k->name, d.diags[0].msg);
  }
  state_free(&st);
  deck_free(&d);
}

/* Apply every entry of the parsed deck d over the defaults in cfg (st set up on d). */
static void apply_deck(struct cfg_state *st, struct config *cfg) {
  const struct deck *d = st->deck;
  config_defaults(cfg);
  check_groups(st);
  for (int i = 0; i < d->nentries; i++) {
    const struct deck_entry *e = &d->entries[i];
    const char *g = d->groups[e->group].name;
    if (!group_known(g)) continue; /* reported once for the group */
    const struct cfg_key *k = cfg_find(g, e->key);
    if (k)
      apply_entry(st, cfg, k, e);
    else
      unknown_key(st, e);
  }
}

/* What a named architecture's checks compare with: the configuration of an empty deck. */
static const struct config *defaults_once(void) {
  static struct config defaults;
  static int have_defaults;
  if (!have_defaults) {
    config_defaults(&defaults);
    have_defaults = 1;
  }
  return &defaults;
}

int config_parse_text(const char *path, const char *text, struct config *cfg, char *err, size_t errn) {
  struct deck d;
  deck_parse(&d, path, text);
  struct cfg_state st;
  state_init(&st, &d);
  apply_deck(&st, cfg);
  check_required(&st, cfg);
  for (int i = 0; i < cfg_nkeys; i++) cfg->deck_sets[i] = (unsigned char)(st.seen[i] && !st.bad[i]);
  config_check(&st, cfg, defaults_once());
  int n = deck_format_errors(&d, err, errn);
  state_free(&st);
  deck_free(&d);
  return n;
}

int config_apply_assignments(struct config *cfg, const char *text, config_key_finder find, int check, int *keys,
                             int maxkeys, int *nkeys, char *msgs, size_t n) {
  /* The text inside a group of its own: the reader sees exactly what a deck group would hold. */
  const size_t len = strlen(text) + 16;
  char *wrapped = xmalloc(len);
  snprintf(wrapped, len, "&setting\n%s\n/\n", text);
  struct deck d;
  deck_parse(&d, "setting", wrapped);
  free(wrapped);
  struct cfg_state st;
  state_init(&st, &d);
  for (int i = 0; i < cfg_nkeys; i++) st.seen[i] = cfg->deck_sets[i]; /* the checks point at what was set */
  *nkeys = 0;
  for (int i = 0; i < d.nentries; i++) {
    const struct deck_entry *e = &d.entries[i];
    char why[1024];
    const struct cfg_key *k = find(e->key, why, sizeof why);
    if (!k) {
      deck_error(&d, e->line, e->col, "%s", why);
      continue;
    }
    const int ki = config_key_index(k);
    int have = 0;
    for (int j = 0; j < *nkeys; j++) have |= keys[j] == ki;
    if (have) {
      deck_error(&d, e->line, e->col, "sets %s twice", k->name);
      continue;
    }
    if (*nkeys == maxkeys) {
      deck_error(&d, e->line, e->col, "sets more than %d keys", maxkeys);
      continue;
    }
    keys[(*nkeys)++] = ki;
    apply_entry(&st, cfg, k, e);
    if (!st.bad[ki]) cfg->deck_sets[ki] = 1;
  }
  if (d.nentries == 0 && d.ndiags == 0) deck_error(&d, 0, 0, "sets no key (write key = value, ...)");
  if (check && d.ndiags == 0) config_check(&st, cfg, defaults_once());
  size_t used = 0;
  msgs[0] = '\0';
  for (int i = 0; i < d.ndiags && used + 1 < n; i++) {
    const int w = snprintf(msgs + used, n - used, "%s\n", d.diags[i].msg);
    used += w > 0 ? (size_t)w : 0;
  }
  const int nerr = d.ndiags + d.nmore;
  state_free(&st);
  deck_free(&d);
  return nerr;
}

void config_parse_echo(const char *path, const char *text, struct config *cfg, unsigned char *had,
                       char (*bad_text)[CFG_STRLEN]) {
  struct deck d;
  deck_parse(&d, path, text);
  struct cfg_state st;
  state_init(&st, &d);
  apply_deck(&st, cfg);
  for (int i = 0; i < cfg_nkeys; i++) had[i] = !st.seen[i] ? CFG_HAD_NOT : st.bad[i] ? CFG_HAD_BAD : CFG_HAD_VALUE;
  /* A refused value as the echo wrote it (its last assignment; an echo has one per key). */
  for (int i = 0; i < d.nentries; i++) {
    const struct deck_entry *e = &d.entries[i];
    const struct cfg_key *k = cfg_find(d.groups[e->group].name, e->key);
    if (!k || had[config_key_index(k)] != CFG_HAD_BAD) continue;
    char *out = bad_text[config_key_index(k)];
    size_t used = 0;
    out[0] = '\0';
    for (int j = 0; j < e->nvalues && used + 1 < CFG_STRLEN; j++) {
      const int w = snprintf(out + used, CFG_STRLEN - used, "%s%s", j ? ", " : "", e->values[j].text);
      used += w > 0 ? (size_t)w : 0;
    }
  }
  state_free(&st);
  deck_free(&d);
}

/* Read the whole deck; on failure write "path: reason" into err and return NULL. */
static char *read_deck(const char *path, char *err, size_t errn) {
  const size_t limit = (size_t)16 << 20; /* a deck is a few kilobytes; refuse anything absurd */
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errn, "%s: cannot open the input deck: %s\n", path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, len = 0;
  char *text = xmalloc(cap + 1);
  for (;;) {
    size_t got = fread(text + len, 1, cap - len, f);
    len += got;
    if (len < cap) break;
    if (cap >= limit) {
      snprintf(err, errn, "%s: larger than %zu MiB; this is not an input deck\n", path, limit >> 20);
      fclose(f);
      free(text);
      return NULL;
    }
    cap *= 2;
    text = xrealloc(text, cap + 1);
  }
  int bad = ferror(f);
  int e = errno;
  fclose(f);
  if (bad) {
    snprintf(err, errn, "%s: cannot read the input deck: %s\n", path, strerror(e));
    free(text);
    return NULL;
  }
  text[len] = '\0';
  if (len >= 2 && (((unsigned char)text[0] == 0xff && (unsigned char)text[1] == 0xfe) ||
                   ((unsigned char)text[0] == 0xfe && (unsigned char)text[1] == 0xff))) {
    snprintf(err, errn, "%s: is UTF-16 text (byte-order mark %02x %02x); save the deck as UTF-8 or ASCII\n", path,
             (unsigned char)text[0], (unsigned char)text[1]);
    free(text);
    return NULL;
  }
  const char *nul = memchr(text, '\0', len);
  if (nul) {
    snprintf(err, errn, "%s: contains a NUL byte (offset %zu); an input deck is a text file\n", path,
             (size_t)(nul - text));
    free(text);
    return NULL;
  }
  return text;
}

static char deck_path[4096]; /* config_load's deck, absolute where it resolves */

const char *config_deck_path(void) { return deck_path; }

void config_load(const char *path, struct config *cfg) {
  int nerr = 0;
  fs_input_add(path, "input deck"); /* no output may replace it (core/fsutil.h) */
  char abs[PATH_MAX];
  snprintf(deck_path, sizeof deck_path, "%s", realpath(path, abs) ? abs : path);
  if (comm_rank() == 0) {
    size_t errn = (size_t)1 << 20;
    char *err = xmalloc(errn);
    err[0] = '\0';
    char *text = read_deck(path, err, errn);
    if (text)
      nerr = config_parse_text(path, text, cfg, err, errn);
    else
      nerr = 1;
    if (nerr) {
      fflush(stdout);
      fputs(err, stderr);
      fprintf(stderr, "scdino: %d error%s in %s; nothing was run\n", nerr, nerr == 1 ? "" : "s", path);
      fflush(stderr);
    }
    free(text);
    free(err);
  }
  comm_bcast(&nerr, sizeof nerr, 0);
  if (nerr) comm_exit_all(SCD_EXIT_INPUT);
  comm_bcast(cfg, sizeof *cfg, 0);
}

/* ---- derived values ---- */

static const struct {
  const char *arch;
  int dim, depth, heads;
} archs[] = {{"vit_tiny", 192, 12, 3}, {"vit_small", 384, 12, 6}, {"vit_base", 768, 12, 12}};

static int arch_index(const struct config *cfg) {
  for (int i = 0; i < (int)(sizeof archs / sizeof archs[0]); i++)
    if (strcmp(cfg->model.arch, archs[i].arch) == 0) return i;
  return -1; /* custom */
}

int config_embed_dim(const struct config *cfg) {
  int a = arch_index(cfg);
  return a >= 0 ? archs[a].dim : (int)cfg->model.embed_dim;
}

int config_depth(const struct config *cfg) {
  int a = arch_index(cfg);
  return a >= 0 ? archs[a].depth : (int)cfg->model.depth;
}

int config_num_heads(const struct config *cfg) {
  int a = arch_index(cfg);
  return a >= 0 ? archs[a].heads : (int)cfg->model.num_heads;
}

int config_mlp_hidden(const struct config *cfg) {
  int a = arch_index(cfg);
  /* The named architectures use mlp_ratio 4 (timm/DINO vit_* constructors). */
  return a >= 0 ? 4 * archs[a].dim : (int)((double)cfg->model.embed_dim * cfg->model.mlp_ratio);
}
