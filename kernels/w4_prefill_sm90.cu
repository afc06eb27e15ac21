/*
 * w4_prefill_sm90.cu — kiln_matmul_int4's PREFILL on Hopper (sm_90a) in one kernel: each stage
 * of the 4-bit weight is dequantized into shared memory and fed to warpgroup MMAs, instead of
 * the whole weight being written out as a 16-bit copy for kiln_matmul (kernels/w4_dequant.cu,
 * which stays for every case this kernel does not take).
 *
 * Why: at M = 1024 x 4096 x 4096 the copy costs a 40 MB pass (~10 µs) before a ~55 µs GEMM, and
 * the GEMM then reads 32 MB of f16 weight where 8 MB of codes would do (PREFILL measured
 * 0.79-0.81x cuBLAS f16 there; docs/performance.md, "PREFILL").
 *
 * Dequantized where, by whom. Each consumer warpgroup turns its 64 columns of a stage's codes
 * into the 16-bit weight in shared memory, as the k-major, 128-byte swizzled operand wgmma
 * reads (4 words a thread: 4 LDS.32, ~16 instructions a word for f16, 4 STS.128), then issues
 * the stage's wgmmas with both operands in shared memory, keeping two stages of them in flight
 * (wait_group 2), so that a stage's dequantization runs under the two before it. A warpgroup
 * issues a stage only once it has dequantized it, so the latency of that work, not the tensor
 * pipe, sets the pace: Nsight Compute (H200, M 1024 x 4096 x 12288) found consumer warps 58 %
 * of their time in it with the loads one word at a time (tensor pipe 63 % busy), and the
 * epilogue's scattered stores 13 %; loads first, the staged epilogue and one LOP3 per nibble
 * pair took 194.5 µs to 158.8 (docs/performance.md, "PREFILL in one kernel": also the rungs not
 * taken, among them the producer warpgroup dequantizing (42 % busy), wgmma's register A operand
 * (ptxas serializes every wgmma, C7513, when registers that feed one are written while another
 * is in flight), no proxy fence, and a deeper TMA ring).
 *
 * Why transposed. The block computes yᵀ = Wᵀ·xᵀ: a tile is 128 weight columns (two consumer
 * warpgroups of 64: wgmma's M) by BX rows of x (wgmma's N: 256, or 128 for small M), so each
 * weight element is dequantized once per 256 rows of x, and x's [BX][64 k] TMA box with the
 * 128-byte swizzle is a k-major B operand as in gemm_sm90.cuh. A code word (kiln.h: 8 k of one
 * column, lowest nibble lowest k) becomes exactly one 16-byte chunk of a k-major row. The value
 * is scale·(q − zero) rounded once to x's dtype, as w4_dequant.cu writes it, so both PREFILL
 * paths multiply the same weights.
 *
 * Block and ring as in gemm_sm90.cuh: a producer warpgroup whose thread 0 issues a stage's four
 * TMA copies (x's box, the codes [8 word rows][128 columns], and the scales and zeros rows of
 * the stage's groups: 2 rows at G = 32, else 1) into a ring of 4 stages, each with room for its
 * dequantized weight (a stage is released two stages after its wgmmas were issued, so the
 * copies run one stage ahead); two consumer warpgroups; a persistent grid walking the tiles in
 * gemm's L2-friendly order; y's tile leaves through 1 KB of shared memory per consumer warp
 * (store_yt_rows) where y is 16-bit and row-major with 16-byte rows, else by gemm's store_tile.
 *
 * Edges: TMA fills x past M or K, codes past N or K / 8, and scales and zeros past N or K / G
 * with zeros, so every padded weight is 0·(0 − 0) = 0 and every padded x is 0; stores are
 * predicated. The host sends here N % 16 == 0 (the maps' 16-byte row strides), 16-byte aligned
 * buffers, row-major x with 16-byte rows, and no act-order (x would need a gather).
 */
#include <cuda.h>

#include "gemm_sm90.cuh" /* mbarriers, TMA, wgmma, tile_coords */
#include "wa16.cuh"      /* and_or: (a & b) | c in one LOP3 (as two operations with both constants
                          * immediate, ptxas emits two: LOP3 takes one immediate) */

