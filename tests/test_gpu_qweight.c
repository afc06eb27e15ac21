/*
 * test_gpu_qweight.c — kiln_qweight on a CUDA context (kernels/qweight.cu) against the CPU
 * context, whose results test_qweight_host.c checks against each source format's own formula.
 * Bit for bit:
 *   - the importers: reference ([K/8, N] N-major and [N, K/8]), GPTQ v1 / v2 (no g_idx, a
 *     trivial one, act-order) and AWQ, on random packed words at padded strides, K up to 28672
 *     with G = 32 (896 groups for the sort);
 *   - the quantizer: f32 / f16 / bf16, symmetric and asymmetric, every group size, [K, N] and
 *     the transposed view of an [N, K] weight, with an all-zero group and a group whose scale
 *     underflows f16;
 *   - the dequantizer: f32 / f16 / bf16 outputs, row- and column-major, zero points 0..16.
 * An invalid g_idx (out-of-range indices, groups of the wrong size), which only the CPU refuses,
 * must still give a permutation in perm. Every device output lies between guard bytes that
 * must stay untouched, and starts as a poison pattern. Exits 77 without a GPU.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln.h"
#include "test_util.h"

static kiln_context *g_gpu, *g_cpu;
static CUstream g_stream;
static const DLDataType U8 = {kDLUInt, 8, 1}, I32 = {kDLInt, 32, 1}, U32 = {kDLUInt, 32, 1};

static uint64_t rng = 0xD1B54A32D192ED03ull;
static uint32_t rnd(void) {
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

/* ---------------------------------------------------------------------------------------- */
/* Device buffers between guards                                                             */
/* ---------------------------------------------------------------------------------------- */
#define GUARD 512
#define FILL 0xA5
typedef struct dbuf {
  DLManagedTensorVersioned *t;
  size_t bytes;
  unsigned char *host; /* GUARD + bytes + GUARD */
} dbuf;
static void copy_bytes(DLTensor *dst, DLTensor *src, size_t bytes) {
  (void)bytes;
  assert_kiln_ok(kiln_tensor_copy(g_gpu, src, dst, g_stream));
}
/* bytes of device memory holding `init` (or FILL where init is NULL) between FILL guards */
static void *dbuf_new(dbuf *b, const void *init, size_t bytes) {
  b->bytes = bytes;
  const int64_t n = (int64_t)(bytes + 2 * GUARD);
  b->host = malloc((size_t)n);
  memset(b->host, FILL, (size_t)n);
  if (init) memcpy(b->host + GUARD, init, bytes);
  assert_kiln_ok(kiln_tensor_empty(g_gpu, 1, &n, U8, &b->t));
  test_tensor h = test_host_tensor(b->host, U8, 1, &n);
  copy_bytes(&b->t->dl_tensor, test_dl(&h), (size_t)n);
  return (unsigned char *)b->t->dl_tensor.data + GUARD;
}
/* Downloads the buffer and checks its guards; returns the host copy of its bytes. */
static const unsigned char *dbuf_fetch(dbuf *b, const char *what) {
  const int64_t n = (int64_t)(b->bytes + 2 * GUARD);
  test_tensor h = test_host_tensor(b->host, U8, 1, &n);
  copy_bytes(test_dl(&h), &b->t->dl_tensor, (size_t)n);
  assert_kiln_ok(kiln_stream_synchronize(g_gpu, g_stream));
  for (size_t i = 0; i < GUARD; i++)
    if (b->host[i] != FILL || b->host[GUARD + b->bytes + i] != FILL)
      fail_msg("%s: a byte %s the buffer was written", what, b->host[i] != FILL ? "before" : "after");
  return b->host + GUARD;
}
static void dbuf_free(dbuf *b) {
  b->t->deleter(b->t);
  free(b->host);
}

/* A tensor over device memory p: dtype, shape and element strides. */
static test_tensor dev_tensor(void *p, DLDataType dt, int ndim, const int64_t *shape, const int64_t *strides) {
  test_tensor t = test_host_tensor(p, dt, ndim, shape);
  if (strides)
    for (int d = 0; d < ndim; d++) t.strides[d] = strides[d];
  t.t.device = (DLDevice){kDLCUDA, 0};
  return t;
}

