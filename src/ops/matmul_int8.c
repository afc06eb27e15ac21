/*
 * matmul_int8.c — kiln_matmul_int8 (W8A8) and kiln_quantize_int8: validate -> CPU path, or
 * enter the context and hand the validated kiln_int8_args to src/ops/matmul_int8_gpu.c.
 *
 * Validation follows kiln_matmul (src/ops/matmul.c): every argument is checked before anything
 * is written, and each message names the op, the argument, what was found, what was expected
 * and how to fix it.
 *
 * kiln_quantize_int8 runs on either context, bit for bit the same; on a GPU the weights'
 * finiteness (which the CPU checks before writing) is the caller's contract (kiln.h).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "cpu/cpu.h"

/* The largest K whose int32 sums are exact (kiln.h): 2^17 products of magnitude <= 2^14. */
#define KILN_INT8_MAX_K 131072

kiln_matmul_int8_opts kiln_matmul_int8_opts_default(void) {
  kiln_matmul_int8_opts o;
  memset(&o, 0, sizeof o);
  o.algo = KILN_INT8_AUTO;
  o.scale = 1.0f;
  o.row_scale = NULL;
  o.col_scale = NULL;
  return o;
}

static bool is_int8(DLDataType t) { return kiln_dtype_is(t, kDLInt, 8) || kiln_dtype_is(t, kDLUInt, 8); }

/* A byte range [data, data + span_bytes) as a kiln_matrix, for kiln_check_no_overlap. */
static kiln_matrix byte_range(char *data, int64_t span_bytes) {
  kiln_matrix m;
  memset(&m, 0, sizeof m);
  m.data = data;
  m.span_bytes = span_bytes;
  return m;
}

/* An int8 (or uint8) matrix operand [rows, cols] or [batch, rows, cols]. */
static kiln_status check_int8_matrix(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *t,
                                     kiln_matrix *m) {
  kiln_status st;
  if ((st = kiln_check_tensor(ctx, op, arg, t))) return st;
  char dn[48];
  if (!is_int8(t->dtype))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s has dtype %s; expected int8 (or uint8, read as int8 bit patterns); quantize float "
                     "operands first (kiln_quantize_int8)",
                     op, arg, kiln_dtype_name(t->dtype, dn));
  return kiln_matrix_view(op, arg, t, true, m);
}

/* An f32 rank-1 vector of length n, any stride: its data, element stride and byte range.
 * `what` says what the vector holds (for the message). */
static kiln_status check_f32_vector(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *t,
                                    int64_t n, const char *what, float **data, int64_t *stride, kiln_matrix *range) {
  kiln_status st;
  if ((st = kiln_check_tensor(ctx, op, arg, t))) return st;
  char dn[48], sh[160];
  if (!KILN_IS_F32(t->dtype))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s; expected float32 (%s); convert it with .float()",
                     op, arg, kiln_dtype_name(t->dtype, dn), what);
  if (t->ndim != 1 || t->shape[0] != n)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; expected [%" PRId64 "] (%s)", op, arg,
                     kiln_shape_str(t, sh, sizeof sh), n, what);
  int64_t s = n > 1 ? kiln_tensor_stride(t, 0) : 1, span;
  if (__builtin_mul_overflow(n - 1, s, &span) || __builtin_add_overflow(span, 1, &span) ||
      __builtin_mul_overflow(span, (int64_t)sizeof(float), &span) ||
      (uintptr_t)kiln_tensor_data(t) + (uint64_t)span < (uintptr_t)kiln_tensor_data(t))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s (shape %s, stride %" PRId64 ") spans more bytes than a "
                     "64-bit address holds", op, arg, kiln_shape_str(t, sh, sizeof sh), s);
  *data = (float *)kiln_tensor_data(t);
  *stride = s;
  *range = byte_range(kiln_tensor_data(t), span);
  return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_matmul_int8                                                                           */
