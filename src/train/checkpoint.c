/* checkpoint.c - writing training checkpoints (layout in checkpoint.h), by rank 0, atomically. */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "data/shards.h"
#include "input/config.h"
#include "model/dino_loss.h"
#include "model/optim.h"
#include "train/checkpoint.h"
#include "train/fault_inject.h"

const char *checkpoint_which_name(enum ckpt_which w) { return w == CKPT_TEACHER ? "teacher" : "student"; }

/* ---- HDF5 helpers ----------------------------------------------------------------------------- */

/* One tensor of a flat host buffer as a float32 dataset with its PyTorch shape. */
static void write_tensor(hid_t g, const struct tensor *t, const float *flat) {
  hsize_t dims[TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
  h5util_dset_write(g, t->name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t->ndim, dims, flat + t->off);
}

int checkpoint_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* ---- the host image of a checkpoint ------------------------------------------------------------ */

struct host_state {
  float *student, *teacher, *m, *v, *center;
};

static void host_download(const struct ckpt_state *st, struct host_state *h) {
  const struct dino_model *m = st->model;
  const struct ops *ops = m->ops;
  const size_t bytes = MUL_SIZE(m->tt.size, sizeof(float));
  h->student = xmalloc(bytes);
  h->teacher = xmalloc(bytes);
  h->m = xmalloc(bytes);
  h->v = xmalloc(bytes);
  h->center = xmalloc(MUL_SIZE((size_t)st->loss->K, sizeof(float)));
  ops->download(h->student, m->student, bytes);
  ops->download(h->teacher, m->teacher, bytes);
  optim_moments_download(st->opt, h->m, h->v); /* sharded: the slices gathered (collective) */
  ops->download(h->center, st->loss->center, (size_t)st->loss->K * sizeof(float));
}

static void host_free(struct host_state *h) {
  free(h->student);
  free(h->teacher);
  free(h->m);
  free(h->v);
  free(h->center);
}

static void write_root_attrs(hid_t fid, const struct ckpt_state *st, const char *deck) {
  const struct config *cfg = st->cfg;
  const struct dino_spec *s = &st->model->spec;
  h5util_attr_write_str(fid, "format", CKPT_FORMAT);
  h5util_attr_write_i64(fid, "version", CKPT_VERSION);
  h5util_attr_write_i64(fid, "epoch", st->epoch);
  h5util_attr_write_i64(fid, "iteration", st->iteration);
  h5util_attr_write_i64(fid, "global_step", st->epoch * st->niter_per_epoch + st->iteration);
  h5util_attr_write_i64(fid, "niter_per_epoch", st->niter_per_epoch);
  h5util_attr_write_i64(fid, "epochs", cfg->training.epochs);
  h5util_attr_write_i64(fid, "world_size", st->world_size);
  h5util_attr_write_i64(fid, "batch_size_per_rank", cfg->training.batch_size_per_rank);
  h5util_attr_write_str(fid, "arch", cfg->model.arch);
  h5util_attr_write_i64(fid, "patch_size", s->vit.patch);
  h5util_attr_write_i64(fid, "in_chans", s->vit.in_chans);
  h5util_attr_write_i64(fid, "embed_dim", s->vit.dim);
  h5util_attr_write_i64(fid, "depth", s->vit.depth);
  h5util_attr_write_i64(fid, "num_heads", s->vit.heads);
  h5util_attr_write_i64(fid, "mlp_hidden", s->vit.mlp_hidden);
  h5util_attr_write_i64(fid, "pos_grid", s->vit.pos_grid);
  h5util_attr_write_f64(fid, "drop_path_rate", s->vit.drop_path_rate);
  h5util_attr_write_str(fid, "gelu_approximate", s->vit.gelu_approx ? "tanh" : "none");
  h5util_attr_write_i64(fid, "out_dim", s->head.out_dim);
  h5util_attr_write_i64(fid, "head_hidden_dim", s->head.hidden);
  h5util_attr_write_i64(fid, "head_bottleneck_dim", s->head.bottleneck);
  h5util_attr_write_i64(fid, "head_nlayers", s->head.nlayers);
  h5util_attr_write_i64(fid, "norm_last_layer", s->head.norm_last_layer ? 1 : 0);
  int64_t ch[CKPT_MAX_CHANNELS];
  SCD_ASSERT(st->nchannels >= 1 && st->nchannels <= CKPT_MAX_CHANNELS);
  for (int i = 0; i < st->nchannels; i++) ch[i] = st->channels[i];
  /* One channel is a scalar attribute, several a 1-D one: the layout checkpoints have always had. */
  h5util_attr_write(fid, "channels", H5T_STD_I64LE, H5T_NATIVE_INT64, st->nchannels == 1 ? 0 : (hsize_t)st->nchannels,
                    ch);
  h5util_attr_write_i64(fid, "global_size", cfg->crops.global_size);
  h5util_attr_write_i64(fid, "local_size", cfg->crops.local_size);
  h5util_attr_write_i64(fid, "local_crops_number", cfg->crops.local_crops_number);
  h5util_attr_write_i64(fid, "seed", cfg->control.seed);
  h5util_attr_write_str(fid, "scdino_version", PACKAGE_VERSION);
  h5util_attr_write_str(fid, "deck", deck);
  h5util_attr_write_i64(fid, "threads", checkpoint_threads());
  char arith[sizeof ((struct ckpt_info *)0)->arithmetic];
  st->model->ops->arithmetic(arith, sizeof arith);
  h5util_attr_write_str(fid, "arithmetic", arith);
  /* For job scripts: training_complete = 1 once every epoch has run; stopped_by says why a run
   * stopped before that ("" at an epoch boundary of an uninterrupted run, "max_steps", "SIGTERM"). */
  h5util_attr_write_i64(fid, "training_complete", st->epoch >= cfg->training.epochs ? 1 : 0);
  h5util_attr_write_str(fid, "stopped_by", st->stopped_by ? st->stopped_by : "");
  h5util_attr_write_str(fid, "restart_changes", st->restart_changes ? st->restart_changes : "");
}

/* The training set's per-channel mean/std of the selected channels and their names: what the
 * features and attention of other shard sets normalise with and match channels by (&features
 * normalization = 'checkpoint', doc/algorithm.md §8.1). */
static void write_normalization(hid_t fid, const struct ckpt_state *st) {
  const int n = st->nchannels;
  double mean[CKPT_MAX_CHANNELS], std[CKPT_MAX_CHANNELS];
  const char *names[CKPT_MAX_CHANNELS];
  for (int i = 0; i < n; i++) {
    const int c = st->channels[i];
    mean[i] = dataset_mean(st->ds)[c];
    std[i] = dataset_std(st->ds)[c];
    names[i] = dataset_channel_name(st->ds, c);
  }
  const hsize_t dims = (hsize_t)n;
  hid_t g = h5util_group_create(fid, "normalization");
  h5util_dset_write(g, "mean", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &dims, mean);
  h5util_dset_write(g, "std", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &dims, std);
  h5util_dset_write_strs(g, "channel_names", names, dims);
  CHECK_H5(H5Gclose(g));
}

/* The whole checkpoint as an HDF5 file image in memory (the core driver, no file on disk): every
 * byte of I/O is then done, and checked, by write_image.  Returns it malloc'd, its size in *size;
 * frees h's buffers on the way.
 * (HDF5 1.10 cannot close a file whose write failed, and crashes at exit trying again; an image
 * never fails to write.) */
static void *build_image(const char *path, const struct ckpt_state *st, struct host_state *h, const char *deck,
                         size_t *size) {
  const struct tensor_table *tt = &st->model->tt;
  /* Named after the checkpoint, which the writers' failure messages then name (without a backing
   * store the core driver never touches a file of that name). */
  char name[PATH_MAX + 32];
  snprintf(name, sizeof name, "%s (built in memory)", path);
  struct h5util_image img;
  hid_t fid = h5util_image_create(name, &img);
  write_root_attrs(fid, st, deck);
  if (st->ds) write_normalization(fid, st);

  hid_t gs = h5util_group_create(fid, "student"), gt = h5util_group_create(fid, "teacher");
  for (int i = 0; i < tt->n; i++) {
    write_tensor(gs, &tt->t[i], h->student);
    write_tensor(gt, &tt->t[i], h->teacher);
  }
  CHECK_H5(H5Gclose(gs));
  CHECK_H5(H5Gclose(gt));

  /* Optimizer state of every trainable tensor (PyTorch's AdamW defaults, per-tensor steps). */
  hid_t go = h5util_group_create(fid, "optimizer");
  h5util_attr_write_str(go, "algorithm", "adamw");
  h5util_attr_write_f64(go, "beta1", OPTIM_BETA1);
  h5util_attr_write_f64(go, "beta2", OPTIM_BETA2);
  h5util_attr_write_f64(go, "eps", OPTIM_EPS);
  hid_t gm = h5util_group_create(go, "exp_avg"), gv = h5util_group_create(go, "exp_avg_sq");
  hid_t gn = h5util_group_create(go, "step");
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    if (!(t->flags & TENSOR_GRAD)) continue;
    write_tensor(gm, t, h->m);
    write_tensor(gv, t, h->v);
    h5util_dset_write(gn, t->name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, NULL, &st->opt->steps[i]);
  }
  CHECK_H5(H5Gclose(gm));
  CHECK_H5(H5Gclose(gv));
  CHECK_H5(H5Gclose(gn));
  CHECK_H5(H5Gclose(go));

  hid_t gl = h5util_group_create(fid, "dino_loss");
  struct tensor c = {.ndim = 2, .shape = {1, st->loss->K}, .off = 0, .n = (size_t)st->loss->K};
  snprintf(c.name, sizeof c.name, "center");
  write_tensor(gl, &c, h->center);
  CHECK_H5(H5Gclose(gl));
  if (st->ls && st->ls->on) { /* fp16: the loss scale continues where it was (loss_scale.h) */
    hid_t gf = h5util_group_create(fid, "fp16_scaler");
    h5util_attr_write_f64(gf, "scale", (double)st->ls->scale);
    h5util_attr_write_i64(gf, "growth_tracker", st->ls->growth);
    h5util_attr_write_i64(gf, "skipped_steps", st->ls->skipped);
    h5util_attr_write_f64(gf, "growth_factor", 2.0);
    h5util_attr_write_f64(gf, "backoff_factor", 0.5);
    h5util_attr_write_i64(gf, "growth_interval", LOSS_SCALE_INTERVAL);
    CHECK_H5(H5Gclose(gf));
  }
  /* The tensors are in the image now: their host copies go before the image is copied out, so
   * that rank 0 holds two copies of the state at most, not three. */
  host_free(h);

  /* Where the data stream continues: every rank's batches, crops and drop-path masks follow from
   * these counters and the seed (checkpoint.h). */
  hid_t gd = h5util_group_create(fid, "loader");
  h5util_attr_write_str(gd, "rng", "philox4x32-10 counter streams keyed by (seed, domain, epoch or step, sample)");
  h5util_attr_write_i64(gd, "seed", st->cfg->control.seed);
  h5util_attr_write_i64(gd, "epoch", st->epoch);
  h5util_attr_write_i64(gd, "next_batch", st->iteration);
  h5util_attr_write_i64(gd, "batches_per_epoch", st->niter_per_epoch);
  h5util_attr_write_i64(gd, "world_size", st->world_size);
  /* (the batch size is the root attribute batch_size_per_rank; older files repeat it here) */
  h5util_attr_write_i64(gd, "n_train", st->n_train);
  h5util_attr_write_str(gd, "shard_dir", st->cfg->data.shard_dir);
  char fp[24];
  snprintf(fp, sizeof fp, "%016llx", (unsigned long long)st->data_fingerprint);
  h5util_attr_write_str(gd, "data_fingerprint", fp);
  CHECK_H5(H5Gclose(gd));

  hid_t gx = h5util_group_create(fid, "train_metrics");
  h5util_attr_write_f64(gx, "loss_sum", st->metrics.loss_sum);
  h5util_attr_write_f64(gx, "loss_count", st->metrics.loss_count);
  h5util_attr_write_f64(gx, "lr_sum", st->metrics.lr_sum);
  h5util_attr_write_f64(gx, "wd_sum", st->metrics.wd_sum);
  h5util_attr_write_i64(gx, "steps", st->metrics.steps);
  h5util_attr_write_i64(gx, "images", st->metrics.images);
  h5util_attr_write_f64(gx, "seconds", st->metrics.seconds);
  h5util_attr_write_f64(gx, "entropy_sum", st->metrics.entropy_sum);
  h5util_attr_write_f64(gx, "batch_entropy_sum", st->metrics.batch_entropy_sum);
  h5util_attr_write_f64(gx, "diag_steps", st->metrics.diag_steps);
  CHECK_H5(H5Gclose(gx));

  h5util_image_close(fid, &img);
  *size = img.size;
  return img.buf;
}

