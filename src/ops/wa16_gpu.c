/*
 * wa16_gpu.c — the GPU side of kiln_matmul_int4, kiln_qkv_project_int4 and
 * kiln_qkv_project_int8: one weight-only (W4A16 / W8A16) kernel family serves all three, walking
 * a list of up to three projections (kiln_qkv_args), so a single matmul is the list of one.
 *
 * Kernels (kernels/wa16_decode_sm80.cu): DECODE streams the weights once per 8 or 16 rows of x
 * with mma.sync on exactly dequantized weights (sm_80+); each 16 rows of x re-read the weights
 * (from L2 when they fit), so at large M it is compute-starved. On sm_90a, int4 at M <= 8 and
 * column-major int8 at M <= 16 stream the weight by TMA through shared memory instead
 * (kernels/wa16_decode_sm90.cu).
 * kiln_matmul_int4's PREFILL (matmul_int4.c) dequantizes into the caller's workspace
 * (kernels/w4_dequant.cu) and runs kiln_matmul instead; the fused QKV calls do the same per
 * projection or, into adjacent outputs, for the three weights side by side (qkv_project.c;
 * kernels/w8_dequant.cu for int8).
 */
#include <inttypes.h>
#include <string.h>

#include "ops.h"

/* The sm_90a W4A16 kernel (kernels/wa16_decode_sm90.cu: the weight streamed through shared
 * memory by TMA) where TMA can address every buffer; a tuning switch (KILN_TUNE_DEFS) turns it
 * off, so a rung build can measure the sm_80 kernel beside it in one run. */
#ifndef KILN_WA16_TMA
#define KILN_WA16_TMA 1
#endif

/* Tuning (KILN_TUNE_DEFS): 0 leaves int8's M 9..16 to the sm_80 kernel (the TMA kernel then takes
 * M <= 8) */
#ifndef KILN_WA16_TMA_M16
#define KILN_WA16_TMA_M16 1
#endif

/* Tuning (KILN_TUNE_DEFS): 0 keeps the TMA kernel at one block of 16 consumers per SM on every
 * grid (more waves, each of fewer, longer blocks) */
#ifndef KILN_WA16_TMA_TWO_PER_SM
#define KILN_WA16_TMA_TWO_PER_SM 1
#endif

/* Tuning (KILN_TUNE_DEFS): int8's 16-column tiles (wa8_tile_cols): 0 never, 1 where they spread
 * the work more evenly, in one block per SM; 2 the same in two blocks per SM */
#ifndef KILN_WA8_TMA_N16
#define KILN_WA8_TMA_N16 1
#endif

/* Tuning (KILN_TUNE_DEFS): 0 launches the TMA kernel after the stream's previous kernel has ended,
 * 1 as its programmatic dependent (its launch and prologue overlap that kernel's end) */
#ifndef KILN_WA16_TMA_PDL
#define KILN_WA16_TMA_PDL 1
#endif

static bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

static int64_t tiles_of(const kiln_qkv_args *a, int cols) {
  int64_t tiles = 0; /* projection after projection */
  for (int i = 0; i < 3; i++) tiles += (a->proj[i].n + cols - 1) / cols;
  return tiles;
}

/* The int8 kernel's tile width. A block's tiles are whole (their sums are added in the block), so
 * the SM with the most tiles sets the time: at 8192 x (8192 + 1024 + 1024) 320 tiles of 32
 * columns put 96 columns on some of the 132 SMs, 640 of 16 put at most 80 (measured 1.07x).
 * 16 columns where that lowers the most columns an SM streams, at M <= 4 (x's box is the same
 * per stage whatever the width, and at M = 8 as large as a 16-column weight's) and K >= 8192:
 * at K = 4096 a tile's fixed cost outweighed the better spread (4096 x (4096 + 1024 + 1024):
 * 13.6 against 11.8 µs; docs/performance.md, "W8A16 on sm_90a"). */
