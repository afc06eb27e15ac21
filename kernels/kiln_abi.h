/*
 * kiln_abi.h — the argument structs that host code (C17) passes to the kernels (CUDA C) by value.
 * Plain fixed-width fields only, so both compilers lay them out identically.
 */
#ifndef KILN_ABI_H
#define KILN_ABI_H

#include <stdint.h>

/* Element dtypes as the kernels see them. */
enum { KILN_DT_F32 = 0, KILN_DT_F16 = 1, KILN_DT_BF16 = 2 };

/* Stream-K for the WGMMA GEMMs (kernels/gemm_sm90.cuh, Walk): the last `items` work items of
 * the persistent walk are not dealt out whole but as one even run of K slices per block (the
 * grid's blocks cover items x nk slices together, so no block idles in a last, partial wave).
 * A block whose run ends inside a tile leaves its accumulators for that tile in its slot of
 * `partials` (grid x consumer warpgroups x 64 x BN values of 4 bytes, in the accumulators'
 * fragment order) and then sets its warpgroup's flag to `epoch`; the block that holds the tile's
 * last slice adds those partials, in a fixed order, and stores C. The epoch (a new 64-bit value
 * per launch, never 0) makes flags left by earlier launches stale without a reset. items 0: no
 * stream-K, and the pointers are unused. */
typedef struct kiln_stream_k {
  void *partials;
  uint64_t *flags;
  uint64_t epoch;
  int32_t items;
  int32_t tile_n; /* BN, which sizes a slot (the kernels have it built in; for checkers) */
} kiln_stream_k;

/* C[b] = alpha · A[b]·B[b] + beta · C[b] for b < batch, with A [m,k], B [k,n], C [m,n].
 * Element (i, j) of a matrix X of batch b lives at X + b·x_bs + i·x_rs + j·x_cs (strides in
 * elements; a batch stride of 0 broadcasts). The kernel variant fixes which stride is 1:
 * A is "k-major" when a_cs == 1 and "m-major" when a_rs == 1; B is "k-major" when b_rs == 1
 * and "n-major" when b_cs == 1. C is always written with c_cs == 1: the host turns a
 * column-major C into Cᵀ = Bᵀ·Aᵀ. beta == 0 never reads C. */
typedef struct kiln_gemm_args {
  const void *a;
  const void *b;
  void *c;
  int64_t a_bs, a_rs, a_cs;
  int64_t b_bs, b_rs, b_cs;
  int64_t c_bs, c_rs;
  int32_t m, n, k, batch;
  float alpha, beta;
  int32_t c_dtype; /* KILN_DT_* */
  int32_t group_m; /* tiles along m in one band of the L2-friendly tile order */
  int32_t c_staged; /* WGMMA: C leaves through shared memory by TMA stores (its map is valid) */
  kiln_stream_k sk;  /* WGMMA: the stream-K part of the walk (items 0: none) */
} kiln_gemm_args;
#ifndef KILN_GEMM_GROUP_M /* kiln_gemm_args.group_m of kiln_matmul (tuning: scripts/gemm-ladder.sh) */
#define KILN_GEMM_GROUP_M 8
#endif

/* Tile geometry of the sm_80 GEMM kernels (kernels/gemm_sm80.cu); the host sizes shared memory
 * with KILN_GEMM_SMEM_BYTES. A block computes a BM x BN tile of C with 8 warps (2 along M x 4
 * along N), stepping through K in BK slices. Shared-memory rows are padded by KILN_GEMM_PAD
 * elements (16 bytes) so that ldmatrix's eight 16-byte row reads hit eight different bank groups.
 *   MMA_SYNC: 128 x 256 x 32 (warp 64 x 64), register-staged, 1 block per SM: 260 TFLOP/s at
 *             4096^3 on the H200 against 213 for 128 x 128 at 2 blocks per SM, whose 128-register
 *             cap spilled (ladder rung v4, docs/performance.md).
 *   CP_ASYNC: 128 x 256 x 64 (warp 64 x 64), 1 block per SM: BK = 64 halves the per-slice
 *             barrier and address work.
 * Both feed a ring of stages completed through mbarriers (rungs v10, v11; gemm_sm80.cuh's
 * gemm_block): warps wait for the slice they read, not for each other at every slice. */
#define KILN_GEMM_PAD 8
#define KILN_GEMM_THREADS 256
#ifndef KILN_GEMM_MMA_BM /* overridable for tuning experiments (scripts/gemm-ladder.sh) */
#define KILN_GEMM_MMA_BM 128
#endif
#ifndef KILN_GEMM_MMA_BN
#define KILN_GEMM_MMA_BN 256
#endif
#ifndef KILN_GEMM_MMA_BK
#define KILN_GEMM_MMA_BK 32
#endif
#ifndef KILN_GEMM_MMA_BLOCKS_PER_SM
#define KILN_GEMM_MMA_BLOCKS_PER_SM 1
#endif
#ifndef KILN_GEMM_CPA_BM
#define KILN_GEMM_CPA_BM 128
#endif
#ifndef KILN_GEMM_CPA_BN
#define KILN_GEMM_CPA_BN 256
#endif
#ifndef KILN_GEMM_CPA_BK
#define KILN_GEMM_CPA_BK 64
#endif
/* Stages per device: the sm_90a image (run on sm_90, 227 KB of shared memory a block) takes the
 * _SM90 counts, the others (sm_80's image or its PTX, sm_89's) the plain ones, which fit sm_80
 * (163 KB: CP_ASYNC 3 x 51 KB) and sm_86 / sm_89 (99 KB: MMA_SYNC 3 x 27 KB; CP_ASYNC does not
 * fit there). sm_90's 4th stage is slack for warps drifting apart (KILN_GEMM_*_AHEAD below):
 * CP_ASYNC +3-6 % at 4096^3 and 8192^3 (H100, ladder rungs v10-s4, v12-cpa-ahead2). */
#ifndef KILN_GEMM_CPA_STAGES
#define KILN_GEMM_CPA_STAGES 3
#endif
#ifndef KILN_GEMM_CPA_STAGES_SM90
#define KILN_GEMM_CPA_STAGES_SM90 4
#endif
#ifndef KILN_GEMM_MMA_STAGES
#define KILN_GEMM_MMA_STAGES 3
#endif
#ifndef KILN_GEMM_MMA_STAGES_SM90
#define KILN_GEMM_MMA_STAGES_SM90 4
#endif
/* Slices a ring fetches ahead of the one its MMAs read (gemm_sm80.cuh's gemm_block); 0 means
 * STAGES - 1, the most in flight. The rest of the ring is slack for warps drifting apart.
 * CP_ASYNC: 2 (on sm_90's 4 stages, two of slack): 3 % faster at 4096^3 and 6 % at 8192^3 than
 * 3 ahead with one of slack, 7 % than 3 stages (H100, ladder rung v12-cpa-ahead2), so drift, not
 * depth, was what the 4th stage bought. MMA_SYNC: 3 ahead (1 ahead with 3 of slack, rung
 * v12-mma-ahead1, was 3-6 % slower). */
