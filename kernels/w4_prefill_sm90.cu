/*
 * w4_prefill_sm90.cu — kiln_matmul_int4's PREFILL on Hopper (sm_90a) in one kernel: each stage
 * of the 4-bit weight is dequantized into registers as the A operand of warpgroup MMAs, instead
 * of the whole weight being written out as a 16-bit copy for kiln_matmul (kernels/w4_dequant.cu,
 * which stays for every case this kernel does not take). A launch takes up to three problems
 * sharing x (a fused QKV call's projections, their tiles one after another), and the W8 variant
 * takes int8 weights (kiln_qkv_project_int8's PREFILL; stage_frags_w8, the scales applied to the
 * fp32 sums in the epilogue) in place of kernels/w8_dequant.cu's copy.
 *
 * Why: at M = 1024 x 4096 x 4096 the copy costs a 40 MB pass (~10 µs) before a ~55 µs GEMM, and
 * the GEMM then reads 32 MB of f16 weight where 8 MB of codes would do (PREFILL measured
 * 0.79-0.81x cuBLAS f16 there; docs/performance.md, "PREFILL").
 *
 * Dequantized where, by whom. Each consumer thread turns its share of a stage's codes (16 LDS.32,
 * four instructions a pair of weights for f16) straight into its wgmma A fragments, in mma's
 * m16k16 layout, which the native code words meet without any exchange between lanes
 * (stage_frags). Until 2026-12-04 the weight went through shared memory instead (STS.128, a
 * proxy fence and a warpgroup barrier a stage, and wgmma reading it back): per stage that is
 * 16 KB more written and 16 KB more read in a shared memory that x's wgmma reads and TMA's
 * writes already keep busy, and it left the tensor pipe 71 % busy (Nsight Compute, H200).
 * Registers a wgmma in flight reads may not be written, or ptxas serializes every wgmma
 * (C7513), so the fragments alternate between two buffers stage by stage and one stage of
 * wgmmas runs under the next stage's dequantization (docs/performance.md, "PREFILL in one
 * kernel": the rungs, p14 this one).
 *
 * Why transposed. The block computes yᵀ = Wᵀ·xᵀ: a tile is 128 weight columns (two consumer
 * warpgroups of 64: wgmma's M) by BX rows of x (wgmma's N: 256, or 128 for small M), so each
 * weight element is dequantized once per 256 rows of x, the weight is the A operand (the one
 * registers may hold), and x's [BX][64 k] TMA box with the 128-byte swizzle is a k-major B
 * operand as in gemm_sm90.cuh. The value is scale·(q − zero) rounded once to x's dtype, as
 * w4_dequant.cu writes it, so both PREFILL paths multiply the same weights.
 *
 * Block and ring as in gemm_sm90.cuh: a producer warpgroup whose thread 0 issues a stage's four
 * TMA copies (x's box, the codes [8 word rows][128 columns], and the scales and zeros rows of
 * the stage's groups: 2 rows at G = 32, else 1) into a ring of 4 stages (a stage is released
 * once its wgmmas retired, one stage after they were issued, so the copies run two stages
 * ahead); two consumer warpgroups; a persistent grid walking the tiles in gemm's L2-friendly
 * order; y's tile leaves through 1 KB of shared memory per consumer warp (store_yt_rows) where
 * y is 16-bit and row-major with 16-byte rows, else by gemm's store_tile.
 *
 * Edges: TMA fills x past M or K, codes past N or K / 8, and scales and zeros past N or K / G
 * with zeros, so every padded weight is 0·(0 − 0) = 0 and every padded x is 0; stores are
 * predicated. The host sends here N % 16 == 0 (the maps' 16-byte row strides), 16-byte aligned
 * buffers, row-major x with 16-byte rows, and no act-order (x would need a gather).
 */
#include <cuda.h>