static int wa8_tile_cols(const kiln_qkv_args *a, int64_t sms) {
  if (!KILN_WA8_TMA_N16 || a->m > 4 || a->k < 8192) return 32;
  const int64_t t16 = tiles_of(a, 16), t32 = tiles_of(a, 32);
  return (t16 + sms - 1) / sms * 16 < (t32 + sms - 1) / sms * 32 ? 16 : 32;
}

/* int4: every projection's rows of codes (n·4 bytes), scales (n·2) and zeros (n) a multiple of 16
 * bytes, every buffer 16-byte aligned, no act-order. int8: every weight column-major (a Linear
 * weight's transposed view: w_rs 1) with 16-byte aligned columns, n % 4 == 0 (the map's view of
 * a tile's columns as [4][8], wa16_tma). x row-major with 16-byte rows. M <= 8, and for int8
 * M <= 16 in two row tiles of 8: 1.13-1.49x the sm_80 kernel, which int4's M 9..16 keeps (its
 * row tiles were 5-22 % slower, a 16-row TMA kernel lost too; docs/performance.md, "W8A16 on
 * sm_90a" and "v13"). */
static bool tma_fits(const kiln_context *ctx, const kiln_qkv_args *a, bool int8) {
  if (!KILN_WA16_TMA || ctx->arch != 90 || a->m > (int8 && KILN_WA16_TMA_M16 ? 16 : 8)) return false;
  if (a->x_cs != 1 || (a->m > 1 && (a->x_rs * 2) % 16 != 0) || !aligned16(a->x)) return false;
  if (a->k % KILN_WA16_TMA_UNIT_K) return false; /* x's map views each row as [K / 256][256] */
  for (int i = 0; i < 3; i++) {
    const kiln_qkv_proj *p = &a->proj[i];
    if (p->n == 0) continue;
    if (int8 && (p->w_rs != 1 || p->w_cs % 16 || p->n % 4 || !aligned16(p->w))) return false;
    if (!int8 && (p->perm || p->n % 16 || !aligned16(p->codes) || !aligned16(p->scales) || !aligned16(p->zeros)))
      return false;
  }
  return true;
}

/* Rows of a stage's scales and zeros boxes: the groups of a stage when G divides it (G = 32, 64,
 * 128), else the one row of the group the stage lies in (G = K). */
static int32_t tma_group_rows(int64_t group) {
  const int64_t sk = KILN_WA16_TMA_STAGE_K;
  return group >= 32 && group < sk && sk % group == 0 ? (int32_t)(sk / group) : 1;
}

