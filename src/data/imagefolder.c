/* imagefolder.c - walking a TIFF tree in torchvision ImageFolder order (rules in imagefolder.h). */
#include "build_config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/watchdog.h"
#include "data/imagefolder.h"

struct strvec {
  char **v;
  size_t n, cap;
};

static void sv_push(struct strvec *s, char *str) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->v = xrealloc(s->v, MUL_SIZE(s->cap, sizeof *s->v));
  }
  s->v[s->n++] = str;
}

/* strcmp compares as unsigned char: byte order, i.e. code-point order for UTF-8. */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int ends_with_ci(const char *name, const char *ext) {
  size_t n = strlen(name), e = strlen(ext);
  return n >= e && strcasecmp(name + n - e, ext) == 0;
}

static int is_tiff_name(const char *name) { return ends_with_ci(name, ".tif") || ends_with_ci(name, ".tiff"); }

/* The other extensions torchvision's IMG_EXTENSIONS accepts. */
static int is_other_image_name(const char *name) {
  static const char *const ext[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".webp"};
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
    if (ends_with_ci(name, ext[i])) return 1;
  return 0;
}

/* One directory of a class: its path relative to the root and its TIFF file names. */
struct dirfiles {
  char *rel;
  struct strvec files;
};

struct walk {
  const char *root;
  struct dirfiles *d;
  size_t n, cap;
  dev_t anc_dev[256];
  ino_t anc_ino[256];
  int depth;
  struct imagefolder *f;
};

static void walk_dir(struct walk *w, const char *rel) {
  char full[PATH_MAX];
  if (snprintf(full, sizeof full, "%s/%s", w->root, rel) >= (int)sizeof full)
    scd_fatal(SCD_EXIT_DATA, "path too long: %s/%s", w->root, rel);
  struct stat st;
  if (stat(full, &st) != 0) {
    log_warn("cannot read directory %s: %s; skipped", full, strerror(errno));
    return;
  }
  /* followlinks: a symbolic link back to an ancestor would recurse for ever; leave it out. */
  for (int i = 0; i < w->depth; i++)
    if (w->anc_dev[i] == st.st_dev && w->anc_ino[i] == st.st_ino) {
      log_warn("directory %s links back to one of its parents; not followed", full);
      return;
    }
  if (w->depth >= 256) scd_fatal(SCD_EXIT_DATA, "directories nested too deeply under %s", full);
  watchdog_progress("the walk of the TIFF tree", -1); /* a hung file system ends the job */
  DIR *dir = opendir(full);
  if (!dir) {
    log_warn("cannot read directory %s: %s; skipped", full, strerror(errno));
    return;
  }
  if (w->n == w->cap) {
    w->cap = w->cap ? 2 * w->cap : 16;
    w->d = xrealloc(w->d, MUL_SIZE(w->cap, sizeof *w->d));
  }
  size_t me = w->n++;
  w->d[me].rel = xstrdup(rel);
  memset(&w->d[me].files, 0, sizeof w->d[me].files);
  struct strvec subdirs = {0};
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", full, e->d_name) >= (int)sizeof path)
      scd_fatal(SCD_EXIT_DATA, "path too long: %s/%s", full, e->d_name);
    int isdir = 0;
    if (e->d_type == DT_DIR) {
      isdir = 1;
    } else if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat s2;
      isdir = stat(path, &s2) == 0 && S_ISDIR(s2.st_mode); /* os.walk follows links */
    }
    if (isdir)
      sv_push(&subdirs, xstrdup(e->d_name));
    else if (is_tiff_name(e->d_name))
      sv_push(&w->d[me].files, xstrdup(e->d_name));
    else if (is_other_image_name(e->d_name)) {
      if (w->f->n_other++ == 0) snprintf(w->f->other_example, sizeof w->f->other_example, "%s", path);
    }
  }
  closedir(dir);
  w->anc_dev[w->depth] = st.st_dev;
  w->anc_ino[w->depth] = st.st_ino;
  w->depth++;
  for (size_t i = 0; i < subdirs.n; i++) {
    char sub[PATH_MAX];
    if (snprintf(sub, sizeof sub, "%s/%s", rel, subdirs.v[i]) >= (int)sizeof sub)
      scd_fatal(SCD_EXIT_DATA, "path too long: %s/%s", rel, subdirs.v[i]);
    walk_dir(w, sub);
    free(subdirs.v[i]);
  }
  w->depth--;
  free(subdirs.v);
}

