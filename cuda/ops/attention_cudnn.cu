/* attention_cudnn.cu - attention through cuDNN's fused scaled-dot-product attention: one graph
 * node per direction (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR, cuDNN 9.17 and later), so
 * the backend C API describes it in a few descriptors.  bf16 only (cuDNN's fused attention has no
 * fp32 form), head dimension a multiple of 8 up to 128.
 *
 * The tensors are views of the backend's own layouts, no copies: q, k and v are strided views of
 * qkv [B, N, 3, H, hd] as cuDNN's logical [B, H, N, hd]; out, dout [B, N, H, hd]; the row
 * statistics (natural-log log-sum-exp of the scaled scores) are the flash kernel's state
 * [B, H, N] fp32.  The GEMM form (attention_gemm.cu) writes and reads that state too, so each
 * direction may fall back to it on its own: a shape for which cuDNN builds no plan (an older GPU or
 * cuDNN, a size its engines refuse) says why once and runs as batched GEMMs.
 *
 * Plans are built on first use of a shape and cached (a training run sees two or three shapes).
 * Deterministic engines are preferred; if cuDNN offers only nondeterministic ones the run says so
 * once, since restarts are then no longer bit-identical. */
#include "build_config.h"

#include <stdio.h>
#include <string.h>

#include "cuda/ops/cuda_internal.h"

extern "C" {
#include "core/log.h"
}

#if defined(HAVE_CUDNN)
#include <cudnn.h>
#endif

#if defined(HAVE_CUDNN) && CUDNN_VERSION >= 91700

/* Tensor ids of the variant packs. */
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_DO, U_DQ, U_DK, U_DV };

#define SDPA_MAX_DESCS 24
#define SDPA_CACHE 32

struct sdpa_plan {
  int used, bwd, B, N, H, hd, stats;
  int layout;                /* SDPA_L_*: how the tensors lie (the backend's own: SDPA_L_QKV) */
  int ok;                    /* 0: cuDNN cannot run this shape; take the GEMM form */
  cudnnBackendDescriptor_t plan;
  int64_t workspace;
  /* every descriptor the plan was built from, destroyed with it */
  cudnnBackendDescriptor_t keep[SDPA_MAX_DESCS];
  int nkeep;
};

static cudnnHandle_t sdpa_handle;
static struct sdpa_plan sdpa_cache[SDPA_CACHE];
static int sdpa_next; /* ring position for eviction */
static long sdpa_runs[2]; /* forward, backward */

/* Building a plan: the first failing call is remembered, not fatal (the caller falls back). */
struct build {
  struct sdpa_plan *p;
  cudnnStatus_t st;
  char why[320];
};

static void build_fail(struct build *b, cudnnStatus_t st, const char *what) {
  if (b->st != CUDNN_STATUS_SUCCESS) return;
  b->st = st;
  char last[200] = "";
  cudnnGetLastErrorString(last, sizeof last);
  snprintf(b->why, sizeof b->why, "%s: %s%s%s", what, cudnnGetErrorString(st), *last ? "; " : "",
           last);
}

static cudnnBackendDescriptor_t build_desc(struct build *b, cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = NULL;
  if (b->st != CUDNN_STATUS_SUCCESS) return NULL;
  const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
  if (st != CUDNN_STATUS_SUCCESS) {
    build_fail(b, st, "cudnnBackendCreateDescriptor");
    return NULL;
  }
  SCD_ASSERT(b->p->nkeep < SDPA_MAX_DESCS);
  b->p->keep[b->p->nkeep++] = d;
  return d;
}

static void build_set(struct build *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                      cudnnBackendAttributeType_t type, int64_t n, const void *v, const char *what) {
  if (b->st != CUDNN_STATUS_SUCCESS) return;
  const cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, n, v);
  if (st != CUDNN_STATUS_SUCCESS) build_fail(b, st, what);
}

