/* tests/unit/workflow/test_pipeline_summary.c - the pipeline summary's verdict on learning: whether
 * the trained features' best kNN Top-1 beats the best baseline's by more than two standard errors
 * (both sides of the boundary), the likely causes it names from the last epoch's diagnostics
 * (issue 37's run and the demo deck on its DNA channel alone: nearly uniform targets; a collapse to one
 * prototype), a baseline at 100 % (nothing to
 * beat), no verdict without baselines;
 * and pipeline_log_last on log.txt lines (the last value, null, a missing key or file). */
#include "build_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workflow/pipeline.h"
#include "tests/fixtures/testutil.h"

static char text[16384], flat[16384];

/* A summary with the demo's k values and both baselines on n_test rows; Top-1 of the trained,
 * raw-pixel and random-init features at every k. */
static void summary(struct pipeline_summary *s, const double t[4], const double raw[4], const double rnd[4]) {
  memset(s, 0, sizeof *s);
  s->nk = 4;
  const long long k[4] = {5, 10, 20, 50};
  memcpy(s->k, k, sizeof k);
  s->nsets = 3;
  snprintf(s->set_name[0], sizeof s->set_name[0], "trained");
  snprintf(s->set_name[1], sizeof s->set_name[1], "raw_pixels");
  snprintf(s->set_name[2], sizeof s->set_name[2], "random_init");
  snprintf(s->set_label[1], sizeof s->set_label[1], "raw pixels 16x16");
  for (int i = 0; i < 4; i++) s->top1[0][i] = t[i], s->top1[1][i] = raw[i], s->top1[2][i] = rnd[i];
  s->n_test = 480;
  s->out_dim = 4096;
  s->final_loss = 2.17;
  s->diag[0] = 1.9, s->diag[1] = 5.5, s->diag[2] = 0.27, s->diag[3] = 1.2; /* a healthy last epoch */
}

static const char *print(const struct pipeline_summary *s) {
  FILE *f = fmemopen(text, sizeof text, "w");
  T_CHECK(f != NULL, "fmemopen");
  pipeline_summary_print(s, f);
  fclose(f);
  if (t_verbose) fputs(text, stdout);
  /* the lines joined: a newline and the next line's indentation read as one space */
  size_t n = 0;
  for (const char *p = text; *p; p++) {
    if (*p == '\n') {
      while (p[1] == ' ') p++;
      flat[n++] = ' ';
    } else {
      flat[n++] = *p;
    }
  }
  flat[n] = 0;
  return text;
}

static void expect(const char *what, int want) {
  const int got = strstr(flat, what) != NULL;
  T_CHECK(got == want, "the summary %s \"%s\":\n%s", want ? "lacks" : "unexpectedly has", what, text);
}

