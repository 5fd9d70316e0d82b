/* bench/loader_bench.c - data-loader throughput: RAW-mode images/s per rank, CPU multi-crop
 * images/s per core, the augmentation's operation count and the machine's rate for such loops.
 *
 *   bench/loader_bench [-d shard_dir] [-n images] [-b batch] [-t loader_threads] [-e epochs]
 *                      [-a augment_images] [-C channels] [-S side] [-x]
 *
 * Without a manifest in shard_dir (default loader_bench_shards) it first writes a demo-style set:
 * n images of C x S x S uint16 (default 20000 of 5 x 50 x 50, like the PBMC cells) in shards of
 * 4096.  Next to the RAW rate it times plain sequential reads of the same shard files, 4 MiB at a
 * time: from the page cache (what `cat DIR/shard-*.h5 > /dev/null` does once they are cached) and
 * with O_DIRECT (what `dd iflag=direct bs=4M` does: the page cache bypassed), as images/s. */
#include "build_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_result.h"
#include "core/check.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/augment.h"
#include "data/loader.h"
#include "data/shards.h"
#include "input/config.h"
#include "tests/fixtures/shardset.h"

/* CPU seconds of the calling thread: on a shared machine, time slices taken by other processes do
 * not count (wall-clock rates are reported next to it). */
static double cputime(void) {
  struct timespec ts;
  CHECK_SYS(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts));
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double walltime(void) {
  struct timespec ts;
  CHECK_SYS(clock_gettime(CLOCK_MONOTONIC, &ts));
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Read every shard-*.h5 of dir sequentially in 4 MiB blocks (the buffer page-aligned, as O_DIRECT
 * needs); bytes read go to *bytes.  Returns the seconds taken, or -1 when a file cannot be opened
 * with these flags (O_DIRECT on a file system without it, e.g. tmpfs: EINVAL). */
static double read_shards(const char *dir, int flags, long long *bytes) {
  enum { BLOCK = 4 << 20 };
  void *buf = NULL;
  if (posix_memalign(&buf, 4096, BLOCK) != 0) {
    fprintf(stderr, "loader_bench: out of memory for the read buffer\n");
    exit(1);
  }
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "loader_bench: %s: %s\n", dir, strerror(errno));
    exit(1);
  }
  *bytes = 0;
  const double t0 = walltime();
  double t = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "shard-", 6) != 0) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    const int fd = open(path, O_RDONLY | flags);
    if (fd < 0) {
      if (flags && errno == EINVAL) {
        t = -1;
        break;
      }
      fprintf(stderr, "loader_bench: %s: %s\n", path, strerror(errno));
      exit(1);
    }
    ssize_t got;
    while ((got = read(fd, buf, BLOCK)) > 0) *bytes += got;
    if (got < 0 && !(flags && errno == EINVAL)) {
      fprintf(stderr, "loader_bench: read %s: %s\n", path, strerror(errno));
      exit(1);
    }
    CHECK_SYS(close(fd));
    if (got < 0) { /* O_DIRECT refused at the first read (unaligned file end is fine) */
      t = -1;
      break;
    }
  }
  if (t == 0) t = walltime() - t0;
  closedir(d);
  free(buf);
  return t;
}

/* The shard files read as files, for comparison with the loader's RAW rate. */
static void file_read_rates(const char *dir, int64_t n, double raw_rate) {
  long long bytes = 0;
  read_shards(dir, 0, &bytes); /* bring them into the page cache */
  const double warm = read_shards(dir, 0, &bytes);
  const double per_image = (double)bytes / (double)n; /* file bytes per image, HDF5 overhead included */
  printf("FILES    %.1f MB in shard files (%.0f bytes per image)\n", bytes / 1e6, per_image);
  printf("         page cache (cat): %8.0f MB/s = %10.0f images/s; the loader's RAW rate is %.2fx that\n",
         bytes / warm / 1e6, n / warm, raw_rate > 0 ? raw_rate / (n / warm) : 0.0);
  bench_result("loader", "file_read_warm", n / warm, "images/s", "sequential 4 MiB reads of the shard files "
               "from the page cache (cat), %.0f MB/s", bytes / warm / 1e6);
#ifdef O_DIRECT
  const double cold = read_shards(dir, O_DIRECT, &bytes);
  if (cold > 0) {
    printf("         O_DIRECT (dd iflag=direct): %8.0f MB/s = %10.0f images/s; RAW is %.2fx that\n",
           bytes / cold / 1e6, n / cold, raw_rate > 0 ? raw_rate / (n / cold) : 0.0);
    bench_result("loader", "file_read_direct", n / cold, "images/s", "sequential 4 MiB O_DIRECT reads of the "
                 "shard files (dd iflag=direct), %.0f MB/s", bytes / cold / 1e6);
  } else {
    printf("         O_DIRECT: not supported by the file system of %s\n", dir);
  }
#endif
}

