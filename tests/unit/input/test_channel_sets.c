/* tests/unit/input/test_channel_sets.c - a study's channel sets: parsing indices and names (blanks,
 * every error, names not known yet), comparing sets in any order, a study's list (each set against
 * those before it), their run folder names, and the deck checks of &study (sets required, repeats,
 * unknown channels, keys a study does not use). */
#include "build_config.h"

#include <stdio.h>
#include <string.h>

#include "input/channel_sets.h"
#include "input/config.h"
#include "tests/fixtures/testutil.h"

static const char names[5][CFG_WORDLEN] = {"aTub", "BF", "DAPI", "Oct4", "PE"};
static char why[2048];
static long ch[CHANNEL_SET_MAX];

static int parse(const char *text, int nnames, int nchannels) {
  why[0] = '\0';
  return channel_set_parse(text, names, nnames, nchannels, ch, why, sizeof why);
}

static void test_parse(void) {
  T_CHECK(parse("0,1,2,3,4", 5, 5) == 5 && ch[0] == 0 && ch[4] == 4, "five indices: %s", why);
  T_CHECK(parse(" 3 , 1 ", 0, 5) == 2 && ch[0] == 3 && ch[1] == 1, "blanks around channels, order kept: %s", why);
  T_CHECK(parse("DAPI,BF", 5, 5) == 2 && ch[0] == 2 && ch[1] == 1, "names: %s", why);
  T_CHECK(parse("PE, 0", 5, -1) == 2 && ch[0] == 4 && ch[1] == 0, "a name and an index: %s", why);
  T_CHECK(parse("7", 0, -1) == 1 && ch[0] == 7, "an index unchecked while the channel count is unknown");
  T_CHECK(parse("DAPI,1", 0, -1) == -2, "a name before the names are known is left for later");
  T_CHECK(parse("0,5", 5, 5) == -1 && strstr(why, "channel 5 does not exist (the images have 5 channels, 0 to 4)"),
          "index too large: %s", why);
  T_CHECK(parse("0,5", 5, -1) == -1 && strstr(why, "channel_names names 5 channels"), "index beyond the names: %s", why);
  T_CHECK(parse("GFP", 5, 5) == -1 && strstr(why, "no channel is named 'GFP'") && strstr(why, "'aTub', 'BF'"),
          "unknown name, the known ones listed: %s", why);
  T_CHECK(parse("dapi", 5, 5) == -1, "names are case-sensitive");
  T_CHECK(parse("1,DAPI,1", 5, 5) == -1 && strstr(why, "names channel 1 twice"), "repeat by index: %s", why);
  T_CHECK(parse("2,DAPI", 5, 5) == -1 && strstr(why, "names channel 2 twice"), "repeat by name and index: %s", why);
  T_CHECK(parse("", 5, 5) == -1 && strstr(why, "is empty"), "empty set: %s", why);
  T_CHECK(parse("  ", 5, 5) == -1 && strstr(why, "is empty"), "blank set: %s", why);
  T_CHECK(parse("0,,1", 5, 5) == -1 && strstr(why, "empty channel"), "two commas: %s", why);
  T_CHECK(parse("0,1,", 5, 5) == -1 && strstr(why, "empty channel"), "trailing comma: %s", why);
  T_CHECK(parse("-1", 5, 5) == -1 && strstr(why, "no channel is named '-1'"), "negative index: %s", why);
  char big[400] = "";
  for (int i = 0; i <= CHANNEL_SET_MAX; i++) snprintf(big + strlen(big), sizeof big - strlen(big), "%s%d", i ? "," : "", i);
  T_CHECK(parse(big, 0, 1000) == -1 && strstr(why, "more than 64 channels"), "too many channels: %s", why);
}

static void test_same_and_names(void) {
  const long a[3] = {0, 2, 4}, b[3] = {4, 0, 2}, c[3] = {0, 2, 3}, d[2] = {0, 2};
  T_CHECK(channel_set_same(a, 3, b, 3), "the same channels in another order");
  T_CHECK(!channel_set_same(a, 3, c, 3), "another channel");
  T_CHECK(!channel_set_same(a, 3, d, 2) && !channel_set_same(d, 2, a, 3), "a subset");
  char dir[64];
  T_CHECK(channel_set_dirname(b, 3, names, 5, dir, sizeof dir, why, sizeof why) == 0 && !strcmp(dir, "PE_aTub_DAPI"),
          "names joined in the set's order: %s", dir);
  const long e[2] = {1, 6};
  T_CHECK(channel_set_dirname(e, 2, names, 5, dir, sizeof dir, why, sizeof why) == 0 && !strcmp(dir, "BF_ch6"),
          "ch<index> beyond the names: %s", dir);
  T_CHECK(channel_set_dirname(a, 3, names, 5, dir, 8, why, sizeof why) == -1 && strstr(why, "longer than 7"),
          "too long: %s", why);
  static const char bad[2][CFG_WORDLEN] = {"a/b", ".."};
  const long z[1] = {0}, o[1] = {1};
  T_CHECK(channel_set_dirname(z, 1, bad, 2, dir, sizeof dir, why, sizeof why) == -1 && strstr(why, "'a/b'"), "slash");
  T_CHECK(channel_set_dirname(o, 1, bad, 2, dir, sizeof dir, why, sizeof why) == -1 && strstr(why, "'..'"), "dot dot");
}

