/*
 * test_int4_host.c — kiln_matmul_int4 (W4A16) on the CPU context.
 *
 * Weights are built here (random native buffers, GPTQ buffers packed here and imported with
 * act-order, or quantized from floats), dequantized here from the packed codes, and the float64
 * product is the reference (test_w16.h checks SPEC §5's tolerance and, sharper, one correct
 * rounding per element). Ragged M, odd N, every group size, symmetric and asymmetric, act-order,
 * f16 and bf16 activations, every output dtype, strided views. Then every validation error with
 * its status and message fragments, the output untouched.
 */
#include "test_util.h"
#include "test_matrix.h"
#include "test_w16.h"


/* Fills x, poisons y, runs with the weight, checks against the float64 reference. */
static void run_case(kiln_context *ctx, tmat *x, const kiln_qweight *w, tmat *y, const char *what) {
  tm_fill(x);
  tm_poison(y);
  assert_kiln_ok(kiln_matmul_int4(ctx, &x->t, w, &y->t, NULL, NULL));
  w16_check_int4(x, w, y, what);
}

static void opts_default(void **state) {
  (void)state;
  kiln_matmul_int4_opts o = kiln_matmul_int4_opts_default();
  assert_int_equal(o.algo, KILN_INT4_AUTO);
  assert_null(o.workspace);
  assert_int_equal(o.workspace_bytes, 0);
}

/* M ∈ {1, 3, 16, 17, 64} × every group size × sym/asym × f16/bf16 x × every y dtype, with odd N,
 * K rotating over multiples of 8 and of G, and layouts, pads and offsets rotating. */
static void groups_sym_asym_ragged(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  static const int64_t Ms[5] = {1, 3, 16, 17, 64}, Ns[4] = {1, 7, 33, 67}, Ks[3] = {128, 256, 384};
  int c = 0;
  for (int g = 0; g < 4; g++)
    for (int sym = 0; sym < 2; sym++)
      for (int im = 0; im < 5; im++)
        for (int xd = 0; xd < 2; xd++)
          for (int yd = 0; yd < 3; yd++, c++) {
            const int64_t M = Ms[im], N = Ns[c % 4];
            /* per-column groups also at a K that is no multiple of 32 */
            const int64_t K = g == 3 && c % 3 == 0 ? 40 : Ks[c % 3];
            const int64_t G = g == 0 ? 32 : g == 1 ? 64 : g == 2 ? 128 : K;
            tq w;
            tq_make(&w, K, N, G, sym, c % 5 == 0);
            tmat x, y;
            tm_init(&x, W16_X_DT[xd], 2, 1, M, K, c % 2 ? COL : ROW, c % 3, 0, c % 4);
            tm_init(&y, W16_OUT_DT[yd], 2, 1, M, N, c % 7 == 3 ? COL : ROW, c % 2, 0, c % 3);
            char what[128];
            snprintf(what, sizeof what, "M %" PRId64 " N %" PRId64 " K %" PRId64 " G %" PRId64 " sym %d x %d y %d", M,
                     N, K, G, sym, xd, yd);
            run_case(ctx, &x, &w.q, &y, what);
            tm_free(&x), tm_free(&y);
            tq_free(&w);
          }
  assert_int_equal(c, 240);
  kiln_context_destroy(ctx);
}

/* Act-order through a permutation built directly: x is gathered through perm. */
static void act_order_perm(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  for (int g = 0; g < 4; g++) {
    const int64_t K = 256, N = 33, G = g < 3 ? (int64_t)32 << g : K;
    tq w;
    tq_make(&w, K, N, G, g % 2, true);
    tmat x, y;
    tm_compact(&x, TEST_F16, 2, 1, 17, K);
    tm_compact(&y, TEST_F32, 2, 1, 17, N);
    run_case(ctx, &x, &w.q, &y, "perm");
    /* the same weight without perm gives a different product (the gather matters) */
    float *with = malloc(4 * 17 * N);
    memcpy(with, y.buf, 4 * 17 * N);
    int32_t *perm = w.q.perm;
    w.q.perm = NULL;
    run_case(ctx, &x, &w.q, &y, "no perm");
    assert_true(memcmp(with, y.buf, 4 * 17 * N) != 0);
    w.q.perm = perm;
    free(with);
    tm_free(&x), tm_free(&y);
    tq_free(&w);
  }
  kiln_context_destroy(ctx);
}

