/*
 * test_int8_host.c — kiln_matmul_int8 (W8A8) and kiln_quantize_int8 on the CPU context.
 *
 * The reference sums are int64, computed here. The CPU path must give exactly
 *   store_rnd(((float(sum) · scale) · row_scale[i]) · col_scale[j])
 * (the documented f32 order), which the tests recompute and compare bit for bit; f32 results
 * are also checked against the exact sum · scale within 1 ulp (SPEC 5). Outputs are poisoned
 * with NaN first, so an unwritten element fails, and the padding of strided outputs must keep
 * the poison. Then every validation error with its status and message fragments.
 */
#include <inttypes.h>
#include <stdbool.h>

#include "test_util.h"
#include "test_matrix.h"

static const DLDataType T_I8 = {kDLInt, 8, 1}, T_U8 = {kDLUInt, 8, 1};

/* ------------------------------------------------------------------------------------------ */
/* int8 fills and reads of the shared strided matrices (test_matrix.h)                         */
/* ------------------------------------------------------------------------------------------ */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}
/* Every byte of the buffer (padding included) random over the whole int8 range. */
static void tm_fill_i8(tmat *m) {
  for (int64_t i = 0; i < m->total; i++) ((uint8_t *)m->buf)[i] = (uint8_t)rnd();
}
static void tm_set_i8(tmat *m, int8_t v) { memset(m->buf, (uint8_t)v, (size_t)m->total); }
static int8_t tm_i8(const tmat *m, int64_t b, int64_t i, int64_t j) {
  return (int8_t)((const uint8_t *)m->buf)[tm_index(m, b, i, j)];
}

/* int64 reference sums [batch, M, N]. */
static int64_t *ref_sums(const tmat *a, const tmat *b, int64_t batch) {
  const int64_t M = a->rows, K = a->cols, N = b->cols;
  int64_t *s = malloc(sizeof(int64_t) * (size_t)(batch * M * N));
  assert_non_null(s);
  for (int64_t bi = 0; bi < batch; bi++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        int64_t acc = 0;
        for (int64_t k = 0; k < K; k++) acc += (int64_t)tm_i8(a, bi, i, k) * tm_i8(b, bi, k, j);
        s[(bi * M + i) * N + j] = acc;
      }
  return s;
}

/* Optional f32 scale vectors with a stride. */
typedef struct tvec {
  float *buf;
  int64_t n, stride, shape[1], strides[1];
  DLTensor t;
} tvec;
static void tv_init(tvec *v, int64_t n, int64_t stride) {
  memset(v, 0, sizeof *v);
  v->n = n, v->stride = stride;
  v->buf = malloc(sizeof(float) * (size_t)((n - 1) * stride + 1));
  assert_non_null(v->buf);
  for (int64_t i = 0; i < (n - 1) * stride + 1; i++) v->buf[i] = NAN; /* gaps: never read */
  for (int64_t i = 0; i < n; i++) v->buf[i * stride] = 0.25f + (float)(rnd() % 1000) / 997.0f * (rnd() % 2 ? 1 : -1);
  v->shape[0] = n, v->strides[0] = stride;
  v->t = (DLTensor){.data = v->buf, .device = {kDLCPU, 0}, .ndim = 1, .dtype = TEST_F32, .shape = v->shape,
                    .strides = v->strides};
}
static float tv_get(const tvec *v, int64_t i) { return v->buf[i * v->stride]; }

/* What the CPU path must store: the documented f32 order, then RNE into c's dtype. */
static float expected(int64_t sum, float scale, const tvec *row, const tvec *col, int64_t i, int64_t j,
                      DLDataType dt) {
  float v = (float)sum;
  v = v * scale;
  if (row) v = v * tv_get(row, i);
  if (col) v = v * tv_get(col, j);
  if (dt.bits == 32) return v;
  if (dt.code == kDLBfloat) return kiln_bf16_to_f32(kiln_f32_to_bf16(v));
  return kiln_f16_to_f32(kiln_f32_to_f16(v));
}

/* Checks c bit for bit against the formula, f32 results within 1 ulp of the exact value, and
 * that the padding around the view still holds the poison. */
static void check_c(const tmat *c, const int64_t *sums, float scale, const tvec *row, const tvec *col,
                    const char *what) {
  char *in_view = calloc((size_t)c->total, 1);
  assert_non_null(in_view);
  for (int64_t b = 0; b < c->batch; b++)
    for (int64_t i = 0; i < c->rows; i++)
      for (int64_t j = 0; j < c->cols; j++) {
        const int64_t idx = tm_index(c, b, i, j), s = sums[(b * c->rows + i) * c->cols + j];
        in_view[idx] = 1;
        const float got = (float)test_load(c->buf, c->dt, idx);
        const float want = expected(s, scale, row, col, i, j, c->dt);
        if (memcmp(&got, &want, sizeof got) != 0)
          fail_msg("%s: c[%" PRId64 ", %" PRId64 ", %" PRId64 "] = %.9g, expected %.9g (sum %" PRId64 ")", what, b, i,
                   j, (double)got, (double)want, s);
        if (c->dt.bits == 32 && !row && !col) { /* SPEC 5: within 1 ulp of sum · scale */
          const double exact = (double)s * (double)scale;
          const double ulp = exact == 0 ? 0 : ldexp(1.0, ilogb(exact) - 23);
          if (fabs((double)got - exact) > ulp)
            fail_msg("%s: c = %.9g is more than 1 ulp from %.17g", what, (double)got, exact);
          if (scale == 1.f && llabs(s) < (1 << 24) && (double)got != (double)s)
            fail_msg("%s: c = %.9g, the exact sum is %" PRId64, what, (double)got, s);
        }
      }
  for (int64_t idx = 0; idx < c->total; idx++) {
    if (in_view[idx]) continue;
    const int poisoned = c->elem == 4 ? ((uint32_t *)c->buf)[idx] == 0x7fc00000u
                                      : ((uint16_t *)c->buf)[idx] == (c->dt.code == kDLBfloat ? 0x7fc0 : 0x7e00);
    if (!poisoned) fail_msg("%s: element %" PRId64 " outside the output view was written", what, idx);
  }
  free(in_view);
}

static kiln_context *cpu_ctx(void) {
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  return ctx;
}

