/* channel_sets.c - parsing, comparing and naming the channel combinations of a study. */
#include "build_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "input/channel_sets.h"

int channel_set_parse(const char *text, const char (*names)[CFG_WORDLEN], int nnames, int nchannels, long *ch,
                      char *why, size_t n) {
  int count = 0, unresolved = 0;
  const char *p = text;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len > 0 && isspace((unsigned char)*p)) p++, len--;
    while (len > 0 && isspace((unsigned char)p[len - 1])) len--;
    char tok[CFG_WORDLEN];
    if (len == 0) {
      if (count == 0 && !end)
        snprintf(why, n, "'%s' is empty: a set names at least one channel", text);
      else
        snprintf(why, n, "'%s' has an empty channel (two commas in a row, or one at an end)", text);
      return -1;
    }
    snprintf(tok, sizeof tok, "%.*s", (int)len, p);
    long c = -1;
    int is_number = 1;
    for (size_t i = 0; i < len; i++) is_number &= isdigit((unsigned char)tok[i]) != 0;
    if (is_number) {
      errno = 0;
      c = strtol(tok, NULL, 10);
      const int limit = nchannels >= 0 ? nchannels : nnames;
      if (errno || (limit > 0 && c >= limit)) {
        snprintf(why, n, "'%s': channel %s does not exist (%s %d channels, 0 to %d)", text, tok,
                 nchannels >= 0 ? "the images have" : "channel_names names", limit, limit - 1);
        return -1;
      }
    } else {
      for (int i = 0; i < nnames && c < 0; i++)
        if (strcmp(names[i], tok) == 0) c = i;
      if (c < 0 && nnames == 0) {
        unresolved = 1;
      } else if (c < 0) {
        char list[1024] = "";
        for (int i = 0; i < nnames; i++) {
          const size_t used = strlen(list);
          snprintf(list + used, sizeof list - used, "%s'%s'", i ? ", " : "", names[i]);
        }
        snprintf(why, n, "'%s': no channel is named '%s' (the channels: %s, or their 0-based indices)", text, tok,
                 list);
        return -1;
      }
    }
    if (!unresolved) {
      for (int i = 0; i < count; i++)
        if (ch[i] == c) {
          snprintf(why, n, "'%s' names channel %ld twice", text, c);
          return -1;
        }
    }
    if (count == CHANNEL_SET_MAX) {
      snprintf(why, n, "'%s' has more than %d channels", text, CHANNEL_SET_MAX);
      return -1;
    }
    ch[count++] = c;
    if (!end) break;
    p = end + 1;
  }
  return unresolved ? -2 : count;
}

int channel_set_same(const long *a, int na, const long *b, int nb) {
  if (na != nb) return 0;
  for (int i = 0; i < na; i++) {
    int found = 0;
    for (int j = 0; j < nb && !found; j++) found = a[i] == b[j];
    if (!found) return 0;
  }
  return 1;
}

int channel_set_dirname(const long *ch, int nch, const char (*names)[CFG_WORDLEN], int nnames, char *out, size_t n,
                        char *why, size_t whyn) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < nch; i++) {
    char one[CFG_WORDLEN + 8];
    if (ch[i] < nnames)
      snprintf(one, sizeof one, "%s", names[ch[i]]);
    else
      snprintf(one, sizeof one, "ch%ld", ch[i]);
    if (strchr(one, '/') || strcmp(one, ".") == 0 || strcmp(one, "..") == 0) {
      snprintf(why, whyn, "the channel name '%s' cannot be part of a folder name", one);
      return -1;
    }
    const int w = snprintf(out + used, n - used, "%s%s", i ? "_" : "", one);
    if (w < 0 || (size_t)w >= n - used) {
      snprintf(why, whyn, "the folder name of channels %s... is longer than %zu characters", out, n - 1);
      return -1;
    }
    used += (size_t)w;
  }
  return 0;
}

/* ---- a study's list of sets: each parsed once, each compared with those before it ---- */

int channel_sets_parse_one(const char (*texts)[CFG_WORDLEN], int i, const char (*names)[CFG_WORDLEN], int nnames,
                           int nchannels, long (*sets)[CHANNEL_SET_MAX], const int *counts, char *why, size_t n) {
  const int count = channel_set_parse(texts[i], names, nnames, nchannels, sets[i], why, n);
  for (int j = 0; j < i && count > 0; j++)
    if (counts[j] > 0 && channel_set_same(sets[i], count, sets[j], counts[j])) {
      snprintf(why, n, "'%s' selects the same channels as channel_sets(%d) = '%s'", texts[i], j + 1, texts[j]);
      return -3;
    }
  return count;
}
