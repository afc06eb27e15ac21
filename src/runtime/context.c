/*
 * context.c — kiln_context: one per device (the CPU, or one CUDA ordinal).
 *
 * A CUDA context retains the device's primary context, the one the CUDA runtime, PyTorch and
 * cuBLAS use, so kiln's kernels see the same memory and streams as the caller's framework. The
 * embedded kernel image is loaded here, once, and every kernel resolved to a CUfunction (which
 * forces the driver's lazy loading now): ops then only launch, which keeps them capturable into
 * CUDA graphs and free of load latency. After creation the context is read-only, hence usable
 * from several threads at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime.h"
#include "kiln_abi.h" /* the WGMMA pair kernel's launch shape */

static const char *const kernel_names[KILN_KERNEL_COUNT > 0 ? KILN_KERNEL_COUNT : 1] = {
#define KILN_KERNEL_NAME(id, name, image) [id] = name,
    KILN_KERNELS(KILN_KERNEL_NAME)
#undef KILN_KERNEL_NAME
};
static const char *const kernel_images[KILN_KERNEL_COUNT > 0 ? KILN_KERNEL_COUNT : 1] = {
#define KILN_KERNEL_IMAGE(id, name, image) [id] = image,
    KILN_KERNELS(KILN_KERNEL_IMAGE)
#undef KILN_KERNEL_IMAGE
};

int kiln_build_has_kernels(void) { return kiln_image_count > 0; }

kiln_status kiln_device_count(int *count) {
  if (!count) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_device_count: count is NULL; pass an int*");
  *count = 0;
  kiln_status st;
  const kiln_cuda_api *cu = kiln_cuda("kiln_device_count", &st);
  if (!cu) return st == KILN_ERROR_NO_DEVICE ? KILN_OK : st; /* a driver without devices has 0 */
  CUresult r = cu->cuDeviceGetCount(count);
  if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_device_count", "cuDeviceGetCount");
  return KILN_OK;
}

static kiln_status create_cpu(kiln_context *ctx) {
  ctx->ordinal = -1;
  strcpy(ctx->info.name, "CPU");
  ctx->info.ordinal = -1;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  ctx->info.sm_count = n > 0 ? (int)n : 1;
  ctx->info.has_kernels = 1; /* every op has a CPU implementation */
  return KILN_OK;
}

static kiln_status device_attr(kiln_context *ctx, int attr, int *value, const char *what) {
  CUresult r = ctx->cu->cuDeviceGetAttribute(value, attr, ctx->device);
  return r == CUDA_SUCCESS ? KILN_OK : kiln_cuda_fail(ctx->cu, r, "kiln_context_create", what);
}

