/* tests/unit/analysis/test_knn_run.c - calculation='knn' end to end: a deck, a features file in a scratch
 * run_dir, knn_run, and the contents of knn.txt and knn.h5 checked against an independent
 * evaluation on the split of upstream's numpy shuffle (tests/data/dino_tiny.h5 split/n1000_seed40);
 * then the file selection, the overwrite, and the input errors; the accuracy per group (&knn group_by:
 * every metadata column, 'folder', named columns, 'none', an unknown column) against a hand
 * computation, and rows without labels refused. */
#include "build_config.h"

#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/features_io.h"
#include "analysis/knn.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/npshuffle.h"
#include "input/config.h"
#include "tests/fixtures/testutil.h"

static char run_dir[512];

static void parse_deck(const char *text, struct config *cfg) {
  char err[8192];
  int n = config_parse_text("test.nml", text, cfg, err, sizeof err);
  if (n != 0) {
    fprintf(stderr, "deck errors:\n%s\n%s\n", err, text);
    exit(99);
  }
}

/* n rows around C centres in d dimensions, L2-normalised; index = 5000 + 2 i. */
static void make_features(struct features *f, int64_t n, int d, int C, uint64_t seed, int64_t epoch) {
  memset(f, 0, sizeof *f);
  f->n = n;
  f->d = d;
  f->nclasses = C;
  f->x = malloc((size_t)(n * d) * sizeof(float));
  f->labels = malloc((size_t)n * sizeof(int32_t));
  f->index = malloc((size_t)n * sizeof(int64_t));
  f->paths = malloc((size_t)n * sizeof(char *));
  f->class_names = malloc((size_t)C * sizeof(char *));
  struct rng r;
  rng_init(&r, seed, RNG_DOMAIN_TEST, 10, 0);
  float *centres = malloc((size_t)(C * d) * sizeof(float));
  for (int i = 0; i < C * d; i++) centres[i] = (float)(0.3 * rng_normal(&r));
  for (int64_t i = 0; i < n; i++) {
    int c = (int)rng_below(&r, (uint64_t)C);
    f->labels[i] = c;
    for (int j = 0; j < d; j++) f->x[i * d + j] = centres[c * d + j] + (float)rng_normal(&r);
    f->index[i] = 5000 + 2 * i;
    char p[64];
    snprintf(p, sizeof p, "c%d/%05lld.tif", c, (long long)i);
    f->paths[i] = strdup(p);
  }
  free(centres);
  for (int c = 0; c < C; c++) {
    char s[32];
    snprintf(s, sizeof s, "type_%c", 'A' + c);
    f->class_names[c] = strdup(s);
  }
  features_l2_normalize(f->x, n, d);
  snprintf(f->checkpoint, sizeof f->checkpoint, "%s/checkpoint_%04lld.h5", run_dir, (long long)epoch);
  snprintf(f->checkpoint_key, sizeof f->checkpoint_key, "teacher");
  f->epoch = epoch;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int count_substr(const char *s, const char *needle) {
  int n = 0;
  for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static int run_calc(void *cfg) { return knn_run(cfg) == 0 ? 0 : 1; }

/* knn_run(cfg) in a child: exit status `code`, and `needle` in what it printed on stderr. */
static void expect_fail(const char *deck, int code, const char *needle) {
  static struct config cfg;
  parse_deck(deck, &cfg);
  char buf[8192];
  const int got = t_run_child(run_calc, &cfg, 1, buf, sizeof buf);
  T_CHECK(got == code, "exit %d, wanted %d: %s", got, code, buf);
  T_CHECK(strstr(buf, needle) != NULL, "message lacks '%s': %s", needle, buf);
  if (t_verbose) printf("  %s", buf);
}

static void test_end_to_end(void) {
  char path[4400], deck[8192];
  struct features f, decoy;
  make_features(&f, 1000, 24, 5, 1, 3);
  make_features(&decoy, 50, 24, 5, 2, 1);
  snprintf(path, sizeof path, "%s/features_0003.h5", run_dir);
  features_write(path, &f);
  char decoy_path[4400];
  snprintf(decoy_path, sizeof decoy_path, "%s/features_0001.h5", run_dir);
  features_write(decoy_path, &decoy);

  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n"
           "&knn k = 1, 3, 20, 1000, temperature = 0.07, baselines = .false., table_k = 20 /\n",
           run_dir);
  static struct config cfg;
  parse_deck(deck, &cfg);
  T_CHECK(knn_run(&cfg) == 0, "knn_run succeeds");

  /* Independent evaluation on the upstream split: numpy.random.seed(40); shuffle(range(1000));
   * reference = first int(0.8 * 1000) = 800 rows. */
  size_t np;
  double *perm = t_h5_read_f64(t_datafile("dino_tiny.h5"), "/split/n1000_seed40", &np);
  T_CHECK(np == 1000, "reference permutation");
  const int d = 24, C = 5;
  float *tr = malloc(800 * d * sizeof *tr), *te = malloc(200 * d * sizeof *te);
  int32_t tl[800], tel[200];
  for (int i = 0; i < 1000; i++) {
    int64_t row = (int64_t)perm[i];
    if (i < 800) {
      memcpy(tr + i * d, f.x + row * d, d * sizeof(float));
      tl[i] = f.labels[row];
    } else {
      memcpy(te + (i - 800) * d, f.x + row * d, d * sizeof(float));
      tel[i - 800] = f.labels[row];
    }
  }
  const int64_t k[] = {1, 3, 20, 1000};
  struct knn_result want;
  knn_evaluate(tr, tl, 800, te, tel, 200, d, C, k, 4, 0.07, &want);

  /* knn.h5 */
  char h5[4400];
  snprintf(h5, sizeof h5, "%s/knn.h5", run_dir);
  size_t n;
  double *top1 = t_h5_read_f64(h5, "/trained/top1", &n);
  double *top2 = t_h5_read_f64(h5, "/trained/top2", NULL);
  double *f1 = t_h5_read_f64(h5, "/trained/f1", NULL);
  double *bal = t_h5_read_f64(h5, "/trained/balanced_accuracy", NULL);
  double *conf = t_h5_read_f64(h5, "/trained/confusion", NULL);
  double *kk = t_h5_read_f64(h5, "/k", NULL);
  double *ku = t_h5_read_f64(h5, "/k_used", NULL);
  double *sup = t_h5_read_f64(h5, "/test_support", NULL);
  T_CHECK(n == 4, "4 k values in knn.h5");
  for (int j = 0; j < 4; j++) {
    T_NEAR(top1[j], want.top1[j], 1e-12, "knn.h5 top1");
    T_NEAR(top2[j], want.top2[j], 1e-12, "knn.h5 top2");
    T_NEAR(bal[j], want.balanced_accuracy[j], 1e-12, "knn.h5 balanced accuracy");
    T_NEAR(kk[j], k[j], 0, "knn.h5 k");
    for (int c = 0; c < C; c++) T_NEAR(f1[j * C + c], want.f1[j * C + c], 1e-12, "knn.h5 f1");
    for (int c = 0; c < C * C; c++) T_NEAR(conf[j * C * C + c], (double)want.confusion[j * C * C + c], 0, "confusion");
  }
  T_NEAR(ku[3], 800, 0, "k = 1000 clamped to the 800 reference rows");
  double total = 0;
  for (int c = 0; c < C; c++) total += sup[c];
  T_NEAR(total, 200, 0, "200 test rows");
  T_NEAR(t_h5_attr(h5, "n_train"), 800, 0, "n_train attribute");
  T_NEAR(t_h5_attr(h5, "n_test"), 200, 0, "n_test attribute");
  T_NEAR(t_h5_attr(h5, "temperature"), 0.07, 0, "temperature attribute");
  T_NEAR(t_h5_attr(h5, "seed"), 40, 0, "seed attribute");
  T_NEAR(t_h5_attr(h5, "epoch"), 3, 0, "epoch attribute (newest features file)");
  T_NEAR(t_h5_attr(h5, "table_k"), 20, 0, "table_k attribute");
  free(top1), free(top2), free(f1), free(bal), free(conf), free(kk), free(ku), free(sup);

  /* knn.txt: upstream's lines first, then the tables. */
  char txt[4400];
  snprintf(txt, sizeof txt, "%s/knn.txt", run_dir);
  const char *s = slurp(txt);
  T_CHECK(s != NULL, "knn.txt exists");
  if (!s) return;
  char line[4600];
  snprintf(line, sizeof line, "Run: %s_epoch3\n", path);
  T_CHECK(strncmp(s, line, strlen(line)) == 0, "knn.txt starts with '%s'", line);
  for (int j = 0; j < 4; j++) {
    snprintf(line, sizeof line, "\n%lld-NN Top1: %ld, Top2: %ld\n", (long long)k[j], (long)rint(want.top1[j]),
             (long)rint(want.top2[j]));
    T_CHECK(strstr(s, line) != NULL, "knn.txt has '%s'", line + 1);
  }
  T_CHECK(strstr(s, "\n----\n") != NULL, "upstream separator line");
  T_CHECK(strstr(s, "k = 1000 exceeds the 800 reference rows; clamped to 800") != NULL, "clamp warning");
  T_CHECK(strstr(s, "Per-class metrics of the teacher features at k = 20:") != NULL, "per-class table at table_k");
  T_CHECK(strstr(s, "Confusion matrix of the teacher features at k = 20") != NULL, "confusion matrix");
  T_CHECK(strstr(s, "type_E") != NULL, "class names in the tables");
  snprintf(line, sizeof line, "%7d   %8.2f%8.2f%9.2f%9.2f\n", 20, want.top1[2], want.top2[2],
           want.balanced_accuracy[2], want.macro_f1[2]);
  T_CHECK(strstr(s, line) != NULL, "summary row for k = 20: '%s'", line);

  /* A second run overwrites (upstream appended). */
  T_CHECK(knn_run(&cfg) == 0, "second knn_run");
  s = slurp(txt);
  T_CHECK(s && count_substr(s, "Run: ") == 1, "knn.txt holds one run, not two");
  char cmd[4600];
  snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", run_dir);
  T_CHECK(system(cmd) != 0, "no temporary files in run_dir");

  /* knn.features names a file explicitly: the decoy (50 rows) is used. */
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n&knn features = '%s', k = 3, baselines = .false. /\n",
           run_dir, decoy_path);
  parse_deck(deck, &cfg);
  T_CHECK(knn_run(&cfg) == 0, "knn_run on knn.features");
  T_NEAR(t_h5_attr(h5, "n_rows"), 50, 0, "knn.features was read");
  T_NEAR(t_h5_attr(h5, "n_train"), 40, 0, "int(0.8 * 50) reference rows");

  knn_result_free(&want);
  free(perm);
  free(tr);
  free(te);
  features_free(&f);
  features_free(&decoy);
}

