/* loader.c - background reader/augmenter threads and the in-order ring of prepared batches. */
#include "build_config.h"

#include "data/loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "data/sampler.h"
#include "data/shards.h"
#include "input/config.h"

enum slot_state { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

struct slot {
  enum slot_state state;
  struct loader_batch b;
  void *rawbuf; /* AUGMENT mode: the batch's raw images before augmentation */
};

struct worker {
  struct loader *l;
  pthread_t thread;
  struct augment_work *work; /* AUGMENT mode only */
};

struct loader {
  struct dataset *ds;
  enum loader_mode mode;
  struct augment aug;
  struct sampler *sampler;
  int batch_size;
  size_t image_bytes;
  int nslots;
  struct slot *slots;
  int nworkers;
  struct worker *workers;

  pthread_mutex_t mu;
  pthread_cond_t cv_work;  /* a slot became free, an epoch started, or stop */
  pthread_cond_t cv_ready; /* a batch became ready, or a fill finished */
  int stop;
  int64_t epoch;
  int64_t nbatches;   /* batches in the current epoch (0 before the first start) */
  int64_t next_claim; /* next batch a worker may take */
  int64_t next_out;   /* next batch loader_next hands out */
  int nfilling;       /* batches being produced right now */
  int held;           /* slot the consumer holds, or -1 */
  double wait_total;
};

static void lock(struct loader *l) { CHECK_PTHREAD(pthread_mutex_lock(&l->mu)); }
static void unlock(struct loader *l) { CHECK_PTHREAD(pthread_mutex_unlock(&l->mu)); }

/* ---- producing one batch ------------------------------------------------------------------------ */

static void fill_batch(struct loader *l, struct worker *wk, struct slot *s, const int64_t *idx, int count) {
  struct loader_batch *b = &s->b;
  const struct augment *a = &l->aug;
  const double t0 = wtime();
  void *raw = l->mode == LOADER_RAW ? b->raw : s->rawbuf;
  dataset_read_images(l->ds, idx, count, raw);
  const double t1 = wtime();
  b->read_seconds = t1 - t0;

  /* Leave out what upstream drops, keeping the sampler's order. */
  int n = 0;
  for (int i = 0; i < count; i++) {
    const char *img = (const char *)raw + (size_t)i * l->image_bytes;
    if (imgops_minmax_valid(img, a->dtype, a->C_all, a->H, a->W, a->sel, a->nsel) != 0) continue;
    if (n != i) memmove((char *)raw + (size_t)n * l->image_bytes, img, l->image_bytes);
    b->index[n++] = idx[i];
  }
  b->n = n;
  b->n_dropped = count - n;
  b->flops = 0.0;

  if (l->mode == LOADER_AUGMENT) {
    const int ncrops = augment_ncrops(a);
    const size_t gsz = (size_t)a->nsel * a->global_size * a->global_size;
    const size_t lsz = (size_t)a->nsel * a->local_size * a->local_size;
    float *out[AUGMENT_CROP_SLOTS];
    const double f0 = augment_work_flops(wk->work);
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < ncrops; k++)
        out[k] = k < 2 ? b->global + ((size_t)k * n + i) * gsz : b->local + ((size_t)(k - 2) * n + i) * lsz;
      const int rc = augment_image(a, wk->work, (const char *)raw + (size_t)i * l->image_bytes, b->epoch,
                                   b->index[i], out);
      SCD_ASSERT(rc == 0); /* validity was checked above with the same rule */
    }
    b->flops = augment_work_flops(wk->work) - f0;
  }
  b->fill_seconds = wtime() - t0;
}

static void *worker_main(void *arg) {
  struct worker *wk = arg;
  struct loader *l = wk->l;
  lock(l);
  for (;;) {
    while (!l->stop && !(l->next_claim < l->nbatches && l->slots[l->next_claim % l->nslots].state == SLOT_FREE))
      CHECK_PTHREAD(pthread_cond_wait(&l->cv_work, &l->mu));
    if (l->stop) break;
    const int64_t k = l->next_claim++;
    struct slot *s = &l->slots[k % l->nslots];
    s->state = SLOT_FILLING;
    s->b.batch = k;
    s->b.epoch = l->epoch;
    int count;
    /* The sampler's list stays put while any batch is being filled (see loader_start_epoch). */
    const int64_t *idx = sampler_batch(l->sampler, k, &count);
    l->nfilling++;
    unlock(l);
    fill_batch(l, wk, s, idx, count);
    lock(l);
    s->state = SLOT_READY;
    l->nfilling--;
    CHECK_PTHREAD(pthread_cond_broadcast(&l->cv_ready));
  }
  unlock(l);
  return NULL;
}