/* Fills a and b, poisons c, runs, checks. */
static void run_case(kiln_context *ctx, tmat *a, tmat *b, tmat *c, float scale, tvec *row, tvec *col,
                     const char *what) {
  tm_fill_i8(a);
  tm_fill_i8(b);
  tm_poison(c);
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  o.scale = scale;
  o.row_scale = row ? &row->t : NULL;
  o.col_scale = col ? &col->t : NULL;
  assert_kiln_ok(kiln_matmul_int8(ctx, &a->t, &b->t, &c->t, &o, NULL));
  int64_t *s = ref_sums(a, b, c->batch);
  check_c(c, s, scale, row, col, what);
  free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                     */
/* ------------------------------------------------------------------------------------------ */
static void opts_default(void **state) {
  (void)state;
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  assert_int_equal(o.algo, KILN_INT8_AUTO);
  assert_true(o.scale == 1.0f);
  assert_null(o.row_scale);
  assert_null(o.col_scale);
}

/* M, N, K over {1, 7, 17, 33, 127, 255}, sampled; layouts, leading-dimension pads, offsets and
 * the output layout rotate over the cases; scale 1, f32 out: exact sums. */
static void fwd_ragged_exact(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  static const int64_t dims[6] = {1, 7, 17, 33, 127, 255};
  int n = 0;
  for (int im = 0; im < 6; im++)
    for (int in = 0; in < 6; in++)
      for (int ik = 0; ik < 6; ik++) {
        if ((im * 36 + in * 6 + ik) % 5 != 0 && !(im == 5 && in == 5 && ik == 5)) continue;
        const int64_t M = dims[im], N = dims[in], K = dims[ik];
        tmat a, b, c;
        tm_init(&a, T_I8, 2, 1, M, K, n & 1 ? COL : ROW, n % 3, 3, n % 5);
        tm_init(&b, T_I8, 2, 1, K, N, n & 2 ? COL : ROW, n % 2, 3, n % 3);
        tm_init(&c, TEST_F32, 2, 1, M, N, n & 4 ? COL : ROW, n % 4, 3, n % 2);
        char what[96];
        snprintf(what, sizeof what, "M %" PRId64 " N %" PRId64 " K %" PRId64 " case %d", M, N, K, n);
        run_case(ctx, &a, &b, &c, 1.0f, NULL, NULL, what);
        tm_free(&a), tm_free(&b), tm_free(&c);
        n++;
      }
  assert_true(n > 40);
  kiln_context_destroy(ctx);
}

/* x @ W.T with a Linear-style weight W [N, K] (a column-major view of B), and a transposed A. */
static void fwd_transposed_views(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t M = 33, N = 17, K = 127;
  tmat a, w, c;
  tm_compact(&a, T_I8, 2, 1, M, K);
  tm_init(&w, T_I8, 2, 1, K, N, COL, 0, 3, 0); /* W [N, K] row-major is B [K, N] with strides (1, K) */
  assert_int_equal(w.strides[0], 1);
  assert_int_equal(w.strides[1], K);
  tm_compact(&c, TEST_F32, 2, 1, M, N);
  run_case(ctx, &a, &w, &c, 1.0f, NULL, NULL, "x @ W.T");
  tm_free(&a);
  tm_init(&a, T_I8, 2, 1, M, K, COL, 5, 3, 0); /* A as the transpose of a [K, M] buffer, ld K + 5 */
  run_case(ctx, &a, &w, &c, 1.0f, NULL, NULL, "A.T @ W.T");
  tm_free(&a), tm_free(&w), tm_free(&c);
  kiln_context_destroy(ctx);
}

/* Batched products and batch-1 broadcasting (rank 2 or rank 3 with batch 1). */
static void fwd_batched_broadcast(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t B = 3, M = 7, N = 33, K = 17;
  tmat a, b, c, a1, b1, a2;
  tm_init(&a, T_I8, 3, B, M, K, ROW, 1, 3, 2);
  tm_init(&b, T_I8, 3, B, K, N, COL, 2, 3, 1);
  tm_init(&c, TEST_F32, 3, B, M, N, ROW, 3, 3, 1);
  run_case(ctx, &a, &b, &c, 1.0f, NULL, NULL, "batched");
  tm_init(&b1, T_I8, 3, 1, K, N, ROW, 0, 3, 0);
  run_case(ctx, &a, &b1, &c, 0.5f, NULL, NULL, "b broadcast (rank 3, batch 1)");
  tm_init(&a1, T_I8, 2, 1, M, K, COL, 0, 3, 0);
  run_case(ctx, &a1, &b, &c, 1.0f, NULL, NULL, "a broadcast (rank 2)");
  tm_init(&a2, T_I8, 3, 1, M, K, ROW, 0, 3, 0);
  tmat c1;
  tm_init(&c1, TEST_F16, 2, 1, M, N, COL, 1, 3, 0);
  run_case(ctx, &a2, &b1, &c1, 1.0f, NULL, NULL, "batch 1 x batch 1 into rank-2 c");
  tm_free(&a), tm_free(&b), tm_free(&c), tm_free(&a1), tm_free(&b1), tm_free(&a2), tm_free(&c1);
  kiln_context_destroy(ctx);
}

/* uint8 tensors are read as int8 bit patterns: the same bytes give the same output bits. */
static void fwd_uint8_same_bits(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t M = 17, N = 33, K = 255;
  tmat a, b, c;
  tm_compact(&a, T_I8, 2, 1, M, K);
  tm_init(&b, T_I8, 2, 1, K, N, COL, 0, 3, 0);
  tm_compact(&c, TEST_BF16, 2, 1, M, N);
  tvec col;
  tv_init(&col, N, 1);
  run_case(ctx, &a, &b, &c, 0.75f, NULL, &col, "int8 x int8");
  void *ref = malloc((size_t)c.total * c.elem);
  assert_non_null(ref);
  memcpy(ref, c.buf, (size_t)c.total * c.elem);
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  o.scale = 0.75f;
  o.col_scale = &col.t;
  static const int combos[3][2] = {{1, 0}, {0, 1}, {1, 1}};
  for (int i = 0; i < 3; i++) {
    a.t.dtype = combos[i][0] ? T_U8 : T_I8;
    b.t.dtype = combos[i][1] ? T_U8 : T_I8;
    tm_poison(&c);
    assert_kiln_ok(kiln_matmul_int8(ctx, &a.t, &b.t, &c.t, &o, NULL));
    assert_memory_equal(ref, c.buf, (size_t)c.total * c.elem);
  }
  free(ref);
  free(col.buf);
  tm_free(&a), tm_free(&b), tm_free(&c);
  kiln_context_destroy(ctx);
}

/* Every output dtype with a scale and both vectors: the same f32 order, one RNE rounding. */
static void fwd_out_dtypes(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const DLDataType dts[3] = {TEST_F32, TEST_F16, TEST_BF16};
  const int64_t M = 33, N = 7, K = 127;
  tvec row, col;
  tv_init(&row, M, 1);
  tv_init(&col, N, 1);
  for (int d = 0; d < 3; d++) {
    tmat a, b, c;
    tm_compact(&a, T_I8, 2, 1, M, K);
    tm_compact(&b, T_I8, 2, 1, K, N);
    tm_init(&c, dts[d], 3, 1, M, N, d == 1 ? COL : ROW, 2, 3, 1);
    run_case(ctx, &a, &b, &c, 1.0f, NULL, NULL, "scale 1");
    run_case(ctx, &a, &b, &c, 3.0517578e-05f, NULL, NULL, "per-tensor scale");
    run_case(ctx, &a, &b, &c, 0.0123f, &row, &col, "row x column scales");
    tm_free(&a), tm_free(&b), tm_free(&c);
  }
  free(row.buf), free(col.buf);
  kiln_context_destroy(ctx);
}

/* Per-tensor, per-column, per-row and row x column scales, strided vectors, any sign. */
static void fwd_scales(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t M = 17, N = 33, K = 255;
  tmat a, b, c;
  tm_compact(&a, T_I8, 2, 1, M, K);
  tm_init(&b, T_I8, 2, 1, K, N, COL, 1, 3, 0);
  tm_compact(&c, TEST_F32, 2, 1, M, N);
  tvec row, col, row3, col2;
  tv_init(&row, M, 1);
  tv_init(&col, N, 1);
  tv_init(&row3, M, 3);
  tv_init(&col2, N, 2);
  run_case(ctx, &a, &b, &c, 0.001f, NULL, NULL, "per tensor");
  run_case(ctx, &a, &b, &c, -2.5f, NULL, NULL, "negative per tensor");
  run_case(ctx, &a, &b, &c, 0.0f, NULL, NULL, "zero scale");
  run_case(ctx, &a, &b, &c, 1.0f, NULL, &col, "per column");
  run_case(ctx, &a, &b, &c, 1.0f, &row, NULL, "per row");
  run_case(ctx, &a, &b, &c, 0.37f, &row, &col, "row x column");
  run_case(ctx, &a, &b, &c, 0.37f, &row3, &col2, "strided row x column");
  /* a stride-0 vector broadcasts one value */
  row3.strides[0] = 0, row3.stride = 0;
  run_case(ctx, &a, &b, &c, 1.0f, &row3, NULL, "stride-0 row scale");
  free(row.buf), free(col.buf), free(row3.buf), free(col2.buf);
  tm_free(&a), tm_free(&b), tm_free(&c);
  kiln_context_destroy(ctx);
}

/* -128 and 127 everywhere up to K = 131072 (the bound): sums reach 2^31 exactly. */
static void fwd_extremes(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t K = 131072;
  tmat a, b, c;
  tm_compact(&a, T_I8, 2, 1, 1, K);
  tm_compact(&b, T_I8, 2, 1, K, 1);
  tm_compact(&c, TEST_F32, 2, 1, 1, 1);
  static const int8_t vals[4][2] = {{-128, -128}, {-128, 127}, {127, 127}, {127, -128}};
  static const double sums[4] = {2147483648.0, -2130706432.0, 2114060288.0, -2130706432.0};
  for (int i = 0; i < 4; i++) {
    tm_set_i8(&a, vals[i][0]);
    tm_set_i8(&b, vals[i][1]);
    tm_poison(&c);
    assert_kiln_ok(kiln_matmul_int8(ctx, &a.t, &b.t, &c.t, NULL, NULL));
    if (((float *)c.buf)[0] != (float)sums[i])
      fail_msg("a = %d, b = %d, K = 131072: c = %.9g, expected %.1f", vals[i][0], vals[i][1],
               (double)((float *)c.buf)[0], sums[i]);
  }
  tm_free(&a), tm_free(&b), tm_free(&c);
  /* random extremes (-128 or 127) at the bound with a few rows and columns; sums beyond 2^24
   * are rounded once (checked bit for bit and within 1 ulp by check_c) */
  tm_init(&a, T_I8, 2, 1, 3, K, ROW, 0, 3, 0);
  tm_init(&b, T_I8, 2, 1, K, 2, COL, 0, 3, 0);
  tm_compact(&c, TEST_F32, 2, 1, 3, 2);
  for (int64_t i = 0; i < a.total; i++) ((int8_t *)a.buf)[i] = rnd() % 8 ? -128 : 127;
  for (int64_t i = 0; i < b.total; i++) ((int8_t *)b.buf)[i] = rnd() % 8 ? -128 : 127;
  tm_poison(&c);
  assert_kiln_ok(kiln_matmul_int8(ctx, &a.t, &b.t, &c.t, NULL, NULL));
  int64_t *s = ref_sums(&a, &b, 1);
  check_c(&c, s, 1.0f, NULL, NULL, "random extremes at K = 131072");
  bool big = false;
  for (int i = 0; i < 6; i++) big |= llabs(s[i]) > (1 << 24);
  assert_true(big);
  free(s);
  tm_free(&a), tm_free(&b), tm_free(&c);
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* Quantizer                                                                                   */
/* ------------------------------------------------------------------------------------------ */
static float w_at(const tmat *w, int64_t k, int64_t n) { return (float)test_load(w->buf, w->dt, tm_index(w, 0, k, n)); }

/* Checks q and scales against the header's definition, recomputed here. */
static void check_quant(const tmat *w, const tmat *q, const float *scales, int64_t sstride, int per_column) {
  const int64_t K = w->rows, N = w->cols;
  float gmax = 0.f;
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) gmax = fmaxf(gmax, fabsf(w_at(w, k, n)));
  for (int64_t n = 0; n < N; n++) {
    float m = 0.f;
    for (int64_t k = 0; k < K; k++) m = fmaxf(m, fabsf(w_at(w, k, n)));
    if (!per_column) m = gmax;
    const float want = m > 0 ? m / 127.0f : 1.0f;
    const float s = scales[per_column ? n * sstride : 0];
    if (s != want) fail_msg("column %" PRId64 ": scale %.9g, expected %.9g", n, (double)s, (double)want);
    for (int64_t k = 0; k < K; k++) {
      const float x = w_at(w, k, n);
      const int8_t got = tm_i8(q, 0, k, n);
      float r = nearbyintf(x / s);
      r = r > 127 ? 127 : r < -127 ? -127 : r;
      if (got != (int8_t)r) fail_msg("q[%" PRId64 ", %" PRId64 "] = %d, expected %d (w %.9g)", k, n, got, (int)r, (double)x);
      if (got < -127) fail_msg("q = -128 is out of the symmetric range");
      /* round trip: |w - q·s| <= s/2 (plus the rounding of the quotient) */
      if (fabs((double)x - (double)got * s) > 0.5 * s * (1 + 1e-6))
        fail_msg("w[%" PRId64 ", %" PRId64 "] = %.9g but q·s = %.9g", k, n, (double)x, (double)got * s);
      if (m > 0 && fabsf(x) == m && abs(got) != 127) fail_msg("the column maximum maps to %d, not ±127", got);
    }
  }
}

static void fill_w(tmat *w, float amp) {
  for (int64_t i = 0; i < w->total; i++) {
    const float v = test_uniform() * amp;
    if (w->dt.bits == 32) ((float *)w->buf)[i] = v;
    else if (w->dt.code == kDLBfloat) ((uint16_t *)w->buf)[i] = kiln_f32_to_bf16(v);
    else ((uint16_t *)w->buf)[i] = kiln_f32_to_f16(v);
  }
}
static void set_w(tmat *w, int64_t k, int64_t n, float v) { ((float *)w->buf)[tm_index(w, 0, k, n)] = v; }

/* Per-column and per-tensor, checked against the definition; every q element written. */
static void quant_roundtrip(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t K = 127, N = 33;
  tmat w, q;
  tm_compact(&w, TEST_F32, 2, 1, K, N);
  tm_compact(&q, T_I8, 2, 1, K, N);
  fill_w(&w, 3.0f);
  float scales[33];
  int64_t ss[1] = {N}, one[1] = {1};
  DLTensor st = {.data = scales, .device = {kDLCPU, 0}, .ndim = 1, .dtype = TEST_F32, .shape = ss};
  memset(q.buf, 0x80, (size_t)q.total); /* -128: never a valid code */
  assert_kiln_ok(kiln_quantize_int8(ctx, &w.t, &q.t, &st, 1, NULL));
  check_quant(&w, &q, scales, 1, 1);
  /* per tensor */
  st.shape = one;
  memset(q.buf, 0x80, (size_t)q.total);
  assert_kiln_ok(kiln_quantize_int8(ctx, &w.t, &q.t, &st, 0, NULL));
  check_quant(&w, &q, scales, 1, 0);
  /* and the quantized weight through kiln_matmul_int8 with col_scale approximates x·w */
  tm_free(&q);
  tm_compact(&q, T_U8, 2, 1, K, N);
  st.shape = ss;
  assert_kiln_ok(kiln_quantize_int8(ctx, &w.t, &q.t, &st, 1, NULL));
  tmat x, c;
  tm_compact(&x, T_I8, 2, 1, 5, K);
  tm_fill_i8(&x);
  tm_compact(&c, TEST_F32, 2, 1, 5, N);
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  DLTensor cs = st;
  o.col_scale = &cs;
  assert_kiln_ok(kiln_matmul_int8(ctx, &x.t, &q.t, &c.t, &o, NULL));
  for (int64_t i = 0; i < 5; i++)
    for (int64_t n = 0; n < N; n++) {
      double ref = 0, bound = 0;
      for (int64_t k = 0; k < K; k++) {
        ref += tm_i8(&x, 0, i, k) * (double)w_at(&w, k, n);
        bound += fabs((double)tm_i8(&x, 0, i, k)) * 0.5 * scales[n];
      }
      assert_true(fabs(((float *)c.buf)[i * N + n] - ref) <= bound * 1.001 + 1e-3);
    }
  tm_free(&x), tm_free(&c);
  tm_free(&w), tm_free(&q);
  kiln_context_destroy(ctx);
}

/* Half-way quotients round to even; the column max maps to 127; clamping. */
static void quant_halfway(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  static const float col0[8] = {127.f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, -3.5f, 126.5f};   /* scale 1 */
  static const int8_t q0[8] = {127, 0, 2, 2, 0, -2, -4, 126};
  static const float col1[8] = {-254.f, 1.f, 3.f, 5.f, -1.f, -5.f, 7.f, 253.f};         /* scale 2 */
  static const int8_t q1[8] = {-127, 0, 2, 2, 0, -2, 4, 126};
  tmat w, q;
  tm_compact(&w, TEST_F32, 2, 1, 8, 2);
  tm_compact(&q, T_I8, 2, 1, 8, 2);
  for (int k = 0; k < 8; k++) set_w(&w, k, 0, col0[k]), set_w(&w, k, 1, col1[k]);
  float scales[2];
  int64_t ss[1] = {2};
  DLTensor st = {.data = scales, .device = {kDLCPU, 0}, .ndim = 1, .dtype = TEST_F32, .shape = ss};
  assert_kiln_ok(kiln_quantize_int8(ctx, &w.t, &q.t, &st, 1, NULL));
  assert_true(scales[0] == 1.0f);
  assert_true(scales[1] == 2.0f);
  for (int k = 0; k < 8; k++) {
    assert_int_equal(tm_i8(&q, 0, k, 0), q0[k]);
    assert_int_equal(tm_i8(&q, 0, k, 1), q1[k]);
  }
  /* per tensor: scale 2 for both columns, so column 0 halves */
  int64_t one[1] = {1};
  st.shape = one;
  assert_kiln_ok(kiln_quantize_int8(ctx, &w.t, &q.t, &st, 0, NULL));
  assert_true(scales[0] == 2.0f);
  static const int8_t q0t[8] = {64, 0, 1, 1, 0, -1, -2, 63}; /* 63.5 -> 64, 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 63.25 */
  for (int k = 0; k < 8; k++) assert_int_equal(tm_i8(&q, 0, k, 0), q0t[k]);
  tm_free(&w), tm_free(&q);
  kiln_context_destroy(ctx);
}

/* All-zero columns get scale 1 and zeros; an all-zero tensor per tensor likewise. */
static void quant_zero_columns(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  tmat w, q;
  tm_compact(&w, TEST_F32, 2, 1, 7, 3);
  tm_compact(&q, T_I8, 2, 1, 7, 3);
  fill_w(&w, 1.0f);
  for (int k = 0; k < 7; k++) set_w(&w, k, 1, k % 2 ? -0.0f : 0.0f);
  float scales[3];
  int64_t ss[1] = {3}, one[1] = {1};
  DLTensor st = {.data = scales, .device = {kDLCPU, 0}, .ndim = 1, .dtype = TEST_F32, .shape = ss};
  memset(q.buf, 0x55, (size_t)q.total);
  assert_kiln_ok(kiln_quantize_int8(ctx, &w.t, &q.t, &st, 1, NULL));
  assert_true(scales[1] == 1.0f);
  for (int k = 0; k < 7; k++) assert_int_equal(tm_i8(&q, 0, k, 1), 0);
  check_quant(&w, &q, scales, 1, 1);
  memset(w.buf, 0, (size_t)w.total * 4);
  memset(q.buf, 0x55, (size_t)q.total);
  st.shape = one;
  scales[0] = NAN;
  assert_kiln_ok(kiln_quantize_int8(ctx, &w.t, &q.t, &st, 0, NULL));
  assert_true(scales[0] == 1.0f);
  for (int64_t i = 0; i < q.total; i++) assert_int_equal(((int8_t *)q.buf)[i], 0);
  tm_free(&w), tm_free(&q);
  kiln_context_destroy(ctx);
}

/* Strided w (transposed, padded, f16 and bf16), strided q (uint8, column-major), strided
 * scales; padding of q untouched. */
static void quant_strided(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const DLDataType dts[3] = {TEST_F32, TEST_F16, TEST_BF16};
  const int64_t K = 33, N = 17;
  for (int d = 0; d < 3; d++) {
    tmat w, q;
    tm_init(&w, dts[d], 2, 1, K, N, d == 1 ? ROW : COL, 3, 3, 2);
    tm_init(&q, d == 2 ? T_I8 : T_U8, 2, 1, K, N, d == 0 ? COL : ROW, 2, 3, 1);
    fill_w(&w, 0.1f);
    memset(q.buf, 0x80, (size_t)q.total);
    float sbuf[2 * 17];
    for (int i = 0; i < 2 * 17; i++) sbuf[i] = -1.f;
    int64_t ss[1] = {N}, sst[1] = {2};
    DLTensor st = {.data = sbuf, .device = {kDLCPU, 0}, .ndim = 1, .dtype = TEST_F32, .shape = ss, .strides = sst};
    assert_kiln_ok(kiln_quantize_int8(ctx, &w.t, &q.t, &st, 1, NULL));
    check_quant(&w, &q, sbuf, 2, 1);
    for (int i = 1; i < 2 * 17; i += 2) assert_true(sbuf[i] == -1.f); /* the gaps */
    char *in_view = calloc((size_t)q.total, 1);
    for (int64_t k = 0; k < K; k++)
      for (int64_t n = 0; n < N; n++) in_view[tm_index(&q, 0, k, n)] = 1;
    for (int64_t i = 0; i < q.total; i++)
      if (!in_view[i]) assert_int_equal(((uint8_t *)q.buf)[i], 0x80);
    free(in_view);
    tm_free(&w), tm_free(&q);
  }
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */
/* ------------------------------------------------------------------------------------------ */
typedef struct fixture {
  kiln_context *ctx;
  tmat a, b, c;
} fixture;
static void fx_init(fixture *f) {
  f->ctx = cpu_ctx();
  tm_compact(&f->a, T_I8, 2, 1, 7, 33);
  tm_compact(&f->b, T_I8, 2, 1, 33, 17);
  tm_compact(&f->c, TEST_F32, 2, 1, 7, 17);
  tm_fill_i8(&f->a);
  tm_fill_i8(&f->b);
  tm_poison(&f->c);
}
static void fx_free(fixture *f) {
  tm_free(&f->a), tm_free(&f->b), tm_free(&f->c);
  kiln_context_destroy(f->ctx);
}
/* A failed call leaves c as it was (all poison). */
static void fx_untouched(const fixture *f) {
  for (int64_t i = 0; i < f->c.total; i++) assert_int_equal(((uint32_t *)f->c.buf)[i], 0x7fc00000u);
}
static DLTensor dl(void *data, DLDataType dt, int ndim, int64_t *shape, int64_t *strides) {
  return (DLTensor){.data = data, .device = {kDLCPU, 0}, .ndim = ndim, .dtype = dt, .shape = shape, .strides = strides};
}
#define MM(a, b, c, o) kiln_matmul_int8(f.ctx, (a), (b), (c), (o), NULL)
#define E_INV KILN_ERROR_INVALID_ARGUMENT

static void err_null_and_dtypes(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  assert_kiln_fails(kiln_matmul_int8(NULL, &f.a.t, &f.b.t, &f.c.t, NULL, NULL), E_INV, "kiln_matmul_int8: ctx is NULL");
  assert_kiln_fails(MM(NULL, &f.b.t, &f.c.t, NULL), E_INV, "kiln_matmul_int8: a is NULL");
  assert_kiln_fails(MM(&f.a.t, &f.b.t, NULL, NULL), E_INV, "kiln_matmul_int8: c is NULL");
  DLTensor a = f.a.t;
  a.dtype = TEST_F16;
  assert_kiln_fails(MM(&a, &f.b.t, &f.c.t, NULL), E_INV, "kiln_matmul_int8: a has dtype float16",
                    "expected int8 (or uint8", "kiln_quantize_int8");
  DLTensor b = f.b.t;
  b.dtype = (DLDataType){kDLInt, 16, 1};
  assert_kiln_fails(MM(&f.a.t, &b, &f.c.t, NULL), E_INV, "kiln_matmul_int8: b has dtype int16", "expected int8");
  b.dtype = (DLDataType){kDLInt, 8, 4};
  assert_kiln_fails(MM(&f.a.t, &b, &f.c.t, NULL), E_INV, "kiln_matmul_int8: b has dtype");
  DLTensor c = f.c.t;
  c.dtype = T_I8;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &c, NULL), E_INV, "kiln_matmul_int8: c has dtype int8",
                    "expected float32, float16 or bfloat16");
  c.dtype = (DLDataType){kDLFloat, 64, 1};
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &c, NULL), E_INV, "c has dtype float64");
  fx_untouched(&f);
  fx_free(&f);
}

