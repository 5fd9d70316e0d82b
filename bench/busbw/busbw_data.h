/* busbw_data.h - exactly checkable benchmark data: input values, expected results, element codecs.
 *
 * Shared by the host code (C) and the device kernels (bench/busbw/busbw_kernels.cu), so both sides
 * generate and check the very same numbers.  Every value is a small integer (or a power of two for
 * prod) chosen so that the reduction over any number of ranks is exactly representable in the
 * element type and independent of the order of operations: sum, prod, min and max are checked for
 * equality (0 ulp); avg on floating types allows (nranks+1) machine epsilons, because NCCL
 * pre-multiplies by 1/nranks in the element type.  Each expected value has a closed form, so a
 * check costs O(1) per element whatever the number of ranks. */
#ifndef SCDINO_BUSBW_DATA_H
#define SCDINO_BUSBW_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define BUSBW_HD static inline __host__ __device__
#else
#define BUSBW_HD static inline
#endif

enum busbw_coll { BUSBW_ALL_REDUCE, BUSBW_REDUCE_SCATTER, BUSBW_ALL_GATHER, BUSBW_BROADCAST, BUSBW_NCOLL };

enum busbw_type {
  BUSBW_INT8,
  BUSBW_UINT8,
  BUSBW_INT32,
  BUSBW_UINT32,
  BUSBW_INT64,
  BUSBW_UINT64,
  BUSBW_HALF,
  BUSBW_FLOAT,
  BUSBW_DOUBLE,
  BUSBW_BFLOAT16,
  BUSBW_NTYPE
};

/* BUSBW_NOP is the "none" of the non-reducing collectives (all_gather, broadcast). */
enum busbw_op { BUSBW_SUM, BUSBW_PROD, BUSBW_MAX, BUSBW_MIN, BUSBW_AVG, BUSBW_NOP };

/* Everything the value of one element depends on. */
struct busbw_gen {
  int coll, type, op;
  int nranks, rank, root;
  uint64_t rep;   /* changes at every checked iteration, so a stale result never passes */
  uint64_t block; /* per-rank block of reduce_scatter / all_gather, in elements */
};

BUSBW_HD size_t busbw_type_size(int t) {
  switch (t) {
  case BUSBW_INT8:
  case BUSBW_UINT8: return 1;
  case BUSBW_HALF:
  case BUSBW_BFLOAT16: return 2;
  case BUSBW_INT32:
  case BUSBW_UINT32:
  case BUSBW_FLOAT: return 4;
  default: return 8;
  }
}

BUSBW_HD int busbw_type_is_float(int t) {
  return t == BUSBW_HALF || t == BUSBW_FLOAT || t == BUSBW_DOUBLE || t == BUSBW_BFLOAT16;
}

/* Largest L such that every integer in [0, L] is exact in the type.  uint8 stops at 254 and the
 * other types far below their maximum, so the 0xFF.. poison pattern never equals a valid value. */
BUSBW_HD uint64_t busbw_type_limit(int t) {
  switch (t) {
  case BUSBW_INT8: return 127;
  case BUSBW_UINT8: return 254;
  case BUSBW_INT32: return 2147483647ull;
  case BUSBW_UINT32: return 4294967294ull;
  case BUSBW_HALF: return 2048;
  case BUSBW_BFLOAT16: return 256;
  case BUSBW_FLOAT: return 16777216ull;
  default: return 9007199254740992ull; /* 2^53: values travel through a double */
  }
}

/* Most factors of 2 a product may hold. */
BUSBW_HD uint64_t busbw_type_pmax(int t) {
  switch (t) {
  case BUSBW_INT8: return 6;
  case BUSBW_UINT8: return 7;
  case BUSBW_HALF: return 15;
  default: return 20;
  }
}

/* Machine epsilon (spacing of 1.0), for the avg tolerance. */
BUSBW_HD double busbw_type_eps(int t) {
  switch (t) {
  case BUSBW_HALF: return 1.0 / 1024.0;
  case BUSBW_BFLOAT16: return 1.0 / 128.0;
  case BUSBW_FLOAT: return 1.0 / 8388608.0;
  case BUSBW_DOUBLE: return 2.220446049250313e-16;
  default: return 0.0;
  }
}

/* ---- bfloat16 and IEEE half as bit patterns (no compiler support needed on either side) ---- */

BUSBW_HD float busbw_bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

BUSBW_HD uint32_t busbw_float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

BUSBW_HD float busbw_bf16_to_float(uint16_t h) { return busbw_bits_to_float((uint32_t)h << 16); }