#include "gemm_sm90.cuh" /* mbarriers, TMA, wgmma, tile_coords */
#include "wa16.cuh"      /* and_or: (a & b) | c in one LOP3 (as two operations with both constants
                          * immediate, ptxas emits two: LOP3 takes one immediate); prmt */

namespace kiln {
namespace w4wg {

/* The TMA descriptors (kernel parameter space). */
struct WeightMaps {
  CUtensorMap codes, scales, zeros;
};
struct Maps {
  CUtensorMap x;
  WeightMaps w[KILN_W4_WG_PROBLEMS]; /* the first p.count used */
};


/* Tuning probe (KILN_TUNE_DEFS): 1 skips the epilogue's stores (results are garbage), so that a
 * run times the mainloop alone: the most an epilogue overlapped with the next tile could gain. */
#ifndef KILN_W4_WG_STORE_PROBE
#define KILN_W4_WG_STORE_PROBE 0
#endif

/* Tuning (KILN_TUNE_DEFS; rung p18 of scripts/w4-prefill-ladder.sh): 1 keeps a tile's scales and
 * zeros, as pair_scale's terms, in registers from the stage where their group begins, instead of
 * loading and converting them again in every stage. The consumers' instruction stream is what
 * paces this kernel (27 % issue slots at 0.36 eligible warps a scheduler, the tensor pipe 81 %
 * busy: docs/performance.md, "Nsight Compute of the landed kernel"), and those loads and
 * conversions are ~20 of a stage's ~130 instructions a thread; at G = 128 half the stages and
 * at G = K all but the first need none. */
#ifndef KILN_W4_WG_SCALE_CACHE
#define KILN_W4_WG_SCALE_CACHE 0
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int BW = KILN_W4_WG_COLS, BK = 64, GROUP_M = 8;

/* Problem i's tiles (every problem shares x, so its rows are a[0]'s): the host's w4_tiles */
template <int BX>
KILN_DEVICE int problem_tiles(const kiln_w4_wgmma_args &p, int i) {
  return (p.a[0].m + BX - 1) / BX * ((p.a[i].n + BW - 1) / BW);
}

/* Item `item` of the block's walk as problem pi's tile (tm, tn): the problems' tiles one after
 * another, each in gemm's L2-friendly order. */
template <int BX>
KILN_DEVICE void locate(const kiln_w4_wgmma_args &p, int item, int &pi, int &tm, int &tn) {
  pi = 0;
  for (int n; pi + 1 < p.count && item >= (n = problem_tiles<BX>(p, pi));) item -= n, pi++;
  tile_coords(p.a[pi].m, p.a[pi].n, GROUP_M, item, BX, BW, tm, tn);
}

/* One weight column's scale (f16 bits) and zero for dequant_pair: f16 keeps (1024 + z, 64 + z)
 * and (s, s) as half2s, bf16 the f32 terms of the formula. */
template <bool BF16>
struct PairScale {
  uint32_t sz, ss; /* f16: the half2s; bf16: unused */
  float cz, cz16, sf, sf16;
};
template <bool BF16>
KILN_DEVICE PairScale<BF16> pair_scale(uint16_t s, uint32_t z) {
  PairScale<BF16> p;
  if constexpr (BF16) {
    p.sf = __half2float(__ushort_as_half(s)), p.cz = 8388608.f + (float)z;
    p.sf16 = p.sf * 0.0625f, p.cz16 = 8388608.f + (float)(16 * z);
  } else {
    p.sz = (0x6400u + z) | (0x5400u + (z << 4)) << 16;
    p.ss = (uint32_t)s | (uint32_t)s << 16;
  }
  return p;
}

/* Byte j of code word w (sel = j | j << 8, shift = 8j: the same byte either way), nibbles k 2j
 * (low) and 2j + 1 (high), as the pair scale·(q − zero) in x's 16-bit dtype, k 2j in the low half.
 * f16: byte j put in bytes 0 and 2 (one PRMT), & 0x00F0000F | 0x54006400 (one LOP3) is the
 * pair (1024 + q_2j, 64 + q_2j+1) in f16 (the ulp is 1 at 1024 and 1/16 at 64, where the high
 * nibble sits 4 bits up); minus (1024 + z, 64 + z) leaves q − z exactly (small integers), and
 * one f16 product rounds s·(q − z) once, exactly as the f32 formula rounded to f16 does (the
 * product is exact in f32). Four instructions a pair, already in k order.
 * bf16: the f32 formula, as bf16 cannot hold an f16 scale: 0x4B000000 | q is the float 2^23 + q
 * and 0x4B000000 | 16q is 2^23 + 16q, so subtracting 2^23 + z (2^23 + 16z) leaves q − z
 * (16(q − z)) exactly, times s (s / 16, exact in f32) the same exact product, rounded once to
 * bf16. Explicit roundings: no contraction into FMAs. */
template <bool BF16>
KILN_DEVICE uint32_t dequant_pair(uint32_t w, uint32_t sel, uint32_t shift, const PairScale<BF16> &p) {
  if constexpr (BF16) {
    const uint32_t y = w >> shift;
    const float lo = __fmul_rn(__fsub_rn(__uint_as_float(wa16::and_or(y, 0xFu, 0x4B000000u)), p.cz), p.sf);
    const float hi = __fmul_rn(__fsub_rn(__uint_as_float(wa16::and_or(y, 0xF0u, 0x4B000000u)), p.cz16), p.sf16);
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  } else {
    const uint32_t m = wa16::and_or(wa16::prmt(w, w, sel), 0x00F0000Fu, 0x54006400u);
    const __half2 h = __hmul2_rn(__hsub2(*reinterpret_cast<const __half2 *>(&m), *reinterpret_cast<const __half2 *>(&p.sz)),
                                 *reinterpret_cast<const __half2 *>(&p.ss));
    return *reinterpret_cast<const uint32_t *>(&h);
  }
}

/* A consumer thread's wgmma A fragments of one stage, dequantized from the codes in registers:
 * f[i] is k step i (k 16i .. 16i + 15 of the stage) in mma's m16k16 layout. Warp w of the
 * warpgroup holds weight columns c0 = 16w + g and c1 = c0 + 8 (g = lane / 4) at k 2q, 2q + 1
 * (registers 0, 1: c0, c1) and 2q + 8, 2q + 9 (registers 2, 3) of a step (q = lane % 4). A code
 * word is 8 k of one column, lowest nibble lowest k, so step i's registers are byte q of word
 * rows 2i (registers 0, 1) and 2i + 1 (2, 3): no exchange between lanes. The four lanes of a
 * quad load the same word (a broadcast), a warp's eight quads 8 adjacent words: 16 conflict-free
 * LDS.32 a stage. col: the warpgroup's first column in the tile + 16w + g. ps[row][column]: the
 * group rows' terms, row 0 for k 0..31 and row 1 (the scales box row r1: 1 at G = 32, else 0,
 * the same group) for k 32..63, read from the stage when `fresh`, else kept from an earlier
 * stage of the same groups (KILN_W4_WG_SCALE_CACHE). */
template <bool BF16>
KILN_DEVICE void stage_frags(uint32_t (&f)[4][4], const uint8_t *st, int col, int q, int r1, bool fresh,
                             PairScale<BF16> (&ps)[2][2]) {
  const uint32_t *codes = reinterpret_cast<const uint32_t *>(st);
  const uint16_t *scales = reinterpret_cast<const uint16_t *>(st + KILN_W4_WG_CODE_BYTES);
  const uint8_t *zeros = st + KILN_W4_WG_CODE_BYTES + KILN_W4_WG_SCALE_BYTES;
  uint32_t w[8][2];
#pragma unroll
  for (int j = 0; j < 8; j++) w[j][0] = codes[j * BW + col], w[j][1] = codes[j * BW + col + 8];
  if (fresh)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      ps[0][h] = pair_scale<BF16>(scales[col + 8 * h], zeros[col + 8 * h]);
      ps[1][h] = pair_scale<BF16>(scales[r1 * BW + col + 8 * h], zeros[r1 * BW + col + 8 * h]);
    }
  const uint32_t sel = (uint32_t)(q | q << 8), shift = 8u * (uint32_t)q;
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int r = 0; r < 4; r++) f[i][r] = dequant_pair<BF16>(w[2 * i + r / 2][r % 2], sel, shift, ps[i / 2][r % 2]);
}

