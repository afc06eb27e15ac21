/*
 * qweight.c — kiln_qweight: native-layout sizes, importers from the source formats of SPEC 4.3
 * (reference, GPTQ v1/v2, AWQ), round-to-nearest quantization and dequantization (CPU).
 *
 * Validation follows src/ops/matmul_int8.c: every argument is checked before anything is
 * written, and each message names the op, the argument, what was found and what was expected.
 *
 * Exactness: every importer stores the source's codes, f16 scale bits and zero points unchanged
 * (GPTQ v1's nibble + 1, the reference format's signed code + 8 with zero 8), so dequantizing
 *   w = f16_to_f32(scale) · (float)(q − z)
 * reproduces each source format's own formula bit for bit (q − z is a small exact integer).
 *
 * Act-order (GPTQ g_idx not equal to k / G): rows are stably sorted by g_idx and every group must
 * hold exactly G rows; out->perm[i] receives the original k of stored row i. When g_idx is NULL
 * or trivial and out->perm is non-NULL, perm is filled with the identity (so a non-NULL perm is
 * always valid); out->perm may be NULL then.
 *
 * On a GPU context the same validation runs on the host, then kernels/qweight.cu does the work
 * on the caller's stream, bit for bit as here. What the CPU reads from the data before writing
 * (g_idx's values, the weights' finiteness, zero points above 16) a GPU op cannot read without a
 * sync, so there it is the caller's contract (kiln.h) and the kernels keep every index in bounds
 * whatever the data: a GPU import with a g_idx always writes perm, a permutation even for an
 * invalid g_idx.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "cpu/cpu.h"

static const char *format_name(kiln_qformat f) {
  switch (f) {
    case KILN_QFORMAT_REFERENCE: return "KILN_QFORMAT_REFERENCE";
    case KILN_QFORMAT_GPTQ_V1: return "KILN_QFORMAT_GPTQ_V1";
    case KILN_QFORMAT_GPTQ_V2: return "KILN_QFORMAT_GPTQ_V2";
    case KILN_QFORMAT_AWQ: return "KILN_QFORMAT_AWQ";
  }
  return "?";
}

/* k, n, group of a native weight. */
static kiln_status check_layout(const char *op, int64_t k, int64_t n, int64_t group) {
  if (k < 1 || n < 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: k = %" PRId64 ", n = %" PRId64 "; both must be >= 1", op, k,
                     n);
  if (k % 8 != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: k = %" PRId64 " is not a multiple of 8; the native layout packs 8 k's per uint32 word "
                     "(pad K with zero rows)",
                     op, k);
  if (group != 32 && group != 64 && group != 128 && group != k)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: group = %" PRId64 "; expected 32, 64, 128 or k (= %" PRId64 ", one group per column)", op,
                     group, k);
  if (k % group != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: k = %" PRId64 " is not a multiple of group = %" PRId64, op, k,
                     group);
  int64_t t;
  if (__builtin_mul_overflow(k, n, &t) || t > INT64_MAX / 4 || k > INT32_MAX)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: k = %" PRId64 ", n = %" PRId64 " is too large (k <= 2^31 - 1 and k·n·4 must fit in int64)",
                     op, k, n);
  return KILN_OK;
}

kiln_status kiln_qweight_bytes(int64_t k, int64_t n, int64_t group, size_t *codes_bytes, size_t *scales_bytes,
                               size_t *zeros_bytes, size_t *perm_bytes) {
  const char *op = "kiln_qweight_bytes";
  kiln_status st = check_layout(op, k, n, group);
  if (st) return st;
  if (codes_bytes) *codes_bytes = (size_t)(k / 8) * (size_t)n * sizeof(uint32_t);
  if (scales_bytes) *scales_bytes = (size_t)(k / group) * (size_t)n * sizeof(uint16_t);
  if (zeros_bytes) *zeros_bytes = (size_t)(k / group) * (size_t)n;
  if (perm_bytes) *perm_bytes = (size_t)k * sizeof(int32_t);
  return KILN_OK;
}

