/* tests/unit/input/test_channel_sets.c - a study's channel sets: parsing indices and names (blanks,
 * every error, names not known yet, quoted names, numbers that are names, numbers that would be
 * both), comparing sets in any order, their run folder names (every refused name, clashes), and
 * the deck checks of &study (sets required, repeats, unknown channels, ambiguous numbers, folders
 * that clash or cannot be made, keys a study does not use), and a study's list (each set against
 * those before it: repeats and shared folders). */
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

/* Channels named by numbers: a quoted channel is a name; a bare number is an index, a name when no
 * channel has that index, refused when it is the index of one channel and the name of another. */
static void test_numeric_names(void) {
  static const char nums[3][CFG_WORDLEN] = {"1", "0", "DAPI"};
  why[0] = '\0';
  T_CHECK(channel_set_parse("0", nums, 3, 3, ch, why, sizeof why) == -1 &&
              strstr(why, "'0': 0 is ambiguous: the index of channel 0 (named '1') and the name of channel 1") &&
              strstr(why, "write \"1\" for channel 0, \"0\" for channel 1"),
          "index of one, name of another: %s", why);
  T_CHECK(channel_set_parse("1,DAPI", nums, 3, -1, ch, why, sizeof why) == -1 && strstr(why, "1 is ambiguous"),
          "also at deck time: %s", why);
  T_CHECK(channel_set_parse("\"0\",\"1\"", nums, 3, 3, ch, why, sizeof why) == 2 && ch[0] == 1 && ch[1] == 0,
          "double quotes: names: %s", why);
  T_CHECK(channel_set_parse("'0', DAPI", nums, 3, 3, ch, why, sizeof why) == 2 && ch[0] == 1 && ch[1] == 2,
          "single quotes too: %s", why);
  T_CHECK(channel_set_parse("2", nums, 3, 3, ch, why, sizeof why) == 1 && ch[0] == 2, "no channel named 2: an index");
  T_CHECK(channel_set_parse("\"2\"", nums, 3, 3, ch, why, sizeof why) == -1 && strstr(why, "no channel is named '2'"),
          "a quoted number is never an index: %s", why);
  T_CHECK(channel_set_parse("\"DAPI\"", nums, 0, 3, ch, why, sizeof why) == -2, "quoted, names unknown: later");
  static const char same[2][CFG_WORDLEN] = {"0", "x"};
  T_CHECK(channel_set_parse("0", same, 2, 2, ch, why, sizeof why) == 1 && ch[0] == 0, "channel 0 named 0: one reading");
  static const char waves[3][CFG_WORDLEN] = {"405", "488", "561"};
  T_CHECK(channel_set_parse("561,405", waves, 3, 3, ch, why, sizeof why) == 2 && ch[0] == 2 && ch[1] == 0,
          "numbers that are no index: names: %s", why);
  T_CHECK(channel_set_parse("1", waves, 3, 3, ch, why, sizeof why) == 1 && ch[0] == 1, "an index still");
  T_CHECK(channel_set_parse("7", waves, 3, 3, ch, why, sizeof why) == -1 && strstr(why, "channel 7 does not exist"),
          "neither: %s", why);
}

