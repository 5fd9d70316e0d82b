/* tests/hostile/corrupt_sweep.c - the corruption sweep: every file scdino reads proves it is intact.
 *
 * A small checkpoint (with its checkpoint.prev.h5), shard manifest, shard and features file are
 * written with scdino's own writers.  Then, one at a time, one bit of one byte is flipped - in
 * every byte of a file's metadata (all that is not dataset data) and in a sample of its data
 * bytes (the first and last of each chunk, then every STRIDE-th) - and scdino's own reader reads
 * the file in a child process.  Each flip must end in one of:
 *   same      exit 0 with the digest of everything read equal to the unflipped file's;
 *   fallback  (checkpoint) exit 0 with the digest of checkpoint.prev.h5 and a warning naming both;
 *   refused   exit 3 (SCD_EXIT_DATA) with a message naming the file;
 * never a signal, never a hang (a child still reading after 300 s is killed and counted), never
 * exit 0 with another result.  The counts per file are printed; any other outcome fails.
 *
 * Then the same over version-1 copies of the four files (tests/hostile/h5v1.h: as h5py and old
 * scdino wrote them, with no checksum and variable-length strings in the global heap, which
 * scdino checks before HDF5 follows it): every byte of each heap collection's and heap object's
 * header is flipped besides the sample of the rest.  There a flip may also end in
 *   changed   exit 0 with another digest (nothing checksums a version-1 file's values),
 * but still never in a signal or a hang.
 *
 *   corrupt_sweep [-s STRIDE] [-m META_STRIDE] [-k KIND [-o OFFSET]]
 * STRIDE (default 64) samples the data bytes, META_STRIDE the metadata bytes (default: every byte
 * of the manifest, shard and features file, every 8th of the checkpoint, whose ~72,000 metadata
 * bytes would take make check's longest test past 10 minutes on a loaded machine; of the version-1 copies, which no checksum guards, every byte
 * of the global heap headers and every 16th of the rest, every 32nd of the version-1 checkpoint's
 * ~94,000: a full sweep of them doubled make check's longest test; the flipped bit changes from
 * byte to byte); KIND limits the sweep to checkpoint, manifest, shard or features, or one of them
 * with -v1 (the version-1 copy); -o flips the byte at OFFSET of that file and reads it in this
 * process, for a debugger. */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <hdf5.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "analysis/features_io.h"
#include "core/check.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/shards.h"
#include "input/config.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/optim.h"
#include "tests/fixtures/shardset.h"
#include "tests/fixtures/testutil.h"
#include "tests/hostile/h5v1.h"
#include "train/checkpoint.h"

#define CHILD_LIMIT_S 300

/* The files of one sweep: those scdino writes now (version 2), or their version-1 copies. */
struct files {
  char ckpt[4200], ckpt_prev[4200], shard_dir[4200], manifest[4300], shard[4300], feats[4200];
};
static char dir[4096];
static struct files v2, old; /* old: the version-1 copies */
static const struct files *cur = &v2; /* what the readers read */

/* ---- digests ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
#define FNV0 1469598103934665603ull

/* ---- the files ---- */

static struct dino_spec spec(void) {
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){.patch = 4, .in_chans = 2, .dim = 8, .depth = 1, .heads = 2, .mlp_hidden = 16,
                            .pos_grid = 2, .drop_path_rate = 0.1};
  s.head = (struct head_dims){.hidden = 8, .bottleneck = 4, .out_dim = 8, .nlayers = 2, .norm_last_layer = 1};
  return s;
}

static struct config cfg;

static void fill(const struct ops *ops, float *dev, size_t n, uint64_t id) {
  float *h = malloc(n * sizeof(float));
  struct rng r;
  rng_init(&r, 5, RNG_DOMAIN_TEST, id, 0);
  for (size_t i = 0; i < n; i++) h[i] = (float)(0.1 * rng_normal(&r));
  ops->upload(dev, h, n * sizeof(float));
  free(h);
}

/* The model, centre and optimizer of the checkpoints (fresh). */
struct state {
  struct dino_model *m;
  struct dino_loss l;
  struct optim o;
};