static kiln_status wa16_tma(const kiln_context *ctx, const char *op, const kiln_qkv_args *a, bool int8,
                            CUstream stream) {
  /* M 9..16: each column tile twice, rows 0..7 then 8..15 (x's box past M filled with zeros),
   * adjacent in the blocks' order, so that the second pass over a weight mostly hits L2 */
  kiln_wa16_tma_args args = {.a = *a, .x_rows = a->m < 8 ? a->m : 8, .row_tiles = (a->m + 7) / 8};
  kiln_tensor_map xmap, maps[9]; /* codes[3], scales[3], zeros[3] */
  memset(maps, 0, sizeof maps);
  /* x as [M][K / 256][256], so that one box of [x_rows][UNITS][256] brings a stage's x */
  const uint64_t xdims[3] = {KILN_WA16_TMA_UNIT_K, (uint64_t)a->k / KILN_WA16_TMA_UNIT_K, (uint64_t)a->m};
  /* x's row stride; over M = 1 it addresses nothing, but TMA wants a multiple of 16 */
  const uint64_t xstride[2] = {KILN_WA16_TMA_UNIT_K * 2,
                               a->m > 1 ? (uint64_t)a->x_rs * 2 : ((uint64_t)a->k * 2 + 15) & ~15ull};
  const uint32_t xbox[3] = {KILN_WA16_TMA_UNIT_K, KILN_WA16_TMA_UNITS, (uint32_t)args.x_rows};
  const int xtype = a->x_dtype == KILN_DT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  kiln_status st = kiln_tma_map(ctx, op, xtype, 3, a->x, xdims, xstride, xbox, CU_TENSOR_MAP_SWIZZLE_NONE, &xmap);
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1;
  const int cols = int8 ? wa8_tile_cols(a, sms) : 32, t = cols / 16; /* t: the kernel's MMA tiles */
  const int64_t tiles = tiles_of(a, cols) * args.row_tiles;
  if (tiles < 1) /* validation gives every call a column */
    return kiln_fail(KILN_ERROR_INTERNAL, "%s: internal error: the DECODE kernel got no columns", op);
  for (int i = 0; i < 3 && !st; i++) {
    const kiln_qkv_proj *p = &a->proj[i];
    if (p->n == 0) continue;
    if (int8) {
      /* [K / 128][2t][N / 2t][128] bytes, so that the box [8][2t][8][128] of a stage puts the
       * tile's column 2t·h + l (h < 8, l < 2t) in row 8l + h of each 128 k: 128-byte swizzled
       * rows whose 16-byte chunks a warp then reads without bank conflicts
       * (kernels/wa16_decode_sm90.cu) */
      const uint64_t cs = (uint64_t)p->w_cs;
      const uint64_t dims[4] = {128, (uint64_t)(p->n / (2 * t)), (uint64_t)(2 * t), (uint64_t)a->k / 128},
                     strides[3] = {(uint64_t)(2 * t) * cs, cs, 128};
      const uint32_t box[4] = {128, 8, (uint32_t)(2 * t), KILN_WA16_TMA_STAGE_K / 128};
      if ((st = kiln_tma_map(ctx, op, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, p->w, dims, strides, box,
                             CU_TENSOR_MAP_SWIZZLE_128B, &maps[i])))
        break;
      continue;
    }
    const uint64_t n = (uint64_t)p->n, words = (uint64_t)a->k / 8, groups = (uint64_t)(a->k / p->group);
    const int32_t gr = args.group_rows[i] = tma_group_rows(p->group);
    const uint64_t cdims[2] = {n, words}, cstride[1] = {n * 4}, sdims[2] = {n, groups}, sstride[1] = {n * 2},
                   zstride[1] = {n};
    const uint32_t cbox[2] = {32, KILN_WA16_TMA_STAGE_K / 8}, gbox[2] = {32, (uint32_t)gr};
    if ((st = kiln_tma_map(ctx, op, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, p->codes, cdims, cstride, cbox,
                           CU_TENSOR_MAP_SWIZZLE_NONE, &maps[i])) ||
        (st = kiln_tma_map(ctx, op, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, p->scales, sdims, sstride, gbox,
                           CU_TENSOR_MAP_SWIZZLE_NONE, &maps[3 + i])) ||
        (st = kiln_tma_map(ctx, op, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, p->zeros, sdims, zstride, gbox,
                           CU_TENSOR_MAP_SWIZZLE_NONE, &maps[6 + i])))
      break;
  }
  if (st) return st;
  /* Persistent blocks, each streaming its tiles through one ring: two 9-warp blocks per SM (8
   * consumers each, 96 registers) when there are more tiles than SMs, so one block's ramp
   * overlaps the other's stream; else one block per tile with 16 consumers. The ring: as many
   * slots as the block has stages, up to ~100 KB of shared memory a block for two, ~200 KB for
   * one, less the tiles' reduction buffers. int8's 16-column tiles: one block per SM, which then
   * streams the fewest columns (wa8_tile_cols). */
  const int64_t slot = int8 ? KILN_WA8_TMA_SLOT_BYTES(args.x_rows, t) : KILN_WA16_TMA_SLOT_BYTES(args.x_rows);
  const int64_t two_ring = (100 * 1024 - KILN_WA16_TMA_RING_AT(8)) / slot; /* a ring of two blocks per SM */
  /* two per SM only with at least two slots each (int8 at M = 8, 48 KB slots: one block per SM
   * with a 3-slot ring and 12 consumers, rather than 4 consumers on a 1-slot ring) */
  const bool two_per_sm =
      (cols == 32 ? KILN_WA16_TMA_TWO_PER_SM : KILN_WA8_TMA_N16 == 2) && tiles > sms && two_ring >= 2;
  const int64_t grid = tiles < sms * (two_per_sm ? 2 : 1) ? tiles : sms * (two_per_sm ? 2 : 1);
  int consumers = two_per_sm ? 8 : KILN_WA16_TMA_MAX_WARPS - 1;
  const int64_t stages = ((int64_t)a->k + KILN_WA16_TMA_STAGE_K - 1) / KILN_WA16_TMA_STAGE_K;
  const int64_t streamed = stages * ((tiles + grid - 1) / grid); /* by the block with the most tiles */
  int64_t ring = two_per_sm ? two_ring : (200 * 1024 - KILN_WA16_TMA_RING_AT(consumers)) / slot;
  if (ring < 1) ring = 1;
  if (ring > streamed) ring = streamed;
  if (ring > KILN_WA16_TMA_RING) ring = KILN_WA16_TMA_RING;
  /* When the ring wraps, each unit of a slot must belong to one consumer warp (ring·UNITS a
   * multiple of the consumers): a warp then waits on a slot's next round only after it consumed
   * its unit of the round before, and an mbarrier's parity wait cannot tell round r from r + 2. */
  if (ring < streamed) {
    const int64_t step = consumers % KILN_WA16_TMA_UNITS ? consumers : consumers / KILN_WA16_TMA_UNITS;
    if (ring < step)
      consumers = (int)(ring * KILN_WA16_TMA_UNITS);
    else
      ring -= ring % step;
  }
  args.ring = (int32_t)ring, args.tiles = (int32_t)tiles;
  const unsigned smem = (unsigned)(1024 + KILN_WA16_TMA_RING_AT(consumers) + ring * slot); /* 1024: alignment */
  void *params[] = {&args, &xmap, maps};
  static const kiln_kernel_id kernels[3][2] = {{KILN_K_W4A16_TMA_F16, KILN_K_W4A16_TMA_BF16},
                                               {KILN_K_W8A16_TMA_F16, KILN_K_W8A16_TMA_BF16},
                                               {KILN_K_W8A16_TMA_F16_N16, KILN_K_W8A16_TMA_BF16_N16}};
  const kiln_kernel_id kernel = kernels[int8 ? (cols == 16 ? 2 : 1) : 0][a->x_dtype == KILN_DT_BF16];
  const unsigned threads = (unsigned)(32 * (consumers + 1));
  if (KILN_WA16_TMA_PDL)
    return kiln_launch_dependent(ctx, kernel, (unsigned)grid, 1, 1, threads, smem, stream, params, op);
  return kiln_launch(ctx, kernel, (unsigned)grid, 1, 1, threads, smem, stream, params, op);
}

