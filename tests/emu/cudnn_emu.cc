/* cudnn_emu.cc - host stand-in for the cuDNN calls of the CUDA backend (cuda/ops/attention_cudnn.cu):
 * the backend graph API for one fused scaled-dot-product attention node, forward or backward, so
 * that the cuDNN attention path runs under the CPU emulator of tests/emu/ without libcudnn.
 * "Device" pointers are host pointers; a plan runs on the calling thread after the work queued on
 * the handle's stream (runtime.cc's queues).
 *
 * It checks what real cuDNN would: attribute types and counts per descriptor, finalization order,
 * the SDPA node's tensors (bf16 q, k, v, o of [b, h, s, d] with unit last stride, d a multiple of
 * 8; fp32 statistics [b, h, s, 1]; a by-value fp32 scale), unique tensor ids, and at execution a
 * variant pack naming exactly the graph's tensors, each pointer aligned as declared and its whole
 * strided extent inside one device allocation, plus a large-enough device workspace.  Descriptor
 * types and attributes it does not know print "cudnn_emu: ..." and abort.
 *
 * Engines: heuristics offer two, a nondeterministic one first, so the caller's preference for
 * determinism is exercised.  SCDINO_EMU_CUDNN=nondet offers only the nondeterministic one,
 * =nobwd no engine for the backward node, =none no engine at all, =nohandle fails cudnnCreate as
 * a cuDNN with missing sub-libraries does, =noexec builds plans but fails every execution with
 * CUDNN_STATUS_EXECUTION_FAILED after a failed launch (too many resources requested) the CUDA
 * runtime reports at the next cudaGetLastError (the caller's fallbacks).
 *
 * Numerics: the definition, in double: S = scale q k^T, P = softmax(S), o = P v, stats = the
 * natural-log log-sum-exp of S's rows; backward recomputes P from the given statistics and takes
 * D_i = dO_i . O_i from the given output, as a fused kernel does. */
#include <cuda_bf16.h>
#include <cudnn.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <string>
#include <vector>

#include "tests/emu/emu_internal.h"

struct cudnnContext {
  uint32_t magic;
  cudaStream_t stream;
};

namespace {

constexpr uint32_t MAGIC_HANDLE = 0x63646e68u, MAGIC_DESC = 0x63646e64u, MAGIC_DEAD = 0xdeadu;
constexpr int64_t WORKSPACE = 4096; /* bytes every plan asks for: the workspace path is used */

char last_error[512];

[[noreturn]] void unsupported(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void unsupported(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cudnn_emu: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

/* A failing status with cuDNN's "last error" message, as the real library keeps one. */
cudnnStatus_t fail(cudnnStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudnnStatus_t fail(cudnnStatus_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return st;
}

size_t elem_size(cudnnBackendAttributeType_t t) {
  switch (t) {
  case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
  case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
  case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
  case CUDNN_TYPE_INT64: return sizeof(int64_t);
  case CUDNN_TYPE_FLOAT: return sizeof(float);
  case CUDNN_TYPE_DOUBLE: return sizeof(double);
  case CUDNN_TYPE_VOID_PTR: return sizeof(void *);
  case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
  case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
  case CUDNN_TYPE_NUMERICAL_NOTE: return sizeof(cudnnBackendNumericalNote_t);
  default: unsupported("attribute type %d", (int)t);
  }
}

struct Attr {
  cudnnBackendAttributeType_t type;
  int64_t n;
  std::vector<unsigned char> bytes;
};

struct Desc {
  uint32_t magic;
  cudnnBackendDescriptorType_t type;
  bool final;
  std::map<int, Attr> attr;
  /* derived: engine index and whether it is nondeterministic (ENGINECFG, ENGINE) */
  int engine = -1;
  bool nondet = false;
  const Desc *graph = nullptr; /* ENGINECFG, EXECUTION_PLAN: the graph it runs */
};

/* Which attributes each descriptor type takes, and of what type. */
struct Rule {
  cudnnBackendDescriptorType_t desc;
  cudnnBackendAttributeName_t name;
  cudnnBackendAttributeType_t type;
};
const Rule rules[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
     CUDNN_TYPE_BACKEND_DESCRIPTOR},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR},
};

/* The SDPA node's tensor attributes: forward, then backward. */
struct Role {
  cudnnBackendAttributeName_t name;
  const char *what;
  bool required, kv, stats, scale; /* kv: a key/value-side tensor (sequence length s_kv) */
};
const Role fwd_roles[] = {
    {CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, "q", true, false, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, "k", true, true, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, "v", true, true, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, "o", true, false, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, "scale", true, false, false, true},
    {CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, "stats", false, false, true, false},
};
const Role bwd_roles[] = {
    {CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, "q", true, false, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, "k", true, true, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, "v", true, true, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, "o", true, false, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, "dO", true, false, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, "stats", true, false, true, false},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, "scale", true, false, false, true},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, "dQ", true, false, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, "dK", true, true, false, false},
    {CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, "dV", true, true, false, false},
};