static void state_create(const struct ops *ops, const struct dino_spec *s, struct state *st) {
  st->m = dino_model_create(ops, s);
  dino_loss_init(&st->l, ops, s->head.out_dim, 2, 0.04, 0.04, 0, 5, 0.1, 0.9);
  optim_init(&st->o, ops, &st->m->tt);
}

/* checkpoint.prev.h5 (epoch 2) and checkpoint.h5 (epoch 3), of different weights. */
static void write_checkpoints(void) {
  const struct ops *ops = backend_cpu();
  const struct dino_spec s = spec();
  static struct state st0;
  state_create(ops, &s, &st0);
  struct dino_model *m = st0.m;
  struct dino_loss l = st0.l;
  struct optim o = st0.o;
  const int channels[2] = {0, 1};
  struct dataset *ds = dataset_open(v2.shard_dir); /* its statistics and names go into /normalization */
  for (int e = 2; e <= 3; e++) {
    dino_model_init_weights(m, (uint64_t)e);
    fill(ops, m->teacher, m->tt.size, 10 * e + 1);
    fill(ops, o.m, m->tt.size, 10 * e + 2);
    fill(ops, o.v, m->tt.size, 10 * e + 3);
    fill(ops, l.center, (size_t)s.head.out_dim, 10 * e + 4);
    for (int i = 0; i < m->tt.n; i++) o.steps[i] = (m->tt.t[i].flags & TENSOR_GRAD) ? 10 * e + i : 0;
    struct ckpt_state st = {.cfg = &cfg, .model = m, .opt = &o, .loss = &l, .nchannels = 2, .channels = channels,
                            .ds = ds, .epoch = e, .iteration = 0, .niter_per_epoch = 4, .world_size = 1, .n_train = 8,
                            .keep_prev = 1};
    st.metrics = (struct ckpt_metrics){1.5, 4, 2e-4, 0.3, 4, 8, 1.0};
    checkpoint_save(v2.ckpt, &st);
  }
  dataset_close(ds);
}

static int32_t image(void *ctx, int64_t i, void *img, char *rel, size_t reln) {
  (void)ctx;
  uint16_t *p = img;
  for (int k = 0; k < 2 * 8 * 8; k++) p[k] = (uint16_t)(i * 977 + k * 31);
  snprintf(rel, reln, "%s/img_%02lld.tif", i % 2 ? "b" : "a", (long long)i);
  return (int32_t)(i % 2);
}

static void write_shards(void) {
  static const char *const classes[2] = {"a", "b"};
  static const double mean[2] = {0.4, 0.5}, stdv[2] = {0.2, 0.25};
  struct shardset s = {.channels = 2, .height = 8, .width = 8, .dtype = DATASET_U16, .count = 6, .per_shard = 6,
                       .nclasses = 2, .class_names = classes, .mean = mean, .std = stdv, .tiff_dir = "/nowhere",
                       .image = image};
  shardset_write(v2.shard_dir, &s);
}

static void write_features(void) {
  struct features f = {.n = 5, .d = 4, .nclasses = 2, .epoch = 3};
  float x[20];
  int32_t labels[5] = {0, 1, 0, 1, 1};
  int64_t index[5] = {0, 1, 2, 3, 5};
  char *paths[5] = {"a/0.tif", "b/1.tif", "a/2.tif", "b/3.tif", "b/5.tif"};
  char *names[2] = {"a", "b"};
  for (int i = 0; i < 20; i++) x[i] = (float)((i * 7) % 5) - 2.0f + 0.1f * (float)i;
  features_l2_normalize(x, 5, 4);
  f.x = x;
  f.labels = labels;
  f.index = index;
  f.paths = paths;
  f.class_names = names;
  snprintf(f.checkpoint, sizeof f.checkpoint, "run/checkpoint.h5");
  snprintf(f.checkpoint_key, sizeof f.checkpoint_key, "teacher");
  features_write(v2.feats, &f);
}

/* ---- the readers (in the child) ---- */

