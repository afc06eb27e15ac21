/*
 * ops.h — helpers shared by the op files (validate -> choose kernel -> launch or CPU path).
 */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include "kiln_abi.h"
#include "runtime/runtime.h"
#include "tensor/tensor.h"

/* The KILN_DT_* code of a float dtype, or -1 when it is not f32/f16/bf16. */
static inline int kiln_dt_code(DLDataType t) {
  if (KILN_IS_F32(t)) return KILN_DT_F32;
  if (KILN_IS_F16(t)) return KILN_DT_F16;
  if (KILN_IS_BF16(t)) return KILN_DT_BF16;
  return -1;
}
/* The DLPack dtype of a KILN_DT_* code (kiln_dt_code's inverse). */
static inline DLDataType kiln_dt_dtype(int code) {
  return (DLDataType){.code = code == KILN_DT_BF16 ? kDLBfloat : kDLFloat, .bits = code == KILN_DT_F32 ? 32 : 16,
                      .lanes = 1};
}

/* A float (f32/f16/bf16) matrix argument of shape [batch?, rows, cols] (src/ops/checks.c); an
 * output must also not overlap itself across batches (an input may broadcast with batch stride 0). */
kiln_status kiln_check_float_matrix(const kiln_context *ctx, const char *op, const char *arg, const DLTensor *t,
                                    int64_t batch, int64_t rows, int64_t cols, bool output, kiln_matrix *m);
/* The start of every *_workspace_size query: a valid context and somewhere to put the answer
 * (which the query writes only as it sees fit: attention's leaves it untouched on an error). */
kiln_status kiln_check_size_query(const kiln_context *ctx, const char *op, size_t *bytes);
/* UNSUPPORTED: "<op>: <what> needs <need> bytes of shared memory per block but <device> (sm_N)
 * grants <optin>; <fix>", for a kernel whose shared memory the device cannot give a block. */
kiln_status kiln_smem_refusal(const kiln_context *ctx, const char *op, const char *what, size_t need, const char *fix);
/* INVALID_ARGUMENT naming both when an output's byte span meets an input's (or another output's). */
kiln_status kiln_check_disjoint(const char *op, const char *out_name, const void *out, int64_t out_bytes,
                                const char *in_name, const void *in, int64_t in_bytes);
kiln_status kiln_check_no_overlap(const char *op, const char *out_name, const kiln_matrix *out, const char *in_name,
                                  const kiln_matrix *in);

/* Builds the args of a cast between two same-shape tensors (rank <= 4) after validation.
 * Used by kiln_cast and by ops that convert an operand into workspace. */
kiln_status kiln_cast_prepare(const kiln_context *ctx, const char *op, const DLTensor *src, const DLTensor *dst,
                              kiln_cast_args *args);
/* Enqueues a prepared cast (GPU) or runs it (CPU). The context has been entered on the GPU. */
kiln_status kiln_cast_run(const kiln_context *ctx, const kiln_cast_args *args, CUstream stream, const char *op);

/* W8A8 on the GPU (src/ops/matmul_int8_gpu.c): args validated by src/ops/matmul_int8.c, the
 * context entered, algo a kiln_int8_algo; UNSUPPORTED with a message for what no kernel handles
 * (or what the explicit algo cannot do). */
kiln_status kiln_matmul_int8_gpu(const kiln_context *ctx, const char *op, const kiln_int8_args *args, int algo,
                                 CUstream stream);

/* The host half of the sm_90a WGMMA kernels (src/ops/wgmma.c), for kiln_matmul and
 * kiln_matmul_int8. An operand TMA can load: 16-byte aligned data, leading dimension and batch
 * stride (the leading dimension also over a dimension of size 1). */
bool kiln_wgmma_operand_ok(const kiln_matrix *m);
/* The TMA descriptor of a wgmma operand (name: for the message): dimension 0 is the operand's
 * contiguous one, dimension 1 the other, dimension 2 the batch (absent when it broadcasts); the
 * box is 128 bytes (the swizzle width) along dimension 0 and box_outer along dimension 1. Also
 * x's map of the fused int4 PREFILL (wa16_gpu.c). */
kiln_status kiln_wgmma_operand_map(const kiln_context *ctx, const char *op, const char *name, const kiln_matrix *m,
                                   uint32_t box_outer, kiln_tensor_map *map);
