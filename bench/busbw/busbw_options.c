/* busbw_options.c - command line of the busbw benchmark: nccl-tests' flags, sizes, usage text. */
#include "build_config.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench/busbw/busbw.h"

void busbw_usage(FILE *f, const char *prog) {
  fprintf(f,
    "NAME\n"
    "    %s - bus bandwidth of a collective (nccl-tests-compatible output)\n"
    "\n"
    "SYNOPSIS\n"
    "    mpirun -np N %s [-b SIZE] [-e SIZE] [-f FACTOR | -i STEP] [-n ITERS] [-w ITERS]\n"
    "        [-c EVERY] [-d TYPE] [-o OP] [-r ROOT] [-z 0|1] [-a 0|1|2|3] [-C COLL]\n"
    "        [-B auto|mpi|nccl] [--json FILE] [--sizes-from-model DECK [--in-chans N]]\n"
    "        [--min-busbw GBS] [--timeout SECONDS]\n"
    "\n"
    "DESCRIPTION\n"
    "    Runs one collective over all MPI ranks for a range of message sizes and prints, per size,\n"
    "    the time, the algorithm bandwidth and the bus bandwidth of an out-of-place and an in-place\n"
    "    call, in the table format of NVIDIA's nccl-tests, so existing parsers read it.  One rank per\n"
    "    GPU (NCCL backend) or per CPU process (MPI backend).  The collective comes from the program\n"
    "    name (scdino_allreduce_perf, scdino_reducescatter_perf, scdino_allgather_perf,\n"
    "    scdino_broadcast_perf) or from -C.\n"
    "\n"
    "    Every timed iteration is timed alone (MPI_Wtime on the host, CUDA events on the GPU); each\n"
    "    iteration's time is combined over ranks (the maximum by default: the collective is done when\n"
    "    the slowest rank is) and the table shows the mean over iterations.  Checked iterations are\n"
    "    timed iterations: their data is regenerated and verified outside the timed interval.\n"
    "\n"
    "    algbw = size / time and busbw = algbw * factor, in GB/s with 1 GB = 1e9 bytes; factor is\n"
    "    2(n-1)/n for all_reduce, (n-1)/n for reduce_scatter and all_gather (size = the whole\n"
    "    array, count = elements per rank), 1 for broadcast.  busbw is comparable with the\n"
    "    bandwidth of the slowest link (NVLink, PCIe, network, memory).\n"
    "\n"
    "OPTIONS\n"
    "    -b, --minbytes SIZE      smallest message (default 32M).  SIZE takes K, M, G, T suffixes,\n"
    "                             binary: 1K = 1024 bytes.\n"
    "    -e, --maxbytes SIZE      largest message (default 32M)\n"
    "    -f, --stepfactor N       multiply the size by N at each step (integer >= 2)\n"
    "    -i, --stepbytes SIZE     add SIZE at each step (default 1M; not together with -f)\n"
    "    -n, --iters N            timed iterations per size (default 20, at most %d)\n"
    "    -w, --warmup_iters N     untimed iterations before each size (default 5)\n"
    "    -c, --check N            verify every N-th timed iteration, out-of-place and in-place\n"
    "                             (default 1 = every one; 0 = off, #wrong shows N/A)\n"
    "    -d, --datatype TYPE      int8 uint8 int32 uint32 int64 uint64 half float double bfloat16,\n"
    "                             a comma-separated list, or all (default float).  half and\n"
    "                             bfloat16 use user-defined MPI operations on the MPI backend.\n"
    "    -o, --op OP              sum prod max min avg, a list, or all (default sum).  MPI has no\n"
    "                             avg: the MPI backend sums and scales, inside the timed interval.\n"
    "    -r, --root N             root rank of broadcast (default 0)\n"
    "    -z, --blocking 0|1       1: wait for completion and barrier after every iteration\n"
    "    -a, --average 0|1|2|3    combine each iteration's time over ranks: 0 rank 0, 1 mean,\n"
    "                             2 minimum, 3 maximum (default 3; nccl-tests' default is 1)\n"
    "    -C, --collective NAME    all_reduce, reduce_scatter, all_gather or broadcast\n"
    "    -B, --backend NAME       nccl (device buffers, one rank per GPU), mpi (host memory) or\n"
    "                             auto (default: nccl when every rank sees a GPU, else mpi)\n"
    "    -J, --json FILE          also write the results as JSON (rank 0, atomically)\n"
    "        --sizes-from-model DECK\n"
    "                             sweep the fp32 gradient all-reduce calls one training step of\n"
    "                             this input deck's &model makes (backward's ranges merged into\n"
    "                             buckets as the trainer merges them), instead of -b/-e/-f/-i\n"
    "        --in-chans N         image channels of the model (default: the deck's &data channels)\n"
    "        --min-busbw GBS      exit 7 when the peak bus bandwidth is below GBS\n"
    "        --timeout SECONDS    NCCL backend: a wait longer than this ends the run with an error\n"
    "                             (a dead or stalled rank, a hung network; default 600)\n"
    "    -g, --ngpus 1  -t, --nthreads 1  -m, --agg_iters 1\n"
    "                             accepted for nccl-tests scripts; only 1 is supported (one rank\n"
    "                             per GPU)\n"
    "    -h, --help               this text\n"
    "\n"
    "OUTPUT\n"
    "    '#' lines: version, parameters, one 'Using devices' line per rank, timing method and\n"
    "    units, the two-line column header.  One row per size: size (B), count (elements), type,\n"
    "    redop, root, then time (us), algbw (GB/s), busbw (GB/s), #wrong (wrong elements summed\n"
    "    over ranks and checked iterations) for out-of-place and in-place.  Footer: 'Out of bounds\n"
    "    values' (rank-iterations with wrong data), 'Avg bus bandwidth' (nccl-tests' mean over every\n"
    "    cell: depends on the size range), 'Peak bus bandwidth' (the largest busbw and its size),\n"
    "    'Busbw at max size' and, with --sizes-from-model, the all-reduce time of one training step.\n"
    "\n"
    "EXIT STATUS\n"
    "    0 success; 1 runtime failure (MPI, CUDA, NCCL); 2 bad arguments; 7 wrong data or peak\n"
    "    busbw below --min-busbw (as nccl-tests' testNumResults).\n"
    "\n"
    "EXAMPLES\n"
    "    mpirun -np 2 scdino_allreduce_perf -b 8 -e 256M -f 2\n"
    "    mpirun -np 8 scdino_allreduce_perf -B nccl -b 8 -e 16G -f 2 -c 1 -n 100\n"
    "    mpirun -np 8 scdino_allreduce_perf --sizes-from-model input/pbmc_vits16.nml\n",
    prog, prog, BUSBW_MAX_ITERS);
}

