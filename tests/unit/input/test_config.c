/* tests/unit/input/test_config.c - the configuration on top of the reader: defaults equal the table, a full
 * deck gives the asserted values, array semantics, every error class and cross-key check (with
 * the valid neighbours that must pass), suggestions and upstream names, the restart policies,
 * reading an earlier run's echo, echo round trips and derived sizes. */
#include "build_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "input/config.h"
#include "input/config_priv.h"
#include "input/deck.h"
#include "tests/fixtures/testutil.h"

static char err[1 << 16];
static struct config C;

/* Parse the text into C; returns the number of errors (messages in err). */
static int parse(const char *text) { return config_parse_text("t.nml", text, &C, err, sizeof err); }

/* A valid prefix every deck below needs. */
#define CTRL "&control calculation = 'train' /\n"

#define EXPECT_OK(text)                                                          \
  do {                                                                           \
    int n_ = parse(text);                                                        \
    T_CHECK(n_ == 0, "deck should be valid, got %d error(s):\n%s", n_, err);     \
  } while (0)

/* Exactly `n` errors, and the messages contain `text`. */
#define EXPECT_ERR(deck, n, text)                                                             \
  do {                                                                                        \
    int n_ = parse(deck);                                                                     \
    T_CHECK(n_ == (n) && strstr(err, text) != NULL, "wanted %d error(s) with \"%s\", got %d:\n%s", \
            (n), text, n_, err);                                                              \
  } while (0)

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "test: cannot open %s\n", path);
    exit(99);
  }
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static const char *deck_path(const char *name) {
  static char path[4096];
  const char *top = getenv("top_srcdir");
  snprintf(path, sizeof path, "%s/tests/decks/%s", top && *top ? top : "..", name);
  return path;
}

static void test_defaults(void) {
  config_defaults(&C);
  T_CHECK(C.control.calculation[0] == '\0', "calculation has no default");
  T_CHECK(strcmp(C.control.run_dir, "run") == 0 && C.control.seed == 40, "control");
  T_CHECK(C.data.n_channels == 0 && C.data.n_channel_names == 0 && C.data.train_fraction == 0.8, "data");
  T_CHECK(C.data.split_seed == 40 && C.data.stats_seed == 42 && C.data.stats_fraction == 0.2, "seeds");
  T_CHECK(strcmp(C.model.arch, "vit_small") == 0 && C.model.patch_size == 16 && C.model.out_dim == 65536, "model");
  T_CHECK(C.model.norm_last_layer == 1 && C.model.drop_path_rate == 0.1 && C.model.head_nlayers == 3, "head");
  T_CHECK(C.crops.global_size == 224 && C.crops.local_size == 96 && C.crops.local_crops_number == 8, "crops");
  T_CHECK(C.crops.n_global_scale == 2 && C.crops.global_scale[0] == 0.14 && C.crops.global_scale[1] == 1.0,
          "global_scale");
  T_CHECK(C.crops.n_local_scale == 2 && C.crops.local_scale[0] == 0.05 && C.crops.local_scale[1] == 0.14,
          "local_scale");
  T_CHECK(C.training.lr == 0.0005 && C.training.min_lr == 1e-6 && C.training.warmup_epochs == 5, "lr");
  T_CHECK(C.training.weight_decay == 0.04 && C.training.weight_decay_end == 0.4, "wd");
  T_CHECK(C.training.momentum_teacher == 0.996 && C.training.teacher_temp == 0.04 &&
              C.training.student_temp == 0.1 && C.training.center_momentum == 0.9,
          "temperatures");
  T_CHECK(C.training.clip_grad == 3.0 && C.training.freeze_last_layer == 1 && C.training.saveckp_freq == 2, "misc");
  T_CHECK(strcmp(C.training.precision, "auto") == 0 && C.training.restart == 0, "precision");
  static const long k[] = {5, 10, 50, 100, 200, 500};
  T_CHECK(C.knn.n_k == 6, "six k");
  T_CHECK(C.knn.n_group_by == 1 && strcmp(C.knn.group_by[0], "metadata") == 0, "group_by = 'metadata'");
  for (int i = 0; i < 6; i++) T_CHECK(C.knn.k[i] == k[i], "k(%d)", i + 1);
  T_CHECK(C.knn.k[6] == 0 && C.knn.temperature == 0.1, "unused slots are zero");
  T_CHECK(C.attention.image_size == 480 && strcmp(C.system.device, "auto") == 0, "attention, system");
  /* Every key equals its default text parsed on its own. */
  for (int i = 0; i < cfg_nkeys; i++) {
    const struct cfg_key *key = &cfg_keys[i];
    struct deck_value *v;
    int n;
    T_CHECK(deck_parse_values(key->def, &v, &n) == 0, "default of %s parses", key->name);
    int count = key->is_array ? *config_count(&C, key) : 1;
    if (key->is_array) T_CHECK(count == n, "%s: %d elements, default has %d", key->name, count, n);
    for (int j = 0; j < n && j < count; j++) {
      const void *p = config_field(&C, key, j);
      switch (key->type) {
      case CFG_T_INT: T_CHECK(*(const long *)p == v[j].i, "%s(%d)", key->name, j + 1); break;
      case CFG_T_REAL: T_CHECK(*(const double *)p == v[j].r, "%s(%d)", key->name, j + 1); break;
      case CFG_T_BOOL: T_CHECK(*(const int *)p == v[j].b, "%s", key->name); break;
      default: T_CHECK(strcmp(p, v[j].s) == 0, "%s(%d)", key->name, j + 1);
      }
    }
    deck_values_free(v, n);
  }
}

