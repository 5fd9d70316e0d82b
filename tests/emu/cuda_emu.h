/* cuda_emu.h - what the CPU emulator of the CUDA backend adds to a .cu file compiled as host C++.
 *
 * tests/emu/emu.am rewrites each .cu file of cuda/ (tests/emu/rewrite.py: launches become emu_launch
 * calls, __shared__ becomes static, extern __shared__ arrays point at the block's dynamic shared
 * memory) and compiles it with g++ -include this header.  Every CUDA thread of a block is a fiber
 * (tests/emu/fiber.cc); blocks run one after another, so a static stands for a block's shared
 * memory.  __syncthreads and the warp shuffles are barriers of the fibers, which is also how a
 * barrier that some live threads never reach is found (the launch fails with a message).
 * Device pointers are host pointers (tests/emu/runtime.cc). */
#ifndef SCDINO_CUDA_EMU_H
#define SCDINO_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

/* ---- the launch ------------------------------------------------------------------------------- */

struct emu_config {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
};
static inline emu_config emu_cfg(dim3 g, dim3 b, size_t smem = 0, cudaStream_t s = 0) { return {g, b, smem, s}; }

/* Checks the configuration as the runtime would (threads per block, dynamic shared memory against
 * the kernel's limit; a launch error for cudaGetLastError instead of running), then queues the
 * kernel on its stream: when it runs, body(arg) once per thread of every block (fiber.cc), then
 * drop(arg). */
void emu_run(const emu_config &c, const char *name, const void *kernel, void (*body)(void *), void *arg,
             void (*drop)(void *));

template <typename... P> struct emu_call {
  void (*k)(P...);
  std::tuple<typename std::decay<P>::type...> args;
  static void run(void *self) {
    emu_call *c = (emu_call *)self;
    std::apply(c->k, c->args);
  }
  static void drop(void *self) { delete (emu_call *)self; }
};

/* The arguments are evaluated once, at the launch, converted to the kernel's parameter types, and
 * every thread calls the kernel with the same copies, as CUDA passes them. */
template <typename... P, typename... A>
void emu_launch(const emu_config &c, const char *name, void (*k)(P...), A &&...a) {
  emu_call<P...> *call = new emu_call<P...>{k, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)};
  emu_run(c, name, (const void *)k, &emu_call<P...>::run, call, &emu_call<P...>::drop);
}

/* The C++ forms cuda_runtime.h declares only for nvcc. */
template <typename T> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, T *kernel) {
  return cudaFuncGetAttributes(a, (const void *)kernel);
}
template <typename T> static inline cudaError_t cudaFuncSetAttribute(T *kernel, cudaFuncAttribute attr, int v) {
  return cudaFuncSetAttribute((const void *)kernel, attr, v);
}

/* ---- thread coordinates and barriers ---------------------------------------------------------- */

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

void emu_syncthreads(void);
void emu_syncwarp(void);
void *emu_dynamic_smem(void);
/* Static shared memory [p, p + n): filled with 0xff bytes by the first thread of each block that
 * reaches its declaration (rewrite.py), as dynamic shared memory is at the start of each block. */
void emu_shared_fresh(void *p, size_t n);
uint64_t *emu_shfl_slots(void); /* one word per thread of the block */
unsigned emu_tid(void);         /* linear thread index in the block */

static inline void __syncthreads(void) { emu_syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)mask;
  emu_syncwarp();
}

/* A warp shuffle: every lane posts its value, the warp meets, each reads its source lane, and the
 * warp meets again before a slot may be overwritten. */
template <typename T> static inline T emu_shfl(T v, unsigned src_lane) {
  static_assert(sizeof(T) <= 8, "shuffle of more than 8 bytes");
  uint64_t *slot = emu_shfl_slots();
  const unsigned tid = emu_tid(), base = tid & ~31u;
  memcpy(&slot[tid], &v, sizeof v);
  emu_syncwarp();
  T r;
  memcpy(&r, &slot[base + (src_lane & 31u)], sizeof r);
  emu_syncwarp();
  return r;
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  (void)mask;
  const unsigned lane = emu_tid() & 31u, w = (unsigned)width;
  const unsigned src = (lane & ~(w - 1)) | ((lane ^ (unsigned)lane_mask) & (w - 1));
  return emu_shfl(v, src);
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  (void)mask;
  const unsigned lane = emu_tid() & 31u, w = (unsigned)width;
  return emu_shfl(v, (lane & ~(w - 1)) | ((unsigned)src_lane & (w - 1)));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  const unsigned lane = emu_tid() & 31u, w = (unsigned)width, in = lane & (w - 1);
  return emu_shfl(v, in + delta < w ? lane + delta : lane);
}

/* ---- warp matrix operations (nvcuda::wmma, 16 x 16 x 16 only) ----------------------------------- */