static int fail(char *err, size_t errn, const char *fmt, ...) SCD_PRINTF(3, 4);

static int fail(char *err, size_t errn, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errn, fmt, ap);
  va_end(ap);
  return -1;
}

int busbw_parse_size(const char *s, size_t *out) {
  if (!s || *s < '0' || *s > '9') return -1; /* no sign, no blanks (strtoull would take them) */
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  case 't': case 'T': shift = 40; end++; break;
  default: break;
  }
  if (*end != '\0') return -1;
  if (shift && v > (unsigned long long)(SIZE_MAX >> shift)) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  if (!s || !*s) return -1;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* A comma-separated list of names, or "all". */
static int parse_list(const char *s, int (*lookup)(const char *), int nall, int *out, int *n) {
  char buf[256];
  if (strlen(s) >= sizeof buf) return -1;
  if (!strcasecmp(s, "all")) {
    for (int i = 0; i < nall; i++) out[i] = i;
    *n = nall;
    return 0;
  }
  snprintf(buf, sizeof buf, "%s", s);
  *n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int v = lookup(tok);
    if (v < 0 || *n >= nall) return -1;
    for (int i = 0; i < *n; i++)
      if (out[i] == v) return -1; /* duplicate */
    out[(*n)++] = v;
  }
  return *n > 0 ? 0 : -1;
}

void busbw_opts_default(struct busbw_opts *o, const char *progname) {
  memset(o, 0, sizeof *o);
  const char *base = progname ? strrchr(progname, '/') : NULL;
  base = base ? base + 1 : (progname ? progname : "");
  o->coll = BUSBW_ALL_REDUCE;
  /* The program name picks the collective (all four programs are the same binary). */
  static const struct {
    const char *pat;
    int coll;
  } names[] = {{"reducescatter", BUSBW_REDUCE_SCATTER}, {"reduce_scatter", BUSBW_REDUCE_SCATTER},
               {"allgather", BUSBW_ALL_GATHER},         {"all_gather", BUSBW_ALL_GATHER},
               {"broadcast", BUSBW_BROADCAST},          {"bcast", BUSBW_BROADCAST}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strstr(base, names[i].pat)) {
      o->coll = names[i].coll;
      break;
    }
  o->backend = BUSBW_BACKEND_AUTO;
  o->min_bytes = o->max_bytes = (size_t)32 << 20;
  o->step_bytes = (size_t)1 << 20;
  o->step_factor = 1;
  o->iters = 20;
  o->warmup = 5;
  o->check = 1;
  o->types[0] = BUSBW_FLOAT;
  o->ntypes = 1;
  o->ops[0] = BUSBW_SUM;
  o->nops = 1;
  o->average = BUSBW_AVG_MAX;
  o->inject_rank = -1;
  o->timeout = 600.0;
}