static void emit(uint64_t h, int fell) {
  printf("digest %016llx fell %d\n", (unsigned long long)h, fell);
  fflush(stdout);
}

static uint64_t dev_digest(uint64_t h, const struct ops *ops, const float *dev, size_t n) {
  float *x = malloc(n * sizeof(float));
  ops->download(x, dev, n * sizeof(float));
  h = fnv(h, x, n * sizeof(float));
  free(x);
  return h;
}

/* What a restart reads: the file picked (with its fall-back), its attributes and the whole state. */
static int read_checkpoint(void *arg) {
  (void)arg;
  char pick[4300];
  const int fell = checkpoint_pick_restart(cur->ckpt, pick, sizeof pick);
  const struct ops *ops = backend_cpu();
  const struct dino_spec s = spec();
  static struct state st0;
  state_create(ops, &s, &st0);
  struct dino_model *m = st0.m;
  struct dino_loss l = st0.l;
  struct optim o = st0.o;
  struct ckpt_info info;
  checkpoint_read_info(pick, &info);
  checkpoint_check_spec(pick, &info, &s, 1);
  struct ckpt_state st = {.cfg = &cfg, .model = m, .opt = &o, .loss = &l};
  checkpoint_restore(pick, &st, &info);
  uint64_t h = FNV0;
  h = dev_digest(h, ops, m->student, m->tt.size);
  h = dev_digest(h, ops, m->teacher, m->tt.size);
  h = dev_digest(h, ops, o.m, m->tt.size);
  h = dev_digest(h, ops, o.v, m->tt.size);
  h = dev_digest(h, ops, l.center, (size_t)s.head.out_dim);
  h = fnv(h, o.steps, (size_t)m->tt.n * sizeof *o.steps);
  h = fnv(h, &st.epoch, sizeof st.epoch);
  h = fnv(h, &st.iteration, sizeof st.iteration);
  h = fnv(h, &st.metrics, sizeof st.metrics);
  h = fnv(h, &info.epoch, sizeof info.epoch);
  h = fnv(h, &info.n_train, sizeof info.n_train);
  h = fnv(h, &info.nnorm, sizeof info.nnorm);
  h = fnv(h, info.norm_mean, (size_t)info.nnorm * sizeof(double));
  h = fnv(h, info.norm_std, (size_t)info.nnorm * sizeof(double));
  for (int c = 0; c < info.nnorm; c++) h = fnv(h, info.channel_names[c], strlen(info.channel_names[c]) + 1);
  emit(h, fell);
  return 0;
}

static uint64_t dataset_digest(struct dataset *ds, int images) {
  uint64_t h = FNV0;
  const int64_t n = dataset_count(ds);
  const int C = dataset_channels(ds);
  int dims[4] = {C, dataset_height(ds), dataset_width(ds), dataset_dtype(ds)};
  h = fnv(h, &n, sizeof n);
  h = fnv(h, dims, sizeof dims);
  h = fnv(h, dataset_labels(ds), (size_t)n * sizeof(int32_t));
  h = fnv(h, dataset_mean(ds), (size_t)C * sizeof(double));
  h = fnv(h, dataset_std(ds), (size_t)C * sizeof(double));
  for (int c = 0; c < dataset_nclasses(ds); c++) h = fnv(h, dataset_class_name(ds, c), strlen(dataset_class_name(ds, c)) + 1);
  for (int c = 0; c < C; c++) h = fnv(h, dataset_channel_name(ds, c), strlen(dataset_channel_name(ds, c)) + 1);
  for (int64_t i = 0; i < n; i++) {
    const int64_t si = dataset_source_index(ds, i);
    h = fnv(h, &si, sizeof si);
  }
  if (images) {
    char *img = malloc(dataset_image_bytes(ds)), rel[4096];
    for (int64_t i = 0; i < n; i++) {
      dataset_read_images(ds, &i, 1, img);
      h = fnv(h, img, dataset_image_bytes(ds));
      dataset_relpath(ds, i, rel, sizeof rel);
      h = fnv(h, rel, strlen(rel) + 1);
    }
    free(img);
  }
  return h;
}

