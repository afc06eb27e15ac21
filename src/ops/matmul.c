/*
 * matmul.c — kiln_matmul and kiln_matmul_backward: validate -> choose kernel -> launch (or CPU).
 *
 * One internal entry, gemm_run(), serves the forward and both gradients: every product is
 * expressed on matrix views (kiln_matrix) whose strides say row- or column-major, so the
 * backward's transposes are views, never copies.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "cpu/cpu.h"

kiln_matmul_opts kiln_matmul_opts_default(void) {
  kiln_matmul_opts o;
  memset(&o, 0, sizeof o);
  o.algo = KILN_MATMUL_AUTO;
  o.alpha = 1.0f;
  return o;
}

static const char *algo_name(kiln_matmul_algo a) {
  switch (a) {
  case KILN_MATMUL_AUTO: return "AUTO";
  case KILN_MATMUL_MMA_SYNC: return "MMA_SYNC";
  case KILN_MATMUL_CP_ASYNC: return "CP_ASYNC";
  case KILN_MATMUL_WGMMA: return "WGMMA";
  }
  return NULL;
}

/* Checks the options against the context before any work; AUTO always passes. The algo comes
 * first, so that every later message can name it. */
static kiln_status check_algo(const kiln_context *ctx, const char *op, kiln_matmul_algo algo, int tile_n,
                              int stream_k) {
  if (!algo_name(algo))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->algo is %d; expected KILN_MATMUL_AUTO, _MMA_SYNC, _CP_ASYNC or _WGMMA", op, (int)algo);
  if (tile_n != 0 && tile_n != 64 && tile_n != 128 && tile_n != 256)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->tile_n is %d; expected 0 (chosen per shape), 64, 128 or 256", op, tile_n);
  if (tile_n != 0 && algo != KILN_MATMUL_WGMMA)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->tile_n is %d but algo is %s; tile_n selects a WGMMA tile width: set algo "
                     "KILN_MATMUL_WGMMA or tile_n 0",
                     op, tile_n, algo_name(algo));
  if (stream_k < -1 || stream_k > 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->stream_k is %d; expected 0 (where it pays), 1 (whenever the last wave is partial) or "
                     "-1 (never)",
                     op, stream_k);
  if (stream_k == 1 && algo != KILN_MATMUL_WGMMA)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->stream_k is 1 but algo is %s; stream-K splits the tiles of the WGMMA walk: set algo "
                     "KILN_MATMUL_WGMMA or stream_k 0",
                     op, algo_name(algo));
  if (algo == KILN_MATMUL_AUTO) return KILN_OK;
  if (ctx->device_type == kDLCPU)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo %s needs a CUDA device but the context is the CPU's; use KILN_MATMUL_AUTO for CPU "
                     "tensors",
                     op, algo_name(algo));
  if (algo == KILN_MATMUL_WGMMA && ctx->arch != 90)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo WGMMA needs an sm_90 GPU (Hopper: H100, H200) but %s is sm_%d; use KILN_MATMUL_AUTO, "
                     "_MMA_SYNC or _CP_ASYNC",
                     op, ctx->info.name, ctx->arch);
  return KILN_OK;
}

