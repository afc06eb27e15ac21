/*
 * attention_decode_sm90.cu — kiln_attention's FLASH forward for few query rows per K/V head
 * (decode, speculative decode, a short chunk against a long KV cache): split-KV over a cluster,
 * the query heads of a GQA group packed into one tile (algo FLASH_DECODE; sm_90, clusters).
 *
 * Why: the other forwards give a block one query head's tile of 64-192 rows and walk all its keys.
 * At decode (Sq = 1..8) the tile holds a handful of real rows, the grid has B·Hq blocks (32 for one
 * sequence of a 32-head model: a quarter of the SMs) and each walks the whole KV cache alone. The
 * bytes that matter are K and V, B·Hkv·Sk·2D·2; the FLOPs are 2·(rows of a group) per byte, so the
 * kernel must stream K and V at the copy bandwidth with every SM busy:
 *   - GQA packing: the g = Hq / Hkv query heads that read one K/V head are rows of one tile (packed
 *     row p = head-in-group·Sq + query), so a K/V block is loaded once per group, not g times.
 *   - split-KV: the CS blocks of a cluster (host's choice, CS <= DEC_MAX_CLUSTER) share a tile,
 *     each walking 1/CS of its key blocks, and combine their partial softmax states through
 *     distributed shared memory: deterministic, no workspace, no atomics, no second launch.
 *
 * One block = 4 warps and one tile of DEC_ROWS = 16 packed rows (one m16 row tile, which all four
 * warps share), its share of the key blocks of BC = 64 keys in a cp.async ring of DEC_STAGES
 * slots (attention.cuh's KvBlocks), STAGES - 1 blocks in flight while one is computed. Warp w takes keys 16w .. 16w + 15 of each block: S = Q·Kᵀ (16 x 16,
 * mma.sync over D), attention.cuh's online softmax, O += P·V with P from registers (one k16
 * step). Each warp keeps its own (m, l, O) over its keys. At the end every warp's state goes to
 * shared memory, the cluster synchronizes, and block r of the cluster combines rows r, r + CS, ...
 * over all 4·CS states i:
 *   M = max_i m_i,  w_i = 2^((m_i - M)·scale·log2 e),  L = Σ w_i l_i,  O = Σ w_i O_i / L,
 *   LSE = M·scale + ln L
 * (a state that saw no key has m_i = -inf, w_i = 0; a row that saw none anywhere gets O = 0 and
 * LSE = -inf), reading its peers' states with ld.shared::cluster; a second cluster barrier keeps
 * every block's shared memory alive until its peers have read it.
 *
 * Masking: packed row p is query p % Sq of head p / Sq of the group; key j is visible iff
 * j < Sk and (not causal or j <= query + Sk - Sq). Rows past the group (p >= g·Sq) compute as
 * the last query and are never stored. A tile walks the key blocks its latest query sees.
 * Tensor-core conditions as the other FLASH kernels (f16 / bf16, D == Dv a multiple of 8, head
 * dims contiguous, rows 16-byte aligned; the host checks); head dims padded to 64, 128 or 256.
 */
#include <math.h>

#include "attention.cuh"
#include "gemm_sm90.cuh" /* cluster_ctarank, cluster_nctarank, cluster_sync, ld_shared_cluster_f32 */

