/* train.c - calculation='train': set-up, restart / init_from, the epoch loop and its checkpoints. */
#include "build_config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "calc.h"
#include "check.h"
#include "comm.h"
#include "fsutil.h"
#include "log.h"
#include "model_config.h"
#include "schedule.h"
#include "shards.h"
#include "train.h"
#include "train_priv.h"
#ifdef HAVE_CUDA
#include "../cuda/augment_gpu.h"
#endif

volatile sig_atomic_t train_stop_requested = 0;

void train_request_stop(void) { train_stop_requested = 1; }

/* ---- set-up ------------------------------------------------------------------------------------ */

static void setup_data(struct trainer *t) {
  const struct config *cfg = t->cfg;
  char manifest[PATH_MAX];
  fs_join(manifest, sizeof manifest, cfg->data.shard_dir, SHARDS_MANIFEST);
  int have = comm_rank() == 0 ? fs_exists(manifest) : 0;
  comm_bcast(&have, sizeof have, 0);
  if (!have) {
    if (!cfg->data.tiff_dir[0])
      scd_fatal(SCD_EXIT_INPUT, "&data shard_dir = '%s' holds no %s and &data tiff_dir is empty: "
                "run calculation='prepare' first, or set tiff_dir", cfg->data.shard_dir, SHARDS_MANIFEST);
    /* As the pipeline does: convert the TIFF tree first (the deck's &data settings apply). */
    log_info("train: no shards in %s yet; preparing them from %s first", cfg->data.shard_dir,
             cfg->data.tiff_dir);
    const int rc = prepare_run(cfg);
    if (rc != 0) comm_exit_all(rc);
  }
  t->ds = dataset_open(cfg->data.shard_dir);
  split_dataset(t->ds, cfg->data.train_fraction, (uint32_t)cfg->data.split_seed, &t->split);
  /* On the CUDA backend the crops are made on the GPU from raw batches (the same crops, bit for
   * bit: cuda/augment_gpu.h); elsewhere the loader threads make them. */
  const int gpu_aug = !strcmp(t->ops->name, "cuda");
  t->loader = loader_create(cfg, t->ds, t->split.train, t->split.n_train,
                            gpu_aug ? LOADER_RAW : LOADER_AUGMENT);
  const struct augment *a = loader_augment(t->loader);
#ifdef HAVE_CUDA
  if (gpu_aug) t->ag = augment_gpu_create(a, (int)t->B);
#endif
  if (a->nsel > CKPT_MAX_CHANNELS)
    scd_fatal(SCD_EXIT_INPUT, "&data channels: %d channels selected, at most %d are supported", a->nsel,
              CKPT_MAX_CHANNELS);
  t->nchannels = a->nsel;
  for (int i = 0; i < a->nsel; i++) t->channels[i] = a->sel[i];
  t->niter = loader_batches_per_epoch(t->loader);
}

static void setup_model(struct trainer *t) {
  const struct config *cfg = t->cfg;
  struct dino_spec spec;
  model_config_spec(&spec, cfg, t->nchannels);
  t->model = dino_model_create(t->ops, &spec);
  const int nl = (int)cfg->crops.local_crops_number, G = (int)cfg->crops.global_size;
  const int L = (int)cfg->crops.local_size;
  dino_model_plan(t->model, (int)t->B, nl, G, L);
  dino_loss_init(&t->loss, t->ops, spec.head.out_dim, 2 + nl, cfg->training.warmup_teacher_temp,
                 cfg->training.teacher_temp, cfg->training.warmup_teacher_temp_epochs, t->epochs,
                 cfg->training.student_temp, cfg->training.center_momentum);
  optim_init(&t->opt, t->ops, &t->model->tt);
  if (t->ag) return; /* the GPU augmentation owns the device crops */
  const size_t C = (size_t)t->nchannels;
  t->dev_global = t->ops->alloc(MUL_SIZE(MUL_SIZE(2 * (size_t)t->B * C, (size_t)G * G), sizeof(float)));
  t->dev_local = t->ops->alloc(
      MUL_SIZE(MUL_SIZE((size_t)(nl > 0 ? nl : 1) * t->B * C, (size_t)L * L), sizeof(float)));
}

static void setup_schedules(struct trainer *t) {
  const struct config *cfg = t->cfg;
  t->lr_peak = schedule_lr_peak(cfg->training.lr, t->B, t->world);
  t->lr_sched = schedule_cosine(t->lr_peak, cfg->training.min_lr, t->epochs, t->niter,
                                cfg->training.warmup_epochs, 0.0);
  t->wd_sched = schedule_cosine(cfg->training.weight_decay, cfg->training.weight_decay_end, t->epochs,
                                t->niter, 0, 0.0);
  t->mom_sched = schedule_cosine(cfg->training.momentum_teacher, 1.0, t->epochs, t->niter, 0, 0.0);
  t->total_steps = t->epochs * t->niter;
}

/* Where this launch starts: a restart from run_dir/checkpoint.h5, init_from weights, or the seed.
 * Returns the first (epoch, iteration). */
