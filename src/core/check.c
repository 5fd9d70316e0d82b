/* check.c - fatal errors, temporary-file cleanup and checked allocation. */
#include "build_config.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/h5util.h"

/* Growable list: prepare may hold one unfinished shard per rank and thread, checkpoints one more.
 * Locked: the signal and watchdog threads (signals.c, watchdog.c) empty it while the main thread
 * may be adding to it.  Nothing that can end the process runs with the lock held. */
static char **tmpfiles;
static size_t ntmp, captmp;
static pthread_mutex_t tmp_lock = PTHREAD_MUTEX_INITIALIZER;

void scd_tmpfile_register(const char *path) {
  char *copy = scd_strdup(path, __FILE__, __LINE__);
  pthread_mutex_lock(&tmp_lock);
  for (size_t i = 0; i < ntmp; i++)
    if (!tmpfiles[i]) {
      tmpfiles[i] = copy;
      pthread_mutex_unlock(&tmp_lock);
      return;
    }
  if (ntmp == captmp) {
    const size_t cap = captmp ? 2 * captmp : 16;
    char **grown = realloc(tmpfiles, cap * sizeof *tmpfiles);
    if (!grown) {
      pthread_mutex_unlock(&tmp_lock);
      scd_fatal_at(__FILE__, __LINE__, SCD_EXIT_FAILURE, "out of memory registering %s", path);
    }
    tmpfiles = grown;
    captmp = cap;
  }
  tmpfiles[ntmp++] = copy;
  pthread_mutex_unlock(&tmp_lock);
}

void scd_tmpfile_unregister(const char *path) {
  pthread_mutex_lock(&tmp_lock);
  for (size_t i = 0; i < ntmp; i++)
    if (tmpfiles[i] && strcmp(tmpfiles[i], path) == 0) {
      free(tmpfiles[i]);
      tmpfiles[i] = NULL;
    }
  pthread_mutex_unlock(&tmp_lock);
}

void scd_tmpfile_remove_all(void) {
  pthread_mutex_lock(&tmp_lock);
  for (size_t i = 0; i < ntmp; i++)
    if (tmpfiles[i]) {
      unlink(tmpfiles[i]);
      free(tmpfiles[i]);
      tmpfiles[i] = NULL;
    }
  pthread_mutex_unlock(&tmp_lock);
}

/* MPI runs with MPI_THREAD_FUNNELED: only the thread that called comm_init may call MPI.  Other
 * threads (the loader's, which open and read shards) use the rank and size recorded here. */
static pthread_t mpi_thread;
static int mpi_noted, noted_rank, noted_size = 1;

void scd_note_mpi(int rank, int size) {
  mpi_thread = pthread_self();
  noted_rank = rank;
  noted_size = size;
  mpi_noted = 1;
}

static int on_mpi_thread(void) { return !mpi_noted || pthread_equal(mpi_thread, pthread_self()); }

/* The world's size (0 when MPI is not running) and this rank. */
static int world_rank_size(int *rank) {
  if (!on_mpi_thread()) {
    *rank = noted_rank;
    return noted_size;
  }
  int init = 0, fin = 0, size = 1;
  *rank = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) {
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  return init && !fin ? size : 0;
}

/* The first thread to fail owns the shutdown.  Another thread failing meanwhile (a loader thread
 * whose HDF5 calls fail because exit() is closing the library under it) would otherwise print a
 * misleading second error and race to exit with its own status: it waits to be ended instead.  A
 * failure inside the shutdown itself (same thread) exits at once with the first status. */
static pthread_mutex_t fatal_lock = PTHREAD_MUTEX_INITIALIZER;
static int fatal_started, fatal_code;
static pthread_t fatal_thread;

static void fatal_enter(int code) {
  pthread_mutex_lock(&fatal_lock);
  if (!fatal_started) {
    fatal_started = 1;
    fatal_code = code;
    fatal_thread = pthread_self();
    pthread_mutex_unlock(&fatal_lock);
    return;
  }
  const int same = pthread_equal(fatal_thread, pthread_self()), first = fatal_code;
  pthread_mutex_unlock(&fatal_lock);
  if (same) _exit(first);
  /* Let the exiting thread have HDF5 (h5util_quiesce) if this one failed inside a locked call. */
  h5util_release_thread();
  for (;;) pause();
}

int scd_fatal_started(void) {
  pthread_mutex_lock(&fatal_lock);
  const int started = fatal_started;
  pthread_mutex_unlock(&fatal_lock);
  return started;
}

void scd_exit_claim(int code) {
  fatal_enter(code);
  h5util_quiesce();
}

void scd_fatal_rearm(void) {
  h5util_unquiesce(); /* the exit did not happen: give HDF5 back */
  pthread_mutex_lock(&fatal_lock);
  fatal_started = 0;
  pthread_mutex_unlock(&fatal_lock);
}

