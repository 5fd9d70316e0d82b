/* gpu_train_bench.c - throughput of DINO training steps on the CUDA backend: images/s, MFU, step time
 * split into data, compute and communication, peak memory.
 *
 * usage: [mpirun -np N] gpu_train_bench [-B batch] [-P bf16|fp16|fp32] [-s steps] [-w warmup]
 *            [-D dim] [-L depth] [-H heads] [-p patch] [-C chans] [-g global] [-l local]
 *            [-n n_local] [-K out_dim] [-R raw_side] [-T peak_tflops] [-W peak_gbps] [-x] [-M]
 *            [-A none|tanh] [-S] [-a] [-F opts] [-i flash|gemm|cudnn] [-b epilogue|kernel]
 *            [-e epilogue|kernel] [-t] [-c arch]
 * Defaults: ViT-S/16 (D 384, depth 12, 6 heads), 5 channels, 2 x 224 + 8 x 96 crops, K 65536, batch
 * 64 per GPU, bf16, raw uint16 images of 256 x 256.  -x adds a step timed op by op (GEMMs,
 * attention, other); -M uses the MPI gradient communicator instead of NCCL; -A the GELU form
 * (&model gelu_approximate; tanh runs inside the GEMMs where cuBLASLt computes it);
 * -S makes each batch's crops at its own step, serially (default: the next batch's crops are made
 * on the augmentation's stream while this step's backward runs, as the training loop does); -a
 * times the attention alone (the step's shapes, forward and backward) for several sets of the flash
 * kernels' options, and -F sets them for the run (backend_cuda_set_flash_options; default 7).
 * The choices of the deck's &gpu group: -i the attention implementation (default flash), -b the
 * bias-gradient path, -e the GELU path (epilogue: in the GEMMs where the library computes the
 * model's form; kernel), -t GEMM tuning, -c the kernel set of an older GPU (&gpu arch: 75 a T4's,
 * 70 a V100's; fp16 only below 80).
 *
 * One step is what the training loop runs: GPU augmentation of a raw batch (augment_gpu), teacher
 * and student forward, DINO loss, centre all-reduce, backward with the gradients all-reduced in
 * buckets over NCCL as they are produced, clip + AdamW + EMA (optim_update).  Each step ends with
 * the GPU idle, and its wall time is split:
 *   data  = the time the augmentation kept the backend's stream idle (augment_gpu_exposed_seconds):
 *           with -S all of it (the host's part, the upload and the kernels); overlapped, the host
 *           part's overrun of the queued backward and the wait for the crops' kernels (the host
 *           part's own time is printed alone too);
 *   comm  = time blocked waiting for NCCL after backward and for the centre (exposed, not hidden);
 *   compute = the rest (forward, loss, backward, optimizer, launch overheads).
 * Then the same steps again without augmentation (the last crops reused): the "model" step time,
 * comparable with bench/torch_dino_step.py.  FLOPs are counted explicitly (matmuls and attention,
 * 2 per multiply-add; backward = 2 x forward; the teacher runs forward only) and MFU is FLOPs per
 * second over the peak: -T, or the datasheet's dense peak of the GPU (gpu_peaks: bf16 or fp16
 * tensor cores, the same peak, or fp32; 989.4 / 66.9 TFLOP/s on H100 and H200 SXM, 756.5 / 51.2 on
 * H100 PCIe, fp16 65 on a T4 (320 GB/s) and 125 on a V100 SXM2 (900 GB/s)).  -P fp16 runs fp16
 * with the dynamic loss scale (model/loss_scale.h; skipped steps said).
 * The model step is also set against its floor (bench/ops_traffic.h): for every op, the larger of
 * its FLOPs over that peak and the bytes it must move over the memory bandwidth (-W GB/s, or the
 * datasheet's: 3352 on H100 SXM, 2000 PCIe, 4800 on H200), summed over the step's ops; with -x, each kind of op's GPU time next
 * to its floor and the bandwidth its ops reached, and every op (backend function) by GPU time.
 * Out-of-memory ends the run with status 1 and a message (tests/gpu/run.sh uses that to find the
 * largest batch that fits).  Then "RESULT key=value ..." for tests/gpu/run.sh, and BENCH lines
 * (bench/bench_result.h) named gpu_train.PRECISION.ATTENTION[.Ngpu] for bench/run_all. */
