/*
 * attention_cpu.c — attention forward and backward on the CPU: the kDLCPU path of
 * kiln_attention / kiln_attention_backward and the reference its GPU tests compare with.
 *
 * The operands are first widened into compact f32 panels (exact for f16, bf16 and f32), then
 * every score, softmax weight and sum is computed in double; results are rounded once, to the
 * output's dtype, when stored. The CPU path is therefore accurate to the output's rounding and
 * deterministic: every output element is computed by one thread in a fixed order, whatever the
 * number of threads (OpenMP, when available).
 *
 * Forward, one query row (b, h, i) per iteration: online softmax over the visible keys
 * j < n_i (n_i = Sk, or min(Sk, i + Sk - Sq + 1) when causal; n_i <= 0: O = 0, LSE = -inf).
 *
 * Backward, from the forward's LSE and O: P_ij = exp(scale·q_i·k_j − LSE_i),
 * dP_ij = dO_i·v_j, D_i = dO_i·O_i, dS_ij = P_ij (dP_ij − D_i);
 *   dQ_i = scale · Σ_j dS_ij k_j                      (parallel over query rows),
 *   dK_j = scale · Σ_{h in group} Σ_i dS_ij q_i, dV_j = Σ_{h in group} Σ_i P_ij dO_i
 *                                                     (parallel over key rows; the sums over the
 *                                                      query heads of a GQA group run in order).
 * P and dP are recomputed in each of the two passes rather than stored (O(S) memory).
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "ops/ops.h"

/* A compact [n0, n1, n2, n3] f32 copy of a strided tensor of dtype dt. NULL when out of memory
 * (or the size does not fit size_t). */
static float *load_panel(const void *src, int dt, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t s0,
                         int64_t s1, int64_t s2, int64_t s3) {
  size_t count, bytes;
  if (__builtin_mul_overflow((size_t)n0, (size_t)n1, &count) || __builtin_mul_overflow(count, (size_t)n2, &count) ||
      __builtin_mul_overflow(count, (size_t)n3, &count) || __builtin_mul_overflow(count, sizeof(float), &bytes))
    return NULL;
  float *p = malloc(bytes);
  if (!p) return NULL;
  const int64_t rows = n0 * n1 * n2;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t i2 = r % n2, i1 = (r / n2) % n1, i0 = r / (n2 * n1);
    const int64_t base = i0 * s0 + i1 * s1 + i2 * s2;
    float *dst = p + r * n3;
    for (int64_t d = 0; d < n3; d++) dst[d] = kiln_cpu_load(src, base + d * s3, dt);
  }
  return p;
}

/* Keys visible to query row i: [0, n). */
static int64_t visible_keys(const kiln_attn_args *a, int64_t i) {
  if (!a->causal) return a->sk;
  int64_t n = i + (int64_t)a->sk - (int64_t)a->sq + 1;
  return n < 0 ? 0 : n > a->sk ? a->sk : n;
}

static double dot_df(const double *x, const float *y, int64_t n) {
  double s = 0;
  for (int64_t d = 0; d < n; d++) s += x[d] * (double)y[d];
  return s;
}

static double dot_ff(const float *x, const float *y, int64_t n) {
  double s = 0;
  for (int64_t d = 0; d < n; d++) s += (double)x[d] * (double)y[d];
  return s;
}

static kiln_status out_of_memory(const char *op, const char *what) {
  return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of host memory for the CPU path's %s", op, what);
}

kiln_status kiln_cpu_attention_forward(const char *op, const kiln_attn_args *a) {
  const int64_t B = a->batch, Hq = a->hq, Hkv = a->hkv, Sq = a->sq, Sk = a->sk, D = a->d, Dv = a->dv_dim;
  float *kp = load_panel(a->k, a->in_dtype, B, Hkv, Sk, D, a->k_bs, a->k_hs, a->k_ss, a->k_ds);
  float *vp = kp ? load_panel(a->v, a->in_dtype, B, Hkv, Sk, Dv, a->v_bs, a->v_hs, a->v_ss, a->v_ds) : NULL;
  if (!kp || !vp) {
    free(kp);
    return out_of_memory(op, "f32 copies of k and v");
  }
  const int64_t group = Hq / Hkv, rows = B * Hq * Sq;
  const double scale = a->scale;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t i = r % Sq, h = (r / Sq) % Hq, b = r / (Sq * Hq);
    const float *K = kp + (b * Hkv + h / group) * Sk * D, *V = vp + (b * Hkv + h / group) * Sk * Dv;
    const int64_t n = visible_keys(a, i);
    double q[256], acc[256];
    const int64_t qbase = b * a->q_bs + h * a->q_hs + i * a->q_ss;
    for (int64_t d = 0; d < D; d++) q[d] = kiln_cpu_load(a->q, qbase + d * a->q_ds, a->in_dtype);
    for (int64_t d = 0; d < Dv; d++) acc[d] = 0;
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j < n; j++) {
      const double s = scale * dot_df(q, K + j * D, D);
      if (s > m) { /* a new maximum: rescale what was summed so far */
        const double c = exp(m - s);
        l *= c;
        for (int64_t d = 0; d < Dv; d++) acc[d] *= c;
        m = s;
      }
      const double p = exp(s - m);
      l += p;
      const float *vj = V + j * Dv;
      for (int64_t d = 0; d < Dv; d++) acc[d] += p * (double)vj[d];
    }
    const int64_t obase = b * a->o_bs + h * a->o_hs + i * a->o_ss;
    const double inv = n > 0 ? 1.0 / l : 0.0;
    for (int64_t d = 0; d < Dv; d++) kiln_cpu_store(a->o, obase + d * a->o_ds, a->o_dtype, (float)(acc[d] * inv));
    if (a->lse) a->lse[b * a->lse_bs + h * a->lse_hs + i] = n > 0 ? (float)(m + log(l)) : -INFINITY;
  }
  free(kp);
  free(vp);
  return KILN_OK;
}

