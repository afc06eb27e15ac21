/*
 * test_qweight_host.c — kiln_qweight on the CPU context: sizes, importers (reference, GPTQ v1/v2
 * with and without act-order, AWQ), dequantization and quantization.
 *
 * The packed source buffers are built here by packers written from SPEC 4.3 (never by kiln),
 * and each source format's own dequantization formula is evaluated here in f32:
 *   w = f16_to_f32(scale) · (float)(q − z)
 * kiln_qweight_dequantize (f32 output) of the imported weight must equal it bit for bit (with
 * act-order, native row i against source row perm[i]); f16 / bf16 outputs must be its rounding.
 * Outputs are poisoned with NaN first. Then every validation error with its message fragments.
 */
#include <inttypes.h>
#include <stdbool.h>

#include "test_util.h"

static const DLDataType T_I32 = {kDLInt, 32, 1}, T_U32 = {kDLUInt, 32, 1};

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

static kiln_context *cpu_ctx(void) {
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  return ctx;
}

/* Native buffers sized by kiln_qweight_bytes. */
typedef struct native {
  kiln_qweight q;
} native;
static void native_alloc(native *b, int64_t k, int64_t n, int64_t g, bool perm) {
  size_t cb, sb, zb, pb;
  assert_kiln_ok(kiln_qweight_bytes(k, n, g, &cb, &sb, &zb, &pb));
  assert_int_equal(cb, (size_t)(k / 8 * n * 4));
  assert_int_equal(sb, (size_t)(k / g * n * 2));
  assert_int_equal(zb, (size_t)(k / g * n));
  assert_int_equal(pb, (size_t)(k * 4));
  memset(b, 0, sizeof *b);
  b->q.k = k, b->q.n = n, b->q.group = g;
  b->q.codes = malloc(cb), b->q.scales = malloc(sb), b->q.zeros = malloc(zb);
  b->q.perm = perm ? malloc(pb) : NULL;
  memset(b->q.codes, 0xAB, cb), memset(b->q.zeros, 0xCD, zb);
  if (b->q.perm) memset(b->q.perm, 0xEE, pb);
  b->q.device = (DLDevice){kDLCPU, 0};
}
static void native_free(native *b) { free(b->q.codes), free(b->q.scales), free(b->q.zeros), free(b->q.perm); }

/* A random nonzero f16 scale of either sign (magnitudes 2^-10 .. 2). */
static uint16_t rnd_scale(void) {
  float m = 0.001f + (float)(rnd() % 2000) / 1000.0f;
  return kiln_f32_to_f16(rnd() % 2 ? m : -m);
}

/* A source weight: logical codes q[k][n], zeros z[g][n] (as the formula uses them), f16 scales,
 * g_idx, and the expected f32 values. */
typedef struct source {
  int64_t k, n, g;
  int *q;          /* [K, N] the code the formula uses (signed for REFERENCE) */
  int *z;          /* [K/G, N] the zero the formula uses (v1: nibble + 1) */
  uint16_t *s;     /* [K/G, N] */
  int32_t *gidx;   /* [K] */
  float *expect;   /* [K, N] */
} source;

static void source_make(source *src, kiln_qformat f, int64_t K, int64_t N, int64_t G, bool act_order) {
  memset(src, 0, sizeof *src);
  src->k = K, src->n = N, src->g = G;
  const int64_t NG = K / G;
  src->q = malloc(sizeof(int) * (size_t)(K * N));
  src->z = malloc(sizeof(int) * (size_t)(NG * N));
  src->s = malloc(2 * (size_t)(NG * N));
  src->gidx = malloc(4 * (size_t)K);
  src->expect = malloc(4 * (size_t)(K * N));
  for (int64_t i = 0; i < K * N; i++) src->q[i] = f == KILN_QFORMAT_REFERENCE ? (int)(rnd() % 16) - 8 : (int)(rnd() % 16);
  for (int64_t i = 0; i < NG * N; i++) {
    src->s[i] = rnd_scale();
    src->z[i] = f == KILN_QFORMAT_REFERENCE ? 0 : f == KILN_QFORMAT_GPTQ_V1 ? 1 + (int)(rnd() % 16) : (int)(rnd() % 16);
  }
  if (f == KILN_QFORMAT_GPTQ_V1) src->z[0] = 16, src->z[NG * N - 1] = 16; /* nibble 15 */
  /* extremes: codes 0 and 15 (or −8 and 7) */
  src->q[0] = f == KILN_QFORMAT_REFERENCE ? -8 : 0;
  src->q[K * N - 1] = f == KILN_QFORMAT_REFERENCE ? 7 : 15;
  for (int64_t k = 0; k < K; k++) src->gidx[k] = (int32_t)(k / G);
  if (act_order)
    for (int64_t k = K - 1; k > 0; k--) {
      const int64_t j = rnd() % (uint32_t)(k + 1);
      const int32_t t = src->gidx[k];
      src->gidx[k] = src->gidx[j], src->gidx[j] = t;
    }
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) {
      const int64_t gi = (int64_t)src->gidx[k] * N + n;
      src->expect[k * N + n] = kiln_f16_to_f32(src->s[gi]) * (float)(src->q[k * N + n] - src->z[gi]);
    }
}
static void source_free(source *s) { free(s->q), free(s->z), free(s->s), free(s->gidx), free(s->expect); }

