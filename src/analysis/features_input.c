/* features_input.c - what feeds a checkpoint's network on a shard set: which of its channels, in
 * the network's order (matched to the checkpoint's channels by name, or mapped by
 * &features channel_map), and which per-channel mean/std normalise them (&features normalization:
 * the training set's, recorded in the checkpoint; the shard set's own; or given values). */
#include "build_config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "core/check.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "data/shards.h"
#include "input/channel_sets.h"
#include "train/checkpoint.h"

void features_input_data(struct features_input *in, const struct config *cfg, const struct dataset *ds,
                         int normalize) {
  memset(in, 0, sizeof *in);
  const char *dir = dataset_dir(ds);
  const int C_all = dataset_channels(ds);
  if (cfg->data.n_channels == 0) {
    if (C_all > FEATURES_MAX_CHANNELS)
      scd_fatal(SCD_EXIT_INPUT, "the shard set %s has %d channels; select at most %d with data.channels", dir,
                C_all, FEATURES_MAX_CHANNELS);
    in->nsel = C_all;
    for (int c = 0; c < C_all; c++) in->sel[c] = c;
  } else {
    in->nsel = cfg->data.n_channels;
    if (in->nsel > FEATURES_MAX_CHANNELS)
      scd_fatal(SCD_EXIT_INPUT, "data.channels selects %d channels; at most %d are supported", in->nsel,
                FEATURES_MAX_CHANNELS);
    for (int s = 0; s < in->nsel; s++) {
      if (cfg->data.channels[s] >= C_all)
        scd_fatal(SCD_EXIT_INPUT, "data.channels(%d) = %ld, but the shard set %s has channels 0..%d", s + 1,
                  cfg->data.channels[s], dir, C_all - 1);
      in->sel[s] = (int)cfg->data.channels[s];
    }
  }
  in->normalize = normalize;
  snprintf(in->how, sizeof in->how, "%s", normalize ? "data" : "none");
  const double *m = dataset_mean(ds), *sd = dataset_std(ds);
  for (int s = 0; s < in->nsel; s++) {
    in->mean[s] = m[in->sel[s]];
    in->std[s] = sd[in->sel[s]];
    if (normalize && !(in->std[s] > 0))
      scd_fatal(SCD_EXIT_DATA, "%s/%s: channel %d has standard deviation %g; cannot normalise (or set "
                "features.normalize = .false.)", dir, SHARDS_MANIFEST, in->sel[s], in->std[s]);
  }
}

/* ---- channels -------------------------------------------------------------------------------- */

/* "'a', 'b'" (names) or "0, 2" (names NULL: the indices) of the n channels ch. */
static void join(char *buf, size_t n, const struct dataset *ds, const int *ch, const char (*names)[CKPT_NAME_MAX],
                 int count, int quoted) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < count && len < n; i++) {
    const char *sep = i ? ", " : "";
    if (!quoted)
      len += (size_t)snprintf(buf + len, n - len, "%s%d", sep, ch[i]);
    else
      len += (size_t)snprintf(buf + len, n - len, "%s'%s'", sep, names ? names[i] : dataset_channel_name(ds, ch[i]));
  }
}

/* &features channel_map: entry i names the channel of ds that feeds the checkpoint's channel i. */
static void map_channels(struct features_input *in, const struct config *cfg, const struct dataset *ds,
                         const char *checkpoint, const struct ckpt_info *info) {
  const int n = cfg->features.n_channel_map, C = dataset_channels(ds);
  const int want = info->nchannels > 0 ? info->nchannels : info->has_spec ? info->spec.vit.in_chans : n;
  if (n != want)
    scd_fatal(SCD_EXIT_INPUT, "features.channel_map has %d entr%s, but the network of checkpoint %s takes %d "
              "channel(s): one entry per channel, in its order", n, n == 1 ? "y" : "ies", checkpoint, want);
  const int nn = C < 4096 ? C : 4096;
  char(*names)[CFG_WORDLEN] = xcalloc((size_t)nn, sizeof *names);
  for (int c = 0; c < nn; c++) snprintf(names[c], CFG_WORDLEN, "%s", dataset_channel_name(ds, c));
  for (int i = 0; i < n; i++) {
    long ch[CHANNEL_SET_MAX];
    char why[512];
    const int got = channel_set_parse(cfg->features.channel_map[i], (const char(*)[CFG_WORDLEN])names, nn, C, ch,
                                      why, sizeof why);
    if (got != 1) {
      char all[2048];
      int idx[FEATURES_MAX_CHANNELS];
      const int show = C < FEATURES_MAX_CHANNELS ? C : FEATURES_MAX_CHANNELS;
      for (int c = 0; c < show; c++) idx[c] = c;
      join(all, sizeof all, ds, idx, NULL, show, 1);
      scd_fatal(SCD_EXIT_INPUT, "features.channel_map(%d) = '%s': %s; the channels of %s are %s%s", i + 1,
                cfg->features.channel_map[i], got < 0 ? why : "name one channel", dataset_dir(ds), all,
                C > show ? ", ..." : "");
    }
    in->sel[i] = (int)ch[0];
    for (int j = 0; j < i; j++)
      if (in->sel[j] == in->sel[i])
        scd_fatal(SCD_EXIT_INPUT, "features.channel_map(%d) and channel_map(%d) both name channel %d ('%s') of %s",
                  j + 1, i + 1, in->sel[i], dataset_channel_name(ds, in->sel[i]), dataset_dir(ds));
  }
  free(names);
  in->nsel = n;
  char a[2048], b[2048];
  join(a, sizeof a, ds, in->sel, NULL, n, 1);
  if (info->nnorm > 0)
    join(b, sizeof b, ds, NULL, (const char(*)[CKPT_NAME_MAX])info->channel_names, n, 1);
  else
    snprintf(b, sizeof b, "its channels 0..%d", n - 1);
  log_info("features: channel_map: channels %s of %s feed %s of checkpoint %s", a, dataset_dir(ds), b, checkpoint);
}