static void err_shapes(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  int64_t s_b[2] = {32, 17};
  DLTensor b = dl(f.b.buf, T_I8, 2, s_b, NULL);
  assert_kiln_fails(MM(&f.a.t, &b, &f.c.t, NULL), E_INV, "kiln_matmul_int8: b has shape [32, 17] but a has K = 33",
                    "inner dimensions must match");
  int64_t s_c[2] = {7, 16};
  DLTensor c = dl(f.c.buf, TEST_F32, 2, s_c, NULL);
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &c, NULL), E_INV, "kiln_matmul_int8: c has shape [7, 16]", "expected [7, 17]");
  int64_t s1[1] = {7 * 33}, s4[4] = {1, 1, 7, 33};
  DLTensor a1 = dl(f.a.buf, T_I8, 1, s1, NULL), a4 = dl(f.a.buf, T_I8, 4, s4, NULL);
  assert_kiln_fails(MM(&a1, &f.b.t, &f.c.t, NULL), E_INV, "kiln_matmul_int8: a has rank 1");
  assert_kiln_fails(MM(&a4, &f.b.t, &f.c.t, NULL), E_INV, "kiln_matmul_int8: a has rank 4");
  int64_t s0[2] = {0, 33};
  DLTensor a0 = dl(f.a.buf, T_I8, 2, s0, NULL);
  assert_kiln_fails(MM(&a0, &f.b.t, &f.c.t, NULL), E_INV, "a has shape [0, 33]", "every dimension must be >= 1");
  /* batch mismatch, and a batched product into a rank-2 c */
  static int8_t ab[2 * 7 * 33], bb[3 * 33 * 17];
  int64_t sa3[3] = {2, 7, 33}, sb3[3] = {3, 33, 17};
  DLTensor a3 = dl(ab, T_I8, 3, sa3, NULL), b3 = dl(bb, T_I8, 3, sb3, NULL);
  assert_kiln_fails(MM(&a3, &b3, &f.c.t, NULL), E_INV, "a has batch 2 and b has batch 3",
                    "equal or one of them 1");
  assert_kiln_fails(MM(&a3, &f.b.t, &f.c.t, NULL), E_INV, "c has shape [7, 17]", "expected [2, 7, 17]");
  /* a layout with no unit stride */
  int64_t st[2] = {66, 2};
  DLTensor as = dl(f.a.buf, T_I8, 2, f.a.shape, st);
  assert_kiln_fails(MM(&as, &f.b.t, &f.c.t, NULL), E_INV, "a has shape [7, 33] with strides (66, 2)");
  fx_untouched(&f);
  fx_free(&f);
}

