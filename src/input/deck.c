/* deck.c - Fortran-namelist reader: scanner, groups, keys, subscripts and values (the
 * diagnostics are kept and formatted by deck_diag.c).
 *
 * Choices where Fortran leaves room (documented for users in tests/decks/README and --help-input):
 *  - A string ends on its own line: an unterminated string is reported at its opening quote
 *    instead of swallowing the rest of the deck.
 *  - `/`, `&end` and `$end` close any group; a new `&group` before the close is an error.
 *  - Text outside groups is an error unless it is a `!` comment.
 *  - An unquoted word that is not a logical is an error (with the quoted spelling suggested);
 *    logicals are T, F, true, false and anything starting with .T or .F (any case).
 *  - key(i) = v1, v2 ... continues from element i (flang's storage-sequence extension);
 *    key(i:j) takes at most j-i+1 values.
 * After an error the scanner skips the values of the entry it is in and resumes at the next key,
 * so one run reports every problem of the deck. */
#include "build_config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "input/deck.h"

struct scan {
  struct deck *d;
  const char *p;          /* next character */
  const char *line_start; /* first character of the current line */
  const char *blank_line; /* line_start of the line blank_end belongs to */
  const char *blank_end;  /* first non-blank character of that line */
  int line;
  int group;    /* index of the open group, -1 outside */
  int entry;    /* entry receiving values, -1 if none */
  int skipping; /* after an error: drop values until the next key or group end */
  int expect;   /* in a value list: 1 after '=' or ',' (a comma now means a null value) */
};

static int col_of(const struct scan *s, const char *at) { return (int)(at - s->line_start) + 1; }

/* Quote a piece of the user's text for a message, cut at a sensible length. */
static void excerpt(char *out, size_t n, const char *from, size_t len) {
  size_t max = n > 4 ? n - 4 : 0;
  if (len > 40 && max > 40) max = 40;
  if (len <= max) {
    snprintf(out, n, "%.*s", (int)len, from);
  } else {
    snprintf(out, n, "%.*s...", (int)max, from);
  }
}

static int is_name_start(int c) { return isalpha((unsigned char)c) || c == '_'; }
static int is_name_char(int c) { return isalnum((unsigned char)c) || c == '_'; }
/* Characters that end an unquoted value. */
static int is_value_end(int c) {
  return c == '\0' || isspace((unsigned char)c) || strchr(",/!&$=()*'\"", c) != NULL;
}

static char *lower_dup(const char *from, size_t len) {
  char *s = xmalloc(len + 1);
  for (size_t i = 0; i < len; i++) s[i] = (char)tolower((unsigned char)from[i]);
  s[len] = '\0';
  return s;
}

static void advance(struct scan *s) {
  if (*s->p == '\n') {
    s->line++;
    s->line_start = s->p + 1;
  }
  s->p++;
}

/* Blanks, newlines and comments (not commas: those separate values and mark nulls). */
static void skip_blanks(struct scan *s) {
  for (;;) {
    char c = *s->p;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v') {
      advance(s);
    } else if (c == '!') {
      while (*s->p && *s->p != '\n') s->p++;
    } else {
      return;
    }
  }
}

static void skip_to_eol(struct scan *s) {
  while (*s->p && *s->p != '\n') s->p++;
}

/* Whether only blanks stand before `at` on its line.  The end of the leading blanks is kept per
 * line: a line of megabytes of blanks and then many words must not be rescanned for each word. */
static int first_on_line(struct scan *s, const char *at) {
  if (s->blank_line != s->line_start) {
    const char *q = s->line_start;
    while (*q && *q != '\n' && isspace((unsigned char)*q)) q++;
    s->blank_line = s->line_start;
    s->blank_end = q;
  }
  return at <= s->blank_end;
}

/* Length of an unquoted path such as /tmp/run, out/run or ./x at p (a '/' inside, followed by
 * more of the path), else 0.  Without this, the '/' would end the group and hide the mistake. */
static size_t path_len(const char *p) {
  size_t n = 0;
  int inner_slash = 0;
  while (p[n] && (isalnum((unsigned char)p[n]) || strchr("_.~-+/:@%", p[n]))) {
    if (p[n] == '/' && p[n + 1] && (isalnum((unsigned char)p[n + 1]) || strchr("_.~-+:@%", p[n + 1])))
      inner_slash = 1;
    n++;
  }
  return inner_slash ? n : 0;
}

