/* knn.c - weighted kNN classification of feature rows: neighbour lists by blocks of test rows (on
 * the CPU or the GPU, over the ranks' shares of the reference rows, merged by an MPI reduction),
 * exponential class votes, and the accuracy / per-class metrics (rules in knn.h). */
#include "build_config.h"

#include <mpi.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/knn.h"
#include "analysis/knn_gpu.h"
#include "analysis/knn_lists.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/log.h"
#include "core/progress.h"

/* Similarity scratch per block of test rows (0: 64 MiB on the CPU, 512 MiB on the GPU): enough
 * rows for an efficient GEMM, while the memory stays bounded whatever the row counts. */
static size_t knn_block_bytes;

void knn_set_block_bytes(size_t bytes) { knn_block_bytes = bytes; }

/* Test rows per block (0: from knn_block_bytes). */
static int64_t knn_block_rows;

void knn_set_block_rows(int64_t rows) { knn_block_rows = rows > 0 ? rows : 0; }

/* The device of the similarity GEMM and the selection: NULL for the CPU, else one with the knn
 * service. */
static const struct device *knn_dev;

void knn_set_device(const struct device *dev) { knn_dev = dev && dev->knn ? dev : NULL; }

static struct {
  char label[128];
  double seconds;
} prog = {"", -1.0};

void knn_set_progress(const char *label, double seconds) {
  snprintf(prog.label, sizeof prog.label, "%s", label ? label : "");
  prog.seconds = seconds;
}

void knn_result_init(struct knn_result *r, int nclasses, const int64_t *k, int nk, double temperature,
                     const int32_t *train_labels, int64_t n_train) {
  SCD_ASSERT(nclasses > 0 && nk > 0 && n_train > 0 && temperature > 0);
  memset(r, 0, sizeof *r);
  r->nk = nk;
  r->nclasses = nclasses;
  r->n_train = n_train;
  r->temperature = temperature;
  size_t C = (size_t)nclasses, K = (size_t)nk;
  r->k = xmalloc(K * sizeof *r->k);
  r->k_used = xmalloc(K * sizeof *r->k_used);
  for (int j = 0; j < nk; j++) {
    SCD_ASSERT(k[j] >= 1);
    r->k[j] = k[j];
    r->k_used[j] = k[j] < n_train ? k[j] : n_train;
  }
  r->train_support = xcalloc(C, sizeof *r->train_support);
  for (int64_t i = 0; i < n_train; i++) {
    SCD_ASSERT(train_labels[i] >= 0 && train_labels[i] < nclasses);
    r->train_support[train_labels[i]]++;
  }
  size_t ncounts = 1 + 2 * K + MUL_SIZE(K, MUL_SIZE(C, C));
  r->counts = xcalloc(ncounts, sizeof *r->counts);
  r->n_test = r->counts;
  r->top1_correct = r->counts + 1;
  r->top2_correct = r->counts + 1 + K;
  r->confusion = r->counts + 1 + 2 * K;
  r->test_support = xcalloc(C, sizeof *r->test_support);
  r->top1 = xcalloc(K, sizeof(double));
  r->top2 = xcalloc(K, sizeof(double));
  r->balanced_accuracy = xcalloc(K, sizeof(double));
  r->macro_f1 = xcalloc(K, sizeof(double));
  r->precision = xcalloc(K * C, sizeof(double));
  r->recall = xcalloc(K * C, sizeof(double));
  r->f1 = xcalloc(K * C, sizeof(double));
}

void knn_result_free(struct knn_result *r) {
  free(r->k);
  free(r->k_used);
  free(r->train_support);
  free(r->counts);
  free(r->test_support);
  free(r->top1);
  free(r->top2);
  free(r->balanced_accuracy);
  free(r->macro_f1);
  free(r->precision);
  free(r->recall);
  free(r->f1);
  memset(r, 0, sizeof *r);
}

/* ---- Neighbour lists: where they are computed --------------------------------------------------- */