/* K beyond 2^17 is refused with the reason; 2^17 itself is fine (fwd_extremes). */
static void err_k_bound(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  const int64_t K = 131073;
  int8_t *buf = calloc((size_t)K, 2);
  float c = NAN;
  int64_t sa[2] = {1, K}, sb[2] = {K, 1}, sc[2] = {1, 1};
  DLTensor a = dl(buf, T_I8, 2, sa, NULL), b = dl(buf + K, T_I8, 2, sb, NULL), ct = dl(&c, TEST_F32, 2, sc, NULL);
  assert_kiln_fails(kiln_matmul_int8(ctx, &a, &b, &ct, NULL, NULL), E_INV, "kiln_matmul_int8: a has K = 131073",
                    "expected K <= 131072", "exact", "split K");
  assert_true(isnan(c));
  free(buf);
  kiln_context_destroy(ctx);
}

static void err_scale_and_algo(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  o.scale = NAN;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "kiln_matmul_int8: opts->scale is nan",
                    "expected a finite float");
  o.scale = INFINITY;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "opts->scale is inf");
  o.scale = -INFINITY;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "opts->scale is -inf");
  o = kiln_matmul_int8_opts_default();
  o.algo = (kiln_int8_algo)3;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "kiln_matmul_int8: opts->algo is 3",
                    "expected KILN_INT8_AUTO, KILN_INT8_MMA_SYNC or KILN_INT8_WGMMA");
  o.algo = (kiln_int8_algo)-1;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "opts->algo is -1");
  /* the GPU kernels by name on a CPU context: refused, not silently run on the CPU */
  o.algo = KILN_INT8_MMA_SYNC;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), KILN_ERROR_UNSUPPORTED,
                    "kiln_matmul_int8: opts->algo KILN_INT8_MMA_SYNC is a GPU kernel but the context is the CPU's",
                    "use KILN_INT8_AUTO for CPU tensors");
  o.algo = KILN_INT8_WGMMA;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), KILN_ERROR_UNSUPPORTED, "opts->algo KILN_INT8_WGMMA is a GPU kernel");
  fx_untouched(&f);
  o = kiln_matmul_int8_opts_default();
  assert_kiln_ok(MM(&f.a.t, &f.b.t, &f.c.t, &o));
  assert_kiln_ok(MM(&f.a.t, &f.b.t, &f.c.t, NULL));
  fx_free(&f);
}