/* The kernel for an algo, dtype and layout; kernel_list.h orders each group kk, kn, mk, mn. */
static kiln_kernel_id gemm_kernel(kiln_matmul_algo algo, int wg_bn, bool wg_pair, bool wg_sk, bool bf16, bool a_k,
                                  bool b_k, bool aligned) {
  kiln_kernel_id base;
  if (algo == KILN_MATMUL_WGMMA && wg_sk)
    base = bf16 ? KILN_K_GEMM_wgmma256k_bf16_KK : KILN_K_GEMM_wgmma256k_f16_KK;
  else if (algo == KILN_MATMUL_WGMMA && wg_pair)
#if KILN_WGMMA_PAIRS
    base = bf16 ? KILN_K_GEMM_wgmma256c_bf16_KK : KILN_K_GEMM_wgmma256c_f16_KK;
#else
    base = KILN_K_CAST; /* unreachable: wg_pair is false without the pair kernels */
#endif
  else if (algo == KILN_MATMUL_WGMMA && wg_bn == 256)
    base = bf16 ? KILN_K_GEMM_wgmma256_bf16_KK : KILN_K_GEMM_wgmma256_f16_KK;
  else if (algo == KILN_MATMUL_WGMMA && wg_bn == 128)
    base = bf16 ? KILN_K_GEMM_wgmma128_bf16_KK : KILN_K_GEMM_wgmma128_f16_KK;
  else if (algo == KILN_MATMUL_WGMMA)
    base = bf16 ? KILN_K_GEMM_wgmma64_bf16_KK : KILN_K_GEMM_wgmma64_f16_KK;
  else if (algo == KILN_MATMUL_CP_ASYNC)
    base = bf16 ? KILN_K_GEMM_cpasync_bf16_KK : KILN_K_GEMM_cpasync_f16_KK;
  else if (aligned)
    base = bf16 ? KILN_K_GEMM_mma_bf16_KK : KILN_K_GEMM_mma_f16_KK;
  else
    base = bf16 ? KILN_K_GEMM_mma_bf16_KK_scalar : KILN_K_GEMM_mma_f16_KK_scalar;
  return (kiln_kernel_id)(base + (a_k ? 0 : 2) + (b_k ? 0 : 1));
}

/* kiln_matmul's optional workspace (stream-K of the WGMMA walk, kiln_wgmma_stream_k): the
 * caller's memory and opts->stream_k; with `need` set, gemm_run only answers the size query. */
typedef struct gemm_workspace {
  void *ptr;
  size_t bytes;
  int mode;
  size_t *need;
} gemm_workspace;

/* Stream-K's part of a WGMMA launch: the plan for its walk and, unless this is the size query,
 * the workspace checked (errors only when stream_k 1 demands the split; with stream_k 0 a
 * missing or small workspace means no split) and the kernel's arguments filled. */
static kiln_status gemm_stream_k(const kiln_context *ctx, const char *op, const gemm_workspace *ws, int64_t items,
                                 int64_t k, int bn, const kiln_matrix *A, const kiln_matrix *B, const kiln_matrix *C,
                                 kiln_stream_k *out) {
  memset(out, 0, sizeof *out);
  const int64_t nk = (k + KILN_GEMM_WG_BK - 1) / KILN_GEMM_WG_BK;
  const kiln_wgmma_sk plan = kiln_wgmma_stream_k(ctx, items, nk, bn, ws->mode);
  if (ws->need) {
    *ws->need = plan.bytes;
    return KILN_OK;
  }
  if (!plan.items) return KILN_OK;
  if (!ws->ptr || ws->bytes < plan.bytes) {
    if (ws->mode != 1) return KILN_OK;
    return kiln_fail(KILN_ERROR_WORKSPACE,
                     "%s: opts->stream_k is 1 and this walk splits %" PRId64 " tiles, which needs %zu bytes of "
                     "workspace, but opts give %zu%s; size it with kiln_matmul_workspace_size",
                     op, plan.items, plan.bytes, ws->ptr ? ws->bytes : 0, ws->ptr ? "" : " (workspace NULL)");
  }
  if ((uintptr_t)ws->ptr % 256)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: opts->workspace %p is not 256-byte aligned; use an allocation's start (kiln_tensor_empty, "
                     "torch.empty and cudaMalloc return 256-byte aligned memory)",
                     op, ws->ptr);
  kiln_status st;
  const int64_t span = (int64_t)plan.bytes;
  if ((st = kiln_check_disjoint(op, "opts->workspace", ws->ptr, span, "a", A->data, A->span_bytes)) ||
      (st = kiln_check_disjoint(op, "opts->workspace", ws->ptr, span, "b", B->data, B->span_bytes)) ||
      (st = kiln_check_disjoint(op, "opts->workspace", ws->ptr, span, "c", C->data, C->span_bytes)))
    return st;
  kiln_wgmma_sk_args(&plan, ws->ptr, out);
  return KILN_OK;
}

