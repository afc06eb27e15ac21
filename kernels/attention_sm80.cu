/*
 * attention_sm80.cu — kiln_attention's FLASH forward for sm_80+: FlashAttention-2 style, mma.sync.
 *
 * One block = one (batch, query head, query tile of BR rows); 4 warps, each owning WM = BR / 4
 * rows (WM = 32 for D <= 128: every K and V fragment read from shared memory feeds two m16
 * MMAs, halving shared-memory traffic per FLOP; WM = 16 for D = 256, whose 16 x 256 fp32
 * output accumulator already takes 64 registers a row-tile).
 * The block walks the key/value sequence in blocks of BC keys (64 for D <= 64, else 32 so that
 * scores and output accumulators fit in 255 registers), double-buffered with cp.async:
 *
 *   S = Q·Kᵀ (16 x 64 per warp: m16n8k16 MMAs over D)        -> mask
 *   m' = max(m, rowmax S);  P = exp2((S - m')·c);  l = l·exp2((m - m')·c) + rowsum P
 *   O = O·exp2((m - m')·c) + P·V (P converted to f16/bf16 and reused as the A fragment)
 *
 * with c = scale·log2 e, and at the end O /= l and LSE = m·scale + ln l (attention.cuh has the
 * update and the epilogue, shared with the sm_90a forward). The S accumulator of two adjacent n8
 * fragments is exactly the A fragment of an m16n8k16 (rows lane/4 and lane/4 + 8, columns
 * 2·(lane%4) + {0, 1} and + 8), so P never leaves registers. Each thread holds two rows'
 * statistics; a row's 64 scores live in 4 lanes, reduced with two xor shuffles.
 *
 * Q, K and V tiles go through the GEMM's TileLoader ([rows][D] in shared memory, rows padded by
 * 16 bytes for conflict-free ldmatrix; zero fill outside the sequence and beyond D). K is the
 * "k-major" B operand of S = Q·Kᵀ (ldmatrix), V the "n-major" B operand of O = P·V
 * (ldmatrix.trans). D is padded to the kernel's DP (64, 128 or 256): the zero columns add
 * nothing to Q·Kᵀ and produce columns of O that are never stored.
 *
 * Masking: key j of query i is visible iff j < Sk and (not causal or j <= i + Sk - Sq). Causal
 * blocks stop at the tile's last visible key. A row with no visible key keeps m = -inf; it is
 * computed with a finite stand-in so that no NaN arises, and stores O = 0, LSE = -inf.
 *
 * Floors (H200, causal = 0): 4·B·H·S²·D FLOP at ~600 TFLOP/s for mma.sync; bytes are O(S·D) per
 * head and never the limit beyond S ~ 256.
 */
#include <math.h>

#include "attention.cuh"

namespace kiln {
namespace attn {

template <bool BF16, int DP>
__device__ __forceinline__ void forward(const kiln_attn_args &p) {
  constexpr int BR = KILN_ATTN_BR(DP), BC = KILN_ATTN_BC(DP);
  constexpr int WM = BR / (THREADS / 32), MT = WM / 16; /* rows and m16 tiles per warp */
  static_assert(WM % 16 == 0, "warps own whole m16 row tiles");
  constexpr int PITCH = DP + KILN_GEMM_PAD;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *sq = smem, *sk = sq + BR * PITCH, *sv = sk + 2 * BC * PITCH; /* K, V: two buffers each */

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z, hk = h / (p.hq / p.hkv);
  const uint16_t *Q = (const uint16_t *)p.q + b * p.q_bs + h * p.q_hs;
  const uint16_t *K = (const uint16_t *)p.k + b * p.k_bs + hk * p.k_hs;
  const uint16_t *V = (const uint16_t *)p.v + b * p.v_bs + hk * p.v_hs;

  const int shift = p.sk - p.sq; /* query i sees keys j <= i + shift */
  const int nblocks = key_blocks(p, shift, q0, BR, BC);

  TileLoader<BR, DP, THREADS> lq;
  lq.g = Q + (int64_t)q0 * p.q_ss;
  lq.ld = p.q_ss;
  lq.rows_left = p.sq - q0;
  lq.cols_left = p.d;
  KvBlocks<BC, DP> kv(p);

  lq.async_copy(sq, tid);
  if (nblocks > 0) kv.load(p, K, V, 0, sk, sv, tid);
  cp_async_commit();

  constexpr int NT = BC / 8, OT = DP / 8; /* n8 fragments of S and of O per m16 tile */
  float o[MT][OT][4];
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int j = 0; j < OT; j++) o[i][j][0] = o[i][j][1] = o[i][j][2] = o[i][j][3] = 0.f;
  /* row statistics, [m16 tile][0: row lane/4, 1: row lane/4 + 8]: m the running maximum of the raw
   * scores, l this lane's partial sum */
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int i = 0; i < MT; i++) m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.f;
  const float sl2 = p.scale * LOG2E; /* exp(scale·x) = exp2(sl2·x) */
  const int row0 = q0 + warp * WM + lane / 4;      /* row of (tile i, half r): row0 + 16 i + 8 r */