bool is_op(cudnnBackendDescriptorType_t t) {
  return t == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR || t == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR;
}
const Role *roles_of(const Desc *op, int *n) {
  const bool f = op->type == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR;
  *n = f ? (int)(sizeof fwd_roles / sizeof fwd_roles[0]) : (int)(sizeof bwd_roles / sizeof bwd_roles[0]);
  return f ? fwd_roles : bwd_roles;
}

Desc *as_desc(cudnnBackendDescriptor_t d, const char *fn) {
  Desc *p = (Desc *)d;
  if (!p || p->magic != MAGIC_DESC) unsupported("%s: not a live descriptor (%p)", fn, d);
  return p;
}

const Attr *get(const Desc *d, int name) {
  auto it = d->attr.find(name);
  return it == d->attr.end() ? nullptr : &it->second;
}
const int64_t *i64s(const Desc *d, int name, int64_t *n) {
  const Attr *a = get(d, name);
  *n = a ? a->n : 0;
  return a ? (const int64_t *)a->bytes.data() : nullptr;
}
int64_t i64(const Desc *d, int name, int64_t dflt) {
  int64_t n;
  const int64_t *v = i64s(d, name, &n);
  return n == 1 ? v[0] : dflt;
}
bool boolean(const Desc *d, int name) {
  const Attr *a = get(d, name);
  return a && *(const bool *)a->bytes.data();
}
Desc *child(const Desc *d, int name) {
  const Attr *a = get(d, name);
  return a && a->n == 1 ? *(Desc *const *)a->bytes.data() : nullptr;
}

/* ---- finalization ---------------------------------------------------------------------------- */

cudnnStatus_t finalize_tensor(Desc *d) {
  const Attr *dt = get(d, CUDNN_ATTR_TENSOR_DATA_TYPE);
  int64_t nd, ns;
  const int64_t *dim = i64s(d, CUDNN_ATTR_TENSOR_DIMENSIONS, &nd), *str = i64s(d, CUDNN_ATTR_TENSOR_STRIDES, &ns);
  if (!dt || !dim || !str || !get(d, CUDNN_ATTR_TENSOR_UNIQUE_ID) || !get(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT))
    return fail(CUDNN_STATUS_BAD_PARAM, "tensor: data type, dimensions, strides, unique id and byte alignment "
                                        "are required");
  const cudnnDataType_t t = *(const cudnnDataType_t *)dt->bytes.data();
  if (t != CUDNN_DATA_FLOAT && t != CUDNN_DATA_BFLOAT16) unsupported("tensor data type %d", (int)t);
  if (nd != ns || nd < 1 || nd > 8)
    return fail(CUDNN_STATUS_BAD_PARAM, "tensor: %lld dimensions, %lld strides", (long long)nd, (long long)ns);
  for (int64_t i = 0; i < nd; i++)
    if (dim[i] < 1 || str[i] < 1) return fail(CUDNN_STATUS_BAD_PARAM, "tensor: dimension or stride < 1");
  const int64_t al = i64(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 0);
  if (al < 1 || (al & (al - 1))) return fail(CUDNN_STATUS_BAD_PARAM, "tensor: byte alignment %lld", (long long)al);
  if (boolean(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL)) unsupported("virtual tensors");
  return CUDNN_STATUS_SUCCESS;
}