/* The lists of a block of test rows against this rank's reference rows, on the CPU or the GPU. */
struct engine {
  const float *ref;      /* [n_ref][d], host */
  int64_t n_ref, pos0;   /* this rank's reference rows and the position of the first */
  int d, kmax;
  size_t sim_bytes;
  int64_t block_rows;    /* test rows per call: the same on every rank */
  struct knn_gpu *gpu;
};

/* Whether the lists of this kmax are made on the GPU. */
static int on_gpu(int kmax) { return knn_dev != NULL && kmax <= knn_dev->knn->max_k; }

static size_t sim_bytes_for(int gpu) {
  return knn_block_bytes ? knn_block_bytes : gpu ? (size_t)512 << 20 : (size_t)64 << 20;
}

/* Test rows per block for shares of at most n_ref_max rows: the same on every rank. */
static int64_t block_rows_for(int64_t n_ref_max, int gpu) {
  int64_t cols = n_ref_max > 0 ? n_ref_max : 1;
  if (gpu && cols > KNN_GPU_TILE) cols = KNN_GPU_TILE;
  int64_t rows = knn_block_rows ? knn_block_rows : (int64_t)(sim_bytes_for(gpu) / ((size_t)cols * sizeof(float)));
  return rows < 1 ? 1 : rows;
}

/* n_ref_max: the most reference rows any rank holds (the block size must agree over the ranks);
 * n_query: the query rows, the most a block ever holds (a few reference rows per rank would
 * otherwise size the GPU's buffers for millions of query rows). */
static void engine_open(struct engine *e, const float *ref, int64_t n_ref, int64_t n_ref_max, int64_t n_query,
                        int64_t pos0, int d, int kmax) {
  memset(e, 0, sizeof *e);
  e->ref = ref;
  e->n_ref = n_ref;
  e->pos0 = pos0;
  e->d = d;
  e->kmax = kmax;
  const int gpu = on_gpu(kmax);
  if (knn_dev != NULL && !gpu)
    log_warn("kNN: the largest k (%d) exceeds the GPU selection's %d: neighbours are selected on the CPU", kmax,
             knn_dev->knn->max_k);
  e->sim_bytes = sim_bytes_for(gpu);
  e->block_rows = block_rows_for(n_ref_max, gpu);
  if (e->block_rows > n_query) e->block_rows = n_query > 0 ? n_query : 1;
  if (gpu && n_ref > 0) e->gpu = knn_gpu_create(knn_dev, ref, n_ref, d, kmax, e->block_rows);
}

double knn_rows_host_bytes(int64_t n_train, int64_t n_test, int d, int64_t kmax, int nclasses, int nk) {
  const int size = comm_size();
  const int64_t share = (n_train + size - 1) / size;
  if (kmax > n_train) kmax = n_train;
  const int gpu = on_gpu((int)kmax);
  int64_t block = block_rows_for(share, gpu);
  if (block > n_test) block = n_test > 0 ? n_test : 1;
  double b = (double)share * d * sizeof(float) + (double)n_train * sizeof(int32_t); /* share, labels */
  const int64_t blocks = (n_test + block - 1) / block, owned = (blocks + size - 1) / size;
  b += (double)(owned * block < n_test ? owned * block : n_test) * d * sizeof(float); /* owned test rows */
  b += (double)block * ((double)d * sizeof(float) + sizeof(int32_t));                /* a test block */
  b += (double)block * (double)kmax * sizeof(struct knn_nb);                          /* its lists */
  if (!gpu) b += (double)block * (double)share * sizeof(float);                      /* similarities */
  b += (double)block * nk * 5.0 + 4.0 * nk * (double)nclasses * nclasses * sizeof(int64_t); /* votes, counts */
  return b;
}

static void engine_lists(struct engine *e, const float *test, int64_t n, struct knn_nb *lists, struct knn_result *r) {
  if (e->gpu) {
    knn_gpu_select(e->gpu, test, n, e->pos0, lists, &r->seconds_gemm, &r->seconds_select);
    return;
  }
  knn_select_cpu(e->ref, e->n_ref, e->pos0, test, n, e->d, e->kmax, lists, e->sim_bytes, &r->seconds_gemm,
                 &r->seconds_select);
}

