/* busbw_coll.c - the collectives, types and ops of the busbw benchmark: names, counts, bus factors. */
#include "build_config.h"

#include <string.h>
#include <strings.h>

#include "bench/busbw/busbw.h"

static const char *const coll_names[BUSBW_NCOLL] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
static const char *const coll_programs[BUSBW_NCOLL] = {"scdino_allreduce_perf", "scdino_reducescatter_perf",
                                                       "scdino_allgather_perf", "scdino_broadcast_perf"};
static const char *const type_names[BUSBW_NTYPE] = {"int8",  "uint8", "int32",  "uint32", "int64",
                                                    "uint64", "half", "float", "double", "bfloat16"};
static const char *const op_names[BUSBW_NOP + 1] = {"sum", "prod", "max", "min", "avg", "none"};

const char *busbw_coll_name(int coll) { return coll >= 0 && coll < BUSBW_NCOLL ? coll_names[coll] : "?"; }
const char *busbw_coll_program(int coll) { return coll >= 0 && coll < BUSBW_NCOLL ? coll_programs[coll] : "?"; }

int busbw_coll_from_name(const char *s) {
  /* Accept nccl-tests' spelling, the MPI-ish one without underscore and our program names. */
  static const char *const alias[BUSBW_NCOLL] = {"allreduce", "reducescatter", "allgather", "bcast"};
  for (int c = 0; c < BUSBW_NCOLL; c++)
    if (!strcasecmp(s, coll_names[c]) || !strcasecmp(s, alias[c]) || !strcasecmp(s, coll_programs[c]))
      return c;
  return -1;
}

const char *busbw_type_name(int type) { return type >= 0 && type < BUSBW_NTYPE ? type_names[type] : "?"; }

int busbw_type_from_name(const char *s) {
  static const struct {
    const char *name;
    int type;
  } alias[] = {{"char", BUSBW_INT8},     {"int", BUSBW_INT32},   {"fp16", BUSBW_HALF},
               {"float16", BUSBW_HALF},  {"fp32", BUSBW_FLOAT},  {"float32", BUSBW_FLOAT},
               {"fp64", BUSBW_DOUBLE},   {"float64", BUSBW_DOUBLE}, {"bf16", BUSBW_BFLOAT16}};
  for (int t = 0; t < BUSBW_NTYPE; t++)
    if (!strcasecmp(s, type_names[t])) return t;
  for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
    if (!strcasecmp(s, alias[i].name)) return alias[i].type;
  return -1;
}

const char *busbw_op_name(int op) { return op >= 0 && op <= BUSBW_NOP ? op_names[op] : "?"; }

int busbw_op_from_name(const char *s) {
  for (int op = 0; op < BUSBW_NOP; op++)
    if (!strcasecmp(s, op_names[op])) return op;
  return -1;
}

int busbw_coll_has_op(int coll) { return coll == BUSBW_ALL_REDUCE || coll == BUSBW_REDUCE_SCATTER; }
int busbw_coll_has_root(int coll) { return coll == BUSBW_BROADCAST; }

double busbw_factor(int coll, int nranks) {
  double n = nranks;
  switch (coll) {
  case BUSBW_ALL_REDUCE: return 2.0 * (n - 1.0) / n; /* reduce-scatter then all-gather over n links */
  case BUSBW_REDUCE_SCATTER:
  case BUSBW_ALL_GATHER: return (n - 1.0) / n;       /* each rank receives n-1 of n blocks */
  default: return 1.0;                               /* the root's link carries everything */
  }
}

void busbw_case_make(struct busbw_case *c, int coll, int type, int op, int root, int nranks, int rank,
                     size_t size) {
  size_t ts = busbw_type_size(type), total = size / ts;
  memset(c, 0, sizeof *c);
  c->coll = coll;
  c->type = type;
  c->op = busbw_coll_has_op(coll) ? op : BUSBW_NOP;
  c->root = busbw_coll_has_root(coll) ? root : -1;
  c->nranks = nranks;
  c->rank = rank;
  if (coll == BUSBW_ALL_GATHER || coll == BUSBW_REDUCE_SCATTER) {
    /* Per-rank blocks rounded down to 16 bytes, as nccl-tests does, so the size column can be
     * a little below the requested size. */
    size_t align = ts < 16 ? 16 / ts : 1;
    size_t block = (total / (size_t)nranks) / align * align;
    c->count = block;
    c->send_count = coll == BUSBW_ALL_GATHER ? block : block * (size_t)nranks;
    c->recv_count = coll == BUSBW_ALL_GATHER ? block * (size_t)nranks : block;
    c->bytes = block * (size_t)nranks * ts;
  } else {
    c->count = c->send_count = c->recv_count = total;
    c->bytes = total * ts;
  }
}

struct busbw_gen busbw_case_gen(const struct busbw_case *c, uint64_t rep) {
  struct busbw_gen g;
  g.coll = c->coll;
  g.type = c->type;
  g.op = c->op;
  g.nranks = c->nranks;
  g.rank = c->rank;
  g.root = c->root < 0 ? 0 : c->root;
  g.rep = rep;
  g.block = c->count;
  return g;
}

void busbw_layout_of(const struct busbw_case *c, int inplace, int mpi, struct busbw_layout *l) {
  size_t blk = c->count;
  memset(l, 0, sizeof *l);
  l->in_buf = inplace ? 1 : 0;
  l->out_buf = 1;
  switch (c->coll) {
  case BUSBW_ALL_REDUCE:
    l->in_count = l->out_count = l->poison_count = c->count;
    break;
  case BUSBW_REDUCE_SCATTER:
    l->in_count = c->send_count; /* in-place: the whole array sits in the receive buffer */
    l->out_count = blk;
    /* NCCL leaves this rank's block where it was; MPI_IN_PLACE moves it to the start. */
    l->out_off = inplace && !mpi ? (size_t)c->rank * blk : 0;
    l->poison_count = inplace ? c->send_count : blk;
    break;
  case BUSBW_ALL_GATHER:
    l->in_off = inplace ? (size_t)c->rank * blk : 0;
    l->in_count = blk;
    l->out_count = l->poison_count = c->recv_count;
    break;
  default: /* broadcast */
    l->in_count = c->count;
    l->out_count = l->poison_count = c->count;
    if (c->rank != c->root) l->in_buf = -1;
    /* An out-of-place MPI_Bcast leaves the root's receive buffer alone: check its send buffer. */
    if (mpi && !inplace && c->rank == c->root) {
      l->out_buf = 0;
      l->poison_count = 0;
    }
    break;
  }
}

int busbw_is_checked(const struct busbw_opts *o, int it) { return o->check > 0 && it % o->check == 0; }
