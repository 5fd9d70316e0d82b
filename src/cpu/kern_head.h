/* kern_head.h - template of the CPU head and loss kernels: L2 normalisation, weight norm, DINO loss
 * and its teacher-target statistics.
 *
 * Included by kern_f32.c / kern_f64.c (see kern_dense.h for the macros). */

#define KL2_EPS 1e-12 /* F.normalize's eps */

void KN(kern_l2norm_fwd)(R *y, R *norm, const R *x, int rows, int D) {
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const R *xr = x + (size_t)r * D;
    R *yr = y + (size_t)r * D;
    double ss = 0;
    for (int d = 0; d < D; d++) ss += (double)xr[d] * xr[d];
    const R n = (R)sqrt(ss);
    const R den = n > (R)KL2_EPS ? n : (R)KL2_EPS;
    for (int d = 0; d < D; d++) yr[d] = xr[d] / den;
    norm[r] = n;
  }
}

void KN(kern_l2norm_bwd)(R *dx, const R *dy, const R *y, const R *norm, int rows, int D) {
  /* Above the clamp: dx = (dy - y (y.dy)) / |x|; at the clamp the map is x / eps. */
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const R *yr = y + (size_t)r * D, *dyr = dy + (size_t)r * D;
    R *dxr = dx + (size_t)r * D;
    const double n = norm[r];
    if (n > KL2_EPS) {
      double dot = 0;
      for (int d = 0; d < D; d++) dot += (double)yr[d] * dyr[d];
      for (int d = 0; d < D; d++) dxr[d] = (R)((dyr[d] - yr[d] * dot) / n);
    } else {
      for (int d = 0; d < D; d++) dxr[d] = (R)(dyr[d] / KL2_EPS);
    }
  }
}

void KN(kern_weightnorm_fwd)(R *w, R *vnorm, const R *g, const R *v, int K, int D) {
#pragma omp parallel for schedule(static)
  for (int k = 0; k < K; k++) {
    const R *vr = v + (size_t)k * D;
    double ss = 0;
    for (int d = 0; d < D; d++) ss += (double)vr[d] * vr[d];
    const R n = (R)sqrt(ss);
    const R f = g[k] / n; /* torch: v * (g / ||v||) */
    R *wr = w + (size_t)k * D;
    for (int d = 0; d < D; d++) wr[d] = vr[d] * f;
    vnorm[k] = n;
  }
}

void KN(kern_weightnorm_bwd)(R *dg, R *dv, const R *dw, const R *g, const R *v, const R *vnorm,
                             int K, int D) {
#pragma omp parallel for schedule(static)
  for (int k = 0; k < K; k++) {
    const R *vr = v + (size_t)k * D, *dwr = dw + (size_t)k * D;
    R *dvr = dv + (size_t)k * D;
    const double n = vnorm[k];
    double dot = 0;
    for (int d = 0; d < D; d++) dot += (double)vr[d] * dwr[d];
    if (dg) dg[k] += (R)(dot / n);
    const double f = g[k] / n, c = dot / (n * n);
    for (int d = 0; d < D; d++) dvr[d] += (R)(f * (dwr[d] - vr[d] * c));
  }
}