#ifndef KILN_GEMM_CPA_AHEAD
#define KILN_GEMM_CPA_AHEAD 2
#endif
#ifndef KILN_GEMM_MMA_AHEAD
#define KILN_GEMM_MMA_AHEAD 0
#endif
/* MMA_SYNC on sm_90 (rungs v18, v22; gemm_sm80.cuh, gemm_fill): the 16-bit kernels get a fourth
 * warpgroup of KILN_GEMM_MMA_WS_THREADS loaders, so their blocks have KILN_GEMM_MMA_THREADS(arch)
 * threads there; setmaxnreg splits the 168 registers a thread of 384 starts with into
 * KILN_GEMM_MMA_WS_FILL_REGS for the loaders (two slices of 48 in flight, 0 spills) and
 * KILN_GEMM_MMA_WS_MMA_REGS for the MMA warps (the 64 x 64 accumulator is 128; below 184 ptxas
 * rebuilds the ldmatrix addresses from %tid every slice, at 168 it spills).
 * KILN_GEMM_MMA_WS 0 builds the plain form everywhere (the ladder's baseline). */
#ifndef KILN_GEMM_MMA_WS
#define KILN_GEMM_MMA_WS 1
#endif
#define KILN_GEMM_MMA_WS_THREADS 128
#define KILN_GEMM_MMA_WS_FILL_REGS 136
#define KILN_GEMM_MMA_WS_MMA_REGS 184
#define KILN_GEMM_MMA_WS_ON(mma, arch) (KILN_GEMM_MMA_WS && (mma) && (arch) == 90)
#define KILN_GEMM_MMA_THREADS(arch) (KILN_GEMM_THREADS + (KILN_GEMM_MMA_WS_ON(1, arch) ? KILN_GEMM_MMA_WS_THREADS : 0))
/* arch: the device's compute capability as major * 10 + minor (kiln_context's arch; in a kernel,
 * KILN_IMAGE_ARCH). */
#define KILN_GEMM_STAGES(cpa, arch) \
  ((cpa) ? ((arch) == 90 ? KILN_GEMM_CPA_STAGES_SM90 : KILN_GEMM_CPA_STAGES) \
         : ((arch) == 90 ? KILN_GEMM_MMA_STAGES_SM90 : KILN_GEMM_MMA_STAGES))
/* Static shared memory of the sm_80 GEMMs beside their tiles: the ring's mbarriers, 2 x 8 bytes
 * a stage (up to 8 stages), before tiles aligned to 128 bytes. The fit checks count it. */
#define KILN_GEMM_RING_BYTES 128
#ifndef KILN_GEMM_CPA_BLOCKS_PER_SM
#define KILN_GEMM_CPA_BLOCKS_PER_SM 1
#endif

/* The sm_90a WGMMA kernels (kernels/gemm_sm90.cu): 128 x BN x 64 tiles with BN 256, 128 or 64
 * (chosen per problem), a producer warpgroup and two consumer warpgroups, a TMA ring of
 * 4 / 6 / 8 stages (48 / 32 / 24 KB each, ~192 KB in all) plus 1 KB of alignment slack and the
 * mbarriers. */
#define KILN_GEMM_WG_BM 128
#define KILN_GEMM_WG_BK 64
/* Tuning rung c-pieces (KILN_TUNE_DEFS): the 256-wide ring's depth and the staging pieces a
 * consumer warpgroup has for C; a tile's epilogue waits for all but the last PIECES of its 8 KB
 * pieces (f32 C: 8 of them) to drain. Defaults 4 and 2. */
#ifndef KILN_GEMM_WG_STAGES_256
#define KILN_GEMM_WG_STAGES_256 4
#endif
#ifndef KILN_GEMM_WG_C_PIECES
#define KILN_GEMM_WG_C_PIECES 2
#endif
#define KILN_GEMM_WG_STAGES(bn) ((bn) == 256 ? KILN_GEMM_WG_STAGES_256 : (bn) == 128 ? 6 : 8)
#define KILN_GEMM_WG_THREADS 384
/* the ring, 1 KB for alignment, 1 KB of barriers, then the epilogue's staging (gemm_sm90.cuh,
 * store_staged): KILN_GEMM_WG_C_PIECES 8 KB pieces a consumer warpgroup */
#define KILN_GEMM_WG_STAGE_C_BYTES (2 * KILN_GEMM_WG_C_PIECES * 8192)
#define KILN_GEMM_WG_SMEM_BYTES(bn) \
  (KILN_GEMM_WG_STAGES(bn) * (KILN_GEMM_WG_BM + (bn)) * KILN_GEMM_WG_BK * 2 + 1024 + 1024 + KILN_GEMM_WG_STAGE_C_BYTES)

/* WGMMA 2-CTA clusters sharing B by TMA multicast (gemm_sm90.cu, gemm_int8_sm90.cu): built and
 * used only with KILN_TUNE_DEFS="KILN_WGMMA_PAIRS=1" (ladder rungs w2 and pairs2), as they
 * measured 7 % slower than single CTAs at 4096^3 with direct stores (H200) and, staging C as
 * single CTAs do, 0.5 % slower for f16 and the same for int8 (H100; docs/performance.md). */
#ifndef KILN_WGMMA_PAIRS
#define KILN_WGMMA_PAIRS 0
#endif

/* Elements of one stage's A or B tile: a k-major operand is stored [MN][BK], an m/n-major one
 * [BK][MN], each row padded. */
#define KILN_GEMM_TILE_ELEMS(mn, bk, kmajor) ((kmajor) ? (mn) * ((bk) + KILN_GEMM_PAD) : (bk) * ((mn) + KILN_GEMM_PAD))
#define KILN_GEMM_SMEM_BYTES(stages, bm, bn, bk, a_kmajor, b_kmajor) \
  ((stages) * 2 * (KILN_GEMM_TILE_ELEMS(bm, bk, a_kmajor) + KILN_GEMM_TILE_ELEMS(bn, bk, b_kmajor)))

/* dst[i] = convert(src[i]) over a rank <= 4 index space, any strides (in elements). */
typedef struct kiln_cast_args {
  const void *src;
  void *dst;
  int64_t shape[4];
  int64_t src_strides[4];
  int64_t dst_strides[4];
  int64_t count;
  int32_t src_dtype, dst_dtype;
} kiln_cast_args;

/* W8A8 (kiln_matmul_int8): C[b] = float(A[b]·B[b] in int32) · scale · row_scale[i] ·
 * col_scale[j], multiplied in f32 in that order (kiln.h), with the element addressing of
 * kiln_gemm_args (A [m,k], B [k,n], int8) and general C strides (c_rs, c_cs). A kernel that
 * computes Cᵀ = Bᵀ·Aᵀ must still apply row_scale before col_scale to match the CPU bit for bit.
 * row_scale / col_scale: f32 vectors read at i·row_scale_stride and j·col_scale_stride, NULL
 * when absent. */