/* GPTQ v1 / v2 buffers with a shuffled g_idx, packed here from SPEC 4.3 and imported with
 * kiln_qweight_import: the product must match the source format's own formula in the original
 * row order, w[k, n] = scale[g_idx[k], n] · (q[k, n] − zero[g_idx[k], n]). */
static void gptq_act_order_import(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  const DLDataType I32 = {kDLInt, 32, 1};
  for (int v = 1; v <= 2; v++)
    for (int gi = 0; gi < 3; gi++) {
      const int64_t K = 384, N = 24, G = (int64_t)32 << gi, NG = K / G, M = 17;
      int *q = malloc(sizeof(int) * K * N), *z = malloc(sizeof(int) * NG * N);
      uint16_t *s = malloc(2 * NG * N);
      int32_t *gidx = malloc(4 * K);
      uint32_t *qw = calloc(K / 8 * N, 4), *qz = calloc(NG * N / 8, 4);
      for (int64_t i = 0; i < K * N; i++) q[i] = (int)(w16_rnd() % 16);
      for (int64_t i = 0; i < NG * N; i++) s[i] = w16_scale(), z[i] = v == 1 ? 1 + (int)(w16_rnd() % 16) : (int)(w16_rnd() % 16);
      for (int64_t k = 0; k < K; k++) gidx[k] = (int32_t)(k / G);
      for (int64_t k = K - 1; k > 0; k--) {
        const int64_t j = w16_rnd() % (uint32_t)(k + 1);
        const int32_t t = gidx[k];
        gidx[k] = gidx[j], gidx[j] = t;
      }
      for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) qw[(k / 8) * N + n] |= (uint32_t)q[k * N + n] << (4 * (k % 8));
      for (int64_t g = 0; g < NG; g++)
        for (int64_t n = 0; n < N; n++)
          qz[g * (N / 8) + n / 8] |= ((uint32_t)(z[g * N + n] - (v == 1)) & 15u) << (4 * (n % 8));
      test_tensor tqw = test_host_tensor(qw, I32, 2, (int64_t[]){K / 8, N});
      test_tensor tqz = test_host_tensor(qz, I32, 2, (int64_t[]){NG, N / 8});
      test_tensor ts = test_host_tensor(s, TEST_F16, 2, (int64_t[]){NG, N});
      test_tensor tg = test_host_tensor(gidx, I32, 1, (int64_t[]){K});
      tq w;
      tq_make(&w, K, N, G, false, true);
      assert_kiln_ok(kiln_qweight_import(ctx, v == 1 ? KILN_QFORMAT_GPTQ_V1 : KILN_QFORMAT_GPTQ_V2, test_dl(&tqw),
                                         test_dl(&tqz), test_dl(&ts), test_dl(&tg), &w.q, NULL));
      /* the source formula, original row order, no perm */
      double *wsrc = malloc(sizeof(double) * K * N);
      for (int64_t k = 0; k < K; k++)
        for (int64_t n = 0; n < N; n++) {
          const int64_t gg = (int64_t)gidx[k] * N + n;
          wsrc[k * N + n] = (double)kiln_f16_to_f32(s[gg]) * (double)(q[k * N + n] - z[gg]);
        }
      for (int yd = 0; yd < 3; yd++) {
        tmat x, y;
        tm_init(&x, W16_X_DT[yd % 2], 2, 1, M, K, yd == 1 ? COL : ROW, 2, 0, 1);
        tm_compact(&y, W16_OUT_DT[yd], 2, 1, M, N);
        tm_fill(&x);
        tm_poison(&y);
        assert_kiln_ok(kiln_matmul_int4(ctx, &x.t, &w.q, &y.t, NULL, NULL));
        double *ref, *mag;
        w16_reference(&x, wsrc, NULL, N, NULL, &ref, &mag);
        char what[64];
        snprintf(what, sizeof what, "GPTQ v%d G %" PRId64 " act-order, y dtype %d", v, G, yd);
        w16_check(&y, ref, mag, K, what);
        free(ref);
        tm_free(&x), tm_free(&y);
      }
      free(wsrc);
      tq_free(&w);
      free(q), free(z), free(s), free(gidx), free(qw), free(qz);
    }
  kiln_context_destroy(ctx);
}

/* Weights from kiln_qweight_quantize (sym and asym): the product of the quantized weight, and
 * close to the product of the float weight. */
