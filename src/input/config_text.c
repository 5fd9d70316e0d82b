/* config_text.c - the configuration as text: the echoed effective deck (re-readable, every key),
 * the `scdino --help-input` reference (plain, and Markdown for doc/input.md) and README's table of
 * scDINO's settings, all generated from the key table. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "input/config_priv.h"

/* The shortest %g form that reads back to the same double (at most 17 digits), always with a
 * '.' or an exponent so it reads as a real. */
static void fmt_real(double x, char *out, size_t n) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(out, n, "%.*g", prec, x);
    if (strtod(out, NULL) == x) break;
  }
  if (!strpbrk(out, ".eEn")) { /* n: inf/nan, which the range checks keep out anyway */
    size_t len = strlen(out);
    if (len + 3 <= n) memcpy(out + len, ".0", 3);
  }
}

static void put_string(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f); /* a doubled quote stands for one */
    fputc(*s, f);
  }
  fputc('\'', f);
}

static void put_element(FILE *f, const struct config *cfg, const struct cfg_key *k, int i) {
  const void *p = config_field(cfg, k, i);
  char buf[64];
  switch (k->type) {
  case CFG_T_INT: fprintf(f, "%ld", *(const long *)p); break;
  case CFG_T_REAL:
    fmt_real(*(const double *)p, buf, sizeof buf);
    fputs(buf, f);
    break;
  case CFG_T_BOOL: fputs(*(const int *)p ? ".true." : ".false.", f); break;
  case CFG_T_STR:
  case CFG_T_CHOICE: put_string(f, p); break;
  }
}

/* The value list of k as the echo writes it, each element after a blank. */
static void put_value(FILE *f, const struct config *cfg, const struct cfg_key *k) {
  const int n = k->is_array ? *config_count(cfg, k) : 1;
  for (int j = 0; j < n; j++) {
    fputs(j ? ", " : " ", f);
    put_element(f, cfg, k, j);
  }
}

void config_value_text(const struct config *cfg, const struct cfg_key *k, char *out, size_t n) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) SCD_FAIL("open_memstream failed");
  put_value(m, cfg, k);
  if (fclose(m) != 0) SCD_FAIL("writing to a memory stream failed");
  snprintf(out, n, "%s", buf[0] ? buf + 1 : buf);
  free(buf);
}

char *config_echo_text(const struct config *cfg) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) SCD_FAIL("open_memstream failed");
  config_echo(f, cfg);
  if (fclose(f) != 0) SCD_FAIL("cannot format the deck");
  return buf;
}

void config_echo(FILE *f, const struct config *cfg) {
  fprintf(f, "! Effective input deck of %s %s: every key, defaults included.\n", PACKAGE_NAME, PACKAGE_VERSION);
  fprintf(f, "! Read back by scdino, it gives the same configuration.\n");
  for (int g = 0; g < cfg_ngroups; g++) {
    fprintf(f, "\n&%s\n", cfg_groups[g].name);
    for (int i = 0; i < cfg_nkeys; i++) {
      const struct cfg_key *k = &cfg_keys[i];
      if (strcmp(k->group, cfg_groups[g].name) != 0) continue;
      /* Assignment into a memory stream first, to align the comments. */
      char *line = NULL;
      size_t len = 0;
      FILE *m = open_memstream(&line, &len);
      if (!m) SCD_FAIL("open_memstream failed");
      fprintf(m, "  %s =", k->name);
      put_value(m, cfg, k);
      if (fclose(m) != 0) SCD_FAIL("writing to a memory stream failed");
      fprintf(f, "%-36s ! %s\n", line, k->doc);
      free(line);
    }
    fprintf(f, "/\n");
  }
}

/* ---- --help-input ---- */

#define HELP_INDENT 24
#define HELP_WIDTH 79

/* Print text wrapped at HELP_WIDTH, every line starting at column HELP_INDENT; the first line
 * continues from column `at` (padding up to the indent). */
static void wrap(FILE *f, const char *text, int at) {
  int col = at;
  const char *p = text;
  int first_word = 1;
  while (*p) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *e = p;
    while (*e && *e != ' ') e++;
    int w = (int)(e - p);
    if (first_word) {
      if (col >= HELP_INDENT) {
        fputc('\n', f);
        col = 0;
      }
      fprintf(f, "%*s", HELP_INDENT - col, "");
      col = HELP_INDENT;
    } else if (col + 1 + w > HELP_WIDTH) {
      fprintf(f, "\n%*s", HELP_INDENT, "");
      col = HELP_INDENT;
    } else {
      fputc(' ', f);
      col++;
    }
    fprintf(f, "%.*s", w, p);
    col += w;
    first_word = 0;
    p = e;
  }
  fputc('\n', f);
}