#include "build_config.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_result.h"
#include "bench/bench_step.h"
#include "bench/ops_traffic.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/rng.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_check.h"
#include "cuda/data/augment_gpu.h"
#include "model/dino_loss.h"
#include "model/dino_model.h"
#include "model/grad_comm.h"
#include "model/ops.h"
#include "model/optim.h"

struct bench_ctx {
  struct grad_comm *gc;
  const struct tensor_table *tt;
};
static void on_ready(int first, int last, void *ctx) {
  struct bench_ctx *b = ctx;
  const size_t off = b->tt->t[first].off;
  const size_t end = last + 1 < b->tt->n ? b->tt->t[last + 1].off : b->tt->size;
  b->gc->bucket_ready(b->gc, off, end - off);
}

/* The sample ids of step it's batch: the two halves of the raw pool in turn. */
static void batch_ids(int64_t *ids, int it, int B, int pool, int rank) {
  const int first = (it % 2) * B;
  for (int i = 0; i < B; i++) ids[i] = (int64_t)rank * 1000000 + (first + i) % pool;
}

static double median(double *v, int n);

/* -a: the attention alone, as the step calls it (teacher and student on the global crops, the
 * student on the local ones; forward, and backward for the student), for each set of the flash
 * kernels' options (backend_cuda_set_flash_options): medians of 20 calls timed with events. */
