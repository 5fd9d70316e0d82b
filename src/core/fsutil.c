/* fsutil.c - paths, directories and atomic file replacement. */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fsutil.h"
#include "core/hash.h"

char *fs_join(char *out, size_t n, const char *dir, const char *name) {
  int len;
  if (!dir || !*dir || name[0] == '/')
    len = snprintf(out, n, "%s", name);
  else if (dir[strlen(dir) - 1] == '/')
    len = snprintf(out, n, "%s%s", dir, name);
  else
    len = snprintf(out, n, "%s/%s", dir, name);
  if (len < 0 || (size_t)len >= n) scd_fatal(SCD_EXIT_INPUT, "path too long: %s/%s", dir, name);
  return out;
}

void fs_mkdir_p(const char *path) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    scd_fatal(SCD_EXIT_INPUT, "path too long: %s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      scd_fatal(SCD_EXIT_FAILURE, "cannot create directory %s: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0 && errno != EEXIST)
    scd_fatal(SCD_EXIT_FAILURE, "cannot create directory %s: %s", buf, strerror(errno));
  if (!fs_is_dir(buf)) scd_fatal(SCD_EXIT_FAILURE, "%s exists and is not a directory", buf);
}

int fs_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int fs_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

long long fs_file_size(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  return (long long)st.st_size;
}

void fs_atomic_begin(const char *final_path, char *tmp, size_t n) {
  int len = snprintf(tmp, n, "%s.tmp.%ld", final_path, (long)getpid());
  if (len < 0 || (size_t)len >= n) scd_fatal(SCD_EXIT_INPUT, "path too long: %s", final_path);
  scd_tmpfile_register(tmp);
}

void fs_fsync_path(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) scd_fatal(SCD_EXIT_FAILURE, "cannot open %s to flush it: %s", path, strerror(errno));
  if (fsync(fd) != 0 && errno != EINVAL) {
    int e = errno;
    close(fd);
    scd_fatal(SCD_EXIT_FAILURE, "cannot flush %s to disk: %s", path, strerror(e));
  }
  close(fd);
}

void fs_dir_of(const char *path, char *out, size_t n) {
  snprintf(out, n, "%s", path);
  char *slash = strrchr(out, '/');
  if (slash == out)
    out[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(out, n, ".");
}

/* The rename itself is durable only once the directory entry is flushed. */
static void sync_dir_of(const char *path) {
  char dir[PATH_MAX];
  fs_dir_of(path, dir, sizeof dir);
  int fd = open(dir, O_RDONLY);
  if (fd >= 0) {
    fsync(fd); /* best effort: some file systems refuse fsync on directories */
    close(fd);
  }
}

void fs_atomic_commit(const char *tmp, const char *final_path) {
  fs_fsync_path(tmp);
  if (rename(tmp, final_path) != 0)
    scd_fatal(SCD_EXIT_FAILURE, "cannot rename %s to %s: %s", tmp, final_path, strerror(errno));
  scd_tmpfile_unregister(tmp);
  sync_dir_of(final_path);
}

/* What an errno of a failed write most likely means, for the message (" - ...", or ""). */
static const char *write_cause(int err) {
  switch (err) {
  case ENOSPC:
  case EDQUOT:
  case EFBIG: return " - disk full, quota or file-size limit?";
  case EACCES:
  case EPERM: return " - no permission to write in that folder.";
  case EROFS: return " - the file system is mounted read-only.";
  case EIO: return " - an I/O error of the disk or the network file system.";
  default: return "";
  }
}

SCD_NORETURN static void write_failed(const char *what, const char *tmp, const char *path, size_t done,
                                      size_t size, int err) {
  unlink(tmp);
  scd_fatal(SCD_EXIT_FAILURE,
            "cannot write %s %s: errno %d: %s (after %zu of %zu bytes)%s  The temporary file is removed; "
            "%s %s%s%s",
            what, tmp, err, strerror(err), done, size, write_cause(err), path,
            fs_exists(path) ? "is left as it was (the last good " : "was not written", fs_exists(path) ? what : "",
            fs_exists(path) ? ")" : "");
}

/* Write size bytes of buf to tmp (created or truncated), fsync and close it: 0, or the errno of the
 * failure with *done the bytes written (tmp is left for the caller to remove). */
static int write_all(const char *tmp, const void *buf, size_t size, void (*halfway)(void *arg, const char *tmp),
                     void *arg, size_t *done_out) {
  size_t done = 0;
  *done_out = 0;
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  const char *p = buf;
  while (done < size) {
    if (halfway && done >= size / 2) {
      halfway(arg, tmp);
      halfway = NULL;
    }
    size_t chunk = size - done;
    if (done < size / 2 && chunk > size / 2 - done) chunk = size / 2 - done; /* stop at the half once */
    if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
    const ssize_t w = write(fd, p + done, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      close(fd);
      *done_out = done;
      return err;
    }
    done += (size_t)w;
  }
  *done_out = done;
  if (fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    close(fd);
    return err;
  }
  if (close(fd) != 0) return errno;
  return 0;
}

void fs_write_buffer(const char *what, const char *tmp, const char *final_path, const void *buf, size_t size,
                     void (*halfway)(void *arg, const char *tmp), void *arg) {
  size_t done;
  const int err = write_all(tmp, buf, size, halfway, arg, &done);
  if (err) write_failed(what, tmp, final_path, done, size, err);
}

int fs_try_save_buffer(const char *final_path, const void *buf, size_t size) {
  char tmp[PATH_MAX + 64];
  fs_atomic_begin(final_path, tmp, sizeof tmp);
  size_t done;
  int err = write_all(tmp, buf, size, NULL, NULL, &done);
  if (!err && rename(tmp, final_path) != 0) err = errno;
  if (err) {
    fs_atomic_abort(tmp);
    return err;
  }
  scd_tmpfile_unregister(tmp);
  sync_dir_of(final_path);
  return 0;
}

FILE *fs_mem_begin(struct fs_mem *t) {
  t->buf = NULL;
  t->size = 0;
  t->f = open_memstream(&t->buf, &t->size);
  if (!t->f) SCD_FAIL("open_memstream: %s", strerror(errno));
  return t->f;
}

void fs_save_buffer(const char *what, const char *final_path, const void *buf, size_t size) {
  char tmp[PATH_MAX + 64];
  fs_atomic_begin(final_path, tmp, sizeof tmp);
  fs_write_buffer(what, tmp, final_path, buf, size, NULL, NULL);
  fs_atomic_commit(tmp, final_path);
}

void fs_mem_commit(struct fs_mem *t, const char *what, const char *final_path) {
  if (fclose(t->f) != 0) SCD_FAIL("%s: building %s in memory: %s", final_path, what, strerror(errno));
  fs_save_buffer(what, final_path, t->buf, t->size);
  free(t->buf);
  t->buf = NULL;
  t->f = NULL;
}

int fs_mem_try_commit(struct fs_mem *t, const char *final_path) {
  if (fclose(t->f) != 0) SCD_FAIL("%s: building it in memory: %s", final_path, strerror(errno));
  const int err = fs_try_save_buffer(final_path, t->buf, t->size);
  free(t->buf);
  t->buf = NULL;
  t->f = NULL;
  return err;
}

int fs_file_fnv1a(const char *path, uint64_t *sum, long long *bytes) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const size_t cap = (size_t)1 << 20;
  unsigned char *buf = xmalloc(cap);
  uint64_t h = HASH_FNV1A_INIT;
  long long n = 0;
  for (;;) {
    const ssize_t r = read(fd, buf, cap);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      close(fd);
      free(buf);
      errno = e;
      return -1;
    }
    if (r == 0) break;
    h = hash_fnv1a(h, buf, (size_t)r);
    n += r;
  }
  close(fd);
  free(buf);
  *sum = h;
  *bytes = n;
  return 0;
}

