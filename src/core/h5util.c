/* h5util.c - the HDF5 lock and the HDF5 helpers shared by the files scdino reads and writes. */
#include "build_config.h"

#include <pthread.h>
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

/* ---- writing ---- */

hid_t h5util_str_type(void) {
  hid_t t = (hid_t)CHECK_H5(H5Tcopy(H5T_C_S1));
  CHECK_H5(H5Tset_size(t, H5T_VARIABLE));
  CHECK_H5(H5Tset_cset(t, H5T_CSET_UTF8));
  return t;
}

void h5util_write_dset(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank, const hsize_t *dims,
                       const void *data) {
  hid_t sp = (hid_t)CHECK_H5(H5Screate_simple(rank, dims, NULL));
  hid_t d = (hid_t)CHECK_H5(H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  CHECK_H5(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  CHECK_H5(H5Dclose(d));
  CHECK_H5(H5Sclose(sp));
}

void h5util_write_strings(hid_t loc, const char *name, const char *const *s, hsize_t n) {
  hid_t t = h5util_str_type();
  h5util_write_dset(loc, name, t, t, 1, &n, s);
  CHECK_H5(H5Tclose(t));
}

void h5util_write_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *v) {
  hid_t sp = (hid_t)(n ? CHECK_H5(H5Screate_simple(1, &n, NULL)) : CHECK_H5(H5Screate(H5S_SCALAR)));
  hid_t a = (hid_t)CHECK_H5(H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT));
  CHECK_H5(H5Awrite(a, mtype, v));
  CHECK_H5(H5Aclose(a));
  CHECK_H5(H5Sclose(sp));
}

void h5util_write_attr_str(hid_t obj, const char *name, const char *v) {
  hid_t t = h5util_str_type();
  h5util_write_attr(obj, name, t, t, 0, &v);
  CHECK_H5(H5Tclose(t));
}

void h5util_write_attr_i64(hid_t obj, const char *name, int64_t v) {
  h5util_write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &v);
}

void h5util_write_attr_f64(hid_t obj, const char *name, double v) {
  h5util_write_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &v);
}
