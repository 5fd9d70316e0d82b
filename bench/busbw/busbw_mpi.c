/* busbw_mpi.c - the MPI backend of the busbw benchmark: collectives on host memory, MPI_Wtime. */
#include "build_config.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/busbw/busbw.h"
#include "core/check.h"
#include "core/comm.h"

static char *sendbuf, *recvbuf;

/* ---- half and bfloat16: MPI has no such types, so user-defined operations on 16-bit words
 * compute in float and round back, as a GPU does. ---- */

#define DEF_OP16(name, dec, enc, expr)                                          \
  static void name(void *in, void *inout, int *len, MPI_Datatype *dt) {         \
    (void)dt;                                                                   \
    const uint16_t *a = in;                                                     \
    uint16_t *b = inout;                                                        \
    for (int i = 0; i < *len; i++) {                                            \
      float x = dec(a[i]), y = dec(b[i]);                                       \
      b[i] = enc(expr);                                                         \
    }                                                                           \
  }
DEF_OP16(bf16_sum, busbw_bf16_to_float, busbw_float_to_bf16, x + y)
DEF_OP16(bf16_prod, busbw_bf16_to_float, busbw_float_to_bf16, x * y)
DEF_OP16(bf16_max, busbw_bf16_to_float, busbw_float_to_bf16, x > y ? x : y)
DEF_OP16(bf16_min, busbw_bf16_to_float, busbw_float_to_bf16, x < y ? x : y)
DEF_OP16(half_sum, busbw_half_to_float, busbw_float_to_half, x + y)
DEF_OP16(half_prod, busbw_half_to_float, busbw_float_to_half, x * y)
DEF_OP16(half_max, busbw_half_to_float, busbw_float_to_half, x > y ? x : y)
DEF_OP16(half_min, busbw_half_to_float, busbw_float_to_half, x < y ? x : y)

static MPI_Op ops16[2][4]; /* [half, bfloat16][sum prod max min] */
static int ops16_made;

static void make_ops16(void) {
  MPI_User_function *fn[2][4] = {{half_sum, half_prod, half_max, half_min},
                                 {bf16_sum, bf16_prod, bf16_max, bf16_min}};
  for (int t = 0; t < 2; t++)
    for (int op = 0; op < 4; op++) CHECK_MPI(MPI_Op_create(fn[t][op], 1, &ops16[t][op]));
  ops16_made = 1;
}

static MPI_Datatype mpi_type(int t) {
  switch (t) {
  case BUSBW_INT8: return MPI_INT8_T;
  case BUSBW_UINT8: return MPI_UINT8_T;
  case BUSBW_INT32: return MPI_INT32_T;
  case BUSBW_UINT32: return MPI_UINT32_T;
  case BUSBW_INT64: return MPI_INT64_T;
  case BUSBW_UINT64: return MPI_UINT64_T;
  case BUSBW_FLOAT: return MPI_FLOAT;
  case BUSBW_DOUBLE: return MPI_DOUBLE;
  default: return MPI_UINT16_T; /* half, bfloat16: the bits travel as 16-bit words */
  }
}

