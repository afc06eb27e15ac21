/*
 * gemm_sm90.cuh — the WGMMA block for Hopper (sm_90a), one template for kiln_matmul's f16/bf16
 * kernels (gemm_sm90.cu: C = alpha·A·B + beta·C) and kiln_matmul_int8's s8 kernels
 * (gemm_int8_sm90.cu). What the operand type changes lives in a small trait (WgmmaF16, WgmmaS8):
 * the element size, the accumulator, the MMA of one 32-byte k step and the epilogue. Tiles are
 * counted in bytes along K (128-byte rows, the swizzle width: 64 f16 or 128 int8 of K), so the
 * ring, the TMA boxes and the descriptors are the same for every type.
 *
 * Why a different kernel: on Hopper mma.sync reaches only ~60 % of the tensor cores. Warpgroup
 * MMA reads both operands straight from shared memory (no ldmatrix, no fragments in registers)
 * and the TMA engine copies whole tiles with one instruction, so one thread feeds the block.
 *
 * Structure (one block = 3 warpgroups, a 128 x BN tile of C, 128 bytes of K per slice, a ring of
 * STAGES slices):
 *   warpgroup 0   producer: one thread issues TMA tile copies into stage s once the consumers
 *                 released it (mbarrier `empty[s]`); the copies complete on `full[s]`.
 *   warpgroups 1-2 consumers: each owns 64 rows; waits on `full[s]`, issues 4 wgmma m64nBNk16
 *                 (f16: K = 64) or m64nBNk32 (int8: K = 128) and releases stage s-1 as soon as its wgmmas have retired (wait_group 1,
 *                 so one stage of MMAs is always in flight).
 * setmaxnreg moves registers from the producer (40) to the consumers (232): a 64 x 256 fp32
 * accumulator alone is 128 registers per thread.
 *
 * Persistent grid: min(tiles, SMs) blocks walk the tiles (all batches) in the L2-friendly order
 * of tile_coords, block b taking tiles b, b + grid, ... The producer runs ahead into the next
 * tile while the consumers store the last one, so a tile's first slices are already loaded
 * when its MMAs start.
 *
 * Clusters (CLUSTER = 2, built only with KILN_WGMMA_PAIRS=1): two CTAs on vertically adjacent
 * 128 x 256 tiles share their B tile; each loads one half with TMA multicast into both CTAs'
 * shared memory, so L2 -> SM traffic per FLOP drops by a third. A stage is refilled only once
 * the consumers of both CTAs released it (their arrives go to both producers' `empty`). On the
 * H200 this measured 7 % slower than single CTAs at 4096^3 and equal at 2048^3: L2 bandwidth
 * is not what limits this kernel, and the pair runs in lock step. Off by default.
 *
 * Tile width BN (256, 128 or 64) is chosen per problem by the host: 128 x 256 tiles move the
 * fewest bytes per FLOP, but a 1024^3 product has only 32 of them for 132 SMs. Narrower tiles
 * get more stages (the ring stays ~192 KB) to keep as many bytes in flight.
 *
 * Layouts: TMA boxes are 128 bytes wide with the 128-byte swizzle, the layout wgmma reads.
 * A k-major operand (K contiguous) is one box of [rows][128 bytes of k]; an m/n-major one is boxes of
 * [64 k][64 mn] side by side and read with the transpose flag. Edges: TMA fills out-of-bounds
 * elements with zeros (M, N and the K tail), and the epilogue predicates every store.
 * int8 wgmma has no transpose for 8-bit operands: the s8 kernels exist for k-major A and B only.
 */
#pragma once
#include <cuda.h>

#include "gemm_int8.cuh" /* store_c, StoreInt8, tile_coords: the epilogues of the sm_80 kernels */
#include "wgmma.cuh"

namespace kiln {
namespace sm90 {

constexpr int BM = KILN_GEMM_WG_BM, ROW = 128; /* bytes of K in one tile row: the swizzle width */
[[maybe_unused]] constexpr int CONSUMERS = BM / 64;
[[maybe_unused]] constexpr int BOX_BYTES = 64 * ROW; /* one [64 k][64 mn] box of an m/n-major f16 operand */
static_assert(KILN_GEMM_WG_BK * 2 == ROW, "kiln_abi.h sizes the ring with 64 f16 of K per row");

/* gemm_sm80.cuh's mbarrier wrappers, also under the sm90:: names the sm_90a kernels call */
using kiln::mbar_arrive;
using kiln::mbar_init;
using kiln::mbar_wait;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
KILN_DEVICE void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes));
}
/* A ring's barriers, set up by thread 0 before the block's first barrier: full[s] completes on
 * the producer's expect_tx and the copies' bytes, empty[s] on `releases` arrivals. */
