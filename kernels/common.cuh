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

/* The compute capability this image was compiled for, as major * 10 + minor (0 in nvcc's host
 * pass): the arch of kiln_abi.h's per-device tile constants (KILN_GEMM_STAGES). */
#ifdef __CUDA_ARCH__
#define KILN_IMAGE_ARCH (__CUDA_ARCH__ / 10)
#else
#define KILN_IMAGE_ARCH 0
#endif

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

/* d += a * b for one m16n8k16 fragment (mma.sync, sm_80+); BF16 selects the bf16 instruction. Every
 * mma.sync kernel's f16 / bf16 product goes through it (the GEMM, attention and W·A16 kernels). */
template <bool BF16>
KILN_DEVICE void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if (BF16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
