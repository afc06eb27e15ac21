/*
 * matmul_int4_cpu.c — W4A16 on the CPU (the kDLCPU path of kiln_matmul_int4 and the reference
 * its GPU tests compare with), and the product engine it shares with the fused QKV projections
 * (src/cpu/qkv_project_cpu.c).
 *
 * Exactness: x (f16/bf16) and every dequantized weight f16_scale · (q − z) (|q − z| <= 16) are
 * exact in f32, and their product (<= 11 + 16 bits of significand) is exact in double, so the
 * only roundings are those of the double sum and the final one into y's dtype.
 *
 * Memory: the weight is dequantized one chunk of columns at a time (a panel of at most
 * PANEL_FLOATS floats, or one column), so a large weight never needs a full f32 copy.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "ops/ops.h"

/* Work below which OpenMP's fork costs more than it saves. */
#define W16_OMP_MIN_WORK (1 << 16)
/* Floats of the weight-column panel (16 MB): large enough to keep every core busy. */
#define PANEL_FLOATS ((int64_t)1 << 22)

void kiln_cpu_store_rounded(void *p, int64_t i, int dt, double v) {
  float f = (float)v;
  if (dt != KILN_DT_F32 && (double)f != v && !isnan(v)) {
    /* round to odd: of the two floats around v, take the one with an odd last bit */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (!(u & 1u)) f = nextafterf(f, (double)f > v ? -INFINITY : INFINITY);
  }
  kiln_cpu_store(p, i, dt, f);
}

/* Σ x[r]·w[r] in double: four interleaved partial sums, then (s0 + s1) + (s2 + s3). */
static double dot(const float *x, const float *w, int64_t k) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t r = 0;
  for (; r + 4 <= k; r += 4) {
    s0 += (double)x[r] * (double)w[r];
    s1 += (double)x[r + 1] * (double)w[r + 1];
    s2 += (double)x[r + 2] * (double)w[r + 2];
    s3 += (double)x[r + 3] * (double)w[r + 3];
  }
  for (; r < k; r++) s0 += (double)x[r] * (double)w[r];
  return (s0 + s1) + (s2 + s3);
}

void kiln_cpu_int4_cols(const kiln_qkv_proj *p, int64_t k, int64_t n0, int64_t nc, float *panel) {
  const int64_t N = p->n, G = p->group;
#pragma omp parallel for schedule(static) if (nc * k >= W16_OMP_MIN_WORK)
  for (int64_t j = 0; j < nc; j++) {
    const int64_t n = n0 + j;
    float *dst = panel + j * k;
    for (int64_t g = 0; g < k / G; g++) {
      const float s = kiln_f16_to_f32(p->scales[g * N + n]);
      const int z = p->zeros[g * N + n];
      for (int64_t r = g * G; r < (g + 1) * G; r++) {
        const int q = (int)((p->codes[(r / 8) * N + n] >> (4 * (r % 8))) & 0xFu);
        dst[r] = s * (float)(q - z);
      }
    }
  }
}

kiln_status kiln_cpu_w16_products(const char *op, const kiln_qkv_args *a, int nproj, kiln_cpu_wcols_fn load) {
  const int64_t M = a->m, K = a->k;
  int64_t nmax = 1;
  for (int i = 0; i < nproj; i++) nmax = a->proj[i].n > nmax ? a->proj[i].n : nmax;
  int64_t nc = PANEL_FLOATS / K;
  nc = nc < 1 ? 1 : nc > nmax ? nmax : nc;
  size_t xb, wb;
  float *xp = NULL, *wp = NULL;
  if (!__builtin_mul_overflow((size_t)M * sizeof(float), (size_t)K, &xb) &&
      !__builtin_mul_overflow((size_t)nc * sizeof(float), (size_t)K, &wb))
    xp = malloc(xb), wp = malloc(wb);
  if (!xp || !wp) {
    free(xp);
    free(wp);
    return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of host memory for the CPU path's f32 panels", op);
  }
  const char *x = a->x;
  for (int pi = 0; pi < nproj; pi++) {
    const kiln_qkv_proj *p = &a->proj[pi];
    if (pi == 0 || p->perm != a->proj[pi - 1].perm) { /* gather x through this weight's perm */
      const int32_t *perm = p->perm;
#pragma omp parallel for schedule(static) if (M * K >= W16_OMP_MIN_WORK)
      for (int64_t i = 0; i < M; i++)
        for (int64_t r = 0; r < K; r++)
          xp[i * K + r] = kiln_cpu_load(x, i * a->x_rs + (int64_t)(perm ? perm[r] : r) * a->x_cs, a->x_dtype);
    }
    for (int64_t n0 = 0; n0 < p->n; n0 += nc) {
      const int64_t c = p->n - n0 < nc ? p->n - n0 : nc;
      load(p, K, n0, c, wp);
#pragma omp parallel for schedule(static) if (M * c * K >= W16_OMP_MIN_WORK)
      for (int64_t e = 0; e < M * c; e++) {
        const int64_t i = e / c, j = e % c;
        double s = dot(xp + i * K, wp + j * K, K);
        if (p->scale) s *= (double)p->scale[(n0 + j) * p->scale_stride];
        kiln_cpu_store_rounded(p->y, i * p->y_rs + (n0 + j) * p->y_cs, a->y_dtype, s);
      }
    }
  }
  free(xp);
  free(wp);
  return KILN_OK;
}

kiln_status kiln_cpu_matmul_int4(const char *op, const kiln_int4_args *args) {
  kiln_qkv_args a;
  kiln_int4_as_qkv(args, &a);
  return kiln_cpu_w16_products(op, &a, 1, kiln_cpu_int4_cols);
}
