/*
 * attention_bwd_sm80.cu — kiln_attention_backward's FLASH kernels for sm_80+ (mma.sync).
 *
 * With P = exp(scale·Q·Kᵀ − LSE) recomputed from the forward's LSE (never stored), the
 * gradients are
 *   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − delta),  delta_i = dO_i · O_i,
 *   dQ = scale · dS·K,  dK = scale · dSᵀ·Q.
 * Three kernels, all deterministic (no atomics, every sum in a fixed order):
 *   1. delta: eight threads per query row; also converts dO into the workspace when the MMA
 *      kernels cannot read it as given (another dtype, unaligned or strided head dimension).
 *   2. dK/dV: a block owns 64 keys and walks every query of its GQA group's heads, so the group
 *      reduction of dK and dV happens in registers. Per warp and query step it computes the
 *      transposed products Sᵀ = K_w·Qᵀ and dPᵀ = V_w·dOᵀ (16 keys x BM queries): their
 *      accumulators are then, element for element, the A fragments of dV += Pᵀ·dO and
 *      dK += dSᵀ·Q (attention.cuh), so P and dS never leave registers.
 *   3. dQ: a block owns 64 query rows and walks the keys (like the forward), recomputing S and
 *      dP, and accumulates dQ += dS·K in registers.
 * Splitting dQ from dK/dV recomputes Q·Kᵀ and dO·Vᵀ once more (7 products of the S² kind
 * instead of 5) but needs no f32 atomics on dQ and no dQ accumulator in global memory:
 * FlashAttention-2 accumulates dQ with atomics in its default (non-deterministic) mode.
 *
 * Operands come from shared memory exactly as in the forward: [rows][DP] tiles (TileLoader,
 * padded rows), ldmatrix for operands whose contiguous dimension is the reduction dimension (K
 * and V for Sᵀ/dPᵀ as A; Q and dO as B of Sᵀ = K·Qᵀ; K and V as B of S and dP) and
 * ldmatrix.trans otherwise (Q and dO as B of dK and dV; K as B of dQ).
 *
 * Masking: P is 0 wherever the key is not visible (as in the forward) and for padded query rows,
 * whose LSE is staged as +inf; a row with no visible key (LSE = -inf) is staged as +inf too, so
 * exp2(s − lse) = 0 and every gradient of it is 0, as on the CPU.
 */
#include <math.h>

#include "attention.cuh"

