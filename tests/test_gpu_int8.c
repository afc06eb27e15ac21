/*
 * test_gpu_int8.c — kiln_matmul_int8 (W8A8) on a real GPU against kiln's own CPU path, bit for
 * bit: both compute exact int32 sums and the same f32 epilogue (sum · scale · row · col, one
 * RNE rounding), so every output bit must agree (the CPU path is itself checked against int64
 * sums in test_int8_host.c).
 *
 * Each operand is a strided host matrix (test_matrix.h: row- or column-major, leading-dimension
 * pad, batch stride, elements before the view) with a device twin of the same layout. Every
 * byte of A and B (padding included) is random over the whole int8 range, -128 included. C is
 * poisoned with NaN on both sides before the call; afterwards the whole device buffer must
 * equal the CPU one, so unwritten elements and writes outside the view both fail.
 *
 * Layout classes per operand, which pick the kernel: "natural" (ld = inner size, no offset),
 * "unaligned" (odd ld pad, odd offset: the _scalar kernels) and "aligned" (ld a multiple of 16
 * bytes, 16-byte offset: vector loads; cp.async when A and B are both k-major, and on sm_90
 * WGMMA, which AUTO takes for k-major operands with 16-byte aligned rows). wgmma_and_mma_sync
 * runs both algos by name on the same data.
 *
 * KILN_TEST_SANITIZER (set by scripts/gpu-session.sh under compute-sanitizer) shrinks the
 * shapes. Exits 77 (CTest: skipped) with a SKIP line when there is no usable GPU.
 */
#include <inttypes.h>
#include <stdbool.h>

#include "test_util.h"
#include "test_matrix.h"

static kiln_context *g_ctx; /* ordinal 0 */
static kiln_context *g_cpu; /* the reference */
static CUstream g_stream;
static int g_sanitizer;
static int g_int8_ok; /* compute capability >= 8.0 */
static int g_wgmma;   /* compute capability 9.0: KILN_INT8_WGMMA runs */
static kiln_int8_algo g_algo = KILN_INT8_AUTO; /* what run_compare asks for */

static const DLDataType T_I8 = {kDLInt, 8, 1}, T_U8 = {kDLUInt, 8, 1};
static const DLDataType *const C_DTS[3] = {&TEST_F32, &TEST_F16, &TEST_BF16};
static const char *dt_str(DLDataType dt) { return dt.bits == 32 ? "f32" : dt.code == kDLBfloat ? "bf16" : "f16"; }

static uint64_t rng = 0xD1B54A32D192ED03ull;
static uint32_t rnd(void) {
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

/* ------------------------------------------------------------------------------------------ */
/* Host matrices with a device twin                                                            */
/* ------------------------------------------------------------------------------------------ */
enum { NATURAL = 0, UNALIGNED = 1, ALIGNED = 2 };
static const char *align_str(int a) { return a == NATURAL ? "natural" : a == UNALIGNED ? "unaligned" : "aligned"; }

typedef struct gmat { /* never copied: t.shape / t.strides point into h */
  tmat h;
  DLManagedTensorVersioned *dev;
  DLTensor t; /* h's view over the device buffer */
} gmat;

static int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }

/* A [batch?, rows, cols] matrix of dtype dt in one of the layout classes. */
static void gm_init(gmat *g, DLDataType dt, int ndim, int64_t batch, int64_t rows, int64_t cols, int layout,
                    int align) {
  const int64_t inner = layout == COL ? rows : cols, elem = dt.bits / 8;
  int64_t ld_pad = 0, off = 0;
  if (align == UNALIGNED) ld_pad = 3, off = 1;
  if (align == ALIGNED) ld_pad = round16((inner + 1) * elem) / elem - inner, off = 16 / elem;
  /* batch stride: whole matrices plus a gap, a multiple of 16 bytes when aligned */
  const int64_t one = ((layout == COL ? cols : rows) - 1) * (inner + ld_pad) + inner;
  const int64_t bs_pad = align == ALIGNED ? round16((one + 5) * elem) / elem - one : 5;
  memset(g, 0, sizeof *g);
  tm_init(&g->h, dt, ndim, batch, rows, cols, layout, ld_pad, bs_pad, off);
  int64_t n = g->h.total;
  assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &n, dt, &g->dev));
  g->t = g->h.t;
  g->t.data = g->dev->dl_tensor.data;
  g->t.device = (DLDevice){kDLCUDA, 0};
}
static void gm_free(gmat *g) {
  kiln_tensor_free(g->dev);
  tm_free(&g->h);
}
static void gm_upload(gmat *g) {
  int64_t n = g->h.total;
  test_tensor h = test_host_tensor(g->h.buf, g->h.dt, 1, &n);
  assert_kiln_ok(kiln_tensor_copy(g_ctx, test_dl(&h), &g->dev->dl_tensor, g_stream));
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, g_stream));
}
static void gm_download(const gmat *g, void *dst) {
  int64_t n = g->h.total;
  test_tensor h = test_host_tensor(dst, g->h.dt, 1, &n);
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, g_stream));
  assert_kiln_ok(kiln_tensor_copy(g_ctx, &g->dev->dl_tensor, test_dl(&h), g_stream));
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, g_stream));
}
/* Every byte random (full int8 range), then uploaded. */
static void gm_random_i8(gmat *g) {
  for (int64_t i = 0; i < g->h.total; i++) ((uint8_t *)g->h.buf)[i] = (uint8_t)rnd();
  gm_upload(g);
}
static void gm_set_i8(gmat *g, int8_t v) {
  memset(g->h.buf, (uint8_t)v, (size_t)g->h.total);
  gm_upload(g);
}

