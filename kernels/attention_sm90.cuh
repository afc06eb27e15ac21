/*
 * attention_sm90.cuh — what the sm_90a attention kernels share (attention_sm90.cu forward,
 * attention_bwd_sm90.cu backward): [rows][DP] tiles of the [B, H, S, D] operands in shared
 * memory as TMA leaves them, their wgmma descriptors, and the producer thread's loop.
 *
 * A tile of ROWS rows is DP / 64 boxes of [ROWS][64 columns] side by side, each ROWS x 128 bytes
 * in the 128-byte swizzle (the layout wgmma reads; rows past S and columns past D are TMA's
 * zero fill). A tile is read two ways:
 *   k-major (the reduction runs along D: Q·Kᵀ, dO·Vᵀ, K·Qᵀ, V·dOᵀ): k16 step ks is 32 bytes
 *     along the 128-byte row of box ks / 4; a warpgroup's 64 rows start 64·128 bytes in;
 *   n-major (the reduction runs along the rows: P·V, dS·K, Pᵀ·dO, dSᵀ·Q): k16 step kk is 16 rows
 *     (2048 bytes), LBO the distance between boxes, read with the transpose flag.
 *
 * Every kernel loads two "fixed" tiles once (Q (and dO) for the forward and dQ, K and V for
 * dK/dV) and then walks a sequence of steps, each bringing two ring tiles (K and V, or Q and dO)
 * into a slot of a STAGES-deep ring; the consumers release a slot on `empty` when their MMAs on
 * it retired.
 */
#pragma once
#include "attention.cuh"
#include "gemm_sm90.cuh"

