/* main.c - scdino: DINO self-supervised training of Vision Transformers on multi-channel
 * single-cell images, as one MPI program.
 *
 *   mpirun -np 8 scdino input.nml      run the calculation the deck asks for
 *   scdino --help-input                 every deck key, its default and meaning
 *   scdino --version                    versions of scdino and its libraries */
#include "build_config.h"

#include <hdf5.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
#include <cblas.h>
#endif

#include "calc.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/runlock.h"
#include "core/version.h"
#include "input/config.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: scdino DECK.nml            run the calculation in the input deck (under mpirun or alone)\n"
          "       scdino --help-input        list every deck key with its type, default and meaning\n"
          "       scdino --help-input=markdown   the same as a Markdown page (doc/input.md)\n"
          "       scdino --help-input=scdino-map   scDINO's settings and their deck keys (README.md)\n"
          "       scdino --version           print versions of scdino and the libraries it uses\n"
          "       scdino --help              this text\n"
          "\n"
          "Example: mpirun -np 2 scdino input/demo.nml\n"
          "Exit status: 0 success, 1 runtime failure, 2 bad deck or arguments, 3 bad data.\n");
}

/* Compute threads per rank: the deck's value, else OMP_NUM_THREADS, else the cores of this node
 * shared among its ranks. */
static int setup_threads(const struct config *cfg) {
  int n = (int)cfg->system.threads;
  if (n <= 0) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0)
      n = atoi(env);
    else {
      long cores = sysconf(_SC_NPROCESSORS_ONLN);
      n = (int)(cores / comm_get()->local_size);
    }
  }
  if (n < 1) n = 1;
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
  openblas_set_num_threads(n);
#endif
  return n;
}

static void write_echo(const struct config *cfg) {
  char path[PATH_MAX];
  fs_mkdir_p(cfg->control.run_dir);
  fs_join(path, sizeof path, cfg->control.run_dir, "input.echo.nml");
  struct fs_mem txt;
  config_echo(fs_mem_begin(&txt), cfg);
  fs_mem_commit(&txt, "echoed deck", path);
}

int main(int argc, char **argv) {
  const char *deck = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
      version_print(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--help-input")) {
      config_help(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--help-input=markdown")) {
      config_help_markdown(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--help-input=scdino-map")) {
      config_help_scdino_map(stdout);
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "scdino: error: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return SCD_EXIT_INPUT;
    } else if (deck) {
      fprintf(stderr, "scdino: error: one input deck expected, got '%s' and '%s'\n", deck, argv[i]);
      usage(stderr);
      return SCD_EXIT_INPUT;
    } else {
      deck = argv[i];
    }
  }
  if (!deck) {
    fprintf(stderr, "scdino: error: no input deck given\n");
    usage(stderr);
    return SCD_EXIT_INPUT;
  }

  comm_init(&argc, &argv);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* HDF5 errors are reported through CHECK_H5 */

  static struct config cfg;
  config_load(deck, &cfg);
  log_init(comm_rank(), (int)cfg.control.verbosity);
  int threads = setup_threads(&cfg);

  char summary[512];
  version_summary(summary, sizeof summary);
  const struct comm_info *ci = comm_get();
  log_info("%s", summary);
  log_info("%d rank%s (%d per node), %d compute thread%s per rank; deck %s", ci->size, ci->size > 1 ? "s" : "",
           ci->local_size, threads, threads > 1 ? "s" : "", deck);
  if (log_verbosity() >= 1 && log_is_root()) {
    log_raw("---- effective input deck (defaults included; also in %s/input.echo.nml) ----\n",
            cfg.control.run_dir);
    config_echo(stdout, &cfg);
    log_raw("---- end of input deck ----\n");
  }
  if (comm_rank() == 0) {
    runlock_acquire(cfg.control.run_dir, "run_dir"); /* one job per run_dir */
    write_echo(&cfg);
  }
  comm_barrier();

  int status = calc_run(&cfg);
  if (comm_rank() == 0) runlock_release_all();
  comm_finalize();
  return status;
}
