/*
 * kiln.h — the one public header of kiln, a C library of fast GPU operations for
 * large-language-model work (tensor-core matrix products, quantized products, attention).
 *
 * Conventions (the same for every function):
 *   - Every function that can fail returns a kiln_status. On failure it also sets a thread-local message,
 *     read with kiln_last_error(), naming the function, the argument, what was found, what was
 *     expected and how to fix it. The library never aborts and never prints. A call that fails
 *     validation writes no output tensor and no *bytes of a size query; a function returning an
 *     object through *out sets it to NULL first.
 *   - Tensors are DLPack DLTensors (declared below from the DLPack 1.x specification). A tensor's
 *     device must match the context's: kDLCPU tensors go to a CPU context, kDLCUDA tensors of
 *     ordinal n to the context of ordinal n.
 *   - Ops only enqueue work on the caller's stream (NULL = the legacy default stream). They never
 *     synchronize the host, allocate device memory or load modules. Outputs and workspace are the
 *     caller's. On the CPU context ops run synchronously on the calling thread; stream is ignored.
 *     Stream order holds as for any kernel: on sm_90 some kernels (the W4A16 / W8A16 decode and
 *     WGMMA GEMM kernels) launch as programmatic dependents of the stream's previous kernel, so
 *     their setup overlaps its end, but they touch no memory before it has ended.
 *   - A kiln_context may be used from several threads at once.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

#if defined(_WIN32)
#define KILN_API
#else
#define KILN_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------------------------ */
/* DLPack 1.x ABI, declared from the published specification.                                 */
/*                                                                                            */
/* Coexistence with an upstream dlpack.h:                                                     */
/*   - upstream 1.x included first: its declarations are used and nothing is declared here.  */
/*   - upstream 0.x included first: only the 1.x additions (DLPackVersion,                    */
/*     DLManagedTensorVersioned, the flag bits) are declared here.                            */
/*   - kiln.h included first: upstream's include guard is defined here, so a later            */
/*     #include <dlpack/dlpack.h> adds nothing and conflicts with nothing.                    */
/* ------------------------------------------------------------------------------------------ */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define KILN_DECLARES_DLPACK_CORE 1
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0
#ifndef DLPACK_EXTERN_C
#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif
#endif
#ifndef DLPACK_DLL
#define DLPACK_DLL
#endif

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL means compact row-major */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
#endif /* DLPACK_DLPACK_H_ */

#if !defined(KILN_DECLARES_DLPACK_CORE) && (!defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION < 1) && \
    !defined(KILN_DECLARES_DLPACK_VERSIONED)
#define KILN_DECLARES_DLPACK_VERSIONED 1 /* an upstream 0.x header came first */
#endif
#if defined(KILN_DECLARES_DLPACK_CORE) || defined(KILN_DECLARES_DLPACK_VERSIONED)
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif

/* The CUDA driver's stream handle, declared exactly as cuda.h declares it (a repeated identical
 * typedef is valid C11 and C++), so kiln.h needs no CUDA header. */
typedef struct CUstream_st *CUstream;

/* ------------------------------------------------------------------------------------------ */
/* Status codes and errors                                                                     */
/* ------------------------------------------------------------------------------------------ */
typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* a NULL, a shape, dtype, layout or device that the op rejects */
  KILN_ERROR_UNSUPPORTED = 2,      /* valid input this device or build cannot run (e.g. an algo) */
  KILN_ERROR_NO_DRIVER = 3,        /* libcuda.so.1 missing, or an entry point missing */
  KILN_ERROR_DRIVER_TOO_OLD = 4,   /* the driver is older than CUDA 12.0 */
  KILN_ERROR_NO_DEVICE = 5,        /* no CUDA device, or the ordinal does not exist */
  KILN_ERROR_NO_KERNEL_IMAGE = 6,  /* the build has no kernels, or none that run on this device */
  KILN_ERROR_OUT_OF_MEMORY = 7,    /* an allocation helper could not allocate */
  KILN_ERROR_CUDA = 8,             /* a CUDA driver call failed; the message has its name */
  KILN_ERROR_WORKSPACE = 9,        /* the workspace given is smaller than the size query said */
  KILN_ERROR_INTERNAL = 10,        /* a bug in kiln: please report the message */
} kiln_status;

/* A static string naming the status, e.g. "KILN_ERROR_INVALID_ARGUMENT". */
KILN_API const char *kiln_status_string(kiln_status status);

/* The message of the last failed call on this thread ("" if none). Valid until the next kiln call
 * on this thread. Successful calls do not clear it. */
KILN_API const char *kiln_last_error(void);
KILN_API void kiln_clear_error(void);

/* The version of the library that is loaded (may differ from the header's macros). */
KILN_API void kiln_version(int *major, int *minor, int *patch);

/* ------------------------------------------------------------------------------------------ */
/* Devices and contexts                                                                        */
/* ------------------------------------------------------------------------------------------ */
typedef struct kiln_device_info {
  char name[256];
  int ordinal;             /* CUDA ordinal; -1 for the CPU */
  int cc_major, cc_minor;  /* compute capability (0.0 for the CPU) */
  int sm_count;            /* multiprocessors (logical CPUs for the CPU) */
  size_t smem_per_block_optin; /* largest dynamic shared memory a block may opt in to */
  size_t l2_bytes;
  size_t total_memory;
  int driver_version;      /* e.g. 13000; 0 for the CPU */
  int has_kernels;         /* 1 if kiln's embedded kernels run on this device */
} kiln_device_info;

