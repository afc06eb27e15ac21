/*
 * test_gpu_int4.c — the weight-only products on the GPU (kiln_matmul_int4, kiln_qkv_project_int4,
 * and kiln_qkv_project_int8, which share one kernel family) against the float64
 * reference of test_w16.h (weights built and dequantized by the test's own code): ragged M, N
 * and K, every group size (32, 64, 128, per-column), symmetric and asymmetric zeros, act-order
 * permutations, f16 and bf16 activations, every output dtype, row- and column-major x and y,
 * a decode-size layer, and the fused QKV call (GQA widths) against three single calls, bit for
 * bit; int8 weights row- and column-major (uint8 too) with padded leading dimensions, per-projection
 * and per-column scales, and the shapes of the sm_90a TMA kernels (qkv_int8_tma, decode_edges);
 * kernels chained on one stream without a sync (dependent_chain: the dependent launch). Outputs
 * are NaN-poisoned; every element is checked, and nothing outside the view may be written. Exits
 * 77 without a GPU.
 *
 * Bounds: the relative Frobenius error of SPEC §5 (f32 1e-4, f16 2e-3, bf16 6e-3) and, per
 * element, one ulp of the output dtype plus the fp32 accumulation's worst case K·2⁻²⁴·Σ|terms|.
 */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln.h"
#include "test_util.h"
#include "test_w16.h"

static kiln_context *g_ctx;
static CUstream g_stream;
static const DLDataType U8 = {kDLUInt, 8, 1};

/* ---------------------------------------------------------------------------------------- */
/* Device copies of host buffers, matrices and weights                                       */
/* ---------------------------------------------------------------------------------------- */
/* bytes from the host into d (1-D u8 of that size), enqueued on g_stream */
static void copy_up(DLManagedTensorVersioned *d, const void *host, size_t bytes) {
  const int64_t n = (int64_t)bytes;
  test_tensor h = test_host_tensor((void *)host, U8, 1, &n);
  assert_kiln_ok(kiln_tensor_copy(g_ctx, test_dl(&h), &d->dl_tensor, g_stream));
}
static DLManagedTensorVersioned *upload(const void *host, size_t bytes) {
  DLManagedTensorVersioned *d;
  const int64_t n = (int64_t)bytes;
  assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &n, U8, &d));
  copy_up(d, host, bytes);
  return d;
}
static void download(void *host, DLManagedTensorVersioned *d, size_t bytes) {
  const int64_t n = (int64_t)bytes;
  test_tensor h = test_host_tensor(host, U8, 1, &n);
  assert_kiln_ok(kiln_tensor_copy(g_ctx, &d->dl_tensor, test_dl(&h), g_stream));
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, g_stream));
}

/* A tmat's buffer on the device, and the view over it. */
typedef struct gmat {
  DLManagedTensorVersioned *dev;
  DLTensor t;
} gmat;
static void gmat_up(gmat *g, const tmat *m) {
  g->dev = upload(m->buf, (size_t)m->total * m->elem);
  g->t = m->t;
  g->t.data = g->dev->dl_tensor.data;
  g->t.device = (DLDevice){kDLCUDA, 0};
}
static void gmat_down(gmat *g, tmat *m) { download(m->buf, g->dev, (size_t)m->total * m->elem); }
static void gmat_reup(gmat *g, const tmat *m) { copy_up(g->dev, m->buf, (size_t)m->total * m->elem); }

typedef struct gweight {
  kiln_qweight q;
  DLManagedTensorVersioned *buf[4];
} gweight;
static void gweight_up(gweight *g, const kiln_qweight *h) {
  size_t cb, sb, zb, pb;
  assert_kiln_ok(kiln_qweight_bytes(h->k, h->n, h->group, &cb, &sb, &zb, &pb));
  memset(g, 0, sizeof *g);
  g->q = *h;
  g->q.device = (DLDevice){kDLCUDA, 0};
  g->buf[0] = upload(h->codes, cb), g->q.codes = g->buf[0]->dl_tensor.data;
  g->buf[1] = upload(h->scales, sb), g->q.scales = g->buf[1]->dl_tensor.data;
  g->buf[2] = upload(h->zeros, zb), g->q.zeros = g->buf[2]->dl_tensor.data;
  if (h->perm) g->buf[3] = upload(h->perm, pb), g->q.perm = g->buf[3]->dl_tensor.data;
}
static void gweight_free(gweight *g) {
  for (int i = 0; i < 4; i++)
    if (g->buf[i]) kiln_tensor_free(g->buf[i]);
}

/* ---------------------------------------------------------------------------------------- */
/* The check                                                                                 */
/* ---------------------------------------------------------------------------------------- */
static int check(const tmat *y, const double *ref, const double *mag, int64_t K, const char *what) {
  const int64_t M = y->rows, N = y->cols;
  double *got = malloc(sizeof(double) * (size_t)(M * N));
  char *in_view = calloc((size_t)y->total, 1);
  assert_non_null(got), assert_non_null(in_view);
  int64_t bad = 0, outside = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      in_view[tm_index(y, 0, m, n)] = 1;
      const double g = tm_get(y, 0, m, n), e = ref[m * N + n];
      got[m * N + n] = g;
      const double acc = (double)K * 0x1p-24 * mag[m * N + n];
      if (!(fabs(g - e) <= w16_ulp(y->dt, fabs(e) + acc) + acc)) {
        if (!bad) print_message("%s: y[%" PRId64 ", %" PRId64 "] = %.9g, reference %.12g\n", what, m, n, g, e);
        bad++;
      }
    }
  for (int64_t i = 0; i < y->total; i++) {
    if (in_view[i]) continue;
    const bool poisoned = y->elem == 4 ? ((uint32_t *)y->buf)[i] == 0x7fc00000u
                                       : ((uint16_t *)y->buf)[i] == (y->dt.code == kDLBfloat ? 0x7fc0 : 0x7e00);
    outside += !poisoned;
  }
  const double err = test_rel_error(got, ref, M * N);
  free(got), free(in_view);
  if (bad || outside || !(err <= w16_tolerance(y->dt))) {
    print_message("FAILED %s: %" PRId64 " elements off, %" PRId64 " written outside the view, relative error %.3g "
                  "(limit %.g)\n",
                  what, bad, outside, err, w16_tolerance(y->dt));
    return 0;
  }
  return 1;
}

static const char *dt_name(DLDataType t) { return t.bits == 32 ? "f32" : t.code == kDLBfloat ? "bf16" : "f16"; }

/* PREFILL multiplies the weight rounded to x's dtype (kiln.h): its reference rounds wd the same. */
static void round_to(double *wd, int64_t n, DLDataType xd) {
  for (int64_t i = 0; i < n; i++)
    wd[i] = xd.code == kDLBfloat ? kiln_bf16_to_f32(kiln_f32_to_bf16((float)wd[i]))
                                 : kiln_f16_to_f32(kiln_f32_to_f16((float)wd[i]));
}

/* ---------------------------------------------------------------------------------------- */
/* One kiln_matmul_int4 case                                                                 */
/* ---------------------------------------------------------------------------------------- */
typedef struct icase {
  int64_t M, K, N, G;
  int sym, perm;
  DLDataType x, y;
  int x_layout, y_layout; /* ROW or COL */
  int64_t x_pad;          /* extra elements per leading dimension of x */
  int prefill;            /* 1: algo PREFILL with a workspace, 2: AUTO with a workspace, 3: AUTO
                           * without one, where the one-kernel PREFILL takes the call */
  int y_rows16;           /* y's rows padded by 8 elements instead of 3 (16-byte rows at N % 8 == 0) */
} icase;

