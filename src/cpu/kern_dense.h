/* kern_dense.h - template of the dense CPU kernels: Linear, patches, tokens, LayerNorm, GELU, residual.
 *
 * Included (no include guard) by kern_f32.c and kern_f64.c with R (element type), KN(name)
 * (suffixing), KGEMM (cblas_sgemm / cblas_dgemm), KEXP, KERF and KSQRT defined.  Reductions
 * accumulate in double whatever R is.  Loops that reduce over rows (bias and LayerNorm parameter
 * gradients, token sums) are parallel over column blocks, so their results do not depend on the
 * thread count. */

#define KCOLBLK 64 /* columns per thread-block in column reductions */

/* out[c] += sum_r a[r*lda + c], c < cols. */
static void colsum_add(R *out, const R *a, int rows, int cols, size_t lda) {
  const int nblk = (cols + KCOLBLK - 1) / KCOLBLK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    const int c0 = blk * KCOLBLK, c1 = c0 + KCOLBLK < cols ? c0 + KCOLBLK : cols;
    double acc[KCOLBLK] = {0};
    for (int r = 0; r < rows; r++) {
      const R *row = a + (size_t)r * lda;
      for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
    }
    for (int c = c0; c < c1; c++) out[c] += (R)acc[c - c0];
  }
}

/* The GEMMs run as tiles of the output shared out over the OpenMP team, each one single-threaded
 * BLAS call that sums the whole reduction dimension.  A tile's shape comes from the matrix sizes
 * alone, and BLAS computes an element from its call's shape and data alone, so the result is the
 * same for any thread count (a requeue onto nodes with other core counts continues bit for bit).
 * One thread pool serves everything: BLAS's own never competes with OpenMP's. */
#define KTILE_ROWS 640  /* about the rows a single-threaded OpenBLAS call needs to reach its speed */
#define KTILE_COLS 4096 /* wider outputs (the DINO head's K) are cut into columns of this width */
#define KTILE_GROUP 4   /* tile counts are multiples of this where the sizes allow: equal shares */
#define KTILE_MIN 64    /* the smallest tile side a cut makes */

static inline int tile_cdiv(int a, int b) { return (a + b - 1) / b; }

/* Tile height *hm and width *hn for an M x N output (multiples of 16, BLAS's panel width, where
 * cut). */
static inline void tile_plan(int M, int N, int *hm, int *hn) {
  int tm = tile_cdiv(M, KTILE_ROWS), tn = tile_cdiv(N, KTILE_COLS);
  const int maxm = M / KTILE_MIN > 1 ? M / KTILE_MIN : 1, maxn = N / KTILE_MIN > 1 ? N / KTILE_MIN : 1;
  const int want = tile_cdiv(tm * tn, KTILE_GROUP) * KTILE_GROUP;
  tm = tile_cdiv(want, tn) < maxm ? tile_cdiv(want, tn) : maxm; /* more row tiles first */
  if (tm * tn < want) tn = tile_cdiv(want, tm) < maxn ? tile_cdiv(want, tm) : maxn;
  *hm = tm > 1 ? (tile_cdiv(M, tm) + 15) / 16 * 16 : M;
  *hn = tn > 1 ? (tile_cdiv(N, tn) + 15) / 16 * 16 : N;
}

/* C[M x N] = alpha op(A) op(B) + beta C, row-major; op(A) is M x K (A stored K x M when ta), op(B)
 * K x N (B stored N x K when tb).  Called inside a parallel region (every thread calls it). */
static void gemm_tiles(int ta, int tb, int M, int N, int K, R alpha, const R *A, int lda, const R *B,
                       int ldb, R beta, R *C, int ldc) {
  int hm, hn;
  tile_plan(M, N, &hm, &hn);
  const int tm = tile_cdiv(M, hm), tn = tile_cdiv(N, hn);
#pragma omp for schedule(dynamic, 1)
  for (int t = 0; t < tm * tn; t++) {
    const int m0 = t / tn * hm, n0 = t % tn * hn;
    const int mb = M - m0 < hm ? M - m0 : hm, nb = N - n0 < hn ? N - n0 : hn;
    const R *a = ta ? A + m0 : A + (size_t)m0 * lda;
    const R *b = tb ? B + (size_t)n0 * ldb : B + n0;
    KGEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, mb, nb, K,
          alpha, a, lda, b, ldb, beta, C + (size_t)m0 * ldc + n0, ldc);
  }
}

