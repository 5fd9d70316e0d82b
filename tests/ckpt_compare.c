/* tests/ckpt_compare.c - compare the datasets of two checkpoints, exactly or to a relative tolerance.
 *
 *   ckpt_compare -e A.h5 B.h5 GROUP...            every dataset under GROUP bit-identical
 *   ckpt_compare [-r TOL] [-g GTOL] [-k ATOL] A.h5 B.h5 GROUP...
 *       per dataset ||a - b|| / ||b|| <= TOL, and over all datasets of each GROUP together
 *       (the whole weight vector) <= GTOL; for *.attn.qkv.bias the key third is compared
 *       absolutely (<= ATOL, default 1e-3): its gradient is exactly zero in exact arithmetic (softmax
 *       ignores a constant added to a row of scores), so both runs only see rounding noise there,
 *       which AdamW normalises into steps of about lr that do not agree between two summation orders.
 * Both files must hold the same set of datasets under each GROUP with the same shapes.  Exit 0 when
 * they agree, 1 when not (each difference printed), 2 on usage or I/O errors. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int exact = 0;
static double rtol = 0, gtol = 0, katol = 1e-3;
static double gdiff2, gref2; /* the current group's sums of squares */
static hid_t fa, fb;
static int ndiff, ncompared;
static double worst;
static char worst_name[512];

/* A dataset read as double (float32 and int64 step counts convert exactly). */
static double *read_all(hid_t f, const char *name, hsize_t *n, int *nd, hsize_t *dims) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0) return NULL;
  hid_t sp = H5Dget_space(d);
  *nd = H5Sget_simple_extent_ndims(sp);
  H5Sget_simple_extent_dims(sp, dims, NULL);
  *n = (hsize_t)H5Sget_simple_extent_npoints(sp);
  H5Sclose(sp);
  double *x = malloc((*n ? *n : 1) * sizeof *x);
  if (H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) < 0) {
    fprintf(stderr, "ckpt_compare: cannot read %s\n", name);
    exit(2);
  }
  H5Dclose(d);
  return x;
}

static double norm_diff(const double *a, const double *b, size_t lo, size_t hi, double *nb) {
  double s = 0, r = 0;
  for (size_t i = lo; i < hi; i++) {
    s += (a[i] - b[i]) * (a[i] - b[i]);
    r += b[i] * b[i];
  }
  *nb = sqrt(r);
  return sqrt(s);
}

static void compare(const char *name) {
  hsize_t na, nb, da[32], db[32];
  int ra, rb;
  double *a = read_all(fa, name, &na, &ra, da), *b = read_all(fb, name, &nb, &rb, db);
  ncompared++;
  if (!b) {
    printf("%s: missing in the second file\n", name);
    ndiff++;
    free(a);
    return;
  }
  int same_shape = ra == rb && na == nb;
  for (int i = 0; same_shape && i < ra; i++) same_shape = da[i] == db[i];
  if (!same_shape) {
    printf("%s: shapes differ\n", name);
    ndiff++;
  } else if (exact) {
    for (hsize_t i = 0; i < na; i++)
      if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
        printf("%s: element %llu differs: %.9g vs %.9g\n", name, (unsigned long long)i, a[i], b[i]);
        ndiff++;
        break;
      }
  } else {
    const size_t len = strlen(name);
    const int qkvb = len >= 13 && !strcmp(name + len - 13, "attn.qkv.bias");
    double e, nr;
    if (qkvb) {
      const size_t D = (size_t)na / 3;
      double e1, n1, e2, n2, kmax = 0;
      e1 = norm_diff(a, b, 0, D, &n1);
      e2 = norm_diff(a, b, 2 * D, 3 * D, &n2);
      e = sqrt(e1 * e1 + e2 * e2);
      nr = sqrt(n1 * n1 + n2 * n2);
      for (size_t i = D; i < 2 * D; i++) kmax = fmax(kmax, fabs(a[i] - b[i]));
      if (kmax > katol) {
        printf("%s: key part differs by %.3e > %.1e\n", name, kmax, katol);
        ndiff++;
      }
    } else {
      e = norm_diff(a, b, 0, (size_t)na, &nr);
    }
    gdiff2 += e * e;
    gref2 += nr * nr;
    const double rel = nr > 0 ? e / nr : e;
    if (rel > worst) {
      worst = rel;
      snprintf(worst_name, sizeof worst_name, "%s", name);
    }
    if (rtol > 0 && !(rel <= rtol)) {
      printf("%s: relative difference %.3e > %.1e\n", name, rel, rtol);
      ndiff++;
    }
  }
  free(a);
  free(b);
}

static const char *cur_group;
static int count_only;
static long counted;

static herr_t visit(hid_t o, const char *name, const H5O_info_t *info, void *op) {
  (void)o;
  (void)op;
  if (info->type != H5O_TYPE_DATASET) return 0;
  char full[512];
  snprintf(full, sizeof full, "%s/%s", cur_group, name);
  if (count_only)
    counted++;
  else
    compare(full);
  return 0;
}

static long walk(hid_t f, const char *group, int only_count) {
  hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
  if (g < 0) {
    fprintf(stderr, "ckpt_compare: no group %s\n", group);
    exit(2);
  }
  cur_group = group;
  count_only = only_count;
  counted = 0;
  H5Ovisit(g, H5_INDEX_NAME, H5_ITER_INC, visit, NULL);
  H5Gclose(g);
  return counted;
}

int main(int argc, char **argv) {
  int opt;
  while ((opt = getopt(argc, argv, "er:g:k:")) != -1) {
    if (opt == 'e')
      exact = 1;
    else if (opt == 'r')
      rtol = atof(optarg);
    else if (opt == 'g')
      gtol = atof(optarg);
    else if (opt == 'k')
      katol = atof(optarg);
    else
      return 2;
  }
  if (argc - optind < 3 || (!exact && rtol <= 0 && gtol <= 0)) {
    fprintf(stderr, "usage: ckpt_compare -e | [-r TOL] [-g GTOL] [-k ATOL] A.h5 B.h5 GROUP...\n");
    return 2;
  }
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  fa = H5Fopen(argv[optind], H5F_ACC_RDONLY, H5P_DEFAULT);
  fb = H5Fopen(argv[optind + 1], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fa < 0 || fb < 0) {
    fprintf(stderr, "ckpt_compare: cannot open %s or %s\n", argv[optind], argv[optind + 1]);
    return 2;
  }
  for (int i = optind + 2; i < argc; i++) {
    const long na = walk(fa, argv[i], 1), nb = walk(fb, argv[i], 1);
    if (na != nb || na == 0) {
      printf("%s: %ld datasets in the first file, %ld in the second\n", argv[i], na, nb);
      ndiff++;
    }
    gdiff2 = gref2 = 0;
    walk(fa, argv[i], 0);
    if (!exact) {
      const double g = gref2 > 0 ? sqrt(gdiff2 / gref2) : sqrt(gdiff2);
      printf("%s: relative difference of the whole group %.3e%s\n", argv[i], g,
             gtol > 0 ? (g <= gtol ? " (ok)" : " (too large)") : "");
      if (gtol > 0 && !(g <= gtol)) ndiff++;
    }
  }
  if (exact)
    printf("%d datasets compared exactly, %d differ\n", ncompared, ndiff);
  else
    printf("%d datasets compared, %d differ; largest relative difference %.3e (%s)\n", ncompared,
           ndiff, worst, worst_name);
  H5Fclose(fa);
  H5Fclose(fb);
  return ndiff ? 1 : 0;
}
