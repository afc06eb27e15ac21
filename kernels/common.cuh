/*
 * common.cuh — small device helpers shared by every kernel file: dtype loads/stores and the
 * conversions behind the KILN_DT_* codes of kiln_abi.h.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kiln_abi.h"

#define KILN_DEVICE __device__ __forceinline__

/* Reads element i of a buffer of dtype dt as f32. */
KILN_DEVICE float kiln_load_as_f32(const void *p, int64_t i, int dt) {
  switch (dt) {
  case KILN_DT_F16: return __half2float(((const __half *)p)[i]);
  case KILN_DT_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

/* Writes f32 v as element i of a buffer of dtype dt, rounding to nearest even. */
KILN_DEVICE void kiln_store_from_f32(void *p, int64_t i, int dt, float v) {
  switch (dt) {
  case KILN_DT_F16: ((__half *)p)[i] = __float2half_rn(v); break;
  case KILN_DT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
  default: ((float *)p)[i] = v; break;
  }
}