void KN(kern_linear_fwd)(R *y, const R *x, const R *w, const R *b, int M, int N, int K) {
  if (M <= 0) return;
  if (b) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) memcpy(y + (size_t)r * N, b, (size_t)N * sizeof(R));
  }
  const int saved = cpu_blas_serial_begin();
#pragma omp parallel
  gemm_tiles(0, 1, M, N, K, 1, x, K, w, K, b ? 1 : 0, y, N); /* y = x w^T (+ b) */
  cpu_blas_serial_end(saved);
}

void KN(kern_linear_bwd)(R *dx, R *dw, R *db, const R *dy, const R *x, const R *w, int M, int N,
                         int K) {
  if (M <= 0) return;
  const int saved = cpu_blas_serial_begin();
#pragma omp parallel
  {
    if (dx) gemm_tiles(0, 0, M, K, N, 1, dy, N, w, K, 0, dx, K); /* dx = dy w */
    if (dw) gemm_tiles(1, 0, N, K, M, 1, dy, N, x, K, 1, dw, K); /* dw += dy^T x */
  }
  cpu_blas_serial_end(saved);
  if (db) colsum_add(db, dy, M, N, (size_t)N);
}

void KN(kern_matmul)(R *c, const R *a, const R *b, int M, int N, int K, int ta, int tb, R beta) {
  if (M <= 0 || N <= 0) return;
  const int saved = cpu_blas_serial_begin();
#pragma omp parallel
  gemm_tiles(ta, tb, M, N, K, 1, a, ta ? M : K, b, tb ? K : N, beta, c, N);
  cpu_blas_serial_end(saved);
}

void KN(kern_patchify)(R *cols, const R *img, int B, int C, int H, int W, int p) {
  const int gh = H / p, gw = W / p;
  const size_t np = (size_t)gh * gw, rowlen = (size_t)C * p * p, nrows = (size_t)B * np;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < nrows; r++) {
    const size_t b = r / np, i = r % np;
    const int gy = (int)(i / gw), gx = (int)(i % gw);
    R *dst = cols + r * rowlen;
    for (int c = 0; c < C; c++)
      for (int ky = 0; ky < p; ky++) {
        const R *src = img + (((b * C + c) * H + (size_t)gy * p + ky) * W + (size_t)gx * p);
        memcpy(dst, src, (size_t)p * sizeof(R));
        dst += p;
      }
  }
}

void KN(kern_tokens_fwd)(R *x, const R *patches, const R *cls, const R *pos, int B, int Np, int D) {
  const size_t N = (size_t)Np + 1, nrows = (size_t)B * N;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < nrows; r++) {
    const size_t b = r / N, j = r % N;
    const R *src = j == 0 ? cls : patches + (b * Np + j - 1) * D;
    const R *pr = pos + j * D;
    R *xr = x + r * D;
    for (int d = 0; d < D; d++) xr[d] = src[d] + pr[d];
  }
}

void KN(kern_tokens_bwd)(R *dpatches, R *dcls, R *dpos, const R *dx, int B, int Np, int D) {
  const size_t N = (size_t)Np + 1;
  if (dpatches) {
    const size_t nrows = (size_t)B * Np;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < nrows; r++) {
      const size_t b = r / Np, i = r % Np;
      memcpy(dpatches + r * D, dx + (b * N + 1 + i) * D, (size_t)D * sizeof(R));
    }
  }
  /* Position j's gradient is the sum over samples of token j's gradient (token 0 also feeds cls). */
  const int nblk = (D + KCOLBLK - 1) / KCOLBLK;
  const long njobs = (long)N * nblk;
#pragma omp parallel for schedule(static)
  for (long job = 0; job < njobs; job++) {
    const size_t j = (size_t)(job / nblk);
    const int c0 = (int)(job % nblk) * KCOLBLK, c1 = c0 + KCOLBLK < D ? c0 + KCOLBLK : D;
    double acc[KCOLBLK] = {0};
    for (int b = 0; b < B; b++) {
      const R *row = dx + ((size_t)b * N + j) * D;
      for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
    }
    for (int c = c0; c < c1; c++) {
      dpos[j * D + c] += (R)acc[c - c0];
      if (j == 0) dcls[c] += (R)acc[c - c0];
    }
  }
}

