/*
 * attention_gpu.c — kiln_attention's GPU side: check what the kernels need beyond the op's
 * contract, choose a kernel for a validated problem, launch.
 *
 * Three kernel families run the FLASH algorithm:
 *   - the sm_90a tensor-core kernels (kernels/attention_sm90.cu, attention_bwd_sm90.cu: WGMMA,
 *     TMA), head dims padded to 64, 128 or 256 (the short-sequence forward 64 or 128);
 *   - the sm_80+ tensor-core kernels (kernels/attention_sm80.cu, attention_bwd_sm80.cu:
 *     mma.sync), head dims padded to 64, 128 or 256;
 *   - the CUDA-core kernels (kernels/attention_simt.cu: f32 arithmetic), any problem that passes
 *     validation.
 * The tensor-core kernels copy 16-byte chunks of Q, K and V rows, so they need f16 or bf16
 * inputs, D == Dv, D a multiple of 8, contiguous head dimensions and 16-byte aligned rows (data
 * pointers and every stride multiples of 8 elements); their backward reads dO of another dtype or
 * layout through a compact copy in the workspace, and writes dQ, dK, dV of any strides and float
 * dtype. FLASH and AUTO take the sm_90a kernels where they fit, else the sm_80 ones, else the
 * CUDA-core ones; FLASH_WGMMA and FLASH_MMA_SYNC run their own family or say why not. SMEM runs
 * the sm_90a forward's short-sequence configuration (one consumer warpgroup of 64 query rows, two
 * blocks per SM) or says why not; AUTO takes it where it measured faster (short_wins). The
 * backward has one configuration per family: SMEM's is FLASH_WGMMA's.
 * FLASH_DECODE runs the split-KV decode forward (kernels/attention_decode_sm90.cu: the query heads
 * of a GQA group packed into 16-row tiles, clusters of blocks splitting the keys) or says why
 * not; AUTO and FLASH take it where decode_wins; its backward is FLASH's.
 */
#include <inttypes.h>
#include <stdio.h>

#include "ops.h"

static bool aligned16(const void *p, int64_t bs, int64_t hs, int64_t ss) {
  return (uintptr_t)p % 16 == 0 && bs % 8 == 0 && hs % 8 == 0 && ss % 8 == 0;
}

/* What the tensor-core kernels need of Q, K, V and O beyond the op's contract: KILN_OK, or
 * UNSUPPORTED with (when `report`) a message for the explicit algo `algo` that asked for them. */
static kiln_status check_tensor_cores(const char *op, const kiln_attn_args *a, const char *algo, bool report) {
  const char *fix = "KILN_ATTENTION_FLASH and _AUTO run it on the CUDA-core kernels";
#define MISFIT(...) (report ? kiln_fail(KILN_ERROR_UNSUPPORTED, __VA_ARGS__) : KILN_ERROR_UNSUPPORTED)
  if (a->in_dtype == KILN_DT_F32)
    return MISFIT("%s: algo %s: q, k and v are float32, but the tensor-core kernels take float16 and "
                  "bfloat16; %s (f32 arithmetic)",
                  op, algo, fix);
  if (a->d != a->dv_dim || a->d % 8 != 0)
    return MISFIT("%s: algo %s: the tensor-core kernels need D == Dv and D a multiple of 8, but D is %d "
                  "and Dv is %d; %s, or pad the head dimension with zeros",
                  op, algo, a->d, a->dv_dim, fix);
  if (a->q_ds != 1 || a->k_ds != 1 || a->v_ds != 1 || a->o_ds != 1)
    return MISFIT("%s: algo %s: the tensor-core kernels need a contiguous head dimension (stride 1) in "
                  "q, k, v and o, but their strides there are %" PRId64 ", %" PRId64 ", %" PRId64
                  " and %" PRId64 "; %s, or pass views whose last dimension is contiguous",
                  op, algo, a->q_ds, a->k_ds, a->v_ds, a->o_ds, fix);
  if (!aligned16(a->q, a->q_bs, a->q_hs, a->q_ss) || !aligned16(a->k, a->k_bs, a->k_hs, a->k_ss) ||
      !aligned16(a->v, a->v_bs, a->v_hs, a->v_ss))
    return MISFIT("%s: algo %s: the tensor-core kernels copy 16-byte chunks, so q, k and v need 16-byte "
                  "aligned data and batch, head and sequence strides that are multiples of 8 elements; "
                  "q has strides [%" PRId64 ", %" PRId64 ", %" PRId64 "], k [%" PRId64 ", %" PRId64
                  ", %" PRId64 "], v [%" PRId64 ", %" PRId64 ", %" PRId64 "]; %s, or use compact "
                  "tensors",
                  op, algo, a->q_bs, a->q_hs, a->q_ss, a->k_bs, a->k_hs, a->k_ss, a->v_bs, a->v_hs,
                  a->v_ss, fix);
  return KILN_OK;
#undef MISFIT
}