static void build_finalize(struct build *b, cudnnBackendDescriptor_t d, const char *what) {
  if (b->st != CUDNN_STATUS_SUCCESS) return;
  const cudnnStatus_t st = cudnnBackendFinalize(d);
  if (st != CUDNN_STATUS_SUCCESS) build_fail(b, st, what);
}

/* A 4-d tensor [dim] with strides [str]; by_value: a host scalar passed at execution. */
static cudnnBackendDescriptor_t build_tensor(struct build *b, int64_t uid, cudnnDataType_t type,
                                             const int64_t dim[4], const int64_t str[4],
                                             int by_value, const char *what) {
  cudnnBackendDescriptor_t t = build_desc(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t align = 16;
  const bool byval = by_value != 0;
  build_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
  build_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, what);
  build_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, what);
  build_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
  build_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
  if (by_value) build_set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval, what);
  build_finalize(b, t, what);
  return t;
}

/* Whether engine config `cfg` is free of the numerical note `note`. */
static int cfg_lacks_note(cudnnBackendDescriptor_t cfg, cudnnBackendNumericalNote_t note) {
  cudnnBackendDescriptor_t eng = NULL;
  int64_t n = 0;
  int lacks = 1;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS)
    return 1;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               &eng) == CUDNN_STATUS_SUCCESS) {
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS)
      for (int64_t i = 0; i < n; i++)
        if (notes[i] == note) lacks = 0;
  }
  cudnnBackendDestroyDescriptor(eng);
  return lacks;
}

/* The execution plan of op graph `graph`: the first engine configuration of heuristics mode A
 * that finalizes, deterministic ones first. */
static void build_plan(struct build *b, cudnnBackendDescriptor_t graph) {
  cudnnBackendDescriptor_t heur = build_desc(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  build_set(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph,
            "heuristics");
  build_set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics");
  build_finalize(b, heur, "heuristics");
  if (b->st != CUDNN_STATUS_SUCCESS) return;
  int64_t count = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
  if (st != CUDNN_STATUS_SUCCESS) return build_fail(b, st, "heuristics results");
  if (count <= 0) {
    b->st = CUDNN_STATUS_NOT_SUPPORTED;
    snprintf(b->why, sizeof b->why, "no engine of this cuDNN runs it");
    return;
  }
  if (count > 8) count = 8;
  cudnnBackendDescriptor_t cfg[8];
  for (int64_t i = 0; i < count; i++) cfg[i] = build_desc(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  if (b->st != CUDNN_STATUS_SUCCESS) return;
  int64_t got = 0;
  st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                count, &got, cfg);
  if (st != CUDNN_STATUS_SUCCESS) return build_fail(b, st, "heuristics results");
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (int pass = 0; pass < 2; pass++)
    for (int64_t i = 0; i < got; i++) {
      if (cfg_lacks_note(cfg[i], CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) != (pass == 0)) continue;
      cudnnBackendDescriptor_t plan = NULL;
      if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
          CUDNN_STATUS_SUCCESS)
        continue;
      last = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                      &sdpa_handle);
      if (last == CUDNN_STATUS_SUCCESS)
        last = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
      if (last == CUDNN_STATUS_SUCCESS) last = cudnnBackendFinalize(plan);
      int64_t n = 0, ws = 0;
      if (last == CUDNN_STATUS_SUCCESS)
        last = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                        CUDNN_TYPE_INT64, 1, &n, &ws);
      if (last != CUDNN_STATUS_SUCCESS) {
        cudnnBackendDestroyDescriptor(plan);
        continue;
      }
      if (pass == 1)
        log_warn("cuDNN attention %s: only a nondeterministic engine runs this shape; restarts are "
                 "not bit-identical to an uninterrupted run",
                 b->p->bwd ? "backward" : "forward");
      b->p->plan = plan;
      b->p->workspace = ws;
      return;
    }
  build_fail(b, last, "execution plan (no engine configuration finalizes)");
}

