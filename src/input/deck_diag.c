/* deck_diag.c - the input-deck reader's diagnostics: kept with line and column, formatted sorted
 * by position with the source line and a caret. */
#include "build_config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "input/deck.h"

/* Room for element n of an array that holds n: capacities grow by doubling, so a deck with
 * millions of values (or of errors) is still read in linear time. */
void *deck_grow(void *p, int n, size_t elem) {
  if (n > 0 && (n & (n - 1)) != 0) return p; /* n is not a power of two: there is room */
  return xrealloc(p, MUL_SIZE(n ? 2 * (size_t)n : 1, elem));
}

int deck_full(const struct deck *d) { return d->ndiags >= DECK_MAX_DIAGS; }

void deck_error(struct deck *d, int line, int col, const char *fmt, ...) {
  if (deck_full(d)) {
    d->nmore++;
    return;
  }
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  d->diags = deck_grow(d->diags, d->ndiags, sizeof *d->diags);
  struct deck_diag *g = &d->diags[d->ndiags];
  g->line = line;
  g->col = col;
  g->seq = d->ndiags;
  g->msg = xstrdup(msg);
  d->ndiags++;
}

/* ---- formatting ---- */

static int diag_order(const void *a, const void *b) {
  const struct deck_diag *x = a, *y = b;
  int xl = x->line ? x->line : INT_MAX, yl = y->line ? y->line : INT_MAX;
  if (xl != yl) return xl < yl ? -1 : 1;
  if (x->col != y->col) return x->col < y->col ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

struct out {
  char *buf;
  size_t n, used;
  int full;
};

static void out_add(struct out *o, const char *fmt, ...) SCD_PRINTF(2, 3);
static void out_add(struct out *o, const char *fmt, ...) {
  if (o->full || o->n == 0) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(o->buf + o->used, o->n - o->used, fmt, ap);
  va_end(ap);
  if (k < 0 || (size_t)k >= o->n - o->used) o->full = 1;
  else o->used += (size_t)k;
}

int deck_format_errors(const struct deck *d, char *buf, size_t n) {
  static const char more[] = "(... more errors not shown)\n";
  struct deck_diag *sorted = xmalloc((size_t)(d->ndiags ? d->ndiags : 1) * sizeof *sorted);
  if (d->ndiags) memcpy(sorted, d->diags, (size_t)d->ndiags * sizeof *sorted);
  qsort(sorted, (size_t)d->ndiags, sizeof *sorted, diag_order);
  /* Keep room for the "more errors" note so a cut list still says so. */
  struct out o = {buf, n > sizeof more ? n - sizeof more : 0, 0, 0};
  if (n) buf[0] = '\0';
  for (int i = 0; i < d->ndiags && !o.full; i++) {
    const struct deck_diag *g = &sorted[i];
    size_t mark = o.used;
    if (g->line <= 0 || g->line > d->nlines) {
      out_add(&o, "%s: %s\n", d->path, g->msg);
    } else {
      const char *src = d->lines[g->line - 1];
      /* A very long line is cut some way after the column (the caret stays right); far along a
       * line, only a window around the column is shown, after "...". */
      size_t len = strlen(src), from = 0;
      const char *lead = "";
      if (g->col > 160 && (size_t)g->col <= len + 1) {
        from = (size_t)g->col - 81;
        lead = "...";
      }
      size_t show = len - from, keep = (size_t)g->col - from + 80 > 200 ? (size_t)g->col - from + 80 : 200;
      const char *cut = show > keep ? "..." : "";
      if (show > keep) show = keep;
      out_add(&o, "%s:%d:%d: %s\n%s", d->path, g->line, g->col, g->msg, lead);
      /* Control bytes are shown as '?': a deck must not drive the user's terminal. */
      for (size_t c = from; c < from + show && !o.full; c++)
        out_add(&o, "%c", (unsigned char)src[c] < 0x20 && src[c] != '\t' ? '?' : src[c] == 0x7f ? '?' : src[c]);
      out_add(&o, "%s\n", cut);
      /* Caret line: copy tabs so the caret lands under the column in any tab setting. */
      out_add(&o, "%s", from ? "   " : "");
      for (size_t c = from + 1; c < (size_t)g->col && !o.full; c++)
        out_add(&o, "%c", c - 1 < len && src[c - 1] == '\t' ? '\t' : ' ');
      out_add(&o, "^\n");
    }
    if (o.full) {
      o.used = mark;
      buf[mark] = '\0';
    }
  }
  if (o.full)
    snprintf(buf + o.used, n - o.used, "%s", more);
  else if (d->nmore && n > o.used)
    snprintf(buf + o.used, n - o.used, "(... %d more errors not shown)\n", d->nmore);
  free(sorted);
  return d->ndiags + d->nmore;
}