/* Every GPU kernel's grid has the query heads in y and the batch in z. */
static kiln_status check_grid(const char *op, const kiln_attn_args *a) {
  if (a->hq > 65535 || a->batch > 65535)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: %d query heads and batch %d; the GPU grid takes at most 65535 of each; split the %s into "
                     "calls of at most 65535",
                     op, a->hq, a->batch, a->hq > 65535 ? "heads" : "batch");
  return KILN_OK;
}

/* The CUDA-core kernels (kernels/attention_simt.cu): `role` is the kernel at 32 rows (the one
 * at 16 follows it in kernel_list.h); blocks of ROWS query rows (y: query heads) or, for dK/dV,
 * ROWS keys (y: K/V heads). */
static kiln_status launch_simt(const kiln_context *ctx, const char *op, const kiln_attn_args *a, kiln_kernel_id role,
                               CUstream stream) {
  const int rows = KILN_ATTN_SIMT_ROWS(a->d, a->dv_dim);
  const bool dkdv = role == KILN_K_ATTN_SIMT_DKDV_R32;
  const unsigned smem = (unsigned)(role == KILN_K_ATTN_SIMT_FWD_R32 ? KILN_ATTN_SIMT_FWD_SMEM_BYTES(rows, a->d, a->dv_dim)
                                   : dkdv                           ? KILN_ATTN_SIMT_DKDV_SMEM_BYTES(rows, a->d, a->dv_dim)
                                                                    : KILN_ATTN_SIMT_DQ_SMEM_BYTES(rows, a->d, a->dv_dim));
  const int64_t seq = dkdv ? a->sk : a->sq;
  kiln_attn_args args = *a;
  void *params[] = {&args};
  return kiln_launch(ctx, (kiln_kernel_id)(role + (rows == 16)), (unsigned)((seq + rows - 1) / rows),
                     (unsigned)(dkdv ? a->hkv : a->hq), (unsigned)a->batch, KILN_ATTN_SIMT_THREADS, smem, stream,
                     params, op);
}

/* Head dims are padded to the kernels' DP: 64, 128 or 256. Each kernel family is listed as
 * D64, D128[, D256] per dtype (kernel_list.h; the short-sequence family stops at D128, which is all
 * it is chosen for), so its kernel is the dtype's first plus 0, 1 or 2. */
static int padded_dim(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }
static kiln_kernel_id family_kernel(kiln_kernel_id f16_d64, kiln_kernel_id bf16_d64, const kiln_attn_args *a) {
  const int dp = padded_dim(a->d);
  return (kiln_kernel_id)((a->in_dtype == KILN_DT_BF16 ? bf16_d64 : f16_d64) + (dp == 64 ? 0 : dp == 128 ? 1 : 2));
}

/* ---- the sm_90a forward (kernels/attention_sm90.cu) ---------------------------------------- */
/* It takes head dims padded to 64, 128 or 256 (the short-sequence forward 64 or 128: `over128` is
 * then the reason for a larger D) on an sm_90 device, through TMA maps of Q, K and V, which need
 * what check_tensor_cores asks (16-byte aligned data, strides multiples of 16 bytes) and a
 * non-zero stride over every dimension of size > 1 (a view that repeats rows with stride 0, e.g.
 * K expanded over heads, goes to the MMA_SYNC kernel). */
static bool strided(int64_t n, int64_t stride) { return n == 1 || stride != 0; }
static const char *wgmma_misfit(const kiln_context *ctx, const kiln_attn_args *a, const char *over128) {
  if (ctx->arch != 90) return "it needs an sm_90 GPU (Hopper: H100, H200)";
  if (over128 && padded_dim(a->d) > 128) return over128;
  if (!strided(a->sq, a->q_ss) || !strided(a->hq, a->q_hs) || !strided(a->batch, a->q_bs) ||
      !strided(a->sk, a->k_ss) || !strided(a->hkv, a->k_hs) || !strided(a->batch, a->k_bs) ||
      !strided(a->sk, a->v_ss) || !strided(a->hkv, a->v_hs) || !strided(a->batch, a->v_bs))
    return "its TMA loads need a non-zero stride over every dimension of size > 1 of q, k and v";
  return NULL;
}

/* A rank-4 TMA map of q, k or v: dimensions (D, S, H, B) innermost first, strides in bytes, box
 * 64 elements of D (128 bytes, the swizzle width; D < 64 is zero-filled) by `rows`. A size-1
 * dimension has stride 0 in the args (normalized); TMA wants a multiple of 16 bytes there and
 * addresses nothing with it, so it gets the compact value. */
static kiln_status attn_map(const kiln_context *ctx, const char *op, const char *name, const kiln_attn_args *a,
                            const void *data, int64_t s, int64_t h, const int64_t stride[3], uint32_t rows,
                            kiln_tensor_map *map) {
  const uint64_t dims[4] = {(uint64_t)a->d, (uint64_t)s, (uint64_t)h, (uint64_t)a->batch};
  uint64_t strides[3], compact = (uint64_t)a->d * 2;
  for (int i = 0; i < 3; i++) {
    strides[i] = stride[i] != 0 ? (uint64_t)stride[i] * 2 : (compact + 15) & ~15ull;
    compact = strides[i] * dims[i + 1];
    if (strides[i] >= (1ull << 40))
      return kiln_fail(KILN_ERROR_UNSUPPORTED,
                       "%s: algo FLASH_WGMMA: a stride of %s is %" PRIu64 " bytes, beyond what TMA addresses (2^40); "
                       "use KILN_ATTENTION_FLASH_MMA_SYNC",
                       op, name, strides[i]);
  }
  const uint32_t box[4] = {64, rows, 1, 1};
  const int type = a->in_dtype == KILN_DT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return kiln_tma_map(ctx, op, type, 4, data, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, map);
}

