/*
 * int8_quantize.cu — kiln_quantize_int8 on a GPU context, bit for bit the CPU's
 * (src/cpu/matmul_int8_cpu.c): scale = max |w| / 127 in f32 (1 for an all-zero column or tensor,
 * the smallest subnormal when the quotient underflows), q = w / scale rounded half to even and
 * clamped to [-127, 127].
 *
 * A one-time conversion: one thread per column reads its column twice (the maximum, then the
 * codes); adjacent threads read adjacent columns, coalesced for a row-major w. One scale for the
 * tensor takes four launches on the stream (kiln_abi.h, KILN_Q8_*): the columns' maxima meet in
 * scales[0] through atomicMax on their bit patterns (non-negative floats order as their bits, and
 * a maximum does not depend on the order), every column's codes then use that maximum, and a
 * last one-thread launch turns it into the scale.
 *
 * Non-finite weights, which the CPU refuses before writing, cannot be refused here without a
 * read back: they are left out of the maxima, and NaN gives code 0, ±infinity ±127.
 */
#include "common.cuh"

KILN_DEVICE float column_max(const kiln_int8_quant_args &a, int64_t n) {
  float m = 0.0f;
  for (int64_t k = 0; k < a.k; k++) {
    const float v = fabsf(kiln_load_as_f32(a.w, k * a.w_rs + n * a.w_cs, a.w_dtype));
    if (isfinite(v) && v > m) m = v;
  }
  return m;
}

KILN_DEVICE float scale_of(float max) {
  const float s = max > 0.0f ? max / 127.0f : 1.0f;
  return s == 0.0f ? 0x1p-149f : s;
}

KILN_DEVICE void write_codes(const kiln_int8_quant_args &a, int64_t n, float scale) {
  for (int64_t k = 0; k < a.k; k++) {
    float r = rintf(kiln_load_as_f32(a.w, k * a.w_rs + n * a.w_cs, a.w_dtype) / scale);
    r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r == r ? r : 0.0f;
    a.q[k * a.q_rs + n * a.q_cs] = (int8_t)r;
  }
}

extern "C" __global__ void __launch_bounds__(256) kiln_int8_quantize(const kiln_int8_quant_args a) {
  if (a.phase == KILN_Q8_ZERO || a.phase == KILN_Q8_SCALE) {
    if (blockIdx.x == 0 && threadIdx.x == 0) a.scales[0] = a.phase == KILN_Q8_ZERO ? 0.0f : scale_of(a.scales[0]);
    return;
  }
  for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < a.n; n += (int64_t)gridDim.x * blockDim.x) {
    if (a.phase == KILN_Q8_COLUMNS) {
      const float s = scale_of(column_max(a, n));
      a.scales[n * a.scales_stride] = s;
      write_codes(a, n, s);
    } else if (a.phase == KILN_Q8_MAX) {
      atomicMax((unsigned int *)a.scales, __float_as_uint(column_max(a, n)));
    } else {
      write_codes(a, n, scale_of(a.scales[0]));
    }
  }
}
