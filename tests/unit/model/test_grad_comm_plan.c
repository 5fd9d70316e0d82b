/* test_grad_comm_plan.c - the bucketing rule of the gradient communicators (grad_comm_plan.c) on
 * hand-made sequences of ready ranges: merging under the bucket size, a range over it sent alone
 * and unsplit, issue order kept, gaps last, the streaming form equal to the whole-step plan, and
 * the buffer range of a group of tensors (alignment padding included). */
#include "build_config.h"

#include <string.h>

#include "model/grad_comm.h"
#include "model/tensor.h"
#include "tests/fixtures/testutil.h"

#define R(o, c) ((struct grad_comm_range){(o), (c)})
#define MAXC 32

/* calls == want[0..nwant), compared as "off+count" lists so a failure shows both. */
static void expect_plan(const char *what, const struct grad_comm_range *ready, int nready, size_t total,
                        size_t bucket_bytes, const struct grad_comm_range *want, int nwant) {
  struct grad_comm_range calls[MAXC];
  const int n = grad_comm_plan(ready, nready, total, bucket_bytes, calls, MAXC);
  char got[512] = "", exp[512] = "";
  for (int i = 0; i < n && i < MAXC; i++)
    snprintf(got + strlen(got), sizeof got - strlen(got), " %zu+%zu", calls[i].off, calls[i].count);
  for (int i = 0; i < nwant; i++)
    snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " %zu+%zu", want[i].off, want[i].count);
  T_CHECK(n == nwant && !strcmp(got, exp), "%s: calls%s, expected%s", what, got, exp);
  /* Counting alone (no room) gives the same number. */
  T_CHECK(grad_comm_plan(ready, nready, total, bucket_bytes, NULL, 0) == n, "%s: count without room", what);
}

static void test_rule(void) {
  const size_t B = 100 * sizeof(float); /* a bucket of 100 elements */

  /* Backward's shape: descending adjacent ranges merge until the bucket is full, then go. */
  const struct grad_comm_range down[] = {R(290, 10), R(270, 20), R(240, 30), R(200, 40), R(150, 50), R(0, 150)};
  const struct grad_comm_range down_want[] = {R(200, 100), R(0, 200)};
  expect_plan("descending, merged up to the bucket", down, 6, 300, B, down_want, 2);

  /* Under the bucket the whole step is one call, sent at the end. */
  const struct grad_comm_range small[] = {R(60, 20), R(30, 30), R(0, 30)};
  const struct grad_comm_range small_want[] = {R(0, 80)};
  expect_plan("all under the bucket: one call at finish", small, 3, 80, B, small_want, 1);

  /* A range over the bucket on its own is one call (never split), sent at once; the next small
   * ones start a new bucket. */
  const struct grad_comm_range big[] = {R(1000, 5000), R(990, 10), R(900, 90), R(0, 900)};
  const struct grad_comm_range big_want[] = {R(1000, 5000), R(900, 100), R(0, 900)};
  expect_plan("a range over the bucket stays alone", big, 4, 6000, B, big_want, 3);

  /* A big range adjacent to a pending small one joins it (the rule merges before it checks). */
  const struct grad_comm_range join[] = {R(500, 10), R(0, 500)};
  const struct grad_comm_range join_want[] = {R(0, 510)};
  expect_plan("a big range joins the pending one", join, 2, 510, B, join_want, 1);

  /* Ascending adjacency merges too. */
  const struct grad_comm_range up[] = {R(0, 40), R(40, 40), R(80, 40)};
  const struct grad_comm_range up_want[] = {R(0, 120)};
  expect_plan("ascending, merged", up, 3, 120, B, up_want, 1);

  /* Non-adjacent ranges: each sends the pending one first, so the issue order is the ready order
   * (not the buffer order); what no range covered comes last, ascending. */
  const struct grad_comm_range scat[] = {R(50, 10), R(0, 10), R(20, 10), R(10, 0)};
  const struct grad_comm_range scat_want[] = {R(50, 10), R(0, 10), R(20, 10), R(10, 10), R(30, 20), R(60, 40)};
  expect_plan("order kept, gaps last", scat, 4, 100, B, scat_want, 6);

  /* No ranges at all: finish reduces the whole buffer. */
  const struct grad_comm_range whole[] = {R(0, 100)};
  expect_plan("no ranges", NULL, 0, 100, B, whole, 1);

  /* bucket_bytes 0 is GRAD_COMM_BUCKET_BYTES. */
  const size_t def = GRAD_COMM_BUCKET_BYTES / sizeof(float);
  T_CHECK(grad_comm_bucket_elems(0) == def && grad_comm_bucket_elems(1) == 1 && grad_comm_bucket_elems(400) == 100,
          "bucket elements");
  const struct grad_comm_range dflt[] = {R(def, 1), R(1, def - 1), R(0, 1)};
  const struct grad_comm_range dflt_want[] = {R(1, def), R(0, 1)};
  expect_plan("default bucket", dflt, 3, def + 1, 0, dflt_want, 2);

  /* max below the count: the first max calls, the full count returned. */
  struct grad_comm_range two[2];
  T_CHECK(grad_comm_plan(scat, 4, 100, B, two, 2) == 6 && two[0].off == 50 && two[1].off == 0,
          "max below the count");
}