static void test_errors(void) {
  char deck[8192], empty[4400];
  snprintf(empty, sizeof empty, "%s/empty", run_dir);
  snprintf(deck, sizeof deck, "&control calculation = 'knn', run_dir = '%s' /\n", empty);
  expect_fail(deck, 3, "holds no features_EEEE.h5");
  snprintf(deck, sizeof deck, "&control calculation = 'knn', run_dir = '%s' /\n&knn features = '%s/nope.h5' /\n",
           run_dir, run_dir);
  expect_fail(deck, 2, "nope.h5': no such file");
  /* (A table_k not among k is a deck error now: tests/decks/bad_later_steps.nml.) */
  /* int(0.01 * 50) = 0 reference rows in the 50-row file */
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n&knn features = '%s/features_0001.h5', "
           "train_fraction = 0.01 /\n", run_dir, run_dir);
  expect_fail(deck, 2, "knn.train_fraction = 0.01 leaves no reference rows among the 50 rows");
  /* A damaged newest features file is a data error naming it. */
  char bad[4400];
  snprintf(bad, sizeof bad, "%s/features_0009.h5", run_dir);
  FILE *fp = fopen(bad, "w");
  fputs("garbage", fp);
  fclose(fp);
  snprintf(deck, sizeof deck, "&control calculation = 'knn', run_dir = '%s' /\n", run_dir);
  expect_fail(deck, 3, "features_0009.h5: not a readable HDF5 file");
  remove(bad);
}

