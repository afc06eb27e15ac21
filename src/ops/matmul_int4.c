/*
 * matmul_int4.c — kiln_matmul_int4 (W4A16): validate -> CPU path, or enter the context and hand
 * the validated kiln_int4_args to src/ops/matmul_int4_gpu.c. Also the checks it shares with the
 * fused QKV projections (src/ops/qkv_project.c), declared in ops.h.
 *
 * Validation follows src/ops/matmul_int8.c: every argument is checked before anything is
 * written, and each message names the op, the argument, what was found, what was expected and
 * how to fix it. A kiln_qweight is checked with kiln_qweight_bytes' rules (its message is kept,
 * re-attributed to the op and argument).
 *
 * The weight's values (perm a permutation, zeros 0..16) are read only on a CPU context, where
 * they are host memory; a GPU kernel cannot read them without synchronizing, so there they are
 * the caller's contract (kiln.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "cpu/cpu.h"

kiln_matmul_int4_opts kiln_matmul_int4_opts_default(void) { /* AUTO, no workspace */
  kiln_matmul_int4_opts o;
  memset(&o, 0, sizeof o);
  o.algo = KILN_INT4_AUTO;
  return o;
}

/* ------------------------------------------------------------------------------------------ */
/* Shared checks (ops.h)                                                                      */
/* ------------------------------------------------------------------------------------------ */
kiln_status kiln_check_w16_algo(const kiln_context *ctx, const char *op, int algo, const char *prefix) {
  static const char *names[3] = {"AUTO", "DECODE", "PREFILL"};
  if (algo < 0 || algo > 2)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: opts->algo is %d; expected %s_AUTO, %s_DECODE or %s_PREFILL",
                     op, algo, prefix, prefix, prefix);
  if (algo != 0 && ctx->device_type == kDLCPU)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo %s_%s needs a CUDA device but the context is the CPU's; use %s_AUTO for CPU tensors",
                     op, prefix, names[algo], prefix);
  return KILN_OK;
}

kiln_status kiln_check_w16_x(const kiln_context *ctx, const char *op, const DLTensor *x, kiln_matrix *m) {
  kiln_status st = kiln_check_tensor(ctx, op, "x", x);
  if (st) return st;
  char dn[48];
  if (!KILN_IS_F16(x->dtype) && !KILN_IS_BF16(x->dtype))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: x has dtype %s; expected float16 or bfloat16 (16-bit activations); convert it first "
                     "(.half(), .bfloat16() or kiln_cast)",
                     op, kiln_dtype_name(x->dtype, dn));
  return kiln_matrix_view(op, "x", x, false, m);
}

kiln_status kiln_check_int4_weight(const kiln_context *ctx, const char *op, const char *arg, const kiln_qweight *w,
                                   const DLTensor *x, int64_t k) {
  if (!w)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s is NULL; pass a kiln_qweight (filled by kiln_qweight_import or kiln_qweight_quantize)",
                     op, arg);
  if (kiln_qweight_bytes(w->k, w->n, w->group, NULL, NULL, NULL, NULL) != KILN_OK) {
    /* keep kiln_qweight_bytes' reason, minus its own name */
    char why[768];
    const char *msg = kiln_last_error(), *colon = strstr(msg, ": ");
    snprintf(why, sizeof why, "%s", colon ? colon + 2 : msg);
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is not a valid kiln_qweight: %s", op, arg, why);
  }
  kiln_status st = kiln_check_qweight_buffers(op, arg, w, "at the native buffers (sizes from kiln_qweight_bytes)");
  if (st) return st;
  st = kiln_check_device(ctx, op, arg, "->device is", w->device,
                         "use a CUDA context for a weight in GPU memory (or set device to {kDLCPU, 0} for host "
                         "buffers)",
                         "copy the weight's buffers");
  if (st) return st;
  if (w->k != k) {
    char sh[160];
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s->k = %" PRId64 " but x has K = %" PRId64 " (shape %s); the weight's rows must match "
                     "x's columns",
                     op, arg, w->k, k, kiln_shape_str(x, sh, sizeof sh));
  }
  return KILN_OK;
}

kiln_status kiln_check_int4_weight_disjoint(const char *op, const char *out, const kiln_matrix *y, const char *arg,
                                            const kiln_qweight *w) {
  size_t b[4];
  kiln_qweight_bytes(w->k, w->n, w->group, &b[0], &b[1], &b[2], &b[3]); /* valid: checked before */
  const void *p[4] = {w->codes, w->scales, w->zeros, w->perm};
  static const char *nm[4] = {"codes", "scales", "zeros", "perm"};
  for (int i = 0; i < 4; i++) {
    char name[96];
    snprintf(name, sizeof name, "%s->%s", arg, nm[i]);
    kiln_status st = kiln_check_disjoint(op, out, y->data, y->span_bytes, name, p[i], p[i] ? (int64_t)b[i] : 0);
    if (st) return st;
  }
  return KILN_OK;
}