/* The data's channels must be the checkpoint's: by name where it records them, else by index (as
 * before checkpoints recorded names). */
static void check_channels(const struct features_input *in, const struct dataset *ds, const char *checkpoint,
                           const struct ckpt_info *info) {
  char a[2048], b[2048], c[2048];
  if (info->nnorm == 0) {
    if (info->nchannels == 0) return; /* imports that do not say */
    int same = info->nchannels == in->nsel;
    for (int s = 0; same && s < in->nsel; s++) same = info->channels[s] == in->sel[s];
    if (same) return;
    join(a, sizeof a, ds, info->channels, NULL, info->nchannels, 0);
    join(b, sizeof b, ds, in->sel, NULL, in->nsel, 0);
    scd_fatal(SCD_EXIT_INPUT, "checkpoint %s was trained on source channels %s, but data.channels selects %s; "
              "set data.channels = %s", checkpoint, a, b, a);
  }
  int same = info->nnorm == in->nsel;
  for (int s = 0; same && s < in->nsel; s++) same = !strcmp(info->channel_names[s], dataset_channel_name(ds, in->sel[s]));
  if (same) return;
  /* Where the data has every name, the selection that matches. */
  int found[FEATURES_MAX_CHANNELS], all = 1;
  for (int i = 0; i < info->nnorm; i++) {
    found[i] = -1;
    for (int ch = 0; ch < dataset_channels(ds) && found[i] < 0; ch++)
      if (!strcmp(info->channel_names[i], dataset_channel_name(ds, ch))) found[i] = ch;
    all &= found[i] >= 0;
  }
  char hint[2200] = "";
  if (all) {
    join(c, sizeof c, ds, found, NULL, info->nnorm, 0);
    snprintf(hint, sizeof hint, "select them with data.channels = %s, or ", c);
  }
  join(a, sizeof a, ds, NULL, (const char(*)[CKPT_NAME_MAX])info->channel_names, info->nnorm, 1);
  join(b, sizeof b, ds, in->sel, NULL, in->nsel, 1);
  join(c, sizeof c, ds, in->sel, NULL, in->nsel, 0);
  scd_fatal(SCD_EXIT_INPUT, "checkpoint %s was trained on the channels %s, but data.channels selects %s (source "
            "channels %s) of %s; %ssay which channel of the data feeds each of the checkpoint's with "
            "&features channel_map (one name per checkpoint channel, in its order)", checkpoint, a, b, c,
            dataset_dir(ds), hint);
}

/* ---- statistics ------------------------------------------------------------------------------ */

/* The shortest %g form of x that reads back to the same double: the values can be given again as
 * features.mean / std and give the same bits. */
static void fmt_exact(double x, char *out, size_t n) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(out, n, "%.*g", prec, x);
    if (strtod(out, NULL) == x) return;
  }
}

static void log_choice(const struct features_input *in, const struct dataset *ds, const char *why,
                       const char *what) {
  char m[2048] = "", s[2048] = "", v[32];
  size_t lm = 0, ls = 0;
  for (int i = 0; i < in->nsel && lm < sizeof m && ls < sizeof s; i++) {
    fmt_exact(in->mean[i], v, sizeof v);
    lm += (size_t)snprintf(m + lm, sizeof m - lm, "%s%s", i ? ", " : "", v);
    fmt_exact(in->std[i], v, sizeof v);
    ls += (size_t)snprintf(s + ls, sizeof s - ls, "%s%s", i ? ", " : "", v);
  }
  char names[2048];
  join(names, sizeof names, ds, in->sel, NULL, in->nsel, 1);
  log_info("%s: normalisation '%s'%s%s%s of channels %s: mean = %s, std = %s", what, in->how, why[0] ? " (" : "", why,
           why[0] ? ")" : "", names, m, s);
}