void KN(kern_dino_loss)(R *loss, R *ds, R *tsum, const R *s, const R *t, const R *center, int B,
                        int ns, int nt, int K, R student_temp, R teacher_temp) {
  const size_t trows = (size_t)nt * B, srows = (size_t)ns * B;
  R *q = (R *)cpu_scratch(0, MUL_SIZE(trows * sizeof(R), (size_t)K));
  double *qsum = (double *)cpu_scratch(1, trows * sizeof(double));
  double *rowloss = (double *)cpu_scratch(2, srows * sizeof(double));
  const int npairs = nt * ns - (nt < ns ? nt : ns);

  /* Teacher targets Q = softmax((t - center) / T_t). */
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < trows; r++) {
    const R *tr = t + r * K;
    R *qr = q + r * K;
    R mx = (tr[0] - center[0]) / teacher_temp;
    for (int k = 0; k < K; k++) {
      qr[k] = (tr[k] - center[k]) / teacher_temp;
      if (qr[k] > mx) mx = qr[k];
    }
    double sum = 0;
    for (int k = 0; k < K; k++) {
      qr[k] = KEXP(qr[k] - mx);
      sum += qr[k];
    }
    double qs = 0;
    for (int k = 0; k < K; k++) {
      qr[k] = (R)(qr[k] / sum);
      qs += qr[k];
    }
    qsum[r] = qs;
  }

  /* Per student row (crop v, sample b): the cross-entropy terms against every teacher crop i != v
   * and their gradient (1/(n B T_s)) sum_i (softmax(s_v/T_s) sum_k Q_i - Q_i). */
  const double coef = 1.0 / ((double)npairs * B * (double)student_temp);
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < srows; r++) {
    const int v = (int)(r / B), b = (int)(r % B);
    const R *sr = s + r * K;
    R *dr = ds ? ds + r * K : NULL;
    R mx = sr[0] / student_temp;
    for (int k = 1; k < K; k++) {
      const R z = sr[k] / student_temp;
      if (z > mx) mx = z;
    }
    double se = 0;
    for (int k = 0; k < K; k++) {
      const R e = KEXP(sr[k] / student_temp - mx);
      se += e;
      if (dr) dr[k] = e; /* kept for the gradient */
    }
    const double lse = mx + log(se);
    double l = 0, wsum = 0;
    for (int i = 0; i < nt; i++) {
      if (i == v) continue;
      const R *qr = q + ((size_t)i * B + b) * K;
      double acc = 0;
      for (int k = 0; k < K; k++) acc += (double)qr[k] * ((double)(sr[k] / student_temp) - lse);
      l -= acc;
      wsum += qsum[(size_t)i * B + b];
    }
    rowloss[r] = l;
    if (dr) {
      const double pscale = wsum / se;
      for (int k = 0; k < K; k++) {
        double gk = pscale * dr[k];
        for (int i = 0; i < nt; i++)
          if (i != v) gk -= q[((size_t)i * B + b) * K + k];
        dr[k] = (R)(coef * gk);
      }
    }
  }
  double total = 0;
  for (size_t r = 0; r < srows; r++) total += rowloss[r];
  loss[0] = (R)(total / ((double)npairs * B));

  const int nblk = (K + KCOLBLK - 1) / KCOLBLK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblk; blk++) {
    const int c0 = blk * KCOLBLK, c1 = c0 + KCOLBLK < K ? c0 + KCOLBLK : K;
    double acc[KCOLBLK] = {0};
    for (size_t r = 0; r < trows; r++)
      for (int c = c0; c < c1; c++) acc[c - c0] += t[r * K + c];
    for (int c = c0; c < c1; c++) tsum[c] = (R)acc[c - c0];
  }
}

/* The teacher targets Q formed as in kern_dino_loss (the same bits), then each row's entropy from
 * log Q = z - max - log(sum) (exact where Q underflows to 0), and the column sums of Q. */
void KN(kern_dino_stats)(R *stats, const R *t, const R *center, int rows, int K, R teacher_temp) {
  R *q = (R *)cpu_scratch(0, MUL_SIZE((size_t)rows * sizeof(R), (size_t)K));
  double *ent = (double *)cpu_scratch(1, (size_t)rows * sizeof(double));
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const R *tr = t + (size_t)r * K;
    R *qr = q + (size_t)r * K;
    R mx = (tr[0] - center[0]) / teacher_temp;
    for (int k = 0; k < K; k++) {
      qr[k] = (tr[k] - center[k]) / teacher_temp;
      if (qr[k] > mx) mx = qr[k];
    }
    double sum = 0;
    for (int k = 0; k < K; k++) sum += KEXP(qr[k] - mx);
    const double lsum = log(sum);
    double h = 0;
    for (int k = 0; k < K; k++) {
      const R z = qr[k] - mx, e = KEXP(z);
      qr[k] = (R)(e / sum);
      h -= (double)qr[k] * ((double)z - lsum);
    }
    ent[r] = h;
  }
  double h = 0;
  for (int r = 0; r < rows; r++) h += ent[r];
  stats[K] = (R)h;
  for (int k = 0; k < K; k++) stats[k] = 0;
  colsum_add(stats, q, rows, K, (size_t)K);
}
