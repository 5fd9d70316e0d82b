/* model_buckets.h - the gradient all-reduce calls the trainer makes for a deck's &model. */
#ifndef SCDINO_MODEL_BUCKETS_H
#define SCDINO_MODEL_BUCKETS_H

#include <stddef.h>

struct config;

#define BENCH_MODEL_NAME 48 /* bytes of a call's name */

/* Element counts of the fp32 gradient all-reduce calls of one training step of the student (ViT +
 * DINO head), in the order the trainer issues them: the grads_ready ranges of dino_model_backward
 * (dino_ready_group: head, final norm, blocks from the last to the first, embeddings; each range
 * with its alignment padding, non-trainable tensors such as a fixed weight_g included, as the
 * trainer hands them over) merged by the communicators' rule (grad_comm_plan, with
 * GRAD_COMM_BUCKET_BYTES).  The channel count is the number of &data channels.  names (NULL: not
 * wanted) gets each call's ready groups, "norm+blocks.11", or "A..B (k ranges)" when they do not
 * fit.  Writes at most max entries and returns how many calls there are, or -1 when the deck
 * selects no channels (all channels of the shards: the count is not in the deck). */
int bench_model_buckets(const struct config *cfg, size_t sizes[], char (*names)[BENCH_MODEL_NAME], int max);

#endif
