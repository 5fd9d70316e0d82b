/* train_step.c - one DINO training iteration on every rank (doc/algorithm.md §7.2). */
#include "build_config.h"

#include <math.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/signals.h"
#include "train/fault_inject.h"
#include "train/train.h"
#include "train/train_priv.h"

/* &debug nan_at_step: a NaN in the first element of the tensor's local gradient, in stream order
 * before the range goes to the all-reduce, which spreads it to every rank. */
static void inject_nan(struct trainer *t) {
  const float nan = NAN;
  t->ops->upload(t->model->grads + t->model->tt.t[t->nan_pending].off, &nan, sizeof nan);
  t->nan_pending = -1;
}

/* grads_ready: tensors first..last are final; their buffer range, padding up to the next tensor
 * included (so the ranges tile the buffer), goes to the communicator. */
static void on_grads_ready(int first, int last, void *ctx) {
  struct trainer *t = ctx;
  const struct grad_comm_range r = grad_comm_tensor_range(&t->model->tt, first, last);
  if (t->nan_pending >= first && t->nan_pending <= last) inject_nan(t);
  t->gc->bucket_ready(t->gc, r.off, r.count);
}

/* The per-step host all-reduce: images, losses, failures and stop requests of all ranks. */
static void combine(struct trainer *t, int n, double loss, struct step_result *r) {
  const int finite = isfinite(loss);
  double v[5] = {(double)n, n > 0 && finite ? loss : 0.0, n > 0 ? 1.0 : 0.0,
                 n > 0 && !finite ? 1.0 : 0.0, signals_received() ? 1.0 : 0.0};
  const double t0 = wtime();
  comm_allreduce_sum_f64(v, 5);
  r->comm_s += wtime() - t0;
  r->images = (int64_t)v[0];
  r->loss_sum = v[1];
  r->loss_ranks = (int64_t)v[2];
  r->nonfinite = (int)v[3];
  r->stop = v[4] > 0;
}

/* Crops made on the device (dev->crops): the epoch's next batch is fetched now and its crops are
 * made on the device (the GPU's augmentation stream) while this step's backward runs; the loader's
 * wait and the host part hide behind the queued backward (the data time counts only what the GPU
 * waited).  The crops depend on (seed, epoch, sample, crop) alone, so they are the same as when
 * made at the next step.  The first batch of an epoch is made at its own step. */
static void prefetch_next(struct trainer *t, int64_t it) {
  if (!t->ag || it + 1 >= t->niter) return;
  const struct device_crops *crops = t->dev->crops;
  crops->mark(t->ag);
  const struct loader_batch *nb = loader_next(t->loader); /* b is no longer valid */
  crops->start(t->ag, nb->raw, nb->index, nb->n, nb->epoch);
  t->next_b = nb;
  t->prefetched = nb->n > 0;
}

