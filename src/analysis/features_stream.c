/* features_stream.c - calculation='features' written while it is computed: rank 0 writes every
 * rank's rows into the features file (under a temporary name until it is complete) as batches
 * arrive, so no rank holds more than two batches of rows, whatever the number of images
 * (features.h, features_stream_*). */
#include "build_config.h"

#include <hdf5.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "analysis/features_io.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/fsutil.h"
#include "core/h5util.h"

#define STREAM_TAG 7101 /* the row messages (a header of the first row, then the rows) */

struct features_stream {
  int rank, size, D;
  int64_t n;
  size_t row_bytes, msg_cap; /* bytes of one row, of the largest message */
  /* rank 0: the file, one message buffer, the messages still to come */
  char path[4096], tmp[4096];
  hid_t file, dset;
  char *rbuf;
  int64_t pending;
  /* ranks > 0: two message buffers, each in flight until rank 0 has it */
  char *sbuf[2];
  MPI_Request req[2];
  int next;
};

/* Rows [row0, row0 + cnt) of the features dataset written from rows, or read into them (rank 0). */
static void rows_io(struct features_stream *s, int64_t row0, int64_t cnt, float *rows, int write) {
  if (cnt <= 0) return;
  SCD_ASSERT(row0 >= 0 && row0 + cnt <= s->n);
  hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)cnt, (hsize_t)s->D};
  h5util_lock();
  hid_t fsp = (hid_t)CHECK_H5(H5Dget_space(s->dset));
  CHECK_H5(H5Sselect_hyperslab(fsp, H5S_SELECT_SET, start, NULL, count, NULL));
  hid_t msp = (hid_t)CHECK_H5(H5Screate_simple(2, count, NULL));
  if (write)
    CHECK_H5(H5Dwrite(s->dset, H5T_NATIVE_FLOAT, msp, fsp, H5P_DEFAULT, rows));
  else
    CHECK_H5(H5Dread(s->dset, H5T_NATIVE_FLOAT, msp, fsp, H5P_DEFAULT, rows));
  CHECK_H5(H5Sclose(msp));
  CHECK_H5(H5Sclose(fsp));
  h5util_unlock();
}

struct features_stream *features_stream_open(const char *path, int64_t n, int D, int batch) {
  SCD_ASSERT(n >= 1 && D >= 1 && batch >= 1);
  struct features_stream *s = xcalloc(1, sizeof *s);
  s->rank = comm_rank();
  s->size = comm_size();
  s->D = D;
  s->n = n;
  s->row_bytes = (size_t)D * sizeof(float);
  s->msg_cap = sizeof(int64_t) + MUL_SIZE((size_t)batch, s->row_bytes);
  if (s->msg_cap > INT32_MAX)
    scd_fatal(SCD_EXIT_INPUT, "features.batch_size = %d: a batch of %d-d rows is too large to send", batch, D);
  s->req[0] = s->req[1] = MPI_REQUEST_NULL;
  if (s->rank == 0) {
    snprintf(s->path, sizeof s->path, "%s", path);
    fs_atomic_begin(path, s->tmp, sizeof s->tmp);
    hsize_t dims[2] = {(hsize_t)n, (hsize_t)D}, maxdims[2] = {H5S_UNLIMITED, (hsize_t)D};
    h5util_lock();
    s->file = h5util_file_create(s->tmp, H5P_DEFAULT);
    hid_t sp = (hid_t)CHECK_H5(H5Screate_simple(2, dims, maxdims));
    hid_t dcpl = h5util_dcpl_untimed();
    h5util_dcpl_checksum(dcpl, 2, dims, sizeof(float));
    CHECK_H5(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    s->dset = (hid_t)CHECK_H5(H5Dcreate2(s->file, "features", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    CHECK_H5(H5Pclose(dcpl));
    CHECK_H5(H5Sclose(sp));
    h5util_unlock();
    s->rbuf = xmalloc(s->msg_cap);
    /* one message per batch of every other rank's share (features_share_lo) */
    for (int r = 1; r < s->size; r++) {
      const int64_t mine = features_share_lo(n, batch, r + 1, s->size) - features_share_lo(n, batch, r, s->size);
      s->pending += (mine + batch - 1) / batch;
    }
  } else {
    s->sbuf[0] = xmalloc(s->msg_cap);
    s->sbuf[1] = xmalloc(s->msg_cap);
  }
  return s;
}

/* Rank 0: take one message (blocking) and write its rows. */
static void receive_one(struct features_stream *s) {
  MPI_Status st;
  CHECK_MPI(MPI_Recv(s->rbuf, (int)s->msg_cap, MPI_BYTE, MPI_ANY_SOURCE, STREAM_TAG, comm_mpi(), &st));
  int bytes = 0;
  CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &bytes));
  SCD_ASSERT(bytes >= (int)sizeof(int64_t) && ((size_t)bytes - sizeof(int64_t)) % s->row_bytes == 0);
  int64_t row0;
  memcpy(&row0, s->rbuf, sizeof row0);
  const int64_t cnt = (int64_t)(((size_t)bytes - sizeof(int64_t)) / s->row_bytes);
  rows_io(s, row0, cnt, (float *)(s->rbuf + sizeof(int64_t)), 1);
  s->pending--;
}

void features_stream_poll(struct features_stream *s) {
  if (s->rank != 0) return;
  while (s->pending > 0) {
    int flag = 0;
    CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, STREAM_TAG, comm_mpi(), &flag, MPI_STATUS_IGNORE));
    if (!flag) return;
    receive_one(s);
  }
}

