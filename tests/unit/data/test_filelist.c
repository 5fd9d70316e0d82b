/* tests/unit/data/test_filelist.c - the CSV file list of &data file_list (src/data/filelist.c): RFC 4180
 * quoting, line ends, the byte-order mark and empty lines; every parse error with its file:line
 * (empty file, header names, ragged rows, quotes, bytes that are not UTF-8, NUL and control
 * characters); the list's checks with file:line (missing files, duplicates however spelt, a folder,
 * empty paths and labels, unknown columns); and what the list gives: paths as written, sorted
 * classes, metadata columns in header order, labels 'auto' / 'column' / 'none'. */
#include "build_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>

#include "data/filelist.h"
#include "data/imagefolder.h"
#include "tests/fixtures/testutil.h"

static char base[PATH_MAX];

/* Parse text (n bytes; 0: strlen) as the file "l.csv": 0 or -1 with the message in why. */
static int parse(const char *text, size_t n, struct csv_table *t, char *why, size_t whyn) {
  return csv_parse(text, n ? n : strlen(text), "l.csv", t, why, whyn);
}

static void expect_parse_error(const char *what, const char *text, size_t n, const char *want) {
  struct csv_table t;
  char why[1024] = "";
  const int rc = parse(text, n, &t, why, sizeof why);
  T_CHECK(rc == -1, "%s: parsed, wanted an error", what);
  T_CHECK(strstr(why, want) != NULL, "%s: message '%s' lacks '%s'", what, why, want);
  T_CHECK(t.nrows == 0 && t.cells == NULL && t.names == NULL, "%s: the table is left empty", what);
  if (t_verbose) printf("  %-28s %s\n", what, why);
}