struct opts {
  const char *dir;
  long n, batch, threads, epochs, aug_images, C, S;
  int skip_raw;
};

/* Generator state: one RNG stream over all images, drawn in index order. */
struct bench_images {
  int C, S;
  struct rng r;
};

static int32_t bench_image(void *ctx, int64_t i, void *img, char *rel, size_t reln) {
  struct bench_images *g = ctx;
  const int C = g->C, S = g->S;
  uint16_t *px = img;
  /* A bright blob on a noisy background, per channel (cell-like, never constant). */
  const double cy = S * (0.3 + 0.4 * rng_uniform(&g->r)), cx = S * (0.3 + 0.4 * rng_uniform(&g->r));
  for (int c = 0; c < C; c++)
    for (int y = 0; y < S; y++)
      for (int x = 0; x < S; x++) {
        const double d2 = (y - cy) * (y - cy) + (x - cx) * (x - cx);
        px[((size_t)c * S + y) * S + x] =
            (uint16_t)(300 + 100 * c + rng_below(&g->r, 200) + (d2 < S * S / 16.0 ? 2000 + 300 * c : 0));
      }
  const int32_t label = (int32_t)(i % 8);
  snprintf(rel, reln, "class%d/cell%06ld.tif", label, (long)i);
  return label;
}

static void make_shards(const struct opts *o) {
  const int C = (int)o->C, S = (int)o->S;
  const long per = 4096, nsh = (o->n + per - 1) / per;
  static const char *const classes[8] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"};
  double *mean = xcalloc((size_t)C, sizeof *mean), *sd = xcalloc((size_t)C, sizeof *sd);
  for (int c = 0; c < C; c++) {
    mean[c] = 0.3;
    sd[c] = 0.2;
  }
  struct bench_images g = {.C = C, .S = S};
  rng_init(&g.r, 1, RNG_DOMAIN_TEST, 0, 0);
  const struct shardset s = {.channels = C, .height = S, .width = S, .dtype = DATASET_U16, .count = o->n,
                             .per_shard = per, .nclasses = 8, .class_names = classes, .mean = mean,
                             .std = sd, .tiff_dir = "", .image = bench_image, .ctx = &g};
  const double t0 = wtime();
  shardset_write(o->dir, &s);
  printf("wrote %ld images (%d x %d x %d uint16) in %ld shards to %s in %.1f s\n", o->n, C, S, S, nsh, o->dir,
         wtime() - t0);
  free(mean);
  free(sd);
}

/* Drain whole epochs; returns images/s seen by the consumer (wall clock); *cpu_s gets the process
 * CPU seconds per image (all threads). */
static double run_loader(struct config *cfg, struct dataset *ds, const int64_t *idx, int64_t n,
                         enum loader_mode mode, long epochs, long max_images, double *flops, double *read_s,
                         double *wait_s, double *cpu_s) {
  struct loader *l = loader_create_ranked(cfg, ds, idx, n, (int)cfg->training.batch_size_per_rank, mode, 0, 1);
  long images = 0;
  *flops = *read_s = 0;
  struct timespec c0, c1;
  CHECK_SYS(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0));
  const double t0 = wtime();
  for (long e = 0; e < epochs && (max_images <= 0 || images < max_images); e++) {
    loader_start_epoch(l, e, 0);
    const struct loader_batch *b;
    while ((b = loader_next(l)) != NULL) {
      images += b->n;
      *flops += b->flops;
      *read_s += b->read_seconds;
      if (max_images > 0 && images >= max_images) break;
    }
  }
  const double dt = wtime() - t0;
  CHECK_SYS(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1));
  *cpu_s = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
  *cpu_s /= images > 0 ? (double)images : 1.0;
  *wait_s = loader_wait_seconds(l);
  loader_destroy(l);
  return images / dt;
}

/* Rate of the arithmetic the augmentation is made of, on one core: 4-tap weighted sums of rows
 * (the resize's height pass; 7 flops per output) over a row that stays in L1. */
static double tap4_rate(void) {
  enum { NX = 224, REPS = 200000 };
  static float r[4][NX], d[NX];
  for (int j = 0; j < 4; j++)
    for (int x = 0; x < NX; x++) r[j][x] = (float)(x * 0.001 + j);
  const float w0 = 0.1f, w1 = 0.6f, w2 = 0.35f, w3 = -0.05f;
  const double t0 = cputime();
  for (int rep = 0; rep < REPS; rep++) {
    for (int x = 0; x < NX; x++) {
      float acc = r[0][x] * w0;
      acc += r[1][x] * w1;
      acc += r[2][x] * w2;
      acc += r[3][x] * w3;
      d[x] = acc;
    }
    r[rep & 3][rep % NX] = d[(rep * 7) % NX]; /* keep the loop honest */
  }
  const double dt = cputime() - t0;
  volatile float sink = d[3];
  (void)sink;
  return 7.0 * NX * (double)REPS / dt;
}