static void quantized_weights(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  const int64_t K = 256, N = 33, M = 16;
  for (int sym = 0; sym < 2; sym++) {
    float *wf = malloc(4 * K * N);
    test_fill(wf, TEST_F32, K * N);
    test_tensor tw = test_host_tensor(wf, TEST_F32, 2, (int64_t[]){K, N});
    tq w;
    tq_make(&w, K, N, 64, true, false);
    assert_kiln_ok(kiln_qweight_quantize(ctx, test_dl(&tw), sym, &w.q, NULL));
    tmat x, y;
    tm_compact(&x, TEST_BF16, 2, 1, M, K);
    tm_compact(&y, TEST_F32, 2, 1, M, N);
    run_case(ctx, &x, &w.q, &y, sym ? "quantized sym" : "quantized asym");
    /* vs the float weight: within the quantization error (half a step per weight) */
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double ref = 0, bound = 0;
        for (int64_t k = 0; k < K; k++) {
          const double xv = tm_get(&x, 0, m, k);
          ref += xv * wf[k * N + n];
          bound += fabs(xv) * 0.52 * fabs(kiln_f16_to_f32(w.q.scales[(k / 64) * N + n]));
        }
        assert_true(fabs(((float *)y.buf)[m * N + n] - ref) <= bound + 1e-5);
      }
    tm_free(&x), tm_free(&y);
    tq_free(&w);
    free(wf);
  }
  kiln_context_destroy(ctx);
}

/* Small integers everywhere (x, codes, zeros, power-of-two scales): every sum is exact, so y is
 * the exact value in every dtype that holds it; codes 0 and 15, zeros 0 and 16. */
static void exact_extremes(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  const int64_t K = 64, N = 9, M = 3, G = 32;
  tq w;
  tq_make(&w, K, N, G, false, true);
  for (int64_t i = 0; i < K / 8 * N; i++) w.q.codes[i] = i % 3 == 0 ? 0xFFFFFFFFu : i % 3 == 1 ? 0u : w.q.codes[i];
  for (int64_t i = 0; i < K / G * N; i++) {
    w.q.scales[i] = kiln_f32_to_f16(i % 2 ? 0.5f : -2.0f);
    w.q.zeros[i] = (uint8_t)(i % 3 == 0 ? 16 : i % 3 == 1 ? 0 : 8);
  }
  tmat x, y;
  tm_compact(&x, TEST_F16, 2, 1, M, K);
  for (int64_t i = 0; i < M * K; i++) ((uint16_t *)x.buf)[i] = kiln_f32_to_f16((float)((int)(w16_rnd() % 9) - 4));
  double *wd = tq_dequant(&w.q), *ref, *mag;
  w16_reference(&x, wd, w.q.perm, N, NULL, &ref, &mag);
  for (int d = 0; d < 3; d++) {
    tm_init(&y, W16_OUT_DT[d], 2, 1, M, N, ROW, 0, 0, 0);
    tm_poison(&y);
    assert_kiln_ok(kiln_matmul_int4(ctx, &x.t, &w.q, &y.t, NULL, NULL));
    for (int64_t i = 0; i < M * N; i++) {
      /* ref is exact (and exact in f32); y must be its one rounding into the dtype */
      const float e = (float)ref[i];
      const double want = d == 0 ? e : d == 1 ? kiln_f16_to_f32(kiln_f32_to_f16(e)) : kiln_bf16_to_f32(kiln_f32_to_bf16(e));
      if (tm_get(&y, 0, i / N, i % N) != want)
        fail_msg("dtype %d: y[%" PRId64 "] = %.9g, expected %.9g (exact %.9g)", d, i, tm_get(&y, 0, i / N, i % N), want,
                 ref[i]);
    }
    tm_free(&y);
  }
  free(ref), free(wd);
  tm_free(&x);
  tq_free(&w);
  kiln_context_destroy(ctx);
}

/* A large K and more columns than one panel chunk of the CPU path holds (chunk edges), the
 * same bits on a second run (deterministic). */
