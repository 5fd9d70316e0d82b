/* hash.h - FNV-1a (64-bit) over bytes: fingerprints of file lists and data sets, not security. */
#ifndef SCDINO_HASH_H
#define SCDINO_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV1A_INIT 0xcbf29ce484222325ull

static inline uint64_t hash_fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    h ^= s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

#endif