/* Packed buffers of one source format (own packers from SPEC 4.3). */
typedef struct packed {
  uint32_t *qw, *qz;
  test_tensor tq, tz, ts, ti;
} packed;

static const int AWQ_ORDER[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static void pack(packed *p, const source *src, kiln_qformat f, DLDataType word_dt) {
  const int64_t K = src->k, N = src->n, NG = K / src->g;
  memset(p, 0, sizeof *p);
  if (f == KILN_QFORMAT_REFERENCE) {
    p->qw = calloc((size_t)(K / 8 * N), 4);
    for (int64_t k = 0; k < K; k++)
      for (int64_t n = 0; n < N; n++)
        p->qw[(k / 8) + n * (K / 8)] |= ((uint32_t)src->q[k * N + n] & 0xFu) << (4 * (k % 8));
    /* labelled [K/8, N] as the reference does (bytes N-major) */
    p->tq = test_host_tensor(p->qw, word_dt, 2, (int64_t[]){K / 8, N});
  } else if (f == KILN_QFORMAT_AWQ) {
    p->qw = calloc((size_t)(K * N / 8), 4);
    p->qz = calloc((size_t)(NG * N / 8), 4);
    for (int64_t k = 0; k < K; k++)
      for (int64_t c = 0; c < N / 8; c++)
        for (int i = 0; i < 8; i++) p->qw[k * (N / 8) + c] |= (uint32_t)src->q[k * N + 8 * c + AWQ_ORDER[i]] << (4 * i);
    for (int64_t g = 0; g < NG; g++)
      for (int64_t c = 0; c < N / 8; c++)
        for (int i = 0; i < 8; i++) p->qz[g * (N / 8) + c] |= (uint32_t)src->z[g * N + 8 * c + AWQ_ORDER[i]] << (4 * i);
    p->tq = test_host_tensor(p->qw, word_dt, 2, (int64_t[]){K, N / 8});
    p->tz = test_host_tensor(p->qz, word_dt, 2, (int64_t[]){NG, N / 8});
  } else {
    const int sub = f == KILN_QFORMAT_GPTQ_V1 ? 1 : 0;
    p->qw = calloc((size_t)(K / 8 * N), 4);
    p->qz = calloc((size_t)(NG * N / 8), 4);
    for (int64_t k = 0; k < K; k++)
      for (int64_t n = 0; n < N; n++) p->qw[(k / 8) * N + n] |= (uint32_t)src->q[k * N + n] << (4 * (k % 8));
    for (int64_t g = 0; g < NG; g++)
      for (int64_t n = 0; n < N; n++)
        p->qz[g * (N / 8) + n / 8] |= ((uint32_t)(src->z[g * N + n] - sub) & 0xFu) << (4 * (n % 8));
    p->tq = test_host_tensor(p->qw, word_dt, 2, (int64_t[]){K / 8, N});
    p->tz = test_host_tensor(p->qz, word_dt, 2, (int64_t[]){NG, N / 8});
  }
  p->ts = test_host_tensor(src->s, TEST_F16, 2, (int64_t[]){NG, N});
  p->ti = test_host_tensor(src->gidx, T_I32, 1, (int64_t[]){K});
}
static void packed_free(packed *p) { free(p->qw), free(p->qz); }

/* Dequantizes into dtype dt (poisoned first) and checks against the expectation. */
static void check_dequant(kiln_context *ctx, const kiln_qweight *q, const source *src, const int32_t *perm,
                          DLDataType dt, const char *what) {
  const int64_t K = src->k, N = src->n;
  void *w = malloc((size_t)(K * N) * 4);
  test_poison(w, dt, K * N);
  test_tensor tw = test_host_tensor(w, dt, 2, (int64_t[]){K, N});
  assert_kiln_ok(kiln_qweight_dequantize(ctx, q, test_dl(&tw), NULL));
  for (int64_t i = 0; i < K; i++)
    for (int64_t n = 0; n < N; n++) {
      const int64_t k = perm ? perm[i] : i;
      const float e = src->expect[k * N + n];
      bool ok;
      if (dt.bits == 32) ok = memcmp(&((float *)w)[i * N + n], &e, 4) == 0;
      else if (dt.code == kDLBfloat) ok = ((uint16_t *)w)[i * N + n] == kiln_f32_to_bf16(e);
      else ok = ((uint16_t *)w)[i * N + n] == kiln_f32_to_f16(e);
      if (!ok)
        fail_msg("%s: w[%" PRId64 ", %" PRId64 "] (source row %" PRId64 ") = %.9g, expected %.9g", what, i, n, k,
                 test_load(w, dt, i * N + n), (double)e);
    }
  free(w);
}

static void run_import(kiln_context *ctx, kiln_qformat f, int64_t K, int64_t N, int64_t G, bool act_order,
                       bool give_gidx, DLDataType word_dt) {
  char what[128];
  snprintf(what, sizeof what, "format %d K %" PRId64 " N %" PRId64 " G %" PRId64 "%s", (int)f, K, N, G,
           act_order ? " act-order" : "");
  source src;
  source_make(&src, f, K, N, G, act_order);
  packed p;
  pack(&p, &src, f, word_dt);
  native b;
  native_alloc(&b, K, N, G, act_order || give_gidx);
  const bool has_z = f != KILN_QFORMAT_REFERENCE;
  assert_kiln_ok(kiln_qweight_import(ctx, f, test_dl(&p.tq), has_z ? test_dl(&p.tz) : NULL, test_dl(&p.ts),
                                     give_gidx ? test_dl(&p.ti) : NULL, &b.q, NULL));
  if (b.q.perm) {
    /* a permutation, sorted by group, stable, and the identity without act-order */
    char *seen = calloc((size_t)K, 1);
    for (int64_t i = 0; i < K; i++) {
      const int32_t k = b.q.perm[i];
      assert_true(k >= 0 && k < K && !seen[k]);
      seen[k] = 1;
      assert_int_equal(src.gidx[k], i / G);
      if (i % G) assert_true(b.q.perm[i - 1] < k);
      if (!act_order) assert_int_equal(k, i);
    }
    free(seen);
    if (act_order) { /* the shuffle did permute rows */
      int64_t moved = 0;
      for (int64_t i = 0; i < K; i++) moved += b.q.perm[i] != i;
      assert_true(moved > 0);
    }
  }
  const int32_t *perm = act_order ? b.q.perm : NULL;
  for (int64_t i = 0; i < (K / G) * N; i++) {
    assert_int_equal(b.q.scales[i], src.s[i]);
    assert_true(b.q.zeros[i] <= 16);
  }
  check_dequant(ctx, &b.q, &src, perm, TEST_F32, what);
  check_dequant(ctx, &b.q, &src, perm, TEST_F16, what);
  check_dequant(ctx, &b.q, &src, perm, TEST_BF16, what);
  native_free(&b);
  packed_free(&p);
  source_free(&src);
}

static const int64_t KS[3] = {128, 256, 384}, NS[3] = {8, 24, 40};

/* ------------------------------------------------------------------------------------------ */
static void bytes_ok(void **state) {
  (void)state;
  size_t cb = 0, sb = 0, zb = 0, pb = 0;
  assert_kiln_ok(kiln_qweight_bytes(256, 24, 64, &cb, &sb, &zb, &pb));
  assert_int_equal(cb, 32 * 24 * 4);
  assert_int_equal(sb, 4 * 24 * 2);
  assert_int_equal(zb, 4 * 24);
  assert_int_equal(pb, 256 * 4);
  assert_kiln_ok(kiln_qweight_bytes(40, 3, 40, &cb, NULL, NULL, NULL)); /* G = K */
  assert_int_equal(cb, 5 * 3 * 4);
}

static void bytes_errors(void **state) {
  (void)state;
  size_t cb;
  assert_kiln_fails(kiln_qweight_bytes(0, 8, 32, &cb, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_qweight_bytes",
                    "k = 0", ">= 1");
  assert_kiln_fails(kiln_qweight_bytes(64, 0, 32, &cb, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "n = 0");
  assert_kiln_fails(kiln_qweight_bytes(36, 8, 36, &cb, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "k = 36 is not a multiple of 8");
  assert_kiln_fails(kiln_qweight_bytes(256, 8, 48, &cb, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "group = 48",
                    "32, 64, 128 or k");
  assert_kiln_fails(kiln_qweight_bytes(96, 8, 64, &cb, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "k = 96 is not a multiple of group = 64");
  assert_kiln_fails(kiln_qweight_bytes((int64_t)1 << 40, (int64_t)1 << 40, 128, &cb, NULL, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "too large");
}

static void gptq_v1_exact(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) {
      const int64_t K = KS[a], N = NS[b];
      const int64_t gs[4] = {32, 64, 128, K};
      for (int g = 0; g < 4; g++) {
        run_import(ctx, KILN_QFORMAT_GPTQ_V1, K, N, gs[g], false, false, T_I32);
        run_import(ctx, KILN_QFORMAT_GPTQ_V1, K, N, gs[g], false, (a + g) % 2 == 0, T_U32); /* trivial g_idx */
      }
    }
  kiln_context_destroy(ctx);
}

static void gptq_v2_exact(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) {
      const int64_t K = KS[a], N = NS[b];
      const int64_t gs[4] = {32, 64, 128, K};
      for (int g = 0; g < 4; g++) run_import(ctx, KILN_QFORMAT_GPTQ_V2, K, N, gs[g], false, g % 2 == 1, T_I32);
    }
  kiln_context_destroy(ctx);
}

static void gptq_act_order(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) {
      const int64_t K = KS[a], N = NS[b];
      const int64_t gs[4] = {32, 64, 128, K};
      for (int g = 0; g < 4; g++) {
        if (gs[g] == K) continue; /* one group: every g_idx is trivial */
        run_import(ctx, KILN_QFORMAT_GPTQ_V1, K, N, gs[g], true, true, T_I32);
        run_import(ctx, KILN_QFORMAT_GPTQ_V2, K, N, gs[g], true, true, T_U32);
      }
    }
  kiln_context_destroy(ctx);
}

static void awq_exact(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) {
      const int64_t K = KS[a], N = NS[b];
      const int64_t gs[4] = {32, 64, 128, K};
      for (int g = 0; g < 4; g++) run_import(ctx, KILN_QFORMAT_AWQ, K, N, gs[g], false, false, g % 2 ? T_U32 : T_I32);
    }
  kiln_context_destroy(ctx);
}

static void reference_exact(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t ns[4] = {8, 24, 40, 3};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 4; b++) run_import(ctx, KILN_QFORMAT_REFERENCE, KS[a], ns[b], 128, false, false, b % 2 ? T_U32 : T_I32);
  kiln_context_destroy(ctx);
}

/* The reference buffer passed as honest column-major [K/8, N] or as row-major [N, K/8]. */
static void reference_views(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t K = 256, N = 24;
  source src;
  source_make(&src, KILN_QFORMAT_REFERENCE, K, N, 128, false);
  packed p;
  pack(&p, &src, KILN_QFORMAT_REFERENCE, T_U32);
  native b;
  native_alloc(&b, K, N, 128, false);
  test_tensor cm = p.tq;
  cm.strides[0] = 1, cm.strides[1] = K / 8;
  assert_kiln_ok(kiln_qweight_import(ctx, KILN_QFORMAT_REFERENCE, test_dl(&cm), NULL, test_dl(&p.ts), NULL, &b.q, NULL));
  check_dequant(ctx, &b.q, &src, NULL, TEST_F32, "column-major view");
  test_tensor nk = test_host_tensor(p.qw, T_U32, 2, (int64_t[]){N, K / 8});
  memset(b.q.codes, 0, (size_t)(K / 8 * N * 4));
  assert_kiln_ok(kiln_qweight_import(ctx, KILN_QFORMAT_REFERENCE, test_dl(&nk), NULL, test_dl(&p.ts), NULL, &b.q, NULL));
  check_dequant(ctx, &b.q, &src, NULL, TEST_F32, "[N, K/8] view");
  test_tensor bad = p.tq;
  bad.strides[0] = N + 1;
  assert_kiln_fails(kiln_qweight_import(ctx, KILN_QFORMAT_REFERENCE, test_dl(&bad), NULL, test_dl(&p.ts), NULL, &b.q, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "qweight", "dense buffer");
  native_free(&b);
  packed_free(&p);
  source_free(&src);
  kiln_context_destroy(ctx);
}

/* Strided source tensors (scales in a padded buffer) are read through their strides. */
static void gptq_strided_scales(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t K = 128, N = 24, G = 32, NG = 4;
  source src;
  source_make(&src, KILN_QFORMAT_GPTQ_V2, K, N, G, false);
  packed p;
  pack(&p, &src, KILN_QFORMAT_GPTQ_V2, T_I32);
  uint16_t *pad = malloc(2 * (size_t)(NG * (N + 5)));
  for (int64_t g = 0; g < NG; g++)
    for (int64_t n = 0; n < N + 5; n++) pad[g * (N + 5) + n] = n < N ? src.s[g * N + n] : 0x7e00;
  test_tensor ts = p.ts;
  ts.t.data = pad;
  ts.strides[0] = N + 5;
  native b;
  native_alloc(&b, K, N, G, false);
  assert_kiln_ok(kiln_qweight_import(ctx, KILN_QFORMAT_GPTQ_V2, test_dl(&p.tq), test_dl(&p.tz), test_dl(&ts), NULL, &b.q,
                                     NULL));
  check_dequant(ctx, &b.q, &src, NULL, TEST_F32, "strided scales");
  free(pad);
  native_free(&b);
  packed_free(&p);
  source_free(&src);
  kiln_context_destroy(ctx);
}

/* Dequantization of hand-made native buffers, into a strided (column-major) output. */
static void dequant_native(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t K = 64, N = 5, G = 32;
  native b;
  native_alloc(&b, K, N, G, false);
  for (int64_t i = 0; i < K / 8 * N; i++) b.q.codes[i] = rnd();
  for (int64_t i = 0; i < 2 * N; i++) b.q.scales[i] = rnd_scale(), b.q.zeros[i] = (uint8_t)(rnd() % 17);
  float *w = malloc(4 * (size_t)(K * N));
  test_poison(w, TEST_F32, K * N);
  test_tensor tw = test_host_tensor(w, TEST_F32, 2, (int64_t[]){K, N});
  tw.strides[0] = 1, tw.strides[1] = K;
  assert_kiln_ok(kiln_qweight_dequantize(ctx, &b.q, test_dl(&tw), NULL));
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) {
      const int q = (int)((b.q.codes[(k / 8) * N + n] >> (4 * (k % 8))) & 15);
      const int64_t gi = (k / G) * N + n;
      const float e = kiln_f16_to_f32(b.q.scales[gi]) * (float)(q - b.q.zeros[gi]);
      assert_memory_equal(&w[n * K + k], &e, 4);
    }
  free(w);
  native_free(&b);
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
static void quantize_roundtrip(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t K = 256, N = 24;
  const DLDataType dts[3] = {TEST_F32, TEST_F16, TEST_BF16};
  const int64_t gs[4] = {32, 64, 128, 256};
  for (int d = 0; d < 3; d++)
    for (int g = 0; g < 4; g++)
      for (int sym = 0; sym < 2; sym++) {
        const int64_t G = gs[g];
        void *wsrc = malloc(4 * (size_t)(K * N));
        test_fill(wsrc, dts[d], K * N);
        /* one all-zero column and one constant column */
        for (int64_t k = 0; k < K; k++) {
          if (dts[d].bits == 32) ((float *)wsrc)[k * N + 3] = 0.f, ((float *)wsrc)[k * N + 5] = -0.75f;
          else ((uint16_t *)wsrc)[k * N + 3] = 0, ((uint16_t *)wsrc)[k * N + 5] = dts[d].code == kDLBfloat ? 0xbf40 : 0xba00;
        }
        test_tensor tw = test_host_tensor(wsrc, dts[d], 2, (int64_t[]){K, N});
        native b;
        native_alloc(&b, K, N, G, false);
        assert_kiln_ok(kiln_qweight_quantize(ctx, test_dl(&tw), sym, &b.q, NULL));
        float *deq = malloc(4 * (size_t)(K * N));
        test_tensor td = test_host_tensor(deq, TEST_F32, 2, (int64_t[]){K, N});
        assert_kiln_ok(kiln_qweight_dequantize(ctx, &b.q, test_dl(&td), NULL));
        for (int64_t k = 0; k < K; k++)
          for (int64_t n = 0; n < N; n++) {
            const int64_t gi = (k / G) * N + n;
            const double s = fabs(kiln_f16_to_f32(b.q.scales[gi])), x = test_load(wsrc, dts[d], k * N + n);
            if (sym) assert_int_equal(b.q.zeros[gi], 8);
            else assert_true(b.q.zeros[gi] <= 15);
            /* half a step, plus what the f16 rounding of the scale can add over 15 steps */
            if (fabs(deq[k * N + n] - x) > 0.52 * s + 1e-7)
              fail_msg("dt %d G %" PRId64 " sym %d: w[%" PRId64 ", %" PRId64 "] = %g dequantizes to %g (scale %g)", d,
                       G, sym, k, n, x, (double)deq[k * N + n], s);
            if (n == 3) assert_true(deq[k * N + n] == 0.0f); /* an all-zero column is exact */
          }
        free(deq);
        native_free(&b);
        free(wsrc);
      }
  kiln_context_destroy(ctx);
}

/* A [N, K] weight passed as its transposed view gives the same result as the compact [K, N]. */
static void quantize_transposed_view(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t K = 128, N = 8, G = 64;
  float *a = malloc(4 * (size_t)(K * N)), *t = malloc(4 * (size_t)(K * N));
  test_fill(a, TEST_F32, K * N);
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) t[n * K + k] = a[k * N + n];
  test_tensor ta = test_host_tensor(a, TEST_F32, 2, (int64_t[]){K, N});
  test_tensor tt = test_host_tensor(t, TEST_F32, 2, (int64_t[]){K, N});
  tt.strides[0] = 1, tt.strides[1] = K;
  native x, y;
  native_alloc(&x, K, N, G, false);
  native_alloc(&y, K, N, G, false);
  assert_kiln_ok(kiln_qweight_quantize(ctx, test_dl(&ta), 0, &x.q, NULL));
  assert_kiln_ok(kiln_qweight_quantize(ctx, test_dl(&tt), 0, &y.q, NULL));
  assert_memory_equal(x.q.codes, y.q.codes, (size_t)(K / 8 * N * 4));
  assert_memory_equal(x.q.scales, y.q.scales, (size_t)(K / G * N * 2));
  assert_memory_equal(x.q.zeros, y.q.zeros, (size_t)(K / G * N));
  native_free(&x);
  native_free(&y);
  free(a), free(t);
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
static void err_dequantize(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  native b;
  native_alloc(&b, 64, 8, 32, false);
  memset(b.q.zeros, 8, 16);
  float w[64 * 8];
  test_tensor tw = test_host_tensor(w, TEST_F32, 2, (int64_t[]){64, 8});
  const kiln_status IA = KILN_ERROR_INVALID_ARGUMENT;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, NULL, test_dl(&tw), NULL), IA, "kiln_qweight_dequantize", "qw is NULL");
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &b.q, NULL, NULL), IA, "w is NULL");
  kiln_qweight q = b.q;
  q.codes = NULL;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &q, test_dl(&tw), NULL), IA, "qw->codes is NULL");
  q = b.q, q.scales = NULL;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &q, test_dl(&tw), NULL), IA, "qw->scales is NULL");
  q = b.q, q.zeros = NULL;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &q, test_dl(&tw), NULL), IA, "qw->zeros is NULL");
  q = b.q, q.codes = (uint32_t *)((char *)q.codes + 1);
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &q, test_dl(&tw), NULL), IA, "qw->codes = ", "not 4-byte aligned");
  q = b.q, q.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &q, test_dl(&tw), NULL), IA, "qw->device", "CPU");
  q = b.q, q.group = 48;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &q, test_dl(&tw), NULL), IA, "group = 48");
  q = b.q, q.k = 60;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &q, test_dl(&tw), NULL), IA, "not a multiple of 8");
  q = b.q, q.n = 0;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &q, test_dl(&tw), NULL), IA, "n = 0");
  test_tensor bad = test_host_tensor(w, TEST_F32, 2, (int64_t[]){8, 64});
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &b.q, test_dl(&bad), NULL), IA, "w has shape [8, 64]", "[64, 8]");
  bad = test_host_tensor(w, T_I32, 2, (int64_t[]){64, 8});
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &b.q, test_dl(&bad), NULL), IA, "w has dtype int32");
  test_tensor ov = test_host_tensor(b.q.codes, TEST_F16, 2, (int64_t[]){64, 8});
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &b.q, test_dl(&ov), NULL), IA, "overlaps");
  b.q.zeros[3] = 17;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &b.q, test_dl(&tw), NULL), IA, "qw->zeros[0, 3] = 17", "0..16");
  native_free(&b);
  kiln_context_destroy(ctx);
}