static void large_k_chunks(void **state) {
  (void)state;
  kiln_context *ctx = w16_cpu_ctx();
  const int64_t K = 4096, N = 1031, M = 3;
  tq w;
  tq_make(&w, K, N, 128, false, true);
  tmat x, y;
  tm_compact(&x, TEST_F16, 2, 1, M, K);
  tm_init(&y, TEST_F16, 2, 1, M, N, COL, 3, 0, 1);
  run_case(ctx, &x, &w.q, &y, "K 4096 N 1031");
  void *first = malloc((size_t)y.total * y.elem);
  memcpy(first, y.buf, (size_t)y.total * y.elem);
  assert_kiln_ok(kiln_matmul_int4(ctx, &x.t, &w.q, &y.t, NULL, NULL));
  assert_memory_equal(first, y.buf, (size_t)y.total * y.elem);
  free(first);
  tm_free(&x), tm_free(&y);
  tq_free(&w);
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */
/* ------------------------------------------------------------------------------------------ */
typedef struct fixture {
  kiln_context *ctx;
  tmat x, y;
  tq w;
} fixture;
static void fx_init(fixture *f) {
  f->ctx = w16_cpu_ctx();
  tm_compact(&f->x, TEST_F16, 2, 1, 7, 64);
  tm_compact(&f->y, TEST_F32, 2, 1, 7, 17);
  tm_fill(&f->x);
  tm_poison(&f->y);
  tq_make(&f->w, 64, 17, 32, false, true);
}
static void fx_free(fixture *f) {
  tm_free(&f->x), tm_free(&f->y);
  tq_free(&f->w);
  kiln_context_destroy(f->ctx);
}
/* A failed call leaves y as it was (all poison). */
static void fx_untouched(const fixture *f) {
  for (int64_t i = 0; i < f->y.total; i++) assert_int_equal(((uint32_t *)f->y.buf)[i], 0x7fc00000u);
}
#define MM(x, w, y, o) kiln_matmul_int4(f.ctx, (x), (w), (y), (o), NULL)
#define E_INV KILN_ERROR_INVALID_ARGUMENT

static void err_null_and_dtypes(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  assert_kiln_fails(kiln_matmul_int4(NULL, &f.x.t, &f.w.q, &f.y.t, NULL, NULL), E_INV, "kiln_matmul_int4: ctx is NULL");
  assert_kiln_fails(MM(NULL, &f.w.q, &f.y.t, NULL), E_INV, "kiln_matmul_int4: x is NULL");
  assert_kiln_fails(MM(&f.x.t, NULL, &f.y.t, NULL), E_INV, "kiln_matmul_int4: w is NULL", "kiln_qweight");
  assert_kiln_fails(MM(&f.x.t, &f.w.q, NULL, NULL), E_INV, "kiln_matmul_int4: y is NULL");
  DLTensor x = f.x.t;
  x.dtype = TEST_F32;
  assert_kiln_fails(MM(&x, &f.w.q, &f.y.t, NULL), E_INV, "kiln_matmul_int4: x has dtype float32",
                    "expected float16 or bfloat16", "kiln_cast");
  x.dtype = (DLDataType){kDLInt, 8, 1};
  assert_kiln_fails(MM(&x, &f.w.q, &f.y.t, NULL), E_INV, "x has dtype int8");
  DLTensor y = f.y.t;
  y.dtype = (DLDataType){kDLInt, 32, 1};
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &y, NULL), E_INV, "kiln_matmul_int4: y has dtype int32",
                    "expected float32, float16 or bfloat16");
  y.dtype = (DLDataType){kDLFloat, 64, 1};
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &y, NULL), E_INV, "y has dtype float64");
  fx_untouched(&f);
  fx_free(&f);
}

/* The PREFILL workspace query: 0 on the CPU (which needs none), the op's own argument checks,
 * a NULL result pointer refused; a workspace given to the CPU path is ignored. */
static void workspace_size(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  size_t bytes = 123;
  assert_kiln_ok(kiln_matmul_int4_workspace_size(f.ctx, &f.x.t, &f.w.q, &f.y.t, &bytes));
  assert_int_equal(bytes, 0);
  assert_kiln_fails(kiln_matmul_int4_workspace_size(f.ctx, &f.x.t, &f.w.q, &f.y.t, NULL), E_INV,
                    "kiln_matmul_int4_workspace_size: bytes is NULL");
  bytes = 123;
  assert_kiln_fails(kiln_matmul_int4_workspace_size(f.ctx, &f.x.t, NULL, &f.y.t, &bytes), E_INV,
                    "kiln_matmul_int4_workspace_size: w is NULL");
  assert_kiln_fails(kiln_matmul_int4_workspace_size(NULL, &f.x.t, &f.w.q, &f.y.t, &bytes), E_INV,
                    "kiln_matmul_int4_workspace_size: ctx is NULL");
  assert_int_equal(bytes, 123); /* a failed query leaves bytes as it was, as every size query does */
  kiln_matmul_int4_opts o = kiln_matmul_int4_opts_default();
  char scratch[64];
  o.workspace = scratch, o.workspace_bytes = 1; /* too small for PREFILL, irrelevant to AUTO on the CPU */
  assert_kiln_ok(MM(&f.x.t, &f.w.q, &f.y.t, &o));
  fx_free(&f);
}

