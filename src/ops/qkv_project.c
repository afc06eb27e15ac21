/*
 * qkv_project.c — kiln_qkv_project_int8 (W8A16) and kiln_qkv_project_int4 (W4A16): validate ->
 * CPU path, or enter the context and hand the validated kiln_qkv_args to
 * src/ops/qkv_project_gpu.c. The x, algo and kiln_qweight checks are kiln_matmul_int4's
 * (src/ops/matmul_int4.c), so both ops word their messages alike.
 *
 * Outputs: q, k and v must share no element. Byte spans are compared, except for two views of
 * one element size, orientation and pitch (e.g. column slices of one row-major [M, Nq+Nk+Nv]
 * buffer, whose spans interleave), which are compared row by row exactly. Against the inputs,
 * byte spans are compared.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "cpu/cpu.h"

static const char *const OUT[3] = {"q", "k", "v"};
static const char *const WNAME[3] = {"wq", "wk", "wv"};
static const char *const SNAME[3] = {"q_scale", "k_scale", "v_scale"};

kiln_qkv_opts kiln_qkv_opts_default(void) {
  kiln_qkv_opts o;
  memset(&o, 0, sizeof o);
  o.algo = KILN_QKV_AUTO;
  return o;
}

/* Whether two output views share an element (see the file comment). */
static bool outputs_share(const kiln_matrix *a, const kiln_matrix *b) {
  if (!kiln_matrix_overlap(a, b)) return false;
  const bool ar = a->cs == 1, br = b->cs == 1;
  const int64_t e = (int64_t)a->elem;
  const int64_t pitch = (ar ? a->rs : a->cs) * e;
  if (a->elem != b->elem || ar != br || pitch != (br ? b->rs : b->cs) * e) return true;
  /* line i of a covers [a + i·pitch, + wa), line j of b [b + j·pitch, + wb): they meet iff
   * -wb < d + t·pitch < wa for d = b - a and some t = j - i in [-(na - 1), nb - 1]. The window is
   * at most 2·pitch wide (wa, wb <= pitch), so d mod pitch and that minus pitch are the only
   * candidates. */
  const int64_t wa = (ar ? a->cols : a->rows) * e, wb = (br ? b->cols : b->rows) * e;
  const int64_t na = ar ? a->rows : a->cols, nb = br ? b->rows : b->cols;
  const int64_t d = (int64_t)((uintptr_t)b->data - (uintptr_t)a->data);
  int64_t r = d % pitch;
  if (r < 0) r += pitch;
  const int64_t cand[2] = {r, r - pitch};
  for (int c = 0; c < 2; c++) {
    if (cand[c] <= -wb || cand[c] >= wa) continue;
    const int64_t t = (cand[c] - d) / pitch;
    if (t >= -(na - 1) && t <= nb - 1) return true;
  }
  return false;
}

/* The outputs q, k, v: float matrices [M, n[i]] of one dtype, sharing no element, not overlapping
 * x. */
static kiln_status check_outputs(const kiln_context *ctx, const char *op, const DLTensor *const out[3],
                                 const int64_t n[3], const kiln_matrix *X, kiln_matrix Y[3]) {
  kiln_status st;
  for (int i = 0; i < 3; i++) {
    if ((st = kiln_check_float_matrix(ctx, op, OUT[i], out[i], 1, X->rows, n[i], true, &Y[i]))) return st;
    char d0[48], di[48];
    if (i > 0 && kiln_dt_code(Y[i].dtype) != kiln_dt_code(Y[0].dtype))
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s has dtype %s but q has %s; q, k and v must share one dtype (float32, float16 or "
                       "bfloat16)",
                       op, OUT[i], kiln_dtype_name(Y[i].dtype, di), kiln_dtype_name(Y[0].dtype, d0));
  }
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < i; j++)
      if (outputs_share(&Y[j], &Y[i]))
        return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                         "%s: %s overlaps %s in memory; q, k and v must be distinct outputs that share no element "
                         "(separate buffers, or disjoint column slices of one buffer)",
                         op, OUT[i], OUT[j]);
  for (int i = 0; i < 3; i++)
    if ((st = kiln_check_no_overlap(op, OUT[i], &Y[i], "x", X))) return st;
  return KILN_OK;
}

