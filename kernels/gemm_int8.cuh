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
 * The loops, the dtype dispatch and the stores are gemm_sm80.cuh's store_tile (see there why its
 * per-row and per-column work is hoisted: H200, 2026-12-03).
 */
#pragma once
#include "gemm_sm80.cuh"

namespace kiln {

/* gemm_sm80.cuh's store_tile Value: sum · scale · a · b, with a, b the row and column factors
 * in the caller's order (1.0f for an absent vector). */
struct Int8Value {
  using Row = float;
  struct Col {
    float c0, c1;
  };
  static KILN_DEVICE Row row(const kiln_int8_args &p, int row, bool in) {
    return p.row_scale && in ? p.row_scale[(int64_t)row * p.row_scale_stride] : 1.0f;
  }
  static KILN_DEVICE Col col(const kiln_int8_args &p, int col, bool both) {
    if (!p.col_scale) return {1.0f, 1.0f};
    const float *f = p.col_scale + (int64_t)col * p.col_scale_stride;
    return {f[0], both ? f[p.col_scale_stride] : 1.0f};
  }
  static KILN_DEVICE float value(int32_t sum, float scale, float a, float b) {
    const float s = __int2float_rn(sum); /* INT32_MIN converts exactly to -2^31: flip it */
    const float v = sum == INT32_MIN ? -s : s;
    return __fmul_rn(__fmul_rn(__fmul_rn(v, scale), a), b);
  }
  template <class OUT>
  static KILN_DEVICE void get(const kiln_int8_args &p, Row r, Col c, const OUT *, bool, int32_t a0, int32_t a1,
                              float &v0, float &v1) {
    const bool t = p.transposed;
    v0 = value(a0, p.scale, t ? c.c0 : r, t ? r : c.c0);
    v1 = value(a1, p.scale, t ? c.c1 : r, t ? r : c.c1);
  }
};

/* Int8Value where neither vector is given and K < 2^17: ((v · scale) · 1) · 1 is v · scale bit
 * for bit, and |sum| <= 2^14 · K < 2^31 never wraps to INT32_MIN, so a value is one convert and
 * one multiply instead of eight instructions. The WGMMA kernels' staged store picks it per launch
 * (WgmmaS8::store_staged): a quarter of the per-element work, and a smaller epilogue for a cold
 * start to fetch (docs/performance.md, "int8 after other kernels"). */
struct Int8ScaleValue : NoFactors<kiln_int8_args> {
  template <class OUT>
  static KILN_DEVICE void get(const kiln_int8_args &p, Row, Col, const OUT *, bool, int32_t a0, int32_t a1, float &v0,
                              float &v1) {
    v0 = __fmul_rn(__int2float_rn(a0), p.scale);
    v1 = __fmul_rn(__int2float_rn(a1), p.scale);
  }
};

/* Int8Value with a scale vector and K < 2^17: no INT32_MIN fix-up (as above), and the factors'
 * order (the caller's row factor first) fixed at compile time by TRANS = p.transposed instead of
 * two selects an element: four instructions a value instead of eight, the same bits. */
template <bool TRANS>
struct Int8LeanValue {
  using Row = Int8Value::Row;
  using Col = Int8Value::Col;
  static KILN_DEVICE Row row(const kiln_int8_args &p, int row, bool in) { return Int8Value::row(p, row, in); }
  static KILN_DEVICE Col col(const kiln_int8_args &p, int col, bool both) { return Int8Value::col(p, col, both); }
  static KILN_DEVICE float value(int32_t sum, float scale, float a, float b) {
    return __fmul_rn(__fmul_rn(__fmul_rn(__int2float_rn(sum), scale), a), b);
  }
  template <class OUT>
  static KILN_DEVICE void get(const kiln_int8_args &p, Row r, Col c, const OUT *, bool, int32_t a0, int32_t a1,
                              float &v0, float &v1) {
    v0 = value(a0, p.scale, TRANS ? c.c0 : r, TRANS ? r : c.c0);
    v1 = value(a1, p.scale, TRANS ? c.c1 : r, TRANS ? r : c.c1);
  }
};

struct StoreInt8 {
  template <int MT, int NT>
  static KILN_DEVICE void store(const int32_t (&acc)[MT][NT][4], const kiln_int8_args &p, void *C, int row0,
                                int col0, int lane) {
    store_tile<Int8Value>(acc, p, C, row0, col0, lane);
  }
};

} /* namespace kiln */