/* Tensor layouts.  SDPA_L_QKV is the backend's: Q, K, V and their gradients are views of
 * qkv [B, N, 3, H, hd], O and dO [B, N, H, hd].  The others exist for k_attn_cudnn_probe, which asks
 * which layouts this cuDNN builds plans for: SDPA_L_GRAD_BHSD the gradients packed [B, H, N, hd],
 * SDPA_L_BHSD every tensor so, SDPA_L_BSHD every tensor [B, N, H, hd] on its own. */
enum { SDPA_L_QKV, SDPA_L_GRAD_BHSD, SDPA_L_BHSD, SDPA_L_BSHD, SDPA_L_COUNT };

/* Logical dims [B, H, N, hd] and the strides of tensor uid in plan p's layout. */
static void role_strides(const struct sdpa_plan *p, int64_t uid, int64_t dim[4], int64_t str[4]) {
  const int64_t B = p->B, N = p->N, H = p->H, hd = p->hd;
  dim[0] = B, dim[1] = H, dim[2] = N, dim[3] = hd;
  const int grad = uid == U_DQ || uid == U_DK || uid == U_DV;
  const int qkv = uid == U_Q || uid == U_K || uid == U_V || grad;
  int bhsd = p->layout == SDPA_L_BHSD || (p->layout == SDPA_L_GRAD_BHSD && grad);
  if (uid == U_STATS) { /* [B, H, N, 1] fp32 */
    dim[3] = 1;
    str[0] = H * N, str[1] = N, str[2] = 1, str[3] = 1;
  } else if (bhsd) {
    str[0] = H * N * hd, str[1] = N * hd, str[2] = hd, str[3] = 1;
  } else if (qkv && p->layout != SDPA_L_BSHD) {
    str[0] = N * 3 * H * hd, str[1] = hd, str[2] = 3 * H * hd, str[3] = 1;
  } else {
    str[0] = N * H * hd, str[1] = hd, str[2] = H * hd, str[3] = 1;
  }
}

/* The operation's tensors, in the order of the variant packs below. */
struct sdpa_role {
  cudnnBackendAttributeName_t attr;
  int64_t uid;
};
static const struct sdpa_role sdpa_fwd_roles[] = {
    {CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, U_Q},         {CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, U_K},
    {CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, U_V},         {CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, U_O},
    {CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, U_SCALE}, {CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, U_STATS}};
static const struct sdpa_role sdpa_bwd_roles[] = {
    {CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, U_Q},         {CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, U_K},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, U_V},         {CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, U_O},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, U_SCALE}, {CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, U_STATS},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, U_DO},      {CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, U_DQ},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, U_DK},       {CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, U_DV}};

/* Number of tensors of plan p (the forward without statistics leaves the last one out). */
static int sdpa_ntensors(const struct sdpa_plan *p) { return p->bwd ? 10 : p->stats ? 6 : 5; }

static void build_sdpa(struct build *b) {
  struct sdpa_plan *p = b->p;
  int64_t dim[4], str[4];
  const int64_t one[4] = {1, 1, 1, 1};
  const cudnnDataType_t h = CUDNN_DATA_BFLOAT16, f = CUDNN_DATA_FLOAT;
  const struct sdpa_role *role = p->bwd ? sdpa_bwd_roles : sdpa_fwd_roles;
  cudnnBackendDescriptor_t op = build_desc(b, p->bwd ? CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR
                                                     : CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  for (int r = 0; r < sdpa_ntensors(p); r++) {
    const int64_t u = role[r].uid;
    cudnnBackendDescriptor_t t;
    role_strides(p, u, dim, str);
    if (u == U_STATS)
      t = build_tensor(b, u, f, dim, str, 0, "statistics tensor");
    else if (u == U_SCALE)
      t = build_tensor(b, u, f, one, one, 1, "scale tensor");
    else if (u == U_O || u == U_DO)
      t = build_tensor(b, u, h, dim, str, 0, "output tensor");
    else
      t = build_tensor(b, u, h, dim, str, 0, "q, k or v tensor");
    build_set(b, op, role[r].attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "attention operation");
  }
  build_finalize(b, op, p->bwd ? "SDPA backward operation" : "SDPA forward operation");
  cudnnBackendDescriptor_t graph = build_desc(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  build_set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &sdpa_handle,
            "operation graph");
  build_set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op,
            "operation graph");
  build_finalize(b, graph, "operation graph");
  if (b->st == CUDNN_STATUS_SUCCESS) build_plan(b, graph);
}

