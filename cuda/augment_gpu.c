/* augment_gpu.c - host side of the GPU augmentation: per-crop draws and taps, pinned staging, the
 * upload stream, and the kernel sequence of augment_kernels.cu. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "cuda/augment_gpu.h"
#include "cuda/augment_kernels.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_check.h"
#include "data/imgops.h"

#define NSLOT 2 /* staging buffers used in turn */

_Static_assert(IMGOPS_U16 == GAUG_U16 && IMGOPS_F32 == GAUG_F32, "raw dtype codes differ");

struct slot {
  char *pinned; /* host */
  char *dev;    /* device mirror */
  cudaEvent_t uploaded; /* the copy from this slot is done */
  cudaEvent_t consumed; /* the kernels reading the device mirror are done */
};

struct augment_gpu {
  struct augment a;
  const struct ops *ops;
  int maxB, nsel, G, L, nl;
  size_t image_bytes, slot_bytes;
  cudaStream_t copy;
  struct slot slot[NSLOT];
  int cur;
  int *sel_dev;
  float *mean_dev, *std_dev;
  double *mnmx;
  float *img, *bufA, *bufB, *out_g, *out_l;
  double host_s;
};

/* Byte offsets of one batch's parts in a staging slot (n images). */
struct layout {
  size_t raw, gcrops, lcrops, fac, g[4], l[4], total;
};

static size_t take(size_t *at, size_t bytes) {
  const size_t o = *at;
  *at += (bytes + 255) / 256 * 256;
  return o;
}

static struct layout layout_for(const struct augment_gpu *g, int n) {
  struct layout L;
  size_t at = 0;
  const size_t ng = 2 * (size_t)n, nlc = (size_t)g->nl * n;
  L.raw = take(&at, MUL_SIZE((size_t)n, g->image_bytes));
  L.gcrops = take(&at, ng * sizeof(struct gaug_crop));
  L.lcrops = take(&at, nlc * sizeof(struct gaug_crop));
  L.fac = take(&at, (ng + nlc) * (size_t)g->nsel * sizeof(float));
  for (int i = 0; i < 4; i++) L.g[i] = take(&at, ng * 4 * (size_t)g->G * 4); /* ih wh iw ww */
  for (int i = 0; i < 4; i++) L.l[i] = take(&at, nlc * 4 * (size_t)g->L * 4);
  L.total = at;
  return L;
}