static void engine_close(struct engine *e) {
  knn_gpu_destroy(e->gpu);
  memset(e, 0, sizeof *e);
}

/* ---- Votes ------------------------------------------------------------------------------------ */

/* Best and second-best voted classes (higher score first, lower class number on a tie). */
static void rank_two(const double *score, const unsigned char *voted, int C, int *best, int *second) {
  int b = -1, s2 = -1;
  for (int c = 0; c < C; c++) {
    if (!voted[c]) continue;
    if (b < 0 || score[c] > score[b]) {
      s2 = b;
      b = c;
    } else if (s2 < 0 || score[c] > score[s2]) {
      s2 = c;
    }
  }
  *best = b;
  *second = s2;
}

/* Order of the k in increasing k_used (simple insertion sort: nk is small). */
static void order_by_k(const struct knn_result *r, int *ord) {
  for (int j = 0; j < r->nk; j++) ord[j] = j;
  for (int j = 1; j < r->nk; j++)
    for (int i = j; i > 0 && r->k_used[ord[i - 1]] > r->k_used[ord[i]]; i--) {
      int t = ord[i];
      ord[i] = ord[i - 1];
      ord[i - 1] = t;
    }
}

static int64_t kmax_of(const struct knn_result *r) {
  int64_t kmax = 0;
  for (int j = 0; j < r->nk; j++)
    if (r->k_used[j] > kmax) kmax = r->k_used[j];
  return kmax;
}

/* Add the votes of n test rows, given their complete lists [n][kmax] (every entry a reference row).
 * pred_out, hit2_out ([n][nk] each, NULL: not wanted) get each row's prediction and Top-2 outcome. */
static void vote_rows(struct knn_result *r, const struct knn_nb *lists, int kmax, const int32_t *train_labels,
                      const int32_t *test_labels, int64_t n, int32_t *pred_out, unsigned char *hit2_out) {
  const int nk = r->nk, C = r->nclasses;
  int *ord = xmalloc((size_t)nk * sizeof *ord);
  order_by_k(r, ord);
  int32_t *pred = pred_out ? pred_out : xmalloc(MUL_SIZE((size_t)(n ? n : 1), (size_t)nk) * sizeof *pred);
  unsigned char *hit2 = hit2_out ? hit2_out : xmalloc(MUL_SIZE((size_t)(n ? n : 1), (size_t)nk));
  const double temperature = r->temperature;
#pragma omp parallel
  {
    double *score = xmalloc((size_t)C * sizeof *score);
    unsigned char *voted = xmalloc((size_t)C);
#pragma omp for schedule(dynamic, 8)
    for (int64_t i = 0; i < n; i++) {
      const struct knn_nb *h = lists + (size_t)i * (size_t)kmax;
      memset(score, 0, (size_t)C * sizeof *score);
      memset(voted, 0, (size_t)C);
      const int truth = test_labels[i];
      const double s1 = (double)h[0].s;
      int jk = 0;
      for (int64_t m = 0; m < kmax && jk < nk; m++) {
        const int c = train_labels[h[m].pos];
        score[c] += exp(((double)h[m].s - s1) / temperature);
        voted[c] = 1;
        for (; jk < nk && r->k_used[ord[jk]] == m + 1; jk++) {
          int best, second;
          rank_two(score, voted, C, &best, &second);
          const int j = ord[jk];
          pred[i * nk + j] = best;
          hit2[i * nk + j] = truth == best || (r->k[j] >= 2 && second >= 0 && truth == second);
        }
      }
    }
    free(score);
    free(voted);
  }
  for (int64_t i = 0; i < n; i++) {
    const int truth = test_labels[i];
    SCD_ASSERT(truth >= 0 && truth < C);
    for (int j = 0; j < nk; j++) {
      const int p = pred[i * nk + j];
      r->top1_correct[j] += p == truth;
      r->top2_correct[j] += hit2[i * nk + j];
      r->confusion[((size_t)j * (size_t)C + (size_t)truth) * (size_t)C + (size_t)p]++;
    }
  }
  *r->n_test += n;
  if (!pred_out) free(pred);
  if (!hit2_out) free(hit2);
  free(ord);
}