static void test_good_deck(void) {
  int n = parse(slurp(deck_path("good_full.nml")));
  T_CHECK(n == 0, "good_full.nml: %d error(s):\n%s", n, err);
  T_CHECK(strcmp(C.control.calculation, "train") == 0, "choice stored in the table's spelling");
  T_CHECK(strcmp(C.control.run_dir, "runs/it's \"quoted\" & /slashed/ !not a comment") == 0, "run_dir [%s]",
          C.control.run_dir);
  T_CHECK(C.control.seed == 7 && C.control.verbosity == 2, "seed, verbosity");
  T_CHECK(C.data.n_channels == 3 && C.data.channels[0] == 4 && C.data.channels[1] == 0 && C.data.channels[2] == 2,
          "channels");
  T_CHECK(C.data.n_channel_names == 5 && strcmp(C.data.channel_names[2], "DNA") == 0 &&
              strcmp(C.data.channel_names[4], "PE") == 0,
          "channel_names");
  T_CHECK(C.data.train_fraction == 0.8 && strcmp(C.data.on_bad_image, "skip") == 0, "data");
  T_CHECK(strcmp(C.model.arch, "custom") == 0 && C.model.embed_dim == 192 && C.model.depth == 4 &&
              C.model.num_heads == 3 && C.model.mlp_ratio == 2.5 && C.model.norm_last_layer == 0,
          "model");
  T_CHECK(C.crops.global_size == 64 && C.crops.local_size == 32, "sizes");
  T_CHECK(C.crops.global_scale[0] == 0.4 && C.crops.global_scale[1] == 1.0, "global_scale");
  T_CHECK(C.crops.local_scale[0] == 0.05 && C.crops.local_scale[1] == 0.4 && C.crops.n_local_scale == 2,
          "local_scale(2)");
  T_CHECK(C.crops.augment == 0 && C.crops.local_crops_number == 6, "crops");
  T_CHECK(C.training.epochs == 101 && C.training.min_lr == 1e-6 && C.training.teacher_temp == 0.07, "training");
  T_CHECK(C.training.warmup_teacher_temp_epochs == 30 && C.training.restart == 1, "training 2");
  T_CHECK(C.knn.n_k == 4 && C.knn.k[0] == 7 && C.knn.k[1] == 10 && C.knn.k[2] == 50 && C.knn.k[3] == 300,
          "k with two nulls");
  T_CHECK(C.knn.k[4] == 0 && C.knn.k[5] == 0, "k tail zeroed");
  T_CHECK(C.system.threads == 2 && strcmp(C.system.device, "cpu") == 0, "system");
}

/* Which keys the deck sets itself (features and attention compare those with the checkpoint). */
static void test_deck_sets(void) {
  EXPECT_OK(CTRL "&model arch = 'custom', num_heads = 6 /\n&knn k(2) = 7 /\n");
  T_CHECK(config_deck_sets(&C, "model", "arch") && config_deck_sets(&C, "model", "num_heads"), "set keys");
  T_CHECK(config_deck_sets(&C, "knn", "k"), "an element sets the key");
  T_CHECK(!config_deck_sets(&C, "model", "depth") && !config_deck_sets(&C, "model", "patch_size"),
          "keys left at their defaults (num_heads = 6 is the default value, but set)");
  config_defaults(&C);
  T_CHECK(!config_deck_sets(&C, "control", "calculation"), "the defaults set nothing");
}

static void test_arrays(void) {
  EXPECT_OK(CTRL "&knn k = 5, 10 /");
  T_CHECK(C.knn.n_k == 2 && C.knn.k[1] == 10 && C.knn.k[2] == 0, "a list replaces the whole default");
  EXPECT_OK(CTRL "&knn k(2) = 7 /");
  T_CHECK(C.knn.n_k == 6 && C.knn.k[0] == 5 && C.knn.k[1] == 7 && C.knn.k[2] == 50, "one element");
  EXPECT_OK(CTRL "&knn k(7) = 1000, 2000 /");
  T_CHECK(C.knn.n_k == 8 && C.knn.k[6] == 1000 && C.knn.k[7] == 2000, "appending lengthens the list");
  EXPECT_OK(CTRL "&knn k(2:4) = 1, 2 /");
  T_CHECK(C.knn.n_k == 6 && C.knn.k[1] == 1 && C.knn.k[2] == 2 && C.knn.k[3] == 100, "short section");
  EXPECT_OK(CTRL "&knn k = 1,,3 /");
  T_CHECK(C.knn.n_k == 3 && C.knn.k[1] == 10 && C.knn.k[2] == 3, "null keeps the element");
  EXPECT_OK(CTRL "&knn k(1) = 1 k(2) = 2 /");
  T_CHECK(C.knn.k[0] == 1 && C.knn.k[1] == 2, "separate elements are not duplicates");
  EXPECT_OK(CTRL "&data channels = /");
  T_CHECK(C.data.n_channels == 0, "an empty list");
  EXPECT_OK(CTRL "&data channels = 2, 0 channel_names = 'a', 'b', 'c' /");
  T_CHECK(C.data.n_channels == 2 && C.data.channels[0] == 2, "channels");
  EXPECT_OK(CTRL "&training epochs = 1e2, lr = 1 /");
  T_CHECK(C.training.epochs == 100 && C.training.lr == 1.0, "whole real for an integer, integer for a real");
  EXPECT_OK(CTRL "&training lr = , epochs = 20 /");
  T_CHECK(C.training.lr == 0.0005 && C.training.epochs == 20, "a null scalar keeps its default");
  EXPECT_OK(CTRL "&model arch = 'VIT_Tiny' / &training precision = \"BF16\" /");
  T_CHECK(strcmp(C.model.arch, "vit_tiny") == 0 && strcmp(C.training.precision, "bf16") == 0, "choice case");
}

