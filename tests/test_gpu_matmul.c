/*
 * test_gpu_matmul.c — kiln_matmul and kiln_matmul_backward on a real GPU against a float64
 * reference computed on the host from the same rounded inputs.
 *
 * Every device operand is a compact 1-D kiln tensor (kiln_tensor_empty + kiln_tensor_copy)
 * with a strided view over it (our own DLTensor: shape, strides, byte_offset). Elements outside
 * the view are NaN: in an input, a kernel that reads padding poisons its result; in an output,
 * every element is NaN before the call (so an unwritten one fails the error check) and those
 * outside the view must still be the same NaN afterwards.
 *
 * Error: the relative Frobenius error ||C - ref|| / ||ref|| over all of C, or, above 512^3
 * multiply-adds, over ~2000 random elements plus whole edge rows and columns (and then every
 * element of C must at least be written, i.e. not NaN). Tolerances (SPEC): f32 output 1e-4,
 * f16 1e-3, bf16 6e-3; gradients 1e-4 in f32, 1e-2 in f16 / bf16.
 *
 * Exits 77 (CTest: skipped) with a SKIP line when there is no usable GPU, before cmocka runs.
 */
#include <inttypes.h>

#include "test_util.h"

#ifdef _OPENMP
#define OMP_FOR _Pragma("omp parallel for schedule(dynamic, 1)")
#else
#define OMP_FOR
#endif

static kiln_context *g_ctx; /* the ordinal-0 CUDA context, made in main() */
static CUstream g_stream;   /* a kiln_stream_create stream most tests run on */

enum { AUTO = KILN_MATMUL_AUTO, MMA = KILN_MATMUL_MMA_SYNC, CPA = KILN_MATMUL_CP_ASYNC, WG = KILN_MATMUL_WGMMA };
static const char *algo_str(int a) {
  return a == AUTO ? "AUTO" : a == MMA ? "MMA_SYNC" : a == CPA ? "CP_ASYNC" : "WGMMA";
}
/* WGMMA runs on sm_90 only; elsewhere its cases are skipped (and its refusal is tested). */
static int g_has_wgmma;
/* opts.tile_n for WGMMA products (0: chosen per shape); wgmma_tile_widths sets it. */
static int g_tile_n;
static int algo_runs(int a) { return a != WG || g_has_wgmma; }
/* opts.stream_k and opts.workspace for WGMMA products; wgmma_stream_k sets them (one workspace
 * for all its products, so that every launch meets the flags the launches before it left). */
static int g_stream_k;
static void *g_ws;
static size_t g_ws_bytes;
static const char *dt_str(DLDataType dt) { return dt.bits == 32 ? "f32" : dt.code == kDLBfloat ? "bf16" : "f16"; }
static size_t dt_size(DLDataType dt) { return dt.bits / 8; }
static double tol_out(DLDataType dt) { return dt.bits == 32 ? 1e-4 : dt.code == kDLBfloat ? 6e-3 : 1e-3; }
static double tol_grad(DLDataType dt) { return dt.bits == 32 ? 1e-4 : 1e-2; }

static uint64_t rng_u64(void) { /* the xorshift64* of test_util.h, all 64 bits */
  uint64_t x = test_rng_state;
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  test_rng_state = x;
  return x * 2685821657736338717ull;
}
static int64_t rng_below(int64_t n) { return (int64_t)(rng_u64() % (uint64_t)n); }

/* v rounded to dtype dt (RNE), as a float. */
static float round_to(DLDataType dt, float v) {
  if (dt.bits == 32) return v;
  return dt.code == kDLBfloat ? kiln_bf16_to_f32(kiln_f32_to_bf16(v)) : kiln_f16_to_f32(kiln_f32_to_f16(v));
}
static uint32_t poison_bits(DLDataType dt) { return dt.bits == 32 ? 0x7fc00000u : dt.code == kDLBfloat ? 0x7fc0u : 0x7e00u; }
static uint32_t elem_bits(const void *p, DLDataType dt, int64_t i) {
  return dt.bits == 32 ? ((const uint32_t *)p)[i] : ((const uint16_t *)p)[i];
}

/* ---------------------------------------------------------------------------------------- */
/* Layouts: where a [batch, rows, cols] matrix lives in its buffer (all in elements)          */
/* ---------------------------------------------------------------------------------------- */
#define TAIL 5 /* buffer elements past the view, which must stay untouched */

typedef struct layout {
  int ndim; /* 2 or 3 */
  int64_t batch, rows, cols;
  int col;              /* column-major */
  int64_t ld, bs, off;  /* leading dimension, batch stride, offset of element (0, 0, 0) */
  int64_t n;            /* buffer elements */
} layout;

/* ld <= 0: the natural one (rows or cols); bs <= 0: compact batches. */
static layout mk(int ndim, int64_t batch, int64_t rows, int64_t cols, int col, int64_t ld, int64_t bs, int64_t off) {
  layout L;
  memset(&L, 0, sizeof L);
  L.ndim = ndim, L.batch = batch, L.rows = rows, L.cols = cols, L.col = col, L.off = off;
  const int64_t inner = col ? rows : cols, outer = col ? cols : rows;
  L.ld = ld > 0 ? ld : inner;
  L.bs = bs > 0 ? bs : outer * L.ld;
  L.n = off + (batch - 1) * L.bs + (outer - 1) * L.ld + inner + TAIL;
  return L;
}
/* A leading dimension that is a multiple of 8 elements (16 bytes in f16/bf16) and leaves at
 * least one padding element per row: what CP_ASYNC needs, as a slice of a wider buffer. */
static int64_t pad8(int64_t inner) { return (inner + 8) / 8 * 8; }
/* The natural layout (off = odd, so the data pointer is not 16-byte aligned either) or the
 * padded, aligned one (off = 8 elements = 16 bytes). */
static layout mk_in(int ndim, int64_t batch, int64_t rows, int64_t cols, int col, int padded) {
  return padded ? mk(ndim, batch, rows, cols, col, pad8(col ? rows : cols), 0, 8)
                : mk(ndim, batch, rows, cols, col, 0, 0, 1);
}
static int64_t lidx(const layout *L, int64_t b, int64_t i, int64_t j) {
  return L->off + (L->batch > 1 ? b : 0) * L->bs + (L->col ? i + j * L->ld : i * L->ld + j);
}

/* ---------------------------------------------------------------------------------------- */
/* Device buffers with a host mirror and a strided view                                     */
/* ---------------------------------------------------------------------------------------- */
typedef struct dbuf { /* never copied: t.shape / t.strides point into it */
  layout L;
  DLDataType dt;
  void *host;
  DLManagedTensorVersioned *dev;
  DLTensor t;
  int64_t shape[3], strides[3];
} dbuf;

static void dbuf_init(dbuf *d, layout L, DLDataType dt) {
  memset(d, 0, sizeof *d);
  d->L = L;
  d->dt = dt;
  d->host = malloc((size_t)L.n * dt_size(dt));
  assert_non_null(d->host);
  test_poison(d->host, dt, L.n);
  int64_t n = L.n;
  assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &n, dt, &d->dev));
  const int r = L.ndim - 2;
  if (r) d->shape[0] = L.batch, d->strides[0] = L.bs;
  d->shape[r] = L.rows, d->shape[r + 1] = L.cols;
  d->strides[r] = L.col ? 1 : L.ld;
  d->strides[r + 1] = L.col ? L.ld : 1;
  d->t.data = d->dev->dl_tensor.data;
  d->t.device = (DLDevice){kDLCUDA, 0};
  d->t.ndim = L.ndim;
  d->t.dtype = dt;
  d->t.shape = d->shape;
  d->t.strides = d->strides;
  d->t.byte_offset = (uint64_t)L.off * dt_size(dt);
}
static void dbuf_free(dbuf *d) {
  kiln_tensor_free(d->dev);
  free(d->host);
  memset(d, 0, sizeof *d);
}
/* Writes logical values [L.batch][rows][cols] (exact in dt) into the view's elements. */
static void dbuf_put(dbuf *d, const float *v) {
  const layout *L = &d->L;
  for (int64_t b = 0; b < L->batch; b++)
    for (int64_t i = 0; i < L->rows; i++)
      for (int64_t j = 0; j < L->cols; j++) {
        float x = v[(b * L->rows + i) * L->cols + j];
        int64_t k = lidx(L, b, i, j);
        if (d->dt.bits == 32) ((float *)d->host)[k] = x;
        else ((uint16_t *)d->host)[k] = d->dt.code == kDLBfloat ? kiln_f32_to_bf16(x) : kiln_f32_to_f16(x);
      }
}
static void dbuf_upload(dbuf *d, CUstream s, int sync) {
  int64_t n = d->L.n;
  test_tensor h = test_host_tensor(d->host, d->dt, 1, &n);
  assert_kiln_ok(kiln_tensor_copy(g_ctx, test_dl(&h), &d->dev->dl_tensor, s));
  if (sync) assert_kiln_ok(kiln_stream_synchronize(g_ctx, s));
}
static void dbuf_download(dbuf *d, CUstream s) {
  int64_t n = d->L.n;
  test_tensor h = test_host_tensor(d->host, d->dt, 1, &n);
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, s));
  assert_kiln_ok(kiln_tensor_copy(g_ctx, &d->dev->dl_tensor, test_dl(&h), s));
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, s));
}
/* An input: logical values in, uploaded. */
static void dbuf_input(dbuf *d, layout L, DLDataType dt, const float *v) {
  dbuf_init(d, L, dt);
  dbuf_put(d, v);
  dbuf_upload(d, g_stream, 1);
}
static double dbuf_get(const dbuf *d, int64_t b, int64_t i, int64_t j) {
  return test_load(d->host, d->dt, lidx(&d->L, b, i, j));
}
/* Elements outside the view that are no longer the poison pattern. */
static int64_t dbuf_outside_changed(const dbuf *d) {
  const layout *L = &d->L;
  unsigned char *in = calloc((size_t)L->n, 1);
  assert_non_null(in);
  for (int64_t b = 0; b < L->batch; b++)
    for (int64_t i = 0; i < L->rows; i++)
      for (int64_t j = 0; j < L->cols; j++) in[lidx(L, b, i, j)] = 1;
  int64_t bad = 0;
  const uint32_t p = poison_bits(d->dt);
  for (int64_t k = 0; k < L->n; k++) bad += !in[k] && elem_bits(d->host, d->dt, k) != p;
  free(in);
  return bad;
}
/* Elements of the view that are NaN (unwritten, or computed as NaN). */
static int64_t dbuf_nans(const dbuf *d) {
  const layout *L = &d->L;
  int64_t bad = 0;
  for (int64_t b = 0; b < L->batch; b++)
    for (int64_t i = 0; i < L->rows; i++)
      for (int64_t j = 0; j < L->cols; j++) bad += isnan(dbuf_get(d, b, i, j));
  return bad;
}