/* Loads the embedded images and resolves every kernel. The primary context is current. */
static kiln_status load_kernels(kiln_context *ctx) {
  const kiln_cuda_api *cu = ctx->cu;
  if (kiln_image_count == 0)
    return kiln_fail(KILN_ERROR_NO_KERNEL_IMAGE,
                     "kiln_context_create: this libkiln was built without nvcc, so it has no GPU kernels; "
                     "rebuild with the CUDA toolkit on PATH, or use a CPU context (kDLCPU)");
  if (kiln_image_count > KILN_MAX_IMAGES)
    return kiln_fail(KILN_ERROR_INTERNAL, "kiln_context_create: %d kernel images exceed KILN_MAX_IMAGES (%d)",
                     kiln_image_count, KILN_MAX_IMAGES);
  CUresult r;
  for (int i = 0; i < kiln_image_count; i++) {
    r = cu->cuLibraryLoadData(&ctx->libraries[i], kiln_images[i].begin, NULL, NULL, 0, NULL, NULL, 0);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
      ctx->libraries[i] = NULL;
      return kiln_fail(KILN_ERROR_NO_KERNEL_IMAGE,
                       "kiln_context_create: kernel image %s has no code for %s (sm_%d; the image holds sm_80, "
                       "sm_89 and sm_90a code and compute_80 PTX), or the driver is older than the compiler "
                       "(error %d); kiln needs an sm_80 or newer GPU and a driver at least as new as the CUDA "
                       "toolkit kiln was built with",
                       kiln_images[i].name, ctx->info.name, ctx->arch, (int)r);
    }
    if (r != CUDA_SUCCESS) {
      ctx->libraries[i] = NULL;
      return kiln_cuda_fail(cu, r, "kiln_context_create", "cuLibraryLoadData");
    }
  }
  for (int k = 0; k < KILN_KERNEL_COUNT; k++) {
    CUkernel kernel = NULL;
    r = CUDA_ERROR_NOT_FOUND;
    for (int i = 0; i < kiln_image_count; i++)
      if (!strcmp(kiln_images[i].name, kernel_images[k])) r = cu->cuLibraryGetKernel(&kernel, ctx->libraries[i], kernel_names[k]);
    if (r != CUDA_SUCCESS)
      return kiln_fail(KILN_ERROR_NO_KERNEL_IMAGE,
                       "kiln_context_create: kernel \"%s\" is missing from the embedded images (error %d); the "
                       "build is inconsistent: rebuild kiln",
                       kernel_names[k], (int)r);
    r = cu->cuKernelGetFunction(&ctx->fn[k], kernel);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU)
      return kiln_fail(KILN_ERROR_NO_KERNEL_IMAGE,
                       "kiln_context_create: kernel \"%s\" has no code for %s (sm_%d); kiln needs sm_80 or newer",
                       kernel_names[k], ctx->info.name, ctx->arch);
    if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_context_create", "cuKernelGetFunction");
    /* Allow every kernel the device's whole opt-in shared memory less its static shared memory
     * (the driver refuses a sum above the opt-in): the limit is a permission, the launch still
     * requests only what it uses. */
    int static_smem = 0;
    r = cu->cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, ctx->fn[k]);
    if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_context_create", "cuFuncGetAttribute");
    r = cu->cuFuncSetAttribute(ctx->fn[k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               (int)ctx->info.smem_per_block_optin - static_smem);
    if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_context_create", "cuFuncSetAttribute");
  }
  /* How many 2-CTA clusters of the WGMMA pair kernel fit on the device at once: their persistent
   * grid must not exceed it (a cluster left for a second wave would double the time). Clusters
   * live inside one GPC, so this can be below SMs / 2. A failed query only disables clusters.
   * Pair kernels exist only in KILN_WGMMA_PAIRS builds (kiln_abi.h). */
#if KILN_WGMMA_PAIRS
  if (ctx->arch == 90) {
    CUlaunchConfig cfg = {.gridDimX = (unsigned)(ctx->info.sm_count & ~1), .gridDimY = 1, .gridDimZ = 1,
                          .blockDimX = KILN_GEMM_WG_THREADS, .blockDimY = 1, .blockDimZ = 1,
                          .sharedMemBytes = KILN_GEMM_WG_SMEM_BYTES(256)};
    int clusters = 0;
    if (cu->cuOccupancyMaxActiveClusters(&clusters, ctx->fn[KILN_K_GEMM_wgmma256c_f16_KK], &cfg) == CUDA_SUCCESS)
      ctx->wg_pair_clusters = clusters;
  }
#endif
  /* The decode attention kernels' clusters (sized per launch, kiln_launch_cluster): the largest
   * size up to KILN_ATTN_DEC_MAX_CLUSTER of which one cluster of the D = 256 kernel (the most
   * shared memory: one block per SM) fits in a GPC. A failed query leaves 1: no split. */
  ctx->dec_max_cluster = 1;
  for (unsigned cs = KILN_ATTN_DEC_MAX_CLUSTER; ctx->arch == 90 && cs > 1; cs /= 2) {
    kiln_launch_attr attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.cluster = {cs, 1, 1}};
    CUlaunchConfig cfg = {.gridDimX = cs, .gridDimY = 1, .gridDimZ = 1, .blockDimX = KILN_ATTN_DEC_THREADS,
                          .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = KILN_ATTN_DEC_SMEM_BYTES(256),
                          .attrs = &attr, .numAttrs = 1};
    int clusters = 0;
    if (cu->cuOccupancyMaxActiveClusters(&clusters, ctx->fn[KILN_K_ATTN_FWD_DEC_f16_D256], &cfg) == CUDA_SUCCESS &&
        clusters > 0) {
      ctx->dec_max_cluster = (int)cs;
      break;
    }
  }
  return KILN_OK;
}