/* Pixels per second of the final step, (x - mean) / std with a true division as torchvision's
 * Normalize does (division is several times dearer than a multiply-add). */
static double norm_rate(void) {
  enum { NX = 224, REPS = 200000 };
  static float x[NX];
  for (int i = 0; i < NX; i++) x[i] = (float)i * 0.001f;
  const float m = 0.3f, s = 0.2f;
  const double t0 = cputime();
  for (int rep = 0; rep < REPS; rep++) {
    for (int i = 0; i < NX; i++) x[i] = (x[i] - m) / s;
    x[rep % NX] = 0.5f; /* keep values finite */
  }
  const double dt = cputime() - t0;
  volatile float sink = x[5];
  (void)sink;
  return (double)NX * REPS / dt;
}

/* Peak-style rate: independent multiply-add chains (no memory traffic). */
static double madd_rate(void) {
  enum { REPS = 20000000 };
  float a[16], x = 1.0000001f, y = 0.9999999f;
  for (int i = 0; i < 16; i++) a[i] = (float)i * 0.01f;
  const double t0 = cputime();
  for (int rep = 0; rep < REPS; rep++)
    for (int i = 0; i < 16; i++) a[i] = a[i] * x + y;
  const double dt = cputime() - t0;
  float s = 0;
  for (int i = 0; i < 16; i++) s += a[i];
  volatile float sink = s;
  (void)sink;
  return 2.0 * 16 * (double)REPS / dt;
}