/* Number of CUDA devices. Without a driver returns KILN_ERROR_NO_DRIVER and sets *count = 0. */
KILN_API kiln_status kiln_device_count(int *count);

/* Whether this build embeds GPU kernels (0 when it was built without nvcc). */
KILN_API int kiln_build_has_kernels(void);

typedef struct kiln_context kiln_context;

/* Creates the context of one device: device_type kDLCPU (ordinal ignored) or kDLCUDA with a CUDA
 * ordinal. A CUDA context retains the device's primary context (the one the CUDA runtime,
 * PyTorch and cuBLAS use) and loads kiln's kernels once; no op loads anything afterwards. */
KILN_API kiln_status kiln_context_create(DLDeviceType device_type, int ordinal, kiln_context **out);
/* Releases the context. Work still in flight on a stream must be finished (synchronize first):
 * destroying a context unloads its kernels while they may still run. NULL is a no-op. */
KILN_API void kiln_context_destroy(kiln_context *ctx);
KILN_API kiln_status kiln_context_info(const kiln_context *ctx, kiln_device_info *info);

/* ------------------------------------------------------------------------------------------ */
/* Helpers for C users who have no framework: streams, memory, tensors. Never used inside ops. */
/* ------------------------------------------------------------------------------------------ */
/* A new non-blocking stream on the context's device (CPU context: *out = NULL, KILN_OK). */
KILN_API kiln_status kiln_stream_create(kiln_context *ctx, CUstream *out);
KILN_API kiln_status kiln_stream_destroy(kiln_context *ctx, CUstream stream);
KILN_API kiln_status kiln_stream_synchronize(kiln_context *ctx, CUstream stream);

/* Allocates a compact row-major tensor on the context's device. The result has explicit strides,
 * byte_offset 0, 256-byte aligned data, and a deleter that frees everything
 * (kiln_tensor_free(t) calls it). Contents are uninitialized. */
KILN_API kiln_status kiln_tensor_empty(kiln_context *ctx, int32_t ndim, const int64_t *shape, DLDataType dtype,
                                       DLManagedTensorVersioned **out);
KILN_API void kiln_tensor_free(DLManagedTensorVersioned *t);

/* Copies src to dst (inputs before outputs, as in every kiln call) (same shape and dtype, both compact row-major, any of host/device each),
 * enqueued on stream. Host memory that is not page-locked makes the copy synchronous. */
KILN_API kiln_status kiln_tensor_copy(kiln_context *ctx, const DLTensor *src, const DLTensor *dst, CUstream stream);

/* Converts src into dst elementwise (same shape, any strides, dtypes f32, f16, bf16; float to
 * narrower float rounds to nearest even). On a CUDA context this is a kernel on stream. */
KILN_API kiln_status kiln_cast(kiln_context *ctx, const DLTensor *src, const DLTensor *dst, CUstream stream);

/* Host-side half-precision conversions. Widening is exact; narrowing is correctly rounded (to
 * nearest, ties to even) for every bit pattern, with overflow to infinity and gradual underflow;
 * a NaN stays a NaN of the same sign (payload kept where it fits, else made quiet). */
KILN_API float kiln_f16_to_f32(uint16_t h);
KILN_API uint16_t kiln_f32_to_f16(float f);
KILN_API float kiln_bf16_to_f32(uint16_t h);
KILN_API uint16_t kiln_f32_to_bf16(float f);

/* ------------------------------------------------------------------------------------------ */
/* kiln_matmul — C = alpha · A·B                                                               */
/* ------------------------------------------------------------------------------------------ */
/* A [M,K] or [batch,M,K], B [K,N] or [batch,K,N]: both f16 or both bf16; a batch of 1 broadcasts.
 * C [M,N] or [batch,M,N] in f32, f16 or bf16. Accumulation is always fp32.
 * Every matrix may be row-major or column-major (a transposed view, e.g. a PyTorch Linear weight
 * W[N,K] passed as W.T) with any leading dimension >= its inner size, and any batch stride.
 * Any M, N, K >= 1. C must not overlap A or B. */
typedef enum kiln_matmul_algo {
  KILN_MATMUL_AUTO = 0,     /* WGMMA on sm_90, else CP_ASYNC; MMA_SYNC when rows are not 16-byte aligned
                             * or the device cannot hold CP_ASYNC's ring (sm_86, sm_89) */
  KILN_MATMUL_MMA_SYNC = 1, /* mma.sync m16n8k16, register-staged global loads; sm_80+ */
  KILN_MATMUL_CP_ASYNC = 2, /* cp.async multi-stage pipeline + ldmatrix; sm_80+, 16-byte aligned rows;
                             * its ~160 KB ring needs sm_80 or sm_90 (sm_86 and sm_89 grant 99 KB) */
  KILN_MATMUL_WGMMA = 3,    /* warpgroup MMA + TMA; sm_90 (Hopper) only, 16-byte aligned strides
                             * (including over a dimension of size 1); elsewhere UNSUPPORTED */
} kiln_matmul_algo;

