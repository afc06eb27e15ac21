/*
 * attention_sm90.cu — kiln_attention's FLASH forward for Hopper (sm_90a): FlashAttention-3 style,
 * warpgroup MMA fed by TMA, for head dims padded to 64, 128 or 256 (other GPUs run the mma.sync
 * kernel of attention_sm80.cu). At D = 256 key blocks are BN = 64 and the ring 2 slots (kiln_abi.h
 * WG_*): the 64 x 256 output accumulator takes 128 registers a thread.
 *
 * Why: mma.sync reaches ~60 % of Hopper's tensor cores and its operands pass through registers
 * (ldmatrix); wgmma reads K and V straight from shared memory, and one thread's TMA copies
 * replace the cp.async address arithmetic of 128 threads.
 *
 * One block = one (batch, query head, tile of BM = 128 query rows), 3 warpgroups:
 *   warpgroup 0   producer: one thread loads the Q tile (once) and then K and V blocks of BN = 128
 *                 keys into a ring of STAGES slots, K and V on separate mbarriers so that Q·Kᵀ
 *                 starts while V is still in flight; a slot is refilled once both consumers
 *                 released it (`empty`).
 *   warpgroups 1-2 consumers: 64 query rows each. Per key block:
 *                 S = Q·Kᵀ       wgmma m64n128k16, Q and K both k-major (D contiguous) in smem
 *                 softmax        attention.cuh's online step on the S registers -> P
 *                 O += P·V       wgmma m64nDk16 with P from registers (the accumulator layout of
 *                                S is the A-fragment layout, as with mma.sync) and V in smem,
 *                                read n-major (D contiguous) with the transpose flag.
 *                 Within a warpgroup the softmax of block j overlaps P·V of block j - 1 (issued
 *                 with Q·K(j)ᵀ); the two warpgroups take turns to issue their MMAs (ping-pong),
 *                 so that one's softmax runs while the other's MMAs do.
 * setmaxnreg gives the consumers 232 registers (S: 64, O: up to 64 fp32 per thread; at D = 256,
 * S: 32, O: 128).
 *
 * The short-sequence configuration (algo SMEM, kiln_abi.h's SH_* sizes) is the same code with one
 * consumer warpgroup (BM = 64, no ping-pong) and a smaller ring, so that two blocks fit on an SM.
 * Why: with one or two key blocks per query tile, the FLASH block spends most of its life loading
 * Q, K and V and storing O with its MMAs idle, and one block per SM leaves nothing to fill that
 * time; two independent blocks overlap one's loads and epilogue with the other's MMAs, the role
 * ping-pong plays for long rows.
 *
 * Layouts: every TMA box is 64 elements (128 bytes, the swizzle width) of D by BM or BN rows,
 * 128-byte swizzled; D = 128 is two such chunks side by side. K-major descriptors step 32 bytes
 * inside the row per k16 step (then to the next chunk); V's n-major descriptor steps 16 key rows
 * (2048 bytes) per k16 step, with LBO the distance between its 64-column chunks.
 * Edges: TMA fills rows past Sq / Sk and columns past D with zeros; keys past Sk (and, causal,
 * right of the diagonal) are masked to -inf in the blocks that contain any; the row epilogue
 * stores only rows < Sq and columns < D. Causal tiles stop at their last visible key block and
 * are scheduled longest first (block x takes tile ntiles - 1 - x), which balances the grid's
 * tail; the wide configuration's causal tiles end at Sq, so its partial tile is the shortest
 * (whole warpgroups of rows before row 0: no keys, no stores).
 */
#include "attention_sm90.cuh"

