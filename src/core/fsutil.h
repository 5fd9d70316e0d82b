/* fsutil.h - paths, directories and atomic file replacement.
 *
 * Every output file is written under a temporary name in the same directory, flushed to disk,
 * and renamed over the final name, so a crash, a kill or a full disk never leaves a half-written
 * file where a complete one is expected. */
#ifndef SCDINO_FSUTIL_H
#define SCDINO_FSUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Join a directory and a file name into out (size n); fatal if it does not fit. */
char *fs_join(char *out, size_t n, const char *dir, const char *name);
/* mkdir -p; fatal with the path on failure. */
void fs_mkdir_p(const char *path);
int fs_exists(const char *path);
int fs_is_dir(const char *path);
/* Size in bytes, or -1 if the file cannot be stat'ed. */
long long fs_file_size(const char *path);

/* Start an atomic write: fills tmp (size n) with "<final>.tmp.<pid>" and registers it for removal
 * on a fatal error. */
void fs_atomic_begin(const char *final_path, char *tmp, size_t n);
/* Finish it: fsync the file, rename it over final_path, fsync the directory. */
void fs_atomic_commit(const char *tmp, const char *final_path);
/* Abandon it: remove the temporary file. */
void fs_atomic_abort(const char *tmp);

/* Write size bytes of buf to tmp (created or truncated) with every write checked, fsync and close
 * it; the caller renames it (fs_atomic_commit).  A failure (disk full, quota, ulimit -f, I/O error)
 * ends the job (SCD_EXIT_FAILURE) naming `what` ("checkpoint"), tmp, errno and how far it got,
 * with tmp removed and final_path, as the message says, left as it was.  halfway (may be NULL) is
 * called once half the bytes are written (a fault-injection hook for tests). */
void fs_write_buffer(const char *what, const char *tmp, const char *final_path, const void *buf, size_t size,
                     void (*halfway)(void *arg, const char *tmp), void *arg);

/* A whole file from memory: written under a temporary name by fs_write_buffer, then renamed over
 * final_path (fs_atomic_commit). */
void fs_save_buffer(const char *what, const char *final_path, const void *buf, size_t size);

/* Outputs written through stdio (log.txt, knn.txt, the echoed deck, PNGs): made in memory, then
 * written as one buffer by fs_write_buffer under a temporary name and renamed, so they fail as
 * every output does (naming the file and errno, the old file left as it was).
 *     struct fs_mem t;  FILE *f = fs_mem_begin(&t);  fprintf(f, ...);  fs_mem_commit(&t, "log", path); */
struct fs_mem {
  FILE *f;
  char *buf;
  size_t size;
};
FILE *fs_mem_begin(struct fs_mem *t);
void fs_mem_commit(struct fs_mem *t, const char *what, const char *final_path);

/* FNV-1a 64 (core/hash.h) of a whole file and its size: 0, or -1 with errno set when it cannot be
 * read.  The shard checks of the manifest and of a staged copy. */
int fs_file_fnv1a(const char *path, uint64_t *sum, long long *bytes);

/* fsync a file by path (after a library such as HDF5 has closed it). */
void fs_fsync_path(const char *path);

#endif
