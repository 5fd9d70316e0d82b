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

void fs_atomic_commit(const char *tmp, const char *final_path) {
  fs_fsync_path(tmp);
  if (rename(tmp, final_path) != 0)
    scd_fatal(SCD_EXIT_FAILURE, "cannot rename %s to %s: %s", tmp, final_path, strerror(errno));
  scd_tmpfile_unregister(tmp);
  /* The rename itself is durable only once the directory entry is flushed. */
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", final_path);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(dir, sizeof dir, ".");
  int fd = open(dir, O_RDONLY);
  if (fd >= 0) {
    fsync(fd); /* best effort: some file systems refuse fsync on directories */
    close(fd);
  }
}

SCD_NORETURN static void write_failed(const char *what, const char *tmp, const char *path, size_t done,
                                      size_t size, int err) {
  unlink(tmp);
  scd_fatal(SCD_EXIT_FAILURE,
            "cannot write %s %s: errno %d: %s (after %zu of %zu bytes) - disk full, quota or file-size "
            "limit?  The temporary file is removed; %s %s%s%s",
            what, tmp, err, strerror(err), done, size, path,
            fs_exists(path) ? "is left as it was (the last good " : "was not written", fs_exists(path) ? what : "",
            fs_exists(path) ? ")" : "");
}

void fs_write_buffer(const char *what, const char *tmp, const char *final_path, const void *buf, size_t size,
                     void (*halfway)(void *arg, const char *tmp), void *arg) {
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) write_failed(what, tmp, final_path, 0, size, errno);
  const char *p = buf;
  size_t done = 0;
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
      write_failed(what, tmp, final_path, done, size, err);
    }
    done += (size_t)w;
  }
  if (fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    close(fd);
    write_failed(what, tmp, final_path, done, size, err);
  }
  if (close(fd) != 0) write_failed(what, tmp, final_path, done, size, errno);
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
