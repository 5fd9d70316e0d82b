/* tests/unit/train/test_checkpoint_files.c - checkpoint_files.c: the .prev name, installing a new checkpoint
 * while keeping the old one (never a moment without checkpoint.h5), the readability probe on good,
 * truncated and non-HDF5 files, and the removal of temporary files that killed runs left behind. */
#include "build_config.h"

#include <hdf5.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "tests/fixtures/testutil.h"
#include "train/checkpoint.h"

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    perror(path);
    exit(99);
  }
}

static int file_is(const char *path, const char *text) {
  char buf[256] = "";
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return !strcmp(buf, text);
}

/* An HDF5 file with one 64 x 64 float dataset (16 KiB of data). */
static void write_h5(const char *path) {
  static float v[64 * 64];
  for (int i = 0; i < 64 * 64; i++) v[i] = (float)i;
  hsize_t dims[2] = {64, 64};
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t sp = H5Screate_simple(2, dims, NULL);
  hid_t g = H5Gcreate2(f, "student", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t d = H5Dcreate2(g, "w", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Dclose(d);
  H5Gclose(g);
  H5Sclose(sp);
  H5Fclose(f);
}

static void truncate_copy(const char *from, const char *to, long bytes) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  if (!a || !b) exit(99);
  for (long i = 0; i < bytes; i++) {
    int c = fgetc(a);
    if (c == EOF) break;
    fputc(c, b);
  }
  fclose(a);
  fclose(b);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  const char *dir = t_scratch_dir("test_checkpoint_files");
  char path[PATH_MAX], prev[PATH_MAX], tmp[PATH_MAX], why[512];

  checkpoint_prev_path("run/checkpoint.h5", prev, sizeof prev);
  T_CHECK(!strcmp(prev, "run/checkpoint.prev.h5"), "prev of run/checkpoint.h5 is %s", prev);
  checkpoint_prev_path("ckpt", prev, sizeof prev);
  T_CHECK(!strcmp(prev, "ckpt.prev"), "prev of ckpt is %s", prev);

  /* Install three versions: the newest is the file, the one before is .prev, no temporary left. */
  fs_join(path, sizeof path, dir, "checkpoint.h5");
  checkpoint_prev_path(path, prev, sizeof prev);
  const char *version[3] = {"one", "two", "three"};
  for (int i = 0; i < 3; i++) {
    fs_atomic_begin(path, tmp, sizeof tmp);
    write_text(tmp, version[i]);
    checkpoint_install(tmp, path, 1);
    T_CHECK(file_is(path, version[i]), "after install %d the checkpoint does not hold '%s'", i, version[i]);
    T_CHECK(i == 0 ? access(prev, F_OK) != 0 : file_is(prev, version[i - 1]),
            "after install %d the previous checkpoint is wrong", i);
    T_CHECK(access(tmp, F_OK) != 0, "temporary %s left behind", tmp);
  }
  /* The old file stays under its name until the new one replaces it (a hard link, not a move). */
  struct stat sp, sq;
  T_CHECK(stat(path, &sp) == 0 && stat(prev, &sq) == 0 && sp.st_ino != sq.st_ino, "file and .prev are distinct");
  /* keep_prev = 0 (after a fall-back): .prev is left alone. */
  fs_atomic_begin(path, tmp, sizeof tmp);
  write_text(tmp, "four");
  checkpoint_install(tmp, path, 0);
  T_CHECK(file_is(path, "four") && file_is(prev, "two"), "keep_prev = 0 changed the previous checkpoint");

  /* Probe. */
  char h5[PATH_MAX], cut[PATH_MAX], txt[PATH_MAX];
  fs_join(h5, sizeof h5, dir, "good.h5");
  fs_join(cut, sizeof cut, dir, "cut.h5");
  fs_join(txt, sizeof txt, dir, "text.h5");
  write_h5(h5);
  T_CHECK(checkpoint_probe(h5, why, sizeof why) == 0, "a good file probes as bad: %s", why);
  truncate_copy(h5, cut, fs_file_size(h5) - 4096);
  T_CHECK(checkpoint_probe(cut, why, sizeof why) == 1, "a truncated file probes as good");
  T_CHECK(strstr(why, "truncated") != NULL, "truncated file: reason '%s'", why);
  write_text(txt, "not hdf5");
  T_CHECK(checkpoint_probe(txt, why, sizeof why) == 1 && strstr(why, "not a readable HDF5 file"),
          "text file: reason '%s'", why);
  fs_join(cut, sizeof cut, dir, "missing.h5");
  T_CHECK(checkpoint_probe(cut, why, sizeof why) == 1 && !strcmp(why, "no such file"), "missing: '%s'", why);

  /* Leftovers of killed runs: checkpoints' and log.txt's temporaries only, never our own. */
  const char *stale[] = {"checkpoint.h5.tmp.99999991", "checkpoint_0003.h5.tmp.12", "checkpoint.prev.h5.tmp.7",
                         "log.txt.tmp.5"};
  char keep_own[64];
  snprintf(keep_own, sizeof keep_own, "checkpoint.h5.tmp.%ld", (long)getpid());
  const char *kept[] = {"features_0001.h5.tmp.3", "checkpoint.h5.tmp.12x", "checkpoint.h5.tmp.", keep_own,
                        "notes.txt.tmp.4"};
  for (size_t i = 0; i < sizeof stale / sizeof *stale; i++) {
    fs_join(tmp, sizeof tmp, dir, stale[i]);
    write_text(tmp, "x");
  }
  for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
    fs_join(tmp, sizeof tmp, dir, kept[i]);
    write_text(tmp, "x");
  }
  checkpoint_remove_stale(dir);
  for (size_t i = 0; i < sizeof stale / sizeof *stale; i++) {
    fs_join(tmp, sizeof tmp, dir, stale[i]);
    T_CHECK(access(tmp, F_OK) != 0, "%s was not removed", stale[i]);
  }
  for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
    fs_join(tmp, sizeof tmp, dir, kept[i]);
    T_CHECK(access(tmp, F_OK) == 0, "%s was removed", kept[i]);
  }
  T_CHECK(file_is(path, "four"), "remove_stale touched the checkpoint");
  return t_finish();
}