static void set_common(kiln_qkv_args *a, const kiln_matrix *X, const kiln_matrix Y[3], int algo) {
  memset(a, 0, sizeof *a);
  a->x = X->data;
  a->x_rs = X->rs, a->x_cs = X->cs;
  a->m = (int32_t)X->rows, a->k = (int32_t)X->cols;
  a->x_dtype = kiln_dt_code(X->dtype);
  a->y_dtype = kiln_dt_code(Y[0].dtype);
  a->algo = algo;
  for (int i = 0; i < 3; i++) {
    kiln_qkv_proj *p = &a->proj[i];
    p->y = Y[i].data;
    p->y_rs = Y[i].rs, p->y_cs = Y[i].cs;
    p->n = (int32_t)Y[i].cols;
  }
}

/* What both ops check first: the context, opts->algo (into *algo) and x. */
static kiln_status check_head(const kiln_context *ctx, const char *op, const kiln_qkv_opts *opts, const DLTensor *x,
                              int *algo, kiln_matrix *X) {
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  *algo = (int)(opts ? opts->algo : kiln_qkv_opts_default().algo);
  if ((st = kiln_check_w16_algo(ctx, op, *algo, "KILN_QKV"))) return st;
  return kiln_check_w16_x(ctx, op, x, X);
}

static kiln_status run(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, bool int8,
                       CUstream stream) {
  if (ctx->device_type == kDLCPU) return int8 ? kiln_cpu_qkv_int8(op, args) : kiln_cpu_qkv_int4(op, args);
  kiln_ctx_scope scope;
  kiln_status st = kiln_ctx_enter(ctx, &scope, op);
  if (st) return st;
  st = int8 ? kiln_qkv_int8_gpu(ctx, op, args, stream) : kiln_qkv_int4_gpu(ctx, op, args, stream);
  kiln_ctx_leave(ctx, &scope);
  return st;
}

/* ---- PREFILL (both formats): each weight dequantized into the caller's workspace as x's dtype,
 * then kiln_matmul. When q, k and v are adjacent column slices of one row-major buffer (y
 * [M, Nq + Nk + Nv] split three ways, the usual fused output) and the workspace holds all three,
 * the weights go side by side into one [K, Ntot] matrix and one GEMM writes the [M, Ntot] view;
 * otherwise each projection in turn reuses a workspace of the largest weight's size (the stream
 * orders the reuse). */
static bool outputs_adjacent(const kiln_matrix Y[3]) {
  int64_t n = 0;
  for (int i = 0; i < 3; i++) {
    if (Y[i].cs != 1 || Y[i].rs != Y[0].rs || (i > 0 && Y[i].data != Y[i - 1].data + Y[i - 1].cols * (int64_t)Y[i].elem))
      return false;
    n += Y[i].cols;
  }
  return Y[0].rs >= n;
}
/* merged: the three weights side by side; else the largest */
static size_t prefill_bytes(int64_t k, const int64_t n[3], bool merged) {
  const int64_t big = n[0] > n[1] ? (n[0] > n[2] ? n[0] : n[2]) : (n[1] > n[2] ? n[1] : n[2]);
  return (size_t)k * (size_t)(merged ? n[0] + n[1] + n[2] : big) * 2;
}
/* What the _workspace_size queries answer for checked views: PREFILL's bytes, merged when the
 * outputs allow it; 0 on a CPU context. */
static size_t query_bytes(const kiln_context *ctx, const kiln_matrix *X, const kiln_matrix Y[3]) {
  const int64_t n[3] = {Y[0].cols, Y[1].cols, Y[2].cols};
  return ctx->device_type == kDLCPU ? 0 : prefill_bytes(X->cols, n, outputs_adjacent(Y));
}

static kiln_status dequantize(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, int i, bool int8,
                              void *dst, int64_t ld, CUstream stream) {
  kiln_ctx_scope scope;
  kiln_status st = kiln_ctx_enter(ctx, &scope, op);
  if (st) return st;
  if (int8) {
    st = kiln_w8_dequantize_gpu(ctx, op, &args->proj[i], args->k, args->x_dtype, dst, ld, stream);
  } else {
    kiln_int4_args a;
    kiln_qkv_proj_as_int4(args, i, &a);
    st = kiln_w4_dequantize_gpu(ctx, op, &a, dst, ld, stream);
  }
  kiln_ctx_leave(ctx, &scope);
  return st;
}

