/*
 * test_half.c — exhaustive tests of kiln's host-side f16 / bf16 conversions.
 *
 * The references here are deliberately written another way than src/tensor/half.c: values are
 * computed in double from the bit fields (ldexp, frexp, floor), and rounding picks the nearer of
 * the two neighbouring representable values by an exact comparison of the fraction, ties to the
 * even neighbour. Widening is checked on all 65,536 patterns, narrowing on the round trip of all
 * patterns, on every midpoint between adjacent values and the floats just around it, and on a
 * fixed-seed random sweep of 10 million f32 bit patterns.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kiln.h"

#define MAX_REPORTED 10 /* failures printed per test; all are counted */
#define RANDOM_COUNT 10000000u

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */
/* ---------------------------------------------------------------------------------------- */
static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* A 16-bit float format: f16 (10 mantissa bits, bias 15) or bf16 (7 mantissa bits, bias 127). */
typedef struct format {
  const char *name;
  int mant_bits;
  int exp_bits;
  float (*to_f32)(uint16_t);
  uint16_t (*from_f32)(float);
} format;

static const format F16 = {"f16", 10, 5, kiln_f16_to_f32, kiln_f32_to_f16};
static const format BF16 = {"bf16", 7, 8, kiln_bf16_to_f32, kiln_f32_to_bf16};

static int bias_of(const format *fmt) { return (1 << (fmt->exp_bits - 1)) - 1; }
static uint32_t exp_max_field(const format *fmt) { return (1u << fmt->exp_bits) - 1u; }
static uint32_t exp_field(const format *fmt, uint16_t h) {
  return ((uint32_t)h >> fmt->mant_bits) & exp_max_field(fmt);
}
static uint32_t mant_field(const format *fmt, uint16_t h) { return h & ((1u << fmt->mant_bits) - 1u); }
static uint16_t sign_bit16(void) { return 0x8000u; }
static uint16_t inf_pattern(const format *fmt) { return (uint16_t)(exp_max_field(fmt) << fmt->mant_bits); }
static int is_nan16(const format *fmt, uint16_t h) {
  return exp_field(fmt, h) == exp_max_field(fmt) && mant_field(fmt, h) != 0;
}

/* The magnitude of a finite, non-negative pattern as a double, from the fields; the all-ones
 * exponent is read as if it were an ordinary one (used only for the value just past the largest
 * finite, 2^(emax+1)). */
static double unbounded_value(const format *fmt, uint16_t h) {
  uint32_t e = exp_field(fmt, h);
  uint32_t m = mant_field(fmt, h);
  int denorm_scale = 1 - bias_of(fmt) - fmt->mant_bits; /* f16: -24, bf16: -133 */
  if (e == 0) {
    return ldexp((double)m, denorm_scale);
  }
  return ldexp((double)((1u << fmt->mant_bits) | m), (int)e - 1 + denorm_scale);
}

/* Reference widening: the value of any pattern as a double (NaN and inf included). */
static double ref_to_double(const format *fmt, uint16_t h) {
  double sign = (h & sign_bit16()) ? -1.0 : 1.0;
  uint16_t mag = (uint16_t)(h & 0x7fffu);
  if (exp_field(fmt, mag) == exp_max_field(fmt)) {
    return mant_field(fmt, mag) ? copysign((double)NAN, sign) : sign * (double)INFINITY;
  }
  return sign * unbounded_value(fmt, mag);
}

/* The spacing of representable values at a non-negative finite pattern h (the gap to h + 1). */
static double ulp_at(const format *fmt, uint16_t h) {
  uint32_t e = exp_field(fmt, h);
  return ldexp(1.0, (e == 0 ? 1 : (int)e) - bias_of(fmt) - fmt->mant_bits);
}

/* Reference narrowing, by distances in double: finds the quantum q of the binade of |f|, the
 * neighbours n*q <= |f| < (n+1)*q, and picks by the exact fraction |f|/q - n (a power-of-two
 * scaling and a Sterbenz subtraction, both exact), ties to even n. Overflow: the largest finite
 * value (2 - 2^-p) * 2^emax has an odd mantissa, so the midpoint between it and 2^(emax+1)
 * (the next value with an unbounded exponent, even) rounds up to 2^(emax+1) which is not
 * representable: everything >= (2 - 2^-(p+1)) * 2^emax becomes infinity, the tie included.
 * Then the chosen value is encoded into fields with frexp. NaN: handled by the caller. */
