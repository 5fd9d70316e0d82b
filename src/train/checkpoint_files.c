/* checkpoint_files.c - durable checkpoint files: the previous checkpoint kept, a readability probe,
 * the restart file chosen with a fall-back, and temporary files of killed runs removed. */
#include "build_config.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/h5util.h"
#include "core/log.h"
#include "train/checkpoint.h"

void checkpoint_prev_path(const char *path, char *out, size_t n) {
  const size_t len = strlen(path);
  int w;
  if (len >= 3 && !strcmp(path + len - 3, ".h5"))
    w = snprintf(out, n, "%.*s.prev.h5", (int)(len - 3), path);
  else
    w = snprintf(out, n, "%s.prev", path);
  if (w < 0 || (size_t)w >= n) scd_fatal(SCD_EXIT_INPUT, "path too long: %s", path);
}

void checkpoint_install(const char *tmp, const char *path, int keep_prev) {
  if (keep_prev && fs_exists(path)) {
    char prev[PATH_MAX], ptmp[PATH_MAX];
    checkpoint_prev_path(path, prev, sizeof prev);
    /* A second name for the old file, then renamed over the old .prev: path exists throughout. */
    fs_atomic_begin(prev, ptmp, sizeof ptmp);
    unlink(ptmp);
    if (link(path, ptmp) == 0) {
      if (rename(ptmp, prev) != 0)
        scd_fatal(SCD_EXIT_FAILURE, "cannot rename %s to %s: %s", ptmp, prev, strerror(errno));
      scd_tmpfile_unregister(ptmp);
    } else if (errno == EPERM || errno == ENOTSUP || errno == EOPNOTSUPP || errno == EMLINK ||
               errno == ENOSYS) {
      /* No hard links here: for a moment only the .prev file exists, which a restart accepts. */
      scd_tmpfile_unregister(ptmp);
      if (rename(path, prev) != 0)
        scd_fatal(SCD_EXIT_FAILURE, "cannot rename %s to %s: %s", path, prev, strerror(errno));
    } else {
      scd_fatal(SCD_EXIT_FAILURE, "cannot link %s to %s (to keep the previous checkpoint): %s", path, ptmp,
                strerror(errno));
    }
  }
  fs_atomic_commit(tmp, path);
}

/* ---- probe ------------------------------------------------------------------------------------- */

struct probe {
  char *why;
  size_t n;
  int bad;
  long ndatasets;
};

/* Read one dataset back in full (integer and floating-point data; checkpoints hold nothing else). */
static void probe_dataset(hid_t d, const char *name, struct probe *p) {
  hid_t ft = H5Dget_type(d), sp = H5Dget_space(d);
  if (ft < 0 || sp < 0) {
    snprintf(p->why, p->n, "cannot read the type or shape of %s", name);
    p->bad = 1;
  } else {
    const H5T_class_t cls = H5Tget_class(ft);
    const hssize_t np = H5Sget_simple_extent_npoints(sp);
    if (np < 0) {
      snprintf(p->why, p->n, "cannot read the shape of %s", name);
      p->bad = 1;
    } else if ((cls == H5T_FLOAT || cls == H5T_INTEGER) && np > 0) {
      hid_t mt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
      const size_t es = mt >= 0 ? H5Tget_size(mt) : 0;
      void *buf = es && (size_t)np <= SIZE_MAX / es ? malloc((size_t)np * es) : NULL;
      /* Too big to hold is not a sign of damage: such a dataset is left to the real read. */
      if (buf && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        snprintf(p->why, p->n, "cannot read %s (truncated or damaged file)", name);
        p->bad = 1;
      }
      free(buf);
      if (mt >= 0) H5Tclose(mt);
    }
  }
  if (ft >= 0) H5Tclose(ft);
  if (sp >= 0) H5Sclose(sp);
  p->ndatasets++;
}

static herr_t probe_link(hid_t g, const char *name, const H5L_info_t *li, void *data) {
  struct probe *p = data;
  if (li->type != H5L_TYPE_HARD) return 0;
  hid_t o = H5Oopen(g, name, H5P_DEFAULT);
  if (o < 0) {
    snprintf(p->why, p->n, "cannot open object %s", name);
    p->bad = 1;
    return 1;
  }
  if (H5Iget_type(o) == H5I_DATASET) probe_dataset(o, name, p);
  H5Oclose(o);
  return p->bad ? 1 : 0;
}