/* ---------------------------------------------------------------------------------------- */
/* The problem and its float64 reference                                                     */
/* ---------------------------------------------------------------------------------------- */
typedef struct problem {
  int64_t batch, ba, bb, M, N, K; /* ba, bb: batches of A and B (1 = broadcast) */
  float *a, *b;                   /* logical [ba][M][K] and [bb][K][N], exact in the input dtype */
  float alpha;
} problem;

static void problem_init(problem *p, int64_t batch, int64_t ba, int64_t bb, int64_t M, int64_t N, int64_t K,
                         DLDataType in_dt) {
  memset(p, 0, sizeof *p);
  p->batch = batch, p->ba = ba, p->bb = bb, p->M = M, p->N = N, p->K = K, p->alpha = 1.0f;
  p->a = malloc(sizeof(float) * (size_t)(ba * M * K));
  p->b = malloc(sizeof(float) * (size_t)(bb * K * N));
  assert_non_null(p->a);
  assert_non_null(p->b);
  for (int64_t i = 0; i < ba * M * K; i++) p->a[i] = round_to(in_dt, test_uniform());
  for (int64_t i = 0; i < bb * K * N; i++) p->b[i] = round_to(in_dt, test_uniform());
}
static void problem_free(problem *p) {
  free(p->a);
  free(p->b);
}
static const float *pa(const problem *p, int64_t b) { return p->a + (p->ba > 1 ? b : 0) * p->M * p->K; }
static const float *pb(const problem *p, int64_t b) { return p->b + (p->bb > 1 ? b : 0) * p->K * p->N; }

/* Row i of batch b of alpha·A·B. */
static void ref_row(const problem *p, int64_t b, int64_t i, double *out) {
  const float *A = pa(p, b) + i * p->K, *B = pb(p, b);
  for (int64_t j = 0; j < p->N; j++) out[j] = 0;
  for (int64_t k = 0; k < p->K; k++) {
    const double a = A[k];
    const float *row = B + k * p->N;
    for (int64_t j = 0; j < p->N; j++) out[j] += a * row[j];
  }
  for (int64_t j = 0; j < p->N; j++) out[j] *= p->alpha;
}
static double ref_point(const problem *p, int64_t b, int64_t i, int64_t j) {
  const float *A = pa(p, b) + i * p->K, *B = pb(p, b) + j;
  double s = 0;
  for (int64_t k = 0; k < p->K; k++) s += (double)A[k] * B[k * p->N];
  return s * p->alpha;
}

/* The output elements checked, with their reference values. */
typedef struct points {
  int64_t n, cap;
  int64_t *b, *i, *j;
  double *ref;
  int sampled;
} points;

static void points_reserve(points *s, int64_t n) {
  s->cap = n;
  s->b = malloc(sizeof(int64_t) * (size_t)n);
  s->i = malloc(sizeof(int64_t) * (size_t)n);
  s->j = malloc(sizeof(int64_t) * (size_t)n);
  s->ref = malloc(sizeof(double) * (size_t)n);
  assert_true(s->b && s->i && s->j && s->ref);
}
static void points_free(points *s) {
  free(s->b);
  free(s->i);
  free(s->j);
  free(s->ref);
  memset(s, 0, sizeof *s);
}
static void points_add(points *s, int64_t b, int64_t i, int64_t j, double ref) {
  assert_true(s->n < s->cap);
  s->b[s->n] = b, s->i[s->n] = i, s->j[s->n] = j, s->ref[s->n] = ref;
  s->n++;
}
/* All of [rows, cols] per batch from a compact array ref[batch][rows][cols]. */
static void points_from_array(points *s, const double *ref, int64_t batch, int64_t rows, int64_t cols) {
  memset(s, 0, sizeof *s);
  points_reserve(s, batch * rows * cols);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) points_add(s, b, i, j, ref[(b * rows + i) * cols + j]);
}
static void ref_full(const problem *p, points *s) {
  const int64_t R = p->batch * p->M;
  double *all = malloc(sizeof(double) * (size_t)(R * p->N));
  assert_non_null(all);
  OMP_FOR
  for (int64_t r = 0; r < R; r++) ref_row(p, r / p->M, r % p->M, all + r * p->N);
  points_from_array(s, all, p->batch, p->M, p->N);
  free(all);
}
/* Whole rows 0 and M-1 and columns 0 and N-1 of the first and last batch, plus nrand random
 * elements. */
static void ref_sampled(const problem *p, points *s, int64_t nrand) {
  memset(s, 0, sizeof *s);
  s->sampled = 1;
  points_reserve(s, 4 * (p->M + p->N) + nrand);
  int64_t bs[2] = {0, p->batch - 1}, nb = p->batch > 1 ? 2 : 1;
  double *row = malloc(sizeof(double) * (size_t)p->N), *colv = malloc(sizeof(double) * (size_t)p->K);
  assert_non_null(row);
  assert_non_null(colv);
  for (int64_t q = 0; q < nb; q++) {
    const int64_t b = bs[q];
    int64_t rows[2] = {0, p->M - 1}, cols[2] = {0, p->N - 1};
    for (int r = 0; r < (p->M > 1 ? 2 : 1); r++) {
      ref_row(p, b, rows[r], row);
      for (int64_t j = 0; j < p->N; j++) points_add(s, b, rows[r], j, row[j]);
    }
    for (int c = 0; c < (p->N > 1 ? 2 : 1); c++) {
      const float *B = pb(p, b) + cols[c];
      for (int64_t k = 0; k < p->K; k++) colv[k] = B[k * p->N];
      const int64_t first = s->n;
      for (int64_t i = 0; i < p->M; i++) points_add(s, b, i, cols[c], 0);
      OMP_FOR
      for (int64_t i = 0; i < p->M; i++) {
        const float *A = pa(p, b) + i * p->K;
        double acc = 0;
        for (int64_t k = 0; k < p->K; k++) acc += A[k] * colv[k];
        s->ref[first + i] = acc * p->alpha;
      }
    }
  }
  const int64_t first = s->n;
  for (int64_t t = 0; t < nrand; t++) points_add(s, rng_below(p->batch), rng_below(p->M), rng_below(p->N), 0);
  OMP_FOR
  for (int64_t t = first; t < s->n; t++) s->ref[t] = ref_point(p, s->b[t], s->i[t], s->j[t]);
  free(row);
  free(colv);
}
/* Full when small enough, sampled above 512^3 multiply-adds. */
static void ref_auto(const problem *p, points *s) {
  if ((double)p->batch * p->M * p->N * p->K > 512.0 * 512 * 512) ref_sampled(p, s, 2000);
  else ref_full(p, s);
}

/* ---------------------------------------------------------------------------------------- */
/* Checking an output                                                                        */
/* ---------------------------------------------------------------------------------------- */
static double g_worst[3]; /* worst passing error per output dtype in the current test */
static int dt_slot(DLDataType dt) { return dt.bits == 32 ? 0 : dt.code == kDLBfloat ? 2 : 1; }
static void worst_reset(void) { g_worst[0] = g_worst[1] = g_worst[2] = -1; }
static void worst_print(const char *test) {
  char w[3][16];
  for (int i = 0; i < 3; i++)
    if (g_worst[i] < 0) snprintf(w[i], sizeof w[i], "n/a");
    else snprintf(w[i], sizeof w[i], "%.2e", g_worst[i]);
  print_message("  %s: worst relative error of passing checks: f32 out %s, f16 out %s, bf16 out %s\n", test, w[0],
                w[1], w[2]);
}