/* "integer, 1 to 1000000" and the like: the type and the allowed values. */
static void describe_type(const struct cfg_key *k, char *out, size_t n) {
  static const char *const base[] = {"integer", "real", "logical", "string", "string"};
  size_t used = 0;
#define ADD(...)                                                       \
  do {                                                                 \
    int w_ = snprintf(out + used, n - used, __VA_ARGS__);              \
    if (w_ > 0) used += (size_t)w_ < n - used ? (size_t)w_ : n - used - 1; \
  } while (0)
  out[0] = '\0';
  if (k->type == CFG_T_CHOICE) {
    ADD("one of ");
    for (const char *p = k->choices; *p;) {
      const char *e = strchr(p, '|');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      ADD("%s'%.*s'", p == k->choices ? "" : ", ", (int)len, p);
      p = e ? e + 1 : p + len;
    }
  } else if (k->is_array) {
    ADD("%s array (up to %d)", base[k->type], k->maxcount);
  } else {
    ADD("%s", base[k->type]);
  }
  if (k->type == CFG_T_INT || k->type == CFG_T_REAL) {
    char lo[40], hi[40];
    config_fmt_bound(k, k->min, lo, sizeof lo);
    config_fmt_bound(k, k->max, hi, sizeof hi);
    const char *each = k->is_array ? "each " : "";
    if (k->min > CFG_NOMIN && k->max < CFG_NOMAX)
      ADD(", %s%s to %s", each, lo, hi);
    else if (k->min > CFG_NOMIN)
      ADD(", %s>= %s", each, lo);
    else if (k->max < CFG_NOMAX)
      ADD(", %s<= %s", each, hi);
  }
#undef ADD
}

/* The default as text: "required", "empty" or the default's deck text. */
static const char *describe_default(const struct cfg_key *k) {
  if (k->type == CFG_T_CHOICE && k->def[0] == '\0') return "required";
  return k->def[0] == '\0' ? "empty" : k->def;
}

/* The upstream names of k, each in backticks when md, separated by ", ". */
static void put_scdino_names(FILE *f, const struct cfg_key *k, int md) {
  const char *name;
  size_t len;
  for (int i = 0; config_scdino_name(k, i, &name, &len); i++)
    fprintf(f, "%s%s%.*s%s", i ? ", " : "", md ? "`" : "", (int)len, name, md ? "`" : "");
}

/* What a restart does with the key, as a sentence ("" for a key it does not compare). */
static const char *describe_restart(const struct cfg_key *k) {
  switch (k->restart) {
  case CFG_RESTART_EQUAL: return "On restart: must stay as in the checkpoint.";
  case CFG_RESTART_WARN: return "On restart: may change, with a warning.";
  case CFG_RESTART_FREE: break;
  }
  return "";
}

/* The key's upstream names as a sentence (malloc'd; "" when it has none). */
static char *describe_scdino(const struct cfg_key *k, int md) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) SCD_FAIL("open_memstream failed");
  if (k->scdino[0]) {
    fputs("scDINO: ", m);
    put_scdino_names(m, k, md);
    fputc('.', m);
  }
  if (fclose(m) != 0) SCD_FAIL("writing to a memory stream failed");
  return buf;
}

/* What both forms of the reference say first. */
static const char help_intro[] =
    "The deck is a Fortran namelist file, e.g.\n"
    "\n"
    "    &control\n"
    "      calculation = 'train'     ! a comment\n"
    "    /\n"
    "    &training  epochs = 100, lr = 5e-4  /\n"
    "\n"
    "Groups come in any order (each at most once); names are case-insensitive.\n"
    "Strings need quotes ('...' or \"...\"; a doubled quote inside stands for one).\n"
    "Logicals are .true. or .false. (also T, F); reals may use e or d exponents\n"
    "(1.0d-4). Array values are separated by commas or blanks, 3*0.5 repeats a\n"
    "value, and key(i) = v or key(i:j) = v, w set single elements (counted from 1).\n"
    "Assigning an array without a subscript replaces the whole list. Keys not given\n"
    "keep the defaults below; ranges are inclusive. Every error of a deck is\n"
    "reported (file:line:column) before anything runs.\n";

