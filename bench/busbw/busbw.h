/* busbw.h - the busbw benchmark: options, table rows, the backend interface and the functions
 * shared by its files (busbw_*.c).  The program is an nccl-tests-compatible bus-bandwidth
 * benchmark (scdino_allreduce_perf and siblings) with an MPI and an NCCL backend. */
#ifndef SCDINO_BUSBW_H
#define SCDINO_BUSBW_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/busbw/busbw_data.h"
#include "core/check.h"

#define BUSBW_MAX_SIZES 4096   /* rows per table */
#define BUSBW_MAX_ITERS 100000 /* -n */
#define BUSBW_MAX_BUCKETS 1024 /* --sizes-from-model */

enum busbw_backend_id { BUSBW_BACKEND_AUTO, BUSBW_BACKEND_MPI, BUSBW_BACKEND_NCCL };
enum busbw_avg { BUSBW_AVG_RANK0, BUSBW_AVG_MEAN, BUSBW_AVG_MIN, BUSBW_AVG_MAX };

/* The command line, after parsing (busbw_options.c). */
struct busbw_opts {
  int coll;                 /* enum busbw_coll */
  int backend;              /* enum busbw_backend_id */
  size_t min_bytes, max_bytes, step_bytes;
  long step_factor;         /* > 1: multiply; else add step_bytes */
  int step_given;           /* -i was given */
  int iters, warmup;
  int check;                /* verify every check-th timed iteration; 0 = off */
  int types[BUSBW_NTYPE], ntypes;
  int ops[BUSBW_NOP], nops;
  int blocking;             /* -z 1: wait and barrier after every iteration */
  int average;              /* enum busbw_avg */
  int root;
  double min_busbw;         /* --min-busbw: fail when the peak busbw is lower; 0 = off */
  double timeout;           /* --timeout: seconds an NCCL wait may last (default 600) */
  const char *json;         /* --json FILE */
  const char *model_deck;   /* --sizes-from-model DECK */
  int in_chans;             /* --in-chans: overrides the deck's channel count */
  int help;
  /* Hidden fault injection (SCDINO_BUSBW_INJECT_FAULT=rank:elem), for the tests. */
  int inject_rank;          /* -1 = off */
  uint64_t inject_elem;
};

/* One table row: a collective at one size, type and op. */
struct busbw_case {
  int coll, type, op, root;
  int nranks, rank;
  size_t count;      /* the count column: elements per rank (nccl-tests' convention) */
  size_t bytes;      /* the size column: bytes of the largest buffer (the whole array) */
  size_t send_count; /* elements in this rank's send buffer */
  size_t recv_count; /* elements in this rank's receive buffer */
};

/* Where a backend's input and result live, in elements of its send (0) and receive (1) buffers.
 * Before a checked iteration the first poison_count elements of the receive buffer are set to
 * 0xFF.. (NaN or -1) and then the input is written, so a call that does nothing cannot pass. */
struct busbw_layout {
  int in_buf; /* -1: this rank has no input (broadcast, not the root) */
  size_t in_off, in_count;
  int out_buf;
  size_t out_off, out_count;
  size_t poison_count;
};

/* Per-rank measurement of one case and placement (in-place or out-of-place). */
struct busbw_result {
  double *times;   /* [iters] seconds of each timed iteration on this rank */
  uint64_t *wrong; /* [iters] wrong elements of each checked iteration; UINT64_MAX if unchecked */
};

/* A backend runs the collective on its own buffers (busbw_mpi.c, busbw_nccl.c). */
struct busbw_backend {
  const char *name;
  int mpi_layout;   /* MPI's in-place conventions (busbw_layout_of) */
  size_t max_count; /* largest element count one call takes */
  /* Library versions for the header, e.g. "Open MPI v4.1.4" or "nccl-headers=22809 ...". */
  void (*version)(char *buf, size_t n);
  /* This rank's "Using devices" entry after "device": e.g. " 0 [0000:18:00] NVIDIA H100". */
  void (*device)(char *buf, size_t n);
  int (*supports_type)(int type);
  /* Buffers for the largest case (bytes). */
  void (*alloc)(size_t send_bytes, size_t recv_bytes);
  /* Warm up, then run and time o->iters iterations, checking every o->check-th. */
  void (*measure)(const struct busbw_case *c, int inplace, const struct busbw_opts *o,
                  struct busbw_result *res);
  void (*finalize)(void);
};

extern const struct busbw_backend busbw_backend_mpi;
#ifdef HAVE_NCCL
extern const struct busbw_backend busbw_backend_nccl;
/* Whether this rank has a GPU of its own (and picks it); if not, why (for the header). */
int busbw_nccl_usable(char *why, size_t n);
/* The UUID of the GPU busbw_nccl_usable() chose. */
void busbw_nccl_uuid(unsigned char uuid[16]);
/* Create the communicator on the local GPU (collective over MPI_COMM_WORLD). */
void busbw_nccl_init(void);
#endif