/* C = alpha·A·B + beta·C over `batch` matrices (views already validated, batch strides 0 where
 * an operand broadcasts). With reduce_batch, C is one matrix and receives the sum over the batch
 * (launched batch by batch with beta = 1 after the first, a fixed order: deterministic).
 * ws: kiln_matmul's workspace, or NULL (no stream-K). The caller has entered the context on the
 * GPU (not for the size query). */
static kiln_status gemm_run(const kiln_context *ctx, const char *op, kiln_matrix A, kiln_matrix B, kiln_matrix C,
                            int64_t batch, bool reduce_batch, float alpha, float beta, kiln_matmul_algo algo,
                            int tile_n, const gemm_workspace *ws, CUstream stream) {
  if (reduce_batch) {
    /* one matrix of each at a time: a TMA map over A or B then describes that matrix only, not
     * the batches from it to past the operand's end (they were never read, but a map must not
     * describe memory the operand does not own) */
    kiln_matrix a1 = A, b1 = B;
    a1.batch = b1.batch = 1;
    for (int64_t i = 0; i < batch; i++) {
      a1.data = A.data + i * A.bs * (int64_t)A.elem;
      b1.data = B.data + i * B.bs * (int64_t)B.elem;
      kiln_status st = gemm_run(ctx, op, a1, b1, C, 1, false, alpha, i ? 1.0f : beta, algo, tile_n, NULL, stream);
      if (st) return st;
    }
    return KILN_OK;
  }
  if (ws && ws->need) *ws->need = 0; /* unless a WGMMA walk splits tiles below */
  if (ctx->device_type == kDLCPU) return ws && ws->need ? KILN_OK : kiln_cpu_gemm(op, &A, &B, &C, batch, alpha, beta);

  /* The kernels write C row-major. A column-major C is computed as Cᵀ = Bᵀ·Aᵀ. */
  if (!kiln_matrix_row_major(&C)) {
    kiln_matrix t = kiln_matrix_transpose(A);
    A = kiln_matrix_transpose(B);
    B = t;
    C = kiln_matrix_transpose(C);
  }
  const bool a_k = A.cs == 1, b_k = B.rs == 1;
  const bool aligned = kiln_matrix_aligned16(&A) && kiln_matrix_aligned16(&B);
  const bool tma_ok = kiln_wgmma_operand_ok(&A) && kiln_wgmma_operand_ok(&B);
  /* The sm_80 kernels' rings (stages per device, kiln_abi.h) and their mbarriers, against what
   * the device grants a block: CP_ASYNC's 128 x 256 x 64 stages take ~51 KB each, 3 on sm_80
   * and 4 on sm_90, more than sm_86 and sm_89 grant (99 KB: A10, L40S, RTX 3090 / 4090);
   * MMA_SYNC's of BK 32 ~27 KB each, 3 (4 on sm_90). */
  const int cpa_stages = KILN_GEMM_STAGES(1, ctx->arch), mma_stages = KILN_GEMM_STAGES(0, ctx->arch);
  const size_t cpa_tiles = (size_t)KILN_GEMM_SMEM_BYTES(cpa_stages, KILN_GEMM_CPA_BM, KILN_GEMM_CPA_BN,
                                                        KILN_GEMM_CPA_BK, a_k, b_k);
  const size_t mma_tiles = (size_t)KILN_GEMM_SMEM_BYTES(mma_stages, KILN_GEMM_MMA_BM, KILN_GEMM_MMA_BN,
                                                        KILN_GEMM_MMA_BK, a_k, b_k);
  const size_t cpa_smem = cpa_tiles + KILN_GEMM_RING_BYTES, mma_smem = mma_tiles + KILN_GEMM_RING_BYTES;
  const bool cpa_fits = ctx->info.smem_per_block_optin >= cpa_smem;
  /* AUTO: WGMMA on Hopper, then CP_ASYNC, then MMA_SYNC (any alignment); docs/performance.md
   * has the measurements behind the order. */
  if (algo == KILN_MATMUL_AUTO)
    algo = tma_ok && ctx->arch == 90       ? KILN_MATMUL_WGMMA
           : aligned && cpa_fits           ? KILN_MATMUL_CP_ASYNC
                                           : KILN_MATMUL_MMA_SYNC;
  if (algo == KILN_MATMUL_WGMMA && !tma_ok)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo WGMMA loads tiles with TMA, which needs 16-byte aligned operands (data pointer, leading "
                     "dimension, also over a dimension of size 1, and batch stride multiples of 8 elements) but A has "
                     "ld %" PRId64 " and B has ld %" PRId64
                     "; use KILN_MATMUL_AUTO or _MMA_SYNC, or pad the leading dimension to a multiple of 8",
                     op, kiln_matrix_ld(&A), kiln_matrix_ld(&B));
  if (algo == KILN_MATMUL_CP_ASYNC && !aligned)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo CP_ASYNC needs 16-byte aligned operand rows (data pointer, leading dimension and batch "
                     "stride multiples of 8 elements) but A has ld %" PRId64 " and B has ld %" PRId64
                     "; use KILN_MATMUL_AUTO or _MMA_SYNC, or pad the leading dimension to a multiple of 8",
                     op, kiln_matrix_ld(&A), kiln_matrix_ld(&B));
  if (algo == KILN_MATMUL_CP_ASYNC && !cpa_fits)
    return kiln_smem_refusal(ctx, op, "algo CP_ASYNC", cpa_smem, "use KILN_MATMUL_AUTO or _MMA_SYNC");
  if (algo == KILN_MATMUL_MMA_SYNC && ctx->info.smem_per_block_optin < mma_smem)
    return kiln_smem_refusal(ctx, op, "algo MMA_SYNC", mma_smem, "use a CPU context for products on this device");

  const bool cpa = algo == KILN_MATMUL_CP_ASYNC, wg = algo == KILN_MATMUL_WGMMA;
  const int bm = wg ? KILN_GEMM_WG_BM : cpa ? KILN_GEMM_CPA_BM : KILN_GEMM_MMA_BM;
  const int wg_bn = wg ? (tile_n ? tile_n : kiln_wgmma_tile_n(A.rows, B.cols, batch, ctx->info.sm_count)) : 0;
  const int bn = wg ? wg_bn : cpa ? KILN_GEMM_CPA_BN : KILN_GEMM_MMA_BN;
  const int64_t tiles = ((A.rows + bm - 1) / bm) * ((B.cols + bn - 1) / bn);
  /* WGMMA's persistent grid walks tiles of every batch with a 32-bit tile index */
  if (tiles > INT32_MAX || (wg && tiles * batch > INT32_MAX))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: C is [%" PRId64 ", %" PRId64 "] x batch %" PRId64 ", %" PRId64 " tiles of %dx%d per batch, "
                     "more than a grid holds (2^31-1); split the product",
                     op, A.rows, B.cols, batch, tiles, bm, bn);
  kiln_gemm_args args = {
      .a = A.data, .b = B.data, .c = C.data,
      .a_bs = A.bs, .a_rs = A.rs, .a_cs = A.cs,
      .b_bs = B.bs, .b_rs = B.rs, .b_cs = B.cs,
      .c_bs = C.bs, .c_rs = C.rs,
      .m = (int32_t)A.rows, .n = (int32_t)B.cols, .k = (int32_t)A.cols, .batch = (int32_t)batch,
      .alpha = alpha, .beta = beta, .c_dtype = kiln_dt_code(C.dtype), .group_m = KILN_GEMM_GROUP_M,
  };
  const unsigned gz = batch > 65535 ? 65535u : (unsigned)batch;
  /* With KILN_WGMMA_PAIRS, WGMMA 128 x 256 tiles go in 2-CTA clusters sharing B (TMA multicast)
   * when there are two or more tile rows to pair up (off by default: docs/performance.md). */
  const int64_t tiles_m = (A.rows + bm - 1) / bm;
  bool wg_pair = false;
  if (wg) {
    const int64_t items = kiln_wgmma_items(ctx, wg_bn, tiles_m, tiles / tiles_m, batch, &wg_pair);
    /* C through shared memory and TMA stores where it can (kiln_wgmma_c_staged) */
    args.c_staged = C.batch == batch && kiln_wgmma_c_staged(&C, beta);
    if (ws && !wg_pair) {
      kiln_status st = gemm_stream_k(ctx, op, ws, items, A.cols, wg_bn, &A, &B, &C, &args.sk);
      if (st || ws->need) return st;
    }
    const bool sk = args.sk.items > 0;
    const kiln_kernel_id kernel = gemm_kernel(algo, wg_bn, wg_pair, sk, KILN_IS_BF16(A.dtype), a_k, b_k, aligned);
    return kiln_wgmma_launch(ctx, op, kernel, &A, &B, args.c_staged ? &C : NULL, wg_bn, wg_pair, items, sk, &args,
                             stream);
  }
  if (ws && ws->need) return KILN_OK;
  const kiln_kernel_id kernel = gemm_kernel(algo, wg_bn, wg_pair, false, KILN_IS_BF16(A.dtype), a_k, b_k, aligned);
  const unsigned smem = (unsigned)(cpa ? cpa_tiles : mma_tiles); /* dynamic: the tiles */
  void *params[] = {&args};
  const unsigned threads = cpa ? KILN_GEMM_THREADS : KILN_GEMM_MMA_THREADS(ctx->arch);
  return kiln_launch(ctx, kernel, (unsigned)tiles, 1, gz, threads, smem, stream, params, op);
}

