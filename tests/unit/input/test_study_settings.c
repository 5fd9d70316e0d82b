/* tests/unit/input/test_study_settings.c - a study's hyperparameter settings: which keys a setting
 * may set (every group's rule; the variable keys' names unique), applying one over a deck (values
 * with the key table's types, the keys and deck_sets recorded, every error: unknown key with a
 * suggestion, a refused key, type, range, choice, a key twice, nothing set, text outside the
 * assignments, too many keys; the cross-key checks only when asked), the values as folder names
 * show them, the run folders (every refused name, joining, clashes) and the runs' labels, and the
 * deck checks of &study settings (alone and with channel sets). */
#include "build_config.h"

#include <stdio.h>
#include <string.h>

#include "input/config.h"
#include "input/study_settings.h"
#include "tests/fixtures/testutil.h"

static char msgs[8192], why[2048];
static struct config base, C;
static struct study_setting S;

static void test_refused(void) {
  T_CHECK(!study_setting_refused(cfg_find("training", "teacher_temp")), "training keys");
  T_CHECK(!study_setting_refused(cfg_find("training", "epochs")) && !study_setting_refused(cfg_find("training", "lr")),
          "epochs, lr");
  T_CHECK(!study_setting_refused(cfg_find("model", "out_dim")) && !study_setting_refused(cfg_find("model", "arch")),
          "model keys");
  T_CHECK(!study_setting_refused(cfg_find("crops", "global_scale")), "crops keys");
  T_CHECK(!study_setting_refused(cfg_find("control", "seed")), "the seed");
  const char *r = study_setting_refused(cfg_find("training", "restart"));
  T_CHECK(r && strstr(r, "the study's own"), "restart: %s", r ? r : "");
  r = study_setting_refused(cfg_find("control", "run_dir"));
  T_CHECK(r && strstr(r, "every run is a pipeline in its folder"), "run_dir: %s", r ? r : "");
  T_CHECK(study_setting_refused(cfg_find("control", "calculation")), "calculation");
  T_CHECK(study_setting_refused(cfg_find("control", "verbosity")), "verbosity");
  r = study_setting_refused(cfg_find("data", "channels"));
  T_CHECK(r && strstr(r, "channel_sets vary the channels"), "channels: %s", r ? r : "");
  r = study_setting_refused(cfg_find("data", "shard_dir"));
  T_CHECK(r && strstr(r, "prepared (and staged) once"), "shard_dir: %s", r ? r : "");
  r = study_setting_refused(cfg_find("knn", "k"));
  T_CHECK(r && strstr(r, "the evaluation is the same for every run"), "knn: %s", r ? r : "");
  T_CHECK(study_setting_refused(cfg_find("features", "resize")) &&
              study_setting_refused(cfg_find("attention", "threshold")), "features, attention");
  T_CHECK(study_setting_refused(cfg_find("study", "settings")) &&
              study_setting_refused(cfg_find("study", "ranks_per_run")), "the study's keys");
  T_CHECK(study_setting_refused(cfg_find("system", "threads")) && study_setting_refused(cfg_find("gpu", "attention")),
          "system, gpu");
  T_CHECK(study_setting_refused(cfg_find("debug", "signal_at_step")), "debug");
  /* A setting names a key by its name alone: no two variable keys may share one. */
  for (int i = 0; i < cfg_nkeys; i++)
    for (int j = 0; j < i; j++)
      if (!study_setting_refused(&cfg_keys[i]) && !study_setting_refused(&cfg_keys[j]))
        T_CHECK(strcmp(cfg_keys[i].name, cfg_keys[j].name) != 0, "%s.%s and %s.%s share a name", cfg_keys[i].group,
                cfg_keys[i].name, cfg_keys[j].group, cfg_keys[j].name);
}

/* Apply text over a study's deck (as study_run_base makes it), with the cross-key checks. */
static int apply(const char *text, int check) {
  msgs[0] = '\0';
  study_run_base(&base, &C);
  return study_setting_apply(text, &C, check, &S, msgs, sizeof msgs);
}

