/*
 * attention_bwd_sm90.cu — kiln_attention_backward's FLASH kernels for Hopper (sm_90a), head dims
 * padded to 64, 128 or 256: the math and the split of attention_bwd_sm80.cu (delta there; dK/dV
 * and dQ here, deterministic, no atomics), with warpgroup MMA fed by TMA (attention_sm90.cuh):
 *
 *   dK/dV: a block owns 128 keys of one K/V head (64 per consumer warpgroup); K and V are loaded
 *          once, Q and dO stream through the ring, BM = 128 (D = 64) or 64 (D = 128) query rows
 *          per step, every head of the GQA group in turn (the group's sum happens in registers).
 *          Per step and warpgroup:
 *            Sᵀ  = K_w·Qᵀ, dPᵀ = V_w·dOᵀ       wgmma m64nBMk16, both operands k-major in smem
 *            Pᵀ  = exp2(Sᵀ·sl2 − lse2), dSᵀ = Pᵀ ∘ (dPᵀ − delta)      (per query column)
 *            dV += Pᵀ·dO, dK += dSᵀ·Q            wgmma m64nDk16, A from registers (the
 *                                                accumulator layout of Sᵀ), dO and Q n-major
 *          The step's LSE (log2 units, +inf for padded rows or rows that saw no key) and delta
 *          are staged in shared memory by the consumers, behind a named barrier. At D = 256 the
 *          block owns 64 keys and its consumers split these products by role (dkdv_roles).
 *   dQ:    a block owns 128 query rows (64 per consumer); Q and dO are loaded once, K and V
 *          stream through the ring (128, 64 or 32 keys per step at D = 64, 128, 256); the wide
 *          D = 64 configuration has a third consumer warpgroup (192 rows, 64 keys per step), so
 *          that two warpgroups' elementwise work runs under the third's products:
 *            S = Q_w·Kᵀ, dP = dO_w·Vᵀ; dS = P ∘ (dP − delta); dQ += dS·K (K n-major)
 * dK, dQ are scaled by `scale` at the end; every store is predicated (rows < S, columns < D).
 *
 * Masking: padded query rows have P = 0 (lse2 = +inf) and zero dO, Q; keys past Sk and, when
 * causal, right of the diagonal get the score -inf (P = 0) before the exponent, in a pass that
 * only the steps holding any of them run.
 */
#include "attention_sm90.cuh"

