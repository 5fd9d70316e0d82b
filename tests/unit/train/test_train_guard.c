/* tests/unit/train/test_train_guard.c - train_guard_first_nonfinite on the CPU backend: the first tensor (in
 * table order) holding a NaN or an infinity is found wherever in it the value sits, tensors without
 * gradient included; an all-finite buffer gives -1. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "model/ops.h"
#include "model/tensor.h"
#include "tests/fixtures/testutil.h"
#include "train/train_priv.h"

int main(int argc, char **argv) {
  t_init(argc, argv);
  const struct ops *ops = backend_cpu();
  struct tensor_table tt;
  tensors_init(&tt);
  const int64_t s0[1] = {4}, s1[2] = {2, 3}, s2[1] = {5}, s3[2] = {3, 7};
  tensors_add(&tt, 1, s0, "a.weight");
  tensors_add(&tt, 2, s1, "b.weight");
  tensors_add(&tt, 1, s2, "c.bias");
  tensors_add(&tt, 2, s3, "d.weight_g");
  tt.t[3].flags &= ~TENSOR_GRAD; /* weights without gradient are scanned too */
  float *buf = ops->alloc(tt.size * sizeof(float));
  float *host = calloc(tt.size, sizeof(float));
  for (size_t i = 0; i < tt.size; i++) host[i] = (float)i * 0.25f - 3.0f;
  ops->upload(buf, host, tt.size * sizeof(float));
  T_CHECK(train_guard_first_nonfinite(ops, &tt, buf) == -1, "all finite: %d", train_guard_first_nonfinite(ops, &tt, buf));

  /* (tensor, element, value) -> expected first bad tensor */
  const struct {
    int t, e;
    float v;
    int want;
  } cases[] = {{3, 20, INFINITY, 3}, {2, 4, -INFINITY, 2}, {1, 5, NAN, 1}, {0, 0, NAN, 0}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    host[tt.t[cases[c].t].off + (size_t)cases[c].e] = cases[c].v;
    ops->upload(buf, host, tt.size * sizeof(float));
    const int got = train_guard_first_nonfinite(ops, &tt, buf);
    T_CHECK(got == cases[c].want, "after a %g in %s[%d]: first bad tensor %d, want %d", (double)cases[c].v,
            tt.t[cases[c].t].name, cases[c].e, got, cases[c].want);
  }
  ops->free(buf);
  free(host);
  tensors_free(&tt);
  return t_finish();
}
