/* checkpoint.h - training checkpoints in HDF5 (doc/formats.md): writing, restoring, loading weights.
 *
 * Layout of run_dir/checkpoint.h5 (every object readable with h5py / h5dump):
 *   /student/<name>, /teacher/<name>   float32, PyTorch state_dict names and shapes without the
 *                                      "module." prefix ("backbone.blocks.0.attn.qkv.weight", ...)
 *   /optimizer/exp_avg/<name>          float32, AdamW first moment of every trainable tensor
 *   /optimizer/exp_avg_sq/<name>       float32, second moment
 *   /optimizer/step/<name>             int64 scalar: the tensor's own step count (PyTorch keeps one
 *                                      per parameter; a tensor frozen so far has 0)
 *   /dino_loss/center                  float32 [1, K]
 *   /fp16_scaler                       attributes (fp16 runs only): the dynamic loss scale (scale,
 *                                      growth_tracker, skipped_steps; growth_factor, backoff_factor,
 *                                      growth_interval as PyTorch's GradScaler state_dict)
 *   /loader                            attributes: where the data stream continues (seed, epoch,
 *                                      next_batch, world_size, n_train, ..., data_fingerprint: the
 *                                      shard set's, 16 hex digits; the batch size is the root's)
 *   /train_metrics                     attributes: the running sums of the unfinished epoch (log.txt)
 *   /normalization/mean, std           float64 [nsel]: the training shard set's per-channel statistics of
 *                                      the selected channels (in the order of `channels`), and
 *   /normalization/channel_names       their names: what features and attention of other shard sets
 *                                      normalise with and match channels by (absent from imports)
 *   root attributes: format = "scdino-checkpoint", version = 2 (1 is read too), epoch (next epoch to run),
 *   iteration (next iteration inside that epoch; 0 at an epoch boundary), global_step,
 *   niter_per_epoch, epochs, world_size, batch_size_per_rank, the model hyperparameters (arch,
 *   patch_size, in_chans, embed_dim, depth, num_heads, mlp_hidden, pos_grid, drop_path_rate,
 *   gelu_approximate ("none" or "tanh"; absent from older files: "none"), out_dim,
 *   head_hidden_dim, head_bottleneck_dim, head_nlayers, norm_last_layer), channels (the
 *   selected source channels), crop sizes, seed, scdino_version, deck (the echoed input deck),
 *   threads (compute threads per rank, a record: results do not depend on it), arithmetic (the
 *   backend's ops->arithmetic line: BLAS library and kernels, or GPU and cuBLAS),
 *   restart_changes (a line per restart that changed a schedule key or the arithmetic: "global
 *   step S: lr 0.05 -> 0.04; ..."; "" when none),
 *   training_complete (1 when epoch >= epochs) and stopped_by (why the run that wrote it
 *   stopped early: "max_steps", "SIGTERM", "SIGUSR1", "SIGINT"; "" otherwise).
 *
 * All random numbers are counter-based (rng.h): the data order, the crops and the drop-path masks
 * of a step follow from (seed, epoch, iteration, sample), so (epoch, iteration) is the complete
 * RNG and loader state of every rank, and a restart with the same world size is bit-identical.
 *
 * Files: run_dir/checkpoint.h5 after every epoch (and at any stop inside one); also
 * run_dir/checkpoint_EEEE.h5 when the just-finished 0-based epoch EEEE satisfies
 * EEEE % saveckp_freq == 0, and for the last epoch: the file of epoch EEEE holds epoch = EEEE+1,
 * as upstream's checkpoint{epoch}.pth.  Rank 0 writes, atomically (temporary name, fsync, rename).
 * The file is built in memory (an HDF5 file image) and written with checked POSIX writes.
 * Durability (checkpoint_files.c): the checkpoint.h5 being replaced is kept as checkpoint.prev.h5
 * (a hard link, so checkpoint.h5 never disappears); a write error (disk full, quota, ulimit -f)
 * ends the job naming the file and errno with the old files untouched and the temporary removed; a
 * restart whose checkpoint.h5 cannot be read falls back to checkpoint.prev.h5 with a warning.
 *
 * Reading (restart, init_from, features, attention) checks the format and version attributes and
 * every tensor's presence and shape; a mismatch ends the job with SCD_EXIT_DATA naming the file,
 * the first mismatching key or tensor and both values or shapes.  init_from, features and
 * attention need only /student, /teacher and the format/version attributes (the model
 * hyperparameters are checked when present). */
#ifndef SCDINO_CHECKPOINT_H
#define SCDINO_CHECKPOINT_H

#include <stdint.h>

#include "input/config.h"
#include "model/dino_model.h"
#include "model/ops.h"
#include "model/tensor.h"