/* The tile width (256, 128 or 64) for an M x N product over `batch` on `sms` SMs. */
int kiln_wgmma_tile_n(int64_t m, int64_t n, int64_t batch, int sms);
/* The work items of a WGMMA walk over tiles_m x tiles_n tiles of width bn and batch matrices:
 * one a tile, or with *pair (KILN_WGMMA_PAIRS builds only: width 256, two or more tile rows, and
 * pair clusters resident on the device) one a pair of vertically adjacent tiles. */
int64_t kiln_wgmma_items(const kiln_context *ctx, int bn, int64_t tiles_m, int64_t tiles_n, int64_t batch, bool *pair);
/* Encodes A's and B's TMA descriptors (boxes for tile width bn, halves of B with a 2-CTA pair)
 * and launches `kernel` with (args, map_a, map_b, map_c) on a persistent grid of min(items, resident
 * blocks or pairs), or of every SM's block with stream_k. The caller has entered the context. */
kiln_status kiln_wgmma_launch(const kiln_context *ctx, const char *op, kiln_kernel_id kernel, const kiln_matrix *A,
                              const kiln_matrix *B, const kiln_matrix *C, int bn, bool pair, int64_t items,
                              bool stream_k, void *args, CUstream stream);
/* Stream-K of a WGMMA walk of single CTAs (kiln_stream_k in kiln_abi.h): how many of its `items`
 * work items (of nk K slices each, tile width bn: 256 only) go by slices, and the workspace that
 * takes. mode 0 (per shape): where the longest block saves enough slices (wgmma.c); 1: whenever
 * the last wave is partial (tests, tuning); -1: never. items 0: none. */
typedef struct kiln_wgmma_sk {
  int64_t items;
  size_t bytes;       /* the workspace: the flags, then the partials */
  size_t flags_bytes; /* the flags' part (2 a block, padded to 256 bytes) */
  int tile_n;
} kiln_wgmma_sk;
kiln_wgmma_sk kiln_wgmma_stream_k(const kiln_context *ctx, int64_t items, int64_t nk, int bn, int mode);
/* Fills the kernel's stream-K arguments for a plan, in workspace ws (256-byte aligned, plan->bytes
 * long): the flags first, then the partials; a fresh epoch. */
void kiln_wgmma_sk_args(const kiln_wgmma_sk *plan, void *ws, kiln_stream_k *out);
/* Whether a WGMMA GEMM's C (row-major, batch matrices) can leave through shared memory by TMA
 * stores (c_staged of kiln_gemm_args and kiln_int8_args; kiln_wgmma_launch then builds its
 * map): beta = 0, row-major with 16-byte aligned rows and batch stride, rows a multiple of 16
 * bytes long (TMA writes whole 16-byte chunks), strides TMA addresses
 * (C->batch matrices, apart when more than one). */
bool kiln_wgmma_c_staged(const kiln_matrix *C, float beta);
/* A TMA descriptor: rank dimensions (innermost first), rank - 1 byte strides (multiples of 16,
 * below 2^40: the caller checks), box, swizzle (CU_TENSOR_MAP_SWIZZLE_128B for every wgmma
 * operand, _NONE for the W4A16 decode kernel's plain rows), zero fill outside the tensor.
 * type: CU_TENSOR_MAP_DATA_TYPE_*. Also used by attention_gpu.c and wa16_gpu.c. */
kiln_status kiln_tma_map(const kiln_context *ctx, const char *op, int type, uint32_t rank, const void *data,
                         const uint64_t *dims, const uint64_t *strides, const uint32_t *box, int swizzle,
                         kiln_tensor_map *map);

/* Attention on the GPU (src/ops/attention_gpu.c): args validated by src/ops/attention.c, the
 * context entered. algo is any kiln_attention_algo but AUTO's CPU meaning; tile_m is opts.tile_m
 * (0, or 128 / 192 with FLASH_WGMMA: the forward's query rows per block, and the backward's dQ
 * kernel's). Fail with UNSUPPORTED (and a message naming what is
 * unsupported) for a problem no kernel handles. */
kiln_status kiln_attention_gpu_forward(const kiln_context *ctx, const char *op, const kiln_attn_args *args, int algo,
                                       int tile_m, CUstream stream);
