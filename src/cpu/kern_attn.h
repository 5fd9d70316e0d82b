/* kern_attn.h - template of the CPU multi-head attention kernels (forward and backward).
 *
 * Included by kern_f32.c / kern_f64.c (see kern_dense.h for the macros).  One (sample, head) pair
 * per OpenMP iteration; each runs its small GEMMs through BLAS directly on the strided q, k, v
 * slices of the qkv activation (row stride 3D), with the BLAS library held to one thread meanwhile,
 * so there is no gather/scatter of heads. */

/* Row-wise softmax of an n x n matrix in place (separate max, exp and sum loops, so the exp loop
 * vectorises). */
static void softmax_rows(R *S, int n) {
  for (int i = 0; i < n; i++) {
    R *row = S + (size_t)i * n;
    R mx = row[0];
    for (int j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] = KEXP(row[j] - mx);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) sum += row[j];
    const double inv = 1.0 / sum;
#pragma omp simd
    for (int j = 0; j < n; j++) row[j] = (R)(row[j] * inv);
  }
}

void KN(kern_attn_fwd)(R *out, R *P, const R *qkv, int B, int N, int H, int hd, R scale) {
  const size_t D = (size_t)H * hd, ld = 3 * D, nn = (size_t)N * N;
  const int nbh = B * H;
  const int saved = cpu_blas_serial_begin();
#pragma omp parallel
  {
    /* Without a state buffer (inference) each thread works in its own N x N scratch. */
    R *scratch = P ? NULL : (R *)cpu_scratch(0, nn * sizeof(R));
#pragma omp for schedule(static)
    for (int bh = 0; bh < nbh; bh++) {
      const int b = bh / H, h = bh % H;
      const R *q = qkv + (size_t)b * N * ld + (size_t)h * hd, *k = q + D, *v = q + 2 * D;
      R *S = P ? P + (size_t)bh * nn : scratch;
      KGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, hd, scale, q, (int)ld, k, (int)ld, 0, S,
            N);
      softmax_rows(S, N);
      KGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, hd, N, 1, S, N, v, (int)ld, 0,
            out + (size_t)b * N * D + (size_t)h * hd, (int)D);
    }
  }
  cpu_blas_serial_end(saved);
}

void KN(kern_attn_bwd)(R *dqkv, const R *dout, const R *qkv, const R *P, int B, int N, int H, int hd,
                       R scale) {
  const size_t D = (size_t)H * hd, ld = 3 * D, nn = (size_t)N * N;
  const int nbh = B * H;
  const int saved = cpu_blas_serial_begin();
#pragma omp parallel
  {
    R *dP = (R *)cpu_scratch(0, nn * sizeof(R));
#pragma omp for schedule(static)
    for (int bh = 0; bh < nbh; bh++) {
      const int b = bh / H, h = bh % H;
      const size_t base = (size_t)b * N * ld + (size_t)h * hd;
      const R *q = qkv + base, *k = q + D, *v = q + 2 * D;
      R *dq = dqkv + base, *dk = dq + D, *dv = dq + 2 * D;
      const R *dO = dout + (size_t)b * N * D + (size_t)h * hd;
      const R *Pb = P + (size_t)bh * nn;
      /* dP = dO V^T, dV = P^T dO */
      KGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, hd, 1, dO, (int)D, v, (int)ld, 0, dP, N);
      KGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, N, hd, N, 1, Pb, N, dO, (int)D, 0, dv, (int)ld);
      /* Softmax backward in place: dS = P * (dP - rowsum(P * dP)). */
      for (int i = 0; i < N; i++) {
        const R *pr = Pb + (size_t)i * N;
        R *dr = dP + (size_t)i * N;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < N; j++) dot += (double)pr[j] * dr[j];
#pragma omp simd
        for (int j = 0; j < N; j++) dr[j] = (R)(pr[j] * (dr[j] - dot));
      }
      /* dQ = scale dS K, dK = scale dS^T Q */
      KGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, hd, N, scale, dP, N, k, (int)ld, 0, dq,
            (int)ld);
      KGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, N, hd, N, scale, dP, N, q, (int)ld, 0, dk,
            (int)ld);
    }
  }
  cpu_blas_serial_end(saved);
}
