/* busbw_run.c - the benchmark sweep: every type, op and size, times combined over ranks, the report. */
#include "build_config.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/busbw/busbw.h"
#include "core/check.h"
#include "core/comm.h"

/* Combine each iteration's time over ranks (-a) on rank 0, then mean, min and max over iterations. */
static void combine_times(const struct busbw_opts *o, const double *times, double *comb, struct busbw_cell *cell) {
  int n = comm_size(), rank = comm_rank();
  if (o->average == BUSBW_AVG_RANK0) {
    if (rank == 0) memcpy(comb, times, (size_t)o->iters * sizeof *comb);
  } else {
    MPI_Op op = o->average == BUSBW_AVG_MIN ? MPI_MIN : o->average == BUSBW_AVG_MAX ? MPI_MAX : MPI_SUM;
    CHECK_MPI(MPI_Reduce(times, comb, o->iters, MPI_DOUBLE, op, 0, MPI_COMM_WORLD));
  }
  if (rank != 0) return;
  double sum = 0, mn = 0, mx = 0;
  for (int it = 0; it < o->iters; it++) {
    double t = o->average == BUSBW_AVG_MEAN ? comb[it] / n : comb[it];
    sum += t;
    if (it == 0 || t < mn) mn = t;
    if (it == 0 || t > mx) mx = t;
  }
  cell->time_us = sum / o->iters * 1e6;
  cell->tmin_us = mn * 1e6;
  cell->tmax_us = mx * 1e6;
}

/* Sum wrong elements and wrong (rank, iteration) pairs over ranks onto rank 0. */
static uint64_t combine_wrong(const struct busbw_opts *o, const uint64_t *wrong, struct busbw_cell *cell) {
  uint64_t local[2] = {0, 0}, total[2] = {0, 0};
  for (int it = 0; it < o->iters; it++)
    if (wrong[it] != UINT64_MAX) {
      local[0] += wrong[it];
      local[1] += wrong[it] > 0;
    }
  CHECK_MPI(MPI_Reduce(local, total, 2, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
  cell->wrong = total[0];
  cell->checked = o->check > 0;
  return total[1];
}

/* "#  Rank  0 Group  0 Pid  1234 on   hostname device ..." of every rank, on rank 0. */
static char *gather_devices(const struct busbw_backend *be) {
  char host[256] = "unknown", dev[BUSBW_DEVLINE - 64], line[BUSBW_DEVLINE];
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = '\0';
  char *dot = strchr(host, '.');
  if (dot) *dot = '\0';
  be->device(dev, sizeof dev);
  memset(line, 0, sizeof line);
  snprintf(line, sizeof line, "#  Rank %2d Group  0 Pid %6d on %10.40s device%.150s", comm_rank(), (int)getpid(), host,
           dev);
  char *all = comm_rank() == 0 ? xmalloc((size_t)comm_size() * BUSBW_DEVLINE) : NULL;
  CHECK_MPI(MPI_Gather(line, BUSBW_DEVLINE, MPI_CHAR, all, BUSBW_DEVLINE, MPI_CHAR, 0, MPI_COMM_WORLD));
  return all;
}

static size_t case_bytes(const struct busbw_sizes *sz, int i, int type) {
  return sz->elements ? sz->v[i] * busbw_type_size(type) : sz->v[i];
}

/* Refuse what a backend cannot run before anything is allocated; same verdict on every rank. */
static int check_cases(const struct busbw_opts *o, const struct busbw_backend *be, const struct busbw_sizes *sz,
                       size_t *max_bytes) {
  int rank = comm_rank(), n = comm_size();
  *max_bytes = 0;
  for (int ti = 0; ti < o->ntypes; ti++) {
    int type = o->types[ti];
    if (!be->supports_type(type)) {
      if (rank == 0)
        fprintf(stderr, "%s: error: -d %s is not supported by the %s backend\n", busbw_coll_program(o->coll),
                busbw_type_name(type), be->name);
      return SCD_EXIT_INPUT;
    }
    for (int i = 0; i < sz->n; i++) {
      struct busbw_case c;
      busbw_case_make(&c, o->coll, type, o->ops[0], o->root, n, rank, case_bytes(sz, i, type));
      size_t most = c.send_count > c.recv_count ? c.send_count : c.recv_count;
      if (most > be->max_count) {
        if (rank == 0)
          fprintf(stderr, "%s: error: %zu bytes of %s are %zu elements per call, more than the %s backend takes (%zu); "
                          "use a smaller -e or a wider -d\n",
                  busbw_coll_program(o->coll), c.bytes, busbw_type_name(type), most, be->name, be->max_count);
        return SCD_EXIT_INPUT;
      }
      if (c.bytes > *max_bytes) *max_bytes = c.bytes;
    }
  }
  return 0;
}

int busbw_run(const struct busbw_opts *o, const struct busbw_backend *be, const char *prog, const char *backend_note,
              const struct busbw_sizes *sz, const struct busbw_model *model) {
  int rank = comm_rank(), n = comm_size();
  size_t max_bytes;
  int bad = check_cases(o, be, sz, &max_bytes);
  if (bad) return bad;
  be->alloc(max_bytes, max_bytes);

  struct busbw_table t;
  memset(&t, 0, sizeof t);
  t.o = o;
  t.prog = prog;
  t.backend = be->name;
  t.backend_note = backend_note;
  t.nranks = n;
  t.sizes = sz;
  t.model = model;
  be->version(t.version, sizeof t.version);
  char *devices = gather_devices(be);
  t.devices = devices;
  t.rows = xcalloc(MUL_SIZE(MUL_SIZE((size_t)o->ntypes, (size_t)o->nops), (size_t)sz->n), sizeof *t.rows);
  if (rank == 0) busbw_print_header(stdout, &t);

  struct busbw_result res;
  res.times = xmalloc((size_t)o->iters * sizeof *res.times);
  res.wrong = xmalloc((size_t)o->iters * sizeof *res.wrong);
  double *comb = xmalloc((size_t)o->iters * sizeof *comb);
  double factor = busbw_factor(o->coll, n);
  for (int ti = 0; ti < o->ntypes; ti++)
    for (int oi = 0; oi < o->nops; oi++)
      for (int i = 0; i < sz->n; i++) {
        struct busbw_case c;
        busbw_case_make(&c, o->coll, o->types[ti], o->ops[oi], o->root, n, rank, case_bytes(sz, i, o->types[ti]));
        struct busbw_row *row = &t.rows[t.nrows++];
        row->bytes = c.bytes;
        row->count = c.count;
        row->type = c.type;
        row->op = c.op;
        row->root = c.root;
        row->mult = sz->mult ? sz->mult[i] : 1;
        for (int ip = 0; ip < 2; ip++) {
          struct busbw_cell *cell = &row->cell[ip];
          be->measure(&c, ip, o, &res);
          combine_times(o, res.times, comb, cell);
          t.out_of_bounds += combine_wrong(o, res.wrong, cell);
          if (rank == 0 && cell->time_us > 0) {
            cell->algbw = (double)c.bytes / (cell->time_us * 1e-6) / 1e9;
            cell->busbw = cell->algbw * factor;
          }
        }
        if (rank == 0) busbw_print_row(stdout, row);
      }

  int status = 0;
  if (rank == 0) {
    int gate_failed = busbw_print_footer(stdout, &t);
    if (o->json) busbw_write_json(o->json, &t);
    status = t.out_of_bounds || gate_failed ? 7 : 0;
  }
  CHECK_MPI(MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD));
  free(comb);
  free(res.times);
  free(res.wrong);
  free(t.rows);
  free(devices);
  return status;
}
