/* channel_sets.c - parsing, comparing and naming the channel combinations of a study. */
#include "build_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "input/channel_sets.h"
#include "input/study_settings.h"

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
    len = strlen(tok);
    /* "0" (quoted): a name, never an index */
    const int quoted = len >= 2 && (tok[0] == '"' || tok[0] == '\'') && tok[len - 1] == tok[0];
    if (quoted) {
      memmove(tok, tok + 1, len - 2);
      tok[len - 2] = '\0';
    }
    int by_name = -1;
    for (int i = 0; i < nnames && by_name < 0; i++)
      if (strcmp(names[i], tok) == 0) by_name = i;
    long c = -1;
    int is_number = !quoted;
    for (size_t i = 0; tok[i] && is_number; i++) is_number = isdigit((unsigned char)tok[i]) != 0;
    if (is_number) {
      errno = 0;
      const long index = strtol(tok, NULL, 10);
      const int limit = nchannels >= 0 ? nchannels : nnames;
      const int is_index = !errno && (limit <= 0 || index < limit);
      if (is_index && by_name >= 0 && by_name != index) {
        char named[CFG_WORDLEN + 8];
        if (index < nnames)
          snprintf(named, sizeof named, "%s", names[index]);
        else
          snprintf(named, sizeof named, "ch%ld", index);
        snprintf(why, n, "'%s': %s is ambiguous: the index of channel %ld (named '%s') and the name of channel %d; a "
                 "channel in double quotes is always a name: write \"%s\" for channel %ld, \"%s\" for channel %d",
                 text, tok, index, named, by_name, named, index, tok, by_name);
        return -1;
      }
      if (is_index) {
        c = index;
      } else if (by_name >= 0) { /* a number that names a channel and is no index: '405' */
        c = by_name;
      } else {
        snprintf(why, n, "'%s': channel %s does not exist (%s %d channels, 0 to %d)", text, tok,
                 nchannels >= 0 ? "the images have" : "channel_names names", limit, limit - 1);
        return -1;
      }
    } else if (by_name >= 0) {
      c = by_name;
    } else if (nnames == 0) {
      unresolved = 1;
    } else {
      char list[1024] = "";
      for (int i = 0; i < nnames; i++) {
        const size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s'%s'", i ? ", " : "", names[i]);
      }
      snprintf(why, n, "'%s': no channel is named '%s' (the channels: %s, or their 0-based indices)", text, tok, list);
      return -1;
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

int channel_set_dirname(const long *ch, int nch, const char (*names)[CFG_WORDLEN], int nnames, const char *run_dir,
                        long name_max, char *out, size_t n, char *why, size_t whyn) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < nch; i++) {
    char one[CFG_WORDLEN + 8];
    if (ch[i] < nnames)
      snprintf(one, sizeof one, "%s", names[ch[i]]);
    else
      snprintf(one, sizeof one, "ch%ld", ch[i]);
    if (!one[0]) {
      snprintf(why, whyn, "channel %ld has an empty name: the set's folder would be run_dir itself (name the "
               "channels with &data channel_names)", ch[i]);
      return -1;
    }
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
  return study_folder_check(out, run_dir, name_max, why, whyn) ? -1 : 0;
}

int channel_set_folders_clash(const char *a, const char *b) { return strcasecmp(a, b) == 0; }

int channel_set_list_add(struct channel_set_list *l, int i, char *why, size_t n) {
  SCD_ASSERT(i >= 0 && i < CHANNEL_SET_LIST_MAX);
  const char *text = l->texts[i];
  l->folder[i][0] = '\0';
  int count = channel_set_parse(text, l->names, l->nnames, l->nchannels, l->ch[i], why, n);
  if (count > 0 && l->run_dir &&
      channel_set_dirname(l->ch[i], count, l->names, l->nnames, l->run_dir, l->name_max, l->folder[i],
                          sizeof l->folder[i], why, n) != 0)
    count = -3;
  l->count[i] = count;
  for (int j = 0; j < i && count > 0; j++) {
    if (l->count[j] <= 0) continue;
    if (channel_set_same(l->ch[i], count, l->ch[j], l->count[j])) {
      snprintf(why, n, "'%s' selects the same channels as channel_sets(%d) = '%s'", text, j + 1, l->texts[j]);
      return l->count[i] = -4;
    }
    if (l->run_dir && channel_set_folders_clash(l->folder[i], l->folder[j])) {
      const int same = strcmp(l->folder[i], l->folder[j]) == 0;
      snprintf(why, n, "'%s' would write the folder %s/%s of channel_sets(%d) = '%s'%s%s%s (their channel names "
               "joined by _): give the channels other names with &data channel_names", text, l->run_dir,
               l->folder[j], j + 1, l->texts[j], same ? "" : " (as ", same ? "" : l->folder[i],
               same ? "" : ", the same folder where case is ignored)");
      return l->count[i] = -5;
    }
  }
  return count;
}