/* Each error class, with its message. */
static void test_error_classes(void) {
  EXPECT_ERR(CTRL "&training\n  learning_rate = 1e-3\n/", 1,
             "t.nml:3:3: unknown key 'learning_rate' in &training; did you mean 'lr'?\n"
             "  learning_rate = 1e-3\n  ^\n");
  EXPECT_ERR(CTRL "&training warmup = 1 /", 1,
             "did you mean 'warmup_epochs', 'warmup_teacher_temp' or 'warmup_teacher_temp_epochs'?");
  EXPECT_ERR(CTRL "&training epoch = 1 /", 1, "did you mean 'epochs'?");
  EXPECT_ERR(CTRL "&crops global_crops_scale = 0.4, 1 /", 1, "did you mean 'global_scale'?");
  EXPECT_ERR(CTRL "&crops batch_size_per_gpu = 4 /", 1, "did you mean 'batch_size_per_rank' in &training?");
  EXPECT_ERR(CTRL "&model sead = 1 /", 1, "did you mean 'seed' in &control?");
  EXPECT_ERR(CTRL "&model zzzz = 1 /", 1, "unknown key 'zzzz' in &model (scdino --help-input lists the keys)");
  EXPECT_ERR(CTRL "&model lr = 1 /", 1, "key 'lr' belongs to &training or &linear, not &model");
  EXPECT_ERR(CTRL "&training seed = 1 /", 1, "key 'seed' belongs to &control or &knn or &linear, not &training");
  EXPECT_ERR(CTRL "&trainig epochs = 1 /", 1, "t.nml:2:1: unknown group &trainig; did you mean &training?");
  EXPECT_ERR(CTRL "&zzz /", 1, "unknown group &zzz; the groups are &control, &data, &model");
  EXPECT_ERR(CTRL "&training epochs = 'ten' /", 1,
             "wrong type for epochs: expected an integer, got the string 'ten'");
  EXPECT_ERR(CTRL "&training epochs = 2.5 /", 1, "expected an integer, got the real number 2.5 (not a whole number)");
  EXPECT_ERR(CTRL "&crops augment = 1 /", 1, "wrong type for augment: expected a logical (.true. or .false.), got the integer 1");
  EXPECT_ERR(CTRL "&control run_dir = .true. /", 2, "wrong type for run_dir: expected a string in quotes");
  EXPECT_ERR(CTRL "&model arch = 5 /", 1, "expected a string in quotes, one of 'vit_tiny', 'vit_small', 'vit_base', 'custom'; got the integer 5");
  EXPECT_ERR(CTRL "&data channels = 1, 'x' /", 1, "wrong type for channels(2): expected an integer");
  EXPECT_ERR(CTRL "&training epochs = 0 /", 1, "epochs = 0 is out of range: it must be between 1 and 1000000");
  EXPECT_ERR(CTRL "&training teacher_temp = 0 /", 1, "teacher_temp = 0 is out of range: it must be between 1e-06 and 100");
  EXPECT_ERR(CTRL "&data channels = 1, 5000 /", 1, "channels(2) = 5000 is out of range");
  EXPECT_ERR(CTRL "&training max_steps = -1 /", 1, "between 0 and 9223372036854775807");
  EXPECT_ERR(CTRL "&model arch = 'vit_large' /", 1,
             "arch = 'vit_large' is not allowed: use one of 'vit_tiny', 'vit_small', 'vit_base', 'custom'");
  EXPECT_ERR("&control calculation = 'trian' /", 1, "did you mean 'train'?");
  EXPECT_ERR(CTRL "&training\n epochs = 30\n epochs = 40 /", 1,
             "t.nml:4:2: duplicate key 'epochs' in &training (first set at line 3)");
  EXPECT_ERR(CTRL "&knn k(2) = 7\n k(2:3) = 1, 2 /", 1, "element k(2) is set twice (first at line 2)");
  EXPECT_ERR(CTRL "&knn k = 7\n k(3) = 1 /", 1, "duplicate key 'k' in &knn (first set at line 2)");
  EXPECT_ERR(CTRL "&training /\n&training epochs = 30 /", 1,
             "t.nml:3:1: duplicate group &training (first at line 2); put its keys in one group");
  EXPECT_ERR(CTRL "&crops local_scale = 0.1, 0.2, 0.3 /", 1,
             "too many values for 'local_scale': it holds at most 2, got 3");
  EXPECT_ERR(CTRL "&knn k = 17*5 /", 1, "too many values for 'k': it holds at most 16, got 17");
  EXPECT_ERR(CTRL "&knn k(16) = 1, 2 /", 1, "at most 16, got 17 (counting from the subscript)");
  EXPECT_ERR(CTRL "&knn k(17) = 1 /", 1, "subscript 17 is out of range for 'k': it holds at most 16 values (k(1:16))");
  EXPECT_ERR(CTRL "&knn k(0) = 1 /", 1, "subscript 0 is out of range");
  EXPECT_ERR(CTRL "&knn k(2:3) = 1, 2, 3 /", 1, "too many values for k(2:3): 3 given for 2 elements");
  EXPECT_ERR(CTRL "&data channels(3) = 1 /", 1,
             "channels(3) would leave channels(1:2) without values (the list has 0 elements)");
  EXPECT_ERR(CTRL "&data channels = 1,,3 /", 1, "channels(2) is a null value but has no earlier value to keep");
  EXPECT_ERR(CTRL "&training lr(1) = 1 /", 1, "'lr' is a single value, not an array: remove the subscript (1)");
  EXPECT_ERR(CTRL "&training lr = 1, 2 /", 1, "'lr' takes a single value, got 2");
  EXPECT_ERR(CTRL "&training lr = /", 1, "no value given for 'lr'");
  EXPECT_ERR("&control calculation = 'train', run_dir = 'abc\n/", 1, "t.nml:1:43: unterminated string");
  EXPECT_ERR(CTRL "&training epochs = 30\n", 1, "t.nml:2:1: group &training is not closed");
  EXPECT_ERR("&training epochs = 30 /", 1,
             "t.nml: missing required key 'calculation': add a group &control with calculation = one of 'prepare'");
  EXPECT_ERR("&control seed = 3 /", 1, "t.nml:1:1: missing required key 'calculation' in &control (one of 'prepare'");
  EXPECT_ERR("&control calculation = 5 /", 1, "wrong type for calculation"); /* no "missing" on top */
  char longname[200];
  memset(longname, 'x', sizeof longname);
  longname[sizeof longname - 1] = '\0';
  char deck[400];
  snprintf(deck, sizeof deck, CTRL "&data channel_names = '%s' /", longname);
  EXPECT_ERR(deck, 1, "the string for channel_names(1) is too long: 199 characters, at most 63");
}