namespace kiln {
namespace attn {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Pᵀ in place of Sᵀ for a warpgroup's 64 keys (this lane's rows key0 and key0 + 8) of the block
 * of BN keys from k0, and the BM queries from q0 (lse2: their LSE in log2 units): keys past Sk
 * and, when causal, right of the diagonal get -inf scores first, in the steps whose block holds
 * any, so that the common step runs no mask at all; then Pᵀ = exp2(Sᵀ·sl2 − lse2). */
template <int BM, int BN>
__device__ __forceinline__ void scores_to_p(float (&st4)[BM / 8][4], const float *lse2, const kiln_attn_args &p,
                                            int key0, int k0, int q0, int shift, float sl2, int lane) {
  if (k0 + BN > p.sk || (p.causal && q0 < k0 + BN - 1 - shift)) {
#pragma unroll
    for (int j = 0; j < BM / 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int qi = j * 8 + (lane % 4) * 2 + (e & 1), key = key0 + 8 * (e >> 1);
        if (key >= p.sk || (p.causal && key > q0 + qi + shift)) st4[j][e] = -INFINITY;
      }
  }
#pragma unroll
  for (int j = 0; j < BM / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) st4[j][e] = exp2_fast(fmaf(st4[j][e], sl2, -lse2[j * 8 + (lane % 4) * 2 + (e & 1)]));
}

/* Named barriers of the D = 256 dK/dV kernel's P exchange, per buffer (attention_sm90.cuh has 1-7). */
constexpr int BAR_P_READY = 8, BAR_P_FREE = 10;

/* The D = 256 dK/dV kernel's consumers (kiln_abi.h): the block owns 64 keys k0 .. k0 + 63, and its
 * two consumer warpgroups split each step's products by role, since one 64 x 256 accumulator
 * takes 128 of a thread's registers and dK and dV together would take all of them:
 *   role 0: Sᵀ = K·Qᵀ, Pᵀ = exp2(Sᵀ·sl2 − lse2) (masked), Pᵀ's A fragments into the exchange
 *           buffer, dV += Pᵀ·dO;
 *   role 1: dPᵀ = V·dOᵀ, Pᵀ from the exchange buffer, dSᵀ = Pᵀ ∘ (dPᵀ − delta), dK += dSᵀ·Q.
 * Both products of a step run at once (4 of the step's tensor-core units, none repeated); role 1
 * waits for role 0's P once a step. The exchange holds both warpgroups' fragments in the same
 * accumulator layout (64 keys x BM queries: thread t's words are its own), so it needs no
 * swizzle: word i of thread t at [buffer][i][t], free of bank conflicts. Two buffers: role 0
 * writes buffer `step & 1` after role 1 released what it read two steps before (BAR_P_FREE),
 * role 1 reads it after role 0 filled it (BAR_P_READY). Each role stages its own per-query
 * vector (LSE in log2 units, or delta) in two buffers behind its own warpgroup barrier. */
template <bool BF16, int DP, int BM, int STAGES>
__device__ __forceinline__ void dkdv_roles(const kiln_attn_args &p, uint8_t *sk, uint8_t *sv, uint8_t *ring,
                                           uint64_t *kv_full, float *stats, uint32_t *xch, int role, int k0, int hk,
                                           int b, int group, int per_head, int qb_first, int steps, int shift) {
  using namespace sm90;
  uint64_t *q_full = kv_full + 1, *do_full = q_full + STAGES, *empty = do_full + STAGES; /* init_barriers' order */
  constexpr int FRAG = BM / 4; /* P's A-fragment words a thread */
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  float acc[DP / 2], sc[BM / 2]; /* dV and Sᵀ (role 0), dK and dPᵀ (role 1) */
  auto &acc4 = *reinterpret_cast<float(*)[DP / 8][4]>(acc);
  auto &sc4 = *reinterpret_cast<float(*)[BM / 8][4]>(sc);
#pragma unroll
  for (int i = 0; i < DP / 2; i++) acc[i] = 0.f;
  const float sl2 = p.scale * LOG2E;
  const int key0 = k0 + 16 * warp + lane / 4; /* this lane's keys: key0, key0 + 8 */
  mbar_wait(kv_full, 0);
  for (int step = 0; step < steps; step++) {
    const int s = step % STAGES, h = hk * group + step / per_head, q0 = (qb_first + step % per_head) * BM;
    const int buf = step & 1;
    const uint32_t phase = (step / STAGES) & 1;
    const uint8_t *sqt = ring_tile<DP, BM>(ring, s, 0), *sdo = ring_tile<DP, BM>(ring, s, 1);
    /* Sᵀ = K·Qᵀ or dPᵀ = V·dOᵀ, issued before the column statistics' global loads run under it */
    if (role == 0)
      score_product<BM, BF16, 64, DP, true>(sc, sk, sqt, &q_full[s], phase);
    else
      score_product<BM, BF16, 64, DP, true>(sc, sv, sdo, &do_full[s], phase);
    float *col = stats + (role * 2 + buf) * BM; /* lse2 (role 0) or delta (role 1) of the step's queries */
    if (t < BM) col[t] = role == 0 ? row_lse2(p, b, h, q0 + t) : row_delta(p, b, h, q0 + t);
    warpgroup_sync(role);
    wgmma_wait<0>();
    uint32_t *x = xch + buf * FRAG * 128 + t;
    if (role == 0) {
      scores_to_p<BM, 64>(sc4, col, p, key0, k0, q0, shift, sl2, lane);
      uint32_t ap[BM / 16][4];
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) acc_to_a_frag<BF16>(ap[kk], sc4, kk);
      if (step >= 2) named_sync(BAR_P_FREE + buf, 256); /* role 1 has read this buffer's P of step - 2 */
#pragma unroll
      for (int i = 0; i < FRAG; i++) x[i * 128] = ap[i / 4][i % 4];
      named_arrive(BAR_P_READY + buf, 256);
      /* dV += Pᵀ·dO */
      mbar_wait(&do_full[s], phase);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) wgmma_rs_m64k16<DP, BF16, 1>(acc, ap[kk], nmajor_desc<BM>(sdo, kk));
    } else {
      named_sync(BAR_P_READY + buf, 256);
      uint32_t pf[FRAG];
#pragma unroll
      for (int i = 0; i < FRAG; i++) pf[i] = x[i * 128];
      if (step + 2 < steps) named_arrive(BAR_P_FREE + buf, 256); /* role 0 syncs on it at step + 2 */
      /* dSᵀ = Pᵀ ∘ (dPᵀ − delta) in place of dPᵀ, P rounded to 16 bits as dSᵀ is next */
#pragma unroll
      for (int j = 0; j < BM / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          sc4[j][e] = unpack_half<BF16>(pf[(j / 2) * 4 + (j % 2) * 2 + (e >> 1)], e & 1) *
                      (sc4[j][e] - col[j * 8 + (lane % 4) * 2 + (e & 1)]);
      uint32_t ads[BM / 16][4];
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) acc_to_a_frag<BF16>(ads[kk], sc4, kk);
      /* dK += dSᵀ·Q */
      mbar_wait(&q_full[s], phase);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) wgmma_rs_m64k16<DP, BF16, 1>(acc, ads[kk], nmajor_desc<BM>(sqt, kk));
    }
    wgmma_commit();
    wgmma_wait<0>();
    if (t == 0) mbar_arrive(&empty[s]);
  }
  /* every MMA on the K and V tiles has retired in both warpgroups before they stage the results:
   * dV·1 through V's tile (role 0), dK·scale through K's (role 1) */
  consumers_sync();
  if (role == 0 && p.dv)
    store_acc<DP, 64, BF16>(acc4, 1.f, sv, p.dv, p.dv_dtype, b * p.dv_bs + hk * p.dv_hs, p.dv_bs, p.dv_hs, p.dv_ss,
                            p.dv_ds, k0, p.sk, p.dv_dim, role, t);
  if (role == 1 && p.dk)
    store_acc<DP, 64, BF16>(acc4, p.scale, sk, p.dk, p.dk_dtype, b * p.dk_bs + hk * p.dk_hs, p.dk_bs, p.dk_hs, p.dk_ss,
                            p.dk_ds, k0, p.sk, p.d, role, t);
}
#endif