namespace kiln {
namespace attn {

/* NC consumer warpgroups of 64 query rows (BM = 64·NC), key blocks of BN, a ring of STAGES slots,
 * shared memory SMEM_BYTES: the FLASH configuration (NC = 2, ping-pong), the wide D = 64 one (NC = 3)
 * and the short-sequence one (NC = 1, two blocks per SM; see kiln_abi.h). */
template <bool BF16, int DP, int NC, int BN, int STAGES, size_t SMEM_BYTES>
__device__ __forceinline__ void forward_sm90(const kiln_attn_args &p, const CUtensorMap *map_q, const CUtensorMap *map_k,
                                             const CUtensorMap *map_v) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BM = 64 * NC;
  constexpr int Q_BYTES = BM * DP * 2, KV_BYTES = BN * DP * 2;
  /* the consumer warpgroups take turns to issue their MMAs: two always, three with KILN_ATTN_WD_TURNS */
  constexpr bool TURNS = KILN_ATTN_PINGPONG && (NC == 2 || (NC == 3 && KILN_ATTN_WD_TURNS));
  /* half blocks: a warpgroup's last key block on its first BN / 2 keys where its rows see no more */
  constexpr bool HALF = NC == 3 && KILN_ATTN_WD_HALF;
  static_assert(DP == 64 || DP == 128 || DP == 256, "wgmma tiles for head dims padded to 64, 128 or 256");
  static_assert(NC >= 1 && NC <= 3, "one to three consumer warpgroups");
  static_assert(SMEM_BYTES >= Q_BYTES + STAGES * 2 * KV_BYTES + 1024 + (1 + 3 * STAGES) * 8,
                "smem budget");
  extern __shared__ uint8_t smem_raw[];
  uint8_t *sq = smem_base(smem_raw), *ring = sq + Q_BYTES; /* slot s: K, then V */
  uint64_t *q_full = (uint64_t *)(ring + STAGES * 2 * KV_BYTES), *k_full = q_full + 1, *v_full = k_full + STAGES,
           *empty = v_full + STAGES;

  const int wg = warpgroup_index(), t = threadIdx.x % 128;
  const int tile = query_tile(p);
  /* Causal wide tiles end at Sq: where 192 does not divide Sq, the first tile (the shortest) holds
   * the rows before row 0 (whole warpgroups of them: no keys, no stores; TMA fills their Q with
   * zeros), not the last (the longest), whose idle warpgroup would cost a third of the SM for the
   * longest walk of the head (at S = 2048: ~5 % of the warpgroup turns). The grid is the same. */
  const int pad = NC == 3 && KILN_ATTN_WD_PAD && p.causal ? (BM - p.sq % BM) % BM / 64 * 64 : 0;
  const int q0 = tile * BM - pad, h = blockIdx.y, b = blockIdx.z, hk = h / (p.hq / p.hkv);
  const int shift = p.sk - p.sq; /* query i sees keys j <= i + shift */
  const int nblocks = rows_key_blocks(p, shift, q0, BM, BN);
  init_barriers<STAGES, NC>(q_full);

