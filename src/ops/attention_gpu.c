/*
 * attention_gpu.c — kiln_attention's GPU side. No GPU attention kernel yet: every GPU call is
 * refused with UNSUPPORTED and says so (the CPU context runs attention today).
 */
#include "ops.h"

kiln_status kiln_attention_gpu_forward(const kiln_context *ctx, const char *op, const kiln_attn_args *args, int algo,
                                       CUstream stream) {
  (void)ctx, (void)args, (void)algo, (void)stream;
  return kiln_fail(KILN_ERROR_UNSUPPORTED, "%s: no GPU attention kernel in this build yet; use a CPU context", op);
}

size_t kiln_attention_gpu_workspace(const kiln_context *ctx, const kiln_attn_args *args, int deterministic) {
  (void)ctx, (void)args, (void)deterministic;
  return 0;
}

kiln_status kiln_attention_gpu_backward(const kiln_context *ctx, const char *op, const kiln_attn_args *args, int algo,
                                        int deterministic, void *workspace, CUstream stream) {
  (void)ctx, (void)args, (void)algo, (void)deterministic, (void)workspace, (void)stream;
  return kiln_fail(KILN_ERROR_UNSUPPORTED, "%s: no GPU attention backward in this build yet; use a CPU context", op);
}