/* Cross-key checks, each next to a valid neighbour. */
static void test_cross_checks(void) {
  EXPECT_ERR(CTRL "&crops global_size = 200 /", 1,
             "global_size = 200 is not a multiple of patch_size = 16 (crops are cut into whole patches)");
  EXPECT_ERR(CTRL "&model patch_size = 7 /", 1, "t.nml:2:8: local_size = 96 is not a multiple of patch_size = 7");
  EXPECT_OK(CTRL "&model patch_size = 8 / &crops global_size = 200, local_size = 48 /");
  EXPECT_ERR(CTRL "&model arch = 'custom', embed_dim = 100, num_heads = 6 /", 1,
             "embed_dim = 100 is not divisible by num_heads = 6 (arch = 'custom')");
  EXPECT_OK(CTRL "&model arch = 'custom', embed_dim = 96, num_heads = 6 /");
  EXPECT_ERR(CTRL "&model arch = 'custom', embed_dim = 96, num_heads = 6, mlp_ratio = 0 /", 1,
             "mlp_ratio = 0 with embed_dim = 96 gives an MLP of width 0");
  EXPECT_ERR(CTRL "&model arch = 'vit_small', embed_dim = 192 /", 1,
             "embed_dim is only used with arch = 'custom'; arch = 'vit_small' fixes it");
  EXPECT_OK(CTRL "&model arch = 'vit_tiny', embed_dim = 384, depth = 12 /"); /* the defaults, as the echo writes */
  EXPECT_ERR(CTRL "&crops global_scale = 0.5 /", 1, "global_scale needs exactly 2 values (min, max), got 1");
  EXPECT_ERR(CTRL "&crops local_scale = 0, 0.1 /", 1, "local_scale = 0, 0.1: the smaller area fraction must be > 0");
  EXPECT_ERR(CTRL "&crops global_scale = 0.9, 0.3 /", 1, "global_scale = 0.9, 0.3: min must not exceed max");
  EXPECT_OK(CTRL "&crops global_scale = 0.3, 0.3, local_scale = 1e-3, 1 /");
  EXPECT_ERR(CTRL "&data channels = 0, 1, 1, 0 /", 2, "channels(3) = 1 repeats channels(2)");
  T_CHECK(strstr(err, "channels(4) = 0 repeats channels(1)") != NULL, "second repeat:\n%s", err);
  EXPECT_ERR(CTRL "&data channel_names = 'a', 'b', 'a', '' /", 2, "channel_names(3) = 'a' repeats channel_names(1)");
  T_CHECK(strstr(err, "channel_names(4) is empty") != NULL, "empty name:\n%s", err);
  EXPECT_ERR(CTRL "&data channel_names = 'a', 'b', channels = 0, 2 /", 1,
             "channels(2) = 2, but channel_names names only 2 channels (0 to 1)");
  EXPECT_ERR("&control calculation = 'prepare' /", 1,
             "t.nml:1:10: calculation = 'prepare' needs tiff_dir (the TIFF tree to convert) or file_list (a CSV "
             "listing the images) in &data");
  EXPECT_OK("&control calculation = 'prepare' / &data file_list = 'l.csv' /");
  EXPECT_OK("&control calculation = 'prepare' / &data file_list = 'l.csv', labels = 'column', label_column = 'type' /");
  EXPECT_OK("&control calculation = 'prepare' / &data tiff_dir = 't', labels = 'none' /");
  EXPECT_ERR("&control calculation = 'prepare' / &data tiff_dir = 't', file_list = 'l.csv' /", 1,
             "t.nml:1:58: set one of tiff_dir and file_list: both name the images to prepare");
  EXPECT_ERR("&control calculation = 'prepare' / &data file_list = 'l.csv', labels = 'folders' /", 1,
             "t.nml:1:63: labels = 'folders' takes the classes from the folders of tiff_dir; with file_list use");
  EXPECT_ERR("&control calculation = 'prepare' / &data tiff_dir = 't', labels = 'column' /", 1,
             "labels = 'column' takes the classes from a column of file_list, which is not set");
  EXPECT_ERR("&control calculation = 'prepare' / &data tiff_dir = 't', labels = 'none', folder_depth_for_labels = 0 /",
             1, "folder_depth_for_labels applies to classes from the folders of tiff_dir, not to labels = 'none'");
  EXPECT_ERR("&control calculation = 'prepare' / &data file_list = 'l', path_column = 'p', label_column = 'p' /", 1,
             "label_column and path_column both name 'p'");
  EXPECT_ERR("&control calculation = 'prepare' / &data file_list = 'l', path_column = '' /", 1,
             "path_column must name the file_list column of the image paths");
  EXPECT_ERR("&control calculation = 'pipeline' /", 0, "");
  EXPECT_OK("&control calculation = 'prepare' / &data tiff_dir = '/fsx/tiffs' /");
  EXPECT_OK("&control calculation = 'train' /");
  EXPECT_ERR(CTRL "&training warmup_epochs = 20 /", 1, "warmup_epochs = 20 exceeds epochs = 10");
  EXPECT_ERR(CTRL "&training epochs = 3 /", 1, "t.nml:2:11: warmup_epochs = 5 exceeds epochs = 3");
  EXPECT_ERR(CTRL "&training warmup_teacher_temp_epochs = 30 /", 1, "warmup_teacher_temp_epochs = 30 exceeds epochs = 10");
  EXPECT_OK(CTRL "&training epochs = 5, warmup_epochs = 5, warmup_teacher_temp_epochs = 5 /");
  EXPECT_ERR(CTRL "&training min_lr = 0.01 /", 1, "min_lr = 0.01 is larger than lr = 0.0005");
  EXPECT_ERR(CTRL "&knn k = 5, 10, 5 /", 1, "k(3) = 5 repeats k(1)");
  EXPECT_ERR(CTRL "&knn k = /", 1, "k needs at least one neighbour count");
  EXPECT_OK(CTRL "&knn group_by = 'folder', 'donor', 'metadata' /");
  EXPECT_OK(CTRL "&knn group_by = 'none' /");
  EXPECT_ERR(CTRL "&knn group_by = 'donor', 'none' /", 1, "group_by = 'none' (no groups) stands alone");
  EXPECT_ERR(CTRL "&knn group_by = '' /", 1, "group_by names an empty column; use 'none' for no groups");
  EXPECT_ERR("&control calculation = 'train', run_dir = '' /", 1, "run_dir must not be empty");
  EXPECT_ERR(CTRL "&data shard_dir = '' /", 1, "shard_dir must not be empty");
  EXPECT_ERR(CTRL "&training precision = 'bf16' / &system device = 'cpu' /", 1,
             "precision = 'bf16' needs a GPU, but device = 'cpu'");
  EXPECT_ERR(CTRL "&training precision = 'fp16' / &system device = 'cpu' /", 1,
             "precision = 'fp16' needs a GPU, but device = 'cpu'");
  EXPECT_ERR(CTRL "&gpu arch = 60 /", 1, "arch = 60: 0 (the GPU's own kernels) or a compute capability");
  EXPECT_OK(CTRL "&gpu arch = 75 /");
  EXPECT_OK(CTRL "&training precision = 'bf16' / &system device = 'auto' /");
  EXPECT_OK(CTRL "&training shard_optimizer = .true. / &system device = 'cuda' /");
  EXPECT_OK(CTRL "&training shard_optimizer = .true. / &system device = 'cpu' /");
  EXPECT_ERR(CTRL "&data train_fraction = 0 /", 1, "train_fraction = 0 leaves no training images");
  EXPECT_ERR("&control calculation = 'features' / &data train_fraction = 1 /", 1,
             "train_fraction = 1 leaves no validation images, but subset = 'val'");
  EXPECT_OK("&control calculation = 'features' / &data train_fraction = 1 / &features subset = 'all' /");
  EXPECT_ERR("&control calculation = 'knn' / &knn train_fraction = 1 /", 1, "leaves no query rows");
  EXPECT_ERR("&control calculation = 'prepare' / &data tiff_dir = 'x', stats_fraction = 0 /", 1,
             "stats_fraction = 0 leaves no images");
  /* A bad value does not also fail the checks that use it. */
  EXPECT_ERR(CTRL "&crops global_size = 'big' /", 1, "wrong type for global_size");
  EXPECT_ERR(CTRL "&training epochs = 0 /", 1, "epochs = 0 is out of range");
}

