/* init.h - initial weights of the student as upstream (doc/algorithm.md §1.8, §2), keyed by the seed.
 *
 * By tensor name: Linear weights, cls_token and pos_embed ~ trunc_normal(std 0.02, cut at absolute
 * +-2); Linear biases 0; LayerNorm weight 1, bias 0; the patch-embedding Conv2d keeps PyTorch's
 * default, weight and bias ~ U(+-1/sqrt(C p^2)); the last layer's weight_v ~ U(+-1/sqrt(bottleneck))
 * and weight_g = 1.  Each tensor draws from its own stream (RNG_DOMAIN_INIT, id0 = tensor index),
 * so the values depend only on the seed and the table.  The teacher starts as a copy. */
#ifndef SCDINO_INIT_H
#define SCDINO_INIT_H

#include <stdint.h>

#include "model/tensor.h"

#define INIT_STD 0.02
#define INIT_TRUNC 2.0

/* Fill host[tt->size] (padding left 0). */
void init_params(const struct tensor_table *tt, float *host, uint64_t seed);

#endif