static int read_manifest(void *arg) {
  (void)arg;
  struct dataset *ds = dataset_open(cur->shard_dir);
  emit(dataset_digest(ds, 0), 0);
  return 0;
}

static int read_shard(void *arg) {
  struct dataset *ds = dataset_open(cur->shard_dir);
  dataset_set_direct_io(ds, *(const int *)arg);
  emit(dataset_digest(ds, 1), 0);
  return 0;
}

static int read_features(void *arg) {
  (void)arg;
  struct features f;
  features_read(cur->feats, &f);
  uint64_t h = FNV0;
  h = fnv(h, &f.n, sizeof f.n);
  h = fnv(h, &f.d, sizeof f.d);
  h = fnv(h, f.x, (size_t)f.n * (size_t)f.d * sizeof(float));
  h = fnv(h, f.labels, (size_t)f.n * sizeof(int32_t));
  h = fnv(h, f.index, (size_t)f.n * sizeof(int64_t));
  for (int64_t i = 0; i < f.n; i++) h = fnv(h, f.paths[i], strlen(f.paths[i]) + 1);
  for (int c = 0; c < f.nclasses; c++) h = fnv(h, f.class_names[c], strlen(f.class_names[c]) + 1);
  h = fnv(h, f.checkpoint, strlen(f.checkpoint) + 1);
  h = fnv(h, f.checkpoint_key, strlen(f.checkpoint_key) + 1);
  h = fnv(h, &f.epoch, sizeof f.epoch);
  emit(h, 0);
  return 0;
}

/* ---- running a reader ---- */

struct outcome {
  int status;        /* exit status, -1 for a signal or the time limit */
  uint64_t digest;   /* valid when status is 0 */
  int fell;
  char msg[8192];    /* stdout and stderr */
};

static int child_entry_fn(void *arg);
struct job {
  int (*fn)(void *);
  void *arg;
};

static int child_entry_fn(void *arg) {
  const struct job *j = arg;
  /* A reader that loops forever is ended by the alarm (its default action kills the child). */
  alarm(CHILD_LIMIT_S);
  return j->fn(j->arg);
}

static void run_reader(int (*fn)(void *), void *arg, struct outcome *o) {
  struct job j = {fn, arg};
  o->status = t_run_child(child_entry_fn, &j, 1, o->msg, sizeof o->msg);
  o->digest = 0;
  o->fell = 0;
  const char *d = strstr(o->msg, "digest ");
  unsigned long long v = 0;
  if (o->status == 0 && d && sscanf(d, "digest %llx fell %d", &v, &o->fell) == 2) o->digest = v;
  else if (o->status == 0) o->status = -2; /* ended "well" without a result */
}

/* ---- the byte ranges holding dataset data ---- */

struct ranges {
  haddr_t *lo, *hi; /* [lo, hi) */
  int n, cap;
};

static void ranges_add(struct ranges *r, haddr_t lo, hsize_t size) {
  if (size == 0 || lo == HADDR_UNDEF) return;
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 64;
    r->lo = realloc(r->lo, (size_t)r->cap * sizeof *r->lo);
    r->hi = realloc(r->hi, (size_t)r->cap * sizeof *r->hi);
  }
  r->lo[r->n] = lo;
  r->hi[r->n++] = lo + size;
}

static herr_t visit(hid_t obj, const char *name, const H5O_info_t *info, void *data) {
  if (info->type != H5O_TYPE_DATASET) return 0;
  struct ranges *r = data;
  hid_t d = H5Dopen2(obj, name, H5P_DEFAULT), dcpl = H5Dget_create_plist(d), sp = H5Dget_space(d);
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout == H5D_CONTIGUOUS) {
    ranges_add(r, H5Dget_offset(d), H5Dget_storage_size(d));
  } else if (layout == H5D_CHUNKED) {
    hsize_t nchunks = 0;
    H5Dget_num_chunks(d, sp, &nchunks);
    for (hsize_t i = 0; i < nchunks; i++) {
      hsize_t off[H5S_MAX_RANK], size = 0;
      unsigned mask = 0;
      haddr_t a = HADDR_UNDEF;
      if (H5Dget_chunk_info(d, sp, i, off, &mask, &a, &size) >= 0) ranges_add(r, a, size);
    }
  } /* compact data lies inside the object header: metadata */
  H5Sclose(sp);
  H5Pclose(dcpl);
  H5Dclose(d);
  return 0;
}