KILN_DEVICE void ring_init(uint64_t *full, uint64_t *empty, int slots, uint32_t releases) {
  for (int s = 0; s < slots; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], releases);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* Named barriers (id 0 is __syncthreads'): wait until `count` threads arrived, or arrive only. */
KILN_DEVICE void named_sync(int id, int count) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory"); }
KILN_DEVICE void named_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
/* Four 8x8 matrices of 16-bit values, each held in mma's accumulator layout (lane l: row l / 4,
 * columns 2(l % 4) and + 1, packed), stored transposed: row j of matrix i in shared memory (at
 * the address lane 8i + j gives, 16-byte aligned) is column j of the matrix. */
KILN_DEVICE void stmatrix_x4_trans(void *row, uint32_t m0, uint32_t m1, uint32_t m2, uint32_t m3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_u32(row)),
               "r"(m0), "r"(m1), "r"(m2), "r"(m3)
               : "memory");
}
/* TMA tile copy of the box at coordinates (c0 innermost, c1[, c2]) into shared memory. */
KILN_DEVICE void tma_load(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2, bool three_d) {
  if (three_d)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
            "r"(smem_u32(dst)),
        "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
            smem_u32(dst)),
        "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
        : "memory");
}
/* TMA stores, shared -> global, in bulk groups of the issuing thread. The threads that wrote the
 * source with ordinary stores fence_proxy_async() first and then synchronize with the issuer;
 * bulk_wait_read<N>() returns once at most N of the thread's groups still read shared memory,
 * bulk_wait<N>() once at most N have not completed. */
KILN_DEVICE void tma_store(const CUtensorMap *map, const void *src, int c0, int c1, int c2, bool three_d) {
  if (three_d)
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(map),
                 "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map),
                 "r"(smem_u32(src)), "r"(c0), "r"(c1)
                 : "memory");
}
/* dst[i] += src[i] for the `bytes` (a multiple of 16, both 16-byte aligned) of f32 at src in
 * shared memory, done by the L2 (a bulk group of the issuing thread, as tma_store). */
KILN_DEVICE void bulk_reduce_add_f32(float *dst, const void *src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smem_u32(src)), "r"(bytes)
               : "memory");
}
KILN_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
KILN_DEVICE void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
KILN_DEVICE void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
KILN_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Programmatic dependent launch (kiln_launch_dependent): the next kernel on the stream may start
 * launching once every block of this one has executed launch_dependents (or ended); wait blocks
 * the thread until the previous kernel has ended and its writes are visible. */
KILN_DEVICE void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
KILN_DEVICE void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
/* Fetches a TMA descriptor into the descriptor cache ahead of its first copy. */
KILN_DEVICE void tma_prefetch(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
/* The same for a rank-4 map (the attention kernels' [B, H, S, D] operands: c0 = d, c1 = s, c2 = h, c3 = b). */
KILN_DEVICE void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::
          "r"(smem_u32(dst)),
      "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
/* The same copy multicast to the CTAs of the cluster in cta_mask: each receives the box at the
 * same shared-memory offset and its own mbarrier (same offset) is credited with the bytes. */
KILN_DEVICE void tma_load_multicast(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2,
                                    bool three_d, uint16_t cta_mask) {
  if (three_d)
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(smem_u32(dst)),
                 "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
                 : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(smem_u32(dst)),
                 "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
                 : "memory");
}
/* Arrive on the mbarrier at the same offset as `bar` in cluster CTA `rank`. Default (.cta)
 * release semantics: what the arrive publishes is "this CTA's wgmmas have finished reading the
 * stage", already ordered by wgmma.wait_group; a .release.cluster arrive made the pair kernel
 * 1.5x slower than the unpaired one (H200, 2026-12-02). */
KILN_DEVICE void mbar_arrive_remote(uint64_t *bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_u32(bar)),
      "r"(rank)
      : "memory");
}
KILN_DEVICE uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
/* CTAs in this CTA's cluster (1 for a launch without clusters). */
KILN_DEVICE uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
/* The float at the same shared-memory offset as `p` in cluster CTA `rank` (distributed shared
 * memory; order it after the peer's writes with a cluster barrier). */
KILN_DEVICE float ld_shared_cluster_f32(const float *p, uint32_t rank) {
  float v;
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %1, %2;\n"
      "ld.shared::cluster.f32 %0, [remote];\n}\n"
      : "=f"(v)
      : "r"(smem_u32(p)), "r"(rank)
      : "memory");
  return v;
}
/* Every thread of every CTA of the cluster (not .aligned: the producer warp arrives diverged). */
KILN_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
/* A consumer gives stage `empty` back: to its own producer, and with a cluster to the peer's too,
 * whose multicast writes into this CTA's copy of the stage. */
template <int CLUSTER>
KILN_DEVICE void release(uint64_t *empty, uint32_t rank) {
  mbar_arrive(empty);
  if (CLUSTER > 1) mbar_arrive_remote(empty, rank ^ 1);
}
/* A shared-memory matrix descriptor for the 128-byte swizzle: start address, leading and stride
 * byte offsets, all in 16-byte units. K-major: SBO = 1024 (8 rows of 128 B), LBO unused.
 * M/N-major: LBO = bytes between 64-element blocks along M/N, SBO = 1024 (8 k-rows). */
