/* stage.c - the shard set copied to node-local disk by one rank per node (stage.h). */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/watchdog.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/progress.h"
#include "data/shards.h"
#include "data/stage.h"

/* What local rank 0 tells its node: 0 staged, 1 fall back to shard_dir. */
struct stage_result {
  int fallback;
  char why[2 * PATH_MAX + 512];
};

/* Copy src to dst's temporary name, hashing on the way; 0, or -1 with why (errno named). */
static int copy_file(const char *src, const char *tmp, uint64_t *sum, long long *bytes, char *why, size_t n) {
  const int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    snprintf(why, n, "cannot read %s: %s", src, strerror(errno));
    return -1;
  }
  const int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    snprintf(why, n, "cannot create %s: errno %d: %s", tmp, errno, strerror(errno));
    close(in);
    return -1;
  }
  const size_t cap = (size_t)1 << 22;
  unsigned char *buf = xmalloc(cap);
  uint64_t h = HASH_FNV1A_INIT;
  long long done = 0;
  int rc = 0;
  for (;;) {
    const ssize_t r = read(in, buf, cap);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      snprintf(why, n, "cannot read %s: %s", src, strerror(errno));
      rc = -1;
      break;
    }
    if (r == 0) break;
    for (ssize_t off = 0; off < r;) {
      const ssize_t w = write(out, buf + off, (size_t)(r - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int e = w < 0 ? errno : ENOSPC;
        snprintf(why, n, "cannot write %s: errno %d: %s (after %lld bytes) - disk full or quota?", tmp, e,
                 strerror(e), done + off);
        rc = -1;
        break;
      }
      off += w;
    }
    if (rc) break;
    h = hash_fnv1a(h, buf, (size_t)r);
    done += r;
  }
  if (!rc && fsync(out) != 0 && errno != EINVAL) {
    snprintf(why, n, "cannot write %s: errno %d: %s", tmp, errno, strerror(errno));
    rc = -1;
  }
  if (close(out) != 0 && !rc) {
    snprintf(why, n, "cannot write %s: errno %d: %s", tmp, errno, strerror(errno));
    rc = -1;
  }
  close(in);
  free(buf);
  *sum = h;
  *bytes = done;
  return rc;
}

/* Whether path holds the shard the record describes (its size `want` only, without checks). */
static int intact(const char *path, const struct shard_list *l, int64_t k, long long want) {
  if (!fs_exists(path)) return 0;
  if (!l->has_checks) return fs_file_size(path) == want;
  uint64_t h;
  long long b;
  return fs_file_fnv1a(path, &h, &b) == 0 && b == l->bytes[k] && h == l->fnv1a[k];
}

/* The manifest last: the copy's description of itself.  A copy with the same bytes (size and
 * FNV-1a) is kept as it is, so that a stage_dir whose copies all verify is used without writing
 * anything there (it may be read-only).  0, or -1 with why. */
static int stage_manifest(const char *src, const char *dst, char *why, size_t n) {
  char from[PATH_MAX], to[PATH_MAX], tmp[PATH_MAX + 64];
  fs_join(from, sizeof from, src, SHARDS_MANIFEST);
  fs_join(to, sizeof to, dst, SHARDS_MANIFEST);
  uint64_t h, h2;
  long long b, b2;
  if (fs_exists(to) && fs_file_fnv1a(from, &h, &b) == 0 && fs_file_fnv1a(to, &h2, &b2) == 0 && b == b2 && h == h2)
    return 0;
  fs_atomic_begin(to, tmp, sizeof tmp);
  if (copy_file(from, tmp, &h, &b, why, n) != 0) {
    fs_atomic_abort(tmp);
    return -1;
  }
  fs_atomic_commit(tmp, to);
  return 0;
}