/* The accuracy per group against a hand computation.  400 rows of 4 features on two points e1 and
 * e2 (similarity 1 within, 0 across): at e1 160 rows of class 0 from donor d1 and 40 of class 1 from
 * donor d2, at e2 the reverse.  With 320 reference rows a point keeps at least 200 - 80 = 120 of
 * them, so the k <= 120 nearest neighbours of a row are all at its own point, of whom at most 40 are
 * of the point's minority class: for k > 80 every row is predicted its point's majority class, and
 * exactly the rows of donor d1 are right.  Column 'plate' (P1 for even rows, P2 for odd ones) then
 * has the share of d1 rows among its test rows; column 'cell' (one value per row) has 80 values
 * among the test rows, more than 64: no table.  The paths' first folder is the plate: group_by
 * 'folder' gives the plate's numbers. */
static void test_groups(const char *base) {
  const int64_t n = 400;
  struct features f;
  memset(&f, 0, sizeof f);
  f.n = n, f.d = 4, f.nclasses = 2, f.nmeta = 3;
  f.x = calloc((size_t)(n * 4), sizeof *f.x);
  f.labels = malloc((size_t)n * sizeof *f.labels);
  f.index = malloc((size_t)n * sizeof *f.index);
  f.paths = malloc((size_t)n * sizeof *f.paths);
  f.class_names = malloc(2 * sizeof *f.class_names);
  f.class_names[0] = strdup("A"), f.class_names[1] = strdup("B");
  f.meta_names = malloc(3 * sizeof *f.meta_names);
  f.meta_names[0] = strdup("donor"), f.meta_names[1] = strdup("plate"), f.meta_names[2] = strdup("cell");
  f.meta = malloc((size_t)(3 * n) * sizeof *f.meta);
  int d1[400];
  for (int64_t i = 0; i < n; i++) {
    const int point = i < 200, minority = i % 5 == 0; /* 40 of each point's 200 */
    f.x[i * 4 + (point ? 0 : 1)] = 1.0f;
    f.labels[i] = point ? minority : !minority;
    d1[i] = !minority;
    f.index[i] = i;
    char v[32];
    snprintf(v, sizeof v, "%s/img%03lld.tif", i % 2 ? "P2" : "P1", (long long)i);
    f.paths[i] = strdup(v);
    f.meta[i] = strdup(minority ? "d2" : "d1");
    f.meta[n + i] = strdup(i % 2 ? "P2" : "P1");
    snprintf(v, sizeof v, "c%03lld", (long long)i);
    f.meta[2 * n + i] = strdup(v);
  }
  snprintf(f.checkpoint_key, sizeof f.checkpoint_key, "teacher");
  char dir[4200], path[4400], deck[14000];
  snprintf(dir, sizeof dir, "%s/groups", base);
  fs_mkdir_p(dir);
  snprintf(path, sizeof path, "%s/features_0000.h5", dir);
  features_write(path, &f);
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n"
           "&knn features = '%s', k = 100, 110, baselines = .false., table_k = 100 /\n", dir, path);
  static struct config cfg;
  parse_deck(deck, &cfg);
  T_CHECK(knn_run(&cfg) == 0, "knn_run on rows with metadata");

  /* By hand: the test rows are the last 80 of numpy's shuffle. */
  int64_t perm[400];
  npshuffle_perm(40, n, perm);
  int sup[2][2] = {{0, 0}, {0, 0}}, right[2] = {0, 0}; /* [column][value], [plate] */
  for (int64_t t = 320; t < n; t++) {
    const int64_t i = perm[t];
    sup[0][!d1[i]]++;
    sup[1][i % 2]++;
    right[i % 2] += d1[i];
  }
  char h5[4400];
  snprintf(h5, sizeof h5, "%s/knn.h5", dir);
  size_t got;
  double *ds = t_h5_read_f64(h5, "/groups/donor/test_support", &got);
  double *dt = t_h5_read_f64(h5, "/groups/donor/top1_trained", NULL);
  double *d2 = t_h5_read_f64(h5, "/groups/donor/top2_trained", NULL);
  double *ps = t_h5_read_f64(h5, "/groups/plate/test_support", NULL);
  double *pt = t_h5_read_f64(h5, "/groups/plate/top1_trained", NULL);
  T_CHECK(got == 2 && ds[0] == sup[0][0] && ds[1] == sup[0][1], "donor test rows %g %g, by hand %d %d", ds[0], ds[1],
          sup[0][0], sup[0][1]);
  T_CHECK(sup[0][0] > 0 && sup[0][1] > 0, "both donors among the test rows");
  for (int j = 0; j < 2; j++) {
    T_NEAR(dt[j * 2 + 0], 100.0, 0, "donor d1 Top-1");
    T_NEAR(dt[j * 2 + 1], 0.0, 0, "donor d2 Top-1");
    for (int v = 0; v < 2; v++) T_CHECK(d2[j * 2 + v] >= dt[j * 2 + v] && d2[j * 2 + v] <= 100.0, "donor Top-2");
    for (int v = 0; v < 2; v++) T_NEAR(pt[j * 2 + v], 100.0 * right[v] / sup[1][v], 1e-12, "plate Top-1");
  }
  T_CHECK(ps[0] == sup[1][0] && ps[1] == sup[1][1], "plate test rows");
  double *top1 = t_h5_read_f64(h5, "/trained/top1", NULL);
  T_NEAR(top1[0], 100.0 * sup[0][0] / 80, 1e-12, "overall Top-1: the share of d1 rows");
  free(ds), free(dt), free(d2), free(ps), free(top1);
  hid_t fid = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
  T_CHECK(H5Lexists(fid, "groups/folder", H5P_DEFAULT) == 0, "no 'folder' groups by default");
  hid_t g = H5Gopen2(fid, "groups/cell", H5P_DEFAULT);
  int64_t distinct = 0;
  hid_t a = H5Aopen(g, "distinct_values", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_INT64, &distinct);
  T_CHECK(distinct == 80 && H5Lexists(g, "values", H5P_DEFAULT) == 0, "column 'cell': 80 values, no table");
  H5Aclose(a), H5Gclose(g), H5Fclose(fid);

  char txt[4400], line[256];
  snprintf(txt, sizeof txt, "%s/knn.txt", dir);
  const char *s = slurp(txt);
  T_CHECK(s && strstr(s, "Accuracy in % per value of the metadata column 'donor' at k = 100, Top-1 / Top-2 (every k: "
                         "knn.h5 groups/donor):\n  donor       rows        trained\n"), "donor table: %s", s ? s : "");
  snprintf(line, sizeof line, "\n  d1      %8d  %6.2f/", sup[0][0], 100.0);
  T_CHECK(s && strstr(s, line), "donor row '%s' in %s", line, s ? s : "");
  snprintf(line, sizeof line, "\n  d2      %8d    0.00/", sup[0][1]);
  T_CHECK(s && strstr(s, line), "donor row '%s' in %s", line, s ? s : "");
  T_CHECK(s && strstr(s, "Groups by the metadata column 'cell': 80 distinct values among the query rows, more than 64: "
                         "no per-group table"), "the note on 'cell'");

  /* Named columns in the order given, each once; 'folder' (the paths' first folder) = the plates. */
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n"
           "&knn features = '%s', k = 100, 110, baselines = .false., table_k = 100, group_by = 'folder', 'plate', "
           "'folder' /\n", dir, path);
  parse_deck(deck, &cfg);
  T_CHECK(knn_run(&cfg) == 0, "knn_run grouped by folder and plate");
  double *ft = t_h5_read_f64(h5, "/groups/folder/top1_trained", &got);
  T_CHECK(got == 4, "folder: 2 values at 2 k");
  for (int e = 0; e < 4; e++) T_NEAR(ft[e], pt[e], 0, "folder Top-1 = plate Top-1");
  free(ft), free(pt);
  fid = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
  T_CHECK(H5Lexists(fid, "groups/donor", H5P_DEFAULT) == 0 && H5Lexists(fid, "groups/plate", H5P_DEFAULT) > 0,
          "only the named columns");
  H5Fclose(fid);
  s = slurp(txt);
  T_CHECK(s && strstr(s, "per value of 'folder' (the first folder of each path) at k = 100") &&
          strstr(s, "per value of 'folder'") < strstr(s, "per value of the metadata column 'plate'"),
          "folder table, then plate table: %s", s ? s : "");
  /* 'none': no groups; a column the file lacks: refused before any work. */
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n"
           "&knn features = '%s', k = 100, baselines = .false., group_by = 'none' /\n", dir, path);
  parse_deck(deck, &cfg);
  T_CHECK(knn_run(&cfg) == 0, "knn_run without groups");
  fid = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
  T_CHECK(H5Lexists(fid, "groups", H5P_DEFAULT) == 0 && H5Lexists(fid, "group_columns", H5P_DEFAULT) == 0,
          "group_by = 'none': no groups");
  H5Fclose(fid);
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n"
           "&knn features = '%s', k = 5, group_by = 'donor', 'well' /\n", dir, path);
  expect_fail(deck, 2, "knn.group_by = 'well' is no metadata column of the query rows' file");

  /* Two files: the query rows are grouped by the query file's metadata (the reference has none).  Every
   * row at a point has its point's 200 rows as reference rows, 160 of the majority class: at k = 100
   * every query row is predicted its point's majority class, so donor d1's 320 rows are right. */
  char ref[4400];
  snprintf(ref, sizeof ref, "%s/reference.h5", dir);
  const int nmeta = f.nmeta;
  f.nmeta = 0;
  features_write(ref, &f);
  f.nmeta = nmeta;
  snprintf(deck, sizeof deck,
           "&control calculation = 'knn', run_dir = '%s' /\n"
           "&knn reference = '%s', query = '%s', k = 100, 110 /\n", dir, ref, path);
  parse_deck(deck, &cfg);
  T_CHECK(knn_run(&cfg) == 0, "knn_run on a reference and a query file");
  ds = t_h5_read_f64(h5, "/groups/donor/test_support", &got);
  dt = t_h5_read_f64(h5, "/groups/donor/top1_trained", NULL);
  T_CHECK(got == 2 && ds[0] == 320 && ds[1] == 80, "pair: donor rows %g %g", ds[0], ds[1]);
  for (int e = 0; e < 4; e++) T_NEAR(dt[e], e % 2 ? 0.0 : 100.0, 0, "pair: donor Top-1");
  free(ds), free(dt);

  /* Rows without labels: refused. */
  f.nclasses = 0;
  for (int64_t i = 0; i < n; i++) f.labels[i] = -1;
  snprintf(path, sizeof path, "%s/unlabelled.h5", dir);
  features_write(path, &f);
  snprintf(deck, sizeof deck, "&control calculation = 'knn', run_dir = '%s' /\n&knn features = '%s', k = 5 /\n", dir,
           path);
  expect_fail(deck, 2, "kNN needs labelled rows, but");
  features_free(&f);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  log_init(0, t_verbose ? 1 : 0);
  const char *d = t_scratch_dir("test_knn_run");
  snprintf(run_dir, sizeof run_dir, "%s/run", d);
  fs_mkdir_p(run_dir);
  test_end_to_end();
  test_errors();
  test_groups(d);
  return t_finish();
}
