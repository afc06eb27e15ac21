/*
 * memory.c — helpers for C users without a framework: streams, tensor allocation, copies.
 * Ops never call these (an op only enqueues work on the caller's stream).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "../tensor/tensor.h"

kiln_status kiln_stream_create(kiln_context *ctx, CUstream *out) {
  kiln_status st = kiln_check_context(ctx, "kiln_stream_create");
  if (st) return st;
  if (!out) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_stream_create: out is NULL; pass a CUstream*");
  *out = NULL;
  if (ctx->device_type == kDLCPU) return KILN_OK;
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, "kiln_stream_create"))) return st;
  CUresult r = ctx->cu->cuStreamCreate(out, CU_STREAM_NON_BLOCKING);
  kiln_ctx_leave(ctx, &scope);
  return r == CUDA_SUCCESS ? KILN_OK : kiln_cuda_fail(ctx->cu, r, "kiln_stream_create", "cuStreamCreate");
}

kiln_status kiln_stream_destroy(kiln_context *ctx, CUstream stream) {
  kiln_status st = kiln_check_context(ctx, "kiln_stream_destroy");
  if (st || ctx->device_type == kDLCPU || !stream) return st;
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, "kiln_stream_destroy"))) return st;
  CUresult r = ctx->cu->cuStreamDestroy(stream);
  kiln_ctx_leave(ctx, &scope);
  return r == CUDA_SUCCESS ? KILN_OK : kiln_cuda_fail(ctx->cu, r, "kiln_stream_destroy", "cuStreamDestroy");
}

kiln_status kiln_stream_synchronize(kiln_context *ctx, CUstream stream) {
  kiln_status st = kiln_check_context(ctx, "kiln_stream_synchronize");
  if (st || ctx->device_type == kDLCPU) return st;
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, "kiln_stream_synchronize"))) return st;
  CUresult r = ctx->cu->cuStreamSynchronize(stream);
  kiln_ctx_leave(ctx, &scope);
  return r == CUDA_SUCCESS ? KILN_OK : kiln_cuda_fail(ctx->cu, r, "kiln_stream_synchronize", "cuStreamSynchronize");
}

/* One allocation holds the managed tensor, its shape and strides; the data is separate. */
typedef struct owned_tensor {
  DLManagedTensorVersioned managed;
  const kiln_context *ctx;
  void *host_block; /* CPU: the malloc'ed block (data is aligned inside it) */
  int64_t dims[2 * KILN_MAX_NDIM];
} owned_tensor;

static void owned_tensor_delete(DLManagedTensorVersioned *self) {
  owned_tensor *t = (owned_tensor *)self->manager_ctx;
  if (!t) return;
  if (t->host_block) {
    free(t->host_block);
  } else if (t->managed.dl_tensor.data) {
    const kiln_context *ctx = t->ctx;
    kiln_ctx_scope scope;
    if (kiln_ctx_enter(ctx, &scope, "kiln_tensor_free") == KILN_OK) {
      ctx->cu->cuMemFree((CUdeviceptr)(uintptr_t)t->managed.dl_tensor.data);
      kiln_ctx_leave(ctx, &scope);
    }
  }
  free(t);
}

