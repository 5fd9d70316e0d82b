/* membudget.c - a calculation's memory per rank from its deck, against what the rank may use. */
#include "build_config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/membudget.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

void membudget_add(struct membudget *b, double bytes, const char *what, const char *keys_fmt, ...) {
  SCD_ASSERT(b->n < MEMBUDGET_MAX_ITEMS);
  b->item[b->n].bytes = bytes;
  snprintf(b->item[b->n].what, sizeof b->item[b->n].what, "%s", what);
  va_list ap;
  va_start(ap, keys_fmt);
  vsnprintf(b->item[b->n].keys, sizeof b->item[b->n].keys, keys_fmt, ap);
  va_end(ap);
  b->n++;
}

double membudget_total(const struct membudget *b) {
  double s = 0;
  for (int i = 0; i < b->n; i++) s += b->item[i].bytes;
  return s;
}

/* A cgroup memory limit file: its number, or 0 for "max", missing or unreadable. */
static double read_limit(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[64] = "";
  const int ok = fgets(buf, sizeof buf, f) != NULL;
  fclose(f);
  if (!ok || !strncmp(buf, "max", 3)) return 0;
  const double v = strtod(buf, NULL);
  return v > 0 && v < 1e18 ? v : 0; /* cgroup v1 writes a huge number for "no limit" */
}

/* The lowest memory limit of this process's cgroup and its parents (v2: memory.max; v1:
 * memory.limit_in_bytes of the memory controller's group); 0 when there is none. */
static double cgroup_limit(void) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return 0;
  char line[4096], path[4096 + 64];
  double best = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    const char *v1 = strstr(line, ":memory:"), *rel = NULL;
    const char *root = NULL, *file = NULL;
    if (!strncmp(line, "0::", 3)) {
      rel = line + 3, root = "/sys/fs/cgroup", file = "memory.max";
    } else if (v1) {
      rel = v1 + 8, root = "/sys/fs/cgroup/memory", file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", rel);
    for (;;) { /* the group, then each parent up to the root */
      snprintf(path, sizeof path, "%s%s/%s", root, dir, file);
      const double v = read_limit(path);
      if (v > 0 && (best == 0 || v < best)) best = v;
      char *slash = strrchr(dir, '/');
      if (!slash || dir[0] == 0) break;
      *slash = 0;
    }
  }
  fclose(f);
  return best;
}

double membudget_limit(double gib, char *how, size_t n) {
  if (gib > 0) {
    snprintf(how, n, "&system memory_per_rank = %g", gib);
    return gib * GIB;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  double node = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
  const char *src = "physical memory";
  const double cg = cgroup_limit();
  if (cg > 0 && (node == 0 || cg < node)) node = cg, src = "cgroup limit";
  const int local = comm_get()->node_size > 0 ? comm_get()->node_size : 1; /* every rank of the node */
  double lim = node / local;
  snprintf(how, n, "&system memory_per_rank = 0: the node's %.1f GiB (%s) over %d rank%s", node / GIB, src, local,
           local > 1 ? "s" : "");
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < lim) {
    lim = (double)rl.rlim_cur;
    snprintf(how, n, "&system memory_per_rank = 0: the address-space limit (ulimit -v) of %.1f GiB", lim / GIB);
  }
  return lim > 0 ? lim : 1e300;
}

void membudget_check(const struct membudget *b, const char *what, double limit, const char *how) {
  const double total = membudget_total(b);
  double worst[2] = {total > limit ? total : 0, total};
  comm_allreduce_max_f64(worst, 2);
  if (worst[0] == 0) {
    log_detail("%s: about %.2f GiB per rank for the large buffers, of %.1f GiB (%s)", what, worst[1] / GIB,
               limit / GIB, how);
    return;
  }
  char msg[4096];
  size_t used = 0;
  for (int i = 0; i < b->n && used < sizeof msg; i++)
    used += (size_t)snprintf(msg + used, sizeof msg - used, "\n  %-46s %8.2f GiB  (%s)",
                             b->item[i].what, b->item[i].bytes / GIB, b->item[i].keys);
  scd_fatal(SCD_EXIT_INPUT,
            "%s: about %.2f GiB per rank needed, more than the %.2f GiB a rank may use (%s):%s\n"
            "Make the keys named above smaller, run on more ranks or nodes, or set &system memory_per_rank if "
            "the node has more memory than scdino sees",
            what, worst[0] / GIB, limit / GIB, how, msg);
}
