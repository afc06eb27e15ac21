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

#endif /* KILN_CPU_H */