KILN_DEVICE uint64_t smem_desc(const void *p, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((smem_u32(p) & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 |
         1ull << 62;
}
/* This thread's warpgroup, read through a shuffle so that ptxas knows it is warp-uniform (from
 * threadIdx.x / 128 alone it does not): the role branches and the index math derived from it stay
 * uniform. 1-3 % fewer SASS instructions in the GEMM and attention kernels; on the H100 the GEMM
 * at 4096^3 gained 0.2-0.3 %, int8 ~1 %, and the per-warpgroup key ranges need it. The W4A16
 * prefill ran 1.5 % slower with it and keeps the plain division (docs/performance.md, "Rung
 * uniform-wg"). */
KILN_DEVICE int warpgroup_index() { return __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0); }
/* The warp-specialized kernels' register split: the producer gives registers back, the consumers
 * take them. 3 warpgroups, one block per SM: 40 + 2 x 232 <= 512 per thread slot of the SM's 64K;
 * 2 warpgroups, two blocks per SM (attention's short-sequence kernel): 24 + 232 <= 2 x 128. */
template <int R = 40>
KILN_DEVICE void producer_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R = 232>
KILN_DEVICE void consumer_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
KILN_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
KILN_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
KILN_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
#endif

/* a line into L1 ahead of its loads: no register, nothing waits for it */
KILN_DEVICE void prefetch_l1(const void *ptr) { asm volatile("prefetch.global.L1 [%0];\n" ::"l"(ptr)); }

/* The epilogue through shared memory (c_staged in the args: kiln_matmul with beta = 0, or
 * kiln_matmul_int8; C row-major with 16-byte aligned rows). A consumer warpgroup's 64 x BN
 * accumulator tile leaves in pieces of 64 rows by 128 bytes (32 f32 or 64 16-bit columns), each
 * written to shared memory in TMA's 128-byte swizzle (16-byte chunk j of row r at j ^ r % 8: a
 * warp's stores of 8 rows fall on distinct banks) and stored by one TMA store from thread 0,
 * which drains while the warpgroup goes on, into the next piece and then the next tile's
 * mainloop. The values are store_tile_as's (the same Value, its row and column factors hoisted
 * the same way). NP = KILN_GEMM_WG_C_PIECES 8 KB pieces take turns (fewer where a tile has fewer
 * pieces: BN 64 with 16-bit C has one), piece q of a tile in slot q % NP; a slot is rewritten
 * only once the store that last used it, NP stores back, has read it (bulk_wait_read<NP - 1>).
 * Rows and columns past M and N, and whole pieces past N, are
 * clipped by TMA. Why (rung store-probe, docs/performance.md): the direct stores of store_tile
 * cost 6-15 % of the f16 kernel with f32 C and 18-24 % of the int8 one, the tensor pipe idle
 * meanwhile. Named barrier 1 + cw is the warpgroup's; the caller waits for the last stores
 * (bulk_wait) before the block ends. */
/* The column factors of a piece of PC columns from col0: the lane's two columns of each n8 block.
 * Columns past N are clipped by TMA; their factors are read at column N - 1 (in bounds, and no
 * branch around the loads: less code for a cold start to fetch, docs/performance.md "int8 after
 * other kernels"). */
template <class Value, int PC, class P>
KILN_DEVICE void load_col_factors(typename Value::Col (&cv)[PC / 8], const P &p, int col0, int lane) {
#pragma unroll
  for (int jj = 0; jj < PC / 8; jj++) {
    const int cc = min(col0 + 8 * jj + 2 * (lane % 4), p.n - 1);
    cv[jj] = Value::col(p, cc, cc + 1 < p.n);
  }
}
template <class Value, int BN, class OUT, class Acc, class P>
KILN_DEVICE void store_staged_as(const Acc (&d)[BN / 2], const P &p, uint8_t *stage, const CUtensorMap *map, int row0,
                                 int col0, int b, int t, int cw) {
  constexpr int E = (int)sizeof(OUT), PC = 128 / E; /* a piece's columns */
  constexpr int NP = KILN_GEMM_WG_C_PIECES < BN / PC ? KILN_GEMM_WG_C_PIECES : BN / PC; /* powers of 2 */
  const int warp = t / 32, lane = t % 32;
  typename Value::Row rv[2]; /* the lane's two rows' factors (store_tile_as's Value) */
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = row0 + 16 * warp + lane / 4 + 8 * h;
    rv[h] = Value::row(p, row, row < p.m);
  }
  /* The column factors of piece q (int8's col_scale; empty for the other Values) are loaded while
   * piece q - 1 is stored: loaded in the piece that used them, each piece waited out an L2 round
   * trip (rung e9, docs/performance.md: int8 with both scale vectors ran 20 us slower at 4096^3). */
  typename Value::Col cv[PC / 8], nx[PC / 8];
  load_col_factors<Value, PC>(cv, p, col0, lane);
#pragma unroll
  for (int q = 0; q < BN / PC; q++) {
    uint8_t *buf = stage + (q % NP) * 8192;
    if (q + 1 < BN / PC) load_col_factors<Value, PC>(nx, p, col0 + (q + 1) * PC, lane);
    if (t == 0) bulk_wait_read<NP - 1>(); /* the store that last used this slot has read it */
    named_sync(1 + cw, 128);
#pragma unroll
    for (int jj = 0; jj < PC / 8; jj++) { /* n8 block q·PC/8 + jj of the accumulator */
      const int j = q * (PC / 8) + jj, c = 8 * jj + 2 * (lane % 4);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int r = 16 * warp + lane / 4 + 8 * h, byte = c * E;
        OUT *dst = reinterpret_cast<OUT *>(buf + r * 128 + ((((byte >> 4) ^ (r & 7)) << 4) | (byte & 15)));
        float v0, v1; /* beta = 0: C is not read */
        Value::get(p, rv[h], cv[jj], static_cast<const OUT *>(nullptr), true, d[4 * j + 2 * h],
                   d[4 * j + 2 * h + 1], v0, v1);
        put2(dst, v0, v1); /* st.shared: dst keeps smem's address space (gemm's alignment) */
      }
    }
#pragma unroll
    for (int jj = 0; jj < PC / 8; jj++) cv[jj] = nx[jj];
    fence_proxy_async(); /* this thread's writes, visible to the TMA store */
    named_sync(1 + cw, 128);
    if (t == 0) {
      tma_store(map, buf, col0 + q * PC, row0, b, p.batch > 1);
      bulk_commit();
    }
  }
}
/* store_staged_as in C's dtype */
template <class Value, int BN, class Acc, class P>
KILN_DEVICE void store_staged(const Acc (&d)[BN / 2], const P &p, uint8_t *stage, const CUtensorMap *map, int row0,
                              int col0, int b, int t, int cw) {
  if (p.c_dtype == KILN_DT_F32)
    store_staged_as<Value, BN, float>(d, p, stage, map, row0, col0, b, t, cw);
  else if (p.c_dtype == KILN_DT_F16)
    store_staged_as<Value, BN, __half>(d, p, stage, map, row0, col0, b, t, cw);
  else
    store_staged_as<Value, BN, __nv_bfloat16>(d, p, stage, map, row0, col0, b, t, cw);
}

