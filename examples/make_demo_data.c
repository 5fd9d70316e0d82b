/* make_demo_data.c - scdino_demo_data: a synthetic PBMC-like image set as real TIFF files.
 *
 *   scdino_demo_data -o demo/tiff [-n 300] [-s 1] [-c 8] [-q]
 *
 * Writes OUT/<class>/<class>_NNNNN.tiff: 50 x 50 pixels, 5 channels, uint16, channels-last
 * (one page, samples interleaved), the layout scDINO's tifffile.imread expects of the PBMC set.
 * Channels: 0 brightfield, 1 DNA stain, 2 membrane marker, 3 granule marker, 4 surface marker.
 *
 * The set is made so that the demo shows what DINO training buys.  scDINO scales every channel of
 * every image to 0..1 (min-max), and DINO's augmentations (random resized crops, flips, per-channel
 * brightness, blur) teach the network to ignore where the cell is, how large it looks, how it is
 * turned, how bright each channel is and how sharp the image is.  So the classes here differ only
 * in things that survive all of that - the shape and place of the nucleus, granules, and where the
 * surface marker sits on the membrane, all relative to the cell - while those nuisances are drawn
 * from the same wide ranges for every class.  Raw pixels and a randomly initialised network are
 * dominated by the nuisances; DINO-trained features are not (input/demo.nml quotes the numbers).
 *
 *   class              nucleus (DNA, channel 1)        N:C radius  granules (3)    surface (4)   cell
 *   B                  round, central                  0.74-0.86   none            cap           round
 *   T4                 round, central                  0.70-0.82   none            even ring     round
 *   T8                 round, central                  0.68-0.80   3-6 coarse      even ring     round
 *   NK                 round, against the membrane     0.56-0.68   22-37 fine      even ring     round
 *   mono_classical     kidney (a deep notch)           0.58-0.70   none            even ring     round
 *   mono_nonclassical  kidney                          0.54-0.66   none            5-9 clusters  round
 *   pDC                round, against the membrane     0.54-0.66   none            cap           oval 1.3-1.6
 *   granulocyte        3-5 separate small lobes        0.26-0.32   22-37 fine      5-9 clusters  round
 *
 * (N:C: nucleus radius / cell radius; granule and cluster sizes scale with the cell; "cap": the
 * marker on one side of the membrane only; cells are round to 1.2 long unless said otherwise.)
 * Nuisances, the same for every class: cell radius 12-20 px, centre anywhere that keeps most of
 * the cell in the frame, any orientation, outline wobble, focus blur sigma 0.3-1.3 px, saturation
 * of each fluorescence channel at 45-100 % of its peak, per-channel gain and background level
 * (log-normal, sd 0.5), a background slope, chromatin and cytoplasm texture, shot and read noise.
 * An image depends only on (seed, class, index): the output is the same for any thread count. */
#include "build_config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <tiffio.h>
#include <unistd.h>

#define SIDE 50
#define NCH 5
#define NPIX (SIDE * SIDE)

/* ---- a small counter-seeded generator (splitmix64) ---- */

struct prng {
  uint64_t s;
  double spare;
  int have;
};

