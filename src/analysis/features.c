/* features.c - inference backbones (from a checkpoint or freshly initialised) and batched CLS
 * features of shard-set images over the MPI ranks. */
#include "build_config.h"

#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features.h"
#include "analysis/features_io.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/comm_mpi.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/membudget.h"
#include "core/progress.h"
#include "data/shards.h"
#include "model/arena.h"
#include "model/init.h"
#include "train/checkpoint.h"

void features_checkpoint_path(const struct config *cfg, char *buf, size_t n) {
  if (cfg->features.checkpoint[0])
    snprintf(buf, n, "%s", cfg->features.checkpoint);
  else
    fs_join(buf, n, cfg->control.run_dir, CKPT_FILE);
}

static void net_setup(struct features_net *n, const struct device *dev, const struct vit_dims *d) {
  const struct ops *ops = dev->ops;
  memset(n, 0, sizeof *n);
  n->dev = dev;
  n->ops = ops;
  tensors_init(&n->tt);
  struct vit_dims dd = *d;
  dd.drop_path_rate = 0; /* inference */
  vit_init(&n->vit, &dd, &n->tt, "backbone.");
  n->params = ops->alloc(MUL_SIZE(n->tt.size, sizeof(float)));
  n->epoch = -1;
  n->n_last_blocks = 1;
  n->l2 = 1;
}

void features_net_layout(struct features_net *n, int n_last_blocks, int avgpool, int l2, const char *key) {
  if (n_last_blocks < 1 || n_last_blocks > n->vit.d.depth)
    scd_fatal(SCD_EXIT_INPUT, "%s = %d, but the network of %s has %d block%s", key, n_last_blocks, n->source,
              n->vit.d.depth, n->vit.d.depth > 1 ? "s" : "");
  n->n_last_blocks = n_last_blocks;
  n->avgpool = avgpool != 0;
  n->l2 = l2 != 0;
}

int features_net_width(const struct features_net *n) { return (n->n_last_blocks + n->avgpool) * n->vit.d.dim; }

void features_net_load(struct features_net *n, const struct device *dev, const struct vit_dims *d,
                       const struct ckpt_embed *emb, const char *checkpoint, const char *key) {
  const struct ops *ops = dev->ops;
  net_setup(n, dev, d);
  const enum ckpt_which w = strcmp(key, "student") == 0 ? CKPT_STUDENT : CKPT_TEACHER;
  checkpoint_load_weights(checkpoint, w, emb, &n->tt, ops, n->params);
  if (ops->params_changed) ops->params_changed(n->params, n->tt.size);
  snprintf(n->source, sizeof n->source, "%s", checkpoint);
  snprintf(n->key, sizeof n->key, "%s", checkpoint_which_name(w));
}

void features_net_random(struct features_net *n, const struct device *dev, const struct vit_dims *d,
                         uint64_t seed) {
  const struct ops *ops = dev->ops;
  net_setup(n, dev, d);
  float *host = xmalloc(MUL_SIZE(n->tt.size, sizeof(float)));
  init_params(&n->tt, host, seed);
  ops->upload(n->params, host, n->tt.size * sizeof(float));
  free(host);
  if (ops->params_changed) ops->params_changed(n->params, n->tt.size);
  snprintf(n->source, sizeof n->source, "random init (seed %" PRIu64 ")", seed);
  snprintf(n->key, sizeof n->key, "random");
}

void features_net_free(struct features_net *n) {
  if (n->params) n->ops->free(n->params);
  n->params = NULL;
  vit_free(&n->vit);
  tensors_free(&n->tt);
}

int64_t features_share_lo(int64_t n, int64_t unit, int rank, int size) {
  const int64_t nb = (n + unit - 1) / unit, lo = unit * (nb * rank / size);
  return lo < n ? lo : n;
}

void features_gather_rows(void *full, const void *mine, int64_t n, int64_t unit, size_t rowbytes, int all_ranks) {
  const int size = comm_size(), rank = comm_rank();
  if (size == 1) return;
  int *counts = xmalloc((size_t)size * sizeof *counts), *displs = xmalloc((size_t)size * sizeof *displs);
  for (int r = 0; r < size; r++) {
    const int64_t lo = features_share_lo(n, unit, r, size), hi = features_share_lo(n, unit, r + 1, size);
    if (hi > INT32_MAX) scd_fatal(SCD_EXIT_INPUT, "%" PRId64 " rows are too many to gather", n);
    counts[r] = (int)(hi - lo);
    displs[r] = (int)lo;
  }
  if (rowbytes > INT32_MAX) scd_fatal(SCD_EXIT_INPUT, "feature rows of %zu bytes are too long", rowbytes);
  MPI_Datatype row;
  CHECK_MPI(MPI_Type_contiguous((int)rowbytes, MPI_BYTE, &row));
  CHECK_MPI(MPI_Type_commit(&row));
  if (all_ranks)
    CHECK_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, row, full, counts, displs, row, comm_mpi()));
  else if (rank == 0)
    CHECK_MPI(MPI_Gatherv(MPI_IN_PLACE, 0, row, full, counts, displs, row, 0, comm_mpi()));
  else
    CHECK_MPI(MPI_Gatherv(mine, counts[rank], row, NULL, NULL, NULL, row, 0, comm_mpi()));
  CHECK_MPI(MPI_Type_free(&row));
  free(counts);
  free(displs);
}

