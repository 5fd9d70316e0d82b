/* tests/unit/input/test_deck.c - the namelist reader on its own: every value form, repeat counts, nulls,
 * subscripts, comments, case, group delimiters, positions, every syntax error and the
 * formatting of messages. */
#include "build_config.h"

#include <stdlib.h>
#include <string.h>

#include "input/deck.h"
#include "tests/fixtures/testutil.h"

static struct deck D;

static void parse(const char *text) {
  deck_free(&D);
  deck_parse(&D, "t.nml", text);
}

static const struct deck_entry *entry(const char *key) {
  for (int i = 0; i < D.nentries; i++)
    if (strcmp(D.entries[i].key, key) == 0) return &D.entries[i];
  return NULL;
}

/* Whether some diagnostic at line:col contains the text. */
static int has_diag(int line, int col, const char *text) {
  for (int i = 0; i < D.ndiags; i++)
    if (D.diags[i].line == line && D.diags[i].col == col && strstr(D.diags[i].msg, text)) return 1;
  return 0;
}

static void dump_diags(void) {
  for (int i = 0; i < D.ndiags; i++) fprintf(stderr, "  diag %d:%d: %s\n", D.diags[i].line, D.diags[i].col, D.diags[i].msg);
}

#define EXPECT_DIAG(line, col, text)                                                     \
  do {                                                                                   \
    int ok_ = has_diag(line, col, text);                                                 \
    T_CHECK(ok_, "no diagnostic at %d:%d containing \"%s\"", line, col, text);           \
    if (!ok_) dump_diags();                                                              \
  } while (0)

static void test_basic(void) {
  parse("&grp\n  alpha = 1\n/\n");
  T_CHECK(D.ndiags == 0, "%d diags", D.ndiags);
  T_CHECK(D.ngroups == 1 && strcmp(D.groups[0].name, "grp") == 0 && D.groups[0].closed, "group");
  T_CHECK(D.groups[0].line == 1 && D.groups[0].col == 1, "group position %d:%d", D.groups[0].line, D.groups[0].col);
  const struct deck_entry *e = entry("alpha");
  T_CHECK(e && e->nvalues == 1 && e->values[0].kind == DECK_INT && e->values[0].i == 1, "alpha = 1");
  T_CHECK(e && e->line == 2 && e->col == 3, "key position");
  T_CHECK(e && e->values[0].line == 2 && e->values[0].col == 11, "value position %d:%d", e ? e->values[0].line : -1,
          e ? e->values[0].col : -1);
  T_CHECK(e && !e->has_sub && !e->bad && e->group == 0, "flags");
  T_CHECK(D.nlines == 4 && strcmp(D.lines[1], "  alpha = 1") == 0 && D.lines[3][0] == '\0', "source lines");
}

static void test_case_and_groups(void) {
  parse("! leading comment\n\n&CoNtRoL  CalcuLATION = 'Train' /\n&Data\n$System Threads=2 $END\n");
  /* &Data is left open by $System: an error, but both groups and the key are kept. */
  T_CHECK(D.ngroups == 3, "%d groups", D.ngroups);
  T_CHECK(strcmp(D.groups[0].name, "control") == 0 && strcmp(D.groups[2].name, "system") == 0, "lower case");
  const struct deck_entry *e = entry("calculation");
  T_CHECK(e && strcmp(e->values[0].s, "Train") == 0, "string keeps its case");
  e = entry("threads");
  T_CHECK(e && e->group == 2 && e->values[0].i == 2, "$group ... $end");
  EXPECT_DIAG(5, 1, "&system starts before &data (line 4) was closed");
  parse("&a x=1 &end\n&b y=2 /\n$c z=3 /\n");
  T_CHECK(D.ndiags == 0 && D.ngroups == 3 && D.nentries == 3, "&end and '/' close any group");
  for (int i = 0; i < 3; i++) T_CHECK(D.groups[i].closed, "group %d closed", i);
  parse("&a\r\n x = 1,\r\n y = 'q'\r\n/\r\n");
  T_CHECK(D.ndiags == 0 && entry("y") && strcmp(entry("y")->values[0].s, "q") == 0, "CRLF");
  T_CHECK(strcmp(D.lines[1], " x = 1,") == 0, "CR stripped from the echoed line");
  parse("\xEF\xBB\xBF&a x = 1 /\n");
  T_CHECK(D.ndiags == 0 && D.nentries == 1, "UTF-8 byte-order mark");
}

