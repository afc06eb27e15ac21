/*
 * checks.c — validation pieces shared by the op files: float matrix arguments and the
 * "outputs must not overlap" rule (kiln_spans_overlap on whole byte spans).
 */
#include <inttypes.h>
#include <stdio.h>

#include "ops.h"

kiln_status kiln_check_disjoint(const char *op, const char *out_name, const void *out, int64_t out_bytes,
                                const char *in_name, const void *in, int64_t in_bytes) {
  if (kiln_spans_overlap(out, out_bytes, in, in_bytes))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s overlaps %s in memory; the output must be a separate buffer", op, out_name, in_name);
  return KILN_OK;
}

kiln_status kiln_check_no_overlap(const char *op, const char *out_name, const kiln_matrix *out, const char *in_name,
                                  const kiln_matrix *in) {
  return kiln_check_disjoint(op, out_name, out->data, out->span_bytes, in_name, in->data, in->span_bytes);
}

/* A float matrix argument of expected shape [batch?, rows, cols]; an output must also not
 * overlap itself across batches (an input, e.g. dC, may broadcast with batch stride 0). */
kiln_status kiln_check_float_matrix(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *t,
                                    int64_t batch, int64_t rows, int64_t cols, bool output, kiln_matrix *m) {
  kiln_status st;
  if ((st = kiln_check_tensor(ctx, op, arg, t))) return st;
  char dn[48], sh[160];
  if (kiln_dt_code(t->dtype) < 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s; expected float32, float16 or bfloat16", op, arg,
                     kiln_dtype_name(t->dtype, dn));
  if ((st = kiln_matrix_view(op, arg, t, true, m))) return st;
  if (m->rows != rows || m->cols != cols || (m->batch != batch && !(batch == 1 && t->ndim == 2)) ||
      (t->ndim == 2 && batch != 1)) {
    char want[96];
    if (batch > 1)
      snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 ", %" PRId64 "]", batch, rows, cols);
    else
      snprintf(want, sizeof want, "[%" PRId64 ", %" PRId64 "] (or [1, %" PRId64 ", %" PRId64 "])", rows, cols, rows,
               cols);
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; expected %s", op, arg,
                     kiln_shape_str(t, sh, sizeof sh), want);
  }
  return output ? kiln_check_output_matrix(op, arg, m) : KILN_OK;
}

kiln_status kiln_smem_refusal(const kiln_context *ctx, const char *op, const char *what, size_t need, const char *fix) {
  return kiln_fail(KILN_ERROR_UNSUPPORTED,
                   "%s: %s needs %zu bytes of shared memory per block but %s (sm_%d) grants %zu; %s", op, what, need,
                   ctx->info.name, ctx->arch, ctx->info.smem_per_block_optin, fix);
}

kiln_status kiln_check_size_query(const kiln_context *ctx, const char *op, size_t *bytes) {
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  if (!bytes)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: bytes is NULL; pass a size_t* to receive the size", op);
  return KILN_OK;
}