static void err_import(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const kiln_status IA = KILN_ERROR_INVALID_ARGUMENT;
  const int64_t K = 128, N = 16, G = 32;
  source src;
  source_make(&src, KILN_QFORMAT_GPTQ_V1, K, N, G, false);
  packed p;
  pack(&p, &src, KILN_QFORMAT_GPTQ_V1, T_I32);
  native b;
  native_alloc(&b, K, N, G, false);
  DLTensor *qw = test_dl(&p.tq), *qz = test_dl(&p.tz), *sc = test_dl(&p.ts), *gi = test_dl(&p.ti);
  const kiln_qformat V1 = KILN_QFORMAT_GPTQ_V1;
  assert_kiln_fails(kiln_qweight_import(ctx, (kiln_qformat)9, qw, qz, sc, NULL, &b.q, NULL), IA, "kiln_qweight_import",
                    "format is 9");
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, NULL, NULL, NULL), IA, "out is NULL");
  assert_kiln_fails(kiln_qweight_import(ctx, V1, NULL, qz, sc, NULL, &b.q, NULL), IA, "qweight is NULL");
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, NULL, sc, NULL, &b.q, NULL), IA, "qzeros is NULL");
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, NULL, NULL, &b.q, NULL), IA, "scales is NULL");
  assert_kiln_fails(kiln_qweight_import(ctx, KILN_QFORMAT_AWQ, qw, qz, sc, gi, &b.q, NULL), IA, "g_idx is given");
  assert_kiln_fails(kiln_qweight_import(ctx, KILN_QFORMAT_REFERENCE, qw, qz, sc, NULL, &b.q, NULL), IA,
                    "out->group = 32", "set out->group = 128");
  /* shapes and dtypes */
  test_tensor t = p.tq;
  t.shape[0] = K / 8 + 1;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, test_dl(&t), qz, sc, NULL, &b.q, NULL), IA, "qweight has shape [17, 16]",
                    "[16, 16]");
  t = p.tq, t.t.dtype = TEST_F32;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, test_dl(&t), qz, sc, NULL, &b.q, NULL), IA, "qweight has dtype float32",
                    "int32");
  t = p.tz, t.shape[1] = N;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, test_dl(&t), sc, NULL, &b.q, NULL), IA, "qzeros has shape",
                    "[K/G, N/8]");
  t = p.ts, t.t.dtype = TEST_BF16;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, test_dl(&t), NULL, &b.q, NULL), IA, "scales has dtype bfloat16",
                    "float16");
  t = p.ts, t.shape[0] = 2;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, test_dl(&t), NULL, &b.q, NULL), IA, "scales has shape [2, 16]",
                    "[4, 16]");
  t = p.ti, t.shape[0] = K - 1;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, test_dl(&t), &b.q, NULL), IA, "g_idx has shape [127]");
  t = p.ti, t.t.dtype = T_U32;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, test_dl(&t), &b.q, NULL), IA, "g_idx has dtype uint32");
  /* g_idx contents */
  src.gidx[5] = 4;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, gi, &b.q, NULL), IA, "g_idx[5] = 4", "0..3");
  src.gidx[5] = 1; /* group 1 gets 33 rows, group 0 31: act-order, but perm NULL first */
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, gi, &b.q, NULL), IA, "out->perm is NULL", "act-order");
  b.q.perm = malloc(4 * K);
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, gi, &b.q, NULL), IA, "assigns 31 rows to group 0",
                    "exactly group = 32");
  src.gidx[5] = 0;
  /* N % 8 */
  native b12;
  native_alloc(&b12, K, 12, G, false);
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, NULL, &b12.q, NULL), IA, "n = 12 is not a multiple of 8",
                    "qzeros");
  assert_kiln_fails(kiln_qweight_import(ctx, KILN_QFORMAT_AWQ, qw, qz, sc, NULL, &b12.q, NULL), IA,
                    "n = 12 is not a multiple of 8");
  native_free(&b12);
  /* overlaps and device */
  kiln_qweight o = b.q;
  o.zeros = (uint8_t *)src.s;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, NULL, &o, NULL), IA, "out->zeros overlaps scales");
  o = b.q, o.scales = (uint16_t *)b.q.codes;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, NULL, &o, NULL), IA, "out->codes overlaps out->scales");
  o = b.q, o.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, NULL, &o, NULL), IA, "out->device");
  test_tensor dev = p.tq;
  dev.t.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(kiln_qweight_import(ctx, V1, test_dl(&dev), qz, sc, NULL, &b.q, NULL), IA, "qweight is on");
  /* still fine after all that */
  assert_kiln_ok(kiln_qweight_import(ctx, V1, qw, qz, sc, gi, &b.q, NULL));
  check_dequant(ctx, &b.q, &src, NULL, TEST_F32, "after errors");
  native_free(&b);
  packed_free(&p);
  source_free(&src);
  kiln_context_destroy(ctx);
}

