/*
 * matmul_cpu.c — C = alpha·A·B + beta·C on the CPU: the kDLCPU path of kiln_matmul and the
 * reference its GPU tests compare with.
 *
 * Each batch's operands are first widened to f32 panels (A row-major, B transposed so both
 * inner loops run over contiguous K), then every C element is one fp32 dot product in k order,
 * the accumulation the kernels do (they add in a different order, so results agree to fp32
 * rounding, not bit for bit). Rows run in parallel with OpenMP when it is available.
 */
#include <stdlib.h>

#include "cpu.h"
#include "ops/ops.h"

kiln_status kiln_cpu_gemm(const char *op, const kiln_matrix *a, const kiln_matrix *b, const kiln_matrix *c,
                          int64_t batch, float alpha, float beta) {
  const int64_t M = a->rows, K = a->cols, N = b->cols;
  const int adt = kiln_dt_code(a->dtype), bdt = kiln_dt_code(b->dtype), cdt = kiln_dt_code(c->dtype);
  float *pa = malloc(sizeof(float) * (size_t)(M * K)), *pb = malloc(sizeof(float) * (size_t)(N * K));
  if (!pa || !pb) {
    free(pa);
    free(pb);
    return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of host memory for the CPU path's f32 panels", op);
  }
  for (int64_t bi = 0; bi < batch; bi++) {
    const char *A = a->data + bi * a->bs * (int64_t)a->elem, *B = b->data + bi * b->bs * (int64_t)b->elem;
    char *C = c->data + bi * c->bs * (int64_t)c->elem;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; i++)
      for (int64_t k = 0; k < K; k++) pa[i * K + k] = kiln_cpu_load(A, i * a->rs + k * a->cs, adt);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < N; j++)
      for (int64_t k = 0; k < K; k++) pb[j * K + k] = kiln_cpu_load(B, k * b->rs + j * b->cs, bdt);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        float acc = 0.f;
        const float *x = pa + i * K, *y = pb + j * K;
        for (int64_t k = 0; k < K; k++) acc += x[k] * y[k];
        float v = alpha * acc;
        const int64_t idx = i * c->rs + j * c->cs;
        if (beta != 0.f) v += beta * kiln_cpu_load(C, idx, cdt);
        kiln_cpu_store(C, idx, cdt, v);
      }
  }
  free(pa);
  free(pb);
  return KILN_OK;
}