#define CKPT_FORMAT "scdino-checkpoint"
#define CKPT_VERSION 2        /* 2: checksummed (newest HDF5 format, Fletcher-32, fixed strings) */
#define CKPT_VERSION_OLDEST 1 /* version 1 files (no checksums) are still read */
#define CKPT_FILE "checkpoint.h5"
#define CKPT_MAX_CHANNELS 64
#define CKPT_CHANGES_MAX 4096 /* bytes of the restart_changes record kept (the newest lines) */
#define CKPT_NAME_MAX 256     /* bytes of a recorded channel name, its terminating NUL included */

struct optim;
struct dino_loss;
struct loss_scale;
struct dataset;

/* Pretrained weights of another channel count (&model use_mean_patch_embedding,
 * custom_embedding_map): how backbone.patch_embed.proj.weight [D, Cp, p, p] of the file becomes the
 * model's [D, C, p, p].  Every other tensor loads as it is. */
enum ckpt_embed_mode { CKPT_EMBED_NONE = 0, CKPT_EMBED_MEAN, CKPT_EMBED_MAP };
struct ckpt_embed {
  enum ckpt_embed_mode mode;
  int n;                       /* map entries (CKPT_EMBED_MAP) */
  int map[CKPT_MAX_CHANNELS];  /* input channel i takes pretrained channel map[i] */
};
/* From the deck (NONE when neither key is set). */
void checkpoint_embed_from_config(const struct config *cfg, struct ckpt_embed *e);

enum ckpt_which { CKPT_STUDENT = 0, CKPT_TEACHER = 1 };
const char *checkpoint_which_name(enum ckpt_which w); /* "student" / "teacher" */

/* What a checkpoint says about itself (its root attributes). */
struct ckpt_info {
  int has_spec;           /* backbone hyperparameters present (scdino files, import_pytorch.py) */
  int has_head;           /* head hyperparameters present too (not in a backbone-only import) */
  struct dino_spec spec;  /* valid when has_spec (.head when has_head); drop_path_rate is the
                           * training value */
  char arch[CFG_WORDLEN]; /* "" when absent */
  int nchannels;          /* selected source channels the model was trained on; 0 = unknown */
  int channels[CKPT_MAX_CHANNELS];
  int nnorm;              /* channels of /normalization (= nchannels); 0 = not recorded (imports, older files) */
  double norm_mean[CKPT_MAX_CHANNELS], norm_std[CKPT_MAX_CHANNELS]; /* the training set's, per channel */
  char channel_names[CKPT_MAX_CHANNELS][CKPT_NAME_MAX];            /* the names of those channels */
  int has_state;          /* optimizer, centre and position present: restartable */
  int64_t epoch;          /* next epoch to run (-1 when absent) */
  int64_t iteration;      /* next iteration inside that epoch */
  int64_t global_step;    /* iterations done in all */
  int64_t niter_per_epoch, epochs, batch_size_per_rank;
  int world_size;
  int64_t n_train;        /* training-split size of the run that wrote it (0 when absent) */
  char data_fingerprint[24]; /* its shard set's dataset_fingerprint, 16 hex digits ("" when absent) */
  char restart_changes[CKPT_CHANGES_MAX]; /* what restarts of its run changed, a line each ("" when none) */
  int global_size, local_size, local_crops_number;
  char arithmetic[160];   /* ops->arithmetic of the run that wrote it ("" when absent) */
};

/* Read and check the root attributes (format, version, and the rest when present).  Collective
 * over the ranks (rank 0 reads, the result is broadcast; alone, no MPI needed).  Not a readable
 * scdino checkpoint: SCD_EXIT_DATA with the reason. */
void checkpoint_read_info(const char *path, struct ckpt_info *info);

/* Compute threads per rank of this process (recorded as the root attribute "threads"; the results
 * do not depend on it). */
int checkpoint_threads(void);
/* The echoed deck of the run that wrote path (its "deck" attribute) into buf (size n, cut to fit);
 * returns 0, or -1 when the file has none (imports).  Collective like checkpoint_read_info. */
int checkpoint_read_deck(const char *path, char *buf, size_t n);

/* Refuse (SCD_EXIT_DATA) a checkpoint whose recorded hyperparameters differ from spec, naming the
 * first differing key and both values.  restart != 0 also compares norm_last_layer (it decides
 * which tensors have optimizer state). */
void checkpoint_check_spec(const char *path, const struct ckpt_info *info,
                           const struct dino_spec *spec, int restart);

/* Load every tensor of tt from /student or /teacher into params (device, tt->size floats).  Only
 * the tensors of tt are read, so a backbone-only table (vit_init with prefix "backbone.") loads a
 * backbone; a file tensor under a top-level prefix that tt uses ("backbone.", "head.") but that tt
 * lacks (a deeper model) is refused, as is any missing tensor, a wrong shape or a non-finite
 * value.  emb (NULL or CKPT_EMBED_NONE: off) adapts a patch embedding of another channel count.
 * Collective like checkpoint_read_info. */
