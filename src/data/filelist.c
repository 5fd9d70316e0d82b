/* filelist.c - the CSV file list of &data file_list: parsing (RFC 4180, UTF-8) and the checks of
 * its rows (rules in filelist.h). */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fsutil.h"
#include "data/filelist.h"
#include "data/imagefolder.h"

/* ---- parsing ------------------------------------------------------------------------------------ */

struct parser {
  const unsigned char *p, *end;
  const char *name;
  int64_t line;      /* of ps->p */
  int64_t rec_line;  /* where the last record read starts */
  char *why;
  size_t whyn;
  /* the field being read */
  char *buf;
  size_t len, cap;
  /* the record being read */
  char **fields;
  int nf, capf;
};

static int perr(struct parser *ps, int64_t line, const char *fmt, ...) SCD_PRINTF(3, 4);
static int perr(struct parser *ps, int64_t line, const char *fmt, ...) {
  int k = snprintf(ps->why, ps->whyn, "%s:%lld: ", ps->name, (long long)line);
  if (k < 0 || (size_t)k >= ps->whyn) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ps->why + k, ps->whyn - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

/* Bytes of the well-formed UTF-8 sequence at p (at most end - p bytes), 0 when there is none:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  int n;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c == 0xe0) n = 3, lo = 0xa0;
  else if (c == 0xed) n = 3, hi = 0x9f;
  else if (c >= 0xe1 && c <= 0xef) n = 3;
  else if (c == 0xf0) n = 4, lo = 0x90;
  else if (c == 0xf4) n = 4, hi = 0x8f;
  else if (c >= 0xf1 && c <= 0xf3) n = 4;
  else return 0;
  if (end - p < n) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (int i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return n;
}

static void put(struct parser *ps, const unsigned char *s, size_t n) {
  if (ps->len + n + 1 > ps->cap) {
    ps->cap = (ps->len + n + 1) * 2;
    ps->buf = xrealloc(ps->buf, ps->cap);
  }
  memcpy(ps->buf + ps->len, s, n);
  ps->len += n;
  ps->buf[ps->len] = '\0';
}

/* One character of field `col` (0-based) at ps->p into the field: checked for UTF-8 and control
 * characters.  0, or -1 with the message. */
static int take(struct parser *ps, int col) {
  const unsigned char c = *ps->p;
  if (c == 0) return perr(ps, ps->line, "field %d holds a NUL byte: not a text file", col + 1);
  if (c < 0x20 || c == 0x7f)
    return perr(ps, ps->line, "field %d holds the control character 0x%02x (line breaks and tabs are not allowed "
                "inside a field)", col + 1, c);
  const int n = utf8_len(ps->p, ps->end);
  if (n == 0)
    return perr(ps, ps->line, "byte 0x%02x in field %d is not UTF-8 (save the file as UTF-8)", c, col + 1);
  put(ps, ps->p, (size_t)n);
  ps->p += n;
  return 0;
}

static int at_eol(const struct parser *ps) { return ps->p < ps->end && (*ps->p == '\n' || *ps->p == '\r'); }

/* Past one line end (LF, CRLF or CR). */
static void skip_eol(struct parser *ps) {
  if (*ps->p == '\r' && ps->p + 1 < ps->end && ps->p[1] == '\n') ps->p++;
  ps->p++;
  ps->line++;
}

/* Field `col` from ps->p into ps->buf; leaves ps->p at the comma, line end or end of the file. */
static int read_field(struct parser *ps, int col) {
  ps->len = 0;
  put(ps, (const unsigned char *)"", 0);
  if (ps->p < ps->end && *ps->p == '"') {
    const int64_t start = ps->line;
    ps->p++;
    for (;;) {
      if (ps->p >= ps->end)
        return perr(ps, start, "the quoted field %d that starts on this line has no closing quote", col + 1);
      if (*ps->p == '"') {
        if (ps->p + 1 < ps->end && ps->p[1] == '"') {
          put(ps, ps->p, 1);
          ps->p += 2;
          continue;
        }
        ps->p++;
        if (ps->p < ps->end && *ps->p != ',' && !at_eol(ps))
          return perr(ps, ps->line, "field %d: text after its closing quote (a quote inside a quoted field is "
                      "written twice: \"\")", col + 1);
        return 0;
      }
      if (at_eol(ps))
        return perr(ps, start, "the quoted field %d that starts on this line runs past the line's end: a closing "
                    "quote is missing (line breaks inside a field are not allowed)", col + 1);
      if (take(ps, col) != 0) return -1;
    }
  }
  while (ps->p < ps->end && *ps->p != ',' && !at_eol(ps)) {
    if (*ps->p == '"')
      return perr(ps, ps->line, "field %d: a quote inside a field that does not start with one (quote the whole "
                  "field and write the quote twice)", col + 1);
    if (take(ps, col) != 0) return -1;
  }
  return 0;
}

/* The next record into ps->fields (ps->nf of them); 1 when the file has no more, -1 on error. */
static int read_record(struct parser *ps) {
  while (at_eol(ps)) skip_eol(ps); /* empty lines */
  if (ps->p >= ps->end) return 1;
  ps->rec_line = ps->line;
  ps->nf = 0;
  for (;;) {
    if (ps->nf == FILELIST_MAX_COLUMNS)
      return perr(ps, ps->line, "more than %d fields; at most %d columns are allowed", FILELIST_MAX_COLUMNS,
                  FILELIST_MAX_COLUMNS);
    if (read_field(ps, ps->nf) != 0) return -1;
    if (ps->nf == ps->capf) {
      ps->capf = ps->capf ? 2 * ps->capf : 16;
      ps->fields = xrealloc(ps->fields, (size_t)ps->capf * sizeof *ps->fields);
    }
    ps->fields[ps->nf++] = xstrdup(ps->buf);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    if (ps->p < ps->end) skip_eol(ps);
    return 0;
  }
}

static void drop_fields(struct parser *ps) {
  for (int i = 0; i < ps->nf; i++) free(ps->fields[i]);
  ps->nf = 0;
}

/* The header's names: unique, non-empty, usable as HDF5 names. */
static int check_header(struct parser *ps, char **names, int n, int64_t line) {
  for (int i = 0; i < n; i++) {
    const char *s = names[i];
    if (!s[0]) return perr(ps, line, "column %d of the header has no name", i + 1);
    if (strlen(s) > FILELIST_NAME_MAX)
      return perr(ps, line, "column %d's name is %zu bytes long; at most %d are allowed", i + 1, strlen(s),
                  FILELIST_NAME_MAX);
    if (strchr(s, '/') || !strcmp(s, "."))
      return perr(ps, line, "column name '%s' is not allowed (no '/', not '.': it names a dataset in the HDF5 files)",
                  s);
    for (int j = 0; j < i; j++)
      if (!strcmp(names[j], s))
        return perr(ps, line, "column '%s' appears twice (columns %d and %d)", s, j + 1, i + 1);
  }
  return 0;
}

int csv_parse(const char *buf, size_t n, const char *name, struct csv_table *t, char *why, size_t whyn) {
  memset(t, 0, sizeof *t);
  struct parser ps = {.p = (const unsigned char *)buf, .end = (const unsigned char *)buf + n, .name = name,
                      .line = 1, .why = why, .whyn = whyn};
  if (n >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3)) ps.p += 3; /* a UTF-8 byte-order mark (Excel writes one) */
  int rc = read_record(&ps);
  if (rc == 1) rc = perr(&ps, 1, "empty file: a header row naming the columns is required");
  if (rc == 0) {
    t->ncols = ps.nf;
    t->header_line = ps.rec_line;
    t->names = xmalloc((size_t)ps.nf * sizeof *t->names);
    memcpy(t->names, ps.fields, (size_t)ps.nf * sizeof *t->names);
    ps.nf = 0;
    rc = check_header(&ps, t->names, t->ncols, t->header_line);
  }
  int64_t cap = 0;
  while (rc == 0) {
    const int r = read_record(&ps);
    const int64_t line = ps.rec_line;
    if (r == 1) break;
    if (r != 0) {
      rc = -1;
      break;
    }
    if (ps.nf != t->ncols) {
      rc = perr(&ps, line, "%d field(s), but the header names %d column(s)", ps.nf, t->ncols);
      break;
    }
    if (t->nrows == INT32_MAX) {
      rc = perr(&ps, line, "more than %d rows", INT32_MAX);
      break;
    }
    if (t->nrows == cap) {
      cap = cap ? 2 * cap : 256;
      t->cells = xrealloc(t->cells, MUL_SIZE(MUL_SIZE((size_t)cap, (size_t)t->ncols), sizeof *t->cells));
      t->line = xrealloc(t->line, MUL_SIZE((size_t)cap, sizeof *t->line));
    }
    memcpy(t->cells + (size_t)t->nrows * (size_t)t->ncols, ps.fields, (size_t)t->ncols * sizeof *t->cells);
    t->line[t->nrows++] = line;
    ps.nf = 0;
  }
  drop_fields(&ps);
  free(ps.fields);
  free(ps.buf);
  if (rc != 0) csv_free(t);
  return rc;
}