int checkpoint_probe(const char *path, char *why, size_t n) {
  hid_t fid;
  if (h5util_file_open(path, &fid) != H5UTIL_OK) {
    snprintf(why, n, "%s", h5util_why());
    return 1;
  }
  struct probe p = {why, n, 0, 0};
  if (H5Lvisit(fid, H5_INDEX_NAME, H5_ITER_INC, probe_link, &p) < 0 && !p.bad) {
    snprintf(why, n, "cannot list its contents (damaged file?)");
    p.bad = 1;
  }
  if (!p.bad && p.ndatasets == 0) {
    snprintf(why, n, "holds no datasets");
    p.bad = 1;
  }
  if (H5Fclose(fid) < 0 && !p.bad) {
    snprintf(why, n, "cannot close it (damaged file?)");
    p.bad = 1;
  }
  return p.bad;
}

/* ---- restart ----------------------------------------------------------------------------------- */

static int pick_rank0(const char *path, char *out, size_t n) {
  char prev[PATH_MAX], why[512], pwhy[512];
  checkpoint_prev_path(path, prev, sizeof prev);
  const int have = fs_exists(path), have_prev = fs_exists(prev);
  out[0] = '\0';
  if (!have && !have_prev) return 0;
  h5util_lock(); /* the loader threads may be using HDF5 */
  const int bad = have ? checkpoint_probe(path, why, sizeof why) : 1;
  const int bad_prev = bad && have_prev ? checkpoint_probe(prev, pwhy, sizeof pwhy) : 1;
  h5util_unlock();
  if (!bad) {
    snprintf(out, n, "%s", path);
    return 0;
  }
  if (!bad_prev) {
    if (have)
      log_warn("restart: %s is unreadable (%s); continuing from the previous checkpoint %s instead", path, why,
               prev);
    else
      log_warn("restart: %s is missing but the previous checkpoint %s is there (a run ended between keeping "
               "it and renaming the new one in); continuing from %s", path, prev, prev);
    snprintf(out, n, "%s", prev);
    return 1;
  }
  if (have_prev) log_warn("restart: the previous checkpoint %s is unreadable too (%s)", prev, pwhy);
  /* Reading the file reports the damage and ends the run: never a silent fresh start. */
  snprintf(out, n, "%s", have ? path : prev);
  return 0;
}

int checkpoint_pick_restart(const char *path, char *out, size_t n) {
  int fell = 0;
  if (comm_rank() == 0) fell = pick_rank0(path, out, n);
  comm_bcast(&fell, sizeof fell, 0);
  comm_bcast(out, n, 0);
  return fell;
}

/* ---- leftovers of killed runs ------------------------------------------------------------------ */

/* NAME.tmp.DIGITS where NAME is a checkpoint (checkpoint*.h5) or log.txt. */
static int stale_name(const char *name) {
  const char *t = strstr(name, ".tmp.");
  if (!t || !t[5]) return 0;
  for (const char *p = t + 5; *p; p++)
    if (*p < '0' || *p > '9') return 0;
  if (strtol(t + 5, NULL, 10) == (long)getpid()) return 0; /* ours, in progress */
  const size_t base = (size_t)(t - name);
  if (base == 7 && !strncmp(name, "log.txt", 7)) return 1;
  return !strncmp(name, "checkpoint", 10) && base >= 13 && !strncmp(name + base - 3, ".h5", 3);
}

void checkpoint_remove_stale(const char *run_dir) {
  DIR *d = opendir(run_dir);
  if (!d) return; /* a new run_dir */
  struct dirent *e;
  char path[PATH_MAX];
  while ((e = readdir(d)) != NULL) {
    if (!stale_name(e->d_name)) continue;
    fs_join(path, sizeof path, run_dir, e->d_name);
    if (unlink(path) == 0)
      log_warn("removed %s, an unfinished file of an earlier run that was killed while writing it", path);
    else
      log_warn("cannot remove %s (an unfinished file of an earlier run): %s", path, strerror(errno));
  }
  closedir(d);
}
