/*
 * ops.h — helpers shared by the op files (validate -> choose kernel -> launch or CPU path).
 */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include "kiln_abi.h"
#include "runtime/runtime.h"
#include "tensor/tensor.h"

/* The KILN_DT_* code of a float dtype, or -1 when it is not f32/f16/bf16. */
static inline int kiln_dt_code(DLDataType t) {
  if (KILN_IS_F32(t)) return KILN_DT_F32;
  if (KILN_IS_F16(t)) return KILN_DT_F16;
  if (KILN_IS_BF16(t)) return KILN_DT_BF16;
  return -1;
}

/* A float (f32/f16/bf16) matrix argument of shape [batch?, rows, cols] (src/ops/checks.c); an
 * output must also not overlap itself across batches (an input may broadcast with batch stride 0). */
kiln_status kiln_check_float_matrix(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *t,
                                    int64_t batch, int64_t rows, int64_t cols, bool output, kiln_matrix *m);
/* INVALID_ARGUMENT naming both when an output's byte span meets an input's (or another output's). */
kiln_status kiln_check_disjoint(const char *op, const char *out_name, const void *out, int64_t out_bytes,
                                const char *in_name, const void *in, int64_t in_bytes);
kiln_status kiln_check_no_overlap(const char *op, const char *out_name, const kiln_matrix *out, const char *in_name,
                                  const kiln_matrix *in);

/* Builds the args of a cast between two same-shape tensors (rank <= 4) after validation.
 * Used by kiln_cast and by ops that convert an operand into workspace. */
kiln_status kiln_cast_prepare(const kiln_context *ctx, const char *op, const DLTensor *src, const DLTensor *dst,
                              kiln_cast_args *args);
/* Enqueues a prepared cast (GPU) or runs it (CPU). The context has been entered on the GPU. */
kiln_status kiln_cast_run(const kiln_context *ctx, const kiln_cast_args *args, CUstream stream, const char *op);

/* W8A8 on the GPU (src/ops/matmul_int8_gpu.c): args validated by src/ops/matmul_int8.c, the
 * context entered; UNSUPPORTED with a message for what no kernel handles. */
kiln_status kiln_matmul_int8_gpu(const kiln_context *ctx, const char *op, const kiln_int8_args *args, CUstream stream);

/* Attention on the GPU (src/ops/attention_gpu.c): args validated by src/ops/attention.c, the
 * context entered. algo is AUTO, SMEM or FLASH. Fail with UNSUPPORTED (and a message naming
 * what is unsupported) for a problem no kernel handles. */
kiln_status kiln_attention_gpu_forward(const kiln_context *ctx, const char *op, const kiln_attn_args *args, int algo,
                                       CUstream stream);
/* Workspace bytes the GPU backward needs for args (256-byte aligned start expected). */
size_t kiln_attention_gpu_workspace(const kiln_context *ctx, const kiln_attn_args *args, int deterministic);
kiln_status kiln_attention_gpu_backward(const kiln_context *ctx, const char *op, const kiln_attn_args *args, int algo,
                                        int deterministic, void *workspace, CUstream stream);

#endif /* KILN_OPS_H */