/* 0: metadata, 1: data sampled, 2: data skipped. */
static int byte_kind(const struct ranges *r, haddr_t a, int stride) {
  for (int i = 0; i < r->n; i++)
    if (a >= r->lo[i] && a < r->hi[i])
      return a == r->lo[i] || a + 1 == r->hi[i] || (a - r->lo[i]) % (haddr_t)stride == 0 ? 1 : 2;
  return 0;
}

/* ---- the global heap collections of a version-1 file ---- */

/* The bytes of the file's global heap collections that describe them (each collection's header:
 * "GCOL", version 1, 3 reserved bytes, its size in 8 bytes; each object's: index, reference
 * count, reserved, size), which HDF5 follows without checks; the unflipped file is intact, so every
 * such header is one.  The objects' bytes (the strings) are metadata like any other. */
static void gcol_ranges(const char *path, struct ranges *g) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return;
  fseek(fp, 0, SEEK_END);
  const long size = ftell(fp);
  rewind(fp);
  unsigned char *b = malloc((size_t)size + 1);
  if (fread(b, 1, (size_t)size, fp) == (size_t)size)
    for (long off = 0; off + 16 <= size; off++) {
      if (memcmp(b + off, "GCOL\1\0\0\0", 8) != 0) continue;
      uint64_t len = 0, p = 16;
      for (int k = 7; k >= 0; k--) len = len << 8 | b[off + 8 + k];
      if (len < 16 || len > (uint64_t)(size - off)) continue;
      ranges_add(g, (haddr_t)off, 16);
      while (p + 16 <= len) { /* index 0, the free space, ends the collection */
        uint64_t osize = 0;
        for (int k = 7; k >= 0; k--) osize = osize << 8 | b[off + p + 8 + k];
        ranges_add(g, (haddr_t)(off + p), 16);
        if (b[off + p] == 0 && b[off + p + 1] == 0) break;
        p += 16 + (osize + 7) / 8 * 8;
      }
    }
  free(b);
  fclose(fp);
}

/* ---- the sweep of one file ---- */

static int failures;

static int flip(const char *path, long off, int bit) {
  int fd = open(path, O_RDWR);
  if (fd < 0) return -1;
  unsigned char b;
  int ok = pread(fd, &b, 1, off) == 1;
  b ^= (unsigned char)(1u << bit);
  ok = ok && pwrite(fd, &b, 1, off) == 1;
  close(fd);
  return ok ? 0 : -1;
}

/* The counts of one sweep. */
struct tally {
  long same, fell, refused, changed, meta, heap, data, bad;
};

/* Classify one flip's outcome o against the intact file's (base) and the fall-back's; 0 when it
 * is allowed.  A version-1 file (v1) has no checksum: a flip may change what is read. */
static int judge(const struct outcome *o, const struct outcome *base, const struct outcome *fallback,
                 const char *path, int version1, struct tally *t) {
  if (o->status == 0 && o->digest == base->digest && !o->fell) t->same++;
  else if (o->status == 0 && fallback && o->fell && o->digest == fallback->digest && strstr(o->msg, path)) t->fell++;
  else if (o->status == SCD_EXIT_DATA && strstr(o->msg, path)) t->refused++;
  else if (version1 && o->status == 0) t->changed++;
  else return -1;
  return 0;
}

