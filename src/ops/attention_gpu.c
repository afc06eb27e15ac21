/*
 * attention_gpu.c — kiln_attention's GPU side: check what the kernels need beyond the op's
 * contract, choose a kernel for a validated problem, launch.
 *
 * The FLASH forward (kernels/attention_sm80.cu) copies 16-byte chunks of Q, K and V rows with
 * cp.async, so it needs D == Dv, D a multiple of 8, contiguous head dimensions and 16-byte
 * aligned rows (data pointers and every stride multiples of 8 elements). It is instantiated for
 * D padded to 64, 128 or 256. The FLASH backward (kernels/attention_bwd_sm80.cu) has the same
 * needs of Q, K and V; dO may be anything (converted into the workspace when needed), dQ, dK,
 * dV any strides and float dtype. f32 inputs and the SMEM algorithm have no GPU kernel yet: they
 * are refused with UNSUPPORTED and a message saying so.
 */
#include <inttypes.h>

#include "ops.h"

static bool aligned16(const void *p, int64_t bs, int64_t hs, int64_t ss) {
  return (uintptr_t)p % 16 == 0 && bs % 8 == 0 && hs % 8 == 0 && ss % 8 == 0;
}

/* What the FLASH kernels need of Q, K, V and O beyond the op's contract (UNSUPPORTED if not). */
static kiln_status check_flash(const char *op, const kiln_attn_args *a) {
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
  return KILN_OK;
}

/* Head dims are padded to the kernels' DP: 64, 128 or 256. Each kernel family is listed as
 * D64, D128, D256 per dtype (kernel_list.h), so its kernel is the dtype's first plus 0, 1 or 2. */
static int padded_dim(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }
static kiln_kernel_id family_kernel(kiln_kernel_id f16_d64, kiln_kernel_id bf16_d64, const kiln_attn_args *a) {
  const int dp = padded_dim(a->d);
  return (kiln_kernel_id)((a->in_dtype == KILN_DT_BF16 ? bf16_d64 : f16_d64) + (dp == 64 ? 0 : dp == 128 ? 1 : 2));
}

kiln_status kiln_attention_gpu_forward(const kiln_context *ctx, const char *op, const kiln_attn_args *a, int algo,
                                       CUstream stream) {
  if (algo == KILN_ATTENTION_SMEM)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo SMEM has no GPU kernel yet; use KILN_ATTENTION_AUTO or _FLASH", op);
  kiln_status st = check_flash(op, a);
  if (st) return st;
  const int dp = padded_dim(a->d);
  const kiln_kernel_id kernel = family_kernel(KILN_K_ATTN_FWD_f16_D64, KILN_K_ATTN_FWD_bf16_D64, a);
  kiln_attn_args args = *a;
  void *params[] = {&args};
  const unsigned tiles = (unsigned)((a->sq + KILN_ATTN_BR(dp) - 1) / KILN_ATTN_BR(dp));
  return kiln_launch(ctx, kernel, tiles, (unsigned)a->hq, (unsigned)a->batch, KILN_ATTN_THREADS,
                     (unsigned)KILN_ATTN_SMEM_BYTES(dp), stream, params, op);
}


/* The backward's workspace: delta (f32 per query row), then, when the MMA kernels cannot read dO
 * as given (another dtype than Q, a strided head dimension or unaligned rows), a compact copy of
 * dO in Q's dtype written by the delta kernel. */
static bool dout_needs_copy(const kiln_attn_args *a) {
  return a->do_dtype != a->in_dtype || a->do_ds != 1 || !aligned16(a->dout, a->do_bs, a->do_hs, a->do_ss);
}
static size_t delta_bytes(const kiln_attn_args *a) {
  return ((size_t)a->batch * (size_t)a->hq * (size_t)a->sq * 4 + 255) / 256 * 256;
}

size_t kiln_attention_gpu_workspace(const kiln_context *ctx, const kiln_attn_args *a, int deterministic) {
  (void)ctx, (void)deterministic; /* every GPU backward kernel is deterministic */
  size_t bytes = delta_bytes(a);
  if (dout_needs_copy(a)) bytes += (size_t)a->batch * (size_t)a->hq * (size_t)a->sq * (size_t)a->dv_dim * 2;
  return bytes;
}

/* delta (and the dO copy), then dK/dV, then dQ: three launches on the caller's stream. */
kiln_status kiln_attention_gpu_backward(const kiln_context *ctx, const char *op, const kiln_attn_args *a, int algo,
                                        int deterministic, void *workspace, CUstream stream) {
  (void)deterministic;
  if (algo == KILN_ATTENTION_SMEM)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo SMEM has no GPU backward kernel; use KILN_ATTENTION_AUTO or _FLASH", op);
  kiln_status st = check_flash(op, a);
  if (st) return st;
  const int64_t rows = (int64_t)a->batch * a->hq * a->sq;
  if (rows > (int64_t)INT32_MAX)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: batch x heads x Sq is %" PRId64 " query rows; the GPU backward takes at most %d; split the "
                     "batch",
                     op, rows, INT32_MAX);
  kiln_attn_args args = *a;
  void *params[] = {&args};
  args.delta = (float *)workspace;
  args.do_copy = dout_needs_copy(a) ? (char *)workspace + delta_bytes(a) : NULL;
  const unsigned warps = KILN_ATTN_THREADS / 32;
  if ((st = kiln_launch(ctx, KILN_K_ATTN_BWD_DELTA, (unsigned)((rows + warps - 1) / warps), 1, 1, KILN_ATTN_THREADS,
                        0, stream, params, op)))
    return st;
  if (args.do_copy) { /* the MMA kernels read the compact copy */
    args.dout = args.do_copy;
    args.do_dtype = args.in_dtype;
    args.do_ds = 1;
    args.do_ss = args.dv_dim;
    args.do_hs = (int64_t)args.sq * args.dv_dim;
    args.do_bs = (int64_t)args.hq * args.sq * args.dv_dim;
  }
  const int dp = padded_dim(a->d);
  if (a->dk || a->dv) {
    const unsigned tiles = (unsigned)((a->sk + KILN_ATTN_BWD_KV_BN - 1) / KILN_ATTN_BWD_KV_BN);
    const unsigned splits = (unsigned)(dp / KILN_ATTN_BWD_KV_DO(dp));
    const kiln_kernel_id kernel = family_kernel(KILN_K_ATTN_BWD_DKDV_f16_D64, KILN_K_ATTN_BWD_DKDV_bf16_D64, a);
    if ((st = kiln_launch(ctx, kernel, tiles, (unsigned)a->hkv * splits, (unsigned)a->batch, KILN_ATTN_THREADS,
                          (unsigned)KILN_ATTN_BWD_KV_SMEM_BYTES(dp), stream, params, op)))
      return st;
  }
  if (a->dq) {
    const unsigned tiles = (unsigned)((a->sq + KILN_ATTN_BWD_Q_BM - 1) / KILN_ATTN_BWD_Q_BM);
    const kiln_kernel_id kernel = family_kernel(KILN_K_ATTN_BWD_DQ_f16_D64, KILN_K_ATTN_BWD_DQ_bf16_D64, a);
    if ((st = kiln_launch(ctx, kernel, tiles, (unsigned)a->hq, (unsigned)a->batch, KILN_ATTN_THREADS,
                          (unsigned)KILN_ATTN_BWD_Q_SMEM_BYTES(dp), stream, params, op)))
      return st;
  }
  return KILN_OK;
}