static void test_all_errors_at_once(void) {
  int n = parse(slurp(deck_path("bad_many.nml")));
  T_CHECK(n >= 10, "bad_many.nml: %d errors", n);
  /* Sorted by line. */
  const char *prev = err;
  int last = 0, sorted = 1;
  for (const char *p = strstr(err, "t.nml:"); p; p = strstr(p + 1, "\nt.nml:")) {
    int line = atoi(p + (p[0] == '\n' ? 7 : 6));
    if (line < last) sorted = 0;
    last = line;
    prev = p;
  }
  (void)prev;
  T_CHECK(sorted, "messages in line order:\n%s", err);
  char small[300];
  n = config_parse_text("t.nml", slurp(deck_path("bad_many.nml")), &C, small, sizeof small);
  T_CHECK(n >= 10 && strstr(small, "(... more errors not shown)") != NULL && strlen(small) < sizeof small,
          "a small buffer is cut cleanly:\n%s", small);
}

static void test_suggest(void) {
  T_CHECK(config_edit_distance("kitten", "sitting") == 3, "kitten/sitting");
  T_CHECK(config_edit_distance("epcohs", "epochs") == 1, "a transposition costs 1");
  T_CHECK(config_edit_distance("LR", "lr") == 0, "case-insensitive");
  T_CHECK(config_edit_distance("", "abc") == 3 && config_edit_distance("abc", "") == 3, "empty");
  const char *c[] = {"depth", "epochs", "lr", "min_lr", "threads", "teacher_temp", "student_temp"};
  char out[256];
  T_CHECK(config_suggest("epoch", c, 7, "'", out, sizeof out, NULL) == 1 && !strcmp(out, "'epochs'"), "[%s]", out);
  T_CHECK(config_suggest("learning_rate", c, 7, "'", out, sizeof out, NULL) == 1 && !strcmp(out, "'lr'"), "[%s]", out);
  T_CHECK(config_suggest("temp", c, 7, "'", out, sizeof out, NULL) == 2 &&
              !strcmp(out, "'teacher_temp' or 'student_temp'"),
          "tie: [%s]", out);
  T_CHECK(config_suggest("xyzzy", c, 7, "'", out, sizeof out, NULL) == 0 && out[0] == '\0', "nothing close");
  T_CHECK(config_suggest("q", c, 7, "'", out, sizeof out, NULL) == 0, "one letter far from all");
  T_CHECK(config_suggest("l", c, 7, "'", out, sizeof out, NULL) == 1 && !strcmp(out, "'lr'"), "[%s]", out);
  int first = -1;
  T_CHECK(config_suggest("thread", c, 7, "&", out, sizeof out, &first) == 1 && !strcmp(out, "&threads") && first == 4,
          "group style [%s] %d", out, first);
  /* The upstream names of the table's scdino fields that differ from every key's name, and the key
   * each names (as the list written in config_suggest.c before the table held them). */
  static const char *const old[][3] = {
      {"global_crops_scale", "crops", "global_scale"},
      {"local_crops_scale", "crops", "local_scale"},
      {"batch_size_per_gpu", "training", "batch_size_per_rank"},
      {"dataset_dir", "data", "tiff_dir"},
      {"selected_channels", "data", "channels"},
      {"channel_dict", "data", "channel_names"},
      {"selected_channel_combination_per_run", "study", "channel_sets"},
      {"train_datasetsplit_fraction", "data", "train_fraction"},
      {"fraction_for_mean_std_calc", "data", "stats_fraction"},
      {"output_dir", "control", "run_dir"},
      {"name_of_run", "control", "run_dir"},
      {"num_workers", "system", "loader_threads"},
      {"use_fp16", "training", "precision"},
      {"resize_length", "features", "resize"},
      {"n_neighbors", "knn", "k"},
      {"num_images_per_class", "attention", "images_per_class"},
      {"pretrained_weights", "features", "checkpoint"},
  };
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
    const struct cfg_key *k = config_alias(old[i][0], NULL);
    T_CHECK(k && !strcmp(k->group, old[i][1]) && !strcmp(k->name, old[i][2]), "alias %s -> %s.%s", old[i][0],
            k ? k->group : "-", k ? k->name : "-");
  }
  T_CHECK(config_alias("BATCH_SIZE_PER_GPU", NULL) == config_key("training", "batch_size_per_rank"), "case-insensitive");
  /* a name of several groups' keys: the deck's group first */
  T_CHECK(config_alias("batch_size_per_gpu", "linear") == config_key("linear", "batch_size"), "eval_linear's name");
  /* An upstream name that is a key's own name is not an alias (the deck says where that key is). */
  const char *own[] = {"lr", "seed", "epochs", "threshold", "out_dim", "temperature", "gelu", "meta", "global"};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) T_CHECK(config_alias(own[i], NULL) == NULL, "not an alias: %s", own[i]);
  EXPECT_ERR(CTRL "&model seed = 1 /", 1, "key 'seed' belongs to &control or &knn or &linear, not &model");
  EXPECT_ERR(CTRL "&model batch_size_per_gpu = 1 /", 1,
             "unknown key 'batch_size_per_gpu' in &model; did you mean 'batch_size_per_rank' in &training?");
  EXPECT_ERR(CTRL "&linear batch_size_per_gpu = 1 /", 1,
             "unknown key 'batch_size_per_gpu' in &linear; did you mean 'batch_size'?");
}

