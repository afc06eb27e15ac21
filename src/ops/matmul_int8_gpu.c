/*
 * matmul_int8_gpu.c — kiln_matmul_int8's GPU side. No int8 kernel yet (IMMA mma.sync m16n8k32
 * for sm_80+ and s8 wgmma for sm_90a are the plan): GPU calls are refused with UNSUPPORTED.
 */
#include "ops.h"

kiln_status kiln_matmul_int8_gpu(const kiln_context *ctx, const char *op, const kiln_int8_args *args, CUstream stream) {
  (void)ctx, (void)args, (void)stream;
  return kiln_fail(KILN_ERROR_UNSUPPORTED, "%s: no GPU int8 kernel in this build yet; use a CPU context", op);
}