/* y [M, n] (rows rs apart, columns cs) = x · w [K, n] (row-major, rows ld apart) */
static kiln_status gemm(const kiln_context *ctx, const char *op, const kiln_matrix *X, DLDevice dev, void *w, int64_t n,
                        int64_t ld, const kiln_matrix *Y, CUstream stream) {
  int64_t xs[2] = {X->rows, X->cols}, xst[2] = {X->rs, X->cs}, wsh[2] = {X->cols, n}, wst[2] = {ld, 1};
  int64_t ys[2] = {X->rows, n}, yst[2] = {Y->rs, Y->cs};
  const DLTensor XT = {.data = X->data, .device = dev, .ndim = 2, .dtype = X->dtype, .shape = xs, .strides = xst};
  const DLTensor WT = {.data = w, .device = dev, .ndim = 2, .dtype = X->dtype, .shape = wsh, .strides = wst};
  const DLTensor YT = {.data = Y->data, .device = dev, .ndim = 2, .dtype = Y->dtype, .shape = ys, .strides = yst};
  const kiln_status st = kiln_matmul((kiln_context *)ctx, &XT, &WT, &YT, NULL, stream);
  if (st) {
    char why[512]; /* kiln_matmul's message, attributed to this op (copied: kiln_fail writes that buffer) */
    snprintf(why, sizeof why, "%s", kiln_last_error());
    return kiln_fail(st, "%s (PREFILL): %s", op, why);
  }
  return KILN_OK;
}

/* int4 PREFILL on sm_90a: the three projections in one kernel launch, the workspace unused
 * (kiln_w4_wgmma), when that path takes them (0 on other devices and the CPU); a: the
 * projections with n > 0 as kiln_matmul_int4's arguments. Returns their count, or 0. */
static int w4_fused(const kiln_context *ctx, const kiln_qkv_args *args, kiln_int4_args a[3]) {
  const int count = kiln_qkv_nonempty_as_int4(args, a, NULL);
  return count && kiln_w4_wgmma_fits(ctx, a, count) ? count : 0;
}

/* fused_count > 0: the one-kernel path (int4: w4_fused's projections in fused; int8:
 * kiln_w8_wgmma_fits held) */
static kiln_status prefill(const kiln_context *ctx, const char *op, DLDevice dev, const kiln_matrix *X,
                           const kiln_matrix Y[3], const kiln_qkv_args *args, bool int8, bool merged, void *ws,
                           const kiln_int4_args *fused, int fused_count, CUstream stream) {
  kiln_status st = KILN_OK;
  if (fused_count) {
    kiln_ctx_scope scope;
    if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
    st = int8 ? kiln_w8_wgmma(ctx, op, args, stream) : kiln_w4_wgmma(ctx, op, fused, fused_count, stream);
    kiln_ctx_leave(ctx, &scope);
    return st;
  }
  if (merged) {
    const int64_t ntot = (int64_t)args->proj[0].n + args->proj[1].n + args->proj[2].n;
    int64_t col = 0;
    for (int i = 0; i < 3 && !st; i++) {
      st = dequantize(ctx, op, args, i, int8, (char *)ws + col * 2, ntot, stream);
      col += args->proj[i].n;
    }
    return st ? st : gemm(ctx, op, X, dev, ws, ntot, ntot, &Y[0], stream);
  }
  for (int i = 0; i < 3 && !st; i++)
    if (!(st = dequantize(ctx, op, args, i, int8, ws, args->proj[i].n, stream)))
      st = gemm(ctx, op, X, dev, ws, args->proj[i].n, args->proj[i].n, &Y[i], stream);
  return st;
}

/* PREFILL's workspace and algo for either op (kiln_w16_prefill_plan, plus the int8 weights and
 * scales, which are not kiln_qweights). */
