/* memcpy_bw.c - single-core memcpy bandwidth, timed the way the busbw benchmark times a collective:
 * every iteration alone, warm-up first, the mean over iterations, GB = 1e9 bytes.  A reference
 * point for the MPI backend on one node, where a collective is copies through shared memory.
 *
 *   bench/memcpy_bw [-b SIZE] [-e SIZE] [-f FACTOR] [-n ITERS] [-w ITERS]   (SIZE with K/M/G) */
#include "build_config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_result.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *s == '-') return -1;
  int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
  if (shift) end++;
  if (*end || (shift && v > (SIZE_MAX >> shift))) return -1;
  *out = (size_t)v << shift;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: memcpy_bw [-b SIZE] [-e SIZE] [-f FACTOR] [-n ITERS] [-w ITERS]\n"
             "  single-core memcpy bandwidth per size: time (us) and SIZE/time (GB/s, 1 GB = 1e9 B);\n"
             "  the memory traffic is twice that (read + write), more with write-allocate.\n");
}

int main(int argc, char **argv) {
  size_t minb = 8, maxb = (size_t)256 << 20;
  long factor = 2, iters = 20, warmup = 5;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    }
    if (a[0] != '-' || !strchr("befnw", a[1]) || a[1] == '\0' || a[2] || i + 1 >= argc) {
      fprintf(stderr, "memcpy_bw: error: bad argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
    const char *v = argv[++i];
    char *end;
    int bad = 0;
    switch (a[1]) {
    case 'b': bad = parse_size(v, &minb); break;
    case 'e': bad = parse_size(v, &maxb); break;
    default: {
      long x = strtol(v, &end, 10);
      bad = *end || end == v || x < (a[1] == 'w' ? 0 : a[1] == 'f' ? 2 : 1);
      if (a[1] == 'f') factor = x;
      if (a[1] == 'n') iters = x;
      if (a[1] == 'w') warmup = x;
    }
    }
    if (bad) {
      fprintf(stderr, "memcpy_bw: error: bad value '%s' for %s\n", v, a);
      usage(stderr);
      return 2;
    }
  }
  if (minb == 0 || minb > maxb) {
    fprintf(stderr, "memcpy_bw: error: need 0 < -b <= -e\n");
    return 2;
  }
  char *src = malloc(maxb), *dst = malloc(maxb);
  double *t = malloc((size_t)iters * sizeof *t);
  if (!src || !dst || !t) {
    free(src), free(dst), free(t);
    fprintf(stderr, "memcpy_bw: error: out of memory for 2 x %zu bytes\n", maxb);
    return 1;
  }
  memset(src, 1, maxb); /* touch every page before timing */
  memset(dst, 2, maxb);
  printf("# memcpy_bw: single-core memcpy, per-iteration MONOTONIC clock, mean over %ld iterations after %ld warm-up\n",
         iters, warmup);
  printf("#%11s  %9s  %9s  %9s  %8s\n", "size", "time", "min time", "max time", "copy bw");
  printf("#%11s  %9s  %9s  %9s  %8s\n", "(B)", "(us)", "(us)", "(us)", "(GB/s)");
  volatile unsigned char sink = 0;
  double peak = 0, last = 0;
  size_t peak_size = 0, last_size = 0;
  for (size_t s = minb; s <= maxb; s = s > SIZE_MAX / (size_t)factor ? SIZE_MAX : s * (size_t)factor) {
    for (long w = 0; w < warmup; w++) memcpy(dst, src, s);
    double sum = 0, mn = 0, mx = 0;
    for (long it = 0; it < iters; it++) {
      double t0 = now();
      memcpy(dst, src, s);
      t[it] = now() - t0;
      sink ^= (unsigned char)dst[s - 1]; /* keep the copy observable */
      sum += t[it];
      if (it == 0 || t[it] < mn) mn = t[it];
      if (it == 0 || t[it] > mx) mx = t[it];
    }
    double mean = sum / (double)iters;
    printf("%12zu  %9.2f  %9.2f  %9.2f  %8.2f\n", s, mean * 1e6, mn * 1e6, mx * 1e6, (double)s / mean / 1e9);
    last = (double)s / mean / 1e9;
    last_size = s;
    if (last > peak) {
      peak = last;
      peak_size = s;
    }
    fflush(stdout);
    if (s == SIZE_MAX) break;
  }
  bench_result("memcpy_bw", "copy_bw_max_size", last, "GB/s", "single-core memcpy of %zu B, mean of %ld", last_size,
               iters);
  bench_result("memcpy_bw", "copy_bw_peak", peak, "GB/s", "at %zu B", peak_size);
  free(src);
  free(dst);
  free(t);
  (void)sink;
  return 0;
}