/* int8: the three weights are int8 [k, n] (w, scale); else kiln_qweights (codes, scales, ...). */
static kiln_status wa16_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *a, bool int8,
                            CUstream stream) {
  if (a->algo == KILN_QKV_PREFILL) /* PREFILL runs kiln_matmul (qkv_project.c, matmul_int4.c), never this */
    return kiln_fail(KILN_ERROR_INTERNAL, "%s: internal error: PREFILL reached the DECODE kernels", op);
  if (tma_fits(ctx, a, int8)) return wa16_tma(ctx, op, a, int8, stream);
  int64_t blocks = 0; /* 32 columns each, projection after projection */
  for (int i = 0; i < 3; i++) blocks += (a->proj[i].n + 31) / 32;
  const bool m16 = a->m > 8; /* rows of x per block: 8 (decode) or 16 */
  const int64_t row_tiles = m16 ? ((int64_t)a->m + 15) / 16 : 1;
  if (row_tiles > 65535 || blocks > INT32_MAX)
    return kiln_fail(KILN_ERROR_UNSUPPORTED,
                     "%s: M = %d rows; the GPU kernel takes at most 65535 x 16 = 1048560 per call; split x", op, a->m);
  static const kiln_kernel_id kernels[2][2][2] = { /* [int8][bf16][m16] */
      {{KILN_K_W4A16_DECODE_F16_M8, KILN_K_W4A16_DECODE_F16_M16},
       {KILN_K_W4A16_DECODE_BF16_M8, KILN_K_W4A16_DECODE_BF16_M16}},
      {{KILN_K_W8A16_DECODE_F16_M8, KILN_K_W8A16_DECODE_F16_M16},
       {KILN_K_W8A16_DECODE_BF16_M8, KILN_K_W8A16_DECODE_BF16_M16}}};
  /* Warps per block (they split K): as many as give ~16 warps per SM over the whole grid, a power
   * of two from 1 to 16. Fewer, longer K runs per warp ramp and drain the load pipeline less. */
  const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 1, tiles = blocks * row_tiles;
  int warps = KILN_WA16_THREADS / 32;
  while (warps > 1 && tiles * (warps / 2) >= sms * 16) warps /= 2;
  kiln_qkv_args args = *a;
  void *params[] = {&args};
  const kiln_kernel_id kernel = kernels[int8][a->x_dtype == KILN_DT_BF16][m16];
  /* shared memory: the reduction buffer, [warps][8 or 16 accumulators][32 lanes] floats */
  const unsigned smem = (unsigned)(warps * (m16 ? 16 : 8) * 32 * sizeof(float));
  return kiln_launch(ctx, kernel, (unsigned)blocks, (unsigned)row_tiles, 1, (unsigned)(32 * warps), smem, stream, params,
                     op);
}

