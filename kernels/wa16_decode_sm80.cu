/*
 * wa16_decode_sm80.cu — weight-only quantized products for small M (decode), y = x·W with x
 * f16/bf16 [M, K] and W 4-bit (kiln's native layout, kiln.h) or int8, on sm_80+ tensor cores.
 * Serves kiln_matmul_int4 (one projection), kiln_qkv_project_int4 and kiln_qkv_project_int8
 * (three projections, one launch): the grid walks the 32-column blocks of the projections one
 * after the other. The weight formats differ only in how a lane loads its codes and turns them
 * into MMA fragments (the policies W4, W8R, W8C below); the pipeline, the split of K over the
 * warps, the reduction and the epilogue are one piece of code.
 *
 * Floors. Decode reads every weight byte once: at 4096 x 12288, 25 MB of int4 codes + 1.2 MB of
 * scales and zeros (G = 128), 6 µs at the H200's ~4.3 TB/s copy bandwidth, while 2·M·K·N FLOPs
 * (M <= 16) take < 2 µs even on mma.sync. So the kernel is a streaming loop whose jobs are to
 * keep enough loads in flight and to spend few instructions per byte: an SM must take ~16 B a
 * cycle, and issues at most 4 warp instructions a cycle.
 *
 * The MMA mapping and the exact dequantization shared with the sm_90a kernel: wa16.cuh.
 * Work split. A block owns 32 columns of one projection and 8 or 16 rows of x; its warps (1 to 16,
 * blockDim.x / 32, chosen by the host) split K into equal runs of chunks and sum their share in a
 * fixed order, and the block adds the partial tiles in shared memory in warp order
 * (deterministic; no atomics, no workspace). The host gives a block as many warps as fill the GPU
 * with ~16 warps per SM: a narrow weight (few blocks) splits K 16 ways, a wide one needs fewer
 * warps per block, so each warp streams a longer run of K with fewer pipeline ramps and drains
 * (v4 used 16 warps always: at K = 4096 a warp's run was 8 chunks, half of them in ramp or drain).
 * Latency. Everything a chunk needs is loaded into a ring of U register slots U chunks before
 * its use, and a slot is refilled as soon as it is consumed, so a warp always has U chunks in
 * flight: ~32 KB per SM at U = 4, which Little's law asks for at ~4 TB/s and ~1 µs of loaded
 * DRAM latency. int4 zeros and scales are loaded with the first chunk of their group only.
 */
#include "wa16.cuh"