static uint64_t prng_next(struct prng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uni(struct prng *r) { return (double)(prng_next(r) >> 11) * 0x1.0p-53; }
static double range(struct prng *r, double lo, double hi) { return lo + (hi - lo) * uni(r); }
/* Box-Muller; the second value of each pair is kept for the next call. */
static double gauss(struct prng *r) {
  if (r->have) {
    r->have = 0;
    return r->spare;
  }
  double u = uni(r), v = uni(r);
  double m = sqrt(-2.0 * log(u > 1e-300 ? u : 1e-300));
  r->spare = m * sin(2 * M_PI * v);
  r->have = 1;
  return m * cos(2 * M_PI * v);
}

/* ---- classes ---- */

/* What a class is made of.  Every choice here is relative to the cell itself (nucleus shape, the
 * nucleus-to-cell radius ratio, granule size and count, where the surface marker sits on the
 * membrane), so it survives scDINO's per-image min-max scaling, crops, flips and brightness
 * jitter.  Cell size, position, orientation, focus, marker gains and background are drawn from
 * the same ranges for every class (see render()): the nuisances DINO's augmentations teach the
 * network to ignore. */
enum nucleus_kind { NUC_ROUND, NUC_ECCENTRIC, NUC_KIDNEY, NUC_BILOBED, NUC_LOBED };
enum granule_kind { GRAN_NONE, GRAN_COARSE, GRAN_FINE };
enum surface_kind { SURF_RING, SURF_CAP, SURF_DOTS };

struct class_def {
  const char *name;
  int nucleus;                     /* enum nucleus_kind */
  double nc_lo, nc_hi;             /* nucleus radius / cell radius */
  double aspect_lo, aspect_hi;     /* cell elongation */
  int granules;                    /* enum granule_kind */
  int surface;                     /* enum surface_kind */
  double chromatin;                /* texture amplitude of the DNA stain */
};

static const struct class_def classes[] = {
    {"B", NUC_ROUND, 0.74, 0.86, 1.0, 1.15, GRAN_NONE, SURF_CAP, 0.45},
    {"T4", NUC_ROUND, 0.70, 0.82, 1.0, 1.15, GRAN_NONE, SURF_RING, 0.30},
    {"T8", NUC_ROUND, 0.68, 0.80, 1.0, 1.15, GRAN_COARSE, SURF_RING, 0.30},
    {"NK", NUC_ECCENTRIC, 0.56, 0.68, 1.0, 1.2, GRAN_FINE, SURF_RING, 0.25},
    {"mono_classical", NUC_KIDNEY, 0.58, 0.70, 1.0, 1.2, GRAN_NONE, SURF_RING, 0.15},
    {"mono_nonclassical", NUC_KIDNEY, 0.54, 0.66, 1.0, 1.2, GRAN_NONE, SURF_DOTS, 0.15},
    {"pDC", NUC_ECCENTRIC, 0.54, 0.66, 1.3, 1.6, GRAN_NONE, SURF_CAP, 0.20},
    {"granulocyte", NUC_LOBED, 0.26, 0.32, 1.0, 1.2, GRAN_FINE, SURF_DOTS, 0.10},
};
#define NCLASSES ((int)(sizeof classes / sizeof classes[0]))

#define MAX_SPOTS 40

/* One cell's drawn parameters. */
struct cell {
  double cx, cy, r, aspect, theta;
  double harm_a[3], harm_c[3], harm_s[3];
  int nlobes;
  double lx[5], ly[5], lr[5];  /* nucleus as a union of discs (lobes) ... */
  double bx, by, br;           /* ... minus a disc (the kidney's notch; br = 0: none) */
  double gx[MAX_SPOTS], gy[MAX_SPOTS], gr[MAX_SPOTS], gv[MAX_SPOTS];
  int ngran;
  double dx[MAX_SPOTS], dy[MAX_SPOTS], dr[MAX_SPOTS], dv[MAX_SPOTS]; /* surface clusters */
  int ndots;
  double cap_c, cap_s;         /* direction of the surface cap */
};

/* Cell outline radius in the direction (cp, sp) = (cos phi, sin phi) of the cell frame, with
 * harmonics 2..4: cos(k phi + p) from the angle-addition recurrences, no trigonometric calls. */
static double outline(const struct cell *c, double cp, double sp) {
  double ck = cp * cp - sp * sp, sk = 2 * cp * sp, w = 1;
  for (int k = 0; k < 3; k++) {
    w += c->harm_a[k] * (ck * c->harm_c[k] - sk * c->harm_s[k]);
    double cn = ck * cp - sk * sp;
    sk = sk * cp + ck * sp;
    ck = cn;
  }
  return c->r * w;
}

/* Cheap approximately normal noise (Irwin-Hall of four 16-bit uniforms, unit variance): the
 * camera noise needs many draws and no exact tails. */
static double noise(struct prng *r) {
  uint64_t z = prng_next(r);
  double s = (double)(z & 0xffff) + (double)((z >> 16) & 0xffff) + (double)((z >> 32) & 0xffff) + (double)(z >> 48);
  return (s / 65536.0 - 2.0) * 1.7320508075688772;
}

/* Soft inside-ness (0..1) of a signed distance d (positive inside), about one pixel wide. */
static double soft(double d) {
  if (d > 0.7) return 1;
  if (d < -0.7) return 0;
  return 0.5 + d / 1.4;
}

/* The cell's geometry: nuisances (size, position, orientation, outline wobble) from common ranges,
 * the class's nucleus, granules and surface pattern relative to the cell radius. */
static void draw_cell(const struct class_def *k, struct prng *r, struct cell *c) {
  c->r = range(r, 12.0, 20.0);
  double off = 23.0 - c->r; /* keep most of the cell inside the 50 x 50 frame */
  if (off < 3) off = 3;
  c->cx = SIDE / 2.0 + range(r, -off, off);
  c->cy = SIDE / 2.0 + range(r, -off, off);
  c->aspect = range(r, k->aspect_lo, k->aspect_hi);
  c->theta = range(r, 0, 2 * M_PI);
  for (int i = 0; i < 3; i++) {
    c->harm_a[i] = 0.05 * gauss(r) / (i + 1);
    double ph = range(r, 0, 2 * M_PI);
    c->harm_c[i] = cos(ph);
    c->harm_s[i] = sin(ph);
  }
  double nr = c->r * range(r, k->nc_lo, k->nc_hi);
  double ang = range(r, 0, 2 * M_PI);
  c->br = c->bx = c->by = 0;
  switch (k->nucleus) {
    case NUC_ROUND:
      c->nlobes = 1;
      c->lx[0] = 0.05 * c->r * gauss(r);
      c->ly[0] = 0.05 * c->r * gauss(r);
      c->lr[0] = nr;
      break;
    case NUC_ECCENTRIC: /* pushed against the membrane on one side */
      c->nlobes = 1;
      c->lx[0] = (c->r - nr) * 0.95 * cos(ang);
      c->ly[0] = (c->r - nr) * 0.95 * sin(ang);
      c->lr[0] = nr;
      break;
    case NUC_KIDNEY: /* a disc with a deep notch bitten out */
      c->nlobes = 1;
      c->lx[0] = 0.1 * c->r * cos(ang);
      c->ly[0] = 0.1 * c->r * sin(ang);
      c->lr[0] = nr * 1.2;
      c->bx = c->lx[0] + nr * 0.85 * cos(ang + M_PI);
      c->by = c->ly[0] + nr * 0.85 * sin(ang + M_PI);
      c->br = nr * range(r, 0.75, 0.9);
      break;
    case NUC_BILOBED:
    default: { /* 3 to 5 separate lobes on an arc */
      c->nlobes = k->nucleus == NUC_BILOBED ? 2 : 3 + (int)(uni(r) * 3);
      double arc = range(r, 2.8, 4.0), rad = c->r * range(r, 0.48, 0.56);
      for (int i = 0; i < c->nlobes; i++) {
        double a = ang + arc * ((double)i / (c->nlobes - 1) - 0.5);
        c->lx[i] = rad * cos(a);
        c->ly[i] = rad * sin(a);
        c->lr[i] = nr * range(r, 0.85, 1.15);
      }
    }
  }
  /* Granules: a few coarse ones or many fine ones, anywhere in the cytoplasm. */
  c->ngran = 0;
  double g_lo = 0, g_hi = 0;
  if (k->granules == GRAN_COARSE) {
    c->ngran = 3 + (int)(uni(r) * 4);
    g_lo = 0.11, g_hi = 0.15;
  } else if (k->granules == GRAN_FINE) {
    c->ngran = 22 + (int)(uni(r) * 16);
    g_lo = 0.045, g_hi = 0.065;
  }
  for (int i = 0; i < c->ngran; i++) {
    double a = range(r, 0, 2 * M_PI), d = c->r * sqrt(uni(r)) * 0.85;
    c->gx[i] = d * cos(a);
    c->gy[i] = d * sin(a);
    c->gr[i] = c->r * range(r, g_lo, g_hi);
    c->gv[i] = range(r, 0.6, 1.0);
  }
  /* Surface-marker clusters on the membrane. */
  c->ndots = 0;
  if (k->surface == SURF_DOTS) {
    c->ndots = 5 + (int)(uni(r) * 5);
    for (int i = 0; i < c->ndots; i++) {
      double a = range(r, 0, 2 * M_PI), ca = cos(a), sa = sin(a), d = 0.95 * outline(c, ca, sa);
      c->dx[i] = d * ca;
      c->dy[i] = d * sa;
      c->dr[i] = c->r * range(r, 0.08, 0.12);
      c->dv[i] = range(r, 0.7, 1.0);
    }
  }
  double a = range(r, 0, 2 * M_PI);
  c->cap_c = cos(a);
  c->cap_s = sin(a);
}

/* Add Gaussian spots given in the cell frame (centre x, y; radius; value) into map, each drawn
 * only in its own neighbourhood. */
static void spots(const struct cell *c, int n, const double *sx, const double *sy, const double *sr,
                  const double *sv, float *map) {
  double ct = cos(c->theta), st = sin(c->theta), sa = sqrt(c->aspect);
  memset(map, 0, sizeof(float) * NPIX);
  for (int i = 0; i < n; i++) {
    /* Back from the cell frame to image coordinates. */
    double gu = sx[i] * sa, gv = sy[i] / sa;
    double px = c->cx + gu * ct - gv * st, py = c->cy + gu * st + gv * ct;
    int h = (int)ceil(3 * sr[i]);
    int x0 = (int)floor(px) - h, y0 = (int)floor(py) - h;
    for (int y = y0 < 0 ? 0 : y0; y <= y0 + 2 * h + 1 && y < SIDE; y++)
      for (int x = x0 < 0 ? 0 : x0; x <= x0 + 2 * h + 1 && x < SIDE; x++) {
        double ddx = x + 0.5 - px, ddy = y + 0.5 - py;
        map[y * SIDE + x] += (float)(sv[i] * exp(-0.5 * (ddx * ddx + ddy * ddy) / (sr[i] * sr[i])));
      }
  }
}

/* A smooth random texture: a coarse grid of random values, bilinearly interpolated. */
static void value_noise(struct prng *r, int grid, float *out) {
  double g[17][17];
  for (int y = 0; y <= grid; y++)
    for (int x = 0; x <= grid; x++) g[y][x] = gauss(r);
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++) {
      double fy = (double)y * grid / SIDE, fx = (double)x * grid / SIDE;
      int iy = (int)fy, ix = (int)fx;
      double ty = fy - iy, tx = fx - ix;
      out[y * SIDE + x] = (float)((1 - ty) * ((1 - tx) * g[iy][ix] + tx * g[iy][ix + 1]) +
                                  ty * ((1 - tx) * g[iy + 1][ix] + tx * g[iy + 1][ix + 1]));
    }
}

