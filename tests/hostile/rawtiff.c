/* tests/hostile/rawtiff.c - write a TIFF byte by byte, so that any header field can lie.
 *
 *   rawtiff OUT [key=value ...]
 *
 * libtiff refuses to write most of the damage the hostile-input corpus needs (zero or huge sizes,
 * strips beyond the end of the file, odd bit depths, pages of different sizes), so this writes the
 * classic TIFF structure itself: header, then per page the pixel data, the IFD and its arrays.
 * Keys (defaults in brackets):
 *   w h [16 16]  spp [1]  bps [16]  fmt [1: uint; 2 int; 3 float]  comp [1]  photo [1]
 *   planar [1]  rps [h: one strip]  tile [0: strips; else the tile side]
 *   pages [1]    w2 h2 [w h]: size of the second and later pages
 *   data [ramp]  ramp | zero | nan | inf | junk (nan/inf: the pixel at channel 0, row 1, column 1)
 *   maxdata [64 MiB]  most pixel bytes written per page (a page may claim more than it holds)
 *   stripoff stripcnt  override the first strip's (tile's) offset / byte count
 *   nstrips      override the count of the strip (tile) offset and byte-count arrays
 *   desc         ImageDescription text
 *   loop [0]     1: the last page links back to the first (an IFD cycle)
 *   order [II]   MM: big-endian
 *   omit         a tag number to leave out (e.g. 256: no ImageWidth); several omit= allowed
 *   extra        TAG:TYPE:COUNT:VALUE, one more entry with an inline value (several allowed)
 *   trunc        cut the finished file to this many bytes
 * Exit status 0, or 2 on bad arguments / 1 if the file cannot be written. */
#include "build_config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opts {
  uint64_t w, h, w2, h2, spp, bps, fmt, comp, photo, planar, rps, tile, pages, maxdata;
  int64_t stripoff, stripcnt, nstrips;
  const char *data, *desc;
  int loop, big_endian;
  int64_t trunc;
  unsigned omit[16];
  int nomit;
  unsigned extra_tag[8], extra_type[8];
  uint32_t extra_count[8], extra_value[8];
  int nextra;
};

/* ---- a growable byte buffer with endian-aware stores ---- */
static unsigned char *buf;
static size_t len, cap;
static int big;

static void need(size_t n) {
  if (len + n <= cap) return;
  while (len + n > cap) cap = cap ? 2 * cap : 4096;
  buf = realloc(buf, cap);
  if (!buf) {
    fprintf(stderr, "rawtiff: out of memory\n");
    exit(1);
  }
}
static void put_at(size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; i++) buf[at + (size_t)i] = (unsigned char)(v >> (8 * (big ? n - 1 - i : i)));
}
static void put(uint64_t v, int n) {
  need((size_t)n);
  put_at(len, v, n);
  len += (size_t)n;
}
static void align2(void) {
  if (len & 1) put(0, 1);
}

/* ---- IFD entries ---- */
struct entry {
  unsigned tag, type;
  uint32_t count;
  const void *payload; /* values, already in the file's byte order, when they do not fit inline */
  size_t payload_len;
  uint32_t inline_value;
  int inline_len;
};

static int type_size(unsigned type) {
  switch (type) {
    case 1: case 2: case 6: case 7: return 1;
    case 3: case 8: return 2;
    case 4: case 9: case 11: return 4;
    default: return 8;
  }
}

static int by_tag(const void *a, const void *b) {
  const struct entry *x = a, *y = b;
  return (x->tag > y->tag) - (x->tag < y->tag);
}