const int64_t *dims(const Desc *t) {
  int64_t n;
  return i64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, &n);
}
const int64_t *strides(const Desc *t) {
  int64_t n;
  return i64s(t, CUDNN_ATTR_TENSOR_STRIDES, &n);
}
cudnnDataType_t dtype(const Desc *t) { return *(const cudnnDataType_t *)get(t, CUDNN_ATTR_TENSOR_DATA_TYPE)->bytes.data(); }
int64_t rank(const Desc *t) {
  int64_t n;
  i64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, &n);
  return n;
}

cudnnStatus_t finalize_sdpa(Desc *op) {
  int nr;
  const Role *r = roles_of(op, &nr);
  for (auto &kv : op->attr) {
    bool known = false;
    for (int i = 0; i < nr; i++) known |= kv.first == (int)r[i].name;
    if (!known) unsupported("SDPA node attribute %d", kv.first);
  }
  /* q [b, h, sq, d], k [b, h, skv, d], v [b, h, skv, dv], rows of o and dO [b, h, sq, dv] */
  std::map<int64_t, int> uids;
  int64_t b = -1, h = -1, sq = -1, skv = -1, dqk = -1;
  for (int i = 0; i < nr; i++) {
    const Desc *t = child(op, r[i].name);
    if (!t) {
      if (r[i].required) return fail(CUDNN_STATUS_BAD_PARAM, "SDPA node: tensor %s missing", r[i].what);
      continue;
    }
    if (t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR || !t->final)
      return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "SDPA node: %s is not a finalized tensor", r[i].what);
    if (uids[i64(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0)]++)
      return fail(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, "SDPA node: unique id of %s used twice", r[i].what);
    if (rank(t) != 4) return fail(CUDNN_STATUS_BAD_PARAM, "SDPA node: %s is not 4-d", r[i].what);
    const int64_t *dm = dims(t);
    const bool byval = boolean(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
    if (r[i].scale) {
      if (!byval || dtype(t) != CUDNN_DATA_FLOAT || dm[0] * dm[1] * dm[2] * dm[3] != 1)
        return fail(CUDNN_STATUS_BAD_PARAM, "SDPA node: scale must be one by-value fp32 value");
      continue;
    }
    if (byval) return fail(CUDNN_STATUS_BAD_PARAM, "SDPA node: %s is by value", r[i].what);
    if (strides(t)[3] != 1)
      return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, "SDPA node: %s has a last stride other than 1", r[i].what);
    if (r[i].stats) {
      if (dtype(t) != CUDNN_DATA_FLOAT || dm[3] != 1)
        return fail(CUDNN_STATUS_BAD_PARAM, "SDPA node: statistics must be fp32 [b, h, s_q, 1]");
      continue;
    }
    if (dtype(t) != CUDNN_DATA_BFLOAT16)
      return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "SDPA node: %s is not bf16", r[i].what);
    if (b < 0) b = dm[0], h = dm[1];
    if (dm[0] != b || dm[1] != h) return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "SDPA node: batch or heads of %s", r[i].what);
    int64_t &s = r[i].kv ? skv : sq;
    if (s < 0) s = dm[2];
    if (dm[2] != s) return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "SDPA node: sequence length of %s", r[i].what);
    if (dqk < 0) dqk = dm[3];
    if (dm[3] != dqk) unsupported("different head dimensions of q, k and v");
  }
  const Desc *st = child(op, r[0].name == CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC ? CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC
                                                                               : CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC);
  if (st && (dims(st)[0] != b || dims(st)[1] != h || dims(st)[2] != sq))
    return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "SDPA node: statistics are not [b, h, s_q, 1]");
  if (dqk % 8 || dqk > 256)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "SDPA node: head dimension %lld (a multiple of 8 up to 256)",
                (long long)dqk);
  return CUDNN_STATUS_SUCCESS;
}