/* Missing source tensors each format needs: AWQ's qzeros (GPTQ's is in err_import) and the
 * reference format's packed words (checked by its own layout rules). */
static void err_import_null_sources(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const kiln_status IA = KILN_ERROR_INVALID_ARGUMENT;
  source src;
  source_make(&src, KILN_QFORMAT_AWQ, 128, 16, 32, false);
  packed p;
  pack(&p, &src, KILN_QFORMAT_AWQ, T_I32);
  native b;
  native_alloc(&b, 128, 16, 32, false);
  assert_kiln_fails(kiln_qweight_import(ctx, KILN_QFORMAT_AWQ, test_dl(&p.tq), NULL, test_dl(&p.ts), NULL, &b.q, NULL),
                    IA, "kiln_qweight_import: qzeros is NULL; KILN_QFORMAT_AWQ needs qzeros int32 [K/G, N/8]");
  native r;
  native_alloc(&r, 256, 8, 128, false);
  uint16_t scales[2 * 8] = {0};
  test_tensor ts = test_host_tensor(scales, TEST_F16, 2, (int64_t[]){2, 8});
  assert_kiln_fails(kiln_qweight_import(ctx, KILN_QFORMAT_REFERENCE, NULL, NULL, test_dl(&ts), NULL, &r.q, NULL), IA,
                    "kiln_qweight_import: qweight is NULL; pass a DLTensor");
  assert_kiln_ok(kiln_qweight_import(ctx, KILN_QFORMAT_AWQ, test_dl(&p.tq), test_dl(&p.tz), test_dl(&p.ts), NULL, &b.q,
                                     NULL));
  native_free(&r);
  native_free(&b);
  packed_free(&p);
  source_free(&src);
  kiln_context_destroy(ctx);
}

