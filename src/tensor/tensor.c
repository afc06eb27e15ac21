/*
 * tensor.c — dtype helpers and tensor validation (see tensor.h).
 */
#include <inttypes.h>
#include <stdio.h>

#include "tensor.h"
#include "../runtime/runtime.h"

size_t kiln_dtype_size(DLDataType t) {
  if (t.lanes != 1 || t.bits == 0 || t.bits % 8 != 0) return 0;
  switch (t.code) {
  case kDLFloat:
  case kDLBfloat:
  case kDLInt:
  case kDLUInt: return t.bits / 8;
  default: return 0;
  }
}

const char *kiln_dtype_name(DLDataType t, char buf[48]) {
  const char *base = NULL;
  switch (t.code) {
  case kDLFloat: base = "float"; break;
  case kDLBfloat: base = "bfloat"; break;
  case kDLInt: base = "int"; break;
  case kDLUInt: base = "uint"; break;
  case kDLBool: base = "bool"; break;
  default: break;
  }
  if (base && t.lanes == 1)
    snprintf(buf, 48, "%s%u", base, (unsigned)t.bits);
  else
    snprintf(buf, 48, "dtype(code=%u, bits=%u, lanes=%u)", (unsigned)t.code, (unsigned)t.bits, (unsigned)t.lanes);
  return buf;
}

const char *kiln_shape_str(const DLTensor *t, char *buf, size_t size) {
  if (t->ndim < 0 || t->ndim > KILN_MAX_NDIM || (t->ndim > 0 && !t->shape)) { /* not validated yet */
    snprintf(buf, size, "<ndim %d%s>", (int)t->ndim, t->shape ? "" : ", shape NULL");
    return buf;
  }
  size_t n = 0;
  n += (size_t)snprintf(buf + n, size - n, "[");
  for (int d = 0; d < t->ndim && n < size; d++)
    n += (size_t)snprintf(buf + n, size - n, d ? ", %" PRId64 : "%" PRId64, t->shape[d]);
  if (n < size) snprintf(buf + n, size - n, "]");
  return buf;
}

int64_t kiln_tensor_stride(const DLTensor *t, int d) {
  if (t->strides) return t->strides[d];
  /* Compact strides of an empty tensor may be products of huge extents (e.g. [0, 2^62, 4]);
   * they address nothing, so saturate instead of overflowing (found by the fuzzer). */
  int64_t s = 1;
  for (int i = t->ndim - 1; i > d; i--)
    if (__builtin_mul_overflow(s, t->shape[i] > 0 ? t->shape[i] : 1, &s)) return INT64_MAX;
  return s;
}

const char *kiln_device_str(DLDevice d, char buf[48]) {
  static const char *const names[] = {
      [kDLCPU] = "kDLCPU",   [kDLCUDA] = "kDLCUDA",         [kDLCUDAHost] = "kDLCUDAHost", [kDLOpenCL] = "kDLOpenCL",
      [kDLVulkan] = "kDLVulkan", [kDLMetal] = "kDLMetal", [kDLVPI] = "kDLVPI",           [kDLROCM] = "kDLROCM",
      [kDLROCMHost] = "kDLROCMHost", [kDLExtDev] = "kDLExtDev", [kDLCUDAManaged] = "kDLCUDAManaged"};
  const unsigned type = (unsigned)d.device_type;
  if (type < sizeof names / sizeof names[0] && names[type])
    snprintf(buf, 48, "%s:%d", names[type], (int)d.device_id);
  else
    snprintf(buf, 48, "device type %u:%d", type, (int)d.device_id);
  return buf;
}

bool kiln_device_usable(const kiln_context *ctx, DLDevice d) {
  if (ctx->device_type == kDLCPU) return d.device_type == kDLCPU || d.device_type == kDLCUDAHost;
  return d.device_type == kDLCUDA && d.device_id == ctx->ordinal;
}