/* ---- busbw_options.c ---- */
/* Parse argv (without argv[0]) into o.  Returns 0, or -1 with a message in err. */
int busbw_parse(int argc, char **argv, struct busbw_opts *o, char *err, size_t errn);
/* Defaults, with the collective chosen by the program name (argv[0]). */
void busbw_opts_default(struct busbw_opts *o, const char *progname);
/* "8", "64K", "1M", "2G" (binary suffixes).  Returns 0 or -1. */
int busbw_parse_size(const char *s, size_t *out);
/* The sizes of a -b/-e/-f/-i sweep (at most max).  Returns the count. */
int busbw_sweep_sizes(const struct busbw_opts *o, size_t *sizes, int max);
void busbw_usage(FILE *f, const char *prog);
/* SCDINO_BUSBW_INJECT_FAULT=rank:elem; returns -1 if the value is malformed. */
int busbw_parse_fault(const char *s, int *rank, uint64_t *elem);

/* ---- busbw_coll.c ---- */
const char *busbw_coll_name(int coll);        /* "all_reduce" */
const char *busbw_coll_program(int coll);     /* "scdino_allreduce_perf" */
int busbw_coll_from_name(const char *s);      /* "all_reduce", "allreduce", ...; -1 if unknown */
const char *busbw_type_name(int type);        /* nccl-tests spelling: "float", "bfloat16" */
int busbw_type_from_name(const char *s);      /* also "fp32", "int", "half", ...; -1 if unknown */
const char *busbw_op_name(int op);            /* "sum" ... "none" */
int busbw_op_from_name(const char *s);
int busbw_coll_has_op(int coll);
int busbw_coll_has_root(int coll);
/* busbw = algbw * factor: 2(n-1)/n, (n-1)/n, (n-1)/n, 1. */
double busbw_factor(int coll, int nranks);
/* Counts of a case from the requested size, as nccl-tests does. */
void busbw_case_make(struct busbw_case *c, int coll, int type, int op, int root, int nranks, int rank,
                     size_t size);
/* Generator state of a case for one repetition. */
struct busbw_gen busbw_case_gen(const struct busbw_case *c, uint64_t rep);
/* Buffer layout of a case; mpi selects MPI's in-place conventions over NCCL's. */
void busbw_layout_of(const struct busbw_case *c, int inplace, int mpi, struct busbw_layout *l);
/* Is timed iteration it checked? */
int busbw_is_checked(const struct busbw_opts *o, int it);

/* ---- busbw_run.c: the sweep ---- */
/* The message sizes: bytes of a -b/-e sweep, or element counts of the model's buckets. */
struct busbw_sizes {
  size_t *v;
  int *mult; /* how often the trainer issues each size per step (model), else 1 */
  int n;
  int elements;
};
/* Buckets of --sizes-from-model, for the header (rank 0). */
struct busbw_model {
  const char *deck;
  int nbuckets;
  size_t *elems;
  char (*names)[48];
};
/* Run every type, op and size; print the table on rank 0.  Returns the exit status. */
int busbw_run(const struct busbw_opts *o, const struct busbw_backend *be, const char *prog,
              const char *backend_note, const struct busbw_sizes *sz, const struct busbw_model *model);

/* ---- busbw_output.c: the nccl-tests table, footer and JSON ---- */
struct busbw_cell {
  double time_us, tmin_us, tmax_us; /* mean, fastest and slowest iteration (combined over ranks) */
  double algbw, busbw;              /* GB/s */
  uint64_t wrong;                   /* wrong elements, all ranks and checked iterations */
  int checked;
};
struct busbw_row {
  size_t bytes, count;
  int type, op, root, mult;
  struct busbw_cell cell[2]; /* out-of-place, in-place */
};
#define BUSBW_DEVLINE 256
struct busbw_table {
  const struct busbw_opts *o;
  const char *prog, *backend, *backend_note;
  char version[512];
  int nranks;
  const char *devices; /* nranks lines of BUSBW_DEVLINE chars */
  const struct busbw_sizes *sizes;
  const struct busbw_model *model;
  struct busbw_row *rows;
  int nrows;
  uint64_t out_of_bounds; /* (rank, checked iteration) pairs with wrong data */
};
/* Format v into at most width characters: 2 decimals if they fit, fewer, then exponent form. */
const char *busbw_fmt(char *buf, size_t n, double v, int width);
void busbw_print_header(FILE *f, const struct busbw_table *t);
void busbw_print_row(FILE *f, const struct busbw_row *r);
/* Footer; returns nonzero when the --min-busbw gate failed. */
int busbw_print_footer(FILE *f, const struct busbw_table *t);
void busbw_write_json(const char *path, const struct busbw_table *t);

/* ---- busbw_check.c: host-side data and checks (MPI backend, unit tests) ---- */
/* buf[0..count) = input values of this rank. */
void busbw_host_fill(const struct busbw_gen *g, void *buf, size_t count);
/* Number of elements of buf[0..count) that differ from the expected result. */
uint64_t busbw_host_verify(const struct busbw_gen *g, const void *buf, size_t count);
/* Overwrite element elem (if < count) with the 0xFF.. poison pattern. */
void busbw_host_inject(int type, void *buf, size_t count, uint64_t elem);

#endif