static void test_verdicts(void) {
  struct pipeline_summary s;
  /* The demo (README): the trained features beat both baselines. */
  summary(&s, (double[]){84.0, 84.4, 83.1, 82.1}, (double[]){52.9, 51.7, 53.1, 52.1}, (double[]){55.0, 58.1, 56.5, 56.3});
  T_CHECK(pipeline_beats_baselines(&s) == 1, "the demo's numbers: trained features not ahead");
  print(&s);
  expect("The trained network learnt more than the baselines: best Top-1 84.40 % (k=10) against 58.10 % "
         "(random_init, k=10), more than two standard errors (2.25 points each on 480 test rows).", 1);
  expect("did not learn", 0);
  expect("last epoch  : teacher entropy 1.900 per image, 5.500 of the batch mean (ln out_dim = 8.318); KL 0.270", 1);

  /* Issue 37's run: 21.6 % trained against 53.2 % raw pixels and 19.8 % random; loss 7.6 with
   * nearly uniform targets. */
  summary(&s, (double[]){20.1, 21.6, 21.0, 19.5}, (double[]){52.0, 53.2, 52.5, 51.0}, (double[]){19.8, 19.0, 18.7, 18.2});
  s.final_loss = 7.6, s.diag[0] = 7.55, s.diag[1] = 7.9, s.diag[2] = 0.05;
  T_CHECK(pipeline_beats_baselines(&s) == 0, "issue 37's numbers: trained features counted as ahead");
  print(&s);
  expect("WARNING: the trained network did not learn more than the baselines: its best Top-1, 21.60 % (k=10), "
         "is not above the best baseline's, 53.20 % (raw pixels 16x16, k=10), by more than two standard errors "
         "(2.28 points each on 480 test rows). Likely causes:", 1);
  expect("the teacher's outputs stayed nearly uniform (entropy 7.550 of ln out_dim = 8.318, loss 7.600 in the last "
         "epoch)", 1);
  expect("teacher_temp", 1);
  expect("collapsed to one prototype", 0);

  /* The demo deck on the DNA channel alone (input/demo_study.nml, measured): loss 7.616 = 0.92 ln K,
   * teacher entropy 7.128 = 0.86 ln K, a KL part of 0.49; 27.3 % against 34.8 % for raw pixels. */
  summary(&s, (double[]){26.04, 26.88, 27.29, 24.79}, (double[]){34.79, 32.50, 30.42, 28.75},
          (double[]){22.29, 20.00, 21.88, 18.12});
  s.final_loss = 7.616, s.diag[0] = 7.128, s.diag[1] = 7.738, s.diag[2] = 0.489;
  T_CHECK(pipeline_beats_baselines(&s) == 0, "the DNA set's numbers: trained features counted as ahead");
  print(&s);
  expect("its best Top-1, 27.29 % (k=20), is not above the best baseline's, 34.79 % (raw pixels 16x16, k=5)", 1);
  expect("the teacher's outputs stayed nearly uniform (entropy 7.128 of ln out_dim = 8.318, loss 7.616", 1);

  /* Two standard errors of 53.2 % on 480 rows are 4.555 points: 57.8 is ahead, 57.7 is not. */
  summary(&s, (double[]){57.8, 50, 50, 50}, (double[]){40, 53.2, 40, 40}, (double[]){40, 40, 40, 40});
  T_CHECK(pipeline_beats_baselines(&s) == 1, "57.8 against 53.2 on 480 rows: not ahead");
  s.top1[0][0] = 57.7;
  T_CHECK(pipeline_beats_baselines(&s) == 0, "57.7 against 53.2 on 480 rows: ahead");
  /* A collapse to one prototype is named as the cause. */
  s.final_loss = 0.01, s.diag[0] = 0.001, s.diag[1] = 0.002, s.diag[2] = 0.009;
  print(&s);
  expect("the teacher's outputs collapsed to one prototype (batch-mean entropy 0.002 in the last epoch)", 1);
  expect("center_momentum", 1);
  expect("stayed nearly uniform", 0);

  /* A baseline at 100 %: nothing to beat, said as such. */
  s.top1[2][3] = 100;
  T_CHECK(pipeline_beats_baselines(&s) == -1, "a baseline at 100 %%: a verdict");
  print(&s);
  expect("A baseline classifies every test row: the data leave the trained network nothing to beat.", 1);
  expect("did not learn", 0);
  s.top1[2][3] = 40;

  /* Without baselines (or test rows) there is nothing to compare with. */
  s.nsets = 1;
  T_CHECK(pipeline_beats_baselines(&s) == -1, "no baselines: a verdict");
  print(&s);
  expect("baselines", 0);
  s.nsets = 3, s.n_test = 0;
  T_CHECK(pipeline_beats_baselines(&s) == -1, "no test rows: a verdict");
}

static void test_log_last(void) {
  char path[1024];
  snprintf(path, sizeof path, "%s/log.txt", t_scratch_dir("test_pipeline_summary"));
  FILE *f = fopen(path, "w");
  T_CHECK(f != NULL, "cannot write %s", path);
  fputs("{\"train_loss\": 8.25, \"epoch\": 0, \"teacher_entropy\": 8.0, \"teacher_batch_entropy\": 8.2, \"kl\": 0.25}\n"
        "{\"train_loss\": 3.5, \"epoch\": 1, \"teacher_entropy\": 1.25, \"teacher_batch_entropy\": 4.5, \"kl\": null}\n",
        f);
  fclose(f);
  T_CHECK(pipeline_log_last(path, "train_loss") == 3.5, "train_loss");
  T_CHECK(pipeline_log_last(path, "teacher_entropy") == 1.25, "teacher_entropy");
  T_CHECK(pipeline_log_last(path, "teacher_batch_entropy") == 4.5, "teacher_batch_entropy");
  T_CHECK(isnan(pipeline_log_last(path, "kl")), "kl null is not NaN");
  T_CHECK(isnan(pipeline_log_last(path, "center_norm")), "a missing key is not NaN");
  remove(path);
  T_CHECK(isnan(pipeline_log_last(path, "train_loss")), "a missing file is not NaN");
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_verdicts();
  test_log_last();
  return t_finish();
}
