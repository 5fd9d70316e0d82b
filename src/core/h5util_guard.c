/* h5util_guard.c - what HDF5 trusts in a file and scdino does not: links and dataset storage that
 * lead out of the file, and the global heap that holds variable-length strings (h5util.h). */
#include "build_config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/h5util.h"

/* ---- objects: links and storage ---- */

struct walk {
  char *why;
  size_t n;
  int bad;
};

/* A dataset's values must lie in the file itself, where the file's own checks cover them. */
static int storage_ok(hid_t d, const char *name, struct walk *w) {
  hid_t dcpl = H5Dget_create_plist(d);
  if (dcpl < 0) {
    snprintf(w->why, w->n, "cannot read the storage of dataset '%s' (damaged file?)", name);
    return 0;
  }
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  const int next = H5Pget_external_count(dcpl);
  char ext[256] = "?";
  off_t off;
  hsize_t size;
  if (next > 0 && H5Pget_external(dcpl, 0, sizeof ext, ext, &off, &size) < 0) snprintf(ext, sizeof ext, "?");
  H5Pclose(dcpl);
  if (layout == H5D_VIRTUAL)
    snprintf(w->why, w->n, "dataset '%s' is a virtual dataset (its values would come from other datasets or files)",
             name);
  else if (next != 0)
    snprintf(w->why, w->n, "dataset '%s' keeps its values in an external file ('%s'), outside this file", name, ext);
  else if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED && layout != H5D_COMPACT)
    snprintf(w->why, w->n, "dataset '%s' has an unknown storage layout (damaged file?)", name);
  else
    return 1;
  return 0;
}

static const char *link_kind(H5L_type_t t) {
  return t == H5L_TYPE_SOFT ? "a soft link" : t == H5L_TYPE_EXTERNAL ? "an external link" : "a user-defined link";
}

static herr_t check_link(hid_t g, const char *name, const H5L_info_t *li, void *data) {
  struct walk *w = data;
  if (li->type != H5L_TYPE_HARD) {
    char val[1024] = "", to[1100] = "";
    const char *file = NULL, *obj = NULL;
    unsigned flags;
    if (li->u.val_size < sizeof val && H5Lget_val(g, name, val, sizeof val, H5P_DEFAULT) >= 0) {
      if (li->type == H5L_TYPE_SOFT)
        snprintf(to, sizeof to, " to '%.1000s'", val);
      else if (li->type == H5L_TYPE_EXTERNAL && H5Lunpack_elink_val(val, li->u.val_size, &flags, &file, &obj) >= 0)
        snprintf(to, sizeof to, " to '%.500s' in %.500s", obj, file);
    }
    snprintf(w->why, w->n, "'%s' is %s%s; scdino reads only objects stored in the file itself", name,
             link_kind(li->type), to);
    w->bad = 1;
    return 1;
  }
  hid_t o = H5Oopen(g, name, H5P_DEFAULT);
  if (o < 0) {
    snprintf(w->why, w->n, "cannot open object '%s' (damaged file?)", name);
    w->bad = 1;
    return 1;
  }
  if (H5Iget_type(o) == H5I_DATASET && !storage_ok(o, name, w)) w->bad = 1;
  H5Oclose(o);
  return w->bad ? 1 : 0;
}

int h5util_objects_check(hid_t fid, char *why, size_t n) {
  struct walk w = {why, n, 0};
  /* H5Lvisit reports every link once and descends through hard links only. */
  if (H5Lvisit(fid, H5_INDEX_NAME, H5_ITER_NATIVE, check_link, &w) < 0 && !w.bad) {
    snprintf(why, n, "cannot list its objects (damaged file?)");
    w.bad = 1;
  }
  return w.bad ? -1 : 0;
}

/* ---- the global heap ---- */

/* A variable-length string is stored as a reference: its length (4 bytes), the address of a
 * global heap collection and the index of an object in it (4 bytes).  HDF5 1.10 follows the
 * reference without checks (an index it lacks, an object longer than the string, a collection
 * whose objects run past its end: SIGSEGV; a free-space object of size 0: an endless loop), and
 * the collections carry no checksum.  So the references are read raw first - through a
 * conversion from the variable-length string to this opaque type, which hands over the stored
 * bytes - and every collection they name is checked as HDF5 will parse it. */
#define REF_TAG "scdino global heap reference"

struct heap_ref {
  uint64_t addr;
  uint32_t len, idx;
};

/* Decode a little-endian number of n bytes (at most 8). */
static uint64_t le(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  for (size_t k = n; k > 0; k--) v = v << 8 | p[k - 1];
  return v;
}

