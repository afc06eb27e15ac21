/*
 * runtime.h — kiln's internal runtime layer: errors, contexts, the kernel registry, launching.
 * Everything above (tensor, ops) goes through these few functions to reach the driver.
 */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stdarg.h>
#include <stdbool.h>

#include "kiln.h"
#include "cuda_driver.h"

#if defined(__GNUC__)
#define KILN_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define KILN_PRINTF(fmt_idx, arg_idx)
#endif

/* Sets the thread-local message (printf-style) and returns status, so that validation reads
 *   return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_matmul: a is NULL; pass a DLTensor");  */
kiln_status kiln_fail(kiln_status status, const char *fmt, ...) KILN_PRINTF(2, 3);
#ifdef __clang_analyzer__
/* The static analyzer (make lint) reads one file at a time and does not follow variadic calls, so
 * it would take a refusal's status for KILN_OK and walk on into code that the refusal guards.
 * For the analyzer only: kiln_fail returns the status it is given. */
#define kiln_fail(status, ...) ((kiln_fail)(status, __VA_ARGS__), (status))
#endif

/* Every kernel in the embedded images: X(id, "exported name", "image"). The .cu files define extern "C"
 * kernels with exactly these names; context creation resolves each one and fails if any is
 * missing, so a kernel renamed on one side only is caught by the first GPU test. */
#include "kernel_list.h"

typedef enum kiln_kernel_id {
#define KILN_KERNEL_ENUM(id, name, image) id,
  KILN_KERNELS(KILN_KERNEL_ENUM)
#undef KILN_KERNEL_ENUM
  KILN_KERNEL_COUNT
} kiln_kernel_id;

/* One loaded library per kernel file of kernels/; a build with more fails context creation with
 * KILN_ERROR_INTERNAL naming this limit (every test_driver_faults mode would catch it). */
#define KILN_MAX_IMAGES 32

struct kiln_context {
  DLDeviceType device_type; /* kDLCPU or kDLCUDA */
  int ordinal;              /* CUDA ordinal, -1 for the CPU */
  kiln_device_info info;
  int arch;                 /* 10 * major + minor, e.g. 90 */
  const kiln_cuda_api *cu;  /* NULL for the CPU context */
  CUdevice device;
  CUcontext primary;
  CUlibrary libraries[KILN_MAX_IMAGES];
  CUfunction fn[KILN_KERNEL_COUNT > 0 ? KILN_KERNEL_COUNT : 1];
  int wg_pair_clusters; /* 2-CTA clusters of the WGMMA pair kernels resident at once; 0: none */
  int dec_max_cluster;  /* blocks per cluster the decode attention kernels may take; 1: no split */
};

/* Makes ctx's primary context current on this thread for the duration of a call; leave() restores
 * the caller's. Cheap when it is already current (the usual case under PyTorch). */
typedef struct kiln_ctx_scope {
  bool pushed;
} kiln_ctx_scope;
kiln_status kiln_ctx_enter(const kiln_context *ctx, kiln_ctx_scope *scope, const char *who);
void kiln_ctx_leave(const kiln_context *ctx, kiln_ctx_scope *scope);

/* Enqueues kernel `id` on stream. args follow cuLaunchKernel's convention (an array of pointers
 * to each parameter). The caller has entered the context. */
kiln_status kiln_launch(const kiln_context *ctx, kiln_kernel_id id, unsigned gx, unsigned gy, unsigned gz,
                        unsigned block, unsigned smem_bytes, CUstream stream, void **args, const char *who);
/* The same as a programmatic dependent of the stream's previous kernel (sm_90+): it may start
 * while that kernel ends, so the kernel must execute griddepcontrol.wait before any access to
 * global memory the previous kernel may write (sm90::pdl_wait), and before it ends (so that its
 * end implies the previous kernel's), and may let the next one start early
 * (sm90::pdl_launch_dependents). */
kiln_status kiln_launch_dependent(const kiln_context *ctx, kiln_kernel_id id, unsigned gx, unsigned gy, unsigned gz,
                                  unsigned block, unsigned smem_bytes, CUstream stream, void **args, const char *who);

/* The same as kiln_launch in clusters of cluster_x x 1 x 1 blocks (sm_90+; gx a multiple of
 * cluster_x), a size chosen at launch rather than compiled into the kernel. */
kiln_status kiln_launch_cluster(const kiln_context *ctx, kiln_kernel_id id, unsigned gx, unsigned gy, unsigned gz,
                                unsigned cluster_x, unsigned block, unsigned smem_bytes, CUstream stream, void **args,
                                const char *who);

/* The embedded fatbins, one per kernels/NAME.cu file, in the assembler file and table that CMake
 * generates (build/kernel_images.S, build/kernel_images.c); none when built without nvcc. */
typedef struct kiln_image {
  const char *name;
  const unsigned char *begin, *end;
} kiln_image;
extern const kiln_image kiln_images[];
extern const int kiln_image_count;

/* Validation of the context argument shared by every op: non-NULL and of the tensor's device. */
kiln_status kiln_check_context(const kiln_context *ctx, const char *who);

#endif /* KILN_RUNTIME_H */
