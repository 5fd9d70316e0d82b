/* train_metrics.c - &system metrics_file: the live state of a training run in Prometheus's text
 * exposition format, rewritten atomically by rank 0 with every progress line, for node_exporter's
 * textfile collector (doc/parallelcluster.md, "Monitoring"). */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "train/train_priv.h"
#ifdef HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

/* A label value with Prometheus's escapes (backslash, double quote, newline). */
static void label_escape(char *out, size_t n, const char *s) {
  size_t k = 0;
  for (; *s && k + 2 < n; s++) {
    if (*s == '\\' || *s == '"' || *s == '\n') out[k++] = '\\';
    out[k++] = *s == '\n' ? 'n' : *s;
  }
  out[k] = 0;
}

/* A sample value: Prometheus writes non-finite values as NaN, +Inf, -Inf. */
static void value(FILE *f, double x) {
  if (isnan(x))
    fputs("NaN", f);
  else if (isinf(x))
    fputs(x > 0 ? "+Inf" : "-Inf", f);
  else
    fprintf(f, "%.17g", x);
}

static void metric(FILE *f, const char *name, const char *help, const char *ids, const char *extra, double x) {
  if (help) fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
  fprintf(f, "%s{%s%s%s} ", name, ids, extra ? "," : "", extra ? extra : "");
  value(f, x);
  fputc('\n', f);
}

void train_metrics_write(struct trainer *t, int64_t epoch, int64_t step, double loss, const struct step_result *r) {
  const struct config *cfg = t->cfg;
  if (!cfg->system.metrics_file[0]) return;
  /* Every rank's memory, gathered (every rank is here: the progress line is collective). */
  double mine[2] = {log_peak_rss_mib() * 1048576.0, -1};
#ifdef HAVE_CUDA
  if (!strcmp(t->ops->name, "cuda")) {
    size_t in_use = 0, peak = 0;
    backend_cuda_memory(&in_use, &peak, NULL, NULL);
    mine[1] = (double)peak;
  }
#endif
  double *all = xmalloc(sizeof(double) * 2 * (size_t)t->world);
  comm_allgather(mine, all, sizeof mine);
  if (t->rank != 0) {
    free(all);
    return;
  }
  const struct train_window *w = &t->win;
  const double dt = wtime() - w->t0, per = w->steps > 0 ? 1.0 / (double)w->steps : 0;
  char run[1024], job[256], host[256] = "", arch[64], ids[2048];
  label_escape(run, sizeof run, cfg->control.run_dir);
  const char *slurm = getenv("SLURM_JOB_ID"); /* a label only: nothing is decided by it */
  label_escape(job, sizeof job, slurm ? slurm : "");
  gethostname(host, sizeof host - 1);
  char h[512];
  label_escape(h, sizeof h, host);
  label_escape(arch, sizeof arch, cfg->model.arch);
  snprintf(ids, sizeof ids, "run_dir=\"%s\",job=\"%s\",host=\"%s\"", run, job, h);

  struct fs_mem m;
  FILE *f = fs_mem_begin(&m);
  char extra[256];
  snprintf(extra, sizeof extra, "version=\"%s\",arch=\"%s\",backend=\"%s\",ranks=\"%d\"", PACKAGE_VERSION, arch,
           t->ops->name, t->world);
  metric(f, "scdino_info", "The training run: scdino version, model, backend, ranks (always 1).", ids, extra, 1);
  metric(f, "scdino_epoch", "Epoch in progress (0-based).", ids, NULL, (double)epoch);
  metric(f, "scdino_global_step", "Training steps done since the start of the run.", ids, NULL, (double)step);
  metric(f, "scdino_total_steps", "Training steps of the whole run (epochs x iterations per epoch).", ids, NULL,
         (double)t->total_steps);
  metric(f, "scdino_loss", "DINO loss of the last step, averaged over the ranks.", ids, NULL, loss);
  metric(f, "scdino_learning_rate", "Learning rate of the last step.", ids, NULL, r->lr);
  metric(f, "scdino_weight_decay", "Weight decay of the last step.", ids, NULL, r->wd);
  /* Collapse diagnostics of the last step (doc/algorithm.md §4.5). */
  metric(f, "scdino_teacher_entropy", "Mean entropy of the teacher's targets in the last step, nats.", ids, NULL,
         r->diag.entropy);
  metric(f, "scdino_teacher_batch_entropy", "Entropy of the last step's mean teacher target, nats (near 0: "
         "collapse to one prototype).", ids, NULL, r->diag.batch_entropy);
  metric(f, "scdino_loss_kl", "KL part of the last step's loss: loss minus teacher entropy.", ids, NULL,
         loss - r->diag.entropy);
  metric(f, "scdino_log_out_dim", "ln out_dim: the entropy of uniform targets.", ids, NULL, log((double)t->loss.K));
  metric(f, "scdino_center_norm", "Norm of the DINO centre.", ids, NULL, dino_loss_center_norm(&t->loss));
  metric(f, "scdino_images_per_second", "Training images per second over the steps since the last update.", ids,
         NULL, dt > 0 ? (double)w->images / dt : 0);
  const double data = w->data_s * per, comm = w->comm_s * per, all_s = dt * per;
  metric(f, "scdino_step_seconds",
         "Seconds per step since the last update: waiting for data, computing, and exposed (not overlapped) "
         "communication.", ids, "part=\"data\"", data);
  metric(f, "scdino_step_seconds", NULL, ids, "part=\"compute\"", fmax(0.0, all_s - data - comm));
  metric(f, "scdino_step_seconds", NULL, ids, "part=\"comm\"", comm);
  for (int k = 0; k < t->world; k++) {
    snprintf(extra, sizeof extra, "rank=\"%d\"", k);
    metric(f, "scdino_memory_peak_bytes", k == 0 ? "Peak resident host memory of each rank." : NULL, ids, extra,
           all[2 * k]);
  }
  for (int k = 0; k < t->world && all[1] >= 0; k++) {
    snprintf(extra, sizeof extra, "rank=\"%d\"", k);
    metric(f, "scdino_gpu_memory_peak_bytes", k == 0 ? "Peak GPU memory scdino allocated, by rank." : NULL, ids,
           extra, all[2 * k + 1]);
  }
  if (t->last_ckpt_time > 0)
    metric(f, "scdino_checkpoint_age_seconds", "Seconds since the newest checkpoint was written or restored.", ids,
           NULL, wtime() - t->last_ckpt_time);
  metric(f, "scdino_last_update_timestamp_seconds", "Unix time of this file's update.", ids, NULL,
         (double)time(NULL));
  free(all);
  fs_mem_commit(&m, "metrics file", cfg->system.metrics_file);
}