static void test_apply(void) {
  char err[4096];
  T_CHECK(config_parse_text("t.nml", "&control calculation = 'study' /\n&training epochs = 5 /\n"
                                     "&study settings = 'lr = 1e-4', ranks_per_run = 2 /\n",
                            &base, err, sizeof err) == 0,
          "%s", err);
  study_run_base(&base, &C);
  T_CHECK(!strcmp(C.control.calculation, "pipeline") && C.study.n_settings == 0 && C.study.ranks_per_run == 0 &&
              C.training.epochs == 5, "the run's base deck");
  T_CHECK(apply("teacher_temp = 0.07", 1) == 0 && C.training.teacher_temp == 0.07, "%s", msgs);
  const struct cfg_key *tt = cfg_find("training", "teacher_temp");
  T_CHECK(S.nkeys == 1 && &cfg_keys[S.key[0]] == tt && !strcmp(S.folder, "teacher_temp_0.07"), "keys, folder %s",
          S.folder);
  T_CHECK(config_deck_sets(&C, "training", "teacher_temp") && !config_deck_sets(&base, "training", "teacher_temp"),
          "the setting's keys count as set by the deck (features and attention compare them with checkpoints)");
  T_CHECK(apply("lr = 1e-4, epochs = 6", 1) == 0 && C.training.lr == 1e-4 && C.training.epochs == 6 &&
              !strcmp(S.folder, "lr_0.0001_epochs_6"), "two keys: %s %s", msgs, S.folder);
  T_CHECK(apply("arch = 'vit_tiny'", 1) == 0 && !strcmp(C.model.arch, "vit_tiny") && !strcmp(S.folder, "arch_vit_tiny"),
          "a choice: %s %s", msgs, S.folder);
  T_CHECK(apply("ARCH = \"VIT_TINY\"", 1) == 0 && !strcmp(S.folder, "arch_vit_tiny"), "names and choices in any case");
  T_CHECK(apply("global_scale = 0.3, 1.0, norm_last_layer = F", 1) == 0 && C.crops.global_scale[0] == 0.3 &&
              C.crops.n_global_scale == 2 && !C.model.norm_last_layer &&
              !strcmp(S.folder, "global_scale_0.3,1.0_norm_last_layer_false"), "a list and a logical: %s %s", msgs,
          S.folder);
  T_CHECK(apply("seed = 7, out_dim = 1024", 1) == 0 && C.control.seed == 7 && C.model.out_dim == 1024, "%s", msgs);
  /* errors */
  T_CHECK(apply("teacher_tmp = 0.07", 1) == 1 &&
              strstr(msgs, "unknown key 'teacher_tmp'; did you mean 'teacher_temp'?"), "unknown: %s", msgs);
  T_CHECK(apply("learning_rate = 0.1", 1) == 1 && strstr(msgs, "did you mean 'lr'?"), "scDINO's name: %s", msgs);
  T_CHECK(apply("frobnicate = 1", 1) == 1 && strstr(msgs, "unknown key 'frobnicate'"), "unknown: %s", msgs);
  T_CHECK(apply("k = 5", 1) == 1 && strstr(msgs, "knn.k cannot be varied by a study"), "refused: %s", msgs);
  T_CHECK(apply("train_fraction = 0.5", 1) == 1 && strstr(msgs, "data.train_fraction cannot be varied"),
          "a name of two refused keys: %s", msgs);
  T_CHECK(apply("run_dir = 'x'", 1) == 1 && strstr(msgs, "control.run_dir cannot be varied"), "run_dir: %s", msgs);
  T_CHECK(apply("epochs = 'x'", 1) == 1 && strstr(msgs, "wrong type for epochs: expected an integer"), "type: %s",
          msgs);
  T_CHECK(apply("momentum_teacher = 2", 1) == 1 && strstr(msgs, "momentum_teacher = 2 is out of range"), "range: %s",
          msgs);
  T_CHECK(apply("arch = 'vit_huge'", 1) == 1 && strstr(msgs, "arch = 'vit_huge' is not allowed"), "choice: %s", msgs);
  T_CHECK(apply("lr = 1e-4, lr = 2e-4", 1) == 1 && strstr(msgs, "sets lr twice"), "twice: %s", msgs);
  T_CHECK(apply("", 1) == 1 && strstr(msgs, "sets no key"), "empty: %s", msgs);
  T_CHECK(apply("lr = 1e-4 / 2", 1) >= 1 && strstr(msgs, "outside"), "text after the assignments: %s", msgs);
  T_CHECK(apply("lr = abc", 1) == 1 && strstr(msgs, "strings need quotes"), "syntax: %s", msgs);
  T_CHECK(apply("lr=1,min_lr=0,weight_decay=0.1,epochs=1,seed=1,depth=1,arch='custom',out_dim=9,student_temp=1,"
                "clip_grad=1,saveckp_freq=1,log_every=1,max_steps=1,sampler='balanced',augment=F,local_size=8,"
                "global_size=16",
                0) == 1 && strstr(msgs, "sets more than 16 keys"), "too many keys: %s", msgs);
  /* The cross-key checks, when asked. */
  T_CHECK(apply("warmup_epochs = 9", 1) == 1 && strstr(msgs, "warmup_epochs = 9 exceeds epochs = 5"), "checked: %s",
          msgs);
  T_CHECK(apply("warmup_epochs = 9", 0) == 0 && C.training.warmup_epochs == 9, "unchecked (a run of a checked deck)");
  T_CHECK(apply("embed_dim = 32", 1) == 1 && strstr(msgs, "embed_dim is only used with arch = 'custom'"),
          "a named architecture's keys: %s", msgs);
  T_CHECK(apply("arch = 'custom', embed_dim = 30, num_heads = 4", 1) == 1 &&
              strstr(msgs, "embed_dim = 30 is not divisible by num_heads = 4"), "custom: %s", msgs);
  char v[64];
  T_CHECK(apply("lr = 1E-4", 0) == 0, "%s", msgs);
  study_setting_value(&C, cfg_find("training", "lr"), v, sizeof v);
  T_CHECK(!strcmp(v, "0.0001"), "the echo's shortest text: %s", v);
  study_setting_value(&C, cfg_find("training", "init_from"), v, sizeof v);
  T_CHECK(!strcmp(v, ""), "an empty string: [%s]", v);
  T_CHECK(apply("init_from = 'it''s'", 0) == 0, "%s", msgs);
  study_setting_value(&C, cfg_find("training", "init_from"), v, sizeof v);
  T_CHECK(!strcmp(v, "it's"), "a doubled quote: [%s]", v);
  T_CHECK(apply("init_from = 'a/b'", 0) == 0 && !strcmp(S.folder, "init_from_a/b"), "%s", S.folder);
  T_CHECK(study_folder_check(S.folder, "run", 255, why, sizeof why) && strstr(why, "holds '/'"), "%s", why);
}

