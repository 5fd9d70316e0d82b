/* model_buckets.h - the gradient buckets the trainer all-reduces for a deck's &model. */
#ifndef SCDINO_MODEL_BUCKETS_H
#define SCDINO_MODEL_BUCKETS_H

#include <stddef.h>

struct config;

/* Element counts of the fp32 gradient buckets of the student (backbone + DINO head), in the order
 * backward produces them: head last layer, head MLP, final norm, blocks depth-1 .. 0, then patch
 * embedding with cls token and position embedding.  Only trainable tensors count (the last layer's
 * weight_g is fixed when norm_last_layer).  The channel count is the number of &data channels.
 * Writes at most max entries and returns how many buckets there are, or -1 when the deck selects
 * no channels (all channels of the shards: the count is not in the deck). */
int bench_model_buckets(const struct config *cfg, size_t sizes[], int max);
/* Name of bucket i in that order ("head.last_layer", "blocks.11", ...). */
const char *bench_model_bucket_name(const struct config *cfg, int i, char *buf, size_t n);

#endif
