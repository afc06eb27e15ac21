/*
 * test_driver_faults.c — how kiln reports a driver it cannot use. Each case runs as its own
 * CTest entry (the driver is loaded once per process) with KILN_LIBCUDA pointing at
 * tests/fake/fake_libcuda.c built as a shared library and FAKE_CUDA_MODE choosing the fault.
 * Usage: test_driver_faults old|missing|nodevice
 */
#include "test_util.h"

static const char *fault;

static void driver_fault(void **state) {
  (void)state;
  int n = 7;
  kiln_context *ctx = (kiln_context *)0x1;
  if (!strcmp(fault, "old")) {
    assert_kiln_fails(kiln_device_count(&n), KILN_ERROR_DRIVER_TOO_OLD, "kiln_device_count", "version 11.8",
                      "CUDA 12.0 or newer");
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_DRIVER_TOO_OLD, "kiln_context_create");
  } else if (!strcmp(fault, "missing")) {
    assert_kiln_fails(kiln_device_count(&n), KILN_ERROR_DRIVER_TOO_OLD, "no entry point cuLibraryLoadData",
                      "CUDA 12.0 or newer");
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_DRIVER_TOO_OLD, "kiln_context_create",
                      "cuLibraryLoadData");
  } else {
    /* A driver without devices: zero devices, and a context request names the ordinal. */
    assert_kiln_ok(kiln_device_count(&n));
    assert_int_equal(n, 0);
    assert_kiln_fails(kiln_context_create(kDLCUDA, 0, &ctx), KILN_ERROR_NO_DEVICE, "kiln_context_create", "cuInit",
                      "CUDA_ERROR_NO_DEVICE");
  }
  if (strcmp(fault, "nodevice")) assert_int_equal(n, 0);
  assert_null(ctx);
  /* The CPU is unaffected by a broken driver. */
  assert_kiln_ok(kiln_context_create(kDLCPU, 0, &ctx));
  kiln_context_destroy(ctx);
}

int main(int argc, char **argv) {
  fault = argc > 1 ? argv[1] : "old";
  const struct CMUnitTest tests[] = {cmocka_unit_test(driver_fault)};
  return cmocka_run_group_tests_name(fault, tests, NULL, NULL);
}