static void test_folders(void) {
  T_CHECK(study_folder_check("", "run", 255, why, sizeof why) && strstr(why, "empty"), "empty: %s", why);
  T_CHECK(study_folder_check(".x", "run", 255, why, sizeof why) && strstr(why, "begins with '.'"), "hidden: %s", why);
  T_CHECK(study_folder_check("a\tb", "run", 255, why, sizeof why) && strstr(why, "control character"), "%s", why);
  T_CHECK(study_folder_check("plots", "run", 255, why, sizeof why) && strstr(why, "own outputs"), "%s", why);
  T_CHECK(study_folder_check("x.png", "run", 255, why, sizeof why) && strstr(why, "ends in .png"), "%s", why);
  char longn[300];
  memset(longn, 'a', 299);
  longn[299] = '\0';
  T_CHECK(study_folder_check(longn, "run", 255, why, sizeof why) && strstr(why, "has 299 bytes"), "%s", why);
  T_CHECK(!study_folder_check("teacher_temp_0.04", "run", 255, why, sizeof why), "a setting's folder");
  char out[64];
  T_CHECK(study_folder_join("BF_DNA", "lr_0.1", out, sizeof out) == 0 && !strcmp(out, "BF_DNA_lr_0.1"), "%s", out);
  T_CHECK(study_folder_join("", "lr_0.1", out, sizeof out) == 0 && !strcmp(out, "lr_0.1"), "%s", out);
  T_CHECK(study_folder_join("BF", "", out, sizeof out) == 0 && !strcmp(out, "BF"), "%s", out);
  T_CHECK(study_folder_join(longn, "x", out, sizeof out) == -1, "too long for out");
  static const char f[4][STUDY_FOLDER_LEN] = {"a_lr_0.1", "b", "A_LR_0.1", "study.txt"};
  int other = 0;
  T_CHECK(study_folders_check(f, 2, "run", 255, &other, why, sizeof why) == -1, "good folders");
  T_CHECK(study_folders_check(f, 3, "run", 255, &other, why, sizeof why) == 2 && other == 0, "a clash where case is "
          "ignored: other %d", other);
  static const char g[2][STUDY_FOLDER_LEN] = {"b", "study.txt"};
  T_CHECK(study_folders_check(g, 2, "run", 255, &other, why, sizeof why) == 1 && other == -1 &&
              strstr(why, "own outputs"), "a refused folder: %s", why);
}

static char err[1 << 16];

static int deck(const char *text) {
  err[0] = '\0';
  return config_parse_text("t.nml", text, &C, err, sizeof err);
}

#define STUDY "&control calculation = 'study' /\n"