void train_step(struct trainer *t, const struct loader_batch *b, int64_t epoch, int64_t it,
                struct step_result *r) {
  const struct config *cfg = t->cfg;
  struct dino_model *m = t->model;
  const struct ops *ops = t->ops;
  const int64_t step = epoch * t->niter + it;
  memset(r, 0, sizeof *r);
  r->lr = t->lr_sched[step];
  r->wd = t->wd_sched[step];
  r->momentum = t->mom_sched[step];
  const int n = b->n;
  r->bad_grad = -1;
  r->diag.entropy = r->diag.batch_entropy = NAN;
  const int prefetched = t->prefetched; /* this batch's crops are already being made on the device */
  t->prefetched = 0;
  t->nan_pending = fault_inject_nan_tensor(cfg, step);

  /* Forward and loss.  A rank whose whole batch was dropped (every image invalid) contributes
   * zero gradients and zero teacher sums. */
  double loss = NAN;
  if (n > 0) {
    float *g = t->dev_global, *l = t->dev_local;
    if (t->ag) {
      if (!prefetched) t->dev->crops->start(t->ag, b->raw, b->index, n, b->epoch);
      t->dev->crops->take(t->ag, &g, &l);
    } else {
      const size_t C = (size_t)t->nchannels, G = (size_t)b->global_size, L = (size_t)b->local_size;
      ops->upload(g, b->global, MUL_SIZE(2 * (size_t)n * C, G * G) * sizeof(float));
      if (b->n_local > 0)
        ops->upload(l, b->local, MUL_SIZE((size_t)b->n_local * n * C, L * L) * sizeof(float));
    }
    if (fault_inject_nan_input(cfg, step)) { /* &debug: bad input data, found by the loss guard */
      const float v = NAN;
      ops->upload(g, &v, sizeof v);
    }
    /* Drop-path masks keyed by the global step and the images' global indices: the same for any
     * rank count and batch split. */
    struct dino_droppath dp = {(uint64_t)cfg->control.seed, (uint64_t)step, b->index};
    dino_model_forward(m, g, l, n, &dp);
    loss = dino_loss_forward(&t->loss, m->sh.logits, m->th.logits, m->sh.dlogits, n, epoch);
    dino_loss_stats(&t->loss, m->th.logits, n, epoch);
  } else {
    ops->zero(t->loss.tsum, (size_t)t->loss.K * sizeof(float));
    ops->zero(t->loss.stats, ((size_t)t->loss.K + 1) * sizeof(float));
    t->loss.have_tsum = 1;
  }
  r->loss_local = loss;
  combine(t, n, loss, r);
  if (r->nonfinite || r->images == 0) return; /* the caller stops the run */

  /* Centre: the teacher sums of all ranks over the number of teacher rows of all ranks.  Upstream
   * divides by its own rank's rows times the world size, which differs between ranks when the
   * last batch is partial; with equal batches both are the same number. */
  const double c0 = t->gc->wait_seconds;
  dino_loss_update_center(&t->loss, (int)r->images, 1, grad_comm_allreduce_cb, t->gc);
  /* The collapse diagnostics (doc/algorithm.md §4.5): their own all-reduce, so that the centre's
   * is the same call as without them. */
  dino_loss_stats_reduce(&t->loss, (int64_t)t->loss.nteacher * r->images, grad_comm_allreduce_cb, t->gc,
                         &r->diag);

  /* Backward; the all-reduce of each finished range starts inside. */
  t->gc->begin_step(t->gc, m->grads, m->tt.size);
  if (n > 0) {
    dino_model_backward(m, n, on_grads_ready, t);
  } else {
    /* Zero gradients, handed over in backward's groups and order all the same: the communicator
     * must issue the same all-reduce calls as the ranks that ran backward (collectives match by
     * order, not by size: one whole-buffer call here against their buckets would hang or fail). */
    ops->zero(m->grads, m->tt.size * sizeof(float));
    for (int k = 0; k < dino_ready_count(&m->vit); k++) {
      int first, last;
      dino_ready_group(&m->vit, &m->head, k, &first, &last);
      on_grads_ready(first, last, t);
    }
  }
  if (t->nan_pending >= 0) inject_nan(t); /* a range backward did not hand over: finish reduces it */
  prefetch_next(t, it); /* b is not used below */
  t->gc->finish(t->gc);
  r->comm_s += t->gc->wait_seconds - c0;

  /* Per-tensor clipping, last-layer freezing (epochs < freeze_last_layer), AdamW, teacher EMA
   * (one fused pass on backends that have it). */
  optim_update(&t->opt, m->student, m->grads, cfg->training.clip_grad, t->gnorms, r->lr, r->wd,
               epoch < cfg->training.freeze_last_layer, m->teacher, r->momentum);
  /* fp16: a step whose scaled gradients overflowed was skipped, the loss scale halved */
  r->skipped = t->ls.last_skipped;
  if (r->skipped)
    log_detail("train: global step %lld skipped: non-finite gradients at loss scale %g (an fp16 overflow); "
               "loss scale now %g, %lld step%s skipped so far", (long long)step, (double)t->ls.last_scale,
               (double)t->ls.scale, (long long)t->ls.skipped, t->ls.skipped == 1 ? "" : "s");
  /* The norms clipping computed are the non-finite check (train_guard.c). */
  train_guard_check_grads(t, r);
  if (t->ag) r->data_s = t->dev->crops->exposed_seconds(t->ag);
}
