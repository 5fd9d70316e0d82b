/* check.h - error-check macros and fatal-error handling.
 *
 * Every call that can fail goes through one of these; a failure prints the source file and line,
 * the failing expression and the library's own message, then ends the whole job (MPI_Abort when
 * more than one rank runs, so no rank is left waiting in a collective).  Messages about bad *input*
 * (decks, TIFFs, shards) do not use these: they name the user's file instead, via scd_fatal(). */
#ifndef SCDINO_CHECK_H
#define SCDINO_CHECK_H

#include <stddef.h>

/* Exit status conventions (also documented in the README). */
enum {
  SCD_EXIT_OK = 0,
  SCD_EXIT_FAILURE = 1, /* runtime failure: I/O, library error, numerical fault */
  SCD_EXIT_INPUT = 2,   /* bad input deck or command-line arguments */
  SCD_EXIT_DATA = 3,    /* bad data: TIFF, shard, manifest or checkpoint content */
};

#if defined(__GNUC__)
#define SCD_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define SCD_NORETURN __attribute__((noreturn))
#else
#define SCD_PRINTF(a, b)
#define SCD_NORETURN
#endif

/* Print "scdino: error: <message>" (with the rank when several run), remove registered
 * temporary files, and end the job with status `code`. */
SCD_NORETURN void scd_fatal(int code, const char *fmt, ...) SCD_PRINTF(2, 3);
/* Same, prefixed with the source location; for internal and library failures. */
SCD_NORETURN void scd_fatal_at(const char *file, int line, int code, const char *fmt, ...)
    SCD_PRINTF(4, 5);
/* The calling thread is ending the process with status `code` by a path other than scd_fatal
 * (a collective exit after an error every rank agreed on): from now on another thread that fails
 * (a loader thread whose HDF5 calls break while exit() closes the library) waits to be ended
 * instead of printing a second error and racing to exit with its own status. */
void scd_exit_claim(int code);
/* Whether this process is already ending through scd_fatal or scd_exit_claim (the signal helper
 * then ends it without a message of its own: mpirun's SIGTERM after another rank's abort). */
int scd_fatal_started(void);
/* Record the thread that initialised MPI, and this rank and size (comm_init calls it).  A fatal
 * error on another thread then ends the process without calling MPI (MPI_THREAD_FUNNELED). */
void scd_note_mpi(int rank, int size);
/* Forget that a fatal error has started (scd_fatal lets only its first caller end the process):
 * for test harnesses that catch exit() and go on, such as the libFuzzer targets. */
void scd_fatal_rearm(void);

/* Temporary files that must not survive a fatal error (atomic writes in progress). */
void scd_tmpfile_register(const char *path);
void scd_tmpfile_unregister(const char *path);
void scd_tmpfile_remove_all(void);

/* Allocation with a message naming the size and call site. */
void *scd_malloc(size_t n, const char *file, int line);
void *scd_calloc(size_t n, size_t size, const char *file, int line);
void *scd_realloc(void *p, size_t n, const char *file, int line);
char *scd_strdup(const char *s, const char *file, int line);
void *scd_aligned_alloc(size_t n, const char *file, int line); /* 64-byte aligned, zeroed */
#define xmalloc(n) scd_malloc((n), __FILE__, __LINE__)
#define xcalloc(n, s) scd_calloc((n), (s), __FILE__, __LINE__)
#define xrealloc(p, n) scd_realloc((p), (n), __FILE__, __LINE__)
#define xstrdup(s) scd_strdup((s), __FILE__, __LINE__)
#define xaligned_alloc(n) scd_aligned_alloc((n), __FILE__, __LINE__)

/* Size arithmetic that refuses to overflow (sizes read from files are never trusted). */
size_t scd_mul_size(size_t a, size_t b, const char *file, int line);
#define MUL_SIZE(a, b) scd_mul_size((a), (b), __FILE__, __LINE__)

#define SCD_FAIL(...) scd_fatal_at(__FILE__, __LINE__, SCD_EXIT_FAILURE, __VA_ARGS__)
#define SCD_ASSERT(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) scd_fatal_at(__FILE__, __LINE__, SCD_EXIT_FAILURE, "assertion failed: %s", #cond); \
  } while (0)

/* MPI: any return other than MPI_SUCCESS. */
void scd_check_mpi_fail(int err, const char *expr, const char *file, int line) SCD_NORETURN;
#define CHECK_MPI(call)                                                   \
  do {                                                                    \
    int scd_e_ = (call);                                                  \
    if (scd_e_ != 0) scd_check_mpi_fail(scd_e_, #call, __FILE__, __LINE__); \
  } while (0)

/* HDF5: negative herr_t or hid_t.  Evaluates to the call's value. */
long long scd_check_h5(long long ret, const char *expr, const char *file, int line);
#define CHECK_H5(call) scd_check_h5((long long)(call), #call, __FILE__, __LINE__)

/* libtiff: calls that return 0 (or a negative count) on failure.  libtiff's own message is
 * captured by the handler installed in tiff.c. */
void scd_check_tiff_fail(const char *expr, const char *file, int line) SCD_NORETURN;
#define CHECK_TIFF(call)                                                      \
  do {                                                                        \
    if ((long long)(call) <= 0) scd_check_tiff_fail(#call, __FILE__, __LINE__); \
  } while (0)

/* POSIX calls returning -1 on failure (errno set). */
void scd_check_sys_fail(const char *expr, const char *file, int line) SCD_NORETURN;
#define CHECK_SYS(call)                                                          \
  do {                                                                           \
    if ((call) == -1) scd_check_sys_fail(#call, __FILE__, __LINE__);             \
  } while (0)

/* pthread calls returning an error number. */
#define CHECK_PTHREAD(call)                                                            \
  do {                                                                                 \
    int scd_e_ = (call);                                                               \
    if (scd_e_ != 0) scd_fatal_at(__FILE__, __LINE__, SCD_EXIT_FAILURE, "%s: error %d", #call, scd_e_); \
  } while (0)

#endif