namespace kiln {
namespace attn {

template <bool BF16, int DP>
__device__ __forceinline__ void forward_decode(const kiln_attn_args &p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int ROWS = KILN_ATTN_DEC_ROWS, BC = KILN_ATTN_DEC_BC, WARPS = KILN_ATTN_DEC_THREADS / 32;
  constexpr int STAGES = KILN_ATTN_DEC_STAGES;
  static_assert(STAGES >= 2, "a ring of at least two slots");
  constexpr int WK = BC / WARPS, NT = WK / 8, OT = DP / 8, PITCH = DP + KILN_GEMM_PAD;
  constexpr int STATES = WARPS * KILN_ATTN_DEC_MAX_CLUSTER; /* partial states of a row, at most */
  static_assert(ROWS == 16 && WK == 16, "one m16 row tile; a warp's keys are one k16 step of P·V");
  static_assert(KILN_ATTN_DEC_THREADS == THREADS, "KvBlocks copies with the attention kernels' block");
  static_assert((WARPS * ROWS * DP + 2 * WARPS * ROWS + 3 * ROWS * STATES) * 4 <= KILN_ATTN_DEC_SMEM_BYTES(DP),
                "the partial states and the combine's weights fit in the key loop's shared memory");
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *sq = smem, *sk = sq + ROWS * PITCH, *sv = sk + STAGES * BC * PITCH; /* K, V: STAGES slots each */

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int cs = (int)cluster_nctarank(), rank = (int)cluster_ctarank();
  const int tile = blockIdx.x / cs, hk = blockIdx.y, b = blockIdx.z;
  const int group = p.hq / p.hkv, packed = group * p.sq; /* the host keeps packed < 2^31 */
  const int p0 = tile * ROWS, plast = min(p0 + ROWS, packed) - 1;
  /* the tile's earliest and latest queries (a tile across heads holds queries 0 and Sq - 1) */
  const bool one_head = p0 / p.sq == plast / p.sq;
  const int qmin = one_head ? p0 % p.sq : 0, qmax = one_head ? plast % p.sq : p.sq - 1;
  const int shift = p.sk - p.sq; /* query i sees keys j <= i + shift */
  const int nblocks = key_blocks(p, shift, qmax, 1, BC);
  const int blk0 = (int)((int64_t)nblocks * rank / cs), blk1 = (int)((int64_t)nblocks * (rank + 1) / cs);

  /* Q: packed row r is query (p0 + r) % Sq of head hk·g + (p0 + r) / Sq; rows past the group and
   * columns past D are zero-filled (src-size 0) */
  const uint16_t *Qb = (const uint16_t *)p.q + b * p.q_bs;
  for (int c = tid; c < ROWS * (DP / 8); c += THREADS) {
    const int r = c / (DP / 8), col = c % (DP / 8) * 8, pr = p0 + r;
    const bool in = pr < packed && col < p.d;
    const uint16_t *src = in ? Qb + (int64_t)(hk * group + pr / p.sq) * p.q_hs + (int64_t)(pr % p.sq) * p.q_ss + col : Qb;
    cp_async_16(smem_u32(sq + r * PITCH + col), src, in ? 16 : 0);
  }
  const uint16_t *K = (const uint16_t *)p.k + b * p.k_bs + hk * p.k_hs;
  const uint16_t *V = (const uint16_t *)p.v + b * p.v_bs + hk * p.v_hs;
  /* the ring's prologue: blocks blk0 .. blk0 + STAGES - 2, one commit group each (Q in the first;
   * groups past blk1 are empty, so that every iteration waits for the same count) */
  KvBlocks<BC, DP, STAGES> kv(p);
#pragma unroll
  for (int i = 0; i < STAGES - 1; i++) {
    if (blk0 + i < blk1) kv.load(p, K, V, blk0 + i, sk, sv, tid);
    cp_async_commit();
  }

  float o[OT][4];
#pragma unroll
  for (int j = 0; j < OT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const float sl2 = p.scale * LOG2E;
  int query[2]; /* this lane's packed rows lane / 4 and + 8 as queries */
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int pr = p0 + lane / 4 + 8 * r;
    query[r] = pr < packed ? pr % p.sq : p.sq - 1;
  }

  for (int blk = blk0; blk < blk1; blk++) {
    /* into the slot block blk - 1 left (every warp is past it: the barrier ending that step) */
    if (blk + STAGES - 1 < blk1) kv.load(p, K, V, blk + STAGES - 1, sk, sv, tid);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    __syncthreads(); /* Q and block blk have landed for every thread */
    const uint16_t *skb = sk + (blk % STAGES) * BC * PITCH, *svb = sv + (blk % STAGES) * BC * PITCH;

    /* S = Q·Kᵀ for this warp's 16 keys over the padded D */
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < DP; kd += 16) {
      uint32_t a[4], b0[2], b1[2];
      load_a_frag<true, ROWS, DP>(a, sq, 0, kd, lane);
      load_b_frag_pair<true, BC, DP>(b0, b1, skb, warp * WK, kd, lane);
      mma_16816<BF16>(s[0], a, b0);
      mma_16816<BF16>(s[1], a, b1);
    }

    /* mask where the block holds keys past Sk or, causal, past the earliest query's diagonal:
     * element e of fragment j is key k0 + 16 warp + 8 j + 2 (lane % 4) + (e & 1) of row
     * query[e >> 1] (softmax_step's own mask assumes rows row0 and row0 + 8) */
    const int k0 = blk * BC;
    if (k0 + BC > p.sk || (p.causal && k0 + BC - 1 > qmin + shift)) {
#pragma unroll
      for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          if (!key_visible(k0 + warp * WK + 8 * j + (lane % 4) * 2 + (e & 1), query[e >> 1], p.sk, p.causal, shift))
            s[j][e] = -INFINITY;
    }
    float corr[2];
    softmax_step<false>(s, m, l, corr, sl2, 0, 0, p.sk, p.causal, shift);
    rescale(o, corr);

    /* O += P·V over the warp's 16 keys: one k16 step, P as the A fragment */
    uint32_t a[4];
    acc_to_a_frag<BF16>(a, s, 0);
#pragma unroll
    for (int j = 0; j < OT; j += 2) {
      uint32_t b0[2], b1[2];
      load_b_frag_pair<false, DP, BC>(b0, b1, svb, j * 8, warp * WK, lane);
      mma_16816<BF16>(o[j], a, b0);
      mma_16816<BF16>(o[j + 1], a, b1);
    }
    __syncthreads(); /* every warp is done with slot blk % STAGES before it is refilled */
  }
  cp_async_wait<0>();
  __syncthreads(); /* the key loop's shared memory is free for the partial states */