static void sweep(const char *label, const char *path, int (*fn)(void *), void *arg, const struct outcome *fallback,
                  int stride, int meta_stride, int version1) {
  struct ranges r = {0}, g = {0};
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0 || H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, visit, &r) < 0) {
    fprintf(stderr, "FAIL %s: cannot list the datasets of %s\n", label, path);
    failures++;
    return;
  }
  H5Fclose(f);
  gcol_ranges(path, &g);
  if (version1 && g.n == 0) {
    fprintf(stderr, "FAIL %s: %s has no global heap collection\n", label, path);
    failures++;
  }
  struct outcome base, o;
  run_reader(fn, arg, &base);
  if (base.status != 0) {
    fprintf(stderr, "FAIL %s: the intact file does not read (status %d): %s\n", label, base.status, base.msg);
    failures++;
    return;
  }
  struct stat st;
  stat(path, &st);
  struct tally t = {0};
  long mcount = 0;
  for (long off = 0; off < (long)st.st_size; off++) {
    const int kind = byte_kind(&r, (haddr_t)off, stride), heap = byte_kind(&g, (haddr_t)off, 1) != 0;
    if (kind == 2) continue;
    /* Every byte of a global heap header; a sample of the rest of the metadata. */
    if (kind == 0 && !heap && (mcount++ % meta_stride) != 0) continue;
    const int bit = (int)((off * 5 + 3) % 8);
    if (flip(path, off, bit) != 0) {
      fprintf(stderr, "FAIL %s: cannot flip byte %ld\n", label, off);
      failures++;
      return;
    }
    run_reader(fn, arg, &o);
    flip(path, off, bit); /* restore */
    kind == 0 ? (heap ? t.heap++ : t.meta++) : t.data++;
    if (judge(&o, &base, fallback, path, version1, &t) != 0 && ++t.bad <= 10)
      fprintf(stderr, "FAIL %s: byte %ld bit %d (%s): status %d%s\n%s\n", label, off, bit,
              kind ? "data" : heap ? "global heap" : "metadata", o.status,
              o.status == 0 ? (o.digest != base.digest ? ", another result" : ", fell back wrongly") : "", o.msg);
  }
  printf("%-13s %8lld bytes: %6ld metadata + %4ld global heap header + %5ld data flips: %6ld same, %5ld fell back, "
         "%6ld refused (exit 3), %ld changed, %ld other\n",
         label, (long long)st.st_size, t.meta, t.heap, t.data, t.same, t.fell, t.refused, t.changed, t.bad);
  fflush(stdout);
  failures += t.bad > 0;
  free(r.lo);
  free(r.hi);
  free(g.lo);
  free(g.hi);
}

/* The paths of one set of files under root. */
static void files_init(struct files *f, const char *root) {
  fs_mkdir_p(root);
  fs_join(f->ckpt, sizeof f->ckpt, root, "checkpoint.h5");
  checkpoint_prev_path(f->ckpt, f->ckpt_prev, sizeof f->ckpt_prev);
  fs_join(f->shard_dir, sizeof f->shard_dir, root, "shards");
  fs_mkdir_p(f->shard_dir);
  fs_join(f->manifest, sizeof f->manifest, f->shard_dir, SHARDS_MANIFEST);
  fs_join(f->shard, sizeof f->shard, f->shard_dir, "shard-00000.h5");
  fs_join(f->feats, sizeof f->feats, root, "features_0003.h5");
}

/* Version-1 copies of every file (h5v1.h). */
static int write_v1(void) {
  const char *from[5] = {v2.ckpt, v2.ckpt_prev, v2.manifest, v2.shard, v2.feats};
  const char *to[5] = {old.ckpt, old.ckpt_prev, old.manifest, old.shard, old.feats};
  for (int i = 0; i < 5; i++)
    if (h5v1_copy(from[i], to[i]) != 0) return -1;
  return 0;
}

static const char *const kinds[] = {"checkpoint", "manifest", "shard", "features", "checkpoint-v1", "manifest-v1",
                                    "shard-v1", "features-v1"};