/* Separable Gaussian blur of one channel (radius 3, clamped edges). */
static void blur(float *img, double sigma) {
  if (sigma < 0.05) return;
  double w[7], s = 0;
  for (int i = -3; i <= 3; i++) s += w[i + 3] = exp(-0.5 * i * i / (sigma * sigma));
  for (int i = 0; i < 7; i++) w[i] /= s;
  float tmp[NPIX];
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++) {
      double a = 0;
      for (int i = -3; i <= 3; i++) {
        int xx = x + i < 0 ? 0 : x + i >= SIDE ? SIDE - 1 : x + i;
        a += w[i + 3] * img[y * SIDE + xx];
      }
      tmp[y * SIDE + x] = (float)a;
    }
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++) {
      double a = 0;
      for (int i = -3; i <= 3; i++) {
        int yy = y + i < 0 ? 0 : y + i >= SIDE ? SIDE - 1 : y + i;
        a += w[i + 3] * tmp[yy * SIDE + x];
      }
      img[y * SIDE + x] = (float)a;
    }
}

/* Render one image as [H][W][C] uint16. */
static void render(int cls, int64_t index, uint64_t seed, uint16_t *out) {
  const struct class_def *k = &classes[cls];
  struct prng r = {seed * 0x9e3779b97f4a7c15ull ^ ((uint64_t)cls << 48) ^ (uint64_t)index, 0, 0};
  prng_next(&r);
  struct cell c;
  draw_cell(k, &r, &c);
  float ch[NCH][NPIX], chrom[NPIX], cyto[NPIX], granmap[NPIX], dotmap[NPIX];
  value_noise(&r, 12, chrom);
  value_noise(&r, 6, cyto);
  spots(&c, c.ngran, c.gx, c.gy, c.gr, c.gv, granmap);
  spots(&c, c.ndots, c.dx, c.dy, c.dr, c.dv, dotmap);
  double ct = cos(c.theta), st = sin(c.theta), sa = sqrt(c.aspect);
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++) {
      double dx = x + 0.5 - c.cx, dy = y + 0.5 - c.cy;
      /* Cell frame: rotate, then squash the long axis. */
      double u = (dx * ct + dy * st) / sa, v = (-dx * st + dy * ct) * sa;
      double rho = sqrt(u * u + v * v);
      double edge = (rho > 1e-9 ? outline(&c, u / rho, v / rho) : c.r) - rho;
      double in_cell = soft(edge);
      double ring = exp(-0.5 * edge * edge / 0.8);
      double in_nuc = 0;
      for (int i = 0; i < c.nlobes; i++) {
        double du = u - c.lx[i], dv = v - c.ly[i];
        double s = soft(c.lr[i] - sqrt(du * du + dv * dv));
        if (s > in_nuc) in_nuc = s;
      }
      if (c.br > 0) {
        double du = u - c.bx, dv = v - c.by;
        in_nuc *= 1 - soft(c.br - sqrt(du * du + dv * dv));
      }
      in_nuc *= in_cell;
      int p = y * SIDE + x;
      double t = 1 + k->chromatin * chrom[p];
      ch[0][p] = (float)(1.0 - 0.25 * in_cell - 0.12 * in_nuc + 0.35 * ring * (edge < 0 ? 1 : -0.6));
      ch[1][p] = (float)(in_nuc * (t > 0.1 ? t : 0.1));
      ch[2][p] = (float)(0.8 * ring + 0.1 * in_cell);
      ch[3][p] = (float)(in_cell * (1 - 0.8 * in_nuc) * (1.2 * granmap[p] + 0.35 * (0.7 + 0.3 * cyto[p])));
      double surf;
      if (k->surface == SURF_DOTS) {
        surf = 0.15 * ring + 0.9 * dotmap[p];
      } else if (k->surface == SURF_CAP) { /* one side of the membrane only */
        double w = rho > 1e-9 ? 0.5 + 0.5 * (u * c.cap_c + v * c.cap_s) / rho : 0.5;
        surf = (0.8 * ring + 0.1 * in_cell) * (0.1 + 0.9 * w * w * w);
      } else {
        surf = 0.6 * ring + 0.1 * in_cell;
      }
      ch[4][p] = (float)(surf * (0.85 + 0.15 * cyto[p]));
    }
  /* Optics and camera, the same for every class: focus blur, background (level and slope), gain
   * per channel, shot and read noise. */
  double focus = range(&r, 0.3, 1.3);
  static const double gain[NCH] = {9000, 12000, 9000, 8000, 9000}, bg[NCH] = {300, 180, 160, 200, 170};
  for (int q = 0; q < NCH; q++) {
    blur(ch[q], focus * (q == 0 ? 0.7 : 1.0));
    /* Stain and exposure: the brightest part of a channel saturates at a random level (0.45 to 1
     * of its peak), which changes the channel's intensity histogram but no shape - what DINO's
     * brightness jitter (with its clamp at 1) teaches the network to look past. */
    if (q > 0) {
      float peak = 0;
      for (int p = 0; p < NPIX; p++) peak = ch[q][p] > peak ? ch[q][p] : peak;
      float clip = peak * (float)range(&r, 0.45, 1.0);
      for (int p = 0; p < NPIX; p++) ch[q][p] = ch[q][p] < clip ? ch[q][p] : clip;
    }
    double g = gain[q] * exp(0.5 * gauss(&r)), b = bg[q] * exp(0.5 * gauss(&r));
    double slope_x = 0.04 * gauss(&r), slope_y = 0.04 * gauss(&r);
    for (int p = 0; p < NPIX; p++) {
      double sig = g * ch[q][p];
      if (sig < 0) sig = 0;
      double bgp = b * (1 + slope_x * (p % SIDE - SIDE / 2) / 10.0 + slope_y * (p / SIDE - SIDE / 2) / 10.0);
      double val = bgp + sig + sqrt(sig + 244.0) * noise(&r); /* shot noise and 12-count read noise */
      val = val < 0 ? 0 : val > 65535 ? 65535 : val;
      out[p * NCH + q] = (uint16_t)lrint(val);
    }
  }
}