void csv_free(struct csv_table *t) {
  if (t->cells)
    for (size_t i = 0; i < (size_t)t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
  if (t->names)
    for (int c = 0; c < t->ncols; c++) free(t->names[c]);
  free(t->cells);
  free(t->names);
  free(t->line);
  memset(t, 0, sizeof *t);
}

/* ---- the list -------------------------------------------------------------------------------- */

static int ferr(char *why, size_t n, const char *csv, int64_t line, const char *fmt, ...) SCD_PRINTF(5, 6);
static int ferr(char *why, size_t n, const char *csv, int64_t line, const char *fmt, ...) {
  int k = snprintf(why, n, "%s:%lld: ", csv, (long long)line);
  if (k < 0 || (size_t)k >= n) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why + k, n - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

static int column_of(const struct csv_table *t, const char *name) {
  for (int c = 0; c < t->ncols; c++)
    if (!strcmp(t->names[c], name)) return c;
  return -1;
}

/* "a, b, c" of the header, for messages. */
static void header_list(const struct csv_table *t, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  for (int c = 0; c < t->ncols && len < n; c++) {
    int k = snprintf(buf + len, n - len, "%s'%s'", c ? ", " : "", t->names[c]);
    if (k < 0) break;
    len += (size_t)k;
  }
}

/* The whole file into memory.  Opened without blocking, so that a FIFO is refused, not waited on. */
static char *slurp(const char *path, size_t *n, char *why, size_t whyn) {
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(why, whyn, "&data file_list = '%s': %s", path, fd < 0 ? strerror(errno) : "not a regular file");
    if (fd >= 0) close(fd);
    return NULL;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    snprintf(why, whyn, "&data file_list = '%s': %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  size_t cap = (size_t)st.st_size + 1, len = 0;
  char *buf = xmalloc(cap);
  for (;;) {
    if (len + 1 >= cap) {
      cap *= 2;
      buf = xrealloc(buf, cap);
    }
    const size_t r = fread(buf + len, 1, cap - 1 - len, f);
    len += r;
    if (r == 0) break;
  }
  const int bad = ferror(f);
  fclose(f);
  if (bad) {
    snprintf(why, whyn, "&data file_list = '%s': read error", path);
    free(buf);
    return NULL;
  }
  buf[len] = '\0';
  *n = len;
  return buf;
}

/* A value for a message: at most 200 bytes of it (a field may be megabytes long). */
#define SHOW(v) (strlen(v) > 200 ? 200 : (int)strlen(v)), (v), (strlen(v) > 200 ? "..." : "")

/* A row's file, for the duplicate check. */
struct fileid {
  dev_t dev;
  ino_t ino;
  int64_t row;
};
static int cmp_fileid(const void *a, const void *b) {
  const struct fileid *x = a, *y = b;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
  return (x->row > y->row) - (x->row < y->row);
}

/* Every row's file exists, is a regular file, and no file is named twice. */
static int check_files(const char *csv, const char *root, const struct csv_table *t, int pc, char *why, size_t whyn) {
  struct fileid *ids = xmalloc(MUL_SIZE((size_t)(t->nrows ? t->nrows : 1), sizeof *ids));
  int64_t missing = 0, first = -1;
  int first_errno = 0;
  for (int64_t r = 0; r < t->nrows; r++) {
    const char *p = t->cells[(size_t)r * (size_t)t->ncols + (size_t)pc];
    char full[PATH_MAX];
    struct stat st;
    int e = 0;
    if (snprintf(full, sizeof full, "%s%s%s", p[0] == '/' ? "" : root, p[0] == '/' ? "" : "/", p) >= (int)sizeof full)
      e = ENAMETOOLONG;
    else if (stat(full, &st) != 0)
      e = errno;
    else if (!S_ISREG(st.st_mode))
      e = -1;
    if (e) {
      if (missing++ == 0) first = r, first_errno = e;
      continue;
    }
    ids[r] = (struct fileid){st.st_dev, st.st_ino, r};
  }
  if (missing) {
    const char *p = t->cells[(size_t)first * (size_t)t->ncols + (size_t)pc];
    char more[64] = "";
    if (missing > 1)
      snprintf(more, sizeof more, " (and %lld more row(s) whose file is missing)", (long long)missing - 1);
    free(ids);
    return ferr(why, whyn, csv, t->line[first], "'%.*s%s'%s: %s%s", SHOW(p),
                p[0] == '/' ? "" : " (relative to the CSV's folder)",
                first_errno < 0 ? "not a regular file" : strerror(first_errno), more);
  }
  qsort(ids, (size_t)t->nrows, sizeof *ids, cmp_fileid);
  for (int64_t i = 1; i < t->nrows; i++)
    if (ids[i].dev == ids[i - 1].dev && ids[i].ino == ids[i - 1].ino) {
      const int64_t a = ids[i - 1].row, b = ids[i].row;
      const char *pa = t->cells[(size_t)a * (size_t)t->ncols + (size_t)pc];
      const char *pb = t->cells[(size_t)b * (size_t)t->ncols + (size_t)pc];
      free(ids);
      return ferr(why, whyn, csv, t->line[b], "duplicate path: '%.*s%s' is the file of line %lld ('%.*s%s')", SHOW(pb),
                  (long long)t->line[a], SHOW(pa));
    }
  free(ids);
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The classes (sorted distinct labels) and each row's number. */
static void make_classes(const struct csv_table *t, int lc, struct imagefolder *f) {
  const size_t n = (size_t)t->nrows;
  char **sorted = xmalloc(MUL_SIZE(n ? n : 1, sizeof *sorted));
  for (size_t r = 0; r < n; r++) sorted[r] = t->cells[r * (size_t)t->ncols + (size_t)lc];
  qsort(sorted, n, sizeof *sorted, cmp_str);
  size_t nc = 0;
  for (size_t r = 0; r < n; r++)
    if (r == 0 || strcmp(sorted[r], sorted[nc - 1])) sorted[nc++] = sorted[r];
  f->nclasses = (int)nc;
  f->classes = xmalloc(MUL_SIZE(nc ? nc : 1, sizeof *f->classes));
  for (size_t c = 0; c < nc; c++) f->classes[c] = xstrdup(sorted[c]);
  for (size_t r = 0; r < n; r++) {
    const char *v = t->cells[r * (size_t)t->ncols + (size_t)lc];
    char **hit = bsearch(&v, f->classes, nc, sizeof *f->classes, cmp_str);
    SCD_ASSERT(hit);
    f->labels[r] = (int32_t)(hit - f->classes);
  }
  free(sorted);
}

/* The checked table into f: paths, labels (column lc, or none when lc < 0), metadata. */
static void make_list(struct csv_table *t, int pc, int lc, struct imagefolder *f) {
  const size_t n = (size_t)t->nrows, nc = (size_t)t->ncols;
  memset(f, 0, sizeof *f);
  f->from_list = 1;
  f->n = t->nrows;
  f->paths = xmalloc(MUL_SIZE(n ? n : 1, sizeof *f->paths));
  f->labels = xmalloc(MUL_SIZE(n ? n : 1, sizeof *f->labels));
  for (size_t r = 0; r < n; r++) f->paths[r] = xstrdup(t->cells[r * nc + (size_t)pc]);
  if (lc >= 0) {
    make_classes(t, lc, f);
  } else {
    f->classes = xmalloc(sizeof *f->classes);
    for (size_t r = 0; r < n; r++) f->labels[r] = -1;
  }
  f->nmeta = t->ncols - 1 - (lc >= 0);
  f->meta_names = xmalloc(MUL_SIZE((size_t)(f->nmeta ? f->nmeta : 1), sizeof *f->meta_names));
  f->meta = xmalloc(MUL_SIZE(MUL_SIZE(n ? n : 1, (size_t)(f->nmeta ? f->nmeta : 1)), sizeof *f->meta));
  int m = 0;
  for (int c = 0; c < t->ncols; c++) {
    if (c == pc || c == lc) continue;
    f->meta_names[m] = xstrdup(t->names[c]);
    for (size_t r = 0; r < n; r++) { /* moved, not copied: the table gives them up */
      f->meta[r * (size_t)f->nmeta + (size_t)m] = t->cells[r * nc + (size_t)c];
      t->cells[r * nc + (size_t)c] = NULL;
    }
    m++;
  }
}

int filelist_load(const char *csv, const struct filelist_opts *o, struct imagefolder *f, char *root, size_t rootn,
                  char *why, size_t whyn) {
  memset(f, 0, sizeof *f);
  char real[PATH_MAX];
  if (!realpath(csv, real)) {
    snprintf(why, whyn, "&data file_list = '%s': %s", csv, strerror(errno));
    return -1;
  }
  fs_dir_of(real, root, rootn);
  size_t n = 0;
  char *buf = slurp(csv, &n, why, whyn);
  if (!buf) return -1;
  struct csv_table t;
  int rc = csv_parse(buf, n, csv, &t, why, whyn);
  free(buf);
  if (rc != 0) return -1;
  char cols[1024];
  header_list(&t, cols, sizeof cols);
  const int pc = column_of(&t, o->path_column), lc0 = column_of(&t, o->label_column);
  const int lc = !strcmp(o->labels, "none") ? -1 : lc0;
  if (pc < 0)
    rc = ferr(why, whyn, csv, t.header_line, "no column '%s' for the image paths (&data path_column); the header "
              "names %s", o->path_column, cols);
  else if (!strcmp(o->labels, "column") && lc < 0)
    rc = ferr(why, whyn, csv, t.header_line, "no column '%s' for the labels (&data label_column, labels = "
              "'column'); the header names %s", o->label_column, cols);
  else if (lc == pc)
    rc = ferr(why, whyn, csv, t.header_line, "column '%s' cannot hold both the paths and the labels", o->path_column);
  else if (t.nrows == 0)
    rc = ferr(why, whyn, csv, t.header_line, "the header is the only row: no images are listed");
  for (int64_t r = 0; rc == 0 && r < t.nrows; r++) {
    const char *const *row = (const char *const *)t.cells + (size_t)r * (size_t)t.ncols;
    if (!row[pc][0])
      rc = ferr(why, whyn, csv, t.line[r], "empty path (column '%s')", o->path_column);
    else if (lc >= 0 && !row[lc][0])
      rc = ferr(why, whyn, csv, t.line[r], "empty label (column '%s'); every row needs one, or set &data labels = "
                "'none' for unlabelled images", o->label_column);
  }
  if (rc == 0) rc = check_files(csv, root, &t, pc, why, whyn);
  if (rc == 0) make_list(&t, pc, lc, f);
  csv_free(&t);
  return rc;
}
