/*
 * gemm_int8.cuh — kiln_matmul_int8's epilogue, shared by the IMMA kernels (gemm_int8_sm80.cu) and
 * the int8 WGMMA kernels (gemm_int8_sm90.cu): both hold the same 16 x 8 s32 accumulator
 * fragments (lane l: rows l/4 and l/4 + 8, columns 2(l%4) and +1), so one store turns them into
 * C bit for bit as the CPU path does.
 *
 * The value, in f32 and in this order: v = (float)sum (RNE; 0x80000000 is +2^31, the one sum
 * that wraps: K = 2^17 products of (-128)(-128)); v *= scale; v *= row_scale[i]; v *= col_scale[j],
 * each with __fmul_rn (never contracted or reordered); one RNE rounding to C's dtype. An absent
 * vector multiplies by 1.0f, which is exact, so the code has no per-element branches. With
 * `transposed` the block computes Cᵀ: its rows are the caller's columns, and the caller's row
 * scales (now col_scale, indexed by the kernel's column) still come first.
 *
 * Why this shape (H200, 2026-12-03): the first version evaluated every branch of a generic
 * per-element store (scales present or not, three dtypes, pair or scalar) inside the fully
 * unrolled 128-accumulator loop: ~10 k SASS instructions per kernel, and the int8 WGMMA kernel
 * spent 43 % of its stall cycles on instruction fetch, a ~120 us epilogue at 4096 x 4096
 * (docs/performance.md). Here C's dtype is chosen once, outside the loops, and the per-column
 * factors are loaded once per column pair.
 */
#pragma once
#include "gemm_sm80.cuh"

namespace kiln {

struct StoreInt8 {
  /* sum · scale · a · b with a, b the two factors in the caller's order */
  static KILN_DEVICE float value(int32_t sum, float scale, float a, float b) {
    const float s = __int2float_rn(sum); /* INT32_MIN converts exactly to -2^31: flip it */
    const float v = sum == INT32_MIN ? -s : s;
    return __fmul_rn(__fmul_rn(__fmul_rn(v, scale), a), b);
  }
  static KILN_DEVICE void put(float *c, float v) { *c = v; }
  static KILN_DEVICE void put(__half *c, float v) { *c = __float2half_rn(v); }
  static KILN_DEVICE void put(__nv_bfloat16 *c, float v) { *c = __float2bfloat16_rn(v); }
  static KILN_DEVICE void put2(float *c, float v0, float v1) { *reinterpret_cast<float2 *>(c) = make_float2(v0, v1); }
  static KILN_DEVICE void put2(__half *c, float v0, float v1) {
    *reinterpret_cast<__half2 *>(c) = __floats2half2_rn(v0, v1);
  }
  static KILN_DEVICE void put2(__nv_bfloat16 *c, float v0, float v1) {
    *reinterpret_cast<__nv_bfloat162 *>(c) = __floats2bfloat162_rn(v0, v1);
  }

  /* C row-major (c_cs == 1; the host transposes a column-major C). */
  template <class OUT, int MT, int NT>
  static KILN_DEVICE void store_as(const int32_t (&acc)[MT][NT][4], const kiln_int8_args &p, OUT *c, int row0,
                                   int col0, int lane) {
    const bool t = p.transposed, pair_ok = (uintptr_t)c % (2 * sizeof(OUT)) == 0 && p.c_rs % 2 == 0;
    /* this lane's rows: where they start in C, and their factors (1.0f without row scales) */
    OUT *crow[MT][2];
    float rf[MT][2];
    bool rin[MT][2];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = row0 + i * 16 + lane / 4 + h * 8;
        rin[i][h] = row < p.m;
        crow[i][h] = c + (int64_t)row * p.c_rs;
        rf[i][h] = p.row_scale && rin[i][h] ? p.row_scale[(int64_t)row * p.row_scale_stride] : 1.0f;
      }
#pragma unroll
    for (int j = 0; j < NT; j++) {
      const int col = col0 + j * 8 + lane % 4 * 2;
      if (col >= p.n) continue;
      const bool both = col + 1 < p.n, vec = both && pair_ok;
      const float cf0 = p.col_scale ? p.col_scale[(int64_t)col * p.col_scale_stride] : 1.0f;
      const float cf1 = p.col_scale && both ? p.col_scale[(int64_t)(col + 1) * p.col_scale_stride] : 1.0f;
#pragma unroll
      for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          if (!rin[i][h]) continue;
          const float r = rf[i][h];
          const float v0 = value(acc[i][j][2 * h], p.scale, t ? cf0 : r, t ? r : cf0);
          const float v1 = value(acc[i][j][2 * h + 1], p.scale, t ? cf1 : r, t ? r : cf1);
          OUT *q = crow[i][h] + col;
          if (vec) {
            put2(q, v0, v1);
          } else {
            put(q, v0);
            if (both) put(q + 1, v1);
          }
        }
    }
  }

  /* opaque_zero() keeps the epilogue's address math (row, column, scale vectors) from being
   * hoisted out of the batch loop, where it stayed live across the K loop (int8 on sm_80:
   * 140-184 bytes of spills without it). */
  template <int MT, int NT>
  static KILN_DEVICE void store(const int32_t (&acc)[MT][NT][4], const kiln_int8_args &p, void *C, int row0,
                                int col0, int lane) {
    const int z = opaque_zero();
    if (p.c_dtype == KILN_DT_F32)
      store_as<float>(acc, p, (float *)C, row0 + z, col0 + z, lane);
    else if (p.c_dtype == KILN_DT_F16)
      store_as<__half>(acc, p, (__half *)C, row0 + z, col0 + z, lane);
    else
      store_as<__nv_bfloat16>(acc, p, (__nv_bfloat16 *)C, row0 + z, col0 + z, lane);
  }
};

} /* namespace kiln */
