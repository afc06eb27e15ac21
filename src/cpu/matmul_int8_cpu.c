/*
 * matmul_int8_cpu.c — W8A8 on the CPU (the kDLCPU path of kiln_matmul_int8 and the reference its
 * GPU tests compare with) and the symmetric int8 quantizer of kiln_quantize_int8.
 *
 * Matmul: each batch's operands are packed into int8 panels (A row-major [M][K], B transposed
 * [N][K]) so the inner loop runs over contiguous K; every C element is one integer dot product.
 *
 * Exactness: |a·b| <= 2^14, so with K <= 2^17 every sum lies in [-2^17·127·128, 2^31]. All
 * of it fits an int32 except the single value 2^31, reached only when every one of 2^17
 * products is (-128)·(-128). The sum is therefore accumulated modulo 2^32 (uint32_t, defined
 * wrap-around, as a wrapping int32 accumulator of a GPU kernel does) and decoded with the bit
 * pattern 0x80000000 read as +2^31, which no in-range negative sum produces: the decoded sum is
 * always exact.
 *
 * Epilogue order (the GPU kernels follow it bit for bit): in f32,
 *   v = (float)sum;            (RNE for |sum| > 2^24)
 *   v = v * scale;
 *   v = v * row_scale[i];      (when row_scale is given)
 *   v = v * col_scale[j];      (when col_scale is given)
 * then one RNE rounding into C's dtype (kiln_cpu_store). Skipping an absent factor equals
 * multiplying by 1, so the order is the same with or without the vectors.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "ops/ops.h"

/* The exact value of a sum accumulated modulo 2^32 (see the file comment). */
static inline int64_t decode_sum(uint32_t acc) {
  return acc <= 0x80000000u ? (int64_t)acc : (int64_t)acc - (int64_t)4294967296LL;
}

/* Work (multiply-adds) below which OpenMP's fork costs more than it saves. */
#define INT8_OMP_MIN_WORK (1 << 16)

kiln_status kiln_cpu_matmul_int8(const char *op, const kiln_int8_args *args) {
  const int64_t M = args->m, N = args->n, K = args->k;
  int8_t *pa = malloc((size_t)(M * K)), *pb = malloc((size_t)(N * K));
  if (!pa || !pb) {
    free(pa);
    free(pb);
    return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of host memory for the CPU path's int8 panels", op);
  }
  const int cdt = args->c_dtype;
  const float scale = args->scale;
  const bool par = M * N * K >= INT8_OMP_MIN_WORK && M > 1;
  (void)par; /* unused without OpenMP */
  for (int64_t bi = 0; bi < args->batch; bi++) {
    const int8_t *A = args->a + bi * args->a_bs, *B = args->b + bi * args->b_bs;
    char *C = (char *)args->c;
    const int64_t c_base = bi * args->c_bs;
    if (bi == 0 || args->a_bs != 0) {
#pragma omp parallel for schedule(static) if (par)
      for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) pa[i * K + k] = A[i * args->a_rs + k * args->a_cs];
    }
    if (bi == 0 || args->b_bs != 0) {
#pragma omp parallel for schedule(static) if (par)
      for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++) pb[j * K + k] = B[k * args->b_rs + j * args->b_cs];
    }
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < M; i++) {
      const int8_t *x = pa + i * K;
      const float rs = args->row_scale ? args->row_scale[i * args->row_scale_stride] : 1.0f;
      for (int64_t j = 0; j < N; j++) {
        const int8_t *y = pb + j * K;
        uint32_t acc = 0;
        for (int64_t k = 0; k < K; k++) acc += (uint32_t)((int32_t)x[k] * (int32_t)y[k]);
        float v = (float)decode_sum(acc);
        v = v * scale;
        if (args->row_scale) v = v * rs;
        if (args->col_scale) v = v * args->col_scale[j * args->col_scale_stride];
        kiln_cpu_store(C, c_base + i * args->c_rs + j * args->c_cs, cdt, v);
      }
    }
  }
  free(pa);
  free(pb);
  return KILN_OK;
}

kiln_status kiln_cpu_quantize_int8(const char *op, const kiln_cpu_quant_args *args) {
  const int64_t K = args->k, N = args->n;
  float *colmax = calloc((size_t)N, sizeof(float));
  if (!colmax) return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of host memory for the column maxima", op);
  /* Pass 1: max |w| per column, and no NaN or infinity anywhere (checked before any write). */
  int64_t bad_k = -1, bad_n = -1;
  for (int64_t n = 0; n < N; n++) {
    float m = 0.f;
    for (int64_t k = 0; k < K; k++) {
      const float v = kiln_cpu_load(args->w, k * args->w_rs + n * args->w_cs, args->w_dtype);
      if (!isfinite(v)) {
        if (bad_k < 0) bad_k = k, bad_n = n;
        continue;
      }
      const float a = fabsf(v);
      if (a > m) m = a;
    }
    colmax[n] = m;
  }
  if (bad_k >= 0) {
    const float v = kiln_cpu_load(args->w, bad_k * args->w_rs + bad_n * args->w_cs, args->w_dtype);
    free(colmax);
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: w[%lld, %lld] is %g; expected finite weights (a NaN or infinity has no int8 scale)", op,
                     (long long)bad_k, (long long)bad_n, (double)v);
  }
  if (!args->per_column) { /* one scale: the maximum over the whole tensor */
    float m = 0.f;
    for (int64_t n = 0; n < N; n++)
      if (colmax[n] > m) m = colmax[n];
    for (int64_t n = 0; n < N; n++) colmax[n] = m;
  }
  /* Pass 2: scales and codes. scale = max / 127 in f32; an all-zero column (or tensor) gets 1.
   * A tiny max whose quotient underflows to 0 gets the smallest subnormal instead, so that the
   * division below stays finite (and w ≈ q·scale still holds). */
  for (int64_t n = 0; n < N; n++) {
    float s = colmax[n] > 0.f ? colmax[n] / 127.0f : 1.0f;
    if (s == 0.f) s = 0x1p-149f;
    colmax[n] = s;
  }
  if (args->per_column)
    for (int64_t n = 0; n < N; n++) args->scales[n * args->scales_stride] = colmax[n];
  else
    args->scales[0] = colmax[0];
#pragma omp parallel for schedule(static) if (K * N >= INT8_OMP_MIN_WORK)
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) {
      const float v = kiln_cpu_load(args->w, k * args->w_rs + n * args->w_cs, args->w_dtype);
      float r = nearbyintf(v / colmax[n]); /* round half to even in the default rounding mode */
      if (r > 127.f) r = 127.f;
      if (r < -127.f) r = -127.f;
      args->q[k * args->q_rs + n * args->q_cs] = (int8_t)r;
    }
  free(colmax);
  return KILN_OK;
}