typedef struct kiln_int8_args {
  const int8_t *a;
  const int8_t *b;
  void *c;
  const float *row_scale, *col_scale;
  int64_t a_bs, a_rs, a_cs;
  int64_t b_bs, b_rs, b_cs;
  int64_t c_bs, c_rs, c_cs;
  int64_t row_scale_stride, col_scale_stride;
  int32_t m, n, k, batch;
  float scale;
  int32_t c_dtype; /* KILN_DT_* */
  /* Set by the GPU host code only (0 elsewhere): 1 when it computes a column-major C as
   * Cᵀ = Bᵀ·Aᵀ (operands, m/n and the scale vectors swapped, c_cs == 1), so that the kernel
   * multiplies by col_scale (the caller's row_scale) before row_scale. */
  int32_t transposed;
  int32_t c_staged; /* WGMMA: C leaves through shared memory by TMA stores (its map is valid) */
  kiln_stream_k sk;  /* WGMMA: the stream-K part of the walk (items 0: none) */
} kiln_int8_args;

/* Tiles of the int8 kernels (kernels/gemm_int8_sm80.cu): the f16 kernels' block (BM x BN, 8
 * warps of 64 x 64, int32 accumulators) with BK counted in bytes. Shared-memory tiles are
 * [MN][BK + 16] bytes whatever the operand's layout (m/n-major ones are transposed into it).
 *   mma (register-staged, every layout, any alignment): BK = 64, 2 stages, 60 KB.
 *   cpasync (A and B k-major, 16-byte aligned rows): BK = 128, 3 stages, 162 KB; the host
 *   uses mma on devices with less opt-in shared memory per block. */
#ifndef KILN_GEMM_I8_BM
#define KILN_GEMM_I8_BM 128
#endif
#ifndef KILN_GEMM_I8_BN
#define KILN_GEMM_I8_BN 256
#endif
#ifndef KILN_GEMM_I8_MMA_BK
#define KILN_GEMM_I8_MMA_BK 64
#endif
#ifndef KILN_GEMM_I8_CPA_BK
#define KILN_GEMM_I8_CPA_BK 128
#endif
#ifndef KILN_GEMM_I8_CPA_STAGES
#define KILN_GEMM_I8_CPA_STAGES 3
#endif
#define KILN_GEMM_I8_GROUP_M 8
#define KILN_GEMM_I8_SMEM_BYTES(stages, bk) ((stages) * (KILN_GEMM_I8_BM + KILN_GEMM_I8_BN) * ((bk) + 16))

/* Attention (kiln_attention): element (b, h, s, d) of X lives at X + b·x_bs + h·x_hs + s·x_ss +
 * d·x_ds (strides in elements). K and V heads are indexed by h / (hq / hkv). lse is f32 at
 * lse + b·lse_bs + h·lse_hs + s (NULL: not written). scale multiplies Q·Kᵀ (already resolved:
 * never 0). causal: query i sees key j iff j <= i + sk - sq. The backward adds dO (read like O)
 * and dQ/dK/dV (written like Q/K/V; NULL: skipped) in their own dtypes. */
typedef struct kiln_attn_args {
  const void *q, *k, *v;
  void *o;
  float *lse;
  const void *dout;
  void *dq, *dk, *dv;
  int64_t q_bs, q_hs, q_ss, q_ds;
  int64_t k_bs, k_hs, k_ss, k_ds;
  int64_t v_bs, v_hs, v_ss, v_ds;
  int64_t o_bs, o_hs, o_ss, o_ds;
  int64_t lse_bs, lse_hs;
  int64_t do_bs, do_hs, do_ss, do_ds;
  int64_t dq_bs, dq_hs, dq_ss, dq_ds;
  int64_t dk_bs, dk_hs, dk_ss, dk_ds;
  int64_t dv_bs, dv_hs, dv_ss, dv_ds;
  int32_t batch, hq, hkv, sq, sk, d, dv_dim;
  float scale;
  int32_t causal;
  int32_t in_dtype, o_dtype, do_dtype, dq_dtype, dk_dtype, dv_dtype; /* KILN_DT_* */
  /* GPU backward workspace (src/ops/attention_gpu.c): delta f32 [B·Hq·Sq], row (b, h, s) at
   * (b·hq + h)·sq + s, receives D_i = dO_i · O_i; do_copy, when not NULL, receives dO converted
   * to in_dtype, compact [B, Hq, Sq, D] (for a dO the MMA kernels cannot read as given).
   * dq_acc, when not NULL, is the fused backward's f32 dQ accumulator (KILN_ATTN_DQ_ACC_*): the
   * delta kernel zeroes it, the fused kernel adds into it, the convert kernel writes dQ from it. */
  float *delta;
  void *do_copy;
  float *dq_acc;
} kiln_attn_args;

/* The FLASH forward kernels (kernels/attention_sm80.cu): query tiles of BR rows (128 for head
 * dims padded to 64 or 128, 64 for 256) x BC keys per step (64 for 64, else 32), 4 warps;
 * shared memory holds the Q tile and two K and two V tiles of DP (64, 128 or 256) columns, rows
 * padded by KILN_GEMM_PAD. */
#define KILN_ATTN_BR(dp) ((dp) <= 128 ? 128 : 64)
#define KILN_ATTN_BC(dp) ((dp) <= 64 ? 64 : 32)
#define KILN_ATTN_THREADS 128
/* The backward's delta kernel (attention_bwd_sm80.cu): DELTA_LANES threads per query row, blocks
 * of KILN_ATTN_THREADS threads holding DELTA_ROWS rows of one head. */
#define KILN_ATTN_DELTA_LANES 8
#define KILN_ATTN_DELTA_ROWS (KILN_ATTN_THREADS / KILN_ATTN_DELTA_LANES)
#define KILN_ATTN_SMEM_BYTES(dp) ((KILN_ATTN_BR(dp) + 4 * KILN_ATTN_BC(dp)) * ((dp) + KILN_GEMM_PAD) * 2)

/* The sm_90a FLASH forward (kernels/attention_sm90.cu), head dims padded to 64, 128 or 256: 3
 * warpgroups (a TMA producer, two consumers of 64 query rows) own WG_BM = 128 query rows and walk
 * the keys in blocks of WG_BN(dp) through a ring of WG_STAGES(dp) K/V slots: 128 keys and 4 / 3
 * slots at D = 64 / 128; at D = 256 64 keys and 2 slots, since the 64 x 256 fp32 output
 * accumulator alone takes 128 of a consumer thread's 232 registers and the Q tile 64 KB of shared
 * memory. Shared memory: the Q tile, the ring, 1 KB of alignment slack and the mbarriers (145,
 * 225 and 193 KB). */