void knn_accumulate(struct knn_result *r, const float *train, const int32_t *train_labels,
                    const float *test, const int32_t *test_labels, int64_t n_test, int d) {
  if (n_test <= 0) return;
  SCD_ASSERT(d > 0 && r->n_train <= INT32_MAX);
  const int kmax = (int)kmax_of(r);
  struct engine e;
  engine_open(&e, train, r->n_train, r->n_train, n_test, 0, d, kmax);
  const int64_t block = e.block_rows;
  struct knn_nb *lists = xmalloc(MUL_SIZE(MUL_SIZE((size_t)block, (size_t)kmax), sizeof *lists));
  struct progress pg;
  char label[160];
  snprintf(label, sizeof label, "kNN on %s", prog.label);
  progress_start(&pg, label, "test rows", n_test, n_test, prog.seconds);
  for (int64_t b0 = 0; b0 < n_test; b0 += block) {
    const int64_t nb_rows = n_test - b0 < block ? n_test - b0 : block;
    engine_lists(&e, test + (size_t)b0 * (size_t)d, nb_rows, lists, r);
    double t0 = wtime();
    vote_rows(r, lists, kmax, train_labels, test_labels + b0, nb_rows, NULL, NULL);
    r->seconds_select += wtime() - t0;
    progress_update(&pg, b0 + nb_rows, 0);
  }
  progress_end(&pg);
  engine_close(&e);
  free(lists);
}

void knn_result_allreduce(struct knn_result *r) {
  size_t C = (size_t)r->nclasses, K = (size_t)r->nk;
  comm_allreduce_sum_i64(r->counts, 1 + 2 * K + K * C * C);
}

void knn_result_finish(struct knn_result *r) {
  const int C = r->nclasses;
  const int64_t nt = *r->n_test;
  for (int j = 0; j < r->nk; j++) {
    const int64_t *cm = r->confusion + (size_t)j * (size_t)C * (size_t)C;
    r->top1[j] = nt ? 100.0 * (double)r->top1_correct[j] / (double)nt : 0.0;
    r->top2[j] = nt ? 100.0 * (double)r->top2_correct[j] / (double)nt : 0.0;
    double rec_sum = 0, f1_sum = 0;
    int n_rec = 0, n_f1 = 0;
    for (int c = 0; c < C; c++) {
      int64_t tp = cm[(size_t)c * C + c], support = 0, predicted = 0;
      for (int o = 0; o < C; o++) {
        support += cm[(size_t)c * C + o];
        predicted += cm[(size_t)o * C + c];
      }
      if (j == 0) r->test_support[c] = support;
      const int64_t fp = predicted - tp, fn = support - tp;
      double *P = &r->precision[(size_t)j * C + c], *R = &r->recall[(size_t)j * C + c],
             *F = &r->f1[(size_t)j * C + c];
      *P = predicted ? (double)tp / (double)predicted : 0.0;
      *R = support ? (double)tp / (double)support : 0.0;
      *F = 2 * tp + fp + fn ? 2.0 * (double)tp / (double)(2 * tp + fp + fn) : 0.0;
      if (support) {
        rec_sum += *R;
        n_rec++;
      }
      if (support || predicted) {
        f1_sum += *F;
        n_f1++;
      }
    }
    r->balanced_accuracy[j] = n_rec ? 100.0 * rec_sum / n_rec : 0.0;
    r->macro_f1[j] = n_f1 ? 100.0 * f1_sum / n_f1 : 0.0;
  }
}

