/* tests/fuzz/fuzz_deck.c - libFuzzer harness for the input-deck parser and the configuration checks.
 *
 * Each input is a deck's text.  Besides "no crash, no sanitizer report", the harness checks a
 * property: a deck that parses without errors echoes (config_echo) to a deck that parses without
 * errors back to the identical configuration, byte for byte (the values: not which keys the deck
 * assigned, as the echo assigns every key).  Inputs with NUL bytes are left out
 * (config_load refuses them before parsing), as are inputs over 1 MiB (the 16 MiB limit is
 * config_load's; the corpus tests cover it). */
#include "build_config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "input/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char err[1 << 20];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > ((size_t)1 << 20) || memchr(data, 0, size)) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  static struct config a, b;
  err[0] = '\0';
  int nerr = config_parse_text("fuzz.nml", text, &a, err, sizeof err);
  free(text);
  if (nerr < 0 || (nerr > 0 && err[0] == '\0')) {
    fprintf(stderr, "config_parse_text returned %d without messages\n", nerr);
    abort();
  }
  if (nerr) return 0;

  /* Accepted: the echo must read back to the same configuration. */
  char *echo = NULL;
  size_t elen = 0;
  FILE *f = open_memstream(&echo, &elen);
  if (!f) return 0;
  config_echo(f, &a);
  fclose(f);
  int nerr2 = config_parse_text("echo.nml", echo, &b, err, sizeof err);
  /* The values, not the record of which keys the deck assigns (the echo assigns them all). */
  if (nerr2 != 0 || memcmp(&a, &b, offsetof(struct config, deck_sets)) != 0) {
    fprintf(stderr, "the echo of an accepted deck does not read back (%d errors):\n%s\n--- echo:\n%s\n", nerr2, err,
            echo);
    abort();
  }
  free(echo);
  return 0;
}