  if (wg == 0) { /* producer */
    producer_registers<NC == 2 ? 40 : 24>();
    if (t == 0)
      produce<DP, BM, BN, STAGES, 1>(sq, map_q, map_q, q0, h, b, q_full, ring, map_k, map_v, k_full, v_full, empty,
                                     nblocks, [&](int blk, int &row, int &head) { row = blk * BN, head = hk; });
  } else { /* consumers */
    consumer_registers<NC == 3 ? 160 : 232>(); /* 4 x 32 x 24 + 12 x 32 x 160 <= 64 K registers */
    const int cw = wg - 1, warp = t / 32, lane = t % 32;
    float o[DP / 2], sc[BN / 2];
    auto &o4 = *reinterpret_cast<float(*)[DP / 8][4]>(o);
    auto &s4 = *reinterpret_cast<float(*)[BN / 8][4]>(sc);
#pragma unroll
    for (int i = 0; i < DP / 2; i++) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const float sl2 = p.scale * LOG2E;
    const int first = q0 + 64 * cw, row0 = first + 16 * warp + lane / 4; /* this lane's rows: row0, row0 + 8 */
    /* Three warpgroups each walk only the key blocks their own rows see (a 192-row tile's first
     * rows see up to two blocks fewer than its last) and release the tile's others unread; with
     * turns, they pass the rest of the tile's turns on without MMAs. Two ping-pong partners (128
     * rows, 128-key blocks) see the same blocks but where Sk - Sq splits them, and walk the tile's. */
    const int kend = NC == 3 && first >= 0 ? rows_key_end(p, shift, first, 64) : 0;
    const int nb = NC == 3 ? (kend + BN - 1) / BN : nblocks;
    /* Where this warpgroup's rows see at most the first BN / 2 keys of their last block (causal:
     * every other warpgroup of a 192-row tile, whose 64 rows end mid-block), that block's products
     * run on those keys only: Q·Kᵀ at N = BN / 2, its softmax on half the scores, P·V over BN / 2
     * keys (the other half's scores would all be masked, its P zero). The block is peeled off the
     * loop, each width a straight branch from issue to wait, so that no wgmma in flight crosses
     * the join (a width chosen inside issue_qk / issue_pv made ptxas serialize every wgmma). */
    const bool half_last = HALF && nb > 0 && kend - (nb - 1) * BN <= BN / 2;
    const uint8_t *sqw = sq + cw * 64 * 128;              /* this warpgroup's 64 rows of each chunk */
    /* S = Q·K(blk)ᵀ issued (not waited for): DP / 16 k16 steps, 32 bytes along the 128-byte row,
     * then the next chunk */
    auto issue_qk = [&](int blk, auto width) {
      constexpr int W = decltype(width)::value;
      const uint8_t *sk = ring_tile<DP, BN>(ring, blk % STAGES, 0);
      mbar_wait(&k_full[blk % STAGES], (blk / STAGES) & 1);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < DP / 16; ks++) /* the first k step overwrites sc: no zeroing after the fence */
        wgmma_m64k16<W, BF16, 0, 0>(*reinterpret_cast<float(*)[W / 2]>(sc), kmajor_desc<BM>(sqw, ks),
                                    kmajor_desc<BN>(sk, ks), ks > 0);
      wgmma_commit();
    };
    /* O += P·V(blk) issued: BN / 16 k16 steps of 16 key rows (2048 bytes) of V, read n-major */
    uint32_t pa[BN / 16][4];
    auto issue_pv = [&](int blk, auto width) {
      constexpr int W = decltype(width)::value;
      const uint8_t *sv = ring_tile<DP, BN>(ring, blk % STAGES, 1);
      mbar_wait(&v_full[blk % STAGES], (blk / STAGES) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < W / 16; kk++)
        wgmma_rs_m64k16<DP, BF16, 1>(o, pa[kk], nmajor_desc<BN>(sv, kk));
      wgmma_commit();
    };
    /* P as A fragments for P·V */
    auto to_p = [&](auto width) {
#pragma unroll
      for (int kk = 0; kk < decltype(width)::value / 16; kk++) acc_to_a_frag<BF16>(pa[kk], s4, kk);
    };
    /* the softmax of block blk's first W scores (masked only where the block holds keys past Sk or
     * right of the tile's first row's diagonal: always a half block's); corr for O */
    float corr[2];
    constexpr int LAZY = KILN_ATTN_LAZY_RESCALE;
    auto softmax = [&](int blk, auto width) {
      constexpr int W = decltype(width)::value;
      auto &sw = *reinterpret_cast<float(*)[W / 8][4]>(sc);
      const int k0 = blk * BN;
      if (W < BN || k0 + BN > p.sk || (p.causal && k0 + BN - 1 > first + shift))
        softmax_step<true, W / 8, LAZY>(sw, m, l, corr, sl2, k0 + (lane % 4) * 2, row0, p.sk, p.causal, shift);
      else
        softmax_step<false, W / 8, LAZY>(sw, m, l, corr, sl2, k0 + (lane % 4) * 2, row0, p.sk, p.causal, shift);
    };
    /* Turns (FlashAttention-3's ping-pong, and its ring for three warpgroups): the consumer
     * warpgroups issue their MMAs in turn, 0, 1, (2,) 0, ... (named barrier 2 + cw is warpgroup
     * cw's turn, completed by its predecessor's arrival), so that one's softmax runs while
     * another's MMAs hold the tensor cores instead of all issuing at once. Each takes the tile's
     * nblocks + 1 turns, the last nblocks - nb of them without MMAs; the last warpgroup stands in
     * for warpgroup 0's first predecessor and skips its own last hand-over, which nobody waits for. */
    const int turns = nblocks > 0 ? nblocks + 1 : 0;
    auto my_turn = [&]() {
      if (TURNS) named_sync(2 + cw, 256);
    };
    auto your_turn = [&](bool last) {
      if (TURNS && !(last && cw == NC - 1)) named_arrive(2 + (cw + 1) % NC, 256);
    };
    if (TURNS && cw == NC - 1 && turns > 0) named_arrive(2, 256);
    mbar_wait(q_full, 0);
    /* Intra-warpgroup overlap (FlashAttention-3): Q·K(j)ᵀ and P(j-1)·V(j-1) are issued together and
     * the softmax of S(j) runs while the tensor cores still work on P·V; O is rescaled once that
     * product has retired ((O + P(j-1)·V(j-1)) and P(j-1) share the maximum m(j-1), so scaling the
     * sum by exp2((m(j-1) - m(j))·sl2) is exact). Slot j-1 is released after its P·V. */
    const width_tag<BN> full;
    const width_tag<BN / 2> halfw;
    auto first_step = [&](auto width) {
      my_turn();
      issue_qk(0, width);
      your_turn(false);
      wgmma_wait<0>();
      softmax(0, width); /* O is still 0: corr unused */
      to_p(width);
    };
    auto step = [&](int blk, auto width) { /* S(blk) at width, P·V(blk - 1) full */
      my_turn();
      issue_qk(blk, width);
      issue_pv(blk - 1, full);
      your_turn(false);
      wgmma_wait<1>(); /* S(blk) is ready; P·V(blk - 1) may still run */
      softmax(blk, width);
      wgmma_wait<0>();
      if (t == 0) mbar_arrive(&empty[(blk - 1) % STAGES]); /* this warpgroup is done with slot blk - 1 */
      /* with LAZY, only where a row of the warp took a new maximum (warp-uniform) */
      if (!LAZY || __any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) rescale(o4, corr);
      to_p(width);
    };
    auto last_step = [&](auto width) {
      my_turn();
      issue_pv(nb - 1, width);
      your_turn(nb + 1 == turns);
      wgmma_wait<0>();
      if (t == 0) mbar_arrive(&empty[(nb - 1) % STAGES]);
    };
    if (nb > 0) {
      if (half_last && nb == 1)
        first_step(halfw);
      else
        first_step(full);
    }
    for (int blk = 1; blk < nb - (half_last ? 1 : 0); blk++) step(blk, full);
    if (half_last && nb > 1) step(nb - 1, halfw);
    if (nb > 0) {
      if (half_last)
        last_step(halfw);
      else
        last_step(full);
    }
    /* The tile's remaining turns, passed on. Turn u of a warpgroup with work releases block u - 1's
     * slot, so an idle one releases block u - 1 (unread) after passing turn u: the producer then
     * refills slots as early as with every warpgroup busy, and no turn waits for a load. */
    if (TURNS)
      for (int turn = nb > 0 ? nb + 1 : 0; turn < turns; turn++) {
        my_turn();
        your_turn(turn + 1 == turns);
        if (t == 0 && turn > 0) release_unread<STAGES>(k_full, empty, turn - 1, turn);
      }
    /* O / l through this warpgroup's rows of the Q tile (its last Q·Kᵀ retired) where O takes it */
    if (NC == 3 && first < 0) { /* rows before row 0 (pad): nothing to store */
    } else if (stages_out<BF16>(p.o, p.o_dtype, p.o_bs, p.o_hs, p.o_ss, p.o_ds)) {
      float inv[2];
#pragma unroll
      for (int r = 0; r < 2; r++) {
        l[r] = row_sum4(l[r]);
        store_lse(p, b, h, row0 + 8 * r, m[r], l[r], sl2, lane);
        inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
      }
      store_staged<DP, BM, BF16>(o4, inv, sq + cw * 64 * 128,
                                 (char *)p.o + (b * p.o_bs + h * p.o_hs + (int64_t)first * p.o_ss) * 2, p.o_ss,
                                 p.sq - first, p.d, cw, t);
    } else {
#pragma unroll
      for (int r = 0; r < 2; r++) store_row(p, b, h, row0 + 8 * r, m[r], l[r], sl2, o4, r, lane);
    }
    if (!TURNS && t == 0) release_unread<STAGES>(k_full, empty, nb, nblocks);
  }
#else
  (void)p, (void)map_q, (void)map_k, (void)map_v;
  __trap(); /* the host launches these kernels only on sm_90 */
#endif
}

} /* namespace attn */
} /* namespace kiln */

