/* restart_check.c - a restart continues the run its checkpoint came from, or says what changed.
 *
 * The checkpoint holds the echoed deck of the run that wrote it.  Its keys are compared with this
 * deck's, value by value as the echo writes them:
 *   keys that define what is trained (the seed, the split, the crops and their augmentation, the
 *   temperatures, the arithmetic) must be equal (the model and the channels are checked against
 *   the checkpoint's own attributes when it is loaded): a restart with any
 *   of them changed ends with exit status 2 naming each key with both values (start a new run
 *   with init_from to take the weights under new settings);
 *   keys one may change on purpose (the learning-rate and weight-decay schedules, epochs, the
 *   teacher momentum, clipping, freezing, the batch size, the shard directory, the GPU choices)
 *   are allowed with a warning naming each, since the run is then not the uninterrupted one;
 *   every other key (paths of outputs, logging, threads of the loader, later steps) is not
 *   compared.  The arithmetic (checkpoint "arithmetic": BLAS library and CPU kernels, or GPU and
 *   cuBLAS) is compared separately; the thread count is not: results do not depend on it. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "input/config.h"
#include "train/checkpoint.h"
#include "train/train_priv.h"

/* group.key patterns: "crops.*" is every key of the group. */
/* (The model and the channels are not here: the checkpoint's own hyperparameters are compared with
 * the deck's when it is loaded, naming the first tensor that differs - exit 3.) */
static const char *const must_equal[] = {
    "control.seed",         "data.train_fraction",    "data.split_seed",
    "crops.*",              "training.student_temp",  "training.teacher_temp",
    "training.warmup_teacher_temp", "training.warmup_teacher_temp_epochs", "training.center_momentum",
    "training.precision",   "training.sampler",
};
static const char *const may_change[] = {
    "training.epochs",        "training.lr",           "training.min_lr",          "training.warmup_epochs",
    "training.weight_decay",  "training.weight_decay_end", "training.momentum_teacher", "training.clip_grad",
    "training.freeze_last_layer", "training.batch_size_per_rank", "data.shard_dir", "gpu.attention",
    "gpu.bias_grad",          "gpu.gelu",              "gpu.gemm_tune",
};

static int matches(const char *const *list, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++) {
    const size_t len = strlen(list[i]);
    if (len > 2 && !strcmp(list[i] + len - 2, ".*") ? !strncmp(key, list[i], len - 1) : !strcmp(key, list[i]))
      return 1;
  }
  return 0;
}

/* The value of group.key in an echoed deck ("  key = value   ! comment" under "&group"), into out;
 * 0 when found. */
static int echo_value(const char *echo, const char *gk, char *out, size_t n) {
  const char *dot = strchr(gk, '.');
  char group[64] = "";
  const char *p = echo, *line;
  while ((line = p) && *line) {
    const char *end = strchr(line, '\n');
    const size_t len = end ? (size_t)(end - line) : strlen(line);
    p = end ? end + 1 : line + len;
    if (line[0] == '&') {
      snprintf(group, sizeof group, "%.*s", (int)(len - 1 < 63 ? len - 1 : 63), line + 1);
      continue;
    }
    if ((size_t)(dot - gk) != strlen(group) || strncmp(gk, group, (size_t)(dot - gk)) != 0) continue;
    const char *q = line;
    while (*q == ' ') q++;
    const size_t klen = strlen(dot + 1);
    if (strncmp(q, dot + 1, klen) != 0 || (q[klen] != ' ' && q[klen] != '=')) continue;
    q += klen;
    while (*q == ' ') q++;
    if (*q != '=') continue;
    q++;
    while (*q == ' ') q++;
    /* up to a '!' outside quotes, trailing blanks trimmed */
    size_t k = 0;
    int quoted = 0;
    for (; q < line + len && k + 1 < n; q++) {
      if (*q == '\'') quoted = !quoted;
      if (*q == '!' && !quoted) break;
      out[k++] = *q;
    }
    while (k > 0 && out[k - 1] == ' ') k--;
    out[k] = '\0';
    return 0;
  }
  return -1;
}

