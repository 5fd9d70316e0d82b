/* train.c - calculation='train': set-up, restart / init_from, the epoch loop and its checkpoints. */
#include "build_config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/watchdog.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/stage.h"
#include "model/model_config.h"
#include "model/schedule.h"
#include "train/fault_inject.h"
#include "train/train.h"
#include "train/train_priv.h"

static int stopped_early; /* the last train_run stopped on a request (agreed by all ranks) */


int train_stopped(void) { return stopped_early; }

/* ---- set-up ------------------------------------------------------------------------------------ */

static void setup_data(struct trainer *t) {
  const struct config *cfg = t->cfg;
  char manifest[PATH_MAX];
  fs_join(manifest, sizeof manifest, cfg->data.shard_dir, SHARDS_MANIFEST);
  int have = comm_rank() == 0 ? fs_exists(manifest) : 0;
  comm_bcast(&have, sizeof have, 0);
  if (!have) {
    if (!prepare_has_source(cfg))
      scd_fatal(SCD_EXIT_INPUT, "&data shard_dir = '%s' holds no %s and &data tiff_dir and file_list are "
                "empty: run calculation='prepare' first, or set tiff_dir or file_list", cfg->data.shard_dir,
                SHARDS_MANIFEST);
    /* As the pipeline does: convert the TIFF tree first (the deck's &data settings apply). */
    log_info("train: no shards in %s yet; preparing them from %s first", cfg->data.shard_dir,
             prepare_source(cfg));
  }
  /* With a TIFF tree (or file list) named, shards made from another one (or an older state of it)
   * are refused, as prepare refuses them (&data check_tiff_tree = .false. skips the walk). */
  if (prepare_has_source(cfg) && (!have || cfg->data.check_tiff_tree)) {
    const int rc = prepare_run(cfg);
    if (rc != 0) comm_exit_all(rc);
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", cfg->data.shard_dir);
  if (cfg->data.stage_dir[0]) stage_shards(cfg, dir, sizeof dir); /* node-local copies (data/stage.h) */
  t->ds = dataset_open(dir);
  split_dataset(t->ds, cfg->data.train_fraction, (uint32_t)cfg->data.split_seed, &t->split);
  train_memory_check(t); /* before the loader, the model and the schedules take their memory */
  /* A device with the crops service (the CUDA backend's) makes the crops from raw batches (the
   * same crops, bit for bit: backend/device.h); elsewhere the loader threads make them. */
  const struct device_crops *crops = t->dev->crops;
  t->loader = loader_create(cfg, t->ds, t->split.train, t->split.n_train, (int)t->B,
                            crops ? LOADER_RAW : LOADER_AUGMENT);
  const struct augment *a = loader_augment(t->loader);
  if (crops) t->ag = crops->create(a, (int)t->B);
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
  if (cfg->training.shard_optimizer) { /* ZeRO-1: moments of this rank's slice only (optim.h) */
    const struct tensor_table *tt = &t->model->tt;
    if (tt->size > INT_MAX)
      scd_fatal(SCD_EXIT_INPUT, "&training shard_optimizer = .true.: the model has %zu parameters, more than "
                "the %d the sharded optimizer's MPI calls can count; set it to .false.", tt->size, INT_MAX);
    shard_plan_init(&t->plan, tt, t->world, t->rank, OPS_NORM_BLOCK);
    t->gc = t->dev->grad_comm_shard(t->dev, &t->plan);
    optim_init_sharded(&t->opt, t->ops, tt, &t->plan, t->gc);
  } else {
    optim_init(&t->opt, t->ops, &t->model->tt);
  }
  /* fp16 activations: dynamic loss scaling (model/loss_scale.h), shared by the loss's gradient and
   * the optimizer's unscaling */
  loss_scale_init(&t->ls, !strcmp(t->ops->precision, "fp16"));
  t->loss.ls = &t->ls;
  t->opt.ls = &t->ls;
  if (t->ag) return; /* the device's crop maker owns the device crops */
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

/* A restart trains on the images its checkpoint's run trained on: another shard set (other images,
 * labels or statistics; a copy of the same set elsewhere is the same) is refused before anything
 * is loaded.  Checkpoints without a fingerprint (before it was recorded) are compared by the
 * training-split size only (a warning, in start_position). */
static void check_same_data(const struct trainer *t, const char *from, const struct ckpt_info *info) {
  if (!info->data_fingerprint[0]) return;
  char now[24];
  snprintf(now, sizeof now, "%016llx", (unsigned long long)dataset_fingerprint(t->ds));
  if (strcmp(now, info->data_fingerprint))
    scd_fatal(SCD_EXIT_INPUT,
              "restart from %s: &data shard_dir = '%s' holds another data set than the one the checkpoint's run "
              "trained on (%lld training images then, %lld now; fingerprint of images, labels and channel "
              "statistics %s then, %s now).  Point shard_dir at the shards it trained on, or start a new run with "
              "&training init_from to take the weights to this data",
              from, t->cfg->data.shard_dir, (long long)info->n_train, (long long)t->split.n_train,
              info->data_fingerprint, now);
}

/* The checkpoints keep what restarts changed: the record of the checkpoint continued from, and this
 * restart's line when it changed something (its newest lines when the record is full). */
static void record_changes(struct trainer *t, const struct ckpt_info *info, const char *changes) {
  char line[1200] = "";
  if (changes[0])
    snprintf(line, sizeof line, "global step %lld: %s",
             (long long)(info->epoch * (info->niter_per_epoch > 0 ? info->niter_per_epoch : 0) + info->iteration),
             changes);
  const char *old = info->restart_changes;
  size_t need = strlen(old) + (old[0] && line[0] ? 1 : 0) + strlen(line);
  while (need >= sizeof t->restart_changes && strchr(old, '\n')) { /* drop the oldest lines */
    old = strchr(old, '\n') + 1;
    need = strlen(old) + (old[0] && line[0] ? 1 : 0) + strlen(line);
  }
  const int n = snprintf(t->restart_changes, sizeof t->restart_changes, "%s%s%s", old, old[0] && line[0] ? "\n" : "",
                         line);
  if (n < 0 || (size_t)n >= sizeof t->restart_changes) /* one line longer than the record: its start kept */
    t->restart_changes[sizeof t->restart_changes - 1] = 0;
  t->ck.restart_changes = t->restart_changes;
}

/* Where this launch starts: a restart from run_dir/checkpoint.h5, init_from weights, or the seed.
 * Returns the first (epoch, iteration). */
static void start_position(struct trainer *t, int64_t *epoch, int64_t *it) {
  const struct config *cfg = t->cfg;
  *epoch = 0;
  *it = 0;
  if (cfg->training.restart) {
    char from[PATH_MAX];
    /* checkpoint.h5, or checkpoint.prev.h5 when checkpoint.h5 cannot be read (checkpoint_files.c). */
    const int fell_back = checkpoint_pick_restart(t->ckpt_path, from, sizeof from);
    if (from[0]) {
      struct ckpt_info info;
      static char old_echo[1 << 16];
      /* Before anything is loaded: a deck that trains something else is refused at once. */
      checkpoint_read_info(from, &info);
      check_same_data(t, from, &info);
      char changes[1024] = "";
      if (checkpoint_read_deck(from, old_echo, sizeof old_echo) == 0)
        restart_check_deck(from, old_echo, cfg, info.arithmetic, t->ops, changes, sizeof changes);
      record_changes(t, &info, changes);
      checkpoint_restore(from, &t->ck, &info);
      t->last_ckpt_time = wtime();
      snprintf(t->last_good, sizeof t->last_good, "%s", from);
      /* The unreadable checkpoint.h5 is replaced by the next save, not kept as the previous one. */
      t->ck.keep_prev = !fell_back;
      *epoch = t->ck.epoch;
      *it = t->ck.iteration;
      if (info.world_size != t->world || info.niter_per_epoch != t->niter ||
          info.batch_size_per_rank != t->B) {
        /* Schedules are recomputed for this run and indexed by epoch * niter + iteration; a
         * position inside an epoch keeps its share of the epoch. */
        log_warn("restart: %s was written by a run of %d rank(s) x batch %lld (%lld iterations per "
                 "epoch); this run has %d x %lld (%lld per epoch): it continues correctly but not "
                 "bit-identically to an uninterrupted run",
                 from, info.world_size, (long long)info.batch_size_per_rank,
                 (long long)info.niter_per_epoch, t->world, (long long)t->B, (long long)t->niter);
        if (*it > 0 && info.niter_per_epoch > 0)
          *it = llround((double)*it * (double)t->niter / (double)info.niter_per_epoch);
        if (*it >= t->niter) {
          *epoch += 1;
          *it = 0;
          memset(&t->ck.metrics, 0, sizeof t->ck.metrics);
        }
      }
      if (!info.data_fingerprint[0] && info.n_train && info.n_train != t->split.n_train)
        log_warn("restart: the checkpoint's run had %lld training images, this one has %lld",
                 (long long)info.n_train, (long long)t->split.n_train);
      log_info("restart: continuing from %s at epoch %lld, iteration %lld (global step %lld)",
               from, (long long)*epoch, (long long)*it, (long long)(*epoch * t->niter + *it));
      if (cfg->training.init_from[0])
        log_info("restart: init_from = '%s' is not used: the run continues from its own checkpoint",
                 cfg->training.init_from);
      return;
    }
    log_info("restart: %s does not exist; starting from scratch", t->ckpt_path);
  }
  if (cfg->training.init_from[0]) {
    struct ckpt_info info;
    struct ckpt_embed emb;
    checkpoint_embed_from_config(cfg, &emb);
    checkpoint_load_model(cfg->training.init_from, &emb, t->model, &info);
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
  watchdog_progress("a checkpoint write", t->ck.epoch * t->niter + t->ck.iteration);
  checkpoint_save_many(paths, n, &t->ck);
  t->last_ckpt_time = wtime();
  t->ck.keep_prev = 1;
  snprintf(t->last_good, sizeof t->last_good, "%s", t->ckpt_path);
  log_info("checkpoint %s%s%s (epoch %lld, iteration %lld)", t->ckpt_path, n > 1 ? " and " : "",
           n > 1 ? numbered : "", (long long)t->ck.epoch, (long long)t->ck.iteration);
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
  if (isfinite(r->diag.entropy) && isfinite(r->diag.batch_entropy)) {
    m->entropy_sum += r->diag.entropy;
    m->batch_entropy_sum += r->diag.batch_entropy;
    m->diag_steps += 1;
  }
  t->win.steps++;
  t->win.images += r->images;
  t->win.comm_s += r->comm_s;
  t->launch_steps++;
}

/* Why the loop stops after this step: NULL (it goes on), "max_steps", or the name of the signal
 * some rank received.  Every rank gets the same answer (r->stop is agreed; so is the signal). */
static const char *stop_reason(const struct trainer *t, const struct step_result *r) {
  if (r->stop) {
    double sig = (double)signals_received();
    comm_allreduce_max_f64(&sig, 1);
    return sig > 0 ? signals_name((int)sig) : "stop requested";
  }
  const long max_steps = t->cfg->training.max_steps;
  return max_steps > 0 && t->launch_steps >= max_steps ? "max_steps" : NULL;
}

/* After a stop: where the run is and the exact way to continue. */
static void log_restart_hint(const struct trainer *t) {
  log_info("train: %s holds epoch %lld, iteration %lld (global step %lld of %lld; stopped by %s).  To "
           "continue, run the same deck again%s; on %d rank%s with batch_size_per_rank %lld it continues "
           "bit-identically.",
           t->ckpt_path, (long long)t->ck.epoch, (long long)t->ck.iteration,
           (long long)(t->ck.epoch * t->niter + t->ck.iteration), (long long)t->total_steps, t->ck.stopped_by,
           t->cfg->training.restart ? " (it sets &training restart = .true.)" : " with &training restart = .true.",
           t->world, t->world > 1 ? "s" : "", (long long)t->B);
}

/* Run epochs from (epoch, it0); returns when done or stopped. */
static void run_epochs(struct trainer *t, int64_t epoch, int64_t it0) {
  const struct config *cfg = t->cfg;
  t->first_step = epoch * t->niter + it0;
  t->t_launch = wtime();
  t->win.t0 = t->t_launch;
  for (; epoch < t->epochs; epoch++, it0 = 0) {
    if (it0 == 0) memset(&t->ck.metrics, 0, sizeof t->ck.metrics);
    t->epoch_t0 = wtime() - t->ck.metrics.seconds;
    loader_start_epoch(t->loader, epoch, it0);
    const char *why = NULL;
    for (int64_t it = it0; it < t->niter; it++) {
      const int64_t step = epoch * t->niter + it;
      watchdog_progress("a training step", step);
      fault_inject_step(cfg, step);
      /* the batch the step before fetched (GPU augmentation: its wait was hidden or counted) */
      const struct loader_batch *b = t->next_b ? t->next_b : loader_next(t->loader);
      if (!t->next_b) t->win.data_s += b->wait_seconds;
      t->next_b = NULL;
      SCD_ASSERT(b && b->batch == it && b->epoch == epoch);
      struct step_result r;
      train_step(t, b, epoch, it, &r);
      t->win.data_s += r.data_s;
      if (r.nonfinite || r.bad_grad >= 0) train_guard_fail(t, epoch, it, &r);
      if (r.images == 0)
        log_warn("epoch %lld iteration %lld: every image of the batch was left out (invalid after "
                 "min-max scaling); no update", (long long)epoch, (long long)it);
      add_metrics(t, &r);
      train_log_progress(t, epoch, it, &r);
      why = stop_reason(t, &r);
      if (why && r.stop) stopped_early = 1;
      if (why && it + 1 < t->niter) {
        t->ck.epoch = epoch;
        t->ck.iteration = it + 1;
        t->ck.stopped_by = why;
        save(t, -1);
        log_info("train: stopped after %lld step%s of this launch (%s) inside epoch %lld; continue "
                 "with restart = .true.", (long long)t->launch_steps, t->launch_steps == 1 ? "" : "s",
                 why, (long long)epoch);
        log_restart_hint(t);
        return;
      }
    }
    train_log_epoch(t, epoch);
    memset(&t->ck.metrics, 0, sizeof t->ck.metrics);
    t->ck.epoch = epoch + 1;
    t->ck.iteration = 0;
    t->ck.stopped_by = why && epoch + 1 < t->epochs ? why : NULL;
    save(t, epoch);
    if (t->ck.stopped_by) {
      log_info("train: stopped after %lld step%s of this launch at the end of epoch %lld (%s); continue "
               "with restart = .true.", (long long)t->launch_steps, t->launch_steps == 1 ? "" : "s",
               (long long)epoch, why);
      log_restart_hint(t);
      return;
    }
    stopped_early = 0; /* a request in the very last step: the run is complete */
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
  stopped_early = 0;
  if (t->rank == 0) {
    fs_mkdir_p(cfg->control.run_dir);
    checkpoint_remove_stale(cfg->control.run_dir); /* (&system metrics_file was checked with the deck) */
  }
  t->dev = backend_select(cfg);
  t->ops = t->dev->ops;
  if (cfg->training.shard_optimizer && !t->dev->grad_comm_shard) /* the CUDA backend built without NCCL */
    scd_fatal(SCD_EXIT_INPUT, "&training shard_optimizer = .true. with the %s backend needs NCCL, and this scdino "
              "was built without it; set it to .false., or &system device = 'cpu'", t->dev->name);
  setup_data(t);
  setup_model(t);
  setup_schedules(t);
  if (!t->gc) t->gc = t->dev->grad_comm(t->dev); /* the sharded optimizer's is made with it */
  t->ck = (struct ckpt_state){.cfg = cfg, .model = t->model, .opt = &t->opt, .loss = &t->loss, .ls = &t->ls,
                              .nchannels = t->nchannels, .channels = t->channels, .ds = t->ds,
                              .niter_per_epoch = t->niter, .world_size = t->world,
                              .n_train = t->split.n_train, .keep_prev = 1,
                              .data_fingerprint = dataset_fingerprint(t->ds)};
  t->gnorms = xcalloc((size_t)t->model->tt.n, sizeof *t->gnorms);
  t->nan_pending = -1;
  fault_inject_setup(cfg, &t->model->tt);
  train_log_setup(t);
  int64_t epoch, it;
  start_position(t, &epoch, &it);
  const double t0 = wtime();
  if (epoch >= t->epochs) {
    log_info("train: %s is at epoch %lld of %lld: nothing left to train", t->ckpt_path,
             (long long)epoch, (long long)t->epochs);
  } else {
    /* From here a signal asks for a stop at the end of the step (signals.h), and a rank that makes
     * no progress for step_timeout seconds ends the job (watchdog.h). */
    signals_set_mode(SIGNALS_DEFER, "training");
    watchdog_start(cfg->system.step_timeout);
    run_epochs(t, epoch, it);
    watchdog_stop();
    char dur[32];
    log_info("train: %lld steps in %s; last checkpoint %s", (long long)t->launch_steps,
             log_fmt_duration(wtime() - t0, dur, sizeof dur), t->last_good);
  }

  t->gc->destroy(t->gc);
  if (t->dev->report) t->dev->report(); /* the CUDA backend's: &gpu gemm_tune */
  if (t->ag) t->dev->crops->destroy(t->ag);
  loader_destroy(t->loader);
  if (t->dev_global) t->ops->free(t->dev_global);
  if (t->dev_local) t->ops->free(t->dev_local);
  optim_free(&t->opt);
  if (t->plan.world) shard_plan_free(&t->plan);
  dino_loss_free(&t->loss);
  dino_model_destroy(t->model);
  free(t->lr_sched);
  free(t->wd_sched);
  free(t->mom_sched);
  free(t->gnorms);
  split_free(&t->split);
  dataset_close(t->ds);
  free(t);
  return 0;
}
