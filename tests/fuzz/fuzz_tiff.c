/* tests/fuzz/fuzz_tiff.c - libFuzzer harness for the TIFF reader (tiff_probe + tiff_read).
 *
 * Each input is a TIFF file's bytes, handed to the reader as an in-memory file (memfd) under its
 * /proc/self/fd path, as prepare hands it a path.  Checked besides "no crash": a successful read
 * agrees with the probe, and every byte of the returned [C][H][W] array can be read (ASan catches
 * a buffer shorter than the shape says). */
#include "build_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/tiff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz.tif", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, data + done, size - done);
    if (w <= 0) {
      close(fd);
      return 0;
    }
    done += (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  char err[512];
  struct tiff_info probe, info;
  int probed = tiff_probe(path, &probe, err, sizeof err);
  void *px = NULL;
  int rc = tiff_read(path, &info, &px, err, sizeof err);
  if (rc == 0) {
    if (probed != 0 || probe.channels != info.channels || probe.height != info.height ||
        probe.width != info.width || probe.sample != info.sample || probe.layout != info.layout) {
      fprintf(stderr, "tiff_read and tiff_probe disagree\n");
      abort();
    }
    if (info.channels < 1 || info.height < 1 || info.width < 1 || tiff_sample_size(info.sample) == 0) abort();
    size_t n = (size_t)info.channels * (size_t)info.height * (size_t)info.width * tiff_sample_size(info.sample);
    volatile unsigned char sum = 0;
    for (size_t i = 0; i < n; i++) sum ^= ((const unsigned char *)px)[i];
    (void)sum;
  } else if (px != NULL || err[0] == '\0') {
    fprintf(stderr, "tiff_read failed without a message or left data allocated\n");
    abort();
  }
  free(px);
  close(fd);
  return 0;
}
