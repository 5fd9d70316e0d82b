/* optim.cu - the optimizer side on the GPU: per-tensor gradient norms and clipping, and one kernel
 * for clip + AdamW + teacher EMA over the flat parameter buffer.
 *
 * Each call covers all its segments (tensors) in one launch: the host cuts them into chunks of at
 * most OCHUNK elements, a block per chunk, and uploads the chunk table with the per-segment
 * scalars.  Norms are summed in double, per norm block (OPS_NORM_BLOCK elements from the
 * segment's start, a block of threads each) in a fixed tree and per segment in block order
 * (deterministic); seg_sumsq hands out the blocks' sums, from which the sharded optimizer
 * assembles the same norms bit for bit.  The update rounds every operation on its own, in the
 * order of PyTorch's single-tensor AdamW and of the CPU backend, so both backends give
 * bit-identical parameters, moments and teacher on the same inputs. */
#include "build_config.h"

#include <math.h>
#include <string.h>

#include <vector>

#include "cuda/ops/cuda_internal.h"

#define OCHUNK 8192
#define OTHREADS 256

struct ochunk {
  size_t start;   /* element offset in the flat buffers */
  unsigned len;
  int seg;        /* segment index, -1: no segment (EMA only) */
};

struct oseg {     /* per-segment scalars of the update */
  float decay, step, bc2, gscale;
};

/* Host tables: chunks of at most chunk elements of segments [off, off+n), in segment order;
 * first[s] = first chunk of s. */
static void cut_segments(std::vector<ochunk> &ch, std::vector<int> *first, int nseg,
                         const size_t *off, const size_t *n, size_t chunk = OCHUNK) {
  ch.clear();
  for (int s = 0; s < nseg; s++) {
    if (first) first->push_back((int)ch.size());
    for (size_t o = 0; o < n[s]; o += chunk) {
      const size_t len = n[s] - o < chunk ? n[s] - o : chunk;
      ch.push_back(ochunk{off[s] + o, (unsigned)len, s});
    }
  }
  if (first) first->push_back((int)ch.size());
}

/* Upload several host arrays into one scratch table; returns device pointers in order. */
static void upload_parts(int nparts, const void **host, const size_t *bytes, void **dev) {
  size_t total = 0, at[4];
  SCD_ASSERT(nparts <= 4);
  for (int i = 0; i < nparts; i++) {
    at[i] = total;
    total += (bytes[i] + 255) / 256 * 256;
  }
  std::vector<char> buf(total ? total : 1);
  for (int i = 0; i < nparts; i++)
    if (bytes[i]) memcpy(buf.data() + at[i], host[i], bytes[i]);
  char *d = (char *)cu_upload_table(SLOT_TABLE, buf.data(), total);
  for (int i = 0; i < nparts; i++) dev[i] = d + at[i];
}

/* ---- norms -------------------------------------------------------------------------------------- */

__global__ void __launch_bounds__(OTHREADS)
    sumsq_kernel(double *partial, const float *buf, const ochunk *ch) {
  __shared__ double red[OTHREADS / 32];
  const ochunk c = ch[blockIdx.x];
  const float *x = buf + c.start;
  double acc = 0.0;
  for (unsigned i = threadIdx.x; i < c.len; i += OTHREADS) acc += (double)x[i] * x[i];
  acc = warp_sum_d(acc);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (int w = 0; w < OTHREADS / 32; w++) s += red[w];
    partial[blockIdx.x] = s;
  }
}

__global__ void norm_final_kernel(double *norms, const double *partial, const int *first, int nseg) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= nseg) return;
  double acc = 0.0;
  for (int c = first[s]; c < first[s + 1]; c++) acc += partial[c];
  norms[s] = sqrt(acc);
}

void k_seg_norms(double *norms_host, const float *buf, const struct ops_seg *segs, int nseg) {
  if (nseg <= 0) return;
  std::vector<size_t> off(nseg), n(nseg);
  for (int s = 0; s < nseg; s++) {
    off[s] = segs[s].off;
    n[s] = segs[s].n;
  }
  std::vector<ochunk> ch;
  std::vector<int> first;
  cut_segments(ch, &first, nseg, off.data(), n.data(), OPS_NORM_BLOCK); /* a chunk per norm block */
  const void *host[2] = {ch.data(), first.data()};
  const size_t bytes[2] = {ch.size() * sizeof(ochunk), first.size() * sizeof(int)};
  void *dev[2];
  upload_parts(2, host, bytes, dev);
  double *partial = (double *)cu_scratch(SLOT_PARTIAL, (ch.size() + (size_t)nseg + 1) * sizeof(double));
  double *norms = partial + ch.size();
  if (!ch.empty()) {
    sumsq_kernel<<<(unsigned)ch.size(), OTHREADS, 0, cu.stream>>>(partial, buf, (const ochunk *)dev[0]);
    CHECK_LAUNCH();
  }
  norm_final_kernel<<<(nseg + 127) / 128, 128, 0, cu.stream>>>(norms, partial, (const int *)dev[1], nseg);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaMemcpyAsync(norms_host, norms, (size_t)nseg * sizeof(double), cudaMemcpyDeviceToHost,
                             cu.stream));
  CHECK_CUDA(cudaStreamSynchronize(cu.stream));
}

