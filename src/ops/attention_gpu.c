/*
 * attention_gpu.c — kiln_attention's GPU side: check what the kernels need beyond the op's
 * contract, choose a kernel for a validated problem, launch.
 *
 * The FLASH forward (kernels/attention_sm80.cu) copies 16-byte chunks of Q, K and V rows with
 * cp.async, so it needs D == Dv, D a multiple of 8, contiguous head dimensions and 16-byte
 * aligned rows (data pointers and every stride multiples of 8 elements). It is instantiated for
 * D padded to 64, 128 or 256. f32 inputs, the SMEM algorithm and the backward have no GPU
 * kernel yet: they are refused with UNSUPPORTED and a message saying so.
 */
#include <inttypes.h>

#include "ops.h"

static bool aligned16(const void *p, int64_t bs, int64_t hs, int64_t ss) {
  return (uintptr_t)p % 16 == 0 && bs % 8 == 0 && hs % 8 == 0 && ss % 8 == 0;
}

kiln_status kiln_attention_gpu_forward(const kiln_context *ctx, const char *op, const kiln_attn_args *a, int algo,
                                       CUstream stream) {
  if (algo == KILN_ATTENTION_SMEM)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo SMEM has no GPU kernel yet; use KILN_ATTENTION_AUTO or _FLASH", op);
  if (a->in_dtype == KILN_DT_F32)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: q, k and v are float32, which has no GPU attention kernel yet; convert them to float16 or "
                     "bfloat16 (kiln_cast), or use a CPU context",
                     op);
  if (a->d != a->dv_dim || a->d % 8 != 0)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: the GPU kernels need D == Dv and D a multiple of 8, but D is %d and Dv is %d; pad the head "
                     "dimension with zeros, or use a CPU context",
                     op, a->d, a->dv_dim);
  if (a->q_ds != 1 || a->k_ds != 1 || a->v_ds != 1 || a->o_ds != 1)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: the GPU kernels need a contiguous head dimension (stride 1) in q, k, v and o, but their "
                     "strides there are %" PRId64 ", %" PRId64 ", %" PRId64 " and %" PRId64 "; pass views whose last "
                     "dimension is contiguous",
                     op, a->q_ds, a->k_ds, a->v_ds, a->o_ds);
  if (!aligned16(a->q, a->q_bs, a->q_hs, a->q_ss) || !aligned16(a->k, a->k_bs, a->k_hs, a->k_ss) ||
      !aligned16(a->v, a->v_bs, a->v_hs, a->v_ss))
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: the GPU kernels copy 16-byte chunks, so q, k and v need 16-byte aligned data and batch, "
                     "head and sequence strides that are multiples of 8 elements; q has strides [%" PRId64 ", %" PRId64
                     ", %" PRId64 "], k [%" PRId64 ", %" PRId64 ", %" PRId64 "], v [%" PRId64 ", %" PRId64 ", %" PRId64
                     "]; use compact tensors or pad the strides",
                     op, a->q_bs, a->q_hs, a->q_ss, a->k_bs, a->k_hs, a->k_ss, a->v_bs, a->v_hs, a->v_ss);
  if (a->hq > 65535 || a->batch > 65535)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: %d query heads and batch %d; the GPU grid takes at most 65535 of each; split the batch", op,
                     a->hq, a->batch);
  const int dp = a->d <= 64 ? 64 : a->d <= 128 ? 128 : 256;
  const bool bf16 = a->in_dtype == KILN_DT_BF16;
  const kiln_kernel_id base = bf16 ? KILN_K_ATTN_FWD_bf16_D64 : KILN_K_ATTN_FWD_f16_D64;
  const kiln_kernel_id kernel = (kiln_kernel_id)(base + (dp == 64 ? 0 : dp == 128 ? 1 : 2));
  kiln_attn_args args = *a;
  void *params[] = {&args};
  const unsigned tiles = (unsigned)((a->sq + KILN_ATTN_BR(dp) - 1) / KILN_ATTN_BR(dp));
  return kiln_launch(ctx, kernel, tiles, (unsigned)a->hq, (unsigned)a->batch, KILN_ATTN_THREADS,
                     (unsigned)KILN_ATTN_SMEM_BYTES(dp), stream, params, op);
}

size_t kiln_attention_gpu_workspace(const kiln_context *ctx, const kiln_attn_args *args, int deterministic) {
  (void)ctx, (void)args, (void)deterministic;
  return 0;
}

kiln_status kiln_attention_gpu_backward(const kiln_context *ctx, const char *op, const kiln_attn_args *args, int algo,
                                        int deterministic, void *workspace, CUstream stream) {
  (void)ctx, (void)args, (void)algo, (void)deterministic, (void)workspace, (void)stream;
  return kiln_fail(KILN_ERROR_UNSUPPORTED,
                   "%s: attention backward has no GPU kernel yet; run it on a CPU context (kDLCPU tensors)", op);
}
