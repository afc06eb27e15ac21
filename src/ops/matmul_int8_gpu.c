/*
 * matmul_int8_gpu.c — kiln_matmul_int8's GPU side: choose an int8 kernel and launch it on the
 * caller's stream. No allocation, no sync.
 *
 * Kernels (algo):
 *   WGMMA     kernels/gemm_int8_sm90.cu, sm_90 only: wgmma m64nNk32 fed by TMA, A and B k-major
 *             (x @ W.T with a Linear weight) with 16-byte aligned data, leading dimensions and
 *             batch strides; tile width 256 / 128 / 64 per problem (kiln_wgmma_tile_n).
 *   MMA_SYNC  kernels/gemm_int8_sm80.cu, sm_80+: cpasync_i8_kk for k-major, 16-byte aligned A and
 *             B when the device grants the 162 KB of its 3-stage ring; else mma_i8_<layout>
 *             (register-staged 16-byte loads, an m-major A or n-major B transposed on its way to
 *             shared memory) or mma_i8_<layout>_scalar (element loads, unaligned rows).
 *   AUTO      WGMMA where it applies, else MMA_SYNC: at 4096^3 on the H200 docs/performance.md
 *             has both. Both give the same bits (exact int32 sums, one epilogue).
 * A column-major C is computed as Cᵀ = Bᵀ·Aᵀ (the kernels write rows), with `transposed` set so
 * that the scales are still applied row before column, bit for bit as the CPU path.
 */
#include <inttypes.h>
#include <string.h>

#include "ops.h"

/* What TensorCore int8 MMA (mma.sync m16n8k32 s8) needs: compute capability 8.0. */
#define INT8_MIN_ARCH 80

/* Why WGMMA cannot run this product, or NULL when it can. */
static const char *wgmma_refusal(const kiln_context *ctx, bool a_k, bool b_k, const kiln_matrix *A,
                                 const kiln_matrix *B) {
  if (ctx->arch != 90) return "it needs an sm_90 GPU (Hopper: H100, H200)";
  if (!a_k || !b_k)
    return "wgmma reads 8-bit operands k-major only: A must be row-major and B column-major (a Linear weight W "
           "[N,K] passed as W.T), after a column-major C is taken as Cᵀ = Bᵀ·Aᵀ";
  if (!kiln_wgmma_operand_ok(A) || !kiln_wgmma_operand_ok(B))
    return "TMA needs A's and B's data pointers, leading dimensions (also over a dimension of size 1) and batch "
           "strides in multiples of 16 bytes";
  if (ctx->info.smem_per_block_optin < (size_t)KILN_GEMM_WG_SMEM_BYTES(64))
    return "the device grants too little shared memory per block for its TMA ring";
  return NULL;
}