/* Compares the downloaded output with the reference; prints what is wrong. 1 = good. */
static int check_output(const char *what, const dbuf *c, const points *s, double tol) {
  double *got = malloc(sizeof(double) * (size_t)(s->n ? s->n : 1));
  assert_non_null(got);
  int64_t nan_pts = 0;
  double den = 0;
  for (int64_t t = 0; t < s->n; t++) {
    got[t] = dbuf_get(c, s->b[t], s->i[t], s->j[t]);
    nan_pts += isnan(got[t]);
    den += s->ref[t] * s->ref[t];
  }
  const double err = test_rel_error(got, s->ref, s->n);
  const int64_t nans = s->sampled ? dbuf_nans(c) : nan_pts; /* sampled: still every element written */
  const int64_t outside = dbuf_outside_changed(c);
  const int ok = err <= tol && nans == 0 && outside == 0;
  if (ok) {
    if (err > g_worst[dt_slot(c->dt)]) g_worst[dt_slot(c->dt)] = err;
  } else {
    print_message("FAILED %s: rel error %.3e (tolerance %.1e) over %" PRId64 " %s elements; %" PRId64
                  " NaN (unwritten?) elements; %" PRId64 " elements outside the view changed\n",
                  what, err, tol, s->n, s->sampled ? "sampled" : "(all)", nans, outside);
    const double rms = s->n ? sqrt(den / (double)s->n) : 0;
    int shown = 0;
    for (int64_t t = 0; t < s->n && shown < 6; t++)
      if (isnan(got[t]) || fabs(got[t] - s->ref[t]) > 4 * tol * (rms > 0 ? rms : 1)) {
        print_message("    C[%" PRId64 "][%" PRId64 "][%" PRId64 "] = %.6g, reference %.6g\n", s->b[t], s->i[t],
                      s->j[t], got[t], s->ref[t]);
        shown++;
      }
  }
  free(got);
  return ok;
}

/* Runs C = alpha·A·B into a fresh NaN-filled C of layout LC and checks it. With `refused`
 * non-NULL an UNSUPPORTED status is reported there instead of being a failure. 1 = good. */
static int run_product(const char *what, const dbuf *A, const dbuf *B, layout LC, DLDataType out_dt, int algo,
                       float alpha, CUstream s, const points *ref, int *refused) {
  dbuf C;
  dbuf_init(&C, LC, out_dt);
  dbuf_upload(&C, s, 1);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = (kiln_matmul_algo)algo;
  o.alpha = alpha;
  o.tile_n = algo == WG ? g_tile_n : 0;
  if (algo == WG && g_stream_k) o.stream_k = g_stream_k, o.workspace = g_ws, o.workspace_bytes = g_ws_bytes;
  kiln_status st = kiln_matmul(g_ctx, &A->t, &B->t, &C.t, &o, s);
  int ok = 0;
  if (st == KILN_ERROR_UNSUPPORTED && refused) {
    *refused = 1;
    ok = 1;
  } else if (st != KILN_OK) {
    print_message("FAILED %s: kiln_matmul -> %s: %s\n", what, kiln_status_string(st), kiln_last_error());
  } else {
    dbuf_download(&C, s);
    ok = check_output(what, &C, ref, tol_out(out_dt));
  }
  dbuf_free(&C);
  return ok;
}

static const DLDataType *const IN_DTS[2] = {&TEST_F16, &TEST_BF16};
static const DLDataType *const OUT_DTS[3] = {&TEST_F32, &TEST_F16, &TEST_BF16};
static const char *lay_str(int col) { return col ? "col" : "row"; }

/* The algorithm configurations: AUTO and MMA_SYNC on natural (unaligned) leading dimensions
 * and on padded aligned ones, CP_ASYNC on padded ones only. */
static const struct {
  int algo, padded;
} CFGS[6] = {{AUTO, 0}, {AUTO, 1}, {MMA, 0}, {MMA, 1}, {CPA, 1}, {WG, 1}};

/* ---------------------------------------------------------------------------------------- */
/* Tests: forward                                                                           */
/* ---------------------------------------------------------------------------------------- */
/* algo x input dtype x output dtype x A, B, C layouts at a ragged shape. */
static void layouts_algos_dtypes(void **state) {
  (void)state;
  worst_reset();
  test_seed(101);
  const int64_t M = 130, N = 261, K = 77;
  int failures = 0, runs = 0;
  char what[256];
  for (int di = 0; di < 2; di++) {
    const DLDataType in = *IN_DTS[di];
    problem p;
    problem_init(&p, 1, 1, 1, M, N, K, in);
    points ref;
    ref_full(&p, &ref);
    for (int c = 0; c < 6; c++)
      for (int la = 0; la < 2; la++)
        for (int lb = 0; lb < 2; lb++) {
          if (!algo_runs(CFGS[c].algo)) continue;
          dbuf A, B;
          dbuf_input(&A, mk_in(2, 1, M, K, la, CFGS[c].padded), in, p.a);
          dbuf_input(&B, mk_in(2, 1, K, N, lb, CFGS[c].padded), in, p.b);
          for (int oi = 0; oi < 3; oi++)
            for (int lc = 0; lc < 2; lc++) {
              /* C: padding after every row/column; offset 0 or 5 elements */
              layout LC = mk(2, 1, M, N, lc, (lc ? M : N) + 3, 0, (la ^ lb) ? 5 : 0);
              snprintf(what, sizeof what, "%s %s-ld %s->%s A %s B %s C %s [%" PRId64 "x%" PRId64 "x%" PRId64 "]",
                       algo_str(CFGS[c].algo), CFGS[c].padded ? "padded" : "natural", dt_str(in),
                       dt_str(*OUT_DTS[oi]), lay_str(la), lay_str(lb), lay_str(lc), M, N, K);
              failures += !run_product(what, &A, &B, LC, *OUT_DTS[oi], CFGS[c].algo, 1.0f, g_stream, &ref, NULL);
              runs++;
            }
          dbuf_free(&A);
          dbuf_free(&B);
        }
    points_free(&ref);
    problem_free(&p);
  }
  worst_print("layouts_algos_dtypes");
  if (failures) fail_msg("%d of %d products failed (listed above)", failures, runs);
}

/* CP_ASYNC needs 16-byte aligned rows: it refuses an unaligned leading dimension, data pointer
 * or batch stride (and writes nothing), while AUTO and MMA_SYNC compute the same product. */
static void cp_async_refuses_unaligned_operands(void **state) {
  (void)state;
  worst_reset();
  test_seed(202);
  const int64_t M = 130, N = 261, K = 77;
  int failures = 0;
  char what[256];
  struct {
    const char *name;
    int batch;
    layout la, lb;
  } cases[4];
  cases[0].name = "A row-major with ld 77", cases[0].batch = 1;
  cases[0].la = mk(2, 1, M, K, 0, 77, 0, 0), cases[0].lb = mk(2, 1, K, N, 0, pad8(N), 0, 0);
  cases[1].name = "B column-major with ld 77", cases[1].batch = 1;
  cases[1].la = mk(2, 1, M, K, 0, pad8(K), 0, 0), cases[1].lb = mk(2, 1, K, N, 1, 77, 0, 0);
  cases[2].name = "A data pointer 2 bytes past 16-byte alignment", cases[2].batch = 1;
  cases[2].la = mk(2, 1, M, K, 0, pad8(K), 0, 1), cases[2].lb = mk(2, 1, K, N, 0, pad8(N), 0, 0);
  cases[3].name = "A batch stride not a multiple of 8", cases[3].batch = 2;
  cases[3].la = mk(3, 2, M, K, 0, pad8(K), M * pad8(K) + 4, 0), cases[3].lb = mk(2, 1, K, N, 0, pad8(N), 0, 0);
  for (int c = 0; c < 4; c++) {
    const DLDataType in = TEST_F16;
    problem p;
    problem_init(&p, cases[c].batch, cases[c].batch, 1, M, N, K, in);
    points ref;
    ref_full(&p, &ref);
    dbuf A, B, C;
    dbuf_input(&A, cases[c].la, in, p.a);
    dbuf_input(&B, cases[c].lb, in, p.b);
    layout LC = mk(cases[c].batch > 1 ? 3 : 2, cases[c].batch, M, N, 0, N + 1, 0, 0);
    dbuf_init(&C, LC, TEST_F32);
    dbuf_upload(&C, g_stream, 1);
    kiln_matmul_opts o = kiln_matmul_opts_default();
    o.algo = KILN_MATMUL_CP_ASYNC;
    kiln_clear_error();
    kiln_status st = kiln_matmul(g_ctx, &A.t, &B.t, &C.t, &o, g_stream);
    if (st != KILN_ERROR_UNSUPPORTED || !strstr(kiln_last_error(), "CP_ASYNC") || !strstr(kiln_last_error(), "16-byte")) {
      print_message("FAILED CP_ASYNC with %s: %s (%s); expected KILN_ERROR_UNSUPPORTED naming CP_ASYNC and "
                    "16-byte\n", cases[c].name, kiln_status_string(st), kiln_last_error());
      failures++;
    }
    dbuf_download(&C, g_stream);
    int64_t touched = 0;
    for (int64_t k = 0; k < LC.n; k++) touched += elem_bits(C.host, C.dt, k) != poison_bits(C.dt);
    if (touched) {
      print_message("FAILED CP_ASYNC with %s: the refused call wrote %" PRId64 " elements of C\n", cases[c].name,
                    touched);
      failures++;
    }
    /* WGMMA (TMA) has the same alignment rule; off sm_90 it is refused for the device instead. */
    o.algo = KILN_MATMUL_WGMMA;
    st = kiln_matmul(g_ctx, &A.t, &B.t, &C.t, &o, g_stream);
    if (st != KILN_ERROR_UNSUPPORTED || !strstr(kiln_last_error(), "WGMMA") ||
        (g_has_wgmma && !strstr(kiln_last_error(), "16-byte"))) {
      print_message("FAILED WGMMA with %s: %s (%s); expected KILN_ERROR_UNSUPPORTED naming WGMMA\n", cases[c].name,
                    kiln_status_string(st), kiln_last_error());
      failures++;
    }
    dbuf_free(&C);
    for (int algo = AUTO; algo <= MMA; algo++) {
      snprintf(what, sizeof what, "%s with %s", algo_str(algo), cases[c].name);
      failures += !run_product(what, &A, &B, LC, TEST_F32, algo, 1.0f, g_stream, &ref, NULL);
    }
    dbuf_free(&A);
    dbuf_free(&B);
    points_free(&ref);
    problem_free(&p);
  }
  worst_print("cp_async_refuses_unaligned_operands");
  if (failures) fail_msg("%d checks failed (listed above)", failures);
}