/* The statistics features.normalization chooses (in->sel already the checkpoint's channels). */
static void choose_stats(struct features_input *in, const struct config *cfg, const struct dataset *ds,
                         const char *checkpoint, const struct ckpt_info *info, int adapt, const char *what) {
  const char *mode = cfg->features.normalization;
  char why[1400] = "";
  if (!strcmp(mode, "auto")) {
    char fp[24];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)dataset_fingerprint(ds));
    if (adapt) {
      mode = "data";
      snprintf(why, sizeof why, "auto: the patch embedding is adapted to other channels");
    } else if (info->data_fingerprint[0] && !strcmp(fp, info->data_fingerprint)) {
      mode = "data";
      snprintf(why, sizeof why, "auto: %s is the shard set the checkpoint was trained on", dataset_dir(ds));
    } else if (info->nnorm == 0) {
      mode = "data";
      snprintf(why, sizeof why, "auto: checkpoint %s records no statistics of its training set", checkpoint);
    } else {
      mode = "checkpoint";
      snprintf(why, sizeof why, "auto: %s is not the shard set checkpoint %s was trained on", dataset_dir(ds),
               checkpoint);
    }
  }
  snprintf(in->how, sizeof in->how, "%.15s", mode); /* one of the choices */
  if (!strcmp(mode, "checkpoint")) {
    if (adapt)
      scd_fatal(SCD_EXIT_INPUT, "features.normalization = 'checkpoint': the statistics of checkpoint %s are of its "
                "own channels, but &model use_mean_patch_embedding / custom_embedding_map feed its network others; "
                "use normalization = 'data' or 'values'", checkpoint);
    if (info->nnorm == 0)
      scd_fatal(SCD_EXIT_INPUT, "features.normalization = 'checkpoint': checkpoint %s records no normalisation "
                "statistics (an import of a PyTorch .pth, or written before checkpoints recorded them); give the "
                "training set's per-channel values with normalization = 'values', mean = ..., std = ... (scDINO's "
                "norm_per_channel), or normalise with this shard set's own with normalization = 'data'", checkpoint);
    SCD_ASSERT(info->nnorm == in->nsel); /* the channels were matched to the checkpoint's */
    for (int s = 0; s < in->nsel; s++) {
      in->mean[s] = info->norm_mean[s];
      in->std[s] = info->norm_std[s];
    }
  } else if (!strcmp(mode, "values")) {
    if (cfg->features.n_mean != in->nsel)
      scd_fatal(SCD_EXIT_INPUT, "features.mean and std have %d value(s) each, but the network takes %d channel(s): "
                "give one of each per channel, in the network's order", cfg->features.n_mean, in->nsel);
    for (int s = 0; s < in->nsel; s++) {
      in->mean[s] = cfg->features.mean[s];
      in->std[s] = cfg->features.std[s];
    }
  } else { /* data: what features_input_data took, checked */
    for (int s = 0; s < in->nsel; s++)
      if (!(in->std[s] > 0))
        scd_fatal(SCD_EXIT_DATA, "%s/%s: channel %d has standard deviation %g; cannot normalise (or set "
                  "features.normalize = .false.)", dataset_dir(ds), SHARDS_MANIFEST, in->sel[s], in->std[s]);
  }
  log_choice(in, ds, why, what);
}

void features_input_choose(struct features_input *in, const struct config *cfg, const struct dataset *ds,
                           const char *checkpoint, const char *what) {
  if (!fs_exists(checkpoint))
    scd_fatal(SCD_EXIT_INPUT, "checkpoint '%s' not found (set features.checkpoint, or train first: "
              "calculation='train' writes run_dir/%s)", checkpoint, CKPT_FILE);
  struct ckpt_info *info = xmalloc(sizeof *info); /* large (channel names) */
  checkpoint_read_info(checkpoint, info);
  const int adapt = cfg->model.use_mean_patch_embedding || cfg->model.n_custom_embedding_map > 0;
  if (cfg->features.n_channel_map > 0 && adapt)
    scd_fatal(SCD_EXIT_INPUT, "features.channel_map names the data's channels for the checkpoint's own, but &model "
              "use_mean_patch_embedding / custom_embedding_map feed its network other channels on purpose: select "
              "them with data.channels instead");
  /* The data's statistics of data.channels; the channels, and then the statistics, as the deck says. */
  if (cfg->features.n_channel_map > 0) {
    memset(in, 0, sizeof *in);
    map_channels(in, cfg, ds, checkpoint, info);
  } else {
    features_input_data(in, cfg, ds, 0);
    if (!adapt) check_channels(in, ds, checkpoint, info); /* adapted: other channels are the point */
  }
  in->normalize = cfg->features.normalize;
  const double *m = dataset_mean(ds), *sd = dataset_std(ds);
  for (int s = 0; s < in->nsel; s++) {
    in->mean[s] = m[in->sel[s]];
    in->std[s] = sd[in->sel[s]];
  }
  if (in->normalize) {
    choose_stats(in, cfg, ds, checkpoint, info, adapt, what);
  } else {
    snprintf(in->how, sizeof in->how, "none");
    log_detail("%s: no normalisation (features.normalize = .false.)", what);
  }
  free(info);
}