/* One WGMMA kernel: its TMA maps (q, k, v, and dO for the backward, as the kernels read it: the
 * caller's or the workspace copy), boxes of q_rows rows for q and dO and kv_rows for k and v; grid
 * gx x gy x batch of `threads` threads. */
static kiln_status launch_wgmma(const kiln_context *ctx, const char *op, const kiln_attn_args *a, kiln_kernel_id kernel,
                                unsigned gx, unsigned gy, unsigned threads, unsigned smem, uint32_t q_rows,
                                uint32_t kv_rows, bool with_do, bool dependent, CUstream stream) {
  kiln_tensor_map maps[4];
  const int64_t qs[3] = {a->q_ss, a->q_hs, a->q_bs}, ks[3] = {a->k_ss, a->k_hs, a->k_bs},
                vs[3] = {a->v_ss, a->v_hs, a->v_bs}, ds[3] = {a->do_ss, a->do_hs, a->do_bs};
  kiln_status st;
  if ((st = attn_map(ctx, op, "q", a, a->q, a->sq, a->hq, qs, q_rows, &maps[0])) ||
      (st = attn_map(ctx, op, "k", a, a->k, a->sk, a->hkv, ks, kv_rows, &maps[1])) ||
      (st = attn_map(ctx, op, "v", a, a->v, a->sk, a->hkv, vs, kv_rows, &maps[2])) ||
      (with_do && (st = attn_map(ctx, op, "dout", a, a->dout, a->sq, a->hq, ds, q_rows, &maps[3]))))
    return st;
  kiln_attn_args args = *a;
  void *params[] = {&args, &maps[0], &maps[1], &maps[2], &maps[3]};
  if (dependent)
    return kiln_launch_dependent(ctx, kernel, gx, gy, (unsigned)a->batch, threads, smem, stream, params, op);
  return kiln_launch(ctx, kernel, gx, gy, (unsigned)a->batch, threads, smem, stream, params, op);
}

/* A configuration of an sm_90a kernel that walks one sequence in tiles of bm rows (the q / dO
 * box) and the other bn rows at a time (the k / v box): its kernel, threads and shared memory.
 * launch_config runs it over the bm-row tiles of Sq and the heads of q. */
typedef struct { kiln_kernel_id kernel; uint32_t bm, bn; unsigned threads, smem; } config;
static kiln_status launch_config(const kiln_context *ctx, const char *op, const kiln_attn_args *a, config c,
                                 bool backward, bool dependent, CUstream stream) {
  return launch_wgmma(ctx, op, a, c.kernel, (unsigned)((a->sq + c.bm - 1) / c.bm), (unsigned)a->hq, c.threads, c.smem,
                      c.bm, c.bn, backward, dependent, stream);
}

/* opts.tile_m 192 asks for the wide configurations (the forward's and the backward's dQ kernel,
 * `what`), which exist for head dims padded to 64 only. */
static kiln_status check_tile_m(const char *op, const kiln_attn_args *a, int tile_m, const char *what) {
  if (tile_m == 192 && padded_dim(a->d) != 64)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: opts->tile_m is 192 but D is %d; the wide sm_90a %s takes head dims <= 64; use tile_m 0 or "
                     "128",
                     op, a->d, what);
  return KILN_OK;
}

/* The kernel family that runs a problem (the sm_90a forward has three configurations: FLASH's,
 * its wide D = 64 one (wide_wins) and SMEM's short-sequence one (short_wins)). */
typedef enum family { FAMILY_WGMMA, FAMILY_MMA_SYNC, FAMILY_SIMT, FAMILY_DECODE } family;

/* ---- the split-KV decode forward (kernels/attention_decode_sm90.cu) ------------------------- */
/* Packed rows of a K/V head: its Hq / Hkv query heads times Sq, in tiles of DEC_ROWS. */
static int64_t decode_packed(const kiln_attn_args *a) { return (int64_t)(a->hq / a->hkv) * a->sq; }
static int64_t decode_tiles(const kiln_attn_args *a) {
  return (decode_packed(a) + KILN_ATTN_DEC_ROWS - 1) / KILN_ATTN_DEC_ROWS;
}
/* What the decode kernel needs beyond the tensor-core conditions, or NULL. */
static const char *decode_misfit(const kiln_context *ctx, const kiln_attn_args *a) {
  if (ctx->arch != 90) return "it needs an sm_90 GPU (Hopper: H100, H200) for its clusters";
  if (decode_tiles(a) * KILN_ATTN_DEC_MAX_CLUSTER > (int64_t)INT32_MAX)
    return "its grid has a block per 16 rows of (query heads of a group) x Sq, at most 2^28 of them";
  return NULL;
}
/* AUTO's and FLASH's choice of the decode kernel, from same-call H200 times against FLASH_WGMMA
 * (docs/performance.md, "kiln_attention FLASH_DECODE"): where a K/V head's packed rows fit one
 * tile and there are at least 1024 keys, GQA (4:1, 8:1) ran 1.7-5.7x faster at Sk 1024-32768,
 * Sq 1 and 4, B 1-32; MHA 1.2-1.4x while B·Hq blocks left SMs idle (B 1, 32 heads) and 0.97x
 * once they did not (B 8); MHA with 16 queries against 512 keys ran 0.40x. Tuning parameters
 * (KILN_TUNE_DEFS). */
