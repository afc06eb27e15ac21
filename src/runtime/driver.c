/*
 * driver.c — loading libcuda.so.1 at run time.
 *
 * Why not link against libcuda: a CPU-only user must be able to load libkiln on a machine with no
 * driver, and a framework that already loaded a driver must share it (dlopen returns the same
 * handle). Why cuGetProcAddress rather than dlsym: the driver exports several ABI versions of many
 * functions (cuMemAlloc is the 32-bit legacy one, cuMemAlloc_v2 the real one); cuGetProcAddress
 * maps a base name and an ABI version to the right entry point.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime.h"

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*get_proc_v1_fn)(const char *, void **, int, uint64_t);

static kiln_cuda_api api;
static kiln_status load_status = KILN_ERROR_INTERNAL;
static char load_message[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* The load runs once, on whichever thread comes first; its message is kept here and copied into
 * the thread-local message of every later caller. */
#define LOAD_FAIL(status, ...) \
  (snprintf(load_message, sizeof load_message, __VA_ARGS__), load_status = (status))

static void load_driver(void) {
  const char *path = getenv("KILN_LIBCUDA");
  if (!path || !*path) path = "libcuda.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    LOAD_FAIL(KILN_ERROR_NO_DRIVER,
                            "no CUDA driver: dlopen(\"%s\") failed (%s); install the NVIDIA driver, or use a CPU "
                            "context (kDLCPU)",
                            path, why ? why : "unknown reason");
    return;
  }
  get_proc_v2_fn gpa2 = (get_proc_v2_fn)dlsym(lib, "cuGetProcAddress_v2");
  get_proc_v1_fn gpa1 = gpa2 ? NULL : (get_proc_v1_fn)dlsym(lib, "cuGetProcAddress");
  if (!gpa2 && !gpa1) {
    LOAD_FAIL(KILN_ERROR_DRIVER_TOO_OLD,
                            "the CUDA driver at \"%s\" has no cuGetProcAddress (driver older than CUDA 11.3); "
                            "kiln needs a CUDA 12.0 or newer driver",
                            path);
    dlclose(lib);
    return;
  }
#define KILN_CUDA_RESOLVE(name, params)                                                                     \
  {                                                                                                         \
    void *fn = NULL;                                                                                        \
    int found = 0;                                                                                          \
    CUresult r = gpa2 ? gpa2(#name, &fn, KILN_CUDA_ABI_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found)        \
                      : gpa1(#name, &fn, KILN_CUDA_ABI_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);               \
    if (r == CUDA_ERROR_STUB_LIBRARY) {                                                                     \
      LOAD_FAIL(KILN_ERROR_NO_DRIVER,                                                                       \
                "\"%s\" is the CUDA toolkit's stub libcuda, not a driver; install the NVIDIA driver, or use " \
                "a CPU context (kDLCPU)",                                                                   \
                path);                                                                                      \
      dlclose(lib);                                                                                         \
      return;                                                                                               \
    }                                                                                                       \
    if (r != CUDA_SUCCESS || !fn) {                                                                         \
      LOAD_FAIL(KILN_ERROR_DRIVER_TOO_OLD,                                                    \
                              "the CUDA driver at \"%s\" has no entry point %s for the CUDA %d.%d ABI "     \
                              "(error %d); kiln needs a CUDA 12.0 or newer driver",                         \
                              path, #name, KILN_CUDA_ABI_VERSION / 1000, KILN_CUDA_ABI_VERSION % 1000 / 10, \
                              (int)r);                                                                      \
      dlclose(lib);                                                                                         \
      return;                                                                                               \
    }                                                                                                       \
    *(void **)&api.name = fn;                                                                               \
  }
  KILN_CUDA_FUNCTIONS(KILN_CUDA_RESOLVE)
#undef KILN_CUDA_RESOLVE

  int version = 0;
  if (api.cuDriverGetVersion(&version) != CUDA_SUCCESS || version < KILN_CUDA_ABI_VERSION) {
    LOAD_FAIL(KILN_ERROR_DRIVER_TOO_OLD,
                            "the CUDA driver reports version %d.%d; kiln needs CUDA 12.0 or newer "
                            "(cuLibraryLoadData); update the NVIDIA driver",
                            version / 1000, version % 1000 / 10);
    dlclose(lib);
    return;
  }
  api.driver_version = version;
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name = "?";
    api.cuGetErrorName(r, &name);
    LOAD_FAIL(r == CUDA_ERROR_NO_DEVICE ? KILN_ERROR_NO_DEVICE : KILN_ERROR_CUDA,
                            "cuInit failed with %s (%d): the driver is loaded but no usable CUDA device was "
                            "found; check nvidia-smi, or use a CPU context (kDLCPU)",
                            name ? name : "?", (int)r); /* NULL for a code the driver cannot name */
    /* keep the library loaded: the table is valid, only devices are missing */
    return;
  }
  load_status = KILN_OK;
  /* The library stays loaded for the life of the process (as the CUDA runtime does). */
}

const kiln_cuda_api *kiln_cuda(const char *who, kiln_status *status) {
  pthread_once(&load_once, load_driver);
  if (load_status == KILN_OK) {
    if (status) *status = KILN_OK;
    return &api;
  }
  kiln_status st = kiln_fail(load_status, "%s: %s", who, load_message);
  if (status) *status = st;
  return NULL;
}

kiln_status kiln_cuda_fail(const kiln_cuda_api *cu, CUresult r, const char *who, const char *call) {
  const char *name = "unknown error", *text = "";
  if (cu) {
    cu->cuGetErrorName(r, &name);
    cu->cuGetErrorString(r, &text);
  }
  return kiln_fail(r == CUDA_ERROR_OUT_OF_MEMORY ? KILN_ERROR_OUT_OF_MEMORY : KILN_ERROR_CUDA,
                   "%s: %s failed with %s (%d): %s", who, call, name ? name : "?", (int)r, text ? text : "");
}