#ifndef KILN_ATTN_PINGPONG /* 0: the consumer warpgroups issue MMAs whenever ready (tuning experiments) */
#define KILN_ATTN_PINGPONG 1
#endif
#define KILN_ATTN_WG_BM 128
#define KILN_ATTN_WG_BN(dp) ((dp) <= 128 ? 128 : 64)
#define KILN_ATTN_WG_THREADS 384
#define KILN_ATTN_WG_STAGES(dp) ((dp) <= 64 ? 4 : (dp) <= 128 ? 3 : 2)
/* Shared memory of an sm_90a forward configuration: the Q tile of bm rows, a ring of `stages`
 * K and V slots of bn keys, 1 KB of alignment slack, the mbarriers (Q, and full / empty / P per slot). */
#define KILN_ATTN_FWD_SMEM_BYTES(bm, bn, stages, dp)                                                   \
  (((bm) + 2 * (stages) * (bn)) * (dp) * 2 + 1024 + (1 + 3 * (stages)) * 8)
#define KILN_ATTN_WG_SMEM_BYTES(dp) \
  KILN_ATTN_FWD_SMEM_BYTES(KILN_ATTN_WG_BM, KILN_ATTN_WG_BN(dp), KILN_ATTN_WG_STAGES(dp), dp)

/* The wide D = 64 forward (opts.tile_m = 192, and AUTO / FLASH where wide_wins in
 * attention_gpu.c): 4 warpgroups, three consumers of 64 query rows (WD_BM = 192), no ping-pong,
 * 160 registers per consumer thread, FLASH's ring. At D = 64 a key block's exponentials take
 * about as long as its matrix products (16 exp2 per clock per SM against 4096 FLOP), so two
 * warpgroups' softmax overlapping the third's products keeps the tensor cores busier than two
 * warpgroups taking turns (docs/performance.md, "The wide D = 64 forward"). */
#define KILN_ATTN_WD_BM 192
#define KILN_ATTN_WD_THREADS 512
/* Keys per ring slot and slots, tuning parameters (KILN_TUNE_DEFS): rungs wd-bn64 and wd-bn64s8
 * (scripts/attn-fwd-ladder.sh) take 64 keys, so that a causal 192-row tile's diagonal key blocks
 * hold fewer masked scores, at twice the steps (and 8 slots, the same bytes in flight). */
#ifndef KILN_ATTN_WD_BN
#define KILN_ATTN_WD_BN KILN_ATTN_WG_BN(64)
#endif
#ifndef KILN_ATTN_WD_STAGES
#define KILN_ATTN_WD_STAGES KILN_ATTN_WG_STAGES(64)
#endif
#define KILN_ATTN_WD_SMEM_BYTES KILN_ATTN_FWD_SMEM_BYTES(KILN_ATTN_WD_BM, KILN_ATTN_WD_BN, KILN_ATTN_WD_STAGES, 64)
/* 1: the wide forward's three consumer warpgroups take turns to issue their MMAs, in a ring
 * (FlashAttention-3's scheduler barriers for three warpgroups); 0: each issues whenever ready.
 * Rung wd-turns (scripts/attn-fwd-ladder.sh): 1-5 % faster in every D = 64 row measured
 * (docs/performance.md, "Rung wd-turns"). */
#ifndef KILN_ATTN_WD_TURNS
#define KILN_ATTN_WD_TURNS 1
#endif
/* The wide D = 64 forward runs a warpgroup's last key block at half width where its rows see only
 * that block's first half (attention_sm90.cu, HALF), and causal, puts its partial tile (Sq not a
 * multiple of 192) first, not last (pad). Rungs wd-half2 + wd-pad together: causal D = 64,
 * S = 2048 forward 1.6-2.5 % faster (nine runs each on an H100; docs/performance.md). */
#ifndef KILN_ATTN_WD_HALF
#define KILN_ATTN_WD_HALF 1
#endif
#ifndef KILN_ATTN_WD_PAD
#define KILN_ATTN_WD_PAD 1
#endif
/* The sm_90a forwards keep a row's running maximum until a key block's exceeds it by more than
 * KILN_ATTN_LAZY_RESCALE in log2 units (attention.cuh, softmax_step's LAZY: P <= 2^8), and skip
 * the output's rescale in warps where no row took a new maximum; 0: a new maximum and a rescale
 * every block. Rung lazy: forward 3-4 % faster at D = 64 causal S = 2048 (nine runs each on an
 * H100), 6-7 % at S = 8192 (docs/performance.md, "Rungs poly and lazy"). */
#ifndef KILN_ATTN_LAZY_RESCALE
#define KILN_ATTN_LAZY_RESCALE 8
#endif
/* The K and V bytes that the causal sm_90a dQ kernel's longest-first order keeps in flight at
 * once (attention_sm90.cuh, block_tile_lpt): a third of the H100's / H200's 50 MB L2. 0: each
 * head's tiles longest first, head after head, as the forward runs them (rung lpt,
 * docs/performance.md). */
#ifndef KILN_ATTN_LPT_L2_BYTES
#define KILN_ATTN_LPT_L2_BYTES (16 << 20)
#endif

/* The sm_90a short-sequence forward (algo SMEM; the same kernel as the FLASH forward, configured
 * for a few key blocks per query tile): 2 warpgroups (a TMA producer, one consumer of SH_BM = 64
 * query rows) and at most 113 KB of shared memory, so that two blocks share an SM and one's loads
 * and epilogue overlap the other's MMAs. Key blocks of SH_BN(dp) rows in a ring of SH_STAGES(dp):
 * 3 x 128 keys for D = 64 (105 KB), 2 x 64 for D = 128 (81 KB; 3 x 64 would pass the SM's 228 KB
 * for two blocks by 160 bytes). */
#define KILN_ATTN_SH_BM 64
#define KILN_ATTN_SH_BN(dp) ((dp) <= 64 ? 128 : 64)
#define KILN_ATTN_SH_THREADS 256
#define KILN_ATTN_SH_STAGES(dp) ((dp) <= 64 ? 3 : 2)
#define KILN_ATTN_SH_SMEM_BYTES(dp) \
  KILN_ATTN_FWD_SMEM_BYTES(KILN_ATTN_SH_BM, KILN_ATTN_SH_BN(dp), KILN_ATTN_SH_STAGES(dp), dp)

/* The split-KV decode forward (kernels/attention_decode_sm90.cu, algo FLASH_DECODE): a block of
 * DEC_THREADS (4 warps) owns one tile of DEC_ROWS = 16 packed query rows (the Hq / Hkv query heads
 * of a K/V head times Sq, one m16 MMA tile) and walks its share of the tile's key blocks of
 * DEC_BC = 64 keys (16 per warp) through a ring of DEC_STAGES K/V slots (STAGES - 1 blocks in
 * flight: the kernel is bound by the copies, so bytes in flight are what it needs); the
 * DEC_MAX_CLUSTER (portable cluster limit) blocks of a cluster split the keys and combine
 * through distributed shared memory. Shared memory: the Q tile and the ring's K and V blocks of
 * DP (64, 128, 256) columns, rows padded by KILN_GEMM_PAD (3 stages: 57.6, 108.8 and 211.2 kB, so
 * 3, 2 and 1 blocks per SM); after the key loop the same bytes hold each warp's partial state
 * (O [16][DP] f32, m and l [16]) and the combine's per-row weights. */