static int run_case(const icase *c) {
  char what[200];
  snprintf(what, sizeof what,
           "M%" PRId64 " K%" PRId64 " N%" PRId64 " G%" PRId64 " %s%s x %s%s y %s%s", c->M, c->K, c->N, c->G,
           c->sym ? "sym" : "asym", c->perm ? " act-order" : "", dt_name(c->x), c->x_layout == COL ? " (col-major)" : "",
           dt_name(c->y), c->y_layout == COL ? " (col-major)" : "");
  tq w;
  tq_make(&w, c->K, c->N, c->G, c->sym, c->perm);
  tmat x, y;
  tm_init(&x, c->x, 2, 1, c->M, c->K, c->x_layout, c->x_pad, 0, 0);
  tm_init(&y, c->y, 2, 1, c->M, c->N, c->y_layout, c->y_rows16 ? 8 : 3, 0, 0);
  tm_fill(&x), tm_poison(&y);
  gmat gx, gy;
  gweight gw;
  gmat_up(&gx, &x), gmat_up(&gy, &y), gweight_up(&gw, &w.q);
  kiln_matmul_int4_opts opts = kiln_matmul_int4_opts_default();
  DLManagedTensorVersioned *ws = NULL;
  if (c->prefill == 1 || c->prefill == 2) { /* 3: the defaults (AUTO, no workspace) */
    size_t bytes = 0;
    assert_kiln_ok(kiln_matmul_int4_workspace_size(g_ctx, &gx.t, &gw.q, &gy.t, &bytes));
    assert_int_equal(bytes, (size_t)(c->K * c->N * 2));
    const int64_t n = (int64_t)bytes;
    assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &n, U8, &ws));
    opts.workspace = ws->dl_tensor.data, opts.workspace_bytes = bytes;
    opts.algo = c->prefill == 1 ? KILN_INT4_PREFILL : KILN_INT4_AUTO;
  }
  const kiln_status st = kiln_matmul_int4(g_ctx, &gx.t, &gw.q, &gy.t, &opts, g_stream);
  int ok = st == KILN_OK;
  if (!ok) {
    print_message("FAILED %s: kiln_matmul_int4 -> %s: %s\n", what, kiln_status_string(st), kiln_last_error());
  } else {
    gmat_down(&gy, &y);
    double *wd = tq_dequant(&w.q), *ref, *mag;
    if (c->prefill) round_to(wd, c->K * c->N, c->x);
    w16_reference(&x, wd, w.q.perm, c->N, NULL, &ref, &mag);
    ok = check(&y, ref, mag, c->K, what);
    free(ref), free(wd);
  }
  if (ws) kiln_tensor_free(ws);
  kiln_tensor_free(gx.dev), kiln_tensor_free(gy.dev), gweight_free(&gw);
  tm_free(&x), tm_free(&y), tq_free(&w);
  return ok;
}

/* Every case runs (each failure is listed), then the test fails if any did. */
static void run_cases(const icase *cs, int n) {
  int failures = 0;
  for (int i = 0; i < n; i++) failures += !run_case(&cs[i]);
  if (failures) fail_msg("%d of %d cases failed (listed above)", failures, n);
}

/* ---------------------------------------------------------------------------------------- */
/* Tests                                                                                     */
/* ---------------------------------------------------------------------------------------- */
/* Every group size, sym and asym, both activation dtypes, every output dtype, decode M. */
static void groups_dtypes(void **state) {
  (void)state;
  static const int64_t groups[4] = {32, 64, 128, 256}; /* 256 = K: one group per column */
  icase cs[4 * 2 * 2 * 3];
  int n = 0;
  for (int g = 0; g < 4; g++)
    for (int sym = 0; sym < 2; sym++)
      for (int xt = 0; xt < 2; xt++)
        for (int yt = 0; yt < 3; yt++) {
          const DLDataType xd = xt ? TEST_BF16 : TEST_F16, yd = yt == 0 ? TEST_F32 : yt == 1 ? TEST_F16 : TEST_BF16;
          cs[n++] = (icase){1 + (g + yt) % 4 * 5, 256, 96, groups[g], sym, 0, xd, yd, ROW, ROW, 0, 0, 0};
        }
  run_cases(cs, n);
}

/* Ragged M (several 16-row tiles), N not a multiple of 4 or 32 (scalar weight loads, partial
 * column groups), K ending in a partial chunk (G = K = 40, 8, 264), strided and column-major x
 * (element gathers), column-major y, act-order permutations. */