/* An f32 scale vector of n entries with an element stride, host and device; gaps are NaN. */
typedef struct gvec {
  float *buf;
  int64_t n, stride, total, shape[1], strides[1];
  DLManagedTensorVersioned *dev;
  DLTensor host, t;
} gvec;
static void gv_init(gvec *v, int64_t n, int64_t stride) {
  memset(v, 0, sizeof *v);
  v->n = n, v->stride = stride, v->total = (n - 1) * stride + 1;
  v->buf = malloc(sizeof(float) * (size_t)v->total);
  assert_non_null(v->buf);
  for (int64_t i = 0; i < v->total; i++) v->buf[i] = NAN;
  for (int64_t i = 0; i < n; i++)
    v->buf[i * stride] = (0.25f + (float)(rnd() % 1000) / 997.0f) * (rnd() % 2 ? 1.f : -1.f) / 64.f;
  v->shape[0] = n, v->strides[0] = stride;
  v->host = (DLTensor){.data = v->buf, .device = {kDLCPU, 0}, .ndim = 1, .dtype = TEST_F32, .shape = v->shape,
                       .strides = v->strides};
  int64_t total = v->total;
  assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &total, TEST_F32, &v->dev));
  test_tensor h = test_host_tensor(v->buf, TEST_F32, 1, &total);
  assert_kiln_ok(kiln_tensor_copy(g_ctx, test_dl(&h), &v->dev->dl_tensor, g_stream));
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, g_stream));
  v->t = v->host;
  v->t.data = v->dev->dl_tensor.data;
  v->t.device = (DLDevice){kDLCUDA, 0};
}
static void gv_free(gvec *v) {
  kiln_tensor_free(v->dev);
  free(v->buf);
}

/* ------------------------------------------------------------------------------------------ */
/* One product on both sides, compared bit for bit                                             */
/* ------------------------------------------------------------------------------------------ */
static bool elem_in_view(const tmat *m, int64_t idx, int64_t *b, int64_t *i, int64_t *j) {
  for (int64_t bb = 0; bb < m->batch; bb++) {
    int64_t r = idx - m->off - bb * m->bs;
    if (r < 0) break;
    const int64_t ld = m->cs == 1 ? m->rs : m->cs;
    const int64_t outer = r / ld, inner = r % ld;
    const int64_t rows = m->cs == 1 ? m->rows : m->cols, cols = m->cs == 1 ? m->cols : m->rows;
    if (outer < rows && inner < cols) {
      *b = bb, *i = m->cs == 1 ? outer : inner, *j = m->cs == 1 ? inner : outer;
      return true;
    }
  }
  return false;
}

/* The inputs a, b are uploaded already. Runs GPU and CPU into c (poisoned first), compares. */
static bool run_compare(gmat *a, gmat *b, gmat *c, float scale, gvec *row, gvec *col, const char *what) {
  const size_t bytes = (size_t)c->h.total * c->h.elem;
  tm_poison(&c->h);
  gm_upload(c);
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  o.algo = g_algo;
  o.scale = scale;
  o.row_scale = row ? &row->t : NULL;
  o.col_scale = col ? &col->t : NULL;
  kiln_status st = kiln_matmul_int8(g_ctx, &a->t, &b->t, &c->t, &o, g_stream);
  if (st != KILN_OK) {
    print_error("%s: kiln_matmul_int8 (GPU) -> %s: %s\n", what, kiln_status_string(st), kiln_last_error());
    return false;
  }
  void *got = malloc(bytes);
  assert_non_null(got);
  gm_download(c, got);
  o.algo = KILN_INT8_AUTO; /* the CPU context takes no GPU algo */
  o.row_scale = row ? &row->host : NULL;
  o.col_scale = col ? &col->host : NULL;
  assert_kiln_ok(kiln_matmul_int8(g_cpu, &a->h.t, &b->h.t, &c->h.t, &o, NULL));
  bool ok = memcmp(got, c->h.buf, bytes) == 0;
  if (!ok) {
    int64_t bad = 0, first = -1;
    for (int64_t e = 0; e < c->h.total; e++) {
      const bool diff = memcmp((char *)got + e * c->h.elem, (char *)c->h.buf + e * c->h.elem, c->h.elem) != 0;
      if (diff && first < 0) first = e;
      bad += diff;
    }
    int64_t bi = 0, i = 0, j = 0;
    const bool in = elem_in_view(&c->h, first, &bi, &i, &j);
    print_error("%s: %" PRId64 " of %" PRId64 " elements differ; first at buffer element %" PRId64
                " (%s [%" PRId64 ", %" PRId64 ", %" PRId64 "]): GPU %.9g, CPU %.9g\n",
                what, bad, c->h.total, first, in ? "in the view" : "OUTSIDE the view", bi, i, j,
                test_load(got, c->h.dt, first), test_load(c->h.buf, c->h.dt, first));
  }
  free(got);
  return ok;
}