#define KILN_ATTN_DEC_ROWS 16
#define KILN_ATTN_DEC_BC 64
#define KILN_ATTN_DEC_THREADS 128
#ifndef KILN_ATTN_DEC_STAGES /* tuning parameters (KILN_TUNE_DEFS) */
#define KILN_ATTN_DEC_STAGES 3
#endif
#ifndef KILN_ATTN_DEC_MAX_CLUSTER
#define KILN_ATTN_DEC_MAX_CLUSTER 8
#endif
#define KILN_ATTN_DEC_SMEM_BYTES(dp) \
  ((KILN_ATTN_DEC_ROWS + 2 * KILN_ATTN_DEC_STAGES * KILN_ATTN_DEC_BC) * ((dp) + KILN_GEMM_PAD) * 2)

/* The sm_90a FLASH backward (kernels/attention_bwd_sm90.cu), head dims padded to 64, 128 or 256,
 * the forward's 3 warpgroups; shared memory: two fixed tiles, a ring of WG_BWD_STAGES slots of two
 * tiles, 1 KB of alignment slack, the mbarriers (and for dK/dV the staged LSE and delta).
 *   dK/dV: a block owns WG_KV_BN(dp) keys of one K/V head, K and V loaded once, and walks the
 *          queries of its GQA group WG_KV_BM(dp) at a time (Q, dO in the ring): 128 keys (64 per
 *          consumer) and 128 queries for D = 64 (twice the work per step's fixed costs), 128 keys
 *          and 64 queries for D = 128 (the dK and dV accumulators take 128 registers). At D = 256
 *          a 64-key dK or dV accumulator alone takes 128 registers, so the block owns 64 keys and
 *          its consumers split the products by role: one computes S and P and accumulates dV,
 *          the other dP and dS and accumulates dK, P passing between them through shared memory
 *          (WG_KV_XCH_BYTES: two buffers of the 64 x 64 tile's A fragments).
 *   dQ:    a block owns WG_BM = 128 query rows, Q and dO loaded once, and walks the keys
 *          WG_DQ_BN(dp) at a time (K, V in the ring): 128 for D = 64, 64 for D = 128 (registers),
 *          32 for D = 256 (Q and dO take 128 KB: two slots of 64 keys would pass 227 KB).
 *          Its wide D = 64 configuration (attention_gpu.c's dq_wide_wins) owns WD_DQ_BM = 192
 *          query rows with three consumer warpgroups (WD_THREADS, 160 registers a thread, as the
 *          wide forward) and walks the keys 64 at a time, whose S, dP, dQ and dS fit those
 *          registers: two warpgroups' exponentials and dS run under the third's products. */
#define KILN_ATTN_WG_KV_BN(dp) ((dp) <= 128 ? 128 : 64)
#ifndef KILN_ATTN_WG_KV_BM_D64 /* the #ifndef values can be overridden for tuning (KILN_TUNE_DEFS) */
#define KILN_ATTN_WG_KV_BM_D64 128
#endif
#define KILN_ATTN_WG_KV_BM(dp) ((dp) <= 64 ? KILN_ATTN_WG_KV_BM_D64 : 64)
#ifndef KILN_ATTN_WG_BWD_STAGES
#define KILN_ATTN_WG_BWD_STAGES 2
#endif
#ifndef KILN_ATTN_WG_DQ_BN_D128
#define KILN_ATTN_WG_DQ_BN_D128 64
#endif
#ifndef KILN_ATTN_WG_DQ_BN_D256
#define KILN_ATTN_WG_DQ_BN_D256 32
#endif
#define KILN_ATTN_WG_DQ_BN(dp) ((dp) <= 64 ? 128 : (dp) <= 128 ? KILN_ATTN_WG_DQ_BN_D128 : KILN_ATTN_WG_DQ_BN_D256)
#define KILN_ATTN_WD_DQ_BM 192
#define KILN_ATTN_WD_DQ_BN 64
/* The dQ kernel's ring slots: WG_BWD_STAGES, and at D = 256 (32-key slots) a tuning parameter
 * (KILN_TUNE_DEFS; 3 slots fit, 231.5 KB). */
#ifndef KILN_ATTN_WG_DQ_STAGES_D256
#define KILN_ATTN_WG_DQ_STAGES_D256 KILN_ATTN_WG_BWD_STAGES
#endif
#define KILN_ATTN_WG_DQ_STAGES(dp) ((dp) <= 128 ? KILN_ATTN_WG_BWD_STAGES : KILN_ATTN_WG_DQ_STAGES_D256)
#define KILN_ATTN_WG_BWD_SMEM_BYTES(fixed_rows, ring_rows, stages, dp)                                 \
  ((2 * (fixed_rows) + 2 * (stages) * (ring_rows)) * (dp) * 2 + 1024 + (1 + 3 * (stages)) * 8 +          \
   4 * KILN_ATTN_WG_KV_BM(dp) * 4)
#define KILN_ATTN_WG_KV_XCH_BYTES(dp) ((dp) > 128 ? 2 * 128 * KILN_ATTN_WG_KV_BM(dp) : 0)
#define KILN_ATTN_WG_KV_SMEM_BYTES(dp)                                                                 \
  (KILN_ATTN_WG_BWD_SMEM_BYTES(KILN_ATTN_WG_KV_BN(dp), KILN_ATTN_WG_KV_BM(dp), KILN_ATTN_WG_BWD_STAGES, dp) + \
   KILN_ATTN_WG_KV_XCH_BYTES(dp))
#define KILN_ATTN_WG_DQ_SMEM_BYTES(dp) \
  KILN_ATTN_WG_BWD_SMEM_BYTES(KILN_ATTN_WG_BM, KILN_ATTN_WG_DQ_BN(dp), KILN_ATTN_WG_DQ_STAGES(dp), dp)
#define KILN_ATTN_WD_DQ_SMEM_BYTES \
  KILN_ATTN_WG_BWD_SMEM_BYTES(KILN_ATTN_WD_DQ_BM, KILN_ATTN_WD_DQ_BN, KILN_ATTN_WG_BWD_STAGES, 64)
