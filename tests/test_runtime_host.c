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
      cmocka_unit_test(tensor_empty_copy_cast_on_cpu),
      cmocka_unit_test(cast_strided_view),
      cmocka_unit_test(misaligned_element_pointer_is_rejected),
  };
  return cmocka_run_group_tests_name("runtime_host", tests, NULL, NULL);
}
