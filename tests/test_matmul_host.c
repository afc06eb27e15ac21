/*
 * test_matmul_host.c — kiln_matmul and kiln_matmul_backward on the CPU context: results against a
 * float64 reference computed here from the same f16/bf16-rounded inputs (every dtype, layout,
 * leading dimension, byte offset, batch and broadcast form), and every validation error with
 * its status and message.
 *
 * Outputs are poisoned with NaN before each call, so an element the op does not write fails the
 * check; the padding around a strided output (leading-dimension and batch-stride gaps, the bytes
 * before byte_offset) must still hold the poison afterwards.
 */
#include <inttypes.h>
#include <stdbool.h>

#include "test_util.h"

#include "test_matrix.h"

/* Rounds a value to dtype dt (what the library does when it converts an operand). */
static double round_to(DLDataType dt, double v) {
  if (dt.bits == 32) return (float)v;
  if (dt.code == kDLBfloat) return kiln_bf16_to_f32(kiln_f32_to_bf16((float)v));
  return kiln_f16_to_f32(kiln_f32_to_f16((float)v));
}

static double tol_for(DLDataType out) {
  if (out.bits == 32) return 1e-4;
  return out.code == kDLBfloat ? 6e-3 : 1e-3;
}
static const char *dt_str(DLDataType dt) { return dt.bits == 32 ? "f32" : dt.code == kDLBfloat ? "bf16" : "f16"; }

/* Compares the view of m with ref ([m->batch, rows, cols] doubles, row-major) and checks that
 * every element outside the view still holds the poison pattern. */
static void tm_check(const tmat *m, const double *ref, double tol, const char *what) {
  const int64_t n = m->batch * m->rows * m->cols;
  double *got = malloc(sizeof(double) * (size_t)n);
  char *in_view = calloc((size_t)m->total, 1);
  assert_non_null(got);
  assert_non_null(in_view);
  for (int64_t b = 0; b < m->batch; b++)
    for (int64_t i = 0; i < m->rows; i++)
      for (int64_t j = 0; j < m->cols; j++) {
        int64_t idx = tm_index(m, b, i, j);
        got[(b * m->rows + i) * m->cols + j] = test_load(m->buf, m->dt, idx);
        in_view[idx] = 1;
      }
  double err = test_rel_error(got, ref, n);
  if (!(err <= tol))
    fail_msg("%s: relative error %.3g > %.3g (batch %" PRId64 ", [%" PRId64 ", %" PRId64 "], %s)", what, err, tol,
             m->batch, m->rows, m->cols, dt_str(m->dt));
  for (int64_t idx = 0; idx < m->total; idx++) {
    if (in_view[idx]) continue;
    int poisoned = m->elem == 4 ? ((uint32_t *)m->buf)[idx] == 0x7fc00000u
                                : ((uint16_t *)m->buf)[idx] == (m->dt.code == kDLBfloat ? 0x7fc0 : 0x7e00);
    if (!poisoned) fail_msg("%s: element %" PRId64 " outside the output view was written", what, idx);
  }
  free(got);
  free(in_view);
}

/* ref[b, i, j] = alpha · sum_k A[b, i, k] · B[b, k, j] over `batch` (broadcasting batch-1 operands). */
static double *ref_matmul(const tmat *a, const tmat *b, int64_t batch, double alpha) {
  const int64_t M = a->rows, K = a->cols, N = b->cols;
  double *ref = malloc(sizeof(double) * (size_t)(batch * M * N));
  double *bt = malloc(sizeof(double) * (size_t)(K * N));
  assert_non_null(ref);
  assert_non_null(bt);
  for (int64_t bi = 0; bi < batch; bi++) {
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++) bt[j * K + k] = tm_get(b, bi, k, j);
    for (int64_t i = 0; i < M; i++) {
      double arow[256];
      assert_true(K <= 256);
      for (int64_t k = 0; k < K; k++) arow[k] = tm_get(a, bi, i, k);
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += arow[k] * bt[j * K + k];
        ref[(bi * M + i) * N + j] = alpha * s;
      }
    }
  }
  free(bt);
  return ref;
}

static kiln_context *cpu_ctx(void) {
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  return ctx;
}

/* One forward case: a and b filled, c poisoned, kiln_matmul, check against the reference. */
static void run_forward(kiln_context *ctx, tmat *a, tmat *b, tmat *c, const kiln_matmul_opts *opts, const char *what) {
  tm_fill(a);
  tm_fill(b);
  tm_poison(c);
  assert_kiln_ok(kiln_matmul(ctx, &a->t, &b->t, &c->t, opts, NULL));
  const int64_t batch = c->batch;
  double *ref = ref_matmul(a, b, batch, opts ? opts->alpha : 1.0);
  tm_check(c, ref, tol_for(c->dt), what);
  free(ref);
}

/* A [M,K] x B [K,N] -> C [M,N], each with a layout, a leading-dimension pad and an offset. */
typedef struct fwd_case {
  DLDataType in, out;
  int64_t m, n, k;
  int la, lb, lc;           /* ROW or COL */
  int64_t pad_a, pad_b, pad_c; /* leading-dimension padding */
  int64_t off_a, off_b, off_c; /* elements before each view */
} fwd_case;

static void run_fwd_case(kiln_context *ctx, const fwd_case *fc, const char *what) {
  tmat a, b, c;
  tm_init(&a, fc->in, 2, 1, fc->m, fc->k, fc->la, fc->pad_a, 0, fc->off_a);
  tm_init(&b, fc->in, 2, 1, fc->k, fc->n, fc->lb, fc->pad_b, 0, fc->off_b);
  tm_init(&c, fc->out, 2, 1, fc->m, fc->n, fc->lc, fc->pad_c, 0, fc->off_c);
  char label[256];
  snprintf(label, sizeof label,
           "%s: %s->%s M=%" PRId64 " N=%" PRId64 " K=%" PRId64 " A %s ld+%" PRId64 " off %" PRId64
           ", B %s ld+%" PRId64 " off %" PRId64 ", C %s ld+%" PRId64 " off %" PRId64,
           what, dt_str(fc->in), dt_str(fc->out), fc->m, fc->n, fc->k, fc->la ? "col" : "row", fc->pad_a, fc->off_a,
           fc->lb ? "col" : "row", fc->pad_b, fc->off_b, fc->lc ? "col" : "row", fc->pad_c, fc->off_c);
  run_forward(ctx, &a, &b, &c, NULL, label);
  tm_free(&a);
  tm_free(&b);
  tm_free(&c);
}

static const DLDataType *in_dtypes[2] = {&TEST_F16, &TEST_BF16};
static const DLDataType *out_dtypes[3] = {&TEST_F32, &TEST_F16, &TEST_BF16};

/* ------------------------------------------------------------------------------------------ */
/* Forward correctness                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* f16/bf16 inputs x f32/f16/bf16 outputs, all row-major, on a ragged shape. */
static void fwd_dtypes(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(1);
  for (int i = 0; i < 2; i++)
    for (int o = 0; o < 3; o++) {
      fwd_case fc = {.in = *in_dtypes[i], .out = *out_dtypes[o], .m = 33, .n = 17, .k = 127};
      run_fwd_case(ctx, &fc, "fwd_dtypes");
    }
  kiln_context_destroy(ctx);
}

/* Every combination of row- and column-major A, B, C, for each input and output dtype. */
static void fwd_layouts(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(2);
  for (int l = 0; l < 8; l++)
    for (int i = 0; i < 2; i++)
      for (int o = 0; o < 3; o++) {
        fwd_case fc = {.in = *in_dtypes[i], .out = *out_dtypes[o], .m = 17, .n = 33, .k = 7,
                       .la = l & 1, .lb = (l >> 1) & 1, .lc = (l >> 2) & 1};
        run_fwd_case(ctx, &fc, "fwd_layouts");
      }
  kiln_context_destroy(ctx);
}


/* Leading dimensions larger than the inner size, in both layouts, for A, B and C. */
static void fwd_leading_dims(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(3);
  for (int l = 0; l < 8; l++) {
    fwd_case fc = {.in = l < 4 ? TEST_F16 : TEST_BF16, .out = *out_dtypes[l % 3], .m = 7, .n = 17, .k = 33,
                   .la = l & 1, .lb = (l >> 1) & 1, .lc = (l >> 2) & 1,
                   .pad_a = 5, .pad_b = 1 + l, .pad_c = 9};
    run_fwd_case(ctx, &fc, "fwd_leading_dims");
  }
  kiln_context_destroy(ctx);
}

/* byte_offset != 0 on every operand (odd element counts, so views are not 16-byte aligned). */
static void fwd_byte_offset(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(4);
  for (int l = 0; l < 8; l++) {
    fwd_case fc = {.in = *in_dtypes[l & 1], .out = *out_dtypes[l % 3], .m = 17, .n = 7, .k = 33,
                   .la = (l >> 1) & 1, .lb = (l >> 2) & 1, .lc = l & 1,
                   .pad_a = l, .pad_c = 2,
                   .off_a = 3, .off_b = 8 + l, .off_c = 1 + l};
    run_fwd_case(ctx, &fc, "fwd_byte_offset");
  }
  kiln_context_destroy(ctx);
}

/* strides == NULL means compact row-major, for 2-D and batched 3-D tensors, with and without a
 * byte offset. */
static void fwd_strides_null(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(5);
  for (int v = 0; v < 6; v++) {
    const int ndim = v < 3 ? 2 : 3;
    const int64_t batch = ndim == 3 ? 3 : 1, off = v & 1 ? 5 : 0;
    tmat a, b, c;
    tm_init(&a, *in_dtypes[v & 1], ndim, batch, 17, 33, ROW, 0, 0, off);
    tm_init(&b, *in_dtypes[v & 1], ndim, batch, 33, 7, ROW, 0, 0, off * 2);
    tm_init(&c, *out_dtypes[v % 3], ndim, batch, 17, 7, ROW, 0, 0, off);
    a.t.strides = b.t.strides = c.t.strides = NULL;
    run_forward(ctx, &a, &b, &c, NULL, "fwd_strides_null");
    /* one operand with explicit strides, the others NULL */
    b.t.strides = b.strides;
    run_forward(ctx, &a, &b, &c, NULL, "fwd_strides_null (b explicit)");
    tm_free(&a);
    tm_free(&b);
    tm_free(&c);
  }
  kiln_context_destroy(ctx);
}

/* Ragged M, N, K from {1, 7, 17, 33, 127}: every combination (125 shapes, ~6M multiply-adds in
 * all), cycling through dtypes and layouts. */