static kiln_status plan(const kiln_context *ctx, const char *op, const char *size_fn, bool no_ws, int *algo,
                        bool *merged, const kiln_qkv_opts *opts, const kiln_matrix *X, const kiln_matrix Y[3],
                        const kiln_qweight *const *w4, const kiln_matrix *W8, const kiln_matrix *S8) {
  void *ws = opts ? opts->workspace : NULL;
  const size_t ws_bytes = opts ? opts->workspace_bytes : 0;
  const int64_t n[3] = {Y[0].cols, Y[1].cols, Y[2].cols};
  *merged = outputs_adjacent(Y) && ws && ws_bytes >= prefill_bytes(X->cols, n, true);
  const size_t need = prefill_bytes(X->cols, n, *merged);
  /* AUTO: PREFILL from M = 256 with the workspace. At K 4096, Nq 4096, Nk = Nv 1024 on the H200,
   * int4 DECODE takes 59.7 µs at M = 128 against PREFILL's 77.2 (three dequantize passes and
   * three GEMMs, two of them narrow), PREFILL 77.8 against 106.9 at M = 256 (docs/performance.md;
   * measured before the merged GEMM). int8 with the merged GEMM (2026-12-03): DECODE 78.9 against
   * PREFILL 82.3 µs at M = 128, PREFILL 88.2 against 147.6 at M = 256: the same threshold, also
   * without a workspace where int4's one-kernel path takes all three (no_ws). */
  kiln_status st = kiln_w16_prefill_plan(ctx, op, "KILN_QKV", size_fn, 256, need, !*merged, no_ws, algo, ws, ws_bytes,
                                         X, Y, OUT, 3, w4, WNAME, w4 ? 3 : 0);
  if (st || !W8 || *algo != KILN_QKV_PREFILL) return st;
  for (int i = 0; i < 3 && !st; i++)
    if (!(st = kiln_check_disjoint(op, "opts->workspace", ws, (int64_t)need, WNAME[i], W8[i].data, W8[i].span_bytes)))
      st = kiln_check_disjoint(op, "opts->workspace", ws, (int64_t)need, SNAME[i], S8[i].data, S8[i].span_bytes);
  return st;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_qkv_project_int8                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* An int8 (or uint8) weight [K, N], row- or column-major. */
static kiln_status check_int8_weight(const kiln_context *ctx, const char *op, int i, const DLTensor *w,
                                     const DLTensor *x, int64_t K, kiln_matrix *m) {
  kiln_status st = kiln_check_tensor(ctx, op, WNAME[i], w);
  if (st) return st;
  char dn[48], sw[160], sx[160];
  if (!kiln_dtype_is(w->dtype, kDLInt, 8) && !kiln_dtype_is(w->dtype, kDLUInt, 8))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s has dtype %s; expected int8 (or uint8, read as int8 bit patterns); quantize the weight "
                     "first (kiln_quantize_int8)",
                     op, WNAME[i], kiln_dtype_name(w->dtype, dn));
  if ((st = kiln_matrix_view(op, WNAME[i], w, false, m))) return st;
  if (m->rows != K)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s has shape %s but x has K = %" PRId64 " (shape %s); the weight's rows must match x's "
                     "columns (pass a Linear weight [N, K] as its transposed view)",
                     op, WNAME[i], kiln_shape_str(w, sw, sizeof sw), K, kiln_shape_str(x, sx, sizeof sx));
  return KILN_OK;
}

/* An f32 scale vector [1] or [n], any stride: data, element stride (0 for [1]) and byte range. */
static kiln_status check_scale(const kiln_context *ctx, const char *op, int i, const DLTensor *s, int64_t n,
                               const float **data, int64_t *stride_out, kiln_matrix *range) {
  kiln_status st = kiln_check_tensor(ctx, op, SNAME[i], s);
  if (st) return st;
  char dn[48], sh[160];
  if (!KILN_IS_F32(s->dtype))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s; expected float32; convert it with .float()",
                     op, SNAME[i], kiln_dtype_name(s->dtype, dn));
  if (s->ndim != 1 || (s->shape[0] != 1 && s->shape[0] != n))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s has shape %s; expected [1] (one scale for the projection) or [%" PRId64 "] (one per "
                     "column of %s)",
                     op, SNAME[i], kiln_shape_str(s, sh, sizeof sh), n, WNAME[i]);
  const int64_t len = s->shape[0], stride = len > 1 ? kiln_tensor_stride(s, 0) : 0;
  int64_t span;
  if (__builtin_mul_overflow(len - 1, stride, &span) || __builtin_add_overflow(span, 1, &span) ||
      __builtin_mul_overflow(span, (int64_t)sizeof(float), &span) ||
      (uintptr_t)kiln_tensor_data(s) + (uint64_t)span < (uintptr_t)kiln_tensor_data(s))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s (shape %s, stride %" PRId64 ") spans more bytes than a 64-bit address holds", op,
                     SNAME[i], kiln_shape_str(s, sh, sizeof sh), stride);
  memset(range, 0, sizeof *range);
  range->data = kiln_tensor_data(s);
  range->span_bytes = span;
  *data = (const float *)range->data;
  *stride_out = stride;
  return KILN_OK;
}