kiln_status kiln_check_device(const kiln_context *ctx, const char *op, const char *arg, const char *verb, DLDevice d,
                              const char *cpu_fix, const char *gpu_fix) {
  if (kiln_device_usable(ctx, d)) return KILN_OK;
  char dv[48];
  if (ctx->device_type == kDLCPU)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s%s %s but the context is the CPU's; %s", op, arg, verb,
                     kiln_device_str(d, dv), cpu_fix);
  return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                   "%s: %s%s %s but the context is for kDLCUDA:%d; %s to cuda:%d or use that device's context", op,
                   arg, verb, kiln_device_str(d, dv), ctx->ordinal, gpu_fix, ctx->ordinal);
}

kiln_status kiln_check_tensor(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *t) {
  if (!t) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass a DLTensor", op, arg);
  kiln_status st =
      kiln_check_device(ctx, op, arg, " is on", t->device, "use a CUDA context for GPU tensors", "move the tensor");
  if (st) return st;
  if (t->ndim < 0 || t->ndim > KILN_MAX_NDIM)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has ndim %d; expected 0..%d", op, arg, (int)t->ndim,
                     KILN_MAX_NDIM);
  if (t->ndim > 0 && !t->shape)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has ndim %d but shape is NULL", op, arg, (int)t->ndim);
  char dn[48];
  if (kiln_dtype_size(t->dtype) == 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has dtype %s, which kiln does not handle", op, arg,
                     kiln_dtype_name(t->dtype, dn));
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape[%d] = %" PRId64 "; sizes must be >= 0", op,
                       arg, d, t->shape[d]);
    if (t->strides && t->strides[d] < 0)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s has stride %" PRId64 " in dimension %d; kiln needs non-negative strides "
                       "(materialize a flipped view with .contiguous())",
                       op, arg, t->strides[d], d);
    if (__builtin_mul_overflow(numel, t->shape[d], &numel))
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has a shape whose element count overflows int64", op,
                       arg);
  }
  if (numel > 0 && !t->data)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has %" PRId64 " elements but data is NULL", op, arg, numel);
  const size_t elem = kiln_dtype_size(t->dtype);
  if (numel > 0 && (uintptr_t)kiln_tensor_data(t) % elem != 0) /* found by tests/fuzz/fuzz_validation.c */
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s starts at %p (data + byte_offset %" PRIu64 "), not aligned to its %zu-byte elements; "
                     "pass a tensor whose first element is naturally aligned",
                     op, arg, (void *)kiln_tensor_data(t), t->byte_offset, elem);
  return KILN_OK;
}