namespace kiln {
namespace w4wg {

/* The TMA descriptors (kernel parameter space). */
struct Maps {
  CUtensorMap x, codes, scales, zeros;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int BW = KILN_W4_WG_COLS, BK = 64, GROUP_M = 8;

/* Code word w (8 k of one column, lowest nibble lowest k) as 8 weights scale·(q − zero) in x's
 * 16-bit dtype, k order, 4 registers (one 16-byte chunk of a k-major row). s: the scale's f16
 * bits; z: the zero. Pair j is byte j of w, its nibbles k 2j (low) and 2j + 1 (high).
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
KILN_DEVICE uint4 dequant_word(uint32_t w, uint16_t s, uint32_t z) {
  uint32_t v[4];
  if constexpr (BF16) {
    const float sf = __half2float(__ushort_as_half(s)), cz = 8388608.f + (float)z;
    const float sf16 = sf * 0.0625f, cz16 = 8388608.f + (float)(16 * z);
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const uint32_t y = w >> (8 * j);
      const float lo = __fmul_rn(__fsub_rn(__uint_as_float(wa16::and_or(y, 0xFu, 0x4B000000u)), cz), sf);
      const float hi = __fmul_rn(__fsub_rn(__uint_as_float(wa16::and_or(y, 0xF0u, 0x4B000000u)), cz16), sf16);
      const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
      v[j] = *reinterpret_cast<const uint32_t *>(&p);
    }
  } else {
    const __half2 sz = __halves2half2(__ushort_as_half((uint16_t)(0x6400u + z)),
                                      __ushort_as_half((uint16_t)(0x5400u + (z << 4))));
    const __half2 ss = __halves2half2(__ushort_as_half(s), __ushort_as_half(s));
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const uint32_t m = wa16::and_or(wa16::prmt(w, w, (uint32_t)(j | j << 8)), 0x00F0000Fu, 0x54006400u);
      const __half2 h = __hmul2_rn(__hsub2(*reinterpret_cast<const __half2 *>(&m), sz), ss);
      v[j] = *reinterpret_cast<const uint32_t *>(&h);
    }
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

/* A consumer warpgroup's share of a stage: its 64 columns of the weight, k-major [64][64 k]
 * (128-byte rows, 128-byte swizzle: chunk j of row r at j ^ r % 8, as TMA would store it), the A
 * operand of its wgmmas. Thread t takes row t % 64, words j = t / 64 + 2i: the codes' LDS.32 (a
 * warp reads 32 adjacent words) and the chunks' STS.128 (8 rows of a quarter warp cover every
 * bank once) are conflict-free. r1: the scales box row of k 32..63 (1 at G = 32). */
template <bool BF16>
KILN_DEVICE void dequant_stage(uint8_t *wa, const uint8_t *st, int col, int t, int r1) {
  const uint32_t *codes = reinterpret_cast<const uint32_t *>(st);
  const uint16_t *scales = reinterpret_cast<const uint16_t *>(st + KILN_W4_WG_CODE_BYTES);
  const uint8_t *zeros = st + KILN_W4_WG_CODE_BYTES + KILN_W4_WG_SCALE_BYTES;
  const int r = t % 64, c = col + r;
  /* Every load first: the compiler may not move a load of the stage's codes above a store of
   * the weight (both shared memory, not provably apart), and one word at a time, load, ~20
   * dependent instructions, store, four times over, was ~58 % of a consumer warp's time: the
   * warpgroup issues a stage's wgmmas only after its dequantization, so that chain, not the
   * tensor pipe, set the time of a stage (Nsight Compute, H200: tensor pipe 63 % busy). */
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; i++) w[i] = codes[(t / 64 + 2 * i) * BW + c];
  const uint16_t s0 = scales[c], s1 = scales[r1 * BW + c];
  const uint32_t z0 = zeros[c], z1 = zeros[r1 * BW + c];
  uint4 v[4];
#pragma unroll
  for (int i = 0; i < 4; i++) v[i] = dequant_word<BF16>(w[i], i < 2 ? s0 : s1, i < 2 ? z0 : z1);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int j = t / 64 + 2 * i;
    *reinterpret_cast<uint4 *>(wa + r * 128 + ((j ^ (r % 8)) << 4)) = v[i];
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

template <bool BF16, int BX>
KILN_DEVICE void w4_wgmma(const kiln_w4_wgmma_args &p, const Maps &maps) {
  constexpr int STAGES = KILN_W4_WG_STAGES, STAGE_BYTES = KILN_W4_WG_STAGE_BYTES(BX), X_BYTES = BX * 128;
  constexpr int W_AT = X_BYTES, CODES_AT = W_AT + KILN_W4_WG_W_BYTES; /* in a stage */
  extern __shared__ uint8_t w4wg_raw[];
  /* aligned to 1024 bytes (the swizzle's period) by pointer arithmetic, so that the compiler
   * still sees shared memory (LDS) */
  uint8_t *smem = w4wg_raw + ((1024u - (smem_u32(w4wg_raw) & 1023u)) & 1023u);
  /* full: the copies landed; empty: both consumers are done with the stage */
  uint64_t *full = reinterpret_cast<uint64_t *>(smem + STAGES * STAGE_BYTES), *empty = full + STAGES;
  const kiln_int4_args &a = p.a;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int nk = (a.k + BK - 1) / BK, items = ((a.m + BX - 1) / BX) * ((a.n + BW - 1) / BW);

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
  if (wg == 0) { /* producer: one thread, four copies a stage */
    sm90::producer_registers();
    if (t == 0) {
      sm90::tma_prefetch(&maps.x), sm90::tma_prefetch(&maps.codes);
      sm90::tma_prefetch(&maps.scales), sm90::tma_prefetch(&maps.zeros);
      const uint32_t tx = X_BYTES + KILN_W4_WG_CODE_BYTES + (uint32_t)p.group_rows * BW * 3; /* whole boxes */
      int g = 0;
      for (int item = blockIdx.x; item < items; item += gridDim.x) {
        int tm, tn;
        tile_coords(a.m, a.n, GROUP_M, item, BX, BW, tm, tn);
        for (int kt = 0; kt < nk; kt++, g++) {
          const int s = g % STAGES, k0 = kt * BK, grow = k0 / a.group; /* grow: the stage's first group row */
          sm90::mbar_wait(&empty[s], ((g / STAGES) & 1) ^ 1);
          sm90::mbar_expect_tx(&full[s], tx);
          uint8_t *st = smem + s * STAGE_BYTES;
          sm90::tma_load(st, &maps.x, &full[s], k0, tm * BX, 0, false);
          sm90::tma_load(st + CODES_AT, &maps.codes, &full[s], tn * BW, k0 / 8, 0, false);
          sm90::tma_load(st + CODES_AT + KILN_W4_WG_CODE_BYTES, &maps.scales, &full[s], tn * BW, grow, 0, false);
          sm90::tma_load(st + CODES_AT + KILN_W4_WG_CODE_BYTES + KILN_W4_WG_SCALE_BYTES, &maps.zeros, &full[s],
                         tn * BW, grow, 0, false);
        }
      }
    }
    return;
  }

  sm90::consumer_registers();
  const int cw = wg - 1, warp = t / 32, lane = t % 32;
  /* y row-major, 16-byte rows, 16-bit: the epilogue through shared memory (store_yt_rows) */
  const bool rows16 = a.y_dtype != KILN_DT_F32 && a.y_cs == 1 && a.y_rs % 8 == 0 && (uintptr_t)a.y % 16 == 0;
  uint8_t *epi = reinterpret_cast<uint8_t *>(empty + STAGES) + 1024 * (4 * cw + warp);
  const int r1 = p.group_rows > 1 ? 1 : 0;
  float d[BX / 2]; /* yᵀ: weight columns by rows of x (wgmma's accumulator layout) */
  int g = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    int tm, tn;
    tile_coords(a.m, a.n, GROUP_M, item, BX, BW, tm, tn);
#pragma unroll
    for (int i = 0; i < BX / 2; i++) d[i] = 0.f;
    for (int kt = 0; kt < nk; kt++, g++) {
      const int s = g % STAGES;
      uint8_t *st = smem + s * STAGE_BYTES;
      sm90::mbar_wait(&full[s], (g / STAGES) & 1);
      /* this warpgroup's 64 columns of the stage's weight; the slot's last reader, stage
       * g − STAGES's wgmmas, retired before the slot was released and refilled */
      uint8_t *w = st + W_AT + cw * (KILN_W4_WG_W_BYTES / 2);
      dequant_stage<BF16>(w, st + CODES_AT, 64 * cw, t, r1);
      /* the generic-proxy stores made visible to wgmma's (async proxy) reads, then every thread
       * of the warpgroup done */
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      sm90::named_sync(1 + cw, 128);
      sm90::wgmma_fence();
#pragma unroll
      for (int i = 0; i < 4; i++)
        wgmma_m64k16<BX, BF16, 0, 0>(d, sm90::smem_desc(w + 32 * i, 16, 1024), sm90::smem_desc(st + 32 * i, 16, 1024));
      sm90::wgmma_commit();
      /* two stages of wgmmas stay in flight while the next stage is dequantized; stage g − 2
       * has retired: its slot goes back to the producer */
      sm90::wgmma_wait<2>();
      if (kt >= 2 && t == 0) sm90::mbar_arrive(&empty[(g - 2) % STAGES]);
    }
    sm90::wgmma_wait<0>();
    if (t == 0)
      for (int kt = nk > 2 ? nk - 2 : 0; kt < nk; kt++) sm90::mbar_arrive(&empty[(g - nk + kt) % STAGES]);
    /* d is yᵀ's 128 x BX tile in the fragment layout of gemm's epilogue: this warp's rows
     * (weight columns) from n0, its columns the tile's rows of x, y_rs apart */
    const int n0 = tn * BW + 64 * cw + 16 * warp;
    if (rows16) {
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
#define KILN_W4_WG_BODY(bf16, bx) kiln::w4wg::w4_wgmma<bf16, bx>(args, maps);
#else
#define KILN_W4_WG_BODY(bf16, bx) __trap(); /* sm_90a only; the host never launches it elsewhere */
#endif
#define KILN_W4_WG_ENTRY(name, bf16, bx)                                                                         \
  extern "C" __global__ void __launch_bounds__(KILN_W4_WG_THREADS, 1)                                             \
      name(const __grid_constant__ kiln_w4_wgmma_args args, const __grid_constant__ kiln::w4wg::Maps maps) {      \
    KILN_W4_WG_BODY(bf16, bx)                                                                                     \
  }
KILN_W4_WG_ENTRY(kiln_w4a16_wgmma256_f16, false, 256)
KILN_W4_WG_ENTRY(kiln_w4a16_wgmma256_bf16, true, 256)
KILN_W4_WG_ENTRY(kiln_w4a16_wgmma128_f16, false, 128)
KILN_W4_WG_ENTRY(kiln_w4a16_wgmma128_bf16, true, 128)