/* The same fragments from int8 weights (W8A16): the stage's [128 columns][64 k] bytes, 64-byte
 * rows, chunk j of row c at j ^ (c / 2) % 4 (TMA's 64-byte swizzle). Register r of step i is
 * column col + 8·(r % 2) at k 16i + 2q + 8·(r / 2): two adjacent bytes, one LDS.U16 (a warp's
 * eight rows land in eight distinct 16-byte bank groups), as the exact integers in x's dtype
 * (wa16.cuh's i8x2w on the sign-flipped bytes); the scale is applied to the sums in the
 * epilogue. */
template <bool BF16>
KILN_DEVICE void stage_frags_w8(uint32_t (&f)[4][4], const uint8_t *st, int col, int q) {
  const int sw = (col >> 1) & 3; /* the same for col + 8 */
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const int c = col + 8 * (r % 2);
      const uint32_t v = *reinterpret_cast<const uint16_t *>(st + c * 64 + ((i ^ sw) << 4) + 2 * q + 8 * (r / 2));
      f[i][r] = wa16::i8x2w<BF16, 0, 1>(wa16::flip8(v));
    }
}

/* The epilogue where y is row-major with 16-byte aligned rows and a 16-bit dtype (OUT_BF16):
 * yᵀ's fragments leave through shared memory, transposed, as whole 32-byte sectors of y's rows.
 * Stored straight from the accumulator layout, a lane holds two rows of yᵀ (columns of y, 16
 * bytes apart in y) by pairs of rows of y, so every 2-byte store touched a different sector:
 * 128 stores a thread, half of each sector wasted, ~13 % of a consumer warp's time with the
 * tensor pipe idle (Nsight Compute, H200, M 1024 x 4096 x 12288). Here, per 32 rows of x, the
 * warp's 16 x 32 fragment goes into `stage` (its own 1 KB) by two stmatrix.trans, row m of x
 * as 32 bytes (its 16 columns of y; the two 16-byte halves swapped in rows with m % 8 >= 4, so
 * the 8 rows of a matrix and the reads below hit distinct banks), then two lanes a row store it
 * with two 16-byte stores. y: element (0, n0) of y, n0 this warp's first column (all 16 exist:
 * N % 16 == 0), or NULL when they do not; rows: the rows of x from the tile's first (may
 * exceed BX). Warp-synchronous. */
