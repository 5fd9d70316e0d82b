/* prepare.c - calculation='prepare': TIFF tree (or CSV file list) -> HDF5 shards, channel statistics
 * and manifest.
 *
 * prepare_run is a sequence of phases over one struct prepare_job: scan and check (rank 0), share
 * the list, plan the shards, pick the statistics subset, convert, combine the statistics, install
 * the shards, gather the skipped files and write the manifest (rank 0).  The per-image steps
 * (the reference format, reading, checking and converting one file) are in prepare_image.c.
 *
 * Decisions (see also imagefolder.h, stats.h):
 * - Shard k holds the images of files [k*images_per_shard, (k+1)*images_per_shard) of the
 *   ImageFolder list, whatever the number of ranks; ranks convert disjoint runs of whole shards,
 *   so 1 and N ranks write byte-identical files.
 * - Bad images (prepare_image.c) stop the run (on_bad_image='error', exit 3, nothing left in
 *   shard_dir) or are left out and listed in skipped.txt ('skip').  Skipped files keep their
 *   place in the split: the manifest records their ImageFolder positions (split.h).
 * - The manifest is written last, after every shard is in place: its presence means complete.
 *   A complete shard_dir of the same file list and settings is left as it is; one of other input
 *   is refused; one without manifest (an interrupted run) is rebuilt. */
#include "build_config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/runlock.h"
#include "data/filelist.h"
#include "data/imagefolder.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/split.h"
#include "data/stats.h"
#include "data/tiff.h"

/* Files each rank converts between two checks of "did any rank hit a bad image?" (and progress
 * updates): small enough that an error stops every rank quickly, large enough to cost nothing. */
#define ROUND_FILES 64

/* Reasons go into skipped.txt as one line each. */
static void one_line(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\t' || *s == '\r') *s = ' ';
}

/* ---- the shard directory ---- */

static void default_channel_names(const struct config *cfg, int C, char (*names)[CFG_WORDLEN]) {
  for (int c = 0; c < C; c++)
    if (cfg->data.n_channel_names > 0)
      snprintf(names[c], CFG_WORDLEN, "%s", cfg->data.channel_names[c]);
    else
      snprintf(names[c], CFG_WORDLEN, "ch%d", c);
}

/* 1: a complete shard set of this very input is there (nothing to do); 0: build.  Anything else
 * in the way ends the job rather than being overwritten. */
static int check_existing(const struct config *cfg, const char *dir, const struct imagefolder *f, uint64_t hash,
                          const char *labels) {
  struct manifest_settings s;
  char why[PATH_MAX + 128], mf[PATH_MAX];
  fs_join(mf, sizeof mf, dir, SHARDS_MANIFEST);
  if (manifest_read_settings(dir, &s, why, sizeof why) != 0) {
    if (!fs_exists(mf)) return 0; /* none, or an interrupted prepare: (re)build */
    scd_fatal(SCD_EXIT_INPUT, "%s; refusing to overwrite it: remove it or choose another &data shard_dir", why);
  }
  char diff[512] = "";
  if (s.file_list_hash != hash || s.source_count != f->n)
    snprintf(diff, sizeof diff, "it was made from another file list (%lld files, now %lld)", (long long)s.source_count,
             (long long)f->n);
  else if (strcmp(s.label_source, labels) != 0)
    snprintf(diff, sizeof diff, "its classes came from labels = '%s', now '%s'", s.label_source, labels);
  else if (s.label_depth != cfg->data.folder_depth_for_labels)
    snprintf(diff, sizeof diff, "folder_depth_for_labels was %d, now %ld", s.label_depth,
             cfg->data.folder_depth_for_labels);
  else if (s.center_crop != cfg->data.center_crop)
    snprintf(diff, sizeof diff, "center_crop was %d, now %ld", s.center_crop, cfg->data.center_crop);
  else if (s.stats_fraction != cfg->data.stats_fraction || s.stats_seed != cfg->data.stats_seed)
    snprintf(diff, sizeof diff, "stats_fraction/stats_seed were %g/%lld, now %g/%ld", s.stats_fraction,
             (long long)s.stats_seed, cfg->data.stats_fraction, cfg->data.stats_seed);
  else {
    char joined[sizeof s.channel_names_joined] = "";
    size_t len = 0;
    for (int c = 0; c < s.channels && len < sizeof joined; c++) {
      char name[CFG_WORDLEN];
      if (cfg->data.n_channel_names > 0 && c < cfg->data.n_channel_names)
        snprintf(name, sizeof name, "%s", cfg->data.channel_names[c]);
      else
        snprintf(name, sizeof name, "ch%d", c);
      len += (size_t)snprintf(joined + len, sizeof joined - len, "%s%s", c ? "\n" : "", name);
    }
    if ((cfg->data.n_channel_names > 0 && cfg->data.n_channel_names != s.channels) ||
        strcmp(joined, s.channel_names_joined) != 0)
      snprintf(diff, sizeof diff, "channel_names differ");
  }
  if (!diff[0] && s.shards_missing > 0) {
    log_warn("%s lists %d shard file(s) that are missing; preparing the shards again", mf, s.shards_missing);
    if (unlink(mf) != 0) scd_fatal(SCD_EXIT_FAILURE, "cannot remove %s: %s", mf, strerror(errno));
    return 0;
  }
  if (diff[0])
    scd_fatal(SCD_EXIT_INPUT, "shard_dir '%s' holds a complete shard set of other input: %s.  Remove it "
              "or choose another &data shard_dir", dir, diff);
  log_info("prepare: %s is complete and matches %s (%lld files, %lld images): nothing to do", dir,
           prepare_source(cfg), (long long)s.source_count, (long long)s.count);
  if (s.nskipped > 0)
    log_warn("%lld bad file(s) were left out when these shards were made; see %s/skipped.txt",
             (long long)s.nskipped, dir);
  return 1;
}