/* DQ: the fused backward (kiln_abi.h, KILN_ATTN_BWD_FUSED; D = 64 and 128): each step also
 * computes dQ_step = dS·K over the block's 128 keys and adds it to p.dq_acc. Per step, after dK's
 * product:
 *   1. both warpgroups write their dSᵀ fragments (16-bit, as dK's product takes them) into the
 *      dSᵀ tile, [128 keys][BM queries] as BM / 64 boxes of 64 queries in the 128-byte swizzle;
 *   2. barrier; warpgroup w computes a 64 x 64 part of dQ_step = dS·K by wgmma with A = a box of
 *      the tile read m-major (the transpose flag) and B = a box of K n-major, as the dQ kernel's
 *      dS·K, k16 step kk over keys 16kk ..: at D = 64 rows 64w .. (box w of dSᵀ, K's one box),
 *      at D = 128 columns 64w .. (dSᵀ's one box, box w of K);
 *   3. once every product of the step retired, dQ_step goes into the f32 staging tile in
 *      fragment order (float4 stores, consecutive threads consecutive addresses), and after the
 *      next step's statistics barrier one thread hands the whole 32 KB block to the L2 as one
 *      bulk reduction (cp.reduce.async.bulk add.f32), which runs under that step's products.
 * The staging tile is written again only after that thread saw the reduction's reads finish
 * (bulk_wait_read before barrier 2), and the dSᵀ tile only after both warpgroups' dS·K retired
 * (the statistics barrier at the top of the step follows each warpgroup's wgmma_wait<0>). */