typedef struct kiln_matmul_opts {
  kiln_matmul_algo algo;
  float alpha;  /* scale of the product; kiln_matmul_opts_default() sets 1 */
  int tile_n;   /* 0: chosen per shape (default). With algo WGMMA, 256, 128 or 64 forces the width of
                 * the 128 x tile_n tiles of C (for tests and tuning); other algos take only 0. */
  int stream_k; /* WGMMA's stream-K (kiln_matmul only; the workspace below): 0 where it pays
                 * (default), 1 whenever the persistent grid's last wave is partial (tests and
                 * tuning; needs algo WGMMA and the workspace), -1 never */
  void *workspace;        /* optional: device memory of the context's device, 256-byte aligned, of at
                           * least kiln_matmul_workspace_size bytes, sharing no byte with a, b or c.
                           * With it WGMMA may deal the tiles of its last wave out to every SM as
                           * runs of K (stream-K), which fills SMs that would idle; without it (NULL,
                           * the default, or smaller than the query's answer with stream_k 0) it
                           * never does. Sums of a split tile are added in a fixed order: results
                           * are deterministic for a given shape and GPU, not bitwise those of the
                           * unsplit walk. */
  size_t workspace_bytes;
} kiln_matmul_opts;

KILN_API kiln_matmul_opts kiln_matmul_opts_default(void);

/* opts may be NULL (defaults). */
KILN_API kiln_status kiln_matmul(kiln_context *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *c,
                                 const kiln_matmul_opts *opts, CUstream stream);
/* Bytes of workspace kiln_matmul takes for this call with these opts (their workspace fields are
 * ignored): 0 where it would not split tiles (CPU, not WGMMA, stream_k -1, or a last wave that
 * is full or whose split would not pay). At most 17 MB on a 132-SM H100/H200. */
KILN_API kiln_status kiln_matmul_workspace_size(kiln_context *ctx, const DLTensor *a, const DLTensor *b,
                                                const DLTensor *c, const kiln_matmul_opts *opts, size_t *bytes);

/* Gradients of C = alpha·A·B: dA = alpha·dC·Bᵀ, dB = alpha·Aᵀ·dC (opts->alpha, 1 by default),
 * computed by the same kernels on transposed views
 * (nothing is transposed in memory). dC is f32, f16 or bf16; an f32 (or other-dtype) dC is first
 * converted to the dtype of A into the workspace. da or db may be NULL to skip that gradient.
 * dA has A's shape (batch of A), dB has B's shape; when B is broadcast over a batch, dB sums over
 * the batch (and then needs an f32 dB or workspace, see the size query). */
KILN_API kiln_status kiln_matmul_backward_workspace_size(kiln_context *ctx, const DLTensor *a, const DLTensor *b,
                                                         const DLTensor *dc, const DLTensor *da,
                                                         const DLTensor *db, size_t *bytes);
KILN_API kiln_status kiln_matmul_backward(kiln_context *ctx, const DLTensor *a, const DLTensor *b,
                                          const DLTensor *dc, const DLTensor *da, const DLTensor *db,
                                          void *workspace, size_t workspace_bytes,
                                          const kiln_matmul_opts *opts, CUstream stream);

/* ------------------------------------------------------------------------------------------ */
/* kiln_matmul_int8 — W8A8: C = (A·B in exact int32) · scale · row_scale[i] · col_scale[j]    */
/* ------------------------------------------------------------------------------------------ */
/* A [M,K] or [batch,M,K] and B [K,N] or [batch,K,N] int8 (uint8 tensors are taken as int8 bit
 * patterns, for frameworks without an int8 dtype); either may be a transposed view (e.g. a
 * weight W[N,K] passed as W.T), any leading dimension, a batch of 1 broadcasts. Sums are exact:
 * 1 <= K <= 2^17 = 131072, so |sum| <= 2^31, reached only by 2^17 products (-128)·(-128) and read
 * as +2^31 (accumulated modulo 2^32). C [M,N] or [batch,M,N] in f32, f16 or bf16 receives
 * v = (float)sum; v *= scale; v *= row_scale[i]; v *= col_scale[j] (absent factors skipped), in
 * f32 in that order, then rounded once to C's dtype. Any M, N >= 1. C must not overlap A, B or
 * the scale vectors. */
typedef enum kiln_int8_algo {
  KILN_INT8_AUTO = 0,     /* the CPU path on a CPU context; on a GPU WGMMA where it applies, else MMA_SYNC */
  KILN_INT8_MMA_SYNC = 1, /* sm_80+: IMMA mma.sync m16n8k32 kernels, any layout and alignment, cp.async-
                           * pipelined when A and B are k-major with 16-byte aligned rows */
  KILN_INT8_WGMMA = 2,    /* sm_90 (Hopper): warpgroup wgmma m64nNk32 fed by TMA; A and B k-major (x @ W.T
                           * with a Linear weight W [N,K]) with 16-byte aligned data, leading dimensions
                           * and batch strides (a column-major C counts as Cᵀ = Bᵀ·Aᵀ). Same bits as MMA_SYNC */
} kiln_int8_algo;