#ifndef KILN_ATTN_DEC_MAX_ROWS
#define KILN_ATTN_DEC_MAX_ROWS 16
#endif
#ifndef KILN_ATTN_DEC_MIN_SK
#define KILN_ATTN_DEC_MIN_SK 1024
#endif
static bool decode_wins(const kiln_context *ctx, const kiln_attn_args *a) {
  const bool gqa = a->hq > a->hkv, idle_sms = (int64_t)a->batch * a->hq < ctx->info.sm_count;
  return !decode_misfit(ctx, a) && decode_packed(a) <= KILN_ATTN_DEC_MAX_ROWS && a->sk >= KILN_ATTN_DEC_MIN_SK &&
         (gqa || idle_sms);
}
/* Blocks per cluster: enough to fill two blocks per SM (the kernel's loads need that many in
 * flight), at most what the device fits (ctx->dec_max_cluster, from the occupancy query at
 * context creation) and the key blocks of a tile. */
static unsigned decode_cluster(const kiln_context *ctx, const kiln_attn_args *a) {
  const int64_t blocks = decode_tiles(a) * a->hkv * a->batch, want = 2 * (int64_t)ctx->info.sm_count;
  const int64_t key_blocks = (a->sk + KILN_ATTN_DEC_BC - 1) / KILN_ATTN_DEC_BC;
  int64_t cs = (want + blocks - 1) / blocks;
  if (cs > ctx->dec_max_cluster) cs = ctx->dec_max_cluster;
  if (cs > key_blocks) cs = key_blocks;
  return cs < 1 ? 1 : (unsigned)cs;
}

/* AUTO's choice between the sm_90a forward's two configurations, from same-call H200
 * measurements with the staged epilogue (docs/performance.md, "Attention results through shared
 * memory"):
 * at D = 64 the short-sequence one (two blocks per SM) ran 5-9 % faster up to Sk = 512 and 5-7 %
 * faster causal up to 1024 (2 % slower at 1024, 4-6 % slower at 2048); at D = 128 its ring is
 * smaller (2 x 64 keys against 3 x 128) and it won only causal at Sk = 128 (10 %; even at 256,
 * 1-21 % slower beyond). */
static bool short_wins(const kiln_attn_args *a) {
  if (padded_dim(a->d) == 64) return a->sk <= 512 || (a->causal && a->sk <= 1024);
  return padded_dim(a->d) == 128 && a->causal && a->sk <= 128;
}

/* FLASH's choice between its two sm_90a configurations at D = 64 (AUTO's too, after short_wins):
 * the wide one (three consumer warpgroups, 192-row tiles) or the ping-pong one (two, 128 rows).
 * Same-call H200 forward times, wide / ping-pong (docs/performance.md, "The wide D = 64
 * forward"): not causal 1.00-1.03 at Sk = 1024, 0.89-0.97 at 2048, 0.92 at 4096, 0.89-0.92 at
 * 8192. Causal, since each wide warpgroup walks only the key blocks its own rows see
 * ("Per-warpgroup key ranges", same-call H100 times): 0.95-0.97 at 1024 (where short_wins
 * takes it), 0.92-0.94 at 2048, 0.91-0.96 at 4096 (before: 1.01-1.06 at 2048 and 4096, 0.90-0.92
 * at 8192). So one threshold serves both, causal or not. Tuning parameter (KILN_TUNE_DEFS). */
#ifndef KILN_ATTN_WD_MIN_SK
#define KILN_ATTN_WD_MIN_SK 2048
#endif
static bool wide_wins(const kiln_attn_args *a) { return padded_dim(a->d) == 64 && a->sk >= KILN_ATTN_WD_MIN_SK; }

/* Shared memory the sm_80 tensor-core kernels take at padded head dim dp: the forward's, or the
 * larger of the backward's two. sm_86 and sm_89 grant a block 99 KB, less than the backward's dQ
 * kernel at D = 128 (102 KB) and both its kernels at D = 256 (132 KB); sm_80 and sm_90 grant
 * 163 and 227 KB. */
static size_t mma_sync_smem(int dp, bool backward) {
  if (!backward) return (size_t)KILN_ATTN_SMEM_BYTES(dp);
  const size_t kv = (size_t)KILN_ATTN_BWD_KV_SMEM_BYTES(dp), q = (size_t)KILN_ATTN_BWD_Q_SMEM_BYTES(dp);
  return kv > q ? kv : q;
}