  for (int blk = 0; blk < nblocks; blk++) {
    if (blk + 1 < nblocks) kv.load(p, K, V, blk + 1, sk, sv, tid);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads(); /* Q and block blk have landed for every thread */
    const uint16_t *skb = sk + (blk % 2) * BC * PITCH, *svb = sv + (blk % 2) * BC * PITCH;

    /* S = Q·Kᵀ over the padded D; each K fragment pair feeds MT row tiles */
    float s[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
      for (int j = 0; j < NT; j++) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < DP; kd += 16) {
      uint32_t a[MT][4];
#pragma unroll
      for (int i = 0; i < MT; i++) load_a_frag<true, BR, DP>(a[i], sq, warp * WM + 16 * i, kd, lane);
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        uint32_t b0[2], b1[2];
        load_b_frag_pair<true, BC, DP>(b0, b1, skb, j * 8, kd, lane);
#pragma unroll
        for (int i = 0; i < MT; i++) {
          mma_16816<BF16>(s[i][j], a[i], b0);
          mma_16816<BF16>(s[i][j + 1], a[i], b1);
        }
      }
    }

    /* mask, online softmax: s becomes P */
#pragma unroll
    for (int i = 0; i < MT; i++) {
      float corr[2];
      softmax_step<true>(s[i], m[i], l[i], corr, sl2, blk * BC + (lane % 4) * 2, row0 + 16 * i, p.sk, p.causal,
                         shift);
      rescale(o[i], corr);
    }

    /* O += P·V: k16 step t uses S fragments 2t and 2t+1 of each row tile as its A fragment */
#pragma unroll
    for (int t = 0; t < BC / 16; t++) {
      uint32_t a[MT][4];
#pragma unroll
      for (int i = 0; i < MT; i++) acc_to_a_frag<BF16>(a[i], s[i], t);
#pragma unroll
      for (int j = 0; j < OT; j += 2) {
        uint32_t b0[2], b1[2];
        load_b_frag_pair<false, DP, BC>(b0, b1, svb, j * 8, t * 16, lane);
#pragma unroll
        for (int i = 0; i < MT; i++) {
          mma_16816<BF16>(o[i][j], a[i], b0);
          mma_16816<BF16>(o[i][j + 1], a[i], b1);
        }
      }
    }
    __syncthreads(); /* every warp is done with buffer blk % 2 before it is refilled */
  }
  cp_async_wait<0>();

  /* O /= l, store; LSE */
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int r = 0; r < 2; r++) store_row(p, b, h, row0 + 16 * i + 8 * r, m[i][r], l[i][r], sl2, o[i], r, lane);
}

} /* namespace attn */
} /* namespace kiln */

#define KILN_ATTN_ENTRY(name, bf16, dp)                                                              \
  extern "C" __global__ void __launch_bounds__(kiln::attn::THREADS) name(const kiln_attn_args args) { \
    kiln::attn::forward<bf16, dp>(args);                                                               \
  }
KILN_ATTN_ENTRY(kiln_attn_fwd_f16_d64, false, 64)
KILN_ATTN_ENTRY(kiln_attn_fwd_f16_d128, false, 128)
KILN_ATTN_ENTRY(kiln_attn_fwd_f16_d256, false, 256)
KILN_ATTN_ENTRY(kiln_attn_fwd_bf16_d64, true, 64)
KILN_ATTN_ENTRY(kiln_attn_fwd_bf16_d128, true, 128)
KILN_ATTN_ENTRY(kiln_attn_fwd_bf16_d256, true, 256)
