/*
 * wa16_decode_sm90.cu — kiln_matmul_int4 and kiln_qkv_project_int4 for small M (decode, M <= 8)
 * on Hopper (sm_90a): the 4-bit weight streamed through shared memory by TMA.
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
 * Edges come from TMA: columns past N, rows of codes past K / 8, group rows past K / G and x
 * beyond K or M are filled with zeros, and a zero x times any finite weight adds nothing. The
 * host sends here only what TMA can address (N % 16 == 0, K % 256 == 0, 16-byte aligned buffers
 * and x rows, no act-order); everything else runs the sm_80 kernel.
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

/* The consumers' loop: unit u (K from 256 u; stage u / UNITS, quarter q = u % UNITS of it) goes
 * to warp u % consumers. A piece (the chunks that share one group row) is 1 << PS chunks: 1, 2,
 * 4 for G = 32, 64, 128, the whole unit (PS = 3) otherwise. Compile-time, so the loop holds no
 * group tests. acc: the warp's [8 rows of x][32 columns] in mma.sync's D layout (store_block). */
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
  for (int u = u0; u < stages * UNITS; u += consumers) {
    const int s = gs0 + u / UNITS, q = u % UNITS, slot = s % ring; /* s: the block's stage count */
    sm90::mbar_wait(&full[slot], (s / ring) & 1);
    if (KILN_WA16_TMA_PROBE) {
      __syncwarp();
      if (lane == 0) sm90::mbar_arrive(&empty[slot]);
      continue;
    }
    const uint8_t *st = slots + slot * slot_bytes;
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
          mma<BF16>(part[t], af, b0, b1);
        }
      }
      if (((j + 1) & PMASK) == 0) /* the piece ends: its sums times its scales */
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
          for (int e = 0; e < 4; e++) acc[0][t][e] += part[t][e] * f.scale(2 * t + e / 2);
    }
    __syncwarp(); /* every lane's reads of the unit are done (their values fed the MMAs) */
    if (lane == 0) sm90::mbar_arrive(&empty[slot]);
  }
}

template <bool BF16>
KILN_DEVICE void tma_decode(const kiln_wa16_tma_args &ta, const CUtensorMap *xmap, const TmaMaps &maps) {
  extern __shared__ uint8_t wa16_tma_raw[];
  /* aligned by pointer arithmetic, not through an integer: the compiler must still see shared
   * memory (LDS with 32-bit addresses, not generic loads) */
  uint8_t *smem = wa16_tma_raw + ((128u - (smem_u32(wa16_tma_raw) & 127u)) & 127u);
  const kiln_qkv_args &a = ta.a;
  const int ring = ta.ring, slot_bytes = KILN_WA16_TMA_SLOT_BYTES(ta.x_rows), stages = (a.k + SK - 1) / SK;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, consumers = blockDim.x / 32 - 1;
  uint64_t *full = reinterpret_cast<uint64_t *>(smem), *empty = full + ring;
  /* [2][consumers][8 x 32] floats: the tiles' reductions, by tile parity; then the ring */
  float *red = reinterpret_cast<float *>(smem + KILN_WA16_TMA_BAR_BYTES);
  uint8_t *slots = smem + KILN_WA16_TMA_BAR_BYTES + KILN_WA16_TMA_RED_BYTES(consumers);

  if (threadIdx.x == 0) sm90::ring_init(full, empty, ring, UNITS); /* empty: one arrival per unit */
  __syncthreads();

  /* Persistent: block b streams tiles b, b + gridDim.x, ... through one ring, so the copies of a
   * tile's first stages overlap the consumers' last units of the one before and each block pays
   * its ramp once. Stages are counted over the block's whole stream (slot and parity). */
  if (warp == consumers) { /* the producer: one thread, four copies a stage */
    if (lane == 0) {
      int gs = 0;
      for (int tile = blockIdx.x; tile < ta.tiles; tile += gridDim.x) {
        int blk = tile;
        const int pi = find_proj_index(a, blk), base = blk * COLS, gr = ta.group_rows[pi];
        const int group = a.proj[pi].group;
        const uint32_t tx = CODE_BYTES + gr * COLS * 3 + ta.x_rows * SK * 2; /* whole boxes, fill included */
        for (int s = 0; s < stages; s++, gs++) {
          const int slot = gs % ring;
          if (gs >= ring) sm90::mbar_wait(&empty[slot], (gs / ring - 1) & 1);
          uint8_t *st = slots + slot * slot_bytes;
          const int grow = (int)((int64_t)s * SK / group); /* the stage's first group row */
          sm90::mbar_expect_tx(&full[slot], tx);
          sm90::tma_load(st, &maps.codes[pi], &full[slot], base, s * (SK / 8), 0, false);
          sm90::tma_load(st + CODE_BYTES, &maps.scales[pi], &full[slot], base, grow, 0, false);
          sm90::tma_load(st + CODE_BYTES + SCALE_BYTES, &maps.zeros[pi], &full[slot], base, grow, 0, false);
          /* x as [M][K / 256][256]: the stage's UNITS rows of 256 k of every row of x */
          sm90::tma_load(st + X_AT, xmap, &full[slot], 0, s * UNITS, 0, true);
        }
      }
    }
    return;
  }

  const auto consumers_sync = [consumers] { sm90::named_sync(1, consumers * 32); };
  const int units = stages * UNITS;
  int it = 0; /* the block's tiles so far */
  for (int tile = blockIdx.x; tile < ta.tiles; tile += gridDim.x, it++) {
    int blk = tile;
    const int pi = find_proj_index(a, blk), base = blk * COLS, gr = ta.group_rows[pi];
    const kiln_qkv_proj &p = a.proj[pi];
    /* units are numbered over the block's stream, unit v to warp v % consumers (the ring rule in
     * wa16_gpu.c keeps each slot's quarter with one warp); this tile's first unit is it · units */
    const int u0 = (int)((warp + consumers - (int)(((int64_t)it * units) % consumers)) % consumers);
    float acc[1][2][4] = {}; /* [8 rows of x][tile][element] */
    const int g = p.group;
#define KILN_WA16_CONSUME(PS)                                                                                     \
  consume<BF16, PS>(acc, slots, full, empty, ring, slot_bytes, stages, ta.x_rows, g, gr, u0, it * stages, consumers)
    if (g == 32)
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
    store_block<false>(acc, red + (it & 1) * consumers * 8 * 32, warp, consumers, threadIdx.x, consumers * 32,
                       consumers_sync, a, p, 0, base, false);
  }
}
#endif

} /* namespace wa16 */
} /* namespace kiln */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_WA16_TMA_BODY(bf16) kiln::wa16::tma_decode<bf16>(args, &xmap, maps);
#else
#define KILN_WA16_TMA_BODY(bf16) /* sm_90a only; the host never launches it elsewhere */
#endif
/* 96 registers at most (kiln_abi.h): two blocks per SM for wide weights. */
#define KILN_WA16_TMA_ENTRY(name, bf16)                                                                            \
  extern "C" __global__ void __maxnreg__(KILN_WA16_TMA_MAX_REGS)                                                  \
      name(const __grid_constant__ kiln_wa16_tma_args args, const __grid_constant__ CUtensorMap xmap,              \
           const __grid_constant__ kiln::wa16::TmaMaps maps) {                                                      \
    KILN_WA16_TMA_BODY(bf16)                                                                                       \
  }
KILN_WA16_TMA_ENTRY(kiln_w4a16_tma_f16, false)
KILN_WA16_TMA_ENTRY(kiln_w4a16_tma_bf16, true)