void config_help(FILE *f) {
  fprintf(f, "%s %s input deck: every key, by group.\n\n%s", PACKAGE_NAME, PACKAGE_VERSION, help_intro);
  for (int g = 0; g < cfg_ngroups; g++) {
    fprintf(f, "\n&%s  (%s)\n\n", cfg_groups[g].name, cfg_groups[g].doc);
    for (int i = 0; i < cfg_nkeys; i++) {
      const struct cfg_key *k = &cfg_keys[i];
      if (strcmp(k->group, cfg_groups[g].name) != 0) continue;
      char type[960], what[1024];
      describe_type(k, type, sizeof type);
      const char *def = describe_default(k);
      if (!strcmp(def, "required"))
        snprintf(what, sizeof what, "%s; required", type);
      else if (!strcmp(def, "empty"))
        snprintf(what, sizeof what, "%s; default: empty", type);
      else
        snprintf(what, sizeof what, "%s; default %s", type, def);
      fprintf(f, "  %s", k->name);
      wrap(f, what, 2 + (int)strlen(k->name));
      wrap(f, k->doc, 0);
      char *names = describe_scdino(k, 0);
      if (describe_restart(k)[0]) wrap(f, describe_restart(k), 0);
      if (names[0]) wrap(f, names, 0);
      free(names);
    }
  }
}

/* Text for a Markdown table cell: '|' escaped. */
static void md_cell(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '|') fputc('\\', f);
    fputc(*s, f);
  }
}

void config_help_markdown(FILE *f) {
  fprintf(f, "# Input deck reference\n\n"
             "Every key of the %s input deck, by group. This file is generated from the key table\n"
             "`src/input/config_keys.def` by `scdino --help-input=markdown` (`make input-doc` writes it;\n"
             "a test fails when it is stale): edit the table, not this file.\n\n%s",
          PACKAGE_NAME, help_intro);
  fputs("\nGroups:", f);
  for (int g = 0; g < cfg_ngroups; g++) fprintf(f, "%s [`&%s`](#%s)", g ? "," : "", cfg_groups[g].name, cfg_groups[g].name);
  fputs(".\n", f);
  for (int g = 0; g < cfg_ngroups; g++) {
    fprintf(f, "\n## %s\n\n`&%s`: %s.\n\n| key | type | default | meaning |\n|---|---|---|---|\n", cfg_groups[g].name,
            cfg_groups[g].name, cfg_groups[g].doc);
    for (int i = 0; i < cfg_nkeys; i++) {
      const struct cfg_key *k = &cfg_keys[i];
      if (strcmp(k->group, cfg_groups[g].name) != 0) continue;
      char type[960];
      describe_type(k, type, sizeof type);
      const char *def = describe_default(k);
      fprintf(f, "| `%s` | ", k->name);
      md_cell(f, type);
      fputs(" | ", f);
      if (!strcmp(def, "required") || !strcmp(def, "empty")) {
        md_cell(f, def);
      } else {
        fputc('`', f);
        md_cell(f, def);
        fputc('`', f);
      }
      fputs(" | ", f);
      md_cell(f, k->doc);
      char *names = describe_scdino(k, 1);
      const size_t dl = strlen(k->doc);
      if ((describe_restart(k)[0] || names[0]) && dl && k->doc[dl - 1] != '.') fputc('.', f);
      if (describe_restart(k)[0]) fprintf(f, " %s", describe_restart(k));
      if (names[0]) fputc(' ', f);
      md_cell(f, names);
      free(names);
      fputs(" |\n", f);
    }
  }
}

void config_help_scdino_map(FILE *f) {
  fputs("| scDINO (`configs/scDINO_full_pipeline.yaml` / `main_dino.py`) | scdino deck key |\n|---|---|\n", f);
  for (int i = 0; i < cfg_nmap_rows; i++) {
    const struct cfg_map_row *r = &cfg_map_rows[i];
    if (!r->group) {
      fputs("| ", f);
      md_cell(f, r->upstream);
      fputs(" | ", f);
      md_cell(f, r->here);
      fputs(" |\n", f);
      continue;
    }
    const struct cfg_key *k = config_key(r->group, r->name);
    if (!k->scdino[0]) continue;
    fputs("| ", f);
    put_scdino_names(f, k, 1);
    fprintf(f, " | `&%s %s`", k->group, k->name);
    if (config_scdino_note(k)[0]) {
      fputs(" (", f);
      md_cell(f, config_scdino_note(k));
      fputc(')', f);
    }
    fputs(" |\n", f);
  }
}