/* Each segment (at most OPS_NORM_BLOCK elements: one chunk) summed as k_seg_norms sums a block. */
void k_seg_sumsq(double *sumsq_host, const float *buf, const struct ops_seg *segs, int nseg) {
  if (nseg <= 0) return;
  std::vector<ochunk> ch((size_t)nseg);
  for (int s = 0; s < nseg; s++) {
    SCD_ASSERT(segs[s].n >= 1 && segs[s].n <= OPS_NORM_BLOCK);
    ch[s] = ochunk{segs[s].off, (unsigned)segs[s].n, s};
  }
  const void *host[1] = {ch.data()};
  const size_t bytes[1] = {ch.size() * sizeof(ochunk)};
  void *dev[1];
  upload_parts(1, host, bytes, dev);
  double *partial = (double *)cu_scratch(SLOT_PARTIAL, (size_t)nseg * sizeof(double));
  sumsq_kernel<<<(unsigned)nseg, OTHREADS, 0, cu.stream>>>(partial, buf, (const ochunk *)dev[0]);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaMemcpyAsync(sumsq_host, partial, (size_t)nseg * sizeof(double), cudaMemcpyDeviceToHost,
                             cu.stream));
  CHECK_CUDA(cudaStreamSynchronize(cu.stream));
}

/* ---- scaling ------------------------------------------------------------------------------------ */

__global__ void __launch_bounds__(OTHREADS)
    scale_kernel(float *buf, const ochunk *ch, const float *scale) {
  const ochunk c = ch[blockIdx.x];
  const float f = scale[c.seg];
  float *x = buf + c.start;
  for (unsigned i = threadIdx.x; i < c.len; i += OTHREADS) x[i] = __fmul_rn(x[i], f);
}

void k_seg_scale(float *buf, const struct ops_seg *segs, const float *scale_host, int nseg) {
  if (nseg <= 0) return;
  std::vector<size_t> off(nseg), n(nseg);
  for (int s = 0; s < nseg; s++) {
    off[s] = segs[s].off;
    n[s] = segs[s].n;
  }
  std::vector<ochunk> ch;
  cut_segments(ch, NULL, nseg, off.data(), n.data());
  if (ch.empty()) return;
  const void *host[2] = {ch.data(), scale_host};
  const size_t bytes[2] = {ch.size() * sizeof(ochunk), (size_t)nseg * sizeof(float)};
  void *dev[2];
  upload_parts(2, host, bytes, dev);
  scale_kernel<<<(unsigned)ch.size(), OTHREADS, 0, cu.stream>>>(buf, (const ochunk *)dev[0],
                                                                (const float *)dev[1]);
  CHECK_LAUNCH();
}

/* ---- AdamW (+ clip factor, + teacher EMA) ------------------------------------------------------- */

struct ohyper {
  float b1, b2, omb1, omb2, eps, ema_a, ema_b;
  int clip, ema;
};

template <typename C>
__global__ void __launch_bounds__(OTHREADS)
    adamw_kernel(float *p, const float *g, float *m, float *v, float *teacher, C *pc, C *tc,
                 const ochunk *ch, const oseg *sp, ohyper hp) {
  const ochunk c = ch[blockIdx.x];
  oseg s = {1.0f, 0.0f, 1.0f, 1.0f};
  if (c.seg >= 0) s = sp[c.seg];
  for (unsigned k = threadIdx.x; k < c.len; k += OTHREADS) {
    const size_t i = c.start + k;
    float pn = p[i];
    if (c.seg >= 0) {
      float gi = g[i];
      if (hp.clip) gi = __fmul_rn(gi, s.gscale);
      const float pi = __fmul_rn(pn, s.decay);
      const float mi = __fadd_rn(__fmul_rn(m[i], hp.b1), __fmul_rn(gi, hp.omb1));
      const float vi = __fadd_rn(__fmul_rn(v[i], hp.b2), __fmul_rn(__fmul_rn(hp.omb2, gi), gi));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2), hp.eps);
      pn = __fadd_rn(pi, __fmul_rn(-s.step, __fdiv_rn(mi, denom)));
      m[i] = mi;
      v[i] = vi;
      p[i] = pn;
      if (pc) stf(&pc[i], pn);
    }
    if (hp.ema) {
      const float tn = __fadd_rn(__fmul_rn(teacher[i], hp.ema_a), __fmul_rn(hp.ema_b, pn));
      teacher[i] = tn;
      if (tc) stf(&tc[i], tn);
    }
  }
}

