/*
 * test_util.h — helpers shared by kiln's tests: cmocka includes, host tensors, random data,
 * the float64 reference GEMM, error norms, message assertions and the GPU skip.
 */
#ifndef KILN_TEST_UTIL_H
#define KILN_TEST_UTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln.h"

/* `program --filter NAME` runs the one cmocka test NAME: tests/CMakeLists.txt registers every
 * cmocka test as its own CTest test that way, so CTest's summary counts (and names) each one. */
static inline void test_apply_filter(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--filter")) cmocka_set_test_filter(argv[i + 1]);
}

/* Exit code CTest reports as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define KILN_TEST_SKIP 77

/* The status must be KILN_OK; otherwise the test fails showing the message. */
#define assert_kiln_ok(call)                                                                  \
  do {                                                                                        \
    kiln_status st_ = (call);                                                                 \
    if (st_ != KILN_OK) fail_msg("%s -> %s: %s", #call, kiln_status_string(st_), kiln_last_error()); \
  } while (0)

/* The call must fail with `status` and its message must contain every given fragment. */
#define assert_kiln_fails(call, status, ...)                                                  \
  do {                                                                                        \
    kiln_clear_error();                                                                       \
    kiln_status st_ = (call);                                                                 \
    if (st_ != (status))                                                                      \
      fail_msg("%s -> %s (expected %s): %s", #call, kiln_status_string(st_), kiln_status_string(status), \
               kiln_last_error());                                                            \
    const char *frags_[] = {__VA_ARGS__};                                                     \
    for (size_t i_ = 0; i_ < sizeof frags_ / sizeof frags_[0]; i_++)                          \
      if (!strstr(kiln_last_error(), frags_[i_]))                                             \
        fail_msg("%s: message \"%s\" lacks \"%s\"", #call, kiln_last_error(), frags_[i_]);    \
  } while (0)

/* A tensor description with its own shape/stride storage. */
typedef struct test_tensor {
  DLTensor t;
  int64_t shape[4], strides[4];
} test_tensor;

/* A compact row-major host tensor view of data. */
static inline test_tensor test_host_tensor(void *data, DLDataType dt, int ndim, const int64_t *shape) {
  test_tensor x;
  memset(&x, 0, sizeof x);
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    x.shape[d] = shape[d];
    x.strides[d] = s;
    s *= shape[d];
  }
  x.t.data = data;
  x.t.device = (DLDevice){kDLCPU, 0};
  x.t.ndim = ndim;
  x.t.dtype = dt;
  x.t.shape = x.shape;
  x.t.strides = x.strides;
  return x;
}
/* Re-points t.shape / t.strides at the struct's own arrays (after copying a test_tensor). */
static inline DLTensor *test_dl(test_tensor *x) {
  x->t.shape = x->shape;
  x->t.strides = x->strides;
  return &x->t;
}

static const DLDataType TEST_F32 = {kDLFloat, 32, 1}, TEST_F16 = {kDLFloat, 16, 1}, TEST_BF16 = {kDLBfloat, 16, 1};

static uint64_t test_rng_state = 0x2545F4914F6CDD1Dull;
static inline void test_seed(uint64_t s) { test_rng_state = s ? s : 1; }
static inline float test_uniform(void) { /* xorshift64*, uniform in [-1, 1) */
  uint64_t x = test_rng_state;
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  test_rng_state = x;
  return (float)((x * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

/* Random values rounded to dtype (f16/bf16 bit patterns or f32). */
static inline void test_fill(void *p, DLDataType dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = test_uniform();
    if (dt.bits == 32) ((float *)p)[i] = v;
    else if (dt.code == kDLBfloat) ((uint16_t *)p)[i] = kiln_f32_to_bf16(v);
    else ((uint16_t *)p)[i] = kiln_f32_to_f16(v);
  }
}
static inline double test_load(const void *p, DLDataType dt, int64_t i) {
  if (dt.bits == 32) return ((const float *)p)[i];
  if (dt.code == kDLBfloat) return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
  return kiln_f16_to_f32(((const uint16_t *)p)[i]);
}
/* Fills with NaN bit patterns, so any element a kernel does not write fails the check. */
static inline void test_poison(void *p, DLDataType dt, int64_t n) {
  if (dt.bits == 32)
    for (int64_t i = 0; i < n; i++) ((uint32_t *)p)[i] = 0x7fc00000u;
  else
    for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = dt.code == kDLBfloat ? 0x7fc0 : 0x7e00;
}

/* Relative Frobenius error ||x - ref|| / ||ref||; NaN anywhere in x gives INFINITY. */
static inline double test_rel_error(const double *x, const double *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(x[i])) return INFINITY;
    double d = x[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Skips the whole test program (exit 77) unless a CUDA device with kiln kernels is usable;
 * prints the reason so CTest's output says why. Returns the context otherwise. */
static inline kiln_context *test_gpu_context_or_skip(void) {
  if (!kiln_build_has_kernels()) {
    printf("SKIP: this build has no GPU kernels (built without nvcc)\n");
    exit(KILN_TEST_SKIP);
  }
  int n = 0;
  kiln_status st = kiln_device_count(&n);
  if (st != KILN_OK || n == 0) {
    printf("SKIP: no CUDA device: %s\n", st != KILN_OK ? kiln_last_error() : "the driver reports 0 devices");
    exit(KILN_TEST_SKIP);
  }
  kiln_context *ctx = NULL;
  st = kiln_context_create(kDLCUDA, 0, &ctx);
  if (st != KILN_OK) {
    printf("FAIL: a CUDA device exists but kiln_context_create failed: %s\n", kiln_last_error());
    exit(1);
  }
  return ctx;
}

#endif /* KILN_TEST_UTIL_H */