/* A batch's rows beyond one CLS token (features_net_layout): the blocks' CLS parts and the last
 * block's normed tokens on the device, their host copies, and the patch-token sums. */
struct row_parts {
  int nl, ap, Dm, N, B;
  void *tok_act;  /* [B*N, Dm] activations (avgpool) */
  float *tok_dev; /* the same in fp32 */
  float *host;    /* [nl][B][Dm], then [B*N][Dm] */
  double *acc;    /* [Dm] */
};

/* Bytes of the parts beyond today's one CLS row (0 for that layout), on the host and the device. */
static double parts_bytes(const struct features_net *net, const struct ops *ops, int B, int N) {
  const double Dm = net->vit.d.dim, nl = net->n_last_blocks, tok = net->avgpool ? (double)B * N * Dm : 0;
  if (nl == 1 && !net->avgpool) return 0;
  return nl * B * Dm * (2.0 * sizeof(float) + (double)ops->act_size) +
         tok * (2.0 * sizeof(float) + (double)ops->act_size);
}

static void parts_init(struct row_parts *r, const struct features_net *net, int B, int N) {
  const struct ops *ops = net->ops;
  memset(r, 0, sizeof *r);
  r->nl = net->n_last_blocks;
  r->ap = net->avgpool;
  r->Dm = net->vit.d.dim;
  r->N = N;
  r->B = B;
  if (r->nl == 1 && !r->ap) return;
  const size_t cls = MUL_SIZE((size_t)r->nl * B, (size_t)r->Dm);
  const size_t tok = r->ap ? MUL_SIZE((size_t)B * N, (size_t)r->Dm) : 0;
  r->host = xmalloc(MUL_SIZE(cls + tok, sizeof(float)));
  r->acc = xmalloc(MUL_SIZE((size_t)r->Dm, sizeof(double)));
  if (r->ap) {
    r->tok_act = ops->alloc(MUL_SIZE(tok, ops->act_size));
    r->tok_dev = ops->alloc(MUL_SIZE(tok, sizeof(float)));
  }
}

static void parts_free(struct row_parts *r, const struct ops *ops) {
  if (r->tok_act) ops->free(r->tok_act);
  if (r->tok_dev) ops->free(r->tok_dev);
  free(r->host);
  free(r->acc);
  memset(r, 0, sizeof *r);
}

/* The cnt rows of a batch into dst [cnt][(nl + ap) Dm], from the blocks' CLS parts cls_dev [nl][cnt][Dm]
 * and the normed tokens: the mean over the patch tokens (upstream torch.mean(x[:, 1:], dim=1)) is
 * summed in double and rounded once. */
static void parts_rows(struct row_parts *r, const struct ops *ops, const float *cls_dev, int cnt, float *dst) {
  const size_t Dm = (size_t)r->Dm, D = (size_t)(r->nl + r->ap) * Dm;
  if (r->nl == 1 && !r->ap) {
    ops->download(dst, cls_dev, (size_t)cnt * Dm * sizeof(float));
    return;
  }
  ops->download(r->host, cls_dev, (size_t)r->nl * cnt * Dm * sizeof(float));
  for (int i = 0; i < cnt; i++)
    for (int k = 0; k < r->nl; k++)
      memcpy(dst + (size_t)i * D + (size_t)k * Dm, r->host + ((size_t)k * cnt + i) * Dm, Dm * sizeof(float));
  if (!r->ap) return;
  float *tok = r->host + (size_t)r->nl * r->B * Dm;
  ops->download(tok, r->tok_dev, (size_t)cnt * r->N * Dm * sizeof(float));
  for (int i = 0; i < cnt; i++) {
    for (size_t j = 0; j < Dm; j++) r->acc[j] = 0;
    for (int t = 1; t < r->N; t++) {
      const float *row = tok + ((size_t)i * r->N + t) * Dm;
      for (size_t j = 0; j < Dm; j++) r->acc[j] += row[j];
    }
    float *o = dst + (size_t)i * D + (size_t)r->nl * Dm;
    for (size_t j = 0; j < Dm; j++) o[j] = (float)(r->acc[j] / (r->N - 1));
  }
}

