/* prepare.c - calculation='prepare': TIFF tree -> HDF5 shards, channel statistics and manifest.
 *
 * Decisions (see also imagefolder.h, stats.h):
 * - Shard k holds the images of files [k*images_per_shard, (k+1)*images_per_shard) of the
 *   ImageFolder list, whatever the number of ranks; ranks convert disjoint runs of whole shards,
 *   so 1 and N ranks write byte-identical files.
 * - Every image must have the channel count, the shard dtype (uint16 for 8/16-bit unsigned
 *   sources, float32 for signed and floating-point ones) and - without center_crop - the height
 *   and width of the reference: the most common shape among up to 16 files spread over the list,
 *   so an odd first file is reported as the odd one.
 * - Bad images (unreadable, wrong shape or dtype, NaN/Inf, a constant non-zero channel, which
 *   upstream's min-max turns into NaN) stop the run (on_bad_image='error', exit 3, nothing left
 *   in shard_dir) or are left out and listed in skipped.txt ('skip').  Skipped files keep their
 *   place in the split: the manifest records their ImageFolder positions (split.h).
 * - The manifest is written last, after every shard is in place: its presence means complete.
 *   A complete shard_dir of the same file list and settings is left as it is; one of other input
 *   is refused; one without manifest (an interrupted run) is rebuilt. */
#include "build_config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
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
#include "data/imagefolder.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/split.h"
#include "data/stats.h"
#include "data/tiff.h"

/* Files each rank converts between two checks of "did any rank hit a bad image?" (and progress
 * updates): small enough that an error stops every rank quickly, large enough to cost nothing. */
#define ROUND_FILES 64
#define WHY_MAX (2 * PATH_MAX) /* a reason may quote an example path */

/* ---- per-image steps ---- */

int prepare_storage_dtype(int sample) {
  return sample == TIFF_SAMPLE_U8 || sample == TIFF_SAMPLE_U16 ? DATASET_U16 : DATASET_F32;
}

int prepare_crop_offset(int size, int crop) {
  if (crop > size) return -((crop - size) / 2);
  int d = size - crop, k = d / 2;
  if (d % 2 == 0) return k;
  return k % 2 == 0 ? k : k + 1; /* round(k + 0.5) rounds half to even */
}

static double sample_at(const void *src, int sample, size_t i) {
  switch (sample) {
    case TIFF_SAMPLE_U8: return ((const uint8_t *)src)[i];
    case TIFF_SAMPLE_U16: return ((const uint16_t *)src)[i];
    case TIFF_SAMPLE_I8: return ((const int8_t *)src)[i];
    case TIFF_SAMPLE_I16: return ((const int16_t *)src)[i];
    case TIFF_SAMPLE_F32: return ((const float *)src)[i];
    default: return ((const double *)src)[i];
  }
}

void prepare_crop_convert(const void *src, int sample, int channels, int sh, int sw, void *dst, int oh, int ow) {
  int top = prepare_crop_offset(sh, oh), left = prepare_crop_offset(sw, ow);
  int u16 = prepare_storage_dtype(sample) == DATASET_U16;
  size_t n = (size_t)channels * oh * ow;
  if (oh == sh && ow == sw) { /* the common case: no crop, a copy or a widening */
    if (sample == TIFF_SAMPLE_U16 || sample == TIFF_SAMPLE_F32) {
      memcpy(dst, src, n * (sample == TIFF_SAMPLE_U16 ? 2 : 4));
      return;
    }
    if (sample == TIFF_SAMPLE_U8) {
      for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = ((const uint8_t *)src)[i];
      return;
    }
  }
  for (int c = 0; c < channels; c++)
    for (int y = 0; y < oh; y++) {
      int sy = y + top;
      for (int x = 0; x < ow; x++) {
        int sx = x + left;
        size_t o = ((size_t)c * oh + y) * ow + x;
        double v = 0; /* padding */
        if (sy >= 0 && sy < sh && sx >= 0 && sx < sw) v = sample_at(src, sample, ((size_t)c * sh + sy) * sw + sx);
        if (u16)
          ((uint16_t *)dst)[o] = (uint16_t)v;
        else
          ((float *)dst)[o] = (float)v;
      }
    }
}

/* The shape every image must have: chosen from a sample of the files (see choose_reference). */
struct ref_format {
  int C, H, W;    /* after center_crop */
  int dtype;      /* shard dtype */
  int sample;     /* source sample type of the example */
  char example[PATH_MAX];
};