/* The op graph's only node. */
const Desc *node(const Desc *graph) { return child(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS); }

cudnnStatus_t finalize(Desc *d) {
  switch (d->type) {
  case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return finalize_tensor(d);
  case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR: return finalize_sdpa(d);
  case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: {
    const Attr *ops = get(d, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    if (!get(d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE) || !ops)
      return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: handle and operations are required");
    if (ops->n != 1) unsupported("operation graphs of %lld nodes", (long long)ops->n);
    const Desc *op = node(d);
    if (!is_op(op->type)) unsupported("operation graph node of descriptor type %d", (int)op->type);
    if (!op->final) return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "operation graph: node not finalized");
    return CUDNN_STATUS_SUCCESS;
  }
  case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
    const Desc *g = child(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    if (!g || !g->final || !get(d, CUDNN_ATTR_ENGINEHEUR_MODE))
      return fail(CUDNN_STATUS_BAD_PARAM, "heuristics: a finalized operation graph and a mode are required");
    d->graph = g;
    return CUDNN_STATUS_SUCCESS;
  }
  case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
    const Desc *cfg = child(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    if (!get(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE) || !cfg || !cfg->final || cfg->engine < 0)
      return fail(CUDNN_STATUS_BAD_PARAM, "execution plan: handle and an engine configuration from heuristics are "
                                          "required");
    d->graph = cfg->graph;
    d->engine = cfg->engine;
    return CUDNN_STATUS_SUCCESS;
  }
  case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: {
    const Attr *u = get(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), *p = get(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    if (!u || !p || u->n != p->n)
      return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: as many unique ids as data pointers are required");
    return CUDNN_STATUS_SUCCESS;
  }
  case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
  case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return CUDNN_STATUS_SUCCESS;
  default: unsupported("finalize of descriptor type %d", (int)d->type);
  }
}

/* SCDINO_EMU_CUDNN, checked: "" or one of the modes of the file header.  Read at each use, as tests
 * change it between calls. */
std::string emu_mode(void) {
  const char *e = getenv("SCDINO_EMU_CUDNN");
  const std::string mode = e ? e : "";
  if (!mode.empty() && mode != "none" && mode != "nobwd" && mode != "nondet" && mode != "nohandle" &&
      mode != "noexec")
    unsupported("SCDINO_EMU_CUDNN=%s (none, nobwd, nondet, nohandle or noexec)", e);
  return mode;
}

/* Engines heuristics offer for graph g: {nondeterministic?} per engine. */
std::vector<bool> engines_for(const Desc *g) {
  const std::string mode = emu_mode();
  if (mode == "none") return {};
  if (mode == "nobwd" && node(g)->type == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR) return {};
  if (mode == "nondet") return {true};
  return {true, false};
}

/* ---- execution ------------------------------------------------------------------------------- */

struct View {
  const Desc *t;
  void *p;
  float at(int64_t b, int64_t h, int64_t s, int64_t d) const {
    const int64_t *st = strides(t);
    const int64_t o = b * st[0] + h * st[1] + s * st[2] + d * st[3];
    return dtype(t) == CUDNN_DATA_FLOAT ? ((const float *)p)[o] : __bfloat162float(((const __nv_bfloat16 *)p)[o]);
  }
  void set(int64_t b, int64_t h, int64_t s, int64_t d, double v) const {
    const int64_t *st = strides(t);
    const int64_t o = b * st[0] + h * st[1] + s * st[2] + d * st[3];
    if (dtype(t) == CUDNN_DATA_FLOAT)
      ((float *)p)[o] = (float)v;
    else
      ((__nv_bfloat16 *)p)[o] = __float2bfloat16_rn((float)v);
  }
};

/* Bytes from a tensor's pointer to the end of its last element. */
size_t extent(const Desc *t) {
  const int64_t *dm = dims(t), *st = strides(t);
  int64_t last = 0;
  for (int64_t i = 0; i < rank(t); i++) last += (dm[i] - 1) * st[i];
  return (size_t)(last + 1) * (dtype(t) == CUDNN_DATA_FLOAT ? 4 : 2);
}

void run_fwd(const View &q, const View &k, const View &v, const View &o, const View *stats, double scale) {
  const int64_t *dm = dims(q.t), B = dm[0], H = dm[1], Sq = dm[2], D = dm[3], Skv = dims(k.t)[2];
  std::vector<double> s(Skv);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < Sq; i++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Skv; j++) {
          double acc = 0;
          for (int64_t d = 0; d < D; d++) acc += (double)q.at(b, h, i, d) * k.at(b, h, j, d);
          s[j] = scale * acc;
          mx = fmax(mx, s[j]);
        }
        for (int64_t j = 0; j < Skv; j++) sum += (s[j] = exp(s[j] - mx));
        for (int64_t d = 0; d < D; d++) {
          double acc = 0;
          for (int64_t j = 0; j < Skv; j++) acc += s[j] * v.at(b, h, j, d);
          o.set(b, h, i, d, acc / sum);
        }
        if (stats) stats->set(b, h, i, 0, mx + log(sum));
      }
}

