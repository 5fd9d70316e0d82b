/* busbw_output.c - the busbw report: nccl-tests' header, table and footer, our headline lines, JSON. */
#include "build_config.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "bench/bench_result.h"
#include "bench/busbw/busbw.h"
#include "core/check.h"
#include "core/fsutil.h"

/* Column widths of nccl-tests' table: the row preamble, then each of the two cells. */
#define PRE_W 52  /* "%12s  %12s  %8s  %6s  %6s" */
#define CELL_W 33 /* "  %7s  %6s  %6s  %6s" */

const char *busbw_fmt(char *buf, size_t n, double v, int width) {
  static const char *const fixed[] = {"%.2f", "%.1f", "%.0f"};
  for (int i = 0; i < 3; i++) {
    int len = snprintf(buf, n, fixed[i], v);
    if (len > 0 && len <= width) return buf;
  }
  int len = snprintf(buf, n, "%.1e", v);
  if (len > width) snprintf(buf, n, "%.0e", v);
  return buf;
}

static const char *avg_name(int a) {
  static const char *const names[] = {"rank 0's time (-a 0)", "MEAN over ranks (-a 1)", "MIN over ranks (-a 2)",
                                      "MAX over ranks (-a 3)"};
  return a >= 0 && a <= 3 ? names[a] : "?";
}

/* Print a header line without its trailing blanks. */
static void put_trimmed(FILE *f, char *line) {
  size_t n = strlen(line);
  while (n > 0 && line[n - 1] == ' ') line[--n] = '\0';
  fprintf(f, "%s\n", line);
}