/* Operands with a dimension of 1 whose leading dimension IS a multiple of 8 elements: their rows
 * are 16-byte aligned, so CP_ASYNC must accept them (kiln.h: "16-byte aligned rows"). */
static void cp_async_accepts_aligned_operands_with_unit_dims(void **state) {
  (void)state;
  worst_reset();
  test_seed(303);
  int failures = 0;
  char what[256];
  const struct {
    const char *name;
    int64_t M, N, K;
    int a_col, b_col;
  } cases[] = {
      {"M = 1, A [1, 77] row-major, ld 80", 1, 261, 77, 0, 0},
      {"N = 1, B [77, 1] column-major, ld 80", 130, 1, 77, 0, 1},
      {"K = 1, B [1, 261] row-major, ld 264", 130, 261, 1, 0, 0},
      {"K = 1, A [130, 1] column-major, ld 136", 130, 261, 1, 1, 0},
      {"M = N = 1", 1, 1, 77, 0, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    problem p;
    problem_init(&p, 1, 1, 1, cases[c].M, cases[c].N, cases[c].K, TEST_BF16);
    points ref;
    ref_full(&p, &ref);
    dbuf A, B;
    dbuf_input(&A, mk_in(2, 1, p.M, p.K, cases[c].a_col, 1), TEST_BF16, p.a);
    dbuf_input(&B, mk_in(2, 1, p.K, p.N, cases[c].b_col, 1), TEST_BF16, p.b);
    snprintf(what, sizeof what, "CP_ASYNC with %s", cases[c].name);
    failures += !run_product(what, &A, &B, mk(2, 1, p.M, p.N, 0, p.N + 2, 0, 0), TEST_F32, CPA, 1.0f, g_stream,
                             &ref, NULL);
    dbuf_free(&A);
    dbuf_free(&B);
    points_free(&ref);
    problem_free(&p);
  }
  if (failures) fail_msg("%d of %zu cases failed (listed above)", failures, sizeof cases / sizeof cases[0]);
}

/* Every M, N, K in {1, 7, 17, 33, 127, 255} (216 shapes) on the three kernel families: AUTO on
 * natural leading dimensions (the MMA_SYNC scalar-load kernels), MMA_SYNC on padded ones (its
 * vector-load kernels) and CP_ASYNC on padded ones. Layouts and input dtypes vary by shape. */
static void ragged_shapes(void **state) {
  (void)state;
  worst_reset();
  test_seed(404);
  static const int64_t sizes[6] = {1, 7, 17, 33, 127, 255};
  const struct {
    int algo, padded;
  } cfg[4] = {{AUTO, 0}, {MMA, 1}, {CPA, 1}, {WG, 1}};
  int failures = 0, runs = 0, refused_unit = 0;
  char what[256];
  for (int mi = 0; mi < 6; mi++)
    for (int ni = 0; ni < 6; ni++)
      for (int ki = 0; ki < 6; ki++) {
        const int64_t M = sizes[mi], N = sizes[ni], K = sizes[ki];
        const uint32_t h = (uint32_t)((mi * 36 + ni * 6 + ki) * 2654435761u) >> 20;
        const DLDataType in = (h & 1) ? TEST_BF16 : TEST_F16;
        const int la = (h >> 1) & 1, lb = (h >> 2) & 1, lc = (h >> 3) & 1;
        problem p;
        problem_init(&p, 1, 1, 1, M, N, K, in);
        points ref;
        ref_full(&p, &ref);
        for (int c = 0; c < 4; c++) {
          if (!algo_runs(cfg[c].algo)) continue;
          dbuf A, B;
          dbuf_input(&A, mk_in(2, 1, M, K, la, cfg[c].padded), in, p.a);
          dbuf_input(&B, mk_in(2, 1, K, N, lb, cfg[c].padded), in, p.b);
          layout LC = mk(2, 1, M, N, lc, (lc ? M : N) + 1, 0, (h >> 4) & 3);
          snprintf(what, sizeof what, "%s %s-ld %s->f32 A %s B %s C %s [M=%" PRId64 " N=%" PRId64 " K=%" PRId64 "]",
                   algo_str(cfg[c].algo), cfg[c].padded ? "padded" : "natural", dt_str(in), lay_str(la),
                   lay_str(lb), lay_str(lc), M, N, K);
          int refused = 0;
          /* CP_ASYNC with a unit dimension: see cp_async_accepts_aligned_operands_with_unit_dims */
          const int unit = cfg[c].algo >= CPA && (M == 1 || N == 1 || K == 1);
          failures += !run_product(what, &A, &B, LC, TEST_F32, cfg[c].algo, 1.0f, g_stream, &ref,
                                   unit ? &refused : NULL);
          refused_unit += refused;
          runs++;
          dbuf_free(&A);
          dbuf_free(&B);
        }
        points_free(&ref);
        problem_free(&p);
      }
  worst_print("ragged_shapes");
  if (refused_unit)
    print_message("  ragged_shapes: CP_ASYNC refused %d shapes with a unit dimension (not counted here; see "
                  "cp_async_accepts_aligned_operands_with_unit_dims)\n", refused_unit);
  if (failures) fail_msg("%d of %d products failed (listed above)", failures, runs);
}

/* 4096^3, f16 -> f32 and bf16 -> f32, each algo (sampled check). */
static void large_square(void **state) {
  (void)state;
  worst_reset();
  test_seed(505);
  /* Under compute-sanitizer (scripts/gpu-session.sh sets KILN_TEST_SANITIZER) kernels run
   * orders of magnitude slower: the large shapes shrink but keep several tiles per dimension. */
  const int64_t S = getenv("KILN_TEST_SANITIZER") ? 1024 : 4096;
  int failures = 0;
  char what[256];
  for (int di = 0; di < 2; di++) {
    const DLDataType in = *IN_DTS[di];
    problem p;
    problem_init(&p, 1, 1, 1, S, S, S, in);
    points ref;
    ref_sampled(&p, &ref, 2000);
    dbuf A, B;
    dbuf_input(&A, mk(2, 1, S, S, 0, 0, 0, 0), in, p.a);
    dbuf_input(&B, mk(2, 1, S, S, di, 0, 0, 0), in, p.b); /* bf16: B column-major */
    for (int algo = AUTO; algo <= WG; algo++) {
      if (!algo_runs(algo)) continue;
      snprintf(what, sizeof what, "%s %s->f32 %" PRId64 "^3 (B %s)", algo_str(algo), dt_str(in), S, lay_str(di));
      failures += !run_product(what, &A, &B, mk(2, 1, S, S, 0, 0, 0, 0), TEST_F32, algo, 1.0f, g_stream, &ref, NULL);
    }
    dbuf_free(&A);
    dbuf_free(&B);
    points_free(&ref);
    problem_free(&p);
  }
  worst_print("large_square");
  if (failures) fail_msg("%d products failed (listed above)", failures);
}

/* LLM shapes with B = W.T, W a row-major Linear weight [N, K] (so B is column-major, ld K). */
static void llm_shapes_with_transposed_weight(void **state) {
  (void)state;
  worst_reset();
  test_seed(606);
  const struct {
    int64_t M, K, N;
    DLDataType in, out;
  } cases[] = {{16, 4096, 12288, TEST_BF16, TEST_BF16}, {2048, 4096, 4096, TEST_F16, TEST_F16}};
  int failures = 0;
  char what[256];
  for (int c = 0; c < 2; c++) {
    const int64_t M = getenv("KILN_TEST_SANITIZER") && cases[c].M > 256 ? 256 : cases[c].M, K = cases[c].K,
                  N = cases[c].N;
    problem p;
    problem_init(&p, 1, 1, 1, M, N, K, cases[c].in);
    points ref;
    ref_auto(&p, &ref);
    dbuf X, W;
    dbuf_input(&X, mk(2, 1, M, K, 0, 0, 0, 0), cases[c].in, p.a);
    dbuf_input(&W, mk(2, 1, K, N, 1, K, 0, 0), cases[c].in, p.b); /* W [N, K] row-major seen as [K, N] */
    for (int algo = AUTO; algo <= WG; algo++) {
      if (!algo_runs(algo)) continue;
      snprintf(what, sizeof what, "%s %s->%s x[%" PRId64 ", %" PRId64 "] @ W.T (W [%" PRId64 ", %" PRId64 "])",
               algo_str(algo), dt_str(cases[c].in), dt_str(cases[c].out), M, K, N, K);
      failures += !run_product(what, &X, &W, mk(2, 1, M, N, 0, 0, 0, 0), cases[c].out, algo, 1.0f, g_stream, &ref,
                               NULL);
    }
    dbuf_free(&X);
    dbuf_free(&W);
    points_free(&ref);
    problem_free(&p);
  }
  worst_print("llm_shapes_with_transposed_weight");
  if (failures) fail_msg("%d products failed (listed above)", failures);
}

/* Batched products: plain, broadcast B, broadcast A (rank 2 and rank 3 of batch 1), batch
 * strides larger than a matrix (gaps in C that must stay untouched), column-major batches,
 * and a batch of 70000 tiny matrices (more than the 65535 grid.z limit). Fully checked. */
static void batched(void **state) {
  (void)state;
  worst_reset();
  test_seed(707);
  enum { PLAIN, BCAST_B2, BCAST_B3, BCAST_A2, BCAST_A3, WIDE_STRIDES, COLMAJOR, HUGE_BATCH, NCASES };
  static const char *names[NCASES] = {"[8,100,70]x[8,70,90]", "broadcast B (rank 2)", "broadcast B ([1,70,90])",
                                      "broadcast A (rank 2)", "broadcast A ([1,100,70])", "batch strides > matrix",
                                      "column-major batches", "batch 70000 of 3x5x4"};
  const struct {
    int algo, padded;
  } cfg[5] = {{AUTO, 0}, {MMA, 0}, {MMA, 1}, {CPA, 1}, {WG, 1}};
  int failures = 0, runs = 0;
  char what[256];
  for (int c = 0; c < NCASES; c++) {
    int64_t batch = 8, M = 100, K = 70, N = 90;
    if (c == HUGE_BATCH) batch = 70000, M = 3, K = 5, N = 4;
    const int64_t ba = (c == BCAST_A2 || c == BCAST_A3) ? 1 : batch, bb = (c == BCAST_B2 || c == BCAST_B3) ? 1 : batch;
    const int nda = c == BCAST_A2 ? 2 : 3, ndb = c == BCAST_B2 ? 2 : 3;
    const DLDataType in = c % 2 ? TEST_BF16 : TEST_F16, out = *OUT_DTS[c % 3];
    const int col = c == COLMAJOR;
    problem p;
    problem_init(&p, batch, ba, bb, M, N, K, in);
    points ref;
    ref_full(&p, &ref);
    for (int f = 0; f < 5; f++) {
      if (!algo_runs(cfg[f].algo)) continue;
      const int padded = cfg[f].padded;
      layout LA = mk_in(nda, ba, M, K, col, padded), LB = mk_in(ndb, bb, K, N, col, padded);
      layout LC = mk(3, batch, M, N, col, 0, 0, 0);
      if (c == WIDE_STRIDES) {
        LA = mk(3, ba, M, K, 0, padded ? pad8(K) : K, M * (padded ? pad8(K) : K) + (padded ? 16 : 13), padded ? 8 : 1);
        LB = mk(3, bb, K, N, 1, padded ? pad8(K) : K, N * (padded ? pad8(K) : K) + (padded ? 24 : 7), padded ? 8 : 3);
        LC = mk(3, batch, M, N, 0, N + 2, M * (N + 2) + 77, 1);
      }
      dbuf A, B;
      dbuf_input(&A, LA, in, p.a);
      dbuf_input(&B, LB, in, p.b);
      snprintf(what, sizeof what, "%s %s-ld %s->%s %s", algo_str(cfg[f].algo), padded ? "padded" : "natural",
               dt_str(in), dt_str(out), names[c]);
      failures += !run_product(what, &A, &B, LC, out, cfg[f].algo, 1.0f, g_stream, &ref, NULL);
      runs++;
      dbuf_free(&A);
      dbuf_free(&B);
    }
    points_free(&ref);
    problem_free(&p);
  }
  worst_print("batched");
  if (failures) fail_msg("%d of %d products failed (listed above)", failures, runs);
}

/* WGMMA at each tile width (the host picks one per shape; opts.tile_n forces it): every A/B
 * layout, both input dtypes, f32 and bf16 output, row- and column-major C, at a ragged shape
 * smaller than one tile, one of 144 tiles of 128 x 64 (more than an H200's 132 SMs, so some
 * blocks of the persistent grid take two tiles) with edges in M, N and K, and a batch with a
 * broadcast B (tiles of several batches in one grid). Fully checked. */
static void wgmma_tile_widths(void **state) {
  (void)state;
  if (!g_has_wgmma) skip();
  worst_reset();
  test_seed(1001);
  static const int widths[3] = {64, 128, 256};
  const struct {
    int64_t batch, bb, M, N, K;
  } shapes[3] = {{1, 1, 61, 45, 77}, {1, 1, 1100, 1000, 200}, {5, 1, 129, 257, 70}};
  int failures = 0, runs = 0;
  char what[256];
  for (int si = 0; si < 3; si++)
    for (int di = 0; di < 2; di++) {
      const DLDataType in = *IN_DTS[di];
      problem p;
      const int64_t batch = shapes[si].batch, M = shapes[si].M, N = shapes[si].N, K = shapes[si].K;
      problem_init(&p, batch, batch, shapes[si].bb, M, N, K, in);
      points ref;
      ref_full(&p, &ref);
      const int nd = batch > 1 ? 3 : 2;
      for (int la = 0; la < 2; la++)
        for (int lb = 0; lb < 2; lb++) {
          dbuf A, B;
          dbuf_input(&A, mk_in(nd, batch, M, K, la, 1), in, p.a);
          dbuf_input(&B, mk_in(nd == 3 && shapes[si].bb == 1 ? 2 : nd, shapes[si].bb, K, N, lb, 1), in, p.b);
          for (int wi = 0; wi < 3; wi++)
            for (int oi = 0; oi < 3; oi += 2) {
              const int lc = (la + lb + wi) & 1;
              layout LC = mk(nd, batch, M, N, lc, 0, 0, 0);
              snprintf(what, sizeof what, "WGMMA tile_n %d %s->%s A %s B %s C %s [%" PRId64 "x%" PRId64 "x%" PRId64
                       "] batch %" PRId64, widths[wi], dt_str(in), dt_str(*OUT_DTS[oi]), lay_str(la), lay_str(lb),
                       lay_str(lc), M, N, K, batch);
              g_tile_n = widths[wi];
              failures += !run_product(what, &A, &B, LC, *OUT_DTS[oi], WG, 1.0f, g_stream, &ref, NULL);
              g_tile_n = 0;
              runs++;
            }
          dbuf_free(&A);
          dbuf_free(&B);
        }
      points_free(&ref);
      problem_free(&p);
    }
  worst_print("wgmma_tile_widths");
  if (failures) fail_msg("%d of %d products failed (listed above)", failures, runs);
}

/* Stream-K (opts.stream_k 1, tiles 128 x 256): the walk's last, partial wave dealt out as runs of
 * K slices, with tiles split over up to ~15 blocks (9 tiles of 16 slices), blocks left without
 * slices (8 tiles of 8 slices after two full waves; 32 tiles of 2), batches, ragged edges, every
 * layout, f16 and bf16, f32 and bf16 C; then the same product twice, bit for bit, and the
 * workspace query's answers. */
static void wgmma_stream_k(void **state) {
  (void)state;
  if (!g_has_wgmma) skip();
  worst_reset();
  test_seed(1002);
  const struct {
    int tile_n;
    int64_t batch, M, N, K;
  } shapes[] = {{256, 1, 300, 700, 1000}, {256, 1, 1100, 1000, 200}, {256, 3, 517, 1300, 333},
                {256, 1, 2112, 4096, 512}, {256, 1, 1000, 1000, 100}};
  const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  DLManagedTensorVersioned *ws = NULL;
  const int64_t ws_len = 24 << 20; /* above what 132 SMs take at tile width 256 (17 MB) */
  assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &ws_len, (DLDataType){kDLUInt, 8, 1}, &ws));
  g_ws = ws->dl_tensor.data, g_ws_bytes = (size_t)ws_len;
  int failures = 0, runs = 0;
  char what[256];
  for (int si = 0; si < nshapes; si++) {
    const DLDataType in = *IN_DTS[si & 1];
    problem p;
    const int64_t batch = shapes[si].batch, M = shapes[si].M, N = shapes[si].N, K = shapes[si].K;
    problem_init(&p, batch, batch, 1, M, N, K, in);
    points ref;
    ref_auto(&p, &ref);
    const int nd = batch > 1 ? 3 : 2;
    for (int la = 0; la < 2; la++)
      for (int lb = 0; lb < 2; lb++) {
        if (M * N * K > 1000000000 && la + lb > 0) continue; /* the large shape: one layout */
        dbuf A, B;
        dbuf_input(&A, mk_in(nd, batch, M, K, la, 1), in, p.a);
        dbuf_input(&B, mk_in(2, 1, K, N, lb, 1), in, p.b);
        for (int oi = 0; oi < 3; oi += 2) {
          const int lc = (la + lb + oi / 2) & 1;
          layout LC = mk(nd, batch, M, N, lc, 0, 0, 0);
          snprintf(what, sizeof what, "WGMMA stream-K tile_n %d %s->%s A %s B %s C %s [%" PRId64 "x%" PRId64
                   "x%" PRId64 "] batch %" PRId64, shapes[si].tile_n, dt_str(in), dt_str(*OUT_DTS[oi]), lay_str(la),
                   lay_str(lb), lay_str(lc), M, N, K, batch);
          g_tile_n = shapes[si].tile_n, g_stream_k = 1;
          failures += !run_product(what, &A, &B, LC, *OUT_DTS[oi], WG, 1.0f, g_stream, &ref, NULL);
          g_tile_n = 0, g_stream_k = 0;
          runs++;
        }
        dbuf_free(&A);
        dbuf_free(&B);
      }
    points_free(&ref);
    problem_free(&p);
  }
  worst_print("wgmma_stream_k");

  /* bit for bit twice, the second launch over the first one's flags; and the query */
  problem p;
  problem_init(&p, 1, 1, 1, 1100, 1000, 200, TEST_F16);
  dbuf A, B, C1, C2;
  dbuf_input(&A, mk_in(2, 1, p.M, p.K, 0, 1), TEST_F16, p.a);
  dbuf_input(&B, mk_in(2, 1, p.K, p.N, 1, 1), TEST_F16, p.b);
  layout LC = mk(2, 1, p.M, p.N, 0, 0, 0, 0);
  dbuf_init(&C1, LC, TEST_F32);
  dbuf_init(&C2, LC, TEST_F32);
  dbuf_upload(&C1, g_stream, 1);
  dbuf_upload(&C2, g_stream, 1);
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = KILN_MATMUL_WGMMA, o.stream_k = 1, o.tile_n = 256;
  size_t need = 0;
  assert_kiln_ok(kiln_matmul_workspace_size(g_ctx, &A.t, &B.t, &C1.t, &o, &need));
  assert_true(need > 0 && need <= g_ws_bytes);
  o.workspace = g_ws, o.workspace_bytes = need;
  assert_kiln_ok(kiln_matmul(g_ctx, &A.t, &B.t, &C1.t, &o, g_stream));
  assert_kiln_ok(kiln_matmul(g_ctx, &A.t, &B.t, &C2.t, &o, g_stream));
  dbuf_download(&C1, g_stream);
  dbuf_download(&C2, g_stream);
  if (memcmp(C1.host, C2.host, (size_t)LC.n * 4) != 0) {
    print_message("FAILED stream-K: two identical calls gave different bits\n");
    failures++;
  }
  o.workspace_bytes = need - 1; /* one byte short: stream_k 1 refuses, stream_k 0 runs unsplit */
  assert_int_equal(kiln_matmul(g_ctx, &A.t, &B.t, &C1.t, &o, g_stream), KILN_ERROR_WORKSPACE);
  assert_non_null(strstr(kiln_last_error(), "kiln_matmul_workspace_size"));
  o.stream_k = 0;
  assert_kiln_ok(kiln_matmul(g_ctx, &A.t, &B.t, &C1.t, &o, g_stream));
  o.stream_k = -1;
  assert_kiln_ok(kiln_matmul_workspace_size(g_ctx, &A.t, &B.t, &C1.t, &o, &need));
  assert_int_equal(need, 0);
  o.stream_k = 0; /* 36 tiles: one partial wave on a GPU of 36+ SMs, which the rule leaves alone */
  assert_kiln_ok(kiln_matmul_workspace_size(g_ctx, &A.t, &B.t, &C1.t, &o, &need));
  assert_int_equal(need, 0);
  assert_kiln_ok(kiln_stream_synchronize(g_ctx, g_stream));
  dbuf_free(&A);
  dbuf_free(&B);
  dbuf_free(&C1);
  dbuf_free(&C2);
  problem_free(&p);
  kiln_tensor_free(ws);
  g_ws = NULL, g_ws_bytes = 0;
  if (failures) fail_msg("%d of %d checks failed (listed above)", failures, runs + 1);
}