kiln_status kiln_check_qweight_buffers(const char *op, const char *arg, const kiln_qweight *w, const char *hint) {
  if (!w->codes || !w->scales || !w->zeros)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s->%s is NULL; point codes, scales and zeros %s", op, arg,
                     !w->codes ? "codes" : !w->scales ? "scales" : "zeros", hint);
  /* A misaligned u32 load is a fault on a GPU (the context is lost) and undefined behaviour in C */
  const struct {
    const void *p;
    unsigned align;
    const char *name, *what;
  } b[3] = {{w->codes, 4, "codes", "uint32 words"}, {w->scales, 2, "scales", "float16 values"},
            {w->perm, 4, "perm", "int32 indices"}};
  for (int i = 0; i < 3; i++)
    if ((uintptr_t)b[i].p % b[i].align)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s->%s = %p is not %u-byte aligned; it holds %s, so point it at a %u-byte boundary "
                       "(allocations start at one)",
                       op, arg, b[i].name, b[i].p, b[i].align, b[i].what, b[i].align);
  return KILN_OK;
}

/* The struct: non-NULL, layout, buffers, device. */
static kiln_status check_qweight(const kiln_context *ctx, const char *op, const char *arg, const kiln_qweight *qw) {
  if (!qw) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass a kiln_qweight", op, arg);
  kiln_status st = check_layout(op, qw->k, qw->n, qw->group);
  if (st) return st;
  if ((st = kiln_check_qweight_buffers(op, arg, qw, "at buffers of the sizes kiln_qweight_bytes gives"))) return st;
  return kiln_check_device(ctx, op, arg, "->device is", qw->device, "set device to {kDLCPU, 0} for host buffers",
                           "copy the weight's buffers");
}

/* Enqueues kernels/qweight.cu's kernel id over `items` independent items (grid-stride, a few
 * waves of blocks at most), or over one block per sort key (KILN_K_QWEIGHT_SORT). The caller has
 * entered the context. */
static kiln_status qweight_launch(const kiln_context *ctx, const char *op, kiln_kernel_id id, kiln_qweight_args *a,
                                  int64_t items, CUstream stream) {
  const int64_t threads = 256, cap = (int64_t)(ctx->info.sm_count > 0 ? ctx->info.sm_count : 1) * 16;
  int64_t blocks = id == KILN_K_QWEIGHT_SORT ? items : (items + threads - 1) / threads;
  if (blocks > cap) blocks = cap;
  void *params[] = {a};
  return kiln_launch(ctx, id, (unsigned)blocks, 1, 1, (unsigned)threads, 0, stream, params, op);
}

/* The kernels of a GPU context's call, in order on stream, inside the context. */
static kiln_status qweight_run_gpu(const kiln_context *ctx, const char *op, kiln_qweight_args *a,
                                   const kiln_kernel_id *ids, const int64_t *items, int count, CUstream stream) {
  kiln_ctx_scope scope;
  kiln_status st = kiln_ctx_enter(ctx, &scope, op);
  if (st) return st;
  for (int i = 0; i < count && !st; i++) st = qweight_launch(ctx, op, ids[i], a, items[i], stream);
  kiln_ctx_leave(ctx, &scope);
  return st;
}

/* The native buffers of q as kernel arguments. */
static kiln_qweight_args native_args(const kiln_qweight *q) {
  kiln_qweight_args a;
  memset(&a, 0, sizeof a);
  a.k = q->k, a.n = q->n, a.group = q->group;
  a.codes = q->codes, a.scales = q->scales, a.zeros = q->zeros, a.perm = q->perm;
  return a;
}

/* A rank-2 (rank-1 when cols < 0) source tensor of given dtypes and exact shape; element strides. */
typedef struct src2d {
  const char *data;
  int64_t rs, cs;
  size_t span;
} src2d;