template <bool BF16, int DP, bool DQ>
__device__ __forceinline__ void dkdv_sm90(const kiln_attn_args &p, const CUtensorMap *map_q, const CUtensorMap *map_k,
                                          const CUtensorMap *map_v, const CUtensorMap *map_do) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BN = KILN_ATTN_WG_KV_BN(DP), BM = KILN_ATTN_WG_KV_BM(DP), STAGES = KILN_ATTN_WG_BWD_STAGES;
  constexpr int FIXED = BN * DP * 2, RING = STAGES * 2 * BM * DP * 2;
  static_assert(KILN_ATTN_WG_KV_SMEM_BYTES(DP) >= 2 * FIXED + RING + 1024 + (1 + 3 * STAGES) * 8 + 4 * BM * 4 +
                                                     KILN_ATTN_WG_KV_XCH_BYTES(DP),
                "smem budget");
  /* the fused kernel's dSᵀ and dQ staging tiles, 1024-aligned after the statistics */
  constexpr int DS_AT = (2 * FIXED + RING + (1 + 3 * STAGES) * 8 + 4 * BM * 4 + 1023) / 1024 * 1024;
  static_assert(!DQ || (DP <= 128 && BN == 128 && BM == KILN_ATTN_DQ_ACC_ROWS(DP) &&
                        KILN_ATTN_WG_KVQ_SMEM_BYTES(DP) >= 1024 + DS_AT + BN * BM * 2 + KILN_ATTN_DQ_ACC_BLOCK * 4),
                "the fused backward: 128 keys and a dQ block of rows a step, smem budget");
  extern __shared__ uint8_t smem_raw[];
  uint8_t *sk = smem_base(smem_raw), *sv = sk + FIXED, *ring = sk + 2 * FIXED; /* slot s: Q, then dO */
  uint64_t *kv_full = (uint64_t *)(ring + RING), *q_full = kv_full + 1, *do_full = q_full + STAGES,
           *empty = do_full + STAGES;
  float *stats = (float *)(empty + STAGES); /* [2 buffers][lse2, delta][BM] */
  uint8_t *sds = sk + DS_AT;                 /* DQ: dSᵀ, BM / 64 boxes [BN keys][64 queries] */
  float *sdq = (float *)(sds + BN * BM * 2); /* DQ: dQ_step, fragment order */

  const int wg = warpgroup_index(), t = threadIdx.x % 128;
  const int k0 = blockIdx.x * BN, hk = blockIdx.y, b = blockIdx.z, group = p.hq / p.hkv, shift = p.sk - p.sq;
  /* Queries that see any key of this block: i >= k0 - shift when causal. */
  const int q_first = p.causal ? max(0, k0 - shift) : 0;
  const int qb_first = q_first / BM, per_head = q_first < p.sq ? (p.sq + BM - 1) / BM - qb_first : 0;
  const int steps = group * per_head;
  init_barriers<STAGES>(kv_full);
  /* the dQ kernel, launched as a programmatic dependent (attention_gpu.c, KILN_ATTN_BWD_PDL), may
   * start on the SMs this grid's last wave leaves idle; a no-op otherwise */
  if (threadIdx.x == 0) pdl_launch_dependents();

  /* the fused kernel's consumers hold dS·K's operand addresses and the reduction's state on top:
   * 240 registers (24 for the producer, as the wide dQ kernel's) keep its bf16 build from spilling */
  constexpr int CONSUMER_REGS = DQ ? 240 : 232;
  if (wg == 0) { /* producer */
    producer_registers<DQ ? 24 : 40>();
    if (t == 0)
      produce<DP, BN, BM, STAGES, 2>(sk, map_k, map_v, k0, hk, b, kv_full, ring, map_q, map_do, q_full, do_full, empty,
                                     steps, [&](int step, int &row, int &head) {
                                       row = (qb_first + step % per_head) * BM, head = hk * group + step / per_head;
                                     });
  } else if constexpr (DP > 128) { /* consumers by role */
    static_assert(BN == 64, "one warpgroup's 64 keys a block");
    consumer_registers();
    dkdv_roles<BF16, DP, BM, STAGES>(p, sk, sv, ring, kv_full, stats, (uint32_t *)(stats + 4 * BM), wg - 1, k0, hk,
                                     b, group, per_head, qb_first, steps, shift);
  } else { /* consumers */
    consumer_registers<CONSUMER_REGS>();
    const int cw = wg - 1, ct = threadIdx.x - 128, warp = t / 32, lane = t % 32;
    float dk[DP / 2], dv[DP / 2], st[BM / 2], dpt[BM / 2];
    auto &dk4 = *reinterpret_cast<float(*)[DP / 8][4]>(dk);
    auto &dv4 = *reinterpret_cast<float(*)[DP / 8][4]>(dv);
    auto &st4 = *reinterpret_cast<float(*)[BM / 8][4]>(st);
    auto &dpt4 = *reinterpret_cast<float(*)[BM / 8][4]>(dpt);
#pragma unroll
    for (int i = 0; i < DP / 2; i++) dk[i] = dv[i] = 0.f;
    const float sl2 = p.scale * LOG2E;
    const int key0 = k0 + 64 * cw + 16 * warp + lane / 4; /* this lane's keys: key0, key0 + 8 */
    uint8_t *skw = sk + cw * 64 * 128, *svw = sv + cw * 64 * 128;
    /* DQ: the f32 dQ block of a step (its head and BM query rows) in p.dq_acc */
    const int nqb = (p.sq + BM - 1) / BM;
    float *const dq0 = DQ ? p.dq_acc + (((int64_t)b * p.hq + hk * group) * nqb + qb_first) * KILN_ATTN_DQ_ACC_BLOCK
                          : nullptr;
    auto dq_block = [&](int step) {
      return dq0 + (int64_t)((step / per_head) * nqb + step % per_head) * KILN_ATTN_DQ_ACC_BLOCK;
    };
    mbar_wait(kv_full, 0);
    for (int step = 0; step < steps; step++) {
      const int s = step % STAGES, h = hk * group + step / per_head, q0 = (qb_first + step % per_head) * BM;
      const uint32_t phase = (step / STAGES) & 1;
      const uint8_t *sqt = ring_tile<DP, BM>(ring, s, 0), *sdo = ring_tile<DP, BM>(ring, s, 1);
      /* Sᵀ = K_w·Qᵀ and dPᵀ = V_w·dOᵀ, two commit groups: Pᵀ is computed while dPᵀ runs, and
       * dV += Pᵀ·dO runs while dSᵀ is. Issued first, so that the statistics' global loads below
       * run under them. */
      score_products<BM, BF16, BN, DP>(st, dpt, skw, sqt, &q_full[s], svw, sdo, &do_full[s], phase);
      /* stage this step's LSE (log2 units) and delta; two buffers, so one barrier per step
       * suffices (a thread writing buffer x again has passed the barrier that followed every
       * read of it) */
      float *lse2 = stats + (step & 1) * 2 * BM, *delta = lse2 + BM;
      if (ct < BM) {
        const int row = q0 + ct;
        lse2[ct] = row_lse2(p, b, h, row);
      } else if (ct < 2 * BM) {
        const int row = q0 + ct - BM;
        delta[ct - BM] = row_delta(p, b, h, row);
      }
      consumers_sync();
      /* DQ: the previous step's dQ block, staged by both warpgroups before this barrier */
      if (DQ && ct == 0 && step > 0) {
        bulk_reduce_add_f32(dq_block(step - 1), sdq, KILN_ATTN_DQ_ACC_BLOCK * 4);
        bulk_commit();
      }
      wgmma_wait<1>();

      scores_to_p<BM, BN>(st4, lse2, p, key0, k0, q0, shift, sl2, lane); /* Pᵀ in place */
      uint32_t ap[BM / 16][4], ads[BM / 16][4];
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) acc_to_a_frag<BF16>(ap[kk], st4, kk);
      /* dV += Pᵀ·dO */
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) wgmma_rs_m64k16<DP, BF16, 1>(dv, ap[kk], nmajor_desc<BM>(sdo, kk));
      wgmma_commit();
      wgmma_wait<1>();

      /* dSᵀ = Pᵀ ∘ (dPᵀ − delta), then dK += dSᵀ·Q. With BM = 128 (D = 64) the f32 Pᵀ does not
       * fit beside dPᵀ, dK, dV and the A fragments in flight: P comes back from those (rounded
       * to 16 bits, as dSᵀ itself is next) */
