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

#endif /* KILN_CPU_H */
