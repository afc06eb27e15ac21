/*
 * attention_sm90.cu — kiln_attention's FLASH forward for Hopper (sm_90a): FlashAttention-3 style,
 * warpgroup MMA fed by TMA, for head dims padded to 64 or 128 (D = 256 and other GPUs run the
 * mma.sync kernel of attention_sm80.cu).
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
 *                 with Q·K(j)ᵀ); across them, one's softmax runs while the other's MMAs do.
 * setmaxnreg gives the consumers 232 registers (S: 64, O: up to 64 fp32 per thread).
 *
 * Layouts: every TMA box is 64 elements (128 bytes, the swizzle width) of D by BM or BN rows,
 * 128-byte swizzled; D = 128 is two such chunks side by side. K-major descriptors step 32 bytes
 * inside the row per k16 step (then to the next chunk); V's n-major descriptor steps 16 key rows
 * (2048 bytes) per k16 step, with LBO the distance between its 64-column chunks.
 * Edges: TMA fills rows past Sq / Sk and columns past D with zeros; keys past Sk (and, causal,
 * right of the diagonal) are masked to -inf in the blocks that contain any; the row epilogue
 * stores only rows < Sq and columns < D. Causal tiles stop at their last visible key block and
 * are scheduled longest first (block x takes tile ntiles - 1 - x), which balances the grid's
 * tail.
 */
#include "attention.cuh"
#include "gemm_sm90.cuh"