static void plan_release(struct sdpa_plan *p) {
  if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
  for (int i = p->nkeep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->keep[i]);
  memset(p, 0, sizeof *p);
}

/* Why cuDNN is unusable altogether ("" when it is usable). */
static const char *sdpa_unusable(void) {
  static char why[160];
  static int checked;
  if (checked) return why;
  checked = 1;
  const size_t v = cudnnGetVersion();
  if (v < 91700)
    snprintf(why, sizeof why, "cuDNN %zu.%zu.%zu has no fused attention operation (9.17 or later)",
             v / 10000, v % 10000 / 100, v % 100);
  else if (cu.arch < 80)
    snprintf(why, sizeof why, "cuDNN's fused attention needs compute capability 8.0 or later, this "
             "GPU has %d.%d", cu.arch / 10, cu.arch % 10);
  if (!*why) {
    /* A cuDNN whose sub-libraries are missing or of another version fails here: a reason to run
     * without it, not to stop the job. */
    cudnnStatus_t st = cudnnCreate(&sdpa_handle);
    if (st != CUDNN_STATUS_SUCCESS)
      snprintf(why, sizeof why, "cudnnCreate failed (%s)", cudnnGetErrorString(st));
    else if ((st = cudnnSetStream(sdpa_handle, cu.stream)) != CUDNN_STATUS_SUCCESS)
      snprintf(why, sizeof why, "cudnnSetStream failed (%s)", cudnnGetErrorString(st));
  }
  if (*why) log_warn("cuDNN attention: %s; using batched GEMMs", why);
  return why;
}

/* cuDNN declines plan p's shape (why): the first refusal per direction is a warning, later ones
 * detail. */
static void say_declined(const struct sdpa_plan *p, const char *why) {
  static int said[2];
  (said[p->bwd]++ ? log_detail : log_warn)("cuDNN attention %s for batch %d x %d tokens x %d heads "
                                           "of %d: %s; using batched GEMMs",
                                           p->bwd ? "backward" : "forward", p->B, p->N, p->H, p->hd, why);
}

static struct sdpa_plan *plan_for(int bwd, int B, int N, int H, int hd, int stats) {
  for (int i = 0; i < SDPA_CACHE; i++) {
    struct sdpa_plan *p = &sdpa_cache[i];
    if (p->used && p->bwd == bwd && p->B == B && p->N == N && p->H == H && p->hd == hd &&
        p->stats == stats)
      return p;
  }
  struct sdpa_plan *p = &sdpa_cache[sdpa_next];
  sdpa_next = (sdpa_next + 1) % SDPA_CACHE;
  if (p->used) {
    CHECK_CUDA(cudaStreamSynchronize(cu.stream)); /* a queued execution may still use it */
    plan_release(p);
  }
  p->used = 1, p->bwd = bwd, p->B = B, p->N = N, p->H = H, p->hd = hd, p->stats = stats;
  struct build b;
  memset(&b, 0, sizeof b);
  b.p = p;
  b.st = CUDNN_STATUS_SUCCESS;
  build_sdpa(&b);
  p->ok = b.st == CUDNN_STATUS_SUCCESS;
  if (!p->ok)
    say_declined(p, b.why);
  else
    log_detail("cuDNN attention %s for batch %d x %d tokens x %d heads of %d: plan built, "
               "workspace %lld bytes", bwd ? "backward" : "forward", B, N, H, hd,
               (long long)p->workspace);
  return p;
}