template <bool OUT_BF16, int BX>
KILN_DEVICE void store_yt_rows(const float (&d)[BX / 2], uint8_t *stage, char *y, int64_t y_rs, int rows, int lane) {
#pragma unroll
  for (int c = 0; c < BX / 32; c++) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
      /* matrix i of the instruction: j = 4c + 2·half + i / 2 (rows 8j.. of x), h = i % 2 (columns
       * 8h.. of the warp's 16) */
      uint32_t f[4];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int j = 4 * c + 2 * half + i / 2, h = i % 2;
        f[i] = pack2<OUT_BF16>(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
      const int i = lane / 8, m = 8 * (2 * half + i / 2) + lane % 8, h = i % 2;
      sm90::stmatrix_x4_trans(stage + m * 32 + ((h ^ ((m >> 2) & 1)) * 16), f[0], f[1], f[2], f[3]);
    }
    __syncwarp();
#pragma unroll
    for (int p = 0; p < 2; p++) {
      const int m = lane / 2 + 16 * p, h = lane % 2;
      const uint4 v = *reinterpret_cast<const uint4 *>(stage + m * 32 + ((h ^ ((m >> 2) & 1)) * 16));
      if (y && 32 * c + m < rows) *reinterpret_cast<uint4 *>(y + ((int64_t)(32 * c + m) * y_rs + 8 * h) * 2) = v;
    }
    __syncwarp(); /* the stage's reads done before the next rows overwrite it */
  }
}