static int cmp_dir(const void *a, const void *b) {
  return strcmp(((const struct dirfiles *)a)->rel, ((const struct dirfiles *)b)->rel);
}

/* The TIFF files under root/top, in the walk's order, appended to paths as "top/sub/file.tif"
 * (top "." gives "sub/file.tif"). */
static void walk_files(const char *root, const char *top, struct imagefolder *f, struct strvec *paths) {
  struct walk w = {.root = root, .f = f};
  walk_dir(&w, top);
  if (w.n > 1) qsort(w.d, w.n, sizeof *w.d, cmp_dir);
  const size_t skip = strcmp(top, ".") ? 0 : 2; /* "./" */
  for (size_t i = 0; i < w.n; i++) {
    struct strvec *fl = &w.d[i].files;
    if (fl->n > 1) qsort(fl->v, fl->n, sizeof *fl->v, cmp_str);
    const char *rel = strlen(w.d[i].rel) >= skip ? w.d[i].rel + skip : "";
    for (size_t j = 0; j < fl->n; j++) {
      size_t len = strlen(rel) + strlen(fl->v[j]) + 2;
      char *p = xmalloc(len);
      snprintf(p, len, "%s%s%s", rel, rel[0] ? "/" : "", fl->v[j]);
      sv_push(paths, p);
      free(fl->v[j]);
    }
    free(fl->v);
    free(w.d[i].rel);
  }
  free(w.d);
}

void imagefolder_scan(const char *root, struct imagefolder *f) {
  memset(f, 0, sizeof *f);
  struct stat st;
  if (stat(root, &st) != 0) scd_fatal(SCD_EXIT_DATA, "tiff_dir '%s': %s", root, strerror(errno));
  if (!S_ISDIR(st.st_mode)) scd_fatal(SCD_EXIT_DATA, "tiff_dir '%s' is not a directory", root);
  DIR *dir = opendir(root);
  if (!dir) scd_fatal(SCD_EXIT_DATA, "cannot read tiff_dir '%s': %s", root, strerror(errno));
  struct strvec classes = {0};
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[PATH_MAX];
    struct stat s2;
    if (snprintf(path, sizeof path, "%s/%s", root, e->d_name) >= (int)sizeof path) continue;
    if (stat(path, &s2) == 0 && S_ISDIR(s2.st_mode)) sv_push(&classes, xstrdup(e->d_name));
  }
  closedir(dir);
  if (classes.n == 0)
    scd_fatal(SCD_EXIT_DATA, "tiff_dir '%s' has no class sub-folders (expected tiff_dir/<class>/*.tif, "
              "as for torchvision's ImageFolder)", root);
  qsort(classes.v, classes.n, sizeof *classes.v, cmp_str);
  f->nclasses = (int)classes.n;
  f->classes = classes.v;

  struct strvec paths = {0};
  size_t lab_cap = 0;
  for (int c = 0; c < f->nclasses; c++) {
    int64_t before = (int64_t)paths.n;
    walk_files(root, f->classes[c], f, &paths);
    if ((int64_t)paths.n == before)
      scd_fatal(SCD_EXIT_DATA, "class folder %s/%s has no .tif/.tiff files (torchvision's ImageFolder "
                "refuses empty classes too)", root, f->classes[c]);
    if (paths.n > lab_cap) {
      lab_cap = paths.cap;
      f->labels = xrealloc(f->labels, MUL_SIZE(lab_cap, sizeof *f->labels));
    }
    for (size_t i = (size_t)before; i < paths.n; i++) f->labels[i] = c;
  }
  f->paths = paths.v;
  f->n = (int64_t)paths.n;
}

void imagefolder_scan_all(const char *root, struct imagefolder *f) {
  memset(f, 0, sizeof *f);
  struct stat st;
  if (stat(root, &st) != 0) scd_fatal(SCD_EXIT_DATA, "tiff_dir '%s': %s", root, strerror(errno));
  if (!S_ISDIR(st.st_mode)) scd_fatal(SCD_EXIT_DATA, "tiff_dir '%s' is not a directory", root);
  struct strvec paths = {0};
  walk_files(root, ".", f, &paths);
  if (paths.n == 0) scd_fatal(SCD_EXIT_DATA, "tiff_dir '%s' holds no .tif/.tiff files", root);
  f->n = (int64_t)paths.n;
  f->paths = paths.v;
  f->classes = xmalloc(sizeof *f->classes);
  f->labels = xmalloc(MUL_SIZE(paths.n, sizeof *f->labels));
  for (size_t i = 0; i < paths.n; i++) f->labels[i] = -1;
}