static void fwd_ragged_shapes(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(6);
  static const int64_t dims[5] = {1, 7, 17, 33, 127};
  int idx = 0;
  for (int im = 0; im < 5; im++)
    for (int in = 0; in < 5; in++)
      for (int ik = 0; ik < 5; ik++, idx++) {
        fwd_case fc = {.in = *in_dtypes[idx & 1], .out = *out_dtypes[idx % 3], .m = dims[im], .n = dims[in],
                       .k = dims[ik], .la = (idx >> 1) & 1, .lb = (idx >> 2) & 1, .lc = (idx >> 3) & 1,
                       .pad_a = idx % 4 == 0 ? 3 : 0, .pad_c = idx % 5 == 0 ? 1 : 0};
        run_fwd_case(ctx, &fc, "fwd_ragged_shapes");
      }
  kiln_context_destroy(ctx);
}

/* A [b, M, K] x B [b, K, N] -> C [b, M, N]; a_batch / b_batch 1 broadcasts that operand
 * (rank 2 when the ndim given is 2, else rank 3 with batch 1). */
typedef struct batch_case {
  DLDataType in, out;
  int64_t batch, m, n, k;
  int a_ndim, b_ndim;
  int64_t a_batch, b_batch;
  int la, lb, lc;
  int64_t bs_pad; /* extra elements between matrices of every batched operand */
  int64_t ld_pad;
} batch_case;

static void run_batch_case(kiln_context *ctx, const batch_case *bc, const kiln_matmul_opts *opts, const char *what) {
  tmat a, b, c;
  tm_init(&a, bc->in, bc->a_ndim, bc->a_batch, bc->m, bc->k, bc->la, bc->ld_pad, bc->bs_pad, 0);
  tm_init(&b, bc->in, bc->b_ndim, bc->b_batch, bc->k, bc->n, bc->lb, bc->ld_pad, bc->bs_pad, 0);
  tm_init(&c, bc->out, 3, bc->batch, bc->m, bc->n, bc->lc, bc->ld_pad, bc->bs_pad, 0);
  char label[256];
  snprintf(label, sizeof label,
           "%s: %s->%s batch %" PRId64 " M=%" PRId64 " N=%" PRId64 " K=%" PRId64 " A rank %d batch %" PRId64
           " B rank %d batch %" PRId64 " bs+%" PRId64,
           what, dt_str(bc->in), dt_str(bc->out), bc->batch, bc->m, bc->n, bc->k, bc->a_ndim, bc->a_batch,
           bc->b_ndim, bc->b_batch, bc->bs_pad);
  run_forward(ctx, &a, &b, &c, opts, label);
  tm_free(&a);
  tm_free(&b);
  tm_free(&c);
}

static void fwd_batched(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(7);
  for (int v = 0; v < 6; v++) {
    batch_case bc = {.in = *in_dtypes[v & 1], .out = *out_dtypes[v % 3], .batch = v < 3 ? 3 : 5, .m = 17,
                     .n = 7 + v, .k = 33, .a_ndim = 3, .b_ndim = 3, .a_batch = v < 3 ? 3 : 5,
                     .b_batch = v < 3 ? 3 : 5, .la = v & 1, .lb = (v >> 1) & 1, .lc = (v >> 2) & 1};
    run_batch_case(ctx, &bc, NULL, "fwd_batched");
  }
  kiln_context_destroy(ctx);
}

/* B shared by every batch: rank 2, or rank 3 with batch 1. */
static void fwd_broadcast_b(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(8);
  for (int v = 0; v < 8; v++) {
    batch_case bc = {.in = *in_dtypes[v & 1], .out = *out_dtypes[v % 3], .batch = 4, .m = 7, .n = 17, .k = 33,
                     .a_ndim = 3, .b_ndim = v < 4 ? 2 : 3, .a_batch = 4, .b_batch = 1, .la = (v >> 1) & 1,
                     .lb = v & 1, .lc = (v >> 2) & 1, .bs_pad = v & 2 ? 3 : 0};
    run_batch_case(ctx, &bc, NULL, "fwd_broadcast_b");
  }
  kiln_context_destroy(ctx);
}

/* A shared by every batch: rank 2, or rank 3 with batch 1. */
static void fwd_broadcast_a(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(9);
  for (int v = 0; v < 8; v++) {
    batch_case bc = {.in = *in_dtypes[v & 1], .out = *out_dtypes[v % 3], .batch = 3, .m = 33, .n = 7, .k = 17,
                     .a_ndim = v < 4 ? 2 : 3, .b_ndim = 3, .a_batch = 1, .b_batch = 3, .la = v & 1,
                     .lb = (v >> 1) & 1, .lc = (v >> 2) & 1, .bs_pad = v & 1 ? 11 : 0};
    run_batch_case(ctx, &bc, NULL, "fwd_broadcast_a");
  }
  kiln_context_destroy(ctx);
}

/* Batch strides larger than one matrix (and leading dimensions padded too) on A, B and C;
 * the gaps of C must stay untouched. */
static void fwd_batch_strides(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(10);
  for (int v = 0; v < 8; v++) {
    batch_case bc = {.in = *in_dtypes[v & 1], .out = *out_dtypes[v % 3], .batch = 3, .m = 17, .n = 33, .k = 7,
                     .a_ndim = 3, .b_ndim = 3, .a_batch = 3, .b_batch = 3, .la = v & 1, .lb = (v >> 1) & 1,
                     .lc = (v >> 2) & 1, .bs_pad = 5 + 16 * v, .ld_pad = v & 1 ? 2 : 0};
    run_batch_case(ctx, &bc, NULL, "fwd_batch_strides");
  }
  kiln_context_destroy(ctx);
}

/* alpha = 0.5 through kiln_matmul_opts (starting from the defaults), on plain, batched and
 * broadcast products; the defaults are AUTO and alpha 1. */
static void fwd_alpha(void **state) {
  (void)state;
  kiln_matmul_opts def = kiln_matmul_opts_default();
  assert_int_equal(def.algo, KILN_MATMUL_AUTO);
  assert_true(def.alpha == 1.0f);
  kiln_context *ctx = cpu_ctx();
  test_seed(11);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.alpha = 0.5f;
  for (int v = 0; v < 6; v++) {
    batch_case bc = {.in = *in_dtypes[v & 1], .out = *out_dtypes[v % 3], .batch = v < 2 ? 1 : 3, .m = 17,
                     .n = 33, .k = 127, .a_ndim = v < 2 ? 2 : 3, .b_ndim = v < 4 ? 2 : 3, .a_batch = v < 2 ? 1 : 3,
                     .b_batch = 1, .la = v & 1, .lb = (v >> 1) & 1, .lc = (v >> 2) & 1};
    if (v < 2) { /* plain [M,K] x [K,N] -> [M,N] */
      tmat a, b, c;
      tm_init(&a, bc.in, 2, 1, bc.m, bc.k, bc.la, 0, 0, 0);
      tm_init(&b, bc.in, 2, 1, bc.k, bc.n, bc.lb, 0, 0, 0);
      tm_init(&c, bc.out, 2, 1, bc.m, bc.n, bc.lc, 0, 0, 0);
      run_forward(ctx, &a, &b, &c, &o, "fwd_alpha (2-D)");
      tm_free(&a);
      tm_free(&b);
      tm_free(&c);
    } else {
      run_batch_case(ctx, &bc, &o, "fwd_alpha (batched)");
    }
  }
  /* opts explicit with alpha 1 equals opts NULL bit for bit */
  tmat a, b, c1, c2;
  tm_compact(&a, TEST_BF16, 2, 1, 7, 33);
  tm_compact(&b, TEST_BF16, 2, 1, 33, 17);
  tm_compact(&c1, TEST_F32, 2, 1, 7, 17);
  tm_compact(&c2, TEST_F32, 2, 1, 7, 17);
  tm_fill(&a);
  tm_fill(&b);
  tm_poison(&c1);
  tm_poison(&c2);
  assert_kiln_ok(kiln_matmul(ctx, &a.t, &b.t, &c1.t, NULL, NULL));
  assert_kiln_ok(kiln_matmul(ctx, &a.t, &b.t, &c2.t, &def, NULL));
  assert_memory_equal(c1.buf, c2.buf, (size_t)c1.total * c1.elem);
  /* alpha 0.5 into an f32 C halves every element exactly */
  tm_poison(&c2);
  assert_kiln_ok(kiln_matmul(ctx, &a.t, &b.t, &c2.t, &o, NULL));
  for (int64_t i = 0; i < c1.total; i++) assert_true(((float *)c2.buf)[i] * 2.0f == ((float *)c1.buf)[i]);
  tm_free(&a);
  tm_free(&b);
  tm_free(&c1);
  tm_free(&c2);
  kiln_context_destroy(ctx);
}

/* kDLCUDAHost (page-locked host memory) tensors are accepted by the CPU context; a 1x1x1
 * product and vector shapes work. */
