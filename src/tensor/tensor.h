/*
 * tensor.h — kiln's tensor layer: dtype helpers and the validation every op runs before it
 * touches the device. Each check sets a message naming the op, the argument, what was found,
 * what was expected and how to fix it.
 */
#ifndef KILN_TENSOR_H
#define KILN_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

#define KILN_MAX_NDIM 8

static inline bool kiln_dtype_is(DLDataType t, uint8_t code, uint8_t bits) {
  return t.code == code && t.bits == bits && t.lanes == 1;
}
#define KILN_IS_F32(t) kiln_dtype_is((t), kDLFloat, 32)
#define KILN_IS_F16(t) kiln_dtype_is((t), kDLFloat, 16)
#define KILN_IS_BF16(t) kiln_dtype_is((t), kDLBfloat, 16)

/* Bytes per element, 0 for dtypes kiln never handles (vector lanes, sub-byte, odd widths). */
size_t kiln_dtype_size(DLDataType t);
/* "float16", "bfloat16", "float32", "int8", ... or "dtype(code=C, bits=B, lanes=L)". */
const char *kiln_dtype_name(DLDataType t, char buf[48]);
/* "[128, 32]" */
const char *kiln_shape_str(const DLTensor *t, char *buf, size_t size);
/* "kDLCUDA:0", "kDLVulkan:1", ... or "device type 42:0" for a type DLPack does not name. */
const char *kiln_device_str(DLDevice d, char buf[48]);
/* Memory the context's ops may use: host memory (kDLCPU, kDLCUDAHost) on the CPU's, its own
 * GPU (kDLCUDA with its ordinal) on a CUDA context. */
bool kiln_device_usable(const kiln_context *ctx, DLDevice d);
/* KILN_OK when usable, else INVALID_ARGUMENT: "<op>: <arg><verb> <device> but the context is the
 * CPU's; <cpu_fix>" or "... is for kDLCUDA:n; <gpu_fix> to cuda:n or use that device's context".
 * verb: " is on" (a tensor) or "->device is" (a weight). Nothing is formatted unless it fails. */
kiln_status kiln_check_device(const kiln_context *ctx, const char *op, const char *arg, const char *verb, DLDevice d,
                              const char *cpu_fix, const char *gpu_fix);

/* The element stride of dimension d (compact row-major when strides == NULL). */
int64_t kiln_tensor_stride(const DLTensor *t, int d);
/* data + byte_offset, computed on integers so that an empty tensor with NULL data is not UB. */
static inline char *kiln_tensor_data(const DLTensor *t) { return (char *)((uintptr_t)t->data + t->byte_offset); }

/* Checks what every tensor argument needs: non-NULL, on the context's device, a sane rank,
 * non-negative shape and strides, dtype with one lane, non-NULL data when non-empty.
 * `op` and `arg` name the caller and the argument in the message. */
kiln_status kiln_check_tensor(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *t);

/* A (batched) matrix view of a rank-2 [rows, cols] or rank-3 [batch, rows, cols] tensor.
 * Strides are normalized: a dimension of size 1 gets the stride that makes the view row-major
 * (or column-major when only that fits), a batch of 1 gets batch stride 0. */
typedef struct kiln_matrix {
  char *data; /* data + byte_offset */
  DLDataType dtype;
  size_t elem;
  int64_t batch, rows, cols;
  int64_t bs, rs, cs; /* strides in elements */
  int64_t span_bytes; /* bytes from data to one past the last element */
} kiln_matrix;

/* The view of memory an op has already validated, rebuilt from its kernel arguments (for the
 * WGMMA host helpers, which take views): the batch counts only where the batch stride is not 0
 * (a broadcast operand is one matrix); span_bytes is left 0. */
static inline kiln_matrix kiln_matrix_strided(const void *data, DLDataType dtype, int64_t batch, int64_t rows,
                                              int64_t cols, int64_t bs, int64_t rs, int64_t cs) {
  return (kiln_matrix){.data = (char *)(uintptr_t)data, .dtype = dtype, .elem = (size_t)(dtype.bits / 8),
                       .batch = bs != 0 ? batch : 1, .rows = rows, .cols = cols, .bs = bs, .rs = rs, .cs = cs};
}

static inline bool kiln_matrix_row_major(const kiln_matrix *m) { return m->cs == 1; }
static inline int64_t kiln_matrix_ld(const kiln_matrix *m) { return m->cs == 1 ? m->rs : m->cs; }

/* Builds the view and checks its layout: one of the two matrix strides must be 1 and the other
 * >= the inner size (row- or column-major with a leading dimension), sizes >= 1, no int64
 * overflow of the span. rank 3 only when allow_batch. */
kiln_status kiln_matrix_view(const char *op, const char *arg, const DLTensor *t, bool allow_batch, kiln_matrix *m);

/* An output must not overlap itself across batches (batch stride >= one matrix's span). */
kiln_status kiln_check_output_matrix(const char *op, const char *arg, const kiln_matrix *m);

/* True when the byte ranges [a, a + a_bytes) and [b, b + b_bytes) intersect (empty ranges never
 * do). Every op's "outputs must not overlap" rule is this test on whole spans. */
bool kiln_spans_overlap(const void *a, int64_t a_bytes, const void *b, int64_t b_bytes);
/* The same on two views' spans. */
bool kiln_matrix_overlap(const kiln_matrix *x, const kiln_matrix *y);

/* True when 16-byte vector loads along the contiguous dimension are legal: the data pointer, the
 * leading dimension and the batch stride are all multiples of 16 bytes. */
bool kiln_matrix_aligned16(const kiln_matrix *m);

/* The transposed view (rows <-> cols), no data moved. */
kiln_matrix kiln_matrix_transpose(kiln_matrix m);

#endif /* KILN_TENSOR_H */