/* ------------------------------------------------------------------------------------------ */
/* Validation shared by the forward and the backward                                          */
/* ------------------------------------------------------------------------------------------ */
typedef struct matmul_shapes {
  kiln_matrix a, b;
  int64_t batch, m, n, k;
} matmul_shapes;

static kiln_status check_inputs(const kiln_context *ctx, const char *op, const DLTensor *a, const DLTensor *b,
                                matmul_shapes *s) {
  kiln_status st;
  if ((st = kiln_check_tensor(ctx, op, "a", a)) || (st = kiln_check_tensor(ctx, op, "b", b))) return st;
  char da[48], db[48], sa[160], sb[160];
  if (!KILN_IS_F16(a->dtype) && !KILN_IS_BF16(a->dtype))
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: a has dtype %s; expected float16 or bfloat16", op,
                     kiln_dtype_name(a->dtype, da));
  if (memcmp(&a->dtype, &b->dtype, sizeof a->dtype) != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: b has dtype %s but a has %s; both must be float16 or both bfloat16",
                     op, kiln_dtype_name(b->dtype, db), kiln_dtype_name(a->dtype, da));
  if ((st = kiln_matrix_view(op, "a", a, true, &s->a)) || (st = kiln_matrix_view(op, "b", b, true, &s->b))) return st;
  s->m = s->a.rows;
  s->k = s->a.cols;
  s->n = s->b.cols;
  if (s->b.rows != s->k)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: b has shape %s but a has K = %" PRId64 " (shape %s); inner dimensions must match", op,
                     kiln_shape_str(b, sb, sizeof sb), s->k, kiln_shape_str(a, sa, sizeof sa));
  if (s->a.batch != s->b.batch && s->a.batch != 1 && s->b.batch != 1)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: a has batch %" PRId64 " and b has batch %" PRId64 "; batches must be equal or one of them 1",
                     op, s->a.batch, s->b.batch);
  s->batch = s->a.batch > s->b.batch ? s->a.batch : s->b.batch;
  return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_matmul                                                                                */
