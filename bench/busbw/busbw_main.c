/* busbw_main.c - main() of scdino_allreduce_perf, scdino_reducescatter_perf, scdino_allgather_perf
 * and scdino_broadcast_perf: one program whose name picks the collective.
 *
 *   mpirun -np 8 scdino_allreduce_perf -b 8 -e 256M -f 2        see -h for everything */
#include "build_config.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bench/busbw/busbw.h"
#include "bench/busbw/model_buckets.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "input/config.h"
#include "model/grad_comm.h"

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static SCD_NORETURN void usage_error(const char *prog, const char *msg) {
  if (comm_rank() == 0) {
    fprintf(stderr, "%s: error: %s\n\n", prog, msg);
    busbw_usage(stderr, prog);
  }
  comm_exit_all(SCD_EXIT_INPUT);
}

/* Pick the backend on every rank alike; note says why for the header. */
static const struct busbw_backend *choose_backend(const struct busbw_opts *o, const char *prog, char *note, size_t n) {
  note[0] = '\0';
  if (o->backend == BUSBW_BACKEND_MPI) return &busbw_backend_mpi;
#ifdef HAVE_NCCL
  char why[256] = "";
  int ok = busbw_nccl_usable(why, sizeof why), all_ok = 0;
  CHECK_MPI(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (all_ok) {
    /* One rank per GPU: NCCL would refuse two ranks on one GPU with a less helpful message. */
    const int size = comm_size();
    unsigned char(*ids)[16] = xmalloc(MUL_SIZE((size_t)size, sizeof *ids));
    unsigned char mine[16];
    busbw_nccl_uuid(mine);
    comm_allgather(mine, ids, sizeof mine);
    int a, b;
    const int shared = backend_shared_gpu((const unsigned char(*)[16])ids, size, &a, &b);
    free(ids);
    if (!shared) return &busbw_backend_nccl;
    if (o->backend == BUSBW_BACKEND_NCCL) {
      if (comm_rank() == 0)
        fprintf(stderr, "%s: error: -B nccl: ranks %d and %d use the same GPU; launch one rank per GPU\n", prog, a, b);
      comm_exit_all(SCD_EXIT_FAILURE);
    }
    snprintf(note, n, "-B auto chose mpi: ranks %d and %d share a GPU", a, b);
    return &busbw_backend_mpi;
  }
  if (o->backend == BUSBW_BACKEND_NCCL) {
    if (!ok) fprintf(stderr, "%s: error (rank %d): -B nccl: no usable GPU: %s\n", prog, comm_rank(), why);
    comm_exit_all(SCD_EXIT_FAILURE);
  }
  /* Rank 0's reason, or a pointer to the other ranks. */
  snprintf(note, n, "-B auto chose mpi: no usable GPU%s%s", ok ? " on some rank" : " (", ok ? "" : why);
  if (!ok) strncat(note, ")", n - strlen(note) - 1);
#else
  if (o->backend == BUSBW_BACKEND_NCCL)
    usage_error(prog, "-B nccl: this build has no NCCL backend (configure --with-cuda --with-nccl)");
  snprintf(note, n, "-B auto chose mpi: built without NCCL");
#endif
  return &busbw_backend_mpi;
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

/* --sizes-from-model: the all-reduce calls of one training step of the deck's model, and the
 * distinct sizes with how often each occurs. */
static void model_sizes(const struct busbw_opts *o, const char *prog, struct busbw_model *m, struct busbw_sizes *sz) {
  static struct config cfg;
  config_load(o->model_deck, &cfg); /* collective; a bad deck ends every rank with status 2 */
  if (o->in_chans) cfg.data.n_channels = o->in_chans;
  static size_t elems[BUSBW_MAX_BUCKETS];
  m->names = xcalloc(BUSBW_MAX_BUCKETS, sizeof *m->names); /* freed by main */
  int nb = bench_model_buckets(&cfg, elems, m->names, BUSBW_MAX_BUCKETS);
  char msg[1024];
  if (nb < 0) {
    snprintf(msg, sizeof msg, "%s: &data channels is empty (all channels of the shards), so the patch embedding's "
                              "size is unknown; give --in-chans N", o->model_deck);
    usage_error(prog, msg);
  }
  if (nb > BUSBW_MAX_BUCKETS) {
    snprintf(msg, sizeof msg, "%s: %d buckets, more than %d", o->model_deck, nb, BUSBW_MAX_BUCKETS);
    usage_error(prog, msg);
  }
  m->deck = o->model_deck;
  m->nbuckets = nb;
  m->elems = elems;

  size_t *sorted = xmalloc((size_t)nb * sizeof *sorted);
  memcpy(sorted, elems, (size_t)nb * sizeof *sorted);
  qsort(sorted, (size_t)nb, sizeof *sorted, cmp_size);
  sz->v = xmalloc((size_t)nb * sizeof *sz->v);
  sz->mult = xmalloc((size_t)nb * sizeof *sz->mult);
  sz->n = 0;
  sz->elements = 1;
  for (int i = 0; i < nb; i++) {
    if (sz->n && sz->v[sz->n - 1] == sorted[i]) {
      sz->mult[sz->n - 1]++;
    } else {
      sz->v[sz->n] = sorted[i];
      sz->mult[sz->n++] = 1;
    }
  }
  free(sorted);
}

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  log_init(comm_rank(), 1);
  const char *invoked = base_name(argv[0]);

  struct busbw_opts o;
  busbw_opts_default(&o, argv[0]);
  char err[512];
  if (busbw_parse(argc - 1, argv + 1, &o, err, sizeof err) != 0) usage_error(invoked, err);
  if (o.help) {
    if (comm_rank() == 0) busbw_usage(stdout, invoked);
    comm_exit_all(SCD_EXIT_OK);
  }
  const char *prog = busbw_coll_program(o.coll);
  const char *fault = getenv("SCDINO_BUSBW_INJECT_FAULT");
  if (fault && *fault && busbw_parse_fault(fault, &o.inject_rank, &o.inject_elem) != 0)
    usage_error(prog, "SCDINO_BUSBW_INJECT_FAULT must be RANK:ELEMENT");
  if (busbw_coll_has_root(o.coll) && o.root >= comm_size()) {
    snprintf(err, sizeof err, "-r %d: the root must be a rank, 0..%d", o.root, comm_size() - 1);
    usage_error(prog, err);
  }

  struct busbw_sizes sz;
  struct busbw_model model;
  memset(&sz, 0, sizeof sz);
  memset(&model, 0, sizeof model);
  if (o.model_deck) {
    model_sizes(&o, prog, &model, &sz);
  } else {
    sz.v = xmalloc(BUSBW_MAX_SIZES * sizeof *sz.v);
    sz.n = busbw_sweep_sizes(&o, sz.v, BUSBW_MAX_SIZES);
    if (sz.n < 0) {
      snprintf(err, sizeof err, "-b/-e/-f/-i give more than %d sizes; use -f or a larger -i", BUSBW_MAX_SIZES);
      usage_error(prog, err);
    }
  }

  char note[512];
  const struct busbw_backend *be = choose_backend(&o, prog, note, sizeof note);
#ifdef HAVE_NCCL
  grad_comm_nccl_set_timeout(o.timeout);
  if (be == &busbw_backend_nccl) busbw_nccl_init();
#endif
  int status = busbw_run(&o, be, prog, note, &sz, o.model_deck ? &model : NULL);
  be->finalize();
  free(sz.v);
  free(sz.mult);
  free(model.names);
  fflush(stdout);
  comm_finalize();
  return status;
}