/* alpha = 0.5 (and 0 and -3) through kiln_matmul_opts. */
static void alpha_scales_the_product(void **state) {
  (void)state;
  worst_reset();
  test_seed(808);
  const float alphas[3] = {0.5f, 0.0f, -3.0f};
  int failures = 0, runs = 0;
  char what[256];
  for (int ai = 0; ai < 3; ai++)
    for (int di = 0; di < 2; di++) {
      problem p;
      problem_init(&p, 1, 1, 1, 130, 261, 77, *IN_DTS[di]);
      p.alpha = alphas[ai];
      points ref;
      ref_full(&p, &ref);
      for (int c = 0; c < 6; c++) {
        if (!algo_runs(CFGS[c].algo)) continue;
        dbuf A, B;
        dbuf_input(&A, mk_in(2, 1, p.M, p.K, c & 1, CFGS[c].padded), *IN_DTS[di], p.a);
        dbuf_input(&B, mk_in(2, 1, p.K, p.N, (c >> 1) & 1, CFGS[c].padded), *IN_DTS[di], p.b);
        for (int oi = 0; oi < 3; oi++) {
          snprintf(what, sizeof what, "%s %s-ld %s->%s alpha %g", algo_str(CFGS[c].algo),
                   CFGS[c].padded ? "padded" : "natural", dt_str(*IN_DTS[di]), dt_str(*OUT_DTS[oi]), alphas[ai]);
          failures += !run_product(what, &A, &B, mk(2, 1, p.M, p.N, oi == 1, 0, 0, 0), *OUT_DTS[oi], CFGS[c].algo,
                                   alphas[ai], g_stream, &ref, NULL);
          runs++;
        }
        dbuf_free(&A);
        dbuf_free(&B);
      }
      points_free(&ref);
      problem_free(&p);
    }
  worst_print("alpha_scales_the_product");
  if (failures) fail_msg("%d of %d products failed (listed above)", failures, runs);
}