/* ------------------------------------------------------------------------------------------ */
/* The forward's checks, shared with its workspace query. */
static kiln_status matmul_prepare(kiln_context *ctx, const char *op, const DLTensor *a, const DLTensor *b,
                                  const DLTensor *c, const kiln_matmul_opts *o, matmul_shapes *s, kiln_matrix *cm) {
  kiln_status st;
  if ((st = check_algo(ctx, op, o->algo, o->tile_n, o->stream_k))) return st;
  if ((st = check_inputs(ctx, op, a, b, s))) return st;
  if ((st = kiln_check_float_matrix(ctx, op, "c", c, s->batch, s->m, s->n, true, cm))) return st;
  if ((st = kiln_check_no_overlap(op, "c", cm, "a", &s->a)) || (st = kiln_check_no_overlap(op, "c", cm, "b", &s->b)))
    return st;
  return KILN_OK;
}

kiln_status kiln_matmul(kiln_context *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *c,
                        const kiln_matmul_opts *opts, CUstream stream) {
  const char *op = "kiln_matmul";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  kiln_matmul_opts o = opts ? *opts : kiln_matmul_opts_default();
  matmul_shapes s;
  kiln_matrix cm;
  if ((st = matmul_prepare(ctx, op, a, b, c, &o, &s, &cm))) return st;
  const gemm_workspace ws = {.ptr = o.workspace, .bytes = o.workspace_bytes, .mode = o.stream_k};
  if (ctx->device_type == kDLCPU)
    return gemm_run(ctx, op, s.a, s.b, cm, s.batch, false, o.alpha, 0.f, o.algo, o.tile_n, &ws, stream);
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
  st = gemm_run(ctx, op, s.a, s.b, cm, s.batch, false, o.alpha, 0.f, o.algo, o.tile_n, &ws, stream);
  kiln_ctx_leave(ctx, &scope);
  return st;
}