static void test_parse(void) {
  struct csv_table t;
  char why[1024];
  /* Quoted commas and quotes, CRLF and CR line ends, an empty field, empty lines, a byte-order mark,
   * UTF-8 text, no line end at the end of the file. */
  const char text[] = "\xef\xbb\xbfpath,label,note\r\n"
                      "a.tif,A,\"x, y\"\r\n"
                      "\r\n\n"
                      "\"b \"\"q\"\".tif\",B,\r"
                      "c.tif,\"\",d\xc3\xa9j\xc3\xa0 \xe2\x82\xac \xf0\x9f\x94\xac";
  T_CHECK(parse(text, 0, &t, why, sizeof why) == 0, "parse: %s", why);
  T_CHECK(t.ncols == 3 && t.nrows == 3, "%d columns, %lld rows", t.ncols, (long long)t.nrows);
  if (t.ncols == 3 && t.nrows == 3) {
    T_CHECK(!strcmp(t.names[0], "path") && !strcmp(t.names[2], "note"), "names %s %s (BOM skipped)", t.names[0],
            t.names[2]);
    T_CHECK(!strcmp(t.cells[2], "x, y"), "quoted comma: '%s'", t.cells[2]);
    T_CHECK(!strcmp(t.cells[3], "b \"q\".tif"), "doubled quotes: '%s'", t.cells[3]);
    T_CHECK(!strcmp(t.cells[5], ""), "empty last field: '%s'", t.cells[5]);
    T_CHECK(!strcmp(t.cells[7], ""), "quoted empty field: '%s'", t.cells[7]);
    T_CHECK(!strcmp(t.cells[8], "d\xc3\xa9j\xc3\xa0 \xe2\x82\xac \xf0\x9f\x94\xac"), "UTF-8: '%s'", t.cells[8]);
    T_CHECK(t.header_line == 1 && t.line[0] == 2 && t.line[1] == 5 && t.line[2] == 6, "lines %lld %lld %lld",
            (long long)t.line[0], (long long)t.line[1], (long long)t.line[2]);
  }
  csv_free(&t);
  /* Spaces are kept; a header after empty lines has its own line number. */
  T_CHECK(parse("\n\n p , q\n a ,b\n", 0, &t, why, sizeof why) == 0, "parse: %s", why);
  T_CHECK(t.header_line == 3 && !strcmp(t.names[0], " p ") && !strcmp(t.cells[0], " a ") && t.line[0] == 4,
          "blanks kept, header on line 3");
  csv_free(&t);

  expect_parse_error("empty file", "", 0, "l.csv:1: empty file: a header row naming the columns is required");
  expect_parse_error("only empty lines", "\n\r\n", 0, "l.csv:1: empty file");
  expect_parse_error("ragged: short", "a,b,c\n1,2,3\n4,5\n", 0, "l.csv:3: 2 field(s), but the header names 3 column(s)");
  expect_parse_error("ragged: long", "a,b\n1,2\n\n4,5,\n", 0, "l.csv:4: 3 field(s), but the header names 2 column(s)");
  expect_parse_error("duplicate column", "path,x,path\n", 0, "l.csv:1: column 'path' appears twice (columns 1 and 3)");
  expect_parse_error("nameless column", "path,,x\n", 0, "l.csv:1: column 2 of the header has no name");
  expect_parse_error("slash in a name", "path,a/b\n", 0, "l.csv:1: column name 'a/b' is not allowed");
  expect_parse_error("dot name", "path,.\n", 0, "l.csv:1: column name '.' is not allowed");
  expect_parse_error("unterminated quote", "p,q\n1,2\n3,\"abc", 0,
                     "l.csv:3: the quoted field 2 that starts on this line has no closing quote");
  expect_parse_error("quote across lines", "p,q\n\"a\nb\",c\n", 0,
                     "l.csv:2: the quoted field 1 that starts on this line runs past the line's end");
  expect_parse_error("text after quote", "p,q\n\"a\"b,c\n", 0, "l.csv:2: field 1: text after its closing quote");
  expect_parse_error("stray quote", "p,q\na,b\"c\n", 0, "l.csv:2: field 2: a quote inside a field that does not start");
  expect_parse_error("Latin-1", "p,q\na,caf\xe9\n", 0, "l.csv:2: byte 0xe9 in field 2 is not UTF-8");
  expect_parse_error("overlong", "p,q\n\xc0\x80,b\n", 0, "l.csv:2: byte 0xc0 in field 1 is not UTF-8");
  expect_parse_error("surrogate", "p,q\na,\xed\xa0\x80\n", 0, "l.csv:2: byte 0xed in field 2 is not UTF-8");
  expect_parse_error("above U+10FFFF", "p,q\na,\xf4\x90\x80\x80\n", 0, "l.csv:2: byte 0xf4 in field 2 is not UTF-8");
  expect_parse_error("cut sequence", "p,q\na,\xe2\x82", 0, "l.csv:2: byte 0xe2 in field 2 is not UTF-8");
  expect_parse_error("in the header", "p,\xff\n", 0, "l.csv:1: byte 0xff in field 2 is not UTF-8");
  expect_parse_error("NUL", "p,q\na,b\0c\n", 10, "l.csv:2: field 2 holds a NUL byte");
  expect_parse_error("tab", "p,q\na,b\tc\n", 0, "l.csv:2: field 2 holds the control character 0x09");
  expect_parse_error("escape", "p,q\n\"\x1b[2J\",b\n", 0, "l.csv:2: field 1 holds the control character 0x1b");
  char many[2000] = "";
  for (int i = 0; i <= FILELIST_MAX_COLUMNS; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "c%d,", i);
  expect_parse_error("too many columns", many, 0, "l.csv:1: more than 256 fields");
}

static void write_file(const char *name, const char *text) {
  char p[4300];
  snprintf(p, sizeof p, "%s/%s", base, name);
  FILE *f = fopen(p, "wb");
  T_CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", p);
}

/* Load base/name with the options; 0 or -1, message in why. */
static int load(const char *name, const char *labels, const char *label_column, struct imagefolder *f, char *why,
                size_t n) {
  char p[4300], root[4096];
  snprintf(p, sizeof p, "%s/%s", base, name);
  const struct filelist_opts o = {"path", label_column, labels};
  return filelist_load(p, &o, f, root, sizeof root, why, n);
}

