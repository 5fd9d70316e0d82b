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

/* The folder of path ("." for a bare name, "/" for a file in the root) into out (size n). */
void fs_dir_of(const char *path, char *out, size_t n);

/* Write size bytes of buf to tmp (created or truncated) with every write checked, fsync and close
 * it; the caller renames it (fs_atomic_commit).  A failure (disk full, quota, ulimit -f, no
 * permission, a read-only file system, I/O error) ends the job (SCD_EXIT_FAILURE) naming `what`
 * ("checkpoint"), tmp, errno with its likely cause and how far it got, with tmp removed and
 * final_path, as the message says, left as it was.  halfway (may be NULL) is called once half the
 * bytes are written (a fault-injection hook for tests). */
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

/* Best-effort outputs (&system metrics_file): the same atomic write, but a failure is returned
 * instead of ending the job: 0, or the errno of the failed step, with the temporary file removed and
 * final_path left as it was.  fs_mem_try_commit frees t in both cases. */
int fs_try_save_buffer(const char *final_path, const void *buf, size_t size);
int fs_mem_try_commit(struct fs_mem *t, const char *final_path);

/* ---- outputs never clobber inputs (doc/faults.md) ----
 * Every output is checked with fs_output_check before it is written, at the start of its step
 * where its name is known then, so that nothing is computed for a file that would be refused: an
 * output never replaces an input of the run (the deck, a checkpoint, the manifest, a features
 * file: fs_input_add), nor an existing file that is not its own kind of file. */

/* Remember path as an input of this run; what names it in messages ("input deck").  Every rank
 * keeps its own list.  Outputs are compared with it by device and inode when they are checked, so
 * another spelling of the path, or a symbolic or hard link to the file, is the input too. */
void fs_input_add(const char *path, const char *what);
/* Whether a and b are the same existing file (device and inode). */
int fs_same_file(const char *a, const char *b);

/* Recognises an existing regular file as an output's own kind of file (its first line, its format
 * attribute): 1 when it is, else 0. */
typedef int (*fs_own_fn)(const char *path, const void *arg);
/* own() of text outputs: the file is empty, or begins with the string arg. */
int fs_own_text(const char *path, const void *prefix);
/* own() of binary outputs: the file begins with the fs_magic arg (a PNG's signature, say). */
struct fs_magic {
  const unsigned char *bytes;
  size_t n;
};
int fs_own_magic(const char *path, const void *magic);
/* Whether an output (kind: "features file", in messages) may be written at path: 0, or -1 with the
 * reason in why (size n): path is a directory or another non-regular file, an input of this run,
 * or an existing file that own(path, arg) does not recognise. */
int fs_output_check(const char *path, const char *kind, fs_own_fn own, const void *arg, char *why, size_t n);
/* The same, ending the job with SCD_EXIT_INPUT when it may not: "refusing to write the KIND PATH:
 * WHY; HINT" (hint: what chose the name and how to choose another). */
void fs_output_claim(const char *path, const char *kind, fs_own_fn own, const void *arg, const char *hint);

/* FNV-1a 64 (core/hash.h) of a whole file and its size: 0, or -1 with errno set when it cannot be
 * read.  The shard checks of the manifest and of a staged copy. */
int fs_file_fnv1a(const char *path, uint64_t *sum, long long *bytes);

/* fsync a file by path (after a library such as HDF5 has closed it). */
void fs_fsync_path(const char *path);

#endif