kiln_status kiln_matmul_workspace_size(kiln_context *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *c,
                                       const kiln_matmul_opts *opts, size_t *bytes) {
  const char *op = "kiln_matmul_workspace_size";
  kiln_status st = kiln_check_size_query(ctx, op, bytes);
  if (st) return st;
  kiln_matmul_opts o = opts ? *opts : kiln_matmul_opts_default();
  matmul_shapes s;
  kiln_matrix cm;
  if ((st = matmul_prepare(ctx, op, a, b, c, &o, &s, &cm))) return st;
  size_t need = 0;
  const gemm_workspace ws = {.mode = o.stream_k, .need = &need};
  if ((st = gemm_run(ctx, op, s.a, s.b, cm, s.batch, false, o.alpha, 0.f, o.algo, o.tile_n, &ws, NULL))) return st;
  *bytes = need;
  return KILN_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* kiln_matmul_backward                                                                       */
/*                                                                                            */
/* dA = dC·Bᵀ and dB = Aᵀ·dC. An operand that was broadcast over the batch gets the sum of its */
/* per-batch gradients. Workspace, in order, each part 256-byte aligned:                      */
/*   dC converted to A's dtype   when dC's dtype differs (compact [batch, M, N]);             */
/*   f32 accumulator [M, K]      when dA sums over the batch and dA is not f32;               */
/*   f32 accumulator [K, N]      likewise for dB.                                             */
/* ------------------------------------------------------------------------------------------ */
typedef struct backward_plan {
  matmul_shapes s;
  kiln_matrix dc, da, db;
  bool want_da, want_db, convert_dc, da_reduce, db_reduce, da_acc, db_acc;
  size_t off_dc, off_da, off_db, bytes;
} backward_plan;

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static kiln_status plan_backward(const kiln_context *ctx, const char *op, const DLTensor *a, const DLTensor *b,
                                 const DLTensor *dc, const DLTensor *da, const DLTensor *db, backward_plan *p) {
  memset(p, 0, sizeof *p);
  kiln_status st;
  if ((st = check_inputs(ctx, op, a, b, &p->s))) return st;
  const matmul_shapes *s = &p->s;
  if ((st = kiln_check_float_matrix(ctx, op, "dc", dc, s->batch, s->m, s->n, false, &p->dc))) return st;
  if (!da && !db)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT, "%s: da and db are both NULL; pass at least one gradient to compute", op);
  p->want_da = da != NULL;
  p->want_db = db != NULL;
  if (da) {
    if ((st = kiln_check_float_matrix(ctx, op, "da", da, s->a.batch, s->m, s->k, true, &p->da))) return st;
    if ((st = kiln_check_no_overlap(op, "da", &p->da, "a", &s->a)) || (st = kiln_check_no_overlap(op, "da", &p->da, "b", &s->b)) ||
        (st = kiln_check_no_overlap(op, "da", &p->da, "dc", &p->dc)))
      return st;
  }
  if (db) {
    if ((st = kiln_check_float_matrix(ctx, op, "db", db, s->b.batch, s->k, s->n, true, &p->db))) return st;
    if ((st = kiln_check_no_overlap(op, "db", &p->db, "a", &s->a)) || (st = kiln_check_no_overlap(op, "db", &p->db, "b", &s->b)) ||
        (st = kiln_check_no_overlap(op, "db", &p->db, "dc", &p->dc)))
      return st;
    if (da && (st = kiln_check_no_overlap(op, "db", &p->db, "da", &p->da))) return st;
  }
  p->convert_dc = memcmp(&dc->dtype, &a->dtype, sizeof a->dtype) != 0;
  p->da_reduce = p->want_da && s->a.batch == 1 && s->batch > 1;
  p->db_reduce = p->want_db && s->b.batch == 1 && s->batch > 1;
  p->da_acc = p->da_reduce && !KILN_IS_F32(p->da.dtype);
  p->db_acc = p->db_reduce && !KILN_IS_F32(p->db.dtype);
  size_t off = 0;
  if (p->convert_dc) {
    p->off_dc = off;
    off += align256((size_t)(s->batch * s->m * s->n) * 2);
  }
  if (p->da_acc) {
    p->off_da = off;
    off += align256((size_t)(s->m * s->k) * 4);
  }
  if (p->db_acc) {
    p->off_db = off;
    off += align256((size_t)(s->k * s->n) * 4);
  }
  p->bytes = off;
  return KILN_OK;
}