static void expect_load_error(const char *what, const char *text, const char *labels, const char *want) {
  write_file("e.csv", text);
  struct imagefolder f;
  char why[2048] = "";
  T_CHECK(load("e.csv", labels, "label", &f, why, sizeof why) == -1, "%s: loaded, wanted an error", what);
  T_CHECK(strstr(why, want) != NULL, "%s: message '%s' lacks '%s'", what, why, want);
  T_CHECK(strstr(why, "/e.csv:") != NULL, "%s: '%s' names the file", what, why);
  if (t_verbose) printf("  %-28s %s\n", what, why);
}

static void test_load(void) {
  char p[4300], q[4300];
  const char *names[] = {"img/a.tif", "img/b.tif", "img/c.tif", "other.tif"};
  snprintf(p, sizeof p, "mkdir -p '%s/img/dir.tif'", base);
  T_CHECK(system(p) == 0, "%s", p);
  for (int i = 0; i < 4; i++) write_file(names[i], "not read here");
  snprintf(p, sizeof p, "%s/img/a.tif", base);
  snprintf(q, sizeof q, "%s/img/link.tif", base);
  T_CHECK(symlink(p, q) == 0, "symlink");

  /* Labels from the column (auto), sorted classes, metadata in header order, paths as written
   * (relative to the CSV's folder, or absolute), the CSV's row order. */
  char text[8192];
  snprintf(text, sizeof text, "donor,path,label,well\n"
           "d2,img/c.tif,T cell,A01\n"
           "d1,%s/other.tif,B cell,A02\n"
           "d1,img/a.tif,T cell,\"B,1\"\n", base);
  write_file("l.csv", text);
  struct imagefolder f;
  char why[2048] = "";
  T_CHECK(load("l.csv", "auto", "label", &f, why, sizeof why) == 0, "load: %s", why);
  T_CHECK(f.n == 3 && f.nclasses == 2 && f.nmeta == 2 && f.from_list, "n %lld, classes %d, meta %d", (long long)f.n,
          f.nclasses, f.nmeta);
  if (f.n == 3 && f.nclasses == 2 && f.nmeta == 2) {
    T_CHECK(!strcmp(f.classes[0], "B cell") && !strcmp(f.classes[1], "T cell"), "classes sorted");
    T_CHECK(f.labels[0] == 1 && f.labels[1] == 0 && f.labels[2] == 1, "labels %d %d %d", f.labels[0], f.labels[1],
            f.labels[2]);
    T_CHECK(!strcmp(f.paths[0], "img/c.tif") && !strcmp(f.paths[2], "img/a.tif"), "paths as written");
    T_CHECK(f.paths[1][0] == '/' && strstr(f.paths[1], "/other.tif"), "absolute path kept: %s", f.paths[1]);
    T_CHECK(!strcmp(f.meta_names[0], "donor") && !strcmp(f.meta_names[1], "well"), "metadata columns");
    T_CHECK(!strcmp(f.meta[0], "d2") && !strcmp(f.meta[1], "A01") && !strcmp(f.meta[5], "B,1"), "metadata values");
  }
  /* The hash sees labels and metadata, and survives packing. */
  const uint64_t h = imagefolder_hash(&f);
  size_t bytes;
  char *buf = imagefolder_pack(&f, &bytes);
  struct imagefolder g;
  imagefolder_unpack(buf, bytes, &g);
  free(buf);
  T_CHECK(imagefolder_hash(&g) == h && g.nmeta == 2 && !strcmp(g.meta[5], "B,1") && g.from_list, "pack / unpack");
  free(g.meta[5]);
  g.meta[5] = strdup("B,2");
  T_CHECK(imagefolder_hash(&g) != h, "another metadata value, another hash");
  imagefolder_free(&g);
  imagefolder_free(&f);

  /* labels = 'none': the label column is metadata; 'auto' without one: unlabelled too. */
  T_CHECK(load("l.csv", "none", "label", &f, why, sizeof why) == 0, "load: %s", why);
  T_CHECK(f.nclasses == 0 && f.labels[0] == -1 && f.labels[2] == -1 && f.nmeta == 3 && !strcmp(f.meta_names[1], "label"),
          "labels none: %d classes, %d metadata columns", f.nclasses, f.nmeta);
  imagefolder_free(&f);
  T_CHECK(load("l.csv", "auto", "celltype", &f, why, sizeof why) == 0, "load: %s", why);
  T_CHECK(f.nclasses == 0 && f.labels[1] == -1 && f.nmeta == 3, "auto without the label column: unlabelled");
  imagefolder_free(&f);
  T_CHECK(load("l.csv", "column", "donor", &f, why, sizeof why) == 0, "load: %s", why);
  T_CHECK(f.nclasses == 2 && !strcmp(f.classes[0], "d1") && f.labels[0] == 1 && f.nmeta == 2, "labels from 'donor'");
  imagefolder_free(&f);

  /* The list's errors, each naming file:line. */
  expect_load_error("missing file", "path\nimg/a.tif\nimg/zz.tif\nimg/b.tif\nimg/yy.tif\n", "auto",
                    ":3: 'img/zz.tif' (relative to the CSV's folder): No such file or directory (and 1 more row(s) "
                    "whose file is missing)");
  expect_load_error("folder", "path\nimg/dir.tif\n", "auto", ":2: 'img/dir.tif' (relative to the CSV's folder): not a "
                    "regular file");
  expect_load_error("duplicate", "path\nimg/a.tif\nimg/b.tif\nimg/a.tif\n", "auto",
                    ":4: duplicate path: 'img/a.tif' is the file of line 2 ('img/a.tif')");
  expect_load_error("duplicate spelt otherwise", "path\nimg/b.tif\nimg/a.tif\n./img//a.tif\n", "auto",
                    ":4: duplicate path: './img//a.tif' is the file of line 3 ('img/a.tif')");
  expect_load_error("duplicate by a link", "path\nimg/link.tif\nimg/a.tif\n", "auto",
                    ":3: duplicate path: 'img/a.tif' is the file of line 2 ('img/link.tif')");
  expect_load_error("empty path", "path,label\nimg/a.tif,A\n,B\n", "auto", ":3: empty path (column 'path')");
  expect_load_error("empty label", "path,label\nimg/a.tif,A\nimg/b.tif,\n", "auto",
                    ":3: empty label (column 'label'); every row needs one");
  expect_load_error("no path column", "file,label\nimg/a.tif,A\n", "auto",
                    ":1: no column 'path' for the image paths (&data path_column); the header names 'file', 'label'");
  expect_load_error("no label column", "path,donor\nimg/a.tif,A\n", "column",
                    ":1: no column 'label' for the labels (&data label_column, labels = 'column')");
  expect_load_error("header only", "path,label\n", "auto", ":1: the header is the only row: no images are listed");
  expect_load_error("ragged", "path,label\nimg/a.tif,A\nimg/b.tif\n", "auto", ":3: 1 field(s), but the header names 2");
  expect_load_error("not UTF-8", "path,label\nimg/a.tif,\xe4\n", "auto", ":2: byte 0xe4 in field 2 is not UTF-8");

  /* The CSV itself missing. */
  T_CHECK(load("none.csv", "auto", "label", &f, why, sizeof why) == -1 &&
              strstr(why, "&data file_list = '") && strstr(why, "none.csv': No such file or directory"),
          "missing CSV: %s", why);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  /* Absolute: the list names one file by an absolute path, and a link points at another. */
  if (!realpath(t_scratch_dir("test_filelist"), base)) return 99;
  test_parse();
  test_load();
  return t_finish();
}