/* The family for the forward or the backward. FLASH and AUTO: WGMMA where it fits, else MMA_SYNC
 * where the tensor cores can take the problem and the device holds its shared memory, else the
 * CUDA-core kernels; the explicit FLASH_WGMMA, FLASH_MMA_SYNC and SMEM (WGMMA's short-sequence
 * forward) run their family or say why not. */
static kiln_status choose(const kiln_context *ctx, const char *op, const kiln_attn_args *a, int algo, bool backward,
                          family *f) {
  kiln_status st = check_grid(op, a);
  if (st) return st;
  const bool decode = algo == KILN_ATTENTION_FLASH_DECODE;
  const bool wgmma = algo == KILN_ATTENTION_FLASH_WGMMA || algo == KILN_ATTENTION_SMEM;
  bool named = algo == KILN_ATTENTION_FLASH_MMA_SYNC || wgmma || decode;
  const char *name = algo == KILN_ATTENTION_FLASH_MMA_SYNC ? "FLASH_MMA_SYNC"
                     : algo == KILN_ATTENTION_SMEM         ? "SMEM"
                     : decode                              ? "FLASH_DECODE"
                                                           : "FLASH_WGMMA";
  if ((st = check_tensor_cores(op, a, name, named))) {
    if (named) return st;
    *f = FAMILY_SIMT;
    return KILN_OK;
  }
  if (decode) {
    const char *why = decode_misfit(ctx, a);
    if (why)
      return kiln_fail(KILN_ERROR_UNSUPPORTED,
                       "%s: algo FLASH_DECODE cannot run this problem: %s (%s is sm_%d; %d query heads per K/V "
                       "head, Sq %d); use KILN_ATTENTION_AUTO or _FLASH, which pick the kernel",
                       op, why, ctx->info.name, ctx->arch, a->hq / a->hkv, a->sq);
    if (!backward) {
      *f = FAMILY_DECODE;
      return KILN_OK;
    }
    algo = KILN_ATTENTION_FLASH, named = false; /* the backward of FLASH_DECODE is FLASH's */
  } else if (!backward && (algo == KILN_ATTENTION_AUTO || algo == KILN_ATTENTION_FLASH) && decode_wins(ctx, a)) {
    *f = FAMILY_DECODE;
    return KILN_OK;
  }
  const char *over128 = algo == KILN_ATTENTION_SMEM && !backward ? "it takes head dims up to 128" : NULL;
  const char *misfit = algo == KILN_ATTENTION_FLASH_MMA_SYNC ? "" : wgmma_misfit(ctx, a, over128);
  if (wgmma && misfit)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: algo %s cannot run this problem: %s (%s is sm_%d, D is %d); use "
                     "KILN_ATTENTION_AUTO or _FLASH, which pick the kernel, or _FLASH_MMA_SYNC",
                     op, name, misfit, ctx->info.name, ctx->arch, a->d);
  if (!misfit) {
    *f = FAMILY_WGMMA;
    return KILN_OK;
  }
  const size_t smem = mma_sync_smem(padded_dim(a->d), backward);
  if (smem > ctx->info.smem_per_block_optin) {
    if (named) {
      char fix[128];
      snprintf(fix, sizeof fix, "use KILN_ATTENTION_AUTO or _FLASH, which take the CUDA-core kernels at D = %d",
               a->d);
      return kiln_smem_refusal(ctx, op, backward ? "algo FLASH_MMA_SYNC (backward)" : "algo FLASH_MMA_SYNC", smem,
                               fix);
    }
    *f = FAMILY_SIMT;
    return KILN_OK;
  }
  *f = FAMILY_MMA_SYNC;
  return KILN_OK;
}