/* f16 / bf16 in, f32 accumulators, C = alpha·acc + beta·C (kiln_matmul). */
template <bool BF16>
struct WgmmaF16 {
  using Args = kiln_gemm_args;
  using Acc = float;
  using Value = GemmValue; /* the epilogue's values (store_tile_as, store_staged_as) */
  static constexpr int ELEM = 2;
  static KILN_DEVICE int group_m(const Args &p) { return p.group_m; }
  /* one k16 step (32 bytes of K) of a 64 x BN tile; m/n-major operands with the transpose flag */
  template <int BN, bool A_K, bool B_K>
  static KILN_DEVICE void mma(Acc (&d)[BN / 2], uint64_t da, uint64_t db) {
    wgmma_m64k16<BN, BF16, A_K ? 0 : 1, B_K ? 0 : 1>(d, da, db);
  }
  template <int BN>
  static KILN_DEVICE void store(Acc (&d)[BN / 2], const Args &p, void *c, int row0, int col0, int lane) {
    store_c<1, BN / 8>(*reinterpret_cast<float(*)[1][BN / 8][4]>(d), p, c, row0, col0, lane);
  }
  /* the epilogue through shared memory (store_staged) */
  template <int BN>
  static KILN_DEVICE void store_staged(const Acc (&d)[BN / 2], const Args &p, uint8_t *stage, const CUtensorMap *map,
                                       int row0, int col0, int b, int t, int cw) {
    sm90::store_staged<GemmValue, BN>(d, p, stage, map, row0, col0, b, t, cw);
  }
  static KILN_DEVICE void prefetch_factors(const Args &, int, int, int) {} /* GemmValue reads none */
};

/* int8 in (both k-major), s32 accumulators wrapping modulo 2^32, C = float(acc) times the
 * scales (kiln_matmul_int8): gemm_int8.cuh's epilogue, bit for bit the IMMA kernels' result. */