static void err_shapes(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  int64_t s_x[2] = {7, 32};
  DLTensor x = w16_dl(f.x.buf, TEST_F16, 2, s_x, NULL);
  assert_kiln_fails(MM(&x, &f.w.q, &f.y.t, NULL), E_INV, "kiln_matmul_int4: w->k = 64 but x has K = 32 (shape [7, 32])",
                    "must match");
  int64_t s_y[2] = {7, 16}, s_y2[2] = {6, 17};
  DLTensor y = w16_dl(f.y.buf, TEST_F32, 2, s_y, NULL);
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &y, NULL), E_INV, "kiln_matmul_int4: y has shape [7, 16]", "expected [7, 17]");
  y = w16_dl(f.y.buf, TEST_F32, 2, s_y2, NULL);
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &y, NULL), E_INV, "y has shape [6, 17]", "expected [7, 17]");
  int64_t s1[1] = {7 * 64}, s3[3] = {1, 7, 64};
  x = w16_dl(f.x.buf, TEST_F16, 1, s1, NULL);
  assert_kiln_fails(MM(&x, &f.w.q, &f.y.t, NULL), E_INV, "kiln_matmul_int4: x has rank 1", "expected rank 2");
  x = w16_dl(f.x.buf, TEST_F16, 3, s3, NULL);
  assert_kiln_fails(MM(&x, &f.w.q, &f.y.t, NULL), E_INV, "x has rank 3");
  int64_t s0[2] = {0, 64};
  x = w16_dl(f.x.buf, TEST_F16, 2, s0, NULL);
  assert_kiln_fails(MM(&x, &f.w.q, &f.y.t, NULL), E_INV, "x has shape [0, 64]", "every dimension must be >= 1");
  int64_t st[2] = {128, 2};
  x = w16_dl(f.x.buf, TEST_F16, 2, f.x.shape, st);
  assert_kiln_fails(MM(&x, &f.w.q, &f.y.t, NULL), E_INV, "x has shape [7, 64] with strides (128, 2)", "contiguous");
  fx_untouched(&f);
  fx_free(&f);
}

static void err_weight(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  kiln_qweight w = f.w.q;
  w.group = 48;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "kiln_matmul_int4: w is not a valid kiln_qweight: group = 48",
                    "32, 64, 128 or k");
  w = f.w.q, w.k = 60;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "w is not a valid kiln_qweight", "k = 60 is not a multiple of 8");
  w = f.w.q, w.k = 96, w.group = 64;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "k = 96 is not a multiple of group = 64");
  w = f.w.q, w.n = 0;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "w is not a valid kiln_qweight", "n = 0");
  w = f.w.q, w.codes = NULL;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "kiln_matmul_int4: w->codes is NULL", "kiln_qweight_bytes");
  w = f.w.q, w.scales = NULL;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "w->scales is NULL");
  w = f.w.q, w.zeros = NULL;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "w->zeros is NULL");
  /* misaligned buffers: a GPU kernel's u32 load would fault and lose the context */
  w = f.w.q, w.codes = (uint32_t *)((char *)w.codes + 2);
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "kiln_matmul_int4: w->codes = ", "is not 4-byte aligned",
                    "uint32 words");
  w = f.w.q, w.scales = (uint16_t *)((char *)w.scales + 1);
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "w->scales = ", "is not 2-byte aligned");
  w = f.w.q, w.perm = (int32_t *)((char *)w.perm + 1);
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "w->perm = ", "is not 4-byte aligned", "int32 indices");
  w = f.w.q, w.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "kiln_matmul_int4: w->device is kDLCUDA:0",
                    "the context is the CPU's");
  /* values, on the CPU: zeros 0..16, perm a permutation */
  w = f.w.q;
  w.zeros[5] = 17;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "kiln_matmul_int4: w->zeros[0, 5] = 17", "0..16");
  w.zeros[5] = 16;
  const int32_t p3 = w.perm[3];
  w.perm[3] = 64;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "kiln_matmul_int4: w->perm[3] = 64 is out of range",
                    "permutation of 0..63");
  w.perm[3] = -1;
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "w->perm[3] = -1 is out of range");
  w.perm[3] = w.perm[0];
  assert_kiln_fails(MM(&f.x.t, &w, &f.y.t, NULL), E_INV, "repeats an earlier entry");
  w.perm[3] = p3;
  fx_untouched(&f);
  assert_kiln_ok(MM(&f.x.t, &w, &f.y.t, NULL));
  fx_free(&f);
}