/* Fragments are opaque in CUDA (which lane holds which element is unspecified); here lane l holds
 * elements 8l .. 8l+7 of the 16 x 16 tile in row-major order, so a kernel that assumes any
 * particular mapping is not helped.  Loads and stores check what the CUDA documentation requires
 * (a 256-bit aligned pointer, ldm a multiple of 16 bytes); mma_sync is a warp exchange through a
 * per-warp buffer, products summed in fp32 in k order. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator implements 16 x 16 x 16 fragments only");
  enum { num_elements = 8 };
  T x[8];
};

void emu_wmma_check(const void *p, unsigned ldm, size_t esize, const char *what);
float *emu_wmma_buffer(void); /* 3 x 256 floats for the calling thread's warp */

template <typename T> static inline float emu_wmma_f(T v) { return (float)v; }
static inline float emu_wmma_f(__nv_bfloat16 v) { return __bfloat162float(v); }
static inline float emu_wmma_f(__half v) { return __half2float(v); }
template <typename T> static inline T emu_wmma_t(float v) { return (T)v; }
template <> inline __nv_bfloat16 emu_wmma_t<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> inline __half emu_wmma_t<__half>(float v) { return __float2half_rn(v); }

/* element e of the calling lane's share: row e / 16, column e % 16 of the tile */
static inline unsigned emu_wmma_elem(int i) { return (emu_tid() & 31u) * 8u + (unsigned)i; }

template <typename Use, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
  static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load takes a layout");
  emu_wmma_check(p, ldm, sizeof(T), "load_matrix_sync");
  const bool col = std::is_same<L, col_major>::value;
  for (int i = 0; i < 8; i++) {
    const unsigned e = emu_wmma_elem(i), r = e / 16, c = e % 16;
    f.x[i] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
  }
}
template <typename T>
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T> &f, const T *p, unsigned ldm,
                                    layout_t layout) {
  emu_wmma_check(p, ldm, sizeof(T), "load_matrix_sync");
  for (int i = 0; i < 8; i++) {
    const unsigned e = emu_wmma_elem(i), r = e / 16, c = e % 16;
    f.x[i] = layout == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
  }
}
template <typename T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T> &f, unsigned ldm,
                                     layout_t layout) {
  emu_wmma_check(p, ldm, sizeof(T), "store_matrix_sync");
  for (int i = 0; i < 8; i++) {
    const unsigned e = emu_wmma_elem(i), r = e / 16, c = e % 16;
    (layout == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[i];
  }
}
template <typename Use, typename T, typename L, typename V>
static inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, V v) {
  for (int i = 0; i < 8; i++) f.x[i] = emu_wmma_t<T>((float)v);
}
/* d = a b + c; every lane posts its shares, the warp meets, each computes its share of d, and the
 * warp meets again before the buffer may be written. */
template <typename TA, typename LA, typename TB, typename LB, typename TC>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, TC> &d,
                            const fragment<matrix_a, 16, 16, 16, TA, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, TB, LB> &b,
                            const fragment<accumulator, 16, 16, 16, TC> &c) {
  float *buf = emu_wmma_buffer(), *A = buf, *Bm = buf + 256, *C = buf + 512;
  for (int i = 0; i < 8; i++) {
    const unsigned e = emu_wmma_elem(i);
    A[e] = emu_wmma_f(a.x[i]);
    Bm[e] = emu_wmma_f(b.x[i]);
    C[e] = emu_wmma_f(c.x[i]);
  }
  emu_syncwarp();
  float r[8];
  for (int i = 0; i < 8; i++) {
    const unsigned e = emu_wmma_elem(i), row = e / 16, col = e % 16;
    float acc = 0.0f;
    for (int k = 0; k < 16; k++) acc += A[row * 16 + k] * Bm[k * 16 + col];
    r[i] = acc + C[e];
  }
  emu_syncwarp();
  for (int i = 0; i < 8; i++) d.x[i] = emu_wmma_t<TC>(r[i]);
}
} // namespace wmma
} // namespace nvcuda

/* ---- mma.sync m16n8k16 (bf16, f16), m16n8k8 (f16) and ldmatrix (attention_mma.cu's PTX) ---------- */

/* ldmatrix .x4 of b16: lane l gives the address of row l % 8 of matrix l / 8 and receives, of each
 * matrix i, elements 2 (l % 4) and 2 (l % 4) + 1 of row l / 4 (trans: of column l / 4, rows
 * 2 (l % 4) and 2 (l % 4) + 1), the first in the low half. */
static inline void emu_ldmatrix_x4(uint32_t r[4], const void *p, int trans) {
  const unsigned lane = emu_tid() & 31u, g = lane >> 2, t = lane & 3u;
  for (unsigned i = 0; i < 4; i++) {
    uint16_t lo, hi;
    if (!trans) {
      const uint16_t *row = (const uint16_t *)__shfl_sync(~0u, p, (int)(8 * i + g));
      lo = row[2 * t], hi = row[2 * t + 1];
    } else {
      const uint16_t *r0 = (const uint16_t *)__shfl_sync(~0u, p, (int)(8 * i + 2 * t));
      const uint16_t *r1 = (const uint16_t *)__shfl_sync(~0u, p, (int)(8 * i + 2 * t + 1));
      lo = r0[g], hi = r1[g];
    }
    r[i] = (uint32_t)lo | (uint32_t)hi << 16;
  }
}

