/*
 * wa16_gpu.c — the GPU side of kiln_matmul_int4, kiln_qkv_project_int4 and
 * kiln_qkv_project_int8: one weight-only (W4A16 / W8A16) kernel family serves all three, walking
 * a list of up to three projections (kiln_qkv_args), so a single matmul is the list of one.
 *
 * Kernels (kernels/wa16_decode_sm80.cu): DECODE streams the weights once per 8 or 16 rows of x
 * with mma.sync on exactly dequantized weights (sm_80+); each 16 rows of x re-read the weights
 * (from L2 when they fit), so at large M it is compute-starved. kiln_matmul_int4's PREFILL
 * (matmul_int4.c) dequantizes into the caller's workspace (kernels/w4_dequant.cu) and runs
 * kiln_matmul instead; the fused QKV calls do the same per projection or, into adjacent
 * outputs, for the three weights side by side (qkv_project.c; kernels/w8_dequant.cu for int8).
 */
#include <inttypes.h>

#include "ops.h"

/* int8: the three weights are int8 [k, n] (w, scale); else kiln_qweights (codes, scales, ...). */
static kiln_status wa16_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *a, bool int8,
                            CUstream stream) {
  if (a->algo == KILN_QKV_PREFILL) /* PREFILL runs kiln_matmul (qkv_project.c, matmul_int4.c), never this */
    return kiln_fail(KILN_ERROR_INTERNAL, "%s: internal error: PREFILL reached the DECODE kernels", op);
  int64_t blocks = 0; /* 32 columns each, projection after projection */
  for (int i = 0; i < 3; i++) blocks += (a->proj[i].n + 31) / 32;
  const bool m16 = a->m > 8; /* rows of x per block: 8 (decode) or 16 */
  const int64_t row_tiles = m16 ? ((int64_t)a->m + 15) / 16 : 1;
  if (row_tiles > 65535 || blocks > INT32_MAX)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: M = %d rows; the GPU kernel takes at most 65535 x 16 = 1048560 per call; split x", op, a->m);
  static const kiln_kernel_id kernels[2][2][2] = { /* [int8][bf16][m16] */
      {{KILN_K_W4A16_DECODE_F16_M8, KILN_K_W4A16_DECODE_F16_M16},
       {KILN_K_W4A16_DECODE_BF16_M8, KILN_K_W4A16_DECODE_BF16_M16}},
      {{KILN_K_W8A16_DECODE_F16_M8, KILN_K_W8A16_DECODE_F16_M16},
       {KILN_K_W8A16_DECODE_BF16_M8, KILN_K_W8A16_DECODE_BF16_M16}}};
  /* Warps per block (they split K): as many as give ~16 warps per SM over the whole grid, a power
   * of two from 1 to 16. Fewer, longer K runs per warp ramp and drain the load pipeline less. */
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1, tiles = blocks * row_tiles;
  int warps = KILN_WA16_THREADS / 32;
  while (warps > 1 && tiles * (warps / 2) >= sms * 16) warps /= 2;
  kiln_qkv_args args = *a;
  void *params[] = {&args};
  const kiln_kernel_id kernel = kernels[int8][a->x_dtype == KILN_DT_BF16][m16];
  /* shared memory: the reduction buffer, [warps][8 or 16 accumulators][32 lanes] floats */
  const unsigned smem = (unsigned)(warps * (m16 ? 16 : 8) * 32 * sizeof(float));
  return kiln_launch(ctx, kernel, (unsigned)blocks, (unsigned)row_tiles, 1, (unsigned)(32 * warps), smem, stream, params,
                     op);
}

kiln_status kiln_matmul_int4_gpu(const kiln_context *ctx, const char *op, const kiln_int4_args *a, CUstream stream) {
  kiln_qkv_args q;
  kiln_int4_as_qkv(a, &q);
  return wa16_gpu(ctx, op, &q, false, stream);
}

kiln_status kiln_qkv_int4_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream) {
  return wa16_gpu(ctx, op, args, false, stream);
}

kiln_status kiln_qkv_int8_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream) {
  return wa16_gpu(ctx, op, args, true, stream);
}

kiln_status kiln_w4_dequantize_gpu(const kiln_context *ctx, const char *op, const kiln_int4_args *a, void *ws,
                                   int64_t ld, CUstream stream) {
  kiln_int4_args args = *a;
  /* 8 columns per thread (16-byte loads and stores) when the rows and pointers allow it */
  int cols = a->n % 8 == 0 && ld % 8 == 0 && (uintptr_t)ws % 16 == 0 && (uintptr_t)a->codes % 16 == 0 &&
                     (uintptr_t)a->scales % 16 == 0 && (uintptr_t)a->zeros % 8 == 0
                 ? 8
                 : 1;
  void *params[] = {&args, &ws, &cols, &ld};
  const unsigned threads = 256, blocks_x = (unsigned)((a->n + (int64_t)threads * cols - 1) / ((int64_t)threads * cols)),
                 blocks_y = (unsigned)(a->k / 8 < 65535 ? a->k / 8 : 65535);
  return kiln_launch(ctx, a->x_dtype == KILN_DT_BF16 ? KILN_K_W4_DEQUANT_BF16 : KILN_K_W4_DEQUANT_F16, blocks_x,
                     blocks_y, 1, threads, 0, stream, params, op);
}

kiln_status kiln_w8_dequantize_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_proj *p, int32_t k,
                                   int32_t x_dtype, void *ws, int64_t ld, CUstream stream) {
  const int64_t blocks_y = ((int64_t)k + 31) / 32; /* 32 x 32 tiles (kernels/w8_dequant.cu) */
  if (blocks_y > 65535)
    return kiln_fail(KILN_ERROR_UNSUPPORTED, "%s: PREFILL takes K up to 65535 x 32 = 2097120 (found %d); use DECODE",
                     op, (int)k);
  kiln_qkv_proj proj = *p;
  int32_t kk = k;
  void *params[] = {&proj, &kk, &ws, &ld};
  return kiln_launch(ctx, x_dtype == KILN_DT_BF16 ? KILN_K_W8_DEQUANT_BF16 : KILN_K_W8_DEQUANT_F16,
                     (unsigned)((p->n + 31) / 32), (unsigned)blocks_y, 1, 32 * 8, 0, stream, params, op);
}
