/*
 * half.c — host-side conversions between f32 and the two 16-bit float formats, IEEE binary16
 * (f16: 1 sign, 5 exponent bits of bias 15, 10 mantissa bits) and bfloat16 (bf16: the top 16 bits
 * of an f32: 1 sign, 8 exponent bits of bias 127, 7 mantissa bits).
 *
 * Why integers: the result must be the same on every host, whatever the FPU rounding mode, flush-
 * to-zero setting or compiler (_Float16 is not portable C17), so everything is done on the bit
 * patterns, read and written with memcpy (the defined way to reinterpret bits in C).
 *
 * The math:
 *   - Widening (f16 -> f32, bf16 -> f32) is exact: every f16/bf16 value is an f32 value. bf16 is
 *     a shift by 16. f16 normals re-bias the exponent (+112 = 127 - 15) and shift the mantissa
 *     left by 13; f16 subnormals (m * 2^-24) are normalized into f32 normals; exponent 31 maps to
 *     255 with the mantissa (the NaN payload) shifted along, so NaN stays NaN and keeps it.
 *   - Narrowing rounds to nearest, ties to even. For finite non-negative floats the bit pattern,
 *     read as an integer, is monotone in the value and consecutive patterns are consecutive
 *     values, also across a binade boundary (mantissa all ones + 1 carries into the exponent).
 *     So within the range where the target format has the same spacing as "the f32 pattern with
 *     its low k bits dropped" (bf16: all of it, k = 16; f16 normals: k = 13 after re-biasing),
 *     RNE is integer rounding of the pattern: keep the high bits, look at the dropped bits r;
 *     round up if r > half, or r == half and the kept lsb is 1. A carry out of the mantissa
 *     bumps the exponent, which is right (e.g. 0x3bff + 1 = 0x3c00 = 1.0), and a carry into the
 *     all-ones exponent yields exactly the infinity pattern with a zero mantissa: that is
 *     overflow per RNE (f16: 65520 = 65504 + half an ulp is a tie whose even neighbour is 2^16,
 *     so it goes to inf; 65519.99 goes to 65504).
 *   - f16 subnormals have a fixed spacing 2^-24: an f32 of exponent E < -14 is sig * 2^(E-23)
 *     with sig the 24-bit significand (implicit 1 included), so the f16 mantissa is
 *     sig * 2^(E+1) = sig >> (-E-1), rounded to nearest even on the bits shifted out. Rounding
 *     up to 1024 gives pattern 0x0400, the smallest normal, again by construction. Below 2^-25
 *     (half the smallest subnormal) everything, f32 subnormals included, becomes a signed zero;
 *     exactly 2^-25 is a tie and goes to the even neighbour, zero.
 *   - NaN is handled before rounding (adding a rounding increment to a NaN can produce inf).
 *     The sign and the top mantissa bits (the part of the payload that fits) are kept; if those
 *     bits are all zero (a payload only in the dropped low bits), the quiet bit is set so the
 *     result is a quiet NaN and never infinity. A NaN that survives the narrowing is otherwise
 *     kept bit for bit, so f16 -> f32 -> f16 and bf16 -> f32 -> bf16 are the identity for every
 *     pattern, NaNs included.
 */
#include <string.h>

#include "kiln.h"

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float kiln_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;

  if (exp == 0x1fu) { /* inf (mant == 0) or NaN: keep the payload */
    return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  }
  if (exp == 0) {
    if (mant == 0) {
      return f32_from_bits(sign); /* signed zero */
    }
    /* Subnormal mant * 2^-24: shift until the implicit bit (bit 10) is set. Starting at the f32
     * exponent of the smallest f16 normal (2^-14, biased 113), each shift halves the scale. */
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      e--;
    }
    return f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t kiln_f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;

  if (ax > 0x7f800000u) { /* NaN */
    uint32_t payload = (ax >> 13) & 0x3ffu;
    if (payload == 0) {
      payload = 0x200u; /* the payload was only in the dropped bits: quiet NaN, not inf */
    }
    return (uint16_t)(sign | 0x7c00u | payload);
  }
  if (ax >= 0x47800000u) { /* |f| >= 2^16 (inf included): beyond even the rounding range */
    return (uint16_t)(sign | 0x7c00u);
  }
  if (ax >= 0x38800000u) { /* |f| >= 2^-14: f16 normal range (or rounds up to inf) */
    uint32_t h = (ax - 0x38000000u) >> 13; /* re-bias by 112 << 23, drop 13 mantissa bits */
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
      h++; /* may carry into the exponent; 0x7bff + 1 = 0x7c00 = inf */
    }
    return (uint16_t)(sign | h);
  }
  /* Subnormal result: exponent E = (ax >> 23) - 127 < -14, value = sig * 2^(E-23),
   * f16 mantissa = sig >> shift with shift = -E - 1 = 126 - (ax >> 23), in [14, ...]. */
  uint32_t e = ax >> 23;
  if (e < 102u) { /* shift > 24: |f| < 2^-25, below half the smallest subnormal */
    return (uint16_t)sign;
  }
  uint32_t sig = (ax & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e; /* 14..24 */
  uint32_t m = sig >> shift;
  uint32_t rem = sig & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (m & 1u))) {
    m++; /* 0x3ff + 1 = 0x400: the smallest normal */
  }
  return (uint16_t)(sign | m);
}

float kiln_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t kiln_f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);

  if ((x & 0x7fffffffu) > 0x7f800000u) { /* NaN: keep sign and the top 7 payload bits */
    uint32_t r = x >> 16;
    if ((r & 0x7fu) == 0) {
      r |= 0x40u; /* payload only in the dropped bits: quiet NaN, not inf */
    }
    return (uint16_t)r;
  }
  /* RNE on the low 16 bits: add 0x7fff, plus 1 if the kept lsb is odd, then truncate. Cannot
   * overflow 32 bits: |x| <= 0x7f800000 and the increment is at most 0x8000. Works unchanged for
   * subnormals, for zeros, for inf (0x7f800000 has zero low bits) and for overflow
   * (0x7f7f8000 and above carry into 0x7f80 = inf). */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