#pragma unroll
      for (int j = 0; j < BM / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float pr = BM > 64 ? unpack_half<BF16>(ap[j / 2][(j % 2) * 2 + (e >> 1)], e & 1) : st4[j][e];
          dpt4[j][e] = pr * (dpt4[j][e] - delta[j * 8 + (lane % 4) * 2 + (e & 1)]);
        }
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) acc_to_a_frag<BF16>(ads[kk], dpt4, kk);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; kk++) wgmma_rs_m64k16<DP, BF16, 1>(dk, ads[kk], nmajor_desc<BM>(sqt, kk));
      wgmma_commit();
      if constexpr (DQ) {
        /* 1. this warpgroup's dSᵀ rows (keys 64cw + 16warp + lane/4 (+8)) into the tile: word
         * (key, queries 2c, 2c + 1) at box c / 32, unit ((c % 32) / 4) ^ (key % 8) of the key's
         * 128-byte row (store_staged's pattern: eight rows x four lanes, no bank conflicts) */
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++)
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const int key = 64 * cw + 16 * warp + lane / 4 + 8 * (i & 1), q = 16 * kk + 8 * (i >> 1) + 2 * (lane % 4);
            *reinterpret_cast<uint32_t *>(sds + (q / 64) * BN * 128 + key * 128 + ((((q % 64) / 8) ^ (key % 8)) * 16) +
                                          (q % 8) * 2) = ads[kk][i];
          }
        fence_proxy_async(); /* visible to the wgmma reads below */
        if (ct == 0 && step > 0) bulk_wait_read<0>(); /* the previous dQ block has left sdq */
        consumers_sync();
        /* 2. this warpgroup's 64 x 64 part of dQ_step = dS·K (dq: the dQ kernel's accumulator layout) */
        float dq[32];
        const uint8_t *dsa = sds + (DP == 64 ? cw : 0) * BN * 128, *kb = sk + (DP == 64 ? 0 : cw) * BN * 128;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
          wgmma_m64k16<64, BF16, 1, 1>(dq, nmajor_desc<BN>(dsa, kk), nmajor_desc<BN>(kb, kk), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        if (t == 0) mbar_arrive(&empty[s]);
        /* 3. into the staging tile, fragment order; reduced after the next statistics barrier */
#pragma unroll
        for (int k = 0; k < 8; k++)
          *reinterpret_cast<float4 *>(sdq + ((cw * 8 + k) * 128 + t) * 4) =
              make_float4(dq[4 * k], dq[4 * k + 1], dq[4 * k + 2], dq[4 * k + 3]);
        fence_proxy_async();
      } else {
        wgmma_wait<0>();
        if (t == 0) mbar_arrive(&empty[s]);
      }
    }
    if constexpr (DQ) {
      /* the last step's dQ block; and every warpgroup's dS·K has read K before dK is staged there */
      consumers_sync();
      if (ct == 0 && steps > 0) {
        bulk_reduce_add_f32(dq_block(steps - 1), sdq, KILN_ATTN_DQ_ACC_BLOCK * 4);
        bulk_commit();
        bulk_wait<0>();
      }
    }
    /* dK·scale and dV through this warpgroup's rows of the K and V tiles */
    const int r0 = k0 + 64 * cw;
    if (p.dk)
      store_acc<DP, BN, BF16>(dk4, p.scale, skw, p.dk, p.dk_dtype, b * p.dk_bs + hk * p.dk_hs, p.dk_bs, p.dk_hs,
                              p.dk_ss, p.dk_ds, r0, p.sk, p.d, cw, t);
    if (p.dv)
      store_acc<DP, BN, BF16>(dv4, 1.f, svw, p.dv, p.dv_dtype, b * p.dv_bs + hk * p.dv_hs, p.dv_bs, p.dv_hs,
                              p.dv_ss, p.dv_ds, r0, p.sk, p.dv_dim, cw, t);
  }