static void describe(char *buf, size_t n, const char *tag, int64_t batch, int64_t M, int64_t N, int64_t K,
                     const gmat *a, int aal, const gmat *b, int bal, const gmat *c, int cal, float scale,
                     const gvec *row, const gvec *col) {
  snprintf(buf, n,
           "%s: batch %" PRId64 " M %" PRId64 " N %" PRId64 " K %" PRId64 " A %s/%s B %s/%s C %s %s/%s scale %g%s%s",
           tag, batch, M, N, K, a->h.cs == 1 ? "row" : "col", align_str(aal), b->h.cs == 1 ? "row" : "col",
           align_str(bal), dt_str(c->h.dt), c->h.cs == 1 ? "row" : "col", align_str(cal), (double)scale,
           row ? " row_scale" : "", col ? " col_scale" : "");
}

/* One fresh problem: random A and B, the given layouts, compared. */
static bool problem(const char *tag, int64_t batch, int64_t M, int64_t N, int64_t K, int la, int aal, int lb, int bal,
                    int lc, int cal, DLDataType cdt, float scale, int scales) {
  gmat a, b, c;
  gm_init(&a, T_I8, batch > 1 ? 3 : 2, batch, M, K, la, aal);
  gm_init(&b, T_I8, batch > 1 ? 3 : 2, batch, K, N, lb, bal);
  gm_init(&c, cdt, batch > 1 ? 3 : 2, batch, M, N, lc, cal);
  gm_random_i8(&a);
  gm_random_i8(&b);
  gvec row, col;
  if (scales & 1) gv_init(&row, M, 1 + (int64_t)(rnd() % 3));
  if (scales & 2) gv_init(&col, N, 1 + (int64_t)(rnd() % 3));
  char what[320];
  describe(what, sizeof what, tag, batch, M, N, K, &a, aal, &b, bal, &c, cal, scale, scales & 1 ? &row : NULL,
           scales & 2 ? &col : NULL);
  const bool ok = run_compare(&a, &b, &c, scale, scales & 1 ? &row : NULL, scales & 2 ? &col : NULL, what);
  if (scales & 1) gv_free(&row);
  if (scales & 2) gv_free(&col);
  gm_free(&a), gm_free(&b), gm_free(&c);
  return ok;
}

#define SKIP_IF_NO_INT8()                                                                \
  do {                                                                                   \
    if (!g_int8_ok) {                                                                    \
      print_message("  device below sm_80: int8 products are refused (tested there)\n"); \
      skip();                                                                            \
    }                                                                                    \
  } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Tests                                                                                        */
/* ------------------------------------------------------------------------------------------ */
/* Every A / B / C layout x layout class x C dtype on two shapes: ragged over several tiles in
 * every dimension (K not a multiple of 16), and aligned multiples of the tiles. */
static void every_layout_and_kernel(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  const int64_t shapes[2][3] = {{133, 270, 200}, {256, 512, 256}};
  int failures = 0, runs = 0;
  for (int s = 0; s < 2; s++)
    for (int la = 0; la < 2; la++)
      for (int lb = 0; lb < 2; lb++)
        for (int lc = 0; lc < 2; lc++)
          for (int al = 0; al < 3; al++)
            for (int d = 0; d < 3; d++) {
              if (g_sanitizer && (d != (la + lb + lc) % 3)) continue;
              const int64_t M = g_sanitizer ? shapes[s][0] / 2 : shapes[s][0], N = shapes[s][1], K = shapes[s][2];
              /* C's class rotates independently of the operands' */
              failures += !problem("layouts", 1, M, N, K, la, al, lb, al, lc, (al + d) % 3, *C_DTS[d],
                                   d == 0 ? 1.0f : 0.0625f, (la + 2 * lb + d) % 4);
              runs++;
            }
  if (failures) fail_msg("%d of %d products differ from the CPU path (listed above)", failures, runs);
}

/* M, N, K over {1, 7, 16, 33, 64, 127, 128, 255, 1000}: every combination, layouts, classes,
 * C dtypes and scales rotating over the cases. */
static void ragged_shapes(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  static const int64_t dims[9] = {1, 7, 16, 33, 64, 127, 128, 255, 1000};
  const int nd = g_sanitizer ? 8 : 9; /* under the sanitizer: no 1000, and a third of the cases */
  int failures = 0, runs = 0, n = 0;
  for (int im = 0; im < nd; im++)
    for (int in = 0; in < nd; in++)
      for (int ik = 0; ik < nd; ik++, n++) {
        if (g_sanitizer && n % 3) continue;
        const int al = n / 8 % 3;
        failures += !problem("ragged", 1, dims[im], dims[in], dims[ik], n & 1, al, n >> 1 & 1, (al + n / 24) % 3,
                             n >> 2 & 1, n / 5 % 3, *C_DTS[n % 3], n % 7 ? 1.0f : -0.03125f, n / 3 % 4);
        runs++;
      }
  if (failures) fail_msg("%d of %d products differ from the CPU path (listed above)", failures, runs);
}