void imagefolder_free(struct imagefolder *f) {
  for (int c = 0; c < f->nclasses; c++) free(f->classes[c]);
  for (int64_t i = 0; i < f->n; i++) free(f->paths[i]);
  if (f->meta)
    for (size_t i = 0; i < (size_t)f->n * (size_t)f->nmeta; i++) free(f->meta[i]);
  for (int m = 0; m < f->nmeta; m++) free(f->meta_names[m]);
  free(f->classes);
  free(f->paths);
  free(f->labels);
  free(f->meta);
  free(f->meta_names);
  memset(f, 0, sizeof *f);
}

/* The path component `depth` folders above the file (0: its folder) as [start, start+len) of p, or
 * -1 when the path has fewer folders. */
static int component_above(const char *p, int depth, size_t *start, size_t *len) {
  const char *end = strrchr(p, '/'); /* the end of the file's folder */
  for (int d = 0; d < depth && end; d++) {
    const char *prev = end;
    while (prev > p && prev[-1] != '/') prev--; /* the folder's first character */
    end = prev > p ? prev - 1 : NULL;
  }
  if (!end) return -1;
  const char *b = end;
  while (b > p && b[-1] != '/') b--;
  *start = (size_t)(b - p);
  *len = (size_t)(end - b);
  return 0;
}

int imagefolder_relabel(struct imagefolder *f, int depth, char *why, size_t n) {
  char **names = xcalloc((size_t)f->n + 1, sizeof *names);
  for (int64_t i = 0; i < f->n; i++) {
    size_t s, len;
    if (component_above(f->paths[i], depth, &s, &len) != 0) {
      snprintf(why, n, "%s has %s folder(s) above it under the root, fewer than folder_depth_for_labels + 1 = %d",
               f->paths[i], depth == 0 ? "no" : "too few", depth + 1);
      for (int64_t k = 0; k < i; k++) free(names[k]);
      free(names);
      return -1;
    }
    names[i] = xmalloc(len + 1);
    memcpy(names[i], f->paths[i] + s, len);
    names[i][len] = 0;
  }
  /* The classes: the distinct names, sorted as ImageFolder sorts its folders. */
  char **sorted = xmalloc(((size_t)f->n + 1) * sizeof *sorted);
  memcpy(sorted, names, (size_t)f->n * sizeof *sorted);
  qsort(sorted, (size_t)f->n, sizeof *sorted, cmp_str);
  int nc = 0;
  for (int64_t i = 0; i < f->n; i++)
    if (i == 0 || strcmp(sorted[i], sorted[i - 1])) sorted[nc++] = sorted[i];
  for (int c = 0; c < f->nclasses; c++) free(f->classes[c]);
  free(f->classes);
  f->classes = xmalloc((size_t)(nc > 0 ? nc : 1) * sizeof *f->classes);
  for (int c = 0; c < nc; c++) f->classes[c] = xstrdup(sorted[c]);
  f->nclasses = nc;
  for (int64_t i = 0; i < f->n; i++) {
    char **hit = bsearch(&names[i], f->classes, (size_t)nc, sizeof *f->classes, cmp_str);
    SCD_ASSERT(hit);
    f->labels[i] = (int32_t)(hit - f->classes);
    free(names[i]);
  }
  free(names);
  free(sorted);
  return 0;
}

uint64_t imagefolder_hash(const struct imagefolder *f) {
  uint64_t h = HASH_FNV1A_INIT;
  for (int c = 0; c < f->nclasses; c++) h = hash_fnv1a(h, f->classes[c], strlen(f->classes[c]) + 1);
  h = hash_fnv1a(h, "\n", 1);
  for (int64_t i = 0; i < f->n; i++) h = hash_fnv1a(h, f->paths[i], strlen(f->paths[i]) + 1);
  if (!f->from_list) return h; /* a tree's labels follow from its paths; its hash stays what it was */
  h = hash_fnv1a(h, "list\n", 5);
  h = hash_fnv1a(h, f->labels, (size_t)f->n * sizeof *f->labels);
  for (int m = 0; m < f->nmeta; m++) h = hash_fnv1a(h, f->meta_names[m], strlen(f->meta_names[m]) + 1);
  for (size_t i = 0; i < (size_t)f->n * (size_t)f->nmeta; i++) h = hash_fnv1a(h, f->meta[i], strlen(f->meta[i]) + 1);
  return h;
}