/* "unexpected character 'x'", with bytes that would not print shown in hex. */
static void unexpected(struct deck *d, int line, int col, char c) {
  if (isprint((unsigned char)c))
    deck_error(d, line, col, "unexpected character '%c'", c);
  else
    deck_error(d, line, col, "unexpected byte 0x%02x (only ASCII outside strings)", (unsigned char)c);
}

/* ---- building the result ---- */

static int add_group(struct deck *d, const char *name, size_t len, int line, int col) {
  d->groups = deck_grow(d->groups, d->ngroups, sizeof *d->groups);
  struct deck_group *g = &d->groups[d->ngroups];
  g->name = lower_dup(name, len);
  g->line = line;
  g->col = col;
  g->closed = 0;
  return d->ngroups++;
}

static int add_entry(struct deck *d, int group, const char *key, size_t len, int line, int col) {
  d->entries = deck_grow(d->entries, d->nentries, sizeof *d->entries);
  struct deck_entry *e = &d->entries[d->nentries];
  memset(e, 0, sizeof *e);
  e->group = group;
  e->key = lower_dup(key, len);
  e->line = line;
  e->col = col;
  return d->nentries++;
}

static struct deck_value *add_value(struct scan *s, enum deck_kind kind, const char *text, size_t len,
                                    int line, int col) {
  struct deck_entry *e = &s->d->entries[s->entry];
  e->values = deck_grow(e->values, e->nvalues, sizeof *e->values);
  struct deck_value *v = &e->values[e->nvalues++];
  memset(v, 0, sizeof *v);
  v->kind = kind;
  v->repeat = 1;
  v->text = xmalloc(len + 1);
  memcpy(v->text, text, len);
  v->text[len] = '\0';
  v->line = line;
  v->col = col;
  return v;
}

/* An error inside the current entry: it is not applied and its remaining values are dropped. */
static void entry_failed(struct scan *s) {
  if (s->entry >= 0) s->d->entries[s->entry].bad = 1;
  s->skipping = 1;
}

/* Report an unquoted path at s->p and skip it; the entry is not applied. */
static void unquoted_path(struct scan *s, size_t n) {
  char q[64];
  excerpt(q, sizeof q, s->p, n);
  if (!s->skipping)
    deck_error(s->d, s->line, col_of(s, s->p), "%s looks like a path without quotes; strings need quotes: '%s'", q,
               q);
  s->p += n;
  entry_failed(s);
}

/* ---- groups ---- */

static void close_group(struct scan *s) {
  s->d->groups[s->group].closed = 1;
  s->group = -1;
  s->entry = -1;
  s->skipping = 0;
}

/* At '&' or '$': a group header, or &end / $end. */
static void open_group(struct scan *s) {
  int line = s->line, col = col_of(s, s->p);
  char mark = *s->p;
  advance(s);
  const char *name = s->p;
  while (is_name_char(*s->p)) s->p++;
  size_t len = (size_t)(s->p - name);
  if (len == 0 || !is_name_start(*name)) {
    deck_error(s->d, line, col, "a group name must follow '%c' with no blank (as in %ctraining)", mark,
               mark);
    skip_to_eol(s);
    if (s->group >= 0) entry_failed(s);
    return;
  }
  if (len == 3 && strncasecmp(name, "end", 3) == 0) {
    if (s->group >= 0)
      close_group(s);
    else
      deck_error(s->d, line, col, "'%cend' with no open group", mark);
    return;
  }
  int prev = s->group;
  s->group = add_group(s->d, name, len, line, col);
  if (prev >= 0) {
    const struct deck_group *g = &s->d->groups[prev];
    deck_error(s->d, line, col, "&%s starts before &%s (line %d) was closed with '/'",
               s->d->groups[s->group].name, g->name, g->line);
  }
  s->entry = -1;
  s->skipping = 0;
}

/* ---- values ---- */

static int match_int(const char *t, size_t n) {
  size_t i = 0;
  if (i < n && (t[i] == '+' || t[i] == '-')) i++;
  if (i == n) return 0;
  for (; i < n; i++)
    if (!isdigit((unsigned char)t[i])) return 0;
  return 1;
}