static void err_device_and_algo(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  DLTensor x = f.x.t;
  x.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(MM(&x, &f.w.q, &f.y.t, NULL), E_INV, "kiln_matmul_int4: x is on kDLCUDA:0", "the context is the CPU's");
  DLTensor y = f.y.t;
  y.device = (DLDevice){kDLCUDA, 1};
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &y, NULL), E_INV, "kiln_matmul_int4: y is on kDLCUDA:1");
  kiln_matmul_int4_opts o = kiln_matmul_int4_opts_default();
  o.algo = KILN_INT4_DECODE;
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &f.y.t, &o), KILN_ERROR_UNSUPPORTED,
                    "kiln_matmul_int4: algo KILN_INT4_DECODE needs a CUDA device", "use KILN_INT4_AUTO");
  o.algo = KILN_INT4_PREFILL;
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &f.y.t, &o), KILN_ERROR_UNSUPPORTED, "algo KILN_INT4_PREFILL");
  o.algo = (kiln_int4_algo)3;
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &f.y.t, &o), E_INV, "kiln_matmul_int4: opts->algo is 3",
                    "expected KILN_INT4_AUTO, KILN_INT4_DECODE or KILN_INT4_PREFILL");
  o.algo = (kiln_int4_algo)-1;
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &f.y.t, &o), E_INV, "opts->algo is -1");
  fx_untouched(&f);
  o.algo = KILN_INT4_AUTO;
  assert_kiln_ok(MM(&f.x.t, &f.w.q, &f.y.t, &o));
  fx_free(&f);
}

static void err_overlap(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  int64_t sy[2] = {7, 17};
  DLTensor y = w16_dl(f.x.buf, TEST_F16, 2, sy, NULL);
  assert_kiln_fails(MM(&f.x.t, &f.w.q, &y, NULL), E_INV, "kiln_matmul_int4: y overlaps x in memory", "separate buffer");
  /* y [7, 17] f32 (476 bytes) at the start of an arena, each weight buffer placed at its end */
  static _Alignas(16) unsigned char arena[1024];
  y = w16_dl(arena, TEST_F32, 2, sy, NULL);
  kiln_qweight w = f.w.q;
  w.codes = (uint32_t *)(arena + 472);
  assert_kiln_fails(MM(&f.x.t, &w, &y, NULL), E_INV, "kiln_matmul_int4: y overlaps w->codes in memory");
  w = f.w.q, w.scales = (uint16_t *)(arena + 474);
  assert_kiln_fails(MM(&f.x.t, &w, &y, NULL), E_INV, "y overlaps w->scales in memory");
  w = f.w.q, w.zeros = arena + 475;
  assert_kiln_fails(MM(&f.x.t, &w, &y, NULL), E_INV, "y overlaps w->zeros in memory");
  w = f.w.q, w.perm = (int32_t *)(arena + 472);
  assert_kiln_fails(MM(&f.x.t, &w, &y, NULL), E_INV, "y overlaps w->perm in memory");
  w = f.w.q, w.zeros = arena + 476; /* just past y: fine */
  memcpy(w.zeros, f.w.q.zeros, 2 * 17);
  assert_kiln_ok(MM(&f.x.t, &w, &y, NULL));
  fx_untouched(&f);
  fx_free(&f);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(opts_default),
      cmocka_unit_test(groups_sym_asym_ragged),
      cmocka_unit_test(act_order_perm),
      cmocka_unit_test(gptq_act_order_import),
      cmocka_unit_test(quantized_weights),
      cmocka_unit_test(exact_extremes),
      cmocka_unit_test(large_k_chunks),
      cmocka_unit_test(workspace_size),
      cmocka_unit_test(err_null_and_dtypes),
      cmocka_unit_test(err_shapes),
      cmocka_unit_test(err_weight),
      cmocka_unit_test(err_device_and_algo),
      cmocka_unit_test(err_overlap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
