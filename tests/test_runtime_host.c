/*
 * test_runtime_host.c — the runtime on a machine without (or ignoring) a GPU: statuses and
 * messages, the CPU context, allocation and copy helpers, and, with --no-driver (run by CTest
 * with KILN_LIBCUDA pointing nowhere), the missing-driver path.
 */
#include "test_util.h"

static void status_strings(void **state) {
  (void)state;
  assert_string_equal(kiln_status_string(KILN_OK), "KILN_OK");
  assert_string_equal(kiln_status_string(KILN_ERROR_INVALID_ARGUMENT), "KILN_ERROR_INVALID_ARGUMENT");
  assert_string_equal(kiln_status_string(KILN_ERROR_NO_DRIVER), "KILN_ERROR_NO_DRIVER");
  assert_string_equal(kiln_status_string((kiln_status)999), "KILN_ERROR_UNKNOWN_STATUS");
  int ma = -1, mi = -1, pa = -1;
  kiln_version(&ma, &mi, &pa);
  assert_int_equal(ma, KILN_VERSION_MAJOR);
  assert_int_equal(mi, KILN_VERSION_MINOR);
  assert_int_equal(pa, KILN_VERSION_PATCH);
}

static void context_create_errors(void **state) {
  (void)state;
  assert_kiln_fails(kiln_context_create(kDLCPU, 0, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_context_create",
                    "out is NULL");
  kiln_context *ctx = (kiln_context *)0x1;
  assert_kiln_fails(kiln_context_create(kDLVulkan, 0, &ctx), KILN_ERROR_INVALID_ARGUMENT, "device_type is 7",
                    "kDLCPU (1) or kDLCUDA (2)");
  assert_null(ctx);
  assert_kiln_fails(kiln_context_info(NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
  kiln_context_destroy(NULL); /* a no-op */
}

static void error_message_is_thread_local_and_clearable(void **state) {
  (void)state;
  kiln_clear_error();
  assert_string_equal(kiln_last_error(), "");
  assert_int_equal(kiln_context_create(kDLCPU, 0, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_true(strlen(kiln_last_error()) > 0);
  kiln_clear_error();
  assert_string_equal(kiln_last_error(), "");
}

static void cpu_context(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  kiln_device_info info;
  assert_kiln_ok(kiln_context_info(ctx, &info));
  assert_string_equal(info.name, "CPU");
  assert_int_equal(info.ordinal, -1);
  assert_true(info.sm_count >= 1);
  CUstream s = (CUstream)0x1;
  assert_kiln_ok(kiln_stream_create(ctx, &s));
  assert_null(s);
  assert_kiln_ok(kiln_stream_synchronize(ctx, s));
  assert_kiln_ok(kiln_stream_destroy(ctx, s));
  kiln_context_destroy(ctx);
}

/* The stream helpers' argument errors (on the CPU context streams are NULL and calls no-ops). */
static void stream_errors(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  CUstream s = (CUstream)0x1;
  assert_kiln_fails(kiln_stream_create(ctx, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_stream_create: out is NULL; pass a CUstream*");
  assert_kiln_fails(kiln_stream_create(NULL, &s), KILN_ERROR_INVALID_ARGUMENT, "kiln_stream_create: ctx is NULL");
  assert_true(s == (CUstream)0x1); /* not written without a context */
  assert_kiln_fails(kiln_stream_synchronize(NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_stream_synchronize: ctx is NULL");
  assert_kiln_fails(kiln_stream_destroy(NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_stream_destroy: ctx is NULL");
  kiln_context_destroy(ctx);
}

static void tensor_empty_copy_cast_on_cpu(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  int64_t shape[3] = {2, 3, 5};
  DLManagedTensorVersioned *a = NULL, *b = NULL, *h = NULL;
  assert_kiln_ok(kiln_tensor_empty(ctx, 3, shape, TEST_F32, &a));
  assert_kiln_ok(kiln_tensor_empty(ctx, 3, shape, TEST_F32, &b));
  assert_kiln_ok(kiln_tensor_empty(ctx, 3, shape, TEST_F16, &h));
  DLTensor *ta = &a->dl_tensor;
  assert_int_equal(ta->strides[0], 15);
  assert_int_equal(ta->strides[1], 5);
  assert_int_equal(ta->strides[2], 1);
  assert_int_equal(ta->byte_offset, 0);
  assert_int_equal((uintptr_t)ta->data % 256, 0);
  assert_int_equal(a->version.major, 1);
  float *pa = ta->data;
  for (int i = 0; i < 30; i++) pa[i] = (float)i * 0.25f - 3.0f;
  assert_kiln_ok(kiln_tensor_copy(ctx, ta, &b->dl_tensor, NULL));
  assert_memory_equal(ta->data, b->dl_tensor.data, 30 * sizeof(float));
  assert_kiln_ok(kiln_cast(ctx, ta, &h->dl_tensor, NULL));
  for (int i = 0; i < 30; i++) assert_int_equal(((uint16_t *)h->dl_tensor.data)[i], kiln_f32_to_f16(pa[i]));
  /* copy refuses a dtype change and points to kiln_cast */
  assert_kiln_fails(kiln_tensor_copy(ctx, ta, &h->dl_tensor, NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_tensor_copy",
                    "float16", "float32", "kiln_cast");
  kiln_tensor_free(a);
  kiln_tensor_free(b);
  kiln_tensor_free(h);
  kiln_tensor_free(NULL);
  int64_t bad[1] = {-4};
  assert_kiln_fails(kiln_tensor_empty(ctx, 1, bad, TEST_F32, &a), KILN_ERROR_INVALID_ARGUMENT, "kiln_tensor_empty",
                    "shape[0] = -4");
  DLDataType vec = {kDLFloat, 32, 4};
  assert_kiln_fails(kiln_tensor_empty(ctx, 1, shape, vec, &a), KILN_ERROR_INVALID_ARGUMENT, "dtype(code=2, bits=32, lanes=4)");
  kiln_context_destroy(ctx);
}

/* kiln_tensor_empty's argument errors; *out stays NULL after each. */
static void tensor_empty_errors(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  int64_t shape[2] = {2, 3};
  DLManagedTensorVersioned *t = (DLManagedTensorVersioned *)0x1;
  assert_kiln_fails(kiln_tensor_empty(NULL, 2, shape, TEST_F32, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: ctx is NULL");
  assert_kiln_fails(kiln_tensor_empty(ctx, 2, shape, TEST_F32, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: out is NULL", "DLManagedTensorVersioned**");
  assert_kiln_fails(kiln_tensor_empty(ctx, -1, shape, TEST_F32, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: ndim is -1; expected 0..8");
  assert_null(t);
  t = (DLManagedTensorVersioned *)0x1;
  assert_kiln_fails(kiln_tensor_empty(ctx, 9, shape, TEST_F32, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: ndim is 9; expected 0..8");
  assert_null(t);
  assert_kiln_fails(kiln_tensor_empty(ctx, 2, NULL, TEST_F32, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: shape is NULL with ndim 2");
  /* elements that fit int64 but whose bytes do not, and bytes too close to INT64_MAX to pad */
  int64_t huge[1] = {INT64_MAX / 2};
  assert_kiln_fails(kiln_tensor_empty(ctx, 1, huge, TEST_F32, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: shape [4611686018427387903] of float32 is more than the 2^63 - 513 bytes kiln "
                    "can allocate");
  int64_t edge[1] = {INT64_MAX - 500};
  assert_kiln_fails(kiln_tensor_empty(ctx, 1, edge, (DLDataType){kDLUInt, 8, 1}, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: shape [9223372036854775307] of uint8 is more than the 2^63 - 513 bytes");
  int64_t neg[2] = {3, -1}, wide[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 0};
  assert_kiln_fails(kiln_tensor_empty(ctx, 2, neg, TEST_F32, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: shape[1] = -1; sizes must be >= 0");
  /* sizes whose product overflows before a later 0 are refused rather than wrapped */
  assert_kiln_fails(kiln_tensor_empty(ctx, 3, wide, TEST_F32, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: shape [1099511627776, 1099511627776, 0] of float32 is more than");
  assert_null(t);
  /* whole-byte dtypes kiln does not allocate: bool and complex (named in the message) */
  assert_kiln_fails(kiln_tensor_empty(ctx, 2, shape, (DLDataType){kDLBool, 8, 1}, &t), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_empty: dtype bool8 is not one kiln allocates; expected an int, uint, float or bfloat "
                    "dtype of whole bytes with one lane");
  assert_kiln_fails(kiln_tensor_empty(ctx, 2, shape, (DLDataType){kDLComplex, 64, 1}, &t),
                    KILN_ERROR_INVALID_ARGUMENT, "dtype dtype(code=5, bits=64, lanes=1) is not one kiln allocates");
  assert_null(t);
  /* rank 0 (one element, shape may be NULL) and rank 8 are accepted */
  assert_kiln_ok(kiln_tensor_empty(ctx, 0, NULL, TEST_F32, &t));
  kiln_tensor_free(t);
  int64_t ones[8] = {1, 1, 1, 1, 1, 1, 2, 3};
  assert_kiln_ok(kiln_tensor_empty(ctx, 8, ones, TEST_F32, &t));
  kiln_tensor_free(t);
  kiln_context_destroy(ctx);
}

/* kiln_tensor_copy's argument errors on the CPU context, in the order it checks them. */
static void tensor_copy_errors(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
  int64_t s23[2] = {2, 3};
  test_tensor src = test_host_tensor(a, TEST_F32, 2, s23), dst = test_host_tensor(b, TEST_F32, 2, s23);
  assert_kiln_fails(kiln_tensor_copy(NULL, test_dl(&src), test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: ctx is NULL");
  assert_kiln_fails(kiln_tensor_copy(ctx, NULL, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src is NULL; pass a DLTensor");
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), NULL, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst is NULL");
  /* either side's rank out of range, or a NULL shape, named */
  test_tensor x = src;
  x.t.ndim = 9;
  assert_kiln_fails(kiln_tensor_copy(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src has ndim 9; expected 0..8");
  x.t.ndim = -1;
  assert_kiln_fails(kiln_tensor_copy(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src has ndim -1; expected 0..8");
  x = src, test_dl(&x), x.t.shape = NULL;
  assert_kiln_fails(kiln_tensor_copy(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src has ndim 2 but shape is NULL; pass its shape");
  x = dst, test_dl(&x), x.t.shape = NULL;
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst has ndim 2 but shape is NULL; pass its shape");
  x = dst, test_dl(&x), x.t.ndim = 9;
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst has ndim 9; expected 0..8");
  /* shapes: other sizes, another rank with the same leading sizes */
  int64_t s32[2] = {3, 2}, s231[3] = {2, 3, 1};
  x = test_host_tensor(b, TEST_F32, 2, s32);
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), test_dl(&x), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst has shape [3, 2] but src has shape [2, 3]; they must match");
  x = test_host_tensor(b, TEST_F32, 3, s231);
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), test_dl(&x), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst has shape [2, 3, 1] but src has shape [2, 3]");
  /* a negative size, even in a tensor with no elements; a byte count beyond int64 */
  int64_t neg[2] = {0, -3}, big[2] = {(int64_t)1 << 62, 2};
  DLTensor sn = {.data = a, .device = {kDLCPU, 0}, .ndim = 2, .dtype = TEST_F32, .shape = neg};
  DLTensor dn = sn;
  dn.data = b;
  assert_kiln_fails(kiln_tensor_copy(ctx, &sn, &dn, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src has shape [0, -3], a negative size in dimension 1");
  sn.shape = dn.shape = big; /* 2^63 elements overflow, and so do 2^62 · 2 of 4 bytes */
  assert_kiln_fails(kiln_tensor_copy(ctx, &sn, &dn, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src has shape [4611686018427387904, 2] of float32: more than 2^63 - 1 bytes");
  /* Regression: dtypes kiln computes nothing on (bool, complex, vector lanes) used to count 0
   * bytes, so the copy returned KILN_OK having copied nothing. They are bytes like any other;
   * only elements of sub-byte width are refused. */
  uint8_t flags[6] = {1, 0, 1, 1, 0, 1}, flags_out[6] = {0};
  test_tensor fs = test_host_tensor(flags, ((DLDataType){kDLBool, 8, 1}), 2, s23);
  test_tensor fd = test_host_tensor(flags_out, ((DLDataType){kDLBool, 8, 1}), 2, s23);
  assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&fs), test_dl(&fd), NULL));
  assert_memory_equal(flags, flags_out, sizeof flags);
  float pairs[12], pairs_out[12] = {0}; /* complex64 [2, 3] */
  for (int i = 0; i < 12; i++) pairs[i] = (float)i - 2.5f;
  test_tensor cs = test_host_tensor(pairs, ((DLDataType){kDLComplex, 64, 1}), 2, s23);
  test_tensor cd = test_host_tensor(pairs_out, ((DLDataType){kDLComplex, 64, 1}), 2, s23);
  assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&cs), test_dl(&cd), NULL));
  assert_memory_equal(pairs, pairs_out, sizeof pairs);
  memset(pairs_out, 0, sizeof pairs_out); /* float32x2 [2, 3]: the same 48 bytes */
  test_tensor vs = test_host_tensor(pairs, ((DLDataType){kDLFloat, 32, 2}), 2, s23);
  test_tensor vd = test_host_tensor(pairs_out, ((DLDataType){kDLFloat, 32, 2}), 2, s23);
  assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&vs), test_dl(&vd), NULL));
  assert_memory_equal(pairs, pairs_out, sizeof pairs);
  vs.t.dtype = vd.t.dtype = (DLDataType){kDLFloat, 4, 1};
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&vs), test_dl(&vd), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src has dtype", "elements of 4 bits", "copy the packed buffer as uint8");
  vs.t.dtype = vd.t.dtype = (DLDataType){kDLFloat, 0, 1};
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&vs), test_dl(&vd), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "elements of 0 bits");
  /* strided views are refused, naming the one that is not compact */
  x = src, test_dl(&x), x.strides[0] = 1, x.strides[1] = 2;
  assert_kiln_fails(kiln_tensor_copy(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src is not compact row-major", "compact tensors only");
  x = dst, test_dl(&x), x.strides[0] = 4;
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst is not compact row-major");
  /* NULL data with elements, named */
  x = src, test_dl(&x), x.t.data = NULL;
  assert_kiln_fails(kiln_tensor_copy(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src has 24 bytes but data is NULL; pass its buffer");
  x = dst, test_dl(&x), x.t.data = NULL;
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst has 24 bytes but data is NULL");
  /* a GPU tensor on the CPU context, either side: refused, never read as host memory */
  x = src, test_dl(&x), x.t.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(kiln_tensor_copy(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src is on kDLCUDA:0 but the context is the CPU's", "use a CUDA context");
  x = dst, test_dl(&x), x.t.device = (DLDevice){kDLCUDA, 0};
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst is on kDLCUDA:0 but the context is the CPU's");
  /* Regression: any device but kDLCUDA used to count as host memory, so a ROCm or Vulkan
   * pointer was memmoved from (or handed to cuMemcpyAsync on a CUDA context). */
  x = src, test_dl(&x), x.t.device = (DLDevice){kDLROCM, 0};
  assert_kiln_fails(kiln_tensor_copy(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: src is on kDLROCM:0 but the context is the CPU's");
  x = dst, test_dl(&x), x.t.device = (DLDevice){kDLVulkan, 1};
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst is on kDLVulkan:1");
  x = dst, test_dl(&x), x.t.device = (DLDevice){(DLDeviceType)42, 0};
  assert_kiln_fails(kiln_tensor_copy(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_tensor_copy: dst is on device type 42:0");
  /* pinned host memory is host memory */
  x = dst, test_dl(&x), x.t.device = (DLDevice){kDLCUDAHost, 0};
  assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&src), &x.t, NULL));
  assert_memory_equal(a, b, sizeof a);
  memset(b, 0, sizeof b);
  for (int i = 0; i < 6; i++) assert_true(b[i] == 0.0f); /* nothing was written */
  /* no elements: nothing to copy, whatever the strides and data */
  int64_t s03[2] = {0, 3};
  x = test_host_tensor(NULL, TEST_F32, 2, s03);
  x.strides[0] = 7;
  test_tensor y = test_host_tensor(NULL, TEST_F32, 2, s03);
  assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&x), test_dl(&y), NULL));
  assert_kiln_ok(kiln_tensor_copy(ctx, test_dl(&src), test_dl(&dst), NULL));
  assert_memory_equal(a, b, sizeof a);
  kiln_context_destroy(ctx);
}

static void cast_strided_view(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  /* src: a transposed view of a [3, 4] f32 buffer; dst: compact bf16 [4, 3] */
  float buf[12];
  for (int i = 0; i < 12; i++) buf[i] = (float)i + 0.5f;
  uint16_t out[12];
  int64_t shape[2] = {4, 3}, sst[2] = {1, 4};
  DLTensor src = {.data = buf, .device = {kDLCPU, 0}, .ndim = 2, .dtype = TEST_F32, .shape = shape, .strides = sst};
  test_tensor dst = test_host_tensor(out, TEST_BF16, 2, shape);
  assert_kiln_ok(kiln_cast(ctx, &src, test_dl(&dst), NULL));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) assert_int_equal(out[i * 3 + j], kiln_f32_to_bf16(buf[j * 4 + i]));
  /* dst with a zero stride would write one element twice */
  dst.strides[0] = 0;
  assert_kiln_fails(kiln_cast(ctx, &src, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_cast",
                    "stride 0 in dimension 0");
  /* in place is refused */
  DLTensor same = src;
  assert_kiln_fails(kiln_cast(ctx, &src, &same, NULL), KILN_ERROR_INVALID_ARGUMENT, "overlaps");
  kiln_context_destroy(ctx);
}

/* kiln_cast's argument errors: shapes, rank, dtypes, and the device each tensor is on. */
static void cast_errors(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  float in[24] = {0};
  uint16_t out[24];
  memset(out, 0xAB, sizeof out);
  int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s231[3] = {2, 3, 1};
  test_tensor src = test_host_tensor(in, TEST_F32, 2, s23), dst = test_host_tensor(out, TEST_F16, 2, s23);
  test_tensor x = test_host_tensor(out, TEST_F16, 2, s32);
  assert_kiln_fails(kiln_cast(ctx, test_dl(&src), test_dl(&x), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: dst has shape [3, 2] but src has shape [2, 3]; they must match");
  /* another rank whose leading sizes agree: caught by the rank, not the sizes */
  x = test_host_tensor(out, TEST_F16, 3, s231);
  assert_kiln_fails(kiln_cast(ctx, test_dl(&src), test_dl(&x), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: dst has shape [2, 3, 1] but src has shape [2, 3]");
  /* rank 5 (valid for a DLTensor, beyond the cast's rank-4 index space) */
  int64_t s5[5] = {1, 2, 1, 3, 4};
  DLTensor s5t = {.data = in, .device = {kDLCPU, 0}, .ndim = 5, .dtype = TEST_F32, .shape = s5};
  DLTensor d5t = s5t;
  d5t.data = out, d5t.dtype = TEST_F16;
  assert_kiln_fails(kiln_cast(ctx, &s5t, &d5t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: src has rank 5; expected rank <= 4 (reshape first)");
  /* dtypes kiln handles elsewhere but the cast does not */
  x = src, test_dl(&x), x.t.dtype = (DLDataType){kDLInt, 32, 1};
  assert_kiln_fails(kiln_cast(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: src has dtype int32; expected float32, float16 or bfloat16");
  x = dst, test_dl(&x), x.t.dtype = (DLDataType){kDLFloat, 64, 1};
  assert_kiln_fails(kiln_cast(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: dst has dtype float64; expected float32, float16 or bfloat16");
  x = dst, test_dl(&x), x.t.dtype = (DLDataType){kDLUInt, 16, 1};
  assert_kiln_fails(kiln_cast(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: dst has dtype uint16; expected float32");
  /* a dtype no op handles */
  x = src, test_dl(&x), x.t.dtype = (DLDataType){kDLBool, 8, 1};
  assert_kiln_fails(kiln_cast(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: src has dtype bool8, which kiln does not handle");
  /* device types other than CUDA are named too */
  x = src, test_dl(&x), x.t.device = (DLDevice){kDLROCM, 1};
  assert_kiln_fails(kiln_cast(ctx, &x.t, test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: src is on kDLROCM:1 but the context is the CPU's");
  x = dst, test_dl(&x), x.t.device = (DLDevice){kDLVulkan, 0};
  assert_kiln_fails(kiln_cast(ctx, test_dl(&src), &x.t, NULL), KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_cast: dst is on kDLVulkan:0 but the context is the CPU's");
  for (int i = 0; i < 24; i++) assert_int_equal(out[i], 0xABAB); /* nothing was written */
  assert_kiln_ok(kiln_cast(ctx, test_dl(&src), test_dl(&dst), NULL));
  kiln_context_destroy(ctx);
}

/* Regression (libFuzzer, tests/fuzz/fuzz_validation.c): a byte_offset that leaves the first
 * element misaligned was accepted, and the CPU path loaded 16-bit values from an odd address. */
static void misaligned_element_pointer_is_rejected(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  _Alignas(16) uint16_t buf[32] = {0};
  float out[8];
  int64_t shape[1] = {8};
  test_tensor src = test_host_tensor(buf, TEST_F16, 1, shape), dst = test_host_tensor(out, TEST_F32, 1, shape);
  src.t.byte_offset = 1;
  assert_kiln_fails(kiln_cast(ctx, test_dl(&src), test_dl(&dst), NULL), KILN_ERROR_INVALID_ARGUMENT, "kiln_cast",
                    "src starts at", "byte_offset 1", "not aligned to its 2-byte elements");
  src.t.byte_offset = 2; /* aligned: accepted */
  assert_kiln_ok(kiln_cast(ctx, test_dl(&src), test_dl(&dst), NULL));
  kiln_context_destroy(ctx);
}

/* Runs with KILN_LIBCUDA=/nonexistent/...: the driver cannot load. */
static void no_driver(void **state) {
  (void)state;
  int n = 5;
  assert_kiln_fails(kiln_device_count(&n), KILN_ERROR_NO_DRIVER, "kiln_device_count", "no CUDA driver",
                    "/nonexistent/libcuda.so.1", "kDLCPU");
  assert_int_equal(n, 0);
  kiln_context *ctx = (kiln_context *)0x1;
  assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_NO_DRIVER, "kiln_context_create",
                    "no CUDA driver");
  assert_null(ctx);
  /* The CPU keeps working without a driver. */
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  kiln_context_destroy(ctx);
}

int main(int argc, char **argv) {
  test_apply_filter(argc, argv);
  if (argc > 1 && !strcmp(argv[1], "--no-driver")) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(no_driver)};
    return cmocka_run_group_tests_name("no_driver", tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(status_strings),
      cmocka_unit_test(context_create_errors),
      cmocka_unit_test(error_message_is_thread_local_and_clearable),
      cmocka_unit_test(cpu_context),
      cmocka_unit_test(stream_errors),
      cmocka_unit_test(tensor_empty_copy_cast_on_cpu),
      cmocka_unit_test(tensor_empty_errors),
      cmocka_unit_test(tensor_copy_errors),
      cmocka_unit_test(cast_strided_view),
      cmocka_unit_test(cast_errors),
      cmocka_unit_test(misaligned_element_pointer_is_rejected),
  };
  return cmocka_run_group_tests_name("runtime_host", tests, NULL, NULL);
}