/* LayerNorm of one row; the fused residual calls it too, so both give the same bits. */
static inline void ln_fwd_row(R *yr, R *mean, R *rstd, const R *xr, const R *g, const R *b, int D,
                              double eps) {
  double s = 0, ss = 0;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < D; d++) s += xr[d];
  const double mu = s / D;
#pragma omp simd reduction(+ : ss)
  for (int d = 0; d < D; d++) {
    const double t = xr[d] - mu;
    ss += t * t;
  }
  const double rs = 1.0 / sqrt(ss / D + eps);
  for (int d = 0; d < D; d++) yr[d] = (R)((xr[d] - mu) * rs) * g[d] + b[d];
  if (mean) *mean = (R)mu;
  if (rstd) *rstd = (R)rs;
}

void KN(kern_layernorm_fwd)(R *y, R *mean, R *rstd, const R *x, int ldx, const R *g, const R *b,
                            int rows, int D, double eps) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++)
    ln_fwd_row(y + (size_t)r * D, mean ? mean + r : NULL, rstd ? rstd + r : NULL,
               x + (size_t)r * ldx, g, b, D, eps);
}

/* ln NULL: the residual alone (kern_residual_fwd), so both give the same sums. */
void KN(kern_residual_layernorm_fwd)(R *y, R *ln, R *mean, R *rstd, const R *x, const R *f,
                                     const R *s, const R *g, const R *b, int B, int rps, int D,
                                     double eps) {
  const size_t nrows = (size_t)B * rps;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < nrows; r++) {
    const R sb = s ? s[r / rps] : (R)1;
    const size_t o = r * D;
    for (int d = 0; d < D; d++) y[o + d] = x[o + d] + sb * f[o + d];
    if (ln) ln_fwd_row(ln + o, mean ? mean + r : NULL, rstd ? rstd + r : NULL, y + o, g, b, D, eps);
  }
}

/* dx += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * g, for one row. */
static inline void ln_bwd_row(R *dxr, const R *dyr, const R *xr, double mu, double rs, const R *g,
                              int D) {
  double a = 0, c = 0;
#pragma omp simd reduction(+ : a, c)
  for (int d = 0; d < D; d++) {
    const double dxh = (double)dyr[d] * g[d];
    a += dxh;
    c += dxh * (xr[d] - mu) * rs;
  }
  a /= D;
  c /= D;
  for (int d = 0; d < D; d++) {
    const double xh = (xr[d] - mu) * rs;
    dxr[d] += (R)(rs * ((double)dyr[d] * g[d] - a - xh * c));
  }
}

/* dg[D] += sum_r dy * xhat, db[D] += sum_r dy, parallel over column blocks. */
static void ln_bwd_cols(R *dg, R *db, const R *dy, const R *x, int ldx, const R *mean,
                        const R *rstd, int rows, int D) {
  const int nblk = (D + KCOLBLK - 1) / KCOLBLK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    const int c0 = blk * KCOLBLK, c1 = c0 + KCOLBLK < D ? c0 + KCOLBLK : D;
    double ag[KCOLBLK] = {0}, ab[KCOLBLK] = {0};
    for (int r = 0; r < rows; r++) {
      const R *xr = x + (size_t)r * ldx, *dyr = dy + (size_t)r * D;
      const double mu = mean[r], rs = rstd[r];
      for (int c = c0; c < c1; c++) {
        ag[c - c0] += (double)dyr[c] * ((xr[c] - mu) * rs);
        ab[c - c0] += dyr[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      if (dg) dg[c] += (R)ag[c - c0];
      if (db) db[c] += (R)ab[c - c0];
    }
  }
}

void KN(kern_layernorm_bwd)(R *dx, R *dg, R *db, const R *dy, const R *x, int ldx, const R *mean,
                            const R *rstd, const R *g, int rows, int D) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++)
    ln_bwd_row(dx + (size_t)r * ldx, dy + (size_t)r * D, x + (size_t)r * ldx, mean[r], rstd[r], g,
               D);
  ln_bwd_cols(dg, db, dy, x, ldx, mean, rstd, rows, D);
}