/* Batches: both batched, B broadcast (rank 2 and rank-3 batch 1), A broadcast, column-major
 * batches, and 70000 tiny products (more than grid.z's 65535). */
static void batched_and_broadcast(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  int failures = 0;
  const int64_t B = 3, M = 70, N = 300, K = 129;
  struct {
    int nda, ba, ndb, bb, la, lb, lc, al;
  } cases[] = {
      {3, B, 3, B, ROW, COL, ROW, ALIGNED},   {3, B, 3, B, COL, ROW, COL, UNALIGNED},
      {3, B, 2, 1, ROW, COL, ROW, ALIGNED},   {3, B, 3, 1, ROW, ROW, COL, NATURAL},
      {2, 1, 3, B, COL, COL, ROW, UNALIGNED}, {3, 1, 3, B, ROW, COL, ROW, ALIGNED},
  };
  char what[320];
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    gmat a, b, o;
    gm_init(&a, T_I8, cases[c].nda, cases[c].ba, M, K, cases[c].la, cases[c].al);
    gm_init(&b, T_I8, cases[c].ndb, cases[c].bb, K, N, cases[c].lb, cases[c].al);
    gm_init(&o, *C_DTS[c % 3], 3, B, M, N, cases[c].lc, cases[c].al);
    gm_random_i8(&a);
    gm_random_i8(&b);
    gvec col;
    gv_init(&col, N, 2);
    describe(what, sizeof what, "batched", B, M, N, K, &a, cases[c].al, &b, cases[c].al, &o, cases[c].al, 0.5f,
             NULL, &col);
    failures += !run_compare(&a, &b, &o, 0.5f, NULL, &col, what);
    gv_free(&col);
    gm_free(&a), gm_free(&b), gm_free(&o);
  }
  /* 70000 batches of 3 x 5 x 9 (grid.z is capped at 65535: blocks loop over batches) */
  const int64_t NB = g_sanitizer ? 66000 : 70000;
  gmat a, b, o;
  gm_init(&a, T_I8, 3, NB, 3, 9, ROW, NATURAL);
  gm_init(&b, T_I8, 3, NB, 9, 5, COL, NATURAL);
  gm_init(&o, TEST_F32, 3, NB, 3, 5, ROW, NATURAL);
  gm_random_i8(&a);
  gm_random_i8(&b);
  failures += !run_compare(&a, &b, &o, 1.0f, NULL, NULL, "70000 batches of 3 x 5 x 9");
  gm_free(&a), gm_free(&b), gm_free(&o);
  if (failures) fail_msg("%d products differ from the CPU path (listed above)", failures);
}

/* Scales: per tensor (any sign, zero, tiny: f32 subnormal results; large: f16 overflow to
 * infinity), per row, per column, both, strided and stride-0 vectors, every C dtype. */
static void scales(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  const int64_t M = 150, N = 260, K = 300;
  static const float tensor_scales[] = {1.0f, 0.001f, -2.5f, 0.0f, 1e-41f, 1e4f};
  int failures = 0;
  char what[320];
  gmat a, b;
  gm_init(&a, T_I8, 2, 1, M, K, ROW, ALIGNED);
  gm_init(&b, T_I8, 2, 1, K, N, COL, ALIGNED);
  gm_random_i8(&a);
  gm_random_i8(&b);
  for (int d = 0; d < 3; d++) {
    gmat c;
    gm_init(&c, *C_DTS[d], 2, 1, M, N, d == 1 ? COL : ROW, d == 2 ? UNALIGNED : NATURAL);
    for (size_t s = 0; s < sizeof tensor_scales / sizeof tensor_scales[0]; s++) {
      describe(what, sizeof what, "per-tensor scale", 1, M, N, K, &a, ALIGNED, &b, ALIGNED, &c, NATURAL,
               tensor_scales[s], NULL, NULL);
      failures += !run_compare(&a, &b, &c, tensor_scales[s], NULL, NULL, what);
    }
    for (int v = 1; v < 4; v++) {
      gvec row, col;
      gv_init(&row, M, v == 3 ? 3 : 1);
      gv_init(&col, N, v == 3 ? 2 : 1);
      describe(what, sizeof what, "vector scales", 1, M, N, K, &a, ALIGNED, &b, ALIGNED, &c, NATURAL, 0.37f,
               v & 1 ? &row : NULL, v & 2 ? &col : NULL);
      failures += !run_compare(&a, &b, &c, 0.37f, v & 1 ? &row : NULL, v & 2 ? &col : NULL, what);
      /* a stride-0 row vector broadcasts one value */
      int64_t zero = 0;
      row.t.strides = row.host.strides = &zero;
      failures += !run_compare(&a, &b, &c, 1.0f, &row, &col, "stride-0 row scale, column scale");
      row.t.strides = row.host.strides = row.strides;
      gv_free(&row), gv_free(&col);
    }
    gm_free(&c);
  }
  gm_free(&a), gm_free(&b);
  if (failures) fail_msg("%d products differ from the CPU path (listed above)", failures);
}

