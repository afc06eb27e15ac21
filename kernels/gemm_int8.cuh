/*
 * gemm_int8.cuh — kiln_matmul_int8's epilogue, shared by the IMMA kernels (gemm_int8_sm80.cu) and
 * the int8 WGMMA kernels (gemm_int8_sm90.cu): both hold the same 16 x 8 s32 accumulator
 * fragments, so one store turns them into C bit for bit as the CPU path does.
 */
#pragma once
#include "gemm_sm80.cuh"

namespace kiln {

/* The epilogue: the decoded sum times the scales in the documented order. With `transposed`
 * the block computes Cᵀ: its rows are the caller's columns, and the caller's row scales (now
 * col_scale, indexed by the kernel's column) still come first. */
struct Int8Value {
  static KILN_DEVICE float one(const kiln_int8_args &p, int row, int col, int32_t sum) {
    /* the sum modulo 2^32: 0x80000000 is +2^31 (K = 2^17 products of (-128)(-128)) */
    float v = sum == INT32_MIN ? 2147483648.0f : __int2float_rn(sum);
    v = __fmul_rn(v, p.scale);
    const bool t = p.transposed;
    const float *first = t ? p.col_scale : p.row_scale, *second = t ? p.row_scale : p.col_scale;
    const int64_t i1 = t ? col * p.col_scale_stride : row * p.row_scale_stride;
    const int64_t i2 = t ? row * p.row_scale_stride : col * p.col_scale_stride;
    if (first) v = __fmul_rn(v, first[i1]);
    if (second) v = __fmul_rn(v, second[i2]);
    return v;
  }
  static KILN_DEVICE void get(const kiln_int8_args &p, void *, int, int row, int col, int64_t, int32_t a0, int32_t a1,
                              float &v0, float &v1) {
    v0 = one(p, row, col, a0);
    v1 = col + 1 < p.n ? one(p, row, col + 1, a1) : 0.f;
  }
};
/* C is row-major here (c_cs == 1, the host transposes a column-major C): with a runtime
 * column stride, ptxas hoisted the 64-bit store addresses out of the K loop and spilled ~1.2 KB;
 * opaque_zero() keeps the rest of the address math (scale vectors) in the epilogue too. */
struct StoreInt8 {
  template <int MT, int NT>
  static KILN_DEVICE void store(const int32_t (&acc)[MT][NT][4], const kiln_int8_args &p, void *C, int row0,
                                int col0, int lane) {
    const int z = opaque_zero();
    store_tile<Int8Value>(acc, p, p.c_rs, 1, C, row0 + z, col0 + z, lane);
  }
};

} /* namespace kiln */