static uint16_t ref_from_double(const format *fmt, float f) {
  int p = fmt->mant_bits;
  int emax = bias_of(fmt);
  int emin = 1 - bias_of(fmt);
  uint16_t sign = signbit(f) ? sign_bit16() : 0;
  double a = fabs((double)f);
  double overflow_at = ldexp(2.0 - ldexp(1.0, -(p + 1)), emax);
  if (a >= overflow_at) {
    return (uint16_t)(sign | inf_pattern(fmt));
  }
  int e2;
  (void)frexp(a, &e2); /* a = m * 2^e2, m in [0.5, 1): floor(log2 a) = e2 - 1 */
  int binade = (a < ldexp(1.0, emin)) ? emin : e2 - 1;
  double q = ldexp(1.0, binade - p);
  double scaled = a / q; /* exact: q is a power of two */
  double n = floor(scaled);
  double frac = scaled - n;
  if (frac > 0.5 || (frac == 0.5 && fmod(n, 2.0) != 0.0)) {
    n += 1.0;
  }
  double v = n * q;
  if (v == 0.0) {
    return sign;
  }
  if (v < ldexp(1.0, emin)) { /* subnormal: the mantissa is the count of smallest subnormals */
    return (uint16_t)(sign | (uint16_t)(v / ldexp(1.0, emin - p)));
  }
  (void)frexp(v, &e2); /* re-read: rounding may have moved v up to the next binade */
  int e = e2 - 1;
  uint32_t mant = (uint32_t)((ldexp(v, -e) - 1.0) * (double)(1u << p));
  return (uint16_t)(sign | ((uint32_t)(e + emax) << p) | mant);
}

/* Failure bookkeeping: print the first few, count all, assert at the end. */
typedef struct failures {
  unsigned count;
} failures;

#define CHECK(fl, cond, ...)                                                                             \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      if ((fl)->count < MAX_REPORTED) {                                                                  \
        print_error(__VA_ARGS__);                                                                        \
      }                                                                                                  \
      (fl)->count++;                                                                                     \
    }                                                                                                    \
  } while (0)

/* ---------------------------------------------------------------------------------------- */
/* Widening, exhaustive                                                                      */
/* ---------------------------------------------------------------------------------------- */
static void check_widen_exhaustive(const format *fmt) {
  failures fl = {0};
  for (uint32_t i = 0; i <= 0xffffu; i++) {
    uint16_t h = (uint16_t)i;
    float got = fmt->to_f32(h);
    double ref = ref_to_double(fmt, h);
    if (is_nan16(fmt, h)) {
      /* NaN with the same sign; the payload is kept in the top mantissa bits. */
      uint32_t gb = bits_of(got);
      uint32_t payload = (gb & 0x7fffffu) >> (23 - fmt->mant_bits);
      CHECK(&fl, isnan(got), "%s 0x%04x: expected NaN, got %a (0x%08x)\n", fmt->name, i, (double)got, gb);
      CHECK(&fl, (signbit(got) != 0) == ((h & 0x8000u) != 0), "%s 0x%04x: NaN sign lost (0x%08x)\n", fmt->name, i, gb);
      CHECK(&fl, payload == mant_field(fmt, h) && (gb & ((1u << (23 - fmt->mant_bits)) - 1u)) == 0,
            "%s 0x%04x: NaN payload not kept (0x%08x)\n", fmt->name, i, gb);
    } else {
      /* (float)ref is exact: every f16 / bf16 value is an f32 value. Compare bits (signed zeros). */
      float reff = (float)ref;
      CHECK(&fl, (double)reff == ref, "%s 0x%04x: reference %a not exact in f32\n", fmt->name, i, ref);
      CHECK(&fl, bits_of(got) == bits_of(reff), "%s 0x%04x: got %a (0x%08x), expected %a (0x%08x)\n", fmt->name,
            i, (double)got, bits_of(got), ref, bits_of(reff));
    }
  }
  assert_int_equal(fl.count, 0);
}