static void test_same_and_names(void) {
  const long a[3] = {0, 2, 4}, b[3] = {4, 0, 2}, c[3] = {0, 2, 3}, d[2] = {0, 2};
  T_CHECK(channel_set_same(a, 3, b, 3), "the same channels in another order");
  T_CHECK(!channel_set_same(a, 3, c, 3), "another channel");
  T_CHECK(!channel_set_same(a, 3, d, 2) && !channel_set_same(d, 2, a, 3), "a subset");
  char dir[512];
#define DIRNAME(set, n, nm, nn, size) channel_set_dirname(set, n, nm, nn, "run", 255, dir, size, why, sizeof why)
  T_CHECK(DIRNAME(b, 3, names, 5, sizeof dir) == 0 && !strcmp(dir, "PE_aTub_DAPI"), "names joined in the set's order: %s",
          dir);
  const long e[2] = {1, 6};
  T_CHECK(DIRNAME(e, 2, names, 5, sizeof dir) == 0 && !strcmp(dir, "BF_ch6"), "ch<index> beyond the names: %s", dir);
  T_CHECK(DIRNAME(a, 3, names, 5, 8) == -1 && strstr(why, "longer than 7"), "too long: %s", why);
  static const char bad[10][CFG_WORDLEN] = {"a/b", "..", "", ".hidden", "study.txt", "study.h5", "plots", "x.h5",
                                            "tab\there", "input.echo.nml"};
  const long z[1] = {0}, o[1] = {1}, two[2] = {0, 2};
  T_CHECK(DIRNAME(z, 1, bad, 10, sizeof dir) == -1 && strstr(why, "'a/b'"), "slash");
  T_CHECK(DIRNAME(o, 1, bad, 10, sizeof dir) == -1 && strstr(why, "'..'"), "dot dot");
  T_CHECK(DIRNAME(two + 1, 1, bad, 10, sizeof dir) == -1 && strstr(why, "channel 2 has an empty name: the set's folder "
                                                                      "would be run_dir itself"), "empty: %s", why);
  static const long more[2] = {5, 2};
  T_CHECK(DIRNAME(more, 2, bad, 10, sizeof dir) == -1 && strstr(why, "channel 2 has an empty name"),
          "empty among others: %s", why);
  const long hid[1] = {3}, txt[1] = {4}, h5[1] = {5}, plots[1] = {6}, xh5[1] = {7}, ctl[1] = {8}, echo[1] = {9};
  T_CHECK(DIRNAME(hid, 1, bad, 10, sizeof dir) == -1 && strstr(why, "'.hidden' begins with '.'"), "hidden: %s", why);
  T_CHECK(DIRNAME(txt, 1, bad, 10, sizeof dir) == -1 && strstr(why, "'study.txt' is one of the study's own outputs"),
          "study.txt: %s", why);
  T_CHECK(DIRNAME(h5, 1, bad, 10, sizeof dir) == -1 && strstr(why, "own outputs"), "study.h5: %s", why);
  T_CHECK(DIRNAME(plots, 1, bad, 10, sizeof dir) == -1 && strstr(why, "own outputs"), "plots: %s", why);
  T_CHECK(DIRNAME(echo, 1, bad, 10, sizeof dir) == -1 && strstr(why, "own outputs"), "input.echo.nml: %s", why);
  T_CHECK(DIRNAME(xh5, 1, bad, 10, sizeof dir) == -1 && strstr(why, "'x.h5' ends in .h5"), "x.h5: %s", why);
  T_CHECK(DIRNAME(ctl, 1, bad, 10, sizeof dir) == -1 && strstr(why, "control character"), "tab: %s", why);
  /* NAME_MAX of the file system, and run_dir/<set> within the deck's string length less the room. */
  static char longn[5][CFG_WORDLEN];
  for (int i = 0; i < 5; i++) memset(longn[i], 'a' + i, CFG_WORDLEN - 1);
  const long all5[5] = {0, 1, 2, 3, 4};
  T_CHECK(channel_set_dirname(all5, 5, longn, 5, "run", 255, dir, sizeof dir, why, sizeof why) == -1 &&
              strstr(why, "has 319 bytes; a file name may have at most 255 here"), "NAME_MAX: %s", why);
  T_CHECK(channel_set_dirname(all5, 5, longn, 5, "run", 400, dir, sizeof dir, why, sizeof why) == 0 &&
              strlen(dir) == 319, "a file system with longer names: %s", why);
  char deep[CFG_STRLEN];
  memset(deep, 'd', 900);
  deep[900] = '\0';
  T_CHECK(channel_set_dirname(all5, 1, longn, 5, deep, 255, dir, sizeof dir, why, sizeof why) == -1 &&
              strstr(why, "has 964 characters, more than the 959 allowed"), "path: %s", why);
  deep[890] = '\0';
  T_CHECK(channel_set_dirname(all5, 1, longn, 5, deep, 255, dir, sizeof dir, why, sizeof why) == 0, "path fits: %s",
          why);
  /* Folders that are one: the same name from other channels ('a_b,c' and 'a,b_c'), or names that
   * differ only in case. */
  static const char joined[6][CFG_WORDLEN] = {"a_b", "c", "a", "b_c", "BF", "bf"};
  const long s1[2] = {0, 1}, s2[2] = {2, 3}, s3[1] = {4}, s4[1] = {5};
  char d1[64], d2[64];
  T_CHECK(channel_set_dirname(s1, 2, joined, 6, "run", 255, d1, sizeof d1, why, sizeof why) == 0 &&
              channel_set_dirname(s2, 2, joined, 6, "run", 255, d2, sizeof d2, why, sizeof why) == 0 &&
              !strcmp(d1, "a_b_c") && channel_set_folders_clash(d1, d2), "a_b,c and a,b_c: %s %s", d1, d2);
  T_CHECK(channel_set_dirname(s3, 1, joined, 6, "run", 255, d1, sizeof d1, why, sizeof why) == 0 &&
              channel_set_dirname(s4, 1, joined, 6, "run", 255, d2, sizeof d2, why, sizeof why) == 0 &&
              channel_set_folders_clash(d1, d2), "BF and bf");
  T_CHECK(!channel_set_folders_clash("BF_DNA", "BF"), "different folders");
#undef DIRNAME
}

/* A study's list: each set parsed once, its folder named, compared with the sets before it. */
static struct channel_set_list L;

static void list_begin(const char (*texts)[CFG_WORDLEN], const char (*nm)[CFG_WORDLEN], int nnames, int nchannels,
                       const char *run_dir) {
  memset(&L, 0, sizeof L);
  L.texts = texts, L.names = nm, L.nnames = nnames, L.nchannels = nchannels, L.run_dir = run_dir, L.name_max = 255;
}

static int list_one(int i) {
  why[0] = '\0';
  return channel_set_list_add(&L, i, why, sizeof why);
}