int main(int argc, char **argv) {
  struct opts o = {"loader_bench_shards", 20000, 30, 1, 3, 300, 5, 50, 0};
  int c;
  while ((c = getopt(argc, argv, "d:n:b:t:e:a:C:S:xh")) != -1) {
    switch (c) {
      case 'd': o.dir = optarg; break;
      case 'n': o.n = atol(optarg); break;
      case 'b': o.batch = atol(optarg); break;
      case 't': o.threads = atol(optarg); break;
      case 'e': o.epochs = atol(optarg); break;
      case 'a': o.aug_images = atol(optarg); break;
      case 'C': o.C = atol(optarg); break;
      case 'S': o.S = atol(optarg); break;
      case 'x': o.skip_raw = 1; break;
      default:
        fprintf(stderr, "usage: %s [-d shard_dir] [-n images] [-b batch] [-t loader_threads] [-e epochs] "
                        "[-a augment_images] [-C channels] [-S side] [-x (augmentation only)]\n", argv[0]);
        return c == 'h' ? 0 : 2;
    }
  }
  if (o.n < 1 || o.batch < 1 || o.threads < 1 || o.epochs < 1 || o.C < 1 || o.S < 1) {
    fprintf(stderr, "loader_bench: counts must be positive\n");
    return 2;
  }
  char mf[4096];
  snprintf(mf, sizeof mf, "%s/%s", o.dir, SHARDS_MANIFEST);
  if (!fs_exists(mf)) {
    CHECK_SYS(mkdir(o.dir, 0777) == -1 && !fs_is_dir(o.dir) ? -1 : 0);
    make_shards(&o);
  }
  struct dataset *ds = dataset_open(o.dir);
  const int64_t n = dataset_count(ds);
  int64_t *idx = xmalloc(sizeof(int64_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) idx[i] = i;
  printf("shards: %s, %lld images of %d x %d x %d %s (%.1f KiB each)\n", o.dir, (long long)n, dataset_channels(ds),
         dataset_height(ds), dataset_width(ds), dataset_dtype_name(dataset_dtype(ds)),
         dataset_image_bytes(ds) / 1024.0);

  struct config cfg;
  config_defaults(&cfg);
  cfg.training.batch_size_per_rank = o.batch;
  cfg.system.loader_threads = o.threads;
  cfg.system.prefetch_batches = 4;
  double flops, read_s, wait_s, cpu_s;

  /* RAW: read whole images, validity check, in-order batches. */
  if (!o.skip_raw) {
  const double raw_rate = run_loader(&cfg, ds, idx, n, LOADER_RAW, o.epochs, 0, &flops, &read_s, &wait_s, &cpu_s);
  printf("RAW      %ld thread(s), batch %ld: %10.0f images/s per rank  (%.1f MB/s of pixels; reads %.2f s, "
         "consumer waited %.2f s; %.1f us CPU per image)\n", o.threads, o.batch, raw_rate,
         raw_rate * dataset_image_bytes(ds) / 1e6, read_s, wait_s, cpu_s * 1e6);
  bench_result("loader", "raw_rate", raw_rate, "images/s", "RAW mode, per rank, %ld loader thread(s), batch %ld, "
               "%lld images of %d x %d x %d, %ld epochs", o.threads, o.batch, (long long)n, dataset_channels(ds),
               dataset_height(ds), dataset_width(ds), o.epochs);
  bench_result("loader", "raw_bandwidth", raw_rate * dataset_image_bytes(ds) / 1e6, "MB/s", "pixels delivered, RAW mode");
  file_read_rates(o.dir, n, raw_rate);
  }

  /* AUGMENT on one loader thread = one core: 2 global 224 + 8 local 96 crops. */
  if (o.aug_images > 0) {
    cfg.system.loader_threads = 1;
    const double aug_rate = run_loader(&cfg, ds, idx, n, LOADER_AUGMENT, 1000, o.aug_images, &flops, &read_s, &wait_s, &cpu_s);
    /* Operation count per image from a single-image run (same for every image up to the
     * random choices of blur and solarisation; averaged over the images run). */
    struct augment a;
    augment_init(&a, &cfg, dataset_channels(ds), dataset_height(ds), dataset_width(ds), IMGOPS_U16,
                 dataset_mean(ds), dataset_std(ds));
    struct augment_work *w = augment_work_create(&a);
    const int nc = augment_ncrops(&a);
    float *out[AUGMENT_CROP_SLOTS];
    for (int k = 0; k < nc; k++) {
      const int S = augment_crop_size(&a, k);
      out[k] = xmalloc(sizeof(float) * (size_t)a.nsel * S * S);
    }
    void *raw = xmalloc(dataset_image_bytes(ds));
    const int reps = 300;
    double compute = 0;
    for (int i = 0; i < reps; i++) {
      const int64_t g = i % n;
      dataset_read_images(ds, &g, 1, raw);
      const double t0 = cputime();
      augment_image(&a, w, raw, 0, g, out);
      compute += cputime() - t0;
    }
    const double fpi = augment_work_flops(w) / reps;
    const double tap4 = tap4_rate(), madd = madd_rate(), norm = norm_rate();
    /* Every output pixel is normalised once (2 of its flops, at the division rate); the rest are
     * multiply-adds, compares and selects at the 4-tap rate. */
    double npix = 0;
    for (int k = 0; k < nc; k++) npix += (double)a.nsel * augment_crop_size(&a, k) * augment_crop_size(&a, k);
    const double floor_s = (fpi - 2 * npix) / tap4 + npix / norm;
    printf("AUGMENT  1 loader thread: %.1f images/s (wall), %.1f images/s per CPU second of the process; "
           "augment_image alone: %.1f images/s per CPU second (%d crops: 2 x %d + %d x %d, %d channels)\n",
           aug_rate, 1.0 / cpu_s, reps / compute, nc, a.global_size, a.n_local, a.local_size, a.nsel);
    printf("         %.1f Mflop per image; %.2f Gflop/s achieved\n", fpi / 1e6, fpi * reps / compute / 1e9);
    bench_result("loader", "augment_rate", aug_rate, "images/s", "AUGMENT mode, 1 loader thread, wall clock, "
                 "2x%d + %dx%d crops of %d channels", a.global_size, a.n_local, a.local_size, a.nsel);
    bench_result("loader", "augment_cpu_rate", reps / compute, "images/cpu-s", "augment_image alone, per CPU second "
                 "of one core (%.1f Mflop per image)", fpi / 1e6);
    printf("machine  4-tap row loop %.2f Gflop/s, independent multiply-adds %.2f Gflop/s, normalise %.2f Gpixel/s "
           "(1 core, CPU time)\n", tap4 / 1e9, madd / 1e9, norm / 1e9);
    printf("         arithmetic floor %.3f ms/image (%.3f ms if every flop ran at the 4-tap rate); measured %.3f ms/image "
           "= %.2fx the floor\n", floor_s * 1e3, fpi / tap4 * 1e3, compute / reps * 1e3, (compute / reps) / floor_s);
    bench_result("loader", "augment_vs_floor", (compute / reps) / floor_s, "x", "measured time per image over the "
                 "arithmetic floor (%.3f ms)", floor_s * 1e3);
    for (int k = 0; k < nc; k++) free(out[k]);
    free(raw);
    augment_work_destroy(w);
  }
  free(idx);
  dataset_close(ds);
  return 0;
}