/* The op runs on the stream it is given: uploads, product and download all enqueued on one
 * stream with no synchronization in between, on a kiln_stream_create stream and on the NULL
 * (legacy default) stream. */
static void runs_on_the_given_stream(void **state) {
  (void)state;
  worst_reset();
  test_seed(909);
  CUstream own = NULL;
  assert_kiln_ok(kiln_stream_create(g_ctx, &own));
  assert_non_null(own);
  int failures = 0;
  char what[256];
  problem p;
  problem_init(&p, 1, 1, 1, 257, 300, 136, TEST_F16);
  points ref;
  ref_full(&p, &ref);
  CUstream streams[2] = {own, NULL};
  for (int si = 0; si < 2; si++)
    for (int algo = AUTO; algo <= WG; algo++) {
      if (!algo_runs(algo)) continue;
      CUstream s = streams[si];
      dbuf A, B, C;
      dbuf_init(&A, mk(2, 1, p.M, p.K, 0, 0, 0, 0), TEST_F16);
      dbuf_init(&B, mk(2, 1, p.K, p.N, 1, 0, 0, 0), TEST_F16);
      dbuf_init(&C, mk(2, 1, p.M, p.N, 0, p.N + 4, 0, 0), TEST_F32);
      dbuf_put(&A, p.a);
      dbuf_put(&B, p.b);
      dbuf_upload(&A, s, 0);
      dbuf_upload(&B, s, 0);
      dbuf_upload(&C, s, 0);
      kiln_matmul_opts o = kiln_matmul_opts_default();
      o.algo = (kiln_matmul_algo)algo;
      assert_kiln_ok(kiln_matmul(g_ctx, &A.t, &B.t, &C.t, &o, s));
      int64_t n = C.L.n;
      test_tensor h = test_host_tensor(C.host, C.dt, 1, &n);
      assert_kiln_ok(kiln_tensor_copy(g_ctx, &C.dev->dl_tensor, test_dl(&h), s));
      assert_kiln_ok(kiln_stream_synchronize(g_ctx, s));
      snprintf(what, sizeof what, "%s on the %s stream", algo_str(algo), s ? "kiln_stream_create" : "NULL");
      failures += !check_output(what, &C, &ref, tol_out(TEST_F32));
      dbuf_free(&A);
      dbuf_free(&B);
      dbuf_free(&C);
    }
  /* opts = NULL means the defaults (AUTO, alpha 1) */
  {
    dbuf A, B, C;
    dbuf_input(&A, mk(2, 1, p.M, p.K, 0, 0, 0, 0), TEST_F16, p.a);
    dbuf_input(&B, mk(2, 1, p.K, p.N, 0, 0, 0, 0), TEST_F16, p.b);
    dbuf_init(&C, mk(2, 1, p.M, p.N, 0, 0, 0, 0), TEST_BF16);
    dbuf_upload(&C, NULL, 1);
    assert_kiln_ok(kiln_matmul(g_ctx, &A.t, &B.t, &C.t, NULL, NULL));
    dbuf_download(&C, NULL);
    failures += !check_output("opts NULL on the NULL stream", &C, &ref, tol_out(TEST_BF16));
    dbuf_free(&A);
    dbuf_free(&B);
    dbuf_free(&C);
  }
  points_free(&ref);
  problem_free(&p);
  assert_kiln_ok(kiln_stream_destroy(g_ctx, own));
  worst_print("runs_on_the_given_stream");
  if (failures) fail_msg("%d products failed (listed above)", failures);
}

