/* gelu_gemm.cu - which GELU cuBLASLt's GELU epilogues compute, and whether the model's GELU can run
 * inside its GEMMs.
 *
 * NVIDIA's header says only "GELU" for CUBLASLT_EPILOGUE_GELU* and DGELU.  llm.c and Transformer
 * Engine assume the tanh approximation; DINO's nn.GELU() is the exact erf form, and the two differ
 * by at most 4.7e-4 (derivative: 8.7e-4), below bf16's rounding but not nothing.  So the library is
 * asked, once per activation type, with a probe: a GEMM whose products are exact (one nonzero term
 * each, values multiples of 1/32, bias included) through GELU_AUX_BIAS and DGELU, its outputs
 * compared on the host in double with both functions.  fp32 results tell the functions apart; bf16
 * results are checked against the function fp32 found, to bf16's rounding.  A GELU is fused only
 * where the library is at least four times closer to it than to the other one (an approximate
 * tanh in the library still passes; a third function, or a wrong bias or aux matrix, does not) and
 * the model asks for that GELU; otherwise GELU stays a kernel of its own, said once in the log. */
#include "build_config.h"

#include <math.h>
#include <string.h>

#include <vector>

#include "cuda/backend_cuda.h"
#include "cuda/ops/cuda_internal.h"

extern "C" {
#include "core/log.h"
}

enum { KIND_UNPROBED = -3, KIND_DECLINED = -2, KIND_NEITHER = -1, KIND_EXACT = 0, KIND_TANH = 1 };

static int use_epilogue = 1;                               /* &gpu gelu */
static int kind[3] = {KIND_UNPROBED, KIND_UNPROBED, KIND_UNPROBED}; /* [ACT_*] */
static long fused;

static double gelu_ref(double x, int tanh_form) {
  if (tanh_form) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}
static double gelu_grad_ref(double x, int tanh_form) {
  if (tanh_form) {
    const double c = sqrt(2 / M_PI), t = tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
  }
  return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}

/* The probe's sizes: m output rows (features; the aux leading dimension, a multiple of 8), n
 * points, k = 8 with one nonzero term. */
enum { PM = 16, PN = 64, PK = 8 };

static float to_host(const void *p, size_t i, int act) {
  if (act == ACT_F32) return ((const float *)p)[i];
  if (act == ACT_F16) return __half2float(((const f16 *)p)[i]);
  uint16_t u;
  memcpy(&u, (const char *)p + 2 * i, 2);
  const uint32_t w = (uint32_t)u << 16;
  float f;
  memcpy(&f, &w, 4);
  return f;
}
static void from_host(void *p, size_t i, float v, int act) {
  if (act == ACT_F32) {
    ((float *)p)[i] = v;
    return;
  }
  if (act == ACT_F16) {
    ((f16 *)p)[i] = __float2half_rn(v); /* exact: the probe's values are multiples of 1/32 */
    return;
  }
  uint32_t w;
  memcpy(&w, &v, 4);
  const uint16_t u = (uint16_t)(w >> 16); /* the probe's values are exact in bf16 */
  memcpy((char *)p + 2 * i, &u, 2);
}

/* Runs the probe for one type; returns the kind and writes the deviations (forward and derivative
 * from the tanh and the exact form) into dev[4]. */