static herr_t ref_conv(hid_t src, hid_t dst, H5T_cdata_t *cdata, size_t nelmts, size_t buf_stride,
                       size_t bkg_stride, void *buf, void *bkg, hid_t dxpl) {
  (void)bkg_stride;
  (void)bkg;
  (void)dxpl;
  if (cdata->command == H5T_CONV_INIT) {
    cdata->need_bkg = H5T_BKG_NO;
    if (H5Tget_class(dst) != H5T_OPAQUE || H5Tget_size(dst) != sizeof(struct heap_ref)) return -1;
    char *tag = H5Tget_tag(dst);
    const int ours = tag && !strcmp(tag, REF_TAG);
    H5free_memory(tag);
    return ours && H5Tget_class(src) == H5T_STRING && H5Tis_variable_str(src) > 0 ? 0 : -1;
  }
  if (cdata->command != H5T_CONV_CONV) return 0;
  /* On disk: 4 bytes of length, an address (4 or 8 bytes), 4 bytes of index. */
  const size_t ss = H5Tget_size(src), as = ss - 8;
  if (ss != 12 && ss != 16) return -1;
  const size_t sstride = buf_stride ? buf_stride : ss, dstride = buf_stride ? buf_stride : sizeof(struct heap_ref);
  /* In place: from the end when the elements grow. */
  const int back = dstride > sstride;
  for (size_t k = 0; k < nelmts; k++) {
    const size_t i = back ? nelmts - 1 - k : k;
    unsigned char raw[16];
    memcpy(raw, (unsigned char *)buf + i * sstride, ss);
    struct heap_ref r = {le(raw + 4, as), (uint32_t)le(raw, 4), (uint32_t)le(raw + 4 + as, 4)};
    memcpy((unsigned char *)buf + i * dstride, &r, sizeof r);
  }
  return 0;
}

static pthread_once_t conv_once = PTHREAD_ONCE_INIT;
static int conv_ok;

static void conv_register(void) {
  hid_t s = H5Tcopy(H5T_C_S1), o = H5Tcreate(H5T_OPAQUE, sizeof(struct heap_ref));
  conv_ok = s >= 0 && o >= 0 && H5Tset_size(s, H5T_VARIABLE) >= 0 && H5Tset_tag(o, REF_TAG) >= 0 &&
            H5Tregister(H5T_PERS_SOFT, "scdino: global heap references", s, o, ref_conv) >= 0;
  if (s >= 0) H5Tclose(s);
  if (o >= 0) H5Tclose(o);
}

/* One checked collection: the size of each object, by index. */
struct coll {
  uint64_t addr, nobj;
  uint32_t *idx;
  uint64_t *size;
};

struct heap {
  int fd;
  uint64_t file_size, base;
  size_t sa, ss; /* sizes of addresses and lengths in the file */
  struct coll *c;
  size_t nc;
  char *why;
  size_t n;
};

#define ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

/* Check the collection of h at file offset off as HDF5 will parse it, into c; 0, or -1 with why. */
static int coll_parse(struct heap *h, uint64_t off, struct coll *c) {
  const uint64_t hdr = ALIGN8(8 + h->ss), objhdr = ALIGN8(8 + h->ss);
  unsigned char head[24];
  const char *bad = NULL;
  uint64_t size = 0;
  if (off > h->file_size || h->file_size - off < hdr || pread(h->fd, head, (size_t)hdr, (off_t)off) != (ssize_t)hdr)
    bad = "it lies past the end of the file";
  else if (memcmp(head, "GCOL", 4) != 0 || head[4] != 1)
    bad = "no collection signature and version there";
  else if ((size = le(head + 8, h->ss)) < hdr || size > h->file_size - off)
    bad = "its size runs past the end of the file";
  if (bad) {
    snprintf(h->why, h->n, "global heap at offset %llu is damaged (%s)", (unsigned long long)off, bad);
    return -1;
  }
  unsigned char *b = xmalloc((size_t)size);
  uint8_t *seen = xcalloc(65536 / 8, 1);
  c->addr = off;
  c->nobj = 0;
  c->idx = xmalloc(MUL_SIZE((size_t)(size / objhdr + 1), sizeof *c->idx));
  c->size = xmalloc(MUL_SIZE((size_t)(size / objhdr + 1), sizeof *c->size));
  char what[160] = "";
  if (pread(h->fd, b, (size_t)size, (off_t)off) != (ssize_t)size) snprintf(what, sizeof what, "it cannot be read");
  for (uint64_t p = hdr; !what[0] && p < size;) {
    uint32_t idx = 0;
    uint64_t need, len;
    if (size - p < objhdr) { /* a tail too short for an object header: free space */
      need = len = size - p;
    } else {
      idx = (uint32_t)le(b + p, 2);
      len = le(b + p + 8, h->ss);
      /* An object's data is padded to 8 bytes; the free-space object (index 0) counts its header. */
      need = idx ? (len > size - p - objhdr ? UINT64_MAX : objhdr + ALIGN8(len)) : len;
      if (need > size - p || (!idx && (need < objhdr || need % 8))) {
        snprintf(what, sizeof what, "object %u at byte %llu claims %llu bytes", idx, (unsigned long long)p,
                 (unsigned long long)len);
        break;
      }
    }
    if (seen[idx / 8] & (1u << (idx % 8))) {
      snprintf(what, sizeof what, "object %u appears twice", idx);
      break;
    }
    seen[idx / 8] |= (uint8_t)(1u << (idx % 8));
    c->idx[c->nobj] = idx;
    c->size[c->nobj++] = len;
    p += need;
  }
  free(b);
  free(seen);
  if (what[0]) {
    snprintf(h->why, h->n, "global heap at offset %llu is damaged (%s)", (unsigned long long)off, what);
    return -1;
  }
  return 0;
}

