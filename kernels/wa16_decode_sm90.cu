/*
 * wa16_decode_sm90.cu — kiln_matmul_int4 and kiln_qkv_project_int4 for small M (decode, M <= 8),
 * and kiln_qkv_project_int8 with column-major weights (M <= 16), on Hopper (sm_90a): the 4-bit or
 * 8-bit weight streamed through shared memory by TMA.
 *
 * Why not the sm_80 kernel (wa16_decode_sm80.cu). Decode is a stream: every weight byte is read
 * once, and the copy bandwidth (~4.2 TB/s, ~32 GB/s per SM) is only reached with ~40-60 KB in
 * flight per SM (Little's law at ~1.5 µs of loaded DRAM latency). The sm_80 kernel keeps its
 * loads in a ring of 4 register slots per warp: 126 registers, 16 warps per SM, ~32 KB in
 * flight, and a warp at K = 4096 streams only 16 chunks, a quarter of them ramp and drain. It
 * reached 60-64 % of the copy bandwidth on the large shapes and 27 % at 4096 x 4096 (v9,
 * docs/performance.md); a deeper ring of small cp.async copies (v10) and L2 prefetches (v11)
 * both lost, because they add requests instead of bytes per request.
 *
 * v13 (this file; v12 is scripts/rungs/wa16-tma-ring.patch). One thread issues four copies per
 * stage of 1024 k: a [128 word rows][32 columns] box of codes (16 KB), the stage's scales and
 * zeros (all its group rows: 8 at G = 128) and x's [M][4][256] box, into a slot of a ring in
 * shared memory of up to ~200 KB, so bytes in flight are bounded by shared memory, not
 * registers, and there are four TMA operations per ~19 KB. v12's probes (same four copies per
 * 256 k) found the copy engine's cost per operation to be the limit: the codes' copy alone, one
 * per 4 KB, streamed at 79-94 % of the copy bandwidth (docs/performance.md, "v12").
 *
 * Block: `consumers` warps (8 or 16) and one producer warp. A stage is 4 units of 256 k; unit u
 * (stage u / 4, quarter u % 4) goes to consumer warp u % consumers (a ring that wraps holds a
 * multiple of consumers / 4 slots, so a slot's quarter always serves the same warp, in order),
 * which waits on the slot's `full` mbarrier, runs its 8 chunks of 32 k through the same
 * fragments and mma.sync as the sm_80 kernel (W4Frag in wa16.cuh: the weight is the MMA's A, x
 * its B, dequantization exact), and arrives on `empty` (4 arrivals free a slot). The warps'
 * partial tiles are added in warp order at the end (store_block: deterministic, no atomics).
 * Blocks are persistent (v15): block b streams tiles b, b + gridDim.x, ... through its one ring,
 * so the next tile's copies overlap the last units' compute and the ramp is paid once a block.
 * mma.sync, not wgmma: M <= 8 rows of x would be a 64-row wgmma tile seven-eighths empty.
 *
 * Groups. With G in {32, 64, 128} a stage holds 32, 16 or 8 whole groups (scales and zeros boxes
 * of that many rows); with one group per column (G = K) the box is 1024 / K rows when K divides
 * 1024 (row 0 the group, the others past K) or the group's one row, loaded with every stage, and
 * each unit is a "piece" of the group: scale · (p1 + p2) = scale · p1 + scale · p2, so a warp
 * applies the scale to its own units' partial sums.
 *
 * Measured (H200, v9 in the same run; docs/performance.md, "v13"): at M = 1, 24 % faster than
 * v9 at K x N = 28672 x 8192 (36.6 against 45.9 µs, 79-80 % of the copy bandwidth), 2-8 %
 * at 8192 x 28672, within noise (±4 %) at K = 4096; at M = 16 slower on every shape (8 consumer
 * warps of 105-123 registers in one block per SM), so M 9..16 stays on the sm_80 kernel and
 * this one is built for 8 rows of x. The copies alone (TMA_PROBE) stream 12-25 % faster than
 * the kernel on the K = 4096 and 8192 shapes: the consumers' dequantization is the next limit.
 * Split-K over a cluster of 2-4 blocks, to fill the last wave of 384 or 896 tiles, lost
 * everywhere (v14, scripts/rungs/wa16-split-k.patch): more, shorter blocks pay the ramp more often.
 * Persistent blocks (v15, "v15") gained 1.08-1.10x at 4096 x 12288 and 1.13x at 8192 x 28672
 * (40.7 µs, 72 % of the copy bandwidth) over v13, and stayed even where a grid is one wave.
 *
 * int8 (W8A16, a Linear weight [N, K] seen as [K, N]: each column's K bytes contiguous). One
 * copy a stage brings 1024 k of the tile's columns as 128-byte rows, 128-byte swizzled, which
 * lanes read without bank conflicts (consume_w8); the fragments are the sm_80 kernel's W8C. The
 * tile is 32 columns, or 16 where that spreads the work more evenly over the SMs (M <= 4, K >=
 * 8192: at 8192 x (8192 + 1024 + 1024), 640 tiles of 16 put at most 80 columns on an SM, 320
 * of 32 up to 96). M 9..16 runs as two tiles of 8 rows of x per column tile, adjacent in the
 * blocks' order, so the second pass mostly reads the weight from L2 (int4's M 9..16 stays on
 * the sm_80 kernel, which this lost to). Measured (docs/performance.md, "W8A16 on sm_90a"): the
 * fused QKV at M = 1 1.58-1.71x cuBLAS f16 (1.6-1.9x the sm_80 kernel), 53-73 % of the copy
 * bandwidth (with the dependent launch below); the copies alone run 7-15 % faster.
 *
 * Edges come from TMA: columns past N, rows of codes past K / 8, group rows past K / G and x
 * beyond K or M are filled with zeros, and a zero x times any finite weight adds nothing. The
 * host sends here only what TMA can address (int4: N % 16 == 0, int8: N % 4 == 0 and 16-byte
 * columns; K % 256 == 0, 16-byte aligned buffers and x rows, no act-order); everything else runs
 * the sm_80 kernel.
 */