template <bool BF16, int BX, bool W8>
KILN_DEVICE void w4_wgmma(const kiln_w4_wgmma_args &p, const Maps &maps) {
  constexpr int STAGES = KILN_W4_WG_STAGES, STAGE_BYTES = KILN_W4_WG_STAGE_BYTES(BX), X_BYTES = BX * 128;
  constexpr int CODES_AT = X_BYTES; /* in a stage */
  extern __shared__ uint8_t w4wg_raw[];
  /* aligned to 1024 bytes (the swizzle's period) by pointer arithmetic, so that the compiler
   * still sees shared memory (LDS) */
  uint8_t *smem = w4wg_raw + ((1024u - (smem_u32(w4wg_raw) & 1023u)) & 1023u);
  /* full: the copies landed; empty: both consumers are done with the stage */
  uint64_t *full = reinterpret_cast<uint64_t *>(smem + STAGES * STAGE_BYTES), *empty = full + STAGES;
  /* not sm90::warpgroup_index(): with it this kernel ran 1.5 % slower (H100, 2026-12-07) */
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  /* every problem shares x: m, k and x from a[0] */
  const int nk = (p.a[0].k + BK - 1) / BK;
  int items = 0;
  for (int i = 0; i < p.count; i++) items += problem_tiles<BX>(p, i);

  /* a programmatic dependent, as the GEMMs (wgmma.c): nothing touches global memory before
   * pdl_wait */
  if (threadIdx.x == 0) {
    sm90::ring_init(full, empty, STAGES, 2); /* a stage is refilled once both consumers are done */
    sm90::pdl_launch_dependents();
  }
  __syncthreads();
  sm90::pdl_wait();

  /* Both roles walk the block's stages g = 0, 1, .. (tile after tile, k slice after k slice):
   * slot g % STAGES, phase (g / STAGES) & 1. */
  if (wg == 0) { /* producer: one thread, two (int8) or four (int4) copies a stage */
    sm90::producer_registers();
    if (t == 0) {
      sm90::tma_prefetch(&maps.x);
      for (int i = 0; i < p.count; i++) {
        sm90::tma_prefetch(&maps.w[i].codes);
        if constexpr (!W8) /* W8's scales and zeros maps are zero-filled and unused */
          sm90::tma_prefetch(&maps.w[i].scales), sm90::tma_prefetch(&maps.w[i].zeros);
      }
      int g = 0;
      for (int item = blockIdx.x; item < items; item += gridDim.x) {
        int pi, tm, tn;
        locate<BX>(p, item, pi, tm, tn);
        const WeightMaps &wm = maps.w[pi];
        const int group = p.a[pi].group;
        /* whole boxes */
        const uint32_t tx = X_BYTES + (W8 ? KILN_W8_WG_W_BYTES
                                           : KILN_W4_WG_CODE_BYTES + (uint32_t)p.group_rows[pi] * BW * 3);
        for (int kt = 0; kt < nk; kt++, g++) {
          const int s = g % STAGES, k0 = kt * BK;
          sm90::mbar_wait(&empty[s], ((g / STAGES) & 1) ^ 1);
          sm90::mbar_expect_tx(&full[s], tx);
          uint8_t *st = smem + s * STAGE_BYTES;
          sm90::tma_load(st, &maps.x, &full[s], k0, tm * BX, 0, false);
          if constexpr (W8) { /* the int8 weight's [128 columns][64 k] box (codes: its map) */
            sm90::tma_load(st + CODES_AT, &wm.codes, &full[s], k0, tn * BW, 0, false);
          } else {
            const int grow = k0 / group; /* the stage's first group row */
            sm90::tma_load(st + CODES_AT, &wm.codes, &full[s], tn * BW, k0 / 8, 0, false);
            sm90::tma_load(st + CODES_AT + KILN_W4_WG_CODE_BYTES, &wm.scales, &full[s], tn * BW, grow, 0, false);
            sm90::tma_load(st + CODES_AT + KILN_W4_WG_CODE_BYTES + KILN_W4_WG_SCALE_BYTES, &wm.zeros, &full[s],
                           tn * BW, grow, 0, false);
          }
        }
      }
    }
    return;
  }

  sm90::consumer_registers();
  const int cw = wg - 1, warp = t / 32, lane = t % 32;
  uint8_t *epi = reinterpret_cast<uint8_t *>(empty + STAGES) + 1024 * (4 * cw + warp);
  float d[BX / 2]; /* yᵀ: weight columns by rows of x (wgmma's accumulator layout) */
  int g = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    int pi, tm, tn;
    locate<BX>(p, item, pi, tm, tn);
    const kiln_int4_args &a = p.a[pi];
    const int r1 = p.group_rows[pi] > 1 ? 1 : 0;
    const int col = 64 * cw + 16 * warp + lane / 4;
    PairScale<BF16> ps[2][2]; /* the current group rows' terms (stage_frags) */
    /* KILN_W4_WG_SCALE_CACHE: stages per group row (1 at G <= 64, 2 at G = 128, all at G = K),
     * and the stages left before the next group begins */
    const int per_group = r1 || a.group % BK ? (r1 ? 1 : nk) : a.group / BK;
    int group_left = 0;
#pragma unroll
    for (int i = 0; i < BX / 2; i++) d[i] = 0.f;
    /* Stage by stage, the fragments alternate between fa and fb, so that a stage's
     * dequantization writes registers no wgmma in flight reads: one stage of wgmmas runs under
     * the next stage's loads and arithmetic (ptxas serializes every wgmma, C7513, when registers
     * feeding one are written while it may be in flight). */
    auto stage = [&](uint32_t(&f)[4][4], int kt) {
      const int s = g % STAGES;
      const uint8_t *st = smem + s * STAGE_BYTES;
      sm90::mbar_wait(&full[s], (g / STAGES) & 1);
      if constexpr (W8) {
        stage_frags_w8<BF16>(f, st + CODES_AT, col, lane % 4);
      } else {
        const bool fresh = !KILN_W4_WG_SCALE_CACHE || group_left == 0;
        group_left = (fresh ? per_group : group_left) - 1;
        stage_frags<BF16>(f, st + CODES_AT, col, lane % 4, r1, fresh, ps);
      }
      /* every fragment defined before the fence: the compiler may otherwise sink a fragment's
       * arithmetic below the first wgmmas of the batch, which serializes them (C7513) */
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int r = 0; r < 4; r++) asm volatile("" : "+r"(f[i][r])::"memory");
      sm90::wgmma_fence();
#pragma unroll
      for (int i = 0; i < 4; i++) wgmma_rs_m64k16<BX, BF16, 0>(d, f[i], sm90::smem_desc(st + 32 * i, 16, 1024));
      sm90::wgmma_commit();
      /* the stage before this one has retired: its slot goes back to the producer, and its
       * fragments' registers may be written */
      sm90::wgmma_wait<1>();
      if (kt >= 1 && t == 0) sm90::mbar_arrive(&empty[(g - 1) % STAGES]);
      g++;
    };
    uint32_t fa[4][4], fb[4][4];
    /* the pairs, then an odd stage: no path in the control flow writes a buffer whose wgmmas
     * may be in flight, which ptxas would serialize */
    int kt = 0;
    for (; kt + 1 < nk; kt += 2) stage(fa, kt), stage(fb, kt + 1);
    if (kt < nk) stage(fa, kt);
    sm90::wgmma_wait<0>();
    if (t == 0) sm90::mbar_arrive(&empty[(g - 1) % STAGES]);
    /* d is yᵀ's 128 x BX tile in the fragment layout of gemm's epilogue: this warp's rows
     * (weight columns) from n0, its columns the tile's rows of x, y_rs apart. y row-major,
     * 16-byte rows, 16-bit: the epilogue through shared memory (store_yt_rows). */
    const int n0 = tn * BW + 64 * cw + 16 * warp;
    if constexpr (W8) { /* the sums times each column's scale (rows c, c + 8 of the fragment) */
      const int c = n0 + lane / 4;
      const float *sc = p.scale[pi];
      const int64_t ss = p.scale_stride[pi];
      const float s0 = c < a.n ? sc[c * ss] : 0.f, s1 = c + 8 < a.n ? sc[(c + 8) * ss] : 0.f;
#pragma unroll
      for (int j = 0; j < BX / 8; j++) d[4 * j] *= s0, d[4 * j + 1] *= s0, d[4 * j + 2] *= s1, d[4 * j + 3] *= s1;
    }
    if (KILN_W4_WG_STORE_PROBE && a.m >= 0) { /* the probe: no stores (results are garbage) */
    } else if (a.y_dtype != KILN_DT_F32 && a.y_cs == 1 && a.y_rs % 8 == 0 && (uintptr_t)a.y % 16 == 0) {
      char *y = n0 < a.n ? (char *)a.y + ((int64_t)tm * BX * a.y_rs + n0) * 2 : nullptr;
      if (a.y_dtype == KILN_DT_BF16)
        store_yt_rows<true, BX>(d, epi, y, a.y_rs, a.m - tm * BX, lane);
      else
        store_yt_rows<false, BX>(d, epi, y, a.y_rs, a.m - tm * BX, lane);
    } else {
      const StridedC out = {a.n, a.m, a.y_dtype, a.y_cs, a.y_rs}; /* m, n, c_dtype, c_rs, c_cs */
      store_tile<PlainValue>(*reinterpret_cast<float(*)[1][BX / 8][4]>(d), out, a.y, n0, tm * BX, lane);
    }
  }
}
#endif

} /* namespace w4wg */
} /* namespace kiln */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_W4_WG_BODY(bf16, bx, w8) kiln::w4wg::w4_wgmma<bf16, bx, w8>(args, maps);
#else
#define KILN_W4_WG_BODY(bf16, bx, w8) __trap(); /* sm_90a only; the host never launches it elsewhere */
#endif
#define KILN_W4_WG_ENTRY(name, bf16, bx, w8)                                                                     \
  extern "C" __global__ void __launch_bounds__(KILN_W4_WG_THREADS, 1)                                             \
      name(const __grid_constant__ kiln_w4_wgmma_args args, const __grid_constant__ kiln::w4wg::Maps maps) {      \
    KILN_W4_WG_BODY(bf16, bx, w8)                                                                                 \
  }
KILN_W4_WG_ENTRY(kiln_w4a16_wgmma256_f16, false, 256, false)
KILN_W4_WG_ENTRY(kiln_w4a16_wgmma256_bf16, true, 256, false)
KILN_W4_WG_ENTRY(kiln_w4a16_wgmma128_f16, false, 128, false)
KILN_W4_WG_ENTRY(kiln_w4a16_wgmma128_bf16, true, 128, false)
KILN_W4_WG_ENTRY(kiln_w8a16_wgmma256_f16, false, 256, true)
KILN_W4_WG_ENTRY(kiln_w8a16_wgmma256_bf16, true, 256, true)
KILN_W4_WG_ENTRY(kiln_w8a16_wgmma128_f16, false, 128, true)
KILN_W4_WG_ENTRY(kiln_w8a16_wgmma128_bf16, true, 128, true)