static void test_f16_to_f32_exhaustive(void **state) {
  (void)state;
  check_widen_exhaustive(&F16);
}

static void test_bf16_to_f32_exhaustive(void **state) {
  (void)state;
  check_widen_exhaustive(&BF16);
}

/* ---------------------------------------------------------------------------------------- */
/* Round trip, exhaustive                                                                    */
/* ---------------------------------------------------------------------------------------- */
static void check_round_trip(const format *fmt) {
  failures fl = {0};
  for (uint32_t i = 0; i <= 0xffffu; i++) {
    uint16_t h = (uint16_t)i;
    uint16_t back = fmt->from_f32(fmt->to_f32(h));
    if (is_nan16(fmt, h)) {
      CHECK(&fl, is_nan16(fmt, back) && (back & 0x8000u) == (h & 0x8000u),
            "%s 0x%04x: NaN round trip gave 0x%04x\n", fmt->name, i, back);
    }
    /* Every pattern, NaN included (its payload fits both ways), comes back bit for bit. */
    CHECK(&fl, back == h, "%s 0x%04x: round trip gave 0x%04x\n", fmt->name, i, back);
  }
  assert_int_equal(fl.count, 0);
}

static void test_f16_round_trip_exhaustive(void **state) {
  (void)state;
  check_round_trip(&F16);
}

static void test_bf16_round_trip_exhaustive(void **state) {
  (void)state;
  check_round_trip(&BF16);
}

/* ---------------------------------------------------------------------------------------- */
/* Rounding at every midpoint, exhaustive                                                    */
/* ---------------------------------------------------------------------------------------- */
/* For every finite non-negative pattern h and its upper neighbour h + 1 (the last one's is
 * infinity), both signs: the exact midpoint goes to the even one of the two, the float just
 * above it (in magnitude) to h + 1 and the float just below it to h. */
static void check_midpoints(const format *fmt) {
  failures fl = {0};
  uint16_t inf = inf_pattern(fmt);
  for (uint32_t i = 0; i < inf; i++) {
    uint16_t lo = (uint16_t)i;
    uint16_t hi = (uint16_t)(i + 1);
    double mid = unbounded_value(fmt, lo) + 0.5 * ulp_at(fmt, lo);
    float midf = (float)mid;
    CHECK(&fl, (double)midf == mid, "%s 0x%04x: midpoint %a not exact in f32\n", fmt->name, i, mid);
    uint16_t even = (lo & 1u) ? hi : lo;
    float above = nextafterf(midf, INFINITY);
    float below = nextafterf(midf, 0.0f);
    for (int s = 0; s < 2; s++) {
      uint16_t sg = s ? sign_bit16() : 0;
      float k = s ? -1.0f : 1.0f;
      uint16_t got_mid = fmt->from_f32(k * midf);
      uint16_t got_above = fmt->from_f32(k * above);
      uint16_t got_below = fmt->from_f32(k * below);
      CHECK(&fl, got_mid == (sg | even), "%s: midpoint %a of 0x%04x/0x%04x gave 0x%04x, expected 0x%04x\n",
            fmt->name, (double)(k * midf), sg | lo, sg | hi, got_mid, sg | even);
      CHECK(&fl, got_above == (sg | hi), "%s: %a (just above the midpoint of 0x%04x/0x%04x) gave 0x%04x\n",
            fmt->name, (double)(k * above), sg | lo, sg | hi, got_above);
      CHECK(&fl, got_below == (sg | lo), "%s: %a (just below the midpoint of 0x%04x/0x%04x) gave 0x%04x\n",
            fmt->name, (double)(k * below), sg | lo, sg | hi, got_below);
    }
  }
  assert_int_equal(fl.count, 0);
}

static void test_f32_to_f16_midpoints(void **state) {
  (void)state;
  check_midpoints(&F16);
}

static void test_f32_to_bf16_midpoints(void **state) {
  (void)state;
  check_midpoints(&BF16);
}

/* ---------------------------------------------------------------------------------------- */
/* Random sweep against the double-based reference                                          */
/* ---------------------------------------------------------------------------------------- */
static uint64_t xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *s = x;
  return x;
}