kiln_status kiln_matmul_int4_gpu(const kiln_context *ctx, const char *op, const kiln_int4_args *a, CUstream stream) {
  kiln_qkv_args q;
  kiln_int4_as_qkv(a, &q);
  return wa16_gpu(ctx, op, &q, false, stream);
}

kiln_status kiln_qkv_int4_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream) {
  return wa16_gpu(ctx, op, args, false, stream);
}

kiln_status kiln_qkv_int8_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_args *args, CUstream stream) {
  return wa16_gpu(ctx, op, args, true, stream);
}

kiln_status kiln_w4_dequantize_gpu(const kiln_context *ctx, const char *op, const kiln_int4_args *a, void *ws,
                                   int64_t ld, CUstream stream) {
  kiln_int4_args args = *a;
  /* 8 columns per thread (16-byte loads and stores) when the rows and pointers allow it */
  int cols = a->n % 8 == 0 && ld % 8 == 0 && (uintptr_t)ws % 16 == 0 && (uintptr_t)a->codes % 16 == 0 &&
                     (uintptr_t)a->scales % 16 == 0 && (uintptr_t)a->zeros % 8 == 0
                 ? 8
                 : 1;
  void *params[] = {&args, &ws, &cols, &ld};
  const unsigned threads = 256, blocks_x = (unsigned)((a->n + (int64_t)threads * cols - 1) / ((int64_t)threads * cols)),
                 blocks_y = (unsigned)(a->k / 8 < 65535 ? a->k / 8 : 65535);
  return kiln_launch(ctx, a->x_dtype == KILN_DT_BF16 ? KILN_K_W4_DEQUANT_BF16 : KILN_K_W4_DEQUANT_F16, blocks_x,
                     blocks_y, 1, threads, 0, stream, params, op);
}

/* Tuning (KILN_TUNE_DEFS): 0 sends every PREFILL through the dequantized copy and kiln_matmul */
#ifndef KILN_W4_WGMMA
#define KILN_W4_WGMMA 1
#endif

/* Tuning (KILN_TUNE_DEFS): the fused PREFILL's rows of x per tile, 128 or 256 (0: w4_rows) */
#ifndef KILN_W4_WG_BX
#define KILN_W4_WG_BX 0
#endif

/* Tuning (KILN_TUNE_DEFS): the largest M the fused PREFILL takes (kiln_w4_wgmma_fits; 1024 until
 * its epilogue went through shared memory) */
#ifndef KILN_W4_WG_MAX_M
#define KILN_W4_WG_MAX_M INT32_MAX
#endif

