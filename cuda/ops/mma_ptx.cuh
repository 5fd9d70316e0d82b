/* mma_ptx.cuh - the PTX instructions of the tensor-core flash kernels (attention_mma.cu): ldmatrix,
 * mma.sync m16n8k16 (bf16, f16) and m16n8k8 (f16), cp.async, with the element types they serve:
 * bf16 and f16 (compute capability 8.0) and h75, f16 as a T4 (7.5) runs it.  Under the CPU emulator
 * of make check (tests/emu/cuda_emu.h) the same functions compute from the PTX ISA's fragment
 * tables.  Code compiled for an architecture without an instruction leaves it out (MM_ARCH), and
 * mm_built says which element types' kernels a pass of nvcc compiles at all. */
#ifndef SCDINO_MMA_PTX_CUH
#define SCDINO_MMA_PTX_CUH

#include <stdint.h>

#include <type_traits>

#include "cuda/ops/cuda_internal.h"

/* The architecture this pass of nvcc compiles for (the host pass: the newest, so that its code
 * is the same as the device's for sm_80 and later). */
#if defined(__CUDA_ARCH__)
#define MM_ARCH __CUDA_ARCH__
#else
#define MM_ARCH 1000
#endif

/* The sm_75 form of f16 (compute capability 7.5, a T4): mma.sync m16n8k8 in pairs for one
 * m16n8k16 product (the pair's fragments are the k16 one's halves: a0 a1 b0, then a2 a3 b1) and
 * plain 16-byte copies where sm_80 has cp.async.  A type of its own, f16's storage, so that the
 * kernels are instantiated for it; &gpu arch = 75 runs it on newer GPUs too. */
struct h75 {
  f16 x;
};
__device__ __forceinline__ float ldf(const h75 *p) { return __half2float(p->x); }

/* Whether T's kernels use cp.async (sm_80) or plain copies (h75). */
template <typename T> struct mm_async {
  static const bool value = true;
};
template <> struct mm_async<h75> {
  static const bool value = false;
};

/* The PTX instructions; the CPU emulator of make check (tests/emu/cuda_emu.h) computes the same. */
#if defined(SCDINO_CUDA_EMU_H)
__device__ __forceinline__ void mm_ldsm4(uint32_t r[4], const void *p) { emu_ldmatrix_x4(r, p, 0); }
__device__ __forceinline__ void mm_ldsm4_t(uint32_t r[4], const void *p) { emu_ldmatrix_x4(r, p, 1); }
template <typename T>
__device__ __forceinline__ void mm_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if (std::is_same<T, bf16>::value) {
    emu_mma_m16n8k16_bf16(c, a, b0, b1);
  } else if (std::is_same<T, f16>::value) {
    emu_mma_m16n8k16_f16(c, a, b0, b1);
  } else {
    emu_mma_m16n8k8_f16(c, a[0], a[1], b0);
    emu_mma_m16n8k8_f16(c, a[2], a[3], b1);
  }
}
/* the emulator's memory is the host's: a copy is complete when issued */
template <typename T> __device__ __forceinline__ void mm_cp16(void *dst, const void *src, int valid) {
  if (valid) memcpy(dst, src, 16);
  else memset(dst, 0, 16);
}
template <typename T> __device__ __forceinline__ void mm_cp_commit(void) {}
template <typename T, int n> __device__ __forceinline__ void mm_cp_wait(void) {}
#else
__device__ __forceinline__ uint32_t mm_smem(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* ldmatrix: compute capability 7.5 and later */
__device__ __forceinline__ void mm_ldsm4(uint32_t r[4], const void *p) {
#if MM_ARCH >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(mm_smem(p)));
#endif
}

__device__ __forceinline__ void mm_ldsm4_t(uint32_t r[4], const void *p) {
#if MM_ARCH >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(mm_smem(p)));
#endif
}

/* c += a b for one 16 x 8 tile: m16n8k16 (sm_80) in bf16 or f16, or two m16n8k8 f16 (sm_75:
 * h75; also where f16 is compiled for sm_75, whose kernels then never run). */
__device__ __forceinline__ void mm_mma_k8(float c[4], uint32_t a0, uint32_t a1, uint32_t b) {
#if MM_ARCH >= 750
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(b));
#endif
}
template <typename T>
__device__ __forceinline__ void mm_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if MM_ARCH >= 800
  if (std::is_same<T, bf16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    return;
  }
  if (std::is_same<T, f16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    return;
  }
#endif
  if (std::is_same<T, bf16>::value) return; /* no bf16 product below sm_80 (never launched there) */
  mm_mma_k8(c, a[0], a[1], b0);
  mm_mma_k8(c, a[2], a[3], b1);
}

/* 16 bytes from global to shared memory without passing through registers (cp.async, sm_80), zeros
 * when !valid (a source size of 0 reads nothing); the copies of a commit group land by
 * mm_cp_wait<T, n>, which waits until at most n younger groups are still in flight.  h75 (and
 * code compiled for sm_75) copies through registers at once, so that a commit and a wait have
 * nothing to do: the double buffer then only saves the barrier between the copy and the products. */
template <typename T> __device__ __forceinline__ void mm_cp16(void *dst, const void *src, int valid) {
#if MM_ARCH >= 800
  if (mm_async<T>::value) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(mm_smem(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
    return;
  }
#endif
  *(uint4 *)dst = valid ? *(const uint4 *)src : make_uint4(0, 0, 0, 0);
}
template <typename T> __device__ __forceinline__ void mm_cp_commit(void) {
#if MM_ARCH >= 800
  if (mm_async<T>::value) asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <typename T, int n> __device__ __forceinline__ void mm_cp_wait(void) {
#if MM_ARCH >= 800
  if (mm_async<T>::value) asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
#endif
}
#endif

/* Whether this pass of nvcc compiles T's kernels: the others are launched only on GPUs of another
 * compute capability (bf16 and the sm_80 form of f16 on 8.0 and later, h75 on 7.5 and later; none
 * on 7.0), so their bodies are left out there, which keeps the build's time down. */
template <typename T> __host__ __device__ constexpr bool mm_built() {
  return MM_ARCH >= (std::is_same<T, h75>::value ? 750 : 800);
}

/* Two floats rounded to T and packed, the first in the low half. */
template <typename T> __device__ __forceinline__ uint32_t mm_pack(float lo, float hi) {
  if (std::is_same<T, bf16>::value) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(const uint32_t *)&v;
  }
  const __half2 v = __floats2half2_rn(lo, hi);
  return *(const uint32_t *)&v;
}

#endif