/* Workspace bytes the GPU backward needs for args (256-byte aligned start expected). */
size_t kiln_attention_gpu_workspace(const kiln_context *ctx, const kiln_attn_args *args, int algo, int tile_m,
                                    int deterministic);
kiln_status kiln_attention_gpu_backward(const kiln_context *ctx, const char *op, const kiln_attn_args *args, int algo,
                                        int tile_m, int deterministic, void *workspace, CUstream stream);

/* W4A16 and the fused QKV projections (src/ops/matmul_int4.c, src/ops/qkv_project.c). The
 * checks shared by kiln_matmul_int4, kiln_qkv_project_int8 and kiln_qkv_project_int4: */
/* opts->algo of the W·A16 ops, 0 AUTO, 1 DECODE or 2 PREFILL; an explicit algo on the CPU context
 * is UNSUPPORTED. prefix names the enum in messages ("KILN_INT4", "KILN_QKV"). */
kiln_status kiln_check_w16_algo(const kiln_context *ctx, const char *op, int algo, const char *prefix);
/* The activation x: float16 or bfloat16 [M, K], row- or column-major (rank 2). */
kiln_status kiln_check_w16_x(const kiln_context *ctx, const char *op, const DLTensor *x, kiln_matrix *m);
/* A kiln_qweight's buffers (src/ops/qweight.c): codes, scales and zeros non-NULL, and every
 * buffer (perm too when set) at its elements' natural alignment (4, 2, 1, 4 bytes), which the
 * kernels' loads and the CPU code's element accesses need; hint ends the NULL message. */
kiln_status kiln_check_qweight_buffers(const char *op, const char *arg, const kiln_qweight *w, const char *hint);
/* A kiln_qweight argument: non-NULL, a valid [k, n] / group (kiln_qweight_bytes' rules), its
 * buffers (kiln_check_qweight_buffers), on the context's device, w->k equal to x's K (x for the
 * message). */
kiln_status kiln_check_int4_weight(const kiln_context *ctx, const char *op, const char *arg, const kiln_qweight *w,
                                   const DLTensor *x, int64_t k);
/* INVALID_ARGUMENT when the output (named out) overlaps a buffer of the weight named arg. */
kiln_status kiln_check_int4_weight_disjoint(const char *op, const char *out, const kiln_matrix *y, const char *arg,
                                            const kiln_qweight *w);
/* CPU context only (host memory): perm a permutation of 0..k-1 and every zero 0..16, checked
 * before anything is written (a GPU kernel trusts them). */
kiln_status kiln_check_int4_weight_values(const char *op, const char *arg, const kiln_qweight *w);

/* A single W4A16 product as the one-projection case of the fused QKV args (proj[1], proj[2]
 * empty, n 0), for code that serves both ops. */
static inline void kiln_int4_as_qkv(const kiln_int4_args *a, kiln_qkv_args *q) {
  *q = (kiln_qkv_args){0};
  q->x = a->x, q->x_rs = a->x_rs, q->x_cs = a->x_cs;
  q->m = a->m, q->k = a->k, q->x_dtype = a->x_dtype, q->y_dtype = a->y_dtype, q->algo = a->algo;
  kiln_qkv_proj *p = &q->proj[0];
  p->codes = a->codes, p->scales = a->scales, p->zeros = a->zeros, p->perm = a->perm, p->group = a->group;
  p->y = a->y, p->y_rs = a->y_rs, p->y_cs = a->y_cs, p->n = a->n;
}

/* The inverse: projection i of the fused args as a single product (PREFILL runs them one by one). */
static inline void kiln_qkv_proj_as_int4(const kiln_qkv_args *q, int i, kiln_int4_args *a) {
  const kiln_qkv_proj *p = &q->proj[i];
  *a = (kiln_int4_args){0};
  a->x = q->x, a->x_rs = q->x_rs, a->x_cs = q->x_cs;
  a->m = q->m, a->k = q->k, a->x_dtype = q->x_dtype, a->y_dtype = q->y_dtype, a->algo = q->algo;
  a->codes = p->codes, a->scales = p->scales, a->zeros = p->zeros, a->perm = p->perm, a->group = p->group;
  a->y = p->y, a->y_rs = p->y_rs, a->y_cs = p->y_cs, a->n = p->n;
}

/* The fused args' projections with n > 0 as single products, in order, into a[0 .. count);
 * proj[j] (when proj is not NULL) is the index in q->proj of a[j]. Returns count. */