#else
  (void)p, (void)map_q, (void)map_k, (void)map_v, (void)map_do;
  __trap(); /* the host launches these kernels only on sm_90 */
#endif
}

/* NC consumer warpgroups of 64 query rows, BN keys a step, shared memory SMEM_BYTES: the FLASH
 * configuration (NC = 2) and the wide D = 64 one (NC = 3, BN = 64; kiln_abi.h). */
template <bool BF16, int DP, int NC, int BN, size_t SMEM_BYTES>
__device__ __forceinline__ void dq_sm90(const kiln_attn_args &p, const CUtensorMap *map_q, const CUtensorMap *map_k,
                                        const CUtensorMap *map_v, const CUtensorMap *map_do) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int BM = 64 * NC, STAGES = KILN_ATTN_WG_DQ_STAGES(DP);
  constexpr int FIXED = BM * DP * 2, RING = STAGES * 2 * BN * DP * 2;
  /* three warpgroups have 160 registers a thread: S and dP of 64 keys (32 each), dQ (32) and the
   * dS fragments (16) fit, those of 128 keys do not */
  static_assert(NC == 2 || (NC == 3 && BN <= 64), "two consumer warpgroups, or three with 64 keys a step");
  static_assert(SMEM_BYTES >= 2 * FIXED + RING + 1024 + (1 + 3 * STAGES) * 8, "smem budget");
  extern __shared__ uint8_t smem_raw[];
  uint8_t *sq = smem_base(smem_raw), *sdo = sq + FIXED, *ring = sq + 2 * FIXED; /* slot s: K, then V */
  uint64_t *qdo_full = (uint64_t *)(ring + RING), *k_full = qdo_full + 1, *v_full = k_full + STAGES,
           *empty = v_full + STAGES;

  const int wg = warpgroup_index(), t = threadIdx.x % 128;
  const tile_of_block bt = block_tile_lpt(p, DP);
  const int q0 = bt.tile * BM, h = bt.h, b = bt.b, hk = h / (p.hq / p.hkv), shift = p.sk - p.sq;
  const int nblocks = rows_key_blocks(p, shift, q0, BM, BN);
  init_barriers<STAGES, NC>(qdo_full);

  if (wg == 0) { /* producer */
    producer_registers<NC == 2 ? 40 : 24>();
    if (t == 0)
      produce<DP, BM, BN, STAGES, 2>(sq, map_q, map_do, q0, h, b, qdo_full, ring, map_k, map_v, k_full, v_full, empty,
                                     nblocks, [&](int blk, int &row, int &head) { row = blk * BN, head = hk; });
    /* As a programmatic dependent of the dK/dV kernel (attention_gpu.c), this block reads only
     * what was written before that kernel started, so it did not wait to start; it ends only after
     * that kernel has, so that the stream's next work finds dK and dV written. A no-op otherwise. */
    if (t == 0) pdl_wait();
  } else { /* consumers */
    consumer_registers<NC == 3 ? 160 : 232>(); /* 4 x 32 x 24 + 12 x 32 x 160 <= 64 K registers */
    const int cw = wg - 1, warp = t / 32, lane = t % 32;
    float acc[DP / 2], sc[BN / 2], dp[BN / 2];
    auto &acc4 = *reinterpret_cast<float(*)[DP / 8][4]>(acc);
    auto &s4 = *reinterpret_cast<float(*)[BN / 8][4]>(sc);
    auto &dp4 = *reinterpret_cast<float(*)[BN / 8][4]>(dp);
#pragma unroll
    for (int i = 0; i < DP / 2; i++) acc[i] = 0.f;
    const float sl2 = p.scale * LOG2E;
    const int first = q0 + 64 * cw, row0 = first + 16 * warp + lane / 4; /* this lane's rows: row0, row0 + 8 */
    /* only the key blocks this warpgroup's rows see; the tile's others are released unread */
    const int nb = rows_key_blocks(p, shift, first, 64, BN);
    float lse2[2], delta[2];
    row_stats(p, b, h, row0, lse2, delta);
    uint8_t *sqw = sq + cw * 64 * 128, *sdow = sdo + cw * 64 * 128;
    mbar_wait(qdo_full, 0);
    for (int blk = 0; blk < nb; blk++) {
      const int s = blk % STAGES, kb = blk * BN;
      const uint32_t phase = (blk / STAGES) & 1;
      const uint8_t *skt = ring_tile<DP, BN>(ring, s, 0), *svt = ring_tile<DP, BN>(ring, s, 1);

      /* S = Q_w·Kᵀ and dP = dO_w·Vᵀ, two commit groups: P is computed while dP runs */
      score_products<BN, BF16, BM, DP>(sc, dp, sqw, skt, &k_full[s], sdow, svt, &v_full[s], phase);
      wgmma_wait<1>();

      /* P in place of S: keys past Sk or right of the diagonal (steps that hold any) get -inf
       * scores first; then dS in place of dP */
      if (kb + BN > p.sk || (p.causal && kb + BN - 1 > first + shift)) {
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int key = kb + j * 8 + (lane % 4) * 2 + (e & 1), r = e >> 1;
            if (!(key < p.sk && (!p.causal || key <= row0 + 8 * r + shift))) s4[j][e] = -INFINITY;
          }
      }
#pragma unroll
      for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) s4[j][e] = exp2_fast(fmaf(s4[j][e], sl2, -lse2[e >> 1]));
      wgmma_wait<0>();