kiln_status kiln_matmul_backward_workspace_size(kiln_context *ctx, const DLTensor *a, const DLTensor *b,
                                                const DLTensor *dc, const DLTensor *da, const DLTensor *db,
                                                size_t *bytes) {
  const char *op = "kiln_matmul_backward_workspace_size";
  kiln_status st = kiln_check_size_query(ctx, op, bytes);
  if (st) return st;
  backward_plan p;
  if ((st = plan_backward(ctx, op, a, b, dc, da, db, &p))) return st;
  *bytes = p.bytes;
  return KILN_OK;
}

/* A compact [rows, cols] (or [batch, rows, cols]) view of workspace memory. */
static kiln_matrix workspace_matrix(char *base, DLDataType dt, int64_t batch, int64_t rows, int64_t cols) {
  kiln_matrix m = {.data = base, .dtype = dt, .elem = kiln_dtype_size(dt), .batch = batch, .rows = rows,
                   .cols = cols, .bs = batch > 1 ? rows * cols : 0, .rs = cols, .cs = 1};
  m.span_bytes = batch * rows * cols * (int64_t)m.elem;
  return m;
}

/* Converts a workspace f32 accumulator into the gradient's own dtype (the cast kernel). */
static kiln_status cast_matrix(const kiln_context *ctx, const char *op, const kiln_matrix *src, const kiln_matrix *dst,
                               CUstream stream) {
  kiln_cast_args args = {.src = src->data, .dst = dst->data, .count = dst->rows * dst->cols,
                         .src_dtype = kiln_dt_code(src->dtype), .dst_dtype = kiln_dt_code(dst->dtype)};
  args.shape[0] = args.shape[1] = 1;
  args.shape[2] = dst->rows;
  args.shape[3] = dst->cols;
  args.src_strides[2] = src->rs;
  args.src_strides[3] = src->cs;
  args.dst_strides[2] = dst->rs;
  args.dst_strides[3] = dst->cs;
  return kiln_cast_run(ctx, &args, stream, op);
}