/* Whether an image of this header fits the reference format (0), else -1 with the reason. */
static int format_fits(const struct tiff_info *info_, const struct ref_format *ref, int crop, char *why, size_t n) {
  const struct tiff_info info = *info_;
  int rc = -1;
  if (info.channels != ref->C)
    snprintf(why, n, "has %d channel(s), expected %d like most images (e.g. %s)", info.channels, ref->C, ref->example);
  else if (prepare_storage_dtype(info.sample) != ref->dtype)
    snprintf(why, n, "has %s samples, expected %s like most images (e.g. %s)", tiff_sample_name(info.sample),
             ref->dtype == DATASET_U16 ? "8- or 16-bit unsigned" : "signed or floating-point", ref->example);
  else if (!crop && (info.height != ref->H || info.width != ref->W))
    snprintf(why, n, "is %dx%d pixels (height x width), expected %dx%d like most images (e.g. %s); "
             "center_crop makes differently sized images usable", info.height, info.width, ref->H, ref->W, ref->example);
  else
    rc = 0;
  return rc;
}

/* Read, check and convert one file into out [C][H][W]; its statistics go into one (reset here).
 * Returns 0, or -1 with the reason. */
static int convert_one(const char *full, const struct ref_format *ref, int crop, void *out, struct stats_acc *one,
                       char *why, size_t n) {
  struct tiff_info info;
  void *data = NULL;
  /* The header first: an image of the wrong shape is refused before it is decoded (a huge
   * compressed one would take memory and time for nothing). */
  if (tiff_probe(full, &info, why, n) != 0 || format_fits(&info, ref, crop, why, n) != 0) return -1;
  if (tiff_read(full, &info, &data, why, n) != 0) return -1;
  int rc = format_fits(&info, ref, crop, why, n); /* the same, unless the file changed meanwhile */
  if (rc == 0) {
    prepare_crop_convert(data, info.sample, ref->C, info.height, info.width, out, ref->H, ref->W);
    size_t hw = (size_t)ref->H * ref->W;
    if (ref->dtype == DATASET_F32) {
      const float *v = out;
      for (size_t i = 0; i < (size_t)ref->C * hw; i++)
        if (!isfinite(v[i])) {
          snprintf(why, n, "pixel (channel %zu, row %zu, column %zu) is %s%s", i / hw, i % hw / (size_t)ref->W,
                   i % (size_t)ref->W, isnan(v[i]) ? "NaN" : "infinite",
                   info.sample == TIFF_SAMPLE_F64 && !isnan(v[i]) ? " in float32" : "");
          rc = -1;
          break;
        }
    }
    stats_acc_reset(one);
    int c = rc == 0 ? stats_acc_add(one, out, ref->dtype, hw) : -1;
    if (c >= 0) {
      double v = ref->dtype == DATASET_F32 ? ((const float *)out)[(size_t)c * hw] : ((const uint16_t *)out)[(size_t)c * hw];
      snprintf(why, n, "channel %d is constant (%g)%s: per-image min-max scaling divides 0 by 0 (scDINO "
               "silently drops such images)", c, v, crop ? " after center_crop" : "");
      rc = -1;
    }
  }
  free(data);
  return rc;
}

/* Reasons go into skipped.txt as one line each. */
static void one_line(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\t' || *s == '\r') *s = ' ';
}

/* The reference shape is the most common (channels, dtype[, height, width]) among up to 16 files
 * spread over the list (ties: the earliest), so one odd file - even the first - does not make
 * every other image "wrong". */