/* The collection at address addr, checked once per call; NULL with why when it is damaged. */
static struct coll *coll_get(struct heap *h, uint64_t addr) {
  for (size_t i = 0; i < h->nc; i++)
    if (h->c[i].addr == h->base + addr) return &h->c[i];
  if (addr > UINT64_MAX - h->base) {
    snprintf(h->why, h->n, "a reference to the global heap is damaged (address %llu)", (unsigned long long)addr);
    return NULL;
  }
  struct coll c;
  if (coll_parse(h, h->base + addr, &c) != 0) return NULL;
  h->c = xrealloc(h->c, MUL_SIZE(h->nc + 1, sizeof *h->c));
  h->c[h->nc] = c;
  return &h->c[h->nc++];
}

/* Whether reference i (of n) of `what` leads to an object of its own length; 0, or -1 with why. */
static int ref_ok(struct heap *h, const struct heap_ref *r, size_t i, size_t n, const char *what) {
  if (r->addr == 0) return 0; /* no string (HDF5 reads nothing) */
  struct coll *c = coll_get(h, r->addr);
  if (!c) return -1;
  for (uint64_t k = 0; r->idx > 0 && k < c->nobj; k++)
    if (c->idx[k] == r->idx) {
      if (c->size[k] == r->len) return 0;
      break;
    }
  char which[64] = "";
  if (n > 1) snprintf(which, sizeof which, " %zu", i);
  snprintf(h->why, h->n,
           "global heap at offset %llu is damaged: string%s of %s should be its object %u of %u bytes, which it "
           "does not hold",
           (unsigned long long)c->addr, which, what, r->idx, r->len);
  return -1;
}

int h5util_gheap_check(hid_t obj, int is_attr, size_t n, const char *what, char *why, size_t wn) {
  if (n == 0) return 0;
  pthread_once(&conv_once, conv_register);
  hid_t fid = H5Iget_file_id(obj), fcpl = fid >= 0 ? H5Fget_create_plist(fid) : -1;
  hid_t ot = H5Tcreate(H5T_OPAQUE, sizeof(struct heap_ref));
  struct heap h = {-1, 0, 0, 8, 8, NULL, 0, why, wn};
  hsize_t ub = 0;
  char name[4096] = "";
  struct heap_ref *r = xcalloc(n, sizeof *r);
  int rc = -1;
  if (!conv_ok || fcpl < 0 || ot < 0 || H5Tset_tag(ot, REF_TAG) < 0 || H5Pget_sizes(fcpl, &h.sa, &h.ss) < 0 ||
      H5Pget_userblock(fcpl, &ub) < 0 || H5Fget_name(fid, name, sizeof name) <= 0)
    snprintf(why, wn, "cannot look at the global heap of %s", what);
  else if (h.sa > 8 || h.ss > 8)
    snprintf(why, wn, "%s: addresses or lengths of more than 8 bytes are not supported", what);
  else if ((is_attr ? H5Aread(obj, ot, r) : H5Dread(obj, ot, H5S_ALL, H5S_ALL, H5P_DEFAULT, r)) < 0)
    snprintf(why, wn, "cannot read the references of %s to the global heap (damaged file?)", what);
  else if ((h.fd = open(name, O_RDONLY | O_CLOEXEC)) < 0)
    snprintf(why, wn, "cannot read the global heap: %s", strerror(errno));
  else
    rc = 0;
  struct stat st;
  if (rc == 0 && fstat(h.fd, &st) != 0) rc = -1;
  h.file_size = rc == 0 ? (uint64_t)st.st_size : 0;
  h.base = ub;
  for (size_t i = 0; rc == 0 && i < n; i++) rc = ref_ok(&h, &r[i], i, n, what);
  for (size_t i = 0; i < h.nc; i++) {
    free(h.c[i].idx);
    free(h.c[i].size);
  }
  free(h.c);
  free(r);
  if (h.fd >= 0) close(h.fd);
  if (ot >= 0) H5Tclose(ot);
  if (fcpl >= 0) H5Pclose(fcpl);
  if (fid >= 0) H5Fclose(fid);
  return rc;
}