static kiln_status check_src(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *t,
                             int64_t rows, int64_t cols, int kind, const char *what, src2d *s) {
  /* kind 0: int32 or uint32 packed words; 1: float16 scales; 2: int32 g_idx */
  kiln_status st = kiln_check_tensor(ctx, op, arg, t);
  if (st) return st;
  char dn[48], sh[160];
  const bool ok = kind == 0   ? kiln_dtype_is(t->dtype, kDLInt, 32) || kiln_dtype_is(t->dtype, kDLUInt, 32)
                  : kind == 1 ? KILN_IS_F16(t->dtype)
                              : kiln_dtype_is(t->dtype, kDLInt, 32);
  if (!ok)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s; expected %s (%s)", op, arg,
                     kiln_dtype_name(t->dtype, dn),
                     kind == 0 ? "int32 (or uint32) packed words" : kind == 1 ? "float16" : "int32", what);
  const int nd = cols < 0 ? 1 : 2;
  if (t->ndim != nd || t->shape[0] != rows || (nd == 2 && t->shape[1] != cols)) {
    if (nd == 1)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; expected [%" PRId64 "] (%s)", op, arg,
                       kiln_shape_str(t, sh, sizeof sh), rows, what);
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; expected [%" PRId64 ", %" PRId64 "] (%s)", op,
                     arg, kiln_shape_str(t, sh, sizeof sh), rows, cols, what);
  }
  s->rs = rows > 1 ? kiln_tensor_stride(t, 0) : 0;
  s->cs = nd == 2 && cols > 1 ? kiln_tensor_stride(t, 1) : 0;
  const int64_t elem = (int64_t)kiln_dtype_size(t->dtype);
  int64_t span = 1, term;
  if (__builtin_mul_overflow(rows - 1, s->rs, &term) || __builtin_add_overflow(span, term, &span) ||
      (nd == 2 && (__builtin_mul_overflow(cols - 1, s->cs, &term) || __builtin_add_overflow(span, term, &span))) ||
      __builtin_mul_overflow(span, elem, &span) ||
      (uintptr_t)kiln_tensor_data(t) + (uint64_t)span < (uintptr_t)kiln_tensor_data(t))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s (shape %s) spans more bytes than a 64-bit address holds", op,
                     arg, kiln_shape_str(t, sh, sizeof sh));
  s->data = kiln_tensor_data(t);
  s->span = (size_t)span;
  return KILN_OK;
}

static inline uint32_t word_at(const src2d *s, int64_t r, int64_t c) {
  uint32_t w;
  memcpy(&w, s->data + (size_t)(r * s->rs + c * s->cs) * 4, 4);
  return w;
}
static inline uint16_t half_at(const src2d *s, int64_t r, int64_t c) {
  uint16_t h;
  memcpy(&h, s->data + (size_t)(r * s->rs + c * s->cs) * 2, 2);
  return h;
}

/* The reference format's packed codes: one dense buffer of K/8 · N uint32 words read as
 * packed[(k/8) + n·(K/8)] (SPEC 4.3). The reference labels it [K/8, N] although its bytes are
 * N-major, so a dense tensor of shape [K/8, N] (row-major strides, as the reference labels it, or
 * the honest column-major strides (1, K/8)) or [N, K/8] (row-major) is accepted, all read as that
 * flat buffer; any other striding is rejected. */
static kiln_status check_reference_qweight(const kiln_context *ctx, const char *op, const DLTensor *t, int64_t K,
                                           int64_t N, src2d *s) {
  kiln_status st = kiln_check_tensor(ctx, op, "qweight", t);
  if (st) return st;
  char dn[48], sh[160];
  if (!kiln_dtype_is(t->dtype, kDLInt, 32) && !kiln_dtype_is(t->dtype, kDLUInt, 32))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: qweight has dtype %s; expected uint32 (or int32) packed words (KILN_QFORMAT_REFERENCE)", op,
                     kiln_dtype_name(t->dtype, dn));
  const int64_t R = K / 8;
  const bool kn = t->ndim == 2 && t->shape[0] == R && t->shape[1] == N;
  const bool nk = t->ndim == 2 && t->shape[0] == N && t->shape[1] == R;
  if (!kn && !nk)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: qweight has shape %s; expected [%" PRId64 ", %" PRId64 "] (KILN_QFORMAT_REFERENCE "
                     "[K/8, N] stored N-major, for k = %" PRId64 ", n = %" PRId64 ") or its row-major [N, K/8]",
                     op, kiln_shape_str(t, sh, sizeof sh), R, N, K, N);
  const int64_t d0 = t->shape[0], d1 = t->shape[1];
  const int64_t s0 = d0 > 1 ? kiln_tensor_stride(t, 0) : 0, s1 = d1 > 1 ? kiln_tensor_stride(t, 1) : 0;
  const bool row_major = (d1 == 1 || s1 == 1) && (d0 == 1 || s0 == d1);
  const bool col_major = kn && (d0 == 1 || s0 == 1) && (d1 == 1 || s1 == d0);
  if (!row_major && !col_major)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: qweight (shape %s) has strides (%" PRId64 ", %" PRId64 "); KILN_QFORMAT_REFERENCE reads "
                     "one dense buffer packed[(k/8) + n·(K/8)]; pass the buffer as the reference stores it",
                     op, kiln_shape_str(t, sh, sizeof sh), s0, s1);
  s->data = kiln_tensor_data(t);
  s->rs = s->cs = 0;
  s->span = (size_t)(R * N) * 4;
  return KILN_OK;
}