/* Run plan p; ptr[] in the order of its roles above.  0 when cuDNN does not run it after all: an
 * engine may still refuse at execution what it accepted when the plan was built (a stride, an
 * alignment, its resources).  The plan is then marked unusable, which is said like a refusal, and
 * the caller runs the GEMM form on the same state. */
static int plan_run(struct sdpa_plan *p, void **ptr) {
  const struct sdpa_role *role = p->bwd ? sdpa_bwd_roles : sdpa_fwd_roles;
  const int n = sdpa_ntensors(p);
  int64_t uid[10];
  for (int i = 0; i < n; i++) uid[i] = role[i].uid;
  void *ws = cu_scratch(SLOT_CUDNN, p->workspace > 0 ? (size_t)p->workspace : 16);
  cudnnBackendDescriptor_t vp = NULL;
  const char *what = "the variant pack";
  cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
  if (st == CUDNN_STATUS_SUCCESS) {
    what = "execution";
    st = cudnnBackendExecute(sdpa_handle, p->plan, vp);
  }
  char last[200] = "";
  if (st != CUDNN_STATUS_SUCCESS) cudnnGetLastErrorString(last, sizeof last);
  if (vp) CHECK_CUDNN(cudnnBackendDestroyDescriptor(vp));
  if (st == CUDNN_STATUS_SUCCESS) {
    sdpa_runs[p->bwd]++;
    return 1;
  }
  /* A launch that failed leaves its error for the next kernel's check, which would report it as
   * its own; a sticky error (a broken context) comes back at the next synchronisation anyway. */
  const cudaError_t ce = cudaGetLastError();
  char why[512];
  snprintf(why, sizeof why, "%s failed (%s%s%s%s%s)", what, cudnnGetErrorString(st), *last ? "; " : "",
           last, ce != cudaSuccess ? "; CUDA: " : "", ce != cudaSuccess ? cudaGetErrorString(ce) : "");
  p->ok = 0;
  say_declined(p, why);
  return 0;
}

/* cuDNN is told every tensor is 16-byte aligned (the arena's are); anything else is declined, said
 * once.  The caller then runs the GEMM form, or the flash kernel when q, k, v or the output are
 * unaligned too (the GEMM form needs them aligned; the row statistics it writes with a kernel). */
static int aligned16(void *const *p, int n) {
  static int said;
  for (int i = 0; i < n; i++)
    if ((uintptr_t)p[i] & 15) {
      if (!said) log_warn("cuDNN attention: a tensor is not 16-byte aligned; cuDNN does not run it");
      said = 1;
      return 0;
    }
  return 1;
}

int k_attn_cudnn_fwd(bf16 *out, float *lse, const bf16 *qkv, int B, int N, int H, int hd,
                     float scale) {
  const size_t head = (size_t)H * hd;
  float s = scale; /* by value: read when the plan is launched */
  void *ptr[6] = {(void *)qkv, (void *)(qkv + head), (void *)(qkv + 2 * head), out, &s, lse};
  if (*sdpa_unusable() || hd % 8 || hd > 128 || !aligned16(ptr, 4) || (lse && !aligned16(ptr + 5, 1)))
    return 0;
  struct sdpa_plan *p = plan_for(0, B, N, H, hd, lse != NULL);
  return p->ok && plan_run(p, ptr);
}

int k_attn_cudnn_bwd(bf16 *dqkv, const bf16 *dout, const bf16 *out, const bf16 *qkv,
                     const float *lse, int B, int N, int H, int hd, float scale) {
  const size_t head = (size_t)H * hd;
  float s = scale;
  void *ptr[10] = {(void *)qkv, (void *)(qkv + head), (void *)(qkv + 2 * head), (void *)out, &s,
                   (void *)lse, (void *)dout, dqkv, dqkv + head, dqkv + 2 * head};
  if (*sdpa_unusable() || hd % 8 || hd > 128 || !aligned16(ptr, 4) || !aligned16(ptr + 5, 5))
    return 0;
  struct sdpa_plan *p = plan_for(1, B, N, H, hd, 1);
  return p->ok && plan_run(p, ptr);
}