kiln_status kiln_tensor_empty(kiln_context *ctx, int32_t ndim, const int64_t *shape, DLDataType dtype,
                              DLManagedTensorVersioned **out) {
  const char *op = "kiln_tensor_empty";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  if (!out) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass a DLManagedTensorVersioned**", op);
  *out = NULL;
  if (ndim < 0 || ndim > KILN_MAX_NDIM)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: ndim is %d; expected 0..%d", op, (int)ndim, KILN_MAX_NDIM);
  if (ndim > 0 && !shape) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: shape is NULL with ndim %d", op, (int)ndim);
  char dn[48];
  size_t elem = kiln_dtype_size(dtype);
  if (!elem)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: dtype %s is not one kiln allocates; expected an int, uint, float or bfloat dtype of whole "
                     "bytes with one lane (e.g. float16, bfloat16, float32, int8)",
                     op, kiln_dtype_name(dtype, dn));
  owned_tensor *t = calloc(1, sizeof *t);
  if (!t) return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of host memory", op);
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0) {
      free(t);
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: shape[%d] = %" PRId64 "; sizes must be >= 0", op, d,
                       shape[d]);
    }
  /* the bytes, with room for the host block's alignment padding */
  int64_t bytes = (int64_t)elem;
  bool fits = true;
  for (int d = 0; d < ndim; d++) fits = fits && !__builtin_mul_overflow(bytes, shape[d], &bytes);
  if (!fits || bytes > INT64_MAX - 512) {
    free(t);
    char sh[160];
    const DLTensor view = {.ndim = ndim, .shape = (int64_t *)(uintptr_t)shape};
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: shape %s of %s is more than the 2^63 - 513 bytes kiln can allocate", op,
                     kiln_shape_str(&view, sh, sizeof sh), kiln_dtype_name(dtype, dn));
  }
  for (int d = 0; d < ndim; d++) t->dims[d] = shape[d];
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    t->dims[KILN_MAX_NDIM + d] = stride;
    stride *= shape[d] ? shape[d] : 1;
  }
  DLTensor *dl = &t->managed.dl_tensor;
  void *data = NULL;
  if (ctx->device_type == kDLCPU) {
    t->host_block = malloc((size_t)bytes + 256);
    if (!t->host_block) {
      free(t);
      return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: could not allocate %" PRId64 " bytes of host memory", op, bytes);
    }
    data = (void *)(((uintptr_t)t->host_block + 255) & ~(uintptr_t)255);
    dl->device = (DLDevice){kDLCPU, 0};
  } else {
    kiln_ctx_scope scope;
    if ((st = kiln_ctx_enter(ctx, &scope, op))) {
      free(t);
      return st;
    }
    CUdeviceptr p = 0;
    CUresult r = ctx->cu->cuMemAlloc(&p, bytes ? (size_t)bytes : 1); /* cuMemAlloc is 256-byte aligned */
    kiln_ctx_leave(ctx, &scope);
    if (r != CUDA_SUCCESS) {
      free(t);
      st = kiln_cuda_fail(ctx->cu, r, op, "cuMemAlloc");
      return r == CUDA_ERROR_OUT_OF_MEMORY
                 ? kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "%s: out of device memory allocating %" PRId64 " bytes on %s",
                             op, bytes, ctx->info.name)
                 : st;
    }
    data = (void *)(uintptr_t)p;
    dl->device = (DLDevice){kDLCUDA, ctx->ordinal};
  }
  t->ctx = ctx;
  dl->data = data;
  dl->ndim = ndim;
  dl->dtype = dtype;
  dl->shape = t->dims;
  dl->strides = t->dims + KILN_MAX_NDIM;
  dl->byte_offset = 0;
  t->managed.version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  t->managed.manager_ctx = t;
  t->managed.deleter = owned_tensor_delete;
  *out = &t->managed;
  return KILN_OK;
}

void kiln_tensor_free(DLManagedTensorVersioned *t) {
  if (t && t->deleter) t->deleter(t);
}

static bool is_compact(const DLTensor *t) {
  int64_t expect = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->shape[d] != 1 && kiln_tensor_stride(t, d) != expect) return false;
    expect *= t->shape[d];
  }
  return true;
}