/* Source tensors whose strides span more than the address space, or wrap past its end: refused
 * before any read (the dummy pointers would crash). */
static void err_import_spans(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const kiln_status IA = KILN_ERROR_INVALID_ARGUMENT;
  const kiln_qformat V1 = KILN_QFORMAT_GPTQ_V1;
  const int64_t K = 128, N = 16, G = 32;
  source src;
  source_make(&src, V1, K, N, G, false);
  packed p;
  pack(&p, &src, V1, T_I32);
  native b;
  native_alloc(&b, K, N, G, false);
  void *dummy = (void *)(uintptr_t)0x10000; /* never mapped */
  DLTensor *qw = test_dl(&p.tq), *qz = test_dl(&p.tz), *sc = test_dl(&p.ts), *gi = test_dl(&p.ti);
  test_tensor t = p.tq;
  t.t.data = dummy, t.strides[0] = INT64_MAX / 2;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, test_dl(&t), qz, sc, NULL, &b.q, NULL), IA,
                    "kiln_qweight_import: qweight (shape [16, 16]) spans more bytes than a 64-bit address holds");
  t.strides[0] = 0x1111111111111111; /* 15 rows of it: 2^64 - 1 elements, which would wrap to -1 */
  assert_kiln_fails(kiln_qweight_import(ctx, V1, test_dl(&t), qz, sc, NULL, &b.q, NULL), IA,
                    "kiln_qweight_import: qweight (shape [16, 16]) spans more bytes");
  t = p.tz, t.t.data = dummy, t.strides[1] = INT64_MAX / 2;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, test_dl(&t), sc, NULL, &b.q, NULL), IA,
                    "kiln_qweight_import: qzeros (shape [4, 2]) spans more bytes");
  t = p.ts, t.t.data = (void *)(UINTPTR_MAX - 63); /* compact (128 bytes), but wraps past the end */
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, test_dl(&t), NULL, &b.q, NULL), IA,
                    "kiln_qweight_import: scales (shape [4, 16]) spans more bytes");
  /* rank 1: g_idx */
  t = p.ti, t.t.data = dummy, t.strides[0] = INT64_MAX / 4;
  assert_kiln_fails(kiln_qweight_import(ctx, V1, qw, qz, sc, test_dl(&t), &b.q, NULL), IA,
                    "kiln_qweight_import: g_idx (shape [128]) spans more bytes");
  assert_kiln_ok(kiln_qweight_import(ctx, V1, qw, qz, sc, gi, &b.q, NULL));
  native_free(&b);
  packed_free(&p);
  source_free(&src);
  kiln_context_destroy(ctx);
}

