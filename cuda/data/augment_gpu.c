/* augment_gpu.c - host side of the GPU augmentation: per-crop draws and taps, pinned staging, the
 * augmentation's own stream (upload and kernels), double-buffered crops handed to the backend's
 * stream through events, and the idle time the augmentation causes on that stream. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/data/augment_gpu.h"
#include "cuda/data/augment_kernels.h"
#include "data/imgops.h"

#define NSLOT 2 /* staging buffers used in turn */
#define NOUT 2  /* crop buffers: the step's, and the next batch's being made */

_Static_assert(IMGOPS_U16 == GAUG_U16 && IMGOPS_F32 == GAUG_F32, "raw dtype codes differ");

struct slot {
  char *pinned; /* host */
  char *dev;    /* device mirror */
  cudaEvent_t uploaded; /* the copy from this slot is done */
};

/* Two timing events on the backend's stream; the time between them is backend idle time caused by
 * the augmentation (pending until read). */
struct gap {
  cudaEvent_t a, b;
  int pending;
};

struct augment_gpu {
  struct augment a;
  const struct ops *ops;
  int maxB, nsel, G, L, nl;
  size_t image_bytes, slot_bytes;
  cudaStream_t stream; /* upload and kernels */
  struct slot slot[NSLOT];
  int cur;
  int *sel_dev;
  float *mean_dev, *std_dev;
  double *mnmx;
  float *img, *bufA, *bufB;
  float *out_g[NOUT], *out_l[NOUT];
  cudaEvent_t made[NOUT]; /* augmentation stream: the crops of out[i] are written */
  cudaEvent_t freed[NOUT]; /* backend stream: the work that read out[i] is done */
  int next_out;            /* the buffer the next start writes */
  int begun;               /* out buffer of a batch started and not taken, or -1 */
  int taken;               /* out buffer of the last take, or -1 */
  int marked;              /* augment_gpu_mark since the last start */
  struct gap hide, wait;   /* mark .. end of start's host part; take's wait */
  double host_s, exposed_s;
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

static void gap_create(struct gap *x) {
  CHECK_CUDA(cudaEventCreate(&x->a));
  CHECK_CUDA(cudaEventCreate(&x->b));
  x->pending = 0;
}

static void gap_destroy(struct gap *x) {
  CHECK_CUDA(cudaEventDestroy(x->a));
  CHECK_CUDA(cudaEventDestroy(x->b));
}

/* Add a pending gap's time to the exposed total (its events are on the backend's stream; waits for
 * the second where it has not completed yet). */
static void gap_read(struct augment_gpu *g, struct gap *x) {
  if (!x->pending) return;
  float ms = 0;
  CHECK_CUDA(cudaEventSynchronize(x->b));
  CHECK_CUDA(cudaEventElapsedTime(&ms, x->a, x->b));
  if (ms > 0) g->exposed_s += 1e-3 * ms;
  x->pending = 0;
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
  /* non-blocking: the legacy stream's work (pageable copies elsewhere) does not hold it up */
  CHECK_CUDA(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  for (int s = 0; s < NSLOT; s++) {
    CHECK_CUDA(cudaHostAlloc((void **)&g->slot[s].pinned, g->slot_bytes, cudaHostAllocDefault));
    g->slot[s].dev = ops->alloc(g->slot_bytes);
    CHECK_CUDA(cudaEventCreateWithFlags(&g->slot[s].uploaded, cudaEventDisableTiming));
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
  cudaStream_t cs = (cudaStream_t)backend_cuda_stream();
  for (int i = 0; i < NOUT; i++) {
    g->out_g[i] = ops->alloc(ng * sizeof(float));
    g->out_l[i] = ops->alloc((nlc ? nlc : 1) * sizeof(float));
    CHECK_CUDA(cudaEventCreateWithFlags(&g->made[i], cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&g->freed[i], cudaEventDisableTiming));
    CHECK_CUDA(cudaEventRecord(g->freed[i], cs)); /* nothing reads it yet */
  }
  gap_create(&g->hide);
  gap_create(&g->wait);
  g->begun = g->taken = -1;
  ops->sync(); /* the zero-fills are queued on the backend's stream; the augmentation's is another */
  return g;
}

void augment_gpu_destroy(struct augment_gpu *g) {
  if (!g) return;
  const struct ops *ops = g->ops;
  ops->sync();
  CHECK_CUDA(cudaStreamSynchronize(g->stream));
  for (int s = 0; s < NSLOT; s++) {
    CHECK_CUDA(cudaFreeHost(g->slot[s].pinned));
    ops->free(g->slot[s].dev);
    CHECK_CUDA(cudaEventDestroy(g->slot[s].uploaded));
  }
  for (int i = 0; i < NOUT; i++) {
    ops->free(g->out_g[i]);
    ops->free(g->out_l[i]);
    CHECK_CUDA(cudaEventDestroy(g->made[i]));
    CHECK_CUDA(cudaEventDestroy(g->freed[i]));
  }
  gap_destroy(&g->hide);
  gap_destroy(&g->wait);
  CHECK_CUDA(cudaStreamDestroy(g->stream));
  ops->free(g->sel_dev);
  ops->free(g->mean_dev);
  ops->free(g->std_dev);
  ops->free(g->mnmx);
  ops->free(g->img);
  ops->free(g->bufA);
  ops->free(g->bufB);
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

void augment_gpu_start(struct augment_gpu *g, const void *raw, const int64_t *index, int n,
                       int64_t epoch) {
  const double t0 = wtime();
  SCD_ASSERT(n >= 0 && n <= g->maxB);
  SCD_ASSERT(g->begun < 0); /* one batch in the making at a time */
  const int marked = g->marked;
  g->marked = 0;
  if (n == 0) return;
  struct slot *s = &g->slot[g->cur];
  g->cur = (g->cur + 1) % NSLOT;
  const struct layout L = layout_for(g, n);
  SCD_ASSERT(L.total <= g->slot_bytes);
  CHECK_CUDA(cudaEventSynchronize(s->uploaded)); /* the slot's previous copy has left */
  char *h = s->pinned;
  /* The host's part: the copy into pinned memory (tens of MB) and the crops' tables, image by
   * image on the OpenMP threads (each writes its own slots). */
  const int ncrops = 2 + g->nl;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++) {
    memcpy(h + L.raw + (size_t)i * g->image_bytes, (const char *)raw + (size_t)i * g->image_bytes,
           g->image_bytes);
    for (int k = 0; k < ncrops; k++) fill_crop(g, h, &L, n, i, index ? index[i] : i, k, epoch);
  }
  /* The device mirror is free: its last readers are earlier kernels of this same stream. */
  CHECK_CUDA(cudaMemcpyAsync(s->dev, h, L.total, cudaMemcpyHostToDevice, g->stream));
  CHECK_CUDA(cudaEventRecord(s->uploaded, g->stream));
  const int o = g->next_out;
  g->next_out = (o + 1) % NOUT;
  /* The crop buffer's readers on the backend's stream (the step before last) are done. */
  CHECK_CUDA(cudaStreamWaitEvent(g->stream, g->freed[o], 0));
  const struct augment *a = &g->a;
  char *d = s->dev;
  void *st = g->stream;
  gaug_scale(d + L.raw, (int)a->dtype, n, a->C_all, a->H, a->W, g->sel_dev, g->nsel, g->mnmx,
             g->img, st);
  gaug_crops(g->img, g->nsel, a->H, a->W, (const struct gaug_crop *)(d + L.gcrops), 2 * n, g->G,
             (const int *)(d + L.g[0]), (const float *)(d + L.g[1]), (const int *)(d + L.g[2]),
             (const float *)(d + L.g[3]), (const float *)(d + L.fac), g->mean_dev, g->std_dev,
             g->bufA, g->bufB, g->out_g[o], st);
  gaug_crops(g->img, g->nsel, a->H, a->W, (const struct gaug_crop *)(d + L.lcrops), g->nl * n, g->L,
             (const int *)(d + L.l[0]), (const float *)(d + L.l[1]), (const int *)(d + L.l[2]),
             (const float *)(d + L.l[3]), (const float *)(d + L.fac), g->mean_dev, g->std_dev,
             g->bufA, g->bufB, g->out_l[o], st);
  CHECK_CUDA(cudaEventRecord(g->made[o], g->stream));
  g->begun = o;
  const double dt = wtime() - t0;
  g->host_s += dt;
  if (marked) {
    /* The backend stream idles between the end of the work queued before the mark and this
     * event only if the host part above outlasted that work. */
    CHECK_CUDA(cudaEventRecord(g->hide.b, (cudaStream_t)backend_cuda_stream()));
    g->hide.pending = 1;
  } else {
    g->exposed_s += dt; /* nothing queued to hide behind */
  }
}

void augment_gpu_take(struct augment_gpu *g, float **global, float **local) {
  const int o = g->begun;
  SCD_ASSERT(o >= 0);
  g->begun = -1;
  cudaStream_t cs = (cudaStream_t)backend_cuda_stream();
  gap_read(g, &g->wait); /* a caller that never reads: its last take's gap, first */
  CHECK_CUDA(cudaEventRecord(g->wait.a, cs));
  CHECK_CUDA(cudaStreamWaitEvent(cs, g->made[o], 0));
  CHECK_CUDA(cudaEventRecord(g->wait.b, cs));
  g->wait.pending = 1;
  /* The previous crops' readers are all queued before this point. */
  if (g->taken >= 0) CHECK_CUDA(cudaEventRecord(g->freed[g->taken], cs));
  g->taken = o;
  *global = g->out_g[o];
  *local = g->out_l[o];
}

void augment_gpu_batch(struct augment_gpu *g, const void *raw, const int64_t *index, int n,
                       int64_t epoch, float **global, float **local) {
  augment_gpu_start(g, raw, index, n, epoch);
  if (n == 0) { /* nothing made: the buffers as they are */
    *global = g->out_g[g->next_out];
    *local = g->out_l[g->next_out];
    return;
  }
  augment_gpu_take(g, global, local);
}

void augment_gpu_mark(struct augment_gpu *g) {
  gap_read(g, &g->hide);
  CHECK_CUDA(cudaEventRecord(g->hide.a, (cudaStream_t)backend_cuda_stream()));
  g->marked = 1;
}

double augment_gpu_exposed_seconds(struct augment_gpu *g) {
  gap_read(g, &g->hide);
  gap_read(g, &g->wait);
  const double s = g->exposed_s;
  g->exposed_s = 0;
  return s;
}