static void fwd_cuda_host_and_tiny(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(12);
  tmat a, b, c;
  tm_compact(&a, TEST_F16, 2, 1, 7, 17);
  tm_compact(&b, TEST_F16, 2, 1, 17, 33);
  tm_compact(&c, TEST_F32, 2, 1, 7, 33);
  a.t.device = b.t.device = c.t.device = (DLDevice){kDLCUDAHost, 0};
  run_forward(ctx, &a, &b, &c, NULL, "fwd_cuda_host");
  tm_free(&a);
  tm_free(&b);
  tm_free(&c);
  /* 1x1x1, row/col vectors, outer product; stride values of size-1 dimensions are arbitrary */
  static const int64_t shapes[][3] = {{1, 1, 1}, {1, 33, 17}, {33, 1, 17}, {33, 17, 1}, {1, 1, 127}};
  for (int s = 0; s < 5; s++) {
    fwd_case fc = {.in = *in_dtypes[s & 1], .out = *out_dtypes[s % 3], .m = shapes[s][0], .n = shapes[s][1],
                   .k = shapes[s][2], .la = s & 1, .lc = (s >> 1) & 1};
    run_fwd_case(ctx, &fc, "fwd_tiny");
  }
  kiln_context_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------ */
/* Backward correctness                                                                         */
/* ------------------------------------------------------------------------------------------ */
static const DLDataType TEST_NONE = {0, 0, 0}; /* "no such gradient" (da or db NULL) */

typedef struct bwd_case {
  DLDataType in, dc, da, db; /* da / db TEST_NONE: pass NULL */
  int64_t batch, m, n, k;
  int a_ndim, b_ndim;
  int64_t a_batch, b_batch;
  int la, lb, ldc, lda, ldb; /* ROW or COL */
  int64_t ld_pad;
} bwd_case;

static size_t round_up256(size_t x) { return (x + 255) / 256 * 256; }

static double grad_tol(DLDataType dt) { return dt.bits == 32 ? 1e-4 : 1e-2; }

static void run_bwd_case(kiln_context *ctx, const bwd_case *bc, const char *what) {
  const bool want_da = bc->da.bits != 0, want_db = bc->db.bits != 0;
  const int dc_ndim = bc->a_ndim == 3 || bc->b_ndim == 3 ? 3 : 2;
  const int64_t M = bc->m, N = bc->n, K = bc->k, B = bc->batch;
  tmat a, b, dc, da, db;
  tm_init(&a, bc->in, bc->a_ndim, bc->a_batch, M, K, bc->la, bc->ld_pad, 1, 0);
  tm_init(&b, bc->in, bc->b_ndim, bc->b_batch, K, N, bc->lb, 0, 2, 0);
  tm_init(&dc, bc->dc, dc_ndim, B, M, N, bc->ldc, bc->ld_pad, 0, 1);
  if (want_da) tm_init(&da, bc->da, bc->a_ndim, bc->a_batch, M, K, bc->lda, bc->ld_pad, 3, 2);
  if (want_db) tm_init(&db, bc->db, bc->b_ndim, bc->b_batch, K, N, bc->ldb, 1, 0, 0);
  tm_fill(&a);
  tm_fill(&b);
  tm_fill(&dc);
  if (want_da) tm_poison(&da);
  if (want_db) tm_poison(&db);
  const DLTensor *pda = want_da ? &da.t : NULL, *pdb = want_db ? &db.t : NULL;

  char label[300];
  snprintf(label, sizeof label,
           "%s: in %s dc %s da %s db %s batch %" PRId64 " M=%" PRId64 " N=%" PRId64 " K=%" PRId64
           " A rank %d batch %" PRId64 " B rank %d batch %" PRId64 " layouts a%d b%d dc%d da%d db%d",
           what, dt_str(bc->in), dt_str(bc->dc), want_da ? dt_str(bc->da) : "-", want_db ? dt_str(bc->db) : "-", B,
           M, N, K, bc->a_ndim, bc->a_batch, bc->b_ndim, bc->b_batch, bc->la, bc->lb, bc->ldc, bc->lda, bc->ldb);

  size_t bytes = 12345;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(ctx, &a.t, &b.t, &dc.t, pda, pdb, &bytes));
  const bool convert = memcmp(&bc->dc, &bc->in, sizeof bc->dc) != 0;
  const bool acc_a = want_da && bc->a_batch == 1 && B > 1 && bc->da.bits != 32;
  const bool acc_b = want_db && bc->b_batch == 1 && B > 1 && bc->db.bits != 32;
  if (!convert && !acc_a && !acc_b) {
    if (bytes != 0) fail_msg("%s: workspace %zu bytes, expected 0", label, bytes);
  } else {
    size_t least = (convert ? (size_t)(B * M * N) * 2 : 0) + (acc_a ? (size_t)(M * K) * 4 : 0) +
                   (acc_b ? (size_t)(K * N) * 4 : 0);
    if (bytes < least) fail_msg("%s: workspace %zu bytes, less than the %zu it must hold", label, bytes, least);
  }
  void *ws = NULL;
  if (bytes) {
    ws = aligned_alloc(256, round_up256(bytes));
    assert_non_null(ws);
    memset(ws, 0xff, round_up256(bytes)); /* NaN garbage: an accumulator must not read it */
  }
  assert_kiln_ok(kiln_matmul_backward(ctx, &a.t, &b.t, &dc.t, pda, pdb, ws, bytes, NULL, NULL));

  /* dC as the library uses it: converted to A's dtype when its dtype differs */
  double *g = malloc(sizeof(double) * (size_t)(B * M * N));
  assert_non_null(g);
  for (int64_t bi = 0; bi < B; bi++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double v = tm_get(&dc, bi, i, j);
        g[(bi * M + i) * N + j] = convert ? round_to(bc->in, v) : v;
      }
  if (want_da) { /* dA[b] = dC[b] · B[b]ᵀ, summed over the batch when A is broadcast */
    double *ref = calloc((size_t)(bc->a_batch * M * K), sizeof(double));
    assert_non_null(ref);
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
          double s = 0;
          for (int64_t j = 0; j < N; j++) s += g[(bi * M + i) * N + j] * tm_get(&b, bi, k, j);
          ref[((bc->a_batch == 1 ? 0 : bi) * M + i) * K + k] += s;
        }
    char l2[340];
    snprintf(l2, sizeof l2, "%s [dA]", label);
    tm_check(&da, ref, grad_tol(bc->da), l2);
    free(ref);
  }
  if (want_db) { /* dB[b] = A[b]ᵀ · dC[b], summed over the batch when B is broadcast */
    double *ref = calloc((size_t)(bc->b_batch * K * N), sizeof(double));
    assert_non_null(ref);
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) {
          double s = 0;
          for (int64_t i = 0; i < M; i++) s += tm_get(&a, bi, i, k) * g[(bi * M + i) * N + j];
          ref[((bc->b_batch == 1 ? 0 : bi) * K + k) * N + j] += s;
        }
    char l2[340];
    snprintf(l2, sizeof l2, "%s [dB]", label);
    tm_check(&db, ref, grad_tol(bc->db), l2);
    free(ref);
  }
  free(g);
  free(ws);
  tm_free(&a);
  tm_free(&b);
  tm_free(&dc);
  if (want_da) tm_free(&da);
  if (want_db) tm_free(&db);
}

static const int64_t bwd_dims[4] = {1, 7, 17, 33};

/* dC f32 (converted to A's dtype in the workspace), ragged M, N, K in {1, 7, 17, 33}, both
 * gradients, all gradient dtypes and layouts in rotation. */
static void bwd_dc_f32(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(21);
  int idx = 0;
  for (int im = 0; im < 4; im++)
    for (int in = 0; in < 4; in++)
      for (int ik = 0; ik < 4; ik++, idx++) {
        bwd_case bc = {.in = *in_dtypes[idx & 1], .dc = TEST_F32, .da = *out_dtypes[idx % 3],
                       .db = *out_dtypes[(idx + 1) % 3], .batch = 1, .m = bwd_dims[im], .n = bwd_dims[in],
                       .k = bwd_dims[ik], .a_ndim = 2, .b_ndim = 2, .a_batch = 1, .b_batch = 1,
                       .la = (idx >> 1) & 1, .lb = (idx >> 2) & 1, .ldc = (idx >> 3) & 1, .lda = (idx >> 4) & 1,
                       .ldb = (idx >> 5) & 1, .ld_pad = idx % 3};
        run_bwd_case(ctx, &bc, "bwd_dc_f32");
      }
  kiln_context_destroy(ctx);
}

/* dC f16 / bf16: the dtype of A (no workspace) or the other one (converted in the workspace). */
static void bwd_dc_half(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(22);
  int idx = 0;
  for (int im = 0; im < 4; im++)
    for (int in = 0; in < 4; in++)
      for (int ik = 0; ik < 4; ik++, idx++) {
        bwd_case bc = {.in = *in_dtypes[idx & 1], .dc = *in_dtypes[(idx >> 1) & 1], .da = *out_dtypes[(idx + 2) % 3],
                       .db = *out_dtypes[idx % 3], .batch = 1, .m = bwd_dims[im], .n = bwd_dims[in],
                       .k = bwd_dims[ik], .a_ndim = 2, .b_ndim = 2, .a_batch = 1, .b_batch = 1,
                       .la = (idx >> 2) & 1, .lb = (idx >> 3) & 1, .ldc = (idx >> 4) & 1, .lda = (idx >> 5) & 1,
                       .ldb = idx & 1, .ld_pad = (idx + 1) % 3};
        run_bwd_case(ctx, &bc, "bwd_dc_half");
      }
  kiln_context_destroy(ctx);
}

/* One gradient only: db NULL (dA only) and da NULL (dB only), each dC dtype. */
static void bwd_single_gradient(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(23);
  for (int v = 0; v < 12; v++) {
    const bool only_da = v < 6;
    bwd_case bc = {.in = *in_dtypes[v & 1], .dc = *out_dtypes[v % 3], .batch = 1, .m = 17, .n = 33, .k = 7,
                   .a_ndim = 2, .b_ndim = 2, .a_batch = 1, .b_batch = 1, .la = (v >> 1) & 1, .lb = v & 1,
                   .ldc = (v >> 2) & 1, .lda = v & 1, .ldb = (v >> 1) & 1};
    if (only_da) bc.da = *out_dtypes[(v + 1) % 3], bc.db = TEST_NONE;
    else bc.da = TEST_NONE, bc.db = *out_dtypes[(v + 1) % 3];
    run_bwd_case(ctx, &bc, only_da ? "bwd_single_gradient (da only)" : "bwd_single_gradient (db only)");
  }
  /* batched, one gradient each */
  for (int v = 0; v < 4; v++) {
    bwd_case bc = {.in = *in_dtypes[v & 1], .dc = v < 2 ? TEST_F32 : *in_dtypes[v & 1], .batch = 3, .m = 7,
                   .n = 17, .k = 33, .a_ndim = 3, .b_ndim = 3, .a_batch = 3, .b_batch = 3, .lb = v & 1,
                   .lda = (v >> 1) & 1};
    if (v & 1) bc.da = TEST_F16, bc.db = TEST_NONE;
    else bc.da = TEST_NONE, bc.db = TEST_BF16;
    run_bwd_case(ctx, &bc, "bwd_single_gradient (batched)");
  }
  kiln_context_destroy(ctx);
}

/* A [b, M, K] with B broadcast (rank 2 or rank 3 batch 1): dB sums over the batch, into an f32
 * dB directly. */
static void bwd_broadcast_b_db_f32(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(24);
  for (int v = 0; v < 8; v++) {
    bwd_case bc = {.in = *in_dtypes[v & 1], .dc = *out_dtypes[v % 3], .da = *out_dtypes[(v + 1) % 3],
                   .db = TEST_F32, .batch = 4, .m = 17, .n = 7, .k = 33, .a_ndim = 3, .b_ndim = v < 4 ? 2 : 3,
                   .a_batch = 4, .b_batch = 1, .la = (v >> 1) & 1, .lb = v & 1, .ldc = (v >> 2) & 1,
                   .lda = v & 1, .ldb = (v >> 1) & 1, .ld_pad = v & 1};
    if (v == 7) bc.da = TEST_NONE;
    run_bwd_case(ctx, &bc, "bwd_broadcast_b_db_f32");
  }
  kiln_context_destroy(ctx);
}