const char *k_attn_cudnn_why_not(void) { return sdpa_unusable(); }

/* Which shapes and layouts this cuDNN builds attention plans for, one line each to f: a diagnosis
 * for a cuDNN that declines the backend's layout (tests/gpu/cudnn_probe).  Returns the number of
 * backward plans of the backend's layout that were built. */
int k_attn_cudnn_probe(FILE *f) {
  static const int shapes[][4] = {{128, 197, 6, 64}, {512, 37, 6, 64}, {128, 256, 6, 64},
                                  {128, 128, 6, 64}, {4, 17, 3, 16},   {8, 512, 8, 128}};
  static const char *names[SDPA_L_COUNT] = {"qkv views", "grads BHSD", "all BHSD", "all BSHD"};
  if (*sdpa_unusable()) {
    fprintf(f, "cuDNN attention unusable: %s\n", sdpa_unusable());
    return 0;
  }
  fprintf(f, "cuDNN %zu, attention plans by shape and layout:\n", cudnnGetVersion());
  int built = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
    for (int bwd = 0; bwd < 2; bwd++)
      for (int l = 0; l < SDPA_L_COUNT; l++) {
        struct sdpa_plan p;
        memset(&p, 0, sizeof p);
        p.bwd = bwd, p.B = shapes[si][0], p.N = shapes[si][1], p.H = shapes[si][2];
        p.hd = shapes[si][3], p.stats = 1, p.layout = l;
        struct build b;
        memset(&b, 0, sizeof b);
        b.p = &p;
        b.st = CUDNN_STATUS_SUCCESS;
        build_sdpa(&b);
        const int ok = b.st == CUDNN_STATUS_SUCCESS;
        if (ok && bwd && l == SDPA_L_QKV) built++;
        fprintf(f, "  %s B=%d N=%d H=%d hd=%d %-10s: %s%s\n", bwd ? "backward" : "forward ", p.B, p.N,
                p.H, p.hd, names[l], ok ? "plan built" : "declined: ", ok ? "" : b.why);
        plan_release(&p);
      }
  return built;
}

void k_attn_cudnn_forget(void) {
  int any = 0;
  for (int i = 0; i < SDPA_CACHE; i++) any |= sdpa_cache[i].used;
  if (!any) return;
  CHECK_CUDA(cudaStreamSynchronize(cu.stream)); /* queued executions may still use them */
  for (int i = 0; i < SDPA_CACHE; i++)
    if (sdpa_cache[i].used) plan_release(&sdpa_cache[i]);
  sdpa_next = 0;
}

void k_attn_cudnn_runs(long *fwd, long *bwd) {
  if (fwd) *fwd = sdpa_runs[0];
  if (bwd) *bwd = sdpa_runs[1];
}

#else /* no cuDNN, or one without the fused attention operation */

int k_attn_cudnn_fwd(bf16 *, float *, const bf16 *, int, int, int, int, float) { return 0; }
int k_attn_cudnn_bwd(bf16 *, const bf16 *, const bf16 *, const bf16 *, const float *, int, int, int,
                     int, float) {
  return 0;
}
void k_attn_cudnn_runs(long *fwd, long *bwd) {
  if (fwd) *fwd = 0;
  if (bwd) *bwd = 0;
}
void k_attn_cudnn_forget(void) {}
int k_attn_cudnn_probe(FILE *f) {
  fprintf(f, "cuDNN attention unusable: %s\n", k_attn_cudnn_why_not());
  return 0;
}
const char *k_attn_cudnn_why_not(void) {
#if defined(HAVE_CUDNN)
  return "this build's cuDNN has no fused attention operation (9.17 or later)";
#else
  return "built without cuDNN";
#endif
}

#endif
