/*
 * test_qkv_host.c — kiln_qkv_project_int8 (W8A16) and kiln_qkv_project_int4 (W4A16) on the CPU
 * context.
 *
 * Each output is checked against its float64 reference (test_w16.h: SPEC §5's tolerance and one
 * correct rounding per element; int8: (Σ x·w) · scale). The int4 op must give exactly the bits of
 * three separate kiln_matmul_int4 calls. Ragged M, odd and unequal Nq / Nk / Nv, GQA (Nq = 4·Nk),
 * every group size, sym/asym, act-order, per-projection and per-column int8 scales, uint8 and
 * transposed int8 weights, outputs as disjoint column slices of one buffer. Then every
 * validation error with its status and message fragments, the outputs untouched.
 */
#include "test_util.h"
#include "test_matrix.h"
#include "test_w16.h"

static const char *const ONAME[3] = {"q", "k", "v"};


/* ------------------------------------------------------------------------------------------ */
/* int4                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Runs the fused op and three kiln_matmul_int4 calls into outputs of the same layouts; checks
 * the bits are equal and each output against the float64 reference. */
static void int4_case(kiln_context *ctx, tmat *x, tq w[3], DLDataType ydt, int layout_seed, const char *what) {
  tmat y[3], s[3];
  for (int i = 0; i < 3; i++) {
    const int lay = (layout_seed + i) % 3 == 2 ? COL : ROW;
    tm_init(&y[i], ydt, 2, 1, x->rows, w[i].q.n, lay, (layout_seed + i) % 2, 0, i);
    tm_init(&s[i], ydt, 2, 1, x->rows, w[i].q.n, lay, (layout_seed + i) % 2, 0, i);
    tm_poison(&y[i]);
    tm_poison(&s[i]);
  }
  tm_fill(x);
  assert_kiln_ok(kiln_qkv_project_int4(ctx, &x->t, &w[0].q, &w[1].q, &w[2].q, &y[0].t, &y[1].t, &y[2].t, NULL, NULL));
  for (int i = 0; i < 3; i++) {
    assert_kiln_ok(kiln_matmul_int4(ctx, &x->t, &w[i].q, &s[i].t, NULL, NULL));
    if (memcmp(y[i].buf, s[i].buf, (size_t)y[i].total * y[i].elem) != 0)
      fail_msg("%s: fused %s differs from kiln_matmul_int4's bits", what, ONAME[i]);
    char w2[160];
    snprintf(w2, sizeof w2, "%s, output %s", what, ONAME[i]);
    w16_check_int4(x, &w[i].q, &y[i], w2);
    tm_free(&y[i]), tm_free(&s[i]);
  }
}

static void opts_default(void **state) {
  (void)state;
  kiln_qkv_opts o = kiln_qkv_opts_default();
  assert_int_equal(o.algo, KILN_QKV_AUTO);
  assert_null(o.workspace);
  assert_int_equal(o.workspace_bytes, 0);
}

/* M ∈ {1, 3, 16, 17, 64}, three different weights (every group size, sym/asym, act-order),
 * odd unequal widths, f16/bf16 x, every output dtype. */
static void int4_fused_equals_separate(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  static const int64_t Ms[5] = {1, 3, 16, 17, 64};
  int c = 0;
  for (int im = 0; im < 5; im++)
    for (int xd = 0; xd < 2; xd++)
      for (int yd = 0; yd < 3; yd++, c++) {
        const int64_t K = c % 2 ? 256 : 384, M = Ms[im];
        tq w[3];
        tq_make(&w[0], K, 33, 32 << (c % 3), c % 2, true);   /* G 32, 64 or 128 */
        tq_make(&w[1], K, 7, 128, (c + 1) % 2, false);
        tq_make(&w[2], K, 9, K, c % 2, c % 3 == 0);          /* one group per column */
        tmat x;
        tm_init(&x, W16_X_DT[xd], 2, 1, M, K, c % 4 == 1 ? COL : ROW, c % 3, 0, c % 2);
        char what[96];
        snprintf(what, sizeof what, "M %" PRId64 " K %" PRId64 " x %d y %d", M, K, xd, yd);
        int4_case(ctx, &x, w, W16_OUT_DT[yd], c, what);
        tm_free(&x);
        for (int i = 0; i < 3; i++) tq_free(&w[i]);
      }
  kiln_context_destroy(ctx);
}