static int64_t w4_sms(const kiln_context *ctx) { return ctx->info.sm_count > 0 ? ctx->info.sm_count : 1; }

/* The tiles of count problems sharing x, with rows of x per tile bx */
static int64_t w4_tiles(const kiln_int4_args *a, int count, int bx) {
  int64_t cols = 0;
  for (int i = 0; i < count; i++) cols += (a[i].n + KILN_W4_WG_COLS - 1) / KILN_W4_WG_COLS;
  return (a[0].m + bx - 1) / bx * cols;
}

/* Tiles for most SMs: what the kernel needs to be the faster PREFILL (kiln_w4_wgmma_fits) */
static bool w4_enough(const kiln_context *ctx, int64_t tiles) { return tiles * 10 >= w4_sms(ctx) * 7; }

/* Rows of x per tile: 256 where those tiles are enough (kiln_w4_wgmma_fits), else 128 (at
 * M <= 128 always). Until 2026-12-04 256 from half the SMs' worth of tiles, which sent a call
 * with 66-91 such tiles (8192 + 1024 + 1024 at M = 256: 80) to the copy + GEMM instead. */
static int w4_rows(const kiln_context *ctx, const kiln_int4_args *a, int count) {
  if (KILN_W4_WG_BX) return KILN_W4_WG_BX;
  return a[0].m > 128 && w4_enough(ctx, w4_tiles(a, count, 256)) ? 256 : 128;
}

/* x as the kernel's wgmma B operand: [M][K], k-major (the kiln_matrix view's strides: a single
 * row's leading dimension already K) */
static kiln_matrix w4_x(const kiln_int4_args *a) {
  return kiln_matrix_strided(a->x, kiln_dt_dtype(a->x_dtype), 1, a->m, a->k, 0, a->x_rs, a->x_cs);
}

/* What every launch of the kernel needs of x and the problem sizes: x row-major with 16-byte rows
 * for TMA, and tiles for most SMs (below) */
static bool wg_takes(const kiln_context *ctx, const kiln_int4_args *a, int count) {
  const kiln_matrix x = w4_x(a);
  return x.cs == 1 && kiln_wgmma_operand_ok(&x) && a->m <= KILN_W4_WG_MAX_M &&
         w4_enough(ctx, w4_tiles(a, count, w4_rows(ctx, a, count)));
}

/* Where the fused kernel runs. TMA needs 16-byte row strides (codes n·4, scales n·2 and zeros n
 * bytes: n % 16 == 0) and 16-byte aligned buffers, x row-major with 16-byte rows; act-order would
 * need a gather of x. And where it is the faster PREFILL (H200, docs/performance.md, "PREFILL in
 * one kernel"): its tiles are whole columns of K, so it needs tiles for most SMs (64 tiles at
 * 4096 x 4096, M = 256: 0.69x the copy + GEMM; 96 at 4096 x 12288, M = 128: 1.53x), counted
 * over all the problems of the launch (a fused QKV call's narrow K and V projections alone have
 * too few). At any M since its loads were hoisted and its epilogue went through shared memory
 * (M = 4096 x 4096 x 12288: 1.06x the copy + GEMM; 2048 and 4096 x 8192 x 28672: 1.04x and
 * 1.00x; before them 0.82x at M = 4096, hence a bound of 1024 then). */
bool kiln_w4_wgmma_fits(const kiln_context *ctx, const kiln_int4_args *a, int count) {
  /* the cheap tests first: every int4 call asks, DECODE's too */
  if (!KILN_W4_WGMMA || ctx->arch != 90 || count < 1 || count > KILN_W4_WG_PROBLEMS) return false;
  for (int i = 0; i < count; i++)
    if (a[i].perm || a[i].n % 16 || !aligned16(a[i].codes) || !aligned16(a[i].scales) || !aligned16(a[i].zeros))
      return false;
  return wg_takes(ctx, a, count);
}