typedef struct kiln_matmul_int8_opts {
  kiln_int8_algo algo;
  float scale;                /* per-tensor scale; kiln_matmul_int8_opts_default() sets 1 */
  const DLTensor *row_scale;  /* optional f32 [M] (per row of A, e.g. per-token activation scales) */
  const DLTensor *col_scale;  /* optional f32 [N] (per output column, e.g. per-channel weights) */
} kiln_matmul_int8_opts;

KILN_API kiln_matmul_int8_opts kiln_matmul_int8_opts_default(void);
/* opts may be NULL (defaults: scale 1, no row or column scales). */
KILN_API kiln_status kiln_matmul_int8(kiln_context *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *c,
                                      const kiln_matmul_int8_opts *opts, CUstream stream);

/* Symmetric int8 quantization of a float weight w [K,N] (f32, f16 or bf16, any strides): with
 * per_column, scales is f32 [N] and scales[n] = max_k |w[k,n]| / 127; else scales is f32 [1]
 * with the maximum over the whole tensor. q[k,n] = round-half-even(w[k,n] / scale) clamped to
 * [-127, 127] (an all-zero column gets scale 1 and zeros; a maximum so small that max / 127
 * underflows gets the smallest subnormal). NaN or infinite weights are rejected before anything
 * is written on a CPU context; on a CUDA context (enqueued on stream, the CPU's results bit for
 * bit) they are left out of the maxima and give code 0 (NaN) or ±127. q is int8 (or uint8)
 * with w's shape, any strides. Then w ≈ q · scale, and kiln_matmul_int8 with col_scale = scales
 * (or scale = scales[0]) multiplies by it. */
KILN_API kiln_status kiln_quantize_int8(kiln_context *ctx, const DLTensor *w, const DLTensor *q,
                                        const DLTensor *scales, int per_column, CUstream stream);

/* ------------------------------------------------------------------------------------------ */
/* kiln_qweight — 4-bit weights in kiln's native layout, and importers into it                */
/* ------------------------------------------------------------------------------------------ */
/* A quantized weight of logical shape [K, N] (y = x·W, x [M, K]) with group size G (32, 64, 128,
 * or K for one group per column; K % G == 0 and K % 8 == 0):
 *   w[k, n] = scales[k / G, n] · (q[k, n] − zeros[k / G, n])
 * Native layout (the buffers a kiln_qweight points to, all compact, row-major):
 *   codes   uint32 [K / 8, N]: word (r, n) holds q[8r + j, n] for j = 0..7 in bits 4j..4j+3
 *           (lowest nibble = lowest k), codes unsigned 0..15. A warp reading 32 adjacent
 *           columns of one word row loads 128 contiguous bytes: 8 k's of 32 columns.
 *   scales  f16 [K / G, N].
 *   zeros   uint8 [K / G, N], values 0..16 (16 only from GPTQ v1, which stores zero − 1 in a
 *           nibble); symmetric weights (signed codes −8..7 in the source formats) are stored as
 *           code + 8 with every zero 8, so one formula serves both.
 *   perm    int32 [K] or NULL: act-order (GPTQ g_idx) weights store rows sorted by group
 *           (stable; every group must have exactly G rows); then x must be permuted too,
 *           x'[:, i] = x[:, perm[i]]. kiln_qweight_import writes perm when out->perm is
 *           non-NULL (the identity when there is no act-order) and fails for act-order weights
 *           when it is NULL; kiln_matmul_int4 will apply it.
 * Buffers live on the context's device (CPU importers: host memory); kiln_qweight_bytes gives
 * their sizes. The struct only points: the caller owns the memory. */
typedef struct kiln_qweight {
  int64_t k, n, group; /* group == k: one group per column */
  uint32_t *codes;     /* [k / 8, n] */
  uint16_t *scales;    /* f16 bits [k / group, n] */
  uint8_t *zeros;      /* [k / group, n] */
  int32_t *perm;       /* [k] or NULL */
  DLDevice device;
} kiln_qweight;

/* Bytes of each native buffer for a [k, n] weight of group size g (checks k, n, g). */
KILN_API kiln_status kiln_qweight_bytes(int64_t k, int64_t n, int64_t group, size_t *codes_bytes,
                                        size_t *scales_bytes, size_t *zeros_bytes, size_t *perm_bytes);

/* Source formats of the importers (SPEC 4.3 gives every bit). */
typedef enum kiln_qformat {
  KILN_QFORMAT_REFERENCE = 1, /* reference system: signed codes, u32 [K/8, N] stored N-major, f16 scales [K/128, N] */
  KILN_QFORMAT_GPTQ_V1 = 2,   /* qweight i32 [K/8, N], qzeros i32 [K/G, N/8] (zero − 1), scales f16, g_idx i32 [K] */
  KILN_QFORMAT_GPTQ_V2 = 3,   /* as v1 with the zero stored as is */
  KILN_QFORMAT_AWQ = 4,       /* qweight i32 [K, N/8] interleaved 0,2,4,6,1,3,5,7; qzeros i32 [K/G, N/8]; scales f16 */
} kiln_qformat;