/* Layout: int64 nclasses, n, n_other, from_list, nmeta; int32 labels[n]; other_example, classes,
 * paths, metadata names and values (row-major) as NUL-terminated strings. */
char *imagefolder_pack(const struct imagefolder *f, size_t *bytes) {
  const size_t nm = (size_t)f->n * (size_t)f->nmeta;
  size_t sz = 5 * sizeof(int64_t) + (size_t)f->n * sizeof(int32_t) + strlen(f->other_example) + 1;
  for (int c = 0; c < f->nclasses; c++) sz += strlen(f->classes[c]) + 1;
  for (int64_t i = 0; i < f->n; i++) sz += strlen(f->paths[i]) + 1;
  for (int m = 0; m < f->nmeta; m++) sz += strlen(f->meta_names[m]) + 1;
  for (size_t i = 0; i < nm; i++) sz += strlen(f->meta[i]) + 1;
  char *buf = xmalloc(sz), *p = buf;
  int64_t hdr[5] = {f->nclasses, f->n, f->n_other, f->from_list, f->nmeta};
  memcpy(p, hdr, sizeof hdr);
  p += sizeof hdr;
  memcpy(p, f->labels, (size_t)f->n * sizeof(int32_t));
  p += (size_t)f->n * sizeof(int32_t);
  p = stpcpy(p, f->other_example) + 1;
  for (int c = 0; c < f->nclasses; c++) p = stpcpy(p, f->classes[c]) + 1;
  for (int64_t i = 0; i < f->n; i++) p = stpcpy(p, f->paths[i]) + 1;
  for (int m = 0; m < f->nmeta; m++) p = stpcpy(p, f->meta_names[m]) + 1;
  for (size_t i = 0; i < nm; i++) p = stpcpy(p, f->meta[i]) + 1;
  SCD_ASSERT((size_t)(p - buf) == sz);
  *bytes = sz;
  return buf;
}

void imagefolder_unpack(const char *buf, size_t bytes, struct imagefolder *f) {
  memset(f, 0, sizeof *f);
  int64_t hdr[5];
  SCD_ASSERT(bytes >= sizeof hdr);
  memcpy(hdr, buf, sizeof hdr);
  const char *p = buf + sizeof hdr;
  f->nclasses = (int)hdr[0];
  f->n = hdr[1];
  f->n_other = hdr[2];
  f->from_list = (int)hdr[3];
  f->nmeta = (int)hdr[4];
  f->labels = xmalloc(MUL_SIZE((size_t)(f->n > 0 ? f->n : 1), sizeof *f->labels));
  memcpy(f->labels, p, (size_t)f->n * sizeof(int32_t));
  p += (size_t)f->n * sizeof(int32_t);
  snprintf(f->other_example, sizeof f->other_example, "%s", p);
  p += strlen(p) + 1;
  f->classes = xmalloc(MUL_SIZE((size_t)(f->nclasses > 0 ? f->nclasses : 1), sizeof *f->classes));
  for (int c = 0; c < f->nclasses; c++, p += strlen(p) + 1) f->classes[c] = xstrdup(p);
  f->paths = xmalloc(MUL_SIZE((size_t)(f->n > 0 ? f->n : 1), sizeof *f->paths));
  for (int64_t i = 0; i < f->n; i++, p += strlen(p) + 1) f->paths[i] = xstrdup(p);
  const size_t nm = (size_t)f->n * (size_t)f->nmeta;
  f->meta_names = xmalloc(MUL_SIZE((size_t)(f->nmeta > 0 ? f->nmeta : 1), sizeof *f->meta_names));
  for (int m = 0; m < f->nmeta; m++, p += strlen(p) + 1) f->meta_names[m] = xstrdup(p);
  f->meta = xmalloc(MUL_SIZE(nm > 0 ? nm : 1, sizeof *f->meta));
  for (size_t i = 0; i < nm; i++, p += strlen(p) + 1) f->meta[i] = xstrdup(p);
  SCD_ASSERT((size_t)(p - buf) == bytes);
}