/* Each key's restart policy in the table: the keys a restart refuses to change and those it
 * takes with a warning (as restart_check.c listed them before the table held them). */
static void test_restart_policy(void) {
  static const char *const equal[] = {"control.seed", "data.train_fraction", "data.split_seed", "crops.global_size",
                                      "crops.local_size", "crops.global_scale", "crops.local_scale",
                                      "crops.local_crops_number", "crops.augment", "training.student_temp",
                                      "training.teacher_temp", "training.warmup_teacher_temp",
                                      "training.warmup_teacher_temp_epochs", "training.center_momentum",
                                      "training.precision", "training.sampler"};
  static const char *const warn[] = {"training.epochs", "training.lr", "training.min_lr", "training.warmup_epochs",
                                     "training.weight_decay", "training.weight_decay_end", "training.momentum_teacher",
                                     "training.clip_grad", "training.freeze_last_layer", "training.batch_size_per_rank",
                                     "data.shard_dir", "gpu.attention", "gpu.bias_grad", "gpu.gelu", "gpu.gemm_tune",
                                     "gpu.arch"};
  int n[3] = {0, 0, 0};
  for (int i = 0; i < cfg_nkeys; i++) {
    const struct cfg_key *k = &cfg_keys[i];
    char gk[160];
    snprintf(gk, sizeof gk, "%s.%s", k->group, k->name);
    enum cfg_restart want = CFG_RESTART_FREE;
    for (size_t j = 0; j < sizeof equal / sizeof equal[0]; j++)
      if (!strcmp(gk, equal[j])) want = CFG_RESTART_EQUAL;
    for (size_t j = 0; j < sizeof warn / sizeof warn[0]; j++)
      if (!strcmp(gk, warn[j])) want = CFG_RESTART_WARN;
    T_CHECK(k->restart == want, "%s: restart policy %d, want %d", gk, (int)k->restart, (int)want);
    n[k->restart]++;
  }
  T_CHECK(n[CFG_RESTART_EQUAL] == 16 && n[CFG_RESTART_WARN] == 16, "%d EQUAL, %d WARN", n[CFG_RESTART_EQUAL],
          n[CFG_RESTART_WARN]);
}