/* Imports packed weights of a source format into the native buffers of out (whose k, n,
 * group and pointers the caller set; see perm above). qweight, qzeros, scales, g_idx are
 * DLTensors in the source format's dtypes and shapes: packed words int32 or uint32, scales f16,
 * g_idx int32 [K] (GPTQ only; NULL for none), qzeros NULL for REFERENCE (whose group is 128 and
 * whose qweight may be given as [K/8, N] with N-major strides or as [N, K/8]). GPTQ and AWQ need
 * N % 8 == 0 (zeros packed 8 to a word). Exact: dequantizing the result reproduces the source
 * format's formula bit for bit.
 * On a CUDA context every buffer is device memory and the import is enqueued on stream (no
 * sync), with the CPU's results bit for bit, except where that needs g_idx's values on the host:
 * with a g_idx, out->perm must be non-NULL and is always written (the identity for a trivial
 * g_idx; pass g_idx = NULL then to keep the faster perm-free kernels), and an invalid g_idx (an
 * index outside 0..K/G-1, a group without exactly G rows), which a CPU import refuses, gives
 * unspecified values but still a permutation in perm, so no later kernel reads out of bounds.
 * Import on a CPU context to have g_idx checked. */
KILN_API kiln_status kiln_qweight_import(kiln_context *ctx, kiln_qformat format, const DLTensor *qweight,
                                         const DLTensor *qzeros, const DLTensor *scales, const DLTensor *g_idx,
                                         kiln_qweight *out, CUstream stream);

/* Round-to-nearest quantization of a float weight into out: w is f32/f16/bf16 [K, N] (or a
 * [N, K] tensor passed as its transposed view), symmetric (codes −8..7, scale = max|w| / 7,
 * zeros 8) or asymmetric (codes 0..15, with min and max taken over the group and 0: scale =
 * (max − min) / 15, zero = round(−min / scale) clamped to 0..15), per group of out->group rows.
 * Scales are rounded to f16 first and codes computed from the rounded scale (round half to
 * even); an all-zero group gets scale 1. Weights must be finite with |w| <= 65504 · 7 (checked
 * on a CPU context; on a CUDA context, enqueued on stream with the CPU's results bit for bit,
 * a group with a weight outside that gets unspecified scale and codes). */
KILN_API kiln_status kiln_qweight_quantize(kiln_context *ctx, const DLTensor *w, int symmetric, kiln_qweight *out,
                                           CUstream stream);

/* w[k, n] as defined above, into f32/f16/bf16 [K, N] (row order of the native rows, i.e.
 * permuted when perm is set); for tests and debugging. Zero points above 16 are refused on a
 * CPU context and give the formula's values on a CUDA context (enqueued on stream). */
KILN_API kiln_status kiln_qweight_dequantize(kiln_context *ctx, const kiln_qweight *qw, const DLTensor *w,
                                             CUstream stream);

/* ------------------------------------------------------------------------------------------ */
/* kiln_matmul_int4 — W4A16: Y = X·W with W a kiln_qweight                                     */
/* ------------------------------------------------------------------------------------------ */
/* x [M, K] float16 or bfloat16 (row- or column-major, any leading dimension); w a kiln_qweight
 * of logical shape [K, N] (native layout above) on the context's device; y [M, N] float32,
 * float16 or bfloat16 (row- or column-major, any leading dimension). Any M >= 1.
 *   y[m, n] = Σ_i x[m, p(i)] · w[i, n],   p(i) = w->perm ? w->perm[i] : i,
 *   w[i, n] = f32(scales[i / G, n]) · (q[i, n] − zeros[i / G, n])   (exact in f32)
 * where i runs over the stored rows (act-order weights: x is gathered through perm, never
 * copied by the caller). Accumulation is fp32 on a GPU and double on the CPU; the sum is
 * rounded once into y's dtype. y must not overlap x or any buffer of w. On a CPU context the
 * weight's values are checked before anything is written (perm a permutation of 0..K-1, zeros
 * 0..16); on a GPU they are the caller's contract (kiln's importers and quantizer keep it). */
typedef enum kiln_int4_algo {
  KILN_INT4_AUTO = 0,    /* the CPU path on a CPU context; on a GPU PREFILL for large M when opts
                          * give enough workspace or sm_90's one-kernel PREFILL (below) takes
                          * the call, else DECODE */
  KILN_INT4_DECODE = 1,  /* GPU: weight-streaming GEMV-like kernel for small M (decode, M <= ~16) */
  KILN_INT4_PREFILL = 2, /* GPU: the weight dequantized into the workspace, then kiln_matmul (large M) */
} kiln_int4_algo;

typedef struct kiln_matmul_int4_opts {
  kiln_int4_algo algo; /* DECODE and PREFILL are GPU algorithms: UNSUPPORTED on a CPU context */
  void *workspace;     /* PREFILL: device memory of the context's device, 256-byte aligned, of at
                        * least kiln_matmul_int4_workspace_size bytes, not overlapping x, y or w;
                        * NULL: none (AUTO then runs DECODE, or the one-kernel PREFILL) */
  size_t workspace_bytes;
} kiln_matmul_int4_opts;

KILN_API kiln_matmul_int4_opts kiln_matmul_int4_opts_default(void);
/* Bytes of workspace PREFILL needs for this call (the weight as x's dtype, [K, N]); 0 on a CPU
 * context. Checks the same arguments as kiln_matmul_int4. */