/* Long names and the short letter they stand for. */
static const struct {
  const char *name;
  char letter;
} longopts[] = {
    {"minbytes", 'b'},     {"maxbytes", 'e'},        {"stepbytes", 'i'},   {"stepfactor", 'f'},
    {"iters", 'n'},        {"warmup_iters", 'w'},    {"check", 'c'},       {"datatype", 'd'},
    {"op", 'o'},           {"root", 'r'},            {"blocking", 'z'},    {"average", 'a'},
    {"collective", 'C'},   {"backend", 'B'},         {"json", 'J'},        {"output_file", 'J'},
    {"ngpus", 'g'},        {"nthreads", 't'},        {"agg_iters", 'm'},   {"help", 'h'},
    {"sizes-from-model", 'M'}, {"in-chans", 'I'},    {"min-busbw", 'W'},
    {"timeout", 'T'},
};

int busbw_parse(int argc, char **argv, struct busbw_opts *o, char *err, size_t errn) {
  int sweep_given = 0, factor_given = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *val = NULL;
    char letter = 0;
    char shown[64];
    if (a[0] == '-' && a[1] == '-' && a[2]) {
      const char *eq = strchr(a + 2, '=');
      size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
      for (size_t k = 0; k < sizeof longopts / sizeof longopts[0]; k++)
        if (strlen(longopts[k].name) == len && !strncmp(a + 2, longopts[k].name, len)) letter = longopts[k].letter;
      if (!letter) return fail(err, errn, "unknown option '%s'", a);
      snprintf(shown, sizeof shown, "--%.*s", (int)len, a + 2);
      if (eq) val = eq + 1;
    } else if (a[0] == '-' && a[1] && a[1] != '-' && strchr("beifnwcdorzaCBJgtmh", a[1])) {
      letter = a[1];
      snprintf(shown, sizeof shown, "-%c", letter);
      if (a[2]) val = a + 2;
    } else {
      return fail(err, errn, "unknown option or stray argument '%s'", a);
    }
    if (letter == 'h') {
      if (val) return fail(err, errn, "%s takes no value", shown);
      o->help = 1;
      continue;
    }
    if (!val) {
      if (i + 1 >= argc) return fail(err, errn, "%s needs a value", shown);
      val = argv[++i];
    }
    long v;
    size_t sz;
    switch (letter) {
    case 'b':
    case 'e':
    case 'i':
      if (busbw_parse_size(val, &sz) != 0)
        return fail(err, errn, "%s '%s': not a size (a number of bytes with an optional K, M, G or T suffix)",
                    shown, val);
      if (letter == 'b') o->min_bytes = sz;
      if (letter == 'e') o->max_bytes = sz;
      if (letter == 'i') {
        if (sz == 0) return fail(err, errn, "%s must be positive", shown);
        o->step_bytes = sz;
        o->step_given = 1;
      }
      sweep_given = 1;
      break;
    case 'f':
      if (parse_long(val, 1, 1L << 20, &v) != 0) return fail(err, errn, "%s '%s': not an integer factor >= 1", shown, val);
      o->step_factor = v;
      factor_given = v > 1;
      sweep_given = 1;
      break;
    case 'n':
      if (parse_long(val, 1, BUSBW_MAX_ITERS, &v) != 0)
        return fail(err, errn, "%s '%s': iterations must be 1..%d", shown, val, BUSBW_MAX_ITERS);
      o->iters = (int)v;
      break;
    case 'w':
      if (parse_long(val, 0, BUSBW_MAX_ITERS, &v) != 0)
        return fail(err, errn, "%s '%s': warm-up iterations must be 0..%d", shown, val, BUSBW_MAX_ITERS);
      o->warmup = (int)v;
      break;
    case 'c':
      if (parse_long(val, 0, INT_MAX, &v) != 0) return fail(err, errn, "%s '%s': not a count >= 0", shown, val);
      o->check = (int)v;
      break;
    case 'd':
      if (parse_list(val, busbw_type_from_name, BUSBW_NTYPE, o->types, &o->ntypes) != 0)
        return fail(err, errn, "%s '%s': unknown or repeated type (int8 uint8 int32 uint32 int64 uint64 half float double bfloat16, or all)",
                    shown, val);
      break;
    case 'o':
      if (parse_list(val, busbw_op_from_name, BUSBW_NOP, o->ops, &o->nops) != 0)
        return fail(err, errn, "%s '%s': unknown or repeated op (sum prod max min avg, or all)", shown, val);
      break;
    case 'r':
      if (parse_long(val, 0, INT_MAX, &v) != 0) return fail(err, errn, "%s '%s': not a rank", shown, val);
      o->root = (int)v;
      break;
    case 'z':
      if (parse_long(val, 0, 1, &v) != 0) return fail(err, errn, "%s '%s': must be 0 or 1", shown, val);
      o->blocking = (int)v;
      break;
    case 'a':
      if (parse_long(val, 0, 3, &v) != 0) return fail(err, errn, "%s '%s': must be 0, 1, 2 or 3", shown, val);
      o->average = (int)v;
      break;
    case 'C':
      o->coll = busbw_coll_from_name(val);
      if (o->coll < 0)
        return fail(err, errn, "%s '%s': unknown collective (all_reduce reduce_scatter all_gather broadcast)", shown, val);
      break;
    case 'B':
      if (!strcasecmp(val, "auto")) o->backend = BUSBW_BACKEND_AUTO;
      else if (!strcasecmp(val, "mpi")) o->backend = BUSBW_BACKEND_MPI;
      else if (!strcasecmp(val, "nccl")) o->backend = BUSBW_BACKEND_NCCL;
      else return fail(err, errn, "%s '%s': unknown backend (auto, mpi, nccl)", shown, val);
      break;
    case 'J':
      if (!*val) return fail(err, errn, "%s needs a file name", shown);
      o->json = val;
      break;
    case 'g':
    case 't':
    case 'm':
      if (parse_long(val, 1, 1, &v) != 0)
        return fail(err, errn, "%s '%s': only 1 is supported (launch one rank per GPU)", shown, val);
      break;
    case 'M':
      if (!*val) return fail(err, errn, "%s needs an input deck", shown);
      o->model_deck = val;
      break;
    case 'I':
      if (parse_long(val, 1, 1 << 20, &v) != 0) return fail(err, errn, "%s '%s': not a channel count", shown, val);
      o->in_chans = (int)v;
      break;
    case 'W': {
      char *end;
      errno = 0;
      double d = strtod(val, &end);
      if (errno || end == val || *end || !(d >= 0.0) || d > 1e12)
        return fail(err, errn, "%s '%s': not a bandwidth in GB/s", shown, val);
      o->min_busbw = d;
      break;
    }
    case 'T': {
      char *end;
      errno = 0;
      double d = strtod(val, &end);
      if (errno || end == val || *end || !(d > 0.0) || d > 1e9)
        return fail(err, errn, "%s '%s': not a positive number of seconds", shown, val);
      o->timeout = d;
      break;
    }
    default: return fail(err, errn, "unknown option '%s'", a);
    }
  }
  if (o->help) return 0;
  if (o->model_deck && sweep_given)
    return fail(err, errn, "--sizes-from-model replaces -b/-e/-f/-i; give one or the other");
  if (o->in_chans && !o->model_deck) return fail(err, errn, "--in-chans needs --sizes-from-model");
  if (factor_given && o->step_given)
    return fail(err, errn, "-f (step factor) and -i (step bytes) exclude each other");
  if (o->min_bytes > o->max_bytes)
    return fail(err, errn, "-b %zu is larger than -e %zu", o->min_bytes, o->max_bytes);
  if (!busbw_coll_has_op(o->coll)) { /* no reduction: one row per size and type */
    o->ops[0] = BUSBW_NOP;
    o->nops = 1;
  }
  return 0;
}

int busbw_sweep_sizes(const struct busbw_opts *o, size_t *sizes, int max) {
  int n = 0;
  size_t s = o->min_bytes;
  for (;;) {
    if (n >= max) return -1;
    sizes[n++] = s;
    size_t next;
    if (o->step_factor > 1) {
      if (s == 0)
        next = 1;
      else if (s > SIZE_MAX / (size_t)o->step_factor)
        break;
      else
        next = s * (size_t)o->step_factor;
    } else {
      if (s > SIZE_MAX - o->step_bytes) break;
      next = s + o->step_bytes;
    }
    if (next > o->max_bytes || next <= s) break;
    s = next;
  }
  return n;
}

int busbw_parse_fault(const char *s, int *rank, uint64_t *elem) {
  char *end;
  errno = 0;
  long r = strtol(s, &end, 10);
  if (errno || end == s || *end != ':' || r < 0 || r > INT_MAX) return -1;
  const char *e = end + 1;
  if (*e == '-' || *e == '\0') return -1;
  unsigned long long v = strtoull(e, &end, 10);
  if (errno || *end != '\0') return -1;
  *rank = (int)r;
  *elem = v;
  return 0;
}
