/* train_log.c - what training prints: start-up summary, progress lines, epoch averages, log.txt. */
#include "build_config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/progress.h"
#include "data/shards.h"
#include "train/train_priv.h"

void train_log_setup(const struct trainer *t) {
  const struct config *cfg = t->cfg;
  const struct dino_model *m = t->model;
  const struct vit_dims *v = &m->spec.vit;
  const struct head_dims *h = &m->spec.head;
  const struct tensor_table *tt = &m->tt;
  size_t nb = 0, nh = 0, ntrain = 0;
  for (int i = 0; i < tt->n; i++) {
    if (!strncmp(tt->t[i].name, "backbone.", 9))
      nb += tt->t[i].n;
    else
      nh += tt->t[i].n;
    if (tt->t[i].flags & TENSOR_GRAD) ntrain += tt->t[i].n;
  }
  log_info("train: model %s: ViT patch %d, dim %d, depth %d, heads %d, MLP %d, %d input channels, "
           "drop_path %.3g; head %d layers %d-%d-%d -> %d, norm_last_layer %s; GELU %s%s",
           cfg->model.arch, v->patch, v->dim, v->depth, v->heads, v->mlp_hidden, v->in_chans,
           v->drop_path_rate, h->nlayers, h->hidden, h->hidden, h->bottleneck, h->out_dim,
           h->norm_last_layer ? "true" : "false", v->gelu_approx ? "tanh" : "exact",
           vit_gelu_in_gemm(&m->vit, m->ops) ? " (in the MLP's GEMMs)" : "");
  log_info("train: %zu parameters (backbone %zu, head %zu), %zu trainable; activations %.1f MiB "
           "per rank", nb + nh, nb, nh, ntrain, m->acts.size / 1048576.0);
  const struct dataset *ds = t->ds;
  char chans[512] = "";
  size_t at = 0;
  for (int i = 0; i < t->nchannels && at < sizeof chans; i++)
    at += (size_t)snprintf(chans + at, sizeof chans - at, "%s%d (%s)", i ? ", " : "", t->channels[i],
                           dataset_channel_name(ds, t->channels[i]));
  log_info("train: data %s: %lld images of %d x %d x %d, %d classes; train split %lld, validation "
           "%lld (train_fraction %g, split_seed %ld); channels %s",
           cfg->data.shard_dir, (long long)dataset_count(ds), dataset_channels(ds),
           dataset_height(ds), dataset_width(ds), dataset_nclasses(ds), (long long)t->split.n_train,
           (long long)t->split.n_val, cfg->data.train_fraction, cfg->data.split_seed, chans);
  log_info("train: crops 2 x %ld px global (scale %g-%g) + %ld x %ld px local (scale %g-%g), "
           "augment %s",
           cfg->crops.global_size, cfg->crops.global_scale[0], cfg->crops.global_scale[1],
           cfg->crops.local_crops_number, cfg->crops.local_size, cfg->crops.local_scale[0],
           cfg->crops.local_scale[1], cfg->crops.augment ? "on" : "off (deterministic crops)");
  if (!strcmp(cfg->training.sampler, "balanced"))
    log_info("train: sampler balanced: each of the %lld draws of an epoch takes a class uniformly, then one of its "
             "images (with replacement)", (long long)t->split.n_train);
  log_info("train: batch %lld per rank x %d rank%s = %lld per step; %lld iterations per epoch, "
           "%lld epochs, %lld steps",
           (long long)t->B, t->world, t->world > 1 ? "s" : "", (long long)(t->B * t->world),
           (long long)t->niter, (long long)t->epochs, (long long)t->total_steps);
  log_info("train: lr peak %.6g (lr %g x %lld / 256) after %ld warm-up epochs, cosine to %g; "
           "weight decay %g -> %g; teacher momentum %g -> 1; teacher temperature %g -> %g over "
           "%ld epochs; clip_grad %g; last layer frozen for %ld epoch%s",
           t->lr_peak, cfg->training.lr, (long long)(t->B * t->world), cfg->training.warmup_epochs,
           cfg->training.min_lr, cfg->training.weight_decay, cfg->training.weight_decay_end,
           cfg->training.momentum_teacher, cfg->training.warmup_teacher_temp,
           cfg->training.teacher_temp, cfg->training.warmup_teacher_temp_epochs,
           cfg->training.clip_grad, cfg->training.freeze_last_layer,
           cfg->training.freeze_last_layer == 1 ? "" : "s");
  log_info("train: backend %s, gradient %s %s over %d rank%s", t->ops->name,
           t->opt.plan ? "reduce-scatter" : "all-reduce", t->gc->name, t->world, t->world > 1 ? "s" : "");
  if (t->ls.on)
    log_info("train: precision fp16 with dynamic loss scaling: initial scale %g, halved and the step skipped when a "
             "gradient overflows, doubled after %d finite steps in a row", (double)LOSS_SCALE_INIT, LOSS_SCALE_INTERVAL);
  if (t->opt.plan) { /* what the sharded optimizer keeps per rank, and what it saves */
    const struct shard_plan *p = t->opt.plan;
    const double mib = sizeof(float) / 1048576.0, full = 2.0 * (double)p->size * mib;
    /* both moments, and the slice the MPI reduce-scatter receives (NCCL reduces in place) */
    const int in_place = t->dev->shard_in_place;
    const double kept = (in_place ? 2.0 : 3.0) * (double)p->max_slice * mib;
    log_info("train: optimizer sharded over %d rank%s (&training shard_optimizer): AdamW moments of at most "
             "%zu of %zu elements per rank, %.1f MiB %s instead of %.1f MiB of moments unsharded: %.1f MiB "
             "per rank saved", p->world, p->world > 1 ? "s" : "", p->max_slice, p->size, kept,
             in_place ? "(the gradients reduced in place)" : "with the reduce-scatter's slice", full, full - kept);
  }
}