static void err_import_reference(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const kiln_status IA = KILN_ERROR_INVALID_ARGUMENT;
  const int64_t K = 256, N = 8;
  source src;
  source_make(&src, KILN_QFORMAT_REFERENCE, K, N, 128, false);
  packed p;
  pack(&p, &src, KILN_QFORMAT_REFERENCE, T_U32);
  native b;
  native_alloc(&b, K, N, 128, false);
  const kiln_qformat R = KILN_QFORMAT_REFERENCE;
  uint32_t z[2] = {0, 0};
  test_tensor tz = test_host_tensor(z, T_I32, 2, (int64_t[]){2, 1});
  assert_kiln_fails(kiln_qweight_import(ctx, R, test_dl(&p.tq), test_dl(&tz), test_dl(&p.ts), NULL, &b.q, NULL), IA,
                    "qzeros is given", "pass NULL");
  assert_kiln_fails(kiln_qweight_import(ctx, R, test_dl(&p.tq), NULL, test_dl(&p.ts), test_dl(&p.ti), &b.q, NULL), IA,
                    "g_idx is given");
  test_tensor t = test_host_tensor(p.qw, T_U32, 2, (int64_t[]){K / 8, N - 1});
  assert_kiln_fails(kiln_qweight_import(ctx, R, test_dl(&t), NULL, test_dl(&p.ts), NULL, &b.q, NULL), IA,
                    "qweight has shape [32, 7]", "[32, 8]");
  t = p.tq, t.t.dtype = TEST_F32;
  assert_kiln_fails(kiln_qweight_import(ctx, R, test_dl(&t), NULL, test_dl(&p.ts), NULL, &b.q, NULL), IA,
                    "qweight has dtype float32");
  t = p.ts, t.shape[0] = 1;
  assert_kiln_fails(kiln_qweight_import(ctx, R, test_dl(&p.tq), NULL, test_dl(&t), NULL, &b.q, NULL), IA,
                    "scales has shape [1, 8]", "[2, 8]");
  native_free(&b);
  packed_free(&p);
  source_free(&src);
  kiln_context_destroy(ctx);
}