kiln_status kiln_attention_gpu_forward(const kiln_context *ctx, const char *op, const kiln_attn_args *a, int algo,
                                       int tile_m, CUstream stream) {
  family f = FAMILY_SIMT;
  kiln_status st = choose(ctx, op, a, algo, false, &f);
  if (st) return st;
  if (f == FAMILY_SIMT) return launch_simt(ctx, op, a, KILN_K_ATTN_SIMT_FWD_R32, stream);
  const int dp = padded_dim(a->d);
  if (f == FAMILY_DECODE) { /* tile_m is 0: only FLASH_WGMMA takes another (attention.c) */
    const unsigned cs = decode_cluster(ctx, a);
    kiln_attn_args args = *a;
    void *params[] = {&args};
    return kiln_launch_cluster(ctx, family_kernel(KILN_K_ATTN_FWD_DEC_f16_D64, KILN_K_ATTN_FWD_DEC_bf16_D64, a),
                               (unsigned)decode_tiles(a) * cs, (unsigned)a->hkv, (unsigned)a->batch, cs,
                               KILN_ATTN_DEC_THREADS, (unsigned)KILN_ATTN_DEC_SMEM_BYTES(dp), stream, params, op);
  }
  if (f == FAMILY_WGMMA) {
    if ((st = check_tile_m(op, a, tile_m, "forward"))) return st;
    config c;
    if (algo == KILN_ATTENTION_SMEM || (algo == KILN_ATTENTION_AUTO && !tile_m && short_wins(a)))
      c = (config){family_kernel(KILN_K_ATTN_FWD_SH_f16_D64, KILN_K_ATTN_FWD_SH_bf16_D64, a), KILN_ATTN_SH_BM,
                   (uint32_t)KILN_ATTN_SH_BN(dp), KILN_ATTN_SH_THREADS, (unsigned)KILN_ATTN_SH_SMEM_BYTES(dp)};
    else if (tile_m == 192 || (!tile_m && wide_wins(a)))
      c = (config){a->in_dtype == KILN_DT_BF16 ? KILN_K_ATTN_FWD_WD_bf16_D64 : KILN_K_ATTN_FWD_WD_f16_D64,
                   KILN_ATTN_WD_BM, KILN_ATTN_WD_BN, KILN_ATTN_WD_THREADS, (unsigned)KILN_ATTN_WD_SMEM_BYTES};
    else
      c = (config){family_kernel(KILN_K_ATTN_FWD_WG_f16_D64, KILN_K_ATTN_FWD_WG_bf16_D64, a), KILN_ATTN_WG_BM,
                   KILN_ATTN_WG_BN(dp), KILN_ATTN_WG_THREADS, (unsigned)KILN_ATTN_WG_SMEM_BYTES(dp)};
    return launch_config(ctx, op, a, c, false, false, stream);
  }
  const kiln_kernel_id kernel = family_kernel(KILN_K_ATTN_FWD_f16_D64, KILN_K_ATTN_FWD_bf16_D64, a);
  kiln_attn_args args = *a;
  void *params[] = {&args};
  const unsigned tiles = (unsigned)((a->sq + KILN_ATTN_BR(dp) - 1) / KILN_ATTN_BR(dp));
  return kiln_launch(ctx, kernel, tiles, (unsigned)a->hq, (unsigned)a->batch, KILN_ATTN_THREADS,
                     (unsigned)KILN_ATTN_SMEM_BYTES(dp), stream, params, op);
}

/* The backward's workspace: delta (f32 per query row), then, when the MMA kernels cannot read dO
 * as given (another dtype than Q, a strided head dimension, unaligned rows, or rows repeated with
 * stride 0, which TMA cannot address), a compact copy of dO in Q's dtype written by the delta
 * kernel. */
static bool dout_needs_copy(const kiln_attn_args *a) {
  return a->do_dtype != a->in_dtype || a->do_ds != 1 || !aligned16(a->dout, a->do_bs, a->do_hs, a->do_ss) ||
         !strided(a->sq, a->do_ss) || !strided(a->hq, a->do_hs) || !strided(a->batch, a->do_bs);
}
static size_t delta_bytes(const kiln_attn_args *a) {
  return ((size_t)a->batch * (size_t)a->hq * (size_t)a->sq * 4 + 255) / 256 * 256;
}

/* The CUDA-core kernels read dO as given; the tensor-core ones take a copy when they cannot. */
static bool copies_dout(const kiln_attn_args *a) {
  return check_tensor_cores("", a, "", false) == KILN_OK && dout_needs_copy(a);
}

/* The fused backward (kiln_abi.h KILN_ATTN_BWD_FUSED, head dims padded to 64 or 128): dK, dV and dQ
 * in one sm_90a kernel, dQ summed in an f32 accumulator in the workspace by L2 reductions whose
 * order varies from run to run. So only where the caller allows that (opts.deterministic 0) and
 * leaves the dQ kernel's configuration to kiln (tile_m 0), and only when dQ and dK or dV are asked
 * for (alone, the two-kernel path's kernel for them does less): fused_wanted, beside the backward's
 * family FAMILY_WGMMA, which the call has from choose() and the size query tests as choose() does
 * for a backward (fused_bwd), so that the two agree. */
static bool fused_wanted(const kiln_attn_args *a, int tile_m, int deterministic) {
  return KILN_ATTN_BWD_FUSED && !deterministic && tile_m == 0 && a->dq && (a->dk || a->dv) &&
         (padded_dim(a->d) == 64 || (padded_dim(a->d) == 128 && KILN_ATTN_BWD_FUSED_D128));
}
static bool fused_bwd(const kiln_context *ctx, const kiln_attn_args *a, int algo, int tile_m, int deterministic) {
  return fused_wanted(a, tile_m, deterministic) && algo != KILN_ATTENTION_FLASH_MMA_SYNC &&
         check_tensor_cores("", a, "", false) == KILN_OK && !wgmma_misfit(ctx, a, NULL);
}