/* Every "group.key" of an echo, in order, as a list of n malloc'd strings. */
static char **echo_keys(const char *echo, int *n) {
  char **keys = NULL, group[64] = "";
  int cap = 0;
  *n = 0;
  for (const char *p = echo; *p;) {
    const char *end = strchr(p, '\n');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (p[0] == '&') {
      snprintf(group, sizeof group, "%.*s", (int)(len - 1 < 63 ? len - 1 : 63), p + 1);
    } else if (p[0] == ' ' && group[0]) {
      const char *q = p;
      while (*q == ' ') q++;
      const char *e = q;
      while (e < p + len && *e != ' ' && *e != '=') e++;
      if (e > q && *q != '!') {
        if (*n == cap) {
          cap = cap ? 2 * cap : 128;
          keys = xrealloc(keys, (size_t)cap * sizeof *keys);
        }
        char buf[160];
        snprintf(buf, sizeof buf, "%s.%.*s", group, (int)(e - q), q);
        keys[(*n)++] = xstrdup(buf);
      }
    }
    p = end ? end + 1 : p + len;
  }
  return keys;
}

void restart_check_deck(const char *ckpt, const char *old_echo, const struct config *cfg, const char *old_arith,
                        const struct ops *ops, char *changes, size_t nchanges) {
  char *now = config_echo_text(cfg);
  int nkeys = 0, refused = 0;
  char **keys = echo_keys(now, &nkeys);
  char msg[4096] = "";
  size_t used = 0, cused = 0;
  changes[0] = 0;
  for (int i = 0; i < nkeys; i++) {
    const int strict = matches(must_equal, sizeof must_equal / sizeof *must_equal, keys[i]);
    if (!strict && !matches(may_change, sizeof may_change / sizeof *may_change, keys[i])) continue;
    char a[1024], b[1024];
    if (echo_value(now, keys[i], b, sizeof b) != 0) continue;
    if (echo_value(old_echo, keys[i], a, sizeof a) != 0) continue; /* a key the older run did not have */
    if (!strcmp(a, b)) continue;
    const char *name = strchr(keys[i], '.') + 1;
    if (strict) {
      refused++;
      if (used < sizeof msg)
        used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s = %s in the checkpoint's run, %s now",
                                 refused > 1 ? "; " : "", name, a, b);
    } else {
      log_warn("restart: %s = %s in the run that wrote %s, %s now: the run continues with the new value (not "
               "the uninterrupted run)", name, a, ckpt, b);
      if (cused < nchanges)
        cused += (size_t)snprintf(changes + cused, nchanges - cused, "%s%s %s -> %s", cused ? "; " : "", name, a, b);
    }
  }
  for (int i = 0; i < nkeys; i++) free(keys[i]);
  free(keys);
  free(now);
  if (refused)
    scd_fatal(SCD_EXIT_INPUT, "restart from %s: %d key(s) that define what is trained differ: %s.  Restore them, "
              "or start a new run with &training init_from to take the weights under new settings",
              ckpt, refused, msg);
  /* The thread count is not compared: every reduction has a fixed order (doc/algorithm.md).  Other
   * kernels (another CPU type under a DYNAMIC_ARCH BLAS, another GPU or cuBLAS) round differently. */
  char arith[sizeof ((struct ckpt_info *)0)->arithmetic];
  ops->arithmetic(arith, sizeof arith);
  if (old_arith[0] && strcmp(old_arith, arith) && cused < nchanges)
    snprintf(changes + cused, nchanges - cused, "%sarithmetic \"%s\" -> \"%s\"", cused ? "; " : "", old_arith, arith);
  if (old_arith[0] && strcmp(old_arith, arith))
    log_warn("restart: the run that wrote %s computed on \"%s\", this one on \"%s\": other kernels round "
             "differently, so the run continues correctly but not bit-identical to an uninterrupted one",
             ckpt, old_arith, arith);
}