static int write_tiff(const char *path, const uint16_t *hwc) {
  TIFF *t = TIFFOpen(path, "w");
  if (!t) return -1;
  uint16_t extra[NCH - 1] = {EXTRASAMPLE_UNSPECIFIED, EXTRASAMPLE_UNSPECIFIED, EXTRASAMPLE_UNSPECIFIED,
                             EXTRASAMPLE_UNSPECIFIED};
  int ok = TIFFSetField(t, TIFFTAG_IMAGEWIDTH, SIDE) && TIFFSetField(t, TIFFTAG_IMAGELENGTH, SIDE) &&
           TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, NCH) && TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 16) &&
           TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT) &&
           TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG) &&
           TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK) &&
           TIFFSetField(t, TIFFTAG_EXTRASAMPLES, NCH - 1, extra) &&
           TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, SIDE) &&
           TIFFSetField(t, TIFFTAG_IMAGEDESCRIPTION, "{\"shape\": [50, 50, 5]}") &&
           TIFFWriteEncodedStrip(t, 0, (void *)hwc, (tmsize_t)NPIX * NCH * 2) >= 0;
  TIFFClose(t);
  return ok ? 0 : -1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: scdino_demo_data -o DIR [-n IMAGES_PER_CLASS] [-s SEED] [-c CLASSES] [-q]\n"
          "Write a synthetic PBMC-like set of 50x50, 5-channel uint16 TIFF files (channels-last) in\n"
          "ImageFolder layout: DIR/<class>/<class>_NNNNN.tiff.\n"
          "  -o DIR   output folder (created)\n"
          "  -n N     images per class (default 300)\n"
          "  -s SEED  seed (default 1); the same seed gives the same files\n"
          "  -c K     number of classes, 1..%d (default %d)\n"
          "  -q       no summary line\n",
          NCLASSES, NCLASSES);
}

