/*
 * qkv_project_gpu.c — the GPU side of kiln_qkv_project_int8 / _int4. int4: the W4A16 kernels of
 * matmul_int4_gpu.c, whose grid walks the three projections in one launch. int8 (W8A16): no
 * kernel yet, refused with UNSUPPORTED.
 */
#include "ops.h"

kiln_status kiln_qkv_int8_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream) {
  (void)ctx, (void)args, (void)stream;
  return kiln_fail(KILN_ERROR_UNSUPPORTED, "%s: no GPU int8 kernel in this build yet; use a CPU context", op);
}

kiln_status kiln_qkv_int4_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream) {
  return kiln_w4a16_gpu(ctx, op, args, stream); /* the W4A16 kernels walk the three projections */
}