/* A study's list: each set parsed once and compared with the sets before it that parsed. */
static int list_one(const char (*texts)[CFG_WORDLEN], int i, int nnames, int nchannels, long (*sets)[CHANNEL_SET_MAX],
                    int *count) {
  why[0] = '\0';
  return count[i] = channel_sets_parse_one(texts, i, names, nnames, nchannels, sets, count, why, sizeof why);
}

static void test_list(void) {
  static const char texts[5][CFG_WORDLEN] = {"0,1", "DAPI", "1,0", "x", "2"};
  static long sets[5][CHANNEL_SET_MAX];
  int count[5];
  T_CHECK(list_one(texts, 0, 5, 5, sets, count) == 2 && sets[0][1] == 1, "%s", why);
  T_CHECK(list_one(texts, 1, 5, 5, sets, count) == 1 && sets[1][0] == 2, "%s", why);
  T_CHECK(list_one(texts, 2, 5, 5, sets, count) == -3 &&
              !strcmp(why, "'1,0' selects the same channels as channel_sets(1) = '0,1'"),
          "the same channels in another order: [%s]", why);
  T_CHECK(list_one(texts, 3, 5, 5, sets, count) == -1 && strstr(why, "no channel is named 'x'"), "[%s]", why);
  T_CHECK(list_one(texts, 4, 5, 5, sets, count) == -3 &&
              !strcmp(why, "'2' selects the same channels as channel_sets(2) = 'DAPI'"),
          "an index and a name, after sets that failed: [%s]", why);
  /* Names not known yet: such a set is compared neither with the others nor they with it. */
  static const char later[3][CFG_WORDLEN] = {"DAPI", "DAPI", "0"};
  static long ls[3][CHANNEL_SET_MAX];
  int lc[3];
  T_CHECK(list_one(later, 0, 0, -1, ls, lc) == -2 && list_one(later, 1, 0, -1, ls, lc) == -2 &&
              list_one(later, 2, 0, -1, ls, lc) == 1,
          "%d %d %d", lc[0], lc[1], lc[2]);
}

static char err[1 << 16];
static struct config C;

static int deck(const char *text) {
  err[0] = '\0';
  return config_parse_text("t.nml", text, &C, err, sizeof err);
}

#define STUDY "&control calculation = 'study' /\n"

static void test_deck(void) {
  T_CHECK(deck(STUDY "&study channel_sets = '0,1,2,3,4', '0', '1', '2,3', ranks_per_run = 2 /\n") == 0, "%s", err);
  T_CHECK(C.study.n_channel_sets == 4 && !strcmp(C.study.channel_sets[3], "2,3") && C.study.ranks_per_run == 2,
          "values");
  T_CHECK(deck(STUDY "&data channel_names = 'aTub', 'BF', 'DAPI' /\n&study channel_sets = 'DAPI,BF', 'aTub' /\n") == 0,
          "names: %s", err);
  T_CHECK(deck(STUDY "&study channel_sets = 'DAPI', 'BF' /\n") == 0, "names resolved later, from the manifest: %s",
          err);
  T_CHECK(deck(STUDY) == 1 && strstr(err, "needs &study channel_sets"), "no sets: %s", err);
  T_CHECK(deck(STUDY "&study channel_sets = '0,1', '2', '1, 0' /\n") == 1 &&
              strstr(err, "channel_sets(3) = '1, 0' selects the same channels as channel_sets(1) = '0,1'"),
          "repeated set: %s", err);
  T_CHECK(deck(STUDY "&data channel_names = 'a', 'b' /\n&study channel_sets = 'a,b', '1,0' /\n") == 1 &&
              strstr(err, "selects the same channels"), "repeat by name and index: %s", err);
  T_CHECK(deck(STUDY "&data channel_names = 'a', 'b' /\n&study channel_sets = 'a', 'c' /\n") == 1 &&
              strstr(err, "channel_sets(2) = 'c': no channel is named 'c'"), "unknown name: %s", err);
  T_CHECK(deck(STUDY "&data channel_names = 'a', 'b' /\n&study channel_sets = '2' /\n") == 1 &&
              strstr(err, "channel_sets(1) = '2': channel 2 does not exist"), "index beyond the names: %s", err);
  T_CHECK(deck(STUDY "&study channel_sets = '0,0' /\n") == 1 && strstr(err, "names channel 0 twice"), "%s", err);
  T_CHECK(deck(STUDY "&data channels = 0, 1 /\n&study channel_sets = '0' /\n") == 1 &&
              strstr(err, "channels is not used with calculation = 'study'"), "data.channels: %s", err);
  T_CHECK(deck("&control calculation = 'train' /\n&study channel_sets = '0' /\n") == 1 &&
              strstr(err, "channel_sets is only used with calculation = 'study'"), "sets without a study: %s", err);
  T_CHECK(deck(STUDY "&study channel_sets = '0', ranks_per_run = -1 /\n") == 1, "negative ranks_per_run: %s", err);
  T_CHECK(deck(STUDY "&data train_fraction = 1.0 /\n&study channel_sets = '0' /\n") == 1 &&
              strstr(err, "no validation images"), "the pipeline's checks apply to a study: %s", err);
  T_CHECK(deck(STUDY "&meta selected_channel_combination_per_run = '0' /\n") >= 1 && strstr(err, "channel_sets"),
          "scDINO's name suggests channel_sets: %s", err);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_parse();
  test_same_and_names();
  test_list();
  test_deck();
  return t_finish();
}