#pragma unroll
      for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dp4[j][e] = s4[j][e] * (dp4[j][e] - delta[e >> 1]);
      uint32_t ads[BN / 16][4];
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++) acc_to_a_frag<BF16>(ads[kk], dp4, kk);

      /* dQ += dS·K */
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; kk++) wgmma_rs_m64k16<DP, BF16, 1>(acc, ads[kk], nmajor_desc<BN>(skt, kk));
      wgmma_commit();
      wgmma_wait<0>();
      if (t == 0) mbar_arrive(&empty[s]);
    }
    /* dQ·scale through this warpgroup's rows of the Q tile */
    store_acc<DP, BM, BF16>(acc4, p.scale, sqw, p.dq, p.dq_dtype, b * p.dq_bs + h * p.dq_hs, p.dq_bs, p.dq_hs,
                            p.dq_ss, p.dq_ds, first, p.sq, p.d, cw, t);
    if (t == 0) release_unread<STAGES>(k_full, empty, nb, nblocks);
  }
#else
  (void)p, (void)map_q, (void)map_k, (void)map_v, (void)map_do;
  __trap(); /* the host launches these kernels only on sm_90 */
#endif
}

/* dQ = scale · dq_acc (the fused backward's accumulator, kiln_abi.h) for one block of its rows
 * of one head: thread w·128 + t reads its float4s in the order the fused kernel's thread t of
 * warpgroup w staged them and stores them as that thread's accumulator (store_rows, predicated
 * on rows < Sq and columns < D): rows from 64w at D = 64, columns from 64w at D = 128. */