KILN_API kiln_status kiln_matmul_int4_workspace_size(kiln_context *ctx, const DLTensor *x, const kiln_qweight *w,
                                                     const DLTensor *y, size_t *bytes);
/* opts may be NULL (defaults). GPU (sm_80+): DECODE streams the weight once per 16 rows of x
 * (8 when M <= 8) with tensor cores on the exactly dequantized codes, fp32 sums, deterministic.
 * PREFILL writes w[k, n] = scale · (q − zero), rounded to x's dtype, into the workspace (rows
 * in logical order: act-order undone) and runs kiln_matmul on it: the products use the rounded
 * weights, so its bits differ from DECODE's in the last places (both within SPEC §5). On sm_90,
 * where it is the faster PREFILL (N % 16 == 0, 16-byte aligned buffers and x rows, no
 * act-order, M and N large enough to give most SMs a tile), one kernel dequantizes the same rounded
 * weights stage by stage into registers instead and the workspace is left untouched (it is
 * still required for an explicit PREFILL). AUTO picks PREFILL for M >= 128 when the workspace
 * suffices or, without one, when the one-kernel PREFILL takes the call. */
KILN_API kiln_status kiln_matmul_int4(kiln_context *ctx, const DLTensor *x, const kiln_qweight *w, const DLTensor *y,
                                      const kiln_matmul_int4_opts *opts, CUstream stream);

/* ------------------------------------------------------------------------------------------ */
/* kiln_qkv_project_int8 / _int4 — fused Q, K, V projections of one activation X               */
/* ------------------------------------------------------------------------------------------ */
/* x [M, K] float16 or bfloat16 (row- or column-major, any leading dimension), read once for the
 * three products q = x·Wq [M, Nq], k = x·Wk [M, Nk], v = x·Wv [M, Nv]. Nq, Nk and Nv are
 * independent (grouped-query and multi-query attention: Nq = (Hq / Hkv)·Nk). Any M >= 1.
 * q, k and v share one dtype, float32, float16 or bfloat16 (row- or column-major, any leading
 * dimension each). They must be three distinct outputs that share no element with each other
 * (disjoint column slices of one row-major [M, Nq + Nk + Nv] buffer are fine) and no byte with
 * x or any weight or scale (byte spans are compared).
 *
 * kiln_qkv_project_int8 (W8A16): wq, wk, wv int8 [K, N*] (uint8 taken as int8 bit patterns),
 * row- or column-major (a Linear weight [N*, K] passed as its transposed view), any leading
 * dimension; q_scale, k_scale, v_scale float32 [1] (one scale for the projection) or [N*] (one
 * per output column), any stride; none may be NULL:
 *   q[m, n] = (Σ_k x[m, k] · wq[k, n]) · q_scale[n or 0]
 * the sum of x · (float)w in fp32 on a GPU (double on the CPU), then one multiplication by the
 * scale, rounded once into the output's dtype.
 *
 * kiln_qkv_project_int4 (W4A16): wq, wk, wv kiln_qweights [K, N*] (each its own group size,
 * symmetry and act-order permutation); each output is kiln_matmul_int4 of x and its weight
 * (on the CPU the fused call and three kiln_matmul_int4 calls give the same bits; on a GPU they
 * agree within SPEC §5 but may differ in the last bits, since a launch of one projection can
 * split K over more warps than the fused launch does).
 *
 * GPU (sm_80+): both run DECODE kernels that stream the three weights in one launch, once per
 * 16 rows of x (8 when M <= 8), with tensor cores on exactly converted weights, fp32 sums,
 * deterministic (the same call on the same device gives the same bits).
 * PREFILL (both ops, GPU): each weight is written into the caller's workspace in x's dtype
 * (int4: scale · (q − zero); int8: w · scale), rounded once, and multiplied with kiln_matmul, so
 * the products use the rounded weights and the bits differ from DECODE's in the last places
 * (both within SPEC §5). The projections run in turn, reusing a workspace of the largest
 * weight's size; when q, k and v are adjacent column slices of one row-major buffer and the
 * workspace holds all three weights, they go side by side and one GEMM writes the three (the
 * workspace queries then ask for that size). On sm_90 one kernel takes all three projections
 * instead, the workspace untouched, when together they have tiles for most SMs and TMA can read
 * them: int4 as kiln_matmul_int4's one-kernel PREFILL (above); int8 when the weights are
 * column-major views with 16-byte aligned columns (a Linear weight [N, K] transposed) and each
 * n % 16 == 0, with the exact integer weights in x's dtype and each sum times its scale in fp32
 * before the one rounding (so its bits differ from the workspace path's). AUTO picks PREFILL
 * from M = 256 when opts carry a workspace or that one kernel takes the call, else DECODE. int8
 * weights are fastest column-major with 8-byte aligned columns (a Linear weight [N, K] as its
 * transposed view) or row-major with 4-byte aligned rows; other layouts load element by
 * element. */
typedef enum kiln_qkv_algo {
  KILN_QKV_AUTO = 0,    /* the CPU path on a CPU context; on a GPU DECODE or PREFILL (above) */
  KILN_QKV_DECODE = 1,  /* GPU: bandwidth-bound over the three weights' bytes, small M (decode, M <= ~16) */
  KILN_QKV_PREFILL = 2, /* GPU: weights into the workspace as x's dtype, then kiln_matmul (large M) */
} kiln_qkv_algo;