static void start_position(struct trainer *t, int64_t *epoch, int64_t *it) {
  const struct config *cfg = t->cfg;
  *epoch = 0;
  *it = 0;
  if (cfg->training.restart) {
    int have = comm_rank() == 0 ? fs_exists(t->ckpt_path) : 0;
    comm_bcast(&have, sizeof have, 0);
    if (have) {
      struct ckpt_info info;
      checkpoint_restore(t->ckpt_path, &t->ck, &info);
      snprintf(t->last_good, sizeof t->last_good, "%s", t->ckpt_path);
      *epoch = t->ck.epoch;
      *it = t->ck.iteration;
      if (info.world_size != t->world || info.niter_per_epoch != t->niter ||
          info.batch_size_per_rank != t->B) {
        /* Schedules are recomputed for this run and indexed by epoch * niter + iteration; a
         * position inside an epoch keeps its share of the epoch. */
        log_warn("restart: %s was written by a run of %d rank(s) x batch %lld (%lld iterations per "
                 "epoch); this run has %d x %lld (%lld per epoch): it continues correctly but not "
                 "bit-identically to an uninterrupted run",
                 t->ckpt_path, info.world_size, (long long)info.batch_size_per_rank,
                 (long long)info.niter_per_epoch, t->world, (long long)t->B, (long long)t->niter);
        if (*it > 0 && info.niter_per_epoch > 0)
          *it = llround((double)*it * (double)t->niter / (double)info.niter_per_epoch);
        if (*it >= t->niter) {
          *epoch += 1;
          *it = 0;
          memset(&t->ck.metrics, 0, sizeof t->ck.metrics);
        }
      }
      if (info.n_train && info.n_train != t->split.n_train)
        log_warn("restart: the checkpoint's run had %lld training images, this one has %lld",
                 (long long)info.n_train, (long long)t->split.n_train);
      log_info("restart: continuing from %s at epoch %lld, iteration %lld (global step %lld)",
               t->ckpt_path, (long long)*epoch, (long long)*it, (long long)(*epoch * t->niter + *it));
      if (cfg->training.init_from[0])
        log_info("restart: init_from = '%s' is not used: the run continues from its own checkpoint",
                 cfg->training.init_from);
      return;
    }
    log_info("restart: %s does not exist; starting from scratch", t->ckpt_path);
  }
  if (cfg->training.init_from[0]) {
    struct ckpt_info info;
    checkpoint_load_model(cfg->training.init_from, t->model, &info);
    log_info("init_from: student and teacher weights from %s (written at epoch %lld); optimizer "
             "state and centre start fresh at epoch 0",
             cfg->training.init_from, (long long)info.epoch);
    return;
  }
  dino_model_init_weights(t->model, (uint64_t)cfg->control.seed);
}

/* ---- checkpoints ------------------------------------------------------------------------------- */

/* Save the position (t->ck.epoch, t->ck.iteration); epoch_done >= 0 also keeps
 * checkpoint_EEEE.h5 when EEEE % saveckp_freq == 0 or it is the last epoch. */
static void save(struct trainer *t, int64_t epoch_done) {
  const long freq = t->cfg->training.saveckp_freq;
  char numbered[PATH_MAX], name[64];
  const char *paths[2] = {t->ckpt_path, numbered};
  int n = 1;
  if (epoch_done >= 0 && freq > 0 && (epoch_done % freq == 0 || epoch_done == t->epochs - 1)) {
    snprintf(name, sizeof name, "checkpoint_%04lld.h5", (long long)epoch_done);
    fs_join(numbered, sizeof numbered, t->cfg->control.run_dir, name);
    n = 2;
  }
  checkpoint_save_many(paths, n, &t->ck);
  snprintf(t->last_good, sizeof t->last_good, "%s", t->ckpt_path);
  log_info("checkpoint %s%s%s (epoch %lld, iteration %lld)", t->ckpt_path, n > 1 ? " and " : "",
           n > 1 ? numbered : "", (long long)t->ck.epoch, (long long)t->ck.iteration);
}

SCD_NORETURN static void fail_nonfinite(const struct trainer *t, int64_t epoch, int64_t it,
                                        const struct step_result *r) {
  if (t->rank == 0) {
    fflush(stdout);
    fprintf(stderr,
            "scdino: error: non-finite loss at epoch %lld, iteration %lld of %lld (global step "
            "%lld) on %d of %d rank%s (rank 0: %g); training stopped.  Last good checkpoint: %s\n",
            (long long)epoch, (long long)it, (long long)t->niter,
            (long long)(epoch * t->niter + it), r->nonfinite, t->world, t->world > 1 ? "s" : "",
            r->loss_local, t->last_good[0] ? t->last_good : "none (no checkpoint written yet)");
  }
  comm_exit_all(SCD_EXIT_FAILURE);
}

/* ---- the loop ---------------------------------------------------------------------------------- */