kiln_status kiln_matrix_view(const char *op, const char *arg, const DLTensor *t, bool allow_batch, kiln_matrix *m) {
  char sh[160];
  if (t->ndim != 2 && !(allow_batch && t->ndim == 3))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has rank %d (shape %s); expected %s", op, arg,
                     (int)t->ndim, kiln_shape_str(t, sh, sizeof sh),
                     allow_batch ? "rank 2 [rows, cols] or rank 3 [batch, rows, cols]" : "rank 2 [rows, cols]");
  int r = t->ndim - 2;
  m->data = kiln_tensor_data(t);
  m->dtype = t->dtype;
  m->elem = kiln_dtype_size(t->dtype);
  m->batch = r ? t->shape[0] : 1;
  m->rows = t->shape[r];
  m->cols = t->shape[r + 1];
  m->bs = r ? kiln_tensor_stride(t, 0) : 0;
  m->rs = kiln_tensor_stride(t, r);
  m->cs = kiln_tensor_stride(t, r + 1);
  if (m->batch < 1 || m->rows < 1 || m->cols < 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; every dimension must be >= 1", op, arg,
                     kiln_shape_str(t, sh, sizeof sh));
  if (m->rows > INT32_MAX || m->cols > INT32_MAX || m->batch > INT32_MAX)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has shape %s; each dimension must be < 2^31", op, arg,
                     kiln_shape_str(t, sh, sizeof sh));
  /* Normalize the strides of size-1 dimensions, which address nothing. */
  if (m->batch == 1) m->bs = 0;
  if (m->rows == 1) m->rs = m->cs == 1 ? m->cols : 1;
  if (m->cols == 1) m->cs = m->rs == 1 ? m->rows : 1;
  if (m->rows == 1 && m->cols == 1) m->rs = m->cs = 1;
  bool row_major = m->cs == 1 && m->rs >= m->cols;
  bool col_major = m->rs == 1 && m->cs >= m->rows;
  if (!row_major && !col_major)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: %s has shape %s with strides (%" PRId64 ", %" PRId64 ") in its last two dimensions; "
                     "expected a row-major (strides (ld, 1), ld >= %" PRId64 ") or column-major (strides (1, ld), "
                     "ld >= %" PRId64 ") matrix; make it contiguous first (e.g. .contiguous())",
                     op, arg, kiln_shape_str(t, sh, sizeof sh), kiln_tensor_stride(t, r), kiln_tensor_stride(t, r + 1),
                     m->cols, m->rows);
  if (m->rs == 1 && m->cs == 1) m->rs = m->cols; /* 1x1: call it row-major */
  int64_t span = 1, term;
  if (__builtin_mul_overflow(m->batch - 1, m->bs, &term) || __builtin_add_overflow(span, term, &span) ||
      __builtin_mul_overflow(m->rows - 1, m->rs, &term) || __builtin_add_overflow(span, term, &span) ||
      __builtin_mul_overflow(m->cols - 1, m->cs, &term) || __builtin_add_overflow(span, term, &span) ||
      __builtin_mul_overflow(span, (int64_t)m->elem, &m->span_bytes) ||
      (uintptr_t)m->data + (uint64_t)m->span_bytes < (uintptr_t)m->data)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s (shape %s) spans more bytes than a 64-bit address holds",
                     op, arg, kiln_shape_str(t, sh, sizeof sh));
  return KILN_OK;
}

kiln_status kiln_check_output_matrix(const char *op, const char *arg, const kiln_matrix *m) {
  if (m->batch > 1) {
    int64_t one = ((m->rows - 1) * m->rs + (m->cols - 1) * m->cs + 1);
    if (m->bs < one)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s has batch stride %" PRId64 " but one [%" PRId64 ", %" PRId64 "] matrix spans %" PRId64
                       " elements, so its batches overlap; an output needs batch stride >= %" PRId64
                       " (allocate it contiguous)",
                       op, arg, m->bs, m->rows, m->cols, one, one);
  }
  return KILN_OK;
}

bool kiln_spans_overlap(const void *a, int64_t a_bytes, const void *b, int64_t b_bytes) {
  const uintptr_t x0 = (uintptr_t)a, y0 = (uintptr_t)b;
  return a_bytes > 0 && b_bytes > 0 && x0 < y0 + (uintptr_t)b_bytes && y0 < x0 + (uintptr_t)a_bytes;
}

bool kiln_matrix_overlap(const kiln_matrix *x, const kiln_matrix *y) {
  return kiln_spans_overlap(x->data, x->span_bytes, y->data, y->span_bytes);
}

bool kiln_matrix_aligned16(const kiln_matrix *m) {
  /* A leading dimension over a single row (column) addresses nothing, nor does a batch stride
   * over a single matrix: only strides that are used must be aligned. */
  const int64_t outer = m->cs == 1 ? m->rows : m->cols;
  const int64_t ld_bytes = outer > 1 ? kiln_matrix_ld(m) * (int64_t)m->elem : 0;
  const int64_t bs_bytes = m->batch > 1 ? m->bs * (int64_t)m->elem : 0;
  return (uintptr_t)m->data % 16 == 0 && ld_bytes % 16 == 0 && bs_bytes % 16 == 0;
}

kiln_matrix kiln_matrix_transpose(kiln_matrix m) {
  int64_t t = m.rows;
  m.rows = m.cols;
  m.cols = t;
  t = m.rs;
  m.rs = m.cs;
  m.cs = t;
  return m;
}