/* [+-] (digits [. [digits]] | . digits) [(e|E|d|D) [+-] digits] */
static int match_real(const char *t, size_t n) {
  size_t i = 0, mant = 0;
  if (i < n && (t[i] == '+' || t[i] == '-')) i++;
  while (i < n && isdigit((unsigned char)t[i])) i++, mant++;
  if (i < n && t[i] == '.') {
    i++;
    while (i < n && isdigit((unsigned char)t[i])) i++, mant++;
  }
  if (mant == 0) return 0;
  if (i < n && strchr("eEdD", t[i])) {
    i++;
    if (i < n && (t[i] == '+' || t[i] == '-')) i++;
    size_t e = i;
    while (i < n && isdigit((unsigned char)t[i])) i++;
    if (i == e) return 0;
  }
  return i == n;
}

static int match_logical(const char *t, size_t n, int *b) {
  if (n >= 2 && t[0] == '.' && strchr("tTfF", t[1])) {
    *b = tolower((unsigned char)t[1]) == 't';
    return 1;
  }
  if ((n == 1 && strchr("tTfF", t[0])) || (n == 4 && strncasecmp(t, "true", 4) == 0) ||
      (n == 5 && strncasecmp(t, "false", 5) == 0)) {
    *b = tolower((unsigned char)t[0]) == 't';
    return 1;
  }
  return 0;
}

