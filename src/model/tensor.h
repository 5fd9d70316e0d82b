/* tensor.h - tensor tables: names, shapes and offsets of the tensors that share one flat buffer.
 *
 * The student's parameters, the teacher's, the gradients and the two AdamW moments are each one
 * flat fp32 allocation with the same table (llm.c style).  Names are PyTorch state_dict names
 * without the "module." prefix ("backbone.blocks.3.attn.qkv.weight", "head.last_layer.weight_v"),
 * shapes are PyTorch's, and the table order is PyTorch's named_parameters() order, which the
 * checkpoint layout and the optimizer's parameter groups follow. */
#ifndef SCDINO_TENSOR_H
#define SCDINO_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"

#define TENSOR_NAME_MAX 96
#define TENSOR_MAX_DIMS 4
#define TENSOR_ALIGN 16 /* offsets are multiples of 16 elements (64 bytes) */

enum tensor_flag {
  TENSOR_GRAD = 1, /* trainable (requires_grad): has a gradient and an optimizer state */
};

struct tensor {
  char name[TENSOR_NAME_MAX];
  int ndim;
  int64_t shape[TENSOR_MAX_DIMS];
  size_t off; /* element offset in the flat buffer */
  size_t n;   /* elements */
  unsigned flags;
};

struct tensor_table {
  struct tensor *t;
  int n, cap;
  size_t size; /* elements of the flat buffer, alignment padding included */
};

void tensors_init(struct tensor_table *tt);
void tensors_free(struct tensor_table *tt);
/* Append a tensor (flags = TENSOR_GRAD); returns its index.  The name is printf-formatted. */
int tensors_add(struct tensor_table *tt, int ndim, const int64_t *shape, const char *fmt, ...)
    SCD_PRINTF(4, 5);
/* Index of the tensor called name, or -1. */
int tensors_find(const struct tensor_table *tt, const char *name);
/* Sum of the element counts (padding excluded). */
size_t tensors_numel(const struct tensor_table *tt);
/* "[48, 3, 8, 8]" into buf. */
const char *tensors_shape_str(const struct tensor *t, char *buf, size_t n);

#endif