void fs_atomic_abort(const char *tmp) {
  unlink(tmp);
  scd_tmpfile_unregister(tmp);
}

/* ---- outputs never clobber inputs ---- */

static struct input {
  char *path, *what;
} *inputs;
static int ninputs;

void fs_input_add(const char *path, const char *what) {
  for (int i = 0; i < ninputs; i++)
    if (!strcmp(inputs[i].path, path)) return;
  inputs = xrealloc(inputs, sizeof *inputs * (size_t)(ninputs + 1));
  inputs[ninputs].path = xstrdup(path);
  inputs[ninputs].what = xstrdup(what);
  ninputs++;
}

int fs_same_file(const char *a, const char *b) {
  struct stat x, y;
  return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The first n bytes of path into buf: how many were read (fewer when the file is shorter), -1 when
 * it cannot be opened. */
static ssize_t read_head(const char *path, void *buf, size_t n) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  return (ssize_t)got;
}

int fs_own_text(const char *path, const void *prefix) {
  const size_t n = strlen(prefix);
  char head[256];
  if (n > sizeof head) return 0;
  const ssize_t got = read_head(path, head, n);
  return got == 0 || (got == (ssize_t)n && memcmp(head, prefix, n) == 0);
}

int fs_own_magic(const char *path, const void *magic) {
  const struct fs_magic *m = magic;
  unsigned char head[64];
  if (m->n > sizeof head) return 0;
  return read_head(path, head, m->n) == (ssize_t)m->n && memcmp(head, m->bytes, m->n) == 0;
}

int fs_output_check(const char *path, const char *kind, fs_own_fn own, const void *arg, char *why, size_t n) {
  struct stat st;
  if (stat(path, &st) != 0) return 0; /* a new file (a missing folder fails as the write does) */
  if (S_ISDIR(st.st_mode)) {
    snprintf(why, n, "it is a directory");
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(why, n, "it is not a regular file");
    return -1;
  }
  for (int i = 0; i < ninputs; i++)
    if (fs_same_file(path, inputs[i].path)) {
      snprintf(why, n, "it is this run's %s (%s)", inputs[i].what, inputs[i].path);
      return -1;
    }
  if (!own(path, arg)) {
    snprintf(why, n, "it exists and is not scdino's own %s", kind);
    return -1;
  }
  return 0;
}

void fs_output_claim(const char *path, const char *kind, fs_own_fn own, const void *arg, const char *hint) {
  char why[PATH_MAX + 256];
  if (fs_output_check(path, kind, own, arg, why, sizeof why) != 0)
    scd_fatal(SCD_EXIT_INPUT, "refusing to write the %s %s: %s; an output only creates or replaces its own "
              "kind of file%s%s", kind, path, why, hint && hint[0] ? "; " : "", hint ? hint : "");
}