/* The fused backward at head dims padded to 64 and 128 (attention_bwd_sm90.cu, dkdv_sm90 with DQ;
 * non-deterministic): the dK/dV kernel's block (128 keys, WG_KV_BM(dp) query rows a step: 128 at
 * D = 64, 64 at D = 128) also computes each step's dQ share, dQ_step = dS·K over its 128 keys, and
 * adds it to an f32 accumulator in the workspace by one bulk reduction (cp.reduce.async.bulk) of
 * the whole block of DQ_ACC_BLOCK floats; S and dP are computed once, not again by a dQ kernel (5
 * products of the S² kind instead of 7). The accumulator, dq_acc, is [B·Hq][ceil(Sq / rows)]
 * [rows x dp] f32 with rows = DQ_ACC_ROWS(dp), each block in the consumers' fragment order: float4
 * k of thread t of consumer warpgroup w at ((w·8 + k)·128 + t)·4 holds its 64 x 64 accumulator's
 * fragment k (rows 16(t / 32) + (t % 32) / 4 (+8), columns 8k + 2(t % 4) (+1)), the warpgroups
 * splitting the block by rows at D = 64 (w's rows from 64w) and by columns at D = 128 (w's columns
 * from 64w), so that the consumers' stores into the staging tile are free of bank conflicts; the
 * convert kernel (kiln_attn_bwd_dq_convert, 256 threads a block) reads it in the same order.
 * Shared memory: the dK/dV kernel's, then (1024-aligned) the dSᵀ tile (128 keys x rows queries,
 * 16-bit, the A operand of dS·K read m-major) and the f32 staging tile of dQ. KILN_ATTN_BWD_FUSED
 * 1 takes it where attention_gpu.c's fused_bwd says (KILN_ATTN_BWD_FUSED_D128 0: not at D = 128);
 * 0, the default, keeps the two-kernel path everywhere: built and compiled without spills
 * (2026-12-08), not yet run on a GPU (docs/performance.md, "The fused backward"). A build with
 * KILN_TUNE_DEFS=KILN_ATTN_BWD_FUSED=1 runs it, and its tests follow the setting. */
#ifndef KILN_ATTN_BWD_FUSED
#define KILN_ATTN_BWD_FUSED 0
#endif
#ifndef KILN_ATTN_BWD_FUSED_D128
#define KILN_ATTN_BWD_FUSED_D128 1
#endif
#define KILN_ATTN_DQ_ACC_BLOCK 8192 /* floats: 128 x 64 or 64 x 128 */
#define KILN_ATTN_DQ_ACC_ROWS(dp) (KILN_ATTN_DQ_ACC_BLOCK / (dp))
#define KILN_ATTN_DQ_ACC_DP(d) ((d) <= 64 ? 64 : 128) /* the padded head dim of a fused call's D */
#define KILN_ATTN_WG_KVQ_SMEM_BYTES(dp) \
  (KILN_ATTN_WG_KV_SMEM_BYTES(dp) + 1024 + KILN_ATTN_WG_KV_BN(dp) * KILN_ATTN_WG_KV_BM(dp) * 2 + KILN_ATTN_DQ_ACC_BLOCK * 4)

/* The FLASH backward (kernels/attention_bwd_sm80.cu), 4 warps per block each:
 * dK/dV kernel: a block owns KV_BN = 64 keys (16 per warp) and KV_DO(dp) output columns (all of
 *   DP, or 128 of 256: D = 256 runs two blocks per key tile, each with its own half of dK and
 *   dV), stepping through the queries of every head of its GQA group KV_BM(dp) at a time;
 *   shared memory: K and V tiles, two Q and two dO tiles, two LSE and delta vectors.
 * dQ kernel: a block owns Q_BM = 64 query rows (16 per warp), stepping through keys Q_BN(dp) at a
 *   time; shared memory: the Q and dO tiles, two K and two V tiles.
 * delta kernel: one warp per query row. */
#define KILN_ATTN_BWD_KV_BN 64
#define KILN_ATTN_BWD_KV_BM(dp) ((dp) <= 64 ? 64 : 32)
#define KILN_ATTN_BWD_KV_DO(dp) ((dp) <= 128 ? (dp) : 128)
#define KILN_ATTN_BWD_KV_SMEM_BYTES(dp)                                                              \
  ((2 * KILN_ATTN_BWD_KV_BN + 4 * KILN_ATTN_BWD_KV_BM(dp)) * ((dp) + KILN_GEMM_PAD) * 2 +           \
   4 * KILN_ATTN_BWD_KV_BM(dp) * 4)
#define KILN_ATTN_BWD_Q_BM 64
#define KILN_ATTN_BWD_Q_BN(dp) ((dp) <= 128 ? 64 : 32)
#define KILN_ATTN_BWD_Q_SMEM_BYTES(dp) ((2 * KILN_ATTN_BWD_Q_BM + 4 * KILN_ATTN_BWD_Q_BN(dp)) * ((dp) + KILN_GEMM_PAD) * 2)

/* The CUDA-core attention kernels (kernels/attention_simt.cu): f32 arithmetic on any problem that
 * passes validation (f32 inputs, D != Dv, any D <= 256, any strides and alignment), 128 threads
 * per block. A block owns ROWS query rows (forward, dQ) or keys (dK/dV) and steps through the
 * other sequence ROWS at a time: 32, or 16 when D or Dv exceeds 128 so that shared memory stays
 * under the 99 KB an sm_89 block may have. Shared rows are f32 of odd pitch (D | 1: conflict-free
 * column walks); the score tiles have ROWS + 1. Forward: the Q tile, one K-then-V tile, P.
 * dK/dV: K, V, Q, dO tiles, Pᵀ and dSᵀ, the query rows' LSE and delta. dQ: Q, dO, K, V, dS. */
#define KILN_ATTN_SIMT_THREADS 128
#define KILN_ATTN_SIMT_ROWS(d, dv) ((d) > 128 || (dv) > 128 ? 16 : 32)
#define KILN_ATTN_SIMT_PITCH(d) ((d) | 1)
#define KILN_ATTN_SIMT_FWD_SMEM_BYTES(r, d, dv)                                                        \
  (4 * ((r) * KILN_ATTN_SIMT_PITCH(d) +                                                                \
        (r) * (KILN_ATTN_SIMT_PITCH(d) > KILN_ATTN_SIMT_PITCH(dv) ? KILN_ATTN_SIMT_PITCH(d)             \
                                                                  : KILN_ATTN_SIMT_PITCH(dv)) +         \
        (r) * ((r) + 1)))
#define KILN_ATTN_SIMT_DKDV_SMEM_BYTES(r, d, dv) \
  (4 * (2 * (r) * (KILN_ATTN_SIMT_PITCH(d) + KILN_ATTN_SIMT_PITCH(dv)) + 2 * (r) * ((r) + 1) + 2 * (r)))
#define KILN_ATTN_SIMT_DQ_SMEM_BYTES(r, d, dv) \
  (4 * (2 * (r) * (KILN_ATTN_SIMT_PITCH(d) + KILN_ATTN_SIMT_PITCH(dv)) + (r) * ((r) + 1)))

/* W4A16 (kiln_matmul_int4): y[i, j] = Σ_r x[i, p(r)] · w(r, j) over the stored rows r < k, with
 * p(r) = perm ? perm[r] : r and, in the native layout of kiln.h (compact, row length n),
 *   w(r, j) = f16_to_f32(scales[(r / group)·n + j]) · (float)(q(r, j) − zeros[(r / group)·n + j]),
 *   q(r, j) = (codes[(r / 8)·n + j] >> 4·(r % 8)) & 15,
 * exact in f32; fp32 accumulation, rounded once into y's dtype. x element (i, c) lives at
 * x + i·x_rs + c·x_cs and y element (i, j) at y + i·y_rs + j·y_cs (strides in elements; one of
 * each pair is 1, the other >= the inner size). k % 8 == 0, k % group == 0; perm is a
 * permutation of 0..k-1 and zeros are 0..16 (checked on the CPU only). */
