/* cast_cpu.c — the CPU side of kiln_cast and the per-element dtype helpers. */
#include "cpu.h"

float kiln_cpu_load(const void *p, int64_t i, int dt) {
  switch (dt) {
  case KILN_DT_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
  case KILN_DT_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

void kiln_cpu_store(void *p, int64_t i, int dt, float v) {
  switch (dt) {
  case KILN_DT_F16: ((uint16_t *)p)[i] = kiln_f32_to_f16(v); break;
  case KILN_DT_BF16: ((uint16_t *)p)[i] = kiln_f32_to_bf16(v); break;
  default: ((float *)p)[i] = v; break;
  }
}

void kiln_cpu_cast(const kiln_cast_args *a) {
  for (int64_t i0 = 0; i0 < a->shape[0]; i0++)
    for (int64_t i1 = 0; i1 < a->shape[1]; i1++)
      for (int64_t i2 = 0; i2 < a->shape[2]; i2++)
        for (int64_t i3 = 0; i3 < a->shape[3]; i3++) {
          int64_t s = i0 * a->src_strides[0] + i1 * a->src_strides[1] + i2 * a->src_strides[2] + i3 * a->src_strides[3];
          int64_t d = i0 * a->dst_strides[0] + i1 * a->dst_strides[1] + i2 * a->dst_strides[2] + i3 * a->dst_strides[3];
          kiln_cpu_store(a->dst, d, a->dst_dtype, kiln_cpu_load(a->src, s, a->src_dtype));
        }
}
