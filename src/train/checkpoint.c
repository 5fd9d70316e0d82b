/* checkpoint.c - writing training checkpoints (layout in checkpoint.h), by rank 0, atomically. */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
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
#include "input/config.h"
#include "model/dino_loss.h"
#include "model/optim.h"
#include "train/checkpoint.h"
#include "train/fault_inject.h"

const char *checkpoint_which_name(enum ckpt_which w) { return w == CKPT_TEACHER ? "teacher" : "student"; }

/* ---- HDF5 helpers ----------------------------------------------------------------------------- */

/* The checkpoint being made, for messages. */
static const char *wpath;

static herr_t innermost(unsigned n, const H5E_error2_t *e, void *data) {
  if (n == 0 && e->desc) snprintf(data, 512, "%s", e->desc);
  return 0;
}

/* The HDF5 file is built in memory (write_image does the I/O), so an HDF5 failure here is not a
 * full disk but an internal error or lack of memory. */
static long long wcheck(long long ret, const char *expr) {
  if (ret >= 0) return ret;
  char msg[512] = "HDF5 error";
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, msg);
  scd_fatal(SCD_EXIT_FAILURE, "cannot build checkpoint %s in memory: %s failed (%s)", wpath ? wpath : "?", expr,
            msg);
}
#define W(call) wcheck((long long)(call), #call)

static void attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, int n, const void *v) {
  hsize_t dims[1] = {(hsize_t)n};
  hid_t sp = (hid_t)W(n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, NULL));
  hid_t a = (hid_t)W(H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT));
  W(H5Awrite(a, mtype, v));
  W(H5Aclose(a));
  W(H5Sclose(sp));
}

static void attr_i64(hid_t obj, const char *name, int64_t v) {
  attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &v);
}

static void attr_f64(hid_t obj, const char *name, double v) {
  attr_write(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 1, &v);
}

static void attr_str(hid_t obj, const char *name, const char *v) {
  hid_t t = (hid_t)W(H5Tcopy(H5T_C_S1));
  W(H5Tset_size(t, H5T_VARIABLE));
  W(H5Tset_cset(t, H5T_CSET_UTF8));
  attr_write(obj, name, t, t, 1, &v);
  W(H5Tclose(t));
}