void KN(kern_layernorm_residual_bwd)(R *dx, R *dg, R *db, R *df, const R *s, const R *dy,
                                     const R *x, const R *mean, const R *rstd, const R *g, int B,
                                     int rps, int D) {
  const size_t nrows = (size_t)B * rps;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < nrows; r++) {
    const R sb = s ? s[r / rps] : (R)1;
    const size_t o = r * D;
    ln_bwd_row(dx + o, dy + o, x + o, mean[r], rstd[r], g, D);
    for (int d = 0; d < D; d++) df[o + d] = sb * dx[o + d];
  }
  ln_bwd_cols(dg, db, dy, x, D, mean, rstd, (int)nrows, D);
}

/* The GELU loops go over fixed blocks of KEW_BLOCK elements, vectorised within a block.  The vector
 * erf/exp/tanh (libmvec) and the scalar ones differ in the last bit, and which elements a vector
 * loop leaves to its scalar remainder depends on where its range starts: over blocks fixed by n
 * alone that is the same for any thread count, over an OpenMP team's shares it would not be. */
#define KEW_BLOCK 4096
#define KEW_FOR(n)                                                                    \
  _Pragma("omp parallel for schedule(static)") for (size_t blk = 0; blk < ((n) + KEW_BLOCK - 1) / KEW_BLOCK; blk++) \
  _Pragma("omp simd") for (size_t i = blk * KEW_BLOCK; i < ((n) < (blk + 1) * KEW_BLOCK ? (n) : (blk + 1) * KEW_BLOCK); i++)

/* GELU_TANH_C = sqrt(2/pi): the tanh approximation's argument is C (x + 0.044715 x^3). */
#define GELU_TANH_C 0.79788456080286535588
#define GELU_TANH_A 0.044715

void KN(kern_gelu_fwd)(R *y, const R *x, size_t n, int approx) {
  if (approx) {
    KEW_FOR(n) {
      const R v = x[i];
      y[i] = (R)0.5 * v * ((R)1 + KTANH((R)GELU_TANH_C * (v + (R)GELU_TANH_A * v * v * v)));
    }
    return;
  }
  KEW_FOR(n) {
    const R v = x[i];
    y[i] = v * (R)0.5 * ((R)1 + KERF(v * (R)M_SQRT1_2));
  }
}

void KN(kern_gelu_bwd)(R *dx, const R *dy, const R *x, size_t n, int approx) {
  if (approx) {
    /* d/dx of 0.5 x (1 + t), t = tanh(u), u = C (x + A x^3):
     * 0.5 (1 + t) + 0.5 x (1 - t^2) C (1 + 3 A x^2) */
    KEW_FOR(n) {
      const R v = x[i];
      const R t = KTANH((R)GELU_TANH_C * (v + (R)GELU_TANH_A * v * v * v));
      const R du = (R)GELU_TANH_C * ((R)1 + (R)(3 * GELU_TANH_A) * v * v);
      dx[i] = dy[i] * ((R)0.5 * ((R)1 + t) + (R)0.5 * v * ((R)1 - t * t) * du);
    }
    return;
  }
  /* gelu'(x) = Phi(x) + x phi(x), Phi/phi the standard normal CDF/density. */
  const R inv_sqrt_2pi = (R)0.39894228040143267794;
  KEW_FOR(n) {
    const R v = x[i];
    const R cdf = (R)0.5 * ((R)1 + KERF(v * (R)M_SQRT1_2));
    const R pdf = inv_sqrt_2pi * KEXP((R)-0.5 * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

void KN(kern_gelu_bwd_bias)(R *dx, R *db, const R *dy, const R *x, int rows, int cols, int approx) {
  KN(kern_gelu_bwd)(dx, dy, x, (size_t)rows * cols, approx);
  colsum_add(db, dx, rows, cols, (size_t)cols); /* as kern_linear_bwd's db */
}

void KN(kern_residual_fwd)(R *y, const R *x, const R *f, const R *s, int B, int rps, int D) {
  KN(kern_residual_layernorm_fwd)(y, NULL, NULL, NULL, x, f, s, NULL, NULL, B, rps, D, 0.0);
}

void KN(kern_residual_bwd)(R *df, const R *dy, const R *s, int B, int rps, int D) {
  const size_t nrows = (size_t)B * rps;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < nrows; r++) {
    const R sb = s ? s[r / rps] : (R)1;
    const size_t o = r * D;
    for (int d = 0; d < D; d++) df[o + d] = sb * dy[o + d];
  }
}