static void attn_bench(const struct ops *ops, int B, int Ng, int Nl, int nl, int H, int hd, int depth) {
  const int opt_sets[] = {7, 0, 3};
  const int nsets = (int)(sizeof opt_sets / sizeof *opt_sets);
  cudaStream_t cs = (cudaStream_t)backend_cuda_stream();
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  double tot[2][8] = {{0}}; /* [fwd, bwd][option set]: ms per step */
  for (int sh = 0; sh < 2; sh++) {
    const int Bs = sh ? nl * B : 2 * B, N = sh ? Nl : Ng;
    if (Bs == 0) continue;
    const size_t nqkv = (size_t)Bs * N * 3 * H * hd, nout = (size_t)Bs * N * H * hd;
    float *h = malloc(nqkv * sizeof *h), *f = ops->alloc(nqkv * sizeof(float));
    struct rng r;
    rng_init(&r, 40, RNG_DOMAIN_TEST, (uint64_t)sh, 0);
    for (size_t i = 0; i < nqkv; i++) h[i] = (float)rng_normal(&r);
    ops->upload(f, h, nqkv * sizeof(float));
    void *qkv = ops->alloc(nqkv * ops->act_size), *dqkv = ops->alloc(nqkv * ops->act_size);
    void *out = ops->alloc(nout * ops->act_size), *dout = ops->alloc(nout * ops->act_size);
    void *state = ops->alloc(ops->attn_state_bytes(Bs, N, H, hd));
    ops->act_from_f32(qkv, f, nqkv);
    ops->act_from_f32(dout, f, nout);
    const double fl = 4.0 * Bs * H * (double)N * N * hd; /* QK^T and PV, 2 per multiply-add */
    for (int o = 0; o < nsets; o++) {
      backend_cuda_set_flash_options(opt_sets[o]);
      double t[2][20];
      for (int it = 0; it < 23; it++)
        for (int dir = 0; dir < 2; dir++) {
          CHECK_CUDA(cudaEventRecord(e0, cs));
          if (dir == 0) ops->attn_fwd(out, state, NULL, qkv, Bs, N, H, hd, 0.125f);
          else ops->attn_bwd(dqkv, dout, out, qkv, state, Bs, N, H, hd, 0.125f);
          CHECK_CUDA(cudaEventRecord(e1, cs));
          CHECK_CUDA(cudaEventSynchronize(e1));
          float ms = 0;
          CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
          if (it >= 3) t[dir][it - 3] = ms;
        }
      const double f_ms = median(t[0], 20), b_ms = median(t[1], 20);
      /* per step: forward twice on the global crops (teacher, student), once on the local ones;
       * backward once each */
      tot[0][o] += depth * f_ms * (sh ? 1 : 2);
      tot[1][o] += depth * b_ms;
      printf("attention %s crops (%d x %d tokens, %d heads of %d), flash options %d: forward %.3f ms (%.0f "
             "TFLOP/s), backward %.3f ms (%.0f TFLOP/s at 2.5x the forward's FLOPs)\n", sh ? "local" : "global",
             Bs, N, H, hd, opt_sets[o], f_ms, fl / f_ms / 1e9, b_ms, 2.5 * fl / b_ms / 1e9);
    }
    free(h);
    ops->free(f), ops->free(qkv), ops->free(dqkv), ops->free(out), ops->free(dout), ops->free(state);
  }
  for (int o = 0; o < nsets; o++)
    printf("attention per step (%d blocks), flash options %d: forward %.2f ms + backward %.2f ms = %.2f ms\n",
           depth, opt_sets[o], tot[0][o], tot[1][o], tot[0][o] + tot[1][o]);
  backend_cuda_set_flash_options(7);
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Dense peaks of the GPUs we know by their CUDA names (NVIDIA's datasheets, sparsity excluded):
 * bf16 tensor cores or fp32 CUDA cores, and memory bandwidth; 0 for others (-T and -W then). */
static void gpu_peaks(const char *name, int fp32, double *flops, double *bw) {
  static const struct {
    const char *a, *b; /* both in the name (b NULL: a alone) */
    double bf16_tf, fp32_tf, gbps;
  } known[] = {
      {"H100", "PCIe", 756.5, 51.2, 2000},  /* HBM2e */
      {"H100", "NVL", 835.5, 59.8, 3900},   /* HBM3 */
      {"H200", "NVL", 835.5, 59.8, 4800},   /* HBM3e */
      {"H200", NULL, 989.4, 66.9, 4800},    /* SXM */
      {"H100", NULL, 989.4, 66.9, 3352},    /* SXM */
      {"T4", NULL, 65.0, 8.1, 320},         /* fp16 tensor cores (no bf16), GDDR6 */
      {"V100", NULL, 125.0, 15.7, 900},     /* SXM2, fp16 tensor cores (no bf16), HBM2 */
  };
  *flops = *bw = 0;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strstr(name, known[i].a) && (!known[i].b || strstr(name, known[i].b))) {
      *flops = (fp32 ? known[i].fp32_tf : known[i].bf16_tf) * 1e12;
      *bw = known[i].gbps * 1e9;
      return;
    }
}

int main(int argc, char **argv) {
  comm_init(&argc, &argv);
  log_init(comm_rank(), 1);
  struct dino_spec s = {0};
  s.vit = (struct vit_dims){16, 5, 384, 12, 6, 1536, 14, 0.1, 0};
  s.head = (struct head_dims){.hidden = 2048, .bottleneck = 256, .out_dim = 65536, .nlayers = 3,
                              .norm_last_layer = 1};
  int B = 64, G = 224, Lsz = 96, nl = 8, steps = 10, warm = 3, raw_side = 256, prof = 0, use_mpi = 0;
  int serial_aug = 0, attn_only = 0;
  int opt;
  double peak_tflops = 0, peak_gbps = 0;
  const char *precision = "bf16";
  const char *attention = "flash", *bias_grad = "epilogue", *gelu = "epilogue";
  int gemm_tune = 0;
  while ((opt = getopt(argc, argv, "B:P:s:w:D:L:H:p:C:g:l:n:K:R:T:W:xMA:SaF:i:b:e:tc:")) != -1) {
    switch (opt) {
    case 'B': B = atoi(optarg); break;
    case 'P': precision = optarg; break;
    case 's': steps = atoi(optarg); break;
    case 'w': warm = atoi(optarg); break;
    case 'D': s.vit.dim = atoi(optarg); break;
    case 'L': s.vit.depth = atoi(optarg); break;
    case 'H': s.vit.heads = atoi(optarg); break;
    case 'p': s.vit.patch = atoi(optarg); break;
    case 'C': s.vit.in_chans = atoi(optarg); break;
    case 'g': G = atoi(optarg); break;
    case 'l': Lsz = atoi(optarg); break;
    case 'n': nl = atoi(optarg); break;
    case 'K': s.head.out_dim = atoi(optarg); break;
    case 'R': raw_side = atoi(optarg); break;
    case 'T': peak_tflops = atof(optarg); break;
    case 'W': peak_gbps = atof(optarg); break;
    case 'x': prof = 1; break;
    case 'i': attention = optarg; break;
    case 'b': bias_grad = optarg; break;
    case 'e': gelu = optarg; break;
    case 't': gemm_tune = 1; break;
    case 'c': backend_cuda_set_arch(atoi(optarg)); break;
    case 'M': use_mpi = 1; break;
    case 'S': serial_aug = 1; break;
    case 'a': attn_only = 1; break;
    case 'F': backend_cuda_set_flash_options(atoi(optarg)); break;
    case 'A':
      if (strcmp(optarg, "none") && strcmp(optarg, "tanh")) {
        fprintf(stderr, "gpu_train_bench: -A %s: expected none or tanh\n", optarg);
        return 2;
      }
      s.vit.gelu_approx = s.head.gelu_approx = !strcmp(optarg, "tanh");
      break;
    default: fprintf(stderr, "see the header of bench/gpu_train_bench.c for the options\n"); return 2;
    }
  }
  if (B < 1 || steps < 1 || warm < 0 || nl < 0 || raw_side < 8) {
    fprintf(stderr, "gpu_train_bench: bad options\n");
    return 2;
  }
  s.vit.mlp_hidden = 4 * s.vit.dim;
  s.vit.pos_grid = 224 / s.vit.patch;
  const struct ops *cuda_ops = backend_cuda_for(precision);
  if (!cuda_ops) {
    fprintf(stderr, "gpu_train_bench: no usable GPU: %s\n", backend_cuda_why_not());
    comm_finalize();
    return 77;
  }
  backend_cuda_set_attention(attention);
  backend_cuda_set_bias_grad(bias_grad);
  backend_cuda_set_gelu(gelu);
  backend_cuda_set_gemm_tune(gemm_tune);
  /* every op counted (bytes, FLOPs) on its way to the backend: the floor of the model step */
  const struct ops *ops = ops_traffic_wrap(cuda_ops, 0);
  struct backend_cuda_info info;
  backend_cuda_info(&info);
  const int world = comm_size(), rank = comm_rank();
  const int C = s.vit.in_chans;

  if (attn_only) {
    const int Ng = 1 + (G / s.vit.patch) * (G / s.vit.patch), Nl = 1 + (Lsz / s.vit.patch) * (Lsz / s.vit.patch);
    attn_bench(cuda_ops, B, Ng, Nl, nl, s.vit.heads, s.vit.dim / s.vit.heads, s.vit.depth);
    comm_finalize();
    return 0;
  }
  /* model, loss, optimizer, communicator */
  struct bench_step st;
  bench_step_init(&st, ops, &s, B, nl, G, Lsz);
  struct dino_model *m = st.m;
#ifdef HAVE_NCCL
  struct grad_comm *gc = use_mpi ? grad_comm_mpi_create(ops, 0) : grad_comm_nccl_create(ops, 0);
#else
  (void)use_mpi;
  struct grad_comm *gc = grad_comm_mpi_create(ops, 0);
#endif
  struct bench_ctx bc = {gc, &m->tt};

  /* raw data: a pool of 2B synthetic uint16 images per rank, augmented on the GPU every step */
  struct augment a;
  bench_step_augment(&a, C, raw_side, raw_side, G, Lsz, nl, 0.2f);
  struct augment_gpu *ag = augment_gpu_create(&a, B);
  const int pool = 2 * B; /* steps alternate between its two halves */
  const size_t isz = (size_t)C * raw_side * raw_side;
  uint16_t *raw = malloc((size_t)pool * isz * sizeof *raw);
  if (!raw) SCD_FAIL("out of host memory for %d raw images", pool);
  struct rng r;
  rng_init(&r, 40, RNG_DOMAIN_TEST, (uint64_t)rank, 0);
  for (size_t i = 0; i < (size_t)pool * isz; i++) raw[i] = (uint16_t)(200 + rng_below(&r, 3000));
  int64_t *ids = malloc((size_t)B * sizeof *ids);

  struct bench_step_flops sf;
  bench_step_count_flops(&s, B, nl, G, Lsz, &sf);
  const int Ng = sf.Ng, Nl = sf.Nl;
  const double fwd_s = sf.fwd_student, fwd_t = sf.fwd_teacher, flops = sf.total;
  const int fp32 = !strcmp(precision, "fp32");
  double peak = 0, bw = 0;
  gpu_peaks(info.name, fp32, &peak, &bw);
  if (peak_tflops > 0) peak = peak_tflops * 1e12;
  if (peak_gbps > 0) bw = peak_gbps * 1e9;
  ops_traffic_set_peaks(peak, bw);
  if (rank == 0) {
    printf("GPU %s (sm_%d%d, %d SMs, %.1f GiB), CUDA runtime %d, driver %d, cuBLASLt %zu; %d rank%s\n",
           info.name, info.cc_major, info.cc_minor, info.sms, info.mem_total / 1073741824.0,
           info.runtime_version, info.driver_version, info.cublaslt_version, world, world > 1 ? "s" : "");
    printf("ViT D=%d depth=%d heads=%d p=%d C=%d, head K=%d; %s, attention %s, bias gradients by %s, "
           "gradients over %s; batch %d per GPU: 2 x %d px (%d tokens) + %d x %d px (%d tokens); %zu "
           "parameters; activations %.1f MiB\n",
           s.vit.dim, s.vit.depth, s.vit.heads, s.vit.patch, C, s.head.out_dim, precision,
           backend_cuda_attention(), backend_cuda_bias_grad(), gc->name, B, G, Ng, nl, Lsz, Nl, tensors_numel(&m->tt),
           m->acts.size / 1048576.0);
    printf("FLOP per step and GPU: %.1f GFLOP = 3 x %.1f (student forward + backward) + %.1f (teacher "
           "forward); matmuls and attention, 2 per multiply-add; MFU against %.1f TFLOP/s%s\n",
           flops / 1e9, fwd_s / 1e9, fwd_t / 1e9, peak / 1e12, peak > 0 ? "" : " (unknown: -T)");
  }

  const int total = warm + steps;
  double *t_step = calloc((size_t)total, sizeof(double)), *t_data = calloc((size_t)total, sizeof(double));
  double *t_dhost = calloc((size_t)total, sizeof(double));
  double *t_comm = calloc((size_t)total, sizeof(double)), *t_model = calloc((size_t)total, sizeof(double));
  int64_t *next_ids = malloc((size_t)B * sizeof *next_ids);
  float *gl = NULL, *lc = NULL;
  double last_loss = 0;
  int started = 0; /* the next full step's crops are being made */
  struct ops_traffic tr = {0}; /* of the last model-only step */
  struct ops_profile pf = {0}; /* of the profiled step (-x) */
  for (int phase = 0; phase < 2; phase++) { /* 0: full steps, 1: model only (crops reused) */
    for (int it = 0; it < total + (phase == 1 && prof); it++) {
      const int profiling = phase == 1 && it == total;
      if (profiling) {
        backend_cuda_set_profiling(1);
        ops->profile(NULL, 1);
      }
      ops->sync();
      comm_barrier();
      ops_traffic_read(NULL, 1);
      const double t0 = wtime(), h0 = augment_gpu_host_seconds(ag), c0 = gc->wait_seconds;
      if (phase == 0) {
        if (!started) {
          batch_ids(ids, it, B, pool, rank);
          augment_gpu_start(ag, raw + (size_t)((it % 2) * B) * isz, ids, B, 0); /* first + B <= pool */
        } else {
          memcpy(ids, next_ids, (size_t)B * sizeof *ids);
        }
        started = 0;
        augment_gpu_take(ag, &gl, &lc);
      }
      struct dino_droppath dp = {40, (uint64_t)it, ids};
      dino_model_forward(m, gl, lc, B, &dp);
      last_loss = dino_loss_forward(&st.loss, m->sh.logits, m->th.logits, m->sh.dlogits, B, 0);
      dino_loss_update_center(&st.loss, B, world, grad_comm_allreduce_cb, gc);
      gc->begin_step(gc, m->grads, m->tt.size);
      dino_model_backward(m, B, on_ready, &bc);
      if (phase == 0 && !serial_aug && it + 1 < total) { /* the next batch, behind this backward */
        augment_gpu_mark(ag);
        batch_ids(next_ids, it + 1, B, pool, rank);
        augment_gpu_start(ag, raw + (size_t)(((it + 1) % 2) * B) * isz, next_ids, B, 0);
        started = 1;
      }
      gc->finish(gc);
      optim_update(&st.opt, m->student, m->grads, 3.0, NULL, 1e-4, 0.04, 0, m->teacher, 0.996);
      ops->sync();
      const double t1 = wtime();
      const double data = phase == 0 ? augment_gpu_exposed_seconds(ag) : 0;
      if (profiling) {
        if (rank == 0) {
          printf("profiled model step, ops by GPU time:\n");
          backend_cuda_profile_report(stdout, 0);
        }
        ops->profile(&pf, 1);
        backend_cuda_set_profiling(0);
        if (rank == 0) {
          printf("profiled model step: GPU time in GEMMs %.1f ms, attention %.1f ms, other ops %.1f ms "
                 "(%ld ops); step %.1f ms with the event overhead\n",
                 1e3 * pf.gemm_s, 1e3 * pf.attn_s, 1e3 * pf.other_s, pf.calls, 1e3 * (t1 - t0));
          if (bw > 0 && peak > 0)
            printf("profiled model step against its floor: GEMMs %.2fx (%.0f TFLOP/s), attention %.2fx "
                   "(%.0f TFLOP/s), other ops %.2fx (%.0f GB/s of %.0f)\n",
                   pf.gemm_s / tr.floor_s[TRAFFIC_GEMM], tr.flops[TRAFFIC_GEMM] / pf.gemm_s / 1e12,
                   pf.attn_s / tr.floor_s[TRAFFIC_ATTN], tr.flops[TRAFFIC_ATTN] / pf.attn_s / 1e12,
                   pf.other_s / tr.floor_s[TRAFFIC_OTHER], tr.bytes[TRAFFIC_OTHER] / pf.other_s / 1e9, bw / 1e9);
        }
        continue;
      }
      const double step = t1 - t0, data_host = augment_gpu_host_seconds(ag) - h0;
      const double comm = gc->wait_seconds - c0;
      if (phase == 0) {
        t_step[it] = step;
        t_data[it] = data;
        t_dhost[it] = data_host;
        t_comm[it] = comm;
      } else {
        t_model[it] = step;
        ops_traffic_read(&tr, 0); /* every model-only step calls the same ops */
      }
      if (rank == 0 && (phase == 0 || it == total - 1))
        printf("%s step %2d%s: %.1f ms (data %.1f exposed, augmentation host part %.1f, compute %.1f, comm %.1f); "
               "loss %.4f\n",
               phase ? "model-only" : "full", it, it < warm ? " (warm-up)" : "", 1e3 * step, 1e3 * data,
               1e3 * (phase ? 0 : data_host), 1e3 * (step - data - comm), 1e3 * comm, last_loss);
      if (!isfinite(last_loss)) SCD_FAIL("non-finite loss at step %d", it);
    }
  }
  if (rank == 0) backend_cuda_gemm_tuning_report();
  const double ts = median(t_step + warm, steps), td = median(t_data + warm, steps);
  const double tdh = median(t_dhost + warm, steps);
  const double tc = median(t_comm + warm, steps), tm = median(t_model + warm, steps);
  size_t in_use, peak_b, fr, tot;
  backend_cuda_memory(&in_use, &peak_b, &fr, &tot);
  if (rank == 0) {
    const double mfu = peak > 0 ? flops / ts / peak : NAN, mfu_m = peak > 0 ? flops / tm / peak : NAN;
    printf("median of %d steps: %.1f ms per step = data %.1f + compute %.1f + comm %.1f; %.1f images/s "
           "per GPU, %.1f in all; MFU %.1f%%\n",
           steps, 1e3 * ts, 1e3 * td, 1e3 * (ts - td - tc), 1e3 * tc, B / ts, (double)B * world / ts,
           100 * mfu);
    printf("data: %.1f ms exposed (the backend's stream idle for the augmentation); its host part (raw batch "
           "into pinned memory, crop tables) took %.1f ms, %s\n", 1e3 * td, 1e3 * tdh,
           serial_aug ? "serially (-S)" : "behind the queued backward");
    if (st.ls.on)
      printf("fp16 loss scale after the steps: %g, %lld step%s skipped for non-finite gradients\n", (double)st.ls.scale,
             (long long)st.ls.skipped, st.ls.skipped == 1 ? "" : "s");
    printf("model only (no augmentation): %.1f ms per step, %.1f images/s per GPU, MFU %.1f%%\n", 1e3 * tm,
           B / tm, 100 * mfu_m);
    const double floor_s = tr.floor_s[TRAFFIC_GEMM] + tr.floor_s[TRAFFIC_ATTN] + tr.floor_s[TRAFFIC_OTHER];
    const double moved = tr.bytes[TRAFFIC_GEMM] + tr.bytes[TRAFFIC_ATTN] + tr.bytes[TRAFFIC_OTHER];
    printf("model step's ops: %.1f GFLOP, %.2f GB moved at least (GEMMs %.2f, attention %.2f, other ops %.2f GB), "
           "%ld calls\n", (tr.flops[TRAFFIC_GEMM] + tr.flops[TRAFFIC_ATTN]) / 1e9, moved / 1e9,
           tr.bytes[TRAFFIC_GEMM] / 1e9, tr.bytes[TRAFFIC_ATTN] / 1e9, tr.bytes[TRAFFIC_OTHER] / 1e9,
           tr.calls[TRAFFIC_GEMM] + tr.calls[TRAFFIC_ATTN] + tr.calls[TRAFFIC_OTHER]);
    if (floor_s > 0)
      printf("floor of the model step at %.0f TFLOP/s and %.0f GB/s: %.2f ms (GEMMs %.2f, attention %.2f, other "
             "ops %.2f); measured %.2fx the floor, MFU at the floor %.1f%%\n",
             peak / 1e12, bw / 1e9, 1e3 * floor_s, 1e3 * tr.floor_s[TRAFFIC_GEMM], 1e3 * tr.floor_s[TRAFFIC_ATTN],
             1e3 * tr.floor_s[TRAFFIC_OTHER], tm / floor_s, 100 * flops / floor_s / peak);
    else
      printf("floor of the model step: unknown peaks (-T TFLOP/s, -W GB/s)\n");
    printf("memory: backend peak %.1f MiB (parameters, gradients, moments, activations, scratch); device "
           "in use %.1f of %.1f MiB (with CUDA context, cuBLASLt, NCCL)\n",
           peak_b / 1048576.0, (tot - fr) / 1048576.0, tot / 1048576.0);
    printf("RESULT precision=%s attention=%s comm=%s batch=%d world=%d step_ms=%.2f data_ms=%.2f compute_ms=%.2f comm_ms=%.2f "
           "images_per_s=%.1f mfu=%.4f model_step_ms=%.2f model_images_per_s=%.1f model_mfu=%.4f "
           "peak_mib=%.0f device_used_mib=%.0f gflop=%.1f floor_ms=%.2f traffic_gb=%.2f gelu=%s gelu_in_gemm=%d "
           "data_host_ms=%.2f aug=%s prof_gemm_ms=%.2f prof_attn_ms=%.2f prof_other_ms=%.2f\n",
           precision, backend_cuda_attention(), gc->name, B, world, 1e3 * ts, 1e3 * td, 1e3 * (ts - td - tc), 1e3 * tc, B / ts, mfu, 1e3 * tm,
           B / tm, mfu_m, peak_b / 1048576.0, (tot - fr) / 1048576.0, flops / 1e9, 1e3 * floor_s, moved / 1e9,
           s.vit.gelu_approx ? "tanh" : "none",
           cuda_ops->gelu_in_gemm ? cuda_ops->gelu_in_gemm(s.vit.gelu_approx) : 0, 1e3 * tdh,
           serial_aug ? "serial" : "overlapped", 1e3 * pf.gemm_s, 1e3 * pf.attn_s, 1e3 * pf.other_s);
    /* The same headline numbers as BENCH lines for bench/run_all (bench/bench_result.h). */
    char name[64], notes[512];
    snprintf(name, sizeof name, "gpu_train.%s.%s%s%s", precision, backend_cuda_attention(),
             strcmp(backend_cuda_bias_grad(), "epilogue") ? ".bgrad-kernel" : "",
             s.vit.gelu_approx ? ".gelu-tanh" : "");
    if (world > 1) snprintf(name + strlen(name), sizeof name - strlen(name), ".%dgpu", world);
    snprintf(notes, sizeof notes, "%s, ViT D=%d L=%d p=%d C=%d K=%d, batch %d per GPU, %d rank(s), grads over %s, "
             "median of %d", info.name, s.vit.dim, s.vit.depth, s.vit.patch, C, s.head.out_dim, B, world, gc->name,
             steps);
    bench_result(name, "step_time", 1e3 * ts, "ms", "%s", notes);
    bench_result(name, "images_per_s", B / ts, "images/s", "per GPU; %s", notes);
    bench_result(name, "images_per_s_total", (double)B * world / ts, "images/s", "all %d GPU(s)", world);
    bench_result(name, "mfu", 100 * mfu, "%", "%.1f GFLOP per step and GPU against %.1f TFLOP/s", flops / 1e9,
                 peak / 1e12);
    bench_result(name, "data_time", 1e3 * td, "ms", serial_aug ? "augmentation on the GPU, serial, per step" :
                 "augmentation on the GPU, exposed (the next batch made during backward), per step");
    bench_result(name, "compute_time", 1e3 * (ts - td - tc), "ms", "forward, loss, backward, optimizer, per step");
    bench_result(name, "comm_time", 1e3 * tc, "ms", "exposed gradient and centre all-reduce wait, per step");
    bench_result(name, "model_images_per_s", B / tm, "images/s", "per GPU, crops reused (no augmentation)");
    bench_result(name, "model_mfu", 100 * mfu_m, "%", "crops reused (no augmentation)");
    if (floor_s > 0)
      bench_result(name, "model_vs_floor", tm / floor_s, "x", "model step over its floor (%.2f ms: per op, FLOPs at "
                   "%.0f TFLOP/s or bytes at %.0f GB/s)", 1e3 * floor_s, peak / 1e12, bw / 1e9);
    bench_result(name, "peak_memory", peak_b / 1048576.0, "MiB", "backend peak (device in use %.0f MiB)",
                 (tot - fr) / 1048576.0);
  }
  free(t_step), free(t_data), free(t_dhost), free(t_comm), free(t_model), free(raw), free(ids), free(next_ids);
  augment_gpu_destroy(ag);
  gc->destroy(gc);
  bench_step_free(&st);
  comm_finalize();
  return 0;
}