static void ragged_layouts_perm(void **state) {
  (void)state;
  const icase cs[] = {
      {1, 64, 1, 32, 1, 0, TEST_F16, TEST_F32, ROW, ROW, 0, 0, 0},
      {3, 40, 33, 40, 0, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 0, 0},
      {17, 8, 7, 8, 1, 0, TEST_BF16, TEST_F32, ROW, COL, 0, 0, 0},
      {16, 264, 100, 264, 0, 1, TEST_F16, TEST_F32, ROW, ROW, 0, 0, 0},
      {64, 128, 130, 64, 1, 1, TEST_BF16, TEST_BF16, ROW, ROW, 3, 0, 0},
      {33, 192, 64, 32, 0, 0, TEST_F16, TEST_F16, COL, COL, 0, 0, 0},
      {5, 256, 257, 128, 0, 1, TEST_BF16, TEST_F32, COL, ROW, 1, 0, 0},
      {100, 128, 40, 128, 1, 0, TEST_F16, TEST_F32, ROW, ROW, 8, 0, 0},
  };
  run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* A decode-size layer (K = N = 4096, G = 128) at M = 1 and 16; smaller under the sanitizer. */
static void decode_layer(void **state) {
  (void)state;
  const int64_t S = getenv("KILN_TEST_SANITIZER") ? 512 : 4096;
  const icase cs[] = {
      {1, S, S, 128, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 0, 0},
      {16, S, S, 128, 0, 0, TEST_BF16, TEST_BF16, ROW, ROW, 0, 0, 0},
      {7, S, S + 8, 64, 0, 1, TEST_F16, TEST_F32, ROW, ROW, 0, 0, 0},
  };
  run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* The same call twice gives the same bits (no atomics: warps' partial sums add in order). */
static void rerun_identical(int64_t M, int64_t K, int64_t N, int64_t G, DLDataType xd) {
  tq w;
  tq_make(&w, K, N, G, 0, 0);
  tmat x, y;
  tm_compact(&x, xd, 2, 1, M, K);
  tm_compact(&y, TEST_F32, 2, 1, M, N);
  tm_fill(&x);
  gmat gx, gy;
  gweight gw;
  gmat_up(&gx, &x), gmat_up(&gy, &y), gweight_up(&gw, &w.q);
  const size_t bytes = (size_t)y.total * 4;
  void *first = malloc(bytes);
  assert_non_null(first);
  for (int run = 0; run < 2; run++) {
    assert_kiln_ok(kiln_matmul_int4(g_ctx, &gx.t, &gw.q, &gy.t, NULL, g_stream));
    gmat_down(&gy, &y);
    if (run == 0) memcpy(first, y.buf, bytes);
  }
  assert_memory_equal(first, y.buf, bytes);
  free(first);
  kiln_tensor_free(gx.dev), kiln_tensor_free(gy.dev), gweight_free(&gw);
  tm_free(&x), tm_free(&y), tq_free(&w);
}

/* Kernels that read what the one before them on the stream wrote, and overwrite what it read:
 * on sm_90a the TMA decode kernel launches as a programmatic dependent of the stream's previous
 * kernel (its launch and prologue overlap that kernel's end), so it must neither read x nor write
 * y before that kernel has ended. y1 = x·W1, then x = y1·W2 over the x the first call reads, with
 * no synchronization between them; three rounds, each checked (y1 against the x it read, the new
 * x against the y1 it read). */
static void dependent_chain(void **state) {
  (void)state;
  const int64_t M = 4, K = 2048;
  tq w1, w2;
  tq_make(&w1, K, K, 128, 0, 0), tq_make(&w2, K, K, 64, 1, 0);
  tmat x, y1;
  tm_compact(&x, TEST_F16, 2, 1, M, K), tm_compact(&y1, TEST_F16, 2, 1, M, K);
  tm_fill(&x), tm_poison(&y1);
  gmat gx, gy1;
  gweight gw1, gw2;
  gmat_up(&gx, &x), gmat_up(&gy1, &y1), gweight_up(&gw1, &w1.q), gweight_up(&gw2, &w2.q);
  double *wd1 = tq_dequant(&w1.q), *wd2 = tq_dequant(&w2.q);
  int failures = 0;
  for (int round = 0; round < 3; round++) {
    double *ref1, *mag1, *ref2, *mag2; /* mag: inside ref's allocation */
    if (round) tm_fill(&x), gmat_reup(&gx, &x); /* fresh x (the chain's values grow ~15x a product) */
    w16_reference(&x, wd1, NULL, K, NULL, &ref1, &mag1); /* x as the first call reads it */
    assert_kiln_ok(kiln_matmul_int4(g_ctx, &gx.t, &gw1.q, &gy1.t, NULL, g_stream));
    assert_kiln_ok(kiln_matmul_int4(g_ctx, &gy1.t, &gw2.q, &gx.t, NULL, g_stream));
    gmat_down(&gy1, &y1), gmat_down(&gx, &x);
    w16_reference(&y1, wd2, NULL, K, NULL, &ref2, &mag2);
    failures += !check(&y1, ref1, mag1, K, "dependent chain: y1 = x·W1");
    failures += !check(&x, ref2, mag2, K, "dependent chain: x = y1·W2, over x");
    free(ref1), free(ref2);
  }
  free(wd1), free(wd2);
  kiln_tensor_free(gx.dev), kiln_tensor_free(gy1.dev), gweight_free(&gw1), gweight_free(&gw2);
  tm_free(&x), tm_free(&y1), tq_free(&w1), tq_free(&w2);
  if (failures) fail_msg("%d of 6 chained products failed (listed above)", failures);
}

/* M <= 8 with K a multiple of 128, N of 32, G in {32, 64, 128}, no act-order and x row-major
 * with 16-byte rows: the shapes whose blocks all take the decode kernel's unguarded path
 * (wa16_decode_sm80.cu). Every such group size, sym and asym, both activation dtypes, every
 * output dtype, padded x, one K chunk up to a decode-size layer; then x padded by one or three
 * elements (the same shapes, guarded loads) and one bit-identical rerun. */
static void aligned_decode(void **state) {
  (void)state;
  const int64_t S = getenv("KILN_TEST_SANITIZER") ? 1024 : 4096;
  const icase cs[] = {
      {1, 128, 32, 32, 1, 0, TEST_F16, TEST_F32, ROW, ROW, 0, 0, 0},
      {2, 128, 64, 64, 0, 0, TEST_BF16, TEST_F16, ROW, ROW, 8, 0, 0},
      {3, 384, 96, 128, 1, 0, TEST_F16, TEST_BF16, ROW, ROW, 0, 0, 0},
      {8, 384, 96, 32, 0, 0, TEST_BF16, TEST_F32, ROW, COL, 16, 0, 0},
      {5, 1024, 160, 64, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 8, 0, 0},
      {4, 1024, 160, 128, 0, 0, TEST_BF16, TEST_BF16, ROW, ROW, 0, 0, 0},
      {1, S, S, 128, 0, 0, TEST_BF16, TEST_F32, ROW, ROW, 0, 0, 0},
      {8, S, 256, 32, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 0, 0},
      {7, 1024, 160, 64, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 1, 0, 0}, /* x rows not 16-byte aligned */
      {6, 384, 96, 128, 0, 0, TEST_BF16, TEST_F32, ROW, ROW, 3, 0, 0},
  };
  rerun_identical(8, 2048, 512, 64, TEST_BF16);
  run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* Decode edges with aligned buffers (N a multiple of 16, 16-byte x rows, no act-order): half
 * blocks (N % 32 = 16), K not a multiple of the 128-k unit of the unguarded loop, one group per
 * column at G = K = 16, 64, 96 and 264, M at 1, 8, 9, 10 and 16, long K (16384) on two blocks, more
 * blocks than SMs, more tiles than persistent blocks, column-major y, and bit-identical reruns:
 * the sm_90a TMA kernel's edges (stages of 1024 k in units of 256, 32-column boxes, G = K, blocks
 * taking several tiles) and, at M > 8, the sm_80 kernel's. */
static void decode_edges(void **state) {
  (void)state;
  const bool small = getenv("KILN_TEST_SANITIZER") != NULL;
  const icase cs[] = {
      {1, 256, 16, 32, 1, 0, TEST_F16, TEST_F32, ROW, ROW, 0, 0, 0},
      {3, 264, 48, 264, 0, 0, TEST_BF16, TEST_F16, ROW, ROW, 0, 0, 0},
      {8, 640, 96, 128, 1, 0, TEST_F16, TEST_BF16, ROW, COL, 8, 0, 0},
      {9, 640, 112, 64, 0, 0, TEST_BF16, TEST_F32, ROW, ROW, 0, 0, 0},
      {16, 1152, 64, 32, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 16, 0, 0},
      {16, 96, 32, 96, 0, 0, TEST_BF16, TEST_BF16, ROW, ROW, 0, 0, 0},
      {5, 64, 16, 64, 1, 0, TEST_F16, TEST_F32, ROW, ROW, 0, 0, 0},
      {2, 16, 16, 16, 0, 0, TEST_F16, TEST_F32, ROW, ROW, 0, 0, 0},
      {1, small ? 4096 : 16384, 64, 128, 0, 0, TEST_BF16, TEST_F32, ROW, ROW, 0, 0, 0},
      {4, 512, 8192, 64, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 0, 0},
      {2, small ? 2048 : 8192, 4352, 32, 0, 0, TEST_BF16, TEST_F32, ROW, ROW, 0, 0, 0},
      {12, small ? 1024 : 4096, 4224, 128, 1, 0, TEST_F16, TEST_F32, ROW, COL, 0, 0, 0},
      {3, 1280, 48, 64, 1, 0, TEST_BF16, TEST_F32, ROW, ROW, 0, 0, 0}, /* v13: a stage and one unit */
      {4, 512, 32, 512, 0, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 0, 0},  /* v13: G = K, two group rows */
      /* v15: more tiles than two blocks per SM (264 on the H200), so persistent blocks take two
       * tiles each, the ring wrapping across a tile's end; and some blocks two, others one */
      {3, small ? 1024 : 4096, 12288, 128, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 0, 0},
      {8, 1024, 9216, 32, 0, 0, TEST_BF16, TEST_F32, ROW, COL, 0, 0, 0},
      /* M 9..16 (the sm_80 kernel's 16-row blocks; measured on the TMA kernel's row tiles) */
      {16, 2048, 1024, 128, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 0, 0},
      {10, 1024, 96, 64, 0, 0, TEST_BF16, TEST_F32, ROW, ROW, 0, 0, 0},
  };
  rerun_identical(1, 4096, 4096, 128, TEST_F16);
  rerun_identical(2, 4096, 12288, 64, TEST_BF16);
  rerun_identical(16, 2048, 4352, 32, TEST_BF16);
  run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* The fused QKV tests' problem: x [M, 512], three weights of GQA widths (512, 128, 136), each its
 * own group size (128, 64, 512), symmetric, asymmetric and act-order, outputs of dtype yd with a
 * column-major k, poisoned. */
typedef struct qkvfix {
  int64_t M, K, N[3], G[3];
  DLDataType xd;
  tq w[3];
  gweight gw[3];
  tmat x, y[3];
  gmat gx, gy[3];
} qkvfix;

/* A problem of the given shape: projection 1's output column-major, projection 2 act-order when
 * perm2. */
static void qkv_setup_shape(qkvfix *f, int64_t M, int64_t K, const int64_t N[3], const int64_t G[3], bool perm2,
                            DLDataType xd, DLDataType yd) {
  *f = (qkvfix){.M = M, .K = K, .N = {N[0], N[1], N[2]}, .G = {G[0], G[1], G[2]}, .xd = xd};
  tm_compact(&f->x, xd, 2, 1, M, f->K);
  tm_fill(&f->x);
  gmat_up(&f->gx, &f->x);
  for (int i = 0; i < 3; i++) {
    tq_make(&f->w[i], f->K, f->N[i], f->G[i], i != 1, i == 2 && perm2);
    gweight_up(&f->gw[i], &f->w[i].q);
    tm_init(&f->y[i], yd, 2, 1, M, f->N[i], i == 1 ? COL : ROW, 2, 0, 0);
    tm_poison(&f->y[i]);
    gmat_up(&f->gy[i], &f->y[i]);
  }
}

/* aligned: widths all multiples of 16 and no act-order (group sizes 128, 32, 512), else the
 * default problem above. */
static void qkv_setup_as(qkvfix *f, int64_t M, DLDataType xd, DLDataType yd, bool aligned) {
  const int64_t N[3] = {512, 128, aligned ? 144 : 136}, G[3] = {128, aligned ? 32 : 64, 512};
  qkv_setup_shape(f, M, 512, N, G, !aligned, xd, yd);
}

static void qkv_setup(qkvfix *f, int64_t M, DLDataType xd, DLDataType yd) { qkv_setup_as(f, M, xd, yd, false); }

static void qkv_free(qkvfix *f) {
  for (int i = 0; i < 3; i++) kiln_tensor_free(f->gy[i].dev), gweight_free(&f->gw[i]), tm_free(&f->y[i]), tq_free(&f->w[i]);
  kiln_tensor_free(f->gx.dev), tm_free(&f->x);
}

/* y (projection i's output, downloaded) against float64, on the weight rounded to x's dtype for
 * PREFILL; fails the test with what. */
static void qkv_check(qkvfix *f, int i, const tmat *y, int prefill, const char *what) {
  double *wd = tq_dequant(&f->w[i].q), *ref, *mag;
  if (prefill) round_to(wd, f->K * f->N[i], f->xd);
  w16_reference(&f->x, wd, f->w[i].q.perm, f->N[i], NULL, &ref, &mag);
  const int ok = check(y, ref, mag, f->K, what);
  free(ref), free(wd);
  if (!ok) fail_msg("%s failed (above)", what);
}

/* All three outputs of a PREFILL call, downloaded and checked against the weights rounded to x's
 * dtype; label leads each message, then M, the projection, N and G. */
static void qkv_check_prefill(qkvfix *f, const char *label) {
  for (int i = 0; i < 3; i++) {
    char what[160];
    snprintf(what, sizeof what, "%s M%" PRId64 " projection %d (N %" PRId64 ", G %" PRId64 ")", label, f->M, i,
             f->N[i], f->G[i]);
    gmat_down(&f->gy[i], &f->y[i]);
    qkv_check(f, i, &f->y[i], 1, what);
  }
}

static void qkv_call(qkvfix *f, const kiln_qkv_opts *opts) {
  assert_kiln_ok(kiln_qkv_project_int4(g_ctx, &f->gx.t, &f->gw[0].q, &f->gw[1].q, &f->gw[2].q, &f->gy[0].t,
                                       &f->gy[1].t, &f->gy[2].t, opts, g_stream));
}

/* The fused QKV call (DECODE) at M 1, 16, 37: every output, and each projection's own
 * kiln_matmul_int4, against the reference (aligned: qkv_setup_as's aligned problem). */
static void qkv_fused_as(bool aligned) {
  static const int64_t Ms[3] = {1, 16, 37};
  for (int mi = 0; mi < 3; mi++)
    for (int xt = 0; xt < 2; xt++) {
      const DLDataType xd = xt ? TEST_BF16 : TEST_F16, yd = mi == 1 ? TEST_F32 : xd;
      qkvfix f;
      qkv_setup_as(&f, Ms[mi], xd, yd, aligned);
      qkv_call(&f, NULL);
      for (int i = 0; i < 3; i++) {
        char what[140];
        snprintf(what, sizeof what, "qkv M%" PRId64 " %s projection %d (N %" PRId64 ", G %" PRId64 ")", f.M,
                 dt_name(xd), i, f.N[i], f.G[i]);
        gmat_down(&f.gy[i], &f.y[i]);
        qkv_check(&f, i, &f.y[i], 0, what);
        /* the single call agrees (not always bit for bit: a launch of one projection may split
         * K over more warps, kiln.h) */
        tmat single;
        gmat gs;
        tm_init(&single, yd, 2, 1, f.M, f.N[i], i == 1 ? COL : ROW, 2, 0, 0);
        tm_poison(&single);
        gmat_up(&gs, &single);
        assert_kiln_ok(kiln_matmul_int4(g_ctx, &f.gx.t, &f.gw[i].q, &gs.t, NULL, g_stream));
        gmat_down(&gs, &single);
        snprintf(what + strlen(what), sizeof what - strlen(what), ", the single kiln_matmul_int4");
        qkv_check(&f, i, &single, 0, what);
        kiln_tensor_free(gs.dev), tm_free(&single);
      }
      qkv_free(&f);
    }
}
static void qkv_fused(void **state) {
  (void)state;
  qkv_fused_as(false);
}
static void qkv_fused_aligned(void **state) {
  (void)state;
  qkv_fused_as(true);
}

/* The fused QKV call's PREFILL (each projection dequantized into one shared workspace, then
 * kiln_matmul): explicit at M = 40 and through AUTO at M = 260 (the workspace given); against
 * the reference on the weights rounded to x's dtype (kiln.h). */
static void qkv_prefill(void **state) {
  (void)state;
  static const int64_t Ms[2] = {40, 260};
  for (int mi = 0; mi < 2; mi++)
    for (int xt = 0; xt < 2; xt++) {
      const DLDataType xd = xt ? TEST_BF16 : TEST_F16, yd = mi ? TEST_F32 : xd;
      qkvfix f;
      qkv_setup(&f, Ms[mi], xd, yd);
      size_t bytes = 0;
      assert_kiln_ok(kiln_qkv_project_int4_workspace_size(g_ctx, &f.gx.t, &f.gw[0].q, &f.gw[1].q, &f.gw[2].q,
                                                          &f.gy[0].t, &f.gy[1].t, &f.gy[2].t, &bytes));
      assert_int_equal(bytes, (size_t)(f.K * 512 * 2)); /* the largest weight, reused in turn */
      const int64_t nb = (int64_t)bytes;
      DLManagedTensorVersioned *ws = NULL;
      assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &nb, U8, &ws));
      kiln_qkv_opts opts = kiln_qkv_opts_default();
      opts.algo = mi ? KILN_QKV_AUTO : KILN_QKV_PREFILL;
      opts.workspace = ws->dl_tensor.data, opts.workspace_bytes = bytes;
      qkv_call(&f, &opts);
      char label[40];
      snprintf(label, sizeof label, "qkv PREFILL %s", dt_name(xd));
      qkv_check_prefill(&f, label);
      kiln_tensor_free(ws);
      qkv_free(&f);
    }
}

/* The fused QKV PREFILL into adjacent column slices of one row-major [M, Ntot + 1] buffer (the
 * usual fused output, one padding column): the three weights dequantized side by side, one GEMM.
 * Widths whose offsets and total allow the 16-byte dequantize stores (512 + 128 + 136) and
 * widths that do not (96 + 40 + 33); the workspace query gives the merged size; each slice
 * against the reference on the rounded weights, the padding column untouched. */
static void qkv_prefill_merged(void **state) {
  (void)state;
  static const int64_t widths[2][3] = {{512, 128, 136}, {96, 40, 33}};
  for (int wi = 0; wi < 2; wi++) {
    const int64_t M = 300, K = 256, *Ns = widths[wi], NT = Ns[0] + Ns[1] + Ns[2] + 1;
    const DLDataType xd = wi ? TEST_BF16 : TEST_F16, yd = wi ? TEST_BF16 : TEST_F32;
    const size_t ye = yd.bits / 8;
    tq w[3];
    gweight gw[3];
    tmat x;
    gmat gx;
    tm_compact(&x, xd, 2, 1, M, K);
    tm_fill(&x);
    gmat_up(&gx, &x);
    for (int i = 0; i < 3; i++) {
      tq_make(&w[i], K, Ns[i], i == 1 ? 64 : 128, i != 1, i == 2);
      gweight_up(&gw[i], &w[i].q);
    }
    char *buf = malloc((size_t)(M * NT) * ye);
    assert_non_null(buf);
    test_poison(buf, yd, M * NT);
    DLManagedTensorVersioned *gy = upload(buf, (size_t)(M * NT) * ye);
    int64_t shapes[3][2], strides[2] = {NT, 1}, col = 0;
    DLTensor out[3];
    for (int i = 0; i < 3; i++) {
      shapes[i][0] = M, shapes[i][1] = Ns[i];
      out[i] = (DLTensor){.data = (char *)gy->dl_tensor.data + col * (int64_t)ye, .device = {kDLCUDA, 0}, .ndim = 2,
                          .dtype = yd, .shape = shapes[i], .strides = strides};
      col += Ns[i];
    }
    size_t bytes = 0;
    assert_kiln_ok(kiln_qkv_project_int4_workspace_size(g_ctx, &gx.t, &gw[0].q, &gw[1].q, &gw[2].q, &out[0], &out[1],
                                                        &out[2], &bytes));
    assert_int_equal(bytes, (size_t)(K * (NT - 1) * 2)); /* the three weights side by side */
    const int64_t nb = (int64_t)bytes;
    DLManagedTensorVersioned *ws = NULL;
    assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &nb, U8, &ws));
    kiln_qkv_opts opts = kiln_qkv_opts_default(); /* AUTO: M = 300 takes PREFILL */
    opts.workspace = ws->dl_tensor.data, opts.workspace_bytes = bytes;
    assert_kiln_ok(kiln_qkv_project_int4(g_ctx, &gx.t, &gw[0].q, &gw[1].q, &gw[2].q, &out[0], &out[1], &out[2], &opts,
                                         g_stream));
    download(buf, gy, (size_t)(M * NT) * ye);
    col = 0;
    for (int i = 0; i < 3; i++) {
      char what[120];
      snprintf(what, sizeof what, "qkv PREFILL merged %s, slice %d (N %" PRId64 ")", dt_name(xd), i, Ns[i]);
      tmat slice;
      tm_compact(&slice, yd, 2, 1, M, Ns[i]);
      for (int64_t m = 0; m < M; m++) memcpy((char *)slice.buf + (size_t)(m * Ns[i]) * ye, buf + (size_t)(m * NT + col) * ye, (size_t)Ns[i] * ye);
      double *wd = tq_dequant(&w[i].q), *ref, *mag;
      round_to(wd, K * Ns[i], xd);
      w16_reference(&x, wd, w[i].q.perm, Ns[i], NULL, &ref, &mag);
      if (!check(&slice, ref, mag, K, what)) fail_msg("%s failed (above)", what);
      free(ref), free(wd), tm_free(&slice);
      col += Ns[i];
    }
    tmat pad; /* the padding column, as a poisoned [M, 1] matrix would read */
    tm_compact(&pad, yd, 2, 1, M, 1);
    for (int64_t m = 0; m < M; m++) memcpy((char *)pad.buf + (size_t)m * ye, buf + (size_t)(m * NT + NT - 1) * ye, ye);
    for (int64_t m = 0; m < M; m++)
      assert_true(ye == 4 ? ((uint32_t *)pad.buf)[m] == 0x7fc00000u : ((uint16_t *)pad.buf)[m] == 0x7fc0);
    tm_free(&pad);
    kiln_tensor_free(ws), kiln_tensor_free(gy), free(buf);
    for (int i = 0; i < 3; i++) gweight_free(&gw[i]), tq_free(&w[i]);
    kiln_tensor_free(gx.dev), tm_free(&x);
  }
}