static kiln_status create_cuda(kiln_context *ctx, int ordinal) {
  kiln_status st;
  const kiln_cuda_api *cu = kiln_cuda("kiln_context_create", &st);
  if (!cu) return st;
  ctx->cu = cu;
  int count = 0;
  CUresult r = cu->cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_context_create", "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    return kiln_fail(KILN_ERROR_NO_DEVICE,
                     "kiln_context_create: ordinal is %d but this machine has %d CUDA device%s; expected 0..%d "
                     "(check CUDA_VISIBLE_DEVICES)",
                     ordinal, count, count == 1 ? "" : "s", count - 1);
  ctx->ordinal = ordinal;
  r = cu->cuDeviceGet(&ctx->device, ordinal);
  if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_context_create", "cuDeviceGet");

  kiln_device_info *info = &ctx->info;
  info->ordinal = ordinal;
  info->driver_version = cu->driver_version;
  r = cu->cuDeviceGetName(info->name, (int)sizeof info->name, ctx->device);
  if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_context_create", "cuDeviceGetName");
  int v = 0;
  if ((st = device_attr(ctx, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info->cc_major, "cc major"))) return st;
  if ((st = device_attr(ctx, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info->cc_minor, "cc minor"))) return st;
  if ((st = device_attr(ctx, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info->sm_count, "SM count"))) return st;
  if ((st = device_attr(ctx, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &v, "smem optin"))) return st;
  info->smem_per_block_optin = (size_t)v;
  if ((st = device_attr(ctx, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &v, "L2 size"))) return st;
  info->l2_bytes = (size_t)v;
  r = cu->cuDeviceTotalMem(&info->total_memory, ctx->device);
  if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_context_create", "cuDeviceTotalMem");
  ctx->arch = 10 * info->cc_major + info->cc_minor;

  r = cu->cuDevicePrimaryCtxRetain(&ctx->primary, ctx->device);
  if (r != CUDA_SUCCESS) return kiln_cuda_fail(cu, r, "kiln_context_create", "cuDevicePrimaryCtxRetain");
  if (ctx->arch < 80) {
    return kiln_fail(KILN_ERROR_NO_KERNEL_IMAGE,
                     "kiln_context_create: %s is sm_%d; kiln's GPU kernels need sm_80 (Ampere) or newer; use a "
                     "CPU context (kDLCPU) on this machine",
                     info->name, ctx->arch);
  }
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, "kiln_context_create"))) return st;
  st = load_kernels(ctx);
  kiln_ctx_leave(ctx, &scope);
  if (st == KILN_OK) info->has_kernels = 1;
  return st;
}

kiln_status kiln_context_create(DLDeviceType device_type, int ordinal, kiln_context **out) {
  if (!out) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_context_create: out is NULL; pass a kiln_context**");
  *out = NULL;
  if (device_type != kDLCPU && device_type != kDLCUDA)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "kiln_context_create: device_type is %d; expected kDLCPU (1) or kDLCUDA (2)", (int)device_type);
  kiln_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return kiln_fail(KILN_ERROR_OUT_OF_MEMORY, "kiln_context_create: out of host memory");
  ctx->device_type = device_type;
  kiln_status st = device_type == kDLCPU ? create_cpu(ctx) : create_cuda(ctx, ordinal);
  if (st != KILN_OK) {
    kiln_context_destroy(ctx);
    return st;
  }
  *out = ctx;
  return KILN_OK;
}

void kiln_context_destroy(kiln_context *ctx) {
  if (!ctx) return;
  if (ctx->cu && ctx->primary) {
    kiln_ctx_scope scope;
    if (kiln_ctx_enter(ctx, &scope, "kiln_context_destroy") == KILN_OK) {
      for (int i = 0; i < KILN_MAX_IMAGES; i++)
        if (ctx->libraries[i]) ctx->cu->cuLibraryUnload(ctx->libraries[i]);
      kiln_ctx_leave(ctx, &scope);
    }
    ctx->cu->cuDevicePrimaryCtxRelease(ctx->device);
  }
  free(ctx);
}