static void add_metrics(struct trainer *t, const struct step_result *r) {
  struct ckpt_metrics *m = &t->ck.metrics;
  m->loss_sum += r->loss_sum;
  m->loss_count += (double)r->loss_ranks;
  m->lr_sum += r->lr;
  m->wd_sum += r->wd;
  m->steps++;
  m->images += r->images;
  m->seconds = wtime() - t->epoch_t0;
  t->win.steps++;
  t->win.images += r->images;
  t->win.comm_s += r->comm_s;
  t->launch_steps++;
}

/* Run epochs from (epoch, it0); returns when done or stopped. */
static void run_epochs(struct trainer *t, int64_t epoch, int64_t it0) {
  const long max_steps = t->cfg->training.max_steps;
  t->first_step = epoch * t->niter + it0;
  t->t_launch = wtime();
  t->win.t0 = t->t_launch;
  for (; epoch < t->epochs; epoch++, it0 = 0) {
    if (it0 == 0) memset(&t->ck.metrics, 0, sizeof t->ck.metrics);
    t->epoch_t0 = wtime() - t->ck.metrics.seconds;
    loader_start_epoch(t->loader, epoch, it0);
    int stop = 0;
    for (int64_t it = it0; it < t->niter; it++) {
      const struct loader_batch *b = loader_next(t->loader);
      SCD_ASSERT(b && b->batch == it && b->epoch == epoch);
      t->win.data_s += b->wait_seconds;
      struct step_result r;
      train_step(t, b, epoch, it, &r);
      if (r.nonfinite) fail_nonfinite(t, epoch, it, &r);
      if (r.images == 0)
        log_warn("epoch %lld iteration %lld: every image of the batch was left out (invalid after "
                 "min-max scaling); no update", (long long)epoch, (long long)it);
      add_metrics(t, &r);
      train_log_progress(t, epoch, it, &r);
      stop = r.stop || (max_steps > 0 && t->launch_steps >= max_steps);
      if (stop && it + 1 < t->niter) {
        t->ck.epoch = epoch;
        t->ck.iteration = it + 1;
        save(t, -1);
        log_info("train: stopped after %lld step%s of this launch (%s) inside epoch %lld; continue "
                 "with restart = .true.", (long long)t->launch_steps, t->launch_steps == 1 ? "" : "s",
                 r.stop ? "stop requested" : "max_steps", (long long)epoch);
        return;
      }
    }
    train_log_epoch(t, epoch);
    memset(&t->ck.metrics, 0, sizeof t->ck.metrics);
    t->ck.epoch = epoch + 1;
    t->ck.iteration = 0;
    save(t, epoch);
    if (stop && epoch + 1 < t->epochs) {
      log_info("train: stopped after %lld step%s of this launch at the end of epoch %lld; continue "
               "with restart = .true.", (long long)t->launch_steps, t->launch_steps == 1 ? "" : "s",
               (long long)epoch);
      return;
    }
  }
}

int train_run(const struct config *cfg) {
  struct trainer *t = xcalloc(1, sizeof *t);
  t->cfg = cfg;
  t->rank = comm_rank();
  t->world = comm_size();
  t->B = cfg->training.batch_size_per_rank;
  t->epochs = cfg->training.epochs;
  fs_join(t->ckpt_path, sizeof t->ckpt_path, cfg->control.run_dir, CKPT_FILE);
  if (t->rank == 0) fs_mkdir_p(cfg->control.run_dir);
  t->ops = backend_select(cfg);
  setup_data(t);
  setup_model(t);
  setup_schedules(t);
  t->gc = backend_grad_comm(t->ops);
  t->ck = (struct ckpt_state){.cfg = cfg, .model = t->model, .opt = &t->opt, .loss = &t->loss,
                              .nchannels = t->nchannels, .channels = t->channels,
                              .niter_per_epoch = t->niter, .world_size = t->world,
                              .n_train = t->split.n_train};
  train_log_setup(t);
  int64_t epoch, it;
  start_position(t, &epoch, &it);
  const double t0 = wtime();
  if (epoch >= t->epochs) {
    log_info("train: %s is at epoch %lld of %lld: nothing left to train", t->ckpt_path,
             (long long)epoch, (long long)t->epochs);
  } else {
    run_epochs(t, epoch, it);
    char dur[32];
    log_info("train: %lld steps in %s; last checkpoint %s", (long long)t->launch_steps,
             log_fmt_duration(wtime() - t0, dur, sizeof dur), t->last_good);
  }

  t->gc->destroy(t->gc);
#ifdef HAVE_CUDA
  if (t->ag) augment_gpu_destroy(t->ag);
#endif
  loader_destroy(t->loader);
  if (t->dev_global) t->ops->free(t->dev_global);
  if (t->dev_local) t->ops->free(t->dev_local);
  optim_free(&t->opt);
  dino_loss_free(&t->loss);
  dino_model_destroy(t->model);
  free(t->lr_sched);
  free(t->wd_sched);
  free(t->mom_sched);
  split_free(&t->split);
  dataset_close(t->ds);
  free(t);
  return 0;
}