/* M = 9: the 16-row kernels. */
static void deterministic(void **state) {
  (void)state;
  rerun_identical(9, 2048, 256, 128, TEST_F16);
}

/* kiln_qkv_project_int8 (W8A16): int8 and uint8 weights, row-major [K, N] and column-major (a
 * Linear weight's transposed view) with padded leading dimensions, scales [1] or [N] strided,
 * ragged M (both kernel variants, several 16-row tiles), K not a multiple of the 32-k chunk or
 * of 4 (scalar loads), odd and unequal widths, every x and y dtype; each output against
 * (Σ x·w)·scale in float64. Then a decode-size GQA shape, bit-identical reruns. */
typedef struct i8case {
  int64_t M, K, N[3];
  int xd, yd, seed; /* W16_X_DT, W16_OUT_DT indices; seed picks layouts, padding, int8/uint8 */
  int prefill;      /* 1: algo PREFILL with a workspace, 2: AUTO with a workspace (M >= 256), 3: AUTO
                     * without one (sm_90a's one-kernel PREFILL where it takes the call) */
  int col;          /* 1: every weight column-major with 16-byte columns (the sm_90a TMA kernel's) */
} i8case;

static int run_int8_case(const i8case *c) {
  const int64_t M = c->M, K = c->K;
  tmat x, w[3], y[3];
  tscale s[3];
  gmat gx, gw[3], gy[3];
  DLManagedTensorVersioned *gs[3];
  DLTensor st[3];
  tm_init(&x, W16_X_DT[c->xd], 2, 1, M, K, c->seed % 5 == 4 ? COL : ROW, c->seed % 3 ? 0 : 8, 0, 0);
  tm_fill(&x);
  gmat_up(&gx, &x);
  for (int i = 0; i < 3; i++) {
    const int v = c->seed + i;
    /* padding 0 or 16 keeps 16-byte rows (vector loads); 3 forces the scalar path */
    const int pad = v % 4 == 3 && !c->col ? 3 : v % 2 ? 16 : 0;
    tm_init(&w[i], v % 2 ? T_U8 : T_I8, 2, 1, K, c->N[i], v % 3 == 1 && !c->col ? ROW : COL, pad, 0, 0);
    tm_fill_i8(&w[i]);
    gmat_up(&gw[i], &w[i]);
    ts_init(&s[i], v % 2 ? c->N[i] : 1, 1 + v % 3);
    gs[i] = upload(s[i].buf, sizeof(float) * (size_t)((s[i].n - 1) * s[i].stride + 1));
    st[i] = s[i].t;
    st[i].data = gs[i]->dl_tensor.data, st[i].device = (DLDevice){kDLCUDA, 0};
    tm_init(&y[i], W16_OUT_DT[c->yd], 2, 1, M, c->N[i], v % 4 == 2 ? COL : ROW, 2, 0, 0);
    tm_poison(&y[i]);
    gmat_up(&gy[i], &y[i]);
  }
  kiln_qkv_opts opts = kiln_qkv_opts_default();
  DLManagedTensorVersioned *ws = NULL;
  /* the workspace path multiplies rounded weights; the one kernel exact ones, scaled after */
  const bool ws_path = c->prefill == 1 || c->prefill == 2;
  if (ws_path) {
    size_t bytes = 0;
    assert_kiln_ok(kiln_qkv_project_int8_workspace_size(g_ctx, &gx.t, &gw[0].t, &gw[1].t, &gw[2].t, &st[0], &st[1],
                                                        &st[2], &gy[0].t, &gy[1].t, &gy[2].t, &bytes));
    int64_t big = c->N[0] > c->N[1] ? c->N[0] : c->N[1];
    big = big > c->N[2] ? big : c->N[2];
    assert_int_equal(bytes, (size_t)(K * big * 2)); /* separate outputs: the largest weight, reused */
    const int64_t nb = (int64_t)bytes;
    assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &nb, U8, &ws));
    opts.algo = c->prefill == 1 ? KILN_QKV_PREFILL : KILN_QKV_AUTO;
    opts.workspace = ws->dl_tensor.data, opts.workspace_bytes = bytes;
  }
  const kiln_status status = kiln_qkv_project_int8(g_ctx, &gx.t, &gw[0].t, &gw[1].t, &gw[2].t, &st[0], &st[1], &st[2],
                                                   &gy[0].t, &gy[1].t, &gy[2].t, &opts, g_stream);
  int ok = status == KILN_OK;
  if (!ok) print_message("FAILED int8 M%" PRId64 " K%" PRId64 ": %s\n", M, K, kiln_last_error());
  for (int i = 0; i < 3 && ok; i++) {
    char what[160];
    snprintf(what, sizeof what, "int8 M%" PRId64 " K%" PRId64 " N%" PRId64 " x %s y %s w %s%s%s, output %d", M, K,
             c->N[i], dt_name(W16_X_DT[c->xd]), dt_name(W16_OUT_DT[c->yd]), w[i].dt.code == kDLUInt ? "u8" : "i8",
             w[i].rs == 1 ? " col-major" : "", s[i].n > 1 ? " column scales" : "", i);
    gmat_down(&gy[i], &y[i]);
    double *wd = i8_values(&w[i]), *sc = ts_expand(&s[i], c->N[i]), *ref, *mag;
    if (ws_path) { /* PREFILL multiplies w · scale rounded to x's dtype (kiln.h): so does its reference
                       * (an int8 times an f32 is exact in double; round_to rounds it to f32, then x's dtype,
                       * as the kernel's f32 product is rounded) */
      for (int64_t r = 0; r < K; r++)
        for (int64_t j = 0; j < c->N[i]; j++) wd[r * c->N[i] + j] *= sc[j];
      round_to(wd, K * c->N[i], W16_X_DT[c->xd]);
    }
    w16_reference(&x, wd, NULL, c->N[i], ws_path ? NULL : sc, &ref, &mag);
    ok = check(&y[i], ref, mag, K, what);
    free(ref), free(wd), free(sc);
  }
  for (int i = 0; i < 3; i++) {
    kiln_tensor_free(gw[i].dev), kiln_tensor_free(gy[i].dev), kiln_tensor_free(gs[i]);
    tm_free(&w[i]), tm_free(&y[i]), free(s[i].buf);
  }
  kiln_tensor_free(gx.dev), tm_free(&x), kiln_tensor_free(ws);
  return ok;
}