/* The streaming form (as the communicators use it) issues what the plan lists, call by call. */
static void test_streaming(void) {
  const struct grad_comm_range seq[] = {R(700, 300), R(650, 50), R(600, 50), R(100, 500), R(0, 100), R(2000, 1)};
  struct grad_comm_range plan[MAXC], got[MAXC];
  const int np = grad_comm_plan(seq, 6, 3000, 200 * sizeof(float), plan, MAXC);
  struct grad_comm_merge m;
  grad_comm_merge_init(&m, 200 * sizeof(float));
  int n = 0;
  for (int i = 0; i < 6; i++) {
    struct grad_comm_range out[2];
    const int k = grad_comm_merge_add(&m, seq[i].off, seq[i].count, out);
    T_CHECK(k >= 0 && k <= 2, "at most two calls per range: %d", k);
    for (int j = 0; j < k; j++) got[n++] = out[j];
  }
  n += grad_comm_merge_flush(&m, &got[n]);
  T_CHECK(grad_comm_merge_flush(&m, &got[n]) == 0, "nothing pending after a flush");
  struct grad_comm_range sent[MAXC], gaps[MAXC];
  memcpy(sent, got, (size_t)n * sizeof *sent);
  const int ng = grad_comm_gaps(sent, n, 3000, gaps);
  for (int j = 0; j < ng; j++) got[n++] = gaps[j];
  int same = n == np;
  for (int i = 0; same && i < n; i++) same = got[i].off == plan[i].off && got[i].count == plan[i].count;
  T_CHECK(same, "streaming gave %d calls, the plan %d, or they differ", n, np);
  /* 700+300 alone; 600..700 pending, 100+500 joins it (600 >= 200); 0+100 pending, then 2000+1
   * is not adjacent: 0+100 goes, 2000+1 at the end; gaps 1000..2000 and 2001..3000. */
  T_CHECK(np == 6 && plan[0].off == 700 && plan[0].count == 300 && plan[1].off == 100 && plan[1].count == 600 &&
              plan[2].off == 0 && plan[3].off == 2000 && plan[4].off == 1000 && plan[4].count == 1000 &&
              plan[5].off == 2001 && plan[5].count == 999,
          "streaming sequence plan");
}

/* A group's buffer range reaches the next tensor's offset (padding included), the last one the
 * end of the buffer, so consecutive groups tile the buffer. */
static void test_tensor_range(void) {
  struct tensor_table tt;
  tensors_init(&tt);
  tensors_add(&tt, 1, (int64_t[]){5}, "a");
  tensors_add(&tt, 2, (int64_t[]){3, 7}, "b");
  tensors_add(&tt, 1, (int64_t[]){1}, "c");
  tensors_add(&tt, 1, (int64_t[]){17}, "d");
  const struct grad_comm_range ab = grad_comm_tensor_range(&tt, 0, 1), c = grad_comm_tensor_range(&tt, 2, 2),
                               d = grad_comm_tensor_range(&tt, 3, 3);
  T_CHECK(ab.off == 0 && ab.count == tt.t[2].off, "a..b: %zu+%zu", ab.off, ab.count);
  T_CHECK(c.off == tt.t[2].off && c.count == tt.t[3].off - tt.t[2].off && c.count >= 1 &&
              c.count % TENSOR_ALIGN == 0,
          "c with its padding: %zu+%zu", c.off, c.count);
  T_CHECK(d.off + d.count == tt.size && d.count >= 17, "d to the end: %zu+%zu of %zu", d.off, d.count, tt.size);
  tensors_free(&tt);
}

/* The communicators' record of calls grows past its first capacity and keeps room for the gaps. */
static void test_sent(void) {
  struct grad_comm_sent s;
  grad_comm_sent_init(&s);
  enum { N = 200 };
  for (int i = 0; i < N; i++) grad_comm_sent_push(&s, (struct grad_comm_range){(size_t)(N - 1 - i) * 10, 5});
  T_CHECK(s.n == N && s.cap >= N, "pushed %d, n %d, cap %d", N, s.n, s.cap);
  T_CHECK(s.v[0].off == (N - 1) * 10 && s.v[N - 1].off == 0, "order kept");
  /* Every range leaves a gap of 5 after it, and the buffer's end one more: n + 1 gaps fit. */
  const int ng = grad_comm_gaps(s.v, s.n, (size_t)N * 10 + 3, s.gaps);
  T_CHECK(ng == N, "%d gaps", ng);
  T_CHECK(s.gaps[0].off == 5 && s.gaps[0].count == 5 && s.gaps[N - 1].off == (size_t)(N - 1) * 10 + 5 &&
              s.gaps[N - 1].count == 8,
          "gaps");
  grad_comm_sent_free(&s);
  T_CHECK(s.v == NULL && s.n == 0, "freed");
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_rule();
  test_streaming();
  test_tensor_range();
  test_sent();
  return t_finish();
}