static void err_quantize(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const kiln_status IA = KILN_ERROR_INVALID_ARGUMENT;
  native b;
  native_alloc(&b, 64, 8, 32, false);
  float w[64 * 8];
  test_fill(w, TEST_F32, 64 * 8);
  test_tensor tw = test_host_tensor(w, TEST_F32, 2, (int64_t[]){64, 8});
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&tw), 2, &b.q, NULL), IA, "kiln_qweight_quantize",
                    "symmetric is 2");
  assert_kiln_fails(kiln_qweight_quantize(ctx, NULL, 1, &b.q, NULL), IA, "w is NULL");
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&tw), 1, NULL, NULL), IA, "out is NULL");
  test_tensor bad = test_host_tensor(w, TEST_F32, 2, (int64_t[]){8, 64});
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&bad), 1, &b.q, NULL), IA, "w has shape [8, 64]",
                    "transposed view");
  bad = test_host_tensor(w, T_I32, 2, (int64_t[]){64, 8});
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&bad), 1, &b.q, NULL), IA, "w has dtype int32");
  memset(b.q.codes, 0x5A, 64 / 8 * 8 * 4);
  w[77] = NAN;
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&tw), 1, &b.q, NULL), IA, "w[9, 5]", "finite");
  w[77] = 1e9f;
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&tw), 0, &b.q, NULL), IA, "float16's range");
  for (int i = 0; i < 64; i++) assert_int_equal(b.q.codes[i], 0x5A5A5A5Au); /* nothing written */
  kiln_qweight o = b.q;
  o.zeros = (uint8_t *)w;
  w[77] = 0.5f;
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&tw), 0, &o, NULL), IA, "out->zeros overlaps w");
  native_free(&b);
  kiln_context_destroy(ctx);
}