/* ------------------------------------------------------------------------------------------ */
kiln_status kiln_matmul_int8(kiln_context *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *c,
                             const kiln_matmul_int8_opts *opts, CUstream stream) {
  const char *op = "kiln_matmul_int8";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  const kiln_matmul_int8_opts o = opts ? *opts : kiln_matmul_int8_opts_default();
  if (o.algo != KILN_INT8_AUTO && o.algo != KILN_INT8_MMA_SYNC && o.algo != KILN_INT8_WGMMA)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->algo is %d; expected KILN_INT8_AUTO, KILN_INT8_MMA_SYNC or KILN_INT8_WGMMA", op,
                     (int)o.algo);
  if (o.algo != KILN_INT8_AUTO && ctx->device_type == kDLCPU)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: opts->algo %s is a GPU kernel but the context is the CPU's; use KILN_INT8_AUTO for CPU "
                     "tensors",
                     op, o.algo == KILN_INT8_WGMMA ? "KILN_INT8_WGMMA" : "KILN_INT8_MMA_SYNC");
  if (!isfinite(o.scale))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->scale is %g; expected a finite float (kiln_matmul_int8_opts_default() sets 1)", op,
                     (double)o.scale);

  kiln_matrix A, B, C;
  if ((st = check_int8_matrix(ctx, op, "a", a, &A)) || (st = check_int8_matrix(ctx, op, "b", b, &B))) return st;
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  char sa[160], sb[160];
  if (B.rows != K)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: b has shape %s but a has K = %" PRId64 " (shape %s); inner dimensions must match", op,
                     kiln_shape_str(b, sb, sizeof sb), K, kiln_shape_str(a, sa, sizeof sa));
  if (K > KILN_INT8_MAX_K)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: a has K = %" PRId64 " (shape %s); expected K <= %d, the largest K whose int32 sums of "
                     "int8 products are exact (2^17 products of magnitude <= 2^14); split K and add the partial "
                     "products",
                     op, K, kiln_shape_str(a, sa, sizeof sa), KILN_INT8_MAX_K);
  if (A.batch != B.batch && A.batch != 1 && B.batch != 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: a has batch %" PRId64 " and b has batch %" PRId64 "; batches must be equal or one of them 1",
                     op, A.batch, B.batch);
  const int64_t batch = A.batch > B.batch ? A.batch : B.batch;
  if ((st = kiln_check_float_matrix(ctx, op, "c", c, batch, M, N, true, &C))) return st;

  float *row_scale = NULL, *col_scale = NULL;
  int64_t row_stride = 0, col_stride = 0;
  kiln_matrix row_range, col_range;
  if (o.row_scale &&
      (st = check_f32_vector(ctx, op, "opts->row_scale", o.row_scale, M, "one scale per row of a, M", &row_scale,
                             &row_stride, &row_range)))
    return st;
  if (o.col_scale &&
      (st = check_f32_vector(ctx, op, "opts->col_scale", o.col_scale, N, "one scale per column of b, N", &col_scale,
                             &col_stride, &col_range)))
    return st;
  if ((st = kiln_check_no_overlap(op, "c", &C, "a", &A)) || (st = kiln_check_no_overlap(op, "c", &C, "b", &B)) ||
      (row_scale && (st = kiln_check_no_overlap(op, "c", &C, "opts->row_scale", &row_range))) ||
      (col_scale && (st = kiln_check_no_overlap(op, "c", &C, "opts->col_scale", &col_range))))
    return st;

  /* The views as they are (C may be column-major: c_cs != 1). A GPU kernel that computes a
   * column-major C as Cᵀ = Bᵀ·Aᵀ must still multiply in the order sum · scale · row_scale[i] ·
   * col_scale[j] (not col before row) to match the CPU bit for bit. */
  const kiln_int8_args args = {
      .a = (const int8_t *)A.data, .b = (const int8_t *)B.data, .c = C.data,
      .row_scale = row_scale, .col_scale = col_scale,
      .a_bs = A.bs, .a_rs = A.rs, .a_cs = A.cs,
      .b_bs = B.bs, .b_rs = B.rs, .b_cs = B.cs,
      .c_bs = C.bs, .c_rs = C.rs, .c_cs = C.cs,
      .row_scale_stride = row_stride, .col_scale_stride = col_stride,
      .m = (int32_t)M, .n = (int32_t)N, .k = (int32_t)K, .batch = (int32_t)batch,
      .scale = o.scale, .c_dtype = kiln_dt_code(C.dtype),
  };
  if (ctx->device_type == kDLCPU) return kiln_cpu_matmul_int8(op, &args);
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
  st = kiln_matmul_int8_gpu(ctx, op, &args, o.algo, stream);
  kiln_ctx_leave(ctx, &scope);
  return st;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_quantize_int8                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* A rank-2 tensor with any non-negative strides: sizes >= 1, the byte span, and (for an
 * output) distinct elements, i.e. strides s_in >= 1 and s_out >= (n_in - 1)·s_in + 1 for some
 * ordering of the two dimensions (dimensions of size 1 address nothing). */