/* kiln_qkv_project_int8's PREFILL (w · scale into the workspace as x's dtype through a 32 x 32
 * shared-memory tile, then kiln_matmul): explicit at small and ragged M, through AUTO at
 * M >= 256; both weight layouts (padded, unaligned), int8 and uint8, scales [1] and strided
 * [N], K and N not multiples of the tile, every x and y dtype. */
static void qkv_int8_prefill(void **state) {
  (void)state;
  const i8case cs[] = {
      {40, 264, {96, 33, 40}, 0, 0, 0, 1, 0},    {7, 64, {32, 32, 32}, 1, 1, 1, 1, 0},
      {300, 512, {512, 128, 136}, 0, 2, 2, 2, 0}, {260, 200, {70, 24, 24}, 1, 0, 3, 2, 0},
      {256, 96, {64, 100, 8}, 0, 1, 4, 2, 0},
  };
  const int n = (int)(sizeof cs / sizeof cs[0]);
  int failures = 0;
  for (int i = 0; i < n; i++) failures += !run_int8_case(&cs[i]);
  if (failures) fail_msg("%d of %d int8 PREFILL cases failed (listed above)", failures, n);
}

/* kiln_qkv_project_int8's PREFILL in one kernel on sm_90a (w4_prefill_sm90.cu with int8
 * weights): AUTO without a workspace, column-major 16-byte aligned weights (padded or not), int8
 * and uint8, scales [1] and strided [N], GQA widths in one launch: 4096 + 1024 + 1024 at M = 500
 * (96 tiles of 256 rows, ragged last rows) and M = 256 (48 such tiles, so 96 of 128 rows), 8192
 * + 1024 + 1024 at M = 300 with K 304 (a last stage of 48 k); every x dtype, f16, bf16 and f32
 * y. Where the kernel does not take a call, AUTO's DECODE is checked the same way. */