SCD_NORETURN static void fatal_end(int code) {
  int rank;
  int size = world_rank_size(&rank);
  fflush(stdout);
  fflush(stderr);
  h5util_quiesce();
  scd_tmpfile_remove_all();
  /* Another thread must not call MPI, and exit() would run library destructors (OpenBLAS, MPI)
   * under the main thread's feet: end at once.  A rank that exits with a non-zero status before
   * MPI_Finalize makes mpirun or srun end the others, as MPI_Abort would. */
  if (!on_mpi_thread()) _exit(code);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  if (size == 1) MPI_Finalize();
  exit(code);
}

static void vreport(const char *where, const char *fmt, va_list ap) {
  int rank;
  int size = world_rank_size(&rank);
  char msg[4096];
  vsnprintf(msg, sizeof msg, fmt, ap);
  /* An error every rank finds (a deck or data set problem) would be printed by each rank that gets
   * to it before the first abort lands.  The other ranks give rank 0 time to print it once and
   * abort (which ends them here, silently: see scd_fatal_started); an error of one rank alone is
   * printed after that wait. */
  if (size > 1 && rank != 0) {
    struct timespec left = {2, 0};
    /* mpirun's SIGTERM interrupts the sleep; the signal helper ends the process meanwhile */
    while (nanosleep(&left, &left) == -1 && errno == EINTR) {
    }
  }
  fflush(stdout);
  if (size > 1)
    fprintf(stderr, "scdino: error (rank %d of %d): %s%s\n", rank, size, where, msg);
  else
    fprintf(stderr, "scdino: error: %s%s\n", where, msg);
}

void scd_fatal(int code, const char *fmt, ...) {
  fatal_enter(code);
  va_list ap;
  va_start(ap, fmt);
  vreport("", fmt, ap);
  va_end(ap);
  fatal_end(code);
}

void scd_fatal_at(const char *file, int line, int code, const char *fmt, ...) {
  fatal_enter(code);
  char where[512];
  snprintf(where, sizeof where, "%s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vreport(where, fmt, ap);
  va_end(ap);
  fatal_end(code);
}

void *scd_malloc(size_t n, const char *file, int line) {
  void *p = malloc(n ? n : 1);
  if (!p) scd_fatal_at(file, line, SCD_EXIT_FAILURE, "out of memory allocating %zu bytes", n);
  return p;
}

void *scd_calloc(size_t n, size_t size, const char *file, int line) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    scd_fatal_at(file, line, SCD_EXIT_FAILURE, "out of memory allocating %zu x %zu bytes", n, size);
  return p;
}

void *scd_realloc(void *p, size_t n, const char *file, int line) {
  void *q = realloc(p, n ? n : 1);
  if (!q) scd_fatal_at(file, line, SCD_EXIT_FAILURE, "out of memory reallocating %zu bytes", n);
  return q;
}

char *scd_strdup(const char *s, const char *file, int line) {
  size_t n = strlen(s) + 1;
  char *p = scd_malloc(n, file, line);
  memcpy(p, s, n);
  return p;
}

void *scd_aligned_alloc(size_t n, const char *file, int line) {
  size_t rounded = (n + 63) / 64 * 64;
  if (rounded < n) scd_fatal_at(file, line, SCD_EXIT_FAILURE, "allocation size %zu overflows", n);
  void *p = aligned_alloc(64, rounded ? rounded : 64);
  if (!p) scd_fatal_at(file, line, SCD_EXIT_FAILURE, "out of memory allocating %zu bytes", n);
  memset(p, 0, rounded ? rounded : 64);
  return p;
}

size_t scd_mul_size(size_t a, size_t b, const char *file, int line) {
  if (a != 0 && b > SIZE_MAX / a)
    scd_fatal_at(file, line, SCD_EXIT_FAILURE, "size %zu x %zu overflows", a, b);
  return a * b;
}

void scd_check_mpi_fail(int err, const char *expr, const char *file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", err);
  scd_fatal_at(file, line, SCD_EXIT_FAILURE, "%s: %s", expr, msg);
}

long long scd_check_h5(long long ret, const char *expr, const char *file, int line) {
  if (ret >= 0) return ret;
  char msg[1024];
  scd_fatal_at(file, line, SCD_EXIT_FAILURE, "%s: %s", expr, h5util_reason(msg, sizeof msg, 1));
}

void scd_check_tiff_fail(const char *expr, const char *file, int line) {
  scd_fatal_at(file, line, SCD_EXIT_FAILURE, "libtiff: %s failed", expr);
}

void scd_check_sys_fail(const char *expr, const char *file, int line) {
  scd_fatal_at(file, line, SCD_EXIT_FAILURE, "%s: %s", expr, strerror(errno));
}