static void fmt_mem(double mib, char *buf, size_t n) {
  if (mib >= 1024)
    snprintf(buf, n, "%.1f GiB", mib / 1024);
  else
    snprintf(buf, n, "%.0f MiB", mib);
}

void train_log_progress(struct trainer *t, int64_t epoch, int64_t it, const struct step_result *r) {
  struct train_window *w = &t->win;
  const int last = it + 1 == t->niter;
  if (!(w->steps >= t->cfg->training.log_every || last)) return;
  const double now = wtime(), dt = now - w->t0;
  const int64_t step = epoch * t->niter + it + 1, done = step - t->first_step;
  char eta[32], mem[32];
  progress_fmt_eta(now - t->t_launch, done, t->total_steps - step, eta, sizeof eta);
  fmt_mem(log_peak_rss_mib(), mem, sizeof mem);
  const double loss = r->loss_ranks > 0 ? r->loss_sum / (double)r->loss_ranks : NAN;
  const double data = dt > 0 ? 100 * w->data_s / dt : 0, comm = dt > 0 ? 100 * w->comm_s / dt : 0;
  const double comp = dt > 0 ? fmax(0.0, 100.0 - data - comm) : 0;
  char scale[80] = ""; /* fp16: the loss scale and the steps skipped for overflows so far */
  if (t->ls.on)
    snprintf(scale, sizeof scale, " | loss scale %g, %lld skipped", (double)t->ls.scale, (long long)t->ls.skipped);
  log_info("Epoch [%lld/%lld] it %lld/%lld eta %s loss %.4f lr %.3e wd %.4f img/s %.1f | data %.0f%% "
           "compute %.0f%% comm %.0f%% | mem %s%s",
           (long long)epoch, (long long)t->epochs, (long long)(it + 1), (long long)t->niter, eta, loss,
           r->lr, r->wd, dt > 0 ? (double)w->images / dt : 0.0, data, comp, comm, mem, scale);
  /* Every rank's own share of the window: the rank that waits for data, or that the others wait
   * for in the all-reduce (their comm time is its lateness), shows here (&control verbosity = 3). */
  log_debug("train: global step %lld: %lld steps in %.3f s since the last line: waiting for data %.3f s, in "
            "communication %.3f s", (long long)step, (long long)w->steps, dt, w->data_s, w->comm_s);
  train_metrics_write(t, epoch, step, loss, r);
  memset(w, 0, sizeof *w);
  w->t0 = now;
}