void features_stream_rows(struct features_stream *s, int64_t row0, int64_t cnt, const float *rows) {
  if (cnt <= 0) return;
  if (s->rank == 0) {
    rows_io(s, row0, cnt, (float *)rows, 1); /* H5Dwrite reads it only */
    features_stream_poll(s);
    return;
  }
  const size_t bytes = sizeof(int64_t) + (size_t)cnt * s->row_bytes;
  SCD_ASSERT(bytes <= s->msg_cap);
  const int k = s->next;
  s->next ^= 1;
  CHECK_MPI(MPI_Wait(&s->req[k], MPI_STATUS_IGNORE)); /* rank 0 has the batch before last */
  memcpy(s->sbuf[k], &row0, sizeof row0);
  memcpy(s->sbuf[k] + sizeof row0, rows, (size_t)cnt * s->row_bytes);
  CHECK_MPI(MPI_Isend(s->sbuf[k], (int)bytes, MPI_BYTE, 0, STREAM_TAG, comm_mpi(), &s->req[k]));
}

void features_stream_drain(struct features_stream *s) {
  if (s->rank == 0)
    while (s->pending > 0) receive_one(s);
  else
    CHECK_MPI(MPI_Waitall(2, s->req, MPI_STATUSES_IGNORE));
}

/* Move the kept rows (keep[i] != 0) to the front, in order, and cut the dataset to them. */
static void compact(struct features_stream *s, const unsigned char *keep, int64_t m) {
  if (m == s->n) return;
  const int64_t block = 4096;
  float *buf = xmalloc(MUL_SIZE((size_t)block, s->row_bytes));
  int64_t out = 0;
  for (int64_t i0 = 0; i0 < s->n; i0 += block) {
    const int64_t cnt = s->n - i0 < block ? s->n - i0 : block;
    rows_io(s, i0, cnt, buf, 0);
    int64_t kept = 0;
    for (int64_t i = 0; i < cnt; i++)
      if (keep[i0 + i]) {
        if (kept != i) memmove(buf + (size_t)kept * s->D, buf + (size_t)i * s->D, s->row_bytes);
        kept++;
      }
    /* out <= i0: the rows written never reach rows not yet read */
    rows_io(s, out, kept, buf, 1);
    out += kept;
  }
  SCD_ASSERT(out == m);
  free(buf);
  hsize_t dims[2] = {(hsize_t)m, (hsize_t)s->D};
  h5util_lock();
  CHECK_H5(H5Dset_extent(s->dset, dims));
  h5util_unlock();
}

void features_stream_close(struct features_stream *s, const struct features *meta, const unsigned char *keep) {
  features_stream_drain(s);
  if (s->rank == 0) {
    SCD_ASSERT(meta && meta->n >= 1 && meta->n <= s->n && meta->d == s->D);
    compact(s, keep, meta->n);
    h5util_lock();
    features_write_meta(s->file, meta);
    CHECK_H5(H5Dclose(s->dset));
    CHECK_H5(H5Fclose(s->file));
    h5util_unlock();
    fs_atomic_commit(s->tmp, s->path);
    free(s->rbuf);
  } else {
    free(s->sbuf[0]);
    free(s->sbuf[1]);
  }
  free(s);
}