struct augment_gpu *augment_gpu_create(const struct augment *a, int max_batch) {
  const struct ops *ops = backend_cuda();
  if (!ops) scd_fatal(SCD_EXIT_INPUT, "GPU augmentation needs a usable GPU: %s", backend_cuda_why_not());
  SCD_ASSERT(max_batch >= 1 && a->nsel >= 1);
  struct augment_gpu *g = xcalloc(1, sizeof *g);
  g->a = *a;
  g->ops = ops;
  g->maxB = max_batch;
  g->nsel = a->nsel;
  g->G = a->global_size;
  g->L = a->local_size;
  g->nl = a->n_local;
  g->image_bytes = MUL_SIZE(MUL_SIZE((size_t)a->C_all, (size_t)a->H * a->W),
                            a->dtype == IMGOPS_U16 ? 2 : 4);
  g->slot_bytes = layout_for(g, max_batch).total;
  CHECK_CUDA(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
  for (int s = 0; s < NSLOT; s++) {
    CHECK_CUDA(cudaHostAlloc((void **)&g->slot[s].pinned, g->slot_bytes, cudaHostAllocDefault));
    g->slot[s].dev = ops->alloc(g->slot_bytes);
    CHECK_CUDA(cudaEventCreateWithFlags(&g->slot[s].uploaded, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&g->slot[s].consumed, cudaEventDisableTiming));
  }
  const size_t nsel = (size_t)a->nsel;
  g->sel_dev = ops->alloc(nsel * sizeof(int));
  g->mean_dev = ops->alloc(nsel * sizeof(float));
  g->std_dev = ops->alloc(nsel * sizeof(float));
  ops->upload(g->sel_dev, a->sel, nsel * sizeof(int));
  ops->upload(g->mean_dev, a->mean, nsel * sizeof(float));
  ops->upload(g->std_dev, a->std, nsel * sizeof(float));
  const size_t B = (size_t)max_batch;
  g->mnmx = ops->alloc(2 * B * nsel * sizeof(double));
  g->img = ops->alloc(MUL_SIZE(MUL_SIZE(B * nsel, (size_t)a->H * a->W), sizeof(float)));
  const size_t ng = MUL_SIZE(2 * B * nsel, (size_t)g->G * g->G);
  const size_t nlc = MUL_SIZE((size_t)g->nl * B * nsel, (size_t)g->L * g->L);
  const size_t nbuf = ng > nlc ? ng : nlc;
  g->bufA = ops->alloc(nbuf * sizeof(float));
  g->bufB = ops->alloc(nbuf * sizeof(float));
  g->out_g = ops->alloc(ng * sizeof(float));
  g->out_l = ops->alloc((nlc ? nlc : 1) * sizeof(float));
  ops->sync(); /* the zero-fills are queued on the backend's stream; the copy stream is another */
  return g;
}

void augment_gpu_destroy(struct augment_gpu *g) {
  if (!g) return;
  const struct ops *ops = g->ops;
  ops->sync();
  CHECK_CUDA(cudaStreamSynchronize(g->copy));
  for (int s = 0; s < NSLOT; s++) {
    CHECK_CUDA(cudaFreeHost(g->slot[s].pinned));
    ops->free(g->slot[s].dev);
    CHECK_CUDA(cudaEventDestroy(g->slot[s].uploaded));
    CHECK_CUDA(cudaEventDestroy(g->slot[s].consumed));
  }
  CHECK_CUDA(cudaStreamDestroy(g->copy));
  ops->free(g->sel_dev);
  ops->free(g->mean_dev);
  ops->free(g->std_dev);
  ops->free(g->mnmx);
  ops->free(g->img);
  ops->free(g->bufA);
  ops->free(g->bufB);
  ops->free(g->out_g);
  ops->free(g->out_l);
  free(g);
}

double augment_gpu_host_seconds(const struct augment_gpu *g) { return g->host_s; }

/* Reverse the order of S 4-tap entries: output o takes the taps of output S-1-o (the flip of the
 * resampled crop with the same arithmetic per pixel). */
static void reverse_taps(int *idx, float *w, int S) {
  for (int lo = 0, hi = S - 1; lo < hi; lo++, hi--)
    for (int j = 0; j < 4; j++) {
      const int ti = idx[4 * lo + j];
      idx[4 * lo + j] = idx[4 * hi + j];
      idx[4 * hi + j] = ti;
      const float tw = w[4 * lo + j];
      w[4 * lo + j] = w[4 * hi + j];
      w[4 * hi + j] = tw;
    }
}

/* Crop k of image i (sample id) into its slot: parameters, taps, factors. */
static void fill_crop(const struct augment_gpu *g, char *h, const struct layout *L, int n, int i,
                      int64_t sample, int k, int64_t epoch) {
  const struct augment *a = &g->a;
  struct augment_crop p;
  if (a->random) {
    augment_draw(a, epoch, sample, k, &p);
  } else { /* deterministic: the whole image resized, nothing random */
    memset(&p, 0, sizeof p);
    p.height = a->H;
    p.width = a->W;
    p.size = augment_crop_size(a, k);
  }
  const int global = k < 2, S = p.size;
  const int slot = global ? k * n + i : (k - 2) * n + i;
  const size_t *off = global ? L->g : L->l;
  struct gaug_crop *c = (struct gaug_crop *)(h + (global ? L->gcrops : L->lcrops)) + slot;
  const int taps = 4 * S * slot;
  memset(c, 0, sizeof *c);
  c->img = i;
  c->top = p.top;
  c->left = p.left;
  c->bright = p.bright;
  c->blur = p.blur;
  c->solarize = p.solarize;
  c->taps = taps;
  c->fac = ((global ? 0 : 2 * n) + slot) * g->nsel;
  int *ih = (int *)(h + off[0]) + taps, *iw = (int *)(h + off[2]) + taps;
  float *wh = (float *)(h + off[1]) + taps, *ww = (float *)(h + off[3]) + taps;
  imgops_bicubic_taps(p.height, S, imgops_scale_for_size(p.height, S), ih, wh);
  imgops_bicubic_taps(p.width, S, imgops_scale_for_size(p.width, S), iw, ww);
  if (p.vflip) reverse_taps(ih, wh, S);
  if (p.hflip) reverse_taps(iw, ww, S);
  float *fac = (float *)(h + L->fac) + c->fac;
  for (int ch = 0; ch < g->nsel; ch++) fac[ch] = p.bright ? p.factor[ch] : 1.0f;
  if (p.blur) imgops_gaussian_kernel5(p.sigma, c->k5);
}

void augment_gpu_batch(struct augment_gpu *g, const void *raw, const int64_t *index, int n,
                       int64_t epoch, float **global, float **local) {
  const double t0 = wtime();
  SCD_ASSERT(n >= 0 && n <= g->maxB);
  *global = g->out_g;
  *local = g->out_l;
  if (n == 0) return;
  struct slot *s = &g->slot[g->cur];
  g->cur = (g->cur + 1) % NSLOT;
  const struct layout L = layout_for(g, n);
  SCD_ASSERT(L.total <= g->slot_bytes);
  CHECK_CUDA(cudaEventSynchronize(s->uploaded)); /* the slot's previous copy has left */
  char *h = s->pinned;
  /* The host's part is on the step's critical path: the copy into pinned memory (tens of MB) and
   * the crops' tables, image by image on the OpenMP threads (each writes its own slots). */
  const int ncrops = 2 + g->nl;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++) {
    memcpy(h + L.raw + (size_t)i * g->image_bytes, (const char *)raw + (size_t)i * g->image_bytes,
           g->image_bytes);
    for (int k = 0; k < ncrops; k++) fill_crop(g, h, &L, n, i, index ? index[i] : i, k, epoch);
  }
  CHECK_CUDA(cudaStreamWaitEvent(g->copy, s->consumed, 0));
  CHECK_CUDA(cudaMemcpyAsync(s->dev, h, L.total, cudaMemcpyHostToDevice, g->copy));
  CHECK_CUDA(cudaEventRecord(s->uploaded, g->copy));
  void *cs = backend_cuda_stream();
  CHECK_CUDA(cudaStreamWaitEvent((cudaStream_t)cs, s->uploaded, 0));
  const struct augment *a = &g->a;
  char *d = s->dev;
  gaug_scale(d + L.raw, (int)a->dtype, n, a->C_all, a->H, a->W, g->sel_dev, g->nsel, g->mnmx,
             g->img, cs);
  gaug_crops(g->img, g->nsel, a->H, a->W, (const struct gaug_crop *)(d + L.gcrops), 2 * n, g->G,
             (const int *)(d + L.g[0]), (const float *)(d + L.g[1]), (const int *)(d + L.g[2]),
             (const float *)(d + L.g[3]), (const float *)(d + L.fac), g->mean_dev, g->std_dev,
             g->bufA, g->bufB, g->out_g, cs);
  gaug_crops(g->img, g->nsel, a->H, a->W, (const struct gaug_crop *)(d + L.lcrops), g->nl * n, g->L,
             (const int *)(d + L.l[0]), (const float *)(d + L.l[1]), (const int *)(d + L.l[2]),
             (const float *)(d + L.l[3]), (const float *)(d + L.fac), g->mean_dev, g->std_dev,
             g->bufA, g->bufB, g->out_l, cs);
  CHECK_CUDA(cudaEventRecord(s->consumed, (cudaStream_t)cs));
  g->host_s += wtime() - t0;
}