/* ---- life cycle ------------------------------------------------------------------------------------ */

struct loader *loader_create_ranked(const struct config *cfg, struct dataset *ds,
                                    const int64_t *train_idx, int64_t n_train, int batch_size,
                                    enum loader_mode mode, int rank, int world) {
  if (n_train < 1)
    scd_fatal(SCD_EXIT_DATA, "%s: the training split is empty (%lld images, train_fraction = %g)", dataset_dir(ds),
              (long long)dataset_count(ds), cfg->data.train_fraction);
  struct loader *l = xcalloc(1, sizeof *l);
  l->ds = ds;
  l->mode = mode;
  const int C = dataset_channels(ds), dt = dataset_dtype(ds);
  const double *mean = dataset_mean(ds), *std = dataset_std(ds);
  for (int c = 0; c < C; c++)
    if (!(std[c] > 0.0))
      scd_fatal(SCD_EXIT_DATA, "%s/%s: std of channel %d is %g; a channel without variation cannot be normalised",
                dataset_dir(ds), SHARDS_MANIFEST, c, std[c]);
  augment_init(&l->aug, cfg, C, dataset_height(ds), dataset_width(ds), dt == DATASET_U16 ? IMGOPS_U16 : IMGOPS_F32,
               mean, std);
  SCD_ASSERT(batch_size >= 1);
  l->batch_size = batch_size;
  l->sampler = sampler_create(train_idx, n_train, (uint64_t)cfg->control.seed, rank, world, l->batch_size);
  if (!strcmp(cfg->training.sampler, "balanced")) {
    if (dataset_nclasses(ds) == 0)
      scd_fatal(SCD_EXIT_INPUT, "&training sampler = 'balanced' draws a class first, but the images of %s have no "
                "labels; use sampler = 'uniform'", dataset_dir(ds));
    int32_t *lab = xmalloc(MUL_SIZE(sizeof(int32_t), (size_t)n_train));
    for (int64_t i = 0; i < n_train; i++) lab[i] = dataset_label(ds, train_idx[i]);
    sampler_set_balanced(l->sampler, lab, dataset_nclasses(ds));
    free(lab);
  }
  l->image_bytes = dataset_image_bytes(ds);

  const struct augment *a = &l->aug;
  const size_t B = (size_t)l->batch_size;
  l->nslots = (int)cfg->system.prefetch_batches + 1;
  l->slots = xcalloc((size_t)l->nslots, sizeof *l->slots);
  for (int i = 0; i < l->nslots; i++) {
    struct loader_batch *b = &l->slots[i].b;
    b->index = xmalloc(sizeof(int64_t) * B);
    b->channels = a->nsel;
    b->global_size = a->global_size;
    b->local_size = a->local_size;
    b->n_local = a->n_local;
    void *raw = xmalloc(MUL_SIZE(B, l->image_bytes));
    if (mode == LOADER_RAW) {
      b->raw = raw;
    } else {
      l->slots[i].rawbuf = raw;
      b->global = xmalloc(MUL_SIZE(sizeof(float), MUL_SIZE(2 * B * a->nsel, (size_t)a->global_size * a->global_size)));
      if (a->n_local > 0)
        b->local = xmalloc(MUL_SIZE(sizeof(float),
                                    MUL_SIZE((size_t)a->n_local * B * a->nsel, (size_t)a->local_size * a->local_size)));
    }
  }
  CHECK_PTHREAD(pthread_mutex_init(&l->mu, NULL));
  CHECK_PTHREAD(pthread_cond_init(&l->cv_work, NULL));
  CHECK_PTHREAD(pthread_cond_init(&l->cv_ready, NULL));
  l->held = -1;
  l->nworkers = (int)cfg->system.loader_threads;
  l->workers = xcalloc((size_t)l->nworkers, sizeof *l->workers);
  for (int i = 0; i < l->nworkers; i++) {
    l->workers[i].l = l;
    if (mode == LOADER_AUGMENT) l->workers[i].work = augment_work_create(a);
    CHECK_PTHREAD(pthread_create(&l->workers[i].thread, NULL, worker_main, &l->workers[i]));
  }
  return l;
}

