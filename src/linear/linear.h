/* linear.h - the linear probe (calculation = 'linear'): a linear classifier trained with SGD on the
 * frozen features of a checkpoint's backbone, as DINO's eval_linear.py (doc/algorithm.md §8.6).
 *
 *   features  the CLS tokens of the last linear.n_last_blocks blocks after the final norm (and with
 *             avgpool_patchtokens the mean patch token of the last), not L2-normalised
 *             (features_net_layout, analysis/features.h), of the training split of data.shard_dir
 *             and of the evaluation rows (the validation split, or every image of linear.query_dir)
 *   model     logits = x W^T + b, W [C, F] drawn N(0, 0.01^2) from the counter RNG keyed by
 *             linear.seed, b = 0
 *   loss      cross entropy, the mean over the batch
 *   steps     each epoch the training rows in the order of a permutation keyed by (seed, epoch),
 *             batches of linear.batch_size (the last one smaller), one SGD step per batch with
 *             momentum and weight decay as torch.optim.SGD, lr = linear.lr * batch_size / 256
 *             annealed per epoch by CosineAnnealingLR(T_max = epochs, eta_min = 0)
 *   report    every epoch the mean batch loss and the evaluation rows' loss, Top-1 and Top-5; at the
 *             end per-class precision, recall, F1 and the confusion matrix (linear.txt, linear.h5)
 *
 * Every rank computes its share of the features (whole batches, so their bits do not depend on
 * the rank count); rank 0 holds them all and trains the layer (a few multiply-adds per feature,
 * against a ViT's forward per image), so the results are the same for any number of ranks.  The
 * layer's GEMMs run on the backend (ops->matmul_f32: fp32 on both backends), the softmax, the
 * gradient's bias part and SGD on the host in fp32, as PyTorch orders them. */
#ifndef SCDINO_LINEAR_H
#define SCDINO_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "analysis/features.h"
#include "input/config.h"
#include "model/ops.h"

/* calculation = 'linear' (linear_run.c; every rank); returns the exit status. */
int linear_run(const struct config *cfg);

/* ---- the layer and its training (linear_sgd.c) ----------------------------------------------- */

struct linear_model {
  const struct ops *ops;
  int F, C;             /* feature width, classes */
  int rows_max;         /* rows of one call */
  float *w, *b;         /* host [C][F], [C] */
  float *mw, *mb;       /* momentum buffers (valid once have_mom) */
  int have_mom;
  float *gw, *gb;       /* host gradient of the last step */
  float *logits;        /* host [rows_max][C] */
  float *w_dev, *x_dev, *y_dev, *g_dev; /* device: W, rows, logits or their gradient, W's gradient */
};

/* W ~ N(0, 0.01^2) from rng_init(seed, RNG_DOMAIN_LINEAR, 0, 0) in row-major order (Box-Muller in
 * double, rounded to fp32), b = 0; calls take at most rows_max rows. */
void linear_model_init(struct linear_model *m, const struct ops *ops, int F, int C, int rows_max, uint64_t seed);
void linear_model_free(struct linear_model *m);
/* logits [n][C] = x [n][F] W^T + b (fp32 GEMM on the backend, then b added on the host); n <= rows_max. */
void linear_logits(struct linear_model *m, const float *x, int n, float *logits);
/* Cross entropy of one row of logits against label (PyTorch's log_softmax in fp32: max, sum of
 * exp(l - max), l - max - log(sum)); returns -log p[label].  With dl (NULL: skip), the row's
 * gradient of scale * loss: (softmax - onehot) * scale, formed as log_softmax's backward forms it. */
float linear_ce_row(const float *logits, int C, int label, float scale, float *dl);
/* One SGD step on the batch x [n][F] with labels (n <= rows_max); returns the batch's mean loss.
 * The gradient is that of the mean loss; then, per element in fp32 (torch.optim.SGD, nesterov and
 * dampening off): d = g + wd w; buf = d on the first step, else momentum buf + d; w -= lr buf. */
double linear_step(struct linear_model *m, const float *x, const int32_t *labels, int n, double lr, double momentum,
                   double weight_decay);
/* The n rows x [n][F] with labels (classes of the layer: 0 .. C-1; a label >= C, a class the
 * layer lacks, counts as wrong and has no loss): the mean cross entropy of the rows with a loss,
 * and Top-1 / Top-5 in percent (Top-5: the truth among the min(5, C) best classes). */