static void err_scale_vectors(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  static float v[64];
  int64_t s7[1] = {7}, s17[1] = {17}, s16[1] = {16}, s2[2] = {1, 7};
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  DLTensor r = dl(v, TEST_F32, 1, s17, NULL);
  o.row_scale = &r;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "kiln_matmul_int8: opts->row_scale has shape [17]",
                    "expected [7]", "per row");
  r = dl(v, TEST_F32, 2, s2, NULL);
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "opts->row_scale has shape [1, 7]", "expected [7]");
  r = dl(v, TEST_F16, 1, s7, NULL);
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "opts->row_scale has dtype float16", "expected float32");
  r = dl(v, TEST_F32, 1, s7, NULL);
  r.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "opts->row_scale is on kDLCUDA:0",
                    "the context is the CPU's");
  r = dl(v, TEST_F32, 1, s7, NULL);
  DLTensor cl = dl(v, TEST_F32, 1, s16, NULL);
  o.col_scale = &cl;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "kiln_matmul_int8: opts->col_scale has shape [16]",
                    "expected [17]", "per column");
  cl = dl(v, T_I8, 1, s17, NULL);
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV, "opts->col_scale has dtype int8");
  fx_untouched(&f);
  cl = dl(v, TEST_F32, 1, s17, NULL);
  assert_kiln_ok(MM(&f.a.t, &f.b.t, &f.c.t, &o));
  fx_free(&f);
}