void checkpoint_load_weights(const char *path, enum ckpt_which which, const struct ckpt_embed *emb,
                             const struct tensor_table *tt,
                             const struct ops *ops, float *params);

/* init_from: the student and teacher weights of path into m (a model built from the deck), with
 * the checks above plus the recorded hyperparameters (when present) against m->spec; a mismatch
 * names the first differing tensor with both shapes and the first differing key with both values.
 * info gets the root attributes.  Collective. */
void checkpoint_load_model(const char *path, const struct ckpt_embed *emb, struct dino_model *m,
                           struct ckpt_info *info);

/* The running sums of an epoch (over all ranks) that log.txt's averages are made of. */
struct ckpt_metrics {
  double loss_sum;   /* sum over steps and ranks of each rank's batch loss */
  double loss_count; /* number of (step, rank) losses in loss_sum */
  double lr_sum, wd_sum;
  int64_t steps;     /* steps of the epoch done */
  int64_t images;    /* images processed in the epoch, all ranks */
  double seconds;    /* wall time spent on the epoch so far */
  /* collapse diagnostics (doc/algorithm.md §4.5): sums over the steps with images */
  double entropy_sum, batch_entropy_sum, diag_steps;
};

/* Everything a checkpoint holds (device buffers are read through m->ops). */
struct ckpt_state {
  const struct config *cfg; /* hyperparameters, seed, crop sizes, the echoed deck */
  struct dino_model *model;
  struct optim *opt;
  struct dino_loss *loss;
  struct loss_scale *ls;    /* fp16's loss scale (NULL or off: not saved, not restored) */
  int nchannels;
  const int *channels;      /* selected source channels */
  const struct dataset *ds; /* the training shard set: its statistics and names of the channels are
                             * recorded (/normalization); NULL: not recorded */
  int64_t epoch;            /* next epoch to run */
  int64_t iteration;        /* next iteration inside it (0: epoch boundary) */
  int64_t niter_per_epoch;
  int world_size;
  int64_t n_train;          /* training-split size (restart checks it) */
  uint64_t data_fingerprint; /* dataset_fingerprint of the shard set (restart checks it) */
  struct ckpt_metrics metrics;
  int keep_prev;            /* keep the checkpoint.h5 being replaced as checkpoint.prev.h5 */
  const char *stopped_by;   /* why the run stops before its end (NULL: it does not) */
  const char *restart_changes; /* what restarts changed on the way, a line each (NULL or "": none) */
};

/* Write the state to path.  Collective: every rank calls it, rank 0 writes (atomically) and the
 * call returns on every rank once the file is complete. */
void checkpoint_save(const char *path, const struct ckpt_state *st);
/* Same state written to several paths (checkpoint.h5 and checkpoint_EEEE.h5) with one download. */
void checkpoint_save_many(const char *const *paths, int npaths, const struct ckpt_state *st);

/* Restore a full training state from path into st: the model's student and teacher, the
 * optimizer's moments and step counts, the centre (all created beforehand for the deck's model),
 * and st->epoch, st->iteration, st->metrics, and the loss scale st->ls when it is on (a checkpoint
 * without one, from a bf16 or fp32 run, leaves it at its start, said in the log).  The run that wrote it (world size, iterations per
 * epoch, n_train) is left in info for the caller to compare.  Checks everything
 * checkpoint_load_weights does plus the optimizer tensors and the centre.  Collective. */
void checkpoint_restore(const char *path, struct ckpt_state *st, struct ckpt_info *info);

/* ---- durable files (checkpoint_files.c) ---- */

/* path with ".h5" replaced by ".prev.h5" (".prev" appended when it does not end in .h5). */
void checkpoint_prev_path(const char *path, char *out, size_t n);
/* Rename the complete temporary file tmp over path after fsync; keep_prev: the file it replaces stays
 * as checkpoint_prev_path(path) (hard link; a rename where the file system has no hard links). */
void checkpoint_install(const char *tmp, const char *path, int keep_prev);
/* Whether path can be opened by HDF5 and every dataset in it read back (0), else 1 with the reason
 * in why.  Local (no MPI); reads the whole file.  Content (format, shapes) is checked elsewhere. */
int checkpoint_probe(const char *path, char *why, size_t n);
/* restart: the file to continue from, into out (size n): path when readable, else
 * checkpoint_prev_path(path) when that one is (with a warning), "" when neither exists (a fresh
 * start); when both exist and neither reads, path, so that reading it reports the damage.  Returns
 * 1 when it fell back to the previous file.  Collective (rank 0 looks, the answer is broadcast). */
int checkpoint_pick_restart(const char *path, char *out, size_t n);
/* Remove the temporary files (NAME.tmp.PID) of checkpoints and log.txt that a killed run left in
 * run_dir, with a warning naming each.  Rank 0 only. */
void checkpoint_remove_stale(const char *run_dir);

#endif