/* uint8 tensors are the same bit patterns: the same output bits as int8. */
static void uint8_same_bits(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  gmat a, b, c;
  gm_init(&a, T_I8, 2, 1, 77, 190, ROW, ALIGNED);
  gm_init(&b, T_I8, 2, 1, 190, 300, ROW, NATURAL);
  gm_init(&c, TEST_BF16, 2, 1, 77, 300, ROW, NATURAL);
  gm_random_i8(&a);
  gm_random_i8(&b);
  int failures = !run_compare(&a, &b, &c, 0.75f, NULL, NULL, "int8 x int8");
  a.t.dtype = a.h.t.dtype = T_U8;
  failures += !run_compare(&a, &b, &c, 0.75f, NULL, NULL, "uint8 x int8");
  b.t.dtype = b.h.t.dtype = T_U8;
  failures += !run_compare(&a, &b, &c, 0.75f, NULL, NULL, "uint8 x uint8");
  gm_free(&a), gm_free(&b), gm_free(&c);
  if (failures) fail_msg("%d products differ from the CPU path (listed above)", failures);
}

/* K = 131072 (the bound) with every element -128: every sum is 2^31, which wraps to INT32_MIN
 * in the int32 accumulators and must read as +2^31 (2147483648.0f). Then random extremes
 * (-128 / 127) whose sums pass 2^24 and are rounded once. Every layout of A and B. The same at
 * K = 131071, the largest K of the WGMMA kernels' lean epilogues (Int8ScaleValue without scale
 * vectors, Int8LeanValue with them; both skip the INT32_MIN fix-up): all -128 sums to 2^31 - 2^14.
 * The random extremes also run with both vectors, C row- and column-major, on WGMMA's layouts. */
static void k_bound_sums(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  const int64_t M = g_sanitizer ? 4 : 36, N = g_sanitizer ? 8 : 260; /* 16-byte rows of C and Cᵀ: staged stores */
  int failures = 0;
  char what[320];
  for (int l = 0; l < 8; l++) {
    const int64_t K = l < 4 ? 131072 : 131071;
    const float top = l < 4 ? 2147483648.0f : 2147467264.0f; /* 2^31, 2^31 - 2^14 */
    gmat a, b, c;
    gm_init(&a, T_I8, 2, 1, M, K, (l & 1), l % 4 == 0 ? ALIGNED : NATURAL);
    gm_init(&b, T_I8, 2, 1, K, N, (l >> 1 & 1) ? ROW : COL, l % 4 == 0 ? ALIGNED : NATURAL);
    gm_init(&c, TEST_F32, 2, 1, M, N, ROW, NATURAL);
    gm_set_i8(&a, -128);
    gm_set_i8(&b, -128);
    describe(what, sizeof what, "all -128", 1, M, N, K, &a, l % 4 == 0 ? ALIGNED : NATURAL, &b,
             l % 4 == 0 ? ALIGNED : NATURAL, &c, NATURAL, 1.0f, NULL, NULL);
    failures += !run_compare(&a, &b, &c, 1.0f, NULL, NULL, what);
    const float v = ((float *)c.h.buf)[tm_index(&c.h, 0, M - 1, N - 1)];
    if (v != top) {
      print_error("%s: the CPU path gives %.9g, expected %.9g\n", what, (double)v, (double)top);
      failures++;
    }
    for (int64_t i = 0; i < a.h.total; i++) ((int8_t *)a.h.buf)[i] = rnd() % 8 ? -128 : 127;
    for (int64_t i = 0; i < b.h.total; i++) ((int8_t *)b.h.buf)[i] = rnd() % 8 ? -128 : 127;
    gm_upload(&a);
    gm_upload(&b);
    describe(what, sizeof what, "random extremes", 1, M, N, K, &a, l % 4 == 0 ? ALIGNED : NATURAL, &b,
             l % 4 == 0 ? ALIGNED : NATURAL, &c, NATURAL, 1.0f, NULL, NULL);
    failures += !run_compare(&a, &b, &c, 1.0f, NULL, NULL, what);
    if (l % 4 == 0) { /* WGMMA's layouts: with both vectors, C row- and column-major (Cᵀ computed) */
      gvec row, col;
      gv_init(&row, M, 1);
      gv_init(&col, N, 2);
      for (int lc = 0; lc < 2; lc++) {
        gmat cv;
        gm_init(&cv, TEST_F32, 2, 1, M, N, lc ? COL : ROW, NATURAL);
        describe(what, sizeof what, "random extremes", 1, M, N, K, &a, ALIGNED, &b, ALIGNED, &cv, NATURAL, 0.37f, &row,
                 &col);
        failures += !run_compare(&a, &b, &cv, 0.37f, &row, &col, what);
        gm_free(&cv);
      }
      gv_free(&row), gv_free(&col);
    }
    gm_free(&a), gm_free(&b), gm_free(&c);
  }
  if (failures) fail_msg("%d products differ (listed above)", failures);
}

/* 2048 x 2048 x 4096 (the sanitizer: 256 x 256 x 512), x @ W.T (the cp.async kernel) into
 * f16, and B row-major (the transposing kernel) into f32 with row and column scales. */