/* A scale vector whose stride spans more than the address space (checked before any read: an
 * access through the dummy pointers would crash), or that wraps past its end. */
static void err_scale_vector_span(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  static float v[64];
  void *dummy = (void *)(uintptr_t)0x10000; /* never mapped */
  int64_t s7[1] = {7}, s17[1] = {17}, huge[1] = {INT64_MAX / 2}, wide[1] = {100};
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  DLTensor r = dl(dummy, TEST_F32, 1, s7, huge);
  o.row_scale = &r;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV,
                    "kiln_matmul_int8: opts->row_scale (shape [7], stride 4611686018427387903) spans more bytes than "
                    "a 64-bit address holds");
  r = dl(v, TEST_F32, 1, s7, NULL);
  DLTensor cl = dl((void *)(UINTPTR_MAX - 255), TEST_F32, 1, s17, wide);
  o.col_scale = &cl;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV,
                    "kiln_matmul_int8: opts->col_scale (shape [17], stride 100) spans more bytes");
  /* spans that wrap to a few bytes in 64 bits: 16 * 2^60 elements (wraps to 0), and
   * (16 * 2^58 + 1) elements of 4 bytes (wraps to 4) */
  int64_t w60[1] = {(int64_t)1 << 60}, w58[1] = {(int64_t)1 << 58};
  cl = dl(dummy, TEST_F32, 1, s17, w60);
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV,
                    "kiln_matmul_int8: opts->col_scale (shape [17], stride 1152921504606846976) spans more bytes");
  cl = dl(dummy, TEST_F32, 1, s17, w58);
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &f.c.t, &o), E_INV,
                    "kiln_matmul_int8: opts->col_scale (shape [17], stride 288230376151711744) spans more bytes");
  fx_untouched(&f);
  /* kiln_quantize_int8's scales go through the same check */
  static float w[7 * 5];
  static int8_t q[7 * 5];
  int64_t sw[2] = {7, 5}, s5[1] = {5}, big[1] = {INT64_MAX / 4}, w62[1] = {(int64_t)1 << 62};
  DLTensor wt = dl(w, TEST_F32, 2, sw, NULL), qt = dl(q, T_I8, 2, sw, NULL), st = dl(dummy, TEST_F32, 1, s5, big);
  assert_kiln_fails(kiln_quantize_int8(f.ctx, &wt, &qt, &st, 1, NULL), E_INV,
                    "kiln_quantize_int8: scales (shape [5], stride 2305843009213693951) spans more bytes");
  st = dl(dummy, TEST_F32, 1, s5, w62); /* 4 * 2^62 wraps to 0 */
  assert_kiln_fails(kiln_quantize_int8(f.ctx, &wt, &qt, &st, 1, NULL), E_INV,
                    "kiln_quantize_int8: scales (shape [5], stride 4611686018427387904) spans more bytes");
  fx_free(&f);
}