#include <cuda.h>

#include "gemm_sm90.cuh" /* mbarriers and TMA copies (sm90::) */
#include "wa16.cuh"

namespace kiln {
namespace wa16 {

/* The TMA descriptors of the three projections' buffers (kernel parameter space). */
struct TmaMaps {
  CUtensorMap codes[3], scales[3], zeros[3];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr int SK = KILN_WA16_TMA_STAGE_K, UK = KILN_WA16_TMA_UNIT_K, UNITS = KILN_WA16_TMA_UNITS;
constexpr int CHUNKS = UK / 32; /* of a unit; 32 k per chunk: 4 word rows */
constexpr int CODE_BYTES = KILN_WA16_TMA_CODE_BYTES, SCALE_BYTES = KILN_WA16_TMA_SCALE_BYTES;
constexpr int X_AT = KILN_WA16_TMA_X_AT;

/* Tuning probe (KILN_TUNE_DEFS): consumers only wait for each unit and release it, so a run times
 * what TMA delivers alone (results are garbage). */
#ifndef KILN_WA16_TMA_PROBE
#define KILN_WA16_TMA_PROBE 0
#endif

KILN_DEVICE uint4 lds128(const uint8_t *p) { return *reinterpret_cast<const uint4 *>(p); }

/* A consumer warp's walk over its units: unit u (K from 256 u; stage u / UNITS of the block's
 * stream from stage gs0, quarter q = u % UNITS of it) goes to warp u % consumers, which waits for
 * its slot, runs body(the slot's bytes, q) (not in the probe) and releases it (UNITS releases
 * free a slot). */
template <class Body>
KILN_DEVICE void for_units(const uint8_t *slots, uint64_t *full, uint64_t *empty, int ring, int slot_bytes,
                           int stages, int u0, int gs0, int consumers, Body body) {
  for (int u = u0; u < stages * UNITS; u += consumers) {
    const int s = gs0 + u / UNITS, slot = s % ring; /* s: the block's stage count */
    sm90::mbar_wait(&full[slot], (s / ring) & 1);
    if (!KILN_WA16_TMA_PROBE) body(slots + slot * slot_bytes, u % UNITS);
    __syncwarp(); /* every lane's reads of the unit are done (their values fed the MMAs) */
    if (threadIdx.x % 32 == 0) sm90::mbar_arrive(&empty[slot]);
  }
}

/* The consumers' loop (for_units), int4. A piece (the chunks that share one group row) is
 * 1 << PS chunks: 1, 2, 4 for G = 32, 64, 128, the whole unit (PS = 3) otherwise. Compile-time,
 * so the loop holds no group tests. acc: the warp's [8 rows of x][32 columns] in mma.sync's D
 * layout (store_block). */
template <bool BF16, int PS>
KILN_DEVICE void consume(float (&acc)[1][2][4], const uint8_t *slots, uint64_t *full, uint64_t *empty, int ring,
                         int slot_bytes, int stages, int x_rows, int group, int group_rows, int u0, int gs0,
                         int consumers) {
  constexpr unsigned PMASK = (1u << PS) - 1u;
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  /* the x row of this lane's B fragments ([x_rows][UNITS][UK] in the slot); rows past M only feed
   * y rows that are never stored, so they re-read the box's last row */
  const int x_at = X_AT + min(g, x_rows - 1) * SK * 2 + 16 * c;
  W4Frag<BF16> f;
  /* the piece's sums (two independent MMA chains per tile, one per k16 step, measured no gain in
   * v12 and cost 8 registers) */
  float part[2][4];
  for_units(slots, full, empty, ring, slot_bytes, stages, u0, gs0, consumers, [&](const uint8_t *st, int q) {
    const uint8_t *codes = st + q * (UK / 8) * COLS * 4; /* the unit's 32 word rows */
    const uint8_t *xq = st + q * UK * 2 + x_at;          /* the unit's x, this lane's row */
    const int grow = group_rows == 1 ? 0 : q * UK / group; /* the unit's first group row */
    /* all of the unit's codes first (32 registers): the shared-memory latency once a unit, not
     * once a chunk. Word row 4j + c of columns 4g .. 4g+3: a warp reads whole 128-byte rows. */
    uint4 w[CHUNKS];
#pragma unroll
    for (int j = 0; j < CHUNKS; j++) w[j] = lds128(codes + (4 * j + c) * COLS * 4 + 16 * g);
#pragma unroll
    for (int j = 0; j < CHUNKS; j++) {
      if ((j & PMASK) == 0) {
        const int gr = grow + (PS < 3 ? j >> PS : 0);
        const uint32_t z = *reinterpret_cast<const uint32_t *>(st + CODE_BYTES + SCALE_BYTES + gr * COLS + 4 * g);
        f.begin_group(z, *reinterpret_cast<const uint2 *>(st + CODE_BYTES + gr * COLS * 2 + 8 * g));
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
          for (int e = 0; e < 4; e++) part[t][e] = 0.f;
      }
      const uint4 x4 = lds128(xq + 64 * j); /* k 32j + 8c .. +7 of the unit */
      const uint32_t xw[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
      for (int k16 = 0; k16 < 2; k16++) {
        uint32_t b0, b1;
        W4Frag<BF16>::b_frag(b0, b1, xw, k16);
#pragma unroll
        for (int t = 0; t < 2; t++) {
          uint32_t af[4];
          f.a_frag(af, w[j], t, k16);
          mma_16816<BF16>(part[t], af, {b0, b1});
        }
      }
      if (((j + 1) & PMASK) == 0) /* the piece ends: its sums times its scales */
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
          for (int e = 0; e < 4; e++) acc[0][t][e] += part[t][e] * f.scale(2 * t + e / 2);
    }
  });
}

/* int8 weights (column-major: each column's k contiguous), the consumers' loop, for tiles of
 * 16·T columns (T MMA tiles: 2, or 1 where 16-column tiles share a grid out more evenly). Unit u
 * is two blocks of 128 k, each 16·T rows of 128 bytes: column 2T·g + i of the tile is row 8i + g
 * (the host's 4-D map), and TMA's 128-byte swizzle stores the row's 16-byte chunk j at
 * j ^ (row % 8) = j ^ g. Lane (g, c) takes chunks 2c and 2c + 1 (k 32c .. 32c + 31 of the block)
 * of its columns 2T·g .. +2T-1, so the 8 lanes of a quarter warp (g = 2m, 2m + 1; c = 0..3) read
 * 8 distinct chunks, one each bank quad: the weight's LDS.128 are conflict-free (without the
 * swizzle, rows 128 bytes apart would put all 8 g on one bank quad). Each 8 k of a chunk is one
 * W8C chunk of wa16.cuh (bytes of word s are step s's slots; MMA tile t's rows g, g + 8 are the
 * lane's columns 2t, 2t + 1), x the same 8 k of row g. */
template <bool BF16, int T>
KILN_DEVICE void consume_w8(float (&acc)[1][T][4], const uint8_t *slots, uint64_t *full, uint64_t *empty, int ring,
                            int slot_bytes, int stages, int x_rows, int u0, int gs0, int consumers) {
  using W = W8C<BF16>;
  constexpr int ROWS = 16 * T; /* of 128 bytes, per 128 k */
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int x_at = ROWS * SK + min(g, x_rows - 1) * SK * 2; /* rows past M: as in consume */
  for_units(slots, full, empty, ring, slot_bytes, stages, u0, gs0, consumers, [&](const uint8_t *st, int q) {
#pragma unroll
    for (int b = 0; b < UK / 128; b++) {
      const uint8_t *rows = st + (q * (UK / 128) + b) * ROWS * 128 + g * 128; /* row 8i + g at + i·1024 */
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int j = 2 * c + h; /* k 16j .. 16j + 15 of the block */
        uint4 w[2 * T];
#pragma unroll
        for (int i = 0; i < 2 * T; i++) w[i] = lds128(rows + i * 1024 + ((j ^ g) << 4));
        const uint8_t *xp = st + x_at + (q * UK + b * 128 + 16 * j) * 2;
#pragma unroll
        for (int e = 0; e < 2; e++) { /* k 16j + 8e .. +7: one W8C chunk */
          const uint4 x4 = lds128(xp + 16 * e);
          const uint32_t xw[4] = {x4.x, x4.y, x4.z, x4.w};
          typename W::Codes cd;
#pragma unroll
          for (int i = 0; i < 2 * T; i++)
            cd.w[i] = e ? make_uint2(flip8(w[i].z), flip8(w[i].w)) : make_uint2(flip8(w[i].x), flip8(w[i].y));
#pragma unroll
          for (int k16 = 0; k16 < 2; k16++) {
            uint32_t b0, b1;
            W::b_frag(b0, b1, xw, k16);
#pragma unroll
            for (int t = 0; t < T; t++) {
              uint32_t af[4];
              W::a_frag(af, cd, t, k16);
              mma_16816<BF16>(acc[0][t], af, {b0, b1});
            }
          }
        }
      }
    }
  });
}

/* I8: int8 column-major weights in tiles of 16·T columns (one copy of the weight a stage,
 * consume_w8, the column scales applied in store_block); else int4 in tiles of 32 (T = 2; codes,
 * scales, zeros; consume). */
template <bool I8, bool BF16, int T>
KILN_DEVICE void tma_decode(const kiln_wa16_tma_args &ta, const CUtensorMap *xmap, const TmaMaps &maps) {
  static_assert(I8 || T == 2, "int4 tiles are 32 columns");
  constexpr int CW = 16 * T, W_BYTES = I8 ? KILN_WA8_TMA_CODE_BYTES(T) : KILN_WA16_TMA_X_AT; /* x after W_BYTES */
  extern __shared__ uint8_t wa16_tma_raw[];
  /* aligned (to 1024 bytes: the 128-byte swizzle's period) by pointer arithmetic, not through an
   * integer: the compiler must still see shared memory (LDS with 32-bit addresses) */
  uint8_t *smem = wa16_tma_raw + ((1024u - (smem_u32(wa16_tma_raw) & 1023u)) & 1023u);
  const kiln_qkv_args &a = ta.a;
  const int ring = ta.ring, stages = (a.k + SK - 1) / SK;
  /* the host's formulas (wa16_gpu.c sizes the ring with them) */
  const int slot_bytes = I8 ? KILN_WA8_TMA_SLOT_BYTES(ta.x_rows, T) : KILN_WA16_TMA_SLOT_BYTES(ta.x_rows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, consumers = blockDim.x / 32 - 1;
  uint64_t *full = reinterpret_cast<uint64_t *>(smem), *empty = full + ring;
  /* [2][consumers][8 x 32] floats: the tiles' reductions, by tile parity; then the ring */
  float *red = reinterpret_cast<float *>(smem + KILN_WA16_TMA_BAR_BYTES);
  uint8_t *slots = smem + KILN_WA16_TMA_RING_AT(consumers);

  /* Launched as a programmatic dependent (wa16_gpu.c): the next kernel may start launching now,
   * taking SMs as this grid's blocks leave them (this grid is one resident wave, so it cannot
   * crowd out blocks of ours); this block's prologue overlapped the previous kernel's end, and
   * nothing here touches global memory before that kernel has ended. (Without the launch
   * attribute both are no-ops.) */
  if (threadIdx.x == 0) {
    sm90::ring_init(full, empty, ring, UNITS); /* empty: one arrival per unit */
    sm90::pdl_launch_dependents();
  }
  if (warp == consumers && lane == 0) { /* the descriptors' first fetch (kernel parameters: no wait) */
    sm90::tma_prefetch(xmap);
    for (int i = 0; i < 3; i++) {
      sm90::tma_prefetch(&maps.codes[i]);
      if (!I8) sm90::tma_prefetch(&maps.scales[i]), sm90::tma_prefetch(&maps.zeros[i]);
    }
  }
  __syncthreads();
  sm90::pdl_wait();

  /* Persistent: block b streams tiles b, b + gridDim.x, ... through one ring, so the copies of a
   * tile's first stages overlap the consumers' last units of the one before and each block pays
   * its ramp once. Stages are counted over the block's whole stream (slot and parity). */
  if (warp == consumers) { /* the producer: one thread, four (int8: two) copies a stage */
    if (lane == 0) {
      int gs = 0;
      for (int tile = blockIdx.x; tile < ta.tiles; tile += gridDim.x) {
        int blk = tile / ta.row_tiles;
        const int m0 = 8 * (tile % ta.row_tiles); /* x's rows m0 .. m0 + 7 */
        const int pi = find_proj_index(a, blk, CW), base = blk * CW, gr = ta.group_rows[pi];
        const int group = a.proj[pi].group;
        /* whole boxes, fill included */
        const uint32_t tx = (I8 ? W_BYTES : CODE_BYTES + gr * COLS * 3) + ta.x_rows * SK * 2;
        for (int s = 0; s < stages; s++, gs++) {
          const int slot = gs % ring;
          if (gs >= ring) sm90::mbar_wait(&empty[slot], (gs / ring - 1) & 1);
          uint8_t *st = slots + slot * slot_bytes;
          sm90::mbar_expect_tx(&full[slot], tx);
          if (I8) { /* the weight as [K / 128][2T][N / 2T][128] (wa16_gpu.c): row 8l + h is column 2T·h + l */
            sm90::tma_load_4d(st, &maps.codes[pi], &full[slot], 0, base / (2 * T), 0, s * (SK / 128));
          } else {
            const int grow = (int)((int64_t)s * SK / group); /* the stage's first group row */
            sm90::tma_load(st, &maps.codes[pi], &full[slot], base, s * (SK / 8), 0, false);
            sm90::tma_load(st + CODE_BYTES, &maps.scales[pi], &full[slot], base, grow, 0, false);
            sm90::tma_load(st + CODE_BYTES + SCALE_BYTES, &maps.zeros[pi], &full[slot], base, grow, 0, false);
          }
          /* x as [M][K / 256][256]: the stage's UNITS rows of 256 k of every row of x */
          sm90::tma_load(st + W_BYTES, xmap, &full[slot], 0, s * UNITS, m0, true);
        }
      }
    }
    return;
  }

  const auto consumers_sync = [consumers] { sm90::named_sync(1, consumers * 32); };
  const int units = stages * UNITS;
  int it = 0; /* the block's tiles so far */
  for (int tile = blockIdx.x; tile < ta.tiles; tile += gridDim.x, it++) {
    int blk = tile / ta.row_tiles;
    const int m0 = 8 * (tile % ta.row_tiles);
    const int pi = find_proj_index(a, blk, CW), base = blk * CW, gr = ta.group_rows[pi];
    const kiln_qkv_proj &p = a.proj[pi];
    /* units are numbered over the block's stream, unit v to warp v % consumers (the ring rule in
     * wa16_gpu.c keeps each slot's quarter with one warp); this tile's first unit is it · units */
    const int u0 = (int)((warp + consumers - (int)(((int64_t)it * units) % consumers)) % consumers);
    float acc[1][T][4] = {}; /* [8 rows of x][MMA tile][element] */
    const int g = p.group;
#define KILN_WA16_CONSUME(PS)                                                                                     \
  consume<BF16, PS>(acc, slots, full, empty, ring, slot_bytes, stages, ta.x_rows, g, gr, u0, it * stages, consumers)
    if constexpr (I8)
      consume_w8<BF16, T>(acc, slots, full, empty, ring, slot_bytes, stages, ta.x_rows, u0, it * stages, consumers);
    else if (g == 32)
      KILN_WA16_CONSUME(0);
    else if (g == 64)
      KILN_WA16_CONSUME(1);
    else if (g == 128 && g < a.k)
      KILN_WA16_CONSUME(2);
    else /* G = K: one group; each unit is a piece of it */
      KILN_WA16_CONSUME(3);
#undef KILN_WA16_CONSUME
    /* the reduction buffer of this tile's parity: every thread that read it for tile it - 2 has
     * since reached tile it - 1's barrier (in store_block), which everyone here has passed */
    store_block<false, T>(acc, red + (it & 1) * consumers * 8 * 32, warp, consumers, threadIdx.x, consumers * 32,
                          consumers_sync, a, p, m0, base, I8);
  }
}
#endif

} /* namespace wa16 */
} /* namespace kiln */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_WA16_TMA_BODY(i8, bf16, t) kiln::wa16::tma_decode<i8, bf16, t>(args, &xmap, maps);
#else
#define KILN_WA16_TMA_BODY(i8, bf16, t) /* sm_90a only; the host never launches it elsewhere */
#endif
/* 96 registers at most (kiln_abi.h): two blocks per SM for wide weights. */
#define KILN_WA16_TMA_ENTRY(name, i8, bf16, t)                                                                     \
  extern "C" __global__ void __maxnreg__(KILN_WA16_TMA_MAX_REGS)                                                  \
      name(const __grid_constant__ kiln_wa16_tma_args args, const __grid_constant__ CUtensorMap xmap,              \
           const __grid_constant__ kiln::wa16::TmaMaps maps) {                                                      \
    KILN_WA16_TMA_BODY(i8, bf16, t)                                                                                \
  }
KILN_WA16_TMA_ENTRY(kiln_w4a16_tma_f16, false, false, 2)
KILN_WA16_TMA_ENTRY(kiln_w4a16_tma_bf16, false, true, 2)
KILN_WA16_TMA_ENTRY(kiln_w8a16_tma_f16, true, false, 2)
KILN_WA16_TMA_ENTRY(kiln_w8a16_tma_bf16, true, true, 2)
KILN_WA16_TMA_ENTRY(kiln_w8a16_tma_f16_n16, true, false, 1)
KILN_WA16_TMA_ENTRY(kiln_w8a16_tma_bf16_n16, true, true, 1)