/* Sample value of the pattern at (c, y, x), as the bit pattern of a bps-bit sample of format fmt. */
static uint64_t sample_bits(const struct opts *o, uint64_t c, uint64_t y, uint64_t x) {
  double v = (double)((c * 37 + y * 11 + x * 3) % 200 + 1);
  int special = (!strcmp(o->data, "nan") || !strcmp(o->data, "inf")) && c == 0 && y == 1 && x == 1;
  if (!strcmp(o->data, "zero")) v = 0;
  if (o->fmt == 3 && o->bps == 32) {
    float f = special ? (!strcmp(o->data, "nan") ? NAN : INFINITY) : (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
  }
  if (o->fmt == 3 && o->bps == 64) {
    double d = special ? (!strcmp(o->data, "nan") ? NAN : INFINITY) : v;
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
  }
  return (uint64_t)v;
}

/* Write the pixel bytes of one strip or tile: rows x cols pixels of nsamp interleaved samples
 * starting at channel c0, image row y0 and column x0.  Returns the bytes written (capped). */
static uint64_t write_block(const struct opts *o, uint64_t rows, uint64_t cols, uint64_t nsamp, uint64_t c0,
                            uint64_t y0, uint64_t x0, uint64_t *budget) {
  uint64_t row_bytes = (cols * nsamp * o->bps + 7) / 8, total = rows * row_bytes;
  uint64_t n = total < *budget ? total : *budget;
  int whole = o->bps % 8 == 0 && o->bps <= 64 && o->comp == 1 && strcmp(o->data, "junk") != 0;
  uint64_t done = 0;
  for (uint64_t r = 0; r < rows && done < n; r++)
    for (uint64_t x = 0; x < cols && done < n; x++)
      for (uint64_t s = 0; s < nsamp && done < n; s++) {
        if (!whole) break;
        int nb = (int)(o->bps / 8);
        if (done + (uint64_t)nb > n) break;
        put(sample_bits(o, c0 + s, y0 + r, x0 + x), nb);
        done += (uint64_t)nb;
      }
  /* Odd bit depths, claimed compression or junk: bytes that are not a valid encoding. */
  for (; done < n; done++) put((done * 131 + 7) & 0xff, 1);
  *budget -= n;
  return n;
}

static void add(struct entry *e, int *ne, unsigned tag, unsigned type, uint32_t count, uint64_t value) {
  struct entry *x = &e[(*ne)++];
  memset(x, 0, sizeof *x);
  x->tag = tag;
  x->type = type;
  x->count = count;
  x->inline_value = (uint32_t)value;
  x->inline_len = type_size(type) * (int)count;
}

static void add_array(struct entry *e, int *ne, unsigned tag, unsigned type, uint32_t count, const void *payload,
                      size_t plen) {
  struct entry *x = &e[(*ne)++];
  memset(x, 0, sizeof *x);
  x->tag = tag;
  x->type = type;
  x->count = count;
  x->payload = payload;
  x->payload_len = plen;
}

/* Bytes in the file's order for an array of n values of size sz. */
static unsigned char *encode(const uint64_t *v, uint64_t n, int sz) {
  unsigned char *p = malloc(n * (uint64_t)sz + 1);
  if (!p) exit(1);
  for (uint64_t i = 0; i < n; i++)
    for (int k = 0; k < sz; k++) p[i * (uint64_t)sz + (uint64_t)k] = (unsigned char)(v[i] >> (8 * (big ? sz - 1 - k : k)));
  return p;
}

static int omitted(const struct opts *o, unsigned tag) {
  for (int i = 0; i < o->nomit; i++)
    if (o->omit[i] == tag) return 1;
  return 0;
}

/* One page: pixel data, then the IFD.  Returns the IFD's offset; *next_at is where its
 * next-IFD link is stored. */
static size_t write_page(const struct opts *o, uint64_t w, uint64_t h, size_t *next_at) {
  uint64_t planes = o->planar == 2 ? o->spp : 1, nsamp = o->planar == 2 ? 1 : o->spp;
  uint64_t bw = o->tile ? o->tile : w, bh = o->tile ? o->tile : (o->rps && o->rps < h ? o->rps : h);
  uint64_t across = o->tile ? (w + bw - 1) / bw : 1, down = h ? (h + bh - 1) / bh : 1;
  uint64_t nblocks = planes * across * down;
  if (nblocks > ((uint64_t)1 << 22)) nblocks = (uint64_t)1 << 22; /* keep the generator's arrays small */
  uint64_t *off = calloc(nblocks + 1, sizeof *off), *cnt = calloc(nblocks + 1, sizeof *cnt);
  uint64_t budget = o->maxdata, k = 0;
  for (uint64_t p = 0; p < planes && k < nblocks; p++)
    for (uint64_t by = 0; by < down && k < nblocks; by++)
      for (uint64_t bx = 0; bx < across && k < nblocks; bx++, k++) {
        uint64_t rows = o->tile ? bh : (h - by * bh < bh ? h - by * bh : bh);
        off[k] = len;
        uint64_t row_bytes = (bw * nsamp * o->bps + 7) / 8;
        cnt[k] = rows * row_bytes;
        write_block(o, rows, bw, nsamp, p * nsamp, by * bh, bx * bw, &budget);
      }
  if (o->stripoff >= 0) off[0] = (uint64_t)o->stripoff;
  if (o->stripcnt >= 0) cnt[0] = (uint64_t)o->stripcnt;
  uint32_t nclaim = o->nstrips >= 0 ? (uint32_t)o->nstrips : (uint32_t)nblocks;
  align2();

  struct entry e[64];
  int ne = 0;
  uint64_t bps_v[65536];
  uint64_t nbps = o->spp > 0 && o->spp <= 65535 ? o->spp : 1;
  for (uint64_t i = 0; i < nbps; i++) bps_v[i] = o->bps;
  unsigned char *bps_p = NULL, *fmt_p = NULL, *off_p = encode(off, nblocks, 4), *cnt_p = encode(cnt, nblocks, 4);
  uint64_t fmt_v[65536];
  for (uint64_t i = 0; i < nbps; i++) fmt_v[i] = o->fmt;
  add(e, &ne, 254, 4, 1, 0);
  add(e, &ne, 256, 4, 1, w);
  add(e, &ne, 257, 4, 1, h);
  if (nbps <= 2) {
    add(e, &ne, 258, 3, (uint32_t)nbps, nbps == 2 ? (big ? (o->bps << 16 | o->bps) : (o->bps | o->bps << 16)) : o->bps);
  } else {
    bps_p = encode(bps_v, nbps, 2);
    add_array(e, &ne, 258, 3, (uint32_t)nbps, bps_p, nbps * 2);
  }
  add(e, &ne, 259, 3, 1, o->comp);
  add(e, &ne, 262, 3, 1, o->photo);
  if (o->desc) add_array(e, &ne, 270, 2, (uint32_t)strlen(o->desc) + 1, o->desc, strlen(o->desc) + 1);
  unsigned off_tag = o->tile ? 324 : 273, cnt_tag = o->tile ? 325 : 279;
  if (nclaim == 1 && nblocks >= 1)
    add(e, &ne, off_tag, 4, 1, off[0]);
  else
    add_array(e, &ne, off_tag, 4, nclaim, off_p, nblocks * 4);
  add(e, &ne, 277, 3, 1, o->spp);
  if (!o->tile) add(e, &ne, 278, 4, 1, o->rps ? o->rps : h);
  if (nclaim == 1 && nblocks >= 1)
    add(e, &ne, cnt_tag, 4, 1, cnt[0]);
  else
    add_array(e, &ne, cnt_tag, 4, nclaim, cnt_p, nblocks * 4);
  add(e, &ne, 284, 3, 1, o->planar);
  if (o->tile) {
    add(e, &ne, 322, 4, 1, o->tile);
    add(e, &ne, 323, 4, 1, o->tile);
  }
  if (nbps <= 2) {
    add(e, &ne, 339, 3, (uint32_t)nbps, nbps == 2 ? (big ? (o->fmt << 16 | o->fmt) : (o->fmt | o->fmt << 16)) : o->fmt);
  } else {
    fmt_p = encode(fmt_v, nbps, 2);
    add_array(e, &ne, 339, 3, (uint32_t)nbps, fmt_p, nbps * 2);
  }
  for (int i = 0; i < o->nextra; i++) add(e, &ne, o->extra_tag[i], o->extra_type[i], o->extra_count[i], o->extra_value[i]);
  int keep = 0;
  for (int i = 0; i < ne; i++)
    if (!omitted(o, e[i].tag)) e[keep++] = e[i];
  ne = keep;
  qsort(e, (size_t)ne, sizeof *e, by_tag);

  size_t ifd = len;
  put((uint64_t)ne, 2);
  size_t first_entry = len;
  need((size_t)ne * 12 + 4);
  len += (size_t)ne * 12 + 4;
  *next_at = len - 4;
  put_at(*next_at, 0, 4);
  for (int i = 0; i < ne; i++) {
    size_t at = first_entry + (size_t)i * 12;
    put_at(at, e[i].tag, 2);
    put_at(at + 2, e[i].type, 2);
    put_at(at + 4, e[i].count, 4);
    if (e[i].payload) {
      align2();
      put_at(at + 8, len, 4);
      need(e[i].payload_len);
      memcpy(buf + len, e[i].payload, e[i].payload_len);
      len += e[i].payload_len;
    } else if (e[i].inline_len <= 2 && e[i].type == 3 && e[i].count == 1) {
      put_at(at + 8, e[i].inline_value, 2); /* a SHORT sits in the first two bytes */
      put_at(at + 10, 0, 2);
    } else {
      put_at(at + 8, e[i].inline_value, 4);
    }
  }
  free(off);
  free(cnt);
  free(off_p);
  free(cnt_p);
  free(bps_p);
  free(fmt_p);
  return ifd;
}

static uint64_t num(const char *s) { return strtoull(s, NULL, 0); }

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: rawtiff OUT [key=value ...] (keys: see the comment at the top of rawtiff.c)\n");
    return 2;
  }
  struct opts o = {.w = 16, .h = 16, .spp = 1, .bps = 16, .fmt = 1, .comp = 1, .photo = 1, .planar = 1,
                   .pages = 1, .maxdata = (uint64_t)64 << 20, .stripoff = -1, .stripcnt = -1, .nstrips = -1,
                   .data = "ramp", .trunc = -1};
  int w2 = 0, h2 = 0;
  for (int i = 2; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) {
      fprintf(stderr, "rawtiff: expected key=value, got '%s'\n", argv[i]);
      return 2;
    }
    *eq = '\0';
    const char *k = argv[i], *v = eq + 1;
    if (!strcmp(k, "w")) o.w = num(v);
    else if (!strcmp(k, "h")) o.h = num(v);
    else if (!strcmp(k, "w2")) o.w2 = num(v), w2 = 1;
    else if (!strcmp(k, "h2")) o.h2 = num(v), h2 = 1;
    else if (!strcmp(k, "spp")) o.spp = num(v);
    else if (!strcmp(k, "bps")) o.bps = num(v);
    else if (!strcmp(k, "fmt")) o.fmt = num(v);
    else if (!strcmp(k, "comp")) o.comp = num(v);
    else if (!strcmp(k, "photo")) o.photo = num(v);
    else if (!strcmp(k, "planar")) o.planar = num(v);
    else if (!strcmp(k, "rps")) o.rps = num(v);
    else if (!strcmp(k, "tile")) o.tile = num(v);
    else if (!strcmp(k, "pages")) o.pages = num(v);
    else if (!strcmp(k, "maxdata")) o.maxdata = num(v);
    else if (!strcmp(k, "stripoff")) o.stripoff = (int64_t)num(v);
    else if (!strcmp(k, "stripcnt")) o.stripcnt = (int64_t)num(v);
    else if (!strcmp(k, "nstrips")) o.nstrips = (int64_t)num(v);
    else if (!strcmp(k, "data")) o.data = v;
    else if (!strcmp(k, "desc")) o.desc = v;
    else if (!strcmp(k, "loop")) o.loop = (int)num(v);
    else if (!strcmp(k, "order")) o.big_endian = !strcmp(v, "MM");
    else if (!strcmp(k, "trunc")) o.trunc = (int64_t)num(v);
    else if (!strcmp(k, "omit") && o.nomit < 16) o.omit[o.nomit++] = (unsigned)num(v);
    else if (!strcmp(k, "extra") && o.nextra < 8 &&
             sscanf(v, "%u:%u:%u:%u", &o.extra_tag[o.nextra], &o.extra_type[o.nextra], &o.extra_count[o.nextra],
                    &o.extra_value[o.nextra]) == 4)
      o.nextra++;
    else {
      fprintf(stderr, "rawtiff: unknown or bad key '%s'\n", k);
      return 2;
    }
  }
  if (!w2) o.w2 = o.w;
  if (!h2) o.h2 = o.h;
  if (o.pages < 1 || o.pages > 100000 || o.bps > 64 || o.spp > 65535) {
    fprintf(stderr, "rawtiff: pages 1..100000, bps <= 64, spp <= 65535\n");
    return 2;
  }
  big = o.big_endian;
  put(big ? 0x4d4d : 0x4949, 2);
  put(42, 2);
  size_t link = len;
  put(0, 4);
  size_t first_ifd = 0;
  for (uint64_t p = 0; p < o.pages; p++) {
    size_t next_at;
    size_t ifd = write_page(&o, p ? o.w2 : o.w, p ? o.h2 : o.h, &next_at);
    if (p == 0) first_ifd = ifd;
    put_at(link, ifd, 4);
    link = next_at;
  }
  if (o.loop) put_at(link, first_ifd, 4);
  size_t n = o.trunc >= 0 && (size_t)o.trunc < len ? (size_t)o.trunc : len;
  FILE *f = fopen(argv[1], "wb");
  if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "rawtiff: cannot write %s\n", argv[1]);
    return 1;
  }
  free(buf);
  return 0;
}