static void check_random(const format *fmt) {
  failures fl = {0};
  uint64_t state = 0x9e3779b97f4a7c15ull; /* fixed seed: reproducible */
  int drop = 23 - fmt->mant_bits;
  for (uint32_t i = 0; i < RANDOM_COUNT; i++) {
    uint32_t u = (uint32_t)(xorshift64(&state) >> 32);
    float f = float_of(u);
    uint16_t got = fmt->from_f32(f);
    uint16_t ref;
    if (isnan(f)) {
      /* Sign and the top payload bits are kept; a payload only in the dropped bits becomes the
       * quiet NaN (never infinity). */
      uint32_t payload = (u & 0x7fffffu) >> drop;
      if (payload == 0) {
        payload = 1u << (fmt->mant_bits - 1);
      }
      ref = (uint16_t)(((u >> 31) << 15) | inf_pattern(fmt) | payload);
    } else {
      ref = ref_from_double(fmt, f);
    }
    CHECK(&fl, got == ref, "%s: f32 0x%08x (%a) gave 0x%04x, expected 0x%04x\n", fmt->name, u, (double)f, got, ref);
  }
  assert_int_equal(fl.count, 0);
}

static void test_f32_to_f16_random(void **state) {
  (void)state;
  check_random(&F16);
}

static void test_f32_to_bf16_random(void **state) {
  (void)state;
  check_random(&BF16);
}

/* The reference itself, on a few values whose answer is known by hand, so that a wrong
 * reference cannot hide a wrong implementation. */
static void test_reference_self_check(void **state) {
  (void)state;
  assert_int_equal(ref_from_double(&F16, 1.0f), 0x3c00);
  assert_int_equal(ref_from_double(&F16, 65504.0f), 0x7bff);
  assert_int_equal(ref_from_double(&F16, 65520.0f), 0x7c00);
  assert_int_equal(ref_from_double(&F16, nextafterf(65520.0f, 0.0f)), 0x7bff);
  assert_int_equal(ref_from_double(&F16, -0.0f), 0x8000);
  assert_int_equal(ref_from_double(&F16, ldexpf(1.0f, -25)), 0x0000);
  assert_int_equal(ref_from_double(&F16, ldexpf(3.0f, -26)), 0x0001);
  assert_int_equal(ref_from_double(&F16, ldexpf(1.0f, -14) - ldexpf(1.0f, -25)), 0x0400);
  assert_int_equal(ref_from_double(&F16, 0.1f), 0x2e66);
  assert_int_equal(ref_from_double(&BF16, 1.00390625f), 0x3f80);
  assert_int_equal(ref_from_double(&BF16, 1.01171875f), 0x3f82);
  assert_int_equal(ref_from_double(&BF16, float_of(0x7f7fffffu)), 0x7f80);
  assert_int_equal(ref_from_double(&BF16, float_of(0x00008001u)), 0x0001);
}