static void test_list(void) {
  static const char texts[5][CFG_WORDLEN] = {"0,1", "DAPI", "1,0", "x", "2"};
  list_begin(texts, names, 5, 5, "run");
  T_CHECK(list_one(0) == 2 && L.ch[0][1] == 1 && !strcmp(L.folder[0], "aTub_BF"), "%s %s", why, L.folder[0]);
  T_CHECK(list_one(1) == 1 && L.ch[1][0] == 2, "%s", why);
  T_CHECK(list_one(2) == -4 && !strcmp(why, "'1,0' selects the same channels as channel_sets(1) = '0,1'"),
          "the same channels in another order: [%s]", why);
  T_CHECK(list_one(3) == -1 && strstr(why, "no channel is named 'x'"), "[%s]", why);
  T_CHECK(list_one(4) == -4 && !strcmp(why, "'2' selects the same channels as channel_sets(2) = 'DAPI'"),
          "an index and a name, after sets that failed: [%s]", why);
  /* Names not known yet: such a set is compared neither with the others nor they with it, and no
   * folder is named. */
  static const char later[3][CFG_WORDLEN] = {"DAPI", "DAPI", "0"};
  list_begin(later, names, 0, -1, NULL);
  T_CHECK(list_one(0) == -2 && list_one(1) == -2 && list_one(2) == 1 && !L.folder[2][0], "%d %d %d", L.count[0],
          L.count[1], L.count[2]);
  /* Shared folders: 'a_b,c' and 'a,b_c' (both a_b_c), and names that differ only in case. */
  static const char joined[6][CFG_WORDLEN] = {"a_b", "c", "a", "b_c", "BF", "bf"};
  static const char jt[4][CFG_WORDLEN] = {"a_b,c", "a,b_c", "BF", "bf"};
  list_begin(jt, joined, 6, 6, "run");
  T_CHECK(list_one(0) == 2 && list_one(1) == -5 &&
              !strcmp(why, "'a,b_c' would write the folder run/a_b_c of channel_sets(1) = 'a_b,c' (their channel "
                           "names joined by _): give the channels other names with &data channel_names"),
          "a_b,c and a,b_c: [%s]", why);
  T_CHECK(list_one(2) == 1 && list_one(3) == -5 && strstr(why, "(as bf, the same folder where case is ignored)"),
          "BF and bf: [%s]", why);
  /* A folder that cannot be made. */
  static const char rs[1][CFG_WORDLEN] = {"0"};
  static const char reserved[1][CFG_WORDLEN] = {"study.txt"};
  list_begin(rs, reserved, 1, 1, "run");
  T_CHECK(list_one(0) == -3 && strstr(why, "one of the study's own outputs"), "[%s]", why);
}

static char err[1 << 16];
static struct config C;

static int deck(const char *text) {
  err[0] = '\0';
  return config_parse_text("t.nml", text, &C, err, sizeof err);
}

#define STUDY "&control calculation = 'study' /\n"
#define D100 "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
#define LONG_DIR D100 D100 D100 D100 D100 D100 D100 D100 D100 "d/dddddddddddddddddddddddddddddddddddddddddddddddddddddddd"

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
  /* The folders, when the deck names the channels. */
  T_CHECK(deck(STUDY "&data channel_names = 'a_b', 'c', 'a', 'b_c' /\n&study channel_sets = 'a_b,c', 'a,b_c' /\n") ==
                  1 && strstr(err, "channel_sets(2) = 'a,b_c' would write the folder run/a_b_c of channel_sets(1) = "
                                   "'a_b,c' (their channel names joined by _)"),
          "folders that clash: %s", err);
  T_CHECK(deck(STUDY "&data channel_names = 'BF', 'bf' /\n&study channel_sets = 'BF', 'bf' /\n") == 1 &&
              strstr(err, "(as bf, the same folder where case is ignored)"), "case: %s", err);
  T_CHECK(deck(STUDY "&data channel_names = 'study.h5', 'x' /\n&study channel_sets = '0', '1' /\n") == 1 &&
              strstr(err, "channel_sets(1) = '0': the folder name 'study.h5' is one of the study's own outputs"),
          "reserved: %s", err);
  T_CHECK(deck(STUDY "&data channel_names = '1', '0' /\n&study channel_sets = '0' /\n") == 1 &&
              strstr(err, "channel_sets(1) = '0': 0 is ambiguous"), "ambiguous: %s", err);
  T_CHECK(deck(STUDY "&data channel_names = '1', '0' /\n&study channel_sets = '\"0\"', '\"1\",\"0\"' /\n") == 0,
          "quoted: %s", err);
  T_CHECK(deck("&control calculation = 'study', run_dir = '" LONG_DIR "' /\n&data channel_names = 'a', 'b' /\n"
                     "&study channel_sets = '0' /\n") == 1 && strstr(err, "choose a shorter run_dir"),
          "run_dir too long for the sets: %s", err);
  T_CHECK(deck(STUDY "&meta selected_channel_combination_per_run = '0' /\n") >= 1 && strstr(err, "channel_sets"),
          "scDINO's name suggests channel_sets: %s", err);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_parse();
  test_numeric_names();
  test_same_and_names();
  test_list();
  test_deck();
  return t_finish();
}
