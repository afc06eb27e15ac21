/*
 * gemm_sm90.cu — kiln_matmul's WGMMA kernels for Hopper (sm_90a): C = alpha·A·B + beta·C.
 *
 * Why a different kernel: on Hopper mma.sync reaches only ~60 % of the tensor cores. Warpgroup
 * MMA reads both operands straight from shared memory (no ldmatrix, no fragments in registers)
 * and the TMA engine copies whole tiles with one instruction, so one thread feeds the block.
 *
 * Structure (one block = 3 warpgroups, a 128 x BN tile of C, BK = 64, a ring of STAGES slices):
 *   warpgroup 0   producer: one thread issues TMA tile copies into stage s once the consumers
 *                 released it (mbarrier `empty[s]`); the copies complete on `full[s]`.
 *   warpgroups 1-2 consumers: each owns 64 rows; waits on `full[s]`, issues 4 wgmma m64nBNk16
 *                 (K = 64) and releases stage s-1 as soon as its wgmmas have retired (wait_group 1,
 *                 so one stage of MMAs is always in flight).
 * setmaxnreg moves registers from the producer (40) to the consumers (232): a 64 x 256 fp32
 * accumulator alone is 128 registers per thread.
 *
 * Persistent grid: min(tiles, SMs) blocks walk the tiles (all batches) in the L2-friendly order
 * of tile_coords, block b taking tiles b, b + grid, ... The producer runs ahead into the next
 * tile while the consumers store the last one, so a tile's first slices are already loaded
 * when its MMAs start.
 *
 * Tile width BN (256, 128 or 64) is chosen per problem by the host: 128 x 256 tiles move the
 * fewest bytes per FLOP, but a 1024^3 product has only 32 of them for 132 SMs. Narrower tiles
 * get more stages (the ring stays ~192 KB) to keep as many bytes in flight.
 *
 * Layouts: TMA boxes are 128 bytes wide with the 128-byte swizzle, the layout wgmma reads.
 * A k-major operand (K contiguous) is one box of [rows][64 k]; an m/n-major one is boxes of
 * [64 k][64 mn] side by side and read with the transpose flag. Edges: TMA fills out-of-bounds
 * elements with zeros (M, N and the K tail), and the epilogue predicates every store.
 */
#include <cuda.h>

#include "gemm_sm80.cuh" /* store_c, tile_coords: the epilogue is shared with the sm_80 kernels */
#include "wgmma.cuh"

namespace kiln {
namespace sm90 {

constexpr int BM = KILN_GEMM_WG_BM, BK = KILN_GEMM_WG_BK;
[[maybe_unused]] constexpr int CONSUMERS = BM / 64;
[[maybe_unused]] constexpr int BOX_BYTES = 64 * 64 * 2; /* one [64][64] box of an m/n-major operand */
static_assert(BK == 64, "boxes are 64 elements (128 bytes, the swizzle width) wide");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
KILN_DEVICE void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
KILN_DEVICE void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes));
}
KILN_DEVICE void mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)));
}
KILN_DEVICE void mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity));
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
/* A shared-memory matrix descriptor for the 128-byte swizzle: start address, leading and stride
 * byte offsets, all in 16-byte units. K-major: SBO = 1024 (8 rows of 128 B), LBO unused.
 * M/N-major: LBO = bytes between 64-element blocks along M/N, SBO = 1024 (8 k-rows). */