/* Round to nearest even. */
BUSBW_HD uint16_t busbw_float_to_bf16(float f) {
  uint32_t u = busbw_float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

BUSBW_HD float busbw_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) return busbw_bits_to_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) { /* zero or subnormal: man * 2^-24 */
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return busbw_bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Round to nearest even, with subnormals, overflow to infinity and NaN kept. */
BUSBW_HD uint16_t busbw_float_to_half(float f) {
  uint32_t u = busbw_float_to_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: infinity */
  if (a < 0x38800000u) {                                  /* below 2^-14: subnormal or zero */
    if (a < 0x33000000u) return sign;                     /* below half the smallest subnormal */
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(a >> 23); /* 14..24 */
    uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return (uint16_t)(sign | (r >> 13));
}

/* ---- element access through a double (exact for every value used here) ---- */

BUSBW_HD void busbw_store(int t, void *buf, uint64_t i, double v) {
  switch (t) {
  case BUSBW_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case BUSBW_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case BUSBW_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case BUSBW_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case BUSBW_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case BUSBW_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case BUSBW_HALF: ((uint16_t *)buf)[i] = busbw_float_to_half((float)v); break;
  case BUSBW_FLOAT: ((float *)buf)[i] = (float)v; break;
  case BUSBW_DOUBLE: ((double *)buf)[i] = v; break;
  case BUSBW_BFLOAT16: ((uint16_t *)buf)[i] = busbw_float_to_bf16((float)v); break;
  }
}

BUSBW_HD double busbw_load(int t, const void *buf, uint64_t i) {
  switch (t) {
  case BUSBW_INT8: return ((const int8_t *)buf)[i];
  case BUSBW_UINT8: return ((const uint8_t *)buf)[i];
  case BUSBW_INT32: return ((const int32_t *)buf)[i];
  case BUSBW_UINT32: return ((const uint32_t *)buf)[i];
  case BUSBW_INT64: return (double)((const int64_t *)buf)[i];
  case BUSBW_UINT64: return (double)((const uint64_t *)buf)[i];
  case BUSBW_HALF: return busbw_half_to_float(((const uint16_t *)buf)[i]);
  case BUSBW_FLOAT: return ((const float *)buf)[i];
  case BUSBW_DOUBLE: return ((const double *)buf)[i];
  case BUSBW_BFLOAT16: return busbw_bf16_to_float(((const uint16_t *)buf)[i]);
  }
  return 0.0;
}

/* ---- the values ---- */

/* A 64-bit mixing function (splitmix64's finaliser): a different pattern per element and rep. */
BUSBW_HD uint64_t busbw_hash(uint64_t k, uint64_t rep) {
  uint64_t x = k ^ (rep * 0x9e3779b97f4a7c15ull);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* Per-element parameters shared by the input and the expected value of a reduction. */
struct busbw_elem {
  uint64_t n;     /* ranks */
  uint64_t shift; /* rotation: rank r plays position (r + shift) mod n for this element */
  uint64_t a;     /* second pseudo-random number for the value itself */
};

BUSBW_HD struct busbw_elem busbw_elem_of(const struct busbw_gen *g, uint64_t k) {
  struct busbw_elem e;
  uint64_t h = busbw_hash(k, g->rep);
  e.n = (uint64_t)g->nranks;
  e.shift = (h & 0xffffffffu) % e.n;
  e.a = h >> 32;
  return e;
}

/* Sum over j in [0, t) of (s + j) mod m, for 0 <= s < m, t <= m. */
BUSBW_HD uint64_t busbw_rot_sum(uint64_t s, uint64_t t, uint64_t m) {
  if (s + t <= m) return t * s + t * (t - 1) / 2;
  uint64_t c1 = m - s, c2 = t - c1;
  return c1 * s + c1 * (c1 - 1) / 2 + c2 * (c2 - 1) / 2;
}

/* sum/avg: the ranks at positions 0..cnt-1 of the element's rotation add 1 + (pos + s) mod M, the
 * others 0, with cnt * M <= L so the total is exact.  cnt varies per element, so the total does. */
struct busbw_sum {
  uint64_t cnt, m, s;
};

BUSBW_HD struct busbw_sum busbw_sum_of(const struct busbw_gen *g, const struct busbw_elem *e) {
  struct busbw_sum p;
  uint64_t lim = busbw_type_limit(g->type), m = lim / e->n;
  if (m == 0) { /* more ranks than L: up to L of them add 1 */
    p.cnt = e->a % (lim + 1);
    p.m = 1;
  } else {
    p.cnt = 1 + e->a % e->n;
    p.m = m > 64 ? 64 : m;
  }
  p.s = (e->a >> 16) % p.m;
  return p;
}

/* Input of rank r at global element k of a reduction. */
BUSBW_HD double busbw_red_input(const struct busbw_gen *g, int r, uint64_t k) {
  struct busbw_elem e = busbw_elem_of(g, k);
  uint64_t pos = ((uint64_t)r + e.shift) % e.n;
  uint64_t lim = busbw_type_limit(g->type);
  switch (g->op) {
  case BUSBW_PROD: {
    uint64_t pm = busbw_type_pmax(g->type), twos = e.a % ((e.n < pm ? e.n : pm) + 1);
    return pos < twos ? 2.0 : 1.0;
  }
  case BUSBW_MAX:
  case BUSBW_MIN: {
    uint64_t lm = lim < 1000 ? lim : 1000;
    if (e.n - 1 <= lm / 2) return (double)(e.a % (lm - (e.n - 1) + 1) + pos);
    return (double)(e.a % lm + (pos == 0));
  }
  default: { /* sum, avg */
    struct busbw_sum p = busbw_sum_of(g, &e);
    return pos < p.cnt ? (double)(1 + (pos + p.s) % p.m) : 0.0;
  }
  }
}

/* The exact reduction over all ranks at global element k (avg: the real quotient). */
BUSBW_HD double busbw_red_expected(const struct busbw_gen *g, uint64_t k) {
  struct busbw_elem e = busbw_elem_of(g, k);
  uint64_t lim = busbw_type_limit(g->type);
  switch (g->op) {
  case BUSBW_PROD: {
    uint64_t pm = busbw_type_pmax(g->type), twos = e.a % ((e.n < pm ? e.n : pm) + 1);
    return (double)((uint64_t)1 << twos);
  }
  case BUSBW_MAX:
  case BUSBW_MIN: {
    uint64_t lm = lim < 1000 ? lim : 1000;
    if (e.n - 1 <= lm / 2) {
      uint64_t base = e.a % (lm - (e.n - 1) + 1);
      return (double)(g->op == BUSBW_MAX ? base + e.n - 1 : base);
    }
    uint64_t base = e.a % lm;
    return (double)(g->op == BUSBW_MAX ? base + 1 : base);
  }
  default: {
    struct busbw_sum p = busbw_sum_of(g, &e);
    uint64_t sum = p.cnt + (p.cnt / p.m) * (p.m * (p.m - 1) / 2) + busbw_rot_sum(p.s, p.cnt % p.m, p.m);
    if (g->op != BUSBW_AVG) return (double)sum;
    if (busbw_type_is_float(g->type)) return (double)sum / (double)e.n;
    return (double)(sum / e.n); /* integer avg truncates */
  }
  }
}

/* Data moved without arithmetic (all_gather, broadcast): depends on the source rank and element. */
BUSBW_HD double busbw_copy_value(const struct busbw_gen *g, int r, uint64_t k) {
  uint64_t lim = busbw_type_limit(g->type);
  uint64_t m = (lim < 1000 ? lim : 1000) + 1;
  return (double)((busbw_hash(k, g->rep) % m + (uint64_t)r * 37u) % m);
}

/* Element k of this rank's input buffer (for reduce_scatter: n blocks; all_gather: one block). */
BUSBW_HD double busbw_input_value(const struct busbw_gen *g, uint64_t k) {
  switch (g->coll) {
  case BUSBW_ALL_GATHER: return busbw_copy_value(g, g->rank, (uint64_t)g->rank * g->block + k);
  case BUSBW_BROADCAST: return busbw_copy_value(g, g->root, k);
  default: return busbw_red_input(g, g->rank, k);
  }
}

/* Element m of this rank's result. */
BUSBW_HD double busbw_expected_value(const struct busbw_gen *g, uint64_t m) {
  switch (g->coll) {
  case BUSBW_REDUCE_SCATTER: return busbw_red_expected(g, (uint64_t)g->rank * g->block + m);
  case BUSBW_ALL_GATHER: return busbw_copy_value(g, g->block ? (int)(m / g->block) : 0, m);
  case BUSBW_BROADCAST: return busbw_copy_value(g, g->root, m);
  default: return busbw_red_expected(g, m);
  }
}

/* Does a result element match?  NaN (the poison of float types) never does. */
BUSBW_HD int busbw_matches(const struct busbw_gen *g, double got, double want) {
  if (g->op == BUSBW_AVG && busbw_type_is_float(g->type)) {
    double d = got - want, tol = (double)(g->nranks + 1) * busbw_type_eps(g->type) * want;
    return d <= tol && -d <= tol;
  }
  return got == want;
}

#endif
