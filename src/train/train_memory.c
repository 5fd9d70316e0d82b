/* train_memory.c - the memory a training run needs per rank, from its deck and the data set's
 * size, checked before the loader, the model or the schedules are allocated (core/membudget.h). */
#include "build_config.h"

#include <string.h>

#include "core/membudget.h"
#include "data/shards.h"
#include "model/dino_model.h"
#include "model/model_config.h"
#include "train/train_priv.h"

void train_memory_check(const struct trainer *t) {
  const struct config *cfg = t->cfg;
  /* crops made on the device from raw batches (dev->crops); the model in the device's own memory */
  const int dev_crops = t->dev->crops != NULL, dev_mem = t->dev->memory != NULL;
  const double C = cfg->data.n_channels > 0 ? cfg->data.n_channels : dataset_channels(t->ds);
  const double B = (double)t->B, G = (double)cfg->crops.global_size, L = (double)cfg->crops.local_size;
  const double nl = (double)cfg->crops.local_crops_number;
  const double crops = (2 * G * G + nl * L * L) * C * B * sizeof(float); /* one batch of crops */
  const double raw = B * (double)dataset_image_bytes(t->ds);
  const double niter = (double)((t->split.n_train + t->world - 1) / t->world + t->B - 1) / (double)t->B;

  struct dino_spec spec;
  model_config_spec(&spec, cfg, (int)C);
  size_t nparams = 0;
  const double acts = (double)dino_model_plan_bytes(t->ops, &spec, (int)t->B, (int)nl, (int)G, (int)L, &nparams);
  const double P = (double)nparams * sizeof(float);
  const char *model_keys = "arch (or embed_dim, depth, mlp_ratio), patch_size, out_dim, head_hidden_dim, "
                           "head_bottleneck_dim, the channels";

  /* Host memory: everything on the CPU backend; the loader, schedules and checkpoint copies on a
   * device with memory of its own (the GPU). */
  struct membudget host = {0};
  membudget_add(&host, (cfg->system.prefetch_batches + 1) * (raw + (dev_crops ? 0 : crops)), "loader batches",
                "batch_size_per_rank = %lld, prefetch_batches = %ld, image size, global_size, local_size, "
                "local_crops_number", (long long)t->B, cfg->system.prefetch_batches);
  membudget_add(&host, 3 * 8.0 * (double)t->epochs * niter + 3 * 8.0 * (double)t->split.n_train,
                "schedules and sample lists", "epochs = %lld, batch_size_per_rank, the training images",
                (long long)t->epochs);
  membudget_add(&host, 8 * P, "checkpoint copies (student, teacher, moments)", "%s", model_keys);
  /* Student, teacher and gradients whole; the two AdamW moments whole, or with &training
   * shard_optimizer this rank's slice of them (about 1/world) and the slice the reduce-scatter
   * receives. */
  const double W = (double)t->world, moments = cfg->training.shard_optimizer ? 3 * P / W : 2 * P;
  if (!dev_mem) {
    if (cfg->training.shard_optimizer)
      membudget_add(&host, 3 * P + moments, "weights, gradients, AdamW moments (sharded)",
                    "%s, shard_optimizer over %d ranks", model_keys, t->world);
    else
      membudget_add(&host, 3 * P + moments, "weights, gradients, AdamW moments", "%s", model_keys);
    membudget_add(&host, acts + crops + 2 * B * (double)spec.head.out_dim * sizeof(float),
                  "activations of a training step",
                  "batch_size_per_rank = %lld, global_size = %d, local_size = %d, local_crops_number = %d, the model",
                  (long long)t->B, (int)G, (int)L, (int)nl);
  }
  char how[256];
  const double limit = membudget_limit(cfg->system.memory_per_rank, how, sizeof how);
  membudget_check(&host, "train (host memory)", limit, how);

  if (dev_mem) { /* device memory: weights, gradients, moments, their bf16 copies, activations, crops */
    struct membudget dev = {0};
    if (cfg->training.shard_optimizer) /* NCCL reduces in place: the moments' slices only */
      membudget_add(&dev, 3 * P + 2 * P / W + 2 * (P / 2), "weights, gradients, AdamW moments (sharded)",
                    "%s, shard_optimizer over %d ranks", model_keys, t->world);
    else
      membudget_add(&dev, 5 * P + 2 * (P / 2), "weights, gradients, AdamW moments", "%s", model_keys);
    membudget_add(&dev, acts + crops + (cfg->system.prefetch_batches > 0 ? 2 : 1) * raw,
                  "activations of a training step",
                  "batch_size_per_rank = %lld, global_size = %d, local_size = %d, local_crops_number = %d, the model",
                  (long long)t->B, (int)G, (int)L, (int)nl);
    size_t fr = 0, tot = 0;
    t->dev->memory(NULL, NULL, &fr, &tot);
    snprintf(how, sizeof how, "the GPU's %.1f GiB free of %.1f", (double)fr / (1 << 30), (double)tot / (1 << 30));
    membudget_check(&dev, "train (GPU memory)", (double)fr, how);
  }
}