/* The same call twice gives bit-identical output (each algo, two output dtypes). */
static void deterministic(void **state) {
  (void)state;
  worst_reset();
  test_seed(1010);
  const int cfg[4][2] = {{AUTO, 0}, {MMA, 1}, {CPA, 1}, {WG, 1}};
  int failures = 0;
  char what[256];
  for (int di = 0; di < 2; di++) {
    const DLDataType in = *IN_DTS[di], out = di ? TEST_BF16 : TEST_F32;
    problem p;
    problem_init(&p, 1, 1, 1, 1000, 1111, 777, in);
    points ref;
    ref_auto(&p, &ref);
    for (int c = 0; c < 4; c++) {
      if (!algo_runs(cfg[c][0])) continue;
      dbuf A, B, C1, C2;
      dbuf_input(&A, mk_in(2, 1, p.M, p.K, 0, cfg[c][1]), in, p.a);
      dbuf_input(&B, mk_in(2, 1, p.K, p.N, 1, cfg[c][1]), in, p.b);
      layout LC = mk(2, 1, p.M, p.N, 0, 0, 0, 0);
      dbuf_init(&C1, LC, out);
      dbuf_init(&C2, LC, out);
      dbuf_upload(&C1, g_stream, 1);
      dbuf_upload(&C2, g_stream, 1);
      kiln_matmul_opts o = kiln_matmul_opts_default();
      o.algo = (kiln_matmul_algo)cfg[c][0];
      assert_kiln_ok(kiln_matmul(g_ctx, &A.t, &B.t, &C1.t, &o, g_stream));
      assert_kiln_ok(kiln_matmul(g_ctx, &A.t, &B.t, &C2.t, &o, g_stream));
      dbuf_download(&C1, g_stream);
      dbuf_download(&C2, g_stream);
      snprintf(what, sizeof what, "%s %s->%s 1000x1111x777", algo_str(cfg[c][0]), dt_str(in), dt_str(out));
      failures += !check_output(what, &C1, &ref, tol_out(out));
      if (memcmp(C1.host, C2.host, (size_t)LC.n * dt_size(out)) != 0) {
        print_message("FAILED %s: two identical calls gave different bits\n", what);
        failures++;
      }
      dbuf_free(&A);
      dbuf_free(&B);
      dbuf_free(&C1);
      dbuf_free(&C2);
    }
    points_free(&ref);
    problem_free(&p);
  }
  worst_print("deterministic");
  if (failures) fail_msg("%d checks failed (listed above)", failures);
}

/* ---------------------------------------------------------------------------------------- */
/* Tests: backward                                                                          */
/* ---------------------------------------------------------------------------------------- */
typedef struct bwd_case {
  int64_t batch, ba, bb, M, N, K;
  DLDataType in, dc, da, db; /* da.bits == 0 / db.bits == 0: that gradient is not requested */
  int a_col, b_col, dc_col, da_col, db_col;
  int a_nd, b_nd;            /* rank of A and B (2 or 3); dA / dB take the same rank */
  int dc_nd;                 /* rank of dC: 3 (default), or 2 when batch is 1 */
  int padded;                /* A, B, dC with leading dimensions padded to multiples of 8, aligned */
  int algo;
  int null_opts;
} bwd_case;

static const DLDataType NONE = {kDLFloat, 0, 1};

/* dA = dC·Bᵀ and dB = Aᵀ·dC in float64, dC first rounded to A's dtype as kiln.h documents;
 * a broadcast operand's gradient is the sum over the batch. */
static int run_backward(const char *what, const bwd_case *c) {
  problem p;
  problem_init(&p, c->batch, c->ba, c->bb, c->M, c->N, c->K, c->in);
  const int64_t B = c->batch, M = c->M, N = c->N, K = c->K;
  float *dc = malloc(sizeof(float) * (size_t)(B * M * N));
  double *dcr = malloc(sizeof(double) * (size_t)(B * M * N));
  double *ra = calloc((size_t)(c->ba * M * K), sizeof(double)), *rb = calloc((size_t)(c->bb * K * N), sizeof(double));
  assert_true(dc && dcr && ra && rb);
  for (int64_t i = 0; i < B * M * N; i++) {
    dc[i] = round_to(c->dc, test_uniform());
    dcr[i] = round_to(c->in, dc[i]);
  }
  for (int64_t b = 0; b < B; b++) {
    const float *A = pa(&p, b), *Bm = pb(&p, b);
    const double *D = dcr + b * M * N;
    double *dA = ra + (c->ba > 1 ? b : 0) * M * K, *dB = rb + (c->bb > 1 ? b : 0) * K * N;
    OMP_FOR
    for (int64_t i = 0; i < M; i++)
      for (int64_t k = 0; k < K; k++) {
        double s = 0;
        for (int64_t j = 0; j < N; j++) s += D[i * N + j] * Bm[k * N + j];
        dA[i * K + k] += s;
      }
    OMP_FOR
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t i = 0; i < M; i++) s += (double)A[i * K + k] * D[i * N + j];
        dB[k * N + j] += s;
      }
  }
  dbuf A, Bb, DC, DA, DB;
  memset(&DA, 0, sizeof DA);
  memset(&DB, 0, sizeof DB);
  /* natural leading dimensions with odd offsets (unaligned data pointers), except for CP_ASYNC,
   * which needs aligned rows; or padded, aligned leading dimensions (AUTO then takes CP_ASYNC
   * where dC needs no conversion) */
  const int64_t oa = c->algo == CPA ? 0 : 1, ob = c->algo == CPA ? 0 : 2;
  const int dc_nd = c->dc_nd == 2 && B == 1 ? 2 : 3;
  if (c->padded) {
    dbuf_input(&A, mk_in(c->a_nd, c->ba, M, K, c->a_col, 1), c->in, p.a);
    dbuf_input(&Bb, mk_in(c->b_nd, c->bb, K, N, c->b_col, 1), c->in, p.b);
    dbuf_input(&DC, mk_in(dc_nd, B, M, N, c->dc_col, 1), c->dc, dc);
  } else {
    dbuf_input(&A, mk(c->a_nd, c->ba, M, K, c->a_col, 0, 0, oa), c->in, p.a);
    dbuf_input(&Bb, mk(c->b_nd, c->bb, K, N, c->b_col, 0, 0, ob), c->in, p.b);
    dbuf_input(&DC, mk(dc_nd, B, M, N, c->dc_col, 0, 0, 0), c->dc, dc);
  }
  const int want_a = c->da.bits != 0, want_b = c->db.bits != 0;
  if (want_a) {
    dbuf_init(&DA, mk(c->a_nd, c->ba, M, K, c->da_col, (c->da_col ? M : K) + 2, 0, 3), c->da);
    dbuf_upload(&DA, g_stream, 1);
  }
  if (want_b) {
    dbuf_init(&DB, mk(c->b_nd, c->bb, K, N, c->db_col, (c->db_col ? K : N) + 1, 0, 0), c->db);
    dbuf_upload(&DB, g_stream, 1);
  }
  const DLTensor *tda = want_a ? &DA.t : NULL, *tdb = want_b ? &DB.t : NULL;
  int ok = 1;
  size_t ws = 0;
  DLManagedTensorVersioned *wst = NULL;
  assert_kiln_ok(kiln_matmul_backward_workspace_size(g_ctx, &A.t, &Bb.t, &DC.t, tda, tdb, &ws));
  if (memcmp(&c->dc, &c->in, sizeof c->in) != 0 && ws == 0) {
    print_message("FAILED %s: dC is %s but A is %s and the workspace size is 0 (kiln.h: dC is converted into the "
                  "workspace)\n", what, dt_str(c->dc), dt_str(c->in));
    ok = 0;
  }
  if (ws) {
    int64_t n = (int64_t)ws;
    const DLDataType u8 = {kDLUInt, 8, 1};
    assert_kiln_ok(kiln_tensor_empty(g_ctx, 1, &n, u8, &wst));
  }
  kiln_matmul_opts o = kiln_matmul_opts_default();
  o.algo = (kiln_matmul_algo)c->algo;
  kiln_status st = kiln_matmul_backward(g_ctx, &A.t, &Bb.t, &DC.t, tda, tdb, ws ? wst->dl_tensor.data : NULL, ws,
                                        c->null_opts ? NULL : &o, g_stream);
  if (st != KILN_OK) {
    print_message("FAILED %s: kiln_matmul_backward -> %s: %s\n", what, kiln_status_string(st), kiln_last_error());
    ok = 0;
  } else {
    char w2[300];
    if (want_a) {
      dbuf_download(&DA, g_stream);
      points s;
      points_from_array(&s, ra, c->ba, M, K);
      snprintf(w2, sizeof w2, "%s: dA (%s)", what, dt_str(c->da));
      ok &= check_output(w2, &DA, &s, tol_grad(c->da));
      points_free(&s);
    }
    if (want_b) {
      dbuf_download(&DB, g_stream);
      points s;
      points_from_array(&s, rb, c->bb, K, N);
      snprintf(w2, sizeof w2, "%s: dB (%s)", what, dt_str(c->db));
      ok &= check_output(w2, &DB, &s, tol_grad(c->db));
      points_free(&s);
    }
  }
  kiln_tensor_free(wst);
  if (want_a) dbuf_free(&DA);
  if (want_b) dbuf_free(&DB);
  dbuf_free(&A);
  dbuf_free(&Bb);
  dbuf_free(&DC);
  free(dc);
  free(dcr);
  free(ra);
  free(rb);
  problem_free(&p);
  return ok;
}