void linear_eval(struct linear_model *m, const float *x, const int32_t *labels, int64_t n, double *loss,
                 double *top1, double *top5);
/* The lr of each epoch: lr[0] = base and torch's CosineAnnealingLR(T_max = epochs, eta_min = 0)
 * recursion after each epoch: lr[e] = (1 + cos(pi e / T)) / (1 + cos(pi (e-1) / T)) lr[e-1]. */
void linear_cosine_lrs(double base, int64_t epochs, double *lr);
/* The k best classes of a row of logits, best first; ties: the lower class first. */
void linear_topk(const float *logits, int C, int k, int32_t *best);

/* ---- augmented training images (linear_aug.c) ------------------------------------------------ */

/* What one epoch's crops depend on (the features_prep image hook's context). */
struct linear_aug {
  uint64_t seed;
  int64_t epoch;
};

/* aug: a copy of prep whose images are eval_linear's training transform for aug's epoch (the
 * caller keeps ctx alive and does not free aug: it shares prep's taps): the min-max scaled image,
 * RandomResizedCrop (scale 0.08 to 1, ratio 3/4 to 4/3, torchvision's get_params drawn from
 * rng_init(seed, RNG_DOMAIN_LINEAR, 1 + epoch, sample)) resized bilinearly in float64 to
 * size x size, a horizontal flip when the next draw is below 0.5, then the mean/std of prep. */
void linear_aug_prep(struct features_prep *aug, const struct features_prep *prep, int size,
                     const struct linear_aug *ctx);

/* ---- the report (linear_report.c) ------------------------------------------------------------ */

#define LINEAR_FORMAT "scdino-linear"
#define LINEAR_TXT_FIRST "Linear probe" /* how linear.txt begins */
#define LINEAR_TOPK 5

struct linear_report {
  /* the run */
  char checkpoint[4096], checkpoint_key[16], train_set[4200], eval_set[4200];
  int64_t ckpt_epoch;
  int n_last_blocks, avgpool, embed_dim, depth, F;
  int64_t epochs, batch_size, seed;
  double lr, lr_scaled, momentum, weight_decay;
  int augment;
  /* classes: the training set's C first (the layer's outputs), then the evaluation set's own */
  int C, nclasses;
  char **class_names;
  /* rows */
  int64_t n_train, n_eval;
  int32_t *train_label;    /* [n_train] */
  int64_t *eval_index;     /* [n_eval] sample indices in the evaluation shard set */
  char **eval_paths;       /* [n_eval] */
  int32_t *eval_label;     /* [n_eval], classes of the report */
  /* per epoch */
  double *lrs, *train_loss, *eval_loss, *top1, *top5; /* [epochs]; top1/top5 in percent */
  /* the final layer and its evaluation */
  const float *w, *b, *w_init;
  float *logits;           /* [n_eval][C] */
  int k;                   /* min(5, C) */
  int32_t *topk;           /* [n_eval][k] */
  int64_t *confusion;      /* [nclasses][nclasses]: [true][predicted] */
  int64_t *train_support, *eval_support; /* [nclasses] */
  double *precision, *recall, *f1;      /* [nclasses], in [0, 1] */
  double final_top1, final_top5, final_loss, balanced_accuracy, macro_f1, best_top1;
  int64_t best_epoch;
  /* save_inputs: the rows trained on and evaluated, each epoch's order (NULL: not written) */
  const float *train_x, *eval_x;
  const int64_t *order;    /* [epochs][n_train] positions of the training rows */
};

/* Evaluate the final layer on x [n_eval][F]: logits, top-k, the confusion matrix and the metrics
 * (sklearn's definitions, as knn.h: precision TP / predicted, recall TP / support, F1
 * 2TP / (2TP + FP + FN), 0 where undefined; balanced accuracy: mean recall over classes with rows;
 * macro F1 over classes in the truth or the predictions). */
void linear_report_evaluate(struct linear_report *r, struct linear_model *m, const float *x);
/* Rank 0, before any work: linear.txt and linear.h5 in run_dir may be written (core/fsutil.h). */
void linear_report_claim(const char *run_dir);
/* Rank 0: run_dir/linear.txt and linear.h5 (atomic); the text summary also to stdout. */
void linear_report_write(const struct linear_report *r, const char *run_dir);
void linear_report_free(struct linear_report *r);

#endif
