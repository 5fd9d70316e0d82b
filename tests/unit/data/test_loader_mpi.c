/* tests/unit/data/test_loader_mpi.c - the loader under real MPI ranks (run by tests/cli/loader_mpi.sh): together
 * the ranks visit every training sample each epoch, and every sample's crops are bit-identical to
 * the ones a single rank produces.  Usage: test_loader_mpi SCRATCH_DIR */
#include "build_config.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/shards.h"
#include "data/split.h"
#include "input/config.h"
#include "tests/fixtures/shardfix.h"
#include "tests/fixtures/testutil.h"

enum { N = 29, C = 4, HW = 16, EPOCHS = 2 };
static const int64_t bad[1] = {11};

static uint64_t fnv1a(const void *p, size_t n, uint64_t h) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}

/* Hash of every image's crops, as (epoch, index, hash) triples. */
static int64_t collect(struct loader *l, int64_t epoch, int64_t *out) {
  int64_t m = 0;
  loader_start_epoch(l, epoch, 0);
  const struct loader_batch *b;
  while ((b = loader_next(l)) != NULL) {
    const size_t gs = (size_t)b->channels * b->global_size * b->global_size;
    const size_t ls = (size_t)b->channels * b->local_size * b->local_size;
    for (int i = 0; i < b->n; i++) {
      uint64_t h = 0xcbf29ce484222325ull;
      for (int k = 0; k < 2; k++) h = fnv1a(b->global + ((size_t)k * b->n + i) * gs, gs * sizeof(float), h);
      for (int k = 0; k < b->n_local; k++) h = fnv1a(b->local + ((size_t)k * b->n + i) * ls, ls * sizeof(float), h);
      out[3 * m] = epoch;
      out[3 * m + 1] = b->index[i];
      out[3 * m + 2] = (int64_t)h;
      m++;
    }
  }
  return m;
}

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  t_init(argc, argv);
  const int rank = comm_rank(), size = comm_size();
  if (argc < 2) {
    fprintf(stderr, "usage: test_loader_mpi SCRATCH_DIR\n");
    return 2;
  }
  if (rank == 0) shardfix_make(argv[1], N, C, HW, HW, DATASET_F32, 8, bad, 1, 3);
  comm_barrier();
  struct dataset *ds = dataset_open(argv[1]);
  struct split sp;
  split_compute(N, 0.8, 40, &sp);
  struct config cfg;
  config_defaults(&cfg);
  cfg.crops.global_size = 24;
  cfg.crops.local_size = 8;
  cfg.crops.local_crops_number = 2;
  cfg.training.batch_size_per_rank = 3;
  cfg.system.loader_threads = 2;
  cfg.system.prefetch_batches = 2;
  cfg.control.seed = 7;

  /* The sampler alone: gather every rank's list of epoch 3; rank r's k-th sample must be position
   * r + k*size of the padded permutation. */
  struct sampler *smp = sampler_create(sp.train, sp.n_train, (uint64_t)cfg.control.seed, rank, size, 3);
  sampler_set_epoch(smp, 3);
  const int per = (int)sampler_num_samples(smp);
  int64_t *lists = rank == 0 ? malloc(sizeof(int64_t) * (size_t)per * size) : NULL;
  MPI_Gather(smp->mine, per, MPI_INT64_T, lists, per, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)sp.n_train);
    sampler_permutation(sp.train, sp.n_train, (uint64_t)cfg.control.seed, 3, perm);
    int wrong = 0;
    int visits[N];
    memset(visits, 0, sizeof visits);
    for (int r = 0; r < size; r++)
      for (int k = 0; k < per; k++) {
        const int64_t p = r + (int64_t)k * size;
        wrong += lists[(size_t)r * per + k] != perm[p % sp.n_train];
        visits[lists[(size_t)r * per + k]]++;
      }
    int unvisited = 0;
    for (int64_t i = 0; i < sp.n_train; i++) unvisited += visits[sp.train[i]] == 0;
    T_CHECK(wrong == 0 && unvisited == 0, "sampler on %d ranks: %d misplaced, %d unvisited", size, wrong, unvisited);
    free(perm);
    free(lists);
  }
  sampler_destroy(smp);

  struct loader *l = loader_create(&cfg, ds, sp.train, sp.n_train, (int)cfg.training.batch_size_per_rank, LOADER_AUGMENT);
  int64_t *mine = malloc(sizeof(int64_t) * 3 * (size_t)(N + size) * EPOCHS);
  int64_t m = 0;
  for (int64_t e = 0; e < EPOCHS; e++) m += collect(l, e, mine + 3 * m);
  loader_destroy(l);

  int cnt = (int)(3 * m), *counts = NULL, *displs = NULL;
  int64_t *all = NULL;
  if (rank == 0) counts = malloc(sizeof(int) * size), displs = malloc(sizeof(int) * size);
  MPI_Gather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  if (rank == 0) {
    for (int r = 0; r < size; r++) {
      displs[r] = total;
      total += counts[r];
    }
    all = malloc(sizeof(int64_t) * (size_t)(total > 0 ? total : 1));
  }
  MPI_Gatherv(mine, cnt, MPI_INT64_T, all, counts, displs, MPI_INT64_T, 0, MPI_COMM_WORLD);

  if (rank == 0) {
    /* The single-rank reference. */
    struct loader *one = loader_create_ranked(&cfg, ds, sp.train, sp.n_train, (int)cfg.training.batch_size_per_rank, LOADER_AUGMENT, 0, 1);
    int64_t *ref = malloc(sizeof(int64_t) * 3 * (size_t)N * EPOCHS);
    int64_t nref = 0;
    for (int64_t e = 0; e < EPOCHS; e++) nref += collect(one, e, ref + 3 * nref);
    loader_destroy(one);
    int64_t good = 0;
    for (int64_t i = 0; i < sp.n_train; i++) good += sp.train[i] != bad[0];
    T_CHECK(nref == good * EPOCHS, "one rank saw %lld images, expected %lld", (long long)nref, (long long)(good * EPOCHS));
    int64_t hash[EPOCHS][N];
    int visits[EPOCHS][N];
    memset(visits, 0, sizeof visits);
    for (int64_t k = 0; k < nref; k++) hash[ref[3 * k]][ref[3 * k + 1]] = ref[3 * k + 2];
    int mismatch = 0;
    for (int k = 0; k < total / 3; k++) {
      const int64_t e = all[3 * k], g = all[3 * k + 1];
      visits[e][g]++;
      mismatch += hash[e][g] != all[3 * k + 2];
    }
    T_CHECK(mismatch == 0, "%d samples got other crops on %d ranks than on one", mismatch, size);
    /* Coverage per epoch: each good training sample at least once; the padding adds
     * ceil(n/size)*size - n extra visits (fewer if a padded sample is a dropped one). */
    const int64_t padded = (sp.n_train + size - 1) / size * size;
    for (int e = 0; e < EPOCHS; e++) {
      int missing = 0, extra = 0;
      for (int64_t i = 0; i < sp.n_train; i++) {
        const int64_t g = sp.train[i];
        if (g == bad[0]) {
          T_CHECK(visits[e][g] == 0, "dropped sample delivered");
          continue;
        }
        missing += visits[e][g] == 0;
        extra += visits[e][g] > 1 ? visits[e][g] - 1 : 0;
      }
      T_CHECK(missing == 0 && extra <= padded - sp.n_train, "epoch %d: %d samples missing, %d extra visits (padding %lld)",
              e, missing, extra, (long long)(padded - sp.n_train));
    }
    printf("  %d ranks: %d crops hashed, %d mismatches\n", size, total / 3, mismatch);
    free(ref);
    free(all);
    free(counts);
    free(displs);
  }
  free(mine);
  split_free(&sp);
  dataset_close(ds);
  int rc = rank == 0 ? t_finish() : 0;
  comm_finalize();
  return rc;
}