/* Grouped-query attention: Nq = 4·Nk, Nk = Nv, and multi-query widths. */
static void int4_gqa(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  static const int64_t Ms[3] = {1, 17, 64};
  for (int im = 0; im < 3; im++) {
    const int64_t K = 512, Nk = im == 2 ? 8 : 65;
    tq w[3];
    tq_make(&w[0], K, 4 * Nk, 128, false, true);
    tq_make(&w[1], K, Nk, 128, false, true);
    tq_make(&w[2], K, Nk, 64, true, false);
    tmat x;
    tm_compact(&x, TEST_F16, 2, 1, Ms[im], K);
    int4_case(ctx, &x, w, TEST_F16, 0, "GQA int4");
    tm_free(&x);
    for (int i = 0; i < 3; i++) tq_free(&w[i]);
  }
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* int8                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Random int8 weights [K, n[i]] (layouts and int8/uint8 rotating) and scales ([1] or [n],
 * strided), fused run, each output against (Σ x·w)·scale in float64. */
static void int8_case(kiln_context *ctx, tmat *x, const int64_t n[3], DLDataType ydt, int seed, const char *what) {
  const int64_t K = x->cols, M = x->rows;
  tmat w[3], y[3];
  tscale s[3];
  for (int i = 0; i < 3; i++) {
    const int v = seed + i;
    tm_init(&w[i], v % 2 ? T_U8 : T_I8, 2, 1, K, n[i], v % 3 == 1 ? COL : ROW, v % 2, 0, v % 3);
    tm_fill_i8(&w[i]);
    ts_init(&s[i], v % 2 ? n[i] : 1, 1 + v % 3);
    tm_init(&y[i], ydt, 2, 1, M, n[i], v % 4 == 3 ? COL : ROW, v % 3, 0, v % 2);
    tm_poison(&y[i]);
  }
  tm_fill(x);
  assert_kiln_ok(kiln_qkv_project_int8(ctx, &x->t, &w[0].t, &w[1].t, &w[2].t, &s[0].t, &s[1].t, &s[2].t, &y[0].t,
                                       &y[1].t, &y[2].t, NULL, NULL));
  for (int i = 0; i < 3; i++) {
    double *wd = i8_values(&w[i]), *sc = ts_expand(&s[i], n[i]), *ref, *mag;
    w16_reference(x, wd, NULL, n[i], sc, &ref, &mag);
    char w2[160];
    snprintf(w2, sizeof w2, "%s, output %s", what, ONAME[i]);
    w16_check(&y[i], ref, mag, K, w2);
    free(ref), free(wd), free(sc);
    tm_free(&w[i]), tm_free(&y[i]);
    free(s[i].buf);
  }
}

static void int8_ragged(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  static const int64_t Ms[5] = {1, 3, 16, 17, 64}, Ks[3] = {1, 127, 255};
  int c = 0;
  for (int im = 0; im < 5; im++)
    for (int xd = 0; xd < 2; xd++)
      for (int yd = 0; yd < 3; yd++, c++) {
        const int64_t K = Ks[c % 3], n[3] = {33, 7 + 2 * (c % 3), 1 + 2 * (c % 5)};
        tmat x;
        tm_init(&x, W16_X_DT[xd], 2, 1, Ms[im], K, c % 3 == 2 ? COL : ROW, c % 2, 0, c % 3);
        char what[96];
        snprintf(what, sizeof what, "int8 M %" PRId64 " K %" PRId64 " x %d y %d", Ms[im], K, xd, yd);
        int8_case(ctx, &x, n, W16_OUT_DT[yd], c, what);
        tm_free(&x);
      }
  kiln_context_destroy(ctx);
}

static void int8_gqa(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  const int64_t n[3] = {4 * 64, 64, 64}, mq[3] = {128, 8, 8};
  tmat x;
  tm_compact(&x, TEST_BF16, 2, 1, 17, 256);
  int8_case(ctx, &x, n, TEST_BF16, 0, "GQA int8");
  int8_case(ctx, &x, mq, TEST_F32, 1, "MQA-like int8");
  tm_free(&x);
  kiln_context_destroy(ctx);
}

/* q, k, v as disjoint column slices of one row-major [M, Nq + Nk + Nv] buffer (whose byte spans
 * interleave): accepted, and the same bits as separate outputs; overlapping slices rejected. */
static void merged_output_slices(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  const int64_t M = 5, K = 128, n[3] = {24, 8, 8}, NT = 41; /* one column of padding */
  tq w[3];
  for (int i = 0; i < 3; i++) tq_make(&w[i], K, n[i], 32, i == 1, i == 0);
  tmat x, sep[3];
  tm_compact(&x, TEST_F16, 2, 1, M, K);
  tm_fill(&x);
  uint16_t *buf = malloc(2 * M * NT);
  test_poison(buf, TEST_F16, M * NT);
  int64_t shapes[3][2], strides[2] = {NT, 1};
  DLTensor out[3];
  int64_t col = 0;
  for (int i = 0; i < 3; i++) {
    shapes[i][0] = M, shapes[i][1] = n[i];
    out[i] = (DLTensor){.data = buf + col, .device = {kDLCPU, 0}, .ndim = 2, .dtype = TEST_F16, .shape = shapes[i],
                        .strides = strides};
    col += n[i];
    tm_compact(&sep[i], TEST_F16, 2, 1, M, n[i]);
    assert_kiln_ok(kiln_matmul_int4(ctx, &x.t, &w[i].q, &sep[i].t, NULL, NULL));
  }
  assert_kiln_ok(kiln_qkv_project_int4(ctx, &x.t, &w[0].q, &w[1].q, &w[2].q, &out[0], &out[1], &out[2], NULL, NULL));
  for (int64_t m = 0; m < M; m++) {
    col = 0;
    for (int i = 0; i < 3; i++) {
      assert_memory_equal(buf + m * NT + col, (uint16_t *)sep[i].buf + m * n[i], 2 * (size_t)n[i]);
      col += n[i];
    }
    assert_int_equal(buf[m * NT + NT - 1], 0x7e00); /* the padding column */
  }
  /* the same for int8 */
  tmat w8[3];
  tscale s8[3];
  for (int i = 0; i < 3; i++) {
    tm_compact(&w8[i], T_I8, 2, 1, K, n[i]);
    tm_fill_i8(&w8[i]);
    ts_init(&s8[i], 1, 1);
  }
  test_poison(buf, TEST_F16, M * NT);
  assert_kiln_ok(kiln_qkv_project_int8(ctx, &x.t, &w8[0].t, &w8[1].t, &w8[2].t, &s8[0].t, &s8[1].t, &s8[2].t, &out[0],
                                       &out[1], &out[2], NULL, NULL));
  for (int64_t m = 0; m < M; m++) {
    for (int64_t j = 0; j < NT - 1; j++) assert_true(buf[m * NT + j] != 0x7e00);
    assert_int_equal(buf[m * NT + NT - 1], 0x7e00);
  }
  /* k one column too wide: it meets v's first column in every row */
  test_poison(buf, TEST_F16, M * NT);
  int64_t wide[2] = {M, n[1] + 1};
  DLTensor kw = out[1];
  kw.shape = wide;
  tq wk;
  tq_make(&wk, K, n[1] + 1, 32, true, false);
  assert_kiln_fails(kiln_qkv_project_int4(ctx, &x.t, &w[0].q, &wk.q, &w[2].q, &out[0], &kw, &out[2], NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_qkv_project_int4: v overlaps k in memory",
                    "disjoint column slices");
  /* v starting in q's last column: one shared element per row */
  DLTensor vq = out[2];
  vq.data = buf + n[0] - 1;
  assert_kiln_fails(kiln_qkv_project_int4(ctx, &x.t, &w[0].q, &w[1].q, &w[2].q, &out[0], &out[1], &vq, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "v overlaps q in memory");
  for (int64_t i = 0; i < M * NT; i++) assert_int_equal(buf[i], 0x7e00);
  tq_free(&wk);
  for (int i = 0; i < 3; i++) {
    tq_free(&w[i]);
    tm_free(&sep[i]), tm_free(&w8[i]);
    free(s8[i].buf);
  }
  free(buf);
  tm_free(&x);
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */
/* ------------------------------------------------------------------------------------------ */
typedef struct fixture {
  kiln_context *ctx;
  tmat x, w8[3], y[3];
  tscale s[3];
  tq w4[3];
} fixture;
static const int64_t FX_N[3] = {24, 8, 8}; /* k and v alike, so one tensor fits both */
static void fx_init(fixture *f) {
  f->ctx = w16_cpu_ctx();
  tm_compact(&f->x, TEST_F16, 2, 1, 7, 64);
  tm_fill(&f->x);
  for (int i = 0; i < 3; i++) {
    tm_compact(&f->w8[i], T_I8, 2, 1, 64, FX_N[i]);
    tm_fill_i8(&f->w8[i]);
    ts_init(&f->s[i], i == 1 ? FX_N[i] : 1, 1);
    tm_compact(&f->y[i], TEST_F16, 2, 1, 7, FX_N[i]);
    tm_poison(&f->y[i]);
    tq_make(&f->w4[i], 64, FX_N[i], 32, i == 2, i == 0);
  }
}
static void fx_free(fixture *f) {
  tm_free(&f->x);
  for (int i = 0; i < 3; i++) {
    tm_free(&f->w8[i]), tm_free(&f->y[i]);
    free(f->s[i].buf);
    tq_free(&f->w4[i]);
  }
  kiln_context_destroy(f->ctx);
}
/* A failed call leaves the outputs as they were (all poison). */
static void fx_untouched(const fixture *f) {
  for (int i = 0; i < 3; i++)
    for (int64_t j = 0; j < f->y[i].total; j++) assert_int_equal(((uint16_t *)f->y[i].buf)[j], 0x7e00);
}
/* The fixture's arguments, each overridable. */
#define I8(x_, wq_, wk_, wv_, sq_, sk_, sv_, q_, k_, v_, o_)                                                      \
  kiln_qkv_project_int8(f.ctx, (x_), (wq_), (wk_), (wv_), (sq_), (sk_), (sv_), (q_), (k_), (v_), (o_), NULL)
#define X (&f.x.t)
#define WQ (&f.w8[0].t)
#define WK (&f.w8[1].t)
#define WV (&f.w8[2].t)
#define SQ (&f.s[0].t)
#define SK (&f.s[1].t)
#define SV (&f.s[2].t)
#define Q (&f.y[0].t)
#define K_ (&f.y[1].t)
#define V (&f.y[2].t)
#define I4(x_, wq_, wk_, wv_, q_, k_, v_, o_) kiln_qkv_project_int4(f.ctx, (x_), (wq_), (wk_), (wv_), (q_), (k_), (v_), (o_), NULL)
#define W4Q (&f.w4[0].q)
#define W4K (&f.w4[1].q)
#define W4V (&f.w4[2].q)
#define E_INV KILN_ERROR_INVALID_ARGUMENT

static void err_int8_args(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  assert_kiln_fails(kiln_qkv_project_int8(NULL, X, WQ, WK, WV, SQ, SK, SV, Q, K_, V, NULL, NULL), E_INV,
                    "kiln_qkv_project_int8: ctx is NULL");
  assert_kiln_fails(I8(NULL, WQ, WK, WV, SQ, SK, SV, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int8: x is NULL");
  assert_kiln_fails(I8(X, WQ, NULL, WV, SQ, SK, SV, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int8: wk is NULL");
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, NULL, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int8: v_scale is NULL");
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, K_, NULL, NULL), E_INV, "kiln_qkv_project_int8: v is NULL");
  /* dtypes */
  DLTensor t = f.x.t;
  t.dtype = TEST_F32;
  assert_kiln_fails(I8(&t, WQ, WK, WV, SQ, SK, SV, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int8: x has dtype float32",
                    "expected float16 or bfloat16");
  t = f.w8[1].t, t.dtype = TEST_F16;
  assert_kiln_fails(I8(X, WQ, &t, WV, SQ, SK, SV, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int8: wk has dtype float16",
                    "expected int8 (or uint8", "kiln_quantize_int8");
  t = f.s[2].t, t.dtype = TEST_F16;
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, &t, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int8: v_scale has dtype float16", "expected float32");
  t = f.y[1].t, t.dtype = T_I8;
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, &t, V, NULL), E_INV, "kiln_qkv_project_int8: k has dtype int8",
                    "expected float32, float16 or bfloat16");
  t = f.y[2].t, t.dtype = TEST_BF16;
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, K_, &t, NULL), E_INV,
                    "kiln_qkv_project_int8: v has dtype bfloat16 but q has float16", "share one dtype");
  /* shapes */
  int64_t s_w[2] = {63, 8}, s_y[2] = {7, 25}, s_y2[2] = {6, 8}, s3[1] = {3}, s2[2] = {1, 1};
  t = w16_dl(f.w8[1].buf, T_I8, 2, s_w, NULL);
  assert_kiln_fails(I8(X, WQ, &t, WV, SQ, SK, SV, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int8: wk has shape [63, 8] but x has K = 64 (shape [7, 64])", "transposed view");
  t = w16_dl(f.y[0].buf, TEST_F16, 2, s_y, NULL);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, &t, K_, V, NULL), E_INV, "kiln_qkv_project_int8: q has shape [7, 25]",
                    "expected [7, 24]");
  t = w16_dl(f.y[1].buf, TEST_F16, 2, s_y2, NULL);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, &t, V, NULL), E_INV, "k has shape [6, 8]", "expected [7, 8]");
  t = w16_dl(f.s[1].buf, TEST_F32, 1, s3, NULL);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, &t, SV, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int8: k_scale has shape [3]",
                    "expected [1]", "or [8]", "per column of wk");
  t = w16_dl(f.s[0].buf, TEST_F32, 2, s2, NULL);
  assert_kiln_fails(I8(X, WQ, WK, WV, &t, SK, SV, Q, K_, V, NULL), E_INV, "q_scale has shape [1, 1]");
  int64_t st[2] = {16, 2};
  t = w16_dl(f.w8[2].buf, T_I8, 2, f.w8[2].shape, st);
  assert_kiln_fails(I8(X, WQ, WK, &t, SQ, SK, SV, Q, K_, V, NULL), E_INV, "wv has shape [64, 8] with strides (16, 2)");
  /* devices and algo */
  t = f.w8[2].t, t.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(I8(X, WQ, WK, &t, SQ, SK, SV, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int8: wv is on kDLCUDA:0",
                    "the context is the CPU's");
  t = f.s[0].t, t.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(I8(X, WQ, WK, WV, &t, SK, SV, Q, K_, V, NULL), E_INV, "q_scale is on kDLCUDA:0");
  kiln_qkv_opts o = kiln_qkv_opts_default();
  o.algo = KILN_QKV_DECODE;
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, K_, V, &o), KILN_ERROR_UNSUPPORTED,
                    "kiln_qkv_project_int8: algo KILN_QKV_DECODE needs a CUDA device", "use KILN_QKV_AUTO");
  o.algo = KILN_QKV_PREFILL;
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, K_, V, &o), KILN_ERROR_UNSUPPORTED, "algo KILN_QKV_PREFILL");
  o.algo = (kiln_qkv_algo)5;
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, K_, V, &o), E_INV, "kiln_qkv_project_int8: opts->algo is 5",
                    "expected KILN_QKV_AUTO, KILN_QKV_DECODE or KILN_QKV_PREFILL");
  /* PREFILL's workspace query: 0 on the CPU, the op's checks, NULL refused */
  size_t bytes = 123;
  assert_kiln_ok(kiln_qkv_project_int8_workspace_size(f.ctx, X, WQ, WK, WV, SQ, SK, SV, Q, K_, V, &bytes));
  assert_int_equal(bytes, 0);
  assert_kiln_fails(kiln_qkv_project_int8_workspace_size(f.ctx, X, WQ, WK, WV, SQ, SK, SV, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int8_workspace_size: bytes is NULL");
  assert_kiln_fails(kiln_qkv_project_int8_workspace_size(f.ctx, X, WQ, WK, WV, SQ, NULL, SV, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int8_workspace_size: k_scale is NULL");
  assert_kiln_fails(kiln_qkv_project_int8_workspace_size(NULL, X, WQ, WK, WV, SQ, SK, SV, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int8_workspace_size: ctx is NULL");
  fx_untouched(&f);
  o.algo = KILN_QKV_AUTO;
  assert_kiln_ok(I8(X, WQ, WK, WV, SQ, SK, SV, Q, K_, V, &o));
  fx_free(&f);
}

/* A per-column scale whose stride spans more than the address space, or wraps past its end:
 * refused before any read (an access through the dummy pointer would crash). */
static void err_int8_scale_span(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  void *dummy = (void *)(uintptr_t)0x10000; /* never mapped */
  int64_t s8[1] = {8}, huge[1] = {INT64_MAX / 2}, over[1] = {(int64_t)1 << 61}, wide[1] = {100};
  DLTensor t = w16_dl(dummy, TEST_F32, 1, s8, huge);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, &t, SV, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int8: k_scale (shape [8], stride 4611686018427387903) spans more bytes than a "
                    "64-bit address holds");
  /* 7 * 2^61 overflows int64 (and would wrap negative) */
  t = w16_dl(dummy, TEST_F32, 1, s8, over);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, &t, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int8: v_scale (shape [8], stride 2305843009213693952) spans more bytes");
  t = w16_dl((void *)(UINTPTR_MAX - 255), TEST_F32, 1, s8, wide);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, &t, SV, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int8: k_scale (shape [8], stride 100) spans more bytes");
  /* the workspace query checks the scales too */
  size_t bytes = 123;
  t = w16_dl(dummy, TEST_F32, 1, s8, huge);
  assert_kiln_fails(kiln_qkv_project_int8_workspace_size(f.ctx, X, WQ, WK, WV, SQ, &t, SV, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int8_workspace_size: k_scale (shape [8], stride 4611686018427387903) spans");
  fx_untouched(&f);
  fx_free(&f);
}

/* The workspace queries check x first, like the ops (they do not go through the ops' head
 * checks). */
static void err_workspace_query_x(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  size_t bytes = 123;
  assert_kiln_fails(kiln_qkv_project_int8_workspace_size(f.ctx, NULL, WQ, WK, WV, SQ, SK, SV, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int8_workspace_size: x is NULL");
  assert_kiln_fails(kiln_qkv_project_int4_workspace_size(f.ctx, NULL, W4Q, W4K, W4V, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int4_workspace_size: x is NULL");
  DLTensor t = f.x.t;
  t.dtype = TEST_F32;
  assert_kiln_fails(kiln_qkv_project_int8_workspace_size(f.ctx, &t, WQ, WK, WV, SQ, SK, SV, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int8_workspace_size: x has dtype float32", "expected float16 or bfloat16");
  int64_t s3[3] = {1, 7, 64};
  t = w16_dl(f.x.buf, TEST_F16, 3, s3, NULL);
  assert_kiln_fails(kiln_qkv_project_int4_workspace_size(f.ctx, &t, W4Q, W4K, W4V, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int4_workspace_size: x has rank 3", "expected rank 2");
  assert_int_equal(bytes, 123); /* a failed query leaves bytes as it was, as every size query does */
  fx_free(&f);
}

static void err_int8_overlap(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, K_, K_, NULL), E_INV, "kiln_qkv_project_int8: v overlaps k in memory",
                    "distinct outputs");
  /* k [7, 8] inside q [7, 24] with its own pitch */
  int64_t sv[2] = {7, 8};
  DLTensor t = w16_dl((uint16_t *)f.y[0].buf + 100, TEST_F16, 2, sv, NULL);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, &t, V, NULL), E_INV, "k overlaps q in memory");
  /* outputs over inputs */
  int64_t sq[2] = {7, 24}, sk[2] = {7, 8};
  t = w16_dl(f.x.buf, TEST_F16, 2, sq, NULL);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, &t, K_, V, NULL), E_INV, "kiln_qkv_project_int8: q overlaps x in memory",
                    "separate buffer");
  t = w16_dl(f.w8[0].buf, TEST_F16, 2, sk, NULL);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, SV, Q, &t, V, NULL), E_INV, "k overlaps wq in memory");
  /* k [7, 8] f16 (112 bytes) at the start of an arena, v_scale at its last 4 bytes */
  static _Alignas(16) float arena[64];
  int64_t s1[1] = {1};
  DLTensor y1 = w16_dl(arena, TEST_F16, 2, sk, NULL), sc = w16_dl(arena + 27, TEST_F32, 1, s1, NULL);
  assert_kiln_fails(I8(X, WQ, WK, WV, SQ, SK, &sc, Q, &y1, V, NULL), E_INV, "k overlaps v_scale in memory");
  sc.data = arena + 28; /* just past k: fine */
  arena[28] = 0.5f;
  assert_kiln_ok(I8(X, WQ, WK, WV, SQ, SK, &sc, Q, &y1, V, NULL));
  tm_poison(&f.y[0]), tm_poison(&f.y[2]);
  fx_untouched(&f);
  fx_free(&f);
}

static void err_int4_args(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  assert_kiln_fails(kiln_qkv_project_int4(NULL, X, W4Q, W4K, W4V, Q, K_, V, NULL, NULL), E_INV,
                    "kiln_qkv_project_int4: ctx is NULL");
  assert_kiln_fails(I4(NULL, W4Q, W4K, W4V, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int4: x is NULL");
  assert_kiln_fails(I4(X, NULL, W4K, W4V, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int4: wq is NULL", "kiln_qweight");
  assert_kiln_fails(I4(X, W4Q, W4K, NULL, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int4: wv is NULL");
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, NULL, V, NULL), E_INV, "kiln_qkv_project_int4: k is NULL");
  kiln_qweight w = f.w4[1].q;
  w.group = 16;
  assert_kiln_fails(I4(X, W4Q, &w, W4V, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int4: wk is not a valid kiln_qweight: group = 16");
  w = f.w4[1].q, w.zeros = NULL;
  assert_kiln_fails(I4(X, W4Q, &w, W4V, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int4: wk->zeros is NULL");
  w = f.w4[2].q, w.k = 128;
  assert_kiln_fails(I4(X, W4Q, W4K, &w, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int4: wv->k = 128 but x has K = 64 (shape [7, 64])");
  w = f.w4[2].q, w.device = (DLDevice){kDLCUDAManaged, 0};
  assert_kiln_fails(I4(X, W4Q, W4K, &w, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int4: wv->device", "CPU's");
  DLTensor t = f.y[1].t;
  t.dtype = TEST_F32;
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, &t, V, NULL), E_INV, "kiln_qkv_project_int4: k has dtype float32 but q has float16");
  int64_t s_y[2] = {7, 9};
  t = w16_dl(f.y[1].buf, TEST_F16, 2, s_y, NULL);
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, &t, V, NULL), E_INV, "kiln_qkv_project_int4: k has shape [7, 9]",
                    "expected [7, 8]");
  kiln_qkv_opts o = kiln_qkv_opts_default();
  o.algo = KILN_QKV_PREFILL;
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, K_, V, &o), KILN_ERROR_UNSUPPORTED,
                    "kiln_qkv_project_int4: algo KILN_QKV_PREFILL needs a CUDA device");
  o.algo = (kiln_qkv_algo)-2;
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, K_, V, &o), E_INV, "opts->algo is -2");
  /* PREFILL's workspace query: 0 on the CPU, the op's checks, NULL refused; a workspace given
   * to the CPU path is ignored */
  size_t bytes = 123;
  assert_kiln_ok(kiln_qkv_project_int4_workspace_size(f.ctx, X, W4Q, W4K, W4V, Q, K_, V, &bytes));
  assert_int_equal(bytes, 0);
  assert_kiln_fails(kiln_qkv_project_int4_workspace_size(f.ctx, X, W4Q, W4K, W4V, Q, K_, V, NULL), E_INV,
                    "kiln_qkv_project_int4_workspace_size: bytes is NULL");
  assert_kiln_fails(kiln_qkv_project_int4_workspace_size(f.ctx, X, W4Q, NULL, W4V, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int4_workspace_size: wk is NULL");
  assert_kiln_fails(kiln_qkv_project_int4_workspace_size(NULL, X, W4Q, W4K, W4V, Q, K_, V, &bytes), E_INV,
                    "kiln_qkv_project_int4_workspace_size: ctx is NULL");
  assert_kiln_fails(kiln_qkv_project_int4_workspace_size(f.ctx, X, W4Q, W4K, W4V, Q, K_, K_, &bytes), E_INV,
                    "kiln_qkv_project_int4_workspace_size: v overlaps k");
  char scratch[64];
  o = kiln_qkv_opts_default();
  o.workspace = scratch, o.workspace_bytes = 1; /* used by the last call below */
  /* values on the CPU */
  f.w4[2].q.zeros[3] = 40;
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int4: wv->zeros[0, 3] = 40");
  f.w4[2].q.zeros[3] = 8;
  const int32_t p = f.w4[0].q.perm[10];
  f.w4[0].q.perm[10] = f.w4[0].q.perm[11];
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, K_, V, NULL), E_INV, "kiln_qkv_project_int4: wq->perm[11]", "repeats");
  f.w4[0].q.perm[10] = p;
  fx_untouched(&f);
  assert_kiln_ok(I4(X, W4Q, W4K, W4V, Q, K_, V, &o));
  fx_free(&f);
}

static void err_int4_overlap(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, V, V, NULL), E_INV, "kiln_qkv_project_int4: v overlaps k in memory");
  int64_t sk[2] = {7, 8};
  DLTensor t = w16_dl(f.x.buf, TEST_F16, 2, sk, NULL);
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, &t, V, NULL), E_INV, "kiln_qkv_project_int4: k overlaps x in memory");
  t = w16_dl(f.w4[2].q.codes, TEST_F16, 2, sk, NULL);
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, &t, V, NULL), E_INV, "kiln_qkv_project_int4: k overlaps wv->codes in memory");
  t = w16_dl(f.w4[1].q.scales, TEST_F16, 2, sk, NULL);
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, &t, V, NULL), E_INV, "k overlaps wk->scales in memory");
  t = w16_dl(f.w4[0].q.perm, TEST_F16, 2, sk, NULL);
  assert_kiln_fails(I4(X, W4Q, W4K, W4V, Q, &t, V, NULL), E_INV, "k overlaps wq->perm in memory");
  fx_untouched(&f);
  fx_free(&f);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(opts_default),
      cmocka_unit_test(int4_fused_equals_separate),
      cmocka_unit_test(int4_gqa),
      cmocka_unit_test(int8_ragged),
      cmocka_unit_test(int8_gqa),
      cmocka_unit_test(merged_output_slices),
      cmocka_unit_test(err_int8_args),
      cmocka_unit_test(err_int8_scale_span),
      cmocka_unit_test(err_int8_overlap),
      cmocka_unit_test(err_int4_args),
      cmocka_unit_test(err_int4_overlap),
      cmocka_unit_test(err_workspace_query_x),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