void knn_evaluate(const float *train, const int32_t *train_labels, int64_t n_train, const float *test,
                  const int32_t *test_labels, int64_t n_test, int d, int nclasses, const int64_t *k,
                  int nk, double temperature, struct knn_result *r) {
  knn_result_init(r, nclasses, k, nk, temperature, train_labels, n_train);
  knn_accumulate(r, train, train_labels, test, test_labels, n_test, d);
  knn_result_finish(r);
}

/* Rows rows[0..n-1] of the set into a contiguous [n][d] matrix: copied, read from the file, or made. */
static void source_rows(const struct knn_source *s, const int64_t *rows, int64_t n, float *m) {
  if (s->fill) {
    s->fill(s->ctx, rows, n, m);
    return;
  }
  if (!s->x) {
    features_read_rows(s->path, s->meta, rows, n, m);
    return;
  }
  for (int64_t i = 0; i < n; i++)
    memcpy(m + (size_t)i * (size_t)s->d, s->x + (size_t)rows[i] * (size_t)s->d, (size_t)s->d * sizeof(float));
}

/* MPI reduction of neighbour lists: one element is one row's list of kmax entries (the datatype's
 * size says kmax); the merge gives the same set whatever the order, so the reduction tree does
 * not matter. */
static void lists_merge_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  int bytes = 0;
  MPI_Type_size(*type, &bytes);
  const int kmax = bytes / (int)sizeof(struct knn_nb);
  for (int i = 0; i < *len; i++)
    knn_lists_merge((const struct knn_nb *)in + (size_t)i * (size_t)kmax, (struct knn_nb *)inout + (size_t)i * (size_t)kmax,
                    kmax);
}

void knn_rows_free(struct knn_rows *rows) {
  free(rows->pred);
  free(rows->hit2);
  free(rows->nb);
  free(rows->nb_sim);
  rows->pred = rows->nb = NULL;
  rows->hit2 = NULL;
  rows->nb_sim = NULL;
}

/* The per-row outcome of a block of test rows, which its owner voted, into rank 0's rows (sent there
 * when the owner is another rank).  pred, hit2: [nb][nk]; lists [nb][kmax]. */