static int probe(int act, double dev[4]) {
  const int bf = act; /* the type's code, for to_host and from_host */
  const size_t es = act == ACT_F32 ? 4 : 2;
  const cudaDataType_t dt = act == ACT_F32 ? CUDA_R_32F : act == ACT_F16 ? CUDA_R_16F : CUDA_R_16BF;
  /* one device block: A [PM x PK], B [PK x PN], bias [PM], D, aux [PM x PN], each 256-aligned */
  const size_t na = PM * PK, nb = PK * PN, nd = PM * PN, slot = 256;
  const size_t off_b = (na * es + slot - 1) / slot * slot;
  const size_t off_bias = off_b + (nb * es + slot - 1) / slot * slot;
  const size_t off_d = off_bias + slot;
  const size_t off_aux = off_d + (nd * es + slot - 1) / slot * slot;
  const size_t total = off_aux + (nd * es + slot - 1) / slot * slot;
  std::vector<char> h(total, 0);
  char *A = h.data(), *B = A + off_b, *bias = A + off_bias;
  for (int i = 0; i < PM; i++) from_host(A, i, 1.0f, bf); /* column 0 of A: ones */
  for (int j = 0; j < PN; j++) from_host(B, (size_t)j * PK, -4.0f + 0.125f * j, bf);
  for (int i = 0; i < PM; i++) from_host(bias, i, (float)(i - 8) / 32.0f, bf);
  char *d = (char *)cu_dev_alloc(total, "GELU epilogue probe");
  CHECK_CUDA(cudaMemcpyAsync(d, h.data(), total, cudaMemcpyHostToDevice, cu.stream));
  /* D [PM x PN] = A B + bias through GELU, the input kept in aux */
  int ok = lt_matmul_gelu(0, 0, PM, PN, PK, d, dt, PM, d + off_b, dt, PK, d + off_d, dt, PM,
                          d + off_bias, d + off_aux);
  std::vector<char> fwd(total);
  if (ok) {
    CHECK_CUDA(cudaMemcpyAsync(fwd.data(), d, total, cudaMemcpyDeviceToHost, cu.stream));
    /* the derivative at aux times B's row 0, here 1 or 2 */
    for (int j = 0; j < PN; j++) from_host(B, (size_t)j * PK, 1.0f + (float)(j % 2), bf);
    CHECK_CUDA(cudaMemcpyAsync(d + off_b, B, nb * es, cudaMemcpyHostToDevice, cu.stream));
    ok = lt_matmul_dgelu(0, 0, PM, PN, PK, d, dt, PM, d + off_b, dt, PK, d + off_d, dt, PM,
                         d + off_aux);
  }
  std::vector<char> bwd(total);
  if (ok) CHECK_CUDA(cudaMemcpyAsync(bwd.data(), d, total, cudaMemcpyDeviceToHost, cu.stream));
  CHECK_CUDA(cudaStreamSynchronize(cu.stream));
  cu_dev_free(d);
  if (!ok) return KIND_DECLINED;

  /* deviations from either form, and whether the stored input and the bf16 values are sound */
  double e[2][2] = {{0, 0}, {0, 0}}; /* [fwd|bwd][exact|tanh] */
  int aux_ok = 1;
  for (int j = 0; j < PN; j++)
    for (int i = 0; i < PM; i++) {
      const size_t o = (size_t)j * PM + i;
      const double x = -4.0 + 0.125 * j + (i - 8) / 32.0; /* exact in either type */
      if ((double)to_host(fwd.data() + off_aux, o, bf) != x) aux_ok = 0;
      const double y = to_host(fwd.data() + off_d, o, bf);
      const double g = to_host(bwd.data() + off_d, o, bf) / (1.0 + (j % 2));
      for (int f = 0; f < 2; f++) {
        e[0][f] = fmax(e[0][f], fabs(y - gelu_ref(x, f)));
        e[1][f] = fmax(e[1][f], fabs(g - gelu_grad_ref(x, f)));
        if (!(y == y) || !(g == g)) e[0][f] = e[1][f] = INFINITY;
      }
    }
  dev[0] = e[0][1], dev[1] = e[0][0], dev[2] = e[1][1], dev[3] = e[1][0];
  if (!aux_ok) return KIND_NEITHER;
  if (act != ACT_F32) {
    /* bf16 cannot tell the forms apart: its values must be those of the form fp32 found, to
     * bf16's rounding (2^-8 relative, the forms' difference and the derivative's rounding); f16
     * is held to the same bound (its rounding, 2^-11, is finer; the forms differ by 4.7e-4) */
    const int f = kind[0];
    if (f < 0) return KIND_NEITHER;
    int good = 1;
    for (int j = 0; j < PN; j++)
      for (int i = 0; i < PM; i++) {
        const size_t o = (size_t)j * PM + i;
        const double x = -4.0 + 0.125 * j + (i - 8) / 32.0;
        const double y = to_host(fwd.data() + off_d, o, bf);
        const double g = to_host(bwd.data() + off_d, o, bf) / (1.0 + (j % 2));
        const double ry = gelu_ref(x, f), rg = gelu_grad_ref(x, f);
        if (!(fabs(y - ry) <= fabs(ry) / 128 + 1e-3) || !(fabs(g - rg) <= fabs(rg) / 128 + 2e-3))
          good = 0;
      }
    return good ? f : KIND_NEITHER;
  }
  for (int f = 0; f < 2; f++) {
    const int o = 1 - f; /* the other form */
    if (e[0][f] <= 0.25 * e[0][o] && e[1][f] <= 0.25 * e[1][o] && e[0][f] <= 2e-4 && e[1][f] <= 4e-4)
      return f ? KIND_TANH : KIND_EXACT;
  }
  return KIND_NEITHER;
}

