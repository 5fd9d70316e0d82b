/* config_suggest.c - "did you mean" for misspelt keys, groups and choices: edit distance,
 * abbreviations, and the option names of upstream scDINO/DINO (the table's scdino fields) mapped
 * to the keys here. */
#include "build_config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "input/config_priv.h"

int config_edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  /* Three rows suffice: transpositions look two rows back. */
  int *prev2 = xmalloc((m + 1) * sizeof(int));
  int *prev = xmalloc((m + 1) * sizeof(int));
  int *cur = xmalloc((m + 1) * sizeof(int));
  for (size_t j = 0; j <= m; j++) prev[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
      int best = prev[j - 1] + (ca != cb);
      if (prev[j] + 1 < best) best = prev[j] + 1;
      if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
      if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best)
        best = prev2[j - 2] + 1;
      cur[j] = best;
    }
    int *t = prev2;
    prev2 = prev;
    prev = cur;
    cur = t;
  }
  int d = prev[m];
  free(prev2);
  free(prev);
  free(cur);
  return d;
}

/* First letters of the underscore-separated parts: learning_rate -> lr.  Returns the number of
 * parts (an abbreviation only means something with two or more). */
static int initials(const char *s, char *out, size_t n) {
  int parts = 0;
  size_t k = 0;
  for (size_t i = 0; s[i]; i++) {
    if (s[i] != '_' && (i == 0 || s[i - 1] == '_')) {
      parts++;
      if (k + 1 < n) out[k++] = (char)tolower((unsigned char)s[i]);
    }
  }
  out[k] = '\0';
  return parts;
}

/* Whether word is one or more whole underscore-separated parts of cand (heads in num_heads). */
static int is_part(const char *word, const char *cand) {
  size_t lw = strlen(word), lc = strlen(cand);
  if (lw < 3 || lw >= lc) return 0;
  for (size_t i = 0; i + lw <= lc; i++)
    if ((i == 0 || cand[i - 1] == '_') && (cand[i + lw] == '\0' || cand[i + lw] == '_') &&
        strncasecmp(cand + i, word, lw) == 0)
      return 1;
  return 0;
}

/* 0 for an abbreviation match, else 1 for a part of the name, else the edit distance if within
 * the cutoff, else -1. */
static int closeness(const char *word, const char *cand) {
  char a[64], b[64];
  if ((initials(word, a, sizeof a) >= 2 && strcasecmp(a, cand) == 0) ||
      (initials(cand, b, sizeof b) >= 2 && strcasecmp(b, word) == 0))
    return 0;
  if (is_part(word, cand)) return 1;
  size_t lw = strlen(word), lc = strlen(cand);
  size_t longer = lw > lc ? lw : lc;
  int cutoff = (int)(longer / 3);
  if (cutoff < 1) cutoff = 1;
  if (longer <= 1) return -1; /* one letter says nothing */
  int d = config_edit_distance(word, cand);
  return d <= cutoff ? d : -1;
}

int config_suggest(const char *word, const char *const *cands, int ncand, const char *quote, char *out,
                   size_t n, int *first) {
  int best = -1;
  for (int i = 0; i < ncand; i++) {
    int c = closeness(word, cands[i]);
    if (c >= 0 && (best < 0 || c < best)) best = c;
  }
  if (n) out[0] = '\0';
  if (best < 0) return 0;
  int total = 0;
  for (int i = 0; i < ncand; i++) total += closeness(word, cands[i]) == best;
  int k = 0;
  size_t used = 0;
  for (int i = 0; i < ncand && k < 4; i++) {
    if (closeness(word, cands[i]) != best) continue;
    const char *sep = k == 0 ? "" : (k == total - 1 || k == 3) ? " or " : ", ";
    int w;
    if (strcmp(quote, "&") == 0)
      w = snprintf(out + used, n - used, "%s&%s", sep, cands[i]);
    else
      w = snprintf(out + used, n - used, "%s%s%s%s", sep, quote, cands[i], quote);
    if (w < 0 || (size_t)w >= n - used) break;
    used += (size_t)w;
    if (k == 0 && first) *first = i;
    k++;
  }
  return k;
}

/* Whether word (len characters) is the name of a key of any group. */
static int is_key_name(const char *word, size_t len) {
  for (int i = 0; i < cfg_nkeys; i++)
    if (strlen(cfg_keys[i].name) == len && strncasecmp(cfg_keys[i].name, word, len) == 0) return 1;
  return 0;
}

/* Upstream option names (scDINO yaml and DINO argparse) are the keys' scdino fields in the table:
 * the last word of each ("train_scDINO.batch_size_per_gpu", "main_dino.py --out_dim") names the
 * key, unless it is a key's own name (then the deck's own messages say where that key is).  Where
 * keys of several groups have the name, the one of `group` (NULL: none) is preferred. */
const struct cfg_key *config_alias(const char *name, const char *group) {
  const size_t len = strlen(name);
  if (is_key_name(name, len)) return NULL;
  const struct cfg_key *found = NULL;
  for (int i = 0; i < cfg_nkeys; i++) {
    const char *up;
    size_t n;
    for (int j = 0; config_scdino_name(&cfg_keys[i], j, &up, &n); j++) {
      const char *w = up + n; /* the last word */
      while (w > up && (isalnum((unsigned char)w[-1]) || w[-1] == '_')) w--;
      if ((size_t)(up + n - w) != len || strncasecmp(w, name, len) != 0) continue;
      if (!group || strcmp(cfg_keys[i].group, group) == 0) return &cfg_keys[i];
      if (!found) found = &cfg_keys[i];
    }
  }
  return found;
}