/* An earlier run's echo read back by the deck parser: every key it has, the keys it lacks, keys
 * this version does not know, and values it refuses; the values as the echo writes them. */
static void test_parse_echo(void) {
  static struct config a, b;
  static unsigned char had[512];
  static char bad[512][CFG_STRLEN];
  T_CHECK(cfg_nkeys <= 512, "%d keys", cfg_nkeys);
  T_CHECK(config_parse_text("t.nml", CTRL "&training lr = 0.04 / &knn k = 5, 10 / &data channel_names = 'a', 'b' /",
                            &a, err, sizeof err) == 0, "%s", err);
  char *echo = config_echo_text(&a);
  config_parse_echo("ckpt.h5", echo, &b, had, bad);
  int all = 1;
  for (int i = 0; i < cfg_nkeys; i++) all &= had[i] == CFG_HAD_VALUE && cfg_value_same(&a, &b, &cfg_keys[i]);
  T_CHECK(all, "an echo sets every key to its value");
  char v[CFG_STRLEN];
  config_value_text(&b, config_key("knn", "k"), v, sizeof v);
  T_CHECK(!strcmp(v, "5, 10"), "[%s]", v);
  config_value_text(&b, config_key("training", "lr"), v, sizeof v);
  T_CHECK(!strcmp(v, "0.04"), "[%s]", v);
  config_value_text(&b, config_key("control", "run_dir"), v, sizeof v);
  T_CHECK(!strcmp(v, "'run'"), "[%s]", v);
  config_value_text(&b, config_key("crops", "augment"), v, sizeof v);
  T_CHECK(!strcmp(v, ".true."), "[%s]", v);
  config_value_text(&b, config_key("data", "channels"), v, sizeof v);
  T_CHECK(!strcmp(v, ""), "an empty list: [%s]", v);
  config_value_text(&b, config_key("data", "channel_names"), v, sizeof v);
  T_CHECK(!strcmp(v, "'a', 'b'"), "[%s]", v);
  /* Another version's echo: sampler missing, a removed key and group, a choice no longer offered. */
  char old[1 << 16];
  snprintf(old, sizeof old, "%s", echo);
  char *p = strstr(old, "  sampler = ");
  T_CHECK(p != NULL, "no sampler line in the echo");
  if (p) memcpy(p, "  gone_key", 10); /* "  gone_key= 'uniform'": a key this version does not know */
  p = strstr(old, "precision = 'auto'");
  if (p) memcpy(p, "precision = 'tf32'", 18);
  strcat(old, "\n&gone_group x = 1 /\n");
  config_parse_echo("ckpt.h5", old, &b, had, bad);
  const int is = config_key_index(config_key("training", "sampler"));
  const int ip = config_key_index(config_key("training", "precision"));
  const int il = config_key_index(config_key("training", "lr"));
  T_CHECK(had[is] == CFG_HAD_NOT, "a key the older run did not have: %d", had[is]);
  T_CHECK(had[ip] == CFG_HAD_BAD && !strcmp(bad[ip], "'tf32'"), "a refused value: %d [%s]", had[ip], bad[ip]);
  T_CHECK(had[il] == CFG_HAD_VALUE && b.training.lr == 0.04, "the other keys are read: %d %g", had[il], b.training.lr);
  free(echo);
  /* Field comparison: lists by count and elements, strings up to their end. */
  a = b;
  T_CHECK(cfg_value_same(&a, &b, config_key("knn", "k")), "same list");
  a.knn.n_k = 1;
  T_CHECK(!cfg_value_same(&a, &b, config_key("knn", "k")), "a shorter list differs");
  snprintf(a.control.run_dir, sizeof a.control.run_dir, "runs");
  snprintf(a.control.run_dir, sizeof a.control.run_dir, "run");
  T_CHECK(cfg_value_same(&a, &b, config_key("control", "run_dir")), "a string with another tail is the same");
  a.training.clip_grad = -0.0;
  b.training.clip_grad = 0.0;
  T_CHECK(!cfg_value_same(&a, &b, config_key("training", "clip_grad")), "-0.0 and 0.0 differ, as their echoes do");
}