static void large(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  const int64_t M = g_sanitizer ? 256 : 2048, N = M, K = 2 * M;
  int failures = 0;
  char what[320];
  gmat a, w, b, c16, c32;
  gm_init(&a, T_I8, 2, 1, M, K, ROW, NATURAL);
  gm_init(&w, T_I8, 2, 1, K, N, COL, NATURAL); /* W [N, K] row-major seen as [K, N] */
  gm_init(&b, T_I8, 2, 1, K, N, ROW, NATURAL);
  gm_init(&c16, TEST_F16, 2, 1, M, N, ROW, NATURAL);
  gm_init(&c32, TEST_F32, 2, 1, M, N, ROW, NATURAL);
  gm_random_i8(&a);
  gm_random_i8(&w);
  gm_random_i8(&b);
  describe(what, sizeof what, "large x @ W.T", 1, M, N, K, &a, NATURAL, &w, NATURAL, &c16, NATURAL, 1.0f / 4096, NULL,
           NULL);
  failures += !run_compare(&a, &w, &c16, 1.0f / 4096, NULL, NULL, what);
  gvec row, col;
  gv_init(&row, M, 1);
  gv_init(&col, N, 1);
  describe(what, sizeof what, "large, B row-major", 1, M, N, K, &a, NATURAL, &b, NATURAL, &c32, NATURAL, 0.5f, &row,
           &col);
  failures += !run_compare(&a, &b, &c32, 0.5f, &row, &col, what);
  gv_free(&row), gv_free(&col);
  gm_free(&a), gm_free(&w), gm_free(&b), gm_free(&c16), gm_free(&c32);
  if (failures) fail_msg("%d products differ from the CPU path (listed above)", failures);
}

/* The legacy default stream (NULL) works too, and back-to-back calls on one stream reuse C
 * without a host synchronization in between (stream order). */
static void streams(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  const int64_t M = 100, N = 300, K = 70;
  gmat a, b, c;
  gm_init(&a, T_I8, 2, 1, M, K, ROW, ALIGNED);
  gm_init(&b, T_I8, 2, 1, K, N, COL, ALIGNED);
  gm_init(&c, TEST_F32, 2, 1, M, N, ROW, ALIGNED);
  gm_random_i8(&a);
  gm_random_i8(&b);
  tm_poison(&c.h);
  gm_upload(&c);
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  o.scale = 3.0f; /* first call: overwritten by the second */
  assert_kiln_ok(kiln_matmul_int8(g_ctx, &a.t, &b.t, &c.t, &o, NULL));
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, NULL));
  o.scale = 0.25f;
  assert_kiln_ok(kiln_matmul_int8(g_ctx, &a.t, &b.t, &c.t, &o, g_stream));
  void *got = malloc((size_t)c.h.total * 4);
  assert_non_null(got);
  gm_download(&c, got);
  tm_poison(&c.h);
  assert_kiln_ok(kiln_matmul_int8(g_cpu, &a.h.t, &b.h.t, &c.h.t, &o, NULL));
  assert_memory_equal(got, c.h.buf, (size_t)c.h.total * 4);
  free(got);
  gm_free(&a), gm_free(&b), gm_free(&c);
}

/* The same data through KILN_INT8_MMA_SYNC and KILN_INT8_WGMMA by name, each bit for bit
 * against the CPU: k-major aligned operands at every WGMMA tile width (the host picks 256 /
 * 128 / 64 by shape), ragged M, N, K (TMA's zero fill), batches with a broadcast B, a
 * column-major C (computed as Cᵀ = Bᵀ·Aᵀ, still k-major), and K = 2^17 of -128 (every sum
 * wraps to INT32_MIN and reads +2^31). No dimension is 1: TMA takes a leading dimension over a
 * size-1 dimension as given, and kiln's views normalize it to the other extent (not a multiple
 * of 16 bytes), so WGMMA refuses those and AUTO sends them to MMA_SYNC. Then WGMMA's refusals:
 * an m-major A, an n-major B, rows not 16-byte aligned; off sm_90, the device. */
