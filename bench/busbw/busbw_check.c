/* busbw_check.c - host-side fill, exact verification and fault injection of benchmark buffers. */
#include "build_config.h"

#include <string.h>

#include "bench/busbw/busbw.h"

/* Single-threaded on purpose: these loops run between timed iterations, and OpenMP threads that
 * spin on after a parallel region would steal cores from the next timed collective when ranks
 * fill the node. */
void busbw_host_fill(const struct busbw_gen *g, void *buf, size_t count) {
  for (size_t k = 0; k < count; k++) busbw_store(g->type, buf, k, busbw_input_value(g, k));
}

uint64_t busbw_host_verify(const struct busbw_gen *g, const void *buf, size_t count) {
  uint64_t wrong = 0;
  for (size_t m = 0; m < count; m++)
    if (!busbw_matches(g, busbw_load(g->type, buf, m), busbw_expected_value(g, m))) wrong++;
  return wrong;
}

void busbw_host_inject(int type, void *buf, size_t count, uint64_t elem) {
  if (elem >= count) return;
  size_t ts = busbw_type_size(type);
  memset((char *)buf + elem * ts, 0xff, ts);
}