kiln_status kiln_check_int4_weight_values(const char *op, const char *arg, const kiln_qweight *w) {
  const int64_t K = w->k, N = w->n, NG = K / w->group;
  for (int64_t i = 0; i < NG * N; i++)
    if (w->zeros[i] > 16)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s->zeros[%" PRId64 ", %" PRId64 "] = %d; native zero points are 0..16 (as "
                       "kiln_qweight_import and kiln_qweight_quantize write them)",
                       op, arg, i / N, i % N, (int)w->zeros[i]);
  if (!w->perm) return KILN_OK;
  unsigned char *seen = calloc((size_t)K, 1);
  if (!seen) return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of host memory to check %s->perm", op, arg);
  for (int64_t i = 0; i < K; i++) {
    const int32_t p = w->perm[i];
    if (p < 0 || p >= K || seen[p]) {
      free(seen);
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s->perm[%" PRId64 "] = %d %s; expected a permutation of 0..%" PRId64 " (K - 1), as "
                       "kiln_qweight_import writes it (or perm NULL for no act-order)",
                       op, arg, i, (int)p, p < 0 || p >= K ? "is out of range" : "repeats an earlier entry", K - 1);
    }
    seen[p] = 1;
  }
  free(seen);
  return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_matmul_int4                                                                           */
/* ------------------------------------------------------------------------------------------ */
/* The arguments both kiln_matmul_int4 and its workspace query check. */
static kiln_status check_args(const kiln_context *ctx, const char *op, const DLTensor *x, const kiln_qweight *w,
                              const DLTensor *y, kiln_matrix *X, kiln_matrix *Y) {
  kiln_status st;
  if ((st = kiln_check_w16_x(ctx, op, x, X))) return st;
  if ((st = kiln_check_int4_weight(ctx, op, "w", w, x, X->cols))) return st;
  if ((st = kiln_check_float_matrix(ctx, op, "y", y, 1, X->rows, w->n, true, Y))) return st;
  if ((st = kiln_check_no_overlap(op, "y", Y, "x", X)) || (st = kiln_check_int4_weight_disjoint(op, "y", Y, "w", w)))
    return st;
  return KILN_OK;
}

/* PREFILL (kiln_matmul_int4 and kiln_qkv_project_int4) dequantizes each weight into the caller's
 * workspace as x's 16-bit dtype, row-major [K, N], and multiplies with kiln_matmul; projections
 * run one after another on the stream, so they share it: the largest weight sets its size. */
size_t kiln_int4_prefill_bytes(const kiln_qweight *const *w, int nw) {
  size_t need = 0;
  for (int i = 0; i < nw; i++) {
    const size_t b = (size_t)w[i]->k * (size_t)w[i]->n * 2;
    if (b > need) need = b;
  }
  return need;
}

kiln_status kiln_w16_prefill_plan(const kiln_context *ctx, const char *op, const char *prefix, const char *size_fn,
                                  int64_t from_m, size_t need, bool largest, bool no_ws, int *algo, void *ws,
                                  size_t ws_bytes, const kiln_matrix *X, const kiln_matrix *Y,
                                  const char *const *ynames, int ny, const kiln_qweight *const *w,
                                  const char *const *wnames, int nw) {
  const bool have = ws && ws_bytes >= need;
  if (*algo == KILN_INT4_PREFILL && !have)
    return kiln_fail(KILN_ERROR_WORKSPACE,
                     "%s: algo %s_PREFILL needs %zu bytes of workspace (the %sweight as %s [%" PRId64 ", %" PRId64
                     "]) but opts give %zu%s; allocate %s bytes",
                     op, prefix, need, largest ? "largest " : "", KILN_IS_BF16(X->dtype) ? "bfloat16" : "float16",
                     X->cols, need / 2 / (size_t)X->cols, ws ? ws_bytes : 0, ws ? "" : " (workspace NULL)", size_fn);
  if (ctx->device_type == kDLCPU) return KILN_OK; /* the CPU path needs none and ignores it */
  if (have) { /* aligned, and sharing no byte with x, the outputs or the weights */
    if ((uintptr_t)ws % 256)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: opts->workspace %p is not 256-byte aligned; use an allocation's start (kiln_tensor_empty, "
                       "torch.empty and cudaMalloc return 256-byte aligned memory)",
                       op, ws);
    kiln_matrix WS = {0};
    WS.data = (char *)ws, WS.span_bytes = (int64_t)need;
    kiln_status st = kiln_check_disjoint(op, "opts->workspace", ws, (int64_t)need, "x", X->data, X->span_bytes);
    for (int i = 0; !st && i < ny; i++)
      st = kiln_check_disjoint(op, "opts->workspace", ws, (int64_t)need, ynames[i], Y[i].data, Y[i].span_bytes);
    for (int i = 0; !st && i < nw; i++) st = kiln_check_int4_weight_disjoint(op, "opts->workspace", &WS, wnames[i], w[i]);
    if (st) return st;
  }
  if (*algo == KILN_INT4_AUTO) *algo = (have || no_ws) && X->rows >= from_m ? KILN_INT4_PREFILL : KILN_INT4_DECODE;
  return KILN_OK;
}