/* The checks kiln_qkv_project_int8 and its workspace query share: x, the weights, the scales
 * (their data and strides into sdata, sstride), the outputs, and that no output shares a byte
 * with a weight or a scale. */
static kiln_status check_int8_call(const kiln_context *ctx, const char *op, const DLTensor *x, const DLTensor *const w[3],
                                   const DLTensor *const s[3], const DLTensor *const out[3], kiln_matrix *X,
                                   kiln_matrix W[3], kiln_matrix S[3], kiln_matrix Y[3], const float *sdata[3],
                                   int64_t sstride[3]) {
  kiln_status st = kiln_check_w16_x(ctx, op, x, X);
  if (st) return st;
  int64_t n[3];
  for (int i = 0; i < 3; i++) {
    if ((st = check_int8_weight(ctx, op, i, w[i], x, X->cols, &W[i]))) return st;
    n[i] = W[i].cols;
  }
  for (int i = 0; i < 3; i++)
    if ((st = check_scale(ctx, op, i, s[i], n[i], &sdata[i], &sstride[i], &S[i]))) return st;
  if ((st = check_outputs(ctx, op, out, n, X, Y))) return st;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      if ((st = kiln_check_no_overlap(op, OUT[i], &Y[i], WNAME[j], &W[j])) ||
          (st = kiln_check_no_overlap(op, OUT[i], &Y[i], SNAME[j], &S[j])))
        return st;
  return KILN_OK;
}

kiln_status kiln_qkv_project_int8_workspace_size(kiln_context *ctx, const DLTensor *x, const DLTensor *wq,
                                                 const DLTensor *wk, const DLTensor *wv, const DLTensor *q_scale,
                                                 const DLTensor *k_scale, const DLTensor *v_scale, const DLTensor *q,
                                                 const DLTensor *k, const DLTensor *v, size_t *bytes) {
  const char *op = "kiln_qkv_project_int8_workspace_size";
  kiln_status st = kiln_check_size_query(ctx, op, bytes);
  if (st) return st; /* a failed query leaves *bytes as it was */
  const DLTensor *const w[3] = {wq, wk, wv}, *const s[3] = {q_scale, k_scale, v_scale}, *const out[3] = {q, k, v};
  kiln_matrix X, W[3], S[3], Y[3];
  const float *sdata[3];
  int64_t sstride[3];
  if ((st = check_int8_call(ctx, op, x, w, s, out, &X, W, S, Y, sdata, sstride))) return st;
  *bytes = query_bytes(ctx, &X, Y);
  return KILN_OK;
}