static hid_t group_new(hid_t parent, const char *name) {
  return (hid_t)W(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
}

/* One tensor of a flat host buffer as a float32 dataset with its PyTorch shape. */
static void write_tensor(hid_t g, const struct tensor *t, const float *flat) {
  hsize_t dims[TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
  hid_t sp = (hid_t)W(H5Screate_simple(t->ndim, dims, NULL));
  hid_t ds = (hid_t)W(H5Dcreate2(g, t->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  W(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat + t->off));
  W(H5Dclose(ds));
  W(H5Sclose(sp));
}

static void write_scalar_i64(hid_t g, const char *name, int64_t v) {
  hid_t sp = (hid_t)W(H5Screate(H5S_SCALAR));
  hid_t ds = (hid_t)W(H5Dcreate2(g, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  W(H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v));
  W(H5Dclose(ds));
  W(H5Sclose(sp));
}

/* The effective deck as text (what input.echo.nml holds), malloc'd. */
static char *deck_text(const struct config *cfg) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) SCD_FAIL("open_memstream failed");
  config_echo(f, cfg);
  if (fclose(f) != 0) SCD_FAIL("cannot format the deck");
  return buf;
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
  ops->download(h->m, st->opt->m, bytes);
  ops->download(h->v, st->opt->v, bytes);
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
  attr_str(fid, "format", CKPT_FORMAT);
  attr_i64(fid, "version", CKPT_VERSION);
  attr_i64(fid, "epoch", st->epoch);
  attr_i64(fid, "iteration", st->iteration);
  attr_i64(fid, "global_step", st->epoch * st->niter_per_epoch + st->iteration);
  attr_i64(fid, "niter_per_epoch", st->niter_per_epoch);
  attr_i64(fid, "epochs", cfg->training.epochs);
  attr_i64(fid, "world_size", st->world_size);
  attr_i64(fid, "batch_size_per_rank", cfg->training.batch_size_per_rank);
  attr_str(fid, "arch", cfg->model.arch);
  attr_i64(fid, "patch_size", s->vit.patch);
  attr_i64(fid, "in_chans", s->vit.in_chans);
  attr_i64(fid, "embed_dim", s->vit.dim);
  attr_i64(fid, "depth", s->vit.depth);
  attr_i64(fid, "num_heads", s->vit.heads);
  attr_i64(fid, "mlp_hidden", s->vit.mlp_hidden);
  attr_i64(fid, "pos_grid", s->vit.pos_grid);
  attr_f64(fid, "drop_path_rate", s->vit.drop_path_rate);
  attr_str(fid, "gelu_approximate", s->vit.gelu_approx ? "tanh" : "none");
  attr_i64(fid, "out_dim", s->head.out_dim);
  attr_i64(fid, "head_hidden_dim", s->head.hidden);
  attr_i64(fid, "head_bottleneck_dim", s->head.bottleneck);
  attr_i64(fid, "head_nlayers", s->head.nlayers);
  attr_i64(fid, "norm_last_layer", s->head.norm_last_layer ? 1 : 0);
  int64_t ch[CKPT_MAX_CHANNELS];
  SCD_ASSERT(st->nchannels >= 1 && st->nchannels <= CKPT_MAX_CHANNELS);
  for (int i = 0; i < st->nchannels; i++) ch[i] = st->channels[i];
  attr_write(fid, "channels", H5T_STD_I64LE, H5T_NATIVE_INT64, st->nchannels, ch);
  attr_i64(fid, "global_size", cfg->crops.global_size);
  attr_i64(fid, "local_size", cfg->crops.local_size);
  attr_i64(fid, "local_crops_number", cfg->crops.local_crops_number);
  attr_i64(fid, "seed", cfg->control.seed);
  attr_str(fid, "scdino_version", PACKAGE_VERSION);
  attr_str(fid, "deck", deck);
  /* For job scripts: training_complete = 1 once every epoch has run; stopped_by says why a run
   * stopped before that ("" at an epoch boundary of an uninterrupted run, "max_steps", "SIGTERM"). */
  attr_i64(fid, "training_complete", st->epoch >= cfg->training.epochs ? 1 : 0);
  attr_str(fid, "stopped_by", st->stopped_by ? st->stopped_by : "");
}

/* The whole checkpoint as an HDF5 file image in memory (the core driver, no file on disk): every
 * byte of I/O is then done, and checked, by write_image.  Returns it malloc'd, its size in *size;
 * frees h's buffers on the way.
 * (HDF5 1.10 cannot close a file whose write failed, and crashes at exit trying again; an image
 * never fails to write.) */
static void *build_image(const struct ckpt_state *st, struct host_state *h, const char *deck,
                         size_t *size) {
  const struct tensor_table *tt = &st->model->tt;
  hid_t fapl = (hid_t)W(H5Pcreate(H5P_FILE_ACCESS));
  W(H5Pset_fapl_core(fapl, (size_t)16 << 20, 0));
  hid_t fid = (hid_t)W(H5Fcreate("scdino-checkpoint-image", H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  W(H5Pclose(fapl));
  write_root_attrs(fid, st, deck);

  hid_t gs = group_new(fid, "student"), gt = group_new(fid, "teacher");
  for (int i = 0; i < tt->n; i++) {
    write_tensor(gs, &tt->t[i], h->student);
    write_tensor(gt, &tt->t[i], h->teacher);
  }
  W(H5Gclose(gs));
  W(H5Gclose(gt));

  /* Optimizer state of every trainable tensor (PyTorch's AdamW defaults, per-tensor steps). */
  hid_t go = group_new(fid, "optimizer");
  attr_str(go, "algorithm", "adamw");
  attr_f64(go, "beta1", OPTIM_BETA1);
  attr_f64(go, "beta2", OPTIM_BETA2);
  attr_f64(go, "eps", OPTIM_EPS);
  hid_t gm = group_new(go, "exp_avg"), gv = group_new(go, "exp_avg_sq"), gn = group_new(go, "step");
  for (int i = 0; i < tt->n; i++) {
    const struct tensor *t = &tt->t[i];
    if (!(t->flags & TENSOR_GRAD)) continue;
    write_tensor(gm, t, h->m);
    write_tensor(gv, t, h->v);
    write_scalar_i64(gn, t->name, st->opt->steps[i]);
  }
  W(H5Gclose(gm));
  W(H5Gclose(gv));
  W(H5Gclose(gn));
  W(H5Gclose(go));

  hid_t gl = group_new(fid, "dino_loss");
  struct tensor c = {.ndim = 2, .shape = {1, st->loss->K}, .off = 0, .n = (size_t)st->loss->K};
  snprintf(c.name, sizeof c.name, "center");
  write_tensor(gl, &c, h->center);
  W(H5Gclose(gl));
  /* The tensors are in the image now: their host copies go before the image is copied out, so
   * that rank 0 holds two copies of the state at most, not three. */
  host_free(h);

  /* Where the data stream continues: every rank's batches, crops and drop-path masks follow from
   * these counters and the seed (checkpoint.h). */
  hid_t gd = group_new(fid, "loader");
  attr_str(gd, "rng", "philox4x32-10 counter streams keyed by (seed, domain, epoch or step, sample)");
  attr_i64(gd, "seed", st->cfg->control.seed);
  attr_i64(gd, "epoch", st->epoch);
  attr_i64(gd, "next_batch", st->iteration);
  attr_i64(gd, "batches_per_epoch", st->niter_per_epoch);
  attr_i64(gd, "world_size", st->world_size);
  attr_i64(gd, "batch_size_per_rank", st->cfg->training.batch_size_per_rank);
  attr_i64(gd, "n_train", st->n_train);
  attr_str(gd, "shard_dir", st->cfg->data.shard_dir);
  W(H5Gclose(gd));

  hid_t gx = group_new(fid, "train_metrics");
  attr_f64(gx, "loss_sum", st->metrics.loss_sum);
  attr_f64(gx, "loss_count", st->metrics.loss_count);
  attr_f64(gx, "lr_sum", st->metrics.lr_sum);
  attr_f64(gx, "wd_sum", st->metrics.wd_sum);
  attr_i64(gx, "steps", st->metrics.steps);
  attr_i64(gx, "images", st->metrics.images);
  attr_f64(gx, "seconds", st->metrics.seconds);
  W(H5Gclose(gx));

  W(H5Fflush(fid, H5F_SCOPE_GLOBAL));
  const ssize_t n = (ssize_t)W(H5Fget_file_image(fid, NULL, 0));
  void *image = xmalloc((size_t)n);
  W(H5Fget_file_image(fid, image, (size_t)n));
  W(H5Fclose(fid));
  *size = (size_t)n;
  return image;
}

/* A failed write (disk full, quota, ulimit -f, I/O error): the file, errno, and what is left. */
SCD_NORETURN static void write_failed(const char *tmp, const char *path, size_t done, size_t size, int err) {
  scd_fatal(SCD_EXIT_FAILURE,
            "cannot write checkpoint %s: errno %d: %s (after %zu of %zu bytes) - disk full, quota or file-size "
            "limit?  The temporary file is removed; %s %s",
            tmp, err, strerror(err), done, size, path,
            fs_exists(path) ? "is left as it was (the last good checkpoint)" : "was not written");
}

/* The image to path: temporary name, every write checked, fsync, rename (keeping the previous
 * checkpoint when keep_prev). */
static void write_image(const char *path, const void *image, size_t size, int keep_prev,
                        const struct config *cfg) {
  char tmp[PATH_MAX];
  fs_atomic_begin(path, tmp, sizeof tmp);
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) write_failed(tmp, path, 0, size, errno);
  const char *p = image;
  size_t done = 0;
  while (done < size) {
    /* &debug checkpoint_pause: stop half-way, for the kill -9 test. */
    if (done >= size / 2) fault_inject_checkpoint_pause(cfg, tmp);
    size_t chunk = size - done;
    if (done < size / 2 && chunk > size / 2 - done) chunk = size / 2 - done;
    if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
    const ssize_t w = write(fd, p + done, chunk);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      close(fd);
      write_failed(tmp, path, done, size, err);
    }
    done += (size_t)w;
  }
  if (fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    close(fd);
    write_failed(tmp, path, done, size, err);
  }
  if (close(fd) != 0) write_failed(tmp, path, done, size, errno);
  checkpoint_install(tmp, path, keep_prev);
}

void checkpoint_save_many(const char *const *paths, int npaths, const struct ckpt_state *st) {
  if (comm_rank() == 0) {
    const double t0 = wtime();
    struct host_state h;
    host_download(st, &h);
    char *deck = deck_text(st->cfg);
    /* HDF5 is not thread-safe and the loader threads may be reading shards through it. */
    wpath = paths[0];
    h5util_lock();
    size_t size;
    void *image = build_image(st, &h, deck, &size);
    h5util_unlock();
    free(deck);
    /* One image, written to checkpoint.h5 (keeping the previous one) and checkpoint_EEEE.h5. */
    for (int i = 0; i < npaths; i++) write_image(paths[i], image, size, i == 0 && st->keep_prev, st->cfg);
    free(image);
    wpath = NULL;
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