struct loader *loader_create(const struct config *cfg, struct dataset *ds, const int64_t *train_idx,
                             int64_t n_train, int batch_size, enum loader_mode mode) {
  struct loader *l = loader_create_ranked(cfg, ds, train_idx, n_train, batch_size, mode, comm_rank(), comm_size());
  /* Each rank's own share, for a run where one rank is slow or stuck (&control verbosity = 3). */
  log_debug("loader: %lld of the %lld training images an epoch, in %lld batches of %d; %ld loader thread(s), "
            "%ld batch(es) ahead; crops made %s", (long long)sampler_num_samples(l->sampler), (long long)n_train,
            (long long)sampler_batches_per_epoch(l->sampler), l->batch_size, cfg->system.loader_threads,
            cfg->system.prefetch_batches, mode == LOADER_RAW ? "on the GPU" : "by the loader threads");
  return l;
}

void loader_destroy(struct loader *l) {
  if (!l) return;
  lock(l);
  l->stop = 1;
  CHECK_PTHREAD(pthread_cond_broadcast(&l->cv_work));
  unlock(l);
  for (int i = 0; i < l->nworkers; i++) {
    CHECK_PTHREAD(pthread_join(l->workers[i].thread, NULL));
    augment_work_destroy(l->workers[i].work);
  }
  for (int i = 0; i < l->nslots; i++) {
    free(l->slots[i].b.index);
    free(l->slots[i].b.global);
    free(l->slots[i].b.local);
    free(l->slots[i].b.raw);
    free(l->slots[i].rawbuf);
  }
  CHECK_PTHREAD(pthread_mutex_destroy(&l->mu));
  CHECK_PTHREAD(pthread_cond_destroy(&l->cv_work));
  CHECK_PTHREAD(pthread_cond_destroy(&l->cv_ready));
  sampler_destroy(l->sampler);
  free(l->slots);
  free(l->workers);
  free(l);
}

int64_t loader_batches_per_epoch(const struct loader *l) { return sampler_batches_per_epoch(l->sampler); }

void loader_start_epoch(struct loader *l, int64_t epoch, int64_t first_batch) {
  const int64_t nb = sampler_batches_per_epoch(l->sampler);
  SCD_ASSERT(first_batch >= 0 && first_batch <= nb);
  lock(l);
  /* No new claims; let batches in progress finish (their results are discarded). */
  l->next_claim = l->nbatches;
  while (l->nfilling > 0) CHECK_PTHREAD(pthread_cond_wait(&l->cv_ready, &l->mu));
  for (int i = 0; i < l->nslots; i++) l->slots[i].state = SLOT_FREE;
  l->held = -1;
  sampler_set_epoch(l->sampler, epoch);
  l->epoch = epoch;
  l->nbatches = nb;
  l->next_claim = first_batch;
  l->next_out = first_batch;
  CHECK_PTHREAD(pthread_cond_broadcast(&l->cv_work));
  unlock(l);
}

const struct loader_batch *loader_next(struct loader *l) {
  lock(l);
  if (l->held >= 0) { /* the consumer is done with the previous batch */
    l->slots[l->held].state = SLOT_FREE;
    l->held = -1;
    CHECK_PTHREAD(pthread_cond_broadcast(&l->cv_work));
  }
  if (l->next_out >= l->nbatches) {
    unlock(l);
    return NULL;
  }
  const int i = (int)(l->next_out % l->nslots);
  struct slot *s = &l->slots[i];
  const double t0 = wtime();
  while (!(s->state == SLOT_READY && s->b.batch == l->next_out))
    CHECK_PTHREAD(pthread_cond_wait(&l->cv_ready, &l->mu));
  const double waited = wtime() - t0;
  s->state = SLOT_HELD;
  s->b.wait_seconds = waited;
  l->wait_total += waited;
  l->held = i;
  l->next_out++;
  unlock(l);
  return &s->b;
}

double loader_wait_seconds(const struct loader *l) { return l->wait_total; }

const struct augment *loader_augment(const struct loader *l) { return &l->aug; }