typedef struct kiln_int4_args {
  const void *x;
  const uint32_t *codes;
  const uint16_t *scales; /* f16 bits */
  const uint8_t *zeros;
  const int32_t *perm; /* NULL: identity */
  void *y;
  int64_t x_rs, x_cs;
  int64_t y_rs, y_cs;
  int32_t m, n, k, group;
  int32_t x_dtype; /* KILN_DT_F16 or KILN_DT_BF16 */
  int32_t y_dtype; /* KILN_DT_* */
  int32_t algo;    /* kiln_int4_algo of kiln.h: 0 AUTO, 1 DECODE, 2 PREFILL */
} kiln_int4_args;

/* One projection of a fused QKV product (kiln_qkv_args): its weight, its output [m, n], n.
 * int8 (kiln_qkv_project_int8): w [k, n] at w + r·w_rs + j·w_cs; the sum is multiplied by
 * scale[j·scale_stride] (scale_stride 0: one scale for the projection); int4 fields NULL.
 * int4 (kiln_qkv_project_int4): codes, scales, zeros, perm, group as in kiln_int4_args; w and
 * scale NULL. y element (i, j) at y + i·y_rs + j·y_cs. */
typedef struct kiln_qkv_proj {
  const int8_t *w;
  const float *scale;
  const uint32_t *codes;
  const uint16_t *scales;
  const uint8_t *zeros;
  const int32_t *perm;
  void *y;
  int64_t w_rs, w_cs, scale_stride;
  int64_t y_rs, y_cs;
  int32_t n, group;
} kiln_qkv_proj;

/* Fused QKV (kiln_qkv_project_int8 / _int4): x [m, k] (element (i, c) at x + i·x_rs + c·x_cs)
 * times the three weights of proj[0..2] (q, k, v), each output exactly the single-projection
 * product (kiln_int4_args for int4; the int8 formula above), fp32 accumulation, one rounding.
 * The outputs share no element (they may be disjoint column slices of one buffer). */
typedef struct kiln_qkv_args {
  const void *x;
  int64_t x_rs, x_cs;
  kiln_qkv_proj proj[3];
  int32_t m, k;
  int32_t x_dtype; /* KILN_DT_F16 or KILN_DT_BF16 */
  int32_t y_dtype; /* KILN_DT_* of all three outputs */
  int32_t algo;    /* kiln_qkv_algo of kiln.h: 0 AUTO, 1 DECODE, 2 PREFILL */
} kiln_qkv_args;

/* The W4A16 / W8A16 decode kernels (kernels/wa16_decode_sm80.cu): 16 warps per block, which owns
 * 32 columns of one projection and 8 or 16 rows of x. */
#define KILN_WA16_THREADS 512

/* The sm_90a W4A16 / W8A16 decode kernels (kernels/wa16_decode_sm90.cu): a tile is 32 columns of
 * one projection (int8: 16 or 32) and 8 rows of x (M <= 16: a column tile's two row tiles are
 * taken one after the other, so the second mostly reads the weight from L2), and block b takes
 * tiles b, b + gridDim.x, ... of the `tiles`. TMA copies K in stages of KILN_WA16_TMA_STAGE_K
 * with four operations (int4: codes, the stage's scales and zeros, that much of x; int8: two,
 * the weight and x) into a ring of `ring` slots. A stage is KILN_WA16_TMA_UNITS units of 256 k,
 * which `consumers` warps (blockDim.x / 32 - 1) take in turn; the last warp issues the copies.
 * x_rows is the height of x's box (min(M, 8)), group_rows[i] that of projection i's scales and
 * zeros boxes (STAGE_K / group when the group divides the stage, else 1). */
/* tuning (KILN_TUNE_DEFS): 512, 1024 or 2048 (the codes box is STAGE_K / 8 <= 256 rows) */
#ifndef KILN_WA16_TMA_STAGE_K
#define KILN_WA16_TMA_STAGE_K 1024
#endif
#define KILN_WA16_TMA_UNIT_K 256
#define KILN_WA16_TMA_UNITS (KILN_WA16_TMA_STAGE_K / KILN_WA16_TMA_UNIT_K)
#define KILN_WA16_TMA_MAX_WARPS 17 /* up to 16 consumers + 1 producer */
/* 96 registers: 5 warps of a scheduler's 16 K registers, so two blocks of 8 consumers + 1
 * producer (18 warps, up to 5 on one of the 4 schedulers) fit on an SM */
#define KILN_WA16_TMA_MAX_REGS 96
#define KILN_WA16_TMA_BAR_BYTES 512 /* full and empty mbarriers of up to 32 slots */
#define KILN_WA16_TMA_MAX_RING 32
#ifndef KILN_WA16_TMA_RING /* tuning: the most slots a block's ring takes (KILN_TUNE_DEFS) */
#define KILN_WA16_TMA_RING KILN_WA16_TMA_MAX_RING
#endif
/* Bytes of one slot: codes [STAGE_K / 8][32] u32, scales [STAGE_K / 32][32] f16, zeros
 * [STAGE_K / 32][32] u8 (room for G = 32's group rows), then x [x_rows][UNITS][UNIT_K] f16/bf16. */
#define KILN_WA16_TMA_CODE_BYTES (KILN_WA16_TMA_STAGE_K / 8 * 32 * 4)
#define KILN_WA16_TMA_SCALE_BYTES (KILN_WA16_TMA_STAGE_K / 32 * 32 * 2)
#define KILN_WA16_TMA_ZERO_BYTES (KILN_WA16_TMA_STAGE_K / 32 * 32)
#define KILN_WA16_TMA_X_AT (KILN_WA16_TMA_CODE_BYTES + KILN_WA16_TMA_SCALE_BYTES + KILN_WA16_TMA_ZERO_BYTES)
/* The tiles' reductions, [2][consumers][8][32] floats, between the barriers and the ring. */
#define KILN_WA16_TMA_RED_BYTES(consumers) (2 * (consumers) * 8 * 32 * 4)
#define KILN_WA16_TMA_SLOT_BYTES(x_rows) (KILN_WA16_TMA_X_AT + (x_rows) * KILN_WA16_TMA_STAGE_K * 2)
/* int8 (kiln_qkv_project_int8 with column-major weights, i.e. a Linear weight [N, K]'s transposed
 * view), tiles of 16·t columns (t = 2, or 1 where that spreads the tiles more evenly over the
 * SMs): a slot's weight is [STAGE_K / 128][16·t rows][128 bytes], column 2t·h + l of the tile in
 * row 8l + h (a 4-D map, 128-byte swizzle), then x as for int4. */
