/* cuda_emu.h - what the CPU emulator of the CUDA backend adds to a .cu file compiled as host C++.
 *
 * tests/emu/build.sh rewrites each .cu file of cuda/ (tests/emu/rewrite.py: launches become emu_launch
 * calls, __shared__ becomes static, extern __shared__ arrays point at the block's dynamic shared
 * memory) and compiles it with g++ -include this header.  Every CUDA thread of a block is a fiber
 * (tests/emu/fiber.cc); blocks run one after another, so a static stands for a block's shared
 * memory.  __syncthreads and the warp shuffles are barriers of the fibers, which is also how a
 * barrier that some live threads never reach is found (the launch fails with a message).
 * Device pointers are host pointers (tests/emu/runtime.cc). */
#ifndef SCDINO_CUDA_EMU_H
#define SCDINO_CUDA_EMU_H

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

/* Runs body(arg) once per thread of every block (fiber.cc); checks the configuration as the
 * runtime would (threads per block, dynamic shared memory against the kernel's limit) and records
 * a launch error for cudaGetLastError instead of running. */
void emu_run(const emu_config &c, const char *name, const void *kernel, void (*body)(void *), void *arg);

template <typename... P> struct emu_call {
  void (*k)(P...);
  std::tuple<typename std::decay<P>::type...> args;
  static void run(void *self) {
    emu_call *c = (emu_call *)self;
    std::apply(c->k, c->args);
  }
};

/* The arguments are evaluated once, converted to the kernel's parameter types, and every thread
 * calls the kernel with the same copies, as CUDA passes them. */
template <typename... P, typename... A>
void emu_launch(const emu_config &c, const char *name, void (*k)(P...), A &&...a) {
  emu_call<P...> call{k, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)};
  emu_run(c, name, (const void *)k, &emu_call<P...>::run, &call);
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