__device__ __forceinline__ void dq_convert(const kiln_attn_args &p) {
  const int w = threadIdx.x / 128, t = threadIdx.x % 128, qb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int dp = KILN_ATTN_DQ_ACC_DP(p.d), rows = KILN_ATTN_DQ_ACC_ROWS(dp), nqb = (p.sq + rows - 1) / rows;
  const float4 *src = reinterpret_cast<const float4 *>(p.dq_acc + (((int64_t)b * p.hq + h) * nqb + qb) *
                                                                      KILN_ATTN_DQ_ACC_BLOCK) +
                      w * 8 * 128 + t;
  float acc[8][4];
#pragma unroll
  for (int k = 0; k < 8; k++) {
    const float4 v = src[k * 128];
    acc[k][0] = v.x, acc[k][1] = v.y, acc[k][2] = v.z, acc[k][3] = v.w;
  }
  store_rows<8>(acc, p.dq, b * p.dq_bs + h * p.dq_hs, p.dq_ss, p.dq_ds, p.dq_dtype,
                qb * rows + (dp == 64 ? 64 * w : 0) + 16 * (t / 32), p.sq, dp == 64 ? 0 : 64 * w, p.d, p.scale,
                t % 32);
}

} /* namespace attn */
} /* namespace kiln */

/* Every backward kernel here takes the args and the same four maps; their boxes differ (dK/dV and
 * fused: K, V 128 rows, Q, dO BM; dQ: Q, dO 128 rows, K, V WG_DQ_BN). */
#define KILN_ATTN_BWD_MAPS_ENTRY(name, threads)                                                                \
  extern "C" __global__ void __launch_bounds__(threads, 1)                                                     \
      name(const kiln_attn_args args, const __grid_constant__ CUtensorMap map_q,                               \
           const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,               \
           const __grid_constant__ CUtensorMap map_do)
#define KILN_ATTN_WG_BWD_ENTRIES(dt, bf16, dp)                                                                 \
  KILN_ATTN_BWD_MAPS_ENTRY(kiln_attn_bwd_dkdv_wgmma_##dt##_d##dp, KILN_ATTN_WG_THREADS) {                      \
    kiln::attn::dkdv_sm90<bf16, dp, false>(args, &map_q, &map_k, &map_v, &map_do);                             \
  }                                                                                                            \
  KILN_ATTN_BWD_MAPS_ENTRY(kiln_attn_bwd_dq_wgmma_##dt##_d##dp, KILN_ATTN_WG_THREADS) {                        \
    kiln::attn::dq_sm90<bf16, dp, 2, KILN_ATTN_WG_DQ_BN(dp), KILN_ATTN_WG_DQ_SMEM_BYTES(dp)>(args, &map_q, &map_k, \
                                                                                          &map_v, &map_do);   \
  }
/* the wide D = 64 dQ kernel (kiln_abi.h WD_DQ_*) */
#define KILN_ATTN_WD_DQ_ENTRY(dt, bf16)                                                                        \
  KILN_ATTN_BWD_MAPS_ENTRY(kiln_attn_bwd_dq_wide_##dt##_d64, KILN_ATTN_WD_THREADS) {                           \
    kiln::attn::dq_sm90<bf16, 64, 3, KILN_ATTN_WD_DQ_BN, KILN_ATTN_WD_DQ_SMEM_BYTES>(args, &map_q, &map_k, &map_v, \
                                                                                   &map_do);                  \
  }
/* the fused backward (kiln_abi.h KILN_ATTN_BWD_FUSED): the dK/dV kernel's maps and grid */
#define KILN_ATTN_FUSED_BWD_ENTRY(dt, bf16, dp)                                                                \
  KILN_ATTN_BWD_MAPS_ENTRY(kiln_attn_bwd_fused_##dt##_d##dp, KILN_ATTN_WG_THREADS) {                           \
    kiln::attn::dkdv_sm90<bf16, dp, true>(args, &map_q, &map_k, &map_v, &map_do);                              \
  }
KILN_ATTN_WG_BWD_ENTRIES(f16, false, 64)
KILN_ATTN_WG_BWD_ENTRIES(f16, false, 128)
KILN_ATTN_WG_BWD_ENTRIES(bf16, true, 64)
KILN_ATTN_WG_BWD_ENTRIES(bf16, true, 128)
KILN_ATTN_WG_BWD_ENTRIES(f16, false, 256)
KILN_ATTN_WG_BWD_ENTRIES(bf16, true, 256)
KILN_ATTN_WD_DQ_ENTRY(f16, false)
KILN_ATTN_WD_DQ_ENTRY(bf16, true)
KILN_ATTN_FUSED_BWD_ENTRY(f16, false, 64)
KILN_ATTN_FUSED_BWD_ENTRY(f16, false, 128)
KILN_ATTN_FUSED_BWD_ENTRY(bf16, true, 64)
KILN_ATTN_FUSED_BWD_ENTRY(bf16, true, 128)
extern "C" __global__ void __launch_bounds__(256) kiln_attn_bwd_dq_convert(const kiln_attn_args args) {
  kiln::attn::dq_convert(args);
}