/* One projection's codes, scales and zeros maps (kernels/w4_prefill_sm90.cu, WeightMaps) */
static kiln_status w4_weight_maps(const kiln_context *ctx, const char *op, const kiln_int4_args *a, int group_rows,
                                  kiln_tensor_map maps[3]) {
  const uint64_t n = (uint64_t)a->n, groups = (uint64_t)(a->k / a->group);
  const uint64_t cdims[2] = {n, (uint64_t)a->k / 8}, cstride[1] = {n * 4};
  const uint64_t gdims[2] = {n, groups}, sstride[1] = {n * 2}, zstride[1] = {n};
  const uint32_t cbox[2] = {KILN_W4_WG_COLS, 8}, gbox[2] = {KILN_W4_WG_COLS, (uint32_t)group_rows};
  kiln_status st;
  if ((st = kiln_tma_map(ctx, op, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, a->codes, cdims, cstride, cbox,
                         CU_TENSOR_MAP_SWIZZLE_NONE, &maps[0])) ||
      (st = kiln_tma_map(ctx, op, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, a->scales, gdims, sstride, gbox,
                         CU_TENSOR_MAP_SWIZZLE_NONE, &maps[1])))
    return st;
  return kiln_tma_map(ctx, op, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, a->zeros, gdims, zstride, gbox,
                      CU_TENSOR_MAP_SWIZZLE_NONE, &maps[2]);
}

/* Launches the kernel on args' count problems (x and y from a), their weight maps in maps[1 ..] */
static kiln_status wg_launch(const kiln_context *ctx, const char *op, const kiln_w4_wgmma_args *args,
                             const kiln_int4_args *a, kiln_tensor_map *maps, bool w8, CUstream stream) {
  const int bx = w4_rows(ctx, a, args->count);
  const kiln_matrix x = w4_x(a);
  kiln_status st = kiln_wgmma_operand_map(ctx, op, "x", &x, (uint32_t)bx, &maps[0]);
  if (st) return st;
  const int64_t sms = w4_sms(ctx), items = w4_tiles(a, args->count, bx), grid = items < sms ? items : sms;
  void *params[] = {(void *)args, maps};
  static const kiln_kernel_id kernels[2][2][2] = { /* [int8][256 rows][bf16] */
      {{KILN_K_W4A16_WGMMA128_F16, KILN_K_W4A16_WGMMA128_BF16},
       {KILN_K_W4A16_WGMMA256_F16, KILN_K_W4A16_WGMMA256_BF16}},
      {{KILN_K_W8A16_WGMMA128_F16, KILN_K_W8A16_WGMMA128_BF16},
       {KILN_K_W8A16_WGMMA256_F16, KILN_K_W8A16_WGMMA256_BF16}}};
  const kiln_kernel_id kernel = kernels[w8][bx == 256][a->x_dtype == KILN_DT_BF16];
  const unsigned smem = (unsigned)KILN_W4_WG_SMEM_BYTES(bx);
  return kiln_launch_dependent(ctx, kernel, (unsigned)grid, 1, 1, KILN_W4_WG_THREADS, smem, stream, params, op);
}

kiln_status kiln_w4_wgmma(const kiln_context *ctx, const char *op, const kiln_int4_args *a, int count,
                          CUstream stream) {
  kiln_w4_wgmma_args args = {.count = count};
  /* x, then codes, scales and zeros per problem (kernels/w4_prefill_sm90.cu, Maps); unused ones
   * stay zero */
  kiln_tensor_map maps[1 + 3 * KILN_W4_WG_PROBLEMS] = {0};
  kiln_status st = KILN_OK;
  for (int i = 0; i < count && !st; i++) {
    args.a[i] = a[i];
    args.group_rows[i] = a[i].group == 32 && a[i].k / a[i].group > 1 ? 2 : 1;
    st = w4_weight_maps(ctx, op, &a[i], args.group_rows[i], &maps[1 + 3 * i]);
  }
  return st ? st : wg_launch(ctx, op, &args, a, maps, false, stream);
}

