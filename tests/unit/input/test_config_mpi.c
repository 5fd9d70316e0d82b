/* tests/unit/input/test_config_mpi.c - run by tests/cli/deck_mpi.sh under mpirun: config_load reads the deck on
 * rank 0 and broadcasts it; every rank must hold exactly what a local parse of the file gives,
 * which differs from the defaults. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "input/config.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_config_mpi DECK.nml\n");
    return 99;
  }
  comm_init(&argc, &argv);
  static struct config got, local, defaults;
  config_load(argv[1], &got);

  FILE *f = fopen(argv[1], "rb");
  if (!f) return 99;
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  static char err[1 << 14];
  int nerr = config_parse_text(argv[1], text, &local, err, sizeof err);
  config_defaults(&defaults);
  int same = nerr == 0 && memcmp(&got, &local, sizeof got) == 0 && memcmp(&got, &defaults, sizeof got) != 0;
  if (!same) fprintf(stderr, "rank %d: the broadcast configuration differs from the file\n", comm_rank());
  int bad = comm_any(!same);
  if (comm_rank() == 0) printf(bad ? "ranks differ\n" : "%d ranks agree\n", comm_size());
  comm_finalize();
  return bad ? 1 : 0;
}