#define KILN_WA8_TMA_CODE_BYTES(t) (KILN_WA16_TMA_STAGE_K * 16 * (t))
#define KILN_WA8_TMA_SLOT_BYTES(x_rows, t) (KILN_WA8_TMA_CODE_BYTES(t) + (x_rows) * KILN_WA16_TMA_STAGE_K * 2)
/* Where the ring starts in the block's 1024-aligned dynamic shared memory (the host asks for 1024
 * bytes more, for the alignment): after the barriers and the reductions, on a 1024-byte boundary
 * (the int8 boxes are 128-byte swizzled). */
#define KILN_WA16_TMA_RING_AT(consumers) \
  ((KILN_WA16_TMA_BAR_BYTES + KILN_WA16_TMA_RED_BYTES(consumers) + 1023) / 1024 * 1024)
typedef struct kiln_wa16_tma_args {
  kiln_qkv_args a;
  int32_t ring, x_rows; /* x_rows: min(M, 8) */
  /* work items: the three projections' column tiles times row_tiles (ceil(M / 8)) blocks of 8
   * rows of x, item i = column tile i / row_tiles, rows 8·(i % row_tiles) ..; the grid's blocks
   * take them in turn */
  int32_t tiles, row_tiles;
  int32_t group_rows[3];
} kiln_wa16_tma_args;

/* kiln_matmul_int4's PREFILL on sm_90a without a dequantized copy (kernels/w4_prefill_sm90.cu):
 * y^T = W^T · x^T as 128 weight columns x BX rows of x per tile (BX 256 or 128), 64 k a stage.
 * The same kernel takes int8 weights (W8A16: kiln_qkv_project_int8's PREFILL), K-contiguous.
 * A stage of the ring is x's [BX][64] box (128-byte swizzled), then the weight's: int4 the codes
 * [8 word rows][128 columns] and 2 rows of scales (f16) and of zeros (u8); int8 the bytes [128
 * columns][64 k] (64-byte swizzled); room for the larger, rounded up to 1024 bytes (the weight is
 * dequantized into registers); 4 stages, then a full and an empty mbarrier each, then 1 KB per
 * consumer warp for the epilogue's transposition (32 rows of x x 16 columns, 16-bit). */
#define KILN_W4_WG_COLS 128
#define KILN_W4_WG_CODE_BYTES (8 * KILN_W4_WG_COLS * 4)
#define KILN_W4_WG_SCALE_BYTES (2 * KILN_W4_WG_COLS * 2)
#define KILN_W4_WG_ZERO_BYTES (2 * KILN_W4_WG_COLS)
#define KILN_W8_WG_W_BYTES (KILN_W4_WG_COLS * 64)
#define KILN_W4_WG_STAGE_BYTES(bx) (((bx) * 128 + KILN_W8_WG_W_BYTES + 1023) / 1024 * 1024)
#ifndef KILN_W4_WG_STAGES /* tuning (scripts/w4-prefill-ladder.sh): 5 fit (p14-s5: no faster) */
#define KILN_W4_WG_STAGES 4
#endif
#define KILN_W4_WG_THREADS 384
#define KILN_W4_WG_EPI_BYTES (8 * 1024)
#define KILN_W4_WG_SMEM_BYTES(bx) \
  (1024 + KILN_W4_WG_STAGES * (KILN_W4_WG_STAGE_BYTES(bx) + 16) + KILN_W4_WG_EPI_BYTES)
/* Problems one launch takes: kiln_matmul_int4's one, or a fused QKV call's three projections
 * (their tiles one after another, so that narrow K and V projections fill the grid together). */
#define KILN_W4_WG_PROBLEMS 3
typedef struct kiln_w4_wgmma_args {
  kiln_int4_args a[KILN_W4_WG_PROBLEMS]; /* the first count used; x, m and k the same in each */
  int32_t group_rows[KILN_W4_WG_PROBLEMS]; /* rows of a stage's scales and zeros boxes: 2 when G = 32, else 1 */
  int32_t count;
  /* int8 weights: y[i, j] = scale[j·scale_stride] · Σ x·w (scale_stride 0: one for the problem) */
  const float *scale[KILN_W4_WG_PROBLEMS];
  int64_t scale_stride[KILN_W4_WG_PROBLEMS];
} kiln_w4_wgmma_args;

/* kiln_quantize_int8 on a GPU context (kernels/int8_quantize.cu): w [k, n] (f32 / f16 / bf16,
 * KILN_DT_*) at w + r·w_rs + c·w_cs into int8 q at q + r·q_rs + c·q_cs, and f32 scales at
 * scales[c·scales_stride] (per column) or scales[0] (per tensor). phase: what one launch does. */
enum {
  KILN_Q8_COLUMNS = 0, /* per column: each column's maximum, scale and codes */
  KILN_Q8_ZERO = 1,    /* per tensor, 1: scales[0] = 0 */
  KILN_Q8_MAX = 2,     /* per tensor, 2: scales[0] = max over the columns' maxima (atomicMax of the bits) */
  KILN_Q8_CODES = 3,   /* per tensor, 3: every column's codes from the maximum in scales[0] */
  KILN_Q8_SCALE = 4,   /* per tensor, 4: scales[0] = the scale of that maximum */
};
typedef struct kiln_int8_quant_args {
  const void *w;
  int8_t *q;
  float *scales;
  int64_t w_rs, w_cs, q_rs, q_cs, scales_stride;
  int64_t k, n;
  int32_t w_dtype, phase;
} kiln_int8_quant_args;

/* kiln_qweight on a GPU context (kernels/qweight.cu): the importers, the quantizer and the
 * dequantizer of src/ops/qweight.c, bit for bit. The native buffers (codes, scales, zeros, perm;
 * compact, kiln.h) are the output of an import or a quantization and the input of a
 * dequantization. src: the source's packed words (import), the float weight (quantize, read) or
 * the float output (dequantize, written), element (r, c) at src + r·src_rs + c·src_cs; qzeros,
 * src_scales and g_idx (element i at g_idx + i·g_idx_s) likewise; every pointer naturally aligned
 * (the host checks). */
enum { KILN_QF_REFERENCE = 1, KILN_QF_GPTQ_V1 = 2, KILN_QF_GPTQ_V2 = 3, KILN_QF_AWQ = 4 }; /* kiln_qformat */
typedef struct kiln_qweight_args {
  int64_t k, n, group;
  uint32_t *codes;
  uint16_t *scales; /* f16 bits */
  uint8_t *zeros;
  int32_t *perm; /* NULL: none written (import) */
  void *src;
  int64_t src_rs, src_cs;
  const uint32_t *qzeros;
  int64_t qzeros_rs, qzeros_cs;
  const uint16_t *src_scales;
  int64_t src_scales_rs, src_scales_cs;
  const int32_t *g_idx; /* NULL: rows in order */
  int64_t g_idx_s;
  int32_t format;    /* import: KILN_QF_* */
  int32_t symmetric; /* quantize */
  int32_t dtype;     /* quantize, dequantize: src's KILN_DT_* */
} kiln_qweight_args;

#endif /* KILN_ABI_H */