static void test_numbers(void) {
  parse("&g r = 1.5, -2e3, 1.0d-4, 3.D2, .5, 5., +7E+1, 1e-300, 2.5e+2\n"
        "   i = -5, +3, 0, 9223372036854775807 /");
  T_CHECK(D.ndiags == 0, "%d diags", D.ndiags);
  const struct deck_entry *e = entry("r");
  const double want[] = {1.5, -2e3, 1.0e-4, 3e2, 0.5, 5.0, 70.0, 1e-300, 250.0};
  T_CHECK(e && e->nvalues == 9, "nine reals");
  for (int i = 0; e && i < 9 && i < e->nvalues; i++) {
    T_CHECK(e->values[i].kind == DECK_REAL, "value %d is real", i);
    T_CHECK(e->values[i].r == want[i], "value %d: %.17g vs %.17g", i, e->values[i].r, want[i]);
  }
  e = entry("i");
  const long long iw[] = {-5, 3, 0, 9223372036854775807LL};
  T_CHECK(e && e->nvalues == 4, "four integers");
  for (int i = 0; e && i < 4 && i < e->nvalues; i++)
    T_CHECK(e->values[i].kind == DECK_INT && e->values[i].i == iw[i] && e->values[i].r == (double)iw[i],
            "integer %d", i);
  T_CHECK(e && strcmp(e->values[1].text, "+3") == 0, "text kept for messages");
}

static void test_logicals(void) {
  parse("&g b = .true., .false., T, F, .t., .F., .TRUE., true, False, .tru, .fal, t /");
  const int want[] = {1, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1};
  const struct deck_entry *e = entry("b");
  T_CHECK(D.ndiags == 0 && e && e->nvalues == 12, "twelve logicals");
  for (int i = 0; e && i < 12 && i < e->nvalues; i++)
    T_CHECK(e->values[i].kind == DECK_LOGICAL && e->values[i].b == want[i], "logical %d", i);
}

static void test_strings(void) {
  parse("&g s = 'it''s', \"say \"\"hi\"\"\", 'a!b/c', \"x'y\", '', '&q $r = 5' ! comment 'x'\n/");
  const char *want[] = {"it's", "say \"hi\"", "a!b/c", "x'y", "", "&q $r = 5"};
  const struct deck_entry *e = entry("s");
  T_CHECK(D.ndiags == 0 && e && e->nvalues == 6, "six strings (%d diags)", D.ndiags);
  for (int i = 0; e && i < 6 && i < e->nvalues; i++)
    T_CHECK(e->values[i].kind == DECK_STRING && strcmp(e->values[i].s, want[i]) == 0, "string %d: [%s]", i,
            e->values[i].s);
  T_CHECK(D.ngroups == 1, "'&' inside a string opens no group");
}