kiln_status kiln_tensor_copy(kiln_context *ctx, const DLTensor *src, const DLTensor *dst, CUstream stream) {
  const char *op = "kiln_tensor_copy";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  if (!dst || !src) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass a DLTensor", op, dst ? "src" : "dst");
  const DLTensor *const t[2] = {src, dst};
  static const char *const name[2] = {"src", "dst"};
  char a[160], b[160], da[48], db[48];
  for (int i = 0; i < 2; i++) {
    if (t[i]->ndim < 0 || t[i]->ndim > KILN_MAX_NDIM)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has ndim %d; expected 0..%d", op, name[i],
                       (int)t[i]->ndim, KILN_MAX_NDIM);
    if (t[i]->ndim > 0 && !t[i]->shape)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has ndim %d but shape is NULL; pass its shape", op,
                       name[i], (int)t[i]->ndim);
  }
  if (src->ndim != dst->ndim || memcmp(src->shape, dst->shape, sizeof(int64_t) * (size_t)src->ndim) != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: dst has shape %s but src has shape %s; they must match", op,
                     kiln_shape_str(dst, a, sizeof a), kiln_shape_str(src, b, sizeof b));
  if (memcmp(&src->dtype, &dst->dtype, sizeof src->dtype) != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: dst is %s but src is %s; use kiln_cast to convert", op,
                     kiln_dtype_name(dst->dtype, da), kiln_dtype_name(src->dtype, db));
  /* bytes, whatever the element type (bool, complex, vector lanes): only sub-byte ones have no
   * layout a byte copy could honour */
  const int64_t elem_bits = (int64_t)src->dtype.bits * src->dtype.lanes;
  if (elem_bits == 0 || elem_bits % 8 != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: src has dtype %s, elements of %" PRId64 " bits; kiln_tensor_copy copies elements of whole "
                     "bytes (copy the packed buffer as uint8)",
                     op, kiln_dtype_name(src->dtype, db), elem_bits);
  for (int d = 0; d < src->ndim; d++)
    if (src->shape[d] < 0)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: src has shape %s, a negative size in dimension %d", op,
                       kiln_shape_str(src, a, sizeof a), d);
  int64_t bytes = elem_bits / 8;
  for (int d = 0; d < src->ndim; d++)
    if (__builtin_mul_overflow(bytes, src->shape[d], &bytes))
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: src has shape %s of %s: more than 2^63 - 1 bytes", op,
                       kiln_shape_str(src, a, sizeof a), kiln_dtype_name(src->dtype, db));
  if (bytes == 0) return KILN_OK; /* nothing to copy, whatever the strides, devices or pointers */
  if (!is_compact(src) || !is_compact(dst))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s is not compact row-major; copy supports compact tensors only",
                     op, is_compact(src) ? "dst" : "src");
  /* each side host memory (kDLCPU, kDLCUDAHost, on any context) or the context's own GPU */
  for (int i = 0; i < 2; i++) {
    const DLDevice d = t[i]->device;
    if (d.device_type == kDLCPU || d.device_type == kDLCUDAHost) continue;
    if (ctx->device_type != kDLCPU && d.device_type != kDLCUDA)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                       "%s: %s is on %s; kiln_tensor_copy copies between host memory (kDLCPU, kDLCUDAHost) and the "
                       "context's GPU (kDLCUDA:%d)",
                       op, name[i], kiln_device_str(d, da), ctx->ordinal);
    if ((st = kiln_check_device(ctx, op, name[i], " is on", d,
                                "it copies host memory only: use a CUDA context to copy to or from a GPU",
                                "move the tensor")))
      return st;
  }
  for (int i = 0; i < 2; i++)
    if (!t[i]->data)
      return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: %s has %" PRId64 " bytes but data is NULL; pass its buffer",
                       op, name[i], bytes);
  if (ctx->device_type == kDLCPU) {
    memmove(kiln_tensor_data(dst), kiln_tensor_data(src), (size_t)bytes);
    return KILN_OK;
  }
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
  CUresult r = ctx->cu->cuMemcpyAsync((CUdeviceptr)(uintptr_t)kiln_tensor_data(dst),
                                      (CUdeviceptr)(uintptr_t)kiln_tensor_data(src), (size_t)bytes, stream);
  kiln_ctx_leave(ctx, &scope);
  return r == CUDA_SUCCESS ? KILN_OK : kiln_cuda_fail(ctx->cu, r, op, "cuMemcpyAsync");
}