/* Echo, parse the echo, compare the structs byte for byte; the echo of the echo is the same text. */
static void round_trip(const char *what, const char *text) {
  static struct config a, b;
  int n = config_parse_text("t.nml", text, &a, err, sizeof err);
  T_CHECK(n == 0, "%s: %d error(s):\n%s", what, n, err);
  char *e1 = NULL, *e2 = NULL;
  size_t l1 = 0, l2 = 0;
  FILE *f = open_memstream(&e1, &l1);
  config_echo(f, &a);
  fclose(f);
  n = config_parse_text("echo.nml", e1, &b, err, sizeof err);
  T_CHECK(n == 0, "%s: the echo does not parse:\n%s\n%s", what, err, e1);
  /* the values (deck_sets differs: the echo sets every key) */
  T_CHECK(memcmp(&a, &b, offsetof(struct config, deck_sets)) == 0, "%s: echo reads back to a different struct", what);
  f = open_memstream(&e2, &l2);
  config_echo(f, &b);
  fclose(f);
  T_CHECK(l1 == l2 && strcmp(e1, e2) == 0, "%s: echo of the echo differs", what);
  /* One key per line: count the assignments. */
  int keys = 0;
  for (const char *p = e1; (p = strstr(p, " = ")) != NULL; p++) keys++;
  T_CHECK(keys >= cfg_nkeys, "%s: %d assignments for %d keys", what, keys, cfg_nkeys);
  if (t_verbose && strcmp(what, "good_full") == 0) fputs(e1, stdout);
  free(e1);
  free(e2);
}

static void test_echo(void) {
  round_trip("defaults", "&control calculation = 'knn' /");
  round_trip("good_full", slurp(deck_path("good_full.nml")));
  round_trip("awkward values",
             "&control calculation = 'features', run_dir = 'a''b\"c!d/e &f $g' /\n"
             "&training lr = 0.1, min_lr = 3.0000000000000004e-05, clip_grad = 1e30, teacher_temp = 1e-6 /\n"
             "&model drop_path_rate = 0.30000000000000004 /\n"
             "&crops global_scale = 0.33333333333333331, 0.66666666666666663 /\n"
             "&data channels = 5, 3, 1, channel_names = 'x'' y', '!', '/', '&', 'e', 'f' /\n"
             "&knn k = 1 /\n");
  round_trip("empty lists", "&control calculation = 'train' / &data channels = / &knn k(1) = 3 /");
  /* An echo names every key with its doc. */
  config_parse_text("t.nml", "&control calculation = 'train' /", &C, err, sizeof err);
  char *e = NULL;
  size_t l = 0;
  FILE *f = open_memstream(&e, &l);
  config_echo(f, &C);
  fclose(f);
  T_CHECK(strstr(e, "\n&training\n") && strstr(e, "  lr = 0.0005 ") && strstr(e, "! peak learning rate"),
          "echo layout:\n%s", e);
  T_CHECK(strstr(e, "  k = 5, 10, 50, 100, 200, 500 ") && strstr(e, "  channels = ") &&
              strstr(e, "  augment = .true. ") && strstr(e, "  mlp_ratio = 4.0 "),
          "echo values:\n%s", e);
  free(e);
}

static void test_derived(void) {
  static const struct {
    const char *arch;
    int d, depth, h, mlp;
  } want[] = {{"vit_tiny", 192, 12, 3, 768}, {"vit_small", 384, 12, 6, 1536}, {"vit_base", 768, 12, 12, 3072}};
  for (int i = 0; i < 3; i++) {
    char deck[200];
    snprintf(deck, sizeof deck, CTRL "&model arch = '%s' /", want[i].arch);
    EXPECT_OK(deck);
    T_CHECK(config_embed_dim(&C) == want[i].d && config_depth(&C) == want[i].depth &&
                config_num_heads(&C) == want[i].h && config_mlp_hidden(&C) == want[i].mlp,
            "%s", want[i].arch);
  }
  EXPECT_OK(CTRL "&model arch = 'custom', embed_dim = 100, depth = 3, num_heads = 5, mlp_ratio = 2.5 /");
  T_CHECK(config_embed_dim(&C) == 100 && config_depth(&C) == 3 && config_num_heads(&C) == 5 &&
              config_mlp_hidden(&C) == 250,
          "custom");
  EXPECT_OK(CTRL "&model arch = 'custom', embed_dim = 3, num_heads = 1, mlp_ratio = 0.5 /");
  T_CHECK(config_mlp_hidden(&C) == 1, "(int)(3 * 0.5) = 1");
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_defaults();
  test_good_deck();
  test_arrays();
  test_deck_sets();
  test_error_classes();
  test_cross_checks();
  test_all_errors_at_once();
  test_suggest();
  test_restart_policy();
  test_parse_echo();
  test_echo();
  test_derived();
  return t_finish();
}