struct WgmmaS8 {
  using Args = kiln_int8_args;
  using Acc = int32_t;
  using Value = Int8Value; /* the epilogue's values (store_tile_as, store_staged_as) */
  static constexpr int ELEM = 1;
  static KILN_DEVICE int group_m(const Args &) { return KILN_GEMM_I8_GROUP_M; }
  /* one k32 step (32 bytes of K). Two n128 instructions per 256-wide step (two accumulator
   * chains instead of one) measured the same on the H200 (docs/performance.md). */
  template <int BN, bool A_K, bool B_K>
  static KILN_DEVICE void mma(Acc (&d)[BN / 2], uint64_t da, uint64_t db) {
    static_assert(A_K && B_K, "wgmma has no transpose for 8-bit operands");
    wgmma_s8_m64k32<BN>(d, da, db);
  }
  template <int BN>
  static KILN_DEVICE void store(Acc (&d)[BN / 2], const Args &p, void *c, int row0, int col0, int lane) {
    StoreInt8::store<1, BN / 8>(*reinterpret_cast<int32_t(*)[1][BN / 8][4]>(d), p, c, row0, col0, lane);
  }
  /* the epilogue through shared memory, its Value picked per launch: below K = 2^17 a sum never
   * wraps to INT32_MIN, so Int8ScaleValue (no vectors) or Int8LeanValue (the factors' order fixed)
   * skip Int8Value's fix-up and selects; only the executed one's code is fetched. */
  template <int BN>
  static KILN_DEVICE void store_staged(const Acc (&d)[BN / 2], const Args &p, uint8_t *stage, const CUtensorMap *map,
                                       int row0, int col0, int b, int t, int cw) {
    if (p.k >= (1 << 17))
      sm90::store_staged<Int8Value, BN>(d, p, stage, map, row0, col0, b, t, cw);
    else if (!p.row_scale && !p.col_scale)
      sm90::store_staged<Int8ScaleValue, BN>(d, p, stage, map, row0, col0, b, t, cw);
    else if (p.transposed)
      sm90::store_staged<Int8LeanValue<true>, BN>(d, p, stage, map, row0, col0, b, t, cw);
    else
      sm90::store_staged<Int8LeanValue<false>, BN>(d, p, stage, map, row0, col0, b, t, cw);
  }
  /* The epilogue's scale factors into L1 while the tile's last wgmmas run (rung e10): thread t
   * of the warpgroup its row row0 + t / 2 and the columns col0 + 2t and + 1 (a 256-wide tile's),
   * clamped into the vectors. Loaded cold, each tile's first factors cost an L2 round trip. */
  static KILN_DEVICE void prefetch_factors(const Args &p, int row0, int col0, int t) {
    if (p.row_scale && t % 2 == 0) prefetch_l1(p.row_scale + (int64_t)min(row0 + t / 2, p.m - 1) * p.row_scale_stride);
    if (p.col_scale) {
      const int c = min(col0 + 2 * t, p.n - 1);
      prefetch_l1(p.col_scale + (int64_t)c * p.col_scale_stride);
      prefetch_l1(p.col_scale + (int64_t)min(c + 1, p.n - 1) * p.col_scale_stride);
    }
  }
};

/* The persistent walk of a block: first its share of the whole work items (item b, b + step,
 * ... below `dp_end`), then, with stream-K (kiln_stream_k), one run of K slices over the last
 * sk.items items. Block c of G takes a run of the S = sk.items · nk slices (item-major, k inner;
 * sk_begin), so every block does the same number of slices give or take one. A run is shorter
 * than a tile (sk.items < G), so it is one unit or two cut at a tile boundary: the head of one
 * tile and, before it, the tail of the previous one. The head goes first. Then at any moment
 * of the split wave every block is either at slice t of its head (t: the time since the wave
 * began) or at slice nk - L + t of its tail (L: the run's length): two K offsets, not G, so the
 * blocks still share their A and B slices in L2 as whole tiles do (with the tail first, the
 * offsets spread over the whole K and 2048 x 8192 x 28672 ran 15 % slower). The producer and
 * the consumers walk the same units. */
template <bool SK>
struct Walk {
  int item, step, dp_end, nk;
  int g, g_end; /* this block's stream-K slices still to walk: [g, g_end), walked from the end */
  /* the unit after the last: a tile (item) and its slices [kb, ke); false once done */
  KILN_DEVICE bool next(int &it_item, int &kb, int &ke) {
    if (item < dp_end) {
      it_item = item, kb = 0, ke = nk;
      item += step;
      return true;
    }
    if (!SK || g >= g_end) return false;
    const int tile = (g_end - 1) / nk, from = max(g, tile * nk); /* the tile of the run's last slice */
    it_item = dp_end + tile, kb = from - tile * nk, ke = g_end - tile * nk;
    g_end = from;
    return true;
  }
};
/* The first stream-K slice of block c of G, for S slices in all (S < 2^31: the host's rule):
 * S / G each, one more for the first S mod G blocks. */
KILN_DEVICE int sk_begin(int c, int slices, int grid) { return c * (slices / grid) + min(c, slices % grid); }

/* A stream-K partial: a consumer warpgroup's accumulators (BN / 2 values of 4 bytes a thread)
 * in fragment order, 16 bytes a thread at a time so that a warp writes 512 contiguous bytes. */
template <int BN>
KILN_DEVICE uint4 *sk_slot(const kiln_stream_k &sk, int block, int cw) {
  return reinterpret_cast<uint4 *>(sk.partials) + (size_t)(block * CONSUMERS + cw) * (64 * BN / 4);
}
/* + 0: a store straight from the accumulator registers made ptxas guard them with a
 * warpgroup arrive on that path and serialize every wgmma of the kernel (C7520); from a copy
 * it does not. (-0 becomes +0, which no sum minds.) */