static void bwd_name(char *buf, size_t n, const bwd_case *c) {
  snprintf(buf, n,
           "backward %s batch %" PRId64 " (A %" PRId64 ", B %" PRId64 ") M=%" PRId64 " N=%" PRId64 " K=%" PRId64
           " in %s dC %s%s dA %s dB %s, A %s B %s dC %s%s",
           algo_str(c->algo), c->batch, c->ba, c->bb, c->M, c->N, c->K, dt_str(c->in), dt_str(c->dc),
           c->dc_col ? " (col)" : "", c->da.bits ? dt_str(c->da) : "-", c->db.bits ? dt_str(c->db) : "-",
           lay_str(c->a_col), lay_str(c->b_col), lay_str(c->dc_col), c->padded ? ", padded ld" : "");
}

/* M, N, K in {1, 17, 33, 127} with dC f32 / f16 / bf16 and varied gradient dtypes and layouts. */
static void backward_ragged(void **state) {
  (void)state;
  worst_reset();
  test_seed(1111);
  static const int64_t sizes[4] = {1, 17, 33, 127};
  const DLDataType dts[3] = {TEST_F32, TEST_F16, TEST_BF16};
  int failures = 0, runs = 0;
  char what[400];
  for (int mi = 0; mi < 4; mi++)
    for (int ni = 0; ni < 4; ni++)
      for (int ki = 0; ki < 4; ki++)
        for (int d = 0; d < 3; d++) {
          const int combo = (mi * 16 + ni * 4 + ki) * 3 + d;
          const uint32_t h = (uint32_t)(combo * 2654435761u) >> 16;
          bwd_case c;
          memset(&c, 0, sizeof c);
          c.batch = c.ba = c.bb = 1;
          c.M = sizes[mi], c.N = sizes[ni], c.K = sizes[ki];
          c.in = (h & 1) ? TEST_BF16 : TEST_F16;
          c.dc = dts[d];
          c.da = dts[(h >> 1) % 3];
          c.db = dts[(h >> 3) % 3];
          c.a_col = (h >> 5) & 1, c.b_col = (h >> 6) & 1, c.dc_col = (h >> 7) & 1;
          c.da_col = (h >> 8) & 1, c.db_col = (h >> 9) & 1;
          c.a_nd = c.b_nd = 2;
          c.dc_nd = 2 + ((h >> 11) & 1);
          c.padded = (h >> 12) & 1;
          c.algo = AUTO;
          c.null_opts = (h >> 10) & 1;
          bwd_name(what, sizeof what, &c);
          failures += !run_backward(what, &c);
          runs++;
        }
  worst_print("backward_ragged");
  if (failures) fail_msg("%d of %d backward calls failed (listed above)", failures, runs);
}

/* One gradient at a time, batched with broadcast operands (the broadcast one's gradient sums
 * over the batch, in f32 or through the f32 workspace accumulator), and the explicit algos. */
static void backward_variants(void **state) {
  (void)state;
  worst_reset();
  test_seed(1212);
  bwd_case cs[24];
  int n = 0;
  bwd_case base;
  memset(&base, 0, sizeof base);
  base.batch = base.ba = base.bb = 1, base.M = 33, base.N = 17, base.K = 127;
  base.in = TEST_F16, base.dc = TEST_F32, base.da = TEST_F16, base.db = TEST_F32;
  base.a_nd = base.b_nd = 2, base.algo = AUTO;
  /* dA only / dB only, dC f32 and dC of A's dtype */
  cs[n] = base, cs[n].db = NONE, n++;
  cs[n] = base, cs[n].da = NONE, n++;
  cs[n] = base, cs[n].db = NONE, cs[n].dc = TEST_F16, n++;
  cs[n] = base, cs[n].da = NONE, cs[n].dc = TEST_BF16, cs[n].in = TEST_BF16, cs[n].db = TEST_BF16, n++;
  /* batched, B broadcast (rank 2 and [1, K, N]): dB sums over the batch, in f32 and in f16 */
  bwd_case bb = base;
  bb.batch = bb.ba = 4, bb.bb = 1, bb.M = 33, bb.K = 17, bb.N = 21, bb.a_nd = 3, bb.b_nd = 2;
  cs[n] = bb, cs[n].db = TEST_F32, cs[n].dc = TEST_F16, n++;
  cs[n] = bb, cs[n].db = TEST_F16, cs[n].dc = TEST_F16, n++;
  cs[n] = bb, cs[n].db = TEST_F16, cs[n].dc = TEST_F32, cs[n].b_nd = 3, n++;
  cs[n] = bb, cs[n].db = TEST_F32, cs[n].dc = TEST_BF16, cs[n].b_col = 1, cs[n].db_col = 1, n++;
  cs[n] = bb, cs[n].db = TEST_F16, cs[n].da = NONE, cs[n].dc = TEST_F16, cs[n].in = TEST_F16, n++;
  /* batched, A broadcast: dA sums over the batch (bf16 through the accumulator, f32 directly) */
  bwd_case ab = bb;
  ab.ba = 1, ab.bb = 4, ab.a_nd = 2, ab.b_nd = 3, ab.in = TEST_BF16, ab.dc = TEST_BF16;
  cs[n] = ab, cs[n].da = TEST_BF16, cs[n].db = TEST_BF16, n++;
  cs[n] = ab, cs[n].da = TEST_F32, cs[n].db = NONE, cs[n].dc = TEST_F32, cs[n].a_col = 1, n++;
  /* batched, nothing broadcast */
  cs[n] = bb, cs[n].bb = 4, cs[n].b_nd = 3, cs[n].db = TEST_BF16, cs[n].in = TEST_BF16, cs[n].dc = TEST_F32, n++;
  /* explicit algos; CP_ASYNC on operands whose rows are all 16-byte aligned */
  bwd_case al = base;
  al.M = 64, al.N = 64, al.K = 128, al.dc = TEST_F16, al.da = TEST_F16, al.db = TEST_F32;
  cs[n] = al, cs[n].algo = CPA, n++;
  if (g_has_wgmma) cs[n] = al, cs[n].padded = 1, cs[n].algo = WG, n++;
  if (g_has_wgmma) cs[n] = bb, cs[n].padded = 1, cs[n].dc = TEST_F16, cs[n].algo = WG, n++;
  cs[n] = al, cs[n].algo = MMA, n++;
  cs[n] = base, cs[n].algo = MMA, n++;
  cs[n] = bb, cs[n].algo = MMA, cs[n].db = TEST_F16, n++;
  cs[n] = bb, cs[n].padded = 1, cs[n].dc = TEST_F16, cs[n].db = TEST_F16, n++;      /* AUTO -> CP_ASYNC */
  cs[n] = bb, cs[n].padded = 1, cs[n].dc = TEST_F16, cs[n].algo = CPA, n++;
  cs[n] = ab, cs[n].padded = 1, cs[n].da = TEST_BF16, cs[n].algo = CPA, n++;
  int failures = 0;
  char what[400];
  assert_true(n <= (int)(sizeof cs / sizeof cs[0]));
  for (int i = 0; i < n; i++) {
    bwd_name(what, sizeof what, &cs[i]);
    failures += !run_backward(what, &cs[i]);
  }
  worst_print("backward_variants");
  if (failures) fail_msg("%d of %d backward calls failed (listed above)", failures, n);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  g_ctx = test_gpu_context_or_skip(); /* exits 77 (skipped) without a usable GPU */
  {
    kiln_device_info info;
    if (kiln_context_info(g_ctx, &info) == KILN_OK) g_has_wgmma = info.cc_major == 9 && info.cc_minor == 0;
    printf("WGMMA cases %s (device sm_%d%d)\n", g_has_wgmma ? "run" : "skipped", info.cc_major, info.cc_minor);
  }
  if (kiln_stream_create(g_ctx, &g_stream) != KILN_OK) {
    printf("FAIL: kiln_stream_create: %s\n", kiln_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layouts_algos_dtypes),
      cmocka_unit_test(cp_async_refuses_unaligned_operands),
      cmocka_unit_test(cp_async_accepts_aligned_operands_with_unit_dims),
      cmocka_unit_test(ragged_shapes),
      cmocka_unit_test(large_square),
      cmocka_unit_test(llm_shapes_with_transposed_weight),
      cmocka_unit_test(batched),
      cmocka_unit_test(wgmma_tile_widths),
      cmocka_unit_test(wgmma_stream_k),
      cmocka_unit_test(alpha_scales_the_product),
      cmocka_unit_test(runs_on_the_given_stream),
      cmocka_unit_test(deterministic),
      cmocka_unit_test(backward_ragged),
      cmocka_unit_test(backward_variants),
  };
  int failed = cmocka_run_group_tests_name("gpu_matmul", tests, NULL, NULL);
  kiln_stream_destroy(g_ctx, g_stream);
  kiln_context_destroy(g_ctx);
  return failed;
}