/* Remove what an earlier, unfinished prepare may have left: shards, temporary files, skipped.txt. */
static void clean_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) scd_fatal(SCD_EXIT_FAILURE, "cannot read %s: %s", dir, strerror(errno));
  struct dirent *e;
  char path[PATH_MAX];
  while ((e = readdir(d))) {
    const char *n = e->d_name;
    size_t len = strlen(n);
    int shard = !strncmp(n, "shard-", 6) && ((len > 3 && !strcmp(n + len - 3, ".h5")) || strstr(n, ".h5.tmp."));
    int other = !strncmp(n, "manifest.h5.tmp.", 16) || !strcmp(n, "skipped.txt") || !strncmp(n, "skipped.txt.tmp.", 16);
    if (!shard && !other) continue;
    fs_join(path, sizeof path, dir, n);
    if (unlink(path) != 0 && errno != ENOENT)
      scd_fatal(SCD_EXIT_FAILURE, "cannot remove stale %s: %s", path, strerror(errno));
  }
  closedir(d);
}

/* ---- the conversion ---- */

struct shard_job {
  struct shard_writer *w;
  int64_t n;                   /* images written */
  struct stats_acc sub, all;   /* statistics subset / every image */
};

struct skipped {
  int64_t pos;
  char *why;
};

static void bcast_string(char *s, size_t n) { comm_bcast(s, n, 0); }

/* The per-round reductions (minimum of *first_bad, sums of sums[2]), waited for with short sleeps
 * instead of MPI's busy polling: a rank that has run out of files must not take the CPU from
 * one still converting when they share cores. */