/* Classify one unquoted value; returns 0 after reporting an error. */
static int unquoted_value(struct scan *s, const char *t, size_t n, long long repeat, int line, int col) {
  char q[64];
  excerpt(q, sizeof q, t, n);
  int b;
  if (match_logical(t, n, &b)) {
    struct deck_value *v = add_value(s, DECK_LOGICAL, t, n, line, col);
    v->b = b;
    v->repeat = repeat;
    return 1;
  }
  if (match_int(t, n)) {
    char buf[64];
    if (n >= sizeof buf) goto too_big_int;
    memcpy(buf, t, n);
    buf[n] = '\0';
    errno = 0;
    long long x = strtoll(buf, NULL, 10);
    if (errno == ERANGE) goto too_big_int;
    struct deck_value *v = add_value(s, DECK_INT, t, n, line, col);
    v->i = x;
    v->r = (double)x;
    v->repeat = repeat;
    return 1;
  too_big_int:
    deck_error(s->d, line, col, "integer '%s' does not fit in 64 bits", q);
    return 0;
  }
  if (match_real(t, n)) {
    char buf[128];
    if (n >= sizeof buf) {
      deck_error(s->d, line, col, "real number '%s' is too long", q);
      return 0;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (t[i] == 'd' || t[i] == 'D') ? 'e' : t[i];
    buf[n] = '\0';
    errno = 0;
    double x = strtod(buf, NULL);
    if (errno == ERANGE && fabs(x) > 1.0) {
      deck_error(s->d, line, col, "real number '%s' is out of the range of double precision", q);
      return 0;
    }
    struct deck_value *v = add_value(s, DECK_REAL, t, n, line, col);
    v->r = x;
    v->repeat = repeat;
    return 1;
  }
  if (is_name_start(t[0]))
    deck_error(s->d, line, col, "'%s' is not a number or logical; strings need quotes: '%s'", q, q);
  else if (isdigit((unsigned char)t[0]) || strchr("+-.", t[0]))
    deck_error(s->d, line, col, "bad number '%s'", q);
  else
    unexpected(s->d, line, col, t[0]);
  return 0;
}

/* A quoted string starting at s->p; returns 0 after an error (the rest of the line is skipped). */
static int string_value(struct scan *s, long long repeat, int line, int col) {
  char quote = *s->p;
  const char *start = s->p;
  size_t cap = 16, len = 0;
  char *buf = xmalloc(cap);
  s->p++;
  for (;;) {
    char c = *s->p;
    if (c == '\0' || c == '\n' || (c == '\r' && s->p[1] == '\n')) {
      free(buf);
      deck_error(s->d, line, col, "unterminated string: no closing %c on this line", quote);
      skip_to_eol(s);
      return 0;
    }
    if (c == quote) {
      if (s->p[1] != quote) break;
      s->p++; /* a doubled quote stands for one */
    }
    if (len + 2 > cap) buf = xrealloc(buf, cap *= 2);
    buf[len++] = c;
    s->p++;
  }
  s->p++;
  buf[len] = '\0';
  if (s->skipping) {
    free(buf);
    return 1;
  }
  struct deck_value *v = add_value(s, DECK_STRING, start, (size_t)(s->p - start), line, col);
  v->s = buf;
  v->repeat = repeat;
  return 1;
}

/* Whether the current entry may take one more value; reports the entry once when it may not. */
static int room_for_value(struct scan *s) {
  if (s->skipping || s->entry < 0) return 1;
  const struct deck_entry *e = &s->d->entries[s->entry];
  if (e->nvalues < DECK_MAX_VALUES) return 1;
  deck_error(s->d, s->line, col_of(s, s->p), "more than %d values for '%s'; no key takes that many", DECK_MAX_VALUES,
             e->key);
  entry_failed(s);
  return 0;
}

/* One value item at s->p (not a comma): [r*]value, r*, a string, a number or a logical. */
static void value_item(struct scan *s) {
  room_for_value(s); /* past the limit the item is still scanned, but skipped */
  int line = s->line, col = col_of(s, s->p);
  const char *t = s->p;
  long long repeat = 1;
  if (*t == '\'' || *t == '"') {
    if (!string_value(s, 1, line, col)) entry_failed(s);
    s->expect = 0;
    return;
  }
  size_t plen = path_len(t);
  if (plen) {
    unquoted_path(s, plen);
    return;
  }
  while (!is_value_end(*s->p)) s->p++;
  size_t n = (size_t)(s->p - t);
  if (n == 0) { /* a separator with no meaning here, such as '=', ')' or '*' */
    if (!s->skipping) {
      if (*t == '*')
        deck_error(s->d, line, col, "a repeat count needs a number before '*' (as in 3*0.5)");
      else
        deck_error(s->d, line, col, "unexpected '%c'", *t);
    }
    s->p++;
    entry_failed(s);
    return;
  }
  if (*s->p == '*' && match_int(t, n) && isdigit((unsigned char)t[0])) {
    char buf[32];
    errno = 0;
    snprintf(buf, sizeof buf, "%.*s", (int)(n < 31 ? n : 31), t);
    repeat = strtoll(buf, NULL, 10);
    if (!s->skipping && (n > 18 || repeat < 1 || repeat > INT_MAX)) {
      deck_error(s->d, line, col, "repeat count %.*s must be between 1 and %d", (int)(n < 31 ? n : 31), t,
                 INT_MAX);
      entry_failed(s);
    }
    s->p++; /* the '*' */
    char c = *s->p;
    if (c == '\'' || c == '"') {
      if (!string_value(s, repeat, line, col)) entry_failed(s);
      s->expect = 0;
      return;
    }
    if (is_value_end(c)) { /* r* : r null values */
      if (!s->skipping) {
        struct deck_value *v = add_value(s, DECK_NULL, t, (size_t)(s->p - t), line, col);
        v->repeat = repeat;
      }
      s->expect = 0;
      return;
    }
    const char *u = s->p;
    while (!is_value_end(*s->p)) s->p++;
    if (!s->skipping && !unquoted_value(s, u, (size_t)(s->p - u), repeat, line, col)) entry_failed(s);
    s->expect = 0;
    return;
  }
  if (!s->skipping && !unquoted_value(s, t, n, 1, line, col)) entry_failed(s);
  s->expect = 0;
}

/* ---- keys ---- */

static int read_subscript_number(struct scan *s, long long *v) {
  while (*s->p == ' ' || *s->p == '\t') s->p++;
  const char *t = s->p;
  if (*s->p == '+' || *s->p == '-') s->p++;
  if (!isdigit((unsigned char)*s->p)) return 0;
  while (isdigit((unsigned char)*s->p)) s->p++;
  if (s->p - t > 18) return 0;
  *v = strtoll(t, NULL, 10);
  while (*s->p == ' ' || *s->p == '\t') s->p++;
  return 1;
}

/* At '(' after a key name: (lo) or (lo:hi).  Returns 0 after reporting an error. */
static int subscript(struct scan *s, struct deck_entry *e) {
  int line = s->line, col = col_of(s, s->p);
  s->p++;
  e->has_sub = 1;
  if (!read_subscript_number(s, &e->lo)) goto bad;
  e->hi = e->lo;
  if (*s->p == ':') {
    s->p++;
    if (!read_subscript_number(s, &e->hi)) goto bad;
    e->is_range = 1;
    if (*s->p == ':') {
      deck_error(s->d, line, col, "subscript strides (i:j:k) are not supported; use %s(i:j)", e->key);
      return 0;
    }
  }
  if (*s->p != ')') goto bad;
  if (e->hi < e->lo) {
    deck_error(s->d, line, col, "empty subscript range %s(%lld:%lld)", e->key, e->lo, e->hi);
    return 0;
  }
  s->p++;
  return 1;
bad:
  deck_error(s->d, line, col, "bad subscript after '%s': expected %s(i) or %s(i:j) with integers i, j",
             e->key, e->key, e->key);
  return 0;
}

/* At an identifier that is followed by '=' or '(': a new entry. */
static void key_item(struct scan *s, const char *name, size_t len, int line, int col) {
  s->entry = add_entry(s->d, s->group, name, len, line, col);
  s->skipping = 0;
  s->expect = 1;
  struct deck_entry *e = &s->d->entries[s->entry];
  skip_blanks(s);
  if (*s->p == '(' && !subscript(s, e)) {
    /* Resume after the ')' and '=' if they are on this line; the values are skipped. */
    entry_failed(s);
    while (*s->p && *s->p != '\n' && *s->p != ')') s->p++;
    if (*s->p != ')') return;
    s->p++;
    while (*s->p == ' ' || *s->p == '\t') s->p++;
    if (*s->p == '=') s->p++;
    return;
  }
  skip_blanks(s);
  if (*s->p != '=') {
    char what[96];
    if (e->has_sub)
      snprintf(what, sizeof what, "%s(...)", e->key);
    else
      snprintf(what, sizeof what, "%s", e->key);
    deck_error(s->d, s->line, col_of(s, s->p), "'=' expected after '%s'", what);
    entry_failed(s);
    return;
  }
  s->p++;
}

/* An identifier inside a group: a key if '=' or '(' follows, else a logical value or an error. */
static void name_item(struct scan *s) {
  int line = s->line, col = col_of(s, s->p);
  const char *name = s->p;
  while (is_name_char(*s->p)) s->p++;
  size_t len = (size_t)(s->p - name);
  /* Look past blanks and comments for '=' or '(' without consuming them. */
  struct scan look = *s;
  skip_blanks(&look);
  if (*look.p == '=' || *look.p == '(') {
    key_item(s, name, len, line, col);
    return;
  }
  size_t plen = path_len(name);
  if (plen && s->entry >= 0 && !first_on_line(s, name)) {
    s->p = name;
    unquoted_path(s, plen);
    return;
  }
  int b;
  const char *end = name + len;
  while (!is_value_end(*end)) end++; /* words like T.x are one value */
  int logical = match_logical(name, len, &b) && end == name + len;
  /* While skipping the values of a bad entry, a word opening a line is still checked: it is
   * most likely the next key with its '=' forgotten. */
  if (s->skipping && (logical || !first_on_line(s, name))) return;
  if (s->entry >= 0 && logical && !s->skipping) {
    if (room_for_value(s)) unquoted_value(s, name, len, 1, line, col);
    s->expect = 0;
    return;
  }
  char q[64];
  excerpt(q, sizeof q, name, len);
  if (s->entry < 0 || first_on_line(s, name)) {
    deck_error(s->d, line, col, "'=' expected after '%s'", q);
    s->entry = -1;
  } else {
    deck_error(s->d, line, col, "'%s' is not a number or logical; strings need quotes: '%s'", q, q);
  }
  entry_failed(s);
}

/* ---- the main loop ---- */

static void in_group(struct scan *s) {
  char c = *s->p;
  size_t plen;
  if (c == '/' && s->entry >= 0 && s->expect && (plen = path_len(s->p)) != 0) {
    unquoted_path(s, plen); /* key = /abs/path */
  } else if (c == '/') {
    s->p++;
    close_group(s);
  } else if (c == '&' || c == '$') {
    open_group(s);
  } else if (c == ',') {
    if (s->entry >= 0 && !s->skipping) {
      if (s->expect && room_for_value(s)) add_value(s, DECK_NULL, ",", 1, s->line, col_of(s, s->p));
      s->expect = 1;
    } else if (s->entry < 0 && !s->skipping) {
      deck_error(s->d, s->line, col_of(s, s->p), "',' with no 'key =' before it");
      s->skipping = 1;
    }
    s->p++;
  } else if (is_name_start(c)) {
    name_item(s);
  } else if (s->entry >= 0 || s->skipping) {
    value_item(s);
  } else {
    int line = s->line, col = col_of(s, s->p);
    const char *t = s->p;
    if (*t == '\'' || *t == '"') {
      s->entry = -1;
      deck_error(s->d, line, col, "a value with no key: write 'key = value'");
      s->skipping = 1;
      value_item(s);
      return;
    }
    while (!is_value_end(*s->p)) s->p++;
    if (s->p == t) s->p++;
    char q[64];
    excerpt(q, sizeof q, t, (size_t)(s->p - t));
    if (isdigit((unsigned char)*t) || strchr("+-.", *t))
      deck_error(s->d, line, col, "a value with no key: '%s' (write 'key = value')", q);
    else if (!isprint((unsigned char)*t))
      unexpected(s->d, line, col, *t);
    else
      deck_error(s->d, line, col, "unexpected '%s' (expected 'key = value' or '/')", q);
    s->skipping = 1;
  }
}

static void top_level(struct scan *s) {
  char c = *s->p;
  if (c == '&' || c == '$') {
    open_group(s);
    return;
  }
  int line = s->line, col = col_of(s, s->p);
  const char *t = s->p;
  skip_to_eol(s);
  const char *e = s->p;
  while (e > t && isspace((unsigned char)e[-1])) e--;
  char q[64];
  excerpt(q, sizeof q, t, (size_t)(e - t));
  if (c == '/')
    deck_error(s->d, line, col, "'/' outside a group (no &group is open)");
  else
    deck_error(s->d, line, col, "text outside a group: '%s' (only '!' comments may stand between groups)", q);
}

static void split_lines(struct deck *d, const char *text) {
  int n = 1;
  for (const char *p = text; *p; p++) n += *p == '\n';
  d->lines = xcalloc((size_t)n, sizeof *d->lines);
  const char *p = text;
  for (int i = 0; i < n; i++) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len && p[len - 1] == '\r') len--;
    d->lines[i] = xmalloc(len + 1);
    memcpy(d->lines[i], p, len);
    d->lines[i][len] = '\0';
    d->nlines++;
    if (!e) break;
    p = e + 1;
  }
}