KILN_DEVICE uint32_t sk_bits(float v) { return __float_as_uint(v + 0.f); }
KILN_DEVICE uint32_t sk_bits(int32_t v) { return (uint32_t)v; }
KILN_DEVICE void sk_add(float &d, uint32_t v) { d += __uint_as_float(v); }
KILN_DEVICE void sk_add(int32_t &d, uint32_t v) { d = (int32_t)((uint32_t)d + v); } /* wraps, as the IMMA sums */
/* Leaves this warpgroup's partial in block `block`'s slot, then raises its flag. */
template <int BN, class Acc>
KILN_DEVICE void sk_put(const Acc (&d)[BN / 2], const kiln_stream_k &sk, int block, int cw, int t) {
  uint4 *slot = sk_slot<BN>(sk, block, cw);
#pragma unroll
  for (int i = 0; i < BN / 8; i++)
    __stcg(slot + i * 128 + t, make_uint4(sk_bits(d[4 * i]), sk_bits(d[4 * i + 1]), sk_bits(d[4 * i + 2]),
                                          sk_bits(d[4 * i + 3])));
  __threadfence(); /* the slot before the flag, at GPU scope */
  named_sync(1 + cw, 128);
  if (t == 0)
    asm volatile("st.release.gpu.global.u64 [%0], %1;\n" ::"l"(sk.flags + block * CONSUMERS + cw), "l"(sk.epoch)
                 : "memory");
}
/* Waits for block `block`'s partial and adds it into d. */
template <int BN, class Acc>
KILN_DEVICE void sk_take(Acc (&d)[BN / 2], const kiln_stream_k &sk, int block, int cw, int t) {
  const uint64_t *flag = sk.flags + block * CONSUMERS + cw;
  uint64_t seen;
  do
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(seen) : "l"(flag) : "memory");
  while (seen != sk.epoch);
  const uint4 *slot = sk_slot<BN>(sk, block, cw);
#pragma unroll
  for (int i = 0; i < BN / 8; i++) {
    const uint4 v = __ldcg(slot + i * 128 + t);
    sk_add(d[4 * i], v.x), sk_add(d[4 * i + 1], v.y), sk_add(d[4 * i + 2], v.z), sk_add(d[4 * i + 3], v.w);
  }
}

/* Tuning probe (KILN_TUNE_DEFS): 1 skips the epilogue's stores (results are garbage), so that a
 * run times the mainloop alone: the most an epilogue overlapped with the next tile could gain. */
#ifndef KILN_GEMM_STORE_PROBE
#define KILN_GEMM_STORE_PROBE 0
#endif

/* Tuning rung (KILN_TUNE_DEFS): consumer warpgroup 1 starts this many K slices after warpgroup 0
 * (0: together). Why: the two consumers finish a tile together and both spend its epilogue with
 * the tensor pipe idle (rung store-probe: 6-15 % of the f16 kernel with f32 C, 18-24 % of int8).
 * Skewed, one warpgroup's epilogue runs while the other still issues its last slices alone (one
 * warpgroup's m64n256 wgmmas can keep the pipe busy), and the lag carries over: the first to
 * finish its epilogue runs the next tile's first slices alone while the other stores. The cost:
 * a stage is held until both have read it, so the producer's lead shrinks by the skew. */
#ifndef KILN_GEMM_WG_SKEW
#define KILN_GEMM_WG_SKEW 0
#endif
#define KILN_GEMM_SKEW_BARRIER 3 /* named barrier: 1 + cw are the consumers' epilogue barriers */

/* SK: the kernel walks stream-K units too (kiln_stream_k; a kernel of its own, so that the
 * plain walk's code stays as it was) */