kiln_status kiln_context_info(const kiln_context *ctx, kiln_device_info *info) {
  if (!ctx) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_context_info: ctx is NULL; create one with kiln_context_create");
  if (!info) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_context_info: info is NULL; pass a kiln_device_info*");
  *info = ctx->info;
  return KILN_OK;
}

kiln_status kiln_check_context(const kiln_context *ctx, const char *who) {
  if (!ctx) return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: ctx is NULL; create one with kiln_context_create", who);
  return KILN_OK;
}

kiln_status kiln_ctx_enter(const kiln_context *ctx, kiln_ctx_scope *scope, const char *who) {
  scope->pushed = false;
  CUcontext current = NULL;
  CUresult r = ctx->cu->cuCtxGetCurrent(&current);
  if (r != CUDA_SUCCESS) return kiln_cuda_fail(ctx->cu, r, who, "cuCtxGetCurrent");
  if (current == ctx->primary) return KILN_OK;
  r = ctx->cu->cuCtxPushCurrent(ctx->primary);
  if (r != CUDA_SUCCESS) return kiln_cuda_fail(ctx->cu, r, who, "cuCtxPushCurrent");
  scope->pushed = true;
  return KILN_OK;
}

void kiln_ctx_leave(const kiln_context *ctx, kiln_ctx_scope *scope) {
  if (scope->pushed) {
    CUcontext popped;
    ctx->cu->cuCtxPopCurrent(&popped);
    scope->pushed = false;
  }
}

static kiln_status launch_result(const kiln_context *ctx, CUresult r, const char *who, const char *call) {
  if (r == CUDA_SUCCESS) return KILN_OK;
  kiln_status st = kiln_cuda_fail(ctx->cu, r, who, call);
  if (r == CUDA_ERROR_INVALID_HANDLE) {
    char cause[512];
    snprintf(cause, sizeof cause, "%s", kiln_last_error());
    return kiln_fail(st, "%s; is the stream valid and of this context's device (%s, ordinal %d)?", cause,
                     ctx->info.name, ctx->ordinal);
  }
  return st;
}

kiln_status kiln_launch(const kiln_context *ctx, kiln_kernel_id id, unsigned gx, unsigned gy, unsigned gz,
                        unsigned block, unsigned smem_bytes, CUstream stream, void **args, const char *who) {
  return launch_result(
      ctx, ctx->cu->cuLaunchKernel(ctx->fn[id], gx, gy, gz, block, 1, 1, smem_bytes, stream, args, NULL), who,
      "cuLaunchKernel");
}

kiln_status kiln_launch_dependent(const kiln_context *ctx, kiln_kernel_id id, unsigned gx, unsigned gy, unsigned gz,
                                  unsigned block, unsigned smem_bytes, CUstream stream, void **args, const char *who) {
  kiln_launch_attr attr = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, .value.allowed = 1};
  const CUlaunchConfig cfg = {.gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = block, .blockDimY = 1,
                              .blockDimZ = 1, .sharedMemBytes = smem_bytes, .hStream = stream, .attrs = &attr,
                              .numAttrs = 1};
  return launch_result(ctx, ctx->cu->cuLaunchKernelEx(&cfg, ctx->fn[id], args, NULL), who, "cuLaunchKernelEx");
}

kiln_status kiln_launch_cluster(const kiln_context *ctx, kiln_kernel_id id, unsigned gx, unsigned gy, unsigned gz,
                                unsigned cluster_x, unsigned block, unsigned smem_bytes, CUstream stream, void **args,
                                const char *who) {
  kiln_launch_attr attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.cluster = {cluster_x, 1, 1}};
  const CUlaunchConfig cfg = {.gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = block, .blockDimY = 1,
                              .blockDimZ = 1, .sharedMemBytes = smem_bytes, .hStream = stream, .attrs = &attr,
                              .numAttrs = 1};
  return launch_result(ctx, ctx->cu->cuLaunchKernelEx(&cfg, ctx->fn[id], args, NULL), who, "cuLaunchKernelEx");
}
