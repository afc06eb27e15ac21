/*
 * cast.c — kiln_cast: elementwise conversion between f32, f16 and bf16 (see kiln.h).
 */
#include <inttypes.h>
#include <string.h>

#include "ops.h"
#include "cpu/cpu.h"

kiln_status kiln_cast_prepare(const kiln_context *ctx, const char *op, const DLTensor *src, const DLTensor *dst,
                              kiln_cast_args *args) {
  kiln_status st;
  if ((st = kiln_check_tensor(ctx, op, "src", src)) || (st = kiln_check_tensor(ctx, op, "dst", dst))) return st;
  char a[160], b[160], dn[48];
  if (src->ndim != dst->ndim || memcmp(src->shape, dst->shape, sizeof(int64_t) * (size_t)src->ndim) != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: dst has shape %s but src has shape %s; they must match", op,
                     kiln_shape_str(dst, a, sizeof a), kiln_shape_str(src, b, sizeof b));
  if (src->ndim > 4)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: src has rank %d; expected rank <= 4 (reshape first)", op,
                     (int)src->ndim);
  int sd = kiln_dt_code(src->dtype), dd = kiln_dt_code(dst->dtype);
  if (sd < 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: src has dtype %s; expected float32, float16 or bfloat16", op,
                     kiln_dtype_name(src->dtype, dn));
  if (dd < 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: dst has dtype %s; expected float32, float16 or bfloat16", op,
                     kiln_dtype_name(dst->dtype, dn));
  memset(args, 0, sizeof *args);
  args->src = kiln_tensor_data(src);
  args->dst = kiln_tensor_data(dst);
  args->src_dtype = sd;
  args->dst_dtype = dd;
  args->count = 1;
  int pad = 4 - src->ndim; /* right-align the dimensions in the rank-4 index space */
  for (int d = 0; d < src->ndim; d++) args->count *= src->shape[d];
  if (args->count == 0) return KILN_OK; /* nothing to convert: strides do not matter */
  args->count = 1;
  int64_t src_span = 0, dst_span = 0;
  for (int d = 0; d < 4; d++) {
    int s = d - pad;
    args->shape[d] = s >= 0 ? src->shape[s] : 1;
    args->src_strides[d] = s >= 0 ? kiln_tensor_stride(src, s) : 0;
    args->dst_strides[d] = s >= 0 ? kiln_tensor_stride(dst, s) : 0;
    if (args->shape[d] > 1 && args->dst_strides[d] == 0)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: dst has stride 0 in dimension %d of size %" PRId64 ", so elements overlap; pass a "
                       "writable tensor with distinct elements",
                       op, s, args->shape[d]);
    args->count *= args->shape[d];
    src_span += (args->shape[d] - 1) * args->src_strides[d];
    dst_span += (args->shape[d] - 1) * args->dst_strides[d];
  }
  if (args->count > 0) {
    uintptr_t s0 = (uintptr_t)args->src, s1 = s0 + (uintptr_t)(src_span + 1) * kiln_dtype_size(src->dtype);
    uintptr_t d0 = (uintptr_t)args->dst, d1 = d0 + (uintptr_t)(dst_span + 1) * kiln_dtype_size(dst->dtype);
    if (s0 < d1 && d0 < s1)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: dst overlaps src; kiln_cast does not work in place", op);
  }
  return KILN_OK;
}

kiln_status kiln_cast_run(const kiln_context *ctx, const kiln_cast_args *args, CUstream stream, const char *op) {
  if (args->count == 0) return KILN_OK;
  if (ctx->device_type == kDLCPU) {
    kiln_cpu_cast(args);
    return KILN_OK;
  }
  const unsigned block = 256;
  int64_t blocks = (args->count + block - 1) / block;
  int64_t cap = (int64_t)ctx->info.sm_count * 8; /* grid-stride beyond a few waves */
  if (blocks > cap) blocks = cap;
  kiln_cast_args copy = *args;
  void *params[] = {&copy};
  return kiln_launch(ctx, KILN_K_CAST, (unsigned)blocks, 1, 1, block, 0, stream, params, op);
}

kiln_status kiln_cast(kiln_context *ctx, const DLTensor *src, const DLTensor *dst, CUstream stream) {
  const char *op = "kiln_cast";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  kiln_cast_args args;
  if ((st = kiln_cast_prepare(ctx, op, src, dst, &args))) return st;
  if (ctx->device_type == kDLCPU) return kiln_cast_run(ctx, &args, stream, op);
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
  st = kiln_cast_run(ctx, &args, stream, op);
  kiln_ctx_leave(ctx, &scope);
  return st;
}