/* The fused int8 QKV call's projections with n > 0 (q's), as problems of the kernel: a as
 * kiln_matmul_int4's arguments (x, y, m, n, k and dtypes; no codes), w the int8 weights. */
static int w8_problems(const kiln_qkv_args *q, kiln_int4_args a[3], const kiln_qkv_proj *w[3]) {
  int proj[3];
  const int count = kiln_qkv_nonempty_as_int4(q, a, proj);
  for (int j = 0; j < count; j++) {
    a[j].group = q->k;
    w[j] = &q->proj[proj[j]];
  }
  return count;
}

/* As kiln_w4_wgmma_fits for int8 weights: K-contiguous (w_rs 1) with 16-byte aligned columns
 * that do not overlap (TMA), n % 16 == 0 (the epilogue's whole 16-column stores), x as there, and
 * tiles for most SMs over the three projections. */
bool kiln_w8_wgmma_fits(const kiln_context *ctx, const kiln_qkv_args *q) {
  if (!KILN_W4_WGMMA || ctx->arch != 90) return false;
  kiln_int4_args a[3];
  const kiln_qkv_proj *w[3];
  const int count = w8_problems(q, a, w);
  if (!count) return false;
  for (int i = 0; i < count; i++)
    if (w[i]->w_rs != 1 || w[i]->w_cs < a[i].k || w[i]->w_cs % 16 || !aligned16(w[i]->w) || a[i].n % 16) return false;
  return wg_takes(ctx, a, count);
}

kiln_status kiln_w8_wgmma(const kiln_context *ctx, const char *op, const kiln_qkv_args *q, CUstream stream) {
  kiln_int4_args a[3];
  const kiln_qkv_proj *w[3];
  kiln_w4_wgmma_args args = {.count = w8_problems(q, a, w)};
  if (!args.count) /* kiln_w8_wgmma_fits held, so there is a projection */
    return kiln_fail(KILN_ERROR_INTERNAL, "%s: internal error: PREFILL got no projection", op);
  /* x, then each weight's [N][K] bytes as the codes map of its problem (kernels/w4_prefill_sm90.cu) */
  kiln_tensor_map maps[1 + 3 * KILN_W4_WG_PROBLEMS] = {0};
  kiln_status st = KILN_OK;
  for (int i = 0; i < args.count && !st; i++) {
    args.a[i] = a[i];
    args.group_rows[i] = 1;
    args.scale[i] = w[i]->scale, args.scale_stride[i] = w[i]->scale_stride;
    const uint64_t dims[2] = {(uint64_t)a[i].k, (uint64_t)a[i].n}, stride[1] = {(uint64_t)w[i]->w_cs};
    const uint32_t box[2] = {64, KILN_W4_WG_COLS};
    st = kiln_tma_map(ctx, op, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w[i]->w, dims, stride, box,
                      CU_TENSOR_MAP_SWIZZLE_64B, &maps[1 + 3 * i]);
  }
  return st ? st : wg_launch(ctx, op, &args, a, maps, true, stream);
}

kiln_status kiln_w8_dequantize_gpu(const kiln_context *ctx, const char *op, const kiln_qkv_proj *p, int32_t k,
                                   int32_t x_dtype, void *ws, int64_t ld, CUstream stream) {
  const int64_t blocks_y = ((int64_t)k + 31) / 32; /* 32 x 32 tiles (kernels/w8_dequant.cu) */
  if (blocks_y > 65535)
    return kiln_fail(KILN_ERROR_UNSUPPORTED, "%s: PREFILL takes K up to 65535 x 32 = 2097120 (found %d); use DECODE",
                     op, (int)k);
  kiln_qkv_proj proj = *p;
  int32_t kk = k;
  void *params[] = {&proj, &kk, &ws, &ld};
  return kiln_launch(ctx, x_dtype == KILN_DT_BF16 ? KILN_K_W8_DEQUANT_BF16 : KILN_K_W8_DEQUANT_F16,
                     (unsigned)((p->n + 31) / 32), (unsigned)blocks_y, 1, 32 * 8, 0, stream, params, op);
}