/* Workspace: delta, then the dO copy, then the fused backward's dQ accumulator (256-aligned). */
static size_t dout_copy_bytes(const kiln_attn_args *a, bool copies) {
  return copies ? ((size_t)a->batch * (size_t)a->hq * (size_t)a->sq * (size_t)a->dv_dim * 2 + 255) / 256 * 256 : 0;
}
static unsigned dq_acc_blocks(const kiln_attn_args *a) { /* per head */
  const int rows = KILN_ATTN_DQ_ACC_ROWS(KILN_ATTN_DQ_ACC_DP(a->d));
  return (unsigned)((a->sq + rows - 1) / rows);
}
static size_t dq_acc_bytes(const kiln_attn_args *a) {
  const size_t blocks = dq_acc_blocks(a);
  return (size_t)a->batch * (size_t)a->hq * blocks * KILN_ATTN_DQ_ACC_BLOCK * 4;
}

size_t kiln_attention_gpu_workspace(const kiln_context *ctx, const kiln_attn_args *a, int algo, int tile_m,
                                    int deterministic) {
  return delta_bytes(a) + dout_copy_bytes(a, copies_dout(a)) + (fused_bwd(ctx, a, algo, tile_m, deterministic) ? dq_acc_bytes(a) : 0);
}

/* The sm_90a dQ kernel as a programmatic dependent of the dK/dV kernel (1; 0: after it ends).
 * Both grids hold 31 waves and a few blocks at S = 2048 - 8192 (4096 blocks of one per SM on 132
 * SMs), so each ends with ~128 idle SMs for one block's lifetime; dependent, dQ's first blocks
 * fill the dK/dV tail. dQ reads nothing dK/dV writes (Q, K, V, dO, LSE and delta, all written
 * before dK/dV started), so it starts without waiting and waits for dK/dV only before it ends. */
#ifndef KILN_ATTN_BWD_PDL
#define KILN_ATTN_BWD_PDL 1
#endif

/* The backward's choice between its two sm_90a dQ configurations at D = 64 (opts.tile_m 0): the
 * wide one (three consumer warpgroups, 192 query rows a block, 64 keys a step) or the 128-row
 * one. H100, same calls, forward + backward time with the wide dQ / without (docs/performance.md,
 * "The D = 64 dQ kernel with three consumer warpgroups"): 0.94-0.99 without a mask at Sq = 2048
 * and 8192, 0.97-1.02 causal; at Sq = 256, whose second 192-row tile is two thirds padding,
 * 1.07-1.09; at 512 and 1024 (an eighth of the rows padding) 0.99-1.03. So from 2048 query rows,
 * and (not measured) where the 128-row grid fills the SMs at least once: with fewer blocks than
 * SMs a block's time is the whole time, and a wide block has 1.5x the rows. Tuning parameter
 * (KILN_TUNE_DEFS). */
#ifndef KILN_ATTN_WD_DQ_MIN_SQ
#define KILN_ATTN_WD_DQ_MIN_SQ 2048
#endif
static bool dq_wide_wins(const kiln_context *ctx, const kiln_attn_args *a) {
  const int64_t blocks = ((int64_t)a->sq + KILN_ATTN_WG_BM - 1) / KILN_ATTN_WG_BM * a->hq * a->batch;
  return padded_dim(a->d) == 64 && a->sq >= KILN_ATTN_WD_DQ_MIN_SQ && blocks >= ctx->info.sm_count;
}

/* delta (and the dO copy), then dK/dV, then dQ: three launches on the caller's stream, from the
 * kernel family the forward would choose; or delta (zeroing the dQ accumulator), the fused kernel
 * and dQ's conversion (fused_bwd). */