/* A JSON number with all the digits of a double (JSON has no NaN: null). */
static void json_num(char *buf, size_t n, double x) {
  if (isfinite(x))
    snprintf(buf, n, "%.17g", x);
  else
    snprintf(buf, n, "null");
}

/* The "epoch" value of a log.txt line, or -1. */
static long long line_epoch(const char *line) {
  const char *p = strstr(line, "\"epoch\":");
  return p ? strtoll(p + 8, NULL, 10) : -1;
}

void train_log_epoch(struct trainer *t, int64_t epoch) {
  const struct ckpt_metrics *mt = &t->ck.metrics;
  const double loss = mt->loss_count > 0 ? mt->loss_sum / mt->loss_count : NAN;
  const double lr = mt->steps > 0 ? mt->lr_sum / (double)mt->steps : NAN;
  const double wd = mt->steps > 0 ? mt->wd_sum / (double)mt->steps : NAN;
  const double ips = mt->seconds > 0 ? (double)mt->images / mt->seconds : 0.0;
  char dur[32];
  log_info("Averaged stats: loss %.6f lr %.6e wd %.6f (epoch %lld: %lld steps, %lld images in %s, "
           "%.1f img/s)",
           loss, lr, wd, (long long)epoch, (long long)mt->steps, (long long)mt->images,
           log_fmt_duration(mt->seconds, dur, sizeof dur), ips);
  struct train_diag dg;
  train_diag_epoch(t, epoch, loss, &dg);
  /* What this rank's loader read in the epoch (from the node-local stage when there is one). */
  const long long got = dataset_bytes_delivered(t->ds), read = got - t->bytes_at_epoch;
  t->bytes_at_epoch = got;
  if (t->rank == 0) {
    const double mib = (double)read / 1048576.0;
    if (t->cfg->data.stage_dir[0])
      log_info("data: %.1f MiB of images read from the stage %s by rank 0 in the epoch, %.0f MiB/s", mib,
               t->cfg->data.stage_dir, mt->seconds > 0 ? mib / mt->seconds : 0.0);
    else
      log_detail("data: %.1f MiB of images read by rank 0 in the epoch, %.0f MiB/s", mib,
                 mt->seconds > 0 ? mib / mt->seconds : 0.0);
  }
  if (t->rank != 0) return;

  /* log.txt: upstream's fields first, then throughput, then the diagnostics; earlier epochs' lines
   * are kept. */
  char path[PATH_MAX];
  fs_join(path, sizeof path, t->cfg->control.run_dir, "log.txt");
  struct fs_mem txt;
  FILE *out = fs_mem_begin(&txt);
  FILE *in = fopen(path, "r");
  if (in) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
      const long long e = line_epoch(line);
      if (e >= 0 && e < epoch) fputs(line, out);
    }
    free(line);
    fclose(in);
  }
  char js[7][40];
  json_num(js[0], sizeof js[0], loss);
  json_num(js[1], sizeof js[1], lr);
  json_num(js[2], sizeof js[2], wd);
  json_num(js[3], sizeof js[3], dg.entropy);
  json_num(js[4], sizeof js[4], dg.batch_entropy);
  json_num(js[5], sizeof js[5], dg.kl);
  json_num(js[6], sizeof js[6], dg.center_norm);
  char scale[96] = ""; /* fp16: the loss scale at the epoch's end, the steps skipped so far */
  if (t->ls.on)
    snprintf(scale, sizeof scale, ", \"loss_scale\": %.9g, \"skipped_steps\": %lld", (double)t->ls.scale,
             (long long)t->ls.skipped);
  fprintf(out,
          "{\"train_loss\": %s, \"train_lr\": %s, \"train_wd\": %s, \"epoch\": %lld, "
          "\"images_per_second\": %.6g, \"epoch_seconds\": %.6g, \"images\": %lld, \"steps\": %lld, "
          "\"teacher_entropy\": %s, \"teacher_batch_entropy\": %s, \"kl\": %s, \"center_norm\": %s%s}\n",
          js[0], js[1], js[2], (long long)epoch, ips, mt->seconds, (long long)mt->images,
          (long long)mt->steps, js[3], js[4], js[5], js[6], scale);
  fs_mem_commit(&txt, "log", path);
}
