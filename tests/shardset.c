/* tests/shardset.c - write a synthetic shard set (shard files + manifest.h5) for tests and benchmarks. */
#include "build_config.h"

#include "shardset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shards.h"

void shardset_write(const char *dir, const struct shardset *s) {
  const int C = s->channels;
  const int64_t n = s->count, per = s->per_shard, nshards = (n + per - 1) / per;
  void *img = xmalloc((size_t)C * s->height * s->width * dataset_dtype_size(s->dtype));
  char **files = xcalloc((size_t)nshards, sizeof *files);
  int64_t *counts = xcalloc((size_t)nshards, sizeof *counts);
  int32_t *labels = xcalloc((size_t)n, sizeof *labels);
  for (int64_t k = 0; k < nshards; k++) {
    char name[64], path[4096];
    snprintf(name, sizeof name, "shard-%05lld.h5", (long long)k);
    files[k] = xstrdup(name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const int64_t first = k * per, last = first + per < n ? first + per : n;
    struct shard_writer *w = shard_writer_create(path, C, s->height, s->width, s->dtype, last - first);
    for (int64_t i = first; i < last; i++) {
      char rel[256];
      labels[i] = s->image(s->ctx, i, img, rel, sizeof rel);
      shard_writer_add(w, img, labels[i], i, rel);
    }
    counts[k] = last - first;
    shard_writer_close(w);
  }
  /* Default channel names, owned here. */
  char **chn = NULL;
  if (!s->channel_names) {
    chn = xcalloc((size_t)C, sizeof *chn);
    for (int c = 0; c < C; c++) {
      char nm[16];
      snprintf(nm, sizeof nm, "ch%d", c);
      chn[c] = xstrdup(nm);
    }
  }
  struct manifest_info m;
  memset(&m, 0, sizeof m);
  m.channels = C;
  m.height = s->height;
  m.width = s->width;
  m.dtype = s->dtype;
  m.count = n;
  m.source_count = n;
  m.nclasses = s->nclasses;
  m.class_names = s->class_names;
  m.channel_names = chn ? (const char *const *)chn : s->channel_names;
  m.nshards = (int)nshards;
  m.shard_files = (const char *const *)files;
  m.shard_counts = counts;
  m.labels = labels;
  m.mean = s->mean;
  m.std = s->std;
  m.stats_images = s->stats_images > 0 ? s->stats_images : n;
  m.tiff_dir = s->tiff_dir;
  m.stats_fraction = 0.2;
  m.stats_seed = 42;
  m.source_dtype = "uint16";
  manifest_write(dir, &m);
  for (int64_t k = 0; k < nshards; k++) free(files[k]);
  if (chn)
    for (int c = 0; c < C; c++) free(chn[c]);
  free(chn);
  free(files);
  free(counts);
  free(labels);
  free(img);
}