/* Native buffers: on the host (for the CPU context) or on the device (between guards). */
typedef struct native {
  kiln_qweight q;
  size_t bytes[4];
  dbuf d[4];
  bool dev;
} native;
static void native_new(native *b, int64_t k, int64_t n, int64_t g, bool perm, bool dev) {
  memset(b, 0, sizeof *b);
  assert_kiln_ok(kiln_qweight_bytes(k, n, g, &b->bytes[0], &b->bytes[1], &b->bytes[2], &b->bytes[3]));
  b->q.k = k, b->q.n = n, b->q.group = g;
  b->dev = dev;
  void *p[4];
  for (int i = 0; i < 4; i++) {
    if (i == 3 && !perm) {
      p[i] = NULL;
      continue;
    }
    if (dev) {
      p[i] = dbuf_new(&b->d[i], NULL, b->bytes[i]);
    } else {
      p[i] = malloc(b->bytes[i]);
      memset(p[i], FILL, b->bytes[i]);
    }
  }
  b->q.codes = p[0], b->q.scales = p[1], b->q.zeros = p[2], b->q.perm = p[3];
  b->q.device = dev ? (DLDevice){kDLCUDA, 0} : (DLDevice){kDLCPU, 0};
}
static const void *native_part(native *b, int i) {
  static const char *names[4] = {"codes", "scales", "zeros", "perm"};
  const void *p[4] = {b->q.codes, b->q.scales, b->q.zeros, b->q.perm};
  return b->dev ? dbuf_fetch(&b->d[i], names[i]) : p[i];
}
/* The device weight's buffers equal the host one's, byte for byte. */
static void native_expect_equal(native *dev, native *host, const char *what) {
  static const char *names[4] = {"codes", "scales", "zeros", "perm"};
  for (int i = 0; i < 4; i++) {
    if (!host->q.perm && i == 3) continue;
    const unsigned char *a = native_part(dev, i), *e = native_part(host, i);
    for (size_t j = 0; j < host->bytes[i]; j++)
      if (a[j] != e[j])
        fail_msg("%s: %s byte %zu is 0x%02x on the GPU, 0x%02x on the CPU (k %" PRId64 ", n %" PRId64 ", group %" PRId64
                 ")",
                 what, names[i], j, a[j], e[j], host->q.k, host->q.n, host->q.group);
  }
}
static void native_free(native *b) {
  if (b->dev) {
    for (int i = 0; i < 4; i++)
      if (b->d[i].t) dbuf_free(&b->d[i]);
  } else {
    free(b->q.codes), free(b->q.scales), free(b->q.zeros), free(b->q.perm);
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Importers                                                                                 */
/* ---------------------------------------------------------------------------------------- */
enum { GIDX_NONE, GIDX_TRIVIAL, GIDX_ACT_ORDER, GIDX_INVALID };

/* A random source matrix of 32-bit words [rows, cols] at row stride ld (>= cols). */
static uint32_t *random_words(int64_t rows, int64_t ld) {
  uint32_t *w = malloc(4 * (size_t)(rows * ld));
  for (int64_t i = 0; i < rows * ld; i++) w[i] = rnd();
  return w;
}

/* One import on both contexts. pad: extra words per source row (strided sources); nk: the
 * reference format's qweight as [N, K/8] row-major instead of [K/8, N] N-major. */
static void import_case(kiln_qformat f, int64_t K, int64_t N, int64_t G, int gidx, bool perm, int64_t pad, bool nk) {
  const int64_t NG = K / G;
  const bool ref = f == KILN_QFORMAT_REFERENCE, awq = f == KILN_QFORMAT_AWQ;
  /* qweight's logical shape, and its host words */
  int64_t qr = ref ? K / 8 : awq ? K : K / 8, qc = ref ? N : awq ? N / 8 : N;
  if (ref) pad = 0; /* one dense buffer */
  const int64_t qld = qc + pad;
  uint32_t *qw = random_words(qr, qld), *qz = random_words(NG, N / 8 + pad);
  uint16_t *sc = malloc(2 * (size_t)(NG * (N + pad)));
  for (int64_t i = 0; i < NG * (N + pad); i++) sc[i] = (uint16_t)rnd(); /* bits, copied as they are */
  int32_t *gi = malloc(4 * (size_t)K);
  for (int64_t k = 0; k < K; k++) gi[k] = (int32_t)(k / G);
  if (gidx == GIDX_ACT_ORDER || gidx == GIDX_INVALID)
    for (int64_t k = K - 1; k > 0; k--) { /* shuffle: every group keeps G rows */
      const int64_t j = rnd() % (uint32_t)(k + 1);
      const int32_t t = gi[k];
      gi[k] = gi[j], gi[j] = t;
    }
  if (gidx == GIDX_INVALID) {
    gi[0] = -3, gi[K / 2] = (int32_t)NG, gi[K - 1] = INT32_MAX; /* out of range */
    gi[1] = gi[2];                                               /* one group one row short, one long */
  }

  /* the same sources on the device */
  dbuf dq, dz, ds, di;
  void *pq = dbuf_new(&dq, qw, 4 * (size_t)(qr * qld)), *pz = dbuf_new(&dz, qz, 4 * (size_t)(NG * (N / 8 + pad)));
  void *ps = dbuf_new(&ds, sc, 2 * (size_t)(NG * (N + pad))), *pi = dbuf_new(&di, gi, 4 * (size_t)K);
  const DLDataType wdt = rnd() % 2 ? I32 : U32;
  test_tensor hq = test_host_tensor(qw, wdt, 2, (int64_t[]){qr, qc}), gq;
  hq.strides[0] = qld;
  if (ref && nk) {
    hq = test_host_tensor(qw, wdt, 2, (int64_t[]){N, K / 8});
    gq = dev_tensor(pq, wdt, 2, (int64_t[]){N, K / 8}, NULL);
  } else if (ref) { /* labelled [K/8, N], bytes N-major: the honest column-major strides */
    hq.strides[0] = 1, hq.strides[1] = K / 8;
    gq = dev_tensor(pq, wdt, 2, (int64_t[]){K / 8, N}, (int64_t[]){1, K / 8});
  } else {
    gq = dev_tensor(pq, wdt, 2, (int64_t[]){qr, qc}, (int64_t[]){qld, 1});
  }
  test_tensor hz = test_host_tensor(qz, I32, 2, (int64_t[]){NG, N / 8});
  hz.strides[0] = N / 8 + pad;
  test_tensor gz = dev_tensor(pz, I32, 2, (int64_t[]){NG, N / 8}, (int64_t[]){N / 8 + pad, 1});
  test_tensor hs = test_host_tensor(sc, TEST_F16, 2, (int64_t[]){NG, N});
  hs.strides[0] = N + pad;
  test_tensor gs = dev_tensor(ps, TEST_F16, 2, (int64_t[]){NG, N}, (int64_t[]){N + pad, 1});
  test_tensor hi = test_host_tensor(gi, I32, 1, (int64_t[]){K}), gidx_dev = dev_tensor(pi, I32, 1, (int64_t[]){K}, NULL);
  const bool has_z = !ref, has_i = gidx != GIDX_NONE;

  native gpu, cpu;
  native_new(&gpu, K, N, G, perm, true);
  assert_kiln_ok(kiln_qweight_import(g_gpu, f, test_dl(&gq), has_z ? test_dl(&gz) : NULL, test_dl(&gs),
                                     has_i ? test_dl(&gidx_dev) : NULL, &gpu.q, g_stream));
  char what[128];
  snprintf(what, sizeof what, "import format %d, g_idx kind %d, perm %d, pad %" PRId64 "%s", (int)f, gidx, perm, pad,
           nk ? ", [N, K/8]" : "");
  if (gidx == GIDX_INVALID) {
    native_new(&cpu, K, N, G, perm, false);
    assert_kiln_fails(kiln_qweight_import(g_cpu, f, test_dl(&hq), test_dl(&hz), test_dl(&hs), test_dl(&hi), &cpu.q,
                                          NULL),
                      KILN_ERROR_INVALID_ARGUMENT, "kiln_qweight_import: g_idx[0] = -3");
    native_free(&cpu);
    /* the GPU cannot refuse it: perm must still be a permutation, every buffer within bounds */
    const int32_t *p = (const int32_t *)native_part(&gpu, 3);
    unsigned char *seen = calloc((size_t)K, 1);
    for (int64_t i = 0; i < K; i++) {
      if (p[i] < 0 || p[i] >= K || seen[p[i]]) fail_msg("%s: perm[%" PRId64 "] = %d is not a permutation", what, i, p[i]);
      seen[p[i]] = 1;
    }
    free(seen);
    for (int i = 0; i < 3; i++) native_part(&gpu, i); /* guards */
  } else {
    native_new(&cpu, K, N, G, perm, false);
    assert_kiln_ok(kiln_qweight_import(g_cpu, f, test_dl(&hq), has_z ? test_dl(&hz) : NULL, test_dl(&hs),
                                       has_i ? test_dl(&hi) : NULL, &cpu.q, NULL));
    native_expect_equal(&gpu, &cpu, what);
    native_free(&cpu);
  }
  native_free(&gpu);
  dbuf_free(&dq), dbuf_free(&dz), dbuf_free(&ds), dbuf_free(&di);
  free(qw), free(qz), free(sc), free(gi);
}

static const int64_t SHAPES[][3] = {{64, 8, 32}, {256, 24, 64}, {384, 40, 128}, {1024, 16, 1024}, {4096, 256, 128}};

static void import_formats(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
    const int64_t K = SHAPES[s][0], N = SHAPES[s][1], G = SHAPES[s][2];
    for (int f = KILN_QFORMAT_GPTQ_V1; f <= KILN_QFORMAT_AWQ; f++)
      for (int perm = 0; perm < 2; perm++) import_case((kiln_qformat)f, K, N, G, GIDX_NONE, perm, s % 2 ? 8 : 0, false);
    if (G == 128)
      for (int nk = 0; nk < 2; nk++) import_case(KILN_QFORMAT_REFERENCE, K, N + 5, 128, GIDX_NONE, nk, 0, nk);
  }
}

static void import_act_order(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
    for (int f = KILN_QFORMAT_GPTQ_V1; f <= KILN_QFORMAT_GPTQ_V2; f++) {
      const int64_t K = SHAPES[s][0], N = SHAPES[s][1], G = SHAPES[s][2];
      import_case((kiln_qformat)f, K, N, G, GIDX_TRIVIAL, true, 0, false);
      import_case((kiln_qformat)f, K, N, G, GIDX_ACT_ORDER, true, s % 2 ? 8 : 0, false);
    }
  import_case(KILN_QFORMAT_GPTQ_V2, 28672, 8, 32, GIDX_ACT_ORDER, true, 0, false); /* 896 groups */
}

static void import_invalid_g_idx(void **state) {
  (void)state;
  import_case(KILN_QFORMAT_GPTQ_V1, 256, 16, 32, GIDX_INVALID, true, 0, false);
  import_case(KILN_QFORMAT_GPTQ_V2, 4096, 8, 128, GIDX_INVALID, true, 8, false);
}

/* ---------------------------------------------------------------------------------------- */
/* Quantizer and dequantizer                                                                 */
/* ---------------------------------------------------------------------------------------- */
static void quantize_case(DLDataType dt, int64_t K, int64_t N, int64_t G, int sym, bool transposed) {
  const size_t es = dt.bits / 8;
  unsigned char *w = malloc(es * (size_t)(K * N));
  test_fill(w, dt, K * N);
  /* stored [K, N] (or [N, K]); element (k, n) at k·rs + n·cs */
  const int64_t rs = transposed ? 1 : N, cs = transposed ? K : 1;
  for (int64_t k = 0; k < G; k++) memset(w + es * (size_t)(k * rs), 0, es); /* column 0, group 0: all zero */
  if (N > 1)
    for (int64_t k = 0; k < G; k++) { /* column 1, group 0: a scale below f16's smallest subnormal */
      const float v = 1e-9f * (float)(k % 5 - 2);
      unsigned char *e = w + es * (size_t)(k * rs + cs);
      if (dt.bits == 32) memcpy(e, &v, 4);
      else memset(e, 0, 2); /* 16-bit inputs cannot hold 1e-9 (bf16 can, but keep it simple): zeros */
    }
  dbuf dw;
  void *pw = dbuf_new(&dw, w, es * (size_t)(K * N));
  const int64_t shape[2] = {K, N}, strides[2] = {rs, cs};
  test_tensor hw = test_host_tensor(w, dt, 2, shape), gw = dev_tensor(pw, dt, 2, shape, strides);
  hw.strides[0] = rs, hw.strides[1] = cs;
  native gpu, cpu;
  native_new(&gpu, K, N, G, false, true);
  native_new(&cpu, K, N, G, false, false);
  memset(cpu.q.codes, 0, cpu.bytes[0]); /* the CPU sets nibbles in place */
  assert_kiln_ok(kiln_qweight_quantize(g_gpu, test_dl(&gw), sym, &gpu.q, g_stream));
  assert_kiln_ok(kiln_qweight_quantize(g_cpu, test_dl(&hw), sym, &cpu.q, NULL));
  char what[128];
  snprintf(what, sizeof what, "quantize dtype %d/%d, symmetric %d, %s", dt.code, dt.bits, sym,
           transposed ? "[N, K] transposed view" : "[K, N]");
  native_expect_equal(&gpu, &cpu, what);
  native_free(&gpu), native_free(&cpu);
  dbuf_free(&dw);
  free(w);
}

static void quantize(void **state) {
  (void)state;
  const DLDataType dts[3] = {TEST_F32, TEST_F16, TEST_BF16};
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
    for (int d = 0; d < 3; d++)
      for (int sym = 0; sym < 2; sym++)
        quantize_case(dts[d], SHAPES[s][0], SHAPES[s][1] + (s % 2 ? 3 : 0), SHAPES[s][2], sym, (s + d) % 2);
}

static void dequantize_case(DLDataType dt, int64_t K, int64_t N, int64_t G, bool col_major) {
  native host;
  native_new(&host, K, N, G, false, false);
  for (size_t i = 0; i < host.bytes[0] / 4; i++) host.q.codes[i] = rnd();
  for (size_t i = 0; i < host.bytes[1] / 2; i++) /* finite scales of either sign, 2^-10 .. 2 */
    host.q.scales[i] = kiln_f32_to_f16((rnd() % 2 ? 1.0f : -1.0f) * (0.001f + (float)(rnd() % 2000) / 1000.0f));
  for (size_t i = 0; i < host.bytes[2]; i++) host.q.zeros[i] = (uint8_t)(rnd() % 17);
  native dev;
  memset(&dev, 0, sizeof dev);
  dev.q = host.q, dev.dev = true;
  memcpy(dev.bytes, host.bytes, sizeof dev.bytes);
  dev.q.codes = dbuf_new(&dev.d[0], host.q.codes, host.bytes[0]);
  dev.q.scales = dbuf_new(&dev.d[1], host.q.scales, host.bytes[1]);
  dev.q.zeros = dbuf_new(&dev.d[2], host.q.zeros, host.bytes[2]);
  dev.q.device = (DLDevice){kDLCUDA, 0};
  const size_t es = dt.bits / 8, bytes = es * (size_t)(K * N);
  unsigned char *expect = malloc(bytes);
  test_poison(expect, dt, K * N);
  const int64_t shape[2] = {K, N}, strides[2] = {col_major ? 1 : N, col_major ? K : 1};
  test_tensor hw = test_host_tensor(expect, dt, 2, shape);
  hw.strides[0] = strides[0], hw.strides[1] = strides[1];
  assert_kiln_ok(kiln_qweight_dequantize(g_cpu, &host.q, test_dl(&hw), NULL));
  dbuf dw;
  test_tensor gw = dev_tensor(dbuf_new(&dw, NULL, bytes), dt, 2, shape, strides);
  assert_kiln_ok(kiln_qweight_dequantize(g_gpu, &dev.q, test_dl(&gw), g_stream));
  const unsigned char *got = dbuf_fetch(&dw, "w");
  if (memcmp(got, expect, bytes) != 0)
    fail_msg("dequantize dtype %d/%d, %s, k %" PRId64 ", n %" PRId64 ", group %" PRId64 ": GPU and CPU differ", dt.code,
             dt.bits, col_major ? "column-major" : "row-major", K, N, G);
  for (int i = 0; i < 3; i++) native_part(&dev, i); /* guards of the inputs */
  dbuf_free(&dw);
  native_free(&dev), native_free(&host);
  free(expect);
}

static void dequantize(void **state) {
  (void)state;
  const DLDataType dts[3] = {TEST_F32, TEST_F16, TEST_BF16};
  for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
    for (int d = 0; d < 3; d++) dequantize_case(dts[d], SHAPES[s][0], SHAPES[s][1] + (s % 2), SHAPES[s][2], (s + d) % 2);
}

/* What a GPU context refuses that a CPU one would take: a g_idx without perm. */
static void errors(void **state) {
  (void)state;
  const int64_t K = 64, N = 8;
  dbuf dq, ds, dz, di;
  test_tensor q = dev_tensor(dbuf_new(&dq, NULL, K / 8 * N * 4), I32, 2, (int64_t[]){K / 8, N}, NULL);
  test_tensor z = dev_tensor(dbuf_new(&dz, NULL, 2 * 4), I32, 2, (int64_t[]){2, 1}, NULL);
  test_tensor s = dev_tensor(dbuf_new(&ds, NULL, 2 * N * 2), TEST_F16, 2, (int64_t[]){2, N}, NULL);
  test_tensor i = dev_tensor(dbuf_new(&di, NULL, K * 4), I32, 1, (int64_t[]){K}, NULL);
  native out;
  native_new(&out, K, N, 32, false, true);
  assert_kiln_fails(kiln_qweight_import(g_gpu, KILN_QFORMAT_GPTQ_V2, test_dl(&q), test_dl(&z), test_dl(&s),
                                        test_dl(&i), &out.q, g_stream),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_qweight_import: g_idx is given but out->perm is NULL",
                    "on a GPU context", "g_idx = NULL");
  kiln_qweight bad = out.q;
  bad.codes = (uint32_t *)((char *)bad.codes + 2);
  assert_kiln_fails(kiln_qweight_import(g_gpu, KILN_QFORMAT_GPTQ_V2, test_dl(&q), test_dl(&z), test_dl(&s), NULL,
                                        &bad, g_stream),
                    KILN_ERROR_INVALID_ARGUMENT, "out->codes = ", "not 4-byte aligned");
  for (int j = 0; j < 3; j++) native_part(&out, j); /* nothing written: guards and the fill intact */
  native_free(&out);
  dbuf_free(&dq), dbuf_free(&dz), dbuf_free(&ds), dbuf_free(&di);
}

int main(int argc, char **argv) {
  g_gpu = test_gpu_context_or_skip();
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &g_cpu));
  assert_kiln_ok(kiln_stream_create(g_gpu, &g_stream));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(import_formats), cmocka_unit_test(import_act_order), cmocka_unit_test(import_invalid_g_idx),
      cmocka_unit_test(quantize),       cmocka_unit_test(dequantize),       cmocka_unit_test(errors),
  };
  test_apply_filter(argc, argv);
  const int failed = cmocka_run_group_tests(tests, NULL, NULL);
  kiln_stream_destroy(g_gpu, g_stream);
  kiln_context_destroy(g_cpu);
  kiln_context_destroy(g_gpu);
  return failed;
}
