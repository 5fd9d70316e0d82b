/* train_metrics.c - &system metrics_file: the live state of a training run in Prometheus's text
 * exposition format, rewritten atomically by rank 0 with every progress line, for node_exporter's
 * textfile collector (doc/parallelcluster.md, "Monitoring").  Best effort: it replaces only a file
 * of its own, and a write that fails never stops training (doc/faults.md). */
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

/* Length of the valid UTF-8 character at s (1 to 4), or 0 when the bytes there are not one
 * (a stray continuation byte, a cut or overlong sequence, a surrogate, above U+10FFFF). */
static int utf8_char(const unsigned char *s) {
  if (s[0] < 0x80) return 1;
  int n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  for (int i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0; /* also stops at the terminating NUL */
  if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
      (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
    return 0;
  return n;
}

/* A label value as Prometheus's text format wants it: UTF-8 (each byte that is not part of a valid
 * character becomes U+FFFD, so a folder name in another encoding cannot make the file unreadable),
 * with backslash, double quote and newline escaped.  Cut at a whole character to fit n. */
static void label_escape(char *out, size_t n, const char *text) {
  static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
  const unsigned char *s = (const unsigned char *)text;
  size_t k = 0;
  while (*s) {
    const int len = utf8_char(s);
    const char *src = len ? (const char *)s : replacement;
    const size_t m = len ? (size_t)len : 3;
    const int esc = *s == '\\' || *s == '"' || *s == '\n';
    if (k + m + (size_t)esc + 1 > n) break;
    if (esc) {
      out[k++] = '\\';
      out[k++] = *s == '\n' ? 'n' : (char)*s;
    } else {
      memcpy(out + k, src, m);
      k += m;
    }
    s += len ? len : 1;
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

/* Monitoring never stops training: a failed write is warned of once (again only when its reason
 * changes), each progress line tries again, and the first that succeeds says so.  why: NULL after a
 * write that worked. */
static void metrics_done(struct trainer *t, const char *why) {
  const char *path = t->cfg->system.metrics_file;
  if (!why) {
    if (t->metrics_failing[0])
      log_info("metrics file %s is written again (%lld update%s missed)", path, (long long)t->metrics_missed,
               t->metrics_missed == 1 ? "" : "s");
    t->metrics_failing[0] = '\0';
    t->metrics_missed = 0;
    return;
  }
  t->metrics_missed++;
  if (strcmp(why, t->metrics_failing) != 0)
    log_warn("metrics file %s not written: %s; training goes on, and every progress line tries again", path, why);
  snprintf(t->metrics_failing, sizeof t->metrics_failing, "%s", why);
}

/* Whether the file at the path is still one it may replace: its own, not an input of the run (the
 * deck checked it when it was read; another file may have taken its place since). */
static int metrics_may_write(struct trainer *t) {
  char why[PATH_MAX + 200];
  if (fs_output_check(t->cfg->system.metrics_file, "metrics file", fs_own_text, CFG_METRICS_FIRST_LINE, why,
                      sizeof why) == 0)
    return 1;
  metrics_done(t, why);
  return 0;
}

void train_metrics_write(struct trainer *t, int64_t epoch, int64_t step, double loss, const struct step_result *r) {
  const struct config *cfg = t->cfg;
  if (!cfg->system.metrics_file[0]) return;
  /* Every rank's memory, gathered (every rank is here: the progress line is collective). */
  double mine[2] = {log_peak_rss_mib() * 1048576.0, -1};
  if (t->dev->memory) { /* a GPU's */
    size_t in_use = 0, peak = 0;
    t->dev->memory(&in_use, &peak, NULL, NULL);
    mine[1] = (double)peak;
  }
  double *all = xmalloc(sizeof(double) * 2 * (size_t)t->world);
  comm_allgather(mine, all, sizeof mine);
  if (t->rank != 0 || !metrics_may_write(t)) {
    free(all);
    return;
  }
  const struct train_window *w = &t->win;
  const double dt = wtime() - w->t0, per = w->steps > 0 ? 1.0 / (double)w->steps : 0;
  /* An invalid UTF-8 byte takes three (U+FFFD): room for a run_dir of nothing else. */
  char run[3 * CFG_STRLEN], job[256], host[256] = "", arch[64], ids[3 * CFG_STRLEN + 1024];
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
  /* First: its help line is how the file is told from others (CFG_METRICS_FIRST_LINE). */
  metric(f, "scdino_info", "The training run: scdino version, model, backend, ranks (always 1).", ids, extra, 1);
  SCD_ASSERT(fflush(f) == 0 && !strncmp(m.buf, CFG_METRICS_FIRST_LINE, strlen(CFG_METRICS_FIRST_LINE)));
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
  if (t->ls.on) { /* fp16's dynamic loss scale */
    metric(f, "scdino_loss_scale", "fp16 dynamic loss scale after the last step.", ids, NULL, (double)t->ls.scale);
    metric(f, "scdino_skipped_steps", "fp16 steps skipped since the run began (non-finite gradients at their loss "
           "scale).", ids, NULL, (double)t->ls.skipped);
  }
  if (t->last_ckpt_time > 0)
    metric(f, "scdino_checkpoint_age_seconds", "Seconds since the newest checkpoint was written or restored.", ids,
           NULL, wtime() - t->last_ckpt_time);
  metric(f, "scdino_last_update_timestamp_seconds", "Unix time of this file's update.", ids, NULL,
         (double)time(NULL));
  free(all);
  const int err = fs_mem_try_commit(&m, cfg->system.metrics_file);
  char why[64];
  snprintf(why, sizeof why, "errno %d: %s", err, strerror(err));
  metrics_done(t, err ? why : NULL);
}