static inline int kiln_qkv_nonempty_as_int4(const kiln_qkv_args *q, kiln_int4_args a[3], int proj[3]) {
  int count = 0;
  for (int i = 0; i < 3; i++) {
    if (q->proj[i].n <= 0) continue;
    kiln_qkv_proj_as_int4(q, i, &a[count]);
    if (proj) proj[count] = i;
    count++;
  }
  return count;
}

/* The GPU sides (src/ops/wa16_gpu.c, one kernel family): args validated, the context entered;
 * UNSUPPORTED with a message for what no kernel handles. proj[i].n == 0 skips a projection. */
kiln_status kiln_matmul_int4_gpu(const kiln_context *ctx, const char *op, const kiln_int4_args *args, CUstream stream);
/* PREFILL's first half: w[k, n] = scale · (q − zero) in x's dtype into ws (row-major [K, N], rows
 * in logical order: row perm[r] holds stored row r). */
kiln_status kiln_w4_dequantize_gpu(const kiln_context *ctx, const char *op, const kiln_int4_args *args, void *ws,
                                   int64_t ld, CUstream stream);
/* PREFILL in one kernel on sm_90a (kernels/w4_prefill_sm90.cu: the weight dequantized stage by
 * stage into wgmma's register operand, no workspace) for count (1..KILN_W4_WG_PROBLEMS) problems
 * sharing x (kiln_matmul_int4's one, a fused QKV call's three, each n > 0) in one launch: fits
 * says whether it takes them (TMA can address the buffers, and it is the faster PREFILL there),
 * kiln_w4_wgmma launches it (context entered). */
bool kiln_w4_wgmma_fits(const kiln_context *ctx, const kiln_int4_args *args, int count);
kiln_status kiln_w4_wgmma(const kiln_context *ctx, const char *op, const kiln_int4_args *args, int count,
                          CUstream stream);
/* The same kernel for kiln_qkv_project_int8's PREFILL (int8 weights, K-contiguous; the scales
 * applied to the fp32 sums): its projections with n > 0 in one launch. */
bool kiln_w8_wgmma_fits(const kiln_context *ctx, const kiln_qkv_args *args);
kiln_status kiln_w8_wgmma(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream);
/* kiln_qkv_project_int8's PREFILL pass: projection p's int8 weight times its scales, as x's
 * dtype, into ws (row-major [k, p->n], rows ld apart). */
kiln_status kiln_w8_dequantize_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_proj *p, int32_t k,
                                   int32_t x_dtype, void *ws, int64_t ld, CUstream stream);
kiln_status kiln_qkv_int8_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream);
/* PREFILL of the W·A16 ops (matmul_int4.c): the workspace int4 weights need (the largest, as x's
 * 16-bit dtype); checks opts' workspace against need bytes (the message says "the largest weight"
 * when largest, else "the weight": [K, need / 2K]), and against x, the outputs and the int4
 * weights w (nw may be 0: int8 checks its own), and resolves *algo on a GPU context
 * (AUTO -> PREFILL from from_m rows of x when the workspace suffices or PREFILL needs none for
 * this call (no_ws: sm_90a's one-kernel path takes it), else DECODE), refusing an explicit
 * PREFILL without enough workspace (KILN_ERROR_WORKSPACE, naming size_fn); runs one projection
 * (in one kernel when fused, from kiln_w4_wgmma_fits; else dequantize into ws, then kiln_matmul
 * of x into y). */
size_t kiln_int4_prefill_bytes(const kiln_qweight *const *w, int nw);
kiln_status kiln_w16_prefill_plan(const kiln_context *ctx, const char *op, const char *prefix, const char *size_fn,
                                  int64_t from_m, size_t need, bool largest, bool no_ws, int *algo, void *ws,
                                  size_t ws_bytes, const kiln_matrix *X, const kiln_matrix *Y,
                                  const char *const *ynames, int ny, const kiln_qweight *const *w,
                                  const char *const *wnames, int nw);
kiln_status kiln_int4_prefill_gpu(const kiln_context *ctx, const char *op, const DLTensor *x, const kiln_int4_args *a,
                                  const DLTensor *y, void *ws, bool fused, CUstream stream);
kiln_status kiln_qkv_int4_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream);

#endif /* KILN_OPS_H */