static void test_repeats_and_nulls(void) {
  parse("&g a = 3*0.5, 2*'ab', 2*, 1*T, 4*7 /");
  const struct deck_entry *e = entry("a");
  T_CHECK(D.ndiags == 0 && e && e->nvalues == 5, "five items");
  if (e && e->nvalues == 5) {
    T_CHECK(e->values[0].repeat == 3 && e->values[0].kind == DECK_REAL && e->values[0].r == 0.5, "3*0.5");
    T_CHECK(e->values[1].repeat == 2 && e->values[1].kind == DECK_STRING && !strcmp(e->values[1].s, "ab"),
            "2*'ab'");
    T_CHECK(e->values[2].repeat == 2 && e->values[2].kind == DECK_NULL, "2* = two nulls");
    T_CHECK(e->values[3].repeat == 1 && e->values[3].kind == DECK_LOGICAL && e->values[3].b == 1, "1*T");
    T_CHECK(e->values[4].repeat == 4 && e->values[4].kind == DECK_INT && e->values[4].i == 7, "4*7");
  }
  parse("&g a = 1,,3 b = ,2 c = 1, 2, d = 1,, e = , f = 1 2\n 3 g = /");
  T_CHECK(D.ndiags == 0, "%d diags", D.ndiags);
  e = entry("a");
  T_CHECK(e && e->nvalues == 3 && e->values[1].kind == DECK_NULL && e->values[2].i == 3, "1,,3");
  e = entry("b");
  T_CHECK(e && e->nvalues == 2 && e->values[0].kind == DECK_NULL && e->values[1].i == 2, ",2");
  e = entry("c");
  T_CHECK(e && e->nvalues == 2, "trailing comma adds nothing (%d)", e ? e->nvalues : -1);
  e = entry("d");
  T_CHECK(e && e->nvalues == 2 && e->values[1].kind == DECK_NULL, "1,, = 1 and a null");
  e = entry("e");
  T_CHECK(e && e->nvalues == 1 && e->values[0].kind == DECK_NULL, "a lone comma is one null");
  e = entry("f");
  T_CHECK(e && e->nvalues == 3 && e->values[2].i == 3 && e->values[2].line == 2, "blank and newline separators");
  e = entry("g");
  T_CHECK(e && e->nvalues == 0, "no values before '/'");
}

static void test_subscripts(void) {
  parse("&g k(2) = 7 m(2:3) = 7, 8 n( 4 : 5 )= 1 p (1)=2 /");
  T_CHECK(D.ndiags == 0, "%d diags", D.ndiags);
  const struct deck_entry *e = entry("k");
  T_CHECK(e && e->has_sub && e->lo == 2 && e->hi == 2 && !e->is_range && e->values[0].i == 7, "k(2)");
  e = entry("m");
  T_CHECK(e && e->has_sub && e->lo == 2 && e->hi == 3 && e->is_range && e->nvalues == 2, "m(2:3)");
  e = entry("n");
  T_CHECK(e && e->lo == 4 && e->hi == 5 && e->is_range, "blanks inside the subscript");
  e = entry("p");
  T_CHECK(e && e->lo == 1 && e->values[0].i == 2, "blank before '('");
}

static void test_list_ends(void) {
  /* The next 'name =', 'name(', '/' or '&' ends a value list, on the same line or the next. */
  parse("&g a = 1 b = 2 c(1) = 3 d = T e\n = F f = .false. /&h x = 1/");
  T_CHECK(D.ndiags == 0, "%d diags", D.ndiags);
  T_CHECK(D.nentries == 7, "%d entries", D.nentries);
  T_CHECK(entry("a") && entry("a")->nvalues == 1, "a");
  T_CHECK(entry("d") && entry("d")->nvalues == 1 && entry("d")->values[0].b == 1, "d = T, then key e");
  T_CHECK(entry("e") && entry("e")->values[0].b == 0, "e with '=' on the next line");
  T_CHECK(entry("x") && entry("x")->group == 1, "x in &h");
  parse("&g t = 1, f = 2 /");
  T_CHECK(D.ndiags == 0 && entry("t") && entry("f") && entry("t")->values[0].i == 1, "keys named t and f");
}

static void test_comments(void) {
  parse("! top\n&g ! after the header\n  a = 1, ! after a value\n      2 ! more\n  ! alone\n/ ! after the end\n! tail");
  T_CHECK(D.ndiags == 0, "%d diags", D.ndiags);
  const struct deck_entry *e = entry("a");
  T_CHECK(e && e->nvalues == 2 && e->values[1].i == 2 && e->values[1].line == 4, "values across comments");
}