/* A w (any non-negative strides are read) whose span exceeds the address space or wraps past
 * its end: refused before any read (the dummy pointer would crash). */
static void err_quantize_span(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const kiln_status IA = KILN_ERROR_INVALID_ARGUMENT;
  native b;
  native_alloc(&b, 64, 8, 32, false);
  test_tensor tw = test_host_tensor((void *)(uintptr_t)0x10000, TEST_F32, 2, (int64_t[]){64, 8});
  tw.strides[0] = INT64_MAX / 2;
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&tw), 1, &b.q, NULL), IA,
                    "kiln_qweight_quantize: w (shape [64, 8]) spans more bytes than a 64-bit address holds");
  tw.strides[0] = 1, tw.strides[1] = INT64_MAX / 4;
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&tw), 0, &b.q, NULL), IA, "w (shape [64, 8]) spans more bytes");
  tw = test_host_tensor((void *)(UINTPTR_MAX - 255), TEST_F16, 2, (int64_t[]){64, 8});
  assert_kiln_fails(kiln_qweight_quantize(ctx, test_dl(&tw), 1, &b.q, NULL), IA, "w (shape [64, 8]) spans more bytes");
  native_free(&b);
  kiln_context_destroy(ctx);
}

/* The dequantized output is a matrix view: row- or column-major only. */
static void err_dequantize_strides(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  native b;
  native_alloc(&b, 64, 8, 32, false);
  memset(b.q.zeros, 8, 16);
  for (int i = 0; i < 16; i++) b.q.scales[i] = 0x3C00; /* 1.0: the accepted call reads them */
  static float w[64 * 16];
  test_tensor tw = test_host_tensor(w, TEST_F32, 2, (int64_t[]){64, 8});
  tw.strides[0] = 16, tw.strides[1] = 2;
  assert_kiln_fails(kiln_qweight_dequantize(ctx, &b.q, test_dl(&tw), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_qweight_dequantize: w has shape [64, 8] with strides (16, 2)", "row-major", "column-major");
  tw.strides[0] = 1, tw.strides[1] = 64; /* column-major: fine */
  assert_kiln_ok(kiln_qweight_dequantize(ctx, &b.q, test_dl(&tw), NULL));
  native_free(&b);
  kiln_context_destroy(ctx);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bytes_ok),
      cmocka_unit_test(bytes_errors),
      cmocka_unit_test(gptq_v1_exact),
      cmocka_unit_test(gptq_v2_exact),
      cmocka_unit_test(gptq_act_order),
      cmocka_unit_test(awq_exact),
      cmocka_unit_test(reference_exact),
      cmocka_unit_test(reference_views),
      cmocka_unit_test(gptq_strided_scales),
      cmocka_unit_test(dequant_native),
      cmocka_unit_test(quantize_roundtrip),
      cmocka_unit_test(quantize_transposed_view),
      cmocka_unit_test(err_dequantize),
      cmocka_unit_test(err_dequantize_strides),
      cmocka_unit_test(err_import),
      cmocka_unit_test(err_import_null_sources),
      cmocka_unit_test(err_import_spans),
      cmocka_unit_test(err_import_reference),
      cmocka_unit_test(err_quantize),
      cmocka_unit_test(err_quantize_span),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
