/*
 * cuda_driver.h — the slice of the CUDA driver API that kiln uses, declared by kiln itself.
 *
 * kiln has no link-time CUDA dependency: libcuda.so.1 is dlopen'ed at first use and every entry
 * point is resolved through cuGetProcAddress_v2 by its *base* name ("cuMemAlloc", not
 * "cuMemAlloc_v2") at KILN_CUDA_ABI_VERSION. Asking by version is what selects the 64-bit _v2
 * entry points; a plain dlsym("cuMemAlloc") would return the legacy 32-bit one.
 *
 * Types and enum values below match cuda.h of CUDA 12.0+ (tests/test_cuda_abi.c checks each one
 * against the real cuda.h when the toolkit is installed).
 */
#ifndef KILN_CUDA_DRIVER_H
#define KILN_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

/* The ABI the function pointer types below describe (CUDA 12.0). cuLibraryLoadData needs it. */
#define KILN_CUDA_ABI_VERSION 12000

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUevent_st *CUevent;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
};

enum {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

enum {
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

enum {
  CU_STREAM_NON_BLOCKING = 1,
  CU_EVENT_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
};

/* CUtensorMap: an opaque 128-byte TMA descriptor, passed to kernels by value. */
typedef struct kiln_tensor_map {
  _Alignas(128) uint64_t opaque[16];
} kiln_tensor_map;

enum {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, /* int8 operands: TMA moves bytes, the kernel reads them as s8 */
  CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
  CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
  CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_64B = 2,
  CU_TENSOR_MAP_SWIZZLE_128B = 3,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0, /* out-of-bounds elements read as zero */
};

/* cuLaunchKernelEx's launch configuration (CUDA 12): for the occupancy query below (no
 * attributes: the pair kernels carry their cluster shape), for launches as a programmatic
 * dependent of the stream's previous kernel (kiln_launch_dependent), and for clusters whose size
 * the host chooses (kiln_launch_cluster). */
typedef struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  void *attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

/* CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value (here one int: programmatic
 * stream serialization allowed; or three: a cluster's dimensions). */
enum { CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
typedef struct kiln_launch_attr {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int allowed;
    struct {
      unsigned x, y, z;
    } cluster;
  } value;
} kiln_launch_attr;

/* Every driver function kiln calls: X(name, return, parameter list). The table is filled once by
 * kiln_cuda_load(); a missing entry point makes the whole driver unusable (KILN_ERROR_NO_DRIVER). */
#define KILN_CUDA_FUNCTIONS(X)                                                                          \
  X(cuInit, (unsigned int flags))                                                                       \
  X(cuDriverGetVersion, (int *version))                                                                 \
  X(cuGetErrorName, (CUresult err, const char **name))                                                  \
  X(cuGetErrorString, (CUresult err, const char **str))                                                 \
  X(cuDeviceGetCount, (int *count))                                                                     \
  X(cuDeviceGet, (CUdevice * dev, int ordinal))                                                         \
  X(cuDeviceGetName, (char *name, int len, CUdevice dev))                                               \
  X(cuDeviceGetAttribute, (int *value, int attrib, CUdevice dev))                                       \
  X(cuDeviceTotalMem, (size_t * bytes, CUdevice dev))                                                   \
  X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev))                                         \
  X(cuDevicePrimaryCtxRelease, (CUdevice dev))                                                          \
  X(cuCtxGetCurrent, (CUcontext * pctx))                                                                \
  X(cuCtxPushCurrent, (CUcontext ctx))                                                                  \
  X(cuCtxPopCurrent, (CUcontext * pctx))                                                                \
  X(cuCtxSynchronize, (void))                                                                           \
  X(cuLibraryLoadData, (CUlibrary * lib, const void *code, int *jit_options, void **jit_values,          \
                        unsigned int n_jit, int *lib_options, void **lib_values, unsigned int n_lib))   \
  X(cuLibraryUnload, (CUlibrary lib))                                                                   \
  X(cuLibraryGetKernel, (CUkernel * kernel, CUlibrary lib, const char *name))                           \
  X(cuKernelGetFunction, (CUfunction * fn, CUkernel kernel))                                            \
  X(cuFuncGetAttribute, (int *value, int attrib, CUfunction fn))                                        \
  X(cuFuncSetAttribute, (CUfunction fn, int attrib, int value))                                         \
  X(cuLaunchKernel, (CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,    \
                     unsigned bz, unsigned smem, CUstream stream, void **params, void **extra))         \
  X(cuMemAlloc, (CUdeviceptr * ptr, size_t bytes))                                                      \
  X(cuMemFree, (CUdeviceptr ptr))                                                                       \
  X(cuMemGetInfo, (size_t * free_bytes, size_t *total_bytes))                                           \
  X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))                   \
  X(cuMemsetD8Async, (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream))                 \
  X(cuMemsetD16Async, (CUdeviceptr dst, unsigned short value, size_t n, CUstream stream))               \
  X(cuMemsetD32Async, (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream))                 \
  X(cuStreamCreate, (CUstream * stream, unsigned int flags))                                            \
  X(cuStreamDestroy, (CUstream stream))                                                                 \
  X(cuStreamSynchronize, (CUstream stream))                                                             \
  X(cuEventCreate, (CUevent * event, unsigned int flags))                                               \
  X(cuEventRecord, (CUevent event, CUstream stream))                                                    \
  X(cuEventSynchronize, (CUevent event))                                                                \
  X(cuEventElapsedTime, (float *ms, CUevent start, CUevent end))                                        \
  X(cuEventDestroy, (CUevent event))                                                                    \
  X(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction fn, void **params, void **extra))        \
  X(cuOccupancyMaxActiveClusters, (int *clusters, CUfunction fn, const CUlaunchConfig *config))         \
  X(cuTensorMapEncodeTiled, (kiln_tensor_map * map, int dtype, uint32_t rank, void *address,             \
                             const uint64_t *dims, const uint64_t *strides, const uint32_t *box,          \
                             const uint32_t *element_strides, int interleave, int swizzle, int l2_promotion, \
                             int oob_fill))

typedef struct kiln_cuda_api {
#define KILN_CUDA_MEMBER(name, params) CUresult (*name) params;
  KILN_CUDA_FUNCTIONS(KILN_CUDA_MEMBER)
#undef KILN_CUDA_MEMBER
  int driver_version;
} kiln_cuda_api;

/* Loads the driver once (thread-safe) and returns the table, or NULL with the error set
 * (KILN_ERROR_NO_DRIVER / KILN_ERROR_DRIVER_TOO_OLD / KILN_ERROR_CUDA from cuInit).
 * *status receives the status. The caller names itself in `who` for the message. */
KILN_API const kiln_cuda_api *kiln_cuda(const char *who, kiln_status *status); /* exported for kiln-bench */

/* Sets the thread's error from a failed driver call and returns KILN_ERROR_CUDA
 * (KILN_ERROR_OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY). */
kiln_status kiln_cuda_fail(const kiln_cuda_api *cu, CUresult r, const char *who, const char *call);

/* The environment variable KILN_LIBCUDA, when set, names the driver library to dlopen instead of
 * libcuda.so.1 (read once, at the first load). The fault tests use it to simulate a missing or
 * broken driver. */

#endif /* KILN_CUDA_DRIVER_H */