static MPI_Op mpi_op(int type, int op) {
  int base = op == BUSBW_AVG ? BUSBW_SUM : op; /* avg = sum, then scale */
  if (type == BUSBW_HALF || type == BUSBW_BFLOAT16) {
    if (!ops16_made) make_ops16();
    return ops16[type == BUSBW_BFLOAT16][base];
  }
  static const MPI_Op ops[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return ops[base];
}

/* Divide a sum by the number of ranks: floats multiply by 1/n in their own precision, integers
 * truncate, as NCCL's ncclAvg does. */
static void scale_avg(int t, void *buf, size_t count, int n) {
  double inv = 1.0 / n;
  switch (t) {
  case BUSBW_FLOAT: {
    float *p = buf, s = (float)inv;
    for (size_t i = 0; i < count; i++) p[i] *= s;
    break;
  }
  case BUSBW_DOUBLE: {
    double *p = buf;
    for (size_t i = 0; i < count; i++) p[i] *= inv;
    break;
  }
  case BUSBW_HALF:
  case BUSBW_BFLOAT16: {
    uint16_t *p = buf;
    for (size_t i = 0; i < count; i++) {
      float x = t == BUSBW_HALF ? busbw_half_to_float(p[i]) : busbw_bf16_to_float(p[i]);
      p[i] = t == BUSBW_HALF ? busbw_float_to_half(x * (float)inv) : busbw_float_to_bf16(x * (float)inv);
    }
    break;
  }
#define DIV_LOOP(ctype, wide)                                                      \
  do {                                                                             \
    ctype *p = buf;                                                                \
    for (size_t i = 0; i < count; i++) p[i] = (ctype)((wide)p[i] / (wide)n);       \
  } while (0)
  case BUSBW_INT8: DIV_LOOP(int8_t, int64_t); break;
  case BUSBW_UINT8: DIV_LOOP(uint8_t, uint64_t); break;
  case BUSBW_INT32: DIV_LOOP(int32_t, int64_t); break;
  case BUSBW_UINT32: DIV_LOOP(uint32_t, uint64_t); break;
  case BUSBW_INT64: DIV_LOOP(int64_t, int64_t); break;
  default: DIV_LOOP(uint64_t, uint64_t); break;
#undef DIV_LOOP
  }
}

static void mpi_version(char *buf, size_t n) { snprintf(buf, n, "mpi-library=%s", comm_library_version()); }

static void mpi_device(char *buf, size_t n) {
  int cpu = sched_getcpu(); /* where the rank runs now; -1 if the kernel cannot say */
  if (cpu >= 0)
    snprintf(buf, n, "  - [host] CPU %d, MPI on host memory", cpu);
  else
    snprintf(buf, n, "  - [host] MPI on host memory");
}

static int mpi_supports_type(int type) { return type >= 0 && type < BUSBW_NTYPE; }

static void mpi_alloc(size_t send_bytes, size_t recv_bytes) {
  free(sendbuf);
  free(recvbuf);
  /* Zeroed, so every page is touched (and placed) before the first timing. */
  sendbuf = xaligned_alloc(send_bytes ? send_bytes : 1);
  recvbuf = xaligned_alloc(recv_bytes ? recv_bytes : 1);
}

static void run_once(const struct busbw_case *c, int inplace, const struct busbw_layout *l) {
  MPI_Datatype dt = mpi_type(c->type);
  int cnt = (int)c->count;
  switch (c->coll) {
  case BUSBW_ALL_REDUCE:
    CHECK_MPI(MPI_Allreduce(inplace ? MPI_IN_PLACE : sendbuf, recvbuf, cnt, dt, mpi_op(c->type, c->op), MPI_COMM_WORLD));
    break;
  case BUSBW_REDUCE_SCATTER:
    CHECK_MPI(MPI_Reduce_scatter_block(inplace ? MPI_IN_PLACE : sendbuf, recvbuf, cnt, dt, mpi_op(c->type, c->op),
                                       MPI_COMM_WORLD));
    break;
  case BUSBW_ALL_GATHER:
    CHECK_MPI(MPI_Allgather(inplace ? MPI_IN_PLACE : sendbuf, cnt, dt, recvbuf, cnt, dt, MPI_COMM_WORLD));
    break;
  default:
    /* Out-of-place: the root sends from its send buffer, the others receive into theirs. */
    CHECK_MPI(MPI_Bcast(!inplace && c->rank == c->root ? sendbuf : recvbuf, cnt, dt, c->root, MPI_COMM_WORLD));
    break;
  }
  if (c->op == BUSBW_AVG) scale_avg(c->type, recvbuf + l->out_off * busbw_type_size(c->type), l->out_count, c->nranks);
}

static void mpi_measure(const struct busbw_case *c, int inplace, const struct busbw_opts *o, struct busbw_result *res) {
  struct busbw_layout l;
  busbw_layout_of(c, inplace, 1, &l);
  size_t ts = busbw_type_size(c->type);
  char *bufs[2] = {sendbuf, recvbuf};
  char *in = l.in_buf >= 0 ? bufs[l.in_buf] + l.in_off * ts : NULL;
  char *out = bufs[l.out_buf] + l.out_off * ts;

  struct busbw_gen g = busbw_case_gen(c, 0);
  if (in) busbw_host_fill(&g, in, l.in_count);
  for (int w = 0; w < o->warmup; w++) run_once(c, inplace, &l);
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

  int prev_checked = 0;
  for (int it = 0; it < o->iters; it++) {
    int checked = busbw_is_checked(o, it);
    if (checked) {
      g = busbw_case_gen(c, (uint64_t)it + 1);
      if (l.poison_count) memset(recvbuf, 0xff, l.poison_count * ts);
      if (in) busbw_host_fill(&g, in, l.in_count);
    }
    /* Line the ranks up after untimed work (fills and checks take different times on different
     * ranks), so it does not show up as waiting inside the next timed call. */
    if (o->blocking || checked || prev_checked) CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = MPI_Wtime();
    run_once(c, inplace, &l);
    res->times[it] = MPI_Wtime() - t0;
    if (checked) {
      if (o->inject_rank == c->rank) busbw_host_inject(c->type, out, l.out_count, o->inject_elem);
      res->wrong[it] = busbw_host_verify(&g, out, l.out_count);
    } else {
      res->wrong[it] = UINT64_MAX;
    }
    prev_checked = checked;
  }
}

static void mpi_finalize(void) {
  free(sendbuf);
  free(recvbuf);
  sendbuf = recvbuf = NULL;
  if (ops16_made)
    for (int t = 0; t < 2; t++)
      for (int op = 0; op < 4; op++) CHECK_MPI(MPI_Op_free(&ops16[t][op]));
  ops16_made = 0;
}

const struct busbw_backend busbw_backend_mpi = {
    .name = "mpi",
    .mpi_layout = 1,
    .max_count = INT_MAX,
    .version = mpi_version,
    .device = mpi_device,
    .supports_type = mpi_supports_type,
    .alloc = mpi_alloc,
    .measure = mpi_measure,
    .finalize = mpi_finalize,
};