static void round_reduce(double *first_bad, double *sums) {
  if (comm_size() == 1) return;
  MPI_Request req[2];
  CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, first_bad, 1, MPI_DOUBLE, MPI_MIN, comm_mpi(), &req[0]));
  CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comm_mpi(), &req[1]));
  for (;;) {
    int done = 0;
    CHECK_MPI(MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

/* ---- the phases ---- */

/* One prepare run: what each phase leaves for the next ones. */
struct prepare_job {
  const struct config *cfg;
  int rank, size;
  const char *dir;           /* shard_dir */
  int crop, skip;            /* center_crop; on_bad_image='skip' */
  char root[PATH_MAX];       /* tiff_dir (or file_list's folder) resolved (rank 0, then shared) */
  char list[PATH_MAX];       /* file_list resolved, "" for a tree (rank 0) */
  char labels[16];           /* where the classes came from: folders, column or none (rank 0) */
  uint64_t hash;             /* of the file list as found (rank 0) */
  struct imagefolder f;      /* the file list (rank 0, then shared) */
  struct prepare_format ref; /* the format every image must have (rank 0, then shared) */
  /* The plan: N files in nsh shards of ips; this rank converts shards [sh0, sh1), files [f0, f1),
   * in rounds of ROUND_FILES. */
  int64_t N, ips, nsh, sh0, sh1, f0, f1, rounds;
  unsigned char *in_stats;   /* [N]: 1 for the files of the statistics subset */
  /* The conversion. */
  struct shard_job *jobs;    /* [sh1 - sh0] */
  void *img;                 /* the image being converted */
  struct stats_acc one;      /* its statistics */
  struct skipped *skips;     /* this rank's skipped files, ascending */
  size_t nskips, capskips;
  char bad_msg[PATH_MAX + PREPARE_WHY_MAX + 8];
  struct progress prog;      /* rank 0 prints progress from the per-round totals of all ranks */
  int64_t files_done;
  double bytes_read;
  /* Per shard, on every rank once combined. */
  int64_t *counts;           /* [nsh] images */
  double *st;                /* [nsh][4C + 4] statistics sums (combine_stats) */
  int64_t *fbytes, *fsum;    /* [nsh] file size, FNV-1a bits */
  int64_t total;             /* images in all shards */
  char *all;                 /* rank 0: every rank's skipped files, "position\treason\n" lines */
};

int prepare_has_source(const struct config *cfg) { return cfg->data.tiff_dir[0] || cfg->data.file_list[0]; }

const char *prepare_source(const struct config *cfg) {
  return cfg->data.file_list[0] ? cfg->data.file_list : cfg->data.tiff_dir;
}

/* Rank 0: the CSV file list (data/filelist.h); any problem in it ends the run naming file:line. */
static void scan_file_list(struct prepare_job *j) {
  const struct config *cfg = j->cfg;
  const struct filelist_opts o = {cfg->data.path_column, cfg->data.label_column, cfg->data.labels};
  char why[PATH_MAX + 1024];
  if (filelist_load(cfg->data.file_list, &o, &j->f, j->root, sizeof j->root, why, sizeof why) != 0)
    scd_fatal(SCD_EXIT_INPUT, "%s", why);
  if (!realpath(cfg->data.file_list, j->list)) snprintf(j->list, sizeof j->list, "%s", cfg->data.file_list);
  j->hash = imagefolder_hash(&j->f);
  snprintf(j->labels, sizeof j->labels, "%s", j->f.nclasses > 0 ? "column" : "none");
  char cols[512] = "";
  for (int m = 0, len = 0; m < j->f.nmeta && len < (int)sizeof cols; m++)
    len += snprintf(cols + len, sizeof cols - (size_t)len, "%s%s", m ? ", " : ": ", j->f.meta_names[m]);
  char cls[CFG_STRLEN + 64];
  if (j->f.nclasses > 0)
    snprintf(cls, sizeof cls, "%d classes from column '%s'", j->f.nclasses, cfg->data.label_column);
  else
    snprintf(cls, sizeof cls, "unlabelled");
  log_info("prepare: %lld files listed in %s, %s; %d metadata column(s)%s", (long long)j->f.n, j->list, cls,
           j->f.nmeta, cols);
}

/* Rank 0: the file list of tiff_dir (or file_list), its hash and labels. */
static void scan_list(struct prepare_job *j) {
  const struct config *cfg = j->cfg;
  if (cfg->data.file_list[0]) {
    scan_file_list(j);
    return;
  }
  if (!cfg->data.tiff_dir[0])
    scd_fatal(SCD_EXIT_INPUT, "calculation='prepare' needs &data tiff_dir (the folder with one sub-folder of TIFF "
              "files per class) or file_list (a CSV listing the images)");
  if (!realpath(cfg->data.tiff_dir, j->root))
    scd_fatal(SCD_EXIT_DATA, "&data tiff_dir '%s': %s", cfg->data.tiff_dir, strerror(errno));
  log_info("prepare: scanning %s", j->root);
  const int none = !strcmp(cfg->data.labels, "none");
  snprintf(j->labels, sizeof j->labels, "%s", none ? "none" : "folders");
  if (none)
    imagefolder_scan_all(j->root, &j->f);
  else
    imagefolder_scan(j->root, &j->f);
  j->hash = imagefolder_hash(&j->f); /* the file list as found: the classes below do not change it */
  if (none)
    log_info("prepare: %lld TIFF files, unlabelled (labels = 'none')", (long long)j->f.n);
  else
    log_info("prepare: %lld TIFF files in %d classes", (long long)j->f.n, j->f.nclasses);
  const int depth = (int)cfg->data.folder_depth_for_labels;
  if (depth >= 0) {
    char why[PATH_MAX + 128];
    if (imagefolder_relabel(&j->f, depth, why, sizeof why) != 0)
      scd_fatal(SCD_EXIT_INPUT, "&data folder_depth_for_labels = %d: %s/%s", depth, j->root, why);
    log_info("prepare: classes from the folder %d level(s) above each file (folder_depth_for_labels): %d classes",
             depth, j->f.nclasses);
  }
  if (j->f.n_other > 0)
    log_warn("%lld non-TIFF image file(s) ignored (e.g. %s); scDINO's ImageFolder would list them and then "
             "fail to read them", (long long)j->f.n_other, j->f.other_example);
}

/* Rank 0: the reference format, and the deck's channels checked against it. */
static void check_format(struct prepare_job *j) {
  const struct config *cfg = j->cfg;
  struct prepare_format *ref = &j->ref;
  prepare_format_choose(&j->f, j->root, j->crop, ref);
  log_info("prepare: images are %d channel(s) x %d x %d, %s (stored as %s)%s", ref->C, ref->H, ref->W,
           tiff_sample_name(ref->sample), dataset_dtype_name(ref->dtype), j->crop ? " after center_crop" : "");
  if (cfg->data.n_channel_names > 0 && cfg->data.n_channel_names != ref->C)
    scd_fatal(SCD_EXIT_INPUT, "&data channel_names has %d name(s), but the images have %d channels (e.g. %s)",
              cfg->data.n_channel_names, ref->C, ref->example);
  for (int i = 0; i < cfg->data.n_channels; i++)
    if (cfg->data.channels[i] >= ref->C)
      scd_fatal(SCD_EXIT_INPUT, "&data channels: channel %ld does not exist; the images have channels 0..%d (e.g. %s)",
                cfg->data.channels[i], ref->C - 1, ref->example);
}

/* Phase 1, rank 0: scan tiff_dir and check it against shard_dir.  1: a complete shard set of this
 * input is there (nothing to do); 0: shard_dir is claimed and cleaned, and the format known. */
static int64_t scan_and_check(struct prepare_job *j) {
  scan_list(j);
  int64_t status = check_existing(j->cfg, j->dir, &j->f, j->hash, j->labels);
  if (status == 0) {
    fs_mkdir_p(j->dir);
    /* Another job building this shard_dir must not have its files cleaned away. */
    runlock_acquire(j->dir, "shard_dir");
    clean_stale(j->dir);
    check_format(j);
  }
  return status;
}

/* Phase 2: rank 0's format, root and file list to every rank. */
static void share_list(struct prepare_job *j) {
  comm_bcast(&j->ref, sizeof j->ref, 0);
  bcast_string(j->root, sizeof j->root);
  size_t bytes = 0;
  char *buf = j->rank == 0 ? imagefolder_pack(&j->f, &bytes) : NULL;
  uint64_t b64 = bytes;
  comm_bcast(&b64, sizeof b64, 0);
  if (j->rank != 0) buf = xmalloc((size_t)b64);
  comm_bcast(buf, (size_t)b64, 0);
  if (j->rank != 0) imagefolder_unpack(buf, (size_t)b64, &j->f);
  free(buf);
}

/* Phase 3: shards are runs of images_per_shard files, whatever the number of ranks; rank r
 * converts shards [nsh*r/size, nsh*(r+1)/size), all ranks the same number of rounds. */
static void plan_shards(struct prepare_job *j) {
  const int64_t N = j->f.n, ips = j->cfg->data.images_per_shard;
  const int64_t nsh = (N + ips - 1) / ips;
  j->N = N;
  j->ips = ips;
  j->nsh = nsh;
  j->sh0 = nsh * j->rank / j->size;
  j->sh1 = nsh * (j->rank + 1) / j->size;
  j->f0 = j->sh0 * ips < N ? j->sh0 * ips : N;
  j->f1 = j->sh1 * ips < N ? j->sh1 * ips : N;
  int64_t maxfiles = 0;
  for (int r = 0; r < j->size; r++) {
    int64_t a = nsh * r / j->size * ips, b = nsh * (r + 1) / j->size * ips;
    a = a < N ? a : N;
    b = b < N ? b : N;
    if (b - a > maxfiles) maxfiles = b - a;
  }
  j->rounds = (maxfiles + ROUND_FILES - 1) / ROUND_FILES;
}

/* Phase 4: the statistics subset, upstream's split with stats_fraction and the fixed seed, over
 * all files. */
static void pick_stats_subset(struct prepare_job *j) {
  j->in_stats = xcalloc((size_t)(j->N > 0 ? j->N : 1), 1);
  struct split s;
  split_compute(j->N, j->cfg->data.stats_fraction, (uint32_t)j->cfg->data.stats_seed, &s);
  for (int64_t i = 0; i < s.n_train; i++) j->in_stats[s.train[i]] = 1;
  split_free(&s);
}

static void skip_add(struct prepare_job *j, int64_t p, const char *why) {
  if (j->nskips == j->capskips) {
    j->capskips = j->capskips ? 2 * j->capskips : 16;
    j->skips = xrealloc(j->skips, MUL_SIZE(j->capskips, sizeof *j->skips));
  }
  j->skips[j->nskips].pos = p;
  j->skips[j->nskips++].why = xstrdup(why);
}

/* Convert file p into its shard (created at its first file, finished at its last); its size
 * goes into *bytes.  1: a bad image that stops the run (the message in bad_msg). */
static int convert_file(struct prepare_job *j, int64_t p, double *bytes) {
  int64_t k = p / j->ips;
  struct shard_job *job = &j->jobs[k - j->sh0];
  int64_t shard_end = (k + 1) * j->ips < j->N ? (k + 1) * j->ips : j->N;
  if (!job->w) {
    char name[64], path[PATH_MAX];
    snprintf(name, sizeof name, "shard-%05lld.h5", (long long)k);
    fs_join(path, sizeof path, j->dir, name);
    job->w = shard_writer_create(path, j->ref.C, j->ref.H, j->ref.W, j->ref.dtype, shard_end - k * j->ips);
    shard_writer_meta_columns(job->w, j->f.nmeta, (const char *const *)j->f.meta_names);
  }
  char full[PATH_MAX], why[PREPARE_WHY_MAX];
  fs_join(full, sizeof full, j->root, j->f.paths[p]);
  long long fsz = fs_file_size(full);
  *bytes += fsz > 0 ? (double)fsz : 0;
  int bad = 0;
  if (prepare_image_convert(full, &j->ref, j->crop, j->img, &j->one, why, sizeof why) != 0) {
    one_line(why);
    if (!j->skip) {
      snprintf(j->bad_msg, sizeof j->bad_msg, "%s: %s", full, why);
      bad = 1;
    } else {
      skip_add(j, p, why);
    }
  } else {
    /* Provisional global index: exact unless an earlier file was skipped (fixed at commit). */
    shard_writer_add(job->w, j->img, j->f.labels[p], k * j->ips + job->n++, j->f.paths[p]);
    if (j->f.nmeta > 0) shard_writer_add_meta(job->w, (const char *const *)j->f.meta + (size_t)p * (size_t)j->f.nmeta);
    wsleep(j->cfg->debug.step_sleep); /* &debug: a slow conversion, for the signal tests */
    stats_acc_merge(&job->all, &j->one);
    if (j->in_stats[p]) stats_acc_merge(&job->sub, &j->one);
  }
  if (p + 1 == shard_end && !bad) shard_writer_finish(job->w);
  return bad;
}

/* Up to ROUND_FILES files from *p on; then everyone learns whether some rank failed (every rank
 * discards its shards and the run ends, exit 3), and rank 0 the progress. */
static void convert_round(struct prepare_job *j, int64_t *p) {
  int64_t end = *p + ROUND_FILES < j->f1 ? *p + ROUND_FILES : j->f1, done = 0;
  double bytes = 0;
  int bad = 0;
  for (; *p < end && !bad; (*p)++, done++) bad = convert_file(j, *p, &bytes);
  double first_bad = bad ? j->rank : j->size;
  double sums[2] = {(double)done, bytes};
  round_reduce(&first_bad, sums);
  j->files_done += (int64_t)sums[0];
  j->bytes_read += sums[1];
  if (first_bad < j->size) {
    if (j->rank == (int)first_bad) {
      fflush(stdout);
      fprintf(stderr, "scdino: error: %s\n  (on_bad_image='error'; set on_bad_image='skip' to leave bad "
              "images out and list them in %s/skipped.txt)\n", j->bad_msg, j->dir);
    }
    for (int64_t k = j->sh0; k < j->sh1; k++)
      if (j->jobs[k - j->sh0].w) shard_writer_discard(j->jobs[k - j->sh0].w);
    comm_exit_all(SCD_EXIT_DATA);
  }
  progress_update(&j->prog, j->files_done, j->bytes_read);
}

/* Phase 5: this rank's files into its shards, round by round. */
static void convert(struct prepare_job *j) {
  const struct prepare_format *ref = &j->ref;
  const size_t img_bytes = MUL_SIZE(MUL_SIZE((size_t)ref->H * ref->W, (size_t)ref->C), dataset_dtype_size(ref->dtype));
  j->img = xmalloc(img_bytes);
  j->jobs = xcalloc((size_t)(j->sh1 - j->sh0 > 0 ? j->sh1 - j->sh0 : 1), sizeof *j->jobs);
  for (int64_t k = j->sh0; k < j->sh1; k++) {
    stats_acc_init(&j->jobs[k - j->sh0].sub, ref->C);
    stats_acc_init(&j->jobs[k - j->sh0].all, ref->C);
  }
  stats_acc_init(&j->one, ref->C);
  progress_start(&j->prog, "prepare", "files", j->N, j->N, j->cfg->control.progress_seconds);
  int64_t p = j->f0;
  for (int64_t round = 0; round < j->rounds; round++) convert_round(j, &p);
  free(j->img);
  stats_acc_free(&j->one);
}

/* Phase 6: shard sizes and statistics sums to every rank, by shard so any rank count gives the
 * same bits when they are merged in shard order. */
static void combine_stats(struct prepare_job *j) {
  const int C = j->ref.C;
  const size_t row = 4 * (size_t)C + 4;
  j->counts = xcalloc((size_t)(j->nsh > 0 ? j->nsh : 1), sizeof *j->counts);
  j->st = xcalloc(MUL_SIZE((size_t)(j->nsh > 0 ? j->nsh : 1), row), sizeof *j->st);
  for (int64_t k = j->sh0; k < j->sh1; k++) {
    struct shard_job *sj = &j->jobs[k - j->sh0];
    double *s = j->st + (size_t)k * row;
    j->counts[k] = sj->n;
    memcpy(s, sj->sub.sum, (size_t)C * sizeof *s);
    memcpy(s + C, sj->sub.sumsq, (size_t)C * sizeof *s);
    memcpy(s + 2 * C, sj->all.sum, (size_t)C * sizeof *s);
    memcpy(s + 3 * C, sj->all.sumsq, (size_t)C * sizeof *s);
    s[4 * C] = (double)sj->sub.images;
    s[4 * C + 1] = (double)sj->sub.pixels;
    s[4 * C + 2] = (double)sj->all.images;
    s[4 * C + 3] = (double)sj->all.pixels;
  }
  comm_allreduce_sum_i64(j->counts, (size_t)j->nsh);
  comm_allreduce_sum_f64(j->st, (size_t)j->nsh * row);
}

/* Phase 7: each shard gets its run of global indices and is renamed into place (an empty one is
 * dropped); then every rank learns each shard's size and checksum, for the copies &data
 * stage_dir makes (by shard, so summing the ranks' arrays assembles them). */
static void install_shards(struct prepare_job *j) {
  for (int64_t k = 0; k < j->nsh; k++) {
    if (k >= j->sh0 && k < j->sh1) {
      struct shard_job *sj = &j->jobs[k - j->sh0];
      if (sj->n > 0)
        shard_writer_commit(sj->w, j->total - k * j->ips);
      else if (sj->w)
        shard_writer_discard(sj->w);
      stats_acc_free(&sj->sub);
      stats_acc_free(&sj->all);
    }
    j->total += j->counts[k];
  }
  free(j->jobs);
  j->fbytes = xcalloc((size_t)(j->nsh > 0 ? j->nsh : 1), sizeof *j->fbytes);
  j->fsum = xcalloc((size_t)(j->nsh > 0 ? j->nsh : 1), sizeof *j->fsum);
  for (int64_t k = j->sh0; k < j->sh1; k++) {
    if (j->counts[k] == 0) continue;
    char name[64], path[PATH_MAX];
    snprintf(name, sizeof name, "shard-%05lld.h5", (long long)k);
    fs_join(path, sizeof path, j->dir, name);
    uint64_t h;
    long long b;
    if (fs_file_fnv1a(path, &h, &b) != 0) scd_fatal(SCD_EXIT_FAILURE, "cannot read back %s: %s", path, strerror(errno));
    j->fbytes[k] = b;
    memcpy(&j->fsum[k], &h, sizeof h); /* the bits, carried by the sum of one value and zeros */
  }
  comm_allreduce_sum_i64(j->fbytes, (size_t)j->nsh);
  comm_allreduce_sum_i64(j->fsum, (size_t)j->nsh);
}

/* Phase 8: the skipped files' positions and reasons, as text lines on rank 0 (all). */
static void gather_skipped(struct prepare_job *j) {
  char *text = NULL;
  size_t tlen = 0;
  for (size_t i = 0; i < j->nskips; i++) {
    size_t l = strlen(j->skips[i].why) + 32;
    text = xrealloc(text, tlen + l);
    tlen += (size_t)snprintf(text + tlen, l, "%lld\t%s\n", (long long)j->skips[i].pos, j->skips[i].why);
    free(j->skips[i].why);
  }
  free(j->skips);
  int mylen = (int)tlen, *lens = NULL, *displs = NULL;
  if (j->rank == 0) {
    lens = xcalloc((size_t)j->size, sizeof *lens);
    displs = xcalloc((size_t)j->size, sizeof *displs);
  }
  CHECK_MPI(MPI_Gather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, 0, comm_mpi()));
  size_t alllen = 0;
  if (j->rank == 0) {
    for (int r = 0; r < j->size; r++) {
      displs[r] = (int)alllen;
      alllen += (size_t)lens[r];
    }
    j->all = xmalloc(alllen + 1);
    j->all[alllen] = '\0';
  }
  CHECK_MPI(MPI_Gatherv(text ? text : "", mylen, MPI_CHAR, j->all, lens, displs, MPI_CHAR, 0, comm_mpi()));
  free(text);
  free(lens);
  free(displs);
}

/* Rank 0: the nskip gathered lines split into positions and reasons (which point into all).
 * Ranks hold ascending runs in rank order: the list is already sorted. */
static void parse_skipped(struct prepare_job *j, int64_t nskip, int64_t *skipped, char **reasons) {
  int64_t ns = 0;
  for (char *q = j->all; q && *q && ns < nskip;) {
    char *nl = strchr(q, '\n'), *tab = strchr(q, '\t');
    SCD_ASSERT(nl && tab && tab < nl);
    *nl = '\0';
    skipped[ns] = strtoll(q, NULL, 10);
    reasons[ns++] = tab + 1;
    q = nl + 1;
  }
  SCD_ASSERT(ns == nskip);
}

/* Rank 0: shard_dir/skipped.txt, one line per skipped file: its path and why. */
static void write_skipped(const struct prepare_job *j, int64_t nskip, const int64_t *skipped, char *const *reasons) {
  char path[PATH_MAX];
  fs_join(path, sizeof path, j->dir, "skipped.txt");
  struct fs_mem txt;
  FILE *out = fs_mem_begin(&txt);
  char full[PATH_MAX];
  for (int64_t i = 0; i < nskip; i++)
    fprintf(out, "%s\t%s\n", fs_join(full, sizeof full, j->root, j->f.paths[skipped[i]]), reasons[i]);
  fs_mem_commit(&txt, "list of skipped files", path);
  log_warn("%lld of %lld files skipped as bad images (on_bad_image='skip'), listed in %s", (long long)nskip,
           (long long)j->N, path);
}

/* Rank 0: the per-shard sums merged in shard order into the subset's and every image's; the
 * statistics to use (every image's when the subset holds none). */
static const struct stats_acc *merge_stats(const struct prepare_job *j, struct stats_acc *sub,
                                           struct stats_acc *everything) {
  const int C = j->ref.C;
  stats_acc_init(sub, C);
  stats_acc_init(everything, C);
  for (int64_t k = 0; k < j->nsh; k++) {
    const double *s = j->st + (size_t)k * (4 * (size_t)C + 4);
    for (int c = 0; c < C; c++) {
      sub->sum[c] += s[c];
      sub->sumsq[c] += s[C + c];
      everything->sum[c] += s[2 * C + c];
      everything->sumsq[c] += s[3 * C + c];
    }
    sub->images += (int64_t)s[4 * C];
    sub->pixels += (int64_t)s[4 * C + 1];
    everything->images += (int64_t)s[4 * C + 2];
    everything->pixels += (int64_t)s[4 * C + 3];
  }
  if (sub->images > 0) return sub;
  log_warn("stats_fraction=%g selects no usable image of %lld; mean/std are computed over all images",
           j->cfg->data.stats_fraction, (long long)j->total);
  return everything;
}

/* The manifest's list of shard files: the non-empty shards, with their counts, sizes, checksums. */
struct kept_shards {
  int n;
  char **files;
  int64_t *counts, *bytes;
  uint64_t *fnv;
};

static void kept_shards_make(const struct prepare_job *j, struct kept_shards *l) {
  size_t nsh = (size_t)(j->nsh > 0 ? j->nsh : 1);
  l->files = xcalloc(nsh, sizeof *l->files);
  l->counts = xmalloc(MUL_SIZE(nsh, sizeof *l->counts));
  l->bytes = xmalloc(MUL_SIZE(nsh, sizeof *l->bytes));
  l->fnv = xmalloc(MUL_SIZE(nsh, sizeof *l->fnv));
  l->n = 0;
  for (int64_t k = 0; k < j->nsh; k++)
    if (j->counts[k] > 0) {
      l->files[l->n] = xmalloc(64);
      snprintf(l->files[l->n], 64, "shard-%05lld.h5", (long long)k);
      l->bytes[l->n] = j->fbytes[k];
      memcpy(&l->fnv[l->n], &j->fsum[k], sizeof *l->fnv);
      l->counts[l->n++] = j->counts[k];
    }
}

static void kept_shards_free(struct kept_shards *l) {
  for (int k = 0; k < l->n; k++) free(l->files[k]);
  free(l->files);
  free(l->counts);
  free(l->bytes);
  free(l->fnv);
}

/* The labels of the files not skipped, in list order. */
static int32_t *kept_labels(const struct prepare_job *j, int64_t nskip, const int64_t *skipped) {
  int32_t *labels = xmalloc(MUL_SIZE((size_t)j->total, sizeof *labels));
  for (int64_t q = 0, i = 0, s = 0; q < j->N; q++) {
    if (s < nskip && skipped[s] == q) {
      s++;
      continue;
    }
    labels[i++] = j->f.labels[q];
  }
  return labels;
}

/* Phase 9, rank 0: skipped.txt, the statistics and shard_dir/manifest.h5. */
static void write_manifest(struct prepare_job *j) {
  const struct config *cfg = j->cfg;
  const int C = j->ref.C;
  int64_t nskip = j->N - j->total;
  int64_t *skipped = xmalloc(MUL_SIZE((size_t)(nskip > 0 ? nskip : 1), sizeof *skipped));
  char **reasons = xcalloc((size_t)(nskip > 0 ? nskip : 1), sizeof *reasons);
  parse_skipped(j, nskip, skipped, reasons);
  if (nskip > 0) write_skipped(j, nskip, skipped, reasons);
  if (j->total == 0)
    scd_fatal(SCD_EXIT_DATA, "no usable image: every file under %s was skipped (see %s/skipped.txt)", j->root, j->dir);
  struct stats_acc sub, everything;
  const struct stats_acc *use = merge_stats(j, &sub, &everything);
  double *mean = xmalloc(MUL_SIZE((size_t)C, sizeof *mean)), *sd = xmalloc(MUL_SIZE((size_t)C, sizeof *sd));
  stats_finish(use, mean, sd);
  char (*cn)[CFG_WORDLEN] = xcalloc((size_t)C, sizeof *cn);
  default_channel_names(cfg, C, cn);
  const char **cnames = xmalloc(MUL_SIZE((size_t)C, sizeof *cnames));
  for (int c = 0; c < C; c++) cnames[c] = cn[c];
  struct kept_shards sl;
  kept_shards_make(j, &sl);
  int32_t *labels = kept_labels(j, nskip, skipped);
  struct manifest_info m = {
      .channels = C, .height = j->ref.H, .width = j->ref.W, .dtype = j->ref.dtype,
      .count = j->total, .source_count = j->N,
      .nclasses = j->f.nclasses, .class_names = (const char *const *)j->f.classes,
      .channel_names = cnames, .nmeta = j->f.nmeta, .meta_names = (const char *const *)j->f.meta_names,
      .nshards = sl.n, .shard_files = (const char *const *)sl.files, .shard_counts = sl.counts,
      .labels = labels, .nskipped = nskip, .skipped_index = skipped,
      .mean = mean, .std = sd, .stats_images = use->images,
      .tiff_dir = j->root, .center_crop = j->crop,
      .stats_fraction = cfg->data.stats_fraction, .stats_seed = cfg->data.stats_seed,
      .source_dtype = tiff_sample_name(j->ref.sample), .file_list_hash = j->hash,
      .label_depth = (int)cfg->data.folder_depth_for_labels, .label_source = j->labels, .file_list = j->list,
      .shard_bytes = sl.bytes, .shard_fnv1a = sl.fnv,
  };
  manifest_write(j->dir, &m);
  progress_end(&j->prog);
  log_info("prepare: %lld images in %d shard(s) under %s; mean/std over %lld images:", (long long)j->total, sl.n,
           j->dir, (long long)use->images);
  for (int c = 0; c < C; c++) log_info("  channel %d (%s): mean %.6f  std %.6f", c, cnames[c], mean[c], sd[c]);
  kept_shards_free(&sl);
  free(labels);
  free(cnames);
  free(cn);
  free(mean);
  free(sd);
  stats_acc_free(&sub);
  stats_acc_free(&everything);
  free(skipped);
  free(reasons);
}

int prepare_run(const struct config *cfg) {
  struct prepare_job *j = xcalloc(1, sizeof *j);
  j->cfg = cfg;
  j->rank = comm_rank();
  j->size = comm_size();
  j->dir = cfg->data.shard_dir;
  j->crop = (int)cfg->data.center_crop;
  j->skip = !strcmp(cfg->data.on_bad_image, "skip");
  int64_t status = j->rank == 0 ? scan_and_check(j) : 0;
  comm_bcast(&status, sizeof status, 0);
  if (status == 1) {
    if (j->rank == 0) imagefolder_free(&j->f);
    free(j);
    comm_barrier();
    return 0;
  }
  share_list(j);
  plan_shards(j);
  pick_stats_subset(j);
  convert(j);
  combine_stats(j);
  install_shards(j);
  gather_skipped(j);
  comm_barrier(); /* every shard is in place before the manifest appears */
  if (j->rank == 0) write_manifest(j);
  free(j->all);
  free(j->counts);
  free(j->fbytes);
  free(j->fsum);
  free(j->st);
  free(j->in_stats);
  imagefolder_free(&j->f);
  if (j->rank == 0) runlock_release(j->dir);
  free(j);
  comm_barrier(); /* the manifest exists before any rank goes on (pipeline: training next) */
  return 0;
}