static void print_column_header(FILE *f) {
  char line[PRE_W + 2 * CELL_W + 8];
  memset(line, ' ', sizeof line - 1);
  line[sizeof line - 1] = '\0';
  line[0] = '#';
  memcpy(line + PRE_W + (CELL_W - 12) / 2 + 1, "out-of-place", 12);
  memcpy(line + PRE_W + CELL_W + (CELL_W - 8) / 2 + 1, "in-place", 8);
  fprintf(f, "#\n");
  put_trimmed(f, line);
  static const char *const names[2][9] = {
      {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"},
      {"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""}};
  for (int l = 0; l < 2; l++) {
    const char *const *w = names[l];
    snprintf(line, sizeof line, "#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s", w[0], w[1], w[2],
             w[3], w[4], w[5], w[6], w[7], w[8], w[5], w[6], w[7], w[8]);
    put_trimmed(f, line);
  }
}

/* The size range asked for; for model buckets the range swept (in the first type). */
static void size_range(const struct busbw_table *t, size_t *minb, size_t *maxb) {
  *minb = t->o->min_bytes;
  *maxb = t->o->max_bytes;
  if (t->sizes->elements && t->sizes->n > 0) {
    size_t ts = busbw_type_size(t->o->types[0]);
    *minb = t->sizes->v[0] * ts;
    *maxb = t->sizes->v[t->sizes->n - 1] * ts;
  }
}

void busbw_print_header(FILE *f, const struct busbw_table *t) {
  const struct busbw_opts *o = t->o;
  fprintf(f, "# %s version %s (scdino, nccl-tests table format) %s\n", t->prog, PACKAGE_VERSION, t->version);
  fprintf(f, "# Collective test starting: %s\n", t->prog);
  size_t minb, maxb;
  size_range(t, &minb, &maxb);
  if (t->sizes->elements)
    fprintf(f, "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %d(buckets)", minb, maxb, t->sizes->n);
  else if (o->step_factor > 1)
    fprintf(f, "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %ld(factor)", minb, maxb, o->step_factor);
  else
    fprintf(f, "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(bytes)", minb, maxb, o->step_bytes);
  fprintf(f, " warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n", o->warmup, o->iters, o->check);
  fprintf(f, "#\n# Using devices\n");
  for (int r = 0; r < t->nranks; r++) fprintf(f, "%s\n", t->devices + (size_t)r * BUSBW_DEVLINE);
  fprintf(f, "#\n# Backend: %s, %d rank%s%s%s\n", t->backend, t->nranks, t->nranks > 1 ? "s" : "",
          t->backend_note && *t->backend_note ? "; " : "", t->backend_note ? t->backend_note : "");
  fprintf(f, "# Timing: each timed iteration alone (%s); per iteration the %s, then the mean over %d iterations\n",
          !strcmp(t->backend, "nccl") ? "CUDA events around the call" : "MPI_Wtime around the call",
          avg_name(o->average), o->iters);
  if (o->blocking) fprintf(f, "# Blocking Enabled: wait for completion and barrier after each iteration\n");
  if (o->check)
    fprintf(f, "# Check: every %d%s timed iteration, fresh data, exact (avg: within (n+1) epsilon), outside the timed interval\n",
            o->check, o->check == 1 ? "st" : "th");
  else
    fprintf(f, "# Check: off (-c 0)\n");
  fprintf(f, "# Units: size in bytes (-b/-e/-i suffixes K M G = 2^10 2^20 2^30); time in microseconds;\n"
             "#        algbw = size/time, busbw = algbw * %s, in GB/s with 1 GB = 1e9 bytes\n",
          t->o->coll == BUSBW_ALL_REDUCE ? "2(n-1)/n"
          : t->o->coll == BUSBW_BROADCAST ? "1"
                                          : "(n-1)/n (size = whole array, count = elements per rank)");
  if (t->model) {
    fprintf(f, "# Model: %d gradient buckets of %s, in the order backward issues them:\n", t->model->nbuckets, t->model->deck);
    for (int i = 0; i < t->model->nbuckets; i++)
      fprintf(f, "#   %-34s %12zu elements\n", t->model->names[i], t->model->elems[i]);
  }
  print_column_header(f);
  fflush(f);
}

static void print_cell(FILE *f, const struct busbw_cell *c) {
  char tb[32], ab[32], bb[32], wb[32];
  busbw_fmt(tb, sizeof tb, c->time_us, 7);
  busbw_fmt(ab, sizeof ab, c->algbw, 6);
  busbw_fmt(bb, sizeof bb, c->busbw, 6);
  if (c->checked)
    snprintf(wb, sizeof wb, "%llu", (unsigned long long)c->wrong);
  else
    snprintf(wb, sizeof wb, "N/A");
  fprintf(f, "  %7s  %6s  %6s  %6s", tb, ab, bb, wb);
}

void busbw_print_row(FILE *f, const struct busbw_row *r) {
  fprintf(f, "%12zu  %12zu  %8s  %6s  %6d", r->bytes, r->count, busbw_type_name(r->type), busbw_op_name(r->op), r->root);
  print_cell(f, &r->cell[0]);
  print_cell(f, &r->cell[1]);
  fprintf(f, "\n");
  fflush(f);
}

/* Headline numbers: nccl-tests' average, the peak, the largest size, the model's step. */
struct headline {
  double avg, peak, max_oop, max_ip;
  size_t peak_bytes, max_bytes;
  int peak_cell;
  double min_us; /* fastest cell at the smallest size: the latency floor (1 rank: launch cost) */
  size_t min_bytes;
  double step_us, step_busbw, step_bytes;
  int nbuckets;
};

static void headline_of(const struct busbw_table *t, struct headline *h) {
  memset(h, 0, sizeof *h);
  double sum = 0;
  int n = 0;
  for (int i = 0; i < t->nrows; i++) {
    const struct busbw_row *r = &t->rows[i];
    for (int c = 0; c < 2; c++) {
      sum += r->cell[c].busbw;
      n++;
      if (r->cell[c].busbw > h->peak || (n == 1)) {
        h->peak = r->cell[c].busbw;
        h->peak_bytes = r->bytes;
        h->peak_cell = c;
      }
    }
    if (i == 0 || r->bytes < h->min_bytes) {
      h->min_bytes = r->bytes;
      h->min_us = fmin(r->cell[0].time_us, r->cell[1].time_us);
    }
    if (r->bytes >= h->max_bytes) {
      h->max_bytes = r->bytes;
      h->max_oop = r->cell[0].busbw;
      h->max_ip = r->cell[1].busbw;
    }
  }
  h->avg = n ? sum / n : 0.0;
  if (t->sizes->elements) {
    /* One step issues every bucket once: in-place (gradients are reduced where they are), and
     * only the first type and op's rows describe the trainer's fp32 sum. */
    double tsum = 0, bsum = 0;
    for (int i = 0; i < t->sizes->n && i < t->nrows; i++) {
      const struct busbw_row *r = &t->rows[i];
      tsum += r->mult * r->cell[1].time_us;
      bsum += r->mult * (double)r->bytes * busbw_factor(t->o->coll, t->nranks);
      h->nbuckets += r->mult;
      h->step_bytes += r->mult * (double)r->bytes;
    }
    h->step_us = tsum;
    h->step_busbw = tsum > 0 ? bsum / (tsum * 1e-6) / 1e9 : 0.0;
  }
}

int busbw_print_footer(FILE *f, const struct busbw_table *t) {
  struct headline h;
  headline_of(t, &h);
  int gate_failed = t->o->min_busbw > 0 && h.peak < t->o->min_busbw;
  fprintf(f, "# %-20s : %llu %s\n", "Out of bounds values", (unsigned long long)t->out_of_bounds,
          t->out_of_bounds ? "FAILED" : "OK");
  fprintf(f, "# %-20s : %g %s\n", "Avg bus bandwidth", h.avg, "");
  fprintf(f, "# %-20s : %.2f GB/s at %zu B (%s)", "Peak bus bandwidth", h.peak, h.peak_bytes,
          h.peak_cell ? "in-place" : "out-of-place");
  if (t->o->min_busbw > 0)
    fprintf(f, " %s (minimum %g GB/s)", gate_failed ? "FAILED" : "OK", t->o->min_busbw);
  fprintf(f, "\n# %-20s : %.2f GB/s out-of-place, %.2f GB/s in-place at %zu B\n", "Busbw at max size", h.max_oop,
          h.max_ip, h.max_bytes);
  if (t->sizes->elements)
    fprintf(f, "# %-20s : %.1f us for %d buckets, %.0f B (in-place); effective busbw %.2f GB/s\n",
            "Model step allreduce", h.step_us, h.nbuckets, h.step_bytes, h.step_busbw);
  fprintf(f, "# (The average is nccl-tests' mean over every cell, so it depends on -b/-e: compare peak or\n"
             "#  max-size figures between systems, at the same number of ranks.)\n");
  /* bench/run_all's result lines, behind '#' so that nccl-tests parsers skip them. */
  char name[64];
  snprintf(name, sizeof name, "busbw.%s.%s", busbw_coll_name(t->o->coll), t->backend);
  size_t minb, maxb;
  size_range(t, &minb, &maxb);
  const char *type = busbw_type_name(t->o->types[0]);
  if (t->sizes->elements) {
    bench_result_to(f, "# ", name, "model_step_time", h.step_us, "us", "%d ranks, %d buckets of %s, %.0f B, in-place",
                    t->nranks, h.nbuckets, type, h.step_bytes);
    bench_result_to(f, "# ", name, "model_step_busbw", h.step_busbw, "GB/s", "%d ranks, effective over the step",
                    t->nranks);
  } else {
    bench_result_to(f, "# ", name, "peak_busbw", h.peak, "GB/s", "%d ranks, %s, at %zu B %s", t->nranks, type,
                    h.peak_bytes, h.peak_cell ? "in-place" : "out-of-place");
    bench_result_to(f, "# ", name, "max_size_busbw", h.max_oop, "GB/s", "%d ranks, %s, %zu B out-of-place",
                    t->nranks, type, h.max_bytes);
    bench_result_to(f, "# ", name, "avg_busbw", h.avg, "GB/s", "%d ranks, nccl-tests' mean over %zu B - %zu B",
                    t->nranks, minb, maxb);
    bench_result_to(f, "# ", name, "min_size_time", h.min_us, "us", "%d ranks, %s, %zu B, the faster placement: "
                    "the latency floor", t->nranks, type, h.min_bytes);
  }
  fprintf(f, "#\n# Collective test concluded: %s\n#\n", t->prog);
  fflush(f);
  return gate_failed;
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

static void json_cell(FILE *f, const char *name, const struct busbw_cell *c) {
  fprintf(f, "\"%s\": {\"time_us\": %.6g, \"time_min_us\": %.6g, \"time_max_us\": %.6g, \"alg_bw\": %.6g, "
             "\"bus_bw\": %.6g, \"nwrong\": ",
          name, c->time_us, c->tmin_us, c->tmax_us, c->algbw, c->busbw);
  if (c->checked)
    fprintf(f, "%llu}", (unsigned long long)c->wrong);
  else
    fprintf(f, "null}");
}

void busbw_write_json(const char *path, const struct busbw_table *t) {
  const struct busbw_opts *o = t->o;
  char tmp[PATH_MAX];
  fs_atomic_begin(path, tmp, sizeof tmp);
  FILE *f = fopen(tmp, "w");
  if (!f) scd_fatal(SCD_EXIT_FAILURE, "cannot write %s", tmp);
  struct headline h;
  headline_of(t, &h);
  fprintf(f, "{\n  \"format\": \"scdino-busbw\", \"format_version\": 1,\n  \"program\": ");
  json_str(f, t->prog);
  fprintf(f, ", \"scdino_version\": ");
  json_str(f, PACKAGE_VERSION);
  fprintf(f, ",\n  \"collective\": \"%s\", \"backend\": \"%s\", \"library\": ", busbw_coll_name(o->coll), t->backend);
  json_str(f, t->version);
  fprintf(f, ", \"nranks\": %d,\n  \"backend_note\": ", t->nranks);
  json_str(f, t->backend_note);
  size_t minb, maxb;
  size_range(t, &minb, &maxb);
  fprintf(f, ",\n  \"config\": {\"min_bytes\": %zu, \"max_bytes\": %zu, \"step_bytes\": %zu, \"step_factor\": %ld, "
             "\"iters\": %d, \"warmup_iters\": %d, \"check_every\": %d, \"blocking\": %d, \"average\": %d, "
             "\"root\": %d, \"sizes_from_model\": ",
          minb, maxb, o->step_bytes, o->step_factor, o->iters, o->warmup, o->check, o->blocking,
          o->average, o->root);
  if (o->model_deck)
    json_str(f, o->model_deck);
  else
    fprintf(f, "null");
  fprintf(f, "},\n  \"timing\": \"per-iteration time combined over ranks by -a, then mean over iterations; "
             "GB = 1e9 bytes\",\n  \"devices\": [");
  for (int r = 0; r < t->nranks; r++) {
    fprintf(f, "%s\n    ", r ? "," : "");
    json_str(f, t->devices + (size_t)r * BUSBW_DEVLINE);
  }
  fprintf(f, "],\n  \"results\": [");
  for (int i = 0; i < t->nrows; i++) {
    const struct busbw_row *r = &t->rows[i];
    fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, "
               "\"multiplicity\": %d, ",
            i ? "," : "", r->bytes, r->count, busbw_type_name(r->type), busbw_op_name(r->op), r->root, r->mult);
    json_cell(f, "out_of_place", &r->cell[0]);
    fprintf(f, ", ");
    json_cell(f, "in_place", &r->cell[1]);
    fprintf(f, "}");
  }
  fprintf(f, "],\n  \"out_of_bounds\": {\"count\": %llu, \"okay\": %s},\n", (unsigned long long)t->out_of_bounds,
          t->out_of_bounds ? "false" : "true");
  fprintf(f, "  \"average_bus_bandwidth\": %.6g,\n", h.avg);
  fprintf(f, "  \"peak_bus_bandwidth\": {\"bandwidth\": %.6g, \"size\": %zu, \"placement\": \"%s\"},\n", h.peak,
          h.peak_bytes, h.peak_cell ? "in_place" : "out_of_place");
  fprintf(f, "  \"max_size_bus_bandwidth\": {\"size\": %zu, \"out_of_place\": %.6g, \"in_place\": %.6g}", h.max_bytes,
          h.max_oop, h.max_ip);
  if (t->model) {
    fprintf(f, ",\n  \"model\": {\"deck\": ");
    json_str(f, t->model->deck);
    fprintf(f, ", \"step_time_us\": %.6g, \"step_bytes\": %.0f, \"effective_bus_bw\": %.6g, \"buckets\": [", h.step_us,
            h.step_bytes, h.step_busbw);
    for (int i = 0; i < t->model->nbuckets; i++) {
      fprintf(f, "%s{\"name\": ", i ? ", " : "");
      json_str(f, t->model->names[i]);
      fprintf(f, ", \"elements\": %zu}", t->model->elems[i]);
    }
    fprintf(f, "]}");
  }
  fprintf(f, "\n}\n");
  if (fclose(f) != 0) scd_fatal(SCD_EXIT_FAILURE, "cannot write %s (disk full?)", tmp);
  fs_atomic_commit(tmp, path);
}