namespace kiln {
namespace attn {

template <bool BF16, int DP>
__device__ __forceinline__ void forward_sm90(const kiln_attn_args &p, const CUtensorMap *map_q, const CUtensorMap *map_k,
                                             const CUtensorMap *map_v) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BM = KILN_ATTN_WG_BM, BN = KILN_ATTN_WG_BN, STAGES = KILN_ATTN_WG_STAGES(DP), CHUNKS = DP / 64;
  constexpr int Q_BYTES = BM * DP * 2, KV_BYTES = BN * DP * 2, Q_CHUNK = BM * 128, KV_CHUNK = BN * 128;
  static_assert(DP == 64 || DP == 128, "wgmma tiles for head dims padded to 64 or 128");
  static_assert(KILN_ATTN_WG_SMEM_BYTES(DP) >= Q_BYTES + STAGES * 2 * KV_BYTES + 1024 + (1 + 3 * STAGES) * 8,
                "smem budget");
  extern __shared__ uint8_t smem_raw[];
  /* The 128-byte swizzle repeats every 1024 bytes: tiles start on 1024-byte boundaries. */
  uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  uint8_t *sq = smem, *ring = smem + Q_BYTES; /* slot s: K at ring + 2 s KV_BYTES, then V */
  uint64_t *q_full = (uint64_t *)(ring + STAGES * 2 * KV_BYTES), *k_full = q_full + 1, *v_full = k_full + STAGES,
           *empty = v_full + STAGES;

  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int tile = p.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
  const int q0 = tile * BM, h = blockIdx.y, b = blockIdx.z, hk = h / (p.hq / p.hkv);
  const int shift = p.sk - p.sq; /* query i sees keys j <= i + shift */
  int kend = p.sk;
  if (p.causal) kend = min(kend, max(0, q0 + BM + shift));
  const int nblocks = (kend + BN - 1) / BN;

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < STAGES; s++) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&empty[s], 2); /* both consumer warpgroups */
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) { /* producer */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (t == 0) {
      mbar_expect_tx(q_full, Q_BYTES);
      for (int c = 0; c < CHUNKS; c++) tma_load_4d(sq + c * Q_CHUNK, map_q, q_full, 64 * c, q0, h, b);
      for (int blk = 0; blk < nblocks; blk++) {
        const int s = blk % STAGES;
        mbar_wait(&empty[s], ((blk / STAGES) & 1) ^ 1);
        uint8_t *sk = ring + s * 2 * KV_BYTES, *sv = sk + KV_BYTES;
        mbar_expect_tx(&k_full[s], KV_BYTES);
        for (int c = 0; c < CHUNKS; c++) tma_load_4d(sk + c * KV_CHUNK, map_k, &k_full[s], 64 * c, blk * BN, hk, b);
        mbar_expect_tx(&v_full[s], KV_BYTES);
        for (int c = 0; c < CHUNKS; c++) tma_load_4d(sv + c * KV_CHUNK, map_v, &v_full[s], 64 * c, blk * BN, hk, b);
      }
    }
  } else { /* consumers */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1, warp = t / 32, lane = t % 32;
    float o[DP / 2], sc[BN / 2];
    auto &o4 = *reinterpret_cast<float(*)[DP / 8][4]>(o);
    auto &s4 = *reinterpret_cast<float(*)[BN / 8][4]>(sc);
#pragma unroll
    for (int i = 0; i < DP / 2; i++) o[i] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const float sl2 = p.scale * 1.4426950408889634f; /* scale·log2 e */
    const int row0 = q0 + 64 * cw + 16 * warp + lane / 4; /* this lane's rows: row0, row0 + 8 */
    const uint8_t *sqw = sq + cw * 64 * 128;              /* this warpgroup's 64 rows of each chunk */
    /* S = Q·K(blk)ᵀ issued (not waited for): DP / 16 k16 steps, 32 bytes along the 128-byte row,
     * then the next chunk */
    auto issue_qk = [&](int blk) {
      const uint8_t *sk = ring + (blk % STAGES) * 2 * KV_BYTES;
#pragma unroll
      for (int i = 0; i < BN / 2; i++) sc[i] = 0.f;
      mbar_wait(&k_full[blk % STAGES], (blk / STAGES) & 1);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < DP / 16; ks++) {
        const int off = 32 * (ks % 4);
        wgmma_m64k16<BN, BF16, 0, 0>(sc, smem_desc(sqw + (ks / 4) * Q_CHUNK + off, 16, 1024),
                                     smem_desc(sk + (ks / 4) * KV_CHUNK + off, 16, 1024));
      }
      wgmma_commit();
    };
    /* O += P·V(blk) issued: BN / 16 k16 steps of 16 key rows (2048 bytes) of V, read n-major */
    uint32_t pa[BN / 16][4];
    auto issue_pv = [&](int blk) {
      const uint8_t *sv = ring + (blk % STAGES) * 2 * KV_BYTES + KV_BYTES;
      mbar_wait(&v_full[blk % STAGES], (blk / STAGES) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++)
        wgmma_rs_m64k16<DP, BF16, 1>(o, pa[kk], smem_desc(sv + 2048 * kk, KV_CHUNK, 1024));
      wgmma_commit();
    };
    /* the softmax of block blk's scores (masked only where the block holds keys past Sk or right
     * of the tile's first row's diagonal); corr for O */
    float corr[2];
    auto softmax = [&](int blk) {
      const int k0 = blk * BN;
      if (k0 + BN > p.sk || (p.causal && k0 + BN - 1 > q0 + shift))
        softmax_step<true>(s4, m, l, corr, sl2, k0 + (lane % 4) * 2, row0, p.sk, p.causal, shift);
      else
        softmax_step<false>(s4, m, l, corr, sl2, k0 + (lane % 4) * 2, row0, p.sk, p.causal, shift);
    };
    mbar_wait(q_full, 0);
    /* Intra-warpgroup overlap (FlashAttention-3): Q·K(j)ᵀ and P(j-1)·V(j-1) are issued together and
     * the softmax of S(j) runs while the tensor cores still work on P·V; O is rescaled once that
     * product has retired ((O + P(j-1)·V(j-1)) and P(j-1) share the maximum m(j-1), so scaling the
     * sum by exp2((m(j-1) - m(j))·sl2) is exact). Slot j-1 is released after its P·V. */
    if (nblocks > 0) {
      issue_qk(0);
      wgmma_wait<0>();
      softmax(0); /* O is still 0: corr unused */
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++) acc_to_a_frag<BF16>(pa[kk], s4, kk);
    }
    for (int blk = 1; blk < nblocks; blk++) {
      issue_qk(blk);
      issue_pv(blk - 1);
      wgmma_wait<1>(); /* S(blk) is ready; P·V(blk - 1) may still run */
      softmax(blk);
      wgmma_wait<0>();
      if (t == 0) mbar_arrive(&empty[(blk - 1) % STAGES]); /* this warpgroup is done with slot blk - 1 */
      rescale(o4, corr);
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++) acc_to_a_frag<BF16>(pa[kk], s4, kk);
    }
    if (nblocks > 0) {
      issue_pv(nblocks - 1);
      wgmma_wait<0>();
      if (t == 0) mbar_arrive(&empty[(nblocks - 1) % STAGES]);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) store_row(p, b, h, row0 + 8 * r, m[r], l[r], sl2, o4, r, lane);
  }
#else
  (void)p, (void)map_q, (void)map_k, (void)map_v;
  __trap(); /* the host launches these kernels only on sm_90 */
#endif
}

} /* namespace attn */
} /* namespace kiln */

#define KILN_ATTN_WG_ENTRY(name, bf16, dp)                                                                   \
  extern "C" __global__ void __launch_bounds__(KILN_ATTN_WG_THREADS, 1)                                       \
      name(const kiln_attn_args args, const __grid_constant__ CUtensorMap map_q,                              \
           const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v) {            \
    kiln::attn::forward_sm90<bf16, dp>(args, &map_q, &map_k, &map_v);                                         \
  }
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_f16_d64, false, 64)
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_f16_d128, false, 128)
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_bf16_d64, true, 64)
KILN_ATTN_WG_ENTRY(kiln_attn_fwd_wgmma_bf16_d128, true, 128)