float *features_compute(const struct features_net *net, const struct features_prep *prep,
                        struct dataset *ds, const int64_t *idx, int64_t n, int batch, int all_ranks,
                        struct features_stream *stream, int8_t *status, const char *what) {
  const struct ops *ops = net->ops;
  const struct vit *v = &net->vit;
  const int D = features_net_width(net), Dm = v->d.dim, nl = net->n_last_blocks, C = prep->nsel, oh = prep->oh,
            ow = prep->ow;
  if (C != v->d.in_chans)
    scd_fatal(SCD_EXIT_INPUT, "the network takes %d channels but %d are selected (data.channels)", v->d.in_chans, C);
  const int rank = comm_rank(), size = comm_size();
  /* Ranks take whole batches of the global row order, so every image is computed in the same batch
   * whatever the number of ranks, and the result is bit-identical. */
  const int64_t lo = features_share_lo(n, batch, rank, size), hi = features_share_lo(n, batch, rank + 1, size);
  const int64_t mine = hi - lo;
  int B = batch;
  if (B > mine) B = mine > 0 ? (int)mine : 1;

  /* What this needs per rank, before any of it is taken (core/membudget.h). */
  struct membudget mb = {0};
  /* the device prepares the images from raw batches; it holds the network in memory of its own */
  const struct device_features_prep *dprep = net->dev->features_prep;
  const int own_mem = net->dev->memory != NULL;
  const double img_bytes = (double)C * oh * ow * sizeof(float);
  /* streamed: this rank's batch, and rank 0's receive buffer; else the gathered rows */
  const double kept_rows = stream ? (rank == 0 ? 2.0 * B : 3.0 * B) : (double)(all_ranks || rank == 0 ? n : mine);
  if (stream)
    membudget_add(&mb, kept_rows * D * sizeof(float) + (double)n, "the features (written as computed)",
                  "batch_size = %d, the model's embed_dim %d", B, D);
  else
    membudget_add(&mb, kept_rows * D * sizeof(float) + (double)n, "the features", "%lld images, the model's embed_dim %d",
                  (long long)n, D);
  membudget_add(&mb, 2.0 * B * (double)dataset_image_bytes(ds) + (dprep ? 0 : 2 * B * img_bytes),
                "image batches", "batch_size = %d, features resize = %d x %d, the channels", B, oh, ow);
  if (!own_mem)
    membudget_add(&mb, (double)vit_infer_bytes(v, ops, B, oh, ow) + (double)net->tt.size * sizeof(float),
                  "the network and its activations", "batch_size = %d, features resize, the model", B);
  const double parts_b = parts_bytes(net, ops, B, vit_tokens(v, oh, ow));
  if (parts_b > 0)
    membudget_add(&mb, parts_b, "the intermediate layers", "batch_size = %d, n_last_blocks = %d, avgpool_patchtokens",
                  B, nl);
  char how[256];
  const double limit = membudget_limit(prep->memory_per_rank, how, sizeof how);
  membudget_check(&mb, what, limit, how);

  /* Activations of one inference pass of up to B images (planned twice: count, then place). */
  struct arena a;
  struct vit_pass pass;
  struct vit_scratch scr;
  vit_infer_plan(&pass, &scr, v, &a, ops, "features", B, oh, ow);
  /* A device with the features_prep service (the CUDA backend's) prepares the images from the raw
   * batch: the same input bit for bit, and the host only reads the shards. */
  struct features_gpu *fg = NULL;
  if (dprep && !prep->image) { /* augmented crops (linear_aug.c) are made on the host */
    const struct device_image_prep ip = {.C_all = prep->C_all, .H = prep->H, .W = prep->W, .dtype = prep->dtype,
                                         .sel = prep->sel, .nsel = prep->nsel, .mean = prep->mean,
                                         .std = prep->std, .normalize = prep->normalize, .oh = prep->oh,
                                         .ow = prep->ow, .ih = prep->ih, .iw = prep->iw, .wh = prep->wh,
                                         .ww = prep->ww};
    fg = dprep->create(&ip, B);
  }
  const size_t img_floats = (size_t)C * oh * ow;
  float *img_host = fg ? NULL : xmalloc(MUL_SIZE(MUL_SIZE((size_t)B, img_floats), sizeof(float)));
  float *img_dev = ops->alloc(MUL_SIZE(MUL_SIZE((size_t)B, img_floats), sizeof(float)));
  void *cls_act = ops->alloc(MUL_SIZE((size_t)nl * B * Dm, ops->act_size));
  float *cls_dev = ops->alloc(MUL_SIZE((size_t)nl * B * Dm, sizeof(float)));
  struct row_parts parts;
  parts_init(&parts, net, B, pass.N);
  const size_t raw_bytes = dataset_image_bytes(ds);
  /* two raw batches: the next is read while the GPU runs this one's forward */
  void *raws[2] = {xmalloc(MUL_SIZE((size_t)B, raw_bytes)), xmalloc(MUL_SIZE((size_t)B, raw_bytes))};

  const int gathered = all_ranks || rank == 0;
  /* streamed: one batch of rows at a time */
  const size_t out_rows = stream ? (size_t)B : gathered ? (size_t)n : (size_t)mine;
  float *out = xcalloc(MUL_SIZE(out_rows, (size_t)D) + 1, sizeof(float));
  int8_t *st = xcalloc(gathered ? (size_t)n + 1 : (size_t)mine + 1, 1);
  /* Where this rank's rows go: their final place when gathered here, else the start. */
  float *my_out = stream ? out : gathered ? out + (size_t)lo * D : out;
  int8_t *my_st = gathered ? st + lo : st;

  /* Rank 0's progress stands for every rank's (the shares differ by a batch at most). */
  struct progress prog;
  progress_start(&prog, what, "images", n, mine, prep->progress_seconds);
  if (mine > 0) dataset_read_images(ds, idx + lo, (int)(mine < B ? mine : B), raws[0]);
  for (int64_t b0 = 0, k = 0; b0 < mine; b0 += B, k++) {
    const int cnt = (int)(mine - b0 < B ? mine - b0 : B);
    const void *raw = raws[k % 2];
    if (fg) dprep->prep(fg, raw, cnt, img_dev);
    if (!fg) {
#pragma omp parallel
      {
        double *work = xmalloc(features_prep_work_size(prep) * sizeof(double));
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < cnt; i++) {
          const void *ri = (const char *)raw + (size_t)i * raw_bytes;
          float *di = img_host + (size_t)i * img_floats;
          my_st[b0 + i] = (int8_t)(prep->image ? prep->image(prep, ri, idx[lo + b0 + i], di, work)
                                               : features_prep_image(prep, ri, di, work));
        }
        free(work);
      }
      ops->upload(img_dev, img_host, (size_t)cnt * img_floats * sizeof(float));
    }
    vit_forward_layers(v, ops, net->params, &pass, &scr, cnt, img_dev, nl, cls_act, parts.tok_act, NULL);
    ops->act_to_f32(cls_dev, cls_act, (size_t)nl * cnt * Dm);
    if (parts.tok_act) ops->act_to_f32(parts.tok_dev, parts.tok_act, (size_t)cnt * pass.N * Dm);
    if (b0 + cnt < mine) {
      const int64_t left = mine - b0 - cnt;
      dataset_read_images(ds, idx + lo + b0 + cnt, (int)(left < B ? left : B), raws[(k + 1) % 2]);
    }
    float *dst = stream ? my_out : my_out + (size_t)b0 * D;
    parts_rows(&parts, ops, cls_dev, cnt, dst);
    if (fg) dprep->status(fg, my_st + b0, cnt);
    /* An image that could not be prepared has no features: a zero row, flagged in status. */
    for (int i = 0; i < cnt; i++)
      if (my_st[b0 + i] == FEATURES_PREP_NONFINITE) memset(dst + (size_t)i * D, 0, (size_t)D * sizeof(float));
    if (net->l2) features_l2_normalize(dst, cnt, D);
    if (stream) features_stream_rows(stream, lo + b0, cnt, dst);
    progress_update(&prog, b0 + cnt, 0);
  }
  progress_end(&prog);
  /* before the statuses' gather: other ranks may wait for rank 0 to take their last batches */
  if (stream) features_stream_drain(stream);

  free(raws[0]);
  free(raws[1]);
  free(img_host);
  if (fg) dprep->destroy(fg);
  ops->free(img_dev);
  ops->free(cls_act);
  ops->free(cls_dev);
  parts_free(&parts, ops);
  vit_pass_free(&pass);
  arena_free(&a);

  if (!stream) features_gather_rows(out, out, n, batch, (size_t)D * sizeof(float), all_ranks);
  features_gather_rows(st, st, n, batch, 1, all_ranks);
  if (gathered && status) memcpy(status, st, (size_t)n);
  free(st);
  if (!gathered || stream) {
    free(out);
    return NULL;
  }
  return out;
}