/* The same with a f16 / bf16 dB: the sum is accumulated in f32 workspace, then converted. */
static void bwd_broadcast_b_db_half(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(25);
  for (int v = 0; v < 8; v++) {
    bwd_case bc = {.in = *in_dtypes[v & 1], .dc = *out_dtypes[v % 3], .da = *out_dtypes[(v + 2) % 3],
                   .db = v & 2 ? TEST_BF16 : TEST_F16, .batch = 3, .m = 33, .n = 17, .k = 7,
                   .a_ndim = 3, .b_ndim = v < 4 ? 2 : 3, .a_batch = 3, .b_batch = 1, .la = v & 1,
                   .lb = (v >> 1) & 1, .ldc = (v >> 2) & 1, .lda = (v >> 1) & 1, .ldb = v & 1, .ld_pad = 2 * (v & 1)};
    if (v == 6) bc.da = TEST_NONE;
    run_bwd_case(ctx, &bc, "bwd_broadcast_b_db_half");
  }
  kiln_context_destroy(ctx);
}

/* A broadcast (dA sums over the batch, f32 or through the f32 accumulator) and fully batched
 * products (no reduction). */
static void bwd_broadcast_a_and_batched(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  test_seed(26);
  for (int v = 0; v < 6; v++) {
    bwd_case bc = {.in = *in_dtypes[v & 1], .dc = *out_dtypes[(v + 1) % 3], .da = *out_dtypes[v % 3],
                   .db = *out_dtypes[(v + 2) % 3], .batch = 3, .m = 7, .n = 33, .k = 17,
                   .a_ndim = v < 3 ? 2 : 3, .b_ndim = 3, .a_batch = 1, .b_batch = 3, .la = (v >> 1) & 1,
                   .lb = v & 1, .ldc = (v >> 2) & 1, .lda = v & 1, .ldb = (v >> 1) & 1, .ld_pad = v & 1};
    run_bwd_case(ctx, &bc, "bwd_broadcast_a");
  }
  for (int v = 0; v < 6; v++) {
    bwd_case bc = {.in = *in_dtypes[v & 1], .dc = *out_dtypes[v % 3], .da = *out_dtypes[(v + 1) % 3],
                   .db = *out_dtypes[(v + 2) % 3], .batch = 2 + v % 3, .m = 17, .n = 7, .k = 33, .a_ndim = 3,
                   .b_ndim = 3, .la = v & 1, .lb = (v >> 1) & 1, .ldc = (v >> 2) & 1, .lda = (v >> 1) & 1,
                   .ldb = v & 1, .ld_pad = 1};
    bc.a_batch = bc.b_batch = bc.batch;
    run_bwd_case(ctx, &bc, "bwd_batched");
  }
  kiln_context_destroy(ctx);
}


/* ------------------------------------------------------------------------------------------ */
/* Errors: status and message (op, argument, what was found, what was expected)                */
/* ------------------------------------------------------------------------------------------ */

/* A valid problem to break one argument at a time: a [7, 33] f16, b [33, 17] f16, c [7, 17] f32,
 * and for the backward dc [7, 17] f32, da [7, 33] f16, db [33, 17] f32. */
typedef struct fixture {
  kiln_context *ctx;
  tmat a, b, c, dc, da, db;
} fixture;

