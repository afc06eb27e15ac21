/*
 * qkv_project_cpu.c — the fused QKV projections on the CPU (the kDLCPU path of
 * kiln_qkv_project_int8 / _int4 and the reference their GPU tests compare with): the product
 * engine of src/cpu/matmul_int4_cpu.c run over the three projections, so that each output has
 * exactly the bits of the single-projection op (kiln_matmul_int4 for int4).
 */
#include "cpu.h"
#include "ops/ops.h"

/* Int8 weights widen exactly into the f32 panel. */
void kiln_cpu_int8_cols(const kiln_qkv_proj *p, int64_t k, int64_t n0, int64_t nc, float *panel) {
#pragma omp parallel for schedule(static) if (nc * k >= (1 << 16))
  for (int64_t j = 0; j < nc; j++)
    for (int64_t r = 0; r < k; r++) panel[j * k + r] = (float)p->w[r * p->w_rs + (n0 + j) * p->w_cs];
}

kiln_status kiln_cpu_qkv_int8(const char *op, const kiln_qkv_args *args) {
  return kiln_cpu_w16_products(op, args, 3, kiln_cpu_int8_cols);
}

kiln_status kiln_cpu_qkv_int4(const char *op, const kiln_qkv_args *args) {
  return kiln_cpu_w16_products(op, args, 3, kiln_cpu_int4_cols);
}