kiln_status kiln_matmul_int8_gpu(const kiln_context *ctx, const char *op, const kiln_int8_args *in, int algo,
                                 CUstream stream) {
  if (ctx->arch < INT8_MIN_ARCH)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: the int8 kernel needs int8 tensor cores with mma.sync m16n8k32 (compute capability 8.0 or "
                     "newer) but %s is sm_%d; use a CPU context (kDLCPU) for int8 products on this machine",
                     op, ctx->info.name, ctx->arch);
  kiln_int8_args p = *in;
  p.transposed = 0;
  /* The kernels write C row-major (c_cs == 1; kiln_matrix_view normalizes a C with one column
   * to c_cs == 1 as well). Otherwise: Cᵀ [N, M] = Bᵀ [N, K] · Aᵀ [K, M], scales swapped. */
  if (p.c_cs != 1) {
    const int8_t *a = p.a;
    const int64_t a_bs = p.a_bs, a_rs = p.a_rs, a_cs = p.a_cs;
    p.a = p.b, p.a_bs = p.b_bs, p.a_rs = p.b_cs, p.a_cs = p.b_rs;
    p.b = a, p.b_bs = a_bs, p.b_rs = a_cs, p.b_cs = a_rs;
    const int64_t c_rs = p.c_rs;
    p.c_rs = p.c_cs, p.c_cs = c_rs;
    const float *rs = p.row_scale;
    const int64_t rss = p.row_scale_stride;
    p.row_scale = p.col_scale, p.row_scale_stride = p.col_scale_stride;
    p.col_scale = rs, p.col_scale_stride = rss;
    const int32_t m = p.m;
    p.m = p.n, p.n = m;
    p.transposed = 1;
  }
  const bool a_k = p.a_cs == 1, b_k = p.b_rs == 1;

  const DLDataType s8 = {kDLInt, 8, 1};
  const kiln_matrix A = kiln_matrix_strided(p.a, s8, p.batch, p.m, p.k, p.a_bs, p.a_rs, p.a_cs);
  const kiln_matrix B = kiln_matrix_strided(p.b, s8, p.batch, p.k, p.n, p.b_bs, p.b_rs, p.b_cs);
  const char *no_wgmma = wgmma_refusal(ctx, a_k, b_k, &A, &B);
  if (algo == KILN_INT8_WGMMA && no_wgmma)
    return kiln_fail(KILN_ERROR_UNSUPPORTED, "%s: algo KILN_INT8_WGMMA on %s (sm_%d): %s; use KILN_INT8_AUTO or _MMA_SYNC",
                     op, ctx->info.name, ctx->arch, no_wgmma);
  if (algo == KILN_INT8_AUTO) algo = no_wgmma ? KILN_INT8_MMA_SYNC : KILN_INT8_WGMMA;
  if (algo == KILN_INT8_WGMMA) {
    const int bn = kiln_wgmma_tile_n(p.m, p.n, p.batch, ctx->info.sm_count);
    const int64_t tiles_m = ((int64_t)p.m + KILN_GEMM_WG_BM - 1) / KILN_GEMM_WG_BM;
    const int64_t tiles_n = ((int64_t)p.n + bn - 1) / bn;
    bool pair; /* with KILN_WGMMA_PAIRS, 128 x 256 tiles in 2-CTA clusters sharing B, as kiln_matmul's */
    const int64_t items = kiln_wgmma_items(ctx, bn, tiles_m, tiles_n, p.batch, &pair);
    if (items > INT32_MAX) /* the persistent grid walks tiles of every batch with a 32-bit index */
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: C is [%d, %d] x batch %d, %" PRId64 " tiles of %dx%d, more than a grid holds (2^31-1); "
                       "split the product",
                       op, in->m, in->n, p.batch, items, KILN_GEMM_WG_BM, bn);
#if KILN_WGMMA_PAIRS
    const kiln_kernel_id pair_kernel = KILN_K_GEMM_wgmma256c_i8_KK;
#else
    const kiln_kernel_id pair_kernel = KILN_K_CAST; /* unreachable: pair is false without the pair kernels */
#endif
    const kiln_kernel_id kernel = pair        ? pair_kernel
                                  : bn == 256 ? KILN_K_GEMM_wgmma256_i8_KK
                                  : bn == 128 ? KILN_K_GEMM_wgmma128_i8_KK
                                              : KILN_K_GEMM_wgmma64_i8_KK;
    /* C through shared memory and TMA stores where it can (kiln_wgmma_c_staged; no beta here) */
    const kiln_matrix C = kiln_matrix_strided(p.c, kiln_dt_dtype(p.c_dtype), p.batch, p.m, p.n, p.c_bs, p.c_rs, p.c_cs);
    p.c_staged = kiln_wgmma_c_staged(&C, 0.f);
    return kiln_wgmma_launch(ctx, op, kernel, &A, &B, p.c_staged ? &C : NULL, bn, pair, items, false, &p, stream);
  }

  const bool aligned = kiln_matrix_aligned16(&A) && kiln_matrix_aligned16(&B); /* 16-byte vector loads */
  const size_t cpa_tiles = (size_t)KILN_GEMM_I8_SMEM_BYTES(KILN_GEMM_I8_CPA_STAGES, KILN_GEMM_I8_CPA_BK);
  const size_t mma_tiles = (size_t)KILN_GEMM_I8_SMEM_BYTES(2, KILN_GEMM_I8_MMA_BK);
  /* with the ring's mbarriers (KILN_GEMM_RING_BYTES) */
  const size_t cpa_smem = cpa_tiles + KILN_GEMM_RING_BYTES, mma_smem = mma_tiles + KILN_GEMM_RING_BYTES;
  const bool cpa = a_k && b_k && aligned && ctx->info.smem_per_block_optin >= cpa_smem;
  if (!cpa && ctx->info.smem_per_block_optin < mma_smem)
    return kiln_smem_refusal(ctx, op, "the int8 kernel", mma_smem,
                             "use a CPU context for int8 products on this device");

  const int64_t tiles = (((int64_t)p.m + KILN_GEMM_I8_BM - 1) / KILN_GEMM_I8_BM) *
                        (((int64_t)p.n + KILN_GEMM_I8_BN - 1) / KILN_GEMM_I8_BN);
  if (tiles > INT32_MAX)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: C is [%d, %d], %" PRId64 " tiles of %dx%d per batch, more than a grid holds (2^31-1); split "
                     "the product",
                     op, in->m, in->n, tiles, KILN_GEMM_I8_BM, KILN_GEMM_I8_BN);
  /* kernel_list.h orders each group of int8 kernels kk, kn, mk, mn */
  kiln_kernel_id kernel;
  if (cpa)
    kernel = KILN_K_GEMM_cpasync_i8_KK;
  else
    kernel = (kiln_kernel_id)((aligned ? KILN_K_GEMM_mma_i8_KK : KILN_K_GEMM_mma_i8_KK_scalar) + (a_k ? 0 : 2) +
                              (b_k ? 0 : 1));
  const unsigned gz = p.batch > 65535 ? 65535u : (unsigned)p.batch;
  void *params[] = {&p};
  return kiln_launch(ctx, kernel, (unsigned)tiles, 1, gz, KILN_GEMM_THREADS, (unsigned)(cpa ? cpa_tiles : mma_tiles),
                     stream, params, op);
}