static void qkv_int8_prefill_fused(void **state) {
  (void)state;
  const i8case cs[] = {
      {500, 256, {4096, 1024, 1024}, 0, 0, 0, 3, 1}, {256, 256, {4096, 1024, 1024}, 1, 1, 1, 3, 1},
      {300, 304, {8192, 1024, 1024}, 0, 2, 2, 3, 1}, {511, 256, {4096, 1024, 1024}, 1, 2, 3, 3, 1},
  };
  const int n = (int)(sizeof cs / sizeof cs[0]);
  int failures = 0;
  for (int i = 0; i < n; i++) failures += !run_int8_case(&cs[i]);
  if (failures) fail_msg("%d of %d int8 one-kernel PREFILL cases failed (listed above)", failures, n);
}

static void qkv_int8(void **state) {
  (void)state;
  static const int64_t Ms[6] = {1, 3, 8, 16, 17, 64}, Ks[4] = {1, 127, 256, 520};
  i8case cs[6 * 2 * 3];
  int n = 0;
  for (int im = 0; im < 6; im++)
    for (int xd = 0; xd < 2; xd++)
      for (int yd = 0; yd < 3; yd++, n++)
        cs[n] = (i8case){Ms[im], Ks[n % 4], {33 + 32 * (n % 3), 7 + 2 * (n % 3), 1 + 2 * (n % 5)}, xd, yd, n, 0, 0};
  int failures = 0;
  for (int i = 0; i < n; i++) failures += !run_int8_case(&cs[i]);
  /* decode-size GQA (smaller under the sanitizer) */
  const int64_t S = getenv("KILN_TEST_SANITIZER") ? 512 : 4096;
  const i8case big[] = {{1, S, {S, S / 4, S / 4}, 0, 1, 0, 0, 0}, {16, S, {S, S / 4, S / 4}, 1, 2, 1, 0, 0},
                        {5, S, {S, S / 4, S / 4}, 0, 0, 2, 0, 0}};
  for (int i = 0; i < 3; i++) failures += !run_int8_case(&big[i]);
  if (failures) fail_msg("%d of %d int8 cases failed (listed above)", failures, n + 3);
}