kiln_status kiln_cpu_attention_backward(const char *op, const kiln_attn_args *a) {
  const int64_t B = a->batch, Hq = a->hq, Hkv = a->hkv, Sq = a->sq, Sk = a->sk, D = a->d, Dv = a->dv_dim;
  const int64_t group = Hq / Hkv, rows = B * Hq * Sq, keys = B * Hkv * Sk;
  float *qp = load_panel(a->q, a->in_dtype, B, Hq, Sq, D, a->q_bs, a->q_hs, a->q_ss, a->q_ds);
  float *kp = qp ? load_panel(a->k, a->in_dtype, B, Hkv, Sk, D, a->k_bs, a->k_hs, a->k_ss, a->k_ds) : NULL;
  float *vp = kp ? load_panel(a->v, a->in_dtype, B, Hkv, Sk, Dv, a->v_bs, a->v_hs, a->v_ss, a->v_ds) : NULL;
  float *dop = vp ? load_panel(a->dout, a->do_dtype, B, Hq, Sq, Dv, a->do_bs, a->do_hs, a->do_ss, a->do_ds) : NULL;
  double *lse = dop ? malloc(sizeof(double) * (size_t)rows) : NULL;
  double *di = lse ? malloc(sizeof(double) * (size_t)rows) : NULL;
  if (!di) {
    free(qp), free(kp), free(vp), free(dop), free(lse);
    return out_of_memory(op, "f32 copies of q, k, v and dout");
  }
  const double scale = a->scale;

  /* LSE_i and D_i = dO_i · O_i per query row */
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t i = r % Sq, h = (r / Sq) % Hq, b = r / (Sq * Hq);
    lse[r] = a->lse[b * a->lse_bs + h * a->lse_hs + i];
    const int64_t obase = b * a->o_bs + h * a->o_hs + i * a->o_ss;
    const float *g = dop + r * Dv;
    double s = 0;
    for (int64_t d = 0; d < Dv; d++) s += (double)g[d] * kiln_cpu_load(a->o, obase + d * a->o_ds, a->o_dtype);
    di[r] = s;
  }

  if (a->dq) { /* dQ_i = scale · Σ_j P_ij (dP_ij − D_i) k_j */
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t r = 0; r < rows; r++) {
      const int64_t i = r % Sq, h = (r / Sq) % Hq, b = r / (Sq * Hq);
      const float *K = kp + (b * Hkv + h / group) * Sk * D, *V = vp + (b * Hkv + h / group) * Sk * Dv;
      const float *q = qp + r * D, *g = dop + r * Dv;
      const int64_t n = visible_keys(a, i);
      double acc[256];
      for (int64_t d = 0; d < D; d++) acc[d] = 0;
      for (int64_t j = 0; j < n; j++) {
        const float *kj = K + j * D;
        const double p = exp(scale * dot_ff(q, kj, D) - lse[r]);
        const double ds = p * (dot_ff(g, V + j * Dv, Dv) - di[r]);
        for (int64_t d = 0; d < D; d++) acc[d] += ds * (double)kj[d];
      }
      const int64_t base = b * a->dq_bs + h * a->dq_hs + i * a->dq_ss;
      for (int64_t d = 0; d < D; d++) kiln_cpu_store(a->dq, base + d * a->dq_ds, a->dq_dtype, (float)(scale * acc[d]));
    }
  }

  if (a->dk || a->dv) { /* per key row j of kv head kvh: sums over the group's query heads, then rows */
    const int64_t off = (int64_t)Sk - (int64_t)Sq;
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t r = 0; r < keys; r++) {
      const int64_t j = r % Sk, kvh = (r / Sk) % Hkv, b = r / (Sk * Hkv);
      const float *kj = kp + r * D, *vj = vp + r * Dv;
      const int64_t i0 = a->causal && j - off > 0 ? j - off : 0; /* query i sees key j iff i >= j - off */
      double dk[256], dv[256];
      for (int64_t d = 0; d < D; d++) dk[d] = 0;
      for (int64_t d = 0; d < Dv; d++) dv[d] = 0;
      for (int64_t hh = 0; hh < group; hh++) {
        const int64_t h = kvh * group + hh;
        for (int64_t i = i0; i < Sq; i++) {
          const int64_t qr = (b * Hq + h) * Sq + i;
          const float *q = qp + qr * D, *g = dop + qr * Dv;
          const double p = exp(scale * dot_ff(q, kj, D) - lse[qr]);
          if (a->dv)
            for (int64_t d = 0; d < Dv; d++) dv[d] += p * (double)g[d];
          if (a->dk) {
            const double ds = p * (dot_ff(g, vj, Dv) - di[qr]);
            for (int64_t d = 0; d < D; d++) dk[d] += ds * (double)q[d];
          }
        }
      }
      if (a->dk) {
        const int64_t base = b * a->dk_bs + kvh * a->dk_hs + j * a->dk_ss;
        for (int64_t d = 0; d < D; d++)
          kiln_cpu_store(a->dk, base + d * a->dk_ds, a->dk_dtype, (float)(scale * dk[d]));
      }
      if (a->dv) {
        const int64_t base = b * a->dv_bs + kvh * a->dv_hs + j * a->dv_ss;
        for (int64_t d = 0; d < Dv; d++) kiln_cpu_store(a->dv, base + d * a->dv_ds, a->dv_dtype, (float)dv[d]);
      }
    }
  }
  free(qp), free(kp), free(vp), free(dop), free(lse), free(di);
  return KILN_OK;
}