static kiln_status strided_2d(const char *op, const char *arg, const DLTensor *t, bool output, int64_t *rs,
                              int64_t *cs, kiln_matrix *range) {
  char sh[160];
  if (t->ndim != 2)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has rank %d (shape %s); expected rank 2 [K, N]", op, arg,
                     (int)t->ndim, kiln_shape_str(t, sh, sizeof sh));
  const int64_t rows = t->shape[0], cols = t->shape[1];
  if (rows < 1 || cols < 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; every dimension must be >= 1", op, arg,
                     kiln_shape_str(t, sh, sizeof sh));
  *rs = rows > 1 ? kiln_tensor_stride(t, 0) : 0;
  *cs = cols > 1 ? kiln_tensor_stride(t, 1) : 0;
  const int64_t elem = (int64_t)kiln_dtype_size(t->dtype);
  int64_t span = 1, term;
  if (__builtin_mul_overflow(rows - 1, *rs, &term) || __builtin_add_overflow(span, term, &span) ||
      __builtin_mul_overflow(cols - 1, *cs, &term) || __builtin_add_overflow(span, term, &span) ||
      __builtin_mul_overflow(span, elem, &span) ||
      (uintptr_t)kiln_tensor_data(t) + (uint64_t)span < (uintptr_t)kiln_tensor_data(t))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s (shape %s) spans more bytes than a 64-bit address holds", op,
                     arg, kiln_shape_str(t, sh, sizeof sh));
  *range = byte_range(kiln_tensor_data(t), span);
  if (output && rows > 1 && cols > 1) {
    const bool rows_outer = *cs >= 1 && *rs >= (cols - 1) * *cs + 1;
    const bool cols_outer = *rs >= 1 && *cs >= (rows - 1) * *rs + 1;
    if (!rows_outer && !cols_outer)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s has shape %s with strides (%" PRId64 ", %" PRId64 "), so some of its elements share "
                       "memory; an output needs distinct elements (allocate it contiguous)",
                       op, arg, kiln_shape_str(t, sh, sizeof sh), *rs, *cs);
  }
  return KILN_OK;
}

/* kernels/int8_quantize.cu over validated args: one launch per column's scale, or the four
 * phases of one scale for the tensor (its maximum meets in scales[0]), in order on stream. */