void run_bwd(const View &q, const View &k, const View &v, const View &o, const View &dout, const View &stats,
             const View &dq, const View &dk, const View &dv, double scale) {
  const int64_t *dm = dims(q.t), B = dm[0], H = dm[1], Sq = dm[2], D = dm[3], Skv = dims(k.t)[2];
  std::vector<double> P(Sq * Skv), dS(Sq * Skv);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      for (int64_t i = 0; i < Sq; i++) {
        double Di = 0;
        for (int64_t d = 0; d < D; d++) Di += (double)dout.at(b, h, i, d) * o.at(b, h, i, d);
        const double lse = stats.at(b, h, i, 0);
        for (int64_t j = 0; j < Skv; j++) {
          double s = 0, dp = 0;
          for (int64_t d = 0; d < D; d++) {
            s += (double)q.at(b, h, i, d) * k.at(b, h, j, d);
            dp += (double)dout.at(b, h, i, d) * v.at(b, h, j, d);
          }
          const double p = exp(scale * s - lse);
          P[i * Skv + j] = p;
          dS[i * Skv + j] = p * (dp - Di);
        }
      }
      for (int64_t i = 0; i < Sq; i++)
        for (int64_t d = 0; d < D; d++) {
          double acc = 0;
          for (int64_t j = 0; j < Skv; j++) acc += dS[i * Skv + j] * k.at(b, h, j, d);
          dq.set(b, h, i, d, scale * acc);
        }
      for (int64_t j = 0; j < Skv; j++)
        for (int64_t d = 0; d < D; d++) {
          double ak = 0, av = 0;
          for (int64_t i = 0; i < Sq; i++) {
            ak += dS[i * Skv + j] * q.at(b, h, i, d);
            av += P[i * Skv + j] * dout.at(b, h, i, d);
          }
          dk.set(b, h, j, d, scale * ak);
          dv.set(b, h, j, d, av);
        }
    }
}

} // namespace

/* ---- the API ----------------------------------------------------------------------------------- */

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *cudnnGetErrorString(cudnnStatus_t st) {
  switch (st) {
  case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
  case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
  case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
  case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
  case CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES: return "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES";
  case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
  case CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE: return "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE";
  case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
  case CUDNN_STATUS_NOT_SUPPORTED_SHAPE: return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
  case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT: return "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT";
  case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE: return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
  case CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED: return "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED";
  case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
  default: return "CUDNN_STATUS (other)";
  }
}