/* int8 decode with column-major, 16-byte aligned weights, N % 4 == 0, K % 256 == 0, M <= 16 and
 * 16-byte x rows: on sm_90a the TMA kernel's problems (wa16_decode_sm90.cu). Tiles of 32, 16 and
 * 4 columns (the box filled with zeros past N), K of one unit, a stage and a unit (1280), several
 * stages, padded columns, uint8 and int8, scales [1] and [N], every x and y dtype; more tiles
 * than two blocks per SM (blocks take two, the ring wrapping across a tile's end); 16-column
 * tiles (M <= 4, K >= 8192), full and ragged; M = 8's one block of 12 consumers per SM; M 9..16
 * in two row tiles; one column-major x (seed 4: the sm_80 kernel). */
static void qkv_int8_tma(void **state) {
  (void)state;
  const bool small = getenv("KILN_TEST_SANITIZER") != NULL;
  const i8case cs[] = {
      {1, 256, {32, 16, 4}, 0, 0, 0, 0, 1},
      {3, 1280, {96, 48, 52}, 1, 2, 1, 0, 1},
      {8, 2048, {64, 32, 36}, 0, 1, 2, 0, 1},
      {7, 512, {128, 32, 32}, 1, 0, 3, 0, 1},
      {2, 768, {64, 64, 64}, 0, 0, 4, 0, 1}, /* x column-major: not TMA's */
      {5, small ? 1024 : 4096, {4096, 1024, 1024}, 0, 0, 5, 0, 1},
      {2, 1024, {8192, 1024, 1024}, 1, 2, 6, 0, 1},
      {1, small ? 1024 : 4096, {12288, 1024, 1024}, 0, 1, 7, 0, 1},
      {8, 1024, {4096, 1024, 1024}, 1, 0, 8, 0, 1}, /* 48 KB slots: one block of 12 consumers per SM */
      {3, 8192, {8192, 1028, 1020}, 0, 2, 9, 0, 1}, /* 16-column tiles (K >= 8192), two ragged */
      {16, 1024, {1024, 256, 256}, 1, 1, 10, 0, 1},   /* two row tiles of 8 */
      {11, 2048, {4096, 1024, 1024}, 0, 0, 11, 0, 1}, /* the second partial */
  };
  const int n = (int)(sizeof cs / sizeof cs[0]);
  int failures = 0;
  for (int i = 0; i < n; i++) failures += !run_int8_case(&cs[i]);
  if (failures) fail_msg("%d of %d int8 TMA-layout cases failed (listed above)", failures, n);
}

/* PREFILL (the weight dequantized into the caller's workspace, then kiln_matmul): explicit and
 * through AUTO (M >= 128), ragged shapes, act-order (rows written in logical order), both
 * activation dtypes, every output dtype, column-major x and y. */
static void prefill(void **state) {
  (void)state;
  const icase cs[] = {
      {128, 256, 96, 128, 1, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 1, 0},
      {300, 264, 100, 264, 0, 1, TEST_BF16, TEST_F32, ROW, ROW, 0, 1, 0},
      {129, 128, 130, 64, 1, 1, TEST_F16, TEST_BF16, COL, COL, 0, 2, 0},
      {1000, 512, 33, 32, 0, 0, TEST_BF16, TEST_BF16, ROW, ROW, 5, 2, 0},
      {5, 128, 64, 128, 1, 0, TEST_F16, TEST_F32, ROW, ROW, 0, 1, 0}, /* explicit PREFILL at small M */
  };
  run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* PREFILL in one kernel on sm_90a (kernels/w4_prefill_sm90.cu), which takes N % 16 == 0, x rows
 * 16-byte aligned, no act-order and tiles for 70 % of the SMs (wa16_gpu.c): every case
 * here has 95-100 tiles of 128 columns on the H200's 132 SMs (elsewhere these run the
 * dequantized copy and kiln_matmul, and pass as well). Both tile heights (128 rows of x; 256 once
 * those tiles fill 70 % of the SMs), every group size (G = 32 with 1, 3 and 10 groups, so a stage's
 * second group row is absent, past K, or present; G = K = 200, a K that ends inside a stage),
 * ragged column and row tiles, both activation dtypes, every output dtype, column-major y,
 * padded x, y with 16-byte rows (the epilogue through shared memory) or not, explicit and AUTO
 * (with a workspace and without); then the fused QKV call with three such projections
 * (M = 128, explicit; M = 256, AUTO without a workspace). Against float64 on the weights
 * rounded to x's dtype. */