/* One forward kernel: `threads` threads, `blocks` of them per SM, the configuration's template
 * arguments. FLASH: 3 warpgroups (4 in the wide D = 64 one), one block per SM; SMEM (short sequences): 2
 * warpgroups, two blocks per SM. */
#define KILN_ATTN_FWD_ENTRY(name, bf16, dp, threads, blocks, nc, bn, stages, smem)                              \
  extern "C" __global__ void __launch_bounds__(threads, blocks)                                               \
      name(const kiln_attn_args args, const __grid_constant__ CUtensorMap map_q,                              \
           const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v) {            \
    kiln::attn::forward_sm90<bf16, dp, nc, bn, stages, smem>(args, &map_q, &map_k, &map_v);                    \
  }
#define KILN_ATTN_WG_ENTRY(name, bf16, dp)                                                                   \
  KILN_ATTN_FWD_ENTRY(name, bf16, dp, KILN_ATTN_WG_THREADS, 1, KILN_ATTN_WG_BM / 64, KILN_ATTN_WG_BN(dp),       \
                      KILN_ATTN_WG_STAGES(dp), KILN_ATTN_WG_SMEM_BYTES(dp))
#define KILN_ATTN_WD_ENTRY(name, bf16)                                                                       \
  KILN_ATTN_FWD_ENTRY(name, bf16, 64, KILN_ATTN_WD_THREADS, 1, KILN_ATTN_WD_BM / 64, KILN_ATTN_WD_BN,          \
                      KILN_ATTN_WD_STAGES, KILN_ATTN_WD_SMEM_BYTES)
#define KILN_ATTN_SH_ENTRY(name, bf16, dp)                                                                   \
  KILN_ATTN_FWD_ENTRY(name, bf16, dp, KILN_ATTN_SH_THREADS, 2, 1, KILN_ATTN_SH_BN(dp), KILN_ATTN_SH_STAGES(dp), \
                      KILN_ATTN_SH_SMEM_BYTES(dp))
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_f16_d64, false, 64)
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_f16_d128, false, 128)
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_f16_d256, false, 256)
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_bf16_d64, true, 64)
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_bf16_d128, true, 128)
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_bf16_d256, true, 256)
KILN_ATTN_WD_ENTRY(kiln_attn_fwd_wide_f16_d64, false)
KILN_ATTN_WD_ENTRY(kiln_attn_fwd_wide_bf16_d64, true)
KILN_ATTN_SH_ENTRY(kiln_attn_fwd_short_f16_d64, false, 64)
KILN_ATTN_SH_ENTRY(kiln_attn_fwd_short_f16_d128, false, 128)
KILN_ATTN_SH_ENTRY(kiln_attn_fwd_short_bf16_d64, true, 64)
KILN_ATTN_SH_ENTRY(kiln_attn_fwd_short_bf16_d128, true, 128)