/* The native buffers must not overlap each other nor any source. */
static kiln_status check_out_overlap(const char *op, const kiln_qweight *q, bool with_perm, const char *in_name,
                                     const void *in, size_t in_bytes) {
  size_t cb, sb, zb, pb;
  const kiln_status st = kiln_qweight_bytes(q->k, q->n, q->group, &cb, &sb, &zb, &pb);
  if (st) return st;
  const void *p[4] = {q->codes, q->scales, q->zeros, q->perm};
  const size_t b[4] = {cb, sb, zb, with_perm ? pb : 0};
  static const char *nm[4] = {"codes", "scales", "zeros", "perm"};
  for (int i = 0; i < 4; i++) {
    if (in && kiln_spans_overlap(p[i], b[i], in, in_bytes))
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out->%s overlaps %s in memory; the output must be a "
                       "separate buffer", op, nm[i], in_name);
    if (!in)
      for (int j = i + 1; j < 4; j++)
        if (kiln_spans_overlap(p[i], b[i], p[j], b[j]))
          return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out->%s overlaps out->%s in memory; give each native "
                           "buffer its own memory", op, nm[i], nm[j]);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_qweight_import                                                                        */
/* ------------------------------------------------------------------------------------------ */
static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

kiln_status kiln_qweight_import(kiln_context *ctx, kiln_qformat format, const DLTensor *qweight,
                                const DLTensor *qzeros, const DLTensor *scales, const DLTensor *g_idx,
                                kiln_qweight *out, CUstream stream) {
  const char *op = "kiln_qweight_import";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  if (format != KILN_QFORMAT_REFERENCE && format != KILN_QFORMAT_GPTQ_V1 && format != KILN_QFORMAT_GPTQ_V2 &&
      format != KILN_QFORMAT_AWQ)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: format is %d; expected KILN_QFORMAT_REFERENCE, KILN_QFORMAT_GPTQ_V1, "
                     "KILN_QFORMAT_GPTQ_V2 or KILN_QFORMAT_AWQ",
                     op, (int)format);
  const char *fname = format_name(format);
  if ((st = check_qweight(ctx, op, "out", out))) return st;
  const int64_t K = out->k, N = out->n, G = out->group, NG = K / G;
  const bool gptq = format == KILN_QFORMAT_GPTQ_V1 || format == KILN_QFORMAT_GPTQ_V2;

  if (format == KILN_QFORMAT_REFERENCE && G != 128)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: out->group = %" PRId64 " but %s has group 128 (scales [K/128, N]); set out->group = 128",
                     op, G, fname);
  if ((format == KILN_QFORMAT_AWQ || gptq) && N % 8 != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: n = %" PRId64 " is not a multiple of 8; %s packs qzeros%s 8 columns per int32 word "
                     "along N",
                     op, N, fname, format == KILN_QFORMAT_AWQ ? " and qweight" : "");
  if (format == KILN_QFORMAT_REFERENCE && qzeros)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: qzeros is given but %s is symmetric (signed codes, no zero points); pass NULL", op, fname);
  if (!gptq && g_idx)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: g_idx is given but only GPTQ formats have one (format %s); "
                     "pass NULL", op, fname);
  if (gptq && !qzeros)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: qzeros is NULL; %s needs qzeros int32 [K/G, N/8]", op, fname);
  if (format == KILN_QFORMAT_AWQ && !qzeros)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: qzeros is NULL; %s needs qzeros int32 [K/G, N/8]", op, fname);

  src2d Q, Z, S, I;
  memset(&Z, 0, sizeof Z);
  memset(&I, 0, sizeof I);
  char what[160];
  if (format == KILN_QFORMAT_AWQ) {
    snprintf(what, sizeof what, "%s qweight [K, N/8] for k = %" PRId64 ", n = %" PRId64, fname, K, N);
    st = check_src(ctx, op, "qweight", qweight, K, N / 8, 0, what, &Q);
  } else if (format == KILN_QFORMAT_REFERENCE) {
    st = check_reference_qweight(ctx, op, qweight, K, N, &Q);
  } else {
    snprintf(what, sizeof what, "%s qweight [K/8, N] for k = %" PRId64 ", n = %" PRId64, fname, K, N);
    st = check_src(ctx, op, "qweight", qweight, K / 8, N, 0, what, &Q);
  }
  if (st) return st;
  if (qzeros) {
    snprintf(what, sizeof what, "%s qzeros [K/G, N/8] for k = %" PRId64 ", n = %" PRId64 ", group = %" PRId64, fname,
             K, N, G);
    if ((st = check_src(ctx, op, "qzeros", qzeros, NG, N / 8, 0, what, &Z))) return st;
  }
  snprintf(what, sizeof what, "%s scales [K/G, N] for k = %" PRId64 ", n = %" PRId64 ", group = %" PRId64, fname, K,
           N, G);
  if ((st = check_src(ctx, op, "scales", scales, NG, N, 1, what, &S))) return st;
  if (g_idx) {
    snprintf(what, sizeof what, "GPTQ g_idx [K], one group index per row, for k = %" PRId64, K);
    if ((st = check_src(ctx, op, "g_idx", g_idx, K, -1, 2, what, &I))) return st;
  }

  /* On a GPU context g_idx's values stay on the device: perm is always written (the identity for
   * a trivial g_idx), and the values are the caller's contract (kiln.h). */
  const bool gpu = ctx->device_type != kDLCPU;
  if (gpu && g_idx && !out->perm)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: g_idx is given but out->perm is NULL; on a GPU context kiln cannot tell an act-order "
                     "g_idx from a trivial one without reading it back, so point out->perm at an int32 [K] buffer "
                     "(or pass g_idx = NULL when g_idx[k] == k / group for every k)",
                     op);

  /* Act-order: a stable counting sort of the rows by g_idx. */
  int32_t *order = NULL;
  bool permuted = false;
  if (g_idx && !gpu) {
    for (int64_t k = 0; k < K; k++) {
      int32_t g;
      memcpy(&g, I.data + (size_t)(k * I.rs) * 4, 4);
      if (g < 0 || g >= NG)
        return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                         "%s: g_idx[%" PRId64 "] = %d; expected a group index in 0..%" PRId64 " (K/G - 1)", op, k,
                         (int)g, NG - 1);
      if (g != k / G) permuted = true;
    }
  }
  if (permuted) {
    if (!out->perm)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: g_idx is act-order (not k / group for every k) but out->perm is NULL; point out->perm "
                       "at an int32 [K] buffer to receive the row permutation",
                       op);
    int64_t *count = calloc((size_t)NG, sizeof(int64_t));
    if (!count) return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: could not allocate %" PRId64 " counters", op, NG);
    for (int64_t k = 0; k < K; k++) {
      int32_t g;
      memcpy(&g, I.data + (size_t)(k * I.rs) * 4, 4);
      count[g]++;
    }
    for (int64_t g = 0; g < NG; g++)
      if (count[g] != G) {
        const int64_t c = count[g];
        free(count);
        return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                         "%s: g_idx assigns %" PRId64 " rows to group %" PRId64 "; act-order import needs exactly "
                         "group = %" PRId64 " rows in every group",
                         op, c, g, G);
      }
    free(count);
  }

  /* No output may overlap a source or another output. */
  const bool with_perm = out->perm != NULL;
  if ((st = check_out_overlap(op, out, with_perm, NULL, NULL, 0)) ||
      (st = check_out_overlap(op, out, with_perm, "qweight", Q.data, Q.span)) ||
      (qzeros && (st = check_out_overlap(op, out, with_perm, "qzeros", Z.data, Z.span))) ||
      (st = check_out_overlap(op, out, with_perm, "scales", S.data, S.span)) ||
      (g_idx && (st = check_out_overlap(op, out, with_perm, "g_idx", I.data, I.span))))
    return st;
  if (gpu) {
    kiln_qweight_args a = native_args(out);
    a.format = (int32_t)format;
    a.src = (void *)(uintptr_t)Q.data, a.src_rs = Q.rs, a.src_cs = Q.cs;
    a.qzeros = (const uint32_t *)(const void *)Z.data, a.qzeros_rs = Z.rs, a.qzeros_cs = Z.cs;
    a.src_scales = (const uint16_t *)(const void *)S.data, a.src_scales_rs = S.rs, a.src_scales_cs = S.cs;
    a.g_idx = (const int32_t *)(const void *)I.data, a.g_idx_s = I.rs;
    const kiln_kernel_id ids[2] = {KILN_K_QWEIGHT_SORT, KILN_K_QWEIGHT_IMPORT};
    const int64_t items[2] = {NG + 1, K / 8 * N + NG * N + (out->perm && !g_idx ? K : 0)};
    return g_idx ? qweight_run_gpu(ctx, op, &a, ids, items, 2, stream)
                 : qweight_run_gpu(ctx, op, &a, ids + 1, items + 1, 1, stream);
  }

  if (permuted) {
    order = calloc((size_t)K, sizeof(int32_t));
    if (!order) return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: could not allocate the [K] permutation", op);
    int64_t *next = malloc((size_t)NG * sizeof(int64_t));
    if (!next) {
      free(order);
      return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: could not allocate %" PRId64 " counters", op, NG);
    }
    for (int64_t g = 0; g < NG; g++) next[g] = g * G;
    for (int64_t k = 0; k < K; k++) {
      int32_t g;
      memcpy(&g, I.data + (size_t)(k * I.rs) * 4, 4);
      order[next[g]++] = (int32_t)k;
    }
    free(next);
  }

  /* Scales: f16 bits as they are. Zeros. */
  for (int64_t g = 0; g < NG; g++)
    for (int64_t n = 0; n < N; n++) {
      out->scales[g * N + n] = half_at(&S, g, n);
      uint8_t z;
      if (format == KILN_QFORMAT_REFERENCE) {
        z = 8;
      } else {
        const uint32_t w = word_at(&Z, g, n / 8);
        const int nib = format == KILN_QFORMAT_AWQ ? -1 : (int)(n % 8);
        uint32_t v;
        if (nib >= 0) {
          v = (w >> (4 * nib)) & 0xFu;
        } else { /* AWQ: nibble i holds column 8c + order[i] */
          int i = 0;
          while (awq_order[i] != (int)(n % 8)) i++;
          v = (w >> (4 * i)) & 0xFu;
        }
        z = (uint8_t)(format == KILN_QFORMAT_GPTQ_V1 ? v + 1 : v);
      }
      out->zeros[g * N + n] = z;
    }

  /* Codes: word (r, n) of the native layout holds stored rows 8r..8r+7 of column n. */
  for (int64_t r = 0; r < K / 8; r++)
    for (int64_t n = 0; n < N; n++) {
      uint32_t word = 0;
      for (int j = 0; j < 8; j++) {
        const int64_t i = 8 * r + j;
        const int64_t k = order ? order[i] : i;
        uint32_t q;
        if (format == KILN_QFORMAT_REFERENCE) {
          /* u32 [K/8, N] stored N-major: word = packed[(k/8) + n·(K/8)] of the dense buffer. */
          uint32_t w;
          memcpy(&w, Q.data + (size_t)((k / 8) + n * (K / 8)) * 4, 4);
          const uint32_t s = (w >> (4 * (k % 8))) & 0xFu; /* two's complement nibble */
          q = (s ^ 8u); /* signed −8..7 + 8 == nibble with its sign bit flipped */
        } else if (gptq) {
          q = (word_at(&Q, k / 8, n) >> (4 * (k % 8))) & 0xFu;
        } else {
          const uint32_t w = word_at(&Q, k, n / 8);
          int ii = 0;
          while (awq_order[ii] != (int)(n % 8)) ii++;
          q = (w >> (4 * ii)) & 0xFu;
        }
        word |= q << (4 * j);
      }
      out->codes[r * N + n] = word;
    }
  if (out->perm)
    for (int64_t i = 0; i < K; i++) out->perm[i] = order ? order[i] : (int32_t)i;
  free(order);
  return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_qweight_dequantize                                                                    */