static kiln_status quantize_int8_gpu(const kiln_context *ctx, const char *op, const kiln_cpu_quant_args *c,
                                     CUstream stream) {
  kiln_int8_quant_args a = {.w = c->w, .q = c->q, .scales = c->scales, .w_rs = c->w_rs, .w_cs = c->w_cs,
                            .q_rs = c->q_rs, .q_cs = c->q_cs, .scales_stride = c->scales_stride, .k = c->k,
                            .n = c->n, .w_dtype = c->w_dtype};
  static const int32_t per_column[] = {KILN_Q8_COLUMNS}, per_tensor[] = {KILN_Q8_ZERO, KILN_Q8_MAX, KILN_Q8_CODES,
                                                                         KILN_Q8_SCALE};
  const int32_t *phases = c->per_column ? per_column : per_tensor;
  const int count = c->per_column ? 1 : 4;
  const int64_t threads = 256, cap = (int64_t)(ctx->info.sm_count > 0 ? ctx->info.sm_count : 1) * 16;
  int64_t blocks = (c->n + threads - 1) / threads; /* one thread per column */
  if (blocks > cap) blocks = cap;
  kiln_ctx_scope scope;
  kiln_status st = kiln_ctx_enter(ctx, &scope, op);
  if (st) return st;
  for (int i = 0; i < count && !st; i++) {
    a.phase = phases[i];
    const bool one = a.phase == KILN_Q8_ZERO || a.phase == KILN_Q8_SCALE;
    void *params[] = {&a};
    st = kiln_launch(ctx, KILN_K_INT8_QUANTIZE, one ? 1 : (unsigned)blocks, 1, 1, one ? 32 : (unsigned)threads, 0,
                     stream, params, op);
  }
  kiln_ctx_leave(ctx, &scope);
  return st;
}

kiln_status kiln_quantize_int8(kiln_context *ctx, const DLTensor *w, const DLTensor *q, const DLTensor *scales,
                               int per_column, CUstream stream) {
  const char *op = "kiln_quantize_int8";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  if (per_column != 0 && per_column != 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: per_column is %d; expected 0 (one scale for the tensor) or 1 (one scale per column)", op,
                     per_column);
  char dn[48], sw[160], sq[160];
  if ((st = kiln_check_tensor(ctx, op, "w", w))) return st;
  if (kiln_dt_code(w->dtype) < 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: w has dtype %s; expected float32, float16 or bfloat16", op,
                     kiln_dtype_name(w->dtype, dn));
  kiln_cpu_quant_args args;
  memset(&args, 0, sizeof args);
  kiln_matrix w_range, q_range, s_range;
  if ((st = strided_2d(op, "w", w, false, &args.w_rs, &args.w_cs, &w_range))) return st;
  args.k = w->shape[0];
  args.n = w->shape[1];
  if ((st = kiln_check_tensor(ctx, op, "q", q))) return st;
  if (!is_int8(q->dtype))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: q has dtype %s; expected int8 (or uint8, written as int8 bit "
                     "patterns)", op, kiln_dtype_name(q->dtype, dn));
  if (q->ndim != 2 || q->shape[0] != args.k || q->shape[1] != args.n)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: q has shape %s but w has shape %s; q must have w's shape", op,
                     kiln_shape_str(q, sq, sizeof sq), kiln_shape_str(w, sw, sizeof sw));
  if ((st = strided_2d(op, "q", q, true, &args.q_rs, &args.q_cs, &q_range))) return st;
  const int64_t ns = per_column ? args.n : 1;
  if ((st = check_f32_vector(ctx, op, "scales", scales, ns,
                             per_column ? "one scale per column of w, N, with per_column = 1"
                                        : "one scale for the whole tensor, with per_column = 0",
                             &args.scales, &args.scales_stride, &s_range)))
    return st;
  if ((st = kiln_check_no_overlap(op, "q", &q_range, "w", &w_range)) ||
      (st = kiln_check_no_overlap(op, "scales", &s_range, "w", &w_range)) ||
      (st = kiln_check_no_overlap(op, "scales", &s_range, "q", &q_range)))
    return st;
  args.w = kiln_tensor_data(w);
  args.w_dtype = kiln_dt_code(w->dtype);
  args.q = (int8_t *)kiln_tensor_data(q);
  args.per_column = per_column;
  if (ctx->device_type == kDLCPU) return kiln_cpu_quantize_int8(op, &args);
  return quantize_int8_gpu(ctx, op, &args, stream);
}