static void err_overlap(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  /* c placed over a's bytes / b's bytes / a scale vector */
  static float buf[7 * 17 + 64];
  int64_t sc[2] = {7, 17}, s7[1] = {7}, s17[1] = {17};
  DLTensor c = dl(f.a.buf, TEST_F32, 2, sc, NULL);
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &c, NULL), E_INV, "kiln_matmul_int8: c overlaps a in memory",
                    "separate buffer");
  c = dl(f.b.buf, TEST_F32, 2, sc, NULL);
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &c, NULL), E_INV, "kiln_matmul_int8: c overlaps b in memory");
  c = dl(buf, TEST_F32, 2, sc, NULL);
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  DLTensor r = dl(buf + 7 * 17 - 1, TEST_F32, 1, s7, NULL), cl = dl(buf + 40, TEST_F32, 1, s17, NULL);
  o.row_scale = &r;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &c, &o), E_INV, "c overlaps opts->row_scale in memory");
  r = dl(buf + 7 * 17, TEST_F32, 1, s7, NULL); /* just past c: fine */
  o.col_scale = &cl;
  assert_kiln_fails(MM(&f.a.t, &f.b.t, &c, &o), E_INV, "c overlaps opts->col_scale in memory");
  cl = dl(buf + 7 * 17 + 7, TEST_F32, 1, s17, NULL);
  assert_kiln_ok(MM(&f.a.t, &f.b.t, &c, &o));
  /* batches of c overlapping each other */
  static int8_t ab[2 * 7 * 33];
  int64_t sa3[3] = {2, 7, 33}, sc3[3] = {2, 7, 17}, stc[3] = {0, 17, 1};
  DLTensor a3 = dl(ab, T_I8, 3, sa3, NULL), c3 = dl(buf, TEST_F32, 3, sc3, stc);
  assert_kiln_fails(MM(&a3, &f.b.t, &c3, NULL), E_INV, "c has batch stride 0", "batches overlap");
  fx_untouched(&f);
  fx_free(&f);
}