namespace kiln {
namespace wa16 {

/* ---- the shared pipeline ---------------------------------------------------------------------- */

template <class W, bool M16>
struct Slot {
  typename W::Codes cd;
  uint32_t xa[W::NXS * W::XV / 2]; /* x row g: the chunk's segments, back to back */
  uint32_t xb[M16 ? W::NXS * W::XV / 2 : 1]; /* x row g + 8 (M16) */
};

/* Slots in the ring: as many as 128 registers hold without spills (ptxas -v; the int8 kernel
 * holds both int8 policies; the guarded int4 path at M16 fits only 2). Bytes in flight per warp:
 * int4 U·512, int8 U·1024. */
template <class W, bool M16, bool FAST>
struct Ring {
  static constexpr int U = W::GROUPED ? (M16 ? (FAST ? 3 : 2) : 4) : (M16 ? 2 : 3);
};

template <template <bool> class WT, bool BF16, bool M16, bool FAST>
__device__ __forceinline__ void decode_block(const kiln_qkv_args &a, const kiln_qkv_proj &p, int blk, float *red_) {
  using W = WT<BF16>;
  constexpr int ROWS = M16 ? 16 : 8, U = Ring<W, M16, FAST>::U, XW = W::NXS * W::XV / 2;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32, g = lane / 4, c = lane % 4;
  const int base = blk * COLS, m0 = blockIdx.y * ROWS;
  W w(p, a.k, base, g, c);
  const bool vec_x = !p.perm && a.x_cs == 1 && a.x_rs % 8 == 0 && (uintptr_t)a.x % 16 == 0;
  const uint32_t xa_off = (uint32_t)min(m0 + g, a.m - 1) * (uint32_t)a.x_rs; /* FAST's x rows */
  const uint32_t xb_off = (uint32_t)min(m0 + g + 8, a.m - 1) * (uint32_t)a.x_rs;

  /* ALIGNED (FAST int4 with a 4-slot ring; fast_layout made K a multiple of 4 chunks and G one of
   * 32, 64, 128): warps split K in whole units of 4 chunks, so slot u always holds a chunk at
   * position u of its unit and whether it begins or ends a group is (u & gmask) — decided per
   * slot, not tested per chunk — and the ring refills all 4 slots or none. */
  constexpr bool ALIGNED = FAST && W::GROUPED && U == 4;
  /* This warp's chunks: an even split of ceil(K / KC) (ALIGNED: of the 4-chunk units) */
  const int unit = ALIGNED ? 4 : 1, chunks = (a.k + W::KC - 1) / W::KC, units = chunks / unit;
  const int c_begin = unit * (int)((int64_t)units * warp / warps);
  const int c_end = unit * (int)((int64_t)units * (warp + 1) / warps);
  auto starts = [&](int ch, int u) {
    if constexpr (W::GROUPED) return ALIGNED ? (u & w.gmask) == 0 : w.group_start(ch, c_begin);
    return false;
  };

  Slot<W, M16> slot[U];
  auto issue = [&](Slot<W, M16> &sl, int ch, int u) {
    if (!ALIGNED && ch >= c_end) return;
    const bool first = starts(ch, u);
    w.template load<FAST>(sl.cd, ch, c, first);
#pragma unroll
    for (int j = 0; j < W::NXS; j++) {
      uint32_t(&xa)[W::XV / 2] = *reinterpret_cast<uint32_t(*)[W::XV / 2]>(sl.xa + j * (W::XV / 2));
      load_x<W::XV, FAST>(xa, a, p.perm, m0 + g, xa_off, W::xk(ch, c, j), vec_x);
      if (M16) {
        uint32_t(&xb)[W::XV / 2] = *reinterpret_cast<uint32_t(*)[W::XV / 2]>(sl.xb + j * (W::XV / 2));
        load_x<W::XV, FAST>(xb, a, p.perm, m0 + g + 8, xb_off, W::xk(ch, c, j), vec_x);
      }
    }
  };
#pragma unroll
  for (int u = 0; u < U; u++)
    if (!ALIGNED || c_begin < c_end) issue(slot[u], c_begin + u, u);

  float acc[M16 ? 2 : 1][2][4], part[M16 ? 2 : 1][2][4]; /* [x rows 8h][tile][element]: total, group's */
#pragma unroll
  for (int h = 0; h < (M16 ? 2 : 1); h++)
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[h][t][e] = part[h][t][e] = 0.f;
  float(&sum)[M16 ? 2 : 1][2][4] = W::GROUPED ? part : acc; /* ungrouped: the MMAs add into acc */

  for (int c0 = c_begin; c0 < c_end; c0 += U) {
    const bool refill = c0 + U < c_end; /* ALIGNED: the next round is whole or absent */
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int ch = c0 + u;
      if (!ALIGNED && ch >= c_end) break;
      Slot<W, M16> &sl = slot[u];
      if constexpr (W::GROUPED)
        if (starts(ch, u)) w.begin_group(sl.cd);
#pragma unroll
      for (int s = 0; s < W::STEPS; s++) {
        uint32_t b0, b1, b2 = 0, b3 = 0;
        W::b_frag(b0, b1, sl.xa, s);
        if (M16) W::b_frag(b2, b3, *reinterpret_cast<const uint32_t(*)[XW]>(sl.xb), s);
#pragma unroll
        for (int t = 0; t < 2; t++) {
          uint32_t af[4];
          w.a_frag(af, sl.cd, t, s);
          mma_16816<BF16>(sum[0][t], af, {b0, b1});
          if (M16) mma_16816<BF16>(sum[M16 ? 1 : 0][t], af, {b2, b3});
        }
      }
      if constexpr (W::GROUPED) {
        /* the group ends here: its partial · the group's scales into acc. Element e of tile t
         * is column 4g + 2t + e/2. */
        if (ALIGNED ? ((u + 1) & w.gmask) == 0 : w.group_end(ch, c_end)) {
#pragma unroll
          for (int t = 0; t < 2; t++)
#pragma unroll
            for (int e2 = 0; e2 < 2; e2++) {
              const float sc = w.scale(2 * t + e2);
#pragma unroll
              for (int h = 0; h < (M16 ? 2 : 1); h++)
#pragma unroll
                for (int e1 = 0; e1 < 2; e1++) {
                  acc[h][t][2 * e2 + e1] += part[h][t][2 * e2 + e1] * sc;
                  part[h][t][2 * e2 + e1] = 0.f;
                }
            }
        }
      }
      if (!ALIGNED || refill) issue(sl, ch + U, u);
    }
  }

