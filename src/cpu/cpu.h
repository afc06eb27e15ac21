/*
 * cpu.h — CPU implementations of kiln's ops: the path for kDLCPU tensors and the reference the
 * GPU tests compare against. Inputs are already validated by src/ops.
 */
#ifndef KILN_CPU_H
#define KILN_CPU_H

#include "kiln_abi.h"
#include "tensor/tensor.h"

/* Element i of a buffer of KILN_DT_* dtype dt, as float / stored from float (RNE). */
float kiln_cpu_load(const void *p, int64_t i, int dt);
void kiln_cpu_store(void *p, int64_t i, int dt, float v);

void kiln_cpu_cast(const kiln_cast_args *args);

/* C = alpha·A·B + beta·C over the views (fp32 accumulation in the order k = 0..K-1, as the
 * kernels' reference). Views are already validated and broadcast-normalized. */
kiln_status kiln_cpu_gemm(const char *op, const kiln_matrix *a, const kiln_matrix *b, const kiln_matrix *c,
                          int64_t batch, float alpha, float beta);

/* Attention over a validated kiln_attn_args (src/ops/attention.c): the forward writes o and,
 * when args->lse is not NULL, lse; the backward reads q, k, v, o, lse and dout and writes the
 * gradients that are not NULL. Scores and sums in double, deterministic, OpenMP over rows.
 * Only failure: KILN_ERROR_OUT_OF_MEMORY (host scratch), before anything is written. */
kiln_status kiln_cpu_attention_forward(const char *op, const kiln_attn_args *args);
kiln_status kiln_cpu_attention_backward(const char *op, const kiln_attn_args *args);

/* W8A8 over a validated kiln_int8_args (src/ops/matmul_int8.c): exact integer sums, then
 * c = ((float(sum) · scale) · row_scale[i]) · col_scale[j] in f32, left to right (a factor that
 * is absent is skipped), rounded once into c's dtype (RNE). The GPU kernels follow this order.
 * Only failure: KILN_ERROR_OUT_OF_MEMORY (host panels), before anything is written. */
kiln_status kiln_cpu_matmul_int8(const char *op, const kiln_int8_args *args);

/* kiln_quantize_int8's problem after validation: w [k, n] (KILN_DT_* w_dtype) and q [k, n]
 * int8 with element strides (0 over a dimension of size 1), scales f32 at i·scales_stride
 * (n of them with per_column, else 1). */
typedef struct kiln_cpu_quant_args {
  const void *w;
  int w_dtype;
  int64_t w_rs, w_cs;
  int8_t *q;
  int64_t q_rs, q_cs;
  float *scales;
  int64_t scales_stride;
  int64_t k, n;
  int per_column;
} kiln_cpu_quant_args;

/* Symmetric quantization (kiln.h): scale = max|w| / 127 in f32 (1 for an all-zero column or
 * tensor), q = nearbyintf(w / scale) clamped to [-127, 127]. Fails (INVALID_ARGUMENT) on a
 * NaN or infinite weight and (OUT_OF_MEMORY) without scratch, both before anything is written. */
kiln_status kiln_cpu_quantize_int8(const char *op, const kiln_cpu_quant_args *args);

/* The W·A16 products (src/cpu/matmul_int4_cpu.c, src/cpu/qkv_project_cpu.c) over validated
 * kiln_qkv_args (kiln_matmul_int4 is its one-projection case). For each projection p, x is
 * widened into an f32 panel xp [m][k] (gathered through p->perm when set) and the weight's
 * columns, chunk by chunk, into an f32 panel [nc][k] by load (both exact); then
 *   y[i, j] = Σ_r xp[i][r] · w[j][r]   in double, as four interleaved partial sums over r
 * (a fixed order: the same bits for any thread count), times p->scale[j·scale_stride] in double
 * when p->scale is set, rounded once into y's dtype (kiln_cpu_store_rounded). OpenMP over output
 * elements. Only failure: KILN_ERROR_OUT_OF_MEMORY (host panels), before anything is written. */
typedef void (*kiln_cpu_wcols_fn)(const kiln_qkv_proj *p, int64_t k, int64_t n0, int64_t nc, float *panel);
kiln_status kiln_cpu_w16_products(const char *op, const kiln_qkv_args *args, int nproj, kiln_cpu_wcols_fn load);
/* Column loaders: the native int4 layout (codes, scales, zeros, group), and int8 w [k, n]. */
void kiln_cpu_int4_cols(const kiln_qkv_proj *p, int64_t k, int64_t n0, int64_t nc, float *panel);
void kiln_cpu_int8_cols(const kiln_qkv_proj *p, int64_t k, int64_t n0, int64_t nc, float *panel);
/* Stores a double into a KILN_DT_* buffer with one rounding (to f32 by round-to-odd first, so
 * that the narrowing to f16 / bf16 is not a double rounding). */
void kiln_cpu_store_rounded(void *p, int64_t i, int dt, double v);

kiln_status kiln_cpu_matmul_int4(const char *op, const kiln_int4_args *args);
kiln_status kiln_cpu_qkv_int8(const char *op, const kiln_qkv_args *args);
kiln_status kiln_cpu_qkv_int4(const char *op, const kiln_qkv_args *args);

#endif /* KILN_CPU_H */
