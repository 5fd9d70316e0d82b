/* restart_check.c - a restart continues the run its checkpoint came from, or says what changed.
 *
 * The checkpoint holds the echoed deck of the run that wrote it.  It is read by the deck parser
 * into a configuration of its own and compared with this deck's, key by key, as the key table
 * says (config_keys.def, restart: EQUAL, WARN, FREE):
 *   keys that define what is trained (the seed, the split, the crops and their augmentation, the
 *   temperatures, the arithmetic) must be equal (the model and the channels are checked against
 *   the checkpoint's own attributes when it is loaded): a restart with any of them changed ends
 *   with exit status 2 naming each key with both values (start a new run with init_from to take
 *   the weights under new settings);
 *   keys one may change on purpose (the learning-rate and weight-decay schedules, epochs, the
 *   teacher momentum, clipping, freezing, the batch size, the shard directory, the GPU choices)
 *   are allowed with a warning naming each, since the run is then not the uninterrupted one;
 *   every other key (paths of outputs, logging, threads of the loader, later steps) is not
 *   compared.  A key the older run's deck does not have is not compared either.  The arithmetic
 *   (checkpoint "arithmetic": BLAS library and CPU kernels, or GPU and cuBLAS) is compared
 *   separately; the thread count is not: results do not depend on it. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "input/config.h"
#include "train/checkpoint.h"
#include "train/train_priv.h"

void restart_check_deck(const char *ckpt, const char *old_echo, const struct config *cfg, const char *old_arith,
                        const struct ops *ops, char *changes, size_t nchanges) {
  struct config *old = xmalloc(sizeof *old);
  unsigned char *had = xmalloc((size_t)cfg_nkeys);
  char (*bad_text)[CFG_STRLEN] = xmalloc((size_t)cfg_nkeys * CFG_STRLEN);
  config_parse_echo(ckpt, old_echo, old, had, bad_text);
  int refused = 0;
  char msg[4096] = "";
  size_t used = 0, cused = 0;
  changes[0] = 0;
  for (int i = 0; i < cfg_nkeys; i++) {
    const struct cfg_key *k = &cfg_keys[i];
    if (k->restart == CFG_RESTART_FREE || had[i] == CFG_HAD_NOT) continue;
    if (had[i] == CFG_HAD_VALUE && cfg_value_same(old, cfg, k)) continue;
    char a[CFG_STRLEN], b[CFG_STRLEN];
    if (had[i] == CFG_HAD_VALUE)
      config_value_text(old, k, a, sizeof a);
    else /* a value this version refuses: as the older run wrote it */
      snprintf(a, sizeof a, "%s", bad_text[i]);
    config_value_text(cfg, k, b, sizeof b);
    if (k->restart == CFG_RESTART_EQUAL) {
      refused++;
      if (used < sizeof msg)
        used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s = %s in the checkpoint's run, %s now",
                                 refused > 1 ? "; " : "", k->name, a, b);
    } else {
      log_warn("restart: %s = %s in the run that wrote %s, %s now: the run continues with the new value (not "
               "the uninterrupted run)", k->name, a, ckpt, b);
      if (cused < nchanges)
        cused += (size_t)snprintf(changes + cused, nchanges - cused, "%s%s %s -> %s", cused ? "; " : "", k->name, a,
                                  b);
    }
  }
  free(bad_text);
  free(had);
  free(old);
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