typedef struct kiln_qkv_opts {
  kiln_qkv_algo algo;  /* DECODE and PREFILL are GPU algorithms: UNSUPPORTED on a CPU context */
  void *workspace;     /* PREFILL: as kiln_matmul_int4_opts.workspace, of at least the op's
                        * _workspace_size bytes, sharing no byte with x, the weights, the scales or
                        * the outputs; NULL: none (AUTO then runs DECODE at every M) */
  size_t workspace_bytes;
} kiln_qkv_opts;

KILN_API kiln_qkv_opts kiln_qkv_opts_default(void);
/* opts may be NULL (defaults). */
/* Bytes of workspace kiln_qkv_project_int8's PREFILL wants (as kiln_qkv_project_int4_workspace_size). */
KILN_API kiln_status kiln_qkv_project_int8_workspace_size(kiln_context *ctx, const DLTensor *x, const DLTensor *wq,
                                                          const DLTensor *wk, const DLTensor *wv,
                                                          const DLTensor *q_scale, const DLTensor *k_scale,
                                                          const DLTensor *v_scale, const DLTensor *q,
                                                          const DLTensor *k, const DLTensor *v, size_t *bytes);
KILN_API kiln_status kiln_qkv_project_int8(kiln_context *ctx, const DLTensor *x, const DLTensor *wq,
                                           const DLTensor *wk, const DLTensor *wv, const DLTensor *q_scale,
                                           const DLTensor *k_scale, const DLTensor *v_scale, const DLTensor *q,
                                           const DLTensor *k, const DLTensor *v, const kiln_qkv_opts *opts,
                                           CUstream stream);
/* Bytes of workspace kiln_qkv_project_int4's PREFILL wants for this call: the three weights as
 * x's dtype when the outputs are adjacent slices of one buffer (one GEMM), else the largest
 * (which also suffices then, for three GEMMs); 0 on a CPU context. Checks the op's arguments. */
KILN_API kiln_status kiln_qkv_project_int4_workspace_size(kiln_context *ctx, const DLTensor *x, const kiln_qweight *wq,
                                                          const kiln_qweight *wk, const kiln_qweight *wv,
                                                          const DLTensor *q, const DLTensor *k, const DLTensor *v,
                                                          size_t *bytes);
KILN_API kiln_status kiln_qkv_project_int4(kiln_context *ctx, const DLTensor *x, const kiln_qweight *wq,
                                           const kiln_qweight *wk, const kiln_qweight *wv, const DLTensor *q,
                                           const DLTensor *k, const DLTensor *v, const kiln_qkv_opts *opts,
                                           CUstream stream);

/* ------------------------------------------------------------------------------------------ */
/* kiln_attention — O = softmax(scale · Q·Kᵀ + mask) · V                                       */
/* ------------------------------------------------------------------------------------------ */
/* Q [B, Hq, Sq, D], K [B, Hkv, Sk, D], V [B, Hkv, Sk, Dv], O [B, Hq, Sq, Dv]; rank 3 tensors are
 * B = 1 and rank 2 ([S, D]) B = Hq = Hkv = 1. Any strides (e.g. a [B, S, H, D] buffer passed as
 * its [B, H, S, D] view).
 * Hq % Hkv == 0: query head h reads key/value head h / (Hq / Hkv) (grouped-query and
 * multi-query attention). Q, K, V share one dtype: f16, bf16 or f32; O is that dtype or f32.
 * 1 <= D, Dv <= 256. Sq, Sk >= 1.
 * causal: query i attends key j iff j <= i + (Sk - Sq) (aligned to the bottom-right, the KV-cache
 * convention; the usual top-left rule when Sq == Sk). A query row that attends no key (possible
 * when Sq > Sk) yields O = 0 and LSE = -inf, never NaN.
 * lse (optional, NULL to skip): f32 [B, Hq, Sq] (rank matching Q's minus one, last dimension
 * contiguous), the natural-log logsumexp of the row's scaled, masked scores; the backward needs
 * it. Outputs must not overlap the inputs, each other or themselves (byte spans are compared, so
 * pass separate buffers). GPU: fp32 accumulation; CPU: double, rounded once to the output. */