namespace kiln {
namespace attn {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Loads the [ROWS][DP] tile starting at sequence row `row` of head h, batch b onto bar. */
template <int DP, int ROWS>
KILN_DEVICE void load_tile(uint8_t *dst, const CUtensorMap *map, uint64_t *bar, int row, int h, int b) {
#pragma unroll
  for (int c = 0; c < DP / 64; c++) sm90::tma_load_4d(dst + c * ROWS * 128, map, bar, 64 * c, row, h, b);
}

/* k16 step ks of a k-major read of a tile of ROWS rows (rows: the tile, or a warpgroup's part). */
template <int ROWS>
KILN_DEVICE uint64_t kmajor_desc(const uint8_t *rows, int ks) {
  return sm90::smem_desc(rows + (ks / 4) * ROWS * 128 + 32 * (ks % 4), 16, 1024);
}

/* k16 step kk (rows 16 kk ..) of an n-major read of a tile of ROWS rows. */
template <int ROWS>
KILN_DEVICE uint64_t nmajor_desc(const uint8_t *tile, int kk) {
  return sm90::smem_desc(tile + 2048 * kk, ROWS * 128, 1024);
}

/* The ring: slot s holds tile 0 then tile 1 of RROWS rows. */
template <int DP, int RROWS>
KILN_DEVICE uint8_t *ring_tile(uint8_t *ring, int s, int which) {
  return ring + (2 * s + which) * RROWS * DP * 2;
}

/* The producer thread: fixed tiles (NFIXED of FROWS rows from maps f0, f1 at row frow of head fh)
 * once onto fixed_full, then for each step the two ring tiles (maps r0, r1, coords(step, row,
 * head) says where) into slot step % STAGES once the consumers released it, tile 0 on full0[s]
 * and tile 1 on full1[s] so that the first product can start while the second tile lands. */
template <int DP, int FROWS, int RROWS, int STAGES, int NFIXED, class Coords>
KILN_DEVICE void produce(uint8_t *fixed, const CUtensorMap *f0, const CUtensorMap *f1, int frow, int fh, int b,
                         uint64_t *fixed_full, uint8_t *ring, const CUtensorMap *r0, const CUtensorMap *r1,
                         uint64_t *full0, uint64_t *full1, uint64_t *empty, int steps, Coords coords) {
  constexpr int FBYTES = FROWS * DP * 2, RBYTES = RROWS * DP * 2;
  sm90::mbar_expect_tx(fixed_full, NFIXED * FBYTES);
  load_tile<DP, FROWS>(fixed, f0, fixed_full, frow, fh, b);
  if (NFIXED > 1) load_tile<DP, FROWS>(fixed + FBYTES, f1, fixed_full, frow, fh, b);
  for (int step = 0; step < steps; step++) {
    const int s = step % STAGES;
    int row, head;
    coords(step, row, head);
    sm90::mbar_wait(&empty[s], ((step / STAGES) & 1) ^ 1);
    sm90::mbar_expect_tx(&full0[s], RBYTES);
    load_tile<DP, RROWS>(ring_tile<DP, RROWS>(ring, s, 0), r0, &full0[s], row, head, b);
    sm90::mbar_expect_tx(&full1[s], RBYTES);
    load_tile<DP, RROWS>(ring_tile<DP, RROWS>(ring, s, 1), r1, &full1[s], row, head, b);
  }
}

/* The query tile of this block: with causal masking the tiles with the most keys run first
 * (reversed blockIdx.x), so the short ones fill the last wave. The forward's order. */
KILN_DEVICE int query_tile(const kiln_attn_args &p) {
  return p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
}

/* The query tile, head and batch of a dQ block (grid: tiles x heads x batch). Causal, a tile's
 * work grows with its index (its rows see keys up to their diagonal) and blocks start in linear
 * blockIdx order, so the grid runs the longest tiles first across heads and the shortest last,
 * which then fill the last wave (LPT); query_tile's order, each head's tiles longest first and
 * head after head, leaves the last heads' long tiles in the tail (scripts/lpt-model.py, a
 * list-scheduling model of 132 SMs: ~5 % over the balanced time at B·S = 16384, H = 32).
 * Across every head at once the blocks in flight would read more heads' K and V than L2 holds at
 * long sequences, so the heads go in sections whose K and V fit KILN_ATTN_LPT_L2_BYTES
 * (kiln_abi.h), each section longest first (FlashAttention-3 orders its causal tiles so). dp: the
 * padded head dim. Rung lpt measured it in the forward too, where it lost 2-3 % at D = 64,
 * S = 2048 (docs/performance.md, "Rung lpt"). */
struct tile_of_block {
  int tile, h, b;
};
KILN_DEVICE tile_of_block block_tile_lpt(const kiln_attn_args &p, int dp) {
  if (!p.causal) return {(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z};
  /* a grid of 2^31 blocks or more (heads and batch up to 65535 each) keeps query_tile's order,
   * so that the linear index below fits an int */
  if ((uint64_t)gridDim.x * gridDim.y * gridDim.z > (uint64_t)INT32_MAX)
    return {query_tile(p), (int)blockIdx.y, (int)blockIdx.z};
  const int nt = gridDim.x, nh = gridDim.y, heads = nh * gridDim.z; /* heads: (batch, head) pairs */
  /* a query head's share of its K and V in KB (Sk clamped: past 4 M keys one head a section anyway) */
  const unsigned kv_kb = (unsigned)min(p.sk, 1 << 22) * (unsigned)dp / 256u / (unsigned)(p.hq / p.hkv);
  const int sec = min(heads, max(1, (int)((unsigned)(KILN_ATTN_LPT_L2_BYTES >> 10) / max(kv_kb, 1u))));
  const int lin = blockIdx.x + nt * (blockIdx.y + nh * blockIdx.z);
  const int first = lin / (nt * sec) * sec, n = min(sec, heads - first), r = lin - first * nt;
  const int bh = first + r % n;
  return {nt - 1 - r / n, bh % nh, bh / nh};
}

/* A compile-time key-block width handed to a generic lambda (decltype(w)::value). */
template <int W> struct width_tag {
  static constexpr int value = W;
};

/* The keys [0, end) (rows_key_end) and the key blocks of BN keys (rows_key_blocks) that query
 * rows r .. r + rows - 1 see, counting only rows < Sq: a tile's count (what its producer loads)
 * or one consumer warpgroup's (rows = 64; 0 when all its rows are past Sq). Causal, a tile's
 * first rows see fewer blocks than its last: in a 192-row tile of 128-key blocks, a tenth of the
 * products at S = 2048 would be on keys that only the later rows see (docs/performance.md,
 * "Per-warpgroup key ranges"). */
KILN_DEVICE int rows_key_end(const kiln_attn_args &p, int shift, int r, int rows) {
  return r < p.sq ? key_end(p, shift, r, min(rows, p.sq - r)) : 0;
}
KILN_DEVICE int rows_key_blocks(const kiln_attn_args &p, int shift, int r, int rows, int bn) {
  return r < p.sq ? key_blocks(p, shift, r, min(rows, p.sq - r), bn) : 0;
}

/* A consumer warpgroup that needs only the first `from` of the `to` key blocks its producer loads
 * releases the others unread (one thread): each slot once the block's first tile has landed in it,
 * so that the arrival counts toward that block's use of the slot and not an earlier one's. */
template <int STAGES>
KILN_DEVICE void release_unread(uint64_t *full, uint64_t *empty, int from, int to) {
  for (int blk = from; blk < to; blk++) {
    sm90::mbar_wait(&full[blk % STAGES], (blk / STAGES) & 1);
    sm90::mbar_arrive(&empty[blk % STAGES]);
  }
}

/* One score-like product of the backward, c = A·Bᵀ (S, dP or their transposes), both operands
 * k-major over DP: A a warpgroup's 64 rows of a tile of AROWS rows, B a tile of N rows. It waits
 * for its B tile (full at `phase`), fences first when FENCE (else the caller has, after its last
 * register access to c) and is its own commit group. Its first k step overwrites c (acc = false):
 * no zeroing between the fence and the MMAs. */
template <int N, bool BF16, int AROWS, int DP, bool FENCE>
KILN_DEVICE void score_product(float (&c)[N / 2], const uint8_t *a, const uint8_t *b, uint64_t *full, uint32_t phase) {
  using namespace sm90;
  mbar_wait(full, phase);
  if (FENCE) wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < DP / 16; ks++)
    wgmma_m64k16<N, BF16, 0, 0>(c, kmajor_desc<AROWS>(a, ks), kmajor_desc<N>(b, ks), ks > 0);
  wgmma_commit();
}

/* The backward's two score-like products of a step, c0 = A0·B0ᵀ and c1 = A1·B1ᵀ, each its own
 * commit group, so the caller can wait for c0 alone (wgmma_wait<1>) while c1 runs. */
template <int N, bool BF16, int AROWS, int DP>
KILN_DEVICE void score_products(float (&c0)[N / 2], float (&c1)[N / 2], const uint8_t *a0, const uint8_t *b0,
                                uint64_t *full0, const uint8_t *a1, const uint8_t *b1, uint64_t *full1,
                                uint32_t phase) {
  score_product<N, BF16, AROWS, DP, true>(c0, a0, b0, full0, phase);
  score_product<N, BF16, AROWS, DP, false>(c1, a1, b1, full1, phase);
}

/* Barrier setup by thread 0: fixed_full, then full0, full1 and empty (CONSUMERS arrivals) per
 * slot. */
template <int STAGES, int CONSUMERS = 2>
KILN_DEVICE void init_barriers(uint64_t *bars) {
  if (threadIdx.x == 0) {
    sm90::mbar_init(bars, 1);
    for (int s = 0; s < STAGES; s++) {
      sm90::mbar_init(&bars[1 + s], 1);
      sm90::mbar_init(&bars[1 + STAGES + s], 1);
      sm90::mbar_init(&bars[1 + 2 * STAGES + s], CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}

/* Shared memory of a kernel: 1024-byte aligned (the swizzle's period), fixed tiles, ring, then
 * the barriers (1 + 3·STAGES). */
KILN_DEVICE uint8_t *smem_base(uint8_t *raw) { return (uint8_t *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023); }

using sm90::named_arrive; /* named barriers (gemm_sm90.cuh) */
using sm90::named_sync;
/* All 256 threads of the two consumer warpgroups (barrier 1; 2 to 4 are the forward's turns). */
KILN_DEVICE void consumers_sync() { named_sync(1, 256); }
/* The 128 threads of consumer warpgroup cw (barriers 5 to 7). */
KILN_DEVICE void warpgroup_sync(int cw) { named_sync(5 + cw, 128); }

/* Whether a result tensor takes the staged epilogue below: the kernel's own 16-bit dtype and
 * rows_vec16's layout. */
template <bool BF16>
KILN_DEVICE bool stages_out(const void *out, int dt, int64_t bs, int64_t hs, int64_t ss, int64_t ds) {
  return dt == (BF16 ? KILN_DT_BF16 : KILN_DT_F16) && rows_vec16(out, dt, bs, hs, ss, ds);
}

/* Epilogue of a warpgroup's 64 x DP accumulator (lane holds rows 16·warp + lane/4 and + 8, columns
 * 8j + 2(lane%4) + {0, 1}) through shared memory: row r's values times mul[r], rounded to 16 bits,
 * go into `stage` (the warpgroup's 64 rows of a tile of TROWS rows, DP / 64 boxes of 128-byte rows,
 * whose wgmma reads have all retired), then leave as 16-byte stores, eight threads per 128-byte row
 * segment. Written straight from the accumulator layout, each 32-byte sector of O took four 2-byte
 * stores from four instructions; at S = 128 those writes were as many L2 requests as all the
 * TMA loads (ncu: 8.1 M sectors into L2 for 2.1 M of O, L2 77 % busy, DRAM 33 %).
 * Shared memory: unit u (16 bytes) of row r sits at unit u ^ (r % 8), so the writes (eight rows
 * x four lanes per instruction) and the reads (a row's eight units per eight lanes) are free of
 * bank conflicts. out: row 0 of the warpgroup (row stride ss elements); rows: how many of the 64
 * exist (may be <= 0); cols: the columns to store (a multiple of 8). Every thread of the
 * warpgroup calls it (two warpgroup barriers). */
template <int DP, int TROWS, bool BF16>
KILN_DEVICE void store_staged(const float (&acc)[DP / 8][4], const float (&mul)[2], uint8_t *stage, char *out,
                              int64_t ss, int rows, int cols, int cw, int t) {
  const int warp = t / 32, lane = t % 32;
  warpgroup_sync(cw); /* every warp's last reads of `stage` have retired */
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = 16 * warp + lane / 4 + 8 * r;
#pragma unroll
    for (int j = 0; j < DP / 8; j++) {
      uint8_t *dst = stage + (j / 8) * TROWS * 128 + row * 128 + (((j % 8) ^ (row % 8)) * 16) + (lane % 4) * 4;
      *reinterpret_cast<uint32_t *>(dst) = pack2<BF16>(acc[j][2 * r] * mul[r], acc[j][2 * r + 1] * mul[r]);
    }
  }
  warpgroup_sync(cw);
  constexpr int UNITS = DP / 8; /* 16-byte units per row */
#pragma unroll
  for (int k = 0; k < 64 * UNITS / 128; k++) {
    const int i = t + 128 * k, row = i / UNITS, u = i % UNITS;
    const uint4 v =
        *reinterpret_cast<const uint4 *>(stage + (u / 8) * TROWS * 128 + row * 128 + (((u % 8) ^ (row % 8)) * 16));
    if (row < rows && 8 * u < cols) *reinterpret_cast<uint4 *>(out + ((int64_t)row * ss + 8 * u) * 2) = v;
  }
}

/* A warpgroup's 64 x DP accumulator as rows r0 .. r0 + 63 (those < nrows) and columns < cols of
 * a result (element `base` is row 0; strides bs, hs, ss, ds; dtype dt), times mul: through
 * `stage` (store_staged) where the result takes it, else element by element. */
template <int DP, int TROWS, bool BF16>
KILN_DEVICE void store_acc(const float (&acc)[DP / 8][4], float mul, uint8_t *stage, void *out, int dt, int64_t base,
                           int64_t bs, int64_t hs, int64_t ss, int64_t ds, int r0, int nrows, int cols, int cw, int t) {
  if (stages_out<BF16>(out, dt, bs, hs, ss, ds)) {
    const float m2[2] = {mul, mul};
    store_staged<DP, TROWS, BF16>(acc, m2, stage, (char *)out + (base + (int64_t)r0 * ss) * 2, ss, nrows - r0, cols,
                                  cw, t);
  } else {
    store_rows<DP / 8>(acc, out, base, ss, ds, dt, r0 + 16 * (t / 32), nrows, 0, cols, mul, t % 32);
  }
}
#endif

} /* namespace attn */
} /* namespace kiln */