static int mkdirs(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(buf, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

int main(int argc, char **argv) {
  const char *outdir = NULL;
  long n = 300, ncls = NCLASSES;
  unsigned long long seed = 1;
  int quiet = 0, opt;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    }
  while ((opt = getopt(argc, argv, "o:n:s:c:qh")) != -1) {
    char *end = NULL;
    switch (opt) {
      case 'o': outdir = optarg; break;
      case 'n': n = strtol(optarg, &end, 10); break;
      case 's': seed = strtoull(optarg, &end, 10); break;
      case 'c': ncls = strtol(optarg, &end, 10); break;
      case 'q': quiet = 1; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
    if (end && *end) {
      fprintf(stderr, "scdino_demo_data: -%c wants a number, got '%s'\n", opt, optarg);
      return 2;
    }
  }
  if (!outdir || optind != argc || n < 1 || n > 10000000 || ncls < 1 || ncls > NCLASSES) {
    usage(stderr);
    return 2;
  }
  TIFFSetWarningHandler(NULL);
  for (int c = 0; c < ncls; c++) {
    char d[4096];
    snprintf(d, sizeof d, "%s/%s", outdir, classes[c].name);
    if (mkdirs(d) != 0) {
      fprintf(stderr, "scdino_demo_data: cannot create %s: %s\n", d, strerror(errno));
      return 1;
    }
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int64_t total = (int64_t)ncls * n, failed = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : failed)
  for (int64_t i = 0; i < total; i++) {
    int c = (int)(i / n);
    int64_t j = i % n;
    uint16_t img[NPIX * NCH];
    char path[4200];
    render(c, j, seed, img);
    snprintf(path, sizeof path, "%s/%s/%s_%05lld.tiff", outdir, classes[c].name, classes[c].name, (long long)j);
    if (write_tiff(path, img) != 0) {
      if (failed == 0) fprintf(stderr, "scdino_demo_data: cannot write %s\n", path);
      failed++;
    }
  }
  if (failed) {
    fprintf(stderr, "scdino_demo_data: %lld file(s) could not be written\n", (long long)failed);
    return 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (!quiet)
    printf("scdino_demo_data: %lld images (%ld classes x %ld) in %s in %.2f s (%.0f images/s)\n", (long long)total,
           ncls, n, outdir, dt, (double)total / (dt > 0 ? dt : 1e-9));
  return 0;
}