typedef enum kiln_attention_algo {
  KILN_ATTENTION_AUTO = 0,  /* the CPU path on a CPU context; on a GPU FLASH, or SMEM where the
                             * short-sequence kernel measured faster (sm_90: D <= 64 with
                             * Sk <= 512, or causal Sk <= 1024; D <= 128 causal with Sk <= 128) */
  KILN_ATTENTION_SMEM = 1,  /* the short-sequence kernel: sm_90a, wgmma + TMA, 64 query rows per
                             * block and two blocks per SM, so that one block's loads overlap the
                             * other's MMAs when a query tile has few key blocks; any Sk; same
                             * conditions as FLASH_WGMMA (UNSUPPORTED otherwise); its backward
                             * is FLASH_WGMMA's. Not the reference's score-row kernel: scores
                             * stay in registers, one key block at a time */
  KILN_ATTENTION_FLASH = 2, /* online softmax over key blocks, O(S) memory, any length: the
                             * fastest FLASH kernel for the device and problem. Tensor cores
                             * (on sm_90 WGMMA where it applies, else MMA_SYNC) for f16/bf16
                             * inputs with D == Dv a multiple of 8, contiguous head dims and
                             * 16-byte aligned rows; every other valid problem (f32 inputs,
                             * D != Dv, any D, any strides) runs on CUDA-core kernels in f32
                             * arithmetic, slower but never refused; so does the backward at
                             * D > 64 on sm_86 / sm_89, whose 99 KB of shared memory per block
                             * the sm_80 backward kernels exceed there */
  KILN_ATTENTION_FLASH_MMA_SYNC = 3, /* FLASH with the sm_80+ FlashAttention-2 style kernels
                                      * (tensor cores; UNSUPPORTED where they do not apply or
                                      * do not fit the device's shared memory) */
  KILN_ATTENTION_FLASH_WGMMA = 4,    /* FLASH with the sm_90a FlashAttention-3 style kernels
                                      * (wgmma + TMA): sm_90 only, D <= 256, no stride-0
                                      * repeats in q, k, v; UNSUPPORTED otherwise */
  KILN_ATTENTION_FLASH_DECODE = 5,   /* FLASH for few query rows per K/V head (decode against a
                                      * KV cache): the Hq / Hkv query heads of a group share each
                                      * K/V block (packed into 16-row tiles of head x query) and
                                      * the blocks of a cluster split the keys, combining their
                                      * softmax states in shared memory (deterministic, no
                                      * workspace). sm_90 only, the tensor-core conditions of
                                      * FLASH, D <= 256; UNSUPPORTED otherwise. Forward only: its
                                      * backward is FLASH's */
} kiln_attention_algo;

typedef struct kiln_attention_opts {
  kiln_attention_algo algo; /* SMEM and FLASH are GPU algorithms: UNSUPPORTED on a CPU context */
  float scale;              /* multiplies Q·Kᵀ; 0 (the default) means 1/sqrt(D); else finite and > 0 */
  int causal;               /* 0 or 1, see above */
  int deterministic;        /* 0 or 1 (checked by the forward too); backward: 1 = the same bits on
                             * every run (no atomics); 0 lets a library built with the fused sm_90
                             * backward (KILN_ATTN_BWD_FUSED=1, not the default yet) sum dQ by L2
                             * reductions at head dims <= 128, whose order varies (dQ may differ in
                             * its last bits between runs). The CPU path is deterministic either
                             * way. */
  int tile_m;               /* 0: the query tile chosen per problem (default). With algo
                             * FLASH_WGMMA, 128 or 192 forces the query rows per block of the sm_90a
                             * forward and of the backward's dQ kernel (192: their wide
                             * configurations, head dims <= 64 only; the backward then takes its
                             * two-kernel path), for tests and tuning; other algos take only 0. */
} kiln_attention_opts;

KILN_API kiln_attention_opts kiln_attention_opts_default(void);

/* opts may be NULL (defaults). */
KILN_API kiln_status kiln_attention(kiln_context *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                                    const DLTensor *o, const DLTensor *lse, const kiln_attention_opts *opts,
                                    CUstream stream);

/* Gradients of kiln_attention: dQ, dK, dV from Q, K, V, O and LSE of the forward (same opts)
 * and dO (o's shape; f32, f16 or bf16). dq/dk/dv have the shapes of q/k/v (f32 or the inputs'
 * dtype); any may be NULL to skip, not all three. For GQA, dK and dV sum over the Hq / Hkv
 * query heads of each group. GPU (FLASH, from the kernel family the forward chooses): fp32
 * accumulation, deterministic (no atomics), except in a library built with the fused sm_90
 * backward (KILN_ATTN_BWD_FUSED=1, not the default yet) where opts->deterministic is 0 and
 * opts->tile_m 0 at head dims <= 128 with dq and dk or dv asked for: there one kernel computes all
 * three and sums dQ in f32 by L2 reductions. The workspace (size query, which depends on opts;
 * 256-byte aligned) holds f32 per-row dO·O, for the tensor-core kernels when dO is not of q's
 * dtype or not 16-byte aligned with a contiguous head dimension or repeats rows with a zero
 * stride a converted copy of dO, and for that fused backward an f32 dQ accumulator (32 KB per
 * 8192 / D padded to 64 or 128 query rows of each head). */
KILN_API kiln_status kiln_attention_backward_workspace_size(kiln_context *ctx, const DLTensor *q, const DLTensor *k,
                                                            const DLTensor *v, const DLTensor *o,
                                                            const DLTensor *lse, const DLTensor *dout,
                                                            const DLTensor *dq, const DLTensor *dk,
                                                            const DLTensor *dv, const kiln_attention_opts *opts,
                                                            size_t *bytes);
KILN_API kiln_status kiln_attention_backward(kiln_context *ctx, const DLTensor *q, const DLTensor *k,
                                             const DLTensor *v, const DLTensor *o, const DLTensor *lse,
                                             const DLTensor *dout, const DLTensor *dq, const DLTensor *dk,
                                             const DLTensor *dv, void *workspace, size_t workspace_bytes,
                                             const kiln_attention_opts *opts, CUstream stream);

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