namespace kiln {
namespace attn {

/* Eight elements of a 16-bit (dt) row from one 16-byte load, in f32. */
KILN_DEVICE void load8_f32(const void *base, int64_t i, int dt, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4 *>((const char *)base + i * 2);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    v[2 * k] = dt == KILN_DT_BF16 ? __uint_as_float(w[k] << 16) : __half2float(__ushort_as_half((uint16_t)w[k]));
    v[2 * k + 1] = dt == KILN_DT_BF16 ? __uint_as_float(w[k] & 0xFFFF0000u)
                                      : __half2float(__ushort_as_half((uint16_t)(w[k] >> 16)));
  }
}

/* 1. delta_i = Σ_d dO[i, d]·O[i, d] in f32, DELTA_LANES threads per row: a block holds
 * DELTA_ROWS rows of one head (grid: row tiles x query heads x batch, so no index division).
 * 16-bit O and dO with contiguous, 16-byte aligned rows are read 16 bytes per thread; anything
 * else (f32, strided or unaligned rows, or dO copied to do_copy) element by element. The first
 * version (a warp per row, 2-byte loads, 64-bit divisions for the row's coordinates) was
 * instruction-bound: 304 µs at B8 H32 S2048 D64, where SDPA's dot_do_o took 73 (ncu). */
__device__ __forceinline__ void delta_rows(const kiln_attn_args &p) {
  const int g = threadIdx.x % KILN_ATTN_DELTA_LANES, s = blockIdx.x * KILN_ATTN_DELTA_ROWS + threadIdx.x / KILN_ATTN_DELTA_LANES;
  const int h = blockIdx.y, b = blockIdx.z;
  const bool valid = s < p.sq; /* no early return: the group's lanes shuffle below */
  const int64_t ob = b * p.o_bs + h * p.o_hs + (int64_t)s * p.o_ss, gb = b * p.do_bs + h * p.do_hs + (int64_t)s * p.do_ss;
  const int64_t row = ((int64_t)b * p.hq + h) * p.sq + s;
  float acc = 0.f;
  if (valid && !p.do_copy && p.dv_dim % 8 == 0 && rows_vec16(p.o, p.o_dtype, p.o_bs, p.o_hs, p.o_ss, p.o_ds) &&
      rows_vec16(p.dout, p.do_dtype, p.do_bs, p.do_hs, p.do_ss, p.do_ds)) {
    for (int d = 8 * g; d < p.dv_dim; d += 8 * KILN_ATTN_DELTA_LANES) {
      float o[8], go[8];
      load8_f32(p.o, ob + d, p.o_dtype, o);
      load8_f32(p.dout, gb + d, p.do_dtype, go);
#pragma unroll
      for (int k = 0; k < 8; k++) acc = fmaf(go[k], o[k], acc);
    }
  } else if (valid) {
    for (int d = g; d < p.dv_dim; d += KILN_ATTN_DELTA_LANES) {
      const float go = kiln_load_as_f32(p.dout, gb + d * p.do_ds, p.do_dtype);
      acc += go * kiln_load_as_f32(p.o, ob + d * p.o_ds, p.o_dtype);
      if (p.do_copy) kiln_store_from_f32(p.do_copy, row * p.dv_dim + d, p.in_dtype, go);
    }
  }
#pragma unroll
  for (int off = KILN_ATTN_DELTA_LANES / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (valid && g == 0) p.delta[row] = acc;
  /* the fused backward's dQ accumulator (kiln_abi.h): this block's share of its head's plane */
  if (p.dq_acc) {
    const int rows = KILN_ATTN_DQ_ACC_ROWS(KILN_ATTN_DQ_ACC_DP(p.d));
    const int64_t plane4 = (int64_t)((p.sq + rows - 1) / rows) * (KILN_ATTN_DQ_ACC_BLOCK / 4);
    float4 *z = reinterpret_cast<float4 *>(p.dq_acc) + ((int64_t)b * p.hq + h) * plane4;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane4; i += (int64_t)gridDim.x * blockDim.x)
      z[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

/* 2. dK and dV of KV_BN keys (16 per warp) and KV_DO columns, summed over the group's heads. */
template <bool BF16, int DP>
__device__ __forceinline__ void dkdv(const kiln_attn_args &p) {
  constexpr int BN = KILN_ATTN_BWD_KV_BN, BM = KILN_ATTN_BWD_KV_BM(DP), DO = KILN_ATTN_BWD_KV_DO(DP);
  constexpr int PITCH = DP + KILN_GEMM_PAD, NQ = BM / 8, NO = DO / 8;
  static_assert(BN == 16 * (THREADS / 32), "one m16 key tile per warp");
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *sk = smem, *sv = sk + BN * PITCH, *sq = sv + BN * PITCH, *sdo = sq + 2 * BM * PITCH;
  float *slse = reinterpret_cast<float *>(sdo + 2 * BM * PITCH), *sdelta = slse + 2 * BM;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int splits = DP / DO, hk = blockIdx.y / splits, dcol0 = blockIdx.y % splits * DO, b = blockIdx.z;
  const int k0 = blockIdx.x * BN, group = p.hq / p.hkv, shift = p.sk - p.sq;

  /* Queries that see any key of this block: i >= k0 - shift when causal. */
  const int q_first = p.causal ? max(0, k0 - shift) : 0;
  const int qb_first = q_first / BM, per_head = q_first < p.sq ? (p.sq + BM - 1) / BM - qb_first : 0;
  const int steps = group * per_head;

  TileLoader<BN, DP, THREADS> lk, lv;
  lk.g = (const uint16_t *)p.k + b * p.k_bs + hk * p.k_hs + (int64_t)k0 * p.k_ss;
  lv.g = (const uint16_t *)p.v + b * p.v_bs + hk * p.v_hs + (int64_t)k0 * p.v_ss;
  lk.ld = p.k_ss;
  lv.ld = p.v_ss;
  lk.rows_left = lv.rows_left = p.sk - k0;
  lk.cols_left = lv.cols_left = p.d;
  TileLoader<BM, DP, THREADS> lq, ldo;
  lq.ld = p.q_ss;
  ldo.ld = p.do_ss;
  lq.cols_left = ldo.cols_left = p.d;
  auto load_q = [&](int step) {
    const int h = hk * group + step / per_head, q0 = (qb_first + step % per_head) * BM, buf = step % 2;
    lq.g = (const uint16_t *)p.q + b * p.q_bs + h * p.q_hs + (int64_t)q0 * p.q_ss;
    ldo.g = (const uint16_t *)p.dout + b * p.do_bs + h * p.do_hs + (int64_t)q0 * p.do_ss;
    lq.rows_left = ldo.rows_left = p.sq - q0;
    lq.async_copy(sq + buf * BM * PITCH, tid);
    ldo.async_copy(sdo + buf * BM * PITCH, tid);
    if (tid < BM) {
      const int row = q0 + tid;
      const int64_t r = ((int64_t)b * p.hq + h) * p.sq + row;
      slse[buf * BM + tid] = row < p.sq ? lse_log2(p.lse[b * p.lse_bs + h * p.lse_hs + row]) : INFINITY;
      sdelta[buf * BM + tid] = row < p.sq ? p.delta[r] : 0.f;
    }
  };

  lk.async_copy(sk, tid);
  lv.async_copy(sv, tid);
  if (steps > 0) load_q(0);
  cp_async_commit();

  float dk[NO][4], dv[NO][4];
#pragma unroll
  for (int j = 0; j < NO; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.f;
  const float sl2 = p.scale * LOG2E;
  const int key0 = k0 + warp * 16 + lane / 4; /* key of accumulator half h: key0 + 8h */

  for (int step = 0; step < steps; step++) {
    if (step + 1 < steps) load_q(step + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int buf = step % 2, q0 = (qb_first + step % per_head) * BM;
    const uint16_t *sqb = sq + buf * BM * PITCH, *sdob = sdo + buf * BM * PITCH;
    const float *lse2 = slse + buf * BM, *delta = sdelta + buf * BM;

    /* Sᵀ = K_w·Qᵀ and dPᵀ = V_w·dOᵀ over the padded D */
    float st[NQ][4], dpt[NQ][4];
    product_pair<BF16, BN, BM, DP>(st, dpt, sk, sv, sqb, sdob, warp, lane);

    /* Pᵀ and dSᵀ in place */
#pragma unroll
    for (int j = 0; j < NQ; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int qi = j * 8 + (lane % 4) * 2 + (e & 1), key = key0 + 8 * (e >> 1);
        const bool visible = key < p.sk && (!p.causal || key <= q0 + qi + shift);
        const float pr = visible ? exp2f(st[j][e] * sl2 - lse2[qi]) : 0.f;
        st[j][e] = pr;
        dpt[j][e] = pr * (dpt[j][e] - delta[qi]);
      }

    /* dV += Pᵀ·dO and dK += dSᵀ·Q on this block's output columns */
#pragma unroll
    for (int t = 0; t < BM / 16; t++) {
      uint32_t ap[4], ads[4];
      acc_to_a_frag<BF16>(ap, st, t);
      acc_to_a_frag<BF16>(ads, dpt, t);
#pragma unroll
      for (int j = 0; j < NO; j += 2) {
        uint32_t b0[2], b1[2];
        load_b_frag_pair<false, DP, BM>(b0, b1, sdob, dcol0 + j * 8, t * 16, lane);
        mma_16816<BF16>(dv[j], ap, b0);
        mma_16816<BF16>(dv[j + 1], ap, b1);
        load_b_frag_pair<false, DP, BM>(b0, b1, sqb, dcol0 + j * 8, t * 16, lane);
        mma_16816<BF16>(dk[j], ads, b0);
        mma_16816<BF16>(dk[j + 1], ads, b1);
      }
    }
    __syncthreads(); /* buffer `buf` is refilled by the next step's prefetch */
  }
  cp_async_wait<0>();

  const int r0 = k0 + warp * 16;
  if (p.dk)
    store_rows<NO>(dk, p.dk, b * p.dk_bs + hk * p.dk_hs, p.dk_ss, p.dk_ds, p.dk_dtype, r0, p.sk, dcol0, p.d,
                   p.scale, lane);
  if (p.dv)
    store_rows<NO>(dv, p.dv, b * p.dv_bs + hk * p.dv_hs, p.dv_ss, p.dv_ds, p.dv_dtype, r0, p.sk, dcol0,
                   p.dv_dim, 1.f, lane);
}

/* 3. dQ of Q_BM query rows (16 per warp), over the visible keys. */
template <bool BF16, int DP>
__device__ __forceinline__ void dq(const kiln_attn_args &p) {
  constexpr int BM = KILN_ATTN_BWD_Q_BM, BN = KILN_ATTN_BWD_Q_BN(DP);
  constexpr int PITCH = DP + KILN_GEMM_PAD, NK = BN / 8, OT = DP / 8;
  static_assert(BM == 16 * (THREADS / 32), "one m16 query tile per warp");
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t *sq = smem, *sdo = sq + BM * PITCH, *sk = sdo + BM * PITCH, *sv = sk + 2 * BN * PITCH;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int q0 = blockIdx.x * BM, h = blockIdx.y, b = blockIdx.z, hk = h / (p.hq / p.hkv);
  const uint16_t *K = (const uint16_t *)p.k + b * p.k_bs + hk * p.k_hs;
  const uint16_t *V = (const uint16_t *)p.v + b * p.v_bs + hk * p.v_hs;

  const int shift = p.sk - p.sq;
  const int nblocks = key_blocks(p, shift, q0, BM, BN);

  TileLoader<BM, DP, THREADS> lq, ldo;
  lq.g = (const uint16_t *)p.q + b * p.q_bs + h * p.q_hs + (int64_t)q0 * p.q_ss;
  ldo.g = (const uint16_t *)p.dout + b * p.do_bs + h * p.do_hs + (int64_t)q0 * p.do_ss;
  lq.ld = p.q_ss;
  ldo.ld = p.do_ss;
  lq.rows_left = ldo.rows_left = p.sq - q0;
  lq.cols_left = ldo.cols_left = p.d;
  KvBlocks<BN, DP> kv(p);
  lq.async_copy(sq, tid);
  ldo.async_copy(sdo, tid);
  if (nblocks > 0) kv.load(p, K, V, 0, sk, sv, tid);
  cp_async_commit();

  /* this lane's two rows: statistics in registers */
  const int row0 = q0 + warp * 16 + lane / 4;
  float lse2[2], delta[2];
  row_stats(p, b, h, row0, lse2, delta);
  float acc[OT][4];
#pragma unroll
  for (int j = 0; j < OT; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc[j][e] = 0.f;
  const float sl2 = p.scale * LOG2E;

  for (int blk = 0; blk < nblocks; blk++) {
    if (blk + 1 < nblocks) kv.load(p, K, V, blk + 1, sk, sv, tid);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint16_t *skb = sk + (blk % 2) * BN * PITCH, *svb = sv + (blk % 2) * BN * PITCH;

    /* S = Q_w·Kᵀ and dP = dO_w·Vᵀ */
    float s[NK][4], dp[NK][4];
    product_pair<BF16, BM, BN, DP>(s, dp, sq, sdo, skb, svb, warp, lane);

    /* dS in place of dP */
    const int kb = blk * BN;
#pragma unroll
    for (int j = 0; j < NK; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = kb + j * 8 + (lane % 4) * 2 + (e & 1), r = e >> 1;
        const bool visible = key < p.sk && (!p.causal || key <= row0 + 8 * r + shift);
        const float pr = visible ? exp2f(s[j][e] * sl2 - lse2[r]) : 0.f;
        dp[j][e] = pr * (dp[j][e] - delta[r]);
      }

    /* dQ += dS·K */
#pragma unroll
    for (int t = 0; t < BN / 16; t++) {
      uint32_t a[4];
      acc_to_a_frag<BF16>(a, dp, t);
#pragma unroll
      for (int j = 0; j < OT; j += 2) {
        uint32_t b0[2], b1[2];
        load_b_frag_pair<false, DP, BN>(b0, b1, skb, j * 8, t * 16, lane);
        mma_16816<BF16>(acc[j], a, b0);
        mma_16816<BF16>(acc[j + 1], a, b1);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  store_rows<OT>(acc, p.dq, b * p.dq_bs + h * p.dq_hs, p.dq_ss, p.dq_ds, p.dq_dtype, q0 + warp * 16, p.sq, 0, p.d,
                 p.scale, lane);
}

} /* namespace attn */
} /* namespace kiln */

extern "C" __global__ void __launch_bounds__(kiln::attn::THREADS) kiln_attn_bwd_delta(const kiln_attn_args args) {
  kiln::attn::delta_rows(args);
}

#define KILN_ATTN_BWD_ENTRIES(dt, bf16, dp)                                                              \
  extern "C" __global__ void __launch_bounds__(kiln::attn::THREADS)                                      \
      kiln_attn_bwd_dkdv_##dt##_d##dp(const kiln_attn_args args) {                                       \
    kiln::attn::dkdv<bf16, dp>(args);                                                                    \
  }                                                                                                      \
  extern "C" __global__ void __launch_bounds__(kiln::attn::THREADS) kiln_attn_bwd_dq_##dt##_d##dp(       \
      const kiln_attn_args args) {                                                                       \
    kiln::attn::dq<bf16, dp>(args);                                                                      \
  }
KILN_ATTN_BWD_ENTRIES(f16, false, 64)
KILN_ATTN_BWD_ENTRIES(f16, false, 128)
KILN_ATTN_BWD_ENTRIES(f16, false, 256)
KILN_ATTN_BWD_ENTRIES(bf16, true, 64)
KILN_ATTN_BWD_ENTRIES(bf16, true, 128)
KILN_ATTN_BWD_ENTRIES(bf16, true, 256)