KILN_DEVICE uint64_t smem_desc(const void *p, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((smem_u32(p) & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 |
         1ull << 62;
}
KILN_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
KILN_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
KILN_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
#endif

template <bool BF16, bool A_K, bool B_K, int BN>
__device__ __forceinline__ void gemm(const kiln_gemm_args &p, const CUtensorMap *map_a, const CUtensorMap *map_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int STAGES = KILN_GEMM_WG_STAGES(BN);
  constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
  static_assert(BN == 256 || BN == 128 || BN == 64, "wgmma.cuh has m64n{256,128,64}k16");
  static_assert(KILN_GEMM_WG_SMEM_BYTES(BN) >= STAGES * STAGE_BYTES + 1024 + 2 * STAGES * 8, "smem budget");
  extern __shared__ uint8_t smem_raw[];
  /* The 128-byte swizzle repeats every 1024 bytes: tiles start on 1024-byte boundaries. */
  uint8_t *smem = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  uint64_t *full = (uint64_t *)(smem + STAGES * STAGE_BYTES), *empty = full + STAGES;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const int nk = (p.k + BK - 1) / BK;
  const int tiles = ((p.m + BM - 1) / BM) * ((p.n + BN - 1) / BN), total = tiles * p.batch;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  /* Both roles walk the same (tile, k slice) sequence; `it` counts slices across tiles, so
   * stage it % STAGES and its barrier phase (it / STAGES) & 1 match on both sides. */
  if (wg == 0) { /* producer */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (t == 0) {
      int it = 0;
      const bool a3 = p.a_bs != 0, b3 = p.b_bs != 0;
      for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
        int tm, tn;
        const int b = tile / tiles;
        tile_coords(p, tile % tiles, BM, BN, tm, tn);
        const int m0 = tm * BM, n0 = tn * BN;
        for (int kt = 0; kt < nk; kt++, it++) {
          const int s = it % STAGES, k0 = kt * BK;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          mbar_expect_tx(&full[s], STAGE_BYTES);
          uint8_t *sa = smem + s * STAGE_BYTES, *sb = sa + A_BYTES;
          if (A_K)
            tma_load(sa, map_a, &full[s], k0, m0, b, a3);
          else
            for (int w = 0; w < BM / 64; w++) tma_load(sa + w * BOX_BYTES, map_a, &full[s], m0 + 64 * w, k0, b, a3);
          if (B_K)
            tma_load(sb, map_b, &full[s], k0, n0, b, b3);
          else
            for (int j = 0; j < BN / 64; j++) tma_load(sb + j * BOX_BYTES, map_b, &full[s], n0 + 64 * j, k0, b, b3);
        }
      }
    }
  } else { /* consumers */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1, warp = t / 32, lane = t % 32;
    float d[BN / 2];
    int it = 0;
    for (int tile = blockIdx.x; tile < total; tile += gridDim.x) {
      int tm, tn;
      const int b = tile / tiles;
      tile_coords(p, tile % tiles, BM, BN, tm, tn);
#pragma unroll
      for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
      for (int kt = 0; kt < nk; kt++, it++) {
        const int s = it % STAGES;
        mbar_wait(&full[s], (it / STAGES) & 1);
        const uint8_t *sa = smem + s * STAGE_BYTES + cw * (A_K ? 64 * 128 : BOX_BYTES), *sb = smem + s * STAGE_BYTES + A_BYTES;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++) {
          /* k16 step: +32 bytes inside a k-major 128-byte row, or +16 rows (2048 bytes) of an m/n-major box */
          const uint64_t da = A_K ? smem_desc(sa + 32 * ks, 16, 1024) : smem_desc(sa + 2048 * ks, BOX_BYTES, 1024);
          const uint64_t db = B_K ? smem_desc(sb + 32 * ks, 16, 1024) : smem_desc(sb + 2048 * ks, BOX_BYTES, 1024);
          wgmma_m64k16<BN, BF16, A_K ? 0 : 1, B_K ? 0 : 1>(d, da, db);
        }
        wgmma_commit();
        wgmma_wait<1>(); /* the previous stage's wgmmas have retired: give its buffers back */
        if (kt > 0 && t == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
      }
      wgmma_wait<0>();
      if (nk > 0 && t == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
      void *C = (char *)p.c + b * p.c_bs * (p.c_dtype == KILN_DT_F32 ? 4 : 2);
      store_c<1, BN / 8>(*reinterpret_cast<float(*)[1][BN / 8][4]>(d), p, C, tm * BM + 64 * cw + 16 * warp, tn * BN,
                         lane);
    }
  }
#else
  (void)p, (void)map_a, (void)map_b;
  __trap(); /* the host launches these kernels only on sm_90 */
#endif
}

} /* namespace sm90 */
} /* namespace kiln */

#define KILN_WGMMA_ENTRY(name, bf16, ak, bk, bn)                                                                \
  extern "C" __global__ void __launch_bounds__(KILN_GEMM_WG_THREADS, 1)                                         \
      name(const kiln_gemm_args args, const __grid_constant__ CUtensorMap map_a,                                \
           const __grid_constant__ CUtensorMap map_b) {                                                         \
    kiln::sm90::gemm<bf16, ak, bk, bn>(args, &map_a, &map_b);                                                   \
  }
#define KILN_WGMMA_LAYOUTS(prefix, bf16, bn)             \
  KILN_WGMMA_ENTRY(prefix##_kk, bf16, true, true, bn)    \
  KILN_WGMMA_ENTRY(prefix##_kn, bf16, true, false, bn)   \
  KILN_WGMMA_ENTRY(prefix##_mk, bf16, false, true, bn)   \
  KILN_WGMMA_ENTRY(prefix##_mn, bf16, false, false, bn)

KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma256_f16, false, 256)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma256_bf16, true, 256)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma128_f16, false, 128)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma128_bf16, true, 128)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma64_f16, false, 64)
KILN_WGMMA_LAYOUTS(kiln_gemm_wgmma64_bf16, true, 64)