/* Sweep one kind (kinds[k]) of file set fs. */
static void sweep_kind(int k, const struct files *fs, int stride, int meta_stride) {
  cur = fs;
  const int v1 = fs == &old, what = k % 4;
  static int direct = 1, hdf5 = 0;
  if (what == 0) {
    /* The digest a fall-back must give: that of checkpoint.prev.h5 read alone. */
    char moved[4400];
    snprintf(moved, sizeof moved, "%s.away", fs->ckpt);
    struct outcome prev;
    rename(fs->ckpt, moved);
    run_reader(read_checkpoint, NULL, &prev);
    rename(moved, fs->ckpt);
    if (prev.status != 0 || !prev.fell) {
      fprintf(stderr, "FAIL %s: checkpoint.prev.h5 alone does not read: %s\n", kinds[k], prev.msg);
      failures++;
    } else {
      sweep(kinds[k], fs->ckpt, read_checkpoint, NULL, &prev, stride, meta_stride ? meta_stride : v1 ? 32 : 8, v1);
    }
    return;
  }
  if (!meta_stride) meta_stride = v1 ? 16 : 1;
  if (what == 1) sweep(kinds[k], fs->manifest, read_manifest, NULL, NULL, stride, meta_stride, v1);
  if (what == 2) {
    sweep(kinds[k], fs->shard, read_shard, &direct, NULL, stride, meta_stride, v1);
    sweep(v1 ? "shard-h5-v1" : "shard-h5", fs->shard, read_shard, &hdf5, NULL, stride, meta_stride, v1);
  }
  if (what == 3) sweep(kinds[k], fs->feats, read_features, NULL, NULL, stride, meta_stride, v1);
}

int main(int argc, char **argv) {
  int stride = 64, meta_stride = 0, opt, only = -1;
  long one = -1;
  while ((opt = getopt(argc, argv, "s:m:k:o:")) != -1) {
    if (opt == 'o') {
      one = atol(optarg);
    } else if (opt == 's') {
      stride = atoi(optarg);
    } else if (opt == 'm') {
      meta_stride = atoi(optarg);
    } else if (opt == 'k') {
      for (int k = 0; k < 8; k++)
        if (!strcmp(optarg, kinds[k])) only = k;
      if (only < 0) {
        fprintf(stderr, "corrupt_sweep: unknown kind '%s'\n", optarg);
        return 2;
      }
    } else {
      fprintf(stderr, "usage: corrupt_sweep [-s STRIDE] [-m META_STRIDE] [-k KIND [-o OFFSET]]; KIND: checkpoint, "
              "manifest, shard, features, or one of them with -v1\n");
      return 2;
    }
  }
  if (stride < 1 || meta_stride < 0) return 2;
  t_init(1, argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  log_init(0, 0);
  config_defaults(&cfg);
  snprintf(cfg.model.arch, sizeof cfg.model.arch, "custom");
  cfg.training.epochs = 5;
  snprintf(dir, sizeof dir, "%s", t_scratch_dir("corrupt_sweep"));
  char root[4200];
  fs_join(root, sizeof root, dir, "v1");
  files_init(&old, root);
  files_init(&v2, dir);
  write_shards();
  write_checkpoints();
  write_features();
  if (write_v1() != 0) {
    fprintf(stderr, "FAIL cannot write the version-1 copies\n");
    return 1;
  }

  if (one >= 0 && only >= 0) {
    /* One flip, read in this process (for a debugger): -k KIND -o OFFSET. */
    cur = only >= 4 ? &old : &v2;
    const int what = only % 4;
    const char *path = what == 0 ? cur->ckpt : what == 1 ? cur->manifest : what == 3 ? cur->feats : cur->shard;
    flip(path, one, (int)((one * 5 + 3) % 8));
    int direct = 1;
    return what == 0 ? read_checkpoint(NULL) : what == 1 ? read_manifest(NULL)
         : what == 3 ? read_features(NULL) : read_shard(&direct);
  }
  for (int k = 0; k < 8; k++)
    if (only < 0 || only == k) sweep_kind(k, k >= 4 ? &old : &v2, stride, meta_stride);
  printf("%s\n", failures ? "corrupt_sweep: FAILED"
                          : "corrupt_sweep: every flip read the same, fell back or was refused (or, in a version-1 "
                            "file, which has no checksum, changed what was read)");
  return failures ? 1 : 0;
}