template <class T, bool A_K, bool B_K, int BN, int CLUSTER, bool SK>
__device__ __forceinline__ void gemm(const typename T::Args &p, const CUtensorMap *map_a, const CUtensorMap *map_b,
                                     const CUtensorMap *map_c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int STAGES = KILN_GEMM_WG_STAGES(BN), BK = ROW / T::ELEM; /* K elements per slice */
  static_assert(CLUSTER == 1 || (CLUSTER == 2 && BN >= 128), "a cluster pair splits B in halves of 64+ columns");
  static_assert(!SK || CLUSTER == 1, "stream-K is for single CTAs");
  constexpr int A_BYTES = BM * ROW, B_BYTES = BN * ROW, STAGE_BYTES = A_BYTES + B_BYTES;
  static_assert(BN == 256 || BN == 128 || BN == 64, "wgmma.cuh has widths 256, 128, 64");
  static_assert(KILN_GEMM_WG_SMEM_BYTES(BN) >= STAGES * STAGE_BYTES + 1024 + 1024 + KILN_GEMM_WG_STAGE_C_BYTES,
                "smem budget");
  static_assert(2 * STAGES * 8 <= 1024, "the barriers fit their 1 KB");
  extern __shared__ uint8_t smem_raw[];
  /* The 128-byte swizzle repeats every 1024 bytes: tiles start on 1024-byte boundaries. Aligned
   * by an offset from smem_raw (not through an integer), so the compiler still knows every
   * pointer into it is shared memory: st.shared with 32-bit addresses in the epilogue, where a
   * generic ST needed 64-bit address arithmetic (rung e4). */
  uint8_t *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  uint64_t *full = (uint64_t *)(smem + STAGES * STAGE_BYTES), *empty = full + STAGES;
  const int wg = warpgroup_index(), t = threadIdx.x % 128;
  const int nk = (p.k + BK - 1) / BK;
  /* Work items: one tile, or with CLUSTER = 2 a pair of vertically adjacent tiles (same n0) that
   * the two CTAs of a cluster compute together, each loading half of the shared B tile and
   * multicasting it to both. With an odd number of tile rows the last pair's second tile lies
   * below the matrix: TMA fills it with zeros and its stores are all predicated off. */
  const int rank = CLUSTER > 1 ? (int)cluster_ctarank() : 0;
  const int items = ((p.m + BM * CLUSTER - 1) / (BM * CLUSTER)) * ((p.n + BN - 1) / BN), total = items * p.batch;
  const int first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;
  /* with SK: the whole items first, then this block's run of slices over the last sk.items items */
  const int sk_items = SK ? p.sk.items : 0, sk_slices = sk_items * nk;
  const Walk<SK> walk0 = {first, step, total - sk_items, nk, SK ? sk_begin(blockIdx.x, sk_slices, gridDim.x) : 0,
                          SK ? sk_begin(blockIdx.x + 1, sk_slices, gridDim.x) : 0};

  /* Launched as a programmatic dependent (single CTAs, kiln_wgmma_launch): the next kernel may
   * start launching now (the grid is one resident wave), and no thread touches global memory
   * before the previous kernel has ended (pdl_wait below). No-ops without the launch attribute. */
  if (threadIdx.x == 0) {
    ring_init(full, empty, STAGES, CONSUMERS * CLUSTER); /* a stage is refilled once every consumer is done */
    pdl_launch_dependents();
  }
  if (CLUSTER > 1)
    cluster_sync(); /* the peer's barriers are initialized before any multicast or remote arrive */
  else
    __syncthreads();
  pdl_wait();

  /* Both roles walk the same (tile, k slice) sequence; `it` counts slices across tiles, so
   * stage it % STAGES and its barrier phase (it / STAGES) & 1 match on both sides. */
  if (wg == 0) { /* producer */
    producer_registers();
    if (t == 0) {
      int it = 0, item, kb, ke;
      const bool a3 = p.a_bs != 0, b3 = p.b_bs != 0;
      for (Walk<SK> walk = walk0; walk.next(item, kb, ke);) {
        int tm, tn;
        const int b = item / items;
        tile_coords(p.m, p.n, T::group_m(p), item % items, BM * CLUSTER, BN, tm, tn);
        const int m0 = (tm * CLUSTER + rank) * BM, n0 = tn * BN;
        for (int kt = kb; kt < ke; kt++, it++) {
          const int s = it % STAGES, k0 = kt * BK;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          mbar_expect_tx(&full[s], STAGE_BYTES);
          uint8_t *sa = smem + s * STAGE_BYTES, *sb = sa + A_BYTES;
          if (A_K)
            tma_load(sa, map_a, &full[s], k0, m0, b, a3);
          else
            for (int w = 0; w < BM / 64; w++) tma_load(sa + w * BOX_BYTES, map_a, &full[s], m0 + 64 * w, k0, b, a3);
          if (CLUSTER == 1) {
            if (B_K)
              tma_load(sb, map_b, &full[s], k0, n0, b, b3);
            else
              for (int j = 0; j < BN / 64; j++) tma_load(sb + j * BOX_BYTES, map_b, &full[s], n0 + 64 * j, k0, b, b3);
          } else { /* this CTA's half of B (rows or 64-column boxes), to both CTAs */
            constexpr int HALF = BN / 2;
            if (B_K)
              tma_load_multicast(sb + rank * HALF * 128, map_b, &full[s], k0, n0 + rank * HALF, b, b3, 0x3);
            else
              for (int j = rank * HALF / 64; j < (rank + 1) * HALF / 64; j++)
                tma_load_multicast(sb + j * BOX_BYTES, map_b, &full[s], n0 + 64 * j, k0, b, b3, 0x3);
          }
        }
      }
    }
  } else { /* consumers */
    consumer_registers();
    const int cw = wg - 1, warp = t / 32, lane = t % 32;
    /* this warpgroup's staging pieces, after the barriers' 1 KB (store_staged_as) */
    uint8_t *stage = smem + STAGES * STAGE_BYTES + 1024 + cw * (KILN_GEMM_WG_STAGE_C_BYTES / 2);
    typename T::Acc d[BN / 2];
    int it = 0, item, kb, ke;
    if (KILN_GEMM_WG_SKEW > 0 && cw == 1) named_sync(KILN_GEMM_SKEW_BARRIER, 256); /* warpgroup 0's first slices issued */
    for (Walk<SK> walk = walk0; walk.next(item, kb, ke);) {
      int tm, tn;
      const int b = item / items;
      tile_coords(p.m, p.n, T::group_m(p), item % items, BM * CLUSTER, BN, tm, tn);
      tm = tm * CLUSTER + rank;
#pragma unroll
      for (int i = 0; i < BN / 2; i++) d[i] = 0;
      /* counted from 0: with kt from kb to ke ptxas serialized the wgmmas (C7520) */
      const int slices = ke - kb;
      for (int kt = 0; kt < slices; kt++, it++) {
        const int s = it % STAGES;
        mbar_wait(&full[s], (it / STAGES) & 1);
        const uint8_t *sa = smem + s * STAGE_BYTES + cw * (A_K ? 64 * 128 : BOX_BYTES), *sb = smem + s * STAGE_BYTES + A_BYTES;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < ROW / 32; ks++) {
          /* 32 bytes of K: +32 bytes inside a k-major 128-byte row, or +16 rows (2048 bytes) of an m/n-major box */
          const uint64_t da = A_K ? smem_desc(sa + 32 * ks, 16, 1024) : smem_desc(sa + 2048 * ks, BOX_BYTES, 1024);
          const uint64_t db = B_K ? smem_desc(sb + 32 * ks, 16, 1024) : smem_desc(sb + 2048 * ks, BOX_BYTES, 1024);
          T::template mma<BN, A_K, B_K>(d, da, db);
        }
        wgmma_commit();
        wgmma_wait<1>(); /* the previous stage's wgmmas have retired: give its buffers back */
        if (kt > 0 && t == 0) release<CLUSTER>(&empty[(it - 1) % STAGES], rank);
        if (KILN_GEMM_WG_SKEW > 0 && cw == 0 && it + 1 == KILN_GEMM_WG_SKEW) named_arrive(KILN_GEMM_SKEW_BARRIER, 256);
      }
      T::prefetch_factors(p, tm * BM + 64 * cw, tn * BN, t);
      wgmma_wait<0>();
      if (slices > 0 && t == 0) release<CLUSTER>(&empty[(it - 1) % STAGES], rank);
      if (SK && ke < nk) { /* a stream-K tile's head or middle: its partial goes to the tail's block */
        sk_put<BN>(d, p.sk, blockIdx.x, cw, t);
        continue;
      }
      if (SK && kb > 0) { /* a stream-K tile's tail, walked last: add the earlier blocks' parts */
        const int tile_start = (item - walk0.dp_end) * nk;
        for (int j = blockIdx.x - 1; j >= 0 && sk_begin(j + 1, sk_slices, gridDim.x) > tile_start; j--)
          if (sk_begin(j + 1, sk_slices, gridDim.x) > sk_begin(j, sk_slices, gridDim.x)) sk_take<BN>(d, p.sk, j, cw, t);
      }
      void *C = (char *)p.c + b * p.c_bs * (p.c_dtype == KILN_DT_F32 ? 4 : 2);
      if (KILN_GEMM_STORE_PROBE && p.m >= 0) { /* the probe: no stores (results are garbage) */
      } else if (p.c_staged) {
        T::template store_staged<BN>(d, p, stage, map_c, tm * BM + 64 * cw, tn * BN, b, t, cw);
      } else {
        T::template store<BN>(d, p, C, tm * BM + 64 * cw + 16 * warp, tn * BN, lane);
      }
    }
    if (KILN_GEMM_WG_SKEW > 0 && cw == 0 && it < KILN_GEMM_WG_SKEW)
      named_arrive(KILN_GEMM_SKEW_BARRIER, 256); /* fewer slices than the skew: warpgroup 1 still waits */
    if (t == 0) bulk_wait<0>(); /* the block's shared memory stays until its stores are done (none: no-op) */
  }
  if (CLUSTER > 1) cluster_sync(); /* stay resident while the peer may still multicast or arrive here */
#else
  (void)p, (void)map_a, (void)map_b, (void)map_c;
  __trap(); /* the host launches these kernels only on sm_90 */
#endif
}

} /* namespace sm90 */
} /* namespace kiln */

/* An exported kernel: trait T, whose argument struct is args_t; A / B k-major or not; tile width. */
#define KILN_WGMMA_ENTRY(name, T, args_t, ak, bk, bn, cluster, sk, attrs)                                       \
  extern "C" __global__ void __launch_bounds__(KILN_GEMM_WG_THREADS, 1) attrs                                   \
      name(const args_t args, const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, \
           const __grid_constant__ CUtensorMap map_c) {                                                         \
    kiln::sm90::gemm<T, ak, bk, bn, cluster, sk>(args, &map_a, &map_b, &map_c);                                 \
  }
#define KILN_NO_ATTRS /* an empty attribute list */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* sm_80/89 images: trap stubs, no clusters there */
#define KILN_CLUSTER_PAIR __cluster_dims__(2, 1, 1)
#else
#define KILN_CLUSTER_PAIR
#endif