void deck_parse(struct deck *d, const char *path, const char *text) {
  memset(d, 0, sizeof *d);
  d->path = xstrdup(path);
  split_lines(d, text);
  struct scan s = {d, text, text, NULL, NULL, 1, -1, -1, 0, 0};
  if ((unsigned char)s.p[0] == 0xEF && (unsigned char)s.p[1] == 0xBB && (unsigned char)s.p[2] == 0xBF)
    s.p += 3; /* a UTF-8 byte-order mark */
  for (;;) {
    skip_blanks(&s);
    if (!*s.p) break;
    if (s.group < 0)
      top_level(&s);
    else
      in_group(&s);
  }
  if (s.group >= 0) {
    const struct deck_group *g = &d->groups[s.group];
    deck_error(d, g->line, g->col, "group &%s is not closed: the file ends before its '/'", g->name);
    if (s.entry >= 0) d->entries[s.entry].bad = 1;
  }
}

void deck_values_free(struct deck_value *vals, int n) {
  for (int i = 0; i < n; i++) {
    free(vals[i].s);
    free(vals[i].text);
  }
  free(vals);
}

void deck_free(struct deck *d) {
  for (int i = 0; i < d->nlines; i++) free(d->lines[i]);
  for (int i = 0; i < d->ngroups; i++) free(d->groups[i].name);
  for (int i = 0; i < d->nentries; i++) {
    free(d->entries[i].key);
    deck_values_free(d->entries[i].values, d->entries[i].nvalues);
  }
  for (int i = 0; i < d->ndiags; i++) free(d->diags[i].msg);
  free(d->lines);
  free(d->groups);
  free(d->entries);
  free(d->diags);
  free(d->path);
  memset(d, 0, sizeof *d);
}

int deck_parse_values(const char *text, struct deck_value **vals, int *n) {
  size_t len = strlen(text) + 32;
  char *src = xmalloc(len);
  snprintf(src, len, "&v\nx = %s\n/\n", text);
  struct deck d;
  deck_parse(&d, "(default)", src);
  free(src);
  int nerr = d.ndiags;
  *vals = NULL;
  *n = 0;
  if (d.nentries == 1 && !nerr) { /* hand the values over */
    *vals = d.entries[0].values;
    *n = d.entries[0].nvalues;
    d.entries[0].values = NULL;
    d.entries[0].nvalues = 0;
  } else if (!nerr) {
    nerr = 1;
  }
  deck_free(&d);
  return nerr;
}