static kiln_status run_backward(const kiln_context *ctx, const char *op, const backward_plan *p, const DLTensor *dc_t,
                                char *ws, float alpha, kiln_matmul_algo algo, int tile_n, CUstream stream) {
  const matmul_shapes *s = &p->s;
  kiln_status st;
  kiln_matrix dc = p->dc;
  if (p->convert_dc) { /* dC in A's dtype, compact, into the workspace */
    kiln_matrix conv = workspace_matrix(ws + p->off_dc, s->a.dtype, s->batch, s->m, s->n);
    DLTensor dst = *dc_t;
    int64_t shape[3] = {s->batch, s->m, s->n};
    dst.data = conv.data;
    dst.byte_offset = 0;
    dst.dtype = s->a.dtype;
    dst.strides = NULL;
    dst.shape = dc_t->ndim == 3 ? shape : shape + 1;
    kiln_cast_args args;
    if ((st = kiln_cast_prepare(ctx, op, dc_t, &dst, &args)) || (st = kiln_cast_run(ctx, &args, stream, op))) return st;
    dc = conv;
  }
  DLDataType f32 = {kDLFloat, 32, 1};
  if (p->want_da) { /* dA[M,K] = dC[M,N] · Bᵀ[N,K] */
    kiln_matrix target = p->da_acc ? workspace_matrix(ws + p->off_da, f32, 1, s->m, s->k) : p->da;
    if ((st = gemm_run(ctx, op, dc, kiln_matrix_transpose(s->b), target, s->batch, p->da_reduce, alpha, 0.f, algo, tile_n,
                       NULL, stream)))
      return st;
    if (p->da_acc && (st = cast_matrix(ctx, op, &target, &p->da, stream))) return st;
  }
  if (p->want_db) { /* dB[K,N] = Aᵀ[K,M] · dC[M,N] */
    kiln_matrix target = p->db_acc ? workspace_matrix(ws + p->off_db, f32, 1, s->k, s->n) : p->db;
    if ((st = gemm_run(ctx, op, kiln_matrix_transpose(s->a), dc, target, s->batch, p->db_reduce, alpha, 0.f, algo, tile_n,
                       NULL, stream)))
      return st;
    if (p->db_acc && (st = cast_matrix(ctx, op, &target, &p->db, stream))) return st;
  }
  return KILN_OK;
}

kiln_status kiln_matmul_backward(kiln_context *ctx, const DLTensor *a, const DLTensor *b, const DLTensor *dc,
                                 const DLTensor *da, const DLTensor *db, void *workspace, size_t workspace_bytes,
                                 const kiln_matmul_opts *opts, CUstream stream) {
  const char *op = "kiln_matmul_backward";
  kiln_status st = kiln_check_context(ctx, op);
  if (st) return st;
  kiln_matmul_opts o = opts ? *opts : kiln_matmul_opts_default();
  if ((st = check_algo(ctx, op, o.algo, o.tile_n, 0))) return st; /* stream_k: kiln_matmul's only */
  backward_plan p;
  if ((st = plan_backward(ctx, op, a, b, dc, da, db, &p))) return st;
  if (workspace_bytes < p.bytes || (p.bytes && !workspace))
    return kiln_fail(KILN_ERROR_WORKSPACE,
                     "%s: workspace is %zu bytes%s but this call needs %zu; size it with "
                     "kiln_matmul_backward_workspace_size",
                     op, workspace_bytes, workspace ? "" : " (NULL)", p.bytes);
  if (p.bytes && (uintptr_t)workspace % 256 != 0)
    return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                     "%s: workspace %p is not 256-byte aligned; pass an allocation's start (cudaMalloc, torch.empty "
                     "and kiln_tensor_empty all return 256-byte aligned memory)",
                     op, workspace);
  if (p.bytes) { /* the workspace is written: it must not alias any argument */
    kiln_matrix ws = {.data = workspace, .span_bytes = (int64_t)p.bytes};
    const struct { const char *name; const kiln_matrix *m; } args[] = {
        {"a", &p.s.a}, {"b", &p.s.b}, {"dc", &p.dc}, {"da", p.want_da ? &p.da : NULL}, {"db", p.want_db ? &p.db : NULL}};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++)
      if (args[i].m && kiln_matrix_overlap(&ws, args[i].m))
        return kiln_fail(KILN_ERROR_INVALID_ARGUMENT,
                         "%s: workspace overlaps %s in memory; the workspace must be a separate buffer", op,
                         args[i].name);
  }
  if (ctx->device_type == kDLCPU) return run_backward(ctx, op, &p, dc, workspace, o.alpha, o.algo, o.tile_n, stream);
  kiln_ctx_scope scope;
  if ((st = kiln_ctx_enter(ctx, &scope, op))) return st;
  st = run_backward(ctx, op, &p, dc, workspace, o.alpha, o.algo, o.tile_n, stream);
  kiln_ctx_leave(ctx, &scope);
  return st;
}