static void wgmma_and_mma_sync(void **state) {
  (void)state;
  SKIP_IF_NO_INT8();
  int failures = 0;
  char what[360];
  if (g_wgmma) {
    struct {
      int64_t batch, bb, M, N, K;
      int lc, scales;
      const char *tag;
    } cases[] = {
        {1, 1, 2048, 2048, 1000, ROW, 3, "tile 256"},          {1, 1, 1024, 1100, 777, ROW, 2, "tile 128"},
        {1, 1, 300, 700, 333, ROW, 1, "tile 64"},              {1, 1, 5, 5000, 4096, ROW, 2, "M 5: tile 128"},
        {1, 1, 2, 3, 5, COL, 0, "2 x 3 x 5"},                  {1, 1, 129, 257, 129, COL, 3, "column-major C"},
        {3, 1, 70, 300, 129, ROW, 2, "batch 3, B broadcast"}, {2, 2, 200, 130, 4100, COL, 1, "batch 2, col-major C"},
    };
    const int n = g_sanitizer ? 5 : (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
      const int64_t M = g_sanitizer && cases[i].M > 300 ? cases[i].M / 8 : cases[i].M, N = cases[i].N, K = cases[i].K;
      const int64_t nb = cases[i].batch;
      gmat a, b, c;
      gm_init(&a, T_I8, nb > 1 ? 3 : 2, nb, M, K, ROW, ALIGNED);
      gm_init(&b, T_I8, nb > 1 ? 3 : 2, cases[i].bb, K, N, COL, ALIGNED);
      gm_init(&c, *C_DTS[i % 3], nb > 1 ? 3 : 2, nb, M, N, cases[i].lc, NATURAL);
      gm_random_i8(&a);
      gm_random_i8(&b);
      gvec row, col;
      if (cases[i].scales & 1) gv_init(&row, M, 1);
      if (cases[i].scales & 2) gv_init(&col, N, 2);
      for (int al = 0; al < 2; al++) {
        g_algo = al ? KILN_INT8_WGMMA : KILN_INT8_MMA_SYNC;
        describe(what, sizeof what, cases[i].tag, nb, M, N, K, &a, ALIGNED, &b, ALIGNED, &c, NATURAL, 0.125f,
                 cases[i].scales & 1 ? &row : NULL, cases[i].scales & 2 ? &col : NULL);
        strncat(what, al ? " (WGMMA)" : " (MMA_SYNC)", sizeof what - strlen(what) - 1);
        failures += !run_compare(&a, &b, &c, 0.125f, cases[i].scales & 1 ? &row : NULL,
                                 cases[i].scales & 2 ? &col : NULL, what);
      }
      if (cases[i].scales & 1) gv_free(&row);
      if (cases[i].scales & 2) gv_free(&col);
      gm_free(&a), gm_free(&b), gm_free(&c);
    }
    /* K = 2^17 of -128: sums of 2^31, wrapped in the s32 accumulators */
    const int64_t M = g_sanitizer ? 3 : 130, N = g_sanitizer ? 5 : 260, K = 131072;
    gmat a, b, c;
    gm_init(&a, T_I8, 2, 1, M, K, ROW, ALIGNED);
    gm_init(&b, T_I8, 2, 1, K, N, COL, ALIGNED);
    gm_init(&c, TEST_F32, 2, 1, M, N, ROW, NATURAL);
    gm_set_i8(&a, -128);
    gm_set_i8(&b, -128);
    g_algo = KILN_INT8_WGMMA;
    failures += !run_compare(&a, &b, &c, 1.0f, NULL, NULL, "WGMMA, K = 2^17 of -128");
    gm_free(&a), gm_free(&b), gm_free(&c);
  }
  g_algo = KILN_INT8_AUTO;
  if (failures) fail_msg("%d products differ from the CPU path (listed above)", failures);

  /* refusals of KILN_INT8_WGMMA (C untouched) */
  struct {
    int la, lb, al;
    const char *expect;
  } refusals[] = {
      {COL, COL, ALIGNED, "k-major"}, {ROW, ROW, ALIGNED, "k-major"}, {ROW, COL, UNALIGNED, "multiples of 16 bytes"}};
  kiln_matmul_int8_opts o = kiln_matmul_int8_opts_default();
  o.algo = KILN_INT8_WGMMA;
  for (int r = 0; r < 3; r++) {
    gmat a, b, c;
    gm_init(&a, T_I8, 2, 1, 40, 64, refusals[r].la, refusals[r].al);
    gm_init(&b, T_I8, 2, 1, 64, 48, refusals[r].lb, refusals[r].al);
    gm_init(&c, TEST_F32, 2, 1, 40, 48, ROW, NATURAL);
    assert_kiln_fails(kiln_matmul_int8(g_ctx, &a.t, &b.t, &c.t, &o, g_stream), KILN_ERROR_UNSUPPORTED,
                      "kiln_matmul_int8: algo KILN_INT8_WGMMA on ", g_wgmma ? refusals[r].expect : "sm_90",
                      "use KILN_INT8_AUTO or _MMA_SYNC");
    gm_free(&a), gm_free(&b), gm_free(&c);
  }
}

/* kiln_quantize_int8 on the GPU (kernels/int8_quantize.cu) against the CPU context, bit for bit:
 * f32 / f16 / bf16 weights row- and column-major, q both ways with padding (the whole buffer is
 * compared, so writes outside the view fail), one scale per column (strided) or per tensor; an
 * all-zero column and, in f32, a column whose max / 127 underflows. */