static void choose_reference(const struct imagefolder *f, const char *root, int crop, struct ref_format *ref) {
  enum { NPROBE = 16 };
  struct { struct tiff_info info; int64_t pos; int votes; } cand[NPROBE];
  int ncand = 0;
  char full[PATH_MAX], why[WHY_MAX], first_why[PATH_MAX + WHY_MAX + 8] = "";
  int64_t nprobe = f->n < NPROBE ? f->n : NPROBE;
  for (int64_t k = 0; k < nprobe; k++) {
    int64_t pos = nprobe > 1 ? k * (f->n - 1) / (nprobe - 1) : 0;
    struct tiff_info info;
    fs_join(full, sizeof full, root, f->paths[pos]);
    if (tiff_probe(full, &info, why, sizeof why) != 0) {
      if (!first_why[0]) snprintf(first_why, sizeof first_why, "%s: %s", full, why);
      continue;
    }
    int j;
    for (j = 0; j < ncand; j++) {
      const struct tiff_info *c = &cand[j].info;
      if (c->channels == info.channels && prepare_storage_dtype(c->sample) == prepare_storage_dtype(info.sample) &&
          (crop || (c->height == info.height && c->width == info.width)))
        break;
    }
    if (j == ncand) {
      cand[ncand].info = info;
      cand[ncand].pos = pos;
      cand[ncand++].votes = 0;
    }
    cand[j].votes++;
  }
  /* None of the sample opens: look for any readable file before giving up. */
  for (int64_t pos = 0; ncand == 0 && pos < f->n; pos++) {
    fs_join(full, sizeof full, root, f->paths[pos]);
    if (tiff_probe(full, &cand[0].info, why, sizeof why) == 0) {
      cand[0].pos = pos;
      cand[0].votes = 1;
      ncand = 1;
    }
  }
  if (ncand == 0) scd_fatal(SCD_EXIT_DATA, "none of the %lld files under %s reads as a TIFF image (e.g. %s)",
                            (long long)f->n, root, first_why);
  int best = 0;
  for (int j = 1; j < ncand; j++)
    if (cand[j].votes > cand[best].votes) best = j;
  const struct tiff_info *b = &cand[best].info;
  ref->C = b->channels;
  ref->H = crop ? crop : b->height;
  ref->W = crop ? crop : b->width;
  ref->dtype = prepare_storage_dtype(b->sample);
  ref->sample = b->sample;
  fs_join(ref->example, sizeof ref->example, root, f->paths[cand[best].pos]);
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
static int check_existing(const struct config *cfg, const char *dir, const struct imagefolder *f, uint64_t hash) {
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
           cfg->data.tiff_dir, (long long)s.source_count, (long long)s.count);
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

int prepare_run(const struct config *cfg) {
  int rank = comm_rank(), size = comm_size();
  const char *dir = cfg->data.shard_dir;
  int crop = (int)cfg->data.center_crop;
  int skip = !strcmp(cfg->data.on_bad_image, "skip");
  struct imagefolder f;
  struct ref_format ref;
  char root[PATH_MAX] = "";
  int64_t status = 0;
  uint64_t hash = 0;

  if (rank == 0) {
    if (!cfg->data.tiff_dir[0])
      scd_fatal(SCD_EXIT_INPUT, "calculation='prepare' needs &data tiff_dir (the folder with one sub-folder of TIFF files per class)");
    if (!realpath(cfg->data.tiff_dir, root))
      scd_fatal(SCD_EXIT_DATA, "&data tiff_dir '%s': %s", cfg->data.tiff_dir, strerror(errno));
    log_info("prepare: scanning %s", root);
    imagefolder_scan(root, &f);
    hash = imagefolder_hash(&f); /* the file list as found: the classes below do not change it */
    log_info("prepare: %lld TIFF files in %d classes", (long long)f.n, f.nclasses);
    const int depth = (int)cfg->data.folder_depth_for_labels;
    if (depth >= 0) {
      char why[PATH_MAX + 128];
      if (imagefolder_relabel(&f, depth, why, sizeof why) != 0)
        scd_fatal(SCD_EXIT_INPUT, "&data folder_depth_for_labels = %d: %s/%s", depth, root, why);
      log_info("prepare: classes from the folder %d level(s) above each file (folder_depth_for_labels): %d classes",
               depth, f.nclasses);
    }
    if (f.n_other > 0)
      log_warn("%lld non-TIFF image file(s) ignored (e.g. %s); scDINO's ImageFolder would list them and then "
               "fail to read them", (long long)f.n_other, f.other_example);
    status = check_existing(cfg, dir, &f, hash);
    if (status == 0) {
      fs_mkdir_p(dir);
      /* Another job building this shard_dir must not have its files cleaned away. */
      runlock_acquire(dir, "shard_dir");
      clean_stale(dir);
      choose_reference(&f, root, crop, &ref);
      log_info("prepare: images are %d channel(s) x %d x %d, %s (stored as %s)%s", ref.C, ref.H, ref.W,
               tiff_sample_name(ref.sample), dataset_dtype_name(ref.dtype), crop ? " after center_crop" : "");
      if (cfg->data.n_channel_names > 0 && cfg->data.n_channel_names != ref.C)
        scd_fatal(SCD_EXIT_INPUT, "&data channel_names has %d name(s), but the images have %d channels (e.g. %s)",
                  cfg->data.n_channel_names, ref.C, ref.example);
      for (int i = 0; i < cfg->data.n_channels; i++)
        if (cfg->data.channels[i] >= ref.C)
          scd_fatal(SCD_EXIT_INPUT, "&data channels: channel %ld does not exist; the images have channels 0..%d (e.g. %s)",
                    cfg->data.channels[i], ref.C - 1, ref.example);
    }
  }
  comm_bcast(&status, sizeof status, 0);
  if (status == 1) {
    if (rank == 0) imagefolder_free(&f);
    comm_barrier();
    return 0;
  }
  comm_bcast(&ref, sizeof ref, 0);
  bcast_string(root, sizeof root);
  {
    size_t bytes = 0;
    char *buf = rank == 0 ? imagefolder_pack(&f, &bytes) : NULL;
    uint64_t b64 = bytes;
    comm_bcast(&b64, sizeof b64, 0);
    if (rank != 0) buf = xmalloc((size_t)b64);
    comm_bcast(buf, (size_t)b64, 0);
    if (rank != 0) imagefolder_unpack(buf, (size_t)b64, &f);
    free(buf);
  }

  /* Shards are runs of images_per_shard files, whatever the number of ranks; rank r converts
   * shards [nsh*r/size, nsh*(r+1)/size). */
  const int64_t N = f.n, ips = cfg->data.images_per_shard;
  const int64_t nsh = (N + ips - 1) / ips;
  const int64_t sh0 = nsh * rank / size, sh1 = nsh * (rank + 1) / size;
  const int64_t f0 = sh0 * ips < N ? sh0 * ips : N, f1 = sh1 * ips < N ? sh1 * ips : N;
  int64_t maxfiles = 0;
  for (int r = 0; r < size; r++) {
    int64_t a = nsh * r / size * ips, b = nsh * (r + 1) / size * ips;
    a = a < N ? a : N;
    b = b < N ? b : N;
    if (b - a > maxfiles) maxfiles = b - a;
  }
  const int64_t rounds = (maxfiles + ROUND_FILES - 1) / ROUND_FILES;

  /* Statistics subset: upstream's split with stats_fraction and the fixed seed, over all files. */
  unsigned char *in_stats = xcalloc((size_t)(N > 0 ? N : 1), 1);
  {
    struct split s;
    split_compute(N, cfg->data.stats_fraction, (uint32_t)cfg->data.stats_seed, &s);
    for (int64_t i = 0; i < s.n_train; i++) in_stats[s.train[i]] = 1;
    split_free(&s);
  }

  const size_t hw = (size_t)ref.H * ref.W;
  const size_t img_bytes = MUL_SIZE(MUL_SIZE(hw, (size_t)ref.C), dataset_dtype_size(ref.dtype));
  void *img = xmalloc(img_bytes);
  struct shard_job *jobs = xcalloc((size_t)(sh1 - sh0 > 0 ? sh1 - sh0 : 1), sizeof *jobs);
  for (int64_t k = sh0; k < sh1; k++) {
    stats_acc_init(&jobs[k - sh0].sub, ref.C);
    stats_acc_init(&jobs[k - sh0].all, ref.C);
  }
  struct stats_acc one; /* the image just converted */
  stats_acc_init(&one, ref.C);
  struct skipped *skips = NULL;
  size_t nskips = 0, capskips = 0;
  char bad_msg[PATH_MAX + WHY_MAX + 8] = "";
  /* Rank 0 prints progress from the per-round totals of all ranks. */
  struct progress prog;
  progress_start(&prog, "prepare", "files", N, N, cfg->control.progress_seconds);
  int64_t files_done = 0;
  double bytes_read = 0;

  int64_t p = f0;
  for (int64_t round = 0; round < rounds; round++) {
    int64_t end = p + ROUND_FILES < f1 ? p + ROUND_FILES : f1, done = 0;
    double bytes = 0;
    int bad = 0;
    for (; p < end && !bad; p++, done++) {
      int64_t k = p / ips;
      struct shard_job *job = &jobs[k - sh0];
      int64_t shard_end = (k + 1) * ips < N ? (k + 1) * ips : N;
      if (!job->w) {
        char name[64], path[PATH_MAX];
        snprintf(name, sizeof name, "shard-%05lld.h5", (long long)k);
        fs_join(path, sizeof path, dir, name);
        job->w = shard_writer_create(path, ref.C, ref.H, ref.W, ref.dtype, shard_end - k * ips);
      }
      char full[PATH_MAX], why[WHY_MAX];
      fs_join(full, sizeof full, root, f.paths[p]);
      long long fsz = fs_file_size(full);
      bytes += fsz > 0 ? (double)fsz : 0;
      if (convert_one(full, &ref, crop, img, &one, why, sizeof why) != 0) {
        one_line(why);
        if (!skip) {
          snprintf(bad_msg, sizeof bad_msg, "%s: %s", full, why);
          bad = 1;
        } else {
          if (nskips == capskips) {
            capskips = capskips ? 2 * capskips : 16;
            skips = xrealloc(skips, MUL_SIZE(capskips, sizeof *skips));
          }
          skips[nskips].pos = p;
          skips[nskips++].why = xstrdup(why);
        }
      } else {
        /* Provisional global index: exact unless an earlier file was skipped (fixed at commit). */
        shard_writer_add(job->w, img, f.labels[p], k * ips + job->n++, f.paths[p]);
        wsleep(cfg->debug.step_sleep); /* &debug: a slow conversion, for the signal tests */
        stats_acc_merge(&job->all, &one);
        if (in_stats[p]) stats_acc_merge(&job->sub, &one);
      }
      if (p + 1 == shard_end && !bad) shard_writer_finish(job->w);
    }
    /* Everyone learns whether some rank failed, and rank 0 the progress. */
    double first_bad = bad ? rank : size;
    double sums[2] = {(double)done, bytes};
    round_reduce(&first_bad, sums);
    files_done += (int64_t)sums[0];
    bytes_read += sums[1];
    if (first_bad < size) {
      if (rank == (int)first_bad) {
        fflush(stdout);
        fprintf(stderr, "scdino: error: %s\n  (on_bad_image='error'; set on_bad_image='skip' to leave bad "
                "images out and list them in %s/skipped.txt)\n", bad_msg, dir);
      }
      for (int64_t k = sh0; k < sh1; k++)
        if (jobs[k - sh0].w) shard_writer_discard(jobs[k - sh0].w);
      comm_exit_all(SCD_EXIT_DATA);
    }
    progress_update(&prog, files_done, bytes_read);
  }
  free(img);
  stats_acc_free(&one);

  /* Shard sizes and statistics, combined in shard order so any rank count gives the same bits. */
  const int C = ref.C;
  int64_t *counts = xcalloc((size_t)(nsh > 0 ? nsh : 1), sizeof *counts);
  double *st = xcalloc(MUL_SIZE((size_t)(nsh > 0 ? nsh : 1), 4 * (size_t)C + 4), sizeof *st);
  for (int64_t k = sh0; k < sh1; k++) {
    struct shard_job *j = &jobs[k - sh0];
    double *s = st + (size_t)k * (4 * (size_t)C + 4);
    counts[k] = j->n;
    memcpy(s, j->sub.sum, (size_t)C * sizeof *s);
    memcpy(s + C, j->sub.sumsq, (size_t)C * sizeof *s);
    memcpy(s + 2 * C, j->all.sum, (size_t)C * sizeof *s);
    memcpy(s + 3 * C, j->all.sumsq, (size_t)C * sizeof *s);
    s[4 * C] = (double)j->sub.images;
    s[4 * C + 1] = (double)j->sub.pixels;
    s[4 * C + 2] = (double)j->all.images;
    s[4 * C + 3] = (double)j->all.pixels;
  }
  comm_allreduce_sum_i64(counts, (size_t)nsh);
  comm_allreduce_sum_f64(st, (size_t)nsh * (4 * (size_t)C + 4));

  /* Give each shard its run of global indices, then rename it into place. */
  int64_t total = 0;
  for (int64_t k = 0; k < nsh; k++) {
    if (k >= sh0 && k < sh1) {
      struct shard_job *j = &jobs[k - sh0];
      if (j->n > 0)
        shard_writer_commit(j->w, total - k * ips);
      else if (j->w)
        shard_writer_discard(j->w);
      stats_acc_free(&j->sub);
      stats_acc_free(&j->all);
    }
    total += counts[k];
  }
  free(jobs);
  /* Each finished shard's size and checksum, for the copies &data stage_dir makes (by shard, so
   * summing the ranks' arrays assembles them). */
  int64_t *fbytes = xcalloc((size_t)(nsh > 0 ? nsh : 1), sizeof *fbytes);
  int64_t *fsum = xcalloc((size_t)(nsh > 0 ? nsh : 1), sizeof *fsum);
  for (int64_t k = sh0; k < sh1; k++) {
    if (counts[k] == 0) continue;
    char name[64], path[PATH_MAX];
    snprintf(name, sizeof name, "shard-%05lld.h5", (long long)k);
    fs_join(path, sizeof path, dir, name);
    uint64_t h;
    long long b;
    if (fs_file_fnv1a(path, &h, &b) != 0) scd_fatal(SCD_EXIT_FAILURE, "cannot read back %s: %s", path, strerror(errno));
    fbytes[k] = b;
    memcpy(&fsum[k], &h, sizeof h); /* the bits, carried by the sum of one value and zeros */
  }
  comm_allreduce_sum_i64(fbytes, (size_t)nsh);
  comm_allreduce_sum_i64(fsum, (size_t)nsh);

  /* The skipped files' positions and reasons, on rank 0. */
  char *text = NULL;
  size_t tlen = 0;
  for (size_t i = 0; i < nskips; i++) {
    size_t l = strlen(skips[i].why) + 32;
    text = xrealloc(text, tlen + l);
    tlen += (size_t)snprintf(text + tlen, l, "%lld\t%s\n", (long long)skips[i].pos, skips[i].why);
    free(skips[i].why);
  }
  free(skips);
  int mylen = (int)tlen, *lens = NULL, *displs = NULL;
  char *all = NULL;
  if (rank == 0) {
    lens = xcalloc((size_t)size, sizeof *lens);
    displs = xcalloc((size_t)size, sizeof *displs);
  }
  CHECK_MPI(MPI_Gather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, 0, comm_mpi()));
  size_t alllen = 0;
  if (rank == 0) {
    for (int r = 0; r < size; r++) {
      displs[r] = (int)alllen;
      alllen += (size_t)lens[r];
    }
    all = xmalloc(alllen + 1);
    all[alllen] = '\0';
  }
  CHECK_MPI(MPI_Gatherv(text ? text : "", mylen, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, comm_mpi()));
  free(text);
  comm_barrier(); /* every shard is in place before the manifest appears */

  if (rank == 0) {
    int64_t nskip = N - total;
    int64_t *skipped = xmalloc(MUL_SIZE((size_t)(nskip > 0 ? nskip : 1), sizeof *skipped));
    char **reasons = xcalloc((size_t)(nskip > 0 ? nskip : 1), sizeof *reasons);
    int64_t ns = 0;
    for (char *q = all; q && *q && ns < nskip;) {
      char *nl = strchr(q, '\n'), *tab = strchr(q, '\t');
      SCD_ASSERT(nl && tab && tab < nl);
      *nl = '\0';
      skipped[ns] = strtoll(q, NULL, 10);
      reasons[ns++] = tab + 1;
      q = nl + 1;
    }
    SCD_ASSERT(ns == nskip);
    /* Ranks hold ascending runs in rank order: the list is already sorted. */
    if (nskip > 0) {
      char path[PATH_MAX];
      fs_join(path, sizeof path, dir, "skipped.txt");
      struct fs_mem txt;
      FILE *out = fs_mem_begin(&txt);
      for (int64_t i = 0; i < nskip; i++) fprintf(out, "%s/%s\t%s\n", root, f.paths[skipped[i]], reasons[i]);
      fs_mem_commit(&txt, "list of skipped files", path);
      log_warn("%lld of %lld files skipped as bad images (on_bad_image='skip'), listed in %s", (long long)nskip,
               (long long)N, path);
    }
    if (total == 0) scd_fatal(SCD_EXIT_DATA, "no usable image: every file under %s was skipped (see %s/skipped.txt)", root, dir);

    /* Statistics: per-shard sums merged in shard order. */
    struct stats_acc sub, everything;
    stats_acc_init(&sub, C);
    stats_acc_init(&everything, C);
    for (int64_t k = 0; k < nsh; k++) {
      const double *s = st + (size_t)k * (4 * (size_t)C + 4);
      for (int c = 0; c < C; c++) {
        sub.sum[c] += s[c];
        sub.sumsq[c] += s[C + c];
        everything.sum[c] += s[2 * C + c];
        everything.sumsq[c] += s[3 * C + c];
      }
      sub.images += (int64_t)s[4 * C];
      sub.pixels += (int64_t)s[4 * C + 1];
      everything.images += (int64_t)s[4 * C + 2];
      everything.pixels += (int64_t)s[4 * C + 3];
    }
    const struct stats_acc *use = &sub;
    if (sub.images == 0) {
      log_warn("stats_fraction=%g selects no usable image of %lld; mean/std are computed over all images",
               cfg->data.stats_fraction, (long long)total);
      use = &everything;
    }
    double *mean = xmalloc(MUL_SIZE((size_t)C, sizeof *mean)), *sd = xmalloc(MUL_SIZE((size_t)C, sizeof *sd));
    stats_finish(use, mean, sd);

    /* Manifest arrays. */
    char (*cn)[CFG_WORDLEN] = xcalloc((size_t)C, sizeof *cn);
    default_channel_names(cfg, C, cn);
    const char **cnames = xmalloc(MUL_SIZE((size_t)C, sizeof *cnames));
    for (int c = 0; c < C; c++) cnames[c] = cn[c];
    char **shard_files = xcalloc((size_t)(nsh > 0 ? nsh : 1), sizeof *shard_files);
    int64_t *shard_counts = xmalloc(MUL_SIZE((size_t)(nsh > 0 ? nsh : 1), sizeof *shard_counts));
    int64_t *shard_bytes = xmalloc(MUL_SIZE((size_t)(nsh > 0 ? nsh : 1), sizeof *shard_bytes));
    uint64_t *shard_fnv = xmalloc(MUL_SIZE((size_t)(nsh > 0 ? nsh : 1), sizeof *shard_fnv));
    int nfiles = 0;
    for (int64_t k = 0; k < nsh; k++)
      if (counts[k] > 0) {
        shard_files[nfiles] = xmalloc(64);
        snprintf(shard_files[nfiles], 64, "shard-%05lld.h5", (long long)k);
        shard_bytes[nfiles] = fbytes[k];
        memcpy(&shard_fnv[nfiles], &fsum[k], sizeof *shard_fnv);
        shard_counts[nfiles++] = counts[k];
      }
    int32_t *labels = xmalloc(MUL_SIZE((size_t)total, sizeof *labels));
    for (int64_t q = 0, i = 0, s = 0; q < N; q++) {
      if (s < nskip && skipped[s] == q) {
        s++;
        continue;
      }
      labels[i++] = f.labels[q];
    }
    struct manifest_info m = {
        .channels = C, .height = ref.H, .width = ref.W, .dtype = ref.dtype,
        .count = total, .source_count = N,
        .nclasses = f.nclasses, .class_names = (const char *const *)f.classes,
        .channel_names = cnames,
        .nshards = nfiles, .shard_files = (const char *const *)shard_files, .shard_counts = shard_counts,
        .labels = labels, .nskipped = nskip, .skipped_index = skipped,
        .mean = mean, .std = sd, .stats_images = use->images,
        .tiff_dir = root, .center_crop = crop,
        .stats_fraction = cfg->data.stats_fraction, .stats_seed = cfg->data.stats_seed,
        .source_dtype = tiff_sample_name(ref.sample), .file_list_hash = hash,
        .label_depth = (int)cfg->data.folder_depth_for_labels,
        .shard_bytes = shard_bytes, .shard_fnv1a = shard_fnv,
    };
    manifest_write(dir, &m);
    progress_end(&prog);
    log_info("prepare: %lld images in %d shard(s) under %s; mean/std over %lld images:", (long long)total, nfiles,
             dir, (long long)use->images);
    for (int c = 0; c < C; c++) log_info("  channel %d (%s): mean %.6f  std %.6f", c, cnames[c], mean[c], sd[c]);

    for (int k = 0; k < nfiles; k++) free(shard_files[k]);
    free(shard_files);
    free(shard_counts);
    free(shard_bytes);
    free(shard_fnv);
    free(labels);
    free(cnames);
    free(cn);
    free(mean);
    free(sd);
    stats_acc_free(&sub);
    stats_acc_free(&everything);
    free(skipped);
    free(reasons);
    free(all);
    free(lens);
    free(displs);
  }
  free(counts);
  free(fbytes);
  free(fsum);
  free(st);
  free(in_stats);
  imagefolder_free(&f);
  if (rank == 0) runlock_release(dir);
  comm_barrier(); /* the manifest exists before any rank goes on (pipeline: training next) */
  return 0;
}
