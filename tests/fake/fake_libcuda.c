/*
 * fake_libcuda.c — a stand-in for libcuda.so.1 that lets host tests drive kiln's driver-loading
 * fault paths on a machine without a GPU (selected by KILN_LIBCUDA=path/to/this.so).
 * FAKE_CUDA_MODE picks the fault:
 *   old        cuDriverGetVersion reports 11.8 (too old for cuLibraryLoadData)
 *   missing    cuGetProcAddress knows no cuLibraryLoadData (an old driver's symbol table)
 *   nodevice   cuInit fails with CUDA_ERROR_NO_DEVICE (a driver without GPUs)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

static const char *mode(void) {
  const char *m = getenv("FAKE_CUDA_MODE");
  return m ? m : "";
}

static CUresult fake_version(int *v) {
  *v = strcmp(mode(), "old") == 0 ? 11080 : 13000;
  return 0;
}
static CUresult fake_init(unsigned flags) {
  (void)flags;
  return strcmp(mode(), "nodevice") == 0 ? 100 /* CUDA_ERROR_NO_DEVICE */ : 0;
}
static CUresult fake_error_name(CUresult r, const char **s) {
  *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
static CUresult fake_count(int *n) {
  *n = 0;
  return 0;
}
static CUresult fake_other(void) { return 999; /* CUDA_ERROR_UNKNOWN: never reached by the tests */ }

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                                                     uint64_t flags, int *status) {
  (void)version, (void)flags;
  if (status) *status = 0;
  if (strcmp(mode(), "missing") == 0 && strcmp(symbol, "cuLibraryLoadData") == 0) {
    *pfn = NULL;
    return 500; /* CUDA_ERROR_NOT_FOUND */
  }
  if (!strcmp(symbol, "cuDriverGetVersion")) *pfn = (void *)fake_version;
  else if (!strcmp(symbol, "cuInit")) *pfn = (void *)fake_init;
  else if (!strcmp(symbol, "cuGetErrorName") || !strcmp(symbol, "cuGetErrorString")) *pfn = (void *)fake_error_name;
  else if (!strcmp(symbol, "cuDeviceGetCount")) *pfn = (void *)fake_count;
  else *pfn = (void *)fake_other;
  return 0;
}