kiln_status kiln_int4_prefill_gpu(const kiln_context *ctx, const char *op, const DLTensor *x, const kiln_int4_args *a,
                                  const DLTensor *y, void *ws, bool fused, CUstream stream) {
  kiln_ctx_scope scope;
  kiln_status st = kiln_ctx_enter(ctx, &scope, op);
  if (st) return st;
  if (fused) { /* one kernel, the workspace unused (wa16_gpu.c) */
    st = kiln_w4_wgmma(ctx, op, a, 1, stream);
    kiln_ctx_leave(ctx, &scope);
    return st;
  }
  st = kiln_w4_dequantize_gpu(ctx, op, a, ws, a->n, stream);
  kiln_ctx_leave(ctx, &scope);
  if (st) return st;
  /* y = x · W with W the dequantized weight in the workspace (row-major [K, N], x's dtype) */
  int64_t shape[2] = {a->k, a->n};
  DLTensor W = {.data = ws, .device = {kDLCUDA, ctx->ordinal}, .ndim = 2, .dtype = x->dtype, .shape = shape};
  st = kiln_matmul((kiln_context *)ctx, x, &W, y, NULL, stream);
  if (st) { /* kiln_matmul's message, attributed to this op (copied: kiln_fail writes that buffer) */
    char why[512];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    return kiln_fail(st, "%s (PREFILL): %s", op, why);
  }
  return KILN_OK;
}

kiln_status kiln_matmul_int4_workspace_size(kiln_context *ctx, const DLTensor *x, const kiln_qweight *w,
                                            const DLTensor *y, size_t *bytes) {
  const char *op = "kiln_matmul_int4_workspace_size";
  kiln_status st = kiln_check_size_query(ctx, op, bytes);
  if (st) return st;
  kiln_matrix X, Y;
  if ((st = check_args(ctx, op, x, w, y, &X, &Y))) return st; /* a failed query leaves *bytes as it was */
  *bytes = ctx->device_type != kDLCPU ? kiln_int4_prefill_bytes(&w, 1) : 0;
  return KILN_OK;
}

kiln_status kiln_matmul_int4(kiln_context *ctx, const DLTensor *x, const kiln_qweight *w, const DLTensor *y,
                             const kiln_matmul_int4_opts *opts, CUstream stream) {
  const char *op = "kiln_matmul_int4";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  kiln_matmul_int4_opts o = opts ? *opts : kiln_matmul_int4_opts_default();
  if ((st = kiln_check_w16_algo(ctx, op, (int)o.algo, "KILN_INT4"))) return st;
  kiln_matrix X, Y;
  if ((st = check_args(ctx, op, x, w, y, &X, &Y))) return st;
  int algo = (int)o.algo;
  kiln_int4_args args = {
      .x = X.data, .codes = w->codes, .scales = w->scales, .zeros = w->zeros, .perm = w->perm, .y = Y.data,
      .x_rs = X.rs, .x_cs = X.cs, .y_rs = Y.rs, .y_cs = Y.cs,
      .m = (int32_t)X.rows, .n = (int32_t)w->n, .k = (int32_t)w->k, .group = (int32_t)w->group,
      .x_dtype = kiln_dt_code(X.dtype), .y_dtype = kiln_dt_code(Y.dtype),
  };
  /* sm_90a's one-kernel PREFILL needs no workspace (false on other devices and the CPU) */
  const bool fused = kiln_w4_wgmma_fits(ctx, &args, 1);
  static const char *const y_name[1] = {"y"}, *const w_name[1] = {"w"};
  /* AUTO: PREFILL from M = 128 when opts carry the workspace, or without one where the one-kernel
   * path takes the call. On the H200 DECODE wins at M = 64 and PREFILL at M = 128 at 4096 x 4096,
   * 4096 x 12288 and 8192 x 28672 (docs/performance.md, scripts/int4-crossover.sh); without a
   * workspace DECODE was 2.9x slower than the one kernel (4096 x 12288, M = 256: 178 against
   * 61 µs; "PREFILL in one kernel"). */
  if ((st = kiln_w16_prefill_plan(ctx, op, "KILN_INT4", "kiln_matmul_int4_workspace_size", 128,
                                   kiln_int4_prefill_bytes(&w, 1), false, fused, &algo, o.workspace, o.workspace_bytes,
                                   &X, &Y, y_name, 1, &w, w_name, 1)))
    return st;
  args.algo = (int32_t)algo;
  if (ctx->device_type == kDLCPU) {
    if ((st = kiln_check_int4_weight_values(op, "w", w))) return st;
    return kiln_cpu_matmul_int4(op, &args);
  }
  if (algo == KILN_INT4_PREFILL) return kiln_int4_prefill_gpu(ctx, op, x, &args, y, o.workspace, fused, stream);
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
  st = kiln_matmul_int4_gpu(ctx, op, &args, stream);
  kiln_ctx_leave(ctx, &scope);
  return st;
}