/* Local rank 0: make stage_dir a verified copy; 0, or -1 with why. */
static int stage_node(const struct config *cfg, char *why, size_t n) {
  const char *src = cfg->data.shard_dir, *dst = cfg->data.stage_dir;
  struct shard_list l;
  manifest_shard_list(src, &l);
  if (!l.has_checks)
    log_warn("stage: %s/%s records no shard checksums (made by an older scdino): staged copies are checked by "
             "size only; run prepare again to record them", src, SHARDS_MANIFEST);
  fs_mkdir_p(dst);
  const double t0 = wtime();
  long long copied_bytes = 0, total_bytes = 0;
  int64_t copied = 0, reused = 0;
  int rc = 0;
  struct progress prog;
  progress_start(&prog, "stage", "shards", l.n, l.n, cfg->control.progress_seconds);
  for (int64_t k = 0; k < l.n && !rc; k++) {
    char from[PATH_MAX], to[PATH_MAX], tmp[PATH_MAX + 64];
    fs_join(from, sizeof from, src, l.files[k]);
    fs_join(to, sizeof to, dst, l.files[k]);
    const long long want = l.has_checks ? l.bytes[k] : fs_file_size(from);
    total_bytes += want > 0 ? want : 0;
    if (intact(to, &l, k, want)) {
      reused++;
      progress_update(&prog, k + 1, (double)total_bytes);
      continue;
    }
    if (fs_exists(to))
      log_warn("stage: %s does not match %s's record (unfinished, damaged or of another set): copying it again", to,
               SHARDS_MANIFEST);
    fs_atomic_begin(to, tmp, sizeof tmp);
    uint64_t h;
    long long b;
    if (copy_file(from, tmp, &h, &b, why, n) != 0) {
      rc = -1;
    } else if (b != want || (l.has_checks && h != l.fnv1a[k])) {
      snprintf(why, n, "the copy of %s has %lld bytes and FNV-1a %016llx, the manifest records %lld and %016llx: "
               "the source changed or a disk returned other bytes", from, b, (unsigned long long)h, want,
               (unsigned long long)(l.has_checks ? l.fnv1a[k] : 0));
      rc = -1;
    }
    if (rc) {
      fs_atomic_abort(tmp);
      break;
    }
    fs_atomic_commit(tmp, to);
    copied++;
    copied_bytes += b;
    progress_update(&prog, k + 1, (double)total_bytes);
  }
  if (!rc) rc = stage_manifest(src, dst, why, n);
  progress_end(&prog);
  const double dt = wtime() - t0;
  if (!rc)
    log_info("stage: %s -> %s: %lld shard(s), %.1f MiB: %lld copied (%.1f MiB at %.0f MiB/s), %lld reused", src, dst,
             (long long)l.n, (double)total_bytes / 1048576.0, (long long)copied, (double)copied_bytes / 1048576.0,
             dt > 0 ? (double)copied_bytes / 1048576.0 / dt : 0.0, (long long)reused);
  shard_list_free(&l);
  return rc;
}

void stage_shards(const struct config *cfg, char *dir, size_t n) {
  struct stage_result r;
  memset(&r, 0, sizeof r);
  /* The node's other ranks wait for local rank 0's copy, which may outlast step_timeout: the ring
   * lets them tell a long copy from a stopped rank (watchdog.h). */
  heartbeat_begin(HEARTBEAT_NODE, cfg->system.step_timeout);
  if (comm_get()->local_rank == 0 && stage_node(cfg, r.why, sizeof r.why) != 0) {
    if (!cfg->data.stage_fallback)
      scd_fatal(SCD_EXIT_FAILURE, "&data stage_dir = '%s': %s.  The copy was removed; free space there, or set "
                "&data stage_fallback = .true. to read shard_dir instead", cfg->data.stage_dir, r.why);
    r.fallback = 1;
    log_rank("warning: &data stage_dir = '%s': %s; this node reads %s instead (stage_fallback)", cfg->data.stage_dir,
             r.why, cfg->data.shard_dir);
  }
  comm_node_bcast(&r, sizeof r, "waiting for this node's copy of the shards"); /* the other ranks wait here */
  heartbeat_end(HEARTBEAT_NODE);
  snprintf(dir, n, "%s", r.fallback ? cfg->data.shard_dir : cfg->data.stage_dir);
}