static void quantize_matches_cpu(void **state) {
  (void)state;
  static const int64_t shapes[][2] = {{1, 1}, {37, 45}, {512, 300}, {4096, 64}};
  for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
    for (int d = 0; d < 3; d++)
      for (int per_column = 0; per_column < 2; per_column++) {
        const int64_t K = shapes[sh][0], N = shapes[sh][1], ns = per_column ? N : 1, stride = per_column ? 2 : 1;
        gmat w, q;
        gm_init(&w, *C_DTS[d], 2, 1, K, N, (sh + d) % 2 ? COL : ROW, (int)(sh % 3));
        gm_init(&q, T_I8, 2, 1, K, N, (sh + per_column) % 2 ? COL : ROW, UNALIGNED);
        tm_fill(&w.h);
        for (int64_t k = 0; k < K; k++) { /* column 0 all zero; column 1 tiny (f32) */
          memset((char *)w.h.buf + (size_t)tm_index(&w.h, 0, k, 0) * w.h.elem, 0, w.h.elem);
          if (N > 1 && d == 0) ((float *)w.h.buf)[tm_index(&w.h, 0, k, 1)] = 1e-44f * (float)(k % 3);
        }
        gm_upload(&w);
        memset(q.h.buf, 0x5A, (size_t)q.h.total);
        gm_upload(&q);
        /* scales: ns entries `stride` apart, NaN between */
        const int64_t sn = (ns - 1) * stride + 1;
        float *hs = malloc(sizeof(float) * (size_t)sn), *gs_host = malloc(sizeof(float) * (size_t)sn);
        for (int64_t i = 0; i < sn; i++) hs[i] = NAN;
        DLManagedTensorVersioned *gs;
        assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &sn, TEST_F32, &gs));
        test_tensor hst = test_host_tensor(hs, TEST_F32, 1, &sn);
        assert_kiln_ok(kiln_tensor_copy(g_ctx, test_dl(&hst), &gs->dl_tensor, g_stream));
        test_tensor hview = test_host_tensor(hs, TEST_F32, 1, &ns), gview = hview;
        hview.strides[0] = gview.strides[0] = stride;
        gview.t.data = gs->dl_tensor.data, gview.t.device = (DLDevice){kDLCUDA, 0};
        assert_kiln_ok(kiln_quantize_int8(g_ctx, &w.t, &q.t, test_dl(&gview), per_column, g_stream));
        unsigned char *qgpu = malloc((size_t)q.h.total);
        gm_download(&q, qgpu);
        test_tensor gback = test_host_tensor(gs_host, TEST_F32, 1, &sn);
        assert_kiln_ok(kiln_tensor_copy(g_ctx, &gs->dl_tensor, test_dl(&gback), g_stream));
        assert_kiln_ok(kiln_stream_synchronize(g_ctx, g_stream));
        assert_kiln_ok(kiln_quantize_int8(g_cpu, &w.h.t, &q.h.t, test_dl(&hview), per_column, NULL));
        if (memcmp(qgpu, q.h.buf, (size_t)q.h.total) || memcmp(gs_host, hs, sizeof(float) * (size_t)sn))
          fail_msg("kiln_quantize_int8 %s, K %" PRId64 ", N %" PRId64 ", per_column %d: the GPU's %s differ from the "
                   "CPU's", dt_str(*C_DTS[d]), K, N, per_column,
                   memcmp(qgpu, q.h.buf, (size_t)q.h.total) ? "codes" : "scales");
        free(qgpu), free(hs), free(gs_host);
        kiln_tensor_free(gs);
        gm_free(&w), gm_free(&q);
      }
}

/* Below sm_80 the GPU path refuses with UNSUPPORTED and says why (runs only on such devices). */
static void refused_below_sm80(void **state) {
  (void)state;
  if (g_int8_ok) {
    print_message("  device is sm_80+: nothing to refuse\n");
    skip();
  }
  gmat a, b, c;
  gm_init(&a, T_I8, 2, 1, 4, 4, ROW, NATURAL);
  gm_init(&b, T_I8, 2, 1, 4, 4, ROW, NATURAL);
  gm_init(&c, TEST_F32, 2, 1, 4, 4, ROW, NATURAL);
  assert_kiln_fails(kiln_matmul_int8(g_ctx, &a.t, &b.t, &c.t, NULL, g_stream), KILN_ERROR_UNSUPPORTED,
                    "compute capability 8.0", "CPU context");
  gm_free(&a), gm_free(&b), gm_free(&c);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  g_ctx = test_gpu_context_or_skip(); /* exits 77 (skipped) without a usable GPU */
  g_sanitizer = getenv("KILN_TEST_SANITIZER") != NULL;
  kiln_device_info info;
  memset(&info, 0, sizeof info);
  if (kiln_context_info(g_ctx, &info) == KILN_OK) {
    g_int8_ok = info.cc_major >= 8;
    g_wgmma = info.cc_major == 9 && info.cc_minor == 0;
  }
  printf("int8 kernels %s, WGMMA %s (device sm_%d%d)%s\n", g_int8_ok ? "run" : "refused",
         g_wgmma ? "runs" : "refused", info.cc_major, info.cc_minor, g_sanitizer ? ", sanitizer sizes" : "");
  if (kiln_context_create(kDLCPU, 0, &g_cpu) != KILN_OK || kiln_stream_create(g_ctx, &g_stream) != KILN_OK) {
    printf("FAIL: context or stream: %s\n", kiln_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_layout_and_kernel),
      cmocka_unit_test(ragged_shapes),
      cmocka_unit_test(batched_and_broadcast),
      cmocka_unit_test(scales),
      cmocka_unit_test(uint8_same_bits),
      cmocka_unit_test(k_bound_sums),
      cmocka_unit_test(large),
      cmocka_unit_test(streams),
      cmocka_unit_test(wgmma_and_mma_sync),
      cmocka_unit_test(quantize_matches_cpu),
      cmocka_unit_test(refused_below_sm80),
  };
  int failed = cmocka_run_group_tests_name("gpu_int8", tests, NULL, NULL);
  kiln_stream_destroy(g_ctx, g_stream);
  kiln_context_destroy(g_cpu);
  kiln_context_destroy(g_ctx);
  return failed;
}