/* ------------------------------------------------------------------------------------------ */
kiln_status kiln_qweight_dequantize(kiln_context *ctx, const kiln_qweight *qw, const DLTensor *w, CUstream stream) {
  const char *op = "kiln_qweight_dequantize";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  if ((st = check_qweight(ctx, op, "qw", qw))) return st;
  const int64_t K = qw->k, N = qw->n, G = qw->group;
  if ((st = kiln_check_tensor(ctx, op, "w", w))) return st;
  char dn[48], sh[160];
  const int dt = kiln_dt_code(w->dtype);
  if (dt < 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: w has dtype %s; expected float32, float16 or bfloat16", op,
                     kiln_dtype_name(w->dtype, dn));
  if (w->ndim != 2 || w->shape[0] != K || w->shape[1] != N)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: w has shape %s; expected [%" PRId64 ", %" PRId64 "] ([k, n])",
                     op, kiln_shape_str(w, sh, sizeof sh), K, N);
  kiln_matrix W;
  if ((st = kiln_matrix_view(op, "w", w, false, &W))) return st;
  size_t cb, sb, zb;
  if ((st = kiln_qweight_bytes(K, N, G, &cb, &sb, &zb, NULL))) return st;
  if (kiln_spans_overlap(W.data, (size_t)W.span_bytes, qw->codes, cb) ||
      kiln_spans_overlap(W.data, (size_t)W.span_bytes, qw->scales, sb) ||
      kiln_spans_overlap(W.data, (size_t)W.span_bytes, qw->zeros, zb))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: w overlaps a buffer of qw in memory; the output must be a "
                     "separate buffer", op);
  if (ctx->device_type != kDLCPU) { /* zero points unchecked there (kiln.h) */
    kiln_qweight_args a = native_args(qw);
    a.perm = NULL;
    a.src = W.data, a.src_rs = W.rs, a.src_cs = W.cs, a.dtype = dt;
    const kiln_kernel_id id = KILN_K_QWEIGHT_DEQUANT;
    const int64_t items = K * N;
    return qweight_run_gpu(ctx, op, &a, &id, &items, 1, stream);
  }
  for (int64_t i = 0; i < (K / G) * N; i++)
    if (qw->zeros[i] > 16)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: qw->zeros[%" PRId64 ", %" PRId64 "] = %d; native zero points are 0..16", op, i / N, i % N,
                       (int)qw->zeros[i]);
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) {
      const int q = (int)((qw->codes[(k / 8) * N + n] >> (4 * (k % 8))) & 0xFu);
      const int64_t gi = (k / G) * N + n;
      const float v = kiln_f16_to_f32(qw->scales[gi]) * (float)(q - (int)qw->zeros[gi]);
      kiln_cpu_store(W.data, k * W.rs + n * W.cs, dt, v);
    }
  return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_qweight_quantize                                                                      */