kiln_status kiln_qkv_project_int8(kiln_context *ctx, const DLTensor *x, const DLTensor *wq, const DLTensor *wk,
                                  const DLTensor *wv, const DLTensor *q_scale, const DLTensor *k_scale,
                                  const DLTensor *v_scale, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                                  const kiln_qkv_opts *opts, CUstream stream) {
  const char *op = "kiln_qkv_project_int8";
  int algo;
  kiln_matrix X, W[3], S[3], Y[3];
  kiln_status st = check_head(ctx, op, opts, x, &algo, &X);
  if (st) return st;
  const DLTensor *const w[3] = {wq, wk, wv}, *const s[3] = {q_scale, k_scale, v_scale}, *const out[3] = {q, k, v};
  const float *sdata[3];
  int64_t sstride[3];
  if ((st = check_int8_call(ctx, op, x, w, s, out, &X, W, S, Y, sdata, sstride))) return st;

  kiln_qkv_args args;
  set_common(&args, &X, Y, algo);
  for (int i = 0; i < 3; i++) {
    kiln_qkv_proj *p = &args.proj[i];
    p->w = (const int8_t *)W[i].data;
    p->w_rs = W[i].rs, p->w_cs = W[i].cs;
    p->scale = sdata[i];
    p->scale_stride = sstride[i];
  }
  /* PREFILL in one kernel on sm_90a where it applies (no workspace needed) */
  const bool fused = kiln_w8_wgmma_fits(ctx, &args);
  bool merged;
  if ((st = plan(ctx, op, "kiln_qkv_project_int8_workspace_size", fused, &algo, &merged, opts, &X, Y, NULL, W, S)))
    return st;
  args.algo = algo;
  if (algo == KILN_QKV_PREFILL)
    return prefill(ctx, op, x->device, &X, Y, &args, true, merged, opts ? opts->workspace : NULL, NULL, fused ? 3 : 0,
                   stream);
  return run(ctx, op, &args, true, stream);
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_qkv_project_int4                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* The checks kiln_qkv_project_int4 and its workspace query share: x, the three weights, the
 * outputs (into X, Y) and that no output shares a byte with a weight. */
static kiln_status check_int4_call(const kiln_context *ctx, const char *op, const DLTensor *x,
                                   const kiln_qweight *const w[3], const DLTensor *const out[3], kiln_matrix *X,
                                   kiln_matrix Y[3]) {
  kiln_status st = kiln_check_w16_x(ctx, op, x, X);
  if (st) return st;
  int64_t n[3];
  for (int i = 0; i < 3; i++) {
    if ((st = kiln_check_int4_weight(ctx, op, WNAME[i], w[i], x, X->cols))) return st;
    n[i] = w[i]->n;
  }
  if ((st = check_outputs(ctx, op, out, n, X, Y))) return st;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      if ((st = kiln_check_int4_weight_disjoint(op, OUT[i], &Y[i], WNAME[j], w[j]))) return st;
  return KILN_OK;
}

kiln_status kiln_qkv_project_int4_workspace_size(kiln_context *ctx, const DLTensor *x, const kiln_qweight *wq,
                                                 const kiln_qweight *wk, const kiln_qweight *wv, const DLTensor *q,
                                                 const DLTensor *k, const DLTensor *v, size_t *bytes) {
  const char *op = "kiln_qkv_project_int4_workspace_size";
  kiln_status st = kiln_check_size_query(ctx, op, bytes);
  if (st) return st; /* a failed query leaves *bytes as it was */
  const kiln_qweight *const w[3] = {wq, wk, wv};
  const DLTensor *const out[3] = {q, k, v};
  kiln_matrix X, Y[3];
  if ((st = check_int4_call(ctx, op, x, w, out, &X, Y))) return st;
  *bytes = query_bytes(ctx, &X, Y);
  return KILN_OK;
}

kiln_status kiln_qkv_project_int4(kiln_context *ctx, const DLTensor *x, const kiln_qweight *wq, const kiln_qweight *wk,
                                  const kiln_qweight *wv, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                                  const kiln_qkv_opts *opts, CUstream stream) {
  const char *op = "kiln_qkv_project_int4";
  int algo;
  kiln_matrix X, Y[3];
  kiln_status st = check_head(ctx, op, opts, x, &algo, &X);
  if (st) return st;
  const kiln_qweight *const w[3] = {wq, wk, wv};
  const DLTensor *const out[3] = {q, k, v};
  if ((st = check_int4_call(ctx, op, x, w, out, &X, Y))) return st;
  if (ctx->device_type == kDLCPU)
    for (int i = 0; i < 3; i++)
      if ((st = kiln_check_int4_weight_values(op, WNAME[i], w[i]))) return st;
  kiln_qkv_args args;
  set_common(&args, &X, Y, algo);
  for (int i = 0; i < 3; i++) {
    kiln_qkv_proj *p = &args.proj[i];
    p->codes = w[i]->codes;
    p->scales = w[i]->scales;
    p->zeros = w[i]->zeros;
    p->perm = w[i]->perm;
    p->group = (int32_t)w[i]->group;
  }
  kiln_int4_args a[3];
  const int fused = w4_fused(ctx, &args, a);
  bool merged;
  if ((st = plan(ctx, op, "kiln_qkv_project_int4_workspace_size", fused > 0, &algo, &merged, opts, &X, Y, w, NULL,
                 NULL)))
    return st;
  args.algo = algo;
  if (algo == KILN_QKV_PREFILL)
    return prefill(ctx, op, x->device, &X, Y, &args, false, merged, opts ? opts->workspace : NULL, a, fused,
                   stream);
  return run(ctx, op, &args, false, stream);
}