  /* This warp's state: O [ROWS][DP] (unnormalized, relative to m), m and l per row. */
  float *part = reinterpret_cast<float *>(smem);
  float *pm = part + WARPS * ROWS * DP, *pl = pm + WARPS * ROWS;
  float *wm = pl + WARPS * ROWS, *wl = wm + ROWS * STATES, *wt = wl + ROWS * STATES; /* the combine's */
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int row = lane / 4 + 8 * r;
    const float lsum = row_sum4(l[r]);
    float *orow = part + (warp * ROWS + row) * DP + (lane % 4) * 2;
#pragma unroll
    for (int j = 0; j < OT; j++) orow[8 * j] = o[j][2 * r], orow[8 * j + 1] = o[j][2 * r + 1];
    if (lane % 4 == 0) pm[warp * ROWS + row] = m[r], pl[warp * ROWS + row] = lsum;
  }
  cluster_sync(); /* every block's states are written (release / acquire at cluster scope) */

  /* Combine: this block's rows are rank, rank + cs, ...; state i = (block i / WARPS, warp
   * i % WARPS). First each (row, state) pair's m and l, then each row's weights w_i / L and its
   * LSE, then the columns. */
  const int mine = (ROWS - rank + cs - 1) / cs, states = WARPS * cs;
  for (int e = tid; e < mine * states; e += THREADS) {
    const int k = e / states, i = e % states, row = rank + k * cs, at = (i % WARPS) * ROWS + row;
    wm[k * STATES + i] = ld_shared_cluster_f32(pm + at, (uint32_t)(i / WARPS));
    wl[k * STATES + i] = ld_shared_cluster_f32(pl + at, (uint32_t)(i / WARPS));
  }
  __syncthreads();
  for (int k = tid; k < mine; k += THREADS) {
    float mx = -INFINITY, sum = 0.f;
    for (int i = 0; i < states; i++) mx = fmaxf(mx, wm[k * STATES + i]);
    for (int i = 0; i < states; i++) {
      const float mi = wm[k * STATES + i];
      wt[k * STATES + i] = mi == -INFINITY ? 0.f : exp2_fast((mi - mx) * sl2);
      sum += wt[k * STATES + i] * wl[k * STATES + i];
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (int i = 0; i < states; i++) wt[k * STATES + i] *= inv;
    const int pr = p0 + rank + k * cs;
    if (p.lse && pr < packed)
      p.lse[b * p.lse_bs + (hk * group + pr / p.sq) * p.lse_hs + pr % p.sq] =
          sum > 0.f ? (mx * sl2 + log2f(sum)) * 0.6931471805599453f : -INFINITY;
  }
  __syncthreads();
  const int esize = p.o_dtype == KILN_DT_F32 ? 4 : 2;
  for (int e = tid; e < mine * DP; e += THREADS) {
    const int k = e / DP, col = e % DP, pr = p0 + rank + k * cs;
    if (pr >= packed || col >= p.d) continue;
    float acc = 0.f;
    for (int i = 0; i < states; i++) {
      const float w = wt[k * STATES + i];
      if (w != 0.f) acc += w * ld_shared_cluster_f32(part + ((i % WARPS) * ROWS + rank + k * cs) * DP + col, (uint32_t)(i / WARPS));
    }
    char *orow = (char *)p.o + (b * p.o_bs + (hk * group + pr / p.sq) * p.o_hs + (int64_t)(pr % p.sq) * p.o_ss) * esize;
    kiln_store_from_f32(orow, col, p.o_dtype, acc);
  }
  cluster_sync(); /* no block leaves while a peer may still read its shared memory */
#else
  (void)p;
  __trap(); /* the host launches these kernels only on sm_90 */
#endif
}

} /* namespace attn */
} /* namespace kiln */

/* Blocks per SM 1 in the bounds: without it ptxas capped the D = 128 kernels at 128 registers and
 * spilled (4 bytes); with it they take 163 (D = 64: 103, D = 256: 255), no spills, and shared
 * memory still allows three blocks per SM at D = 128. */
#define KILN_ATTN_DEC_ENTRY(name, bf16, dp)                                                                  \
  extern "C" __global__ void __launch_bounds__(KILN_ATTN_DEC_THREADS, 1) name(const kiln_attn_args args) { \
    kiln::attn::forward_decode<bf16, dp>(args);                                                         \
  }
KILN_ATTN_DEC_ENTRY(kiln_attn_fwd_decode_f16_d64, false, 64)
KILN_ATTN_DEC_ENTRY(kiln_attn_fwd_decode_f16_d128, false, 128)
KILN_ATTN_DEC_ENTRY(kiln_attn_fwd_decode_f16_d256, false, 256)
KILN_ATTN_DEC_ENTRY(kiln_attn_fwd_decode_bf16_d64, true, 64)
KILN_ATTN_DEC_ENTRY(kiln_attn_fwd_decode_bf16_d128, true, 128)
KILN_ATTN_DEC_ENTRY(kiln_attn_fwd_decode_bf16_d256, true, 256)