/* ------------------------------------------------------------------------------------------ */
kiln_status kiln_qweight_quantize(kiln_context *ctx, const DLTensor *w, int symmetric, kiln_qweight *out,
                                  CUstream stream) {
  const char *op = "kiln_qweight_quantize";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  if (symmetric != 0 && symmetric != 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: symmetric is %d; expected 1 (signed codes, zero 8) or 0 (codes 0..15 with zero points)", op,
                     symmetric);
  if ((st = check_qweight(ctx, op, "out", out))) return st;
  const int64_t K = out->k, N = out->n, G = out->group;
  if ((st = kiln_check_tensor(ctx, op, "w", w))) return st;
  char dn[48], sh[160];
  const int dt = kiln_dt_code(w->dtype);
  if (dt < 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: w has dtype %s; expected float32, float16 or bfloat16", op,
                     kiln_dtype_name(w->dtype, dn));
  if (w->ndim != 2 || w->shape[0] != K || w->shape[1] != N)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: w has shape %s; expected [%" PRId64 ", %" PRId64 "] (out->k, out->n; pass an [N, K] weight "
                     "as its transposed view)",
                     op, kiln_shape_str(w, sh, sizeof sh), K, N);
  /* Strided read (any non-negative strides; an [N, K] weight is passed as its transposed view). */
  const int64_t rs = K > 1 ? kiln_tensor_stride(w, 0) : 0, cs = N > 1 ? kiln_tensor_stride(w, 1) : 0;
  const int64_t elem = (int64_t)kiln_dtype_size(w->dtype);
  int64_t span = 1, term;
  if (__builtin_mul_overflow(K - 1, rs, &term) || __builtin_add_overflow(span, term, &span) ||
      __builtin_mul_overflow(N - 1, cs, &term) || __builtin_add_overflow(span, term, &span) ||
      __builtin_mul_overflow(span, elem, &span) ||
      (uintptr_t)kiln_tensor_data(w) + (uint64_t)span < (uintptr_t)kiln_tensor_data(w))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: w (shape %s) spans more bytes than a 64-bit address holds", op,
                     kiln_shape_str(w, sh, sizeof sh));
  const char *base = kiln_tensor_data(w);
  if ((st = check_out_overlap(op, out, false, NULL, NULL, 0)) ||
      (st = check_out_overlap(op, out, false, "w", base, (size_t)span)))
    return st;
  if (ctx->device_type != kDLCPU) { /* finiteness unchecked there (kiln.h) */
    kiln_qweight_args a = native_args(out);
    a.perm = NULL;
    a.src = (void *)(uintptr_t)base, a.src_rs = rs, a.src_cs = cs, a.dtype = dt, a.symmetric = symmetric;
    const kiln_kernel_id id = KILN_K_QWEIGHT_QUANTIZE;
    const int64_t items = K / G * N;
    return qweight_run_gpu(ctx, op, &a, &id, &items, 1, stream);
  }
  /* Reject NaN/inf and scales beyond f16 before anything is written. */
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) {
      const float v = kiln_cpu_load(base, k * rs + n * cs, dt);
      if (!isfinite(v))
        return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: w[%" PRId64 ", %" PRId64 "] is %g; weights must be finite",
                         op, k, n, (double)v);
      if (fabsf(v) > 65504.0f * 7.0f)
        return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                         "%s: |w[%" PRId64 ", %" PRId64 "]| = %g needs a scale beyond float16's range (|w| <= "
                         "65504·7)",
                         op, k, n, (double)v);
    }
  const int64_t NG = K / G;
  for (int64_t g = 0; g < NG; g++)
    for (int64_t n = 0; n < N; n++) {
      float lo = INFINITY, hi = -INFINITY;
      for (int64_t k = g * G; k < (g + 1) * G; k++) {
        const float v = kiln_cpu_load(base, k * rs + n * cs, dt);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
      float scale;
      int zero;
      if (symmetric) {
        const float amax = fmaxf(fabsf(lo), fabsf(hi));
        scale = amax / 7.0f;
        zero = 8;
      } else {
        /* min and max include 0 (as GPTQ's RTN does), so zero = round(−min / scale) lies in 0..15
         * without clamping the codes away and w = 0 is exact */
        lo = fminf(lo, 0.0f), hi = fmaxf(hi, 0.0f);
        scale = (hi - lo) / 15.0f;
        zero = 0;
      }
      uint16_t s16 = kiln_f32_to_f16(scale);
      if (scale == 0.0f) s16 = kiln_f32_to_f16(1.0f);          /* all-zero group: codes = zero */
      else if ((s16 & 0x7fffu) == 0) s16 = (uint16_t)0x0001u; /* underflow: smallest subnormal */
      else if ((s16 & 0x7fffu) == 0x7c00u) s16 = (uint16_t)0x7bffu; /* just beyond 65504: largest */
      const float sf = kiln_f16_to_f32(s16);
      if (!symmetric && scale != 0.0f) {
        const float zf = nearbyintf(-lo / sf);
        zero = zf < 0 ? 0 : zf > 15 ? 15 : (int)zf;
      }
      out->scales[g * N + n] = s16;
      out->zeros[g * N + n] = (uint8_t)zero;
      /* symmetric: signed −8..7 stored + 8, so both clamp to 0..15 */
      for (int64_t k = g * G; k < (g + 1) * G; k++) {
        const float v = kiln_cpu_load(base, k * rs + n * cs, dt);
        const float qf = nearbyintf(v / sf) + (float)zero;
        const int q = qf < 0.0f ? 0 : qf > 15.0f ? 15 : (int)qf;
        uint32_t *word = &out->codes[(k / 8) * N + n];
        const int sh4 = 4 * (int)(k % 8);
        *word = (*word & ~(0xFu << sh4)) | ((uint32_t)q << sh4);
      }
    }
  return KILN_OK;
}
