/* h5util.c - the HDF5 lock and the HDF5 helpers shared by the files scdino reads and writes. */
#include "build_config.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "core/h5util.h"

#include "core/check.h"

/* ---- the lock ---- */

/* Recursive, so that the thread ending the process can take it although it may hold it already
 * (a failure inside a locked HDF5 call); h5_depth counts this thread's holds, h5_quiesce_held
 * those of them that h5util_quiesce took. */
static pthread_mutex_t h5_mu;
static pthread_once_t h5_once = PTHREAD_ONCE_INIT;
static _Thread_local int h5_depth, h5_quiesce_held;

static void h5_mu_init(void) {
  pthread_mutexattr_t a;
  CHECK_PTHREAD(pthread_mutexattr_init(&a));
  CHECK_PTHREAD(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE));
  CHECK_PTHREAD(pthread_mutex_init(&h5_mu, &a));
  CHECK_PTHREAD(pthread_mutexattr_destroy(&a));
}

void h5util_lock(void) {
  pthread_once(&h5_once, h5_mu_init);
  CHECK_PTHREAD(pthread_mutex_lock(&h5_mu));
  h5_depth++;
}

void h5util_unlock(void) {
  h5_depth--;
  CHECK_PTHREAD(pthread_mutex_unlock(&h5_mu));
}

void h5util_quiesce(void) {
  pthread_once(&h5_once, h5_mu_init);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 10;
  if (pthread_mutex_timedlock(&h5_mu, &ts) == 0) {
    h5_depth++;
    h5_quiesce_held++;
  }
}

void h5util_unquiesce(void) {
  while (h5_quiesce_held > 0) {
    h5_quiesce_held--;
    h5_depth--;
    pthread_mutex_unlock(&h5_mu);
  }
}

void h5util_release_thread(void) {
  while (h5_depth > 0) {
    h5_depth--;
    pthread_mutex_unlock(&h5_mu);
  }
  h5_quiesce_held = 0;
}

/* ---- Fletcher-32 ---- */

uint32_t h5util_fletcher32(const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t a = 0, b = 0;
  size_t words = n / 2;
  while (words > 0) {
    /* 360 words keep both sums below 2^32 before they are folded. */
    size_t k = words < 360 ? words : 360;
    words -= k;
    for (; k > 0; k--, p += 2) {
      a += ((uint32_t)p[0] << 8) | p[1];
      b += a;
    }
    a = (a & 0xffff) + (a >> 16);
    b = (b & 0xffff) + (b >> 16);
  }
  if (n % 2) {
    a += (uint32_t)p[0] << 8;
    b += a;
    a = (a & 0xffff) + (a >> 16);
    b = (b & 0xffff) + (b >> 16);
  }
  a = (a & 0xffff) + (a >> 16);
  b = (b & 0xffff) + (b >> 16);
  return (b << 16) | a;
}

/* ---- HDF5's reason ---- */

struct innermost {
  char *buf;
  size_t n;
  int with_func, found;
};

/* Walked upward (innermost first): keep the first description, which names the real cause. */
static herr_t walk_innermost(unsigned n, const H5E_error2_t *e, void *data) {
  struct innermost *w = data;
  if (n != 0 || !e->desc) return 0;
  if (w->with_func)
    snprintf(w->buf, w->n, "%s (in %s)", e->desc, e->func_name ? e->func_name : "?");
  else
    snprintf(w->buf, w->n, "%s", e->desc);
  w->found = 1;
  return 0;
}

const char *h5util_reason(char *buf, size_t n, int with_func) {
  struct innermost w = {buf, n, with_func, 0};
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_innermost, &w);
  if (!w.found) snprintf(buf, n, "HDF5 gave no reason");
  /* One line: some reasons (a failed write's) hold a newline from ctime(). */
  for (char *p = buf; *p; p++)
    if (*p == '\n') *p = ' ';
  return buf;
}