static void fx_init(fixture *f) {
  f->ctx = cpu_ctx();
  tm_compact(&f->a, TEST_F16, 2, 1, 7, 33);
  tm_compact(&f->b, TEST_F16, 2, 1, 33, 17);
  tm_compact(&f->c, TEST_F32, 2, 1, 7, 17);
  tm_compact(&f->dc, TEST_F32, 2, 1, 7, 17);
  tm_compact(&f->da, TEST_F16, 2, 1, 7, 33);
  tm_compact(&f->db, TEST_F32, 2, 1, 33, 17);
  tm_fill(&f->a);
  tm_fill(&f->b);
  tm_fill(&f->dc);
  tm_poison(&f->c);
  tm_poison(&f->da);
  tm_poison(&f->db);
}
static void fx_free(fixture *f) {
  tm_free(&f->a);
  tm_free(&f->b);
  tm_free(&f->c);
  tm_free(&f->dc);
  tm_free(&f->da);
  tm_free(&f->db);
  kiln_context_destroy(f->ctx);
}
/* The backward with a workspace large enough (dc f32 needs one). */
static kiln_status fx_backward(fixture *f, const DLTensor *a, const DLTensor *b, const DLTensor *dc,
                               const DLTensor *da, const DLTensor *db, const kiln_matmul_opts *opts) {
  static _Alignas(256) unsigned char ws[1 << 16];
  return kiln_matmul_backward(f->ctx, a, b, dc, da, db, ws, sizeof ws, opts, NULL);
}
/* A DLTensor copy that can be broken without touching the fixture. */
typedef struct dlcopy {
  DLTensor t;
  int64_t shape[8], strides[8];
} dlcopy;
static DLTensor *dl_copy(dlcopy *d, const DLTensor *t) {
  d->t = *t;
  memcpy(d->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  if (t->strides) memcpy(d->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
  d->t.shape = d->shape;
  d->t.strides = t->strides ? d->strides : NULL;
  return &d->t;
}
/* A DLTensor over data with the given shape and strides (NULL: compact). */
static DLTensor dl_make(void *data, DLDataType dt, int ndim, int64_t *shape, int64_t *strides) {
  DLTensor t = {.data = data, .device = {kDLCPU, 0}, .ndim = ndim, .dtype = dt, .shape = shape, .strides = strides};
  return t;
}

static void err_null_args(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  assert_kiln_fails(kiln_matmul(NULL, &f.a.t, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: ctx is NULL", "kiln_context_create");
  assert_kiln_fails(kiln_matmul(f.ctx, NULL, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a is NULL", "DLTensor");
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, NULL, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b is NULL");
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c is NULL");
  size_t bytes = 0;
  assert_kiln_fails(kiln_matmul_backward(NULL, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: ctx is NULL");
  assert_kiln_fails(kiln_matmul_backward_workspace_size(NULL, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &bytes),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward_workspace_size: ctx is NULL");
  assert_kiln_fails(fx_backward(&f, NULL, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: a is NULL");
  assert_kiln_fails(fx_backward(&f, &f.a.t, NULL, &f.dc.t, &f.da.t, &f.db.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: b is NULL");
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, NULL, &f.da.t, &f.db.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: dc is NULL");
  fx_free(&f);
}

/* A GPU tensor on the CPU context, for each argument. */
static void err_device(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  dlcopy x;
  DLTensor *t = dl_copy(&x, &f.a.t);
  t->device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(kiln_matmul(f.ctx, t, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a is on kDLCUDA:0 but the context is the CPU's", "CUDA context");
  t = dl_copy(&x, &f.b.t);
  t->device = (DLDevice){kDLCUDAManaged, 2};
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b is on kDLCUDAManaged:2", "the context is the CPU's");
  t = dl_copy(&x, &f.c.t);
  t->device = (DLDevice){kDLCUDA, 1};
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c is on kDLCUDA:1", "the context is the CPU's");
  t = dl_copy(&x, &f.db.t);
  t->device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: db is on kDLCUDA:0", "the context is the CPU's");
  t = dl_copy(&x, &f.dc.t);
  t->device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, t, &f.da.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: dc is on kDLCUDA:0");
  fx_free(&f);
}

static void err_dtypes(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  dlcopy x, y;
  /* a f32 (b f32 too) */
  DLTensor *a = dl_copy(&x, &f.a.t), *b = dl_copy(&y, &f.b.t);
  a->dtype = b->dtype = TEST_F32;
  assert_kiln_fails(kiln_matmul(f.ctx, a, b, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has dtype float32; expected float16 or bfloat16");
  /* a f16, b bf16 */
  b = dl_copy(&y, &f.b.t);
  b->dtype = TEST_BF16;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, b, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b has dtype bfloat16 but a has float16", "both must be float16 or both bfloat16");
  /* c int8 */
  dlcopy z;
  DLTensor *c = dl_copy(&z, &f.c.t);
  c->dtype = (DLDataType){kDLInt, 8, 1};
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has dtype int8; expected float32, float16 or bfloat16");
  /* a f64 and a vector dtype */
  a = dl_copy(&x, &f.a.t);
  a->dtype = (DLDataType){kDLFloat, 64, 1};
  assert_kiln_fails(kiln_matmul(f.ctx, a, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has dtype float64; expected float16 or bfloat16");
  a->dtype = (DLDataType){kDLFloat, 16, 2};
  assert_kiln_fails(kiln_matmul(f.ctx, a, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has dtype dtype(code=2, bits=16, lanes=2), which kiln does not handle");
  /* backward: dc and the gradients */
  c = dl_copy(&z, &f.dc.t);
  c->dtype = (DLDataType){kDLInt, 32, 1};
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, c, &f.da.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: dc has dtype int32; expected float32, float16 or bfloat16");
  c = dl_copy(&z, &f.da.t);
  c->dtype = (DLDataType){kDLUInt, 16, 1};
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: da has dtype uint16; expected float32, float16 or bfloat16");
  b = dl_copy(&y, &f.b.t);
  b->dtype = TEST_BF16;
  assert_kiln_fails(fx_backward(&f, &f.a.t, b, &f.dc.t, &f.da.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: b has dtype bfloat16 but a has float16");
  fx_free(&f);
}

static void err_rank(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  int64_t s1[1] = {231}, s4[4] = {1, 1, 7, 33}, s4b[4] = {1, 1, 33, 17}, s4c[4] = {1, 1, 7, 17};
  DLTensor a1 = dl_make(f.a.buf, TEST_F16, 1, s1, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &a1, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has rank 1 (shape [231])", "expected rank 2 [rows, cols] or rank 3");
  DLTensor b4 = dl_make(f.b.buf, TEST_F16, 4, s4b, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &b4, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b has rank 4 (shape [1, 1, 33, 17])", "rank 3 [batch, rows, cols]");
  DLTensor c4 = dl_make(f.c.buf, TEST_F32, 4, s4c, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &c4, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has rank 4 (shape [1, 1, 7, 17])");
  DLTensor a4 = dl_make(f.a.buf, TEST_F16, 4, s4, NULL);
  assert_kiln_fails(fx_backward(&f, &a4, &f.b.t, &f.dc.t, &f.da.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: a has rank 4");
  DLTensor da1 = dl_make(f.da.buf, TEST_F16, 1, s1, NULL);
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &da1, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: da has rank 1");
  /* rank 0 and a rank beyond any op's reach */
  DLTensor a0 = dl_make(f.a.buf, TEST_F16, 0, NULL, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &a0, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has rank 0");
  int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 7, 33};
  DLTensor a9 = dl_make(f.a.buf, TEST_F16, 9, s9, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &a9, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has ndim 9");
  DLTensor ans = dl_make(f.a.buf, TEST_F16, 2, NULL, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &ans, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has ndim 2 but shape is NULL");
  fx_free(&f);
}

/* The example of the SPEC, word for word. */
static void err_spec_inner_dims(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  tmat a, b, c;
  tm_compact(&a, TEST_F16, 2, 1, 128, 32);
  tm_compact(&b, TEST_F16, 2, 1, 24, 64);
  tm_compact(&c, TEST_F32, 2, 1, 128, 64);
  tm_fill(&a);
  tm_fill(&b);
  assert_kiln_fails(kiln_matmul(ctx, &a.t, &b.t, &c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b has shape [24, 64] but a has K = 32 (shape [128, 32]); inner dimensions must match");
  /* the backward says the same under its own name */
  assert_kiln_fails(kiln_matmul_backward(ctx, &a.t, &b.t, &c.t, NULL, &b.t, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: b has shape [24, 64] but a has K = 32 (shape [128, 32]); inner dimensions "
                    "must match");
  /* a column-major (transposed) view reports its logical shape */
  tmat at;
  tm_init(&at, TEST_F16, 2, 1, 128, 32, COL, 0, 0, 0);
  assert_kiln_fails(kiln_matmul(ctx, &at.t, &b.t, &c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "b has shape [24, 64] but a has K = 32 (shape [128, 32])");
  tm_free(&at);
  tm_free(&a);
  tm_free(&b);
  tm_free(&c);
  kiln_context_destroy(ctx);
}

static void err_batch_mismatch(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  tmat a, b, c;
  tm_compact(&a, TEST_BF16, 3, 3, 7, 33);
  tm_compact(&b, TEST_BF16, 3, 4, 33, 17);
  tm_compact(&c, TEST_F32, 3, 4, 7, 17);
  tm_fill(&a);
  tm_fill(&b);
  tm_poison(&c);
  assert_kiln_fails(kiln_matmul(ctx, &a.t, &b.t, &c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has batch 3 and b has batch 4", "equal or one of them 1");
  assert_kiln_fails(kiln_matmul_backward(ctx, &a.t, &b.t, &c.t, NULL, &b.t, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: a has batch 3 and b has batch 4");
  tm_free(&a);
  tm_free(&b);
  tm_free(&c);
  kiln_context_destroy(ctx);
}

/* C (and the gradients) with the wrong shape or batch. */
static void err_output_shape(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  float cbuf[4 * 7 * 18];
  int64_t s[3] = {7, 18, 0};
  DLTensor c = dl_make(cbuf, TEST_F32, 2, s, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [7, 18]; expected [7, 17] (or [1, 7, 17])");
  s[0] = 17, s[1] = 7; /* transposed */
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [17, 7]; expected [7, 17]");
  /* batch 1 with a rank-3 c of batch 2 */
  s[0] = 2, s[1] = 7, s[2] = 17;
  c.ndim = 3;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [2, 7, 17]; expected [7, 17] (or [1, 7, 17])");
  /* [1, M, N] is accepted for a batch of 1 */
  s[0] = 1;
  test_poison(cbuf, TEST_F32, 7 * 17);
  assert_kiln_ok(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &c, NULL, NULL));
  /* batch 3: c of batch 2, batch 1, or rank 2 */
  tmat a3;
  tm_compact(&a3, TEST_F16, 3, 3, 7, 33);
  tm_fill(&a3);
  s[0] = 2;
  assert_kiln_fails(kiln_matmul(f.ctx, &a3.t, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [2, 7, 17]; expected [3, 7, 17]");
  s[0] = 1;
  assert_kiln_fails(kiln_matmul(f.ctx, &a3.t, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [1, 7, 17]; expected [3, 7, 17]");
  c.ndim = 2;
  s[0] = 7, s[1] = 17;
  assert_kiln_fails(kiln_matmul(f.ctx, &a3.t, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [7, 17]; expected [3, 7, 17]");
  /* backward: dc, da and db shapes */
  s[0] = 7, s[1] = 18;
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &c, &f.da.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: dc has shape [7, 18]; expected [7, 17]");
  int64_t sda[2] = {33, 7};
  DLTensor da = dl_make(f.da.buf, TEST_F16, 2, sda, NULL);
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &da, &f.db.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: da has shape [33, 7]; expected [7, 33] (or [1, 7, 33])");
  int64_t sdb[2] = {17, 33};
  DLTensor db = dl_make(f.db.buf, TEST_F32, 2, sdb, NULL);
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, NULL, &db, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: db has shape [17, 33]; expected [33, 17] (or [1, 33, 17])");
  /* B broadcast over a batch of 3: db has B's shape, not the batch's */
  tmat dc3, db3;
  tm_compact(&dc3, TEST_F16, 3, 3, 7, 17);
  tm_compact(&db3, TEST_F32, 3, 3, 33, 17);
  tm_fill(&dc3);
  assert_kiln_fails(fx_backward(&f, &a3.t, &f.b.t, &dc3.t, NULL, &db3.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: db has shape [3, 33, 17]; expected [33, 17] (or [1, 33, 17])");
  /* and dc must carry the batch */
  assert_kiln_fails(fx_backward(&f, &a3.t, &f.b.t, &f.dc.t, NULL, &f.db.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: dc has shape [7, 17]; expected [3, 7, 17]");
  tm_free(&dc3);
  tm_free(&db3);
  tm_free(&a3);
  fx_free(&f);
}

static void err_zero_dim(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  int64_t s[3] = {0, 33, 0};
  DLTensor a = dl_make(f.a.buf, TEST_F16, 2, s, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &a, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [0, 33]; every dimension must be >= 1");
  a.data = NULL; /* an empty tensor may have NULL data; still rejected for the shape */
  assert_kiln_fails(kiln_matmul(f.ctx, &a, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [0, 33]; every dimension must be >= 1");
  int64_t sb[2] = {33, 0}, sc[2] = {7, 0};
  DLTensor b = dl_make(f.b.buf, TEST_F16, 2, sb, NULL), c = dl_make(f.c.buf, TEST_F32, 2, sc, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &b, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b has shape [33, 0]; every dimension must be >= 1");
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [7, 0]; every dimension must be >= 1");
  int64_t s3[3] = {0, 7, 33};
  DLTensor a3 = dl_make(f.a.buf, TEST_F16, 3, s3, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &a3, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [0, 7, 33]; every dimension must be >= 1");
  /* K = 0 on both sides: no product to define */
  int64_t sa0[2] = {7, 0}, sb0[2] = {0, 17};
  DLTensor ak = dl_make(f.a.buf, TEST_F16, 2, sa0, NULL), bk = dl_make(f.b.buf, TEST_F16, 2, sb0, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &ak, &bk, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [7, 0]; every dimension must be >= 1");
  assert_kiln_fails(fx_backward(&f, &ak, &bk, &f.dc.t, &f.da.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: a has shape [7, 0]");
  /* a negative size */
  int64_t sn[2] = {-7, 33};
  DLTensor an = dl_make(f.a.buf, TEST_F16, 2, sn, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &an, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape[0] = -7; sizes must be >= 0");
  fx_free(&f);
}


/* Negative strides; matrices that are neither row- nor column-major (non-unit inner stride in
 * both directions, or a leading dimension smaller than the inner size). */
static void err_strides(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  static uint16_t big[2 * 7 * 2 * 33 * 4];
  int64_t s[2] = {7, 33};
  int64_t neg[2] = {-33, 1};
  DLTensor a = dl_make(f.a.buf, TEST_F16, 2, s, neg);
  a.byte_offset = 6 * 33 * 2; /* the last row: a flipped view */
  assert_kiln_fails(kiln_matmul(f.ctx, &a, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has stride -33 in dimension 0", "non-negative strides", ".contiguous()");
  int64_t sc[2] = {7, 17}, negc[2] = {17, -1};
  DLTensor c = dl_make(f.c.buf, TEST_F32, 2, sc, negc);
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has stride -1 in dimension 1");
  /* strides {2, 2K} and {2K, 2}: no unit stride either way */
  int64_t st[2] = {2, 2 * 33};
  DLTensor as = dl_make(big, TEST_F16, 2, s, st);
  assert_kiln_fails(kiln_matmul(f.ctx, &as, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [7, 33] with strides (2, 66) in its last two dimensions",
                    "expected a row-major (strides (ld, 1), ld >= 33) or column-major (strides (1, ld), ld >= 7)",
                    "contiguous");
  st[0] = 2 * 33, st[1] = 2;
  assert_kiln_fails(kiln_matmul(f.ctx, &as, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [7, 33] with strides (66, 2)", "contiguous");
  /* the same on b and on c (rank 3: the message names the last two dimensions) */
  int64_t sb3[3] = {1, 33, 17}, stb3[3] = {4 * 33 * 17, 2, 2 * 33};
  DLTensor b3 = dl_make(big, TEST_F16, 3, sb3, stb3);
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &b3, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b has shape [1, 33, 17] with strides (2, 66) in its last two dimensions",
                    "ld >= 17", "ld >= 33");
  int64_t stc[2] = {2 * 17, 2};
  float cbig[7 * 17 * 2];
  DLTensor c2 = dl_make(cbig, TEST_F32, 2, sc, stc);
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &c2, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [7, 17] with strides (34, 2)");
  /* unit inner stride but a leading dimension too small (rows would overlap) */
  int64_t small_row[2] = {32, 1}, small_col[2] = {1, 6};
  DLTensor ar = dl_make(big, TEST_F16, 2, s, small_row), ac = dl_make(big, TEST_F16, 2, s, small_col);
  assert_kiln_fails(kiln_matmul(f.ctx, &ar, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [7, 33] with strides (32, 1)", "ld >= 33");
  assert_kiln_fails(kiln_matmul(f.ctx, &ac, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [7, 33] with strides (1, 6)", "ld >= 7");
  /* an all-zero-stride (expanded) dc is refused by the backward too */
  int64_t zero[2] = {0, 0};
  DLTensor dcz = dl_make(f.dc.buf, TEST_F32, 2, sc, zero);
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &dcz, &f.da.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: dc has shape [7, 17] with strides (0, 0)");
  fx_free(&f);
}

/* Outputs that overlap an input (or each other, in the backward). Adjacent is fine. */
static void err_overlap(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  /* one buffer: a [8, 32] f16 (512 bytes) followed by room for more */
  static _Alignas(64) unsigned char pool[8192];
  test_fill(pool, TEST_F16, 512); /* the first 1024 bytes */
  int64_t sa[2] = {8, 32}, sb[2] = {32, 16}, sc[2] = {8, 16};
  static _Alignas(64) uint16_t bbuf[32 * 16];
  test_fill(bbuf, TEST_F16, 32 * 16);
  DLTensor a = dl_make(pool, TEST_F16, 2, sa, NULL), b = dl_make(bbuf, TEST_F16, 2, sb, NULL);
  DLTensor c = dl_make(pool, TEST_F32, 2, sc, NULL);
  c.byte_offset = 256; /* inside a */
  assert_kiln_fails(kiln_matmul(ctx, &a, &b, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c overlaps a in memory", "separate buffer");
  c.byte_offset = 0; /* in place */
  assert_kiln_fails(kiln_matmul(ctx, &a, &b, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c overlaps a in memory");
  c.byte_offset = 508; /* the last 4 bytes of a */
  assert_kiln_fails(kiln_matmul(ctx, &a, &b, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "c overlaps a");
  /* c ending inside b (c before b in one buffer): c's last 4 bytes are b's first */
  DLTensor c2 = dl_make(pool + 4096, TEST_F32, 2, sc, NULL);
  DLTensor b2 = dl_make(pool + 4096 + 8 * 16 * 4 - 4, TEST_F16, 2, sb, NULL);
  test_fill(pool + 4096 + 8 * 16 * 4 - 4, TEST_F16, 32 * 16);
  assert_kiln_fails(kiln_matmul(ctx, &a, &b2, &c2, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c overlaps b in memory");
  /* exactly adjacent: c starts at a's last byte + 1 */
  c.byte_offset = 512;
  test_poison(pool + 512, TEST_F32, 8 * 16);
  assert_kiln_ok(kiln_matmul(ctx, &a, &b, &c, NULL, NULL));

  /* backward: da over a, da over dc, db over da, db over b */
  int64_t sdc[2] = {8, 16};
  static _Alignas(256) unsigned char gpool[16384];
  DLTensor dc = dl_make(gpool, TEST_F16, 2, sdc, NULL);            /* 256 bytes */
  DLTensor da = dl_make(gpool + 256, TEST_F16, 2, sa, NULL);       /* 512 bytes */
  DLTensor db = dl_make(gpool + 768, TEST_F16, 2, sb, NULL);       /* 1024 bytes */
  test_fill(gpool, TEST_F16, 128);
  assert_kiln_ok(kiln_matmul_backward(ctx, &a, &b, &dc, &da, &db, NULL, 0, NULL, NULL)); /* adjacent: fine */
  DLTensor da_a = dl_make(pool + 100, TEST_F16, 2, sa, NULL);
  assert_kiln_fails(kiln_matmul_backward(ctx, &a, &b, &dc, &da_a, NULL, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: da overlaps a in memory");
  DLTensor da_dc = dl_make(gpool + 128, TEST_F16, 2, sa, NULL);
  assert_kiln_fails(kiln_matmul_backward(ctx, &a, &b, &dc, &da_dc, NULL, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: da overlaps dc in memory");
  DLTensor db_da = dl_make(gpool + 700, TEST_F16, 2, sb, NULL);
  assert_kiln_fails(kiln_matmul_backward(ctx, &a, &b, &dc, &da, &db_da, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: db overlaps da in memory");
  DLTensor db_same = da; /* the same memory for both gradients */
  db_same.shape = sb;
  assert_kiln_fails(kiln_matmul_backward(ctx, &a, &b, &dc, &da, &db_same, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "db overlaps da");
  DLTensor db_b = dl_make(bbuf, TEST_F16, 2, sb, NULL);
  assert_kiln_fails(kiln_matmul_backward(ctx, &a, &b, &dc, NULL, &db_b, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: db overlaps b in memory");
  kiln_context_destroy(ctx);
}

/* An output whose batches overlap: batch stride 0 (an expanded view) or smaller than a matrix. */
static void err_output_batch_stride(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  tmat a, b;
  tm_compact(&a, TEST_F16, 3, 3, 7, 33);
  tm_compact(&b, TEST_F16, 2, 1, 33, 17);
  tm_fill(&a);
  tm_fill(&b);
  static float cbuf[3 * 7 * 17];
  int64_t sc[3] = {3, 7, 17}, st[3] = {0, 17, 1};
  DLTensor c = dl_make(cbuf, TEST_F32, 3, sc, st);
  assert_kiln_fails(kiln_matmul(ctx, &a.t, &b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has batch stride 0 but one [7, 17] matrix spans 119 elements",
                    "batches overlap", "batch stride >= 119");
  st[0] = 118;
  assert_kiln_fails(kiln_matmul(ctx, &a.t, &b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has batch stride 118", "batch stride >= 119");
  /* column-major c: one matrix spans 17 columns of ld 7 */
  st[0] = 100, st[1] = 1, st[2] = 7;
  assert_kiln_fails(kiln_matmul(ctx, &a.t, &b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has batch stride 100", "spans 119 elements");
  st[0] = 119, st[1] = 17, st[2] = 1; /* exactly one matrix apart: fine */
  test_poison(cbuf, TEST_F32, 3 * 7 * 17);
  assert_kiln_ok(kiln_matmul(ctx, &a.t, &b.t, &c, NULL, NULL));
  /* an input may broadcast through batch stride 0 */
  static uint16_t a0buf[7 * 33];
  test_fill(a0buf, TEST_F16, 7 * 33);
  int64_t sa[3] = {3, 7, 33}, sta[3] = {0, 33, 1};
  DLTensor a0 = dl_make(a0buf, TEST_F16, 3, sa, sta);
  test_poison(cbuf, TEST_F32, 3 * 7 * 17);
  assert_kiln_ok(kiln_matmul(ctx, &a0, &b.t, &c, NULL, NULL));
  for (int i = 0; i < 7 * 17; i++) { /* every batch got the same product */
    assert_memory_equal(&cbuf[i], &cbuf[119 + i], sizeof(float));
    assert_memory_equal(&cbuf[i], &cbuf[238 + i], sizeof(float));
  }
  /* the backward's da with batch stride 0 */
  static uint16_t dabuf[3 * 7 * 33];
  int64_t std[3] = {0, 33, 1};
  DLTensor da = dl_make(dabuf, TEST_F16, 3, sa, std);
  tmat dc;
  tm_compact(&dc, TEST_F16, 3, 3, 7, 17);
  tm_fill(&dc);
  assert_kiln_fails(kiln_matmul_backward(ctx, &a.t, &b.t, &dc.t, &da, NULL, NULL, 0, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: da has batch stride 0", "batches overlap");
  tm_free(&dc);
  tm_free(&a);
  tm_free(&b);
  kiln_context_destroy(ctx);
}

/* algo out of range; explicit GPU algos on the CPU context. */
static void err_algo(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = (kiln_matmul_algo)42;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: opts->algo is 42", "expected KILN_MATMUL_AUTO, _MMA_SYNC, _CP_ASYNC or _WGMMA");
  o.algo = (kiln_matmul_algo)-1;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: opts->algo is -1");
  o.algo = (kiln_matmul_algo)42;
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: opts->algo is 42");
  static const struct {
    kiln_matmul_algo algo;
    const char *name;
  } gpu[3] = {{KILN_MATMUL_MMA_SYNC, "algo MMA_SYNC"}, {KILN_MATMUL_CP_ASYNC, "algo CP_ASYNC"},
              {KILN_MATMUL_WGMMA, "algo WGMMA"}};
  for (int i = 0; i < 3; i++) {
    o.algo = gpu[i].algo;
    assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_UNSUPPORTED, "kiln_matmul: ",
                      gpu[i].name, "needs a CUDA device but the context is the CPU's", "KILN_MATMUL_AUTO");
    assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &o), KILN_ERROR_UNSUPPORTED,
                      "kiln_matmul_backward: ", gpu[i].name, "the context is the CPU's");
  }
  /* AUTO works on the CPU */
  o.algo = KILN_MATMUL_AUTO;
  assert_kiln_ok(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL));
  fx_free(&f);
}

/* opts.tile_n: only 0, 64, 128 or 256, and non-zero only with algo WGMMA; checked before the
 * device, so on the CPU context too, in the forward and the backward. */
static void err_tile_n(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  assert_int_equal(o.tile_n, 0);
  o.algo = KILN_MATMUL_WGMMA;
  o.tile_n = 96;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: opts->tile_n is 96", "expected 0 (chosen per shape), 64, 128 or 256");
  o.tile_n = -64;
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: opts->tile_n is -64");
  static const kiln_matmul_algo others[3] = {KILN_MATMUL_AUTO, KILN_MATMUL_MMA_SYNC, KILN_MATMUL_CP_ASYNC};
  static const char *const names[3] = {"algo is AUTO", "algo is MMA_SYNC", "algo is CP_ASYNC"};
  for (int i = 0; i < 3; i++) {
    o.algo = others[i];
    o.tile_n = 128;
    assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_matmul: opts->tile_n is 128 but ", names[i], "set algo KILN_MATMUL_WGMMA or tile_n 0");
    assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &o), KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_matmul_backward: opts->tile_n is 128 but ", names[i]);
  }
  /* a valid width with WGMMA gets past the option check to the device check */
  o.algo = KILN_MATMUL_WGMMA;
  o.tile_n = 256;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_matmul: algo WGMMA needs a CUDA device");
  fx_free(&f);
}

/* opts.stream_k: -1, 0 or 1, and 1 only with algo WGMMA; checked before the device, in the
 * forward and its workspace query. On the CPU the query answers 0 and a workspace is ignored. */
static void err_stream_k(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  assert_int_equal(o.stream_k, 0);
  assert_null(o.workspace);
  assert_int_equal(o.workspace_bytes, 0);
  size_t need = 7;
  o.stream_k = 2;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: opts->stream_k is 2; expected 0 (where it pays), 1", "or -1 (never)");
  assert_kiln_fails(kiln_matmul_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, &need),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_workspace_size: opts->stream_k is 2");
  o.stream_k = -2;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: opts->stream_k is -2");
  static const kiln_matmul_algo others[3] = {KILN_MATMUL_AUTO, KILN_MATMUL_MMA_SYNC, KILN_MATMUL_CP_ASYNC};
  static const char *const names[3] = {"algo is AUTO", "algo is MMA_SYNC", "algo is CP_ASYNC"};
  for (int i = 0; i < 3; i++) {
    o.algo = others[i], o.stream_k = 1;
    assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                      "kiln_matmul: opts->stream_k is 1 but ", names[i], "set algo KILN_MATMUL_WGMMA or stream_k 0");
  }
  o.algo = KILN_MATMUL_WGMMA; /* valid: on to the device check */
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_UNSUPPORTED,
                    "kiln_matmul: algo WGMMA needs a CUDA device");
  assert_int_equal(need, 7); /* untouched by the failed queries */
  o.algo = KILN_MATMUL_AUTO, o.stream_k = 0;
  assert_kiln_ok(kiln_matmul_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, &need));
  assert_int_equal(need, 0);
  assert_kiln_fails(kiln_matmul_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_workspace_size");
  char junk[16];
  o.workspace = junk + 1, o.workspace_bytes = 3; /* ignored on the CPU */
  assert_kiln_ok(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL));
  fx_free(&f);
}

/* tile_n with an algo outside the enum: the algo is the error reported (the tile_n check once
 * came first and printed the algo as "unknown"). */
static void err_tile_n_unknown_algo(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = (kiln_matmul_algo)42;
  o.tile_n = 64;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: opts->algo is 42; expected KILN_MATMUL_AUTO, _MMA_SYNC, _CP_ASYNC or _WGMMA");
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &o), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: opts->algo is 42");
  fx_free(&f);
}

/* Backward-only argument errors: no gradient asked, the size query's bytes. */
static void err_backward_args(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  size_t bytes = 99;
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: da and db are both NULL", "at least one gradient");
  assert_kiln_fails(kiln_matmul_backward_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.dc.t, NULL, NULL, &bytes),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward_workspace_size: da and db are both NULL");
  assert_kiln_fails(kiln_matmul_backward_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward_workspace_size: bytes is NULL", "size_t*");
  /* the size query validates like the op itself */
  int64_t sda[2] = {33, 7};
  DLTensor da = dl_make(f.da.buf, TEST_F16, 2, sda, NULL);
  assert_kiln_fails(kiln_matmul_backward_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &da, NULL, &bytes),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward_workspace_size: da has shape [33, 7]",
                    "expected [7, 33]");
  assert_kiln_fails(kiln_matmul_backward_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.da.t, &bytes),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward_workspace_size: db has shape [7, 33]");
  /* the query of a valid call succeeds and sets bytes */
  bytes = 99;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &bytes));
  assert_true(bytes >= 7 * 17 * 2); /* dc f32 -> f16 */
  fx_free(&f);
}

/* Workspace too small, NULL, or misaligned; no workspace needed accepts NULL and any pointer. */
static void err_backward_workspace(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  size_t need = 0;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &need));
  assert_true(need > 0);
  unsigned char *ws = aligned_alloc(256, round_up256(need) + 256);
  assert_non_null(ws);
  char found[64], want[64];
  snprintf(found, sizeof found, "workspace is %zu bytes but", need - 1);
  snprintf(want, sizeof want, "this call needs %zu;", need);
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, ws, need - 1, NULL, NULL),
                    KILN_ERROR_WORKSPACE, "kiln_matmul_backward: ", found, want, "kiln_matmul_backward_workspace_size");
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, ws, 0, NULL, NULL),
                    KILN_ERROR_WORKSPACE, "workspace is 0 bytes but", want);
  snprintf(found, sizeof found, "workspace is %zu bytes (NULL) but", need);
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, NULL, need, NULL, NULL),
                    KILN_ERROR_WORKSPACE, found, want, "kiln_matmul_backward_workspace_size");
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, NULL, 0, NULL, NULL),
                    KILN_ERROR_WORKSPACE, "workspace is 0 bytes (NULL) but", want);
  for (int shift = 1; shift < 256; shift *= 4) {
    assert_kiln_fails(
        kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, ws + shift, need, NULL, NULL),
        KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: workspace", "is not 256-byte aligned");
  }
  /* the outputs were not touched by any of the failures */
  tmat *outs[2] = {&f.da, &f.db};
  for (int o = 0; o < 2; o++) {
    const tmat *m = outs[o];
    for (int64_t i = 0; i < m->total; i++) {
      double v = test_load(m->buf, m->dt, i);
      if (!isnan(v)) fail_msg("a failed kiln_matmul_backward wrote %s element %" PRId64, o ? "db" : "da", i);
    }
  }
  /* exactly the size asked, and more, both work */
  assert_kiln_ok(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, ws, need, NULL, NULL));
  assert_kiln_ok(
      kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, ws, round_up256(need) + 256, NULL, NULL));
  /* no workspace needed (dc in A's dtype, no reduction): NULL/0 works, a misaligned pointer is ignored */
  tmat dc16;
  tm_compact(&dc16, TEST_F16, 2, 1, 7, 17);
  tm_fill(&dc16);
  size_t none = 7;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(f.ctx, &f.a.t, &f.b.t, &dc16.t, &f.da.t, &f.db.t, &none));
  assert_int_equal(none, 0);
  assert_kiln_ok(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &dc16.t, &f.da.t, &f.db.t, NULL, 0, NULL, NULL));
  assert_kiln_ok(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &dc16.t, &f.da.t, &f.db.t, ws + 1, 3, NULL, NULL));
  /* a broadcast B with a f16 db needs workspace even when dc has A's dtype */
  tmat a3, dc3, db16;
  tm_compact(&a3, TEST_F16, 3, 2, 7, 33);
  tm_compact(&dc3, TEST_F16, 3, 2, 7, 17);
  tm_compact(&db16, TEST_F16, 2, 1, 33, 17);
  tm_fill(&a3);
  tm_fill(&dc3);
  size_t need3 = 0;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(f.ctx, &a3.t, &f.b.t, &dc3.t, NULL, &db16.t, &need3));
  assert_true(need3 >= 33 * 17 * 4);
  snprintf(want, sizeof want, "this call needs %zu;", need3);
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &a3.t, &f.b.t, &dc3.t, NULL, &db16.t, NULL, 0, NULL, NULL),
                    KILN_ERROR_WORKSPACE, "kiln_matmul_backward: workspace is 0 bytes (NULL)", want);
  tm_free(&a3);
  tm_free(&dc3);
  tm_free(&db16);
  tm_free(&dc16);
  free(ws);
  fx_free(&f);
}

/* The workspace is written (dc converted to A's dtype here): it must share no byte with any
 * argument, inputs included; the message names the argument. */
static void err_backward_workspace_overlap(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  size_t need = 0;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, &need));
  assert_true(need > 0 && need % 4 == 0);
  const size_t arena_bytes = round_up256(need) + 33 * 17 * 4 + 256;
  unsigned char *arena = aligned_alloc(256, round_up256(arena_bytes));
  assert_non_null(arena);
  memset(arena, 0, arena_bytes);
  /* each argument in turn placed at the workspace's start */
  DLTensor a = dl_make(arena, TEST_F16, 2, f.a.shape, NULL), b = dl_make(arena, TEST_F16, 2, f.b.shape, NULL);
  DLTensor dc = dl_make(arena, TEST_F32, 2, f.dc.shape, NULL), da = dl_make(arena, TEST_F16, 2, f.da.shape, NULL);
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &a, &f.b.t, &f.dc.t, &f.da.t, &f.db.t, arena, need, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: workspace overlaps a in memory",
                    "the workspace must be a separate buffer");
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &f.a.t, &b, &f.dc.t, &f.da.t, &f.db.t, arena, need, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: workspace overlaps b in memory");
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &dc, &f.da.t, &f.db.t, arena, need, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: workspace overlaps dc in memory");
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &da, &f.db.t, arena, need, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: workspace overlaps da in memory");
  /* db sharing only the workspace's last 4 bytes; then starting just past it: fine */
  DLTensor db = dl_make(arena + need - 4, TEST_F32, 2, f.db.shape, NULL);
  assert_kiln_fails(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &db, arena, need, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: workspace overlaps db in memory");
  for (int64_t i = 0; i < f.da.total; i++) assert_true(isnan(test_load(f.da.buf, f.da.dt, i))); /* untouched */
  db.data = arena + need;
  assert_kiln_ok(kiln_matmul_backward(f.ctx, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &db, arena, need, NULL, NULL));
  free(arena);
  fx_free(&f);
}

/* NULL data with elements, for every argument. */
static void err_null_data(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  dlcopy x;
  DLTensor *t = dl_copy(&x, &f.a.t);
  t->data = NULL;
  assert_kiln_fails(kiln_matmul(f.ctx, t, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has 231 elements but data is NULL");
  t = dl_copy(&x, &f.b.t);
  t->data = NULL;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b has 561 elements but data is NULL");
  t = dl_copy(&x, &f.c.t);
  t->data = NULL;
  assert_kiln_fails(kiln_matmul(f.ctx, &f.a.t, &f.b.t, t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has 119 elements but data is NULL");
  t = dl_copy(&x, &f.dc.t);
  t->data = NULL;
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, t, &f.da.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: dc has 119 elements but data is NULL");
  t = dl_copy(&x, &f.db.t);
  t->data = NULL;
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, NULL, t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: db has 561 elements but data is NULL");
  fx_free(&f);
}

/* A dimension above INT32_MAX, with a dummy data pointer: must be rejected before any access
 * (an access would crash). */
static void err_huge_dim(void **state) {
  (void)state;
  kiln_context *ctx = cpu_ctx();
  void *dummy = (void *)(uintptr_t)0x10000; /* never mapped */
  const int64_t big = (int64_t)INT32_MAX + 1;
  int64_t sa[2] = {big, 33}, sb[2] = {33, 17}, sc[2] = {big, 17};
  DLTensor a = dl_make(dummy, TEST_F16, 2, sa, NULL), b = dl_make(dummy, TEST_F16, 2, sb, NULL);
  DLTensor c = dl_make(dummy, TEST_F32, 2, sc, NULL);
  assert_kiln_fails(kiln_matmul(ctx, &a, &b, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [2147483648, 33]; each dimension must be < 2^31");
  /* K too large */
  int64_t sak[2] = {7, big}, sbk[2] = {big, 17}, sck[2] = {7, 17};
  DLTensor ak = dl_make(dummy, TEST_F16, 2, sak, NULL), bk = dl_make(dummy, TEST_F16, 2, sbk, NULL);
  DLTensor ck = dl_make(dummy, TEST_F32, 2, sck, NULL);
  assert_kiln_fails(kiln_matmul(ctx, &ak, &bk, &ck, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [7, 2147483648]; each dimension must be < 2^31");
  /* N too large (b first) */
  int64_t sbn[2] = {33, big}, scn[2] = {7, big};
  int64_t sa7[2] = {7, 33};
  DLTensor a7 = dl_make(dummy, TEST_F16, 2, sa7, NULL), bn = dl_make(dummy, TEST_F16, 2, sbn, NULL);
  DLTensor cn = dl_make(dummy, TEST_F32, 2, scn, NULL);
  assert_kiln_fails(kiln_matmul(ctx, &a7, &bn, &cn, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: b has shape [33, 2147483648]; each dimension must be < 2^31");
  /* batch too large (broadcast b) */
  int64_t sab[3] = {big, 1, 1}, sbb[2] = {1, 1}, scb[3] = {big, 1, 1};
  DLTensor ab = dl_make(dummy, TEST_F16, 3, sab, NULL), bb = dl_make(dummy, TEST_F16, 2, sbb, NULL);
  DLTensor cb = dl_make(dummy, TEST_F32, 3, scb, NULL);
  assert_kiln_fails(kiln_matmul(ctx, &ab, &bb, &cb, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has shape [2147483648, 1, 1]; each dimension must be < 2^31");
  /* a and b fine, c of batch 2^31 (then also the wrong batch, but the size is reported first) */
  int64_t scx[3] = {big, 7, 17};
  DLTensor cx = dl_make(dummy, TEST_F32, 3, scx, NULL);
  assert_kiln_fails(kiln_matmul(ctx, &a7, &b, &cx, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c has shape [2147483648, 7, 17]; each dimension must be < 2^31");
  /* the backward and its size query */
  size_t bytes = 0;
  assert_kiln_fails(kiln_matmul_backward_workspace_size(ctx, &a, &b, &c, &a, NULL, &bytes),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward_workspace_size: a has shape [2147483648, 33]",
                    "< 2^31");
  assert_kiln_fails(kiln_matmul_backward(ctx, &ak, &bk, &ck, &ak, &bk, dummy, 1 << 20, NULL, NULL),
                    KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul_backward: a has shape [7, 2147483648]");
  /* exactly INT32_MAX passes this check (then fails on K mismatch, before any access) */
  int64_t sam[2] = {INT32_MAX, 33}, sbm[2] = {34, 17};
  DLTensor am = dl_make(dummy, TEST_F16, 2, sam, NULL), bm = dl_make(dummy, TEST_F16, 2, sbm, NULL);
  assert_kiln_fails(kiln_matmul(ctx, &am, &bm, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "b has shape [34, 17] but a has K = 33 (shape [2147483647, 33])");
  kiln_context_destroy(ctx);
}

/* Shapes and strides whose byte span overflows 64 bits, and views that wrap the address space. */
static void err_span_overflow(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  void *dummy = (void *)(uintptr_t)0x10000;
  int64_t s[2] = {7, 33}, st[2] = {INT64_MAX / 4, 1};
  DLTensor a = dl_make(dummy, TEST_F16, 2, s, st);
  assert_kiln_fails(kiln_matmul(f.ctx, &a, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a (shape [7, 33]) spans more bytes than a 64-bit address holds");
  /* the column-major leading dimension */
  st[0] = 1, st[1] = INT64_MAX / 16;
  assert_kiln_fails(kiln_matmul(f.ctx, &a, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a (shape [7, 33]) spans more bytes");
  /* the batch stride */
  int64_t s3[3] = {3, 7, 33}, st3[3] = {INT64_MAX / 2, 33, 1};
  DLTensor a3 = dl_make(dummy, TEST_F16, 3, s3, st3);
  assert_kiln_fails(kiln_matmul(f.ctx, &a3, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a (shape [3, 7, 33]) spans more bytes");
  /* the element count (bytes, not elements): a span of 2^62 f32 elements, times 4 */
  int64_t sc[2] = {2, 17}, stc[2] = {(int64_t)1 << 62, 1};
  DLTensor c = dl_make(dummy, TEST_F32, 2, sc, stc);
  int64_t sa2[2] = {2, 33};
  DLTensor a2 = dl_make(f.a.buf, TEST_F16, 2, sa2, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &a2, &f.b.t, &c, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: c (shape [2, 17]) spans more bytes");
  /* a view that wraps past the end of the address space */
  DLTensor aw = dl_make((void *)(UINTPTR_MAX - 255), TEST_F16, 2, s, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &aw, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a (shape [7, 33]) spans more bytes than a 64-bit address holds");
  /* an element count beyond int64 */
  int64_t sh[2] = {(int64_t)1 << 62, 4};
  DLTensor ah = dl_make(dummy, TEST_F16, 2, sh, NULL);
  assert_kiln_fails(kiln_matmul(f.ctx, &ah, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul: a has a shape whose element count overflows int64");
  /* the backward's gradients */
  DLTensor dbw = dl_make(dummy, TEST_F32, 2, f.db.shape, (int64_t[2]){INT64_MAX / 8, 1});
  assert_kiln_fails(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, NULL, &dbw, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_matmul_backward: db (shape [33, 17]) spans more bytes");
  fx_free(&f);
}

/* A call that fails validation writes nothing: c (and the gradients) keep their poison. */
static void err_failure_leaves_outputs_untouched(void **state) {
  (void)state;
  fixture f;
  fx_init(&f);
  const size_t cbytes = (size_t)f.c.total * f.c.elem;
  unsigned char *saved = malloc(cbytes);
  assert_non_null(saved);
  memcpy(saved, f.c.buf, cbytes);
  /* inner-dimension mismatch */
  tmat b;
  tm_compact(&b, TEST_F16, 2, 1, 32, 17);
  tm_fill(&b);
  assert_int_equal(kiln_matmul(f.ctx, &f.a.t, &b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_memory_equal(f.c.buf, saved, cbytes);
  /* unsupported algo, wrong dtype, overlapping output */
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = KILN_MATMUL_CP_ASYNC;
  assert_int_equal(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, &o, NULL), KILN_ERROR_UNSUPPORTED);
  assert_memory_equal(f.c.buf, saved, cbytes);
  dlcopy x;
  DLTensor *bb = dl_copy(&x, &f.b.t);
  bb->dtype = TEST_BF16;
  assert_int_equal(kiln_matmul(f.ctx, &f.a.t, bb, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_memory_equal(f.c.buf, saved, cbytes);
  /* a negative stride on a */
  int64_t neg[2] = {33, -1};
  DLTensor an = dl_make(f.a.buf, TEST_F16, 2, f.a.shape, neg);
  an.byte_offset = 64;
  assert_int_equal(kiln_matmul(f.ctx, &an, &f.b.t, &f.c.t, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_memory_equal(f.c.buf, saved, cbytes);
  /* the backward: da valid, db of the wrong shape -> nothing written to da */
  const size_t dabytes = (size_t)f.da.total * f.da.elem;
  unsigned char *saved_da = malloc(dabytes);
  assert_non_null(saved_da);
  memcpy(saved_da, f.da.buf, dabytes);
  int64_t sdb[2] = {17, 33};
  DLTensor db = dl_make(f.db.buf, TEST_F32, 2, sdb, NULL);
  assert_int_equal(fx_backward(&f, &f.a.t, &f.b.t, &f.dc.t, &f.da.t, &db, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_memory_equal(f.da.buf, saved_da, dabytes);
  /* and a successful call afterwards does write c */
  assert_kiln_ok(kiln_matmul(f.ctx, &f.a.t, &f.b.t, &f.c.t, NULL, NULL));
  for (int64_t i = 0; i < f.c.total; i++) assert_false(isnan(((float *)f.c.buf)[i]));
  free(saved_da);
  free(saved);
  tm_free(&b);
  fx_free(&f);
}

/* ------------------------------------------------------------------------------------------ */
int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fwd_dtypes),
      cmocka_unit_test(fwd_layouts),
      cmocka_unit_test(fwd_leading_dims),
      cmocka_unit_test(fwd_byte_offset),
      cmocka_unit_test(fwd_strides_null),
      cmocka_unit_test(fwd_ragged_shapes),
      cmocka_unit_test(fwd_batched),
      cmocka_unit_test(fwd_broadcast_b),
      cmocka_unit_test(fwd_broadcast_a),
      cmocka_unit_test(fwd_batch_strides),
      cmocka_unit_test(fwd_alpha),
      cmocka_unit_test(fwd_cuda_host_and_tiny),
      cmocka_unit_test(bwd_dc_f32),
      cmocka_unit_test(bwd_dc_half),
      cmocka_unit_test(bwd_single_gradient),
      cmocka_unit_test(bwd_broadcast_b_db_f32),
      cmocka_unit_test(bwd_broadcast_b_db_half),
      cmocka_unit_test(bwd_broadcast_a_and_batched),
      cmocka_unit_test(err_null_args),
      cmocka_unit_test(err_device),
      cmocka_unit_test(err_dtypes),
      cmocka_unit_test(err_rank),
      cmocka_unit_test(err_spec_inner_dims),
      cmocka_unit_test(err_batch_mismatch),
      cmocka_unit_test(err_output_shape),
      cmocka_unit_test(err_zero_dim),
      cmocka_unit_test(err_strides),
      cmocka_unit_test(err_overlap),
      cmocka_unit_test(err_output_batch_stride),
      cmocka_unit_test(err_algo),
      cmocka_unit_test(err_tile_n),
      cmocka_unit_test(err_tile_n_unknown_algo),
      cmocka_unit_test(err_stream_k),
      cmocka_unit_test(err_backward_args),
      cmocka_unit_test(err_backward_workspace),
      cmocka_unit_test(err_backward_workspace_overlap),
      cmocka_unit_test(err_null_data),
      cmocka_unit_test(err_huge_dim),
      cmocka_unit_test(err_span_overflow),
      cmocka_unit_test(err_failure_leaves_outputs_untouched),
  };
  return cmocka_run_group_tests_name("matmul_host", tests, NULL, NULL);
}