template <typename C>
void k_adamw(float *p, const float *g, float *m, float *v, const struct ops_adamw_seg *segs,
             int nseg, const float *gscale_host, double beta1, double beta2, double eps,
             float *teacher, size_t n_ema, double momentum, C *pc, C *tc) {
  std::vector<ochunk> ch;
  if (!teacher) {
    std::vector<size_t> off(nseg > 0 ? nseg : 1), n(nseg > 0 ? nseg : 1);
    for (int s = 0; s < nseg; s++) {
      off[s] = segs[s].off;
      n[s] = segs[s].n;
    }
    cut_segments(ch, NULL, nseg, off.data(), n.data());
  } else {
    /* Cover [0, n_ema): segments where they are (in any order), gaps as EMA-only chunks. */
    std::vector<int> order(nseg > 0 ? nseg : 1);
    for (int s = 0; s < nseg; s++) order[s] = s;
    for (int a = 1; a < nseg; a++) /* insertion sort by offset (tables are nearly sorted) */
      for (int b = a; b > 0 && segs[order[b - 1]].off > segs[order[b]].off; b--) {
        const int t = order[b];
        order[b] = order[b - 1];
        order[b - 1] = t;
      }
    size_t at = 0;
    for (int k = 0; k <= nseg; k++) {
      const size_t start = k < nseg ? segs[order[k]].off : n_ema;
      SCD_ASSERT(start >= at && start <= n_ema);
      for (size_t o = at; o < start; o += OCHUNK)
        ch.push_back(ochunk{o, (unsigned)(start - o < OCHUNK ? start - o : OCHUNK), -1});
      if (k == nseg) break;
      const struct ops_adamw_seg *sg = &segs[order[k]];
      SCD_ASSERT(sg->off + sg->n <= n_ema);
      for (size_t o = 0; o < sg->n; o += OCHUNK)
        ch.push_back(ochunk{sg->off + o, (unsigned)(sg->n - o < OCHUNK ? sg->n - o : OCHUNK), order[k]});
      at = sg->off + sg->n;
    }
  }
  if (ch.empty()) return;
  std::vector<oseg> sp(nseg > 0 ? nseg : 1);
  for (int s = 0; s < nseg; s++)
    sp[s] = oseg{segs[s].decay, segs[s].step_size, segs[s].bc2_sqrt, gscale_host ? gscale_host[s] : 1.0f};
  const void *host[2] = {ch.data(), sp.data()};
  const size_t bytes[2] = {ch.size() * sizeof(ochunk), sp.size() * sizeof(oseg)};
  void *dev[2];
  upload_parts(2, host, bytes, dev);
  /* Python floats upstream: 1 - beta is formed in double, then every scalar is rounded to fp32. */
  ohyper hp;
  hp.b1 = (float)beta1;
  hp.b2 = (float)beta2;
  hp.omb1 = (float)(1.0 - beta1);
  hp.omb2 = (float)(1.0 - beta2);
  hp.eps = (float)eps;
  hp.ema_a = (float)momentum;
  hp.ema_b = (float)(1.0 - momentum);
  hp.clip = gscale_host != NULL;
  hp.ema = teacher != NULL;
  adamw_kernel<C><<<(unsigned)ch.size(), OTHREADS, 0, cu.stream>>>(p, g, m, v, teacher, pc, tc,
                                                                  (const ochunk *)dev[0],
                                                                  (const oseg *)dev[1], hp);
  CHECK_LAUNCH();
}

template void k_adamw<bf16>(float *, const float *, float *, float *, const struct ops_adamw_seg *, int,
                            const float *, double, double, double, float *, size_t, double, bf16 *,
                            bf16 *);
template void k_adamw<f16>(float *, const float *, float *, float *, const struct ops_adamw_seg *, int,
                           const float *, double, double, double, float *, size_t, double, f16 *,
                           f16 *);