kiln_status kiln_attention_gpu_backward(const kiln_context *ctx, const char *op, const kiln_attn_args *a, int algo,
                                        int tile_m, int deterministic, void *workspace, CUstream stream) {
  family f = FAMILY_SIMT;
  kiln_status st = choose(ctx, op, a, algo, true, &f);
  if (st) return st;
  const int64_t rows = (int64_t)a->batch * a->hq * a->sq;
  if (rows > (int64_t)INT32_MAX)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: batch x heads x Sq is %" PRId64 " query rows; the GPU backward takes at most %d; split the "
                     "batch",
                     op, rows, INT32_MAX);
  const int dp = padded_dim(a->d);
  if (f == FAMILY_WGMMA && (st = check_tile_m(op, a, tile_m, "dQ kernel"))) return st; /* before any launch */
  kiln_attn_args args = *a;
  void *params[] = {&args};
  args.delta = (float *)workspace;
  const bool copies = copies_dout(a), fused = f == FAMILY_WGMMA && fused_wanted(a, tile_m, deterministic);
  args.do_copy = copies ? (char *)workspace + delta_bytes(a) : NULL;
  args.dq_acc = fused ? (float *)((char *)workspace + delta_bytes(a) + dout_copy_bytes(a, copies)) : NULL;
  if ((st = kiln_launch(ctx, KILN_K_ATTN_BWD_DELTA, (unsigned)((a->sq + KILN_ATTN_DELTA_ROWS - 1) / KILN_ATTN_DELTA_ROWS),
                        (unsigned)a->hq, (unsigned)a->batch, KILN_ATTN_THREADS, 0, stream, params, op)))
    return st;
  if (args.do_copy) { /* the MMA kernels read the compact copy */
    args.dout = args.do_copy;
    args.do_dtype = args.in_dtype;
    args.do_ds = 1;
    args.do_ss = args.dv_dim;
    args.do_hs = (int64_t)args.sq * args.dv_dim;
    args.do_bs = (int64_t)args.hq * args.sq * args.dv_dim;
  }
  if (f == FAMILY_SIMT) {
    if ((a->dk || a->dv) && (st = launch_simt(ctx, op, &args, KILN_K_ATTN_SIMT_DKDV_R32, stream))) return st;
    return a->dq ? launch_simt(ctx, op, &args, KILN_K_ATTN_SIMT_DQ_R32, stream) : KILN_OK;
  }
  if (fused) {
    if ((st = launch_wgmma(ctx, op, &args,
                           family_kernel(KILN_K_ATTN_BWD_FUSED_f16_D64, KILN_K_ATTN_BWD_FUSED_bf16_D64, a),
                           (unsigned)((a->sk + KILN_ATTN_WG_KV_BN(dp) - 1) / KILN_ATTN_WG_KV_BN(dp)), (unsigned)a->hkv,
                           KILN_ATTN_WG_THREADS, (unsigned)KILN_ATTN_WG_KVQ_SMEM_BYTES(dp), KILN_ATTN_WG_KV_BM(dp),
                           KILN_ATTN_WG_KV_BN(dp), true, false, stream)))
      return st;
    return kiln_launch(ctx, KILN_K_ATTN_BWD_DQ_CONVERT, dq_acc_blocks(a), (unsigned)a->hq, (unsigned)a->batch, 256, 0,
                       stream, params, op);
  }
  if (f == FAMILY_WGMMA) { /* the sm_90a kernels (TMA maps of the dO they read) */
    if ((a->dk || a->dv) &&
        (st = launch_wgmma(ctx, op, &args,
                           family_kernel(KILN_K_ATTN_BWD_DKDV_WG_f16_D64, KILN_K_ATTN_BWD_DKDV_WG_bf16_D64, a),
                           (unsigned)((a->sk + KILN_ATTN_WG_KV_BN(dp) - 1) / KILN_ATTN_WG_KV_BN(dp)), (unsigned)a->hkv,
                           KILN_ATTN_WG_THREADS, (unsigned)KILN_ATTN_WG_KV_SMEM_BYTES(dp), KILN_ATTN_WG_KV_BM(dp),
                           KILN_ATTN_WG_KV_BN(dp), true, false, stream)))
      return st;
    if (!a->dq) return KILN_OK;
    const config c =
        tile_m == 192 || (!tile_m && dq_wide_wins(ctx, a))
            ? (config){a->in_dtype == KILN_DT_BF16 ? KILN_K_ATTN_BWD_DQ_WD_bf16_D64 : KILN_K_ATTN_BWD_DQ_WD_f16_D64,
                       KILN_ATTN_WD_DQ_BM, KILN_ATTN_WD_DQ_BN, KILN_ATTN_WD_THREADS,
                       (unsigned)KILN_ATTN_WD_DQ_SMEM_BYTES}
            : (config){family_kernel(KILN_K_ATTN_BWD_DQ_WG_f16_D64, KILN_K_ATTN_BWD_DQ_WG_bf16_D64, a), KILN_ATTN_WG_BM,
                       (uint32_t)KILN_ATTN_WG_DQ_BN(dp), KILN_ATTN_WG_THREADS, (unsigned)KILN_ATTN_WG_DQ_SMEM_BYTES(dp)};
    return launch_config(ctx, op, &args, c, true, KILN_ATTN_BWD_PDL && (a->dk || a->dv), stream);
  }
  if (a->dk || a->dv) {
    const unsigned tiles = (unsigned)((a->sk + KILN_ATTN_BWD_KV_BN - 1) / KILN_ATTN_BWD_KV_BN);
    const unsigned splits = (unsigned)(dp / KILN_ATTN_BWD_KV_DO(dp));
    const kiln_kernel_id kernel = family_kernel(KILN_K_ATTN_BWD_DKDV_f16_D64, KILN_K_ATTN_BWD_DKDV_bf16_D64, a);
    if ((st = kiln_launch(ctx, kernel, tiles, (unsigned)a->hkv * splits, (unsigned)a->batch, KILN_ATTN_THREADS,
                          (unsigned)KILN_ATTN_BWD_KV_SMEM_BYTES(dp), stream, params, op)))
      return st;
  }
  if (a->dq) {
    const unsigned tiles = (unsigned)((a->sq + KILN_ATTN_BWD_Q_BM - 1) / KILN_ATTN_BWD_Q_BM);
    const kiln_kernel_id kernel = family_kernel(KILN_K_ATTN_BWD_DQ_f16_D64, KILN_K_ATTN_BWD_DQ_bf16_D64, a);
    if ((st = kiln_launch(ctx, kernel, tiles, (unsigned)a->hq, (unsigned)a->batch, KILN_ATTN_THREADS,
                          (unsigned)KILN_ATTN_BWD_Q_SMEM_BYTES(dp), stream, params, op)))
      return st;
  }
  return KILN_OK;
}