static void test_errors(void) {
  parse("&g\n  s = 'abc\n  t = 1\n/");
  EXPECT_DIAG(2, 7, "unterminated string");
  T_CHECK(D.ndiags == 1 && entry("s")->bad && !entry("t")->bad && entry("t")->values[0].i == 1,
          "parsing resumes on the next line");
  parse("&g\n  a = 1\n");
  EXPECT_DIAG(1, 1, "group &g is not closed");
  parse("&g\n  epochs 10\n  lr = 1\n/");
  EXPECT_DIAG(2, 3, "'=' expected after 'epochs'");
  T_CHECK(D.ndiags == 1 && entry("lr") && !entry("lr")->bad, "one error, next key fine");
  parse("&g\n  a = 'x', y\n  lr = 1\n  b = 2\n  c 3\n/");
  EXPECT_DIAG(2, 12, "strings need quotes: 'y'");
  EXPECT_DIAG(5, 3, "'=' expected after 'c'");
  T_CHECK(D.ndiags == 2 && entry("a")->bad && !entry("b")->bad, "two errors");
  parse("&g\n  10, 20\n  a = 1 /");
  EXPECT_DIAG(2, 3, "a value with no key: '10'");
  T_CHECK(D.ndiags == 1 && !entry("a")->bad, "values after a keyless value are skipped quietly");
  parse("&g 'x' /");
  EXPECT_DIAG(1, 4, "a value with no key");
  parse("hello\n&g a = 1 /\n/\n");
  EXPECT_DIAG(1, 1, "text outside a group: 'hello'");
  EXPECT_DIAG(3, 1, "'/' outside a group");
  parse("&g a = 1.2.3, 1e, --5, 1.5e+, 99999999999999999999, 1e999 /");
  EXPECT_DIAG(1, 8, "bad number '1.2.3'");
  T_CHECK(D.ndiags == 1, "the rest of a bad list is skipped (%d)", D.ndiags);
  parse("&g a = 1e /&g b = --5 /&g c = 99999999999999999999 /&g d = 1e999 /&g e = 1.5e+ /");
  EXPECT_DIAG(1, 8, "bad number '1e'");
  EXPECT_DIAG(1, 19, "bad number '--5'");
  EXPECT_DIAG(1, 31, "integer '99999999999999999999' does not fit in 64 bits");
  EXPECT_DIAG(1, 60, "out of the range of double");
  EXPECT_DIAG(1, 74, "bad number '1.5e+'");
  parse("&g a(x) = 1 /&g b(1:2:3) = 1 /&g c(3:2) = 1 /&g d(2) 5 /");
  EXPECT_DIAG(1, 5, "bad subscript after 'a'");
  EXPECT_DIAG(1, 18, "strides");
  EXPECT_DIAG(1, 35, "empty subscript range c(3:2)");
  EXPECT_DIAG(1, 54, "'=' expected after 'd(...)'");
  T_CHECK(D.ndiags == 4 && D.nentries == 4, "four bad keys, %d diags", D.ndiags);
  parse("&end\n& g a=1 /");
  EXPECT_DIAG(1, 1, "'&end' with no open group");
  EXPECT_DIAG(2, 1, "a group name must follow '&'");
  parse("&g , a = 1 /");
  EXPECT_DIAG(1, 4, "',' with no 'key =' before it");
  parse("&g a = 0*1 /&g b = *3 /&g c = = 2 /&g d = 1 % /");
  EXPECT_DIAG(1, 8, "repeat count 0 must be between 1");
  EXPECT_DIAG(1, 20, "a repeat count needs a number before '*'");
  EXPECT_DIAG(1, 31, "unexpected '='");
  EXPECT_DIAG(1, 45, "unexpected character '%'");
  parse("&g\n  x = 1\n  @\n/");
  EXPECT_DIAG(3, 3, "unexpected character '@'");
  T_CHECK(entry("x")->bad && D.ndiags == 1, "the stray character counts as a value of x");
  parse("&g\n@ /");
  EXPECT_DIAG(2, 1, "unexpected '@'");
  parse("&g\n\x01 x = \xc3\xa9 /");
  EXPECT_DIAG(2, 1, "unexpected byte 0x01 (only ASCII outside strings)");
  EXPECT_DIAG(2, 7, "unexpected byte 0xc3");
  parse("&g s = '\xc3\xa9t\xc3\xa9' /");
  T_CHECK(D.ndiags == 0 && !strcmp(entry("s")->values[0].s, "\xc3\xa9t\xc3\xa9"), "UTF-8 inside a string");
}