  store_block<M16>(acc, red_, warp, warps, threadIdx.x, blockDim.x, [] { __syncthreads(); }, a, p, m0, base,
                   !W::GROUPED);
}

/* FAST when every load of the block can be an unguarded vector load (the common case: aligned
 * weights and x, a full 32-column block, K a whole number of chunks, no act-order): its loop has
 * no bounds checks, element-wise fallbacks or branches around them (ncu, v5: 177 instructions
 * per 512-byte int4 chunk, ~3x the dequantization and MMAs). Block-uniform, as mma.sync needs. */
template <template <bool> class WT, bool BF16, bool M16>
__device__ __forceinline__ void decode(const kiln_qkv_args &a, const kiln_qkv_proj &p, int blk, float *red) {
  const bool x_fast = !p.perm && a.x_cs == 1 && a.x_rs % 8 == 0 && (uintptr_t)a.x % 16 == 0 &&
                      (int64_t)(a.m - 1) * a.x_rs + a.k < INT32_MAX;
  if (x_fast && WT<BF16>::fast_layout(p, a.k, blk * COLS))
    decode_block<WT, BF16, M16, true>(a, p, blk, red);
  else
    decode_block<WT, BF16, M16, false>(a, p, blk, red);
}

/* The block's reduction buffer, [warp][accumulator][lane] floats: dynamic shared memory sized by
 * the host for the block's warps (src/ops/wa16_gpu.c), one for whichever policy runs. */
extern __shared__ float wa16_red[];

template <bool BF16, bool M16>
__device__ __forceinline__ void decode_int4(const kiln_qkv_args &a) {
  int blk = blockIdx.x;
  const kiln_qkv_proj &p = find_proj(a, blk);
  decode<W4, BF16, M16>(a, p, blk, wa16_red);
}

/* Each projection's layout picks its policy (block-uniform). */
template <bool BF16, bool M16>
__device__ __forceinline__ void decode_int8(const kiln_qkv_args &a) {
  int blk = blockIdx.x;
  const kiln_qkv_proj &p = find_proj(a, blk);
  if (p.w_cs == 1 || p.w_rs != 1)
    decode<W8R, BF16, M16>(a, p, blk, wa16_red);
  else
    decode<W8C, BF16, M16>(a, p, blk, wa16_red);
}

} /* namespace wa16 */
} /* namespace kiln */

#define KILN_WA16_ENTRY(name, fn, bf16, m16)                                                          \
  extern "C" __global__ void __launch_bounds__(kiln::wa16::THREADS) name(const kiln_qkv_args args) {      \
    kiln::wa16::fn<bf16, m16>(args);                                                                   \
  }
KILN_WA16_ENTRY(kiln_w4a16_decode_f16_m8, decode_int4, false, false)
KILN_WA16_ENTRY(kiln_w4a16_decode_f16_m16, decode_int4, false, true)
KILN_WA16_ENTRY(kiln_w4a16_decode_bf16_m8, decode_int4, true, false)
KILN_WA16_ENTRY(kiln_w4a16_decode_bf16_m16, decode_int4, true, true)
KILN_WA16_ENTRY(kiln_w8a16_decode_f16_m8, decode_int8, false, false)
KILN_WA16_ENTRY(kiln_w8a16_decode_f16_m16, decode_int8, false, true)
KILN_WA16_ENTRY(kiln_w8a16_decode_bf16_m8, decode_int8, true, false)
KILN_WA16_ENTRY(kiln_w8a16_decode_bf16_m16, decode_int8, true, true)