void cudnnGetLastErrorString(char *message, size_t max_size) {
  if (!message || !max_size) return;
  snprintf(message, max_size, "%s", last_error);
  last_error[0] = 0;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
  if (emu_mode() == "nohandle") return CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED;
  *h = new cudnnContext{MAGIC_HANDLE, 0};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  if (!h || h->magic != MAGIC_HANDLE) unsupported("cudnnDestroy: not a live handle");
  h->magic = MAGIC_DEAD;
  delete h;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  if (!h || h->magic != MAGIC_HANDLE) unsupported("cudnnSetStream: not a live handle");
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *d) {
  switch (type) {
  case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR:
  case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
  case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
  case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
  case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
  case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
  case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: break;
  default: unsupported("descriptor type %d", (int)type);
  }
  Desc *p = new Desc();
  p->magic = MAGIC_DESC;
  p->type = type;
  p->final = false;
  *d = p;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  Desc *p = as_desc(d, "cudnnBackendDestroyDescriptor");
  p->magic = MAGIC_DEAD;
  delete p;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t n, const void *v) {
  Desc *p = as_desc(d, "cudnnBackendSetAttribute");
  if (p->final) return fail(CUDNN_STATUS_BAD_PARAM, "set attribute %d on a finalized descriptor", (int)name);
  cudnnBackendAttributeType_t want = type;
  bool known = false;
  if (is_op(p->type)) {
    int nr;
    const Role *r = roles_of(p, &nr);
    for (int i = 0; i < nr; i++) known |= r[i].name == name;
    want = CUDNN_TYPE_BACKEND_DESCRIPTOR;
  } else
    for (const Rule &r : rules)
      if (r.desc == p->type && r.name == name) known = true, want = r.type;
  if (!known) unsupported("attribute %d of descriptor type %d", (int)name, (int)p->type);
  if (type != want)
    return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "attribute %d: type %d, expected %d", (int)name, (int)type,
                (int)want);
  if (n < 0 || (n > 0 && !v)) return fail(CUDNN_STATUS_BAD_PARAM, "attribute %d: %lld elements at %p", (int)name, (long long)n, v);
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    for (int64_t i = 0; i < n; i++) {
      const Desc *c = as_desc(((const cudnnBackendDescriptor_t *)v)[i], "cudnnBackendSetAttribute (element)");
      if (!c->final)
        return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "attribute %d: element not finalized", (int)name);
    }
  Attr a;
  a.type = type;
  a.n = n;
  const size_t bytes = (size_t)n * elem_size(type);
  a.bytes.assign((const unsigned char *)v, (const unsigned char *)v + bytes);
  p->attr[name] = a;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  Desc *p = as_desc(d, "cudnnBackendFinalize");
  if (p->final) return fail(CUDNN_STATUS_BAD_PARAM, "descriptor finalized twice");
  const cudnnStatus_t st = finalize(p);
  if (st == CUDNN_STATUS_SUCCESS) p->final = true;
  return st;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t *count,
                                       void *out) {
  Desc *p = as_desc(d, "cudnnBackendGetAttribute");
  if (!p->final) return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "get attribute %d of an unfinalized descriptor", (int)name);
  if (p->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "heuristics results");
    const std::vector<bool> eng = engines_for(p->graph);
    const int64_t n = requested < (int64_t)eng.size() ? requested : (int64_t)eng.size();
    for (int64_t i = 0; i < n; i++) {
      Desc *c = as_desc(((cudnnBackendDescriptor_t *)out)[i], "heuristics results (element)");
      if (c->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
        return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "heuristics results: elements must be engine configs");
      c->engine = (int)i, c->nondet = eng[i], c->graph = p->graph, c->final = true;
    }
    *count = requested ? n : (int64_t)eng.size();
    return CUDNN_STATUS_SUCCESS;
  }
  if (p->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE) {
    if (type != CUDNN_TYPE_BACKEND_DESCRIPTOR || requested < 1) return fail(CUDNN_STATUS_BAD_PARAM, "engine config engine");
    Desc *e = as_desc(*(cudnnBackendDescriptor_t *)out, "engine config engine (element)");
    if (e->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR) return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "not an engine");
    e->engine = p->engine, e->nondet = p->nondet, e->graph = p->graph, e->final = true;
    *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if (p->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR && name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) {
    if (type != CUDNN_TYPE_NUMERICAL_NOTE) return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "numerical notes");
    cudnnBackendNumericalNote_t notes[2] = {CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC};
    const int64_t n = p->nondet ? 2 : 1;
    for (int64_t i = 0; i < n && i < requested; i++) ((cudnnBackendNumericalNote_t *)out)[i] = notes[i];
    *count = requested < n ? requested : n;
    return CUDNN_STATUS_SUCCESS;
  }
  if (p->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
    if (type != CUDNN_TYPE_INT64 || requested < 1) return fail(CUDNN_STATUS_BAD_PARAM, "workspace size");
    *(int64_t *)out = WORKSPACE;
    *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  unsupported("get attribute %d of descriptor type %d", (int)name, (int)p->type);
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan_d, cudnnBackendDescriptor_t vp_d) {
  if (!h || h->magic != MAGIC_HANDLE) unsupported("cudnnBackendExecute: not a live handle");
  emu_stream_force(h->stream); /* its stream's earlier work first; this plan runs now */
  const Desc *plan = as_desc(plan_d, "cudnnBackendExecute (plan)"), *vp = as_desc(vp_d, "cudnnBackendExecute (pack)");
  if (plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !plan->final || vp->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR ||
      !vp->final)
    return fail(CUDNN_STATUS_BAD_PARAM, "execute: a finalized plan and variant pack are required");
  const Desc *op = node(plan->graph);
  int nr;
  const Role *r = roles_of(op, &nr);
  int64_t nu;
  const int64_t *uid = i64s(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &nu);
  void *const *ptr = (void *const *)get(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->bytes.data();
  std::vector<View> view(nr);
  int used = 0;
  for (int i = 0; i < nr; i++) {
    view[i].t = child(op, r[i].name);
    view[i].p = nullptr;
    if (!view[i].t) continue;
    const int64_t want = i64(view[i].t, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
    int hits = 0;
    for (int64_t j = 0; j < nu; j++)
      if (uid[j] == want) view[i].p = ptr[j], hits++;
    if (hits != 1)
      return fail(CUDNN_STATUS_BAD_PARAM, "execute: tensor %s (id %lld) appears %d times in the variant pack", r[i].what,
                  (long long)want, hits);
    used++;
    if (!view[i].p) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "execute: tensor %s is NULL", r[i].what);
    if (r[i].scale) continue; /* a host value */
    const int64_t al = i64(view[i].t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 1);
    if ((uintptr_t)view[i].p % (uintptr_t)al)
      return fail(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, "execute: tensor %s at %p is not %lld-byte aligned", r[i].what,
                  view[i].p, (long long)al);
    if (!emu_in_device_memory(view[i].p, extent(view[i].t)))
      emu_die("cudnn_emu: tensor %s at %p (%zu bytes) is not wholly in one device allocation", r[i].what, view[i].p,
              extent(view[i].t));
  }
  if (used != nu) return fail(CUDNN_STATUS_BAD_PARAM, "execute: the variant pack has %lld entries, the graph %d tensors", (long long)nu, used);
  const Attr *ws = get(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
  void *w = ws && ws->n == 1 ? *(void *const *)ws->bytes.data() : nullptr;
  if (!w || !emu_in_device_memory(w, WORKSPACE))
    emu_die("cudnn_emu: the workspace %p is not %lld bytes of device memory", w, (long long)WORKSPACE);
  if (emu_mode() == "noexec") {
    emu_launch_error(cudaErrorLaunchOutOfResources, "cudnn_emu engine", "too many resources requested");
    return fail(CUDNN_STATUS_EXECUTION_FAILED, "execute: the engine's kernel did not launch (SCDINO_EMU_CUDNN=noexec)");
  }
  memset(w, 0x7f, WORKSPACE); /* used, as a real plan would */
  /* roles: q k v o scale [stats] forward; q k v o dO stats scale dQ dK dV backward */
  if (op->type == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR)
    run_fwd(view[0], view[1], view[2], view[3], view[5].t ? &view[5] : nullptr, *(const float *)view[4].p);
  else
    run_bwd(view[0], view[1], view[2], view[3], view[4], view[5], view[7], view[8], view[9], *(const float *)view[6].p);
  emu_count_launch("cudnnBackendExecute", 0, 0);
  return CUDNN_STATUS_SUCCESS;
}

} // extern "C"