static const char *kind_name(int k) {
  switch (k) {
  case KIND_TANH: return "tanh";
  case KIND_EXACT: return "none";
  case KIND_NEITHER: return "neither";
  case KIND_DECLINED: return "declined";
  default: return "unprobed";
  }
}

static int kind_of(int act) {
  const int bf = act;
  if (kind[bf] != KIND_UNPROBED) return kind[bf];
  if (bf && kind[0] == KIND_UNPROBED) kind_of(0); /* bf16 and f16 are judged by fp32's answer */
  double dev[4] = {0, 0, 0, 0};
  kind[bf] = probe(bf, dev);
  const char *t = bf == ACT_F16 ? "f16" : bf ? "bf16" : "fp32";
  switch (kind[bf]) {
  case KIND_DECLINED:
    log_info("cuBLASLt has no GELU epilogue for the %s probe; GELU runs as a kernel of its own", t);
    break;
  case KIND_NEITHER:
    log_warn("cuBLASLt's GELU epilogue (%s probe) computes neither GELU (deviation from the tanh "
             "form %.3g, from the exact form %.3g; derivative %.3g and %.3g), or misplaces the "
             "bias or its input; GELU runs as a kernel of its own", t, dev[0], dev[1], dev[2],
             dev[3]);
    break;
  default:
    log_detail("cuBLASLt's GELU epilogue (%s probe) computes GELU with approximate='%s' (deviation "
               "from the tanh form %.3g, from the exact form %.3g; derivative %.3g and %.3g)", t,
               kind_name(kind[bf]), dev[0], dev[1], dev[2], dev[3]);
  }
  return kind[bf];
}

int cu_gelu_in_gemm(int approx, int act) {
  if (!use_epilogue) return 0;
  const int k = kind_of(act);
  static int said[3];
  if (k >= 0 && k != approx && !said[act]++)
    log_info("GELU with approximate='%s' runs as a kernel of its own: cuBLASLt's GELU epilogue "
             "computes approximate='%s'", approx ? "tanh" : "none", kind_name(k));
  return k == approx;
}

void cu_gelu_count(void) { fused++; }

extern "C" void backend_cuda_set_gelu(const char *how) {
  if (strcmp(how, "epilogue") && strcmp(how, "kernel"))
    scd_fatal(SCD_EXIT_INPUT, "GELU path '%s': expected 'epilogue' or 'kernel'", how);
  use_epilogue = !strcmp(how, "epilogue");
  /* probe again (tests change what the stand-in computes) */
  kind[0] = kind[1] = kind[2] = KIND_UNPROBED;
  if (cu.ready) lt_forget();
}

extern "C" const char *backend_cuda_gelu(void) { return use_epilogue ? "epilogue" : "kernel"; }

extern "C" const char *backend_cuda_gelu_library(int act) {
  return cu.ready ? kind_name(kind_of(act == 2 ? ACT_F16 : act ? ACT_BF16 : ACT_F32)) : "unprobed";
}

extern "C" long backend_cuda_gelu_fused(void) { return fused; }