/* ---------------------------------------------------------------------------------------- */
/* Special values                                                                            */
/* ---------------------------------------------------------------------------------------- */
static void test_f16_special_values(void **state) {
  (void)state;
  /* f32 -> f16 */
  assert_int_equal(kiln_f32_to_f16(0.0f), 0x0000);
  assert_int_equal(kiln_f32_to_f16(-0.0f), 0x8000);
  assert_int_equal(kiln_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(kiln_f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(kiln_f32_to_f16(0.5f), 0x3800);
  assert_int_equal(kiln_f32_to_f16(0.1f), 0x2e66);
  assert_int_equal(kiln_f32_to_f16(1.0f / 3.0f), 0x3555);
  assert_int_equal(kiln_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(kiln_f32_to_f16(-65504.0f), 0xfbff);
  assert_int_equal(kiln_f32_to_f16(65519.99f), 0x7bff);
  assert_int_equal(kiln_f32_to_f16(65520.0f), 0x7c00);
  assert_int_equal(kiln_f32_to_f16(-65520.0f), 0xfc00);
  assert_int_equal(kiln_f32_to_f16(65536.0f), 0x7c00);
  assert_int_equal(kiln_f32_to_f16(1e10f), 0x7c00);
  assert_int_equal(kiln_f32_to_f16(float_of(0x7f7fffffu)), 0x7c00); /* FLT_MAX */
  assert_int_equal(kiln_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);     /* smallest normal */
  assert_int_equal(kiln_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);     /* smallest subnormal */
  assert_int_equal(kiln_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);     /* tie: to even, zero */
  assert_int_equal(kiln_f32_to_f16(-ldexpf(1.0f, -25)), 0x8000);
  assert_int_equal(kiln_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001);
  assert_int_equal(kiln_f32_to_f16(ldexpf(3.0f, -26)), 0x0001);      /* 0.75 * 2^-24 */
  assert_int_equal(kiln_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);      /* 1.5 * 2^-24: tie, to even */
  assert_int_equal(kiln_f32_to_f16(ldexpf(5.0f, -25)), 0x0002);      /* 2.5 * 2^-24: tie, to even */
  assert_int_equal(kiln_f32_to_f16(ldexpf(1023.0f, -24)), 0x03ff);   /* largest subnormal */
  assert_int_equal(kiln_f32_to_f16(ldexpf(2047.0f, -25)), 0x0400);   /* rounds up into normals */
  assert_int_equal(kiln_f32_to_f16(ldexpf(1.0f, -26)), 0x0000);
  assert_int_equal(kiln_f32_to_f16(float_of(0x00000001u)), 0x0000);  /* f32 subnormals */
  assert_int_equal(kiln_f32_to_f16(float_of(0x807fffffu)), 0x8000);
  assert_int_equal(kiln_f32_to_f16(2049.0f), 0x6800);                /* tie at 2048 + 1: to 2048 */
  assert_int_equal(kiln_f32_to_f16(2051.0f), 0x6802);                /* tie at 2050 + 1: to 2052 */
  assert_int_equal(kiln_f32_to_f16(INFINITY), 0x7c00);
  assert_int_equal(kiln_f32_to_f16(-INFINITY), 0xfc00);
  assert_int_equal(kiln_f32_to_f16(float_of(0x7fc00000u)), 0x7e00);  /* quiet NaN */
  assert_int_equal(kiln_f32_to_f16(float_of(0xffc00000u)), 0xfe00);
  assert_int_equal(kiln_f32_to_f16(float_of(0x7f800001u)), 0x7e00);  /* payload dropped: quiet, not inf */
  assert_int_equal(kiln_f32_to_f16(float_of(0xff801fffu)), 0xfe00);
  assert_int_equal(kiln_f32_to_f16(float_of(0x7f802000u)), 0x7c01);  /* payload kept */
  assert_int_equal(kiln_f32_to_f16(float_of(0x7fffffffu)), 0x7fff);
  assert_true(isnan(kiln_f16_to_f32(kiln_f32_to_f16(NAN))));

  /* f16 -> f32 */
  assert_true(bits_of(kiln_f16_to_f32(0x0000)) == 0x00000000u);
  assert_true(bits_of(kiln_f16_to_f32(0x8000)) == 0x80000000u);
  assert_true(kiln_f16_to_f32(0x3c00) == 1.0f);
  assert_true(kiln_f16_to_f32(0xc000) == -2.0f);
  assert_true(kiln_f16_to_f32(0x7bff) == 65504.0f);
  assert_true(kiln_f16_to_f32(0x0400) == ldexpf(1.0f, -14));
  assert_true(kiln_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
  assert_true(kiln_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
  assert_true(kiln_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
  assert_true(kiln_f16_to_f32(0x0200) == ldexpf(1.0f, -15));
  assert_true(kiln_f16_to_f32(0x7c00) == INFINITY);
  assert_true(kiln_f16_to_f32(0xfc00) == -INFINITY);
  assert_true(isnan(kiln_f16_to_f32(0x7e00)) && !signbit(kiln_f16_to_f32(0x7e00)));
  assert_true(isnan(kiln_f16_to_f32(0xfc01)) && signbit(kiln_f16_to_f32(0xfc01)));
  assert_true(bits_of(kiln_f16_to_f32(0x7e00)) == 0x7fc00000u);
}

static void test_bf16_special_values(void **state) {
  (void)state;
  /* f32 -> bf16 */
  assert_int_equal(kiln_f32_to_bf16(0.0f), 0x0000);
  assert_int_equal(kiln_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(kiln_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(kiln_f32_to_bf16(-2.0f), 0xc000);
  assert_int_equal(kiln_f32_to_bf16(1.00390625f), 0x3f80);           /* 1 + 2^-8: tie, to even */
  assert_int_equal(kiln_f32_to_bf16(nextafterf(1.00390625f, 2.0f)), 0x3f81);
  assert_int_equal(kiln_f32_to_bf16(1.01171875f), 0x3f82);           /* 1 + 3*2^-8: tie, to even */
  assert_int_equal(kiln_f32_to_bf16(0.1f), 0x3dcd);
  assert_int_equal(kiln_f32_to_bf16(65504.0f), 0x4780);              /* 65504 -> 65536 in bf16 */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7f7f0000u)), 0x7f7f); /* largest finite bf16 */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7f7f7fffu)), 0x7f7f);
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7f7f8000u)), 0x7f80); /* tie past the largest: inf */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80); /* FLT_MAX */
  assert_int_equal(kiln_f32_to_bf16(float_of(0xff7fffffu)), 0xff80);
  assert_int_equal(kiln_f32_to_bf16(float_of(0x00000001u)), 0x0000); /* f32 subnormals */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x00008000u)), 0x0000); /* tie, to even */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x00008001u)), 0x0001);
  assert_int_equal(kiln_f32_to_bf16(float_of(0x00018000u)), 0x0002); /* tie, to even */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x007f8000u)), 0x0080); /* into the smallest normal */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x807fffffu)), 0x8080);
  assert_int_equal(kiln_f32_to_bf16(INFINITY), 0x7f80);
  assert_int_equal(kiln_f32_to_bf16(-INFINITY), 0xff80);
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7fc00000u)), 0x7fc0); /* quiet NaN */
  assert_int_equal(kiln_f32_to_bf16(float_of(0xffc00000u)), 0xffc0);
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7f800001u)), 0x7fc0); /* payload dropped: quiet, not inf */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7f80ffffu)), 0x7fc0); /* would round to inf by RNE */
  assert_int_equal(kiln_f32_to_bf16(float_of(0xff80ffffu)), 0xffc0);
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7f810000u)), 0x7f81); /* payload kept */
  assert_int_equal(kiln_f32_to_bf16(float_of(0x7fffffffu)), 0x7fff); /* no carry out of the NaN */
  assert_int_equal(kiln_f32_to_bf16(float_of(0xffffffffu)), 0xffff);
  assert_true(isnan(kiln_bf16_to_f32(kiln_f32_to_bf16(NAN))));

  /* bf16 -> f32 */
  assert_true(bits_of(kiln_bf16_to_f32(0x8000)) == 0x80000000u);
  assert_true(kiln_bf16_to_f32(0x3f80) == 1.0f);
  assert_true(kiln_bf16_to_f32(0x0001) == ldexpf(1.0f, -133));
  assert_true(kiln_bf16_to_f32(0x7f80) == INFINITY);
  assert_true(kiln_bf16_to_f32(0xff80) == -INFINITY);
  assert_true(isnan(kiln_bf16_to_f32(0xffc1)) && signbit(kiln_bf16_to_f32(0xffc1)));
  assert_true(bits_of(kiln_bf16_to_f32(0x7f81)) == 0x7f810000u);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_self_check),
      cmocka_unit_test(test_f16_special_values),
      cmocka_unit_test(test_bf16_special_values),
      cmocka_unit_test(test_f16_to_f32_exhaustive),
      cmocka_unit_test(test_bf16_to_f32_exhaustive),
      cmocka_unit_test(test_f16_round_trip_exhaustive),
      cmocka_unit_test(test_bf16_round_trip_exhaustive),
      cmocka_unit_test(test_f32_to_f16_midpoints),
      cmocka_unit_test(test_f32_to_bf16_midpoints),
      cmocka_unit_test(test_f32_to_f16_random),
      cmocka_unit_test(test_f32_to_bf16_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