/* kiln_quantize_int8's argument errors; nothing written on failure. */
static void err_quantize(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  static float w[7 * 5], scales[8];
  static _Alignas(16) int8_t q[7 * 5 + 8];
  int64_t sw[2] = {7, 5}, sq[2] = {5, 7}, s5[1] = {5}, s1[1] = {1}, s4[1] = {4}, s35[1] = {35};
  for (int i = 0; i < 35; i++) w[i] = (float)i - 17.f;
  memset(q, 0x80, sizeof q);
  for (int i = 0; i < 8; i++) scales[i] = -1.f;
  DLTensor wt = dl(w, TEST_F32, 2, sw, NULL), qt = dl(q, T_I8, 2, sw, NULL), st = dl(scales, TEST_F32, 1, s5, NULL);
#define QF(wp, qp, sp, pc, ...) \
  assert_kiln_fails(kiln_quantize_int8(ctx, (wp), (qp), (sp), (pc), NULL), E_INV, __VA_ARGS__)
  QF(&wt, &qt, &st, 2, "kiln_quantize_int8: per_column is 2", "expected 0", "or 1");
  QF(&wt, &qt, &st, -1, "per_column is -1");
  QF(NULL, &qt, &st, 1, "kiln_quantize_int8: w is NULL");
  QF(&wt, NULL, &st, 1, "kiln_quantize_int8: q is NULL");
  QF(&wt, &qt, NULL, 1, "kiln_quantize_int8: scales is NULL");
  DLTensor bad = dl(w, T_I8, 2, sw, NULL);
  QF(&bad, &qt, &st, 1, "kiln_quantize_int8: w has dtype int8", "expected float32, float16 or bfloat16");
  bad = dl(w, TEST_F32, 1, s35, NULL);
  QF(&bad, &qt, &st, 1, "w has rank 1", "expected rank 2");
  bad = dl(q, TEST_F16, 2, sw, NULL);
  QF(&wt, &bad, &st, 1, "kiln_quantize_int8: q has dtype float16", "expected int8");
  bad = dl(q, T_I8, 2, sq, NULL);
  QF(&wt, &bad, &st, 1, "kiln_quantize_int8: q has shape [5, 7] but w has shape [7, 5]", "w's shape");
  int64_t self[2] = {1, 1};
  bad = dl(q, T_I8, 2, sw, self);
  QF(&wt, &bad, &st, 1, "q has shape [7, 5] with strides (1, 1)", "share memory");
  bad = dl(scales, TEST_F32, 1, s4, NULL);
  QF(&wt, &qt, &bad, 1, "kiln_quantize_int8: scales has shape [4]", "expected [5]", "per_column = 1");
  QF(&wt, &qt, &st, 0, "kiln_quantize_int8: scales has shape [5]", "expected [1]", "per_column = 0");
  bad = dl(scales, TEST_F16, 1, s5, NULL);
  QF(&wt, &qt, &bad, 1, "scales has dtype float16", "expected float32");
  bad = dl(w, T_I8, 2, sw, NULL); /* q over w's bytes */
  QF(&wt, &bad, &st, 1, "kiln_quantize_int8: q overlaps w in memory");
  bad = dl(q + 28, TEST_F32, 1, s1, NULL); /* scales over q's last bytes */
  QF(&wt, &qt, &bad, 0, "kiln_quantize_int8: scales overlaps q in memory");
  bad = dl(w + 3, TEST_F32, 1, s5, NULL);
  QF(&wt, &qt, &bad, 1, "scales overlaps w in memory");
  /* a NaN or infinite weight: refused before anything is written */
  w[12] = NAN;
  QF(&wt, &qt, &st, 1, "kiln_quantize_int8: w[2, 2] is nan", "expected finite weights");
  w[12] = -INFINITY;
  DLTensor st1 = dl(scales, TEST_F32, 1, s1, NULL);
  QF(&wt, &qt, &st1, 0, "w[2, 2] is -inf");
  for (size_t i = 0; i < sizeof q; i++) assert_int_equal((uint8_t)q[i], 0x80);
  for (int i = 0; i < 8; i++) assert_true(scales[i] == -1.f);
  w[12] = 0.f;
  assert_kiln_ok(kiln_quantize_int8(ctx, &wt, &qt, &st, 1, NULL));
#undef QF
  kiln_context_destroy(ctx);
}

/* kiln_quantize_int8's w and q layouts: sizes >= 1 and a byte span within the address space
 * (checked before any read: the dummy pointers would crash). */
static void err_quantize_layout(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  static float w[7 * 5], scales[5];
  static int8_t q[7 * 5];
  void *dummy = (void *)(uintptr_t)0x10000; /* never mapped */
  int64_t sw[2] = {7, 5}, s05[2] = {0, 5}, s70[2] = {7, 0}, s5[1] = {5};
  DLTensor wt = dl(w, TEST_F32, 2, sw, NULL), qt = dl(q, T_I8, 2, sw, NULL), st = dl(scales, TEST_F32, 1, s5, NULL);
  /* a w with an empty dimension */
  DLTensor bad = dl(w, TEST_F32, 2, s05, NULL);
  assert_kiln_fails(kiln_quantize_int8(ctx, &bad, &qt, &st, 1, NULL), E_INV,
                    "kiln_quantize_int8: w has shape [0, 5]; every dimension must be >= 1");
  bad = dl(w, TEST_F32, 2, s70, NULL);
  assert_kiln_fails(kiln_quantize_int8(ctx, &bad, &qt, &st, 1, NULL), E_INV, "w has shape [7, 0]",
                    "every dimension must be >= 1");
  int64_t huge_rows[2] = {INT64_MAX / 2, 1}, huge_cols[2] = {1, INT64_MAX / 2}, wide[2] = {100, 1};
  bad = dl(dummy, TEST_F32, 2, sw, huge_rows);
  assert_kiln_fails(kiln_quantize_int8(ctx, &bad, &qt, &st, 1, NULL), E_INV,
                    "kiln_quantize_int8: w (shape [7, 5]) spans more bytes than a 64-bit address holds");
  /* a row stride whose product with rows - 1 wraps to 0 in 64 bits: 4 * 2^62 */
  int64_t s55[2] = {5, 5}, wrap_rows[2] = {(int64_t)1 << 62, 1};
  bad = dl(dummy, TEST_F32, 2, s55, wrap_rows);
  assert_kiln_fails(kiln_quantize_int8(ctx, &bad, &qt, &st, 1, NULL), E_INV,
                    "kiln_quantize_int8: w (shape [5, 5]) spans more bytes");
  bad = dl((void *)(UINTPTR_MAX - 255), TEST_F32, 2, sw, wide); /* wraps past the end */
  assert_kiln_fails(kiln_quantize_int8(ctx, &bad, &qt, &st, 1, NULL), E_INV, "w (shape [7, 5]) spans more bytes");
  bad = dl(dummy, T_I8, 2, sw, huge_cols);
  assert_kiln_fails(kiln_quantize_int8(ctx, &wt, &bad, &st, 1, NULL), E_INV,
                    "kiln_quantize_int8: q (shape [7, 5]) spans more bytes than a 64-bit address holds");
  assert_kiln_ok(kiln_quantize_int8(ctx, &wt, &qt, &st, 1, NULL));
  kiln_context_destroy(ctx);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(opts_default),
      cmocka_unit_test(fwd_ragged_exact),
      cmocka_unit_test(fwd_transposed_views),
      cmocka_unit_test(fwd_batched_broadcast),
      cmocka_unit_test(fwd_uint8_same_bits),
      cmocka_unit_test(fwd_out_dtypes),
      cmocka_unit_test(fwd_scales),
      cmocka_unit_test(fwd_extremes),
      cmocka_unit_test(quant_roundtrip),
      cmocka_unit_test(quant_halfway),
      cmocka_unit_test(quant_zero_columns),
      cmocka_unit_test(quant_strided),
      cmocka_unit_test(err_null_and_dtypes),
      cmocka_unit_test(err_shapes),
      cmocka_unit_test(err_k_bound),
      cmocka_unit_test(err_scale_and_algo),
      cmocka_unit_test(err_scale_vectors),
      cmocka_unit_test(err_scale_vector_span),
      cmocka_unit_test(err_overlap),
      cmocka_unit_test(err_quantize),
      cmocka_unit_test(err_quantize_layout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