static void test_all_errors_reported(void) {
  parse("junk\n&a x = 'open\n y 2\n z = 1.2.3\n/\n&b\n 5\n q = \"fine\"\n");
  T_CHECK(D.ndiags == 6, "six errors in one pass, got %d", D.ndiags);
  EXPECT_DIAG(1, 1, "text outside");
  EXPECT_DIAG(2, 8, "unterminated string");
  EXPECT_DIAG(3, 2, "'=' expected after 'y'");
  EXPECT_DIAG(4, 6, "bad number");
  EXPECT_DIAG(7, 2, "a value with no key");
  EXPECT_DIAG(6, 1, "group &b is not closed");
  T_CHECK(entry("q") && strcmp(entry("q")->values[0].s, "fine") == 0, "good entries still parsed");
}

static void test_format(void) {
  parse("&g\n\tx = 'a\n  y = 1 2 3 1.2.3\n/");
  deck_error(&D, 0, 0, "a message about the whole file");
  deck_error(&D, 3, 3, "second at 3:3");
  char buf[1024];
  int n = deck_format_errors(&D, buf, sizeof buf);
  const char *want = "t.nml:2:6: unterminated string: no closing ' on this line\n"
                     "\tx = 'a\n"
                     "\t    ^\n"
                     "t.nml:3:3: second at 3:3\n"
                     "  y = 1 2 3 1.2.3\n"
                     "  ^\n"
                     "t.nml:3:13: bad number '1.2.3'\n"
                     "  y = 1 2 3 1.2.3\n"
                     "            ^\n"
                     "t.nml: a message about the whole file\n";
  T_CHECK(n == 4, "four diagnostics, got %d", n);
  T_CHECK(strcmp(buf, want) == 0, "formatted:\n%s\nwanted:\n%s", buf, want);
  char small[120];
  deck_format_errors(&D, small, sizeof small);
  T_CHECK(strstr(small, "t.nml:2:6: unterminated") == small, "first message kept: %s", small);
  T_CHECK(strstr(small, "(... more errors not shown)\n") != NULL, "cut list says so: %s", small);
  T_CHECK(strstr(small, "second at") == NULL, "no half message");
  /* A very long line is cut 80 characters after the column (at least 200 shown). */
  char longline[700];
  memset(longline, '1', sizeof longline);
  memcpy(longline, "&g x = 1.2.3 ", 13);
  memcpy(longline + sizeof longline - 3, " /", 3);
  parse(longline);
  char big[2048];
  deck_format_errors(&D, big, sizeof big);
  const char *l2 = strchr(big, '\n') + 1;
  T_CHECK(strncmp(l2, longline, 200) == 0 && strncmp(l2 + 200, "...\n       ^\n", 14) == 0, "cut line:\n%s", big);
}

static void test_parse_values(void) {
  struct deck_value *v;
  int n;
  T_CHECK(deck_parse_values("5, 10, 2*0.5, 'x', .true.", &v, &n) == 0 && n == 5, "value list (%d)", n);
  if (n == 5) {
    T_CHECK(v[0].i == 5 && v[1].i == 10 && v[2].repeat == 2 && v[2].r == 0.5, "numbers");
    T_CHECK(v[3].kind == DECK_STRING && strcmp(v[3].s, "x") == 0, "string");
    T_CHECK(v[4].kind == DECK_LOGICAL && v[4].b == 1, "logical");
  }
  deck_values_free(v, n);
  T_CHECK(deck_parse_values("", &v, &n) == 0 && n == 0, "empty list");
  deck_values_free(v, n);
  T_CHECK(deck_parse_values("1.2.3", &v, &n) == 1 && n == 0 && v == NULL, "bad default");
  deck_values_free(v, n);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_basic();
  test_case_and_groups();
  test_numbers();
  test_logicals();
  test_strings();
  test_repeats_and_nulls();
  test_subscripts();
  test_list_ends();
  test_comments();
  test_errors();
  test_all_errors_reported();
  test_format();
  test_parse_values();
  deck_free(&D);
  return t_finish();
}