static void prefill_fused(void **state) {
  (void)state;
  const icase cs[] = {
      {300, 320, 6160, 32, 0, 0, TEST_F16, TEST_F32, ROW, ROW, 0, 1, 0},
      {1000, 128, 3072, 64, 1, 0, TEST_BF16, TEST_BF16, ROW, ROW, 8, 2, 0},
      {257, 200, 6400, 200, 0, 0, TEST_F16, TEST_BF16, ROW, COL, 0, 1, 0},
      {128, 64, 12288, 64, 1, 0, TEST_BF16, TEST_F32, ROW, ROW, 0, 1, 0},
      {130, 32, 6144, 32, 0, 0, TEST_F16, TEST_F32, ROW, ROW, 0, 2, 0},
      {200, 96, 6160, 32, 1, 0, TEST_BF16, TEST_F16, ROW, ROW, 0, 1, 0},
      {1024, 128, 3072, 128, 0, 0, TEST_BF16, TEST_F32, ROW, ROW, 0, 2, 0},
      {1000, 128, 3088, 128, 1, 0, TEST_F16, TEST_F16, ROW, COL, 16, 2, 0},
      {300, 320, 6160, 32, 1, 0, TEST_BF16, TEST_F16, ROW, ROW, 0, 3, 0},
      {256, 64, 12288, 64, 0, 0, TEST_F16, TEST_BF16, ROW, COL, 0, 3, 0},
      /* 16-byte rows of a 16-bit y: the epilogue through shared memory, in chunks of 32 rows of
       * x (ragged last tiles of 232, 44 and 2 rows) */
      {1000, 128, 3072, 64, 1, 0, TEST_BF16, TEST_BF16, ROW, ROW, 8, 2, 1},
      {300, 320, 6160, 32, 0, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 1, 1},
      {130, 32, 6144, 32, 0, 0, TEST_F16, TEST_BF16, ROW, ROW, 0, 3, 1},
      {1100, 64, 2432, 64, 0, 0, TEST_F16, TEST_F16, ROW, ROW, 0, 2, 1}, /* M > 1024: 5 x 19 tiles */
  };
  run_cases(cs, (int)(sizeof cs / sizeof cs[0]));
  const int64_t N[3] = {12288, 12304, 12288}, G[3] = {64, 32, 64};
  qkvfix f;
  qkv_setup_shape(&f, 128, 64, N, G, false, TEST_F16, TEST_F16);
  size_t bytes = 0;
  assert_kiln_ok(kiln_qkv_project_int4_workspace_size(g_ctx, &f.gx.t, &f.gw[0].q, &f.gw[1].q, &f.gw[2].q, &f.gy[0].t,
                                                      &f.gy[1].t, &f.gy[2].t, &bytes));
  const int64_t nb = (int64_t)bytes;
  DLManagedTensorVersioned *ws = NULL;
  assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &nb, U8, &ws));
  kiln_qkv_opts opts = kiln_qkv_opts_default();
  opts.algo = KILN_QKV_PREFILL;
  opts.workspace = ws->dl_tensor.data, opts.workspace_bytes = bytes;
  qkv_call(&f, &opts);
  qkv_check_prefill(&f, "qkv PREFILL (one kernel)");
  kiln_tensor_free(ws);
  qkv_free(&f);
  /* AUTO without a workspace from M = 256: the same path */
  qkv_setup_shape(&f, 256, 64, N, G, false, TEST_BF16, TEST_F32);
  qkv_call(&f, NULL);
  qkv_check_prefill(&f, "qkv AUTO without workspace (one kernel)");
  qkv_free(&f);
  /* GQA widths: the 1024-wide K and V projections have too few tiles alone, all three together
   * enough (one launch), each with its own group size (two scale rows a stage at G = 32, one
   * otherwise): 4096 + 1024 + 1024 at M = 500, 96 tiles of 256 rows (ragged last rows); 8192 +
   * 1024 + 1024 at M = 256, 80 such tiles, too few, so 160 of 128 rows */
  const int64_t Ng[2][3] = {{4096, 1024, 1024}, {8192, 1024, 1024}}, Gg[3] = {128, 32, 64};
  const DLDataType xdt[2] = {TEST_F16, TEST_BF16}, ydt[2] = {TEST_F16, TEST_F32};
  for (int c = 0; c < 2; c++) {
    qkv_setup_shape(&f, c ? 256 : 500, 256, Ng[c], Gg, false, xdt[c], ydt[c]);
    qkv_call(&f, NULL);
    qkv_check_prefill(&f, "qkv AUTO without workspace (one launch, GQA)");
    qkv_free(&f);
  }
}

/* PREFILL without enough workspace, or with one that overlaps an operand, is refused with the
 * size it needs; DECODE runs at any M. */
static void refusals(void **state) {
  (void)state;
  tq w;
  tq_make(&w, 64, 32, 32, 1, 0);
  tmat x, y;
  tm_compact(&x, TEST_F16, 2, 1, 4, 64);
  tm_compact(&y, TEST_F16, 2, 1, 4, 32);
  gmat gx, gy;
  gweight gw;
  gmat_up(&gx, &x), gmat_up(&gy, &y), gweight_up(&gw, &w.q);
  kiln_matmul_int4_opts opts = kiln_matmul_int4_opts_default();
  opts.algo = KILN_INT4_PREFILL; /* without a workspace */
  assert_kiln_fails(kiln_matmul_int4(g_ctx, &gx.t, &gw.q, &gy.t, &opts, g_stream), KILN_ERROR_WORKSPACE,
                    "kiln_matmul_int4: algo KILN_INT4_PREFILL needs 4096 bytes of workspace", "workspace NULL",
                    "kiln_matmul_int4_workspace_size");
  opts.workspace = gy.dev->dl_tensor.data, opts.workspace_bytes = 4096; /* y itself: overlaps */
  assert_kiln_fails(kiln_matmul_int4(g_ctx, &gx.t, &gw.q, &gy.t, &opts, g_stream), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_int4", "opts->workspace", "y");
  opts.workspace = NULL, opts.workspace_bytes = 0;
  opts.algo = KILN_INT4_DECODE;
  assert_kiln_ok(kiln_matmul_int4(g_ctx, &gx.t, &gw.q, &gy.t, &opts, g_stream));
  /* the fused call: the same rules, the workspace also kept off the other weights and outputs */
  tmat yk, yv; /* v: rows 512 apart, so its own allocation holds the whole 4096-byte workspace span */
  tm_compact(&yk, TEST_F16, 2, 1, 4, 32), tm_init(&yv, TEST_F16, 2, 1, 4, 32, ROW, 480, 0, 0);
  gmat gk, gv;
  gmat_up(&gk, &yk), gmat_up(&gv, &yv);
  kiln_qkv_opts qo = kiln_qkv_opts_default();
  qo.algo = KILN_QKV_PREFILL;
  assert_kiln_fails(kiln_qkv_project_int4(g_ctx, &gx.t, &gw.q, &gw.q, &gw.q, &gy.t, &gk.t, &gv.t, &qo, g_stream),
                    KILN_ERROR_WORKSPACE, "kiln_qkv_project_int4: algo KILN_QKV_PREFILL needs 4096 bytes of workspace",
                    "largest weight", "workspace NULL", "kiln_qkv_project_int4_workspace_size");
  qo.workspace = gw.q.codes, qo.workspace_bytes = 4096; /* from the weights' codes on (what else the span
                                                         * covers depends on the allocator) */
  assert_kiln_fails(kiln_qkv_project_int4(g_ctx, &gx.t, &gw.q, &gw.q, &gw.q, &gy.t, &gk.t, &gv.t, &qo, g_stream),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_qkv_project_int4: opts->workspace overlaps");
  qo.workspace = gv.dev->dl_tensor.data;
  assert_kiln_fails(kiln_qkv_project_int4(g_ctx, &gx.t, &gw.q, &gw.q, &gw.q, &gy.t, &gk.t, &gv.t, &qo, g_stream),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_qkv_project_int4: opts->workspace overlaps v");
  /* kiln_qkv_project_int8's PREFILL refusals: qkv_int8_prefill */
  kiln_tensor_free(gk.dev), kiln_tensor_free(gv.dev), tm_free(&yk), tm_free(&yv);
  kiln_tensor_free(gx.dev), kiln_tensor_free(gy.dev), gweight_free(&gw);
  tm_free(&x), tm_free(&y), tq_free(&w);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  g_ctx = test_gpu_context_or_skip(); /* exits 77 (skipped) without a usable GPU */
  if (kiln_stream_create(g_ctx, &g_stream) != KILN_OK) {
    printf("FAIL: kiln_stream_create: %s\n", kiln_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(groups_dtypes), cmocka_unit_test(ragged_layouts_perm), cmocka_unit_test(decode_layer),
      cmocka_unit_test(aligned_decode), cmocka_unit_test(decode_edges), cmocka_unit_test(dependent_chain),
      cmocka_unit_test(qkv_fused), cmocka_unit_test(qkv_fused_aligned), cmocka_unit_test(qkv_prefill),
      cmocka_unit_test(qkv_prefill_merged), cmocka_unit_test(qkv_int8), cmocka_unit_test(qkv_int8_tma),
      cmocka_unit_test(qkv_int8_prefill), cmocka_unit_test(qkv_int8_prefill_fused), cmocka_unit_test(deterministic), cmocka_unit_test(prefill), cmocka_unit_test(prefill_fused),
      cmocka_unit_test(refusals),
  };
  int failed = cmocka_run_group_tests_name("gpu_int4", tests, NULL, NULL);
  kiln_stream_destroy(g_ctx, g_stream);
  kiln_context_destroy(g_ctx);
  return failed;
}