static void test_deck(void) {
  T_CHECK(deck(STUDY "&study settings = 'teacher_temp = 0.04', 'teacher_temp = 0.07', 'teacher_temp = 0.1' /\n") == 0,
          "%s", err);
  T_CHECK(C.study.n_settings == 3 && !strcmp(C.study.settings[1], "teacher_temp = 0.07"), "values");
  T_CHECK(deck(STUDY "&data channels = 0, 2 /\n&study settings = 'lr = 1e-4' /\n") == 0,
          "the deck's channels with settings alone: %s", err);
  T_CHECK(deck(STUDY "&data channels = 0, 2 /\n&study channel_sets = '0', settings = 'lr = 1e-4' /\n") == 1 &&
              strstr(err, "channels is not used with calculation = 'study' and &study channel_sets"),
          "the deck's channels with channel sets: %s", err);
  T_CHECK(deck(STUDY "&study channel_sets = '0', '1', settings = 'lr = 1e-4', 'seed = 3' /\n") == 0, "both: %s", err);
  T_CHECK(deck(STUDY) == 1 && strstr(err, "needs &study channel_sets (e.g. channel_sets = '0,1,2', '0', '1,2') or "
                                         "settings (e.g. settings = 'teacher_temp = 0.04'"), "neither: %s", err);
  T_CHECK(deck("&control calculation = 'pipeline' /\n&study settings = 'lr = 1e-4' /\n") == 1 &&
              strstr(err, "settings is only used with calculation = 'study'"), "not a study: %s", err);
  T_CHECK(deck(STUDY "&study settings = 'lr = 1e-4', 'teacher_tmp = 0.07' /\n") == 1 &&
              strstr(err, "t.nml:2:8: settings(2) = 'teacher_tmp = 0.07': unknown key 'teacher_tmp'; did you mean "
                          "'teacher_temp'?"), "at the key, naming the setting: %s", err);
  T_CHECK(deck(STUDY "&study settings = 'lr = 1e-4', 'lr = 0.0001' /\n") == 1 &&
              strstr(err, "settings(2) = 'lr = 0.0001' gives the same deck as settings(1) = 'lr = 1e-4'"), "%s", err);
  T_CHECK(deck(STUDY "&study settings = 'lr = 0.0005', 'seed = 40' /\n") == 1 &&
              strstr(err, "settings(2) = 'seed = 40' gives the same deck as settings(1) = 'lr = 0.0005'"),
          "two settings that are both the deck's own values: %s", err);
  T_CHECK(deck(STUDY "&training epochs = 6 /\n&study settings = 'warmup_epochs = 7' /\n") == 1 &&
              strstr(err, "settings(1) = 'warmup_epochs = 7': warmup_epochs = 7 exceeds epochs = 6"), "%s", err);
  /* A deck error of its own is reported once, not again for every setting. */
  T_CHECK(deck(STUDY "&training epochs = 4, warmup_epochs = 5 /\n&study settings = 'lr = 1e-4', 'seed = 3' /\n") == 1,
          "one error: %s", err);
  T_CHECK(deck(STUDY "&study settings = 'init_from = \"w.h5\"' /\n") == 1 &&
              strstr(err, "settings(1) = 'init_from = \"w.h5\"': the folder name 'init_from_w.h5' ends in .h5"),
          "a folder like an output file: %s", err);
  /* Every run's folder, when the deck names the channels. */
  T_CHECK(deck(STUDY "&data channel_names = 'x', 'x_lr_0.0001' /\n&study channel_sets = 'x', 'x_lr_0.0001', "
                     "settings = 'lr = 1e-4, seed = 3', 'seed = 3' /\n") == 1 &&
              strstr(err, "channel_sets(2) = 'x_lr_0.0001' with settings(2) = 'seed = 3' would write the folder "
                          "run/x_lr_0.0001_seed_3 of channel_sets(1) = 'x' with settings(1) = 'lr = 1e-4, seed = 3'"),
          "a set's and a setting's folders: %s", err);
  T_CHECK(deck(STUDY "&study settings = 'teacher_temp = 0.04', 'TEACHER_TEMP = 0.07' /\n") == 0, "%s", err);
  char label[256];
  T_CHECK(deck(STUDY "&study channel_sets = '0', '1', settings = 'lr = 1e-4', 'seed = 3', 'seed = 4' /\n") == 0, "%s",
          err);
  study_run_label(&C, 4, label, sizeof label);
  T_CHECK(!strcmp(label, "channel_sets(2) = '1' with settings(2) = 'seed = 3'"), "run 5: %s", label);
  T_CHECK(deck(STUDY "&study settings = 'lr = 1e-4', 'seed = 3' /\n") == 0, "%s", err);
  study_run_label(&C, 1, label, sizeof label);
  T_CHECK(!strcmp(label, "settings(2) = 'seed = 3'"), "settings alone: %s", label);
}

int main(int argc, char **argv) {
  t_init(argc, argv);
  test_refused();
  test_apply();
  test_folders();
  test_deck();
  return t_finish();
}