static inline float emu_bf16_lo(uint32_t v) {
  const uint32_t b = v << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static inline float emu_bf16_hi(uint32_t v) { return emu_bf16_lo(v >> 16); }

static inline float emu_f16_lo(uint32_t v) {
  __half_raw r;
  r.x = (unsigned short)(v & 0xffffu);
  return __half2float(__half(r));
}
static inline float emu_f16_hi(uint32_t v) { return emu_f16_lo(v >> 16); }

/* c += a b for the 16 x K tile (K = 16 or 8): the fragments of the PTX ISA (g = lane / 4,
 * t = lane % 4): a0 = A[g][2t..], a1 = A[g+8][2t..], and for K = 16 a2 = A[g][2t+8..],
 * a3 = A[g+8][2t+8..]; b0 = B[2t..][g], and for K = 16 b1 = B[2t+8..][g]; c0, c1 = C[g][2t, 2t+1],
 * c2, c3 = C[g+8][2t, 2t+1].  Elements decode as bf16 or f16 (f16: nonzero).  Every lane posts its
 * shares in the warp's buffer, the warp meets, each sums its outputs (k in order), and the warp
 * meets again before the buffer may be written. */
static inline void emu_mma_m16n8(float c[4], const uint32_t *a, const uint32_t *b, int K, int f16) {
  float *buf = nvcuda::wmma::emu_wmma_buffer(), *A = buf, *Bm = buf + 256; /* A[16][K], B[K][8] */
  const unsigned lane = emu_tid() & 31u, g = lane >> 2, t = lane & 3u;
  const unsigned ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
  for (int i = 0; i < K / 4; i++) {
    A[ar[i] * K + ac[i]] = f16 ? emu_f16_lo(a[i]) : emu_bf16_lo(a[i]);
    A[ar[i] * K + ac[i] + 1] = f16 ? emu_f16_hi(a[i]) : emu_bf16_hi(a[i]);
  }
  for (int i = 0; i < K / 8; i++) {
    Bm[(2 * t + 8 * i) * 8 + g] = f16 ? emu_f16_lo(b[i]) : emu_bf16_lo(b[i]);
    Bm[(2 * t + 8 * i + 1) * 8 + g] = f16 ? emu_f16_hi(b[i]) : emu_bf16_hi(b[i]);
  }
  emu_syncwarp();
  float r[4];
  for (int e = 0; e < 4; e++) {
    const unsigned row = g + (e >> 1) * 8, col = 2 * t + (e & 1);
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += A[row * K + k] * Bm[k * 8 + col];
    r[e] = c[e] + acc;
  }
  emu_syncwarp();
  for (int e = 0; e < 4; e++) c[e] = r[e];
}
/* mma.sync m16n8k16 with bf16 or f16 operands (compute capability 8.0), m16n8k8 with f16 (7.5). */
static inline void emu_mma_m16n8k16_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  const uint32_t b[2] = {b0, b1};
  emu_mma_m16n8(c, a, b, 16, 0);
}
static inline void emu_mma_m16n8k16_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  const uint32_t b[2] = {b0, b1};
  emu_mma_m16n8(c, a, b, 16, 1);
}
static inline void emu_mma_m16n8k8_f16(float c[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  const uint32_t a[2] = {a0, a1};
  emu_mma_m16n8(c, a, &b0, 8, 1);
}

/* ---- atomics (fibers switch only at barriers: a read-modify-write is atomic) ------------------ */

/* Blocks run one after another and memory is the host's: every write is visible at once. */
static inline void __threadfence(void) {}

template <typename T> static inline T atomicAdd(T *p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T> static inline T atomicMax(T *p, T v) {
  const T old = *p;
  if (v > old) *p = v;
  return old;
}
template <typename T> static inline T atomicMin(T *p, T v) {
  const T old = *p;
  if (v < old) *p = v;
  return old;
}

/* ---- device math that host libm lacks (the build adds -ffp-contract=off: no fused a*b+c) -------- */

static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fdividef(float a, float b) { return a / b; } /* the device's is approximate */
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline float __saturatef(float a) { return a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a; }
#ifndef rsqrtf
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
#endif
template <typename T> static inline T __ldg(const T *p) { return *p; }
/* The device's min and max overloads (mixed signedness included, as CUDA's). */
template <typename A, typename B> static inline typename std::common_type<A, B>::type min(A a, B b) {
  return b < a ? b : a;
}
template <typename A, typename B> static inline typename std::common_type<A, B>::type max(A a, B b) {
  return a < b ? b : a;
}

#endif