static void rows_deliver(struct knn_rows *rows, int owner, int64_t b0, int64_t nb, const int32_t *pred,
                         const unsigned char *hit2, const struct knn_nb *lists, int kmax) {
  const int rank = comm_rank(), keep = rows->keep;
  const size_t nk = (size_t)rows->nk, n_nb = (size_t)nb * (size_t)keep;
  if (rank != owner && rank != 0) return;
  SCD_ASSERT(rank != 0 || keep == 0 || (rows->nb && rows->nb_sim));
  if (nb * (int64_t)(nk > (size_t)keep ? nk : (size_t)keep) > INT32_MAX)
    scd_fatal(SCD_EXIT_INPUT, "kNN: a block of %" PRId64 " test rows is too large to send; lower knn.block_rows or "
              "knn.keep_neighbours", nb);
  int32_t *nb_pos = rank == 0 ? rows->nb + (size_t)b0 * keep : xmalloc(MUL_SIZE(n_nb + 1, sizeof(int32_t)));
  float *nb_sim = rank == 0 ? rows->nb_sim + (size_t)b0 * keep : xmalloc(MUL_SIZE(n_nb + 1, sizeof(float)));
  if (rank == owner) {
    for (int64_t i = 0; i < nb; i++)
      for (int m = 0; m < keep; m++) {
        nb_pos[i * keep + m] = lists[i * kmax + m].pos;
        nb_sim[i * keep + m] = lists[i * kmax + m].s;
      }
  }
  if (owner == 0) {
    memcpy(rows->pred + (size_t)b0 * nk, pred, (size_t)nb * nk * sizeof *pred);
    memcpy(rows->hit2 + (size_t)b0 * nk, hit2, (size_t)nb * nk);
    return;
  }
  enum { TAG = 0x4b4e }; /* point to point, in block order: the blocks' messages cannot cross */
  MPI_Comm comm = comm_mpi();
  if (rank == owner) {
    CHECK_MPI(MPI_Send(pred, (int)(nb * (int64_t)nk), MPI_INT32_T, 0, TAG, comm));
    CHECK_MPI(MPI_Send(hit2, (int)(nb * (int64_t)nk), MPI_UNSIGNED_CHAR, 0, TAG, comm));
    CHECK_MPI(MPI_Send(nb_pos, (int)n_nb, MPI_INT32_T, 0, TAG, comm));
    CHECK_MPI(MPI_Send(nb_sim, (int)n_nb, MPI_FLOAT, 0, TAG, comm));
    free(nb_pos);
    free(nb_sim);
  } else {
    CHECK_MPI(MPI_Recv(rows->pred + (size_t)b0 * nk, (int)(nb * (int64_t)nk), MPI_INT32_T, owner, TAG, comm,
                       MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Recv(rows->hit2 + (size_t)b0 * nk, (int)(nb * (int64_t)nk), MPI_UNSIGNED_CHAR, owner, TAG, comm,
                       MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Recv(nb_pos, (int)n_nb, MPI_INT32_T, owner, TAG, comm, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Recv(nb_sim, (int)n_nb, MPI_FLOAT, owner, TAG, comm, MPI_STATUS_IGNORE));
  }
}

void knn_evaluate_rows(const struct knn_source *src, const int32_t *labels, int nclasses,
                       const int64_t *train_rows, int64_t n_train, const int64_t *test_rows,
                       int64_t n_test, const int64_t *k, int nk, double temperature,
                       struct knn_result *r, struct knn_rows *out) {
  SCD_ASSERT(n_train <= INT32_MAX);
  const int rank = comm_rank(), size = comm_size(), d = src->d;
  /* Every rank's reference labels, its share of the reference rows, and the test rows of the blocks
   * it owns (blocks in turn): the owner broadcasts a block, the lists of the block against each
   * share are merged on the owner, which votes. */
  int32_t *train_lab = xmalloc((size_t)(n_train ? n_train : 1) * sizeof *train_lab);
  for (int64_t i = 0; i < n_train; i++) train_lab[i] = labels[train_rows[i]];
  knn_result_init(r, nclasses, k, nk, temperature, train_lab, n_train);
  const int64_t lo = n_train * rank / size, hi = n_train * (rank + 1) / size;
  const int64_t share_max = (n_train + size - 1) / size;
  float *ref = xmalloc(MUL_SIZE(MUL_SIZE((size_t)(hi > lo ? hi - lo : 1), (size_t)d), sizeof(float)));
  source_rows(src, train_rows + lo, hi - lo, ref);
  const int kmax = (int)kmax_of(r);
  struct engine e;
  engine_open(&e, ref, hi - lo, share_max, n_test, lo, d, kmax);
  const int64_t block = e.block_rows;
  float *test = xmalloc(MUL_SIZE(MUL_SIZE((size_t)block, (size_t)d), sizeof(float)));
  if ((size_t)block * (size_t)d > INT32_MAX)
    scd_fatal(SCD_EXIT_INPUT, "kNN: a block of %" PRId64 " test rows of %d features is too large to broadcast; lower "
              "knn.block_rows", block, d);
  /* This rank's blocks' test rows, read in one pass */
  int64_t n_own = 0;
  for (int64_t b0 = (int64_t)rank * block; b0 < n_test; b0 += (int64_t)size * block)
    n_own += n_test - b0 < block ? n_test - b0 : block;
  int64_t *own_rows = xmalloc((size_t)(n_own ? n_own : 1) * sizeof *own_rows);
  for (int64_t b0 = (int64_t)rank * block, at = 0; b0 < n_test; b0 += (int64_t)size * block)
    for (int64_t i = b0; i < n_test && i < b0 + block; i++) own_rows[at++] = test_rows[i];
  float *own = xmalloc(MUL_SIZE(MUL_SIZE((size_t)(n_own ? n_own : 1), (size_t)d), sizeof(float)));
  source_rows(src, own_rows, n_own, own);
  free(own_rows);
  const float *own_next = own;
  int32_t *test_lab = xmalloc((size_t)block * sizeof *test_lab);
  struct knn_nb *lists = xmalloc(MUL_SIZE(MUL_SIZE((size_t)block, (size_t)kmax), sizeof *lists));
  /* The per-row outcome: made by the blocks' owners, kept on rank 0. */
  int32_t *bpred = NULL;
  unsigned char *bhit2 = NULL;
  if (out) {
    out->keep = out->keep < 0 ? 0 : out->keep > kmax ? kmax : out->keep;
    out->n = n_test;
    out->nk = nk;
    out->pred = out->nb = NULL;
    out->hit2 = NULL;
    out->nb_sim = NULL;
    if (rank == 0) {
      out->pred = xmalloc(MUL_SIZE(MUL_SIZE((size_t)n_test + 1, (size_t)nk), sizeof *out->pred));
      out->hit2 = xmalloc(MUL_SIZE((size_t)n_test + 1, (size_t)nk));
      out->nb = xmalloc(MUL_SIZE(MUL_SIZE((size_t)n_test, (size_t)out->keep) + 1, sizeof *out->nb));
      out->nb_sim = xmalloc(MUL_SIZE(MUL_SIZE((size_t)n_test, (size_t)out->keep) + 1, sizeof *out->nb_sim));
    }
    bpred = xmalloc(MUL_SIZE(MUL_SIZE((size_t)block, (size_t)nk), sizeof *bpred));
    bhit2 = xmalloc(MUL_SIZE((size_t)block, (size_t)nk));
  }
  MPI_Datatype row_type = MPI_DATATYPE_NULL;
  MPI_Op merge = MPI_OP_NULL;
  if (size > 1) {
    CHECK_MPI(MPI_Type_contiguous((int)((size_t)kmax * sizeof(struct knn_nb)), MPI_BYTE, &row_type));
    CHECK_MPI(MPI_Type_commit(&row_type));
    CHECK_MPI(MPI_Op_create(lists_merge_op, 1, &merge));
  }
  struct progress pg;
  char label[160];
  snprintf(label, sizeof label, "kNN on %s", prog.label);
  progress_start(&pg, label, "test rows", n_test, n_test, prog.seconds);
  for (int64_t b0 = 0, blk = 0; b0 < n_test; b0 += block, blk++) {
    const int64_t nb_rows = n_test - b0 < block ? n_test - b0 : block;
    const int owner = (int)(blk % size);
    const float *rows = test;
    if (rank == owner) {
      rows = own_next;
      own_next += (size_t)nb_rows * (size_t)d;
    }
    double t0 = wtime();
    if (size > 1) CHECK_MPI(MPI_Bcast((void *)rows, (int)(nb_rows * d), MPI_FLOAT, owner, comm_mpi()));
    r->seconds_select += wtime() - t0;
    engine_lists(&e, rows, nb_rows, lists, r);
    t0 = wtime();
    if (size > 1)
      CHECK_MPI(MPI_Reduce(rank == owner ? MPI_IN_PLACE : lists, lists, (int)nb_rows, row_type, merge, owner,
                           comm_mpi()));
    if (rank == owner) {
      for (int64_t i = 0; i < nb_rows; i++) test_lab[i] = labels[test_rows[b0 + i]];
      vote_rows(r, lists, kmax, train_lab, test_lab, nb_rows, bpred, bhit2);
    }
    if (out) rows_deliver(out, owner, b0, nb_rows, bpred, bhit2, lists, kmax);
    r->seconds_select += wtime() - t0;
    progress_update(&pg, b0 + nb_rows, 0);
  }
  progress_end(&pg);
  if (size > 1) {
    CHECK_MPI(MPI_Op_free(&merge));
    CHECK_MPI(MPI_Type_free(&row_type));
  }
  engine_close(&e);
  knn_result_allreduce(r);
  knn_result_finish(r);
  free(lists);
  free(bpred);
  free(bhit2);
  free(own);
  free(test);
  free(test_lab);
  free(ref);
  free(train_lab);
}