/* &debug checkpoint_pause: stop half-way, for the kill -9 test. */
static void pause_halfway(void *cfg, const char *tmp) { fault_inject_checkpoint_pause(cfg, tmp); }

/* The image to path: temporary name, every write checked, fsync, rename (keeping the previous
 * checkpoint when keep_prev). */
static void write_image(const char *path, const void *image, size_t size, int keep_prev,
                        const struct config *cfg) {
  char tmp[PATH_MAX];
  fs_atomic_begin(path, tmp, sizeof tmp);
  fs_write_buffer("checkpoint", tmp, path, image, size, pause_halfway, (void *)cfg);
  checkpoint_install(tmp, path, keep_prev);
}

void checkpoint_save_many(const char *const *paths, int npaths, const struct ckpt_state *st) {
  /* With the sharded optimizer the other ranks send rank 0 their slices of the moments. */
  if (comm_rank() != 0 && st->opt->plan) optim_moments_download(st->opt, NULL, NULL);
  if (comm_rank() == 0) {
    const double t0 = wtime();
    struct host_state h;
    host_download(st, &h);
    char *deck = config_echo_text(st->cfg); /* what input.echo.nml holds */
    const double t1 = wtime();
    /* HDF5 is not thread-safe and the loader threads may be reading shards through it. */
    h5util_lock();
    size_t size;
    void *image = build_image(paths[0], st, &h, deck, &size);
    h5util_unlock();
    free(deck);
    const double t2 = wtime();
    /* One image, written to checkpoint.h5 (keeping the previous one) and checkpoint_EEEE.h5. */
    for (int i = 0; i < npaths; i++) write_image(paths[i], image, size, i == 0 && st->keep_prev, st->cfg);
    free(image);
    /* Which phase a slow checkpoint spends its time in (&control verbosity = 3): the copy from the
     * device, the HDF5 image (waiting for the loader threads' HDF5 lock too), or the file system. */
    log_debug("checkpoint %s: %zu bytes; state copied to the host in %.3f s, HDF5 image built in %.3f s, "
              "written %d time(s) in %.3f s", paths[0], size, t1 - t0, t2 - t1, npaths, wtime() - t2);
    for (int i = 0; i < npaths; i++)
      log_detail("checkpoint %s written (epoch %lld, iteration %lld) in %.2f s", paths[i],
                 (long long)st->epoch, (long long)st->iteration, wtime() - t0);
  }
  /* No rank runs ahead of a checkpoint that may still fail. */
  comm_barrier();
}

void checkpoint_save(const char *path, const struct ckpt_state *st) {
  checkpoint_save_many(&path, 1, st);
}
